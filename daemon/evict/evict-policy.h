/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The table of eviction policies.  Each policy is one file that keeps its
 * own state and fills a struct evict_policy_ops; evict.c holds the
 * retention bands and calls the configured policy only through its ops.
 * A policy sees the entries of the default band only, never the bands, so
 * that what it decides is its own rule and nothing else.
 *
 * Adding a policy: a file evict-NAME.c in this folder that defines
 * `const struct evict_policy_ops evict_policy_NAME`, a row in
 * EVICT_POLICIES below, and the file in meson.build here.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "evict-list.h"

/* What a policy that tunes itself measured, for STATS: lookups its
 * shadows scored, times it changed its setting, and the setting
 * (lrfu-admit: the admission filter, as the requests a new block needs
 * before to be stored outside probation, 0 for none; the LRFU weight). */
struct evict_report {
	uint64_t lookups, switches;
	uint32_t weight;
	uint32_t filter;
};

struct keyhash;

/*
 * The entries a method is given are in the default band.  remove, touch,
 * evicted and walk_next are called for linked entries only: evict.c
 * answers for unlinked ones.  An entry's queue, freq and stamp are the
 * policy's to use (evict-list.h), except that queue EVICT_Q_NONE marks a
 * block never inserted.
 */
struct evict_policy_ops {
	const char *name;  /* as kvtierd.conf spells it */
	size_t state_size; /* of the state evict_init allocates, zeroed */
	/* Set up the state; hash places fingerprints (ghost lists, count
	 * sketches), and is the caller's and outlives it.
	 * \return 0 or a negative errno */
	int (*init)(void *state, const struct keyhash *hash);
	/* Free what the state holds (optional); the entries are the caller's. */
	void (*done)(void *state);
	/* An unlinked entry: a new one (EVICT_Q_NONE) where the policy
	 * admits new blocks, one that was pinned back where it was. */
	void (*insert)(void *state, struct evict_entry *x);
	/* Unlink, keeping what the policy knows of the entry (its queue and
	 * counts), for a pin, a spill or a delete. */
	void (*remove)(void *state, struct evict_entry *x);
	/* A hit. */
	void (*touch)(void *state, struct evict_entry *x);
	/* A lookup that touches its hits (optional), before it does: the
	 * fingerprints of its keys in chain order, resident or not.  head
	 * says fp[0] is the chain's first block; otherwise the keys continue
	 * the call before (a lookup taken in parts). */
	void (*lookup)(void *state, const uint64_t *fp, size_t n, bool head);
	/* The entry to evict, or NULL when the policy lists none; it may
	 * reorder its queues on the way, but asking again without a change
	 * in between names the same entry. */
	struct evict_entry *(*victim)(void *state);
	/* Every entry, oldest first, without changing anything: the first,
	 * and the one after x (NULL at the end). */
	struct evict_entry *(*oldest)(const void *state);
	struct evict_entry *(*walk_next)(const void *state, const struct evict_entry *x);
	/* Remove x because its block is dropped, remembering it if the
	 * policy does (optional: remove is called instead). */
	void (*evicted)(void *state, struct evict_entry *x);
	/* Entries listed. */
	uint64_t (*count)(const void *state);
	/* What it measured of itself (optional; evict.h's evict_report). */
	void (*report)(const void *state, struct evict_report *r);
};

/*
 * The policies, one row each: the value kvtierd.conf's eviction= keeps
 * (enum evict_policy, in this order) and the ops table its file defines,
 * evict_policy_NAME.  What each one does is said in its file.
 */
#define EVICT_POLICIES(X)                                                    \
	X(EVICT_LRU, lru)               /* evict-lru.c */                    \
	X(EVICT_S3FIFO, s3fifo)         /* evict-s3fifo.c */                 \
	X(EVICT_SIEVE, sieve)           /* evict-sieve.c */                  \
	X(EVICT_ARC, arc)               /* evict-arc.c */                    \
	X(EVICT_LRFU, lrfu)             /* evict-lrfu.c */                   \
	X(EVICT_LRFU_ADMIT, lrfu_admit) /* evict-lrfu-admit.c */

enum evict_policy {
#define EVICT_POLICY_ENUM(id, name) id,
	EVICT_POLICIES(EVICT_POLICY_ENUM)
#undef EVICT_POLICY_ENUM
	_EVICT_POLICY_MAX,
};

#define EVICT_POLICY_DECLARE(id, name) extern const struct evict_policy_ops evict_policy_##name;
EVICT_POLICIES(EVICT_POLICY_DECLARE)
#undef EVICT_POLICY_DECLARE
