/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What write-back takes, in which order, and when it starts, against a
 * real kvtierd with a spill file.  Blocks stored while write-back is held
 * off (writeback_high = 100%) wait; a reload to 0% starts it at once,
 * with no other block stored.  It takes the default band's blocks before
 * the retained ones, the least recently used first (a hit makes a block
 * young again), and never a demoted block, until a hit undoes the
 * demotion, which starts it again at once.  An NVMe quota of 30 slots
 * stops it after 30 blocks, and a restart shows which ones: exactly the
 * 30 it should have taken are on NVMe, and they load byte-exact.
 *
 * The tenant comes from its own socket, so its quotas hold whatever uid
 * runs the test.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

/* A spill slot of a tiny block: a 4 KiB header and the 32 KiB payload. */
#define STRIDE (4096 + 32768)
#define MAX_BLOCKS 64

static struct daemon d, dw;
static char config[1024];
static kvt_ns_info info;

/* held: writeback_high 100% (write-back never starts) or 0%; quota: the
 * tenant's NVMe quota in bytes. */
static const char *make_config(bool held, uint64_t quota)
{
	snprintf(config, sizeof(config),
		 "[pool]\ncapacity = 16M\nextent_size = 2M\n"
		 "[nvme]\nwriteback_high = %s\nwriteback_low = 0%%\n"
		 "[spill.s]\npath = @DIR@/spill0\ncapacity = 128M\n"
		 "[tenant.w]\nsocket = @DIR@/w.sock\nquota = 16M\nnvme_quota = %llu\n",
		 held ? "100%" : "0%", (unsigned long long)quota);
	return config;
}

struct group {
	const char *name;
	uint64_t seed;
	uint32_t n;
	uint8_t keys[MAX_BLOCKS * 32];
};

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

/* The states of blocks [from, from + n) of g, one key a lookup (a plain
 * one: not a use); a block on NVMe only starts staging. */
static void group_states(kvt_ns *ns, const struct group *g, uint32_t from, uint32_t n,
			 uint8_t *ret)
{
	for (uint32_t i = 0; i < n; i++)
		CHECK(kvt_lookup(ns, g->keys + (from + i) * 32, 1, 0, &ret[i]) >= 0,
		      "%s: lookup of block %u", g->name, from + i);
}

/* How many of blocks [from, from + n) of g are in state st. */
static uint32_t group_count(kvt_ns *ns, const struct group *g, uint32_t from, uint32_t n,
			    uint8_t st)
{
	uint8_t s[MAX_BLOCKS];
	uint32_t k = 0;
	group_states(ns, g, from, n, s);
	for (uint32_t i = 0; i < n; i++)
		k += s[i] == st;
	return k;
}

/* Blocks [from, from + n) of g load with the bytes they were stored with. */
static void group_verify(kvt_ns *ns, const struct group *g, uint32_t from, uint32_t n)
{
	uint8_t *bufs = calloc(n, info.shard_bytes), *want = malloc(info.shard_bytes);
	void *dsts[MAX_BLOCKS] = {0};
	CHECK(bufs && want, "out of memory");
	for (uint32_t i = 0; i < n; i++)
		dsts[i] = bufs + i * info.shard_bytes;
	int r = kvt_load(ns, 0, g->keys + from * 32, n, dsts, NULL);
	CHECK(r == (int)n, "%s: loaded %d of %u", g->name, r, n);
	for (uint32_t i = 0; i < n; i++) {
		fill(want, g, from + i);
		CHECK(!memcmp(dsts[i], want, info.shard_bytes), "%s: block %u differs", g->name,
		      from + i);
	}
	free(bufs);
	free(want);
}

static uint64_t dstat(const char *name)
{
	kvt_client *c = client_connect(&d, "checker");
	uint64_t v = stat_get(c, "daemon", name);
	kvt_client_free(c);
	return v;
}

/* Tenant w's NVMe bytes: copies written, not writes in flight.  0 before
 * the tenant exists (a restarted daemon has it once a client opens a
 * namespace through its socket). */
static uint64_t nvme_used(void)
{
	kvt_client *c = client_connect(&d, "checker");
	uint64_t v = stat_sum(c, "tenant", "nvme_used");
	kvt_client_free(c);
	return v;
}

static void reload(bool held, uint64_t quota)
{
	daemon_rewrite_config(&d, make_config(held, quota));
	CHECK(kill(d.pid, SIGHUP) == 0, "SIGHUP");
}

int main(void)
{
	static struct group raised, plain, ended, raised2, plain2, ended2;

	daemon_start(&d, make_config(true, 30 * STRIDE));
	dw = d;
	snprintf(dw.socket, sizeof(dw.socket), "%s/w.sock", d.dir);
	kvt_client *c = client_connect(&dw, "engine");
	kvt_ns *ns = engine_ns(c, "tiny", 1);
	CHECK(kvt_ns_get_info(ns, &info) == 0, "ns info");

	/* 1. Stored while write-back is held off: retained first (the
	 * oldest), then unhinted, then a session that ends.  The daemon
	 * commits a batch from its last block, so that the first, a chain's
	 * head, is the most recently used: block 39 of the unhinted ones is
	 * their oldest. */
	group_make(&raised, "retained", 1, 20);
	group_make(&plain, "unhinted", 2, 40);
	group_make(&ended, "ended session", 3, 20);
	group_store(ns, &raised);
	group_store(ns, &plain);
	group_store(ns, &ended);
	CHECK(kvt_retain(ns, raised.keys, raised.n, 60, 0) == (int)raised.n, "retain");
	CHECK(kvt_end(ns, ended.keys, ended.n, KVT_END_SESSION) == (int)ended.n, "end session");
	/* A hit on the five oldest unhinted blocks: the youngest now. */
	uint8_t st[MAX_BLOCKS];
	CHECK(kvt_lookup(ns, plain.keys + 35 * 32, 5, KVT_LOOKUP_TOUCH, st) == 5, "hit 5 blocks");
	CHECK(dstat("nvme_writes") == 0, "nothing written while write-back is held off");

	/* 2. A reload lets it go, with nothing else happening; the NVMe
	 * quota stops it at 30 blocks. */
	reload(false, 30 * STRIDE);
	WAIT_FOR(nvme_used() == 30 * STRIDE, "write-back to start on the reload and fill the quota");
	CHECK(dstat("nvme_writes") == 30, "30 blocks written (%llu)",
	      (unsigned long long)dstat("nvme_writes"));

	/* 3. Which 30: a restart leaves only the copies on NVMe. */
	kvt_ns_close(ns);
	kvt_client_free(c);
	daemon_stop(&d);
	daemon_restart(&d, make_config(true, 4 * 1024 * 1024));
	CHECK(dstat("nvme_recovered") == 30, "30 blocks recovered");
	c = client_connect(&dw, "engine");
	ns = engine_ns(c, "tiny", 1);
	CHECK(group_count(ns, &plain, 5, 30, KVT_DISK) == 30,
	      "the 30 least recently used unhinted blocks were written back");
	CHECK(group_count(ns, &plain, 0, 5, KVT_MISS) == 5, "not the 5 youngest");
	CHECK(group_count(ns, &plain, 35, 5, KVT_MISS) == 5, "not the 5 blocks hit");
	CHECK(group_count(ns, &raised, 0, raised.n, KVT_MISS) == raised.n,
	      "no retained block, though they are older");
	CHECK(group_count(ns, &ended, 0, ended.n, KVT_MISS) == ended.n, "no demoted block");
	WAIT_FOR(group_count(ns, &plain, 5, 30, KVT_HOST) == 30, "the 30 blocks to be staged");
	group_verify(ns, &plain, 5, 30);

	/* 4. With room for all: every block but the demoted ones. */
	group_make(&raised2, "retained 2", 4, 16);
	group_make(&plain2, "unhinted 2", 5, 16);
	group_make(&ended2, "ended session 2", 6, 16);
	group_store(ns, &raised2);
	group_store(ns, &plain2);
	group_store(ns, &ended2);
	CHECK(kvt_retain(ns, raised2.keys, raised2.n, 60, 0) == (int)raised2.n, "retain");
	CHECK(kvt_end(ns, ended2.keys, ended2.n, KVT_END_SESSION) == (int)ended2.n, "end");
	CHECK(dstat("nvme_writes") == 0, "nothing written while write-back is held off");
	reload(false, 4 * 1024 * 1024);
	WAIT_FOR(nvme_used() == 62 * STRIDE, "write-back of the 32 blocks not demoted");
	CHECK(dstat("nvme_writes") == 32, "%llu written: the demoted ones were not",
	      (unsigned long long)dstat("nvme_writes"));

	/* 5. A hit undoes a demotion: that block is written back, at once. */
	CHECK(kvt_lookup(ns, ended2.keys, 1, KVT_LOOKUP_TOUCH, st) == 1, "hit a demoted block");
	WAIT_FOR(nvme_used() == 63 * STRIDE, "the block hit to be written back");
	CHECK(dstat("nvme_writes") == 33, "that block only");
	group_verify(ns, &raised2, 0, raised2.n);
	group_verify(ns, &plain2, 0, plain2.n);
	group_verify(ns, &ended2, 0, ended2.n);

	kvt_ns_close(ns);
	kvt_client_free(c);
	daemon_stop(&d);
	char path[300];
	snprintf(path, sizeof(path), "%s/spill0", d.dir);
	unlink(path);
	daemon_cleanup(&d);
	return 0;
}
