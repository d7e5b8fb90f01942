/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Each attempt at a block of two tensor-parallel shards has a deadline of
 * its own, [limits] partial_block_ms after its own first shard: an
 * attempt that completed, its key then deleted, leaves nothing behind that
 * could drop the next attempt at the key before that attempt's deadline.
 * And no block is ever served with shards of two attempts: a late shard of
 * an attempt that was dropped commits as -ECANCELED, and the bytes read
 * back are each shard's of the attempt that completed.  An attempt whose
 * deadline the daemon has no memory to keep is dropped at its first
 * commit.
 *
 * No step is timed.  Attempt 1 is committed in one request, so it is never
 * partial across an expiry.  The limit is then raised by SIGHUP to an hour,
 * so attempt 2 cannot reach its own deadline during the test; a retention
 * that lapses later than attempt 1's deadline would have been (the daemon
 * sweeps both once a second, retentions first) shows when that deadline
 * has passed and been swept.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "shard-attempts.h"

#define LIMIT_MS 3000
/* Whole seconds of the retention: it lapses at a sweep whose second is
 * past its end, after LIMIT_MS from any moment before it was set. */
#define WITNESS_S (LIMIT_MS / 1000 + 1)


/* No memory for the record of an attempt at its first commit (the fault
 * site partial): it could have no deadline, so it goes at once, as if the
 * shard had failed, and the next attempt is whole. */
static void no_record(void)
{
	struct daemon d;
	uint8_t k[32];

	setenv("KVTIERD_FAULTS", "partial=1", 1);
	daemon_start(&d, NULL);
	unsetenv("KVTIERD_FAULTS");
	kvt_client *c = client_connect(&d, "ranks");
	kvt_ns *ns = engine_ns(c, "tiny", 2);
	CHECK(engine_keys(39, 16, 0, 0, k, 1) == 1, "key");

	kvt_slot_ref a5[2];
	reserve_written(ns, 0, k, 5, &a5[0]);
	reserve_written(ns, 1, k, 5, &a5[1]);
	int32_t st = commit_one(c, &a5[0]);
	CHECK(st == -ECANCELED, "the first shard without a record: got %d", st);
	CHECK(daemon_log_contains(&d, "Fault injected: partial call 1"), "the fault fired");
	CHECK(state_of(ns, k) == KVT_MISS, "dropped: a miss");
	CHECK(stat_sum(c, "namespace", "aborts") == 1, "counted as an abort");
	st = commit_one(c, &a5[1]);
	CHECK(st == -ECANCELED, "the other shard: got %d", st);
	store_whole(c, ns, k, 6);
	check_block(c, ns, k, 6);
	CHECK(stat_sum(c, "namespace", "reserved") == 0, "no block left reserved");

	kvt_ns_close(ns);
	kvt_client_free(c);
	daemon_stop(&d);
	daemon_cleanup(&d);
}

int main(void)
{
	struct daemon d;
	uint8_t keys[4 * 32];
	char config[64];

	snprintf(config, sizeof(config), "[limits]\npartial_block_ms = %u\n", LIMIT_MS);
	daemon_start(&d, config);
	kvt_client *c = client_connect(&d, "ranks");
	kvt_ns *ns = engine_ns(c, "tiny", 2);
	CHECK(engine_keys(37, 4 * 16, 0, 0, keys, 4) == 4, "keys");
	const uint8_t *k = keys, *mixed = keys + 32, *witness = keys + 64, *left = keys + 96;

	store_whole(c, ns, witness, 9);

	/* Attempt 1 at k: whole, read back, deleted. */
	store_whole(c, ns, k, 1);
	CHECK(kvt_retain(ns, witness, 1, 90, WITNESS_S) == 1, "the witness's retention");
	check_block(c, ns, k, 1);
	CHECK(kvt_delete(ns, k, 1) == 1, "delete k");
	CHECK(state_of(ns, k) == KVT_MISS, "deleted");

	daemon_rewrite_config(&d, "[limits]\npartial_block_ms = 3600000\n");
	kill(d.pid, SIGHUP);
	WAIT_FOR(daemon_log_contains(&d, "changed: [limits] partial_block_ms"), "the reload");

	/* Attempt 2: its first shard now, its second after attempt 1's
	 * deadline has passed and been swept. */
	kvt_slot_ref a2[2];
	reserve_written(ns, 0, k, 2, &a2[0]);
	reserve_written(ns, 1, k, 2, &a2[1]);
	CHECK(commit_one(c, &a2[0]) == 0, "shard 0 of attempt 2");
	CHECK(state_of(ns, k) == KVT_PENDING, "half of attempt 2 is not visible");
	WAIT_FOR(stat_sum(c, "namespace", "lapsed") == 1, "a sweep past attempt 1's deadline");
	CHECK(stat_sum(c, "namespace", "partial_drops") == 0,
	      "attempt 2 dropped before its own deadline");
	CHECK(state_of(ns, k) == KVT_PENDING, "attempt 2 still waits for its second shard");
	int32_t st = commit_one(c, &a2[1]);
	CHECK(st == 0, "shard 1 of attempt 2: got %d", st);
	check_block(c, ns, k, 2);

	/* Two attempts at once: attempt 3 is deleted after its first shard
	 * while its second is still being written, and attempt 4 stores the
	 * key meanwhile.  Attempt 3's late shard goes nowhere. */
	kvt_slot_ref a3[2], a4[2];
	reserve_written(ns, 0, mixed, 3, &a3[0]);
	reserve_written(ns, 1, mixed, 3, &a3[1]);
	CHECK(commit_one(c, &a3[0]) == 0, "shard 0 of attempt 3");
	CHECK(kvt_delete(ns, mixed, 1) == 1, "delete the key of attempt 3");
	reserve_written(ns, 0, mixed, 4, &a4[0]);
	reserve_written(ns, 1, mixed, 4, &a4[1]);
	CHECK(commit_one(c, &a4[0]) == 0, "shard 0 of attempt 4");
	st = commit_one(c, &a3[1]);
	CHECK(st == -ECANCELED, "the late shard of attempt 3: got %d", st);
	CHECK(state_of(ns, mixed) == KVT_PENDING, "attempt 4 waits for its own second shard");
	CHECK(commit_one(c, &a4[1]) == 0, "shard 1 of attempt 4");
	check_block(c, ns, mixed, 4);

	CHECK(stat_sum(c, "namespace", "partial_drops") == 0, "nothing dropped");
	CHECK(stat_sum(c, "namespace", "reserved") == 0, "no block left reserved");

	/* Stopped with an attempt half committed, its other shard reserved:
	 * a clean exit (the sanitizer build checks for leaks). */
	kvt_slot_ref a7[2];
	reserve_written(ns, 0, left, 7, &a7[0]);
	reserve_written(ns, 1, left, 7, &a7[1]);
	CHECK(commit_one(c, &a7[0]) == 0, "shard 0 of attempt 7");
	daemon_stop(&d);
	kvt_ns_close(ns);
	kvt_client_free(c);
	daemon_cleanup(&d);
	no_record();
	return 0;
}
