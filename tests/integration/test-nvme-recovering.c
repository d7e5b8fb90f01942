/* SPDX-License-Identifier: Apache-2.0 */
/*
 * [nvme] recovery = background: clients are served while the spill files
 * are recovered.  A spill file of N blocks, the daemon restarted on it with
 * a host pool far smaller than N, and a client that connects at once and,
 * while recovery may still run:
 *   - loads every block: each load returns the bytes first stored or is a
 *     miss, never other bytes;
 *   - stores new bytes under keys that are on disk, the last ones recovery
 *     reaches: while recovery runs, no new block is accepted (-EAGAIN:
 *     were it committed and the daemon killed, the older copy recovery
 *     had not reached yet would come back), and a key recovery found
 *     answers -EEXIST and keeps its bytes;
 *   - deletes while recovery runs are refused (-EAGAIN) for the same
 *     reason;
 *   - loads every block: each load returns the bytes first stored or is a
 *     miss, never other bytes.
 * Once the "recovery" record says it is over (waited for, never timed),
 * every block hits with its bytes, and a delete and a fresh store of one
 * are accepted again.  Last, the daemon is stopped (SIGTERM) as soon as
 * it listens, while recovery reads: it exits 0.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define N 40000u     /* blocks on disk: 5 regions of 4 KiB blocks */
#define NEW 6000u    /* keys stored anew, from the end */
#define BATCH 512u
#define BYTES 4096u

static uint8_t keys[N][KVT_KEY_BYTES];
static int32_t status[N];
static bool fresh[N];

static uint64_t stat_of(const struct daemon *d, const char *kind, const char *field)
{
	kvt_client *c = client_connect(d, "checker");
	uint64_t v = stat_get(c, kind, field);
	kvt_client_free(c);
	return v;
}

/* Blocks [from, to) with pattern tag; their statuses in status[]. */
static void store(kvt_ns *ns, uint32_t from, uint32_t to, uint32_t tag, uint8_t *bufs)
{
	const void *srcs[BATCH];
	for (uint32_t i = from; i < to; i += BATCH) {
		uint32_t n = to - i < BATCH ? to - i : BATCH;
		for (uint32_t k = 0; k < n; k++) {
			block_pattern(bufs + (size_t)k * BYTES, BYTES, tag, keys[i + k]);
			srcs[k] = bufs + (size_t)k * BYTES;
		}
		int r = kvt_store(ns, 0, keys[i], n, srcs, status + i);
		CHECK(r >= 0, "store: %s", strerror(-r));
	}
}

/* Load [i, i + n) into bufs: st[] per key. */
static void load_batch(kvt_ns *ns, uint32_t i, uint32_t n, uint8_t *bufs, int32_t *st)
{
	void *dsts[BATCH];

	for (uint32_t k = 0; k < n; k++)
		dsts[k] = bufs + (size_t)k * BYTES;
	load_staged(ns, keys[i], n, dsts, st);
}

/* Load every block: each is a miss or the bytes it should hold.
 * \return the hits among the blocks not stored anew */
static uint32_t load_all(kvt_ns *ns, uint8_t *bufs, uint8_t *want)
{
	int32_t st[BATCH];
	uint32_t hits = 0;

	for (uint32_t i = 0; i < N; i += BATCH) {
		uint32_t n = N - i < BATCH ? N - i : BATCH;
		load_batch(ns, i, n, bufs, st);
		for (uint32_t k = 0; k < n; k++) {
			if (st[k] != 0)
				continue;
			block_pattern(want, BYTES, fresh[i + k] ? 2 : 1, keys[i + k]);
			CHECK(!memcmp(bufs + (size_t)k * BYTES, want, BYTES), "block %u: %s bytes",
			      i + k, fresh[i + k] ? "older bytes over a newer store, or wrong" : "wrong");
			hits += !fresh[i + k];
		}
	}
	return hits;
}

int main(void)
{
	struct daemon d;
	char config[512];
	uint8_t *bufs = malloc((size_t)BATCH * BYTES), *want = malloc(BYTES);

	CHECK(bufs && want, "out of memory");
	for (uint32_t i = 0; i < N; i++)
		token_key(0x5ec0, i, keys[i]);

	/* Every block reaches the file: a pool that holds them all, write-back
	 * at once. */
	snprintf(config, sizeof(config),
		 "[pool]\ncapacity = 192M\nextent_size = 64M\n"
		 "[nvme]\nwriteback_high = 0%%\nwriteback_low = 0%%\nrecovery = background\n"
		 "[spill.a]\npath = @DIR@/spill0\ncapacity = 448M\n"
		 "[limits]\nkeys_per_request = %u\n", BATCH);
	daemon_start(&d, config);
	kvt_client *c = client_connect(&d, "writer");
	kvt_ns *ns = small_ns(c, "recovering");
	store(ns, 0, N, 1, bufs);
	for (uint32_t i = 0; i < N; i++)
		CHECK(status[i] == 0, "block %u stored (%d)", i, status[i]);
	WAIT_FOR(stat_of(&d, "daemon", "nvme_blocks") >= N &&
			 stat_of(&d, "daemon", "nvme_in_flight") == 0,
		 "every block on disk");
	CHECK(stat_of(&d, "daemon", "nvme_dirty_drops") == 0, "none dropped on the way");
	kvt_ns_close(ns);
	kvt_client_free(c);
	daemon_stop(&d);

	/* Restarted with room for 2048 blocks: the client's new blocks are
	 * dropped from host memory while recovery runs. */
	snprintf(config, sizeof(config),
		 "[pool]\ncapacity = 8M\nextent_size = 8M\n"
		 "[nvme]\nwriteback_high = 0%%\nwriteback_low = 0%%\nrecovery = background\n"
		 "[spill.a]\npath = @DIR@/spill0\ncapacity = 448M\n"
		 "[limits]\nkeys_per_request = %u\n", BATCH);
	daemon_restart(&d, config);
	c = client_connect(&d, "early");
	ns = small_ns(c, "recovering");
	uint64_t running = stat_get(c, "recovery", "running");
	store(ns, N - NEW, N, 2, bufs);
	uint32_t refused = 0;
	for (uint32_t i = N - NEW; i < N; i++) {
		/* -ENOSPC: host memory full of blocks being read. */
		CHECK(status[i] == -EAGAIN || status[i] == -EEXIST || status[i] == -ENOSPC,
		      "block %u: store status %d while recovering", i, status[i]);
		refused += status[i] == -EAGAIN;
	}
	int del = kvt_delete(ns, keys[N - 1], 1);
	uint64_t still = stat_get(c, "recovery", "running");
	CHECK(del == -EAGAIN || (!still && del == 1), "delete while recovering: %d", del);
	uint32_t deleted = del == 1;
	uint32_t early_hits = load_all(ns, bufs, want);
	printf("connected %s recovery: %u hits while loading, %u of %u stores deferred\n",
	       running ? "during" : "after", early_hits, refused, NEW);

	WAIT_FOR(stat_get(c, "recovery", "running") == 0, "recovery to be reported complete");
	CHECK(stat_get(c, "recovery", "regions") == stat_get(c, "recovery", "regions_total"),
	      "every region parsed");
	uint64_t recovered = stat_get(c, "daemon", "nvme_recovered");
	CHECK(recovered == N, "%llu blocks recovered, %u expected", (unsigned long long)recovered,
	      N);
	uint32_t hits = load_all(ns, bufs, want);
	CHECK(hits == N - deleted, "%u of the %u recovered blocks hit after recovery", hits,
	      N - deleted);
	/* Recovery over: a delete, then a fresh store under the same key. */
	if (!deleted)
		CHECK(kvt_delete(ns, keys[N - 1], 1) == 1, "delete after recovery");
	store(ns, N - 1, N, 2, bufs);
	CHECK(status[N - 1] == 0, "store after the delete: %d", status[N - 1]);
	fresh[N - 1] = true;
	CHECK(load_all(ns, bufs, want) == N - 1, "every block hits, the new one with its bytes");
	kvt_ns_close(ns);
	kvt_client_free(c);
	daemon_stop(&d);
	CHECK(!daemon_log_contains(&d, "left allocated"), "I/O left to the kernel at shutdown");

	/* Stopped while recovery's reads are in flight: a clean exit (the
	 * harness checks status 0), every buffer freed once. */
	for (int i = 0; i < 3; i++) {
		daemon_restart(&d, config);
		daemon_stop(&d);
	}
	char path[300];
	snprintf(path, sizeof(path), "%s/spill0", d.dir);
	unlink(path);
	daemon_cleanup(&d);
	free(bufs);
	free(want);
	return 0;
}
