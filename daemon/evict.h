/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Eviction policy: which resident block goes when a slot class is full.
 * Pure bookkeeping, no I/O and no knowledge of blocks beyond the node the
 * caller embeds; pinned blocks (leased or reserved) are never on the list,
 * so any victim it names can be dropped at once.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

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
