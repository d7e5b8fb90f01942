/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the store's files share and no one else uses.  The files call one
 * another in one direction only:
 *
 *   store.c         -> store-tenants.c
 *   store-ops.c     -> store-nvme.c, store-place.c, store-handles.c, store-partial.c,
 *                      store-blocks.c
 *   store-place.c   -> store-nvme.c, store-fragmentation.c, store-blocks.c
 *   store-nvme.c    -> store-tenants.c, store-ns.c, store-blocks.c
 *   store-partial.c -> store-tenants.c, store-ns.c, store-blocks.c
 *   store-remote.c  -> store-tenants.c, store-ns.c, store-blocks.c
 *   store-tenants.c -> store-ns.c
 *   store-hints.c   -> store-blocks.c
 *
 * store-blocks.c, store-fragmentation.c, store-handles.c and store-ns.c
 * call no other file of the store.  Below the store, the NVMe tier is
 * reached through s->nvme_ops, the remote tier through s->remote_ops; of
 * the store, only store-nvme.c reads the spill space.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "keyhash.h"
#include "store.h"

#define ARRAY_GROW(arr, n, type)                                          \
	({                                                                \
		type *_a = realloc((arr), sizeof(type) * ((n) + 1));      \
		if (_a)                                                   \
			(arr) = _a;                                       \
		_a != NULL;                                               \
	})

/* What the eviction ghost lists remember of a block: keys sharing their
 * first bytes must not share it. */
static inline uint64_t store_key_fingerprint(const struct store *s, const uint8_t *key)
{
	return keyhash(&s->keyhash, key, KVT_KEY_SIZE);
}

/* The shard bits of a block whose every shard is committed. */
static inline uint64_t store_all_shards(const struct ns *ns)
{
	return ns->geo.shards >= 64 ? ~UINT64_C(0)
				    : (UINT64_C(1) << ns->geo.shards) - 1;
}

/* The NVMe copy on its namespace's disk_lru at n. */
static inline struct block_disk *disk_copy_of(struct evict_node *n)
{
	return container_of(n, struct block_disk, lru);
}

/* store-tenants.c: free a tenant and everything it holds (shutdown). */
void store_tenant_free(struct store *s, struct tenant *t);

/* store-ns.c: free a namespace and its blocks (shutdown). */
void store_ns_free(struct store *s, struct ns *ns);

/* store-nvme.c: whether b has an NVMe copy on a file that has not failed. */
bool store_disk_usable(const struct block *b);

/* store-blocks.c */
/* A zeroed block of ns for key (its fingerprint set), in no index yet;
 * NULL when out of memory (or FAULT_BLOCK). */
struct block *store_block_new(struct store *s, struct ns *ns, const uint8_t *key);
/* Out of the index and the host eviction list; the counts follow. */
void store_block_unindex(struct block *b);
/* Give the host slot back to its extent (a dirty one stops counting). */
void store_host_slot_release(struct block *b);
/* Give up b's NVMe copy, if it has one: off its namespace's NVMe list and
 * its tenant's NVMe bytes, its slot dropped through the tier (before the
 * tier is handed over, the caller frees the slot). */
void store_disk_copy_drop(struct store *s, struct block *b);
/* Freed once nothing can still read or write its slots: out of the index,
 * no handle, no I/O. */
void store_block_maybe_free(struct block *b);
/* Every shard committed (or fetched, or recovered): visible from now on. */
void store_block_resident(struct block *b);
void store_evict_maybe_insert(struct block *b);

/* store-blocks.c: write-back's queue (struct slot_class's dirty lists).
 * After anything writeback_wanted() reads has changed for b: it joins the
 * young end of its band's list, moves to another band's, or leaves.  how:
 * DIRTY_* bits. */
#define DIRTY_USED 1u   /* a hit: to the young end, as on an LRU list */
#define DIRTY_OLDEST 2u /* joins at the old end: a write-back that failed */
#define DIRTY_LAPSED 4u /* its retention ran out: the default band's list
			 * (evict_lapse() moves it there as this returns) */
void store_dirty_update(struct block *b, unsigned how);

/* store-place.c: a host slot of class c for a block of tenant t; node is
 * the client's NUMA node (-1: any); how: PLACE_* bits.
 * \return 0, -ENOSPC, or -EAGAIN (PLACE_NOWAIT) */
#define PLACE_STAGE 1u  /* for staging from a tier */
#define PLACE_NOWAIT 2u /* memory not ready now is -EAGAIN */
#define PLACE_NOEVICT 4u /* no eviction: -ENOSPC instead */
int store_class_alloc(struct store *s, struct tenant *t, struct slot_class *c, int node,
		      unsigned how, struct extent **ret_e, uint32_t *ret_slot);
/* store-place.c: room for slots more blocks of class c without waiting in
 * the loop: extents added while the tenant's quota and the pool allow,
 * those made ahead taken.  \return 0 (room, or no more room to grow into),
 * or -EAGAIN when the next extent's memory is still being made. */
int store_class_room(struct store *s, struct tenant *t, struct slot_class *c, int node,
		     uint64_t slots);

/* store-fragmentation.c: class c of tenant t found no free slot and no
 * room for an extent; counts the allocation as starved when another class
 * holds free slots, and warns (at most once a minute per tenant) when the
 * tenant's fill is below [pool] fragmentation_alert. */
void store_frag_no_room(struct store *s, struct tenant *t, struct slot_class *c);

/* store-handles.c */
/* \return 0, -ENOBUFS at [limits] handles, or -ENOMEM */
int store_handle_new(struct store *s, struct tenant *t, uint8_t kind,
		     struct block *b, uint32_t shard, struct process *owner,
		     struct handle **ret);
/* The live handle of that id, or NULL. */
struct handle *store_handle_find(struct tenant *t, uint64_t id);
/* Forget a handle; the block's own bookkeeping is the caller's. */
void store_handle_free(struct tenant *t, struct handle *h);
