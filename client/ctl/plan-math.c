/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <string.h>

#include "plan-math.h"
#include "codec.h"
#include "macro.h"
#include "size.h"


static const struct plan_dtype dtypes[] = {
	{"fp32", 4}, {"fp16", 2}, {"bf16", 2}, {"fp8", 1},
	{"fp8_e4m3", 1}, {"fp8_e5m2", 1}, {"int8", 1},
};

/* Geometries from the models' published configurations.  MLA models cache
 * kv_lora_rank + qk_rope_head_dim per token and layer, once for all heads. */
static const struct plan_preset presets[] = {
	{"llama3-8b", "Llama 3/3.1 8B", false, 32, 8, 128, 0, "fp16"},
	{"llama3-70b", "Llama 3/3.1/3.3 70B", false, 80, 8, 128, 0, "fp16"},
	{"llama3-405b", "Llama 3.1 405B", false, 126, 8, 128, 0, "fp16"},
	{"llama3.2-1b", "Llama 3.2 1B", false, 16, 8, 64, 0, "fp16"},
	{"llama3.2-3b", "Llama 3.2 3B", false, 28, 8, 128, 0, "fp16"},
	{"mistral-7b", "Mistral 7B", false, 32, 8, 128, 0, "fp16"},
	{"mixtral-8x7b", "Mixtral 8x7B", false, 32, 8, 128, 0, "fp16"},
	{"qwen2.5-7b", "Qwen2.5 7B", false, 28, 4, 128, 0, "bf16"},
	{"qwen2.5-32b", "Qwen2.5 32B", false, 64, 8, 128, 0, "bf16"},
	{"qwen2.5-72b", "Qwen2.5 72B", false, 80, 8, 128, 0, "bf16"},
	{"deepseek-v3", "DeepSeek-V3 and R1", true, 61, 0, 0, 576, "bf16"},
};

const struct plan_dtype *plan_dtypes(size_t *ret_n)
{
	*ret_n = ARRAY_SIZE(dtypes);
	return dtypes;
}

int plan_dtype_bytes(const char *name)
{
	for (size_t i = 0; name && i < ARRAY_SIZE(dtypes); i++)
		if (strcmp(name, dtypes[i].name) == 0)
			return (int)dtypes[i].bytes;
	return -EINVAL;
}

const struct plan_preset *plan_presets(size_t *ret_n)
{
	*ret_n = ARRAY_SIZE(presets);
	return presets;
}

const struct plan_preset *plan_preset_find(const char *name)
{
	for (size_t i = 0; name && i < ARRAY_SIZE(presets); i++)
		if (strcmp(name, presets[i].name) == 0)
			return &presets[i];
	return NULL;
}

/* r = a * b, or -EOVERFLOW: a sizing tool that wraps would advise
 * buying a tiny machine for a huge model. */
static int mul(uint64_t a, uint64_t b, uint64_t *r)
{
	return __builtin_mul_overflow(a, b, r) ? -EOVERFLOW : 0;
}

/* block_bytes and slot_bytes of p's shards of shard_bytes. */
static int slot_of(struct plan *p)
{
	uint64_t stride;

	TRY(mul(p->shard_bytes, p->shards, &p->block_bytes));
	if (p->shard_bytes > UINT64_MAX - (PLAN_SHARD_ALIGN - 1))
		return -EOVERFLOW;
	stride = (p->shard_bytes + PLAN_SHARD_ALIGN - 1) / PLAN_SHARD_ALIGN * PLAN_SHARD_ALIGN;
	return mul(stride, p->shards, &p->slot_bytes);
}

/* One rank's block with g's codec: tiles of a (layer, plane, head) with
 * their scales (proto/codec.h). */
static int coded_shard_bytes(const struct plan_geometry *g, uint64_t *ret)
{
	uint64_t d = g->mla ? g->latent_dim : g->head_dim, heads, tiles, bytes;

	if (g->codec >= KVT_CODEC_COUNT || (g->dtype_bytes != 2 && g->dtype_bytes != 4))
		return -EINVAL;
	if (d > UINT32_MAX || g->block_tokens > UINT32_MAX)
		return -EOVERFLOW;
	if (g->mla) {
		heads = 1;
		tiles = kvt_codec_tile_bytes(g->codec, 0, (uint32_t)g->block_tokens, (uint32_t)d);
	} else {
		heads = g->kv_heads >= g->tp ? g->kv_heads / g->tp : 1;
		tiles = kvt_codec_tile_bytes(g->codec, 1, (uint32_t)g->block_tokens, (uint32_t)d) +
			kvt_codec_tile_bytes(g->codec, 0, (uint32_t)g->block_tokens, (uint32_t)d);
	}
	TRY(mul(g->layers, heads, &bytes));
	return mul(bytes, tiles, ret);
}

int plan_compute(const struct plan_geometry *g, struct plan *ret)
{
	struct plan p = {0};

	if (!g || !ret || g->tp == 0 || g->block_tokens == 0)
		return -EINVAL;
	if (g->tp > UINT32_MAX)
		return -EOVERFLOW;
	p.tp = g->tp;
	p.block_tokens = g->block_tokens;
	/* One shard per rank; one per replica group where ranks share heads;
	 * one for MLA's latent (kvt_identity_geometry). */
	p.shards = g->mla ? 1 : (uint32_t)g->tp;
	if (!g->mla && !g->bytes_per_token && g->kv_heads && g->kv_heads < g->tp &&
	    g->tp % g->kv_heads == 0)
		p.shards = (uint32_t)g->kv_heads;

	if (g->bytes_per_token) {
		p.bytes_per_token = g->bytes_per_token;
		if (g->mla) {
			p.bytes_per_token_rank = p.bytes_per_token;
		} else {
			if (p.bytes_per_token % g->tp)
				return -EINVAL;
			p.bytes_per_token_rank = p.bytes_per_token / g->tp;
		}
	} else if (g->mla) {
		if (!g->layers || !g->latent_dim || !g->dtype_bytes)
			return -EINVAL;
		TRY(mul(g->layers, g->latent_dim, &p.bytes_per_token));
		TRY(mul(p.bytes_per_token, g->dtype_bytes, &p.bytes_per_token));
		p.bytes_per_token_rank = p.bytes_per_token;
	} else {
		uint64_t per_head, heads_rank;

		if (!g->layers || !g->kv_heads || !g->head_dim || !g->dtype_bytes)
			return -EINVAL;
		/* Engines split KV heads across ranks, and give each rank a
		 * replica of one head when there are more ranks than heads;
		 * anything else is not a layout they run. */
		if (g->kv_heads >= g->tp) {
			if (g->kv_heads % g->tp)
				return -EINVAL;
			heads_rank = g->kv_heads / g->tp;
		} else {
			if (g->tp % g->kv_heads)
				return -EINVAL;
			heads_rank = 1;
		}
		/* K and V planes: the leading 2. */
		TRY(mul(2, g->layers, &per_head));
		TRY(mul(per_head, g->head_dim, &per_head));
		TRY(mul(per_head, g->dtype_bytes, &per_head));
		TRY(mul(per_head, g->kv_heads, &p.bytes_per_token));
		TRY(mul(per_head, heads_rank, &p.bytes_per_token_rank));
	}

	TRY(mul(p.bytes_per_token_rank, g->block_tokens, &p.shard_bytes));
	TRY(slot_of(&p));
	p.plain_slot_bytes = p.slot_bytes;
	if (g->codec != KVT_CODEC_NONE) {
		if (g->bytes_per_token)
			return -EINVAL;
		TRY(coded_shard_bytes(g, &p.shard_bytes));
		TRY(slot_of(&p));
	}
	*ret = p;
	return 0;
}

int plan_context_bytes(const struct plan *p, uint64_t tokens, uint64_t batch,
		       uint64_t *ret_bytes, uint64_t *ret_rank_bytes)
{
	uint64_t n, bytes, rank;

	if (!p || !ret_bytes || batch == 0)
		return -EINVAL;
	TRY(mul(tokens, batch, &n));
	TRY(mul(n, p->bytes_per_token, &bytes));
	TRY(mul(n, p->bytes_per_token_rank, &rank));
	*ret_bytes = bytes;
	if (ret_rank_bytes)
		*ret_rank_bytes = rank;
	return 0;
}

int plan_fit(const struct plan *p, uint64_t capacity, uint64_t tokens,
	     uint64_t batch, struct plan_fit *ret)
{
	struct plan_fit f = {0};

	if (!p || !ret || p->slot_bytes == 0 || p->block_tokens == 0 || batch == 0)
		return -EINVAL;
	f.blocks = capacity / p->slot_bytes;
	TRY(mul(f.blocks, p->block_tokens, &f.tokens));
	if (tokens) {
		/* Rounded up: a context is served only with all its blocks. */
		uint64_t per_context = tokens / p->block_tokens + (tokens % p->block_tokens != 0);
		f.contexts = f.blocks / per_context;
		f.batches = f.contexts / batch;
	}
	*ret = f;
	return 0;
}

int plan_parse_count(const char *s, uint64_t *ret)
{
	/* A count is a size without a fraction or bytes: digits, then K or M
	 * at most (binary, as in the size grammar). */
	if (!s || !ret)
		return -EINVAL;
	size_t n = strspn(s, "0123456789");
	if (n == 0 || (s[n] && (!strchr("KkMm", s[n]) || s[n + 1])))
		return -EINVAL;
	return kvt_size_parse(s, ret);
}
