/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NS_OPEN: the request carries an identity as opaque bytes and the reply
 * the namespace's geometry; both round-trip and refuse what cannot hold.
 * Then what the identity means for a namespace: the geometry both sides
 * derive from it, and that every field of it reaches the canonical
 * encoding in its own bytes, so namespaces that differ in anything never
 * share a block.  The encoding's own rules are test-proto-identity.c's.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "proto-util.h"

static int dec_ns_open_req(const uint8_t *p, size_t n)
{
	struct kvt_cursor c = { p, n };
	struct kvt_ns_open_req m;
	return kvt_dec_ns_open_req(&c, &m);
}

static int dec_ns_open_rep(const uint8_t *p, size_t n)
{
	struct kvt_cursor c = { p, n };
	struct kvt_ns_open_rep m;
	return kvt_dec_ns_open_rep(&c, &m);
}

static void set_ns_open_rep(struct kvt_ns_open_rep *m)
{
	m->ns_id = 0xa1b2c3d4;
	m->shards = 2;
	m->block_tokens = 16;
	m->shard_bytes = (UINT64_C(1) << 32) + 100;
	m->shard_stride = (UINT64_C(1) << 32) + 4096;
	m->slot_bytes = 2 * m->shard_stride;
}

/* ---- NS_OPEN ------------------------------------------------------ */

static void test_ns_open(void)
{
	static const uint8_t ident[] = "not decoded here: opaque identity bytes";
	_cleanup_(kvt_buf_free) struct kvt_buf b;
	struct kvt_ns_open_req req, dreq;
	struct kvt_ns_open_rep rep, drep;
	struct kvt_cursor c;

	kvt_buf_init(&b);
	req.identity = ident;
	req.identity_len = sizeof(ident);
	kvt_enc_ns_open_req(&b, 1, RID, &req);
	CHECK_FRAME(&b, 1, KVT_OP_NS_OPEN, 0, RID);
	c = payload_of(&b);
	CHECK(kvt_dec_ns_open_req(&c, &dreq) == 0);
	CHECK(dreq.identity_len == sizeof(ident));
	CHECK(dreq.identity == b.data + KVT_HEADER_SIZE + 4);
	CHECK(memcmp(dreq.identity, ident, sizeof(ident)) == 0);

	/* The largest identity allowed. */
	_cleanup_free_ uint8_t *big = malloc(KVT_MAX_IDENTITY);
	CHECK(big != NULL);
	if (big) {
		for (unsigned i = 0; i < KVT_MAX_IDENTITY; i++)
			big[i] = (uint8_t)(i * 13);
		req.identity = big;
		req.identity_len = KVT_MAX_IDENTITY;
		kvt_enc_ns_open_req(&b, 1, 5, &req);
		c = payload_of(&b);
		CHECK(kvt_dec_ns_open_req(&c, &dreq) == 0);
		CHECK(dreq.identity_len == KVT_MAX_IDENTITY &&
		      memcmp(dreq.identity, big, KVT_MAX_IDENTITY) == 0);
	}

	memset(&rep, 0, sizeof(rep));
	set_ns_open_rep(&rep);
	kvt_enc_ns_open_rep(&b, 1, RID, &rep);
	CHECK_FRAME(&b, 1, KVT_OP_NS_OPEN, KVT_FLAG_REPLY, RID);
	memset(&drep, 0x5c, sizeof(drep));
	c = payload_of(&b);
	CHECK(kvt_dec_ns_open_rep(&c, &drep) == 0);
	CHECK(drep.ns_id == rep.ns_id && drep.shards == rep.shards &&
	      drep.block_tokens == rep.block_tokens);
	CHECK(drep.shard_bytes == rep.shard_bytes);
	CHECK(drep.shard_stride == rep.shard_stride);
	CHECK(drep.slot_bytes == rep.slot_bytes);
}

static void test_ns_open_malformed(void)
{
	static uint8_t big[KVT_MAX_IDENTITY + 1];
	/* Requests: an identity length with the bytes written after it. */
	static const struct {
		const char *what;
		uint32_t len, present;
	} reqs[] = {
		{ "identity_len 0", 0, 0 },
		{ "identity_len > max", KVT_MAX_IDENTITY + 1, KVT_MAX_IDENTITY + 1 },
		{ "identity_len > bytes present", 100, 99 },
		{ "identity_len 2^32-1", 0xffffffff, 16 },
	};
	/* Replies: geometry that cannot hold. */
	static const struct {
		const char *what;
		uint32_t shards;
		uint64_t bytes, stride, slot;
	} reps[] = {
		{ "shards 0", 0, 4096, 4096, 4096 },
		{ "shards > max tp", KVT_MAX_TP + 1, 4096, 4096, 4096 * 65 },
		{ "shard_bytes 0", 1, 0, 4096, 4096 },
		{ "stride < shard_bytes", 1, 8192, 4096, 8192 },
		{ "slot < shards * stride", 2, 4096, 4096, 4096 },
	};
	_cleanup_(kvt_buf_free) struct kvt_buf b;

	kvt_buf_init(&b);
	for (unsigned i = 0; i < ARRAY_SIZE(reqs); i++) {
		kvt_buf_reset(&b);
		kvt_put_u32(&b, reqs[i].len);
		kvt_put_bytes(&b, big, reqs[i].present);
		EXPECT_DEC(dec_ns_open_req, &b, -EBADMSG, reqs[i].what);
	}
	for (unsigned i = 0; i < ARRAY_SIZE(reps); i++) {
		kvt_buf_reset(&b);
		kvt_put_u32(&b, 1);
		kvt_put_u32(&b, reps[i].shards);
		kvt_put_u32(&b, 16);
		kvt_put_u64(&b, reps[i].bytes);
		kvt_put_u64(&b, reps[i].stride);
		kvt_put_u64(&b, reps[i].slot);
		EXPECT_DEC(dec_ns_open_rep, &b, -EBADMSG, reps[i].what);
	}
}

/* ---- geometry ----------------------------------------------------- */

static void check_geometry(int line, const struct kvt_identity *id,
			   uint32_t shards, uint32_t heads, uint64_t shard_bytes,
			   uint64_t bytes_per_token)
{
	struct kvt_geometry g;
	int r = kvt_identity_geometry(id, &g);

	if (r != 0) {
		fprintf(stderr, "%s:%d: geometry returned %d\n", __FILE__, line, r);
		failures++;
		return;
	}
	uint64_t stride = (shard_bytes + 4095) / 4096 * 4096;
	if (g.shards != shards || g.heads_per_shard[0] != heads ||
	    g.shard_bytes != shard_bytes || g.bytes_per_token != bytes_per_token ||
	    g.block_tokens != id->block_tokens || g.shard_stride != stride ||
	    g.slot_bytes != stride * shards) {
		fprintf(stderr,
			"%s:%d: geometry: shards %u heads %u shard_bytes %" PRIu64
			" stride %" PRIu64 " slot %" PRIu64 " per token %" PRIu64 "\n",
			__FILE__, line, g.shards, g.heads_per_shard[0],
			g.shard_bytes, g.shard_stride, g.slot_bytes,
			g.bytes_per_token);
		failures++;
	}
}

#define CHECK_GEOMETRY(id, sh, h, sb, bpt) check_geometry(__LINE__, id, sh, h, sb, bpt)

static void test_geometry(void)
{
	struct kvt_identity id;

	build_identity(&id);
	CHECK_GEOMETRY(&id, 1, 8, 2097152, 131072);
	id.tp_size = 2;
	CHECK_GEOMETRY(&id, 2, 4, 1048576, 131072);
	id.tp_size = 8;
	CHECK_GEOMETRY(&id, 8, 1, 262144, 131072);

	/* DeepSeek-V3: 61 MLA layers, one 576-value bf16 latent per token. */
	build_identity(&id);
	strcpy(id.model, "deepseek-ai/DeepSeek-V3");
	id.layer_end = 61;
	id.tp_size = 8;
	id.groups[0] = (struct kvt_id_group){ 61, KVT_ATTN_MLA, 0, 1, 1, 1152,
					      2, 0 };
	CHECK_GEOMETRY(&id, 1, 1, 70272 * 16, 70272);
	id.block_tokens = 64;
	CHECK_GEOMETRY(&id, 1, 1, 70272 * 64, 70272);

	/* Fewer heads than ranks: each head replicated on two ranks, one
	 * shard per replica group. */
	build_identity(&id);
	id.groups[0].kv_heads = 4;
	id.tp_size = 8;
	CHECK_GEOMETRY(&id, 4, 1, 32 * 2 * 256 * 16, 32 * 2 * 256 * 4);
	/* A group of another head count beside it: one shard per rank. */
	id.n_groups = 2;
	id.layer_end = 64;
	id.groups[1] = mha(32, 2, 256);
	CHECK_GEOMETRY(&id, 8, 1, 2 * 32 * 2 * 256 * 16, 2 * 32 * 2 * 256 * 8);
	/* An MLA group beside it: still one per replica group. */
	id.groups[1] = (struct kvt_id_group){ 32, KVT_ATTN_MLA, 0, 1, 1, 256, 2, 0 };
	CHECK_GEOMETRY(&id, 4, 1, (32 * 2 * 256 + 32 * 256) * 16, (32 * 2 * 256 + 32 * 256) * 4);

	/* A stride rounded up to 4 KiB. */
	build_identity(&id);
	id.block_tokens = 3;
	id.groups[0] = mha(32, 8, 100);
	CHECK_GEOMETRY(&id, 1, 8, 32 * 2 * 8 * 100 * 3, 32 * 2 * 8 * 100);
}

/* A codec's slot: tiles of (layer, plane, head) with their scales
 * (proto/codec.h), whatever the cache's dtype, and no identity change for
 * codec none. */
static void test_geometry_codec(void)
{
	struct kvt_identity id;

	/* Llama-3-8B in bfloat16: 32 layers, 8 heads of 128, 16 tokens. */
	build_identity(&id);
	id.groups[0].dtype = KVT_DTYPE_BFLOAT16;
	CHECK_GEOMETRY(&id, 1, 8, 32 * 2 * 8 * 256 * 16, 32 * 2 * 8 * 256);
	id.codec = KVT_CODEC_FP8_E4M3;
	/* a tile: a 4-byte scale and one byte an element */
	CHECK_GEOMETRY(&id, 1, 8, 32 * 2 * 8 * (4 + 16 * 128), 32 * 2 * 8 * (4 + 16 * 128) / 16);
	id.codec = KVT_CODEC_INT4;
	/* K: 128 channel pairs of halves; V: 16 tokens x 4 groups of 32 */
	uint64_t k = 128 * 4 + 16 * 128 / 2, v = 16 * 4 * 4 + 16 * 128 / 2;
	CHECK_GEOMETRY(&id, 1, 8, 32 * 8 * (k + v), 32 * 8 * (k + v) / 16);
	/* Two ranks hold half the heads each. */
	id.tp_size = 2;
	CHECK_GEOMETRY(&id, 2, 4, 32 * 4 * (k + v), 32 * 4 * (k + v) * 2 / 16);

	/* float32, 3 tokens, 24 elements a head (groups of 24), padded. */
	build_identity(&id);
	id.block_tokens = 3;
	id.groups[0] = mha(2, 8, 96);
	id.layer_end = 2;
	id.codec = KVT_CODEC_INT4;
	k = 24 * 4 + 36; /* 132 */
	v = 3 * 4 + 36;  /* 48 */
	CHECK_GEOMETRY(&id, 1, 8, 2 * 8 * (k + v), (2 * 8 * (k + v) + 2) / 3);
	id.codec = KVT_CODEC_FP8_E4M3;
	/* 4 + 72 = 76, a multiple of 4 */
	CHECK_GEOMETRY(&id, 1, 8, 2 * 8 * 2 * 76, (2 * 8 * 2 * 76 + 2) / 3);
	/* An odd element count: 4 + 9 bytes rounded up to 16. */
	id.groups[0] = mha(2, 8, 12);
	CHECK_GEOMETRY(&id, 1, 8, 2 * 8 * 2 * 16, (2 * 8 * 2 * 16 + 2) / 3);

	/* DeepSeek's bf16 latent of 576: one plane, per token, 18 groups. */
	build_identity(&id);
	id.layer_end = 61;
	id.groups[0] = (struct kvt_id_group){ 61, KVT_ATTN_MLA, 0, 1, 1, 1152,
					      KVT_DTYPE_BFLOAT16, 0 };
	id.codec = KVT_CODEC_INT4;
	v = 16 * 18 * 4 + 16 * 576 / 2;
	CHECK_GEOMETRY(&id, 1, 1, 61 * v, 61 * v / 16);
}

static void test_geometry_other(void)
{
	struct kvt_identity id;
	struct kvt_geometry g;

	/* Heads that do not divide among ranks. */
	build_identity(&id);
	id.tp_size = 3;
	CHECK(kvt_identity_geometry(&id, &g) == -EINVAL);
	id.groups[0].kv_heads = 12;
	id.tp_size = 8;
	CHECK(kvt_identity_geometry(&id, &g) == -EINVAL);

	/* Mixed groups: MLA is stored once per shard set only when all are. */
	build_identity(&id);
	id.tp_size = 2;
	id.n_groups = 2;
	id.groups[0] = mha(16, 8, 256);
	id.groups[1] = (struct kvt_id_group){ 16, KVT_ATTN_SWA, 1024, 2, 4, 256,
					      1, 0 };
	CHECK(kvt_identity_geometry(&id, &g) == 0);
	CHECK(g.shards == 2 && g.heads_per_shard[0] == 4 &&
	      g.heads_per_shard[1] == 2);
	CHECK(g.shard_bytes == (uint64_t)(16 * 2 * 4 * 256 + 16 * 2 * 2 * 256) * 16);

	/* A slot of 1 GiB, and one of 2 GiB: the 1 GiB limit is the
	 * daemon's (one io_uring buffer), not the wire's. */
	build_identity(&id);
	id.block_tokens = 4096;
	id.groups[0] = mha(32, 8, 512);
	CHECK(kvt_identity_geometry(&id, &g) == 0 &&
	      g.slot_bytes == (UINT64_C(1) << 30));
	id.groups[0] = mha(32, 8, 1024);
	CHECK(kvt_identity_geometry(&id, &g) == 0 &&
	      g.slot_bytes == (UINT64_C(2) << 30));

	/* An invalid identity has no geometry. */
	build_identity(&id);
	id.groups[0].n_layers = 31;
	CHECK(kvt_identity_geometry(&id, &g) == -EINVAL);
}

/* ---- every field is part of the key ------------------------------- */

/* Two groups and a salt, so each of them can be changed. */
static struct kvt_identity *key_base(struct kvt_identity *x)
{
	build_identity(x);
	x->salt_len = 4;
	memcpy(x->salt, "s4lt", 4);
	x->n_groups = 2;
	x->groups[0] = mha(16, 8, 256);
	x->groups[1] = mha(16, 8, 256);
	return x;
}

/* The bytes of field #nth with tag in an encoded identity. */
static bool find_id_field(const struct kvt_buf *b, uint16_t tag, unsigned nth,
			  const uint8_t **ret, uint32_t *ret_len)
{
	struct kvt_cursor c = { b->data, b->len };
	while (c.left) {
		uint16_t t;
		uint32_t len;
		const uint8_t *p;
		if (kvt_get_u16(&c, &t) < 0 || kvt_get_u32(&c, &len) < 0 ||
		    kvt_get_bytes(&c, len, &p) < 0)
			return false;
		if (t == tag && nth-- == 0) {
			*ret = p;
			*ret_len = len;
			return true;
		}
	}
	return false;
}

static int encode_both(const struct kvt_identity *x, const struct kvt_identity *y,
		       struct kvt_buf *a, struct kvt_buf *b)
{
	TRY(kvt_identity_encode(x, a));
	TRY(kvt_identity_encode(y, b));
	return 0;
}

/*
 * Changing one field must change the canonical encoding, and it must do so
 * in that field's own bytes (word `word` of the field, or anywhere in it
 * for word < 0): then no other field can stand in for it.
 */
static void check_differs(int line, const struct kvt_identity *x,
			  uint16_t tag, unsigned nth, int word, const char *what)
{
	_cleanup_(kvt_buf_free) struct kvt_buf a;
	_cleanup_(kvt_buf_free) struct kvt_buf b;
	struct kvt_identity base;
	const uint8_t *pa, *pb;
	uint32_t la, lb;

	kvt_buf_init(&a);
	kvt_buf_init(&b);
	if (encode_both(key_base(&base), x, &a, &b) < 0) {
		fprintf(stderr, "%s:%d: %s: does not encode\n", __FILE__, line,
			what);
		failures++;
		return;
	}
	if (same_bytes(&a, &b)) {
		fprintf(stderr, "%s:%d: changing %s leaves the identity unchanged\n",
			__FILE__, line, what);
		failures++;
		return;
	}
	bool fa = find_id_field(&a, tag, nth, &pa, &la);
	bool fb = find_id_field(&b, tag, nth, &pb, &lb);
	bool differs;
	if (word < 0)
		differs = fa != fb || (fa && (la != lb || memcmp(pa, pb, la)));
	else
		differs = fa && fb && la == lb && la >= 4u * (unsigned)word + 4 &&
			  memcmp(pa + 4 * word, pb + 4 * word, 4) != 0;
	if (!differs) {
		fprintf(stderr, "%s:%d: changing %s does not change its own field\n",
			__FILE__, line, what);
		failures++;
	}
}

/* Two identities that must not encode alike. */
static void check_distinct(const struct kvt_identity *x,
			   const struct kvt_identity *y)
{
	_cleanup_(kvt_buf_free) struct kvt_buf a;
	_cleanup_(kvt_buf_free) struct kvt_buf b;

	kvt_buf_init(&a);
	kvt_buf_init(&b);
	CHECK(kvt_identity_encode(x, &a) == 0);
	CHECK(kvt_identity_encode(y, &b) == 0);
	CHECK(!same_bytes(&a, &b));
}

#define BASE() key_base(&x)
#define DIFFERS(tag, nth, word, what) \
	check_differs(__LINE__, &x, tag, nth, word, what)

static void test_key_fields(void)
{
	struct kvt_identity x;

	BASE()->key_scheme = 2;
	DIFFERS(KVT_ID_KEY_SCHEME, 0, 0, "key_scheme");
	strcpy(BASE()->model, "meta-llama/Meta-Llama-3-8B-Instruct");
	DIFFERS(KVT_ID_MODEL, 0, -1, "model name (longer)");
	BASE()->model[11] = 'm';
	DIFFERS(KVT_ID_MODEL, 0, -1, "model name (case)");
	BASE()->weights[31] ^= 1;
	DIFFERS(KVT_ID_WEIGHTS, 0, -1, "weights fingerprint (last bit)");
	BASE()->weights_len = 31;
	DIFFERS(KVT_ID_WEIGHTS, 0, -1, "weights fingerprint (length)");
	BASE()->weights_len = 0;
	DIFFERS(KVT_ID_WEIGHTS, 0, -1, "weights fingerprint (absent)");
	BASE()->layer_first = 1;
	x.groups[0].n_layers = 15;
	DIFFERS(KVT_ID_LAYERS, 0, 0, "layer_first");
	BASE()->layer_end = 31;
	x.groups[1].n_layers = 15;
	DIFFERS(KVT_ID_LAYERS, 0, 1, "layer_end");
	BASE()->layer_first = 32;
	x.layer_end = 64;
	DIFFERS(KVT_ID_LAYERS, 0, -1, "pipeline stage");
	BASE()->tp_size = 2;
	DIFFERS(KVT_ID_PARALLEL, 0, 0, "tp_size");
	BASE()->cp_size = 2;
	DIFFERS(KVT_ID_PARALLEL, 0, 1, "cp_size");
	BASE()->block_tokens = 32;
	DIFFERS(KVT_ID_BLOCK_TOKENS, 0, 0, "block_tokens");
	BASE()->salt[3] ^= 0x80;
	DIFFERS(KVT_ID_SALT, 0, -1, "salt (last byte)");
	BASE()->salt_len = 3;
	DIFFERS(KVT_ID_SALT, 0, -1, "salt (length)");
	BASE()->salt_len = 0;
	DIFFERS(KVT_ID_SALT, 0, -1, "salt (absent)");
	BASE()->codec = KVT_CODEC_FP8_E4M3;
	DIFFERS(KVT_ID_CODEC, 0, -1, "codec fp8-e4m3");
	BASE()->codec = KVT_CODEC_INT4;
	DIFFERS(KVT_ID_CODEC, 0, -1, "codec int4");
}

static void test_key_groups(void)
{
	struct kvt_identity x, y;

	for (unsigned gi = 0; gi < 2; gi++) {
		char what[64];
#define GROUP_CASE(word, name, ...)                                         \
	do {                                                                \
		struct kvt_id_group *g = &BASE()->groups[gi];               \
		(void)g;                                                    \
		__VA_ARGS__;                                                \
		snprintf(what, sizeof(what), "group %u %s", gi, name);      \
		DIFFERS(KVT_ID_GROUP, gi, word, what);                      \
	} while (0)
		GROUP_CASE(0, "n_layers", g->n_layers = 17, x.layer_end = 33);
		GROUP_CASE(1, "attn", g->attn = KVT_ATTN_SWA, g->window = 4096);
		GROUP_CASE(2, "window", g->attn = KVT_ATTN_SWA, g->window = 4096);
		GROUP_CASE(3, "planes", *g = (struct kvt_id_group){ 16, KVT_ATTN_MLA,
								   0, 1, 1, 256, 1, 0 });
		GROUP_CASE(4, "kv_heads", g->kv_heads = 4);
		GROUP_CASE(5, "head_bytes", g->head_bytes = 512);
		GROUP_CASE(6, "dtype", g->dtype = 2);
		GROUP_CASE(7, "scale_layout", g->scale_layout = 1);
#undef GROUP_CASE
	}
	/* SWA: a different window is a different identity. */
	BASE()->groups[0].attn = KVT_ATTN_SWA;
	x.groups[0].window = 4096;
	y = x;
	y.groups[0].window = 4097;
	check_distinct(&x, &y);

	/* Group order is part of the identity. */
	BASE()->groups[1].head_bytes = 512;
	y = x;
	y.groups[0] = x.groups[1];
	y.groups[1] = x.groups[0];
	check_distinct(&x, &y);

	/* Length prefixes: moving bytes from one field to the next is not
	 * the same identity. */
	(void)BASE();
	strcpy(x.model, "ab");
	x.weights_len = 1;
	x.weights[0] = 'c';
	y = x;
	strcpy(y.model, "a");
	y.weights_len = 2;
	memcpy(y.weights, "bc", 2);
	check_distinct(&x, &y);
}

#undef BASE
#undef DIFFERS

/* ---- every encoder/decoder pair ----------------------------------- */

/* A real identity, as a client sends it. */
static void enc_req(struct kvt_buf *b, uint8_t fill, uint16_t op)
{
	_cleanup_(kvt_buf_free) struct kvt_buf ib;
	struct kvt_ns_open_req q;
	struct kvt_identity id;

	kvt_buf_init(&ib);
	memset(&id, fill, sizeof(id));
	build_identity(&id);
	CHECK(kvt_identity_encode(&id, &ib) == 0);
	memset(&q, fill, sizeof(q));
	q.identity = ib.data;
	q.identity_len = (uint32_t)ib.len;
	kvt_enc_ns_open_req(b, 1, RID, &q);
}

/* Bytes the request does not look into. */
static void enc_req_opaque(struct kvt_buf *b, uint8_t fill, uint16_t op)
{
	static const uint8_t ident[] = { 1, 2, 3, 4, 5 };
	struct kvt_ns_open_req q;

	memset(&q, fill, sizeof(q));
	q.identity = ident;
	q.identity_len = sizeof(ident);
	kvt_enc_ns_open_req(b, 1, RID, &q);
}

static void enc_rep(struct kvt_buf *b, uint8_t fill, uint16_t op)
{
	struct kvt_ns_open_rep m;

	memset(&m, fill, sizeof(m));
	set_ns_open_rep(&m);
	kvt_enc_ns_open_rep(b, 1, RID, &m);
}

static const struct proto_sample samples[] = {
	{ "ns_open_req", enc_req, 0, dec_ns_open_req, false, true },
	{ "ns_open_req of opaque bytes", enc_req_opaque, 0, dec_ns_open_req, false, true },
	{ "ns_open_rep", enc_rep, 0, dec_ns_open_rep, false, true },
};

int main(void)
{
	test_ns_open();
	test_ns_open_malformed();
	test_geometry();
	test_geometry_codec();
	test_geometry_other();
	test_key_fields();
	test_key_groups();
	CHECK_SAMPLES(samples);
	return proto_test_end("test-proto-ns");
}
