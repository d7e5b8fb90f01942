/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Admission that measures itself.  A filter that stores only blocks seen
 * before (the count sketch says so) keeps one-off contexts from pushing out
 * what is shared; it also costs every block its first reuse, which is all
 * the reuse a conversation's latest turn gets when the tier can hold the
 * conversations in flight.  Which effect wins depends on the tier's size
 * against the traffic, so the filter decides for itself.
 *
 * Two shadow tiers run LRFU (evict-lrfu.c) on a sample of the keys, one
 * with the filter and one without, each 1/2^shift the main tier's size
 * for a sample of 1/2^shift of the keys (Waldspurger et al.'s miniature
 * caches, USENIX ATC '17: a sampled key stream against a scaled cache has
 * about the full one's hit rate).  They hold fingerprints, not data.  At the
 * end of each window of sampled requests the filter takes the side whose
 * shadow hit more, by a margin so that it does not flap on noise.
 *
 * Memory: two shadows of size/2^shift entries (at least 1024 unless the
 * tier is smaller, at most size/64), each entry 32 bytes and two table
 * slots of 4: about 1.3 bytes per block of the tier at 10^6 blocks.  Pure:
 * no I/O; a failed allocation leaves the filter where it was.
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
#define EVICT_ADMIT_WINDOW 4
/* The other side must hit more by 1/EVICT_ADMIT_MARGIN to win. */
#define EVICT_ADMIT_MARGIN 32

struct evict_admit_shadow {
	struct evict_lrfu q;
	struct evict_entry *ent; /* [cap]; fp holds the key's hash */
	uint32_t *slot;          /* [2 cap]: 1 + the index of an entry, or 0 */
	uint32_t cap, used;
	uint64_t hits;           /* in this window */
};

struct evict_admit {
	struct evict_admit_shadow sh[2]; /* [1] filters, [0] does not */
	uint64_t size;       /* the main tier's size the shadows were made for */
	uint32_t shift;      /* one key in 2^shift is sampled */
	uint64_t refs;       /* sampled requests in this window */
	bool on;             /* the main tier's filter */
	/* What the last window measured, and how often the filter turned. */
	uint64_t last_hits[2];
	uint64_t windows, switches;
};

void evict_admit_init(struct evict_admit *a);
void evict_admit_done(struct evict_admit *a);
/*
 * One request of the block whose keyed hash is h, in the main tier's
 * order: seen tells whether the sketch counted it before this request,
 * level is its level counting this one.  size is the main tier's (the
 * most entries it listed); shadows are rebuilt when it outgrows them.
 */
void evict_admit_observe(struct evict_admit *a, uint64_t size, uint64_t h, bool seen,
			 unsigned level);
/* Bytes the shadows take. */
uint64_t evict_admit_bytes(const struct evict_admit *a);
