/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The store's side of the NVMe tier (nvme.c): each block's NVMe copy
 * (struct block_disk) and whether its file still serves, the transitions
 * the tier's I/O brings about (writing, written, staging, restored,
 * spilled, dropped), write-back's walk over its queue of dirty blocks
 * (kept in store-blocks.c), NVMe copies given up for room, and blocks
 * recovered from the spill files at start.
 * The tier does the I/O and decides when; the block states and the lists
 * they are on are here, and the tier changes them only through these.
 * The only file of the store that reads the spill space (spill.h); the
 * rest of the store reaches the tier through s->nvme_ops.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spill.h"
#include "store-private.h"
#include "store.h"

/* Whether b has an NVMe copy on a file that has not failed. */
bool store_disk_usable(const struct block *b)
{
	const struct block_disk *d = block_disk(b);

	return d && !spill_region_failed(d->region);
}

/* What a copy costs its tenant against its NVMe quota is kept with it:
 * the slot's stride, less than a region. */
_Static_assert(SPILL_REGION_BYTES <= UINT32_MAX, "a spill slot's stride no longer fits");

/* The NVMe copies of a namespace, coldest first, and what they cost its
 * tenant against its NVMe quota.  \return 0, or -ENOMEM: b has none. */
static int disk_copy_add(struct store *s, struct block *b, struct spill_region *r,
			uint32_t slot, uint64_t seq)
{
	struct block_disk *d = slab_alloc(&s->disk_copies);

	if (!d)
		return -ENOMEM;
	d->region = r;
	d->slot = slot;
	d->stride = (uint32_t)spill_slot_stride(r);
	d->seq = seq;
	d->block = b;
	b->disk_copy = d;
	evict_lru_insert(&b->ns->disk_lru, &d->lru);
	b->ns->tenant->disk_bytes += d->stride;
	return 0;
}

/* A clean block leaves host memory: its NVMe copy is the block now. */
void store_block_spilled(struct store *s, struct block *b)
{
	struct ns *ns = b->ns;

	evict_remove(&ns->cls->policy, &b->evict);
	store_host_slot_release(b);
	b->clean = false;
	ns->blocks_resident--;
	ns->blocks_spilled++;
	ns->c.spills++;
}

/* Staged back and verified: in host memory again, and clean. */
void store_block_restored(struct store *s, struct block *b)
{
	struct ns *ns = b->ns;

	b->clean = true;
	b->staged = true;
	if (!b->indexed) {
		store_block_io_end(b);
		return;
	}
	b->io = BLOCK_IO_NONE;
	store_block_ledger(b);
	ns->blocks_spilled--;
	ns->blocks_resident++;
	ns->c.restores++;
	evict_lru_touch(&ns->disk_lru, &block_disk(b)->lru);
	store_evict_maybe_insert(b);
	if (s->block_ready)
		s->block_ready(s->userdata, ns, b->key);
}

void store_nvme_writing(struct store *s, struct block *b, struct spill_region *r)
{
	/* It keeps its place on the eviction list (a write-back says nothing
	 * of how recently it was used); eviction passes it by while the
	 * write reads the slot.  It leaves write-back's queue. */
	b->io = BLOCK_IO_WRITE;
	b->ns->tenant->disk_writing += spill_slot_stride(r);
	store_dirty_update(b, 0);
}

int store_nvme_written(struct store *s, struct block *b, struct spill_region *r, uint32_t slot,
		       uint64_t seq, bool ok)
{
	int rr = ok ? 0 : -EIO;

	b->ns->tenant->disk_writing -= spill_slot_stride(r);
	/* A block deleted meanwhile gets its copy too, and gives it up below
	 * (store_block_io_end()): one way for both. */
	if (rr == 0)
		rr = disk_copy_add(s, b, r, slot, seq);
	if (rr < 0) {
		/* Whatever of a failed write landed may be a whole, valid slot
		 * (an error can come after the bytes): erased like any copy
		 * given up, or a restart would bring back a block the index
		 * never had. */
		store_copy_erase(s, b->ns, store_scoped_fp(b->ns->scope, b->evict.fp), r, slot);
	}
	ok = rr == 0;
	if (ok && b->extent && !b->clean) {
		b->clean = true;
		b->ns->tenant->dirty -= b->extent->slot_bytes;
	}
	if (!b->indexed) {
		store_block_io_end(b);
		return rr;
	}
	b->io = BLOCK_IO_NONE;
	/* Written, it is clean and stays out of write-back's queue; not
	 * written, it is back in it, first in line as it was. */
	store_dirty_update(b, ok ? 0 : DIRTY_OLDEST);
	store_evict_maybe_insert(b);
	return rr;
}

void store_nvme_staging(struct store *s, struct block *b)
{
	b->io = BLOCK_IO_READ;
}

void store_nvme_abandoned(struct store *s, struct block *b)
{
	b->io = BLOCK_IO_NONE;
}

/* The bands in the order write-back takes them: as host eviction does,
 * but for the demoted one, whose blocks it leaves alone. */
static const uint8_t dirty_band_order[] = {EVICT_BAND_DEFAULT, EVICT_BAND_HIGH, EVICT_BAND_TOP};

void store_dirty_begin(struct store_dirty *w, struct tenant *t)
{
	*w = (struct store_dirty){.t = t};
}

/* The entry after n in a walk of l from its cold end, or NULL. */
static struct block_dirty *dirty_after(const struct evict_lru *l, const struct evict_node *n)
{
	return n->prev != &l->head ? container_of(n->prev, struct block_dirty, link) : NULL;
}

struct block *store_dirty_next(struct store_dirty *w)
{
	while (w->cls < w->t->n_classes) {
		const struct evict_lru *l = &w->t->classes[w->cls]->dirty[dirty_band_order[w->band]];
		struct block_dirty *q = w->begun ? w->next : dirty_after(l, &l->head);
		w->begun = true;
		if (q) {
			/* The next one first: the block returned leaves the
			 * queue (written, or dropped) before the walk goes on. */
			w->next = dirty_after(l, &q->link);
			return q->block;
		}
		w->begun = false;
		if (++w->band == ARRAY_SIZE(dirty_band_order))
			store_dirty_skip_class(w);
	}
	return NULL;
}

void store_dirty_skip_class(struct store_dirty *w)
{
	w->cls++;
	w->band = 0;
	w->begun = false;
	w->next = NULL;
}

/* A block whose bytes can no longer be trusted: a miss from now on. */
void store_block_drop(struct store *s, struct block *b)
{
	struct ns *ns = b->ns;
	bool staging = b->io == BLOCK_IO_READ;
	uint8_t key[KVT_KEY_SIZE];

	memcpy(key, b->key, KVT_KEY_SIZE);
	store_block_unindex(b);
	if (staging)
		store_host_slot_release(b); /* the staging slot, never visible */
	store_block_io_end(b);
	/* Clients waiting for it to be staged hear that it is settled: their
	 * next LOOKUP says miss, now rather than at their deadline. */
	if (staging && s->block_ready)
		s->block_ready(s->userdata, ns, key);
}

/* Give up b's NVMe copy; b has no I/O in flight.  A block still in host
 * memory keeps serving from there (and is dirty again); one only on NVMe
 * is gone. */
static void disk_copy_drop(struct store *s, struct ns *ns, struct block *b)
{
	if (b->extent) {
		store_disk_copy_drop(s, b);
		if (b->clean) {
			b->clean = false;
			ns->tenant->dirty += b->extent->slot_bytes;
		}
		store_dirty_update(b, 0);
	} else {
		ns->c.evictions++;
		store_block_unindex(b);
		store_block_maybe_free(b);
	}
}

static int disk_evict(struct store *s, struct ns *ns, bool disk_only)
{
	struct evict_node *v = evict_lru_victim(&ns->disk_lru);
	/* Write-back asks on every turn while a tenant is at its quota: look
	 * a little way up the list, not through all of it. */
	for (int i = 0; v && (!disk_only || i < 256); i++) {
		struct block *b = disk_copy_of(v)->block;
		struct evict_node *prev = v->prev == &ns->disk_lru.head ? NULL : v->prev;
		if (b->io != BLOCK_IO_NONE || (disk_only && b->extent)) {
			v = prev; /* its copy is being read, or it is wanted */
			continue;
		}
		disk_copy_drop(s, ns, b);
		return 0;
	}
	return -ENOSPC;
}

uint64_t store_nvme_evict_region(struct store *s, struct spill_region *r)
{
	const struct spill_binding *bd = r->binding;
	struct tenant *t = bd ? store_tenant_find(s, bd->tenant) : NULL;
	uint64_t dropped = 0;

	for (uint32_t i = 0; t && i < t->n_ns; i++) {
		struct ns *ns = t->nss[i];
		if (ns->identity_len != bd->identity_len ||
		    memcmp(ns->identity, bd->identity, bd->identity_len) != 0)
			continue;
		/* The region's copies are among its namespace's, in no useful
		 * order: one walk over all of them, once per region taken. */
		struct evict_node *v = ns->disk_lru.head.next;
		while (v && v != &ns->disk_lru.head) {
			struct evict_node *next = v->next;
			struct block_disk *d = disk_copy_of(v);
			if (d->region == r && d->block->io == BLOCK_IO_NONE) {
				struct block *b = d->block;
				disk_copy_drop(s, ns, b);
				dropped++;
			}
			v = next;
		}
		break;
	}
	return dropped;
}

int store_nvme_evict(struct store *s, struct ns *ns)
{
	return disk_evict(s, ns, false);
}

int store_nvme_evict_tenant(struct store *s, struct ns *ns)
{
	/* Only copies whose block has left host memory: dropping the copy of
	 * a resident block would only make it dirty again, and writing it
	 * back would take the next one's. */
	if (disk_evict(s, ns, true) == 0)
		return 0;
	for (uint32_t i = 0; i < ns->tenant->n_ns; i++)
		if (ns->tenant->nss[i] != ns && disk_evict(s, ns->tenant->nss[i], true) == 0)
			return 0;
	return -EDQUOT;
}

int store_recover_ns(struct store *s, const char *tenant, const uint8_t *identity,
		     uint32_t identity_len, struct ns **ret, uint64_t *ret_scope)
{
	struct tenant_choice ch;
	struct tenant *t;
	struct ns *ns;
	char reason[KVT_MAX_REASON];
	unsigned uid;
	int rr;

	*ret = NULL;
	*ret_scope = store_scope(s, tenant, identity, identity_len);
	/* The tenant as the configuration sees it now. */
	memset(&ch, 0, sizeof(ch));
	snprintf(ch.name, sizeof(ch.name), "%s", tenant);
	if (config_tenant(s->config, tenant))
		ch.configured = true;
	else if (sscanf(tenant, "uid:%u", &uid) == 1)
		ch.uid = (uid_t)uid;
	else
		return 0; /* a tenant the configuration no longer has */
	rr = store_tenant_get(s, &ch, &t);
	if (rr < 0)
		return rr;
	rr = store_ns_open(s, t, identity, identity_len, &ns, reason, sizeof(reason));
	if (rr == -ENOMEM)
		return rr; /* like every other allocation here: recovery stops */
	if (rr < 0)
		return 0; /* a namespace this configuration refuses */
	if (ns->opens)
		ns->opens--; /* recovery is not a client */
	*ret = ns;
	return 1;
}

int store_recover_block_in(struct store *s, struct ns *ns, uint64_t scope, const uint8_t *key,
			   struct spill_region *r, uint32_t slot, uint64_t seq)
{
	uint64_t fp = store_scoped_fp(scope, store_key_fingerprint(s, key));
	int kept = SPILL_FOUND_KEEP;

	/* A namespace declined, or a key dropped since recovery began: were
	 * the copy only freed, a later restart would find it again. */
	if (!ns || (s->recovering && store_gone_has(s, scope, key)))
		goto decline;
	struct block *old = index_get(&ns->index, key);
	if (old) {
		/* The same key twice on disk: the newer copy wins, the other
		 * is erased.  A block in host memory with no NVMe copy was
		 * adopted from an earlier daemon (store-adopt.c): committed
		 * while no other copy of its key could be on disk (§9), so
		 * this copy is of its bytes, and it is clean.  One fetched
		 * from the remote tier keeps its bytes, and the copy goes. */
		struct block_disk *d = block_disk(old);
		if (!d && old->state == BLOCK_RESIDENT && old->extent && old->io == BLOCK_IO_NONE &&
		    old->remote == BLOCK_REMOTE_NONE && !old->clean) {
			/* Out of write-back's queue first: its entry and the
			 * NVMe copy share a place. */
			old->clean = true;
			ns->tenant->dirty -= old->extent->slot_bytes;
			store_dirty_update(old, 0);
			if (disk_copy_add(s, old, r, slot, seq) < 0)
				return -ENOMEM;
			return SPILL_FOUND_KEEP;
		}
		if (!d || d->seq >= seq)
			goto decline;
		if (!old->extent && old->io == BLOCK_IO_NONE) {
			store_copy_erase(s, ns, fp, d->region, d->slot);
			d->region = r;
			d->slot = slot;
			d->stride = (uint32_t)spill_slot_stride(r);
			d->seq = seq;
			return SPILL_FOUND_REPLACED;
		}
		/* Staged, or being staged, from the older copy: those bytes
		 * are not served again (leases taken run out on them), and a
		 * block of the newer copy takes its place. */
		store_block_unindex_only(old);
		store_block_maybe_free(old);
		kept = SPILL_FOUND_REPLACED;
	}
	struct block *b = store_block_new(s, ns, key);
	if (!b)
		return -ENOMEM;
	store_block_resident(b);
	if (disk_copy_add(s, b, r, slot, seq) < 0) {
		store_block_maybe_free(b);
		return -ENOMEM;
	}
	if (index_put(&ns->index, b) < 0) {
		/* Recovery stops, and the daemon with it: the slot is only
		 * freed, the copy stays on disk for the next start. */
		struct block_disk *d = block_disk(b);
		evict_lru_remove(&ns->disk_lru, &d->lru);
		ns->tenant->disk_bytes -= d->stride;
		b->disk_copy = NULL;
		slab_free(&s->disk_copies, d);
		store_block_maybe_free(b);
		spill_slot_free(r, slot);
		return -ENOMEM;
	}
	b->indexed = true;
	ns->blocks_spilled++;
	return kept;
decline:
	store_copy_erase(s, ns, fp, r, slot);
	return SPILL_FOUND_TAKEN;
}
