/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A ghost list: the fingerprints of blocks a policy evicted, remembered a
 * while so that a block stored again soon after can be told apart from a
 * new one (S3-FIFO keeps one, ARC two).  A fingerprint put when W entries
 * are listed is remembered until W fingerprints in all have been put after
 * it: the ghost is about as long as the cache.
 *
 * An open-addressing table whose slots carry the sequence number at which
 * they expire, so expiry needs no FIFO of its own; rebuilt when tombstones
 * and expired slots fill it.  At most about 64 bytes per listed entry;
 * when it cannot grow, a fingerprint is not remembered, which costs hits,
 * never correctness.  Fingerprints are placed by a keyed hash (keyhash.h),
 * so a run of them that a client aimed at one slot spreads like any other.
 * Pure: no I/O.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

struct keyhash;

struct evict_ghost_slot {
	uint64_t fp;
	uint64_t expire; /* 0: empty; 1: taken back (a tombstone) */
};

struct evict_ghost {
	const struct keyhash *hash; /* where a fingerprint probes from */
	struct evict_ghost_slot *slots;
	uint64_t cap;  /* slots, a power of two, or 0 */
	uint64_t used; /* slots not empty */
	uint64_t seq;  /* fingerprints put so far */
};

/* Empty; hash is the caller's and outlives g.  The table is allocated on
 * the first put. */
void evict_ghost_init(struct evict_ghost *g, const struct keyhash *hash);
/* Frees the table: g is empty again, and may be used again. */
void evict_ghost_done(struct evict_ghost *g);
/* Remember fp until window more fingerprints have been put. */
void evict_ghost_put(struct evict_ghost *g, uint64_t fp, uint64_t window);
/* Whether fp was remembered; it is forgotten either way. */
bool evict_ghost_take(struct evict_ghost *g, uint64_t fp);
