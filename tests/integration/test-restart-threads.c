/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One client shared by threads, as an engine's scheduler and workers share
 * it, while kvtierd is SIGKILLed and restarted again and again on the same
 * socket.  The library reconnects by itself underneath the threads:
 *
 *   reader  stores a block, leases it and reads it in place, checking
 *           every byte, for as long as its lease lasts: every lease it
 *           holds when the daemon is killed must keep its bytes until it
 *           is released (the release then succeeds here: the daemon that
 *           knew it is gone);
 *   writer  reserves a block and writes it in pieces; every other
 *           reservation is held across a restart, and its commit must say
 *           -ESTALE (the block was not stored) rather than reach the new
 *           daemon, where the same handle may name another block;
 *   loader  stores and loads blocks: every load is either the exact bytes
 *           or a miss.
 *
 * The main thread kills the daemon only while the reader holds a lease and
 * the writer a half-written reservation, so every restart falls inside
 * both.  At the end every handle has been given back, the client maps
 * exactly what a new client maps (no mapping of a dead daemon is left),
 * and once freed it leaves no mapping of the pool and no descriptor.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define ROUNDS 15
#define LOAD_BATCH 4
#define PIECES 8

enum { TAG_READER = 1, TAG_WRITER = 2, TAG_LOADER = 3 };

static struct daemon d;
static kvt_client *c;
static kvt_ns *ns;
static uint64_t shard_bytes;

/* Restarts the client has come through (it answered the new daemon). */
static atomic_int round_no;
static atomic_bool stop;
/* The round in which the reader holds a lease, the writer a half-written
 * reservation; -1 when neither is waiting for a restart. */
static atomic_int reader_round = -1, writer_round = -1;

/* What each thread saw, checked by the main thread at the end. */
static atomic_long wrong_bytes, leases_across, reads_across, stale_commits,
	commits_ok, loads_exact, loads_missed, reserves_bounced;

static long diff_bytes(const uint8_t *a, const uint8_t *b, size_t len)
{
	long n = 0;
	for (size_t i = 0; i < len; i++)
		n += a[i] != b[i];
	return n;
}

static void *reader(void *arg)
{
	uint8_t *want = malloc(shard_bytes);
	CHECK(want, "out of memory");
	for (uint32_t i = 0; !atomic_load(&stop); i++) {
		int r0 = atomic_load(&round_no);
		uint8_t key[32];
		token_key(TAG_READER, i, key);
		block_pattern(want, shard_bytes, TAG_READER, key);
		const void *src[1] = {want};
		kvt_slot_ref ref;
		if (kvt_store(ns, 0, key, 1, src, NULL) != 1 ||
		    kvt_acquire(ns, 0, key, 1, &ref) != 1) {
			usleep(1000); /* the daemon is away: try again */
			continue;
		}
		const uint8_t *p = ref.ptr;
		long bad = diff_bytes(p, want, shard_bytes);
		/* Hold the lease, reading it in place, until the daemon has
		 * been restarted and the client has reconnected.  The main
		 * thread kills only a daemon that was up before this lease
		 * was taken: one whose round is still the current one. */
		atomic_store(&reader_round, r0);
		bool across = false, spans = atomic_load(&round_no) == r0;
		while (atomic_load(&round_no) == r0 && !atomic_load(&stop))
			bad += diff_bytes(p, want, shard_bytes);
		atomic_store(&reader_round, -1);
		if (spans && atomic_load(&round_no) != r0) {
			across = true;
			/* After the reconnect, once more over the whole lease. */
			bad += diff_bytes(p, want, shard_bytes);
			atomic_fetch_add(&reads_across, 1);
		}
		atomic_fetch_add(&wrong_bytes, bad);
		if (bad)
			fprintf(stderr, "reader: %ld bytes of a leased block changed\n", bad);
		int32_t st = 1;
		int r = kvt_release(c, &ref.handle, 1, &st);
		CHECK(r == 0 && st == 0, "release of a lease: %d, status %d", r, st);
		if (across)
			atomic_fetch_add(&leases_across, 1);
	}
	free(want);
	return arg;
}

static void *writer(void *arg)
{
	uint8_t *want = malloc(shard_bytes), *back = malloc(shard_bytes);
	CHECK(want && back, "out of memory");
	for (uint32_t i = 0; !atomic_load(&stop); i++) {
		int r0 = atomic_load(&round_no);
		bool hold = i % 2 == 0;
		uint8_t key[32];
		token_key(TAG_WRITER, i, key);
		block_pattern(want, shard_bytes, TAG_WRITER, key);
		kvt_slot_ref ref;
		if (kvt_reserve(ns, 0, key, 1, &ref) != 1) {
			if (ref.status == -ENOBUFS)
				atomic_fetch_add(&reserves_bounced, 1);
			usleep(1000);
			continue;
		}
		uint8_t *p = ref.ptr;
		size_t piece = shard_bytes / PIECES;
		memcpy(p, want, piece * (PIECES / 2));
		bool across = false;
		if (hold) {
			atomic_store(&writer_round, r0);
			bool spans = atomic_load(&round_no) == r0;
			while (atomic_load(&round_no) == r0 && !atomic_load(&stop))
				usleep(1000);
			atomic_store(&writer_round, -1);
			across = spans && atomic_load(&round_no) != r0;
		}
		for (size_t k = PIECES / 2; k < PIECES; k++)
			memcpy(p + k * piece, want + k * piece,
			       k == PIECES - 1 ? shard_bytes - k * piece : piece);
		uint8_t ok = 1;
		int32_t st = 1;
		int r = kvt_commit(c, &ref.handle, &ok, 1, &st);
		if (across) {
			/* Taken from a daemon that has been killed since. */
			CHECK(r == 0 && st == -ESTALE,
			      "commit of a reservation of a dead daemon: %d, status %d", r, st);
			atomic_fetch_add(&stale_commits, 1);
			continue;
		}
		if (r == 0 && st == 0) {
			atomic_fetch_add(&commits_ok, 1);
			/* Visible with exactly these bytes, or gone with a
			 * daemon killed meanwhile. */
			void *dst[1] = {back};
			int32_t lst;
			if (kvt_load(ns, 0, key, 1, dst, &lst) == 1) {
				long bad = diff_bytes(back, want, shard_bytes);
				atomic_fetch_add(&wrong_bytes, bad);
				if (bad)
					fprintf(stderr, "writer: %ld bytes of a committed block differ\n", bad);
			}
			continue;
		}
		/* The daemon went away before the commit: it may still be
		 * the same daemon, so the reservation is given back. */
		CHECK(r == -ENOTCONN || st == -ESTALE || st == -ENOTCONN,
		      "commit: %d, status %d", r, st);
		if (st != -ESTALE) {
			r = kvt_abort(c, &ref.handle, 1, &st);
			CHECK(r == 0 && st == 0, "abort after a failed commit: %d, status %d", r, st);
		}
	}
	free(want);
	free(back);
	return arg;
}

static void *loader(void *arg)
{
	uint8_t *want = malloc(shard_bytes * LOAD_BATCH);
	uint8_t *back = malloc(shard_bytes * LOAD_BATCH);
	CHECK(want && back, "out of memory");
	for (uint32_t i = 0; !atomic_load(&stop); i++) {
		uint8_t keys[LOAD_BATCH * 32];
		const void *src[LOAD_BATCH];
		void *dst[LOAD_BATCH];
		int32_t st[LOAD_BATCH];
		for (int k = 0; k < LOAD_BATCH; k++) {
			token_key(TAG_LOADER, i * LOAD_BATCH + (uint32_t)k, keys + 32 * k);
			block_pattern(want + k * shard_bytes, shard_bytes, TAG_LOADER,
				      keys + 32 * k);
			src[k] = want + k * shard_bytes;
			dst[k] = back + k * shard_bytes;
		}
		kvt_store(ns, 0, keys, LOAD_BATCH, src, NULL);
		memset(back, 0, shard_bytes * LOAD_BATCH);
		int n = kvt_load(ns, 0, keys, LOAD_BATCH, dst, st);
		CHECK(n >= 0 || n == -ENOTCONN, "load: %d", n);
		for (int k = 0; k < LOAD_BATCH; k++) {
			if (n < 0 || st[k] != 0) {
				atomic_fetch_add(&loads_missed, 1);
				continue;
			}
			long bad = diff_bytes(back + k * shard_bytes, want + k * shard_bytes,
					      shard_bytes);
			atomic_fetch_add(&wrong_bytes, bad);
			if (bad)
				fprintf(stderr, "loader: %ld bytes of a loaded block differ\n", bad);
			atomic_fetch_add(&loads_exact, 1);
		}
		if (n < 0)
			usleep(1000);
	}
	free(want);
	free(back);
	return arg;
}

int main(void)
{
	int fds_before = count_fds(getpid());
	CHECK(pool_mappings() == 0, "no pool mapped before connecting");

	daemon_start(&d, NULL);
	c = client_connect(&d, "threads");
	ns = engine_ns(c, "tiny", 1);
	kvt_ns_info info;
	CHECK(kvt_ns_get_info(ns, &info) == 0, "ns info");
	shard_bytes = info.shard_bytes;

	pthread_t th[3];
	void *(*fn[3])(void *) = {reader, writer, loader};
	for (int i = 0; i < 3; i++)
		CHECK(pthread_create(&th[i], NULL, fn[i], NULL) == 0, "pthread_create");

	for (int k = 0; k < ROUNDS; k++) {
		WAIT_FOR(atomic_load(&reader_round) == k && atomic_load(&writer_round) == k,
			 "a lease and a half-written reservation");
		daemon_kill(&d);
		daemon_restart(&d, NULL);
		WAIT_FOR(kvt_client_ping(c) == 0, "the client to reconnect");
		atomic_store(&round_no, k + 1);
	}
	atomic_store(&stop, true);
	for (int i = 0; i < 3; i++)
		pthread_join(th[i], NULL);

	fprintf(stderr,
		"%d restarts: %ld leases and %ld reservations held across one, "
		"%ld commits, %ld loads exact, %ld missed, %ld reservations refused, "
		"%ld wrong bytes\n",
		ROUNDS, (long)leases_across, (long)stale_commits, (long)commits_ok,
		(long)loads_exact, (long)loads_missed, (long)reserves_bounced,
		(long)wrong_bytes);
	CHECK(wrong_bytes == 0, "%ld wrong bytes", (long)wrong_bytes);
	CHECK(leases_across == ROUNDS && reads_across == ROUNDS,
	      "a lease across every restart: %ld", (long)leases_across);
	CHECK(stale_commits == ROUNDS, "a stale commit per restart: %ld", (long)stale_commits);
	CHECK(loads_exact > 0, "some loads hit");

	/* Every handle given back: none is left in the daemon... */
	CHECK(stat_get(c, "tenant", "handles") == 0, "handles left in the daemon");
	/* ...and the client maps what a new client maps: nothing of a dead
	 * daemon stays mapped once its handles are back. */
	int mine = pool_mappings();
	kvt_client *fresh = client_connect(&d, "fresh");
	int theirs = pool_mappings() - mine;
	kvt_client_free(fresh);
	CHECK(mine == theirs, "the client maps %d pool extents, a new one %d", mine, theirs);

	kvt_ns_close(ns);
	kvt_client_free(c);
	CHECK(pool_mappings() == 0, "pool mappings left after kvt_client_free: %d",
	      pool_mappings());
	CHECK(count_fds(getpid()) == fds_before, "descriptors: %d before, %d after",
	      fds_before, count_fds(getpid()));
	daemon_stop(&d);
	daemon_cleanup(&d);
	return 0;
}
