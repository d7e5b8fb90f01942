/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Eviction policy: which resident block goes when a slot class is full.
 * Pure bookkeeping, no I/O and no knowledge of blocks beyond the node the
 * caller embeds; pinned blocks (leased or reserved) are never on the list,
 * so any victim it names can be dropped at once.
 *
 * Two layers: the plain LRU list (struct evict_lru, evict-list.h), which
 * the NVMe tier uses as is, and the policy-generic struct evict, which runs
 * LRU, S3-FIFO, SIEVE, ARC or LRFU (evict-lrfu.h, with or without the
 * admission of evict-admit.h) behind one set of calls.  tests/workload/kvt-policy-sim links
 * this file, so the hit rates docs/workload.md reports are those of this
 * code.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "count-sketch.h"
#include "evict-admit.h"
#include "evict-ghost.h"
#include "evict-list.h"
#include "evict-lrfu.h"
#include "kvt-proto.h"

struct keyhash;

/* LRFU's count sketch: counters per row for each entry the tier can list
 * (32 bytes a block in all), up to the sketch's max_width.  With 4 on the
 * Mooncake trace of docs/workload.md the counters fill between halvings
 * and every block looks seen before. */
#define EVICT_SKETCH_COLUMNS 16

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

enum evict_policy {
	EVICT_LRU,
	/* Yang et al., SOSP '23: new blocks enter a small FIFO (a tenth of
	 * the entries); those hit while there move to the main FIFO, the
	 * others leave and are remembered in a ghost list, so that a block
	 * stored again soon after goes straight to main.  Main is a FIFO with
	 * reinsertion on a 2-bit hit counter. */
	EVICT_S3FIFO,
	/* Zhang et al., NSDI '24: one FIFO, a visited bit, and a hand that
	 * moves from the oldest end clearing bits until it finds a block not
	 * visited since the hand last passed. */
	EVICT_SIEVE,
	/* Megiddo and Modha, FAST '03: blocks seen once (T1, the small
	 * queue) and blocks hit since they were stored (T2, main), both LRU,
	 * with a ghost list of each one's evictions; a block stored again
	 * while remembered moves T1's target size toward the list whose ghost
	 * remembered it, so the split between recency and frequency follows
	 * the traffic. */
	EVICT_ARC,
	/* Recency and a log-scaled request count (evict-lrfu.h), the count
	 * kept in a sketch for resident and evicted blocks alike. */
	EVICT_LRFU,
	/* The same with the admission filter that turns itself on and off
	 * (evict-admit.h): a block not seen before is stored on probation,
	 * evicted first, while shadow tiers find the filter pays. */
	EVICT_LRFU_ADMIT,
	_EVICT_POLICY_MAX,
};

/* The paper's share for S3-FIFO's small queue.  On the traces of
 * docs/workload.md a larger one gains when the tier holds the live
 * conversations and loses when it does not. */
#define EVICT_S3FIFO_SMALL_PERCENT 10

struct evict {
	enum evict_policy policy;
	/* LRU and SIEVE: q[0] only.  S3-FIFO and ARC: q[0] main (T2), q[1]
	 * small (T1). */
	struct evict_lru q[2];
	struct evict_node *hand; /* SIEVE: where the next search starts */
	/* Evictions from q[i], remembered: S3-FIFO uses ghost[1] only. */
	struct evict_ghost ghost[2];
	uint64_t arc_p; /* ARC: T1's target size, in entries */
	/* S3-FIFO: the small queue's share of the entries, in percent; set
	 * by evict_init, may be changed at any time. */
	uint32_t small_percent;
	/* LRFU: the queues, how often each block was requested lately, and
	 * the admission filter's shadows (EVICT_LRFU_ADMIT only). */
	struct evict_lrfu lrfu;
	struct count_sketch sketch;
	struct evict_admit admit;
	uint64_t refused; /* new blocks the filter put on probation */
	/* The bands other than the default one, each an LRU list. */
	struct evict_lru band[_EVICT_BANDS];
};

/* hash places fingerprints in the ghost lists; it is the caller's and
 * outlives e. */
void evict_init(struct evict *e, enum evict_policy policy, const struct keyhash *hash);
/* Frees the ghost lists; the entries are the caller's. */
void evict_done(struct evict *e);

/* Insert an unlinked entry: a new one where its policy admits new blocks
 * (S3-FIFO and ARC: main if its fingerprint is in a ghost list, else
 * small), one that was pinned at the young end of the queue it was on. */
void evict_insert(struct evict *e, struct evict_entry *x);
/* Unlink, keeping the entry's queue and hit count (a pin, a spill, a
 * delete); a no-op for an unlinked entry. */
void evict_remove(struct evict *e, struct evict_entry *x);
/* A hit: it marks the entry reused, and a demoted one goes back to the
 * policy (linked or not); otherwise a no-op for an unlinked entry. */
void evict_touch(struct evict *e, struct evict_entry *x);
/*
 * The entry to evict, or NULL when nothing is evictable.  Not a pure
 * query: S3-FIFO moves hit entries from small to main and reinserts hit
 * entries in main on the way, SIEVE moves its hand.  The entry stays
 * linked until the caller removes it (evict_evicted if it is dropped), and
 * asking again without a change in between names the same entry.
 */
struct evict_entry *evict_victim(struct evict *e);
/* Every entry, oldest first, without changing anything: the small queue
 * (S3-FIFO's, ARC's T1) from its old end, then the main one.  For a caller
 * that looks for the coldest entries of some kind (dirty blocks to write
 * back, clean ones to spill) rather than for the policy's one victim; from
 * the victim, evict_walk_next gives the candidates after it (approximate
 * for S3-FIFO and SIEVE, whose victim is not always the oldest). */
struct evict_entry *evict_oldest(const struct evict *e);
struct evict_entry *evict_walk_next(const struct evict *e, const struct evict_entry *x);
/* Remove x because its block is dropped: S3-FIFO remembers its fingerprint
 * when it leaves from the small queue, ARC always.  Not for spills: a
 * spilled block keeps its entry and comes back to the queue it left. */
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

/* Entries on the lists: the evictable blocks. */
static inline uint64_t evict_count(const struct evict *e)
{
	return e->q[0].n + e->q[1].n + e->lrfu.n + e->band[EVICT_BAND_LOW].n +
	       e->band[EVICT_BAND_HIGH].n + e->band[EVICT_BAND_TOP].n;
}

/* Evictable entries of the policy itself: the default band. */
static inline uint64_t evict_policy_count(const struct evict *e)
{
	return e->q[0].n + e->q[1].n + e->lrfu.n;
}

const char *evict_policy_to_string(enum evict_policy p);
/* \return the policy or -EINVAL */
int evict_policy_from_string(const char *s);
