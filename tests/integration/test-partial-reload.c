/* SPDX-License-Identifier: Apache-2.0 */
/*
 * [limits] partial_block_ms changed by SIGHUP applies to the blocks whose
 * shards are not all committed yet: each one's deadline is its first
 * shard's commit plus the limit in force.  A raised limit gives a pending
 * block longer; a lowered one drops the pending blocks past it, and those
 * whose first shard comes after the reload, without waiting for the
 * deadlines the old limit gave.  A dropped block's late shard commits as
 * -ECANCELED, and the next attempt at its key is a block of its own bytes.
 *
 * The raised case needs the reload to land before the old deadline, a
 * commit, a retention, a file written and a signal after the first shard:
 * the test measures that span, and when a busy machine made it longer
 * than the limit (nothing is then shown either way), it runs the case
 * again on a daemon with a limit 4 and then 16 times longer.  No result
 * depends on a time.  A retention lapsing later than the old deadline (the
 * daemon sweeps retentions and partial blocks once a second, retentions
 * first) shows when that deadline has passed and been swept.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "shard-attempts.h"

#define LIMIT_MS 5000

static void reload(struct daemon *d, uint32_t partial_block_ms)
{
	char config[64];

	snprintf(config, sizeof(config), "[limits]\npartial_block_ms = %u\n", partial_block_ms);
	daemon_rewrite_config(d, config);
	kill(d->pid, SIGHUP);
}

/* A daemon with partial_block_ms = limit_ms, its client and namespace. */
static kvt_ns *start(struct daemon *d, uint32_t limit_ms, kvt_client **ret_c)
{
	char config[64];

	snprintf(config, sizeof(config), "[limits]\npartial_block_ms = %u\n", limit_ms);
	daemon_start(d, config);
	*ret_c = client_connect(d, "ranks");
	return engine_ns(*ret_c, "tiny", 2);
}

/* Raised: the block pending at the reload outlives the old limit.
 * \return false when the reload could not be shown to land before the
 * old deadline (the machine was too slow for limit_ms) */
static bool raised_case(struct daemon *d, kvt_client *c, kvt_ns *ns, uint32_t limit_ms,
			const uint8_t *raised, const uint8_t *witness)
{
	kvt_slot_ref r1[2];

	store_whole(c, ns, witness, 9);
	reserve_written(ns, 0, raised, 1, &r1[0]);
	reserve_written(ns, 1, raised, 1, &r1[1]);
	uint64_t t0 = now_ms();
	CHECK(commit_one(c, &r1[0]) == 0, "shard 0 of the raised block");
	CHECK(kvt_retain(ns, witness, 1, 90, limit_ms / 1000 + 1) == 1, "the witness's retention");
	reload(d, 3600000);
	WAIT_FOR(daemon_log_contains(d, "changed: [limits] partial_block_ms"), "the reload");
	if (now_ms() - t0 >= limit_ms) {
		printf("the reload took %llu ms to land, not under the %u ms limit: again with a longer one\n",
		       (unsigned long long)(now_ms() - t0), limit_ms);
		return false;
	}
	WAIT_FOR(stat_sum(c, "namespace", "lapsed") == 1, "a sweep past the old deadline");
	CHECK(stat_sum(c, "namespace", "partial_drops") == 0,
	      "the pending block dropped on its old deadline");
	CHECK(state_of(ns, raised) == KVT_PENDING, "half a block is not visible");
	int32_t st = commit_one(c, &r1[1]);
	CHECK(st == 0, "shard 1 of the raised block: got %d", st);
	check_block(c, ns, raised, 1);
	return true;
}

int main(void)
{
	struct daemon d;
	uint8_t keys[4 * 32];
	kvt_client *c;
	kvt_ns *ns;

	CHECK(engine_keys(38, 4 * 16, 0, 0, keys, 4) == 4, "keys");
	const uint8_t *raised = keys, *before = keys + 32, *after = keys + 64, *witness = keys + 96;

	for (uint32_t limit = LIMIT_MS;; limit *= 4) {
		ns = start(&d, limit, &c);
		if (raised_case(&d, c, ns, limit, raised, witness))
			break;
		CHECK(limit < 16 * LIMIT_MS, "the reload never landed within %u ms", limit);
		kvt_ns_close(ns);
		kvt_client_free(c);
		daemon_stop(&d);
		daemon_cleanup(&d);
	}

	/* Lowered: a block pending since before the reload (deadline an hour
	 * away under the old limit) and one whose first shard comes after
	 * it go now. */
	kvt_slot_ref b1[2], a1[2];
	reserve_written(ns, 0, before, 1, &b1[0]);
	reserve_written(ns, 1, before, 1, &b1[1]);
	CHECK(commit_one(c, &b1[0]) == 0, "shard 0 of the block pending before");
	reload(&d, 100);
	reserve_written(ns, 0, after, 1, &a1[0]);
	reserve_written(ns, 1, after, 1, &a1[1]);
	CHECK(commit_one(c, &a1[0]) == 0, "shard 0 of the block pending after");
	WAIT_FOR(stat_sum(c, "namespace", "partial_drops") == 2,
		 "both pending blocks to be dropped under the lowered limit");
	CHECK(state_of(ns, before) == KVT_MISS && state_of(ns, after) == KVT_MISS,
	      "dropped: misses");
	int32_t st = commit_one(c, &b1[1]);
	CHECK(st == -ECANCELED, "the late shard of the block pending before: got %d", st);
	st = commit_one(c, &a1[1]);
	CHECK(st == -ECANCELED, "the late shard of the block pending after: got %d", st);

	/* The keys again: blocks of their new attempts' bytes only. */
	store_whole(c, ns, before, 2);
	store_whole(c, ns, after, 2);
	check_block(c, ns, before, 2);
	check_block(c, ns, after, 2);
	check_block(c, ns, raised, 1);
	CHECK(stat_sum(c, "namespace", "partial_drops") == 2, "nothing else dropped");
	CHECK(stat_sum(c, "namespace", "reserved") == 0, "no block left reserved");

	kvt_ns_close(ns);
	kvt_client_free(c);
	daemon_stop(&d);
	daemon_cleanup(&d);
	return 0;
}
