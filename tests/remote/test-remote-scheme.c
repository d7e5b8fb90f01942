/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Two namespaces that differ only in their key scheme share nothing
 * through the remote tier either.  Node A's engine stores 8 blocks (the
 * library's key scheme) and writes them back; on node B a raw client
 * with the same model and geometry under key scheme 1 looks up the same
 * key bytes: misses, answered by the cluster as objects it does not have,
 * not as A's objects fetched and refused.  B then stores its own bytes
 * under those keys and writes them back: the pool holds both namespaces'
 * objects side by side, each with its writer's payload, and each node is
 * served the other's blocks under the scheme they were written in.
 */
#include <string.h>

#include "ceph.h"
#include "engine-request.h"
#include "raw.h"

#define N 8
/* block_pattern's tag of B's bytes under key scheme 1. */
#define B_TAG 0x5c

struct scheme1 {
	struct raw r;
	struct raw_pool pool;
	uint32_t ns;
	uint64_t shard_bytes;
};

/* The namespace kvt-engine's "tiny" opens, under key scheme 1. */
static void scheme1_open(struct scheme1 *s, const struct daemon *d)
{
	kvt_layer_group g;
	kvt_ns_desc desc;
	struct kvt_identity id = {.key_scheme = 1, .cp_size = 1};
	struct kvt_ns_open_rep rep;

	CHECK(KVT_KEY_SCHEME != 1, "the library's scheme is another");
	raw_connect(&s->r, d);
	s->r.pool = &s->pool;
	raw_hello(&s->r, "scheme-1");
	engine_ns_desc(engine_model_find("tiny"), 1, NULL, &g, &desc);
	snprintf(id.model, sizeof(id.model), "%s", desc.model);
	memcpy(id.weights, desc.weights, desc.weights_len);
	id.weights_len = desc.weights_len;
	id.layer_end = desc.layer_end;
	id.tp_size = desc.tp_size;
	id.block_tokens = desc.block_tokens;
	id.n_groups = 1;
	id.groups[0] = (struct kvt_id_group){g.n_layers, g.attn,     g.window, g.planes,
					     g.kv_heads, g.head_bytes, g.dtype,  g.scale_layout};
	int64_t ns = raw_ns_open(&s->r, &id);
	CHECK(ns >= 0, "namespace under key scheme 1: %s", strerror((int)-ns));
	struct kvt_cursor c = {s->r.payload, s->r.h.length};
	CHECK(kvt_dec_ns_open_rep(&c, &rep) == 0 && rep.shards == 1, "ns reply");
	s->ns = (uint32_t)ns;
	s->shard_bytes = rep.shard_bytes;
}

static void scheme1_close(struct scheme1 *s)
{
	raw_disconnect(&s->r);
	raw_pool_unmap(&s->pool);
}

/* LOOKUP of the N keys: their states into st; the leading run's length. */
static uint32_t scheme1_lookup(struct scheme1 *s, const uint8_t *keys, uint8_t *st)
{
	struct kvt_lookup_rep rep;

	CHECK(raw_keys(&s->r, KVT_OP_LOOKUP, s->ns, 0, keys, N) == 0, "lookup");
	struct kvt_cursor c = {s->r.payload, s->r.h.length};
	CHECK(kvt_dec_lookup_rep(&c, &rep) == 0 && rep.n == N, "lookup reply");
	memcpy(st, rep.states, N);
	return rep.leading;
}

/* LOOKUP; where it started a remote run, wait for the run to settle and
 * look up again. */
static uint32_t scheme1_lookup_settled(struct scheme1 *s, const uint8_t *keys, uint8_t *st)
{
	unsigned runs = s->pool.runs_ready;

	scheme1_lookup(s, keys, st);
	if (!memchr(st, KVT_STATE_DISK, N))
		return scheme1_lookup(s, keys, st);
	while (s->pool.runs_ready == runs)
		CHECK(raw_recv(&s->r) == 1, "the daemon closed the connection");
	return scheme1_lookup(s, keys, st);
}

static void handles(struct scheme1 *s, uint16_t op, const struct kvt_slot *slots)
{
	struct kvt_handle_arg h[N];
	struct kvt_buf b;
	int32_t st[N];
	uint32_t n;

	for (int i = 0; i < N; i++)
		h[i] = (struct kvt_handle_arg){slots[i].handle, 1};
	kvt_buf_init(&b);
	kvt_enc_handles_req(&b, 1, op, ++s->r.rid, h, N);
	CHECK(raw_call(&s->r, &b) == 0, "%s", kvt_opcode_name(op));
	kvt_buf_free(&b);
	struct kvt_cursor c = {s->r.payload, s->r.h.length};
	CHECK(kvt_dec_status_rep(&c, st, N, &n) == 0 && n == N, "%s reply", kvt_opcode_name(op));
	for (int i = 0; i < N; i++)
		CHECK(st[i] == 0, "%s of key %d: %d", kvt_opcode_name(op), i, st[i]);
}

/* RESERVE, write, COMMIT: B's own bytes under every key. */
static void scheme1_store(struct scheme1 *s, const uint8_t *keys)
{
	struct kvt_slot slots[N];
	uint32_t n;

	CHECK(raw_keys(&s->r, KVT_OP_RESERVE, s->ns, 0, keys, N) == 0, "reserve");
	struct kvt_cursor c = {s->r.payload, s->r.h.length};
	CHECK(kvt_dec_slots_rep(&c, slots, N, &n) == 0 && n == N, "reserve reply");
	for (int i = 0; i < N; i++) {
		CHECK(slots[i].status == 0, "key %d reserved: %d", i, slots[i].status);
		block_pattern(raw_pool_at(&s->r, slots[i].extent_id, slots[i].offset,
					  s->shard_bytes),
			      s->shard_bytes, B_TAG, keys + i * 32);
	}
	handles(s, KVT_OP_COMMIT, slots);
}

/* ACQUIRE every key: B's bytes, each of them; RELEASE. */
static void scheme1_expect(struct scheme1 *s, const uint8_t *keys, const char *where)
{
	struct kvt_slot slots[N];
	uint8_t *want = malloc(s->shard_bytes);
	uint32_t n;

	CHECK(want, "memory");
	CHECK(raw_keys(&s->r, KVT_OP_ACQUIRE, s->ns, 0, keys, N) == 0, "acquire");
	struct kvt_cursor c = {s->r.payload, s->r.h.length};
	CHECK(kvt_dec_slots_rep(&c, slots, N, &n) == 0 && n == N, "acquire reply");
	for (int i = 0; i < N; i++) {
		CHECK(slots[i].status == 0, "%s: key %d acquired: %d", where, i, slots[i].status);
		block_pattern(want, s->shard_bytes, B_TAG, keys + i * 32);
		CHECK(!memcmp(raw_pool_at(&s->r, slots[i].extent_id, slots[i].offset,
					  s->shard_bytes),
			      want, s->shard_bytes),
		      "%s: key %d holds the bytes stored under key scheme 1", where, i);
	}
	handles(s, KVT_OP_RELEASE, slots);
	free(want);
}

/* Every object of a key in namespace alice: two, one with A's payload
 * (kvt-engine's bytes of the key) and one with B's. */
static void objects_of_both(struct ceph *ceph, const uint8_t *keys, uint64_t shard_bytes)
{
	const struct engine_model *m = engine_model_find("tiny");
	size_t len = 4096 + shard_bytes;
	uint8_t *obj = malloc(len + 1), *a = malloc(shard_bytes), *b = malloc(shard_bytes);
	char out[512], path[256], hex[65];

	CHECK(obj && a && b, "memory");
	for (int i = 0; i < N; i++) {
		const uint8_t *key = keys + i * 32;
		key_hex(key, hex);
		engine_shard(m, 1, 0, key, a);
		block_pattern(b, shard_bytes, B_TAG, key);
		CHECK(ceph_sh(ceph, out, sizeof(out), "rados -p kvtier -N alice ls | grep -c '\\.%s$'",
			      hex) == 0 && atoi(out) == 2,
		      "key %d: two objects, one per key scheme; found %s", i, out);
		int seen_a = 0, seen_b = 0;
		for (int j = 1; j <= 2; j++) {
			snprintf(path, sizeof(path), "%s/obj", ceph->dir);
			CHECK(ceph_sh(ceph, NULL, 0,
				      "o=$(rados -p kvtier -N alice ls | grep '\\.%s$' | sort | sed -n %dp) && "
				      "rados -p kvtier -N alice get $o %s",
				      hex, j, path) == 0,
			      "get object %d of key %d", j, i);
			FILE *f = fopen(path, "rb");
			CHECK(f, "open %s", path);
			size_t got = fread(obj, 1, len + 1, f);
			fclose(f);
			CHECK(got == len, "key %d: object of %zu bytes, want %zu", i, got, len);
			seen_a += !memcmp(obj + 4096, a, shard_bytes);
			seen_b += !memcmp(obj + 4096, b, shard_bytes);
		}
		CHECK(seen_a == 1 && seen_b == 1,
		      "key %d: A's bytes in one object and B's in the other (%d, %d)", i, seen_a,
		      seen_b);
	}
	free(obj);
	free(a);
	free(b);
}

int main(void)
{
	struct ceph ceph;
	static struct daemon a, b;
	static struct scheme1 on_a, on_b;
	char out[8192];
	uint8_t keys[N * 32], st[N];

	ceph_start(&ceph);
	kvt_client *ca, *cb;
	two_nodes(&ceph, "min_reuse = 0\n", &a, &b, &ca, &cb);
	CHECK(engine_run(&a, out, sizeof(out), "--model", "tiny", "--name", "A", "--prefix", "128",
			 "--suffix", "0", "--expect-hits", "0", NULL) == 0,
	      "A stores 8 blocks under the library's key scheme");
	WAIT_FOR(stat_get(ca, "remote", "writes") == N, "written back at commit (min_reuse 0)");
	CHECK(engine_keys(1, 128, 0, 0, keys, N) == N, "keys");

	/* The same key bytes under scheme 1: nothing of A's is fetched. */
	scheme1_open(&on_b, &b);
	CHECK(scheme1_lookup_settled(&on_b, keys, st) == 0, "scheme 1 on B: no leading hit");
	for (int i = 0; i < N; i++)
		CHECK(st[i] == KVT_STATE_MISS, "scheme 1 on B: key %d a miss (%u)", i, st[i]);
	CHECK(stat_get(cb, "remote", "rejected") == 0,
	      "no object of the other scheme was fetched and refused: %llu were",
	      (unsigned long long)stat_get(cb, "remote", "rejected"));

	/* B's own blocks under scheme 1, written back beside A's. */
	scheme1_store(&on_b, keys);
	scheme1_expect(&on_b, keys, "scheme 1 on B");
	WAIT_FOR(stat_get(cb, "remote", "writes") == N, "B writes its 8 back at commit");
	CHECK(ceph_sh(&ceph, out, sizeof(out), "rados -p kvtier -N alice ls | wc -l") == 0 &&
		      atoi(out) == 2 * N,
	      "16 objects in namespace alice, 8 per key scheme; found %s", out);
	objects_of_both(&ceph, keys, on_b.shard_bytes);

	/* Each node is served the other's blocks under their own scheme. */
	CHECK(engine_run(&b, out, sizeof(out), "--model", "tiny", "--name", "B", "--prefix", "128",
			 "--suffix", "0", "--expect-hits", "8", "--no-store", NULL) == 0,
	      "B's engine finds A's 8 blocks under the library's scheme");
	CHECK(strstr(out, "every loaded byte verified"), "B's engine loads A's bytes");
	scheme1_open(&on_a, &a);
	CHECK(scheme1_lookup_settled(&on_a, keys, st) == N, "scheme 1 on A: B's 8 fetched");
	scheme1_expect(&on_a, keys, "scheme 1 on A");
	CHECK(stat_get(ca, "remote", "rejected") == 0 && stat_get(cb, "remote", "rejected") == 0,
	      "no object refused on either node");

	scheme1_close(&on_a);
	scheme1_close(&on_b);
	two_nodes_stop(&ceph, &a, &b, ca, cb);
	return 0;
}
