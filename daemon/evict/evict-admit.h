/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Settings that measure themselves.  A filter that stores only blocks seen
 * before (the count sketch says so) keeps one-off contexts from pushing out
 * what is shared; it also costs every block its first reuse, which is all
 * the reuse a conversation's latest turn gets when the tier can hold the
 * conversations in flight.  A strict filter, which stores only blocks
 * requested at least twice before, keeps out what comes back once or
 * twice (a user's rarer prompts, API traffic) and costs every block its
 * first two reuses.  A large weight for how often a block was
 * requested keeps a popular prefix through a flood of new ones, and costs
 * where recency alone is the right signal.  Which wins depends on the
 * tier's size against the traffic, so the policy decides for itself.
 *
 * Shadow tiers run LRFU (evict-lrfu.c) on a sample of the keys, one per
 * setting: the filter off or on with a weight of EVICT_LRFU_WEIGHT, 0
 * (recency alone: LRU) or 4 × EVICT_LRFU_WEIGHT, and the strict filter
 * with EVICT_LRFU_WEIGHT or 4 × EVICT_LRFU_WEIGHT.  Each is 1/2^shift the
 * main tier's size for a sample of 1/2^shift of the keys (Waldspurger et
 * al.'s miniature caches, USENIX ATC '17: a sampled key stream against a
 * scaled cache has about the full one's hit rate).  They hold
 * fingerprints, not data, and are scored as the tier is: fed each lookup
 * head first (evict_lookup), a shadow counts a sampled hit only while the
 * lookup's sampled blocks before it hit too.  At the end of each window of
 * sampled requests each setting's score loses 1/EVICT_ADMIT_DECAY and its
 * window's hits are added; the main tier takes the best setting when it
 * beats its own by a margin and its lead, lookup by lookup, is beyond
 * EVICT_ADMIT_Z standard errors, so that it does not flap on noise.  It
 * starts with recency alone and no filter, so that it stays LRU until
 * another setting has shown it hits more: leaving it takes twice the
 * margin, and the strict filter is tried only from a setting with the
 * filter, never straight from LRU.
 *
 * Memory: EVICT_ADMIT_SHADOWS (8) shadows of size/2^shift entries (at
 * least 1024 unless the tier is smaller, at most size/64), each entry 32
 * bytes and two table slots of 4: about 5.2 bytes per block of the tier at
 * 10^6 blocks, and 1 912 bytes of shadow records and scores per slot
 * class (struct evict_admit, on LP64).  CPU: a keyed hash
 * per key looked up, and the shadows' work on the sampled ones.  Pure: no
 * I/O; a failed allocation leaves the setting where it was.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "evict-lrfu.h"

/* Shadows are scaled down until they are this small, and no further than
 * 1/64: smaller ones decide on noise. */
#define EVICT_ADMIT_MIN_SHADOW 1024
#define EVICT_ADMIT_MAX_SHIFT 6
/* A window is this many shadow sizes of sampled requests. */
#define EVICT_ADMIT_WINDOW 1
/* Scores and differences lose 1/EVICT_ADMIT_DECAY of themselves each
 * window. */
#define EVICT_ADMIT_DECAY 8
/* Another setting is taken only when its lead over the current one, summed
 * over lookups, is this many standard errors of that sum. */
#define EVICT_ADMIT_Z 2
/* Another setting must score more by 1/EVICT_ADMIT_MARGIN to be taken
 * (2/EVICT_ADMIT_MARGIN to leave the start). */
#define EVICT_ADMIT_MARGIN 16
/* The settings, one shadow each: [0] LRFU, [1] LRFU with the filter, [2]
 * recency alone (weight 0: LRU, the setting a tier starts with), [3] the
 * same with the filter, [4] frequency weighed 4 times as much, [5] the same
 * with the filter, [6] LRFU with the strict filter, [7] frequency weighed
 * 4 times as much with the strict filter. */
#define EVICT_ADMIT_SHADOWS 8
#define EVICT_ADMIT_START 2
/* The filters: how many times before a new block must have been requested
 * to be stored outside probation. */
#define EVICT_ADMIT_FILTER_OFF 0
#define EVICT_ADMIT_FILTER_SEEN 1
#define EVICT_ADMIT_FILTER_STRICT 2

struct evict_admit_shadow {
	struct evict_lrfu q;
	struct evict_entry *ent; /* [cap]; fp holds the key's hash */
	uint32_t *slot;          /* [2 cap]: 1 + the index of an entry, or 0 */
	uint32_t cap, used;
	uint64_t hits;           /* leading-run hits in this window */
	bool run;                /* the lookup's blocks so far all hit */
	uint64_t run_hits;       /* in this lookup's leading run */
};

struct evict_admit {
	struct evict_admit_shadow sh[EVICT_ADMIT_SHADOWS];
	uint64_t size;       /* the main tier's size the shadows were made for */
	uint32_t shift;      /* one key in 2^shift is sampled */
	uint64_t refs;       /* sampled requests in this window */
	/* The main tier's filter: a new block requested fewer times than
	 * this before goes on probation (EVICT_ADMIT_FILTER_*, 0: off). */
	uint32_t filter;
	uint32_t weight;     /* the main tier's LRFU weight */
	/* Each setting's hits, halved every window. */
	uint64_t score[EVICT_ADMIT_SHADOWS];
	/* Per lookup, each setting's leading run less the current one's:
	 * the sum and the sum of squares, halved every window. */
	int64_t diff[EVICT_ADMIT_SHADOWS];
	uint64_t diff2[EVICT_ADMIT_SHADOWS];
	/* What the last window measured, and how often the setting changed. */
	uint64_t last_hits[EVICT_ADMIT_SHADOWS];
	uint64_t windows, switches;
	uint64_t lookups; /* scored, in all */
};

void evict_admit_init(struct evict_admit *a);
void evict_admit_done(struct evict_admit *a);
/*
 * A lookup, the fingerprints of its keys head first (evict_lookup): each
 * shadow scores the leading run it would have hit.  l is the main tier's
 * state: its sketch says what was seen, its size the shadows' scale.
 */
void evict_admit_lookup(struct evict_admit *a, struct evict_lrfu_state *l, const uint64_t *fp,
			size_t n, bool head);
/*
 * A new block stored in the main tier, whose keyed hash is h: count is
 * the sketch's count of it before this request, level its level counting
 * this one.  size is the main tier's (the
 * most entries it listed); shadows are rebuilt when it outgrows them.
 */
void evict_admit_observe(struct evict_admit *a, uint64_t size, uint64_t h, unsigned count,
			 unsigned level);
/* Bytes the shadows take. */
uint64_t evict_admit_bytes(const struct evict_admit *a);
