/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The rule of docs/nvme.md §9, checked against a model: for every key,
 * after any sequence of stores, deletes, evictions, drops and restarts
 * (SIGTERM or SIGKILL; recovery in the foreground or in the background,
 * with clients served while it runs), a load returns the newest bytes
 * committed under the key, or a miss.
 *
 * A seeded random sequence of those operations runs against a real
 * kvtierd on a real spill file, with a model of the newest committed
 * version of each key: a store that was answered 0 commits a new version,
 * a DELETE answered (whatever it says existed) and a drop leave none, a
 * store or delete refused (-EAGAIN) changes nothing.  Every block's bytes
 * name its key and its version (block_pattern), so a load returning
 * anything but the newest version fails, and says which one it got.
 * Write-back is at once after some restarts (copies on disk soon) and at
 * the default watermarks after others (the newest version often in host
 * memory only).  Four ballast namespaces bind the first regions of the
 * spill file before the model's namespace does: recovery reads those
 * 256 MiB first, so that in the background the operations after a restart
 * meet keys the scan has not reached yet.
 *
 * 400 steps by default, 4000 with KVT_LONG=1 (KVT_STEPS sets any number).
 * The seed is printed; KVT_SEED replays it.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define KEYS 32u
#define BYTES 4096u
#define BALLAST 4u
#define MAX_VERSIONS 4096u /* remembered per run, to name a wrong one */

static struct daemon d;
static kvt_client *c;
static kvt_ns *ns;
static uint8_t keys[KEYS][KVT_KEY_BYTES];
static uint32_t newest[KEYS]; /* 0: no committed block */
static uint32_t next_version = 1;
static uint32_t version_key[MAX_VERSIONS]; /* each version's key */
static uint64_t rng;
static bool background, quick_writeback;
static struct {
	uint64_t stores, deferred, deletes, loads, hits, evicts, drops, kills, stops;
	uint64_t during_recovery;
} n;

static uint64_t rnd(uint64_t k)
{
	rng = mix(rng);
	return rng % k;
}

static void write_config(char *buf, size_t size)
{
	snprintf(buf, size,
		 "[pool]\ncapacity = 16M\nextent_size = 4M\n"
		 "[nvme]\nrecovery = %s\n%s"
		 "[spill.a]\npath = @DIR@/spill0\ncapacity = 448M\n",
		 background ? "background" : "foreground",
		 quick_writeback ? "writeback_high = 0%\nwriteback_low = 0%\n" : "");
}

static void connect_model(void)
{
	c = client_connect(&d, "model");
	ns = small_ns(c, "newest");
}

static void disconnect(void)
{
	kvt_ns_close(ns);
	kvt_client_free(c);
	ns = NULL;
	c = NULL;
}

static bool recovering(void)
{
	return background && stat_get(c, "recovery", "running") != 0;
}

/* The version whose bytes buf holds, 0 when none stored under key k. */
static uint32_t version_of(uint32_t k, const uint8_t *buf)
{
	uint8_t *want = malloc(BYTES);
	uint32_t found = 0;

	CHECK(want, "out of memory");
	for (uint32_t v = 1; v < next_version && v < MAX_VERSIONS && !found; v++) {
		if (version_key[v] != k)
			continue;
		block_pattern(want, BYTES, v, keys[k]);
		if (!memcmp(want, buf, BYTES))
			found = v;
	}
	free(want);
	return found;
}

static void op_store(uint32_t k)
{
	uint8_t *buf = malloc(BYTES);
	uint32_t v = next_version++;
	int32_t st = 0;

	CHECK(buf && v < MAX_VERSIONS, "out of memory or versions");
	version_key[v] = k;
	block_pattern(buf, BYTES, v, keys[k]);
	const void *src = buf;
	int r = kvt_store(ns, 0, keys[k], 1, &src, &st);
	CHECK(r >= 0, "store: %s", strerror(-r));
	/* -EAGAIN: an older copy may still be on NVMe; -ENOSPC: no room. */
	CHECK(st == 0 || st == -EEXIST || st == -EAGAIN || st == -ENOSPC, "key %u: store status %d",
	      k, st);
	if (st == 0)
		newest[k] = v;
	n.stores += st == 0;
	n.deferred += st == -EAGAIN;
	free(buf);
}

static void op_delete(uint32_t k)
{
	int r = kvt_delete(ns, keys[k], 1);

	CHECK(r == 0 || r == 1 || r == -EAGAIN, "key %u: delete: %d", k, r);
	if (r >= 0) {
		newest[k] = 0;
		n.deletes++;
	} else {
		n.deferred++;
	}
}

/* Keys [k, k + m): each a miss or its newest version. */
static void op_load(uint32_t k, uint32_t m)
{
	uint8_t *bufs = malloc((size_t)m * BYTES), *want = malloc(BYTES);
	void *dsts[KEYS];
	int32_t st[KEYS];

	CHECK(bufs && want, "out of memory");
	for (uint32_t i = 0; i < m; i++)
		dsts[i] = bufs + (size_t)i * BYTES;
	load_staged(ns, keys[k], m, dsts, st);
	for (uint32_t i = 0; i < m; i++) {
		n.loads++;
		if (st[i] != 0)
			continue;
		n.hits++;
		uint32_t key = k + i, v = newest[key];
		if (v)
			block_pattern(want, BYTES, v, keys[key]);
		if (!v || memcmp(bufs + (size_t)i * BYTES, want, BYTES)) {
			char got[48], is[48];
			uint32_t g = version_of(key, bufs + (size_t)i * BYTES);
			snprintf(got, sizeof(got), g ? "version %u" : "bytes of no version of it", g);
			snprintf(is, sizeof(is), v ? "version %u" : "none (deleted or never stored)", v);
			CHECK(0, "key %u: a load returned %s; the newest committed is %s%s", key, got, is,
			      recovering() ? " (recovery running)" : "");
		}
	}
	free(bufs);
	free(want);
}

/* ADMIN_EVICT of the model's namespace: from host memory (blocks also on
 * NVMe stay there), or from every tier. */
static void op_evict(bool drop)
{
	kvt_ns_info info;

	CHECK(kvt_ns_get_info(ns, &info) == 0, "ns info");
	int64_t r = kvt_admin_evict(c, (uint32_t)stat_get(c, "tenant", "id"), info.ns_id, drop);
	if (drop && r == -EAGAIN) {
		n.deferred++; /* recovery runs: dropped nothing */
		return;
	}
	CHECK(r >= 0, "admin evict (drop %d): %s", drop, strerror((int)-r));
	if (drop) {
		memset(newest, 0, sizeof(newest));
		n.drops++;
	} else {
		n.evicts++;
	}
}

static void restart(void)
{
	char config[512];
	bool kill9 = rnd(2);

	disconnect();
	if (kill9) {
		daemon_kill(&d);
		n.kills++;
	} else {
		daemon_stop(&d);
		n.stops++;
	}
	background = rnd(3) != 0;
	quick_writeback = rnd(2);
	write_config(config, sizeof(config));
	daemon_restart(&d, config);
	connect_model();
	/* Right away, while a background recovery has most likely not
	 * reached the model's keys: stores and deletes of keys on disk. */
	n.during_recovery += background && stat_get(c, "recovery", "running") ? 12 : 0;
	for (int i = 0; background && i < 12; i++) {
		uint32_t k = (uint32_t)rnd(KEYS);
		if (rnd(10) < 6)
			op_store(k);
		else if (rnd(2))
			op_delete(k);
		else
			op_load(k, 1);
	}
}

/* The ballast: one block in each of BALLAST namespaces, each binding a
 * region of its own before the model's namespace binds one. */
static void ballast(void)
{
	uint8_t *buf = calloc(1, BYTES);
	char model[32];

	CHECK(buf, "out of memory");
	for (uint32_t i = 0; i < BALLAST; i++) {
		snprintf(model, sizeof(model), "ballast-%u", i);
		kvt_ns *b = small_ns(c, model);
		uint8_t key[KVT_KEY_BYTES];
		int32_t st = 0;
		const void *src = buf;
		token_key(0xba11, i, key);
		CHECK(kvt_store(b, 0, key, 1, &src, &st) >= 0 && st == 0, "ballast store %d", st);
		WAIT_FOR(stat_get(c, "daemon", "nvme_writes") >= i + 1, "ballast write-back");
		kvt_ns_close(b);
	}
	free(buf);
}

int main(void)
{
	const char *seed_env = getenv("KVT_SEED"), *steps_env = getenv("KVT_STEPS");
	uint64_t seed = seed_env && *seed_env ? strtoull(seed_env, NULL, 0)
					      : (uint64_t)time(NULL) * 1000003u ^ (uint64_t)getpid();
	uint32_t steps = steps_env && *steps_env ? (uint32_t)strtoul(steps_env, NULL, 0)
			 : getenv("KVT_LONG")             ? 4000
							  : 400;
	char config[512];

	fprintf(stderr, "test-newest: seed %" PRIu64 " (KVT_SEED=%" PRIu64 " replays it), %u steps\n",
		seed, seed, steps);
	rng = seed;
	for (uint32_t k = 0; k < KEYS; k++)
		token_key(0x9e57, k, keys[k]);

	quick_writeback = true;
	write_config(config, sizeof(config));
	daemon_start(&d, config);
	connect_model();
	ballast();

	for (uint32_t step = 0; step < steps; step++) {
		uint32_t k = (uint32_t)rnd(KEYS), what = (uint32_t)rnd(100);
		if (background && stat_get(c, "recovery", "running"))
			n.during_recovery++;
		if (what < 30)
			op_store(k);
		else if (what < 42)
			op_delete(k);
		else if (what < 82)
			op_load(k, 1 + (uint32_t)rnd(KEYS - k < 8 ? KEYS - k : 8));
		else if (what < 88)
			op_evict(false);
		else if (what < 90)
			op_evict(true);
		else if (what < 96)
			restart();
		else
			op_load(0, KEYS);
	}
	/* Once recovery is over, every key once more. */
	WAIT_FOR(!recovering(), "recovery to end");
	op_load(0, KEYS);
	printf("%u steps: %llu stores, %llu deferred (-EAGAIN), %llu deletes, %llu evictions, %llu drops, %llu SIGKILL and %llu SIGTERM restarts, %llu operations begun while recovery ran; %llu of %llu loads hit, each the newest version\n",
	       steps, (unsigned long long)n.stores, (unsigned long long)n.deferred,
	       (unsigned long long)n.deletes, (unsigned long long)n.evicts,
	       (unsigned long long)n.drops, (unsigned long long)n.kills,
	       (unsigned long long)n.stops, (unsigned long long)n.during_recovery,
	       (unsigned long long)n.hits, (unsigned long long)n.loads);
	disconnect();
	daemon_stop(&d);
	char path[300];
	snprintf(path, sizeof(path), "%s/spill0", d.dir);
	unlink(path);
	daemon_cleanup(&d);
	return 0;
}
