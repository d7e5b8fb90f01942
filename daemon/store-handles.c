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
#include "ledger.h"
#include "log.h"
#include "pool.h"
#include "store-private.h"
#include "store.h"

/* The ledger's record of handle index idx: h while live, else only its id
 * (the next handle there takes a later generation, also after a restart). */
static void handle_ledger(struct store *s, struct tenant *t, uint32_t idx, const struct handle *h,
			  bool live)
{
	if (!s->ledger)
		return;
	if (!t->handle_ledger && ledger_handles_new(s->ledger, t->name, &t->handle_ledger) < 0)
		return; /* not kept: an adopting daemon finds no handles */
	struct ledger_handle r = {.id = h->id};
	if (live) {
		const struct extent *e = h->block->extent;
		r.kind = h->kind == HANDLE_LEASE ? LEDGER_HANDLE_LEASE : LEDGER_HANDLE_RESERVATION;
		r.shard = h->shard;
		r.extent_no = e && e->ledger ? e->ledger->no : UINT32_MAX;
		r.slot = h->block->slot;
		if (h->owner && s->owner_id)
			r.start_time = s->owner_id(h->owner, &r.pid);
	}
	if (ledger_handle_set(s->ledger, t->handle_ledger, idx, &r) < 0 && live)
		log_warning("Tenant %s: no memory to keep handle %u in the ledger", t->name, idx);
}

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
	handle_ledger(s, t, idx, h, true);
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
	handle_ledger(s, t, idx, h, false);
	h->block->handles--;
	t->handles[idx] = NULL;
	t->handle_gen[idx]++;
	if (t->handle_gen[idx] == 0)
		t->handle_gen[idx] = 1;
	t->handle_free[t->n_handles_free++] = idx;
	t->n_handles--;
	free(h);
}

/* The generation after gen, never 0 (a table's first). */
static uint32_t gen_after(uint32_t gen)
{
	return gen + 1 ? gen + 1 : 1;
}

int store_handles_restore(struct store *s, struct tenant *t,
			  struct block *(*block_of)(void *userdata, struct tenant *t,
						    const struct ledger_handle *h),
			  void *userdata, struct store_adopted *ret)
{
	const struct ledger_handles *hs = t->handle_ledger;
	uint32_t cap = 0;
	struct ledger_handle r;

	for (uint32_t i = 0; i < hs->cap; i++)
		if (ledger_handle_get(hs, i, &r) != 0)
			cap = i + 1;
	if (cap == 0 || t->handles_cap)
		return 0; /* nothing kept, or a table made already */
	struct handle **hv = calloc(cap, sizeof(*hv));
	uint32_t *gen = calloc(cap, sizeof(*gen)), *fr = calloc(cap, sizeof(*fr));
	bool *unusable = calloc(cap, sizeof(*unusable));
	if (!hv || !gen || !fr || !unusable) {
		free(hv);
		free(gen);
		free(fr);
		free(unusable);
		return -ENOMEM;
	}
	t->handles = hv;
	t->handle_gen = gen;
	t->handle_free = fr;
	t->handles_cap = cap;
	for (uint32_t i = 0; i < cap; i++) {
		int k = ledger_handle_get(hs, i, &r);
		gen[i] = 1;
		if (k == 0)
			continue;
		if (k < 0 || (uint32_t)r.id != i + 1) {
			/* Its last id is unknown: the index is not used again
			 * while this daemon runs, so no id a client holds
			 * can name another handle. */
			unusable[i] = true;
			ret->handles_bad++;
			continue;
		}
		gen[i] = (uint32_t)(r.id >> 32);
		struct block *b = r.kind == LEDGER_HANDLE_NONE ? NULL : block_of(userdata, t, &r);
		struct process *owner = b && s->owner_adopt ? s->owner_adopt(s->userdata, r.pid,
									     r.start_time)
							    : NULL;
		struct handle *h = b && owner ? calloc(1, sizeof(*h)) : NULL;
		if (!h) {
			/* Ended, or not restored: the id it had is not handed
			 * out again. */
			gen[i] = gen_after(gen[i]);
			continue;
		}
		h->id = r.id;
		h->kind = r.kind == LEDGER_HANDLE_LEASE ? HANDLE_LEASE : HANDLE_RESERVATION;
		h->shard = r.shard;
		h->block = b;
		h->tenant = t;
		h->owner = owner;
		hv[i] = h;
		t->n_handles++;
		b->handles++;
		if (h->kind == HANDLE_LEASE) {
			evict_remove(&b->ns->cls->policy, &b->evict); /* pinned */
			store_dirty_update(b, 0);
			ret->leases++;
		} else {
			ret->reservations++;
		}
		if (s->handle_taken)
			s->handle_taken(owner, h);
	}
	for (uint32_t i = cap; i-- > 0;)
		if (!hv[i] && !unusable[i])
			fr[t->n_handles_free++] = i;
	free(unusable);
	return 0;
}
