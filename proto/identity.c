/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The canonical namespace identity.  Both sides derive the block geometry
 * from it with the same code, so a client cannot describe one geometry and
 * be served another.
 */
#include <string.h>

#include "codec.h"
#include "kvt-proto.h"
#include "macro.h"


static void put_field(struct kvt_buf *b, uint16_t tag, const void *p,
		      uint32_t len)
{
	kvt_put_u16(b, tag);
	kvt_put_u32(b, len);
	kvt_put_bytes(b, p, len);
}

static void put_u32s(struct kvt_buf *b, uint16_t tag, const uint32_t *v,
		     unsigned n)
{
	kvt_put_u16(b, tag);
	kvt_put_u32(b, 4 * n);
	for (unsigned i = 0; i < n; i++)
		kvt_put_u32(b, v[i]);
}

static int identity_check(const struct kvt_identity *id)
{
	size_t model_len = strnlen(id->model, sizeof(id->model));

	if (id->key_scheme == 0 || model_len == 0 || model_len > KVT_MAX_MODEL)
		return -EINVAL;
	if (id->weights_len > KVT_MAX_FINGERPRINT ||
	    id->salt_len > KVT_MAX_FINGERPRINT)
		return -EINVAL;
	if (id->layer_end <= id->layer_first)
		return -EINVAL;
	if (id->tp_size == 0 || id->tp_size > KVT_MAX_TP || id->cp_size == 0 ||
	    id->cp_size > KVT_MAX_TP)
		return -EINVAL;
	if (id->block_tokens == 0 || id->block_tokens > KVT_MAX_BLOCK_TOKENS)
		return -EINVAL;
	if (id->n_groups == 0 || id->n_groups > KVT_MAX_GROUPS)
		return -EINVAL;
	if (id->codec >= KVT_CODEC_COUNT)
		return -EINVAL;

	uint64_t layers = 0;
	for (unsigned i = 0; i < id->n_groups; i++) {
		const struct kvt_id_group *g = &id->groups[i];
		if (g->n_layers == 0 || g->n_layers > 4096 || g->kv_heads == 0 ||
		    g->kv_heads > 4096 || g->head_bytes == 0 ||
		    g->head_bytes > 65536)
			return -EINVAL;
		switch (g->attn) {
		case KVT_ATTN_MHA:
			if (g->planes != 2 || g->window != 0)
				return -EINVAL;
			break;
		case KVT_ATTN_SWA:
			if (g->planes != 2 || g->window == 0)
				return -EINVAL;
			break;
		case KVT_ATTN_MLA:
			if (g->planes != 1 || g->kv_heads != 1 || g->window != 0)
				return -EINVAL;
			break;
		default:
			return -EINVAL;
		}
		/* A codec reads float elements: whole ones in every head. */
		if (id->codec != KVT_CODEC_NONE) {
			uint32_t eb = kvt_codec_dtype_bytes(g->dtype);
			if (eb == 0 || g->head_bytes % eb)
				return -EINVAL;
		}
		layers += g->n_layers;
	}
	if (layers != id->layer_end - id->layer_first)
		return -EINVAL;
	return 0;
}

int kvt_identity_encode(const struct kvt_identity *id, struct kvt_buf *b)
{
	TRY(identity_check(id));
	kvt_buf_reset(b);
	put_u32s(b, KVT_ID_KEY_SCHEME, &id->key_scheme, 1);
	put_field(b, KVT_ID_MODEL, id->model,
		  (uint32_t)strnlen(id->model, KVT_MAX_MODEL));
	put_field(b, KVT_ID_WEIGHTS, id->weights, id->weights_len);
	uint32_t layers[2] = {id->layer_first, id->layer_end};
	put_u32s(b, KVT_ID_LAYERS, layers, 2);
	uint32_t par[2] = {id->tp_size, id->cp_size};
	put_u32s(b, KVT_ID_PARALLEL, par, 2);
	put_u32s(b, KVT_ID_BLOCK_TOKENS, &id->block_tokens, 1);
	for (unsigned i = 0; i < id->n_groups; i++) {
		const struct kvt_id_group *g = &id->groups[i];
		uint32_t v[8] = {g->n_layers, g->attn,     g->window,
				 g->planes,   g->kv_heads, g->head_bytes,
				 g->dtype,    g->scale_layout};
		put_u32s(b, KVT_ID_GROUP, v, 8);
	}
	if (id->salt_len)
		put_field(b, KVT_ID_SALT, id->salt, id->salt_len);
	/* Written only when there is one: a namespace without a codec keeps
	 * the identity (and so the spill files and remote objects) it had. */
	if (id->codec != KVT_CODEC_NONE)
		put_u32s(b, KVT_ID_CODEC, &id->codec, 1);
	if (b->error)
		return b->error;
	return b->len <= KVT_MAX_IDENTITY ? 0 : -E2BIG;
}

static int get_u32s(struct kvt_cursor *c, uint32_t len, uint32_t *v,
		    unsigned n)
{
	if (len != 4 * n)
		return -EBADMSG;
	for (unsigned i = 0; i < n; i++)
		TRY(kvt_get_u32(c, &v[i]));
	return 0;
}

/* A byte string of 1..max bytes (0..max when may_be_empty) into dst. */
static int get_bytes(struct kvt_cursor *c, uint32_t len, uint32_t max, bool may_be_empty,
		     uint8_t *dst)
{
	const uint8_t *bytes;

	if ((len == 0 && !may_be_empty) || len > max)
		return -EBADMSG;
	TRY(kvt_get_bytes(c, len, &bytes));
	memcpy(dst, bytes, len);
	return 0;
}

/* One field of len bytes, its tag already read. */
static int decode_field(struct kvt_cursor *c, uint16_t tag, uint32_t len,
			struct kvt_identity *id)
{
	uint32_t v[8];

	switch (tag) {
	case KVT_ID_KEY_SCHEME:
		return get_u32s(c, len, &id->key_scheme, 1);
	case KVT_ID_MODEL:
		TRY(get_bytes(c, len, KVT_MAX_MODEL, false, (uint8_t *)id->model));
		/* A name, not bytes: no NUL inside it. */
		return memchr(id->model, 0, len) ? -EBADMSG : 0;
	case KVT_ID_WEIGHTS:
		TRY(get_bytes(c, len, KVT_MAX_FINGERPRINT, true, id->weights));
		id->weights_len = len;
		return 0;
	case KVT_ID_LAYERS:
		TRY(get_u32s(c, len, v, 2));
		id->layer_first = v[0];
		id->layer_end = v[1];
		return 0;
	case KVT_ID_PARALLEL:
		TRY(get_u32s(c, len, v, 2));
		id->tp_size = v[0];
		id->cp_size = v[1];
		return 0;
	case KVT_ID_BLOCK_TOKENS:
		return get_u32s(c, len, &id->block_tokens, 1);
	case KVT_ID_GROUP:
		if (id->n_groups >= KVT_MAX_GROUPS)
			return -EBADMSG;
		TRY(get_u32s(c, len, v, 8));
		id->groups[id->n_groups++] = (struct kvt_id_group){
			v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]};
		return 0;
	case KVT_ID_SALT:
		TRY(get_bytes(c, len, KVT_MAX_FINGERPRINT, false, id->salt));
		id->salt_len = len;
		return 0;
	case KVT_ID_CODEC:
		TRY(get_u32s(c, len, &id->codec, 1));
		/* Canonical: none is written by leaving the field out. */
		return id->codec == KVT_CODEC_NONE ? -EBADMSG : 0;
	default:
		return -EBADMSG;
	}
}

int kvt_identity_decode(const uint8_t *p, size_t len, struct kvt_identity *ret)
{
	struct kvt_cursor c = {p, len};
	struct kvt_identity id;
	unsigned last_tag = 0;
	uint32_t seen = 0;

	if (len > KVT_MAX_IDENTITY)
		return -EBADMSG;
	memset(&id, 0, sizeof(id));
	while (c.left > 0) {
		uint16_t tag;
		uint32_t flen;
		TRY(kvt_get_u16(&c, &tag));
		TRY(kvt_get_u32(&c, &flen));
		if (flen > c.left)
			return -EBADMSG;
		/* Canonical: ascending tags, each once; only GROUP repeats. */
		if (tag < last_tag || (tag == last_tag && tag != KVT_ID_GROUP))
			return -EBADMSG;
		last_tag = tag;
		if (tag < 32)
			seen |= 1u << tag;
		TRY(decode_field(&c, tag, flen, &id));
	}
	/* Every field the encoder always writes must be there: decoding and
	 * re-encoding gives back the same bytes, or the input was not
	 * canonical. */
	const uint32_t mandatory = 1u << KVT_ID_KEY_SCHEME | 1u << KVT_ID_MODEL |
				   1u << KVT_ID_WEIGHTS | 1u << KVT_ID_LAYERS |
				   1u << KVT_ID_PARALLEL | 1u << KVT_ID_BLOCK_TOKENS |
				   1u << KVT_ID_GROUP;
	if ((seen & mandatory) != mandatory || identity_check(&id) < 0)
		return -EBADMSG;
	*ret = id;
	return 0;
}

/* How many ranks hold each KV head: tp_size / kv_heads where every group
 * that is not MLA has the same kv_heads, fewer than tp_size and dividing
 * it; else 1 (each rank its own heads, or a mix that no one shard per
 * replica group could describe). */
static uint32_t identity_replicas(const struct kvt_identity *id)
{
	uint32_t kv_heads = 0;

	for (unsigned i = 0; i < id->n_groups; i++) {
		const struct kvt_id_group *lg = &id->groups[i];
		if (lg->attn == KVT_ATTN_MLA)
			continue;
		if ((kv_heads && lg->kv_heads != kv_heads) || lg->kv_heads >= id->tp_size ||
		    id->tp_size % lg->kv_heads)
			return 1;
		kv_heads = lg->kv_heads;
	}
	return kv_heads ? id->tp_size / kv_heads : 1;
}

/*
 * Only what the wire needs is checked here: sizes that are not zero and
 * that fit the u64 fields of the NS_OPEN reply.  How large a block the
 * daemon can hold is the daemon's limit (daemon/requests.c), not the wire's.
 */
int kvt_identity_geometry(const struct kvt_identity *id,
			  struct kvt_geometry *ret)
{
	struct kvt_geometry g;
	bool all_mla = true;

	TRY(identity_check(id));
	memset(&g, 0, sizeof(g));
	for (unsigned i = 0; i < id->n_groups; i++)
		if (id->groups[i].attn != KVT_ATTN_MLA)
			all_mla = false;
	/* MLA's latent is the same on every rank: store it once.  With more
	 * ranks than KV heads, engines replicate heads over groups of
	 * ranks: one shard per replica group, written by one of its ranks. */
	g.shards = all_mla ? 1 : id->tp_size / identity_replicas(id);
	g.block_tokens = id->block_tokens;

	uint64_t per_token = 0; /* one shard */
	uint64_t coded = 0;     /* one shard's block, with a codec */
	for (unsigned i = 0; i < id->n_groups; i++) {
		const struct kvt_id_group *lg = &id->groups[i];
		uint32_t heads = lg->kv_heads;
		uint64_t bytes;
		if (lg->attn != KVT_ATTN_MLA) {
			/* With more ranks than KV heads, engines replicate
			 * heads: each rank still holds one. */
			heads = lg->kv_heads / id->tp_size;
			if (heads == 0)
				heads = 1;
			else if (lg->kv_heads % id->tp_size)
				return -EINVAL;
		}
		g.heads_per_shard[i] = heads;
		if (id->codec != KVT_CODEC_NONE) {
			/* Tiles of the block's tokens, scales inside (codec.h). */
			uint32_t d = lg->head_bytes / kvt_codec_dtype_bytes(lg->dtype);
			uint64_t tiles = 0;
			for (uint32_t p = 0; p < lg->planes; p++)
				tiles += kvt_codec_tile_bytes(id->codec, lg->planes == 2 && p == 0,
							      id->block_tokens, d);
			bytes = (uint64_t)lg->n_layers * heads * tiles;
			if (__builtin_add_overflow(coded, bytes, &coded))
				return -EFBIG;
			continue;
		}
		if (__builtin_mul_overflow((uint64_t)lg->n_layers * lg->planes * heads,
					   (uint64_t)lg->head_bytes, &bytes) ||
		    __builtin_add_overflow(per_token, bytes, &per_token))
			return -EFBIG;
	}
	if (id->codec != KVT_CODEC_NONE) {
		/* Sizes well inside u64: each factor is bounded by identity_check. */
		g.shard_bytes = coded;
		per_token = (coded + id->block_tokens - 1) / id->block_tokens;
	} else if (__builtin_mul_overflow(per_token, (uint64_t)id->block_tokens, &g.shard_bytes) ||
		   g.shard_bytes > UINT64_MAX - 4095) {
		return -EFBIG;
	}
	g.shard_stride = (g.shard_bytes + 4095) & ~(uint64_t)4095;
	if (__builtin_mul_overflow(g.shard_stride, (uint64_t)g.shards, &g.slot_bytes) ||
	    __builtin_mul_overflow(per_token, (uint64_t)g.shards, &g.bytes_per_token))
		return -EFBIG;
	if (g.shard_bytes == 0)
		return -EINVAL;
	*ret = g;
	return 0;
}
