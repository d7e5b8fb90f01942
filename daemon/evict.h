/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Eviction policy: which resident block goes when a slot class is full.
 * Pure bookkeeping, no I/O and no knowledge of blocks beyond the node the
 * caller embeds; pinned blocks (leased or reserved) are never on the list,
 * so any victim it names can be dropped at once.
 *
 * Two layers: the plain LRU list (struct evict_lru), which the NVMe tier
 * uses as is, and the policy-generic struct evict, which runs LRU, S3-FIFO,
 * SIEVE or ARC behind one set of calls.  tests/workload/kvt-policy-sim links
 * this file, so the hit rates docs/workload.md reports are those of this
 * code.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

struct keyhash;

struct evict_node {
	struct evict_node *prev, *next;
};

/* LRU: the head's next is the most recently used, its prev the victim. */
struct evict_lru {
	struct evict_node head;
	uint64_t n;
};

void evict_lru_init(struct evict_lru *l);
/* Insert as most recently used; the node must not be linked. */
void evict_lru_insert(struct evict_lru *l, struct evict_node *n);
/* Unlink; a no-op for an unlinked node. */
void evict_lru_remove(struct evict_lru *l, struct evict_node *n);
/* Mark used: move to the most recently used end if linked. */
void evict_lru_touch(struct evict_lru *l, struct evict_node *n);
/* The least recently used node, or NULL when nothing is evictable. */
struct evict_node *evict_lru_victim(const struct evict_lru *l);

static inline bool evict_node_linked(const struct evict_node *n)
{
	return n->next != 0;
}

/* ---- policy-generic ------------------------------------------------ */

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
	_EVICT_POLICY_MAX,
};

/* The paper's share for S3-FIFO's small queue.  On the traces of
 * docs/workload.md a larger one gains when the tier holds the live
 * conversations and loses when it does not. */
#define EVICT_S3FIFO_SMALL_PERCENT 10

/* The queue an entry is on, or was on before it was pinned. */
enum {
	EVICT_Q_NONE,  /* never inserted: a new block */
	EVICT_Q_MAIN,  /* LRU and SIEVE keep everything here */
	EVICT_Q_SMALL, /* S3-FIFO's probation queue, ARC's T1 */
};

/*
 * What the caller embeds in each block.  Zero it when the block is created
 * and set fp before the first insert.  Removing an entry (a pin) keeps its
 * queue and hit count, so a block that comes back from a lease, or from
 * NVMe, resumes where it was rather than starting over as new.
 */
struct evict_entry {
	struct evict_node node;
	/* A fingerprint of the block's key, which the ghost list remembers
	 * after eviction: distinct keys should have distinct ones (the store
	 * takes the keyed hash of the whole key). */
	uint64_t fp;
	uint8_t queue; /* EVICT_Q_* */
	uint8_t freq;  /* S3-FIFO: hits while queued, at most 3; SIEVE: visited */
};

struct evict_ghost_slot {
	uint64_t fp;
	uint64_t expire; /* 0: empty; 1: taken back (a tombstone) */
};

/*
 * A ghost list (S3-FIFO has one, ARC two).  A fingerprint put when W entries are listed is
 * remembered until W fingerprints in all have been put after it: the
 * ghost is about as long as the cache.  An open-addressing table whose
 * slots carry the sequence number at which they expire, so expiry needs
 * no FIFO of its own; rebuilt when tombstones and expired slots fill it.
 * At most about 64 bytes per listed entry; when it cannot grow, a
 * fingerprint is not remembered, which costs hits, never correctness.
 * Fingerprints are placed by a keyed hash (keyhash.h), so a run of them
 * that a client aimed at one slot spreads like any other.
 */
struct evict_ghost {
	const struct keyhash *hash; /* where a fingerprint probes from */
	struct evict_ghost_slot *slots;
	uint64_t cap;  /* slots, a power of two, or 0 */
	uint64_t used; /* slots not empty */
	uint64_t seq;  /* fingerprints put so far */
};

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
/* A hit; a no-op for an unlinked entry. */
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

/* Entries on the lists: the evictable blocks. */
static inline uint64_t evict_count(const struct evict *e)
{
	return e->q[0].n + e->q[1].n;
}

const char *evict_policy_to_string(enum evict_policy p);
/* \return the policy or -EINVAL */
int evict_policy_from_string(const char *s);
