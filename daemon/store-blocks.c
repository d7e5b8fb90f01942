/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A block's bookkeeping as it moves between states: in and out of its
 * namespace's index, its host slot, its NVMe copy and the eviction lists,
 * and freed once nothing can still read or write its slots.
 */
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "spill.h"
#include "store-private.h"
#include "store.h"

void store_block_unindex(struct block *b)
{
	struct ns *ns = b->ns;

	if (!b->indexed)
		return;
	index_remove(&ns->index, b);
	b->indexed = false;
	evict_remove(&ns->cls->lru, &b->lru);
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

/* The NVMe copies of a namespace, coldest first, and what they cost its
 * tenant against its NVMe quota. */
void store_disk_linked(struct block *b)
{
	if (!evict_node_linked(&b->disk_lru)) {
		evict_lru_insert(&b->ns->disk_lru, &b->disk_lru);
		b->ns->tenant->disk_bytes += spill_slot_stride(b->disk);
	}
}

void store_disk_unlink(struct block *b)
{
	if (evict_node_linked(&b->disk_lru)) {
		evict_lru_remove(&b->ns->disk_lru, &b->disk_lru);
		b->ns->tenant->disk_bytes -= spill_slot_stride(b->disk);
	}
}

void store_disk_slot_drop(struct store *s, struct block *b)
{
	/* Without a tier (recovery runs before it is handed over) the slot
	 * is only freed: nothing is written to the file yet. */
	if (s->tier_ops)
		s->tier_ops->slot_drop(s->tier, b->disk, b->disk_slot);
	else
		spill_slot_free(b->disk, b->disk_slot);
}

/* The slots go back only when nothing can still write to or read them:
 * no handle, and no NVMe I/O in flight. */
struct block *store_block_new(struct store *s, struct ns *ns, const uint8_t *key)
{
	struct block *b = fault_hit(FAULT_BLOCK) ? NULL : calloc(1, sizeof(*b));

	if (!b)
		return NULL;
	memcpy(b->key, key, KVT_KEY_SIZE);
	b->lru.fp = store_key_fingerprint(s, key);
	b->ns = ns;
	return b;
}

void store_block_maybe_free(struct block *b)
{
	if (b->indexed || b->handles || b->io)
		return;
	store_host_slot_release(b);
	if (b->disk) {
		store_disk_unlink(b);
		store_disk_slot_drop(b->ns->tenant->store, b);
	}
	b->ns->tenant->store->timed_hints -= b->hint_until != 0;
	free(b);
}

/* On the eviction list: resident in host memory, unpinned, no I/O. */
void store_lru_maybe_insert(struct block *b)
{
	struct store *s = b->ns->tenant->store;

	if (b->indexed && b->state == BLOCK_RESIDENT && b->extent && !b->handles &&
	    b->io == BLOCK_IO_NONE && !evict_entry_linked(&b->lru)) {
		evict_insert(&b->ns->cls->lru, &b->lru);
		/* Write-back only finds dirty blocks on this list: one that
		 * comes back to it (committed, released) may be waited for. */
		if (!b->clean && s && s->tier_ops)
			s->tier_ops->kick(s->tier);
	}
}

/* A clean block leaves host memory: its NVMe copy is the block now. */
void store_block_spilled(struct store *s, struct block *b)
{
	struct ns *ns = b->ns;

	evict_remove(&ns->cls->lru, &b->lru);
	store_host_slot_release(b);
	b->clean = false;
	ns->blocks_resident--;
	ns->blocks_spilled++;
	ns->c.spills++;
}
