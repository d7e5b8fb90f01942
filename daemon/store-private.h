/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the store's files share and no one else uses.  The files call one
 * another in one direction only:
 *
 *   store.c         -> store-tenants.c, store-erasures.c
 *   store-ops.c     -> store-nvme.c, store-place.c, store-handles.c, store-partial.c,
 *                      store-blocks.c, store-erasures.c
 *   store-place.c   -> store-nvme.c, store-fragmentation.c, store-blocks.c
 *   store-nvme.c    -> store-tenants.c, store-ns.c, store-blocks.c, store-erasures.c
 *   store-partial.c -> store-blocks.c
 *   store-remote.c  -> store-tenants.c, store-ns.c, store-blocks.c
 *   store-tenants.c -> store-ns.c
 *   store-hints.c   -> store-blocks.c
 *   store-blocks.c  -> store-erasures.c
 *   store-ns.c      -> store-erasures.c
 *
 * store-erasures.c, store-fragmentation.c and store-handles.c call no
 * other file of the store.  Below the store, the NVMe tier is reached
 * through s->nvme_ops, the remote tier through s->remote_ops; of the
 * store, only store-nvme.c reads the spill space.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "keyhash.h"
#include "ledger.h"
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

/*
 * A partial block: reserved, in a namespace of several shards, some of
 * them committed and not all.  Its record is made at its first commit and
 * ends when the block does, completed or out of the index, so that a
 * record names one attempt at a key and nothing stale is left: the
 * store's queue holds exactly the partial blocks, in the order of their
 * first commits, which is also the order of their deadlines under any one
 * limit.  The record holds the block's shard bits while it lasts: struct
 * block has no room for its pointer beside them.
 */
struct partial {
	struct block *block;
	uint64_t shards_taken; /* the block's, as in struct block */
	uint64_t first_ms;     /* its first commit (CLOCK_MONOTONIC) */
	TAILQ_ENTRY(partial) link; /* on s->partials */
};

/* A reserved block's shards reserved or committed, one bit each. */
static inline uint64_t *block_shards_taken(struct block *b)
{
	return b->shards_committed ? &b->partial->shards_taken : &b->shards_taken;
}

/* The NVMe copy on its namespace's disk_lru at n. */
static inline struct block_disk *disk_copy_of(struct evict_node *n)
{
	return container_of(n, struct block_disk, lru);
}

/* store-tenants.c: free a tenant and everything it holds (shutdown). */
void store_tenant_free(struct store *s, struct tenant *t);

/* store-ns.c: tenant t's slot class of that slot size, made as needed;
 * NULL for want of memory. */
struct slot_class *store_class_get(struct store *s, struct tenant *t, uint64_t slot_bytes);
/* store-ns.c: free a namespace and its blocks (shutdown). */
void store_ns_free(struct store *s, struct ns *ns);

/* store-nvme.c: whether b has an NVMe copy on a file that has not failed. */
bool store_disk_usable(const struct block *b);

/* store-erasures.c: what keeps an older NVMe copy of a key from coming
 * back.  A namespace's scope, from its tenant's name and its identity;
 * the fingerprint of a key in a scope (key_fp: store_key_fingerprint()). */
uint64_t store_scope(const struct store *s, const char *tenant, const uint8_t *identity,
		     uint32_t len);
uint64_t store_scoped_fp(uint64_t scope, uint64_t key_fp);
/* An erasure of a copy of the key fp names begins, or a hold on that key
 * as if one did.  \return the token to end it with (0: not recorded, for
 * want of memory) */
uint64_t store_erase_begin(struct store *s, struct ns *ns, uint64_t fp);
/* A hold of store_erase_begin() ends; nothing was erased. */
void store_erase_release(struct store *s, struct ns *ns, uint64_t token);
/* Whether no new block may be accepted under that key of ns now. */
bool store_erase_pending(const struct store *s, const struct ns *ns, const uint8_t *key);
/* Erase a slot holding a copy of the key fp names (of ns, NULL for a
 * namespace recovery declined) through the tier, and free it after. */
void store_copy_erase(struct store *s, struct ns *ns, uint64_t fp, struct spill_region *r,
		      uint32_t slot);
/* Shutdown: what it holds goes. */
void store_erasures_done(struct store *s);
/* While the tier recovers: a block leaves the index; whether that key of
 * that scope left it since recovery began. */
void store_gone_add(struct store *s, const struct block *b);
bool store_gone_has(const struct store *s, uint64_t scope, const uint8_t *key);

/* store-blocks.c */
/* The ledger's record of b's host slot, brought up to date: b's key while
 * b is indexed, resident and in host memory with its bytes final, none
 * otherwise (a restart adopts what it says, store-adopt.c). */
void store_block_ledger(struct block *b);
/* Out of the index as store_block_unindex(), but not remembered as gone
 * during recovery: a newer copy of its key takes its place. */
void store_block_unindex_only(struct block *b);
/* The tier's I/O on b ended (its result dealt with): an unindexed block
 * gives up its NVMe copy and its hold on the key, and is freed if it can
 * be. */
void store_block_io_end(struct block *b);
/* A zeroed block of ns for key (its fingerprint set), in no index yet;
 * NULL when out of memory (or FAULT_BLOCK). */
struct block *store_block_new(struct store *s, struct ns *ns, const uint8_t *key);
/* Out of the index, the host eviction list and the queue of partial
 * blocks; the counts follow; its NVMe copy is erased
 * (store_block_unindex_only()). */
void store_block_unindex(struct block *b);
/* Give the host slot back to its extent (a dirty one stops counting). */
void store_host_slot_release(struct block *b);
/* Give up b's NVMe copy, if it has one: off its namespace's NVMe list and
 * its tenant's NVMe bytes, its slot erased through the tier. */
void store_disk_copy_drop(struct store *s, struct block *b);
/* Freed once nothing can still read or write its slots: out of the index,
 * no handle, no I/O. */
void store_block_maybe_free(struct block *b);
/* Every shard committed (or fetched, or recovered): visible from now on,
 * and a partial block no more. */
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

/* store-partial.c: b's first shard of several was just committed: its
 * record made and queued (b->partial), before shards_committed counts it.
 * \return 0, or -ENOMEM (b as it was) */
int store_partial_note(struct store *s, struct block *b);

/* store-fragmentation.c: class c of tenant t found no free slot and no
 * room for an extent; counts the allocation as starved when another class
 * holds free slots, and warns (at most once a minute per tenant) when the
 * tenant's fill is below [pool] fragmentation_alert. */
void store_frag_no_room(struct store *s, struct tenant *t, struct slot_class *c);

/* store-handles.c: tenant t's handle table as its ledger kept it
 * (store-adopt.c): each live record restored under its id, holding the
 * block block_of() gives (NULL: not restored), the others leaving the
 * generation of their last id, so that no id a client still holds names
 * another handle.  Counts in ret's leases, reservations, handles_bad. */
int store_handles_restore(struct store *s, struct tenant *t,
			  struct block *(*block_of)(void *userdata, struct tenant *t,
						    const struct ledger_handle *h),
			  void *userdata, struct store_adopted *ret);
/* store-handles.c */
/* \return 0, -ENOBUFS at [limits] handles, or -ENOMEM */
int store_handle_new(struct store *s, struct tenant *t, uint8_t kind,
		     struct block *b, uint32_t shard, struct process *owner,
		     struct handle **ret);
/* The live handle of that id, or NULL. */
struct handle *store_handle_find(struct tenant *t, uint64_t id);
/* Forget a handle; the block's own bookkeeping is the caller's. */
void store_handle_free(struct tenant *t, struct handle *h);
