/* SPDX-License-Identifier: Apache-2.0 */
#include <stddef.h>

#include "evict.h"

void evict_lru_init(struct evict_lru *l)
{
	l->head.next = l->head.prev = &l->head;
	l->n = 0;
}

void evict_lru_insert(struct evict_lru *l, struct evict_node *n)
{
	n->next = l->head.next;
	n->prev = &l->head;
	l->head.next->prev = n;
	l->head.next = n;
	l->n++;
}

void evict_lru_remove(struct evict_lru *l, struct evict_node *n)
{
	if (!evict_node_linked(n))
		return;
	n->prev->next = n->next;
	n->next->prev = n->prev;
	n->next = n->prev = NULL;
	l->n--;
}

void evict_lru_touch(struct evict_lru *l, struct evict_node *n)
{
	if (!evict_node_linked(n))
		return;
	evict_lru_remove(l, n);
	evict_lru_insert(l, n);
}

struct evict_node *evict_lru_victim(const struct evict_lru *l)
{
	return l->n ? l->head.prev : NULL;
}
