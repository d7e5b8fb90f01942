/* SPDX-License-Identifier: Apache-2.0 */
/*
 * How a node tells its clients that a run fetched from the remote tier
 * has landed, and what lands.  Two raw clients on node B, one that
 * negotiated KVT_FEATURE_RUNS and one that did not, wait on the same
 * 24-block runs (queue depth 4, so the run streams in six windows): the
 * first hears one BLOCK_READY per key and no RUN_READY, the second one
 * RUN_READY for the run (its first key, 24 keys, how many served) and no
 * BLOCK_READY.  The second run's blocks, with free slots waiting, were
 * read straight into their host slots, and every byte B serves is A's.  A run with a flipped byte in block 10's
 * object: the blocks before it are served, block 10 is a miss, its host
 * slot (and those of the run's keys that went unread) is free again, and
 * the RUN_READY counts what was served.
 */
#include <string.h>

#include "ceph.h"
#include "engine-request.h"
#include "raw.h"

#define RUN 24
#define BAD 10

struct notices {
	uint32_t blocks;      /* BLOCK_READY */
	uint32_t runs;        /* RUN_READY */
	struct kvt_run_ready run;
	uint8_t first_key[32];
	uint8_t seen[RUN];    /* BLOCK_READY per key of the run */
};

static void hello(struct raw *r, uint64_t features)
{
	struct kvt_buf b;
	struct kvt_hello_req req = {1, 1, features, "", ""};
	struct kvt_hello_rep rep;

	snprintf(req.name, sizeof(req.name), "raw");
	kvt_buf_init(&b);
	kvt_enc_hello_req(&b, ++r->rid, &req);
	CHECK(raw_call(r, &b) == 0 && r->h.opcode == KVT_OP_HELLO, "hello");
	struct kvt_cursor c = {r->payload, r->h.length};
	CHECK(kvt_dec_hello_rep(&c, &rep) == 0, "hello reply decodes");
	CHECK(rep.features == (features & KVT_FEATURES_ALL), "features granted as asked");
	kvt_buf_free(&b);
}

/* The namespace the engine simulator's model uses, as a raw client says it. */
static uint32_t ns_open(struct raw *r, const char *model)
{
	kvt_layer_group g;
	kvt_ns_desc d;
	struct kvt_identity id = {.key_scheme = KVT_KEY_SCHEME, .cp_size = 1};

	engine_ns_desc(engine_model_find(model), 1, NULL, &g, &d);
	snprintf(id.model, sizeof(id.model), "%s", d.model);
	memcpy(id.weights, d.weights, d.weights_len);
	id.weights_len = d.weights_len;
	id.layer_first = d.layer_first;
	id.layer_end = d.layer_end;
	id.tp_size = d.tp_size;
	id.block_tokens = d.block_tokens;
	id.n_groups = 1;
	id.groups[0] = (struct kvt_id_group){g.n_layers, g.attn,     g.window, g.planes,
					     g.kv_heads, g.head_bytes, g.dtype,  g.scale_layout};
	int64_t ns = raw_ns_open(r, &id);
	CHECK(ns >= 0, "namespace: %s", strerror((int)-ns));
	return (uint32_t)ns;
}

static void note(struct raw *r, const uint8_t *keys, struct notices *nt)
{
	struct kvt_cursor c = {r->payload, r->h.length};

	if (r->h.opcode == KVT_OP_BLOCK_READY) {
		uint32_t ns_id;
		const uint8_t *key;
		CHECK(kvt_dec_block_ready(&c, &ns_id, &key) == 0, "BLOCK_READY decodes");
		int i = 0;
		while (i < RUN && memcmp(keys + i * 32, key, 32))
			i++;
		CHECK(i < RUN, "BLOCK_READY names a key of the run");
		CHECK(!nt->seen[i]++, "one BLOCK_READY per key");
		nt->blocks++;
	} else if (r->h.opcode == KVT_OP_RUN_READY) {
		CHECK(kvt_dec_run_ready(&c, &nt->run) == 0, "RUN_READY decodes");
		memcpy(nt->first_key, nt->run.key, 32);
		nt->runs++;
	}
}

/* LOOKUP; the states into st.  Notifications that come first are
 * counted into nt (NULL: none may come). */
static void lookup(struct raw *r, uint32_t ns, const uint8_t *keys, uint32_t n, uint8_t *st,
		   struct notices *nt)
{
	struct kvt_buf b;
	struct kvt_keys_req req = {ns, 0, n, keys};

	kvt_buf_init(&b);
	kvt_enc_keys_req(&b, 1, KVT_OP_LOOKUP, ++r->rid, &req);
	CHECK(kvt_msg_finish(&b, 0) == 0, "encode");
	CHECK(write(r->fd, b.data, b.len) == (ssize_t)b.len, "write");
	kvt_buf_free(&b);
	for (;;) {
		CHECK(raw_recv(r) == 1, "the daemon closed the connection");
		if (!(r->h.flags & KVT_FLAG_NOTIFY))
			break;
		CHECK(nt, "no notice expected here: %s", kvt_opcode_name(r->h.opcode));
		note(r, keys, nt);
	}
	CHECK(r->h.request_id == r->rid && !(r->h.flags & KVT_FLAG_ERROR), "LOOKUP answered");
	struct kvt_cursor c = {r->payload, r->h.length};
	struct kvt_lookup_rep rep;
	CHECK(kvt_dec_lookup_rep(&c, &rep) == 0 && rep.n == n, "LOOKUP reply");
	memcpy(st, rep.states, n);
}

/* Notifications until the run has settled for this client. */
static void wait_run(struct raw *r, const uint8_t *keys, struct notices *nt, bool runs)
{
	while (runs ? nt->runs == 0 : nt->blocks < RUN) {
		CHECK(raw_recv(r) == 1, "the daemon closed the connection");
		CHECK(r->h.flags & KVT_FLAG_NOTIFY, "only notices while waiting");
		note(r, keys, nt);
	}
}

/* Node A stores RUN tiny blocks of seed, which it writes back at commit. */
static void a_stores(struct daemon *a, kvt_client *ca, uint64_t seed, uint64_t written)
{
	char out[8192], s[16];
	snprintf(s, sizeof(s), "%llu", (unsigned long long)seed);
	CHECK(engine_run(a, out, sizeof(out), "--model", "tiny", "--name", "A", "--prefix", "384",
			 "--prefix-seed", s, "--suffix", "0", "--expect-hits", "0", NULL) == 0,
	      "A stores 24 blocks");
	WAIT_FOR(stat_get(ca, "remote", "writes") == written, "A writes them back");
}

/* Every block B serves of the first n keys is the engine's, byte for byte. */
static void check_bytes(kvt_client *cb, const uint8_t *keys, uint32_t n)
{
	const struct engine_model *m = engine_model_find("tiny");
	kvt_ns *ns = engine_ns(cb, "tiny", 1);
	kvt_ns_info info;
	CHECK(kvt_ns_get_info(ns, &info) == 0, "ns info");
	uint8_t *got = malloc(info.block_bytes), *want = malloc(info.block_bytes);
	CHECK(got && want, "memory");
	for (uint32_t i = 0; i < n; i++) {
		void *dst = got;
		int32_t st;
		CHECK(kvt_load(ns, 0, keys + i * 32, 1, &dst, &st) == 1, "block %u loads", i);
		engine_shard(m, 1, 0, keys + i * 32, want);
		CHECK(!memcmp(got, want, info.block_bytes), "block %u: A's bytes", i);
	}
	free(got);
	free(want);
	kvt_ns_close(ns);
}

int main(void)
{
	struct ceph ceph;
	static struct daemon a, b;
	static struct raw legacy, runs;
	char hex[65];
	uint8_t keys[RUN * 32], st[RUN];

	ceph_start(&ceph);
	kvt_client *ca, *cb;
	two_nodes(&ceph, "min_reuse = 0\nqueue_depth = 4\n", &a, &b, &ca, &cb);
	raw_connect(&legacy, &b);
	hello(&legacy, KVT_FEATURES_ALL & ~KVT_FEATURE_RUNS);
	raw_connect(&runs, &b);
	hello(&runs, KVT_FEATURES_ALL);
	uint32_t ns_legacy = ns_open(&legacy, "tiny"), ns_runs = ns_open(&runs, "tiny");

	/* Run 1: looked up by the client without the feature. */
	a_stores(&a, ca, 1, RUN);
	CHECK(engine_keys(1, 384, 0, 0, keys, RUN) == RUN, "keys");
	struct notices n1 = {0};
	lookup(&legacy, ns_legacy, keys, RUN, st, &n1);
	for (int i = 0; i < RUN; i++)
		CHECK(st[i] == KVT_STATE_DISK, "key %d staging from the remote tier", i);
	wait_run(&legacy, keys, &n1, false);
	lookup(&legacy, ns_legacy, keys, RUN, st, &n1);
	CHECK(n1.blocks == RUN && n1.runs == 0, "a BLOCK_READY per key, no RUN_READY: %u, %u",
	      n1.blocks, n1.runs);
	for (int i = 0; i < RUN; i++)
		CHECK(st[i] == KVT_STATE_HOST, "key %d in host memory", i);
	CHECK(stat_get(cb, "remote", "reads") == RUN, "24 read");
	/* Into a cold pool a read whose slot's extent is still being made
	 * goes through the daemon's buffer: only some are in place here. */
	uint64_t in_place = stat_get(cb, "remote", "reads_in_place");
	CHECK(in_place <= RUN, "in place: %llu", (unsigned long long)in_place);
	check_bytes(cb, keys, RUN);

	/* Run 2: looked up by the client with the feature; the other, still
	 * interested (it waited within the last 30 s), hears each block. */
	a_stores(&a, ca, 2, 2 * RUN);
	CHECK(engine_keys(2, 384, 0, 0, keys, RUN) == RUN, "keys");
	struct notices n2 = {0}, n2_legacy = {0};
	lookup(&runs, ns_runs, keys, RUN, st, &n2);
	CHECK(st[0] == KVT_STATE_DISK && st[RUN - 1] == KVT_STATE_DISK, "staging");
	wait_run(&runs, keys, &n2, true);
	CHECK(n2.runs == 1 && n2.blocks == 0, "one RUN_READY, no BLOCK_READY: %u, %u", n2.runs,
	      n2.blocks);
	CHECK(n2.run.ns_id == ns_runs && n2.run.n_keys == RUN && n2.run.n_served == RUN &&
		      !memcmp(n2.first_key, keys, 32),
	      "RUN_READY: the namespace, the first key, 24 keys, 24 served");
	lookup(&runs, ns_runs, keys, RUN, st, NULL);
	for (int i = 0; i < RUN; i++)
		CHECK(st[i] == KVT_STATE_HOST, "key %d in host memory at the one look-up after it", i);
	wait_run(&legacy, keys, &n2_legacy, false);
	CHECK(n2_legacy.blocks == RUN && n2_legacy.runs == 0, "the other client: a BLOCK_READY per key");
	/* The extent made for run 1 has free slots for all of run 2. */
	CHECK(stat_get(cb, "remote", "reads_in_place") - in_place == RUN,
	      "run 2 read straight into its host slots");
	check_bytes(cb, keys, RUN);

	/* Run 3: block 10's object has a payload byte flipped. */
	a_stores(&a, ca, 3, 3 * RUN);
	CHECK(engine_keys(3, 384, 0, 0, keys, RUN) == RUN, "keys");
	key_hex(keys + BAD * 32, hex);
	CHECK(ceph_sh(&ceph, NULL, 0,
		      "o=$(rados -p kvtier -N alice ls | grep %s) && rados -p kvtier -N alice get $o %s/obj && "
		      "printf '\\377' | dd of=%s/obj bs=1 seek=20000 conv=notrunc 2>/dev/null && "
		      "rados -p kvtier -N alice put $o %s/obj", hex, ceph.dir, ceph.dir, ceph.dir) == 0,
	      "flip a byte of block 10's object");
	uint64_t reads0 = stat_get(cb, "remote", "reads");
	struct notices n3 = {0};
	lookup(&runs, ns_runs, keys, RUN, st, &n3);
	wait_run(&runs, keys, &n3, true);
	WAIT_FOR(stat_get(cb, "remote", "in_flight") == 0, "B's reads settle");
	uint64_t served = stat_get(cb, "remote", "reads") - reads0;
	CHECK(stat_get(cb, "remote", "rejected") == 1, "one object failed verification");
	CHECK(n3.runs == 1 && n3.run.n_keys == RUN && n3.run.n_served == served,
	      "RUN_READY counts the %llu served", (unsigned long long)served);
	CHECK(served >= BAD && served < RUN - 1, "the run ended at the corrupt object: %llu served",
	      (unsigned long long)served);
	lookup(&runs, ns_runs, keys, RUN, st, NULL);
	for (int i = 0; i < BAD; i++)
		CHECK(st[i] == KVT_STATE_HOST, "key %d before the corrupt one served", i);
	CHECK(st[BAD] == KVT_STATE_MISS, "the corrupt block is a miss, never served");
	check_bytes(cb, keys, BAD);
	/* The slots of the rejected block and of the keys never read are
	 * free again: what B's pool holds is what it serves. */
	uint64_t blocks = stat_get(cb, "tenant", "blocks");
	CHECK(blocks == 2 * RUN + served, "B holds the served blocks: %llu",
	      (unsigned long long)blocks);
	kvt_ns *tiny = engine_ns(cb, "tiny", 1);
	kvt_ns_info info;
	CHECK(kvt_ns_get_info(tiny, &info) == 0, "ns info");
	kvt_ns_close(tiny);
	CHECK(stat_get(cb, "daemon", "used") == blocks * info.block_bytes,
	      "host slots in use: one per block served, none for the rejected");

	raw_disconnect(&legacy);
	raw_disconnect(&runs);
	two_nodes_stop(&ceph, &a, &b, ca, cb);
	return 0;
}
