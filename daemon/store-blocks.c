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
#include "store-private.h"
#include "store.h"

static uint64_t gone_fp(const struct ns *ns, uint64_t key_fp)
{
	uint64_t h = key_fp ^ ((uint64_t)(uintptr_t)ns * UINT64_C(0x9e3779b97f4a7c15));
	return h ? h : 1; /* 0 is an empty place */
}

static bool gone_has(const struct store *s, uint64_t h)
{
	if (!s->gone)
		return false;
	for (uint32_t i = (uint32_t)h & (s->gone_cap - 1); s->gone[i];
	     i = (i + 1) & (s->gone_cap - 1))
		if (s->gone[i] == h)
			return true;
	return false;
}

static void gone_put(uint64_t *table, uint32_t cap, uint64_t h)
{
	uint32_t i = (uint32_t)h & (cap - 1);
	while (table[i] && table[i] != h)
		i = (i + 1) & (cap - 1);
	table[i] = h;
}

int store_recovering(struct store *s, bool on)
{
	free(s->gone);
	s->gone = NULL;
	s->gone_n = 0;
	s->gone_full = false;
	s->recovering = on;
	if (!on)
		return 0;
	s->gone_cap = 4096;
	s->gone = calloc(s->gone_cap, sizeof(uint64_t));
	if (!s->gone) {
		s->recovering = false;
		return -ENOMEM;
	}
	return 0;
}

void store_gone_add(struct store *s, const struct block *b)
{
	uint64_t h = gone_fp(b->ns, b->evict.fp);

	if (s->gone_full || gone_has(s, h))
		return;
	if ((s->gone_n + 1) * 4 > s->gone_cap * 3) {
		/* Growing, up to the limit; past it recovery keeps no more
		 * copies: misses, never an older block. */
		uint32_t cap = s->gone_cap * 2;
		uint64_t *t = cap <= STORE_GONE_MAX ? calloc(cap, sizeof(uint64_t)) : NULL;
		if (!t) {
			s->gone_full = true;
			return;
		}
		for (uint32_t i = 0; i < s->gone_cap; i++)
			if (s->gone[i])
				gone_put(t, cap, s->gone[i]);
		free(s->gone);
		s->gone = t;
		s->gone_cap = cap;
	}
	gone_put(s->gone, s->gone_cap, h);
	s->gone_n++;
}

bool store_gone_has(const struct store *s, const struct ns *ns, const uint8_t *key)
{
	return s->gone_full || gone_has(s, gone_fp(ns, store_key_fingerprint(s, key)));
}

void store_block_unindex(struct block *b)
{
	struct ns *ns = b->ns;

	if (!b->indexed)
		return;
	if (ns->tenant->store->recovering)
		store_gone_add(ns->tenant->store, b);
	index_remove(&ns->index, b);
	b->indexed = false;
	evict_remove(&ns->cls->policy, &b->evict);
	store_dirty_update(b, 0);
	if (b->state != BLOCK_RESIDENT)
		ns->blocks_reserved--;
	else if (b->extent && b->io != BLOCK_IO_READ)
		ns->blocks_resident--;
	else
		ns->blocks_spilled--;
}

void store_host_slot_release(struct block *b)
{
	if (!b->extent)
		return;
	if (b->state == BLOCK_RESIDENT && !b->clean && b->io != BLOCK_IO_READ)
		b->ns->tenant->dirty -= b->extent->slot_bytes;
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
	/* Before the tier is handed over (recovery, store-nvme.c) the slot is
	 * its caller's to free: nothing is written to the file yet. */
	if (s->nvme_ops)
		s->nvme_ops->slot_drop(s->nvme, d->region, d->slot);
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
