/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The handle table of a tenant: reservations and leases named by a slot
 * index and a generation, so that a stale or forged handle never names
 * another live one.  The process owning a handle hears of it through the
 * store's handle_taken and handle_ended callbacks.
 */
#include <errno.h>
#include <stdlib.h>

#include "fault.h"
#include "store-private.h"
#include "store.h"

int store_handle_new(struct store *s, struct tenant *t, uint8_t kind,
		     struct block *b, uint32_t shard, struct process *owner,
		     struct handle **ret)
{
	uint32_t idx;

	if (t->n_handles_free == 0) {
		uint32_t max = s->config->max_handles;
		if (t->handles_cap >= max)
			return -ENOBUFS;
		uint32_t cap = t->handles_cap ? t->handles_cap * 2 : 64;
		if (cap > max)
			cap = max;
		struct handle **hs = realloc(t->handles, sizeof(*hs) * cap);
		if (hs)
			t->handles = hs;
		uint32_t *gen = realloc(t->handle_gen, sizeof(*gen) * cap);
		if (gen)
			t->handle_gen = gen;
		uint32_t *fr = realloc(t->handle_free, sizeof(*fr) * cap);
		if (fr)
			t->handle_free = fr;
		if (!hs || !gen || !fr)
			return -ENOMEM;
		for (uint32_t i = t->handles_cap; i < cap; i++) {
			t->handles[i] = NULL;
			t->handle_gen[i] = 1;
		}
		for (uint32_t i = cap; i > t->handles_cap; i--)
			t->handle_free[t->n_handles_free++] = i - 1;
		t->handles_cap = cap;
	}
	struct handle *h = fault_hit(FAULT_HANDLE) ? NULL : calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	idx = t->handle_free[--t->n_handles_free];
	h->id = ((uint64_t)t->handle_gen[idx] << 32) | (idx + 1);
	h->kind = kind;
	h->shard = shard;
	h->block = b;
	b->staged = false;
	h->tenant = t;
	h->owner = owner;
	t->handles[idx] = h;
	t->n_handles++;
	b->handles++;
	if (owner && s->handle_taken)
		s->handle_taken(owner, h);
	*ret = h;
	return 0;
}

struct handle *store_handle_find(struct tenant *t, uint64_t id)
{
	uint32_t idx = (uint32_t)id;
	if (idx == 0 || idx > t->handles_cap)
		return NULL;
	struct handle *h = t->handles[idx - 1];
	if (!h || h->id != id)
		return NULL;
	return h;
}

/* Forget a handle; the block's own bookkeeping is the caller's. */
void store_handle_free(struct tenant *t, struct handle *h)
{
	struct store *s = t->store;
	uint32_t idx = (uint32_t)h->id - 1;

	if (h->owner && s->handle_ended)
		s->handle_ended(h->owner, h);
	h->block->handles--;
	t->handles[idx] = NULL;
	t->handle_gen[idx]++;
	if (t->handle_gen[idx] == 0)
		t->handle_gen[idx] = 1;
	t->handle_free[t->n_handles_free++] = idx;
	t->n_handles--;
	free(h);
}
