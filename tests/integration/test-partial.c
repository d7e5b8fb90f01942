/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A block of two tensor-parallel shards whose second is never committed
 * (a rank that skipped its store) does not stay reserved: it is dropped
 * [limits] partial_block_ms after its first shard, its slot freed, and a
 * new store of the key starts a fresh block.  One whose shards all come in
 * time is stored; a reservation still open at the drop commits as
 * -ECANCELED, and nothing of the dropped attempt is ever served.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static void write_shard(kvt_slot_ref *r, uint32_t tag, const uint8_t *key)
{
	block_pattern(r->ptr, r->bytes, tag, key);
}

static int reserve_commit(kvt_client *c, kvt_ns *ns, uint32_t shard, const uint8_t *key,
			  uint32_t tag)
{
	kvt_slot_ref r;
	int32_t st;
	uint8_t ok = 1;

	CHECK(kvt_reserve(ns, shard, key, 1, &r) == 1, "reserve shard %u: %d", shard, r.status);
	write_shard(&r, tag, key);
	CHECK(kvt_commit(c, &r.handle, &ok, 1, &st) == 0, "commit call");
	return st;
}

static uint8_t state_of(kvt_ns *ns, const uint8_t *key)
{
	uint8_t st = 0xff;
	CHECK(kvt_lookup(ns, key, 1, 0, &st) >= 0, "lookup");
	return st;
}

int main(void)
{
	struct daemon d;
	uint8_t keys[3 * 32];

	daemon_start(&d, "[limits]\npartial_block_ms = 300\n");
	kvt_client *c = client_connect(&d, "ranks");
	kvt_ns *ns = engine_ns(c, "tiny", 2);
	CHECK(engine_keys(71, 3 * 16, 0, 0, keys, 3) == 3, "keys");
	const uint8_t *k0 = keys, *k1 = keys + 32, *k2 = keys + 64;

	/* k0: rank 0 commits, rank 1 never comes. */
	CHECK(reserve_commit(c, ns, 0, k0, 1) == 0, "shard 0 of k0");
	CHECK(state_of(ns, k0) == KVT_PENDING, "half a block is not visible");
	/* k1: rank 0 commits, rank 1 reserves and is still writing. */
	CHECK(reserve_commit(c, ns, 0, k1, 1) == 0, "shard 0 of k1");
	kvt_slot_ref open1;
	CHECK(kvt_reserve(ns, 1, k1, 1, &open1) == 1, "shard 1 of k1 reserved");
	/* k2: both ranks, in time. */
	CHECK(reserve_commit(c, ns, 0, k2, 1) == 0 && reserve_commit(c, ns, 1, k2, 1) == 0,
	      "both shards of k2");
	CHECK(state_of(ns, k2) == KVT_HOST, "a whole block is visible");

	WAIT_FOR(stat_sum(c, "namespace", "partial_drops") == 2, "two partial blocks dropped");
	CHECK(state_of(ns, k0) == KVT_MISS && state_of(ns, k1) == KVT_MISS, "dropped: misses");
	CHECK(state_of(ns, k2) == KVT_HOST, "the whole block stays");
	CHECK(stat_sum(c, "namespace", "reserved") == 0, "no block left reserved");
	write_shard(&open1, 1, k1);
	uint8_t ok = 1;
	int32_t st;
	CHECK(kvt_commit(c, &open1.handle, &ok, 1, &st) == 0 && st == -ECANCELED,
	      "the late shard of a dropped block: -ECANCELED, got %d", st);

	/* A new attempt at k0 starts a fresh block, made of its own shards. */
	CHECK(reserve_commit(c, ns, 0, k0, 2) == 0 && reserve_commit(c, ns, 1, k0, 2) == 0,
	      "k0 again, both shards");
	CHECK(state_of(ns, k0) == KVT_HOST, "k0 stored");
	for (uint32_t shard = 0; shard < 2; shard++) {
		kvt_slot_ref r;
		CHECK(kvt_acquire(ns, shard, k0, 1, &r) == 1, "acquire shard %u", shard);
		uint8_t *want = malloc(r.bytes);
		CHECK(want, "oom");
		block_pattern(want, r.bytes, 2, k0);
		CHECK(!memcmp(r.ptr, want, r.bytes), "shard %u holds the new attempt's bytes", shard);
		free(want);
		CHECK(kvt_release(c, &r.handle, 1, NULL) == 0, "release");
	}
	CHECK(stat_sum(c, "namespace", "partial_drops") == 2, "nothing else dropped");

	kvt_ns_close(ns);
	kvt_client_free(c);
	daemon_stop(&d);
	daemon_cleanup(&d);
	return 0;
}
