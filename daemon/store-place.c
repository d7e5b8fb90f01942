/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Placement and host eviction: where a block's host slot comes from (a free
 * slot, a new extent while the tenant's quota lasts, or the slot of the
 * block the class's eviction policy gives up).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "ledger.h"
#include "log.h"
#include "macro.h"
#include "pool.h"
#include "store-private.h"
#include "store.h"

/* A free slot in an extent on node (-1: on any node). */
static struct extent *class_free_slot(struct slot_class *c, int node, uint32_t *ret_slot)
{
	for (uint32_t i = 0; i < c->n_extents; i++)
		if ((node < 0 || c->extents[i]->for_node == node) &&
		    slots_alloc(&c->extents[i]->slots, ret_slot) == 0)
			return c->extents[i];
	return NULL;
}

/* When the class has less than half an extent's slots left free and the
 * tenant's quota has room for another extent, the pool makes it ahead: the
 * growth then takes it ready instead of populating it in the loop. */
static void class_maybe_ahead(struct store *s, struct tenant *t, struct slot_class *c, int node)
{
	uint64_t bytes = pool_extent_bytes(s->pool, c->slot_bytes);

	if ((c->slots - c->used_slots) * 2 * c->slot_bytes < bytes &&
	    t->allocated + bytes <= t->quota)
		pool_make_ahead(s->pool, c->slot_bytes, node);
}

/* A new extent for node, while the tenant's quota lasts.
 * \return 0, -ENOSPC, or without wait -EAGAIN (pool_extent_new()) */
static int class_grow(struct store *s, struct tenant *t, struct slot_class *c, int node,
		      bool wait, struct extent **ret_e)
{
	uint64_t bytes = pool_extent_bytes(s->pool, c->slot_bytes);
	struct extent *e;

	if (t->allocated + bytes > t->quota || !ARRAY_GROW(c->extents, c->n_extents, struct extent *))
		return -ENOSPC;
	int r = pool_extent_new(s->pool, t->next_extent_id, c->slot_bytes, node, wait, &e);
	if (r < 0)
		return r == -EAGAIN ? r : -ENOSPC;
	t->next_extent_id++;
	e->cls = c;
	if (s->ledger) {
		struct ledger_extent_desc d = {.id = e->id, .slot_bytes = c->slot_bytes,
					       .size = e->size, .n_slots = e->slots.n,
					       .flags = e->flags, .node = e->node,
					       .for_node = e->for_node};
		snprintf(d.tenant, sizeof(d.tenant), "%s", t->name);
		if (ledger_extent_new(s->ledger, e->fd, &d, &e->ledger) < 0)
			log_warning("Tenant %s: no memory for extent %u's ledger: its blocks are not kept across a restart",
				    t->name, e->id);
	}
	c->extents[c->n_extents++] = e;
	c->slots += e->slots.n;
	c->extent_bytes += e->size;
	t->allocated += e->size;
	if (s->nvme_ops)
		s->nvme_ops->extent_added(s->nvme, e);
	if (s->extent_added)
		s->extent_added(s->userdata, t, e);
	*ret_e = e;
	return 0;
}

/* A slot in a new extent for node (class_grow()). */
static int class_new_extent(struct store *s, struct tenant *t, struct slot_class *c, int node,
			    bool wait, struct extent **ret_e, uint32_t *ret_slot)
{
	TRY(class_grow(s, t, c, node, wait, ret_e));
	return slots_alloc(&(*ret_e)->slots, ret_slot) < 0 ? -ENOSPC : 0;
}

int store_class_room(struct store *s, struct tenant *t, struct slot_class *c, int node,
		     uint64_t slots)
{
	struct extent *e;

	while (c->slots - c->used_slots < slots) {
		int r = class_grow(s, t, c, node, false, &e);
		if (r == -EAGAIN)
			return r;
		if (r < 0)
			return 0; /* no more room to grow into: eviction's turn */
	}
	class_maybe_ahead(s, t, c, node);
	return 0;
}

/* The policy's victim, or the next it would give up, that can go now: not
 * being written back, and for staging not a staged one if another will do.
 * With an NVMe tier a clean block (its copy is on NVMe) is worth looking a
 * little way past the victim for: write-back keeps enough of them ahead of
 * this. */
static struct block *class_victim(struct store *s, struct slot_class *c, bool stage)
{
	struct block *b = NULL, *clean = NULL, *staged = NULL;
	struct evict_entry *n = evict_victim(&c->policy);

	for (int i = 0; i < 256 && n && !clean; i++, n = evict_walk_next(&c->policy, n)) {
		struct block *cb = container_of(n, struct block, evict);
		/* A clean block is worth looking for only among those the
		 * engine's hints rank alike: never past a demoted one. */
		if (b && cb->evict.band != b->evict.band)
			break;
		if (cb->io != BLOCK_IO_NONE)
			continue;
		if (stage && cb->staged) {
			if (!staged)
				staged = cb;
			continue;
		}
		if (!b)
			b = cb;
		if (!s->nvme_ops)
			break;
		if (cb->clean && store_disk_usable(cb))
			clean = cb;
	}
	if (clean)
		b = clean;
	if (!b)
		b = staged;
	return b;
}

/* Evict class_victim() from host memory and take its slot.
 * \return 0, or -ENOSPC */
static int class_evict(struct store *s, struct slot_class *c, bool stage,
		       struct extent **ret_e, uint32_t *ret_slot)
{
	struct block *b = class_victim(s, c, stage);

	if (!b)
		return -ENOSPC;
	struct extent *e = b->extent;
	uint32_t slot = b->slot;
	if (s->nvme_ops && b->clean && store_disk_usable(b)) {
		store_block_spilled(s, b);
	} else {
		b->ns->c.evictions++;
		b->ns->c.demoted_evictions += b->evict.band == EVICT_BAND_LOW;
		if (s->nvme_ops)
			b->ns->c.dirty_drops++;
		evict_evicted(&c->policy, &b->evict); /* a policy may remember it */
		store_block_unindex(b);
		store_block_maybe_free(b);
	}
	/* Take the victim's own slot: the one it just gave back. */
	if (slots_is_used(&e->slots, slot) || slots_alloc(&e->slots, ret_slot) < 0)
		return -ENOSPC;
	*ret_e = e;
	return 0;
}

/*
 * Placement: a free slot in an extent made for the client's node first,
 * then a new extent for that node while the quota lasts (the kernel may
 * put it elsewhere when the node is short: counted), then a free slot in
 * any extent, and only then an eviction.  A client with no known node
 * (-1) takes any free slot before a new extent.
 * Staging (restore) takes the slot of a block staged for a lookup that has
 * not leased it yet only when nothing else can go: restores for one
 * request would otherwise evict each other in turn.
 * With PLACE_NOWAIT a new extent whose memory is still being made is
 * -EAGAIN, not a wait in the loop, nor an eviction.
 */
int store_class_alloc(struct store *s, struct tenant *t, struct slot_class *c, int node,
		      unsigned how, struct extent **ret_e, uint32_t *ret_slot)
{
	int r = 0;

	if (!(*ret_e = class_free_slot(c, node, ret_slot)) &&
	    (r = class_new_extent(s, t, c, node, !(how & PLACE_NOWAIT), ret_e, ret_slot)) < 0 &&
	    !(node >= 0 && (*ret_e = class_free_slot(c, -1, ret_slot)))) {
		/* Memory on its way: no eviction for a slot the tenant's
		 * quota has room for. */
		if (r == -EAGAIN)
			return r;
		if (how & PLACE_NOEVICT)
			return -ENOSPC;
		store_frag_no_room(s, t, c);
		TRY(class_evict(s, c, how & PLACE_STAGE, ret_e, ret_slot));
	}
	c->used_slots++;
	class_maybe_ahead(s, t, c, node);
	return 0;
}

static int host_slot(struct store *s, struct ns *ns, struct block *b, unsigned how)
{
	struct extent *e;
	uint32_t slot;
	int r = store_class_alloc(s, ns->tenant, ns->cls, -1, PLACE_STAGE | how, &e, &slot);
	if (r < 0)
		return r;
	b->extent = e;
	b->slot = slot;
	return 0;
}

int store_host_slot(struct store *s, struct ns *ns, struct block *b, bool wait)
{
	return host_slot(s, ns, b, wait ? 0 : PLACE_NOWAIT);
}

int store_host_slot_spare(struct store *s, struct ns *ns, struct block *b)
{
	return host_slot(s, ns, b, PLACE_NOWAIT | PLACE_NOEVICT);
}
