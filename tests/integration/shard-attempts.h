/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Attempts at a block of two tensor-parallel shards, for the tests of
 * partial blocks: each shard's bytes name its key, its attempt and its
 * shard, so that a block mixing two attempts never compares equal.
 */
#pragma once

#include <stdlib.h>
#include <string.h>

#include "harness.h"

/* The bytes of one shard of one attempt. */
static inline uint32_t tag_of(uint32_t attempt, uint32_t shard)
{
	return attempt << 8 | shard;
}

static inline void reserve_written(kvt_ns *ns, uint32_t shard, const uint8_t *key, uint32_t attempt,
			    kvt_slot_ref *ret)
{
	CHECK(kvt_reserve(ns, shard, key, 1, ret) == 1, "reserve shard %u: %d", shard, ret->status);
	block_pattern(ret->ptr, ret->bytes, tag_of(attempt, shard), key);
}

static inline int32_t commit_one(kvt_client *c, kvt_slot_ref *r)
{
	uint8_t ok = 1;
	int32_t st;

	CHECK(kvt_commit(c, &r->handle, &ok, 1, &st) == 0, "commit call");
	return st;
}

/* Both shards of an attempt, committed in one request. */
static inline void store_whole(kvt_client *c, kvt_ns *ns, const uint8_t *key, uint32_t attempt)
{
	kvt_slot_ref r[2];
	uint64_t h[2];
	uint8_t ok[2] = {1, 1};
	int32_t st[2];

	for (uint32_t shard = 0; shard < 2; shard++) {
		reserve_written(ns, shard, key, attempt, &r[shard]);
		h[shard] = r[shard].handle;
	}
	CHECK(kvt_commit(c, h, ok, 2, st) == 0 && st[0] == 0 && st[1] == 0,
	      "both shards of attempt %u: %d %d", attempt, st[0], st[1]);
}

static inline uint8_t state_of(kvt_ns *ns, const uint8_t *key)
{
	uint8_t st = 0xff;

	CHECK(kvt_lookup(ns, key, 1, 0, &st) >= 0, "lookup");
	return st;
}

/* The block of key is visible, and each of its shards holds that
 * shard's bytes of attempt. */
static inline void check_block(kvt_client *c, kvt_ns *ns, const uint8_t *key, uint32_t attempt)
{
	CHECK(state_of(ns, key) == KVT_HOST, "attempt %u visible", attempt);
	for (uint32_t shard = 0; shard < 2; shard++) {
		kvt_slot_ref r;
		CHECK(kvt_acquire(ns, shard, key, 1, &r) == 1, "acquire shard %u", shard);
		uint8_t *want = malloc(r.bytes);
		CHECK(want, "out of memory");
		block_pattern(want, r.bytes, tag_of(attempt, shard), key);
		CHECK(!memcmp(r.ptr, want, r.bytes), "shard %u holds attempt %u's bytes", shard,
		      attempt);
		free(want);
		CHECK(kvt_release(c, &r.handle, 1, NULL) == 0, "release");
	}
}
