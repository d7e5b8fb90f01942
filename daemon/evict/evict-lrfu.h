/* SPDX-License-Identifier: Apache-2.0 */
/*
 * LRFU-class eviction in O(1): a block's priority is its recency plus a
 * bonus for the log of how often it was requested.  Blocks sit in one LRU
 * queue per level, the level being log2 of the request count (counted by
 * the caller, resident or not: the policy keeps a count sketch); the victim
 * is, over the oldest entry of each level, the one whose age less
 * weight × level is the largest.  Within a level the oldest is the least
 * recent, so this is exact for priority = last use + weight × level, at
 * the cost of a look at each level's tail (EVICT_LRFU_LEVELS of them).
 *
 * Ages are counted on a clock that ticks once per size/EVICT_LRFU_TICKS
 * requests (size: the most entries ever listed), so a level is worth a
 * fixed share of the tier's turnover whatever its size, and a 32-bit
 * stamp per entry lasts 2^32 ticks: an entry older than that looks young
 * again, which costs a wrong victim, never a pinned one.
 *
 * A new block the admission filter refuses goes on a queue of its own
 * that is emptied before any level: it can still be hit (and then joins
 * its level) until the next eviction needs its slot.  This is how the
 * daemon refuses a block without refusing the client's store.
 *
 * The queues are pure: no I/O, no allocation.  The policy (lrfu, its
 * ops in evict-lrfu.c) adds the request counts, in a count sketch keyed
 * by the block's fingerprint; evict-lrfu-admit.c is the same policy with
 * an admission filter, and evict-admit.c runs the bare queues for its
 * shadow tiers.  In an entry, queue is EVICT_Q_MAIN on a level or
 * EVICT_Q_SMALL refused, freq its level, stamp the clock at its last use.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "count-sketch.h"
#include "evict-list.h"

/* Levels 0..3: requested once, 2-3 times, 4-7, 8 or more (the sketch's
 * counters stop at 15). */
#define EVICT_LRFU_LEVELS 4
/* Clock ticks per turnover of the tier (size requests). */
#define EVICT_LRFU_TICKS 64
/* Ticks of age one level is worth: a block requested twice as often
 * survives this much longer.  Half a turnover; from 1/4 to 1 turnover the
 * traces of docs/workload.md move by a few points. */
#define EVICT_LRFU_WEIGHT 32
/* The count sketch: counters per row for each entry the tier can list
 * (32 bytes a block in all), up to the sketch's max_width (2 MiB in all by
 * default, reached at 65 536 entries), so that a large tier's sketch does
 * not grow with it.  With 4 on the Mooncake trace of docs/workload.md the
 * counters fill between halvings and every block looks seen before. */
#define EVICT_SKETCH_COLUMNS 16

struct keyhash;

struct evict_lrfu {
	struct evict_lru level[EVICT_LRFU_LEVELS];
	struct evict_lru refused; /* refused by admission: evicted first */
	uint64_t n;               /* entries on all queues */
	uint64_t size;            /* the most entries ever listed */
	uint64_t refs;            /* requests since the clock last ticked */
	uint32_t clock;
	uint32_t weight;          /* EVICT_LRFU_WEIGHT; may be changed; 0
				   * puts every entry on level 0 (LRU) */
};

void evict_lrfu_init(struct evict_lrfu *f);
/* The level of a request count. */
unsigned evict_lrfu_level(unsigned count);
/* One request, of any block: the clock's input. */
void evict_lrfu_tick(struct evict_lrfu *f);
/* Insert an unlinked entry: a new one (EVICT_Q_NONE) at the young end of
 * level, or of the refused queue when refused; one that was pinned at the
 * young end of the queue it left, with its level kept. */
void evict_lrfu_insert(struct evict_lrfu *f, struct evict_entry *x, unsigned level, bool refused);
/* A hit: the young end of level (a refused entry is admitted). */
void evict_lrfu_touch(struct evict_lrfu *f, struct evict_entry *x, unsigned level);
/* Unlink, keeping queue and level; a no-op for an unlinked entry. */
void evict_lrfu_remove(struct evict_lrfu *f, struct evict_entry *x);
/* The victim, or NULL; a pure query. */
struct evict_entry *evict_lrfu_victim(const struct evict_lrfu *f);
/* Oldest first: the refused queue, then each level from 0 up, each from
 * its old end (approximate: the victim order interleaves the levels). */
struct evict_entry *evict_lrfu_oldest(const struct evict_lrfu *f);
struct evict_entry *evict_lrfu_walk_next(const struct evict_lrfu *f, const struct evict_entry *x);

/* ---- the policy ---------------------------------------------------- */

/* lrfu's state: the queues, and how often each block was requested
 * lately, resident or evicted.  In this header for evict-lrfu-admit.c,
 * which builds on it, and for what reads it through evict_state(). */
struct evict_lrfu_state {
	struct evict_lrfu q;
	struct count_sketch sketch;
	const struct keyhash *hash; /* the sketch's key: of the fingerprint */
};

void evict_lrfu_state_init(struct evict_lrfu_state *s, const struct keyhash *hash);
void evict_lrfu_state_done(struct evict_lrfu_state *s);
/*
 * A request of x's block (a hit, or a new block stored): counted in the
 * sketch, and a tick of the clock.  \return its level; ret_h is the key it
 * was counted under, ret_count the sketch's count of it before this
 * request (0: never seen, up to COUNT_SKETCH_MAX).
 */
unsigned evict_lrfu_request(struct evict_lrfu_state *s, const struct evict_entry *x,
			    uint64_t *ret_h, unsigned *ret_count);
