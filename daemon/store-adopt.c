/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The host tier an earlier daemon kept, adopted at start, before the NVMe
 * tier and before the first client (docs/reliability.md, Restarts): the
 * ledger's namespaces, its extents with the blocks committed in them, and
 * the handles that were open.
 *
 * - A namespace is opened as recovery opens one (store_recover_ns()): a
 *   tenant the configuration no longer has, or a namespace it refuses,
 *   keeps nothing.
 * - An extent is adopted when its pool memfd and its ledger memfd both
 *   came back, agree, and fit the tenant's quota and the pool's capacity.
 * - A slot whose record holds a block and passes its check is that block,
 *   resident and dirty (not known to be on NVMe: the NVMe tier's recovery
 *   finds its copy, store_recover_block_in()).  A record that fails its
 *   check is a miss, cleared.
 * - A handle comes back under its id, owned by the process of its pid and
 *   start time (process.c: a live one keeps it until it gives it back or
 *   exits, a gone one loses it after the quarantine).  A lease holds its
 *   block as before.  A reservation, and a lease whose block did not come
 *   back, hold their slot through a block no lookup finds (as a block
 *   deleted while reserved is): the client's copy into it may still land,
 *   its COMMIT answers -ECANCELED, and the slot is free once it has been
 *   given back.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ledger.h"
#include "log.h"
#include "pool.h"
#include "store-private.h"
#include "store.h"

struct adoption {
	struct store *s;
	struct ns **ns_of; /* by ledger number */
	uint32_t n_ns;
	struct extent **extent_of; /* by ledger number */
	struct block ***blocks;    /* by ledger number, then slot */
	uint32_t n_extents;
	struct store_adopted *st;
};

static int adopt_ns(void *userdata, uint32_t no, const char *tenant, const uint8_t *identity,
		    uint32_t len)
{
	struct adoption *a = userdata;
	struct ns *ns = NULL;
	uint64_t scope;

	if (no >= a->n_ns)
		return 0;
	int r = store_recover_ns(a->s, tenant, identity, len, &ns, &scope);
	if (r < 0)
		return r;
	if (r > 0) {
		ns->ledger_no = no;
		a->ns_of[no] = ns;
		a->st->namespaces++;
	}
	return 0;
}

/* Extent no, from its two memfds. */
static int adopt_extent(struct adoption *a, uint32_t no, const struct store_keep_ops *ops,
			void *userdata)
{
	struct store *s = a->s;
	char lname[32], pname[32];
	struct ledger_extent_desc d;
	struct ledger_extent *x = NULL;
	struct extent *e = NULL;

	snprintf(lname, sizeof(lname), "slots.%u", no);
	int lfd = ops->take(userdata, lname);
	snprintf(pname, sizeof(pname), "pool.%u", no);
	int pfd = ops->take(userdata, pname);
	if (lfd < 0 || pfd < 0)
		goto skip;
	if (ledger_extent_adopt(lfd, &d, &x) < 0 || x->no != no)
		goto bad;
	lfd = -1;
	struct tenant *t = store_tenant_find(s, d.tenant);
	struct slot_class *c = t ? store_class_get(s, t, d.slot_bytes) : NULL;
	if (!t || !c) {
		log_info("Kept extent %u of tenant %s: the tenant has no namespace now; let go", no,
			 d.tenant);
		goto skip;
	}
	for (uint32_t i = 0; i < c->n_extents; i++)
		if (c->extents[i]->id == d.id)
			goto bad;
	if (t->allocated + d.size > t->quota) {
		log_warning("Kept extent %u of tenant %s: over its quota now; let go", no, t->name);
		goto skip;
	}
	struct extent **arr = realloc(c->extents, sizeof(*arr) * (c->n_extents + 1));
	if (!arr)
		goto nomem;
	c->extents = arr;
	int r = pool_extent_adopt(s->pool, pfd, d.id, d.slot_bytes, d.size, d.flags, d.for_node,
				  &e);
	if (r == -ENOMEM)
		goto nomem;
	if (r < 0) {
		log_warning("Kept extent %u of tenant %s: %s; let go", no, t->name,
			    r == -ENOSPC ? "past the pool's capacity now" : "not what its ledger says");
		goto skip;
	}
	pfd = -1;
	if (e->slots.n != d.n_slots) {
		pool_extent_free(s->pool, e);
		goto bad_no_extent;
	}
	e->cls = c;
	e->ledger = x;
	c->extents[c->n_extents++] = e;
	c->slots += e->slots.n;
	c->extent_bytes += e->size;
	t->allocated += e->size;
	if (d.id >= t->next_extent_id)
		t->next_extent_id = d.id + 1;
	a->extent_of[no] = e;
	a->st->extents++;
	a->st->bytes += e->size;
	ops->keep(userdata, pname, e->fd, false);
	ops->keep(userdata, lname, x->m.fd, false);
	return 0;
bad:
bad_no_extent:
	a->st->extents_bad++;
	log_warning("Kept extent %u: its ledger does not match it; let go", no);
skip:
	ledger_extent_free(x);
	if (lfd >= 0)
		close(lfd);
	if (pfd >= 0)
		close(pfd);
	/* Its memory goes once nothing holds it (systemd's store neither). */
	ops->let_go(userdata, lname);
	ops->let_go(userdata, pname);
	return 0;
nomem:
	ledger_extent_free(x);
	if (pfd >= 0)
		close(pfd);
	return -ENOMEM;
}

/* The blocks committed in extent no, as its ledger says; each one's
 * place in blocks[] (by slot), for the handles. */
static int adopt_blocks(struct adoption *a, uint32_t no)
{
	struct store *s = a->s;
	struct extent *e = a->extent_of[no];

	for (uint32_t slot = 0; slot < e->slots.n; slot++) {
		struct ledger_slot rec;
		int k = ledger_slot_get(e->ledger, slot, &rec);
		if (k == 0)
			continue;
		struct ns *ns = k > 0 && rec.ns < a->n_ns ? a->ns_of[rec.ns] : NULL;
		if (k < 0)
			a->st->records_bad++;
		if (!ns || ns->cls != e->cls || index_get(&ns->index, rec.key)) {
			/* A torn record, a namespace not adopted, or a key
			 * twice: a miss. */
			ledger_slot_clear(s->ledger, e->ledger, slot);
			continue;
		}
		struct block *b = store_block_new(s, ns, rec.key);
		if (!b)
			return -ENOMEM;
		if (slots_take(&e->slots, slot) < 0) {
			store_block_maybe_free(b);
			continue;
		}
		e->cls->used_slots++;
		b->extent = e;
		b->slot = slot;
		store_block_resident(b);
		if (index_put(&ns->index, b) < 0) {
			store_block_maybe_free(b);
			return -ENOMEM;
		}
		b->indexed = true;
		ns->blocks_resident++;
		ns->tenant->dirty += e->slot_bytes; /* on NVMe once recovery finds it */
		store_evict_maybe_insert(b);
		a->blocks[no][slot] = b;
		a->st->blocks++;
	}
	return 0;
}

/* The block a kept handle holds: for a lease, the adopted block in its
 * slot; else one no lookup finds, holding the slot for every handle on it.
 * NULL: none can (its extent was let go, or no namespace of the tenant is
 * of its slot size, when the slot stays taken for good). */
static struct block *handle_block(void *userdata, struct tenant *t, const struct ledger_handle *h)
{
	struct adoption *a = userdata;
	struct extent *e = h->extent_no < a->n_extents ? a->extent_of[h->extent_no] : NULL;

	if (!e || h->slot >= e->slots.n)
		return NULL;
	struct block **held = &a->blocks[h->extent_no][h->slot];
	struct block *b = *held;
	if (b && b->indexed && h->kind == LEDGER_HANDLE_LEASE)
		return b;
	if (b && b->indexed) {
		/* A reservation in a committed block's slot cannot be: the
		 * block goes, and holds the slot for the handle. */
		store_block_unindex(b);
		return b;
	}
	if (b)
		return b;
	struct ns *any = NULL;
	for (uint32_t i = 0; i < t->n_ns && !any; i++)
		if (t->nss[i]->cls == e->cls)
			any = t->nss[i];
	if (slots_take(&e->slots, h->slot) < 0)
		return NULL;
	e->cls->used_slots++;
	if (!any) {
		a->st->slots_lost++;
		return NULL;
	}
	static const uint8_t no_key[KVT_KEY_SIZE];
	b = store_block_new(a->s, any, no_key);
	if (!b) {
		a->st->slots_lost++;
		return NULL;
	}
	b->extent = e;
	b->slot = h->slot;
	b->state = BLOCK_RESERVED;
	*held = b;
	return b;
}

static void adoption_free(struct adoption *a)
{
	for (uint32_t i = 0; a->blocks && i < a->n_extents; i++)
		free(a->blocks[i]);
	free(a->blocks);
	free(a->extent_of);
	free(a->ns_of);
}

int store_adopt(struct store *s, int ledger_fd, const struct store_keep_ops *ops, void *userdata,
		struct store_adopted *ret)
{
	struct adoption a = {.s = s, .st = ret};
	struct ledger *l = NULL;
	uint64_t t0 = kvt_now_ns();
	int r;

	memset(ret, 0, sizeof(*ret));
	r = ledger_adopt(ledger_fd, ops->keep, userdata, &l);
	if (r < 0)
		return r;
	a.n_ns = l->n_ns;
	a.n_extents = ledger_next_no(l);
	a.ns_of = calloc(a.n_ns ? a.n_ns : 1, sizeof(*a.ns_of));
	a.extent_of = calloc(a.n_extents ? a.n_extents : 1, sizeof(*a.extent_of));
	a.blocks = calloc(a.n_extents ? a.n_extents : 1, sizeof(*a.blocks));
	if (!a.ns_of || !a.extent_of || !a.blocks) {
		r = -ENOMEM;
		goto out;
	}
	/* Namespaces opened while the ledger is not the store's: their
	 * records are there already, under the numbers kept. */
	r = ledger_ns_each(l, adopt_ns, &a);
	if (r < 0)
		goto out;
	s->ledger = l;
	l = NULL;
	for (uint32_t no = 0; no < a.n_extents; no++) {
		r = adopt_extent(&a, no, ops, userdata);
		if (r < 0)
			goto out;
		struct extent *e = a.extent_of[no];
		if (!e)
			continue;
		a.blocks[no] = calloc(e->slots.n, sizeof(struct block *));
		if (!a.blocks[no]) {
			r = -ENOMEM;
			goto out;
		}
		r = adopt_blocks(&a, no);
		if (r < 0)
			goto out;
	}
	for (uint32_t i = 0; i < s->n_tenants; i++) {
		struct tenant *t = s->tenants[i];
		char name[48];
		ledger_handles_name(t->name, name, sizeof(name));
		int fd = ops->take(userdata, name);
		if (fd < 0)
			continue;
		if (ledger_handles_adopt(fd, &t->handle_ledger) < 0) {
			close(fd);
			ops->let_go(userdata, name);
			continue;
		}
		ops->keep(userdata, name, fd, false);
		r = store_handles_restore(s, t, handle_block, &a, ret);
		if (r < 0)
			goto out;
	}
	/* Blocks made for handles that were not restored after all. */
	for (uint32_t no = 0; no < a.n_extents; no++)
		for (uint32_t i = 0; a.blocks[no] && i < a.extent_of[no]->slots.n; i++) {
			struct block *b = a.blocks[no][i];
			if (b && !b->indexed && !b->handles)
				store_block_maybe_free(b);
		}
	ret->elapsed_ns = kvt_now_ns() - t0;
out:
	ledger_free(l);
	adoption_free(&a);
	return r;
}

int store_keep_begin(struct store *s, const struct store_keep_ops *ops, void *userdata)
{
	return ledger_new(ops->keep, userdata, &s->ledger);
}
