/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Key completeness through the daemon: blocks stored under a base namespace
 * identity are found under exactly that identity.  Each identity field,
 * changed on its own (and a few changes that only move a boundary between
 * two fields), names a namespace in which every one of those keys is a
 * miss; that namespace then stores its own bytes under the same keys, and
 * neither it nor any earlier one is ever served the other's bytes.  The base
 * identity keeps hitting with its exact bytes throughout.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "raw.h"

#define N 8

static struct daemon d;
static uint8_t keys[N * 32];
static bool raw_refused;

struct ident {
	uint32_t key_scheme;
	char model[64];
	uint8_t weights[64];
	uint32_t weights_len;
	uint32_t layer_first, layer_end, tp_size, cp_size, block_tokens;
	uint32_t n_groups;
	kvt_layer_group g[4];
	uint8_t salt[64];
	uint32_t salt_len;
};

/* Every field away from its zero or default, so each one can move either
 * way and stay valid: two layer groups (dense, then sliding window), a
 * pipeline stage that does not start at 0, two tensor-parallel ranks. */
static void base(struct ident *id)
{
	memset(id, 0, sizeof(*id));
	id->key_scheme = KVT_KEY_SCHEME;
	snprintf(id->model, sizeof(id->model), "kf-model");
	memcpy(id->weights, "wfp-0123456789ab", 16);
	id->weights_len = 16;
	id->layer_first = 2;
	id->layer_end = 6;
	id->tp_size = 2;
	id->cp_size = 1;
	id->block_tokens = 16;
	id->n_groups = 2;
	id->g[0] = (kvt_layer_group){.n_layers = 2, .attn = KVT_ATTN_MHA, .planes = 2,
				     .kv_heads = 4, .head_bytes = 128, .dtype = 1};
	id->g[1] = (kvt_layer_group){.n_layers = 2, .attn = KVT_ATTN_SWA, .window = 64,
				     .planes = 2, .kv_heads = 4, .head_bytes = 128, .dtype = 1};
	memcpy(id->salt, "salt-1", 6);
	id->salt_len = 6;
}

/* Variant i of the base: one change.  NULL past the last. */
static const char *variant(int i, struct ident *id)
{
	base(id);
	switch (i) {
	case 0:
		return "the base itself";
	case 1:
		id->model[7] = 'L';
		return "model name, one byte";
	case 2:
		id->model[7] = 0;
		return "model name, one byte shorter";
	case 3:
		id->weights[15] ^= 1;
		return "weights fingerprint, one bit";
	case 4:
		id->weights_len = 15;
		return "weights fingerprint, one byte shorter";
	case 5:
		/* The model name takes the fingerprint's first byte: the same
		 * bytes in a row, another boundary. */
		snprintf(id->model, sizeof(id->model), "kf-modelw");
		memmove(id->weights, id->weights + 1, 15);
		id->weights_len = 15;
		return "boundary between model name and fingerprint";
	case 6:
		id->weights_len = 0;
		return "no weights fingerprint";
	case 7:
		id->layer_first = 3, id->layer_end = 7;
		return "layer range, same count (another pipeline stage)";
	case 8:
		id->layer_first = 0, id->layer_end = 4;
		return "layer range starting at 0";
	case 9:
		id->tp_size = 4;
		return "tensor-parallel size 4";
	case 10:
		id->tp_size = 1;
		return "tensor-parallel size 1";
	case 11:
		id->cp_size = 2;
		return "context-parallel size";
	case 12:
		id->block_tokens = 32;
		return "tokens per block";
	case 13:
		id->g[0].n_layers = 3, id->g[1].n_layers = 1;
		return "layers per group, same total";
	case 14:
		id->g[1].attn = KVT_ATTN_MHA, id->g[1].window = 0;
		return "attention kind (sliding window -> dense)";
	case 15:
		id->g[1].window = 128;
		return "sliding window width";
	case 16:
		id->g[0].attn = KVT_ATTN_MLA, id->g[0].planes = 1, id->g[0].kv_heads = 1;
		return "MLA latent (one plane) instead of K and V";
	case 17:
		id->g[0].kv_heads = 8;
		return "KV heads";
	case 18:
		id->g[0].kv_heads = 2;
		return "KV heads, fewer";
	case 19:
		id->g[0].head_bytes = 256;
		return "head bytes (head dim or element size)";
	case 20:
		id->g[1].head_bytes = 64;
		return "head bytes of the second group";
	case 21:
		id->g[0].dtype = 2;
		return "dtype";
	case 22:
		id->g[1].dtype = 2;
		return "dtype of the second group";
	case 23:
		id->g[0].scale_layout = 1;
		return "scale layout";
	case 24: {
		kvt_layer_group t = id->g[0];
		id->g[0] = id->g[1];
		id->g[1] = t;
		return "group order";
	}
	case 25:
		id->salt[5] = '2';
		return "salt, one byte";
	case 26:
		id->salt_len = 0;
		return "no salt";
	case 27:
		id->salt[6] = 'x';
		id->salt_len = 7;
		return "salt, one byte longer";
	case 28:
		id->n_groups = 1;
		id->g[0].n_layers = 4;
		return "one group instead of two";
	case 29:
		id->key_scheme = 1;
		return "key scheme 1 (the first block chained from 32 zero bytes)";
	default:
		return NULL;
	}
}

static void to_desc(const struct ident *id, kvt_ns_desc *desc)
{
	*desc = (kvt_ns_desc){
		.model = id->model,
		.weights = id->weights,
		.weights_len = id->weights_len,
		.layer_first = id->layer_first,
		.layer_end = id->layer_end,
		.tp_size = id->tp_size,
		.cp_size = id->cp_size,
		.block_tokens = id->block_tokens,
		.n_groups = id->n_groups,
		.groups = id->g,
		.salt = id->salt,
		.salt_len = id->salt_len,
	};
}

/* Block bytes of variant v, shard s. */
static uint32_t tag(int v, uint32_t s)
{
	return (uint32_t)v << 8 | s;
}

static kvt_ns *open_variant(kvt_client *c, int v, kvt_ns_info *info)
{
	struct ident id;
	kvt_ns_desc desc;
	kvt_ns *ns = NULL;
	const char *what = variant(v, &id);
	to_desc(&id, &desc);
	int r = kvt_ns_open(c, &desc, &ns);
	CHECK(r == 0, "open (%s): %s %s", what, strerror(-r), kvt_client_error(c));
	CHECK(kvt_ns_get_info(ns, info) == 0, "ns info");
	return ns;
}

/* Every shard of every key loads with variant v's own bytes. */
static void expect_own_bytes(kvt_ns *ns, const kvt_ns_info *info, int v, const char *what)
{
	size_t bytes = info->shard_bytes;
	uint8_t *got = malloc(bytes * N), *want = malloc(bytes);
	void *dsts[N];
	int32_t st[N];
	uint8_t states[N];

	CHECK(kvt_lookup(ns, keys, N, 0, states) == N, "%s: all %d keys hit", what, N);
	for (uint32_t s = 0; s < info->shards; s++) {
		for (int i = 0; i < N; i++)
			dsts[i] = got + i * bytes;
		memset(got, 0, bytes * N);
		CHECK(kvt_load(ns, s, keys, N, dsts, st) == N, "%s: shard %u loads", what, s);
		for (int i = 0; i < N; i++) {
			block_pattern(want, bytes, tag(v, s), keys + i * 32);
			CHECK(st[i] == 0 && !memcmp(got + i * bytes, want, bytes),
			      "%s: key %d shard %u holds its own bytes", what, i, s);
		}
	}
	free(got);
	free(want);
}

static void store_own_bytes(kvt_ns *ns, const kvt_ns_info *info, int v, const char *what)
{
	size_t bytes = info->shard_bytes;
	uint8_t *blk = malloc(bytes * N);
	const void *srcs[N];
	int32_t st[N];

	for (uint32_t s = 0; s < info->shards; s++) {
		for (int i = 0; i < N; i++) {
			block_pattern(blk + i * bytes, bytes, tag(v, s), keys + i * 32);
			srcs[i] = blk + i * bytes;
		}
		CHECK(kvt_store(ns, s, keys, N, srcs, st) == N, "%s: shard %u stores", what, s);
		for (int i = 0; i < N; i++)
			CHECK(st[i] == 0, "%s: key %d shard %u is new here (%d)", what, i, s, st[i]);
	}
	free(blk);
}

static void expect_misses(kvt_ns *ns, const kvt_ns_info *info, const char *what)
{
	uint8_t states[N];
	kvt_slot_ref refs[N];

	memset(states, 0xff, sizeof(states));
	CHECK(kvt_lookup(ns, keys, N, 0, states) == 0, "%s: no leading hit", what);
	for (int i = 0; i < N; i++)
		CHECK(states[i] == KVT_MISS, "%s: key %d is a miss (state %u)", what, i, states[i]);
	for (uint32_t s = 0; s < info->shards; s++) {
		CHECK(kvt_acquire(ns, s, keys, N, refs) == 0, "%s: nothing to acquire", what);
		for (int i = 0; i < N; i++)
			CHECK(refs[i].status == -ENOENT, "%s: key %d shard %u acquire %d", what, i,
			      s, refs[i].status);
	}
}

/* What the library cannot say (another key scheme), said on the wire. */
static void raw_variant(const struct ident *id, const char *what)
{
	static struct raw r;
	struct kvt_identity kid;

	memset(&kid, 0, sizeof(kid));
	kid.key_scheme = id->key_scheme;
	snprintf(kid.model, sizeof(kid.model), "%s", id->model);
	memcpy(kid.weights, id->weights, id->weights_len);
	kid.weights_len = id->weights_len;
	kid.layer_first = id->layer_first;
	kid.layer_end = id->layer_end;
	kid.tp_size = id->tp_size;
	kid.cp_size = id->cp_size;
	kid.block_tokens = id->block_tokens;
	kid.n_groups = id->n_groups;
	for (uint32_t i = 0; i < id->n_groups; i++) {
		const kvt_layer_group *g = &id->g[i];
		kid.groups[i] = (struct kvt_id_group){g->n_layers, g->attn,     g->window,
						      g->planes,   g->kv_heads, g->head_bytes,
						      g->dtype,    g->scale_layout};
	}
	memcpy(kid.salt, id->salt, id->salt_len);
	kid.salt_len = id->salt_len;

	raw_connect(&r, &d);
	raw_hello(&r, "raw-key-fields");
	int64_t ns = raw_ns_open(&r, &kid);
	if (ns < 0) {
		/* Refusing the namespace shares nothing either. */
		printf("%s: namespace refused (%s)\n", what, strerror((int)-ns));
		raw_refused = true;
		raw_disconnect(&r);
		return;
	}
	CHECK(raw_keys(&r, KVT_OP_LOOKUP, (uint32_t)ns, 0, keys, N) == 0, "%s: lookup", what);
	struct kvt_lookup_rep rep;
	struct kvt_cursor c = {r.payload, r.h.length};
	CHECK(kvt_dec_lookup_rep(&c, &rep) == 0 && rep.n == N, "%s: lookup reply", what);
	CHECK(rep.leading == 0, "%s: no leading hit", what);
	for (int i = 0; i < N; i++)
		CHECK(rep.states[i] == KVT_MISS, "%s: key %d is a miss (%u)", what, i,
		      rep.states[i]);
	for (uint32_t s = 0; s < id->tp_size; s++) {
		struct kvt_slot slots[N];
		uint32_t n;
		CHECK(raw_keys(&r, KVT_OP_ACQUIRE, (uint32_t)ns, s, keys, N) == 0, "%s: acquire",
		      what);
		c = (struct kvt_cursor){r.payload, r.h.length};
		CHECK(kvt_dec_slots_rep(&c, slots, N, &n) == 0 && n == N, "%s: acquire reply",
		      what);
		for (int i = 0; i < N; i++)
			CHECK(slots[i].status == -ENOENT, "%s: key %d shard %u acquire %d", what,
			      i, s, slots[i].status);
	}
	raw_disconnect(&r);
}

int main(void)
{
	struct ident id;
	kvt_ns_info info;
	int n_variants = 0;

	/* Variants of other block sizes each take extents of their own. */
	daemon_start(&d, "[pool]\ncapacity = 96M\nextent_size = 2M\n");
	engine_keys(9001, 16 * N, 0, 0, keys, N);

	kvt_client *c = client_connect(&d, "base");
	kvt_ns *ns = open_variant(c, 0, &info);
	CHECK(info.shards == 2, "the base has two shards");
	expect_misses(ns, &info, "base before any store");
	store_own_bytes(ns, &info, 0, "base");
	expect_own_bytes(ns, &info, 0, "base");
	kvt_ns_close(ns);
	kvt_client_free(c);

	for (int v = 1;; v++) {
		const char *what = variant(v, &id);
		if (!what)
			break;
		n_variants++;
		if (id.key_scheme != KVT_KEY_SCHEME) {
			raw_variant(&id, what);
		} else {
			/* A fresh connection each time: nothing cached client-side. */
			c = client_connect(&d, "variant");
			ns = open_variant(c, v, &info);
			expect_misses(ns, &info, what);
			store_own_bytes(ns, &info, v, what);
			expect_own_bytes(ns, &info, v, what);
			kvt_ns_close(ns);
			kvt_client_free(c);
		}
		c = client_connect(&d, "base");
		ns = open_variant(c, 0, &info);
		expect_own_bytes(ns, &info, 0, "base after a variant");
		kvt_ns_close(ns);
		kvt_client_free(c);
	}

	/* Nothing stored later reached an earlier namespace. */
	c = client_connect(&d, "recheck");
	for (int v = 0; v <= n_variants; v++) {
		const char *what = variant(v, &id);
		if (id.key_scheme != KVT_KEY_SCHEME)
			continue;
		ns = open_variant(c, v, &info);
		expect_own_bytes(ns, &info, v, what);
		kvt_ns_close(ns);
	}
	CHECK(stat_get(c, "tenant", "namespaces") == 1 + (uint64_t)n_variants - raw_refused,
	      "one namespace per distinct identity (%llu)",
	      (unsigned long long)stat_get(c, "tenant", "namespaces"));
	printf("%d identity variants checked\n", n_variants);
	kvt_client_free(c);
	daemon_stop(&d);
	daemon_cleanup(&d);
	return 0;
}
