/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The canonical namespace identity: it encodes to the documented layout
 * and decodes back to the same values, and whatever is not the canonical
 * form is refused: fields out of order, twice, unknown, missing, of the
 * wrong length, values that cannot describe a model, too many groups, too
 * many bytes.  The daemon recognises an identity it already has by its
 * bytes, so a second form of the same identity would be a second
 * namespace.  What the identity means (geometry, every field part of the
 * key) is test-proto-ns.c's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "proto-util.h"

static int dec_identity(const uint8_t *p, size_t n)
{
	struct kvt_identity id;
	return kvt_identity_decode(p, n, &id);
}

/* ---- an independent writer of identity fields --------------------- */

/* To craft the non-canonical forms the encoder would never write. */
struct idfield {
	uint16_t tag;
	uint32_t len;
	uint8_t data[300];
};

struct idlist {
	unsigned n;
	struct idfield f[24];
};

static void idl_add(struct idlist *l, uint16_t tag, const void *p, uint32_t len)
{
	struct idfield *f = &l->f[l->n++];
	f->tag = tag;
	f->len = len;
	if (len)
		memcpy(f->data, p, len);
}

static void idl_add_u32s(struct idlist *l, uint16_t tag, const uint32_t *v,
			 unsigned n)
{
	uint8_t d[64];
	for (unsigned i = 0; i < n; i++)
		for (unsigned k = 0; k < 4; k++)
			d[4 * i + k] = (uint8_t)(v[i] >> (8 * k));
	idl_add(l, tag, d, 4 * n);
}

static void idl_from(struct idlist *l, const struct kvt_identity *id)
{
	l->n = 0;
	idl_add_u32s(l, KVT_ID_KEY_SCHEME, &id->key_scheme, 1);
	idl_add(l, KVT_ID_MODEL, id->model, (uint32_t)strlen(id->model));
	idl_add(l, KVT_ID_WEIGHTS, id->weights, id->weights_len);
	uint32_t v[2] = { id->layer_first, id->layer_end };
	idl_add_u32s(l, KVT_ID_LAYERS, v, 2);
	uint32_t p[2] = { id->tp_size, id->cp_size };
	idl_add_u32s(l, KVT_ID_PARALLEL, p, 2);
	idl_add_u32s(l, KVT_ID_BLOCK_TOKENS, &id->block_tokens, 1);
	for (unsigned i = 0; i < id->n_groups; i++) {
		const struct kvt_id_group *g = &id->groups[i];
		uint32_t gv[8] = { g->n_layers, g->attn,     g->window,
				   g->planes,   g->kv_heads, g->head_bytes,
				   g->dtype,    g->scale_layout };
		idl_add_u32s(l, KVT_ID_GROUP, gv, 8);
	}
	if (id->salt_len)
		idl_add(l, KVT_ID_SALT, id->salt, id->salt_len);
	if (id->codec)
		idl_add_u32s(l, KVT_ID_CODEC, &id->codec, 1);
}

static void idl_write(const struct idlist *l, struct kvt_buf *b)
{
	kvt_buf_reset(b);
	for (unsigned i = 0; i < l->n; i++) {
		kvt_put_u16(b, l->f[i].tag);
		kvt_put_u32(b, l->f[i].len);
		kvt_put_bytes(b, l->f[i].data, l->f[i].len);
	}
}

static void idl_remove(struct idlist *l, unsigned i)
{
	memmove(&l->f[i], &l->f[i + 1], (l->n - i - 1) * sizeof(l->f[0]));
	l->n--;
}

static void idl_insert(struct idlist *l, unsigned at, const struct idfield *f)
{
	memmove(&l->f[at + 1], &l->f[at], (l->n - at) * sizeof(l->f[0]));
	l->f[at] = *f;
	l->n++;
}

static unsigned idl_find(const struct idlist *l, uint16_t tag)
{
	for (unsigned i = 0; i < l->n; i++)
		if (l->f[i].tag == tag)
			return i;
	abort();
}

/* Whether the fields in l decode as an identity. */
static int idl_decode(const struct idlist *l)
{
	_cleanup_(kvt_buf_free) struct kvt_buf b;

	kvt_buf_init(&b);
	idl_write(l, &b);
	return dec_copy(dec_identity, b.data, b.len);
}

/* Whatever decodes must be the canonical form itself. */
static int check_id_reject(int line, const struct idlist *l, const char *what)
{
	_cleanup_(kvt_buf_free) struct kvt_buf b;
	_cleanup_(kvt_buf_free) struct kvt_buf re;
	struct kvt_identity id;
	int r;

	kvt_buf_init(&b);
	kvt_buf_init(&re);
	idl_write(l, &b);
	r = dec_copy(dec_identity, b.data, b.len);
	if (r != -EBADMSG) {
		fprintf(stderr, "%s:%d: identity %s: decode returned %d, expected %d\n",
			__FILE__, line, what, r, -EBADMSG);
		failures++;
		if (r == 0 && kvt_identity_decode(b.data, b.len, &id) == 0 &&
		    (kvt_identity_encode(&id, &re) < 0 || !same_bytes(&b, &re)))
			fprintf(stderr,
				"%s:%d:   and it is not canonical: it re-encodes "
				"to %zu different bytes\n",
				__FILE__, line, re.len);
	}
	return r;
}

#define CHECK_ID_REJECT(l, what) check_id_reject(__LINE__, l, what)

/* ---- round trips -------------------------------------------------- */

static bool same_identity(const struct kvt_identity *d,
			  const struct kvt_identity *id)
{
	return d->key_scheme == id->key_scheme && !strcmp(d->model, id->model) &&
	       d->weights_len == id->weights_len &&
	       !memcmp(d->weights, id->weights, id->weights_len) &&
	       d->layer_first == id->layer_first && d->layer_end == id->layer_end &&
	       d->tp_size == id->tp_size && d->cp_size == id->cp_size &&
	       d->block_tokens == id->block_tokens && d->n_groups == id->n_groups &&
	       !memcmp(d->groups, id->groups, id->n_groups * sizeof(d->groups[0])) &&
	       d->salt_len == id->salt_len &&
	       !memcmp(d->salt, id->salt, id->salt_len) && d->codec == id->codec;
}

static void check_roundtrip(int line, const struct kvt_identity *id)
{
	_cleanup_(kvt_buf_free) struct kvt_buf a;
	_cleanup_(kvt_buf_free) struct kvt_buf b;
	struct kvt_identity d;
	struct idlist l;

	kvt_buf_init(&a);
	kvt_buf_init(&b);
	idl_from(&l, id);
	idl_write(&l, &b);
	if (kvt_identity_encode(id, &a) != 0 || !same_bytes(&a, &b)) {
		fprintf(stderr, "%s:%d: identity does not encode to its layout\n",
			__FILE__, line);
		failures++;
		return;
	}
	memset(&d, 0x5c, sizeof(d));
	if (kvt_identity_decode(a.data, a.len, &d) != 0) {
		fprintf(stderr, "%s:%d: identity does not decode\n", __FILE__,
			line);
		failures++;
		return;
	}
	if (!same_identity(&d, id)) {
		fprintf(stderr, "%s:%d: identity decodes to other values\n",
			__FILE__, line);
		failures++;
	}
	if (kvt_identity_encode(&d, &b) != 0 || !same_bytes(&a, &b)) {
		fprintf(stderr, "%s:%d: encode(decode(encode(id))) differs\n",
			__FILE__, line);
		failures++;
	}
}

#define CHECK_ROUNDTRIP(id) check_roundtrip(__LINE__, id)

static void test_identity_roundtrip(void)
{
	struct kvt_identity id;

	build_identity(&id);
	CHECK_ROUNDTRIP(&id);

	/* Salt, no weights, three groups of each kind, a later stage. */
	build_identity(&id);
	id.key_scheme = 0x01000007;
	strcpy(id.model, "google/gemma-2-27b \xe2\x9c\x93");
	id.weights_len = 0;
	id.layer_first = 10;
	id.layer_end = 10 + 4 + 6 + 2;
	id.tp_size = 4;
	id.cp_size = 2;
	id.block_tokens = 4096;
	id.n_groups = 3;
	id.groups[0] = (struct kvt_id_group){ 4, KVT_ATTN_SWA, 4096, 2, 16, 128,
					      7, 3 };
	id.groups[1] = mha(6, 16, 256);
	id.groups[2] = (struct kvt_id_group){ 2, KVT_ATTN_MLA, 0, 1, 1, 1152,
					      2, 0 };
	for (unsigned i = 0; i < KVT_MAX_FINGERPRINT; i++)
		id.salt[i] = (uint8_t)(0xff - i);
	id.salt_len = KVT_MAX_FINGERPRINT;
	CHECK_ROUNDTRIP(&id);

	/* The largest of everything. */
	build_identity(&id);
	memset(id.model, 'm', KVT_MAX_MODEL);
	id.model[KVT_MAX_MODEL] = 0;
	id.weights_len = KVT_MAX_FINGERPRINT;
	id.salt_len = 1;
	id.n_groups = KVT_MAX_GROUPS;
	id.layer_end = 2 * KVT_MAX_GROUPS;
	for (unsigned i = 0; i < KVT_MAX_GROUPS; i++)
		id.groups[i] = mha(2, 8, 256 + i);
	id.tp_size = KVT_MAX_TP;
	CHECK_ROUNDTRIP(&id);

	/* Each codec, with and without a salt before it; none is the
	 * absence of the field, so an identity without one is unchanged. */
	for (uint32_t codec = KVT_CODEC_FP8_E4M3; codec <= KVT_CODEC_INT4; codec++) {
		build_identity(&id);
		id.codec = codec;
		CHECK_ROUNDTRIP(&id);
		id.salt_len = 2;
		CHECK_ROUNDTRIP(&id);
	}
}

/* Padding and bytes past each length are not part of the identity. */
static void test_identity_padding(void)
{
	_cleanup_(kvt_buf_free) struct kvt_buf a;
	_cleanup_(kvt_buf_free) struct kvt_buf b;
	struct kvt_identity id, g1, g2;

	memset(&g1, 0xaa, sizeof(g1));
	memset(&g2, 0x55, sizeof(g2));
	build_identity(&id);
	id.salt_len = 5;
	id.salt[0] = 9;
	for (int k = 0; k < 2; k++) {
		struct kvt_identity *g = k ? &g2 : &g1;
		g->key_scheme = id.key_scheme;
		strcpy(g->model, id.model);
		memcpy(g->weights, id.weights, id.weights_len);
		g->weights_len = id.weights_len;
		g->layer_first = id.layer_first;
		g->layer_end = id.layer_end;
		g->tp_size = id.tp_size;
		g->cp_size = id.cp_size;
		g->block_tokens = id.block_tokens;
		g->n_groups = 1;
		g->groups[0] = id.groups[0];
		memcpy(g->salt, id.salt, 5);
		g->salt_len = 5;
		g->codec = KVT_CODEC_NONE;
	}
	prefill(&a, 0xaa);
	prefill(&b, 0x55);
	CHECK(kvt_identity_encode(&g1, &a) == 0);
	CHECK(kvt_identity_encode(&g2, &b) == 0);
	CHECK(same_bytes(&a, &b));
}

/* ---- refusals ----------------------------------------------------- */

/* The sample identity with a salt, as eight fields. */
static void reject_base(struct idlist *base)
{
	struct kvt_identity id;

	build_identity(&id);
	id.salt_len = 3;
	memcpy(id.salt, "abc", 3);
	idl_from(base, &id);
}

/* Fields out of order, twice, unknown or missing. */
static void test_reject_fields(void)
{
	static const struct {
		uint16_t tag;
		const char *name;
	} mandatory[] = {
		{ KVT_ID_KEY_SCHEME, "KEY_SCHEME" },
		{ KVT_ID_MODEL, "MODEL" },
		{ KVT_ID_WEIGHTS, "WEIGHTS" },
		{ KVT_ID_LAYERS, "LAYERS" },
		{ KVT_ID_PARALLEL, "PARALLEL" },
		{ KVT_ID_BLOCK_TOKENS, "BLOCK_TOKENS" },
		{ KVT_ID_GROUP, "GROUP" },
	};
	static const uint16_t unknown[] = { 0, 10, 100, 0xffff };
	struct idlist base, l;
	struct idfield f;
	char what[96];

	reject_base(&base);
	CHECK(base.n == 8);
	/* The base decodes, so each rejection below is down to its change. */
	CHECK(idl_decode(&base) == 0);

	/* Out of order: every adjacent pair swapped. */
	for (unsigned i = 0; i + 1 < base.n; i++) {
		l = base;
		f = l.f[i];
		l.f[i] = l.f[i + 1];
		l.f[i + 1] = f;
		snprintf(what, sizeof(what), "with fields %u and %u swapped", i,
			 i + 1);
		CHECK_ID_REJECT(&l, what);
	}
	/* Salt first, groups last. */
	l = base;
	f = l.f[7];
	idl_remove(&l, 7);
	idl_insert(&l, 0, &f);
	CHECK_ID_REJECT(&l, "with SALT first");

	/* Each non-GROUP field twice. */
	for (unsigned i = 0; i < base.n; i++) {
		if (base.f[i].tag == KVT_ID_GROUP)
			continue;
		l = base;
		idl_insert(&l, i + 1, &base.f[i]);
		snprintf(what, sizeof(what), "with tag %u twice", base.f[i].tag);
		CHECK_ID_REJECT(&l, what);
	}

	/* Unknown tags, at the end and in the middle. */
	for (unsigned i = 0; i < ARRAY_SIZE(unknown); i++) {
		l = base;
		f.tag = unknown[i];
		f.len = 4;
		memset(f.data, 1, 4);
		idl_insert(&l, l.n, &f);
		snprintf(what, sizeof(what), "with unknown tag %u at the end",
			 unknown[i]);
		CHECK_ID_REJECT(&l, what);
	}
	l = base;
	f.tag = 0;
	f.len = 0;
	idl_insert(&l, 0, &f);
	CHECK_ID_REJECT(&l, "with tag 0 first");

	/* Each mandatory field missing. */
	for (unsigned i = 0; i < ARRAY_SIZE(mandatory); i++) {
		l = base;
		idl_remove(&l, idl_find(&l, mandatory[i].tag));
		snprintf(what, sizeof(what), "without %s", mandatory[i].name);
		CHECK_ID_REJECT(&l, what);
	}
	CHECK_ID_REJECT(&(struct idlist){ 0 }, "empty");
}

/* Field lengths that do not fit their tag. */
static void test_reject_lengths(void)
{
	static const struct {
		uint16_t tag;
		uint32_t len;
		uint8_t byte;
		const char *what;
	} bad_len[] = {
		{ KVT_ID_KEY_SCHEME, 8, 1, "KEY_SCHEME of 8 bytes" },
		{ KVT_ID_KEY_SCHEME, 3, 1, "KEY_SCHEME of 3 bytes" },
		{ KVT_ID_MODEL, 0, 'm', "MODEL empty" },
		{ KVT_ID_MODEL, KVT_MAX_MODEL + 1, 'm', "MODEL over its max" },
		{ KVT_ID_WEIGHTS, KVT_MAX_FINGERPRINT + 1, 7, "WEIGHTS over its max" },
		{ KVT_ID_LAYERS, 4, 0, "LAYERS of 4 bytes" },
		{ KVT_ID_LAYERS, 12, 0, "LAYERS of 12 bytes" },
		{ KVT_ID_PARALLEL, 4, 1, "PARALLEL of 4 bytes" },
		{ KVT_ID_BLOCK_TOKENS, 2, 16, "BLOCK_TOKENS of 2 bytes" },
		{ KVT_ID_GROUP, 28, 0, "GROUP of 28 bytes" },
		{ KVT_ID_GROUP, 36, 0, "GROUP of 36 bytes" },
		{ KVT_ID_SALT, 0, 0, "SALT empty" },
		{ KVT_ID_SALT, KVT_MAX_FINGERPRINT + 1, 3, "SALT over its max" },
	};
	struct idlist base, l;

	reject_base(&base);
	for (unsigned i = 0; i < ARRAY_SIZE(bad_len); i++) {
		uint16_t tag = bad_len[i].tag;
		l = base;
		unsigned at = idl_find(&l, tag);
		if (tag == KVT_ID_GROUP || tag == KVT_ID_LAYERS ||
		    tag == KVT_ID_PARALLEL || tag == KVT_ID_KEY_SCHEME ||
		    tag == KVT_ID_BLOCK_TOKENS) {
			/* keep the leading words, cut or extend the rest */
			uint32_t old = l.f[at].len;
			l.f[at].len = bad_len[i].len;
			if (bad_len[i].len > old)
				memset(l.f[at].data + old, bad_len[i].byte,
				       bad_len[i].len - old);
		} else {
			l.f[at].len = bad_len[i].len;
			memset(l.f[at].data, bad_len[i].byte, bad_len[i].len);
		}
		CHECK_ID_REJECT(&l, bad_len[i].what);
	}
	/* CODEC: one u32 of a known codec other than none (none is written
	 * by leaving the field out, so that an identity has one encoding). */
	static const struct {
		uint32_t len, value;
		const char *what;
	} bad_codec[] = {
		{ 4, KVT_CODEC_NONE, "CODEC none written out" },
		{ 4, KVT_CODEC_COUNT, "CODEC unknown" },
		{ 8, KVT_CODEC_FP8_E4M3, "CODEC of 8 bytes" },
		{ 2, KVT_CODEC_FP8_E4M3, "CODEC of 2 bytes" },
	};
	for (unsigned i = 0; i < ARRAY_SIZE(bad_codec); i++) {
		uint8_t d[8] = { 0 };
		for (unsigned k = 0; k < 4; k++)
			d[k] = (uint8_t)(bad_codec[i].value >> (8 * k));
		l = base;
		idl_add(&l, KVT_ID_CODEC, d, bad_codec[i].len);
		CHECK_ID_REJECT(&l, bad_codec[i].what);
	}
	l = base;
	memcpy(l.f[1].data, "llama\0x", 7);
	l.f[1].len = 7;
	CHECK_ID_REJECT(&l, "MODEL with a NUL");

	/* A field length beyond the bytes present. */
	_cleanup_(kvt_buf_free) struct kvt_buf b;
	kvt_buf_init(&b);
	idl_write(&base, &b);
	/* the SALT field's length is at len - 3 - 4 */
	b.data[b.len - 7] = 4;
	CHECK(dec_copy(dec_identity, b.data, b.len) == -EBADMSG);
	b.data[b.len - 7] = 0xff;
	b.data[b.len - 4] = 0xff;
	CHECK(dec_copy(dec_identity, b.data, b.len) == -EBADMSG);
}

/* Values that cannot describe a model: one struct change each, refused
 * by decode and encode. */
static void test_reject_values(void)
{
	struct {
		const char *what;
		struct kvt_identity id;
	} v[32];
	unsigned nv = 0;
	struct idlist l;

#define VARIANT(w) (v[nv].what = (w), build_identity(&v[nv].id), &v[nv++].id)
	VARIANT("layer sum short")->groups[0].n_layers = 31;
	VARIANT("layer sum long")->layer_end = 31;
	{
		struct kvt_identity *x = VARIANT("two groups, sum mismatch");
		x->n_groups = 2;
		x->groups[0].n_layers = 16;
		x->groups[1] = mha(17, 8, 256);
	}
	VARIANT("MHA with planes 1")->groups[0].planes = 1;
	VARIANT("MHA with a window")->groups[0].window = 128;
	VARIANT("MLA with kv_heads 8")->groups[0] =
		(struct kvt_id_group){ 32, KVT_ATTN_MLA, 0, 1, 8, 1152, 1, 0 };
	VARIANT("MLA with planes 2")->groups[0] =
		(struct kvt_id_group){ 32, KVT_ATTN_MLA, 0, 2, 1, 1152, 1, 0 };
	VARIANT("SWA without a window")->groups[0].attn = KVT_ATTN_SWA;
	VARIANT("unknown attention")->groups[0].attn = 3;
	VARIANT("kv_heads 0")->groups[0].kv_heads = 0;
	VARIANT("head_bytes 0")->groups[0].head_bytes = 0;
	VARIANT("n_groups 0")->n_groups = 0;
	VARIANT("tp 0")->tp_size = 0;
	VARIANT("tp over max")->tp_size = KVT_MAX_TP + 1;
	VARIANT("cp 0")->cp_size = 0;
	VARIANT("block_tokens 0")->block_tokens = 0;
	VARIANT("block_tokens over max")->block_tokens = KVT_MAX_BLOCK_TOKENS + 1;
	{
		struct kvt_identity *x = VARIANT("no layers");
		x->layer_first = x->layer_end = 32;
	}
	VARIANT("empty model")->model[0] = 0;
	VARIANT("unknown codec")->codec = KVT_CODEC_COUNT;
	{
		struct kvt_identity *x = VARIANT("codec on an fp8 cache");
		x->codec = KVT_CODEC_FP8_E4M3;
		x->groups[0].dtype = KVT_DTYPE_FLOAT8_E4M3;
	}
	{
		struct kvt_identity *x = VARIANT("codec on half an element");
		x->codec = KVT_CODEC_INT4;
		x->groups[0].dtype = KVT_DTYPE_BFLOAT16;
		x->groups[0].head_bytes = 255;
	}
#undef VARIANT
	for (unsigned i = 0; i < nv; i++) {
		_cleanup_(kvt_buf_free) struct kvt_buf b;
		kvt_buf_init(&b);
		CHECK(kvt_identity_encode(&v[i].id, &b) == -EINVAL,
		      "encode %s", v[i].what);
		idl_from(&l, &v[i].id);
		CHECK_ID_REJECT(&l, v[i].what);
	}
}

static void test_reject_limits(void)
{
	struct kvt_identity id;
	struct idlist base, l;

	/* Sixteen groups are fine, seventeen are not. */
	build_identity(&id);
	id.n_groups = KVT_MAX_GROUPS;
	id.layer_end = KVT_MAX_GROUPS;
	for (unsigned i = 0; i < KVT_MAX_GROUPS; i++)
		id.groups[i] = mha(1, 8, 256);
	idl_from(&l, &id);
	CHECK(idl_decode(&l) == 0);
	id.layer_end = KVT_MAX_GROUPS + 1;
	idl_from(&l, &id);
	uint32_t gv[8] = { 1, KVT_ATTN_MHA, 0, 2, 8, 256, 1, 0 };
	struct idlist extra = { 0 };
	idl_add_u32s(&extra, KVT_ID_GROUP, gv, 8);
	idl_insert(&l, l.n, &extra.f[0]);
	CHECK_ID_REJECT(&l, "with 17 groups");

	/* Longer than any identity may be. */
	_cleanup_free_ uint8_t *p = calloc(1, KVT_MAX_IDENTITY + 1);
	_cleanup_(kvt_buf_free) struct kvt_buf b;
	kvt_buf_init(&b);
	reject_base(&base);
	idl_write(&base, &b);
	if (!p)
		abort();
	memcpy(p, b.data, b.len);
	CHECK(kvt_identity_decode(p, KVT_MAX_IDENTITY + 1, &id) == -EBADMSG);
}

/* ---- every encoder/decoder pair ----------------------------------- */

static void enc_identity(struct kvt_buf *b, uint8_t fill, uint16_t op)
{
	struct kvt_identity id;

	memset(&id, fill, sizeof(id));
	build_identity(&id);
	CHECK(kvt_identity_encode(&id, b) == 0);
}

static const struct proto_sample samples[] = {
	{ "identity", enc_identity, 0, dec_identity, true, true },
};

int main(void)
{
	test_identity_roundtrip();
	test_identity_padding();
	test_reject_fields();
	test_reject_lengths();
	test_reject_values();
	test_reject_limits();
	CHECK_SAMPLES(samples);
	return proto_test_end("test-proto-identity");
}
