/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The lists every eviction policy is built from: an intrusive doubly
 * linked LRU list, and the entry a block embeds.  Inline, so that each
 * policy's file (the table in evict-policy.h lists them) uses them without
 * calling another.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "macro.h"

struct evict_node {
	struct evict_node *prev, *next;
};

/* LRU: the head's next is the most recently used, its prev the victim. */
struct evict_lru {
	struct evict_node head;
	uint64_t n;
};

static inline bool evict_node_linked(const struct evict_node *n)
{
	return n->next != 0;
}

static inline void evict_lru_init(struct evict_lru *l)
{
	l->head.next = l->head.prev = &l->head;
	l->n = 0;
}

/* Insert as most recently used; the node must not be linked. */
static inline void evict_lru_insert(struct evict_lru *l, struct evict_node *n)
{
	n->next = l->head.next;
	n->prev = &l->head;
	l->head.next->prev = n;
	l->head.next = n;
	l->n++;
}

/* Insert as least recently used; the node must not be linked. */
static inline void evict_lru_insert_oldest(struct evict_lru *l, struct evict_node *n)
{
	n->prev = l->head.prev;
	n->next = &l->head;
	l->head.prev->next = n;
	l->head.prev = n;
	l->n++;
}

/* Unlink; a no-op for an unlinked node. */
static inline void evict_lru_remove(struct evict_lru *l, struct evict_node *n)
{
	if (!evict_node_linked(n))
		return;
	n->prev->next = n->next;
	n->next->prev = n->prev;
	n->next = n->prev = 0;
	l->n--;
}

/* Mark used: move to the most recently used end if linked. */
static inline void evict_lru_touch(struct evict_lru *l, struct evict_node *n)
{
	if (!evict_node_linked(n))
		return;
	evict_lru_remove(l, n);
	evict_lru_insert(l, n);
}

/* The least recently used node, or NULL when nothing is evictable. */
static inline struct evict_node *evict_lru_victim(const struct evict_lru *l)
{
	return l->n ? l->head.prev : 0;
}

/* The queue an entry is on, or was on before it was pinned.  Which queue
 * of its own each value names is the policy's to say, in its file. */
enum {
	EVICT_Q_NONE,  /* never inserted: a new block */
	EVICT_Q_MAIN,  /* the policy's main queue (or queues) */
	EVICT_Q_SMALL, /* the policy's queue for blocks on probation */
};

/*
 * What the caller embeds in each block.  Zero it when the block is created
 * and set fp before the first insert.  Removing an entry (a pin) keeps its
 * queue and hit count, so a block that comes back from a lease, or from
 * NVMe, resumes where it was rather than starting over as new.  32 bytes
 * on LP64: stamp fills what was padding.
 */
struct evict_entry {
	struct evict_node node;
	/* A fingerprint of the block's key, which the ghost list remembers
	 * after eviction: distinct keys should have distinct ones (the store
	 * takes the keyed hash of the whole key). */
	uint64_t fp;
	/* The policy's own: its queue (EVICT_Q_*), a count or bit of its
	 * hits, a clock reading.  Each policy's file says what it keeps in
	 * them; evict.c reads none of them.  A zeroed entry's EVICT_Q_NONE
	 * tells every policy the block is new. */
	uint8_t queue;
	uint8_t freq;
	uint8_t band;   /* EVICT_BAND_*: the engine's retention hint (evict.h) */
	bool reused;    /* hit since it was stored */
	uint32_t stamp; /* the policy's own, as queue and freq */
};

#define evict_entry_of(n) container_of(n, struct evict_entry, node)

/* The oldest entry of l, where a walk of it starts; NULL when empty. */
static inline struct evict_entry *evict_lru_oldest(const struct evict_lru *l)
{
	return l->n ? evict_entry_of(l->head.prev) : 0;
}

/* The entry after x in a walk of l from its oldest; NULL at its end. */
static inline struct evict_entry *evict_lru_next(const struct evict_lru *l,
						 const struct evict_entry *x)
{
	return x->node.prev != &l->head ? evict_entry_of(x->node.prev) : 0;
}
