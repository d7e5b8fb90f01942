/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The engine's lifecycle hints against a real kvtierd: a pool of 128 tiny
 * blocks holds a retained system prompt, an ended session, blocks nobody
 * hinted and a retention that lapses.  When new blocks need room, the
 * ended session goes first, then the unhinted and lapsed blocks, and the
 * retained prompt stays; every block that stays loads byte-exact.  An end
 * of request demotes only blocks nobody hit since they were stored; a hit
 * on a demoted block undoes the demotion; kvtierctl's records count all
 * of it; a hint the daemon does not know is refused with a reply and the
 * connection goes on.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "raw.h"

#define MAX_BLOCKS 64

struct group {
	const char *name;
	uint64_t seed;
	uint32_t n;
	uint8_t keys[MAX_BLOCKS * 32];
};

static kvt_ns_info info;

static void fill(uint8_t *buf, const struct group *g, uint32_t i)
{
	for (uint64_t j = 0; j < info.shard_bytes; j++)
		buf[j] = (uint8_t)(g->seed * 131 + i * 7 + j * 13 + (j >> 9));
}

static void group_make(struct group *g, const char *name, uint64_t seed, uint32_t n)
{
	g->name = name;
	g->seed = seed;
	g->n = engine_keys(seed, n * 16, 0, 0, g->keys, MAX_BLOCKS);
	CHECK(g->n == n, "%s: %u keys", name, g->n);
}

static void group_store(kvt_ns *ns, const struct group *g)
{
	uint8_t *bufs = malloc(info.shard_bytes * g->n);
	const void *srcs[MAX_BLOCKS];
	CHECK(bufs, "out of memory");
	for (uint32_t i = 0; i < g->n; i++) {
		fill(bufs + i * info.shard_bytes, g, i);
		srcs[i] = bufs + i * info.shard_bytes;
	}
	int r = kvt_store(ns, 0, g->keys, g->n, srcs, NULL);
	CHECK(r == (int)g->n, "%s: stored %d of %u", g->name, r, g->n);
	free(bufs);
}

/* How many of the group's blocks are in host memory; a plain lookup,
 * which does not count as a use. */
static uint32_t group_resident(kvt_ns *ns, const struct group *g)
{
	uint8_t st[MAX_BLOCKS];
	uint32_t n = 0;
	CHECK(kvt_lookup(ns, g->keys, g->n, 0, st) >= 0, "%s: lookup", g->name);
	for (uint32_t i = 0; i < g->n; i++)
		n += st[i] == KVT_HOST;
	return n;
}

/* Every block of the group loads with the bytes it was stored with. */
static void group_verify(kvt_ns *ns, const struct group *g)
{
	uint8_t *bufs = calloc(g->n, info.shard_bytes), *want = malloc(info.shard_bytes);
	void *dsts[MAX_BLOCKS];
	CHECK(bufs && want, "out of memory");
	for (uint32_t i = 0; i < g->n; i++)
		dsts[i] = bufs + i * info.shard_bytes;
	int r = kvt_load(ns, 0, g->keys, g->n, dsts, NULL);
	CHECK(r == (int)g->n, "%s: loaded %d of %u", g->name, r, g->n);
	for (uint32_t i = 0; i < g->n; i++) {
		fill(want, g, i);
		CHECK(!memcmp(dsts[i], want, info.shard_bytes), "%s: block %u differs", g->name, i);
	}
	free(bufs);
	free(want);
}

static uint64_t ns_stat(kvt_client *c, const char *field)
{
	return stat_get(c, "namespace", field);
}

/* The bands' gauges are the slot class's: one here. */
static uint64_t class_stat(kvt_client *c, const char *field)
{
	return stat_get(c, "class", field);
}

/* A hint kind the daemon does not know: refused with a reply, and the
 * connection keeps working. */
static void unknown_hint(const struct daemon *d, const struct group *g)
{
	static struct raw r;
	raw_connect(&r, d);
	raw_hello(&r, "raw");
	struct kvt_identity id = {.key_scheme = 1, .model = "tiny", .layer_end = 4, .tp_size = 1,
				  .cp_size = 1, .block_tokens = 16, .n_groups = 1};
	id.groups[0] = (struct kvt_id_group){4, KVT_ATTN_MHA, 0, 2, 2, 128, 1, 0};
	int64_t ns = raw_ns_open(&r, &id);
	CHECK(ns >= 0, "namespace: %s", strerror((int)-ns));
	CHECK(raw_keys(&r, KVT_OP_HINT, (uint32_t)ns, KVT_HINT_ARG(9, 0, 0), g->keys, 1) == -EINVAL,
	      "an unknown hint kind is refused");
	CHECK(raw_keys(&r, KVT_OP_HINT, (uint32_t)ns, KVT_HINT_ARG(KVT_HINT_RETAIN, 101, 0),
		       g->keys, 1) == -EINVAL, "priority 101 is refused");
	CHECK(raw_keys(&r, KVT_OP_HINT, (uint32_t)ns, KVT_HINT_ARG(KVT_HINT_END_SESSION, 5, 0),
		       g->keys, 1) == -EINVAL, "an end with a priority is refused");
	CHECK(raw_keys(&r, KVT_OP_LOOKUP, (uint32_t)ns, 0, g->keys, 1) == 0,
	      "the connection goes on");
	raw_disconnect(&r);
}

int main(void)
{
	struct daemon d;
	struct group sys, ended, plain, lapsing, fresh, more, reused, unused;

	/* tiny blocks are 32 KiB: 2 MiB extents of 64 slots, 4 MiB = 128. */
	daemon_start(&d, "[pool]\ncapacity = 4M\nextent_size = 2M\n");
	kvt_client *c = client_connect(&d, "engine");
	kvt_ns *ns = engine_ns(c, "tiny", 1);
	CHECK(kvt_ns_get_info(ns, &info) == 0, "ns info");

	group_make(&sys, "system prompt", 1, 32);
	group_make(&ended, "ended session", 2, 32);
	group_make(&plain, "unhinted", 3, 32);
	group_make(&lapsing, "lapsing", 4, 16);
	group_make(&fresh, "fresh", 5, 32);
	group_make(&more, "more", 6, 40);
	group_make(&reused, "reused", 7, 8);
	group_make(&unused, "unused", 8, 8);

	/* The library checks its arguments. */
	CHECK(kvt_retain(ns, sys.keys, 1, 101, 0) == -EINVAL, "priority 101");
	CHECK(kvt_retain(ns, sys.keys, 1, 90, KVT_HINT_MAX_DURATION + 1) == -EINVAL, "duration");
	CHECK(kvt_end(ns, sys.keys, 1, 2) == -EINVAL, "unknown end flag");
	CHECK(kvt_retain(ns, sys.keys, sys.n, 90, 0) == 0, "nothing stored yet: nothing hinted");

	group_store(ns, &sys);
	group_store(ns, &ended);
	group_store(ns, &plain);
	group_store(ns, &lapsing);
	CHECK(kvt_retain(ns, sys.keys, sys.n, 90, 0) == (int)sys.n, "retain the prompt");
	CHECK(kvt_retain(ns, lapsing.keys, lapsing.n, 60, 1) == (int)lapsing.n, "retain 1 s");
	CHECK(kvt_end(ns, ended.keys, ended.n, KVT_END_SESSION) == (int)ended.n, "end session");
	CHECK(ns_stat(c, "hints") == sys.n + lapsing.n + ended.n, "hints counted");
	CHECK(class_stat(c, "demoted") == ended.n, "%llu demoted",
	      (unsigned long long)class_stat(c, "demoted"));
	CHECK(ns_stat(c, "demotions") == ended.n, "demotions counted");
	CHECK(class_stat(c, "retained") == sys.n + lapsing.n, "%llu retained",
	      (unsigned long long)class_stat(c, "retained"));

	/* The one-second retention lapses by itself. */
	WAIT_FOR(ns_stat(c, "lapsed") == lapsing.n, "the retention to lapse");
	CHECK(class_stat(c, "retained") == sys.n, "only the prompt is retained");

	/* 112 blocks + 32 = 144 of 128: the ended session goes, all of it,
	 * and nothing else. */
	group_store(ns, &fresh);
	CHECK(ns_stat(c, "demoted_evictions") == 16, "%llu demoted blocks evicted",
	      (unsigned long long)ns_stat(c, "demoted_evictions"));
	CHECK(ns_stat(c, "evictions") == 16, "16 evictions");
	CHECK(group_resident(ns, &ended) == 16, "half the ended session is left");
	CHECK(group_resident(ns, &sys) == sys.n, "the prompt stays");
	CHECK(group_resident(ns, &plain) == plain.n, "the unhinted blocks stay");
	CHECK(group_resident(ns, &lapsing) == lapsing.n, "the lapsed blocks stay");
	group_store(ns, &more); /* 40 more: the other 16 ended, then 24 unhinted or lapsed */
	CHECK(ns_stat(c, "demoted_evictions") == ended.n, "the whole ended session went first");
	CHECK(group_resident(ns, &ended) == 0, "no ended block is left");
	CHECK(group_resident(ns, &sys) == sys.n, "the retained prompt stays");
	CHECK(group_resident(ns, &plain) + group_resident(ns, &lapsing) + group_resident(ns, &fresh) ==
		      plain.n + lapsing.n + fresh.n - 24,
	      "24 of the unhinted and lapsed blocks went");
	group_verify(ns, &sys);
	group_verify(ns, &more);

	/* End of a request: a block hit since it was stored is not its own;
	 * one nobody used is. */
	uint64_t before = ns_stat(c, "demotions");
	group_store(ns, &reused);
	group_store(ns, &unused);
	uint8_t st[MAX_BLOCKS];
	CHECK(kvt_lookup(ns, reused.keys, reused.n, KVT_LOOKUP_TOUCH, st) == (int)reused.n,
	      "another request hits the reused blocks");
	CHECK(kvt_end(ns, reused.keys, reused.n, 0) == (int)reused.n, "end of request");
	CHECK(kvt_end(ns, unused.keys, unused.n, 0) == (int)unused.n, "end of request");
	CHECK(ns_stat(c, "demotions") == before + unused.n, "only the unused blocks are demoted");
	CHECK(class_stat(c, "demoted") == unused.n, "%llu demoted now",
	      (unsigned long long)class_stat(c, "demoted"));
	/* A hit on a demoted block undoes it. */
	CHECK(kvt_lookup(ns, unused.keys, 1, KVT_LOOKUP_TOUCH, st) == 1, "hit a demoted block");
	CHECK(class_stat(c, "demoted") == unused.n - 1, "the hit block is no longer demoted");
	group_verify(ns, &unused);

	unknown_hint(&d, &sys);
	CHECK(group_resident(ns, &sys) == sys.n, "the prompt is still there");

	kvt_ns_close(ns);
	kvt_client_free(c);
	daemon_stop(&d);
	daemon_cleanup(&d);
	return 0;
}
