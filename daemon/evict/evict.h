/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Eviction policy: which resident block goes when a slot class is full.
 * Pure bookkeeping, no I/O and no knowledge of blocks beyond the node the
 * caller embeds; pinned blocks (leased or reserved) are never on the list,
 * so any victim it names can be dropped at once.
 *
 * Two layers: the plain LRU list (struct evict_lru, evict-list.h), which
 * the NVMe tier uses as is, and struct evict, which keeps the engine's
 * retention bands and runs the configured policy (LRU, S3-FIFO, SIEVE,
 * ARC, LRFU, LRFU with admission) over the default band through the
 * policy's ops (evict-policy.h, one file per policy).
 * tests/workload/kvt-policy-sim links this code, so the hit rates
 * docs/workload.md reports are those of the daemon.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "evict-list.h"
#include "evict-policy.h"
#include "kvt-proto.h"

struct keyhash;

/* ---- policy-generic ------------------------------------------------ */

/*
 * Retention bands: what the engine said of a block (HINT, kvt-proto.h: a
 * priority 0..100 as in TensorRT-LLM's retention configuration, or the end
 * of the request or session that used it).  Victims come from the lowest
 * band that has any: the demoted blocks first, oldest first; then the
 * configured policy over the blocks nobody said anything about; then the
 * raised bands, each LRU.  A hit on a demoted block means it was wanted
 * after all: it goes back to the policy.  Zero is the default band, so a
 * zeroed entry is in it.
 */
enum evict_band {
	EVICT_BAND_DEFAULT, /* priority 35: the policy decides */
	EVICT_BAND_LOW,     /* priority 0..34, or its request or session ended */
	EVICT_BAND_HIGH,    /* priority 36..79 */
	EVICT_BAND_TOP,     /* priority 80..100 */
	_EVICT_BANDS,
};

static inline enum evict_band evict_band_of_priority(unsigned priority)
{
	if (priority < KVT_PRIORITY_DEFAULT)
		return EVICT_BAND_LOW;
	if (priority == KVT_PRIORITY_DEFAULT)
		return EVICT_BAND_DEFAULT;
	return priority < 80 ? EVICT_BAND_HIGH : EVICT_BAND_TOP;
}

struct evict {
	/* The configured policy, over the default band: its ops and its
	 * state (ops->state_size bytes), NULL before evict_init and after
	 * evict_done. */
	const struct evict_policy_ops *ops;
	void *state;
	/* The bands other than the default one, each an LRU list. */
	struct evict_lru band[_EVICT_BANDS];
};

/* hash places fingerprints in the policy's ghost lists or sketches; it is
 * the caller's and outlives e.  \return 0, -EINVAL for a policy not in
 * the table, or -ENOMEM; e can be given to evict_done either way. */
int evict_init(struct evict *e, enum evict_policy policy, const struct keyhash *hash);
/* Frees the policy's state; the entries are the caller's.  Harmless on a
 * zeroed struct evict and twice. */
void evict_done(struct evict *e);

/* Insert an unlinked entry: a new one where its policy admits new blocks
 * (S3-FIFO, for one, on probation unless its ghost list remembers it),
 * one that was pinned at the young end of the queue it was on. */
void evict_insert(struct evict *e, struct evict_entry *x);
/* Unlink, keeping what the policy knows of the entry, its queue and hit
 * count (a pin, a spill, a delete); a no-op for an unlinked entry. */
void evict_remove(struct evict *e, struct evict_entry *x);
/* A lookup that will touch its hits, before it does: the fingerprints of
 * its keys (struct evict_entry's fp) in chain order, resident or not, for
 * a policy that scores what a lookup's leading run would hit (lrfu-admit's
 * shadows).  head says fp[0] is the chain's first block; otherwise they
 * continue the call before.  Bounded: a policy looks at each key once. */
void evict_lookup(struct evict *e, const uint64_t *fp, size_t n, bool head);
/* Whether e's policy takes evict_lookup: a caller computes the
 * fingerprints only for one that does. */
static inline bool evict_wants_lookup(const struct evict *e)
{
	return e->state && e->ops->lookup;
}
/* What the policy measured of itself (zeros for one that does not tune
 * itself). */
void evict_report(const struct evict *e, struct evict_report *r);
/* A hit: it marks the entry reused, and a demoted one goes back to the
 * policy (linked or not); otherwise a no-op for an unlinked entry. */
void evict_touch(struct evict *e, struct evict_entry *x);
/*
 * The entry to evict, or NULL when nothing is evictable.  Not a pure
 * query: a policy may reorder its queues on the way (S3-FIFO moves hit
 * entries from small to main, SIEVE moves its hand).  The entry stays
 * linked until the caller removes it (evict_evicted if it is dropped), and
 * asking again without a change in between names the same entry.
 */
struct evict_entry *evict_victim(struct evict *e);
/* Every entry, oldest first, without changing anything: the bands in the
 * order victims come from them, the default one in its policy's order
 * (S3-FIFO's and ARC's small queue from its old end, then the main one).
 * For a caller that looks for the coldest entries of some kind (clean
 * blocks to spill) rather than for the policy's one victim; from the
 * victim, evict_walk_next gives the candidates after it (approximate
 * where the victim is not always the oldest, as in S3-FIFO and SIEVE).
 * A walk costs one step per entry passed: one that looks for a kind of
 * entry that may be rare keeps a list of its own instead (write-back's
 * queue of dirty blocks, store-blocks.c). */
struct evict_entry *evict_oldest(const struct evict *e);
struct evict_entry *evict_walk_next(const struct evict *e, const struct evict_entry *x);
/* Remove x because its block is dropped: a policy may remember its
 * fingerprint (S3-FIFO when it leaves from the small queue, ARC always).
 * Not for spills: a spilled block keeps its entry and comes back to the
 * queue it left. */
void evict_evicted(struct evict *e, struct evict_entry *x);

static inline bool evict_entry_linked(const struct evict_entry *x)
{
	return evict_node_linked(&x->node);
}

/* Move x to band (enum evict_band); an unlinked entry goes there when it
 * is inserted.  Back in the default band, it resumes the queue it had. */
void evict_set_band(struct evict *e, struct evict_entry *x, unsigned band);

/*
 * The engine's hints (docs/protocol.md, HINT).  Retain: the band of the
 * priority.  End of a request: the blocks it used that no one has hit since
 * they were stored, and that no hint raised, are its own; they are demoted.
 * End of a session: every block it names is demoted, raised or not (the
 * engine names only its private ones: what it shares, it retains).
 */
void evict_retain(struct evict *e, struct evict_entry *x, unsigned priority);
void evict_end(struct evict *e, struct evict_entry *x, bool session);
/* An entry whose retention has run out, by the caller's clock. */
typedef bool (*evict_lapsed_fn)(void *userdata, const struct evict_entry *x);
/* Return every linked entry of a raised band that lapsed says has run out
 * to the default band (a demotion has no duration: a hit undoes it).
 * \return how many */
uint64_t evict_lapse(struct evict *e, evict_lapsed_fn lapsed, void *userdata);

/* Evictable entries of the policy itself: the default band. */
static inline uint64_t evict_policy_count(const struct evict *e)
{
	return e->state ? e->ops->count(e->state) : 0;
}

/* Entries on the lists: the evictable blocks. */
static inline uint64_t evict_count(const struct evict *e)
{
	return evict_policy_count(e) + e->band[EVICT_BAND_LOW].n + e->band[EVICT_BAND_HIGH].n +
	       e->band[EVICT_BAND_TOP].n;
}

/* The state of e's policy if it is the one ops belongs to, else NULL: for
 * what reads or sets what only one policy has (S3-FIFO's small queue,
 * LRFU's admission filter), the state's type being in that policy's
 * header. */
static inline void *evict_state(const struct evict *e, const struct evict_policy_ops *ops)
{
	return e->ops == ops ? e->state : NULL;
}

/* The ops of a policy, or NULL when p is not in the table. */
const struct evict_policy_ops *evict_policy_ops(enum evict_policy p);
const char *evict_policy_to_string(enum evict_policy p);
/* \return the policy or -EINVAL */
int evict_policy_from_string(const char *s);
