/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A block's bookkeeping as it moves between states: in and out of its
 * namespace's index, its host slot, its NVMe copy, the eviction lists and
 * write-back's queue, and freed once nothing can still read or write its
 * slots.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "ledger.h"
#include "store-private.h"
#include "store.h"

/* A partial block's record ends with the attempt: completed, or out of
 * the index, where no shard of it can be committed any more. */
static void partial_end(struct block *b)
{
	struct partial *p = b->partial;

	TAILQ_REMOVE(&b->ns->tenant->store->partials, p, link);
	b->shards_taken = p->shards_taken;
	b->shards_committed = 0;
	free(p);
}

void store_block_unindex(struct block *b)
{
	struct store *s = b->ns->tenant->store;

	if (b->indexed && s->recovering)
		store_gone_add(s, b);
	store_block_unindex_only(b);
}

void store_block_ledger(struct block *b)
{
	struct store *s = b->ns->tenant->store;

	if (!s->ledger || !b->extent || !b->extent->ledger)
		return;
	if (b->indexed && b->state == BLOCK_RESIDENT && b->io != BLOCK_IO_READ &&
	    b->io != BLOCK_IO_FETCH)
		ledger_slot_set(s->ledger, b->extent->ledger, b->slot, b->ns->ledger_no, b->key);
	else
		ledger_slot_clear(s->ledger, b->extent->ledger, b->slot);
}

void store_block_unindex_only(struct block *b)
{
	struct ns *ns = b->ns;
	struct store *s = ns->tenant->store;

	if (!b->indexed)
		return;
	if (b->state != BLOCK_RESIDENT && b->shards_committed)
		partial_end(b);
	index_remove(&ns->index, b);
	b->indexed = false;
	store_block_ledger(b); /* no longer a block a restart may bring back */
	evict_remove(&ns->cls->policy, &b->evict);
	store_dirty_update(b, 0);
	if (b->state != BLOCK_RESIDENT)
		ns->blocks_reserved--;
	else if (b->extent && b->io != BLOCK_IO_READ)
		ns->blocks_resident--;
	else
		ns->blocks_spilled--;
	/* Its NVMe copy is of a block no longer served: erased now, while
	 * leases on its host copy run out; or, with I/O on the slot in
	 * flight, once that ends (store_block_io_end()), its key counting as
	 * being erased meanwhile.  A write-back in flight may still make the
	 * slot a whole copy. */
	if (block_disk(b) && b->io == BLOCK_IO_NONE) {
		store_disk_copy_drop(s, b);
	} else if ((block_disk(b) || b->io == BLOCK_IO_WRITE) && s->nvme_ops) {
		uint64_t token = store_erase_begin(s, ns, store_scoped_fp(ns->scope, b->evict.fp));
		b->erase_hold = token ? ERASE_HOLD_KEY : ERASE_HOLD_ALL;
	}
}

void store_block_io_end(struct block *b)
{
	struct ns *ns = b->ns;
	struct store *s = ns->tenant->store;

	b->io = BLOCK_IO_NONE;
	if (b->indexed)
		return;
	store_disk_copy_drop(s, b);
	if (b->erase_hold != ERASE_HOLD_NONE) {
		/* Its copy's own erasure, if it has one, is under way now: the
		 * hold need not keep the key waiting any longer. */
		uint64_t token = b->erase_hold == ERASE_HOLD_KEY
					 ? store_scoped_fp(ns->scope, b->evict.fp)
					 : 0;
		b->erase_hold = ERASE_HOLD_NONE;
		store_erase_release(s, ns, token);
	}
	store_block_maybe_free(b);
}

void store_host_slot_release(struct block *b)
{
	if (!b->extent)
		return;
	if (b->state == BLOCK_RESIDENT && !b->clean && b->io != BLOCK_IO_READ)
		b->ns->tenant->dirty -= b->extent->slot_bytes;
	struct store *s = b->ns->tenant->store;
	if (s->ledger && b->extent->ledger)
		ledger_slot_clear(s->ledger, b->extent->ledger, b->slot);
	if (slots_release(&b->extent->slots, b->slot) == 0)
		b->extent->cls->used_slots--;
	b->extent = NULL;
}

void store_disk_copy_drop(struct store *s, struct block *b)
{
	struct block_disk *d = block_disk(b);

	if (!d)
		return;
	evict_lru_remove(&b->ns->disk_lru, &d->lru);
	b->ns->tenant->disk_bytes -= d->stride;
	if (s->nvme_ops)
		store_copy_erase(s, b->ns, store_scoped_fp(b->ns->scope, b->evict.fp), d->region,
				 d->slot);
	b->disk_copy = NULL;
	slab_free(&s->disk_copies, d);
}

/* Each byte of it counts once per block: docs/benchmarks.md, Scale. */
_Static_assert(sizeof(void *) != 8 || sizeof(struct block) <= 104, "struct block grew");

/* Every block of the store comes from here; the slots go back only when
 * nothing can still write to or read them: no handle, and no NVMe I/O in
 * flight (store_block_maybe_free). */
struct block *store_block_new(struct store *s, struct ns *ns, const uint8_t *key)
{
	struct block *b = fault_hit(FAULT_BLOCK) ? NULL : slab_alloc(&s->blocks);

	if (!b)
		return NULL;
	memcpy(b->key, key, KVT_KEY_SIZE);
	b->evict.fp = store_key_fingerprint(s, key);
	b->ns = ns;
	return b;
}

void store_block_resident(struct block *b)
{
	if (b->shards_committed)
		partial_end(b);
	b->state = BLOCK_RESIDENT;
	b->disk_copy = NULL; /* was its shards */
	b->shards_committed = 0;
}

void store_block_maybe_free(struct block *b)
{
	if (b->indexed || b->handles || b->io)
		return;
	struct store *s = b->ns->tenant->store;

	/* Out of write-back's queue, as it is already out of the index: its
	 * entry must not outlive it. */
	store_dirty_update(b, 0);
	store_host_slot_release(b);
	store_disk_copy_drop(s, b);
	s->timed_hints -= b->hint_until != 0;
	slab_free(&s->blocks, b);
}

/* On the eviction list: resident in host memory, unpinned, no I/O. */
void store_evict_maybe_insert(struct block *b)
{
	if (b->indexed && b->state == BLOCK_RESIDENT && b->extent && !b->handles &&
	    b->io == BLOCK_IO_NONE && !evict_entry_linked(&b->evict)) {
		evict_insert(&b->ns->cls->policy, &b->evict);
		store_dirty_update(b, 0);
	}
}

/* ---- write-back's queue ---------------------------------------------- */

/*
 * What write-back may take now: a dirty block in host memory on its
 * class's eviction list (resident, unpinned), with no I/O and no NVMe copy,
 * that the engine has not demoted (a demoted block's session is over: not
 * worth the NVMe bandwidth).  Only with an NVMe tier, which is handed over
 * before any block has a host copy (store_set_nvme()).
 */
static bool writeback_wanted(const struct block *b)
{
	return evict_entry_linked(&b->evict) && !b->clean && b->extent && b->io == BLOCK_IO_NONE &&
	       b->evict.band != EVICT_BAND_LOW && !block_disk(b) && b->ns->tenant->store->nvme_ops;
}

/*
 * The queue holds exactly the blocks writeback_wanted() takes, each in the
 * list of its band, so that write-back finds the next one at the cold end
 * of a list instead of walking the eviction lists past blocks it cannot
 * take (clean, being written, demoted): a walk whose length grew with
 * every block written back.  Each list is in the order blocks joined it,
 * a hit moving a block to the young end, as on an LRU eviction list; other
 * policies order their blocks differently, and write-back follows the
 * order of use instead.  Its entries come from a slab of their own, in
 * the union where a written block keeps its NVMe copy: a block costs
 * nothing for it unless it waits for write-back.
 */
void store_dirty_update(struct block *b, unsigned how)
{
	struct store *s = b->ns->tenant->store;
	struct evict_lru *lists = b->ns->cls->dirty;
	struct block_dirty *q = block_dirty(b);
	unsigned band = how & DIRTY_LAPSED ? EVICT_BAND_DEFAULT : b->evict.band;
	bool joins = !q;

	if (!writeback_wanted(b)) {
		if (q) {
			evict_lru_remove(&lists[b->dirty_band], &q->link);
			b->dirty_queued = false;
			b->dirty_entry = NULL; /* and no NVMe copy */
			slab_free(&s->dirty_entries, q);
		}
		return;
	}
	if (q) {
		/* Queued already: it moves on a hit, and with its band. */
		if (!(how & DIRTY_USED) && band == b->dirty_band)
			return;
		evict_lru_remove(&lists[b->dirty_band], &q->link);
	} else {
		/* Out of memory, it waits outside the queue until it is used
		 * or pinned again, and host eviction may drop it meanwhile,
		 * as it would a block write-back did not reach. */
		q = slab_alloc(&s->dirty_entries);
		if (!q)
			return;
		q->block = b;
		b->dirty_entry = q;
		b->dirty_queued = true;
	}
	b->dirty_band = band;
	if (how & DIRTY_OLDEST)
		evict_lru_insert_oldest(&lists[band], &q->link);
	else
		evict_lru_insert(&lists[band], &q->link);
	/* A block that joins (committed, released, hit out of its demotion)
	 * may be waited for: write-back looks, if above its watermark. */
	if (joins)
		s->nvme_ops->kick(s->nvme);
}
