/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvtierctl plan's arithmetic: known figures (Llama-3-70B at fp16 is
 * 320 KiB per token and 40 GiB per 128K-token context; DeepSeek-V3's MLA
 * latent at bf16 is 70,272 B per token), every preset against the
 * published geometry, tensor-parallel splits, rounding, overflow, the
 * option parsers, and the slot size against kvtierd's own geometry code.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "codec.h"
#include "ctl/plan-math.h"
#include "kvt-proto.h"
#include "../check.h"

#define CHECK_EQ(a, b)                                                        \
	do {                                                                  \
		unsigned long long _a = (unsigned long long)(a);              \
		unsigned long long _b = (unsigned long long)(b);              \
		if (_a != _b) {                                               \
			fprintf(stderr, "%s:%d: %s == %llu, expected %llu\n", \
				__FILE__, __LINE__, #a, _a, _b);              \
			failures++;                                           \
		}                                                             \
	} while (0)

static struct plan_geometry gqa(uint64_t layers, uint64_t heads, uint64_t dim,
				uint64_t dtype_bytes, uint64_t tp)
{
	return (struct plan_geometry){.layers = layers, .kv_heads = heads, .head_dim = dim,
				      .dtype_bytes = dtype_bytes, .tp = tp, .block_tokens = 16};
}

static void test_70b(void)
{
	struct plan_geometry g = gqa(80, 8, 128, 2, 1);
	struct plan p;
	uint64_t bytes = 0, rank = 0;

	CHECK(plan_compute(&g, &p) == 0);
	CHECK_EQ(p.bytes_per_token, 327680);
	CHECK_EQ(p.bytes_per_token_rank, 327680);
	CHECK_EQ(p.shards, 1);
	CHECK_EQ(p.block_bytes, 327680 * 16);
	CHECK_EQ(p.slot_bytes, 327680 * 16); /* already 4 KiB aligned */
	CHECK(plan_context_bytes(&p, 131072, 1, &bytes, &rank) == 0);
	CHECK_EQ(bytes, UINT64_C(42949672960));
	CHECK_EQ(rank, UINT64_C(42949672960));
	CHECK(plan_context_bytes(&p, 131072, 4, &bytes, NULL) == 0);
	CHECK_EQ(bytes, UINT64_C(4) * 42949672960);
	CHECK(plan_context_bytes(&p, 131072, 0, &bytes, NULL) == -EINVAL);
}

static void test_deepseek(void)
{
	const struct plan_preset *d = plan_preset_find("deepseek-v3");
	struct plan_geometry g;
	struct plan p;

	CHECK(d != NULL);
	if (!d)
		return;
	CHECK(d->mla);
	CHECK_EQ(d->layers, 61);
	CHECK_EQ(d->latent_dim, 512 + 64);
	CHECK(strcmp(d->dtype, "bf16") == 0);
	g = (struct plan_geometry){.mla = true, .layers = d->layers, .latent_dim = d->latent_dim,
				   .dtype_bytes = (uint64_t)plan_dtype_bytes(d->dtype), .tp = 8,
				   .block_tokens = 16};
	CHECK(plan_compute(&g, &p) == 0);
	CHECK_EQ(p.bytes_per_token, 70272);
	/* The latent is the same on every rank and stored once. */
	CHECK_EQ(p.bytes_per_token_rank, 70272);
	CHECK_EQ(p.shards, 1);
	CHECK_EQ(p.block_bytes, 70272 * 16);
	CHECK_EQ(p.slot_bytes, 1126400); /* 1,124,352 rounded up to 4 KiB */
}

/* The published geometries, written down here rather than read from the
 * presets, and the formula applied independently. */
static const struct {
	const char *name;
	int mla;
	uint64_t layers, heads, dim, latent, dtype_bytes;
	uint64_t bytes_per_token; /* worked out by hand */
} models[] = {
	{"llama3-8b", 0, 32, 8, 128, 0, 2, 131072},
	{"llama3-70b", 0, 80, 8, 128, 0, 2, 327680},
	{"llama3-405b", 0, 126, 8, 128, 0, 2, 516096},
	{"llama3.2-1b", 0, 16, 8, 64, 0, 2, 32768},
	{"llama3.2-3b", 0, 28, 8, 128, 0, 2, 114688},
	{"mistral-7b", 0, 32, 8, 128, 0, 2, 131072},
	{"mixtral-8x7b", 0, 32, 8, 128, 0, 2, 131072},
	{"qwen2.5-7b", 0, 28, 4, 128, 0, 2, 57344},
	{"qwen2.5-32b", 0, 64, 8, 128, 0, 2, 262144},
	{"qwen2.5-72b", 0, 80, 8, 128, 0, 2, 327680},
	{"deepseek-v3", 1, 61, 0, 0, 576, 2, 70272},
};

static void test_presets(void)
{
	size_t n;
	const struct plan_preset *all = plan_presets(&n);

	CHECK_EQ(n, sizeof(models) / sizeof(models[0]));
	for (size_t i = 0; i < sizeof(models) / sizeof(models[0]); i++) {
		const struct plan_preset *p = plan_preset_find(models[i].name);
		uint64_t want = models[i].mla
					? models[i].layers * models[i].latent * models[i].dtype_bytes
					: 2 * models[i].layers * models[i].heads * models[i].dim *
						  models[i].dtype_bytes;
		struct plan_geometry g;
		struct plan r;

		CHECK_EQ(want, models[i].bytes_per_token);
		CHECK(p != NULL);
		if (!p) {
			fprintf(stderr, "no preset %s\n", models[i].name);
			continue;
		}
		CHECK_EQ(p->mla, models[i].mla);
		CHECK_EQ(p->layers, models[i].layers);
		CHECK_EQ(p->kv_heads, models[i].heads);
		CHECK_EQ(p->head_dim, models[i].dim);
		CHECK_EQ(p->latent_dim, models[i].latent);
		CHECK_EQ(plan_dtype_bytes(p->dtype), models[i].dtype_bytes);
		g = (struct plan_geometry){.mla = p->mla, .layers = p->layers,
					   .kv_heads = p->kv_heads, .head_dim = p->head_dim,
					   .latent_dim = p->latent_dim,
					   .dtype_bytes = (uint64_t)plan_dtype_bytes(p->dtype),
					   .tp = 1, .block_tokens = 16};
		CHECK(plan_compute(&g, &r) == 0);
		CHECK_EQ(r.bytes_per_token, want);
	}
	for (size_t i = 0; i < n; i++)
		CHECK(plan_preset_find(all[i].name) == &all[i]);
	CHECK(plan_preset_find("llama3-7b") == NULL);
	CHECK(plan_preset_find(NULL) == NULL);
}

static void test_dtypes(void)
{
	CHECK_EQ(plan_dtype_bytes("fp32"), 4);
	CHECK_EQ(plan_dtype_bytes("fp16"), 2);
	CHECK_EQ(plan_dtype_bytes("bf16"), 2);
	CHECK_EQ(plan_dtype_bytes("fp8"), 1);
	CHECK_EQ(plan_dtype_bytes("fp8_e4m3"), 1);
	CHECK_EQ(plan_dtype_bytes("fp8_e5m2"), 1);
	CHECK_EQ(plan_dtype_bytes("int8"), 1);
	CHECK(plan_dtype_bytes("FP16") == -EINVAL);
	CHECK(plan_dtype_bytes("fp4") == -EINVAL);
	CHECK(plan_dtype_bytes("") == -EINVAL);
	CHECK(plan_dtype_bytes(NULL) == -EINVAL);

	/* The element size scales everything linearly. */
	struct plan_geometry g = gqa(80, 8, 128, 1, 1);
	struct plan p;
	CHECK(plan_compute(&g, &p) == 0);
	CHECK_EQ(p.bytes_per_token, 163840);
	g.dtype_bytes = 4;
	CHECK(plan_compute(&g, &p) == 0);
	CHECK_EQ(p.bytes_per_token, 655360);
}

static void test_tp(void)
{
	struct plan_geometry g = gqa(80, 8, 128, 2, 8);
	struct plan p;

	CHECK(plan_compute(&g, &p) == 0);
	CHECK_EQ(p.bytes_per_token, 327680);
	CHECK_EQ(p.bytes_per_token_rank, 40960);
	CHECK_EQ(p.shards, 8);
	CHECK_EQ(p.shard_bytes, 40960 * 16);
	CHECK_EQ(p.block_bytes, 327680 * 16);

	/* More ranks than KV heads: each rank holds a replica of one head,
	 * and kvtier stores one shard per replica group. */
	g.tp = 16;
	CHECK(plan_compute(&g, &p) == 0);
	CHECK_EQ(p.bytes_per_token, 327680);
	CHECK_EQ(p.bytes_per_token_rank, 40960);
	CHECK_EQ(p.shards, 8);
	CHECK_EQ(p.block_bytes, UINT64_C(8) * 40960 * 16);

	/* Splits engines do not run. */
	g.tp = 3;
	CHECK(plan_compute(&g, &p) == -EINVAL);
	g.tp = 12;
	CHECK(plan_compute(&g, &p) == -EINVAL);
	g.tp = 0;
	CHECK(plan_compute(&g, &p) == -EINVAL);

	/* A given byte count splits evenly or not at all. */
	g = (struct plan_geometry){.bytes_per_token = 327680, .tp = 4, .block_tokens = 16};
	CHECK(plan_compute(&g, &p) == 0);
	CHECK_EQ(p.bytes_per_token_rank, 81920);
	CHECK_EQ(p.shards, 4);
	g.bytes_per_token = 327681;
	CHECK(plan_compute(&g, &p) == -EINVAL);
	g.mla = true; /* stored once: nothing to split */
	CHECK(plan_compute(&g, &p) == 0);
	CHECK_EQ(p.bytes_per_token_rank, 327681);
	CHECK_EQ(p.shards, 1);

	/* Context bytes per rank. */
	g = gqa(80, 8, 128, 2, 8);
	uint64_t bytes, rank;
	CHECK(plan_compute(&g, &p) == 0);
	CHECK(plan_context_bytes(&p, 131072, 1, &bytes, &rank) == 0);
	CHECK_EQ(bytes, UINT64_C(42949672960));
	CHECK_EQ(rank, UINT64_C(42949672960) / 8);
}

static void test_alignment(void)
{
	struct plan_geometry g = {.bytes_per_token = 100, .tp = 1, .block_tokens = 16};
	struct plan p;

	CHECK(plan_compute(&g, &p) == 0);
	CHECK_EQ(p.block_bytes, 1600);
	CHECK_EQ(p.slot_bytes, 4096);
	g.tp = 2; /* every shard starts on its own 4 KiB boundary */
	CHECK(plan_compute(&g, &p) == 0);
	CHECK_EQ(p.shard_bytes, 800);
	CHECK_EQ(p.slot_bytes, 8192);
	g = (struct plan_geometry){.bytes_per_token = 256, .tp = 1, .block_tokens = 16};
	CHECK(plan_compute(&g, &p) == 0);
	CHECK_EQ(p.slot_bytes, 4096);
	g.block_tokens = 17;
	CHECK(plan_compute(&g, &p) == 0);
	CHECK_EQ(p.slot_bytes, 8192);
	g.block_tokens = 0;
	CHECK(plan_compute(&g, &p) == -EINVAL);
}

static void test_fit(void)
{
	struct plan_geometry g = gqa(80, 8, 128, 2, 1);
	struct plan p;
	struct plan_fit f;
	uint64_t slot;

	CHECK(plan_compute(&g, &p) == 0);
	slot = p.slot_bytes;

	/* Ten whole slots and most of an eleventh: ten. */
	CHECK(plan_fit(&p, 11 * slot - 1, 0, 1, &f) == 0);
	CHECK_EQ(f.blocks, 10);
	CHECK_EQ(f.tokens, 160);
	CHECK_EQ(f.contexts, 0); /* no context length given */
	CHECK(plan_fit(&p, slot - 1, 100, 1, &f) == 0);
	CHECK_EQ(f.blocks, 0);
	CHECK_EQ(f.tokens, 0);
	CHECK_EQ(f.contexts, 0);

	/* 17 tokens need two blocks; 10 blocks hold 5 such contexts, 2
	 * batches of 2. */
	CHECK(plan_fit(&p, 10 * slot, 17, 2, &f) == 0);
	CHECK_EQ(f.contexts, 5);
	CHECK_EQ(f.batches, 2);
	CHECK(plan_fit(&p, 10 * slot, 16, 3, &f) == 0);
	CHECK_EQ(f.contexts, 10);
	CHECK_EQ(f.batches, 3);

	/* 64 GiB of 70B at 128K tokens: 13,107 slots, 209,712 tokens, one
	 * context. */
	CHECK(plan_fit(&p, UINT64_C(64) << 30, 131072, 1, &f) == 0);
	CHECK_EQ(f.blocks, 13107);
	CHECK_EQ(f.tokens, 209712);
	CHECK_EQ(f.contexts, 1);
	CHECK(plan_fit(&p, UINT64_C(64) << 30, 131072, 0, &f) == -EINVAL);
}

static void test_overflow(void)
{
	struct plan_geometry g = gqa(UINT64_MAX, 8, 128, 2, 1);
	struct plan p;
	struct plan_fit f;
	uint64_t bytes;

	CHECK(plan_compute(&g, &p) == -EOVERFLOW);
	g = gqa(1u << 20, 1u << 20, 1u << 20, 4, 1); /* 2^63 per token */
	g.block_tokens = 1;
	CHECK(plan_compute(&g, &p) == 0);
	CHECK_EQ(p.bytes_per_token, UINT64_C(1) << 63);
	g.dtype_bytes = 8; /* 2^64: one past */
	CHECK(plan_compute(&g, &p) == -EOVERFLOW);
	g = gqa(1u << 20, 1u << 20, 1u << 20, 4, 1);
	g.block_tokens = 2; /* the block, not the token, overflows */
	CHECK(plan_compute(&g, &p) == -EOVERFLOW);
	g = (struct plan_geometry){.mla = true, .layers = UINT64_MAX / 2, .latent_dim = 3,
				   .dtype_bytes = 1, .tp = 1, .block_tokens = 1};
	CHECK(plan_compute(&g, &p) == -EOVERFLOW);
	/* Rounding the shard up to 4 KiB must not wrap either. */
	g = (struct plan_geometry){.bytes_per_token = UINT64_MAX - 10, .tp = 1, .block_tokens = 1};
	CHECK(plan_compute(&g, &p) == -EOVERFLOW);

	g = gqa(80, 8, 128, 2, 1);
	CHECK(plan_compute(&g, &p) == 0);
	CHECK(plan_context_bytes(&p, UINT64_C(1) << 40, UINT64_C(1) << 10, &bytes, NULL) ==
	      -EOVERFLOW);
	CHECK(plan_context_bytes(&p, UINT64_MAX, 2, &bytes, NULL) == -EOVERFLOW);
	/* A tier of 2^64 - 1 bytes in 4 KiB slots of 2^62 tokens each. */
	g = (struct plan_geometry){.bytes_per_token = 1, .tp = 1, .block_tokens = UINT64_C(1) << 12};
	CHECK(plan_compute(&g, &p) == 0);
	CHECK(plan_fit(&p, UINT64_MAX, 0, 1, &f) == 0);
	CHECK_EQ(f.tokens, (UINT64_MAX / 4096) * 4096);
	p.block_tokens = UINT64_C(1) << 62;
	CHECK(plan_fit(&p, UINT64_MAX, 0, 1, &f) == -EOVERFLOW);
}

static void test_parse(void)
{
	uint64_t v = 0;


	CHECK(plan_parse_count("131072", &v) == 0 && v == 131072);
	CHECK(plan_parse_count("128K", &v) == 0 && v == 131072);
	CHECK(plan_parse_count("128k", &v) == 0 && v == 131072);
	CHECK(plan_parse_count("1M", &v) == 0 && v == 1048576);
	CHECK(plan_parse_count("0", &v) == 0 && v == 0);
	CHECK(plan_parse_count("1G", &v) == -EINVAL);
	CHECK(plan_parse_count("12x", &v) == -EINVAL);
	CHECK(plan_parse_count("1KK", &v) == -EINVAL);
	CHECK(plan_parse_count("", &v) == -EINVAL);
	CHECK(plan_parse_count("-5", &v) == -EINVAL);
	CHECK(plan_parse_count("17592186044416M", &v) == -ERANGE);
}

/* plan's slot is the slot kvtierd allocates: the daemon's own geometry
 * code over the same models. */
static void test_against_kvtierd(void)
{
	size_t n;
	const struct plan_preset *all = plan_presets(&n);
	static const uint32_t tps[] = {1, 2, 8, 16};
	static const uint32_t block_tokens[] = {1, 16, 256};

	for (size_t i = 0; i < n; i++)
		for (size_t t = 0; t < sizeof(tps) / sizeof(tps[0]); t++)
			for (size_t b = 0; b < sizeof(block_tokens) / sizeof(block_tokens[0]); b++)
			for (uint32_t codec = 0; codec < KVT_CODEC_COUNT; codec++) {
				const struct plan_preset *m = &all[i];
				uint32_t dt = (uint32_t)plan_dtype_bytes(m->dtype);
				struct plan_geometry g = {
					.mla = m->mla, .layers = m->layers, .kv_heads = m->kv_heads,
					.head_dim = m->head_dim, .latent_dim = m->latent_dim,
					.dtype_bytes = dt, .tp = tps[t], .block_tokens = block_tokens[b],
					.codec = codec,
				};
				/* A codec reads 2- and 4-byte elements only. */
				if (codec && dt != 2 && dt != 4)
					continue;
				struct kvt_identity id;
				struct kvt_geometry geo;
				struct plan p;
				int r1, r2;

				memset(&id, 0, sizeof(id));
				id.key_scheme = 1;
				snprintf(id.model, sizeof(id.model), "%s", m->name);
				id.layer_end = m->layers;
				id.tp_size = tps[t];
				id.cp_size = 1;
				id.block_tokens = block_tokens[b];
				id.n_groups = 1;
				id.groups[0] = (struct kvt_id_group){
					.n_layers = m->layers,
					.attn = m->mla ? KVT_ATTN_MLA : KVT_ATTN_MHA,
					.planes = m->mla ? 1 : 2,
					.kv_heads = m->mla ? 1 : m->kv_heads,
					.head_bytes = (m->mla ? m->latent_dim : m->head_dim) * dt,
					.dtype = dt == 2 ? KVT_DTYPE_BFLOAT16 : KVT_DTYPE_FLOAT32,
				};
				id.codec = codec;
				r1 = plan_compute(&g, &p);
				r2 = kvt_identity_geometry(&id, &geo);
				if (r2 == -EFBIG) /* past kvtierd's 1 GiB slot limit */
					CHECK(r1 == 0 && p.slot_bytes > PLAN_MAX_SLOT_BYTES);
				else
					CHECK_EQ(r1, r2);
				if (r1 < 0 || r2 < 0)
					continue;
				CHECK_EQ(p.shards, geo.shards);
				CHECK_EQ(p.shard_bytes, geo.shard_bytes);
				CHECK_EQ(p.slot_bytes, geo.slot_bytes);
				if (codec == KVT_CODEC_NONE) {
					CHECK_EQ(p.block_bytes / p.block_tokens, geo.bytes_per_token);
					CHECK_EQ(p.plain_slot_bytes, p.slot_bytes);
				} else if (block_tokens[b] >= 16) {
					/* Scales cost less than the bytes saved only over
					 * enough tokens: int4's K has a pair per channel. */
					CHECK(p.slot_bytes <= p.plain_slot_bytes);
				}
			}
}

int main(void)
{
	test_70b();
	test_deepseek();
	test_presets();
	test_dtypes();
	test_tp();
	test_alignment();
	test_fit();
	test_overflow();
	test_parse();
	test_against_kvtierd();
	if (failures) {
		fprintf(stderr, "%d check(s) failed\n", failures);
		return 1;
	}
	printf("plan arithmetic: all checks passed\n");
	return 0;
}
