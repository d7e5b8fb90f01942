/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The clients' operations on blocks: lookup, reserve and commit or abort,
 * acquire and release, touch, prefetch, delete and evict.  Batches of keys
 * in, one status per key out; the store decides and does no socket I/O.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store-private.h"
#include "store.h"

static uint64_t shard_offset(const struct block *b, uint32_t shard)
{
	return (uint64_t)b->slot * b->extent->slot_bytes +
	       (uint64_t)shard * b->ns->geo.shard_stride;
}

/* The keys right after the leading hits that are nowhere locally: the
 * remote tier is asked for them in one round, and those it fetches are
 * staging (KVT_STATE_DISK) and join the leading run. */
static uint32_t remote_fetch(struct store *s, struct ns *ns, const uint8_t *keys, uint32_t n,
			     uint32_t leading, uint8_t *ret_states)
{
	uint32_t m = 0;

	if (!s->remote_ops)
		return 0;
	while (leading + m < n && ret_states[leading + m] == KVT_STATE_MISS)
		m++;
	uint32_t f = m ? s->remote_ops->fetch(s->remote, ns, keys + (size_t)leading * KVT_KEY_SIZE, m)
		       : 0;
	for (uint32_t i = leading; i < leading + f; i++) {
		ret_states[i] = KVT_STATE_DISK;
		ns->c.misses--;
		ns->c.pending++;
	}
	return f;
}

void store_lookup_keys(struct store *s, struct ns *ns, const uint8_t *keys, uint32_t from,
		       uint32_t n, uint32_t flags, uint8_t *ret_states)
{
	/* Backwards, so that a touched chain's head ends up most recently
	 * used: a prefix is worthless without its first block, so its tail
	 * should go first. */
	struct index_keys kk;

	index_keys_init(&kk, &ns->index, keys + (size_t)from * KVT_KEY_SIZE, n);
	if ((flags & KVT_LOOKUP_TOUCH) && evict_wants_lookup(&ns->cls->policy)) {
		/* The policy sees the request head first, resident or not,
		 * before its hits are touched (lrfu-admit's shadows score the
		 * leading run each setting would have hit). */
		uint64_t fp[64];
		for (uint32_t i = 0; i < n; i += 64) {
			uint32_t m = n - i < 64 ? n - i : 64;
			for (uint32_t j = 0; j < m; j++)
				fp[j] = store_key_fingerprint(
					s, keys + (size_t)(from + i + j) * KVT_KEY_SIZE);
			evict_lookup(&ns->cls->policy, fp, m, from == 0 && i == 0);
		}
	}
	for (uint32_t i = from + n; i-- > from;) {
		struct block *b = index_keys_get(&kk, i - from);
		uint8_t st = KVT_STATE_MISS;
		if (b && b->state == BLOCK_RESIDENT && !b->extent && !store_disk_usable(b)) {
			/* Its only copy is on a failed spill file: gone. */
			store_block_drop(s, b);
			b = NULL;
		}
		if (b && b->io == BLOCK_IO_FETCH) {
			/* Being fetched from the remote tier: staging, like a
			 * block on NVMe, but not a hit until its bytes check. */
			st = KVT_STATE_DISK;
			ns->c.pending++;
		} else if (b && b->state == BLOCK_RESIDENT && (!b->extent || b->io == BLOCK_IO_READ)) {
			/* On NVMe: a hit all the same, and staging starts now so
			 * the acquire that follows finds it in host memory. */
			st = KVT_STATE_DISK;
			ns->c.hits++;
			ns->c.disk_hits++;
			if (flags & KVT_LOOKUP_TOUCH) {
				evict_touch(&ns->cls->policy, &b->evict); /* off the list: its band */
				store_dirty_update(b, DIRTY_USED);
			}
		} else if (b && b->state == BLOCK_RESIDENT) {
			st = KVT_STATE_HOST;
			ns->c.hits++;
			if (flags & KVT_LOOKUP_TOUCH) {
				evict_touch(&ns->cls->policy, &b->evict);
				store_dirty_update(b, DIRTY_USED);
			}
		} else if (b) {
			st = KVT_STATE_PENDING;
			ns->c.pending++;
		} else {
			ns->c.misses++;
		}
		ret_states[i] = st;
	}
}

uint32_t store_lookup_end(struct store *s, struct ns *ns, const uint8_t *keys, uint32_t n,
			  uint8_t *ret_states)
{
	uint32_t leading = 0;

	ns->c.lookups++;
	ns->c.lookup_keys += n;
	/* Staging in chain order: the head of a prefix is needed first.  One
	 * that cannot start now (no memory for it) or whose copy is gone (since
	 * its key was looked up, in a lookup taken in parts) is a miss for this
	 * lookup: the client computes it rather than wait for a notification
	 * that would never come. */
	for (uint32_t i = 0; i < n; i++) {
		if (ret_states[i] != KVT_STATE_DISK)
			continue;
		struct block *b = index_get(&ns->index, keys + (size_t)i * KVT_KEY_SIZE);
		if (b && b->io == BLOCK_IO_FETCH)
			continue; /* still on its way from the remote tier */
		if (b && b->state == BLOCK_RESIDENT && b->extent && b->io != BLOCK_IO_READ) {
			/* Staged or fetched since its key was looked up (a lookup
			 * taken in parts): its BLOCK_READY went out before this
			 * reply, and a client told DISK would wait for another. */
			ret_states[i] = KVT_STATE_HOST;
		} else if (!b || (!b->extent && (!s->nvme_ops || s->nvme_ops->stage(s->nvme, b) < 0))) {
			ret_states[i] = KVT_STATE_MISS;
			ns->c.misses++;
			if (s->nvme_ops) {
				ns->c.hits--;
				ns->c.disk_hits--;
			} else {
				ns->c.pending--; /* only the remote tier stages */
			}
		}
	}
	for (uint32_t i = 0; i < n; i++) {
		if (ret_states[i] != KVT_STATE_HOST && ret_states[i] != KVT_STATE_DISK)
			break;
		leading++;
	}
	return leading + remote_fetch(s, ns, keys, n, leading, ret_states);
}

uint8_t store_key_arrival(struct ns *ns, const uint8_t *key)
{
	const struct block *b = index_get(&ns->index, key);

	if (b && (b->io == BLOCK_IO_READ || b->io == BLOCK_IO_FETCH))
		return KVT_STATE_DISK;
	if (b && b->state == BLOCK_RESIDENT && b->extent)
		return KVT_STATE_HOST;
	return KVT_STATE_MISS;
}

int store_reserve_room(struct store *s, struct ns *ns, const uint8_t *keys, uint32_t n, int node)
{
	uint64_t fresh = 0;

	struct index_keys kk;

	index_keys_init(&kk, &ns->index, keys, n);
	for (uint32_t i = 0; i < n; i++) {
		struct block *b = index_keys_get(&kk, i);
		fresh += !b || b->io == BLOCK_IO_FETCH;
	}
	return fresh ? store_class_room(s, ns->tenant, ns->cls, node, fresh) : 0;
}

void store_reserve(struct store *s, struct ns *ns, uint32_t shard,
		   const uint8_t *keys, uint32_t n, struct process *owner, int node,
		   struct kvt_slot *ret)
{
	struct tenant *t = ns->tenant;
	struct index_keys kk;

	index_keys_init(&kk, &ns->index, keys, n);
	for (uint32_t i = 0; i < n; i++) {
		const uint8_t *key = keys + (size_t)i * KVT_KEY_SIZE;
		struct kvt_slot *out = &ret[i];
		struct block *b = index_keys_get(&kk, i);
		bool fresh = false;
		struct handle *h;
		int r;

		memset(out, 0, sizeof(*out));
		if (b && b->io == BLOCK_IO_FETCH) {
			/* The client computes it rather than wait for the remote
			 * tier (a key before it missed): the fetch is dropped
			 * when it lands. */
			store_block_unindex(b);
			b = NULL;
		}
		if (b && b->state == BLOCK_RESIDENT) {
			out->status = -EEXIST;
			continue;
		}
		if (b && (*block_shards_taken(b) >> shard) & 1) {
			out->status = -EBUSY;
			continue;
		}
		if (!b && (s->recovering || store_erase_pending(s, ns, key))) {
			/* An older copy of the key may still be on NVMe (the
			 * scan has not passed it, or its erasure has not
			 * landed): were this block committed and the daemon
			 * killed, that copy would be found and served. */
			ns->c.deferred++;
			out->status = -EAGAIN;
			continue;
		}
		if (!b) {
			struct extent *e;
			uint32_t slot;
			r = store_class_alloc(s, t, ns->cls, node, 0, &e, &slot);
			if (r < 0) {
				ns->c.rejected++;
				out->status = r;
				continue;
			}
			b = store_block_new(s, ns, key);
			if (!b) {
				slots_release(&e->slots, slot);
				ns->cls->used_slots--;
				out->status = -ENOMEM;
				continue;
			}
			b->extent = e;
			b->slot = slot;
			b->state = BLOCK_RESERVED;
			if (index_put(&ns->index, b) < 0) {
				b->indexed = false;
				store_block_maybe_free(b);
				out->status = -ENOMEM;
				continue;
			}
			b->indexed = true;
			ns->blocks_reserved++;
			fresh = true;
		}
		r = store_handle_new(s, t, HANDLE_RESERVATION, b, shard, owner, &h);
		if (r < 0) {
			if (fresh) {
				store_block_unindex(b);
				store_block_maybe_free(b);
			}
			ns->c.rejected++;
			out->status = r;
			continue;
		}
		*block_shards_taken(b) |= UINT64_C(1) << shard;
		out->handle = h->id;
		out->extent_id = b->extent->id;
		out->offset = shard_offset(b, shard);
	}
}

void store_acquire(struct store *s, struct ns *ns, uint32_t shard,
		   const uint8_t *keys, uint32_t n, struct process *owner,
		   struct kvt_slot *ret)
{
	struct index_keys kk;

	index_keys_init(&kk, &ns->index, keys, n);
	for (uint32_t i = 0; i < n; i++) {
		struct block *b = index_keys_get(&kk, i);
		struct kvt_slot *out = &ret[i];
		struct handle *h;

		memset(out, 0, sizeof(*out));
		if (!b) {
			out->status = -ENOENT;
			continue;
		}
		if (b->state != BLOCK_RESIDENT) {
			out->status = -EAGAIN;
			continue;
		}
		if (!b->extent || b->io == BLOCK_IO_READ) {
			/* On NVMe: pending; it will be in host memory shortly. */
			if (!b->extent && s->nvme_ops)
				s->nvme_ops->stage(s->nvme, b);
			out->status = -EAGAIN;
			continue;
		}
		int r = store_handle_new(s, ns->tenant, HANDLE_LEASE, b, shard, owner, &h);
		if (r < 0) {
			ns->c.rejected++;
			out->status = r;
			continue;
		}
		/* Pinned: off the eviction list until the last lease goes. */
		evict_remove(&ns->cls->policy, &b->evict);
		store_dirty_update(b, 0);
		if (b->uses < UINT8_MAX)
			b->uses++;
		if (s->remote_ops)
			s->remote_ops->used(s->remote, b);
		ns->c.loads++;
		ns->c.load_bytes += ns->geo.shard_bytes;
		out->handle = h->id;
		out->extent_id = b->extent->id;
		out->offset = shard_offset(b, shard);
	}
}

/* End a reservation.  success: the shard's bytes are complete. */
static int reservation_end(struct handle *h, bool success)
{
	struct tenant *t = h->tenant;
	struct block *b = h->block;
	struct ns *ns = b->ns;
	int r = 0;

	/* Its shard stays taken: committed, it may not be reserved again;
	 * failed, the block leaves the index, and a new one is made. */
	store_handle_free(t, h);
	if (!b->indexed) {
		r = -ECANCELED; /* another shard failed, or the key was deleted */
	} else if (!success) {
		/* One failed shard makes the whole block useless: no rank
		 * may be served a block with a hole in it. */
		ns->c.aborts++;
		store_block_unindex(b);
	} else if (b->shards_committed + 1u == ns->geo.shards) {
		store_block_resident(b);
		ns->blocks_reserved--;
		ns->blocks_resident++;
		ns->c.stores++;
		ns->c.store_bytes += ns->geo.shard_bytes * ns->geo.shards;
		ns->tenant->dirty += b->extent->slot_bytes;
		store_block_ledger(b);
		store_evict_maybe_insert(b);
		struct store *s = ns->tenant->store;
		if (s->remote_ops)
			s->remote_ops->used(s->remote, b);
	} else if (!b->shards_committed && store_partial_note(ns->tenant->store, b) < 0) {
		/* Without its record the block would have no deadline, and
		 * could wait for its other shards for ever: it goes now, as
		 * if this shard had failed. */
		ns->c.aborts++;
		store_block_unindex(b);
		r = -ECANCELED;
	} else {
		b->shards_committed++;
	}
	store_block_maybe_free(b);
	return r;
}

static void lease_end(struct handle *h)
{
	struct block *b = h->block;

	store_handle_free(h->tenant, h);
	store_evict_maybe_insert(b);
	store_block_maybe_free(b);
}

/* The handle id names, if it is of that kind; else NULL, and *ret says
 * why (-ENOENT: no such handle; -EINVAL: a handle of the other kind). */
static struct handle *handle_of(struct tenant *t, uint64_t id, uint8_t kind, int32_t *ret)
{
	struct handle *hd = store_handle_find(t, id);

	*ret = !hd ? -ENOENT : hd->kind != kind ? -EINVAL : 0;
	return *ret ? NULL : hd;
}

void store_commit(struct store *s, struct tenant *t,
		  const struct kvt_handle_arg *h, uint32_t n, int32_t *ret)
{
	/* Backwards for the same reason as lookups: a batch is usually a
	 * chain, and its head should be the last to be evicted. */
	for (uint32_t i = n; i-- > 0;) {
		struct handle *hd = handle_of(t, h[i].handle, HANDLE_RESERVATION, &ret[i]);
		if (hd)
			ret[i] = reservation_end(hd, h[i].flag != 0);
	}
}

void store_abort(struct store *s, struct tenant *t,
		 const struct kvt_handle_arg *h, uint32_t n, int32_t *ret)
{
	for (uint32_t i = 0; i < n; i++) {
		struct handle *hd = handle_of(t, h[i].handle, HANDLE_RESERVATION, &ret[i]);
		if (hd)
			ret[i] = reservation_end(hd, false);
	}
}

void store_release(struct store *s, struct tenant *t,
		   const struct kvt_handle_arg *h, uint32_t n, int32_t *ret)
{
	for (uint32_t i = 0; i < n; i++) {
		struct handle *hd = handle_of(t, h[i].handle, HANDLE_LEASE, &ret[i]);
		if (hd)
			lease_end(hd);
	}
}

void store_handle_drop(struct store *s, struct tenant *t, struct handle *h)
{
	if (h->kind == HANDLE_RESERVATION)
		reservation_end(h, false);
	else
		lease_end(h);
}

void store_touch(struct store *s, struct ns *ns, const uint8_t *keys,
		 uint32_t n, int32_t *ret)
{
	struct index_keys kk;

	index_keys_init(&kk, &ns->index, keys, n);
	for (uint32_t i = 0; i < n; i++) {
		struct block *b = index_keys_get(&kk, i);
		if (b && b->state == BLOCK_RESIDENT) {
			evict_touch(&ns->cls->policy, &b->evict); /* a no-op off the list */
			store_dirty_update(b, DIRTY_USED);
			ret[i] = 0;
		} else {
			ret[i] = -ENOENT;
		}
	}
}

/* A block whose host copy can go while its NVMe copy stays the block. */
static bool host_copy_evictable(const struct block *b)
{
	return b->state == BLOCK_RESIDENT && b->extent && b->clean && b->io == BLOCK_IO_NONE &&
	       !b->handles;
}

/* What an eviction from host memory alone leaves: blocks on NVMe only,
 * or being staged from there. */
static bool on_nvme_only(const struct block *b)
{
	return block_disk(b) && (!b->extent || b->io == BLOCK_IO_READ);
}

void store_ns_evict_begin(struct store_evict *e, bool drop)
{
	*e = (struct store_evict){.drop = drop, .pass = drop ? 1 : 0};
}

/* Whether b (or an empty slot, NULL) goes in this pass. */
static bool evict_takes(const struct store_evict *e, const struct block *b)
{
	if (!b)
		return false;
	if (e->pass == 0)
		return host_copy_evictable(b);
	return e->drop || !on_nvme_only(b);
}

bool store_ns_evict_some(struct store *s, struct ns *ns, struct store_evict *e, size_t slots)
{
	/* The table grew (blocks stored since the last part): positions
	 * mean nothing in it; the pass starts again, and only what it
	 * still has to take counts. */
	if (e->cap != ns->index.cap) {
		e->cap = ns->index.cap;
		e->pos = 0;
	}
	for (size_t end = e->pos + slots; e->pos < e->cap && e->pos < end; e->pos++) {
		struct block *b;
		/* The first pass leaves NVMe copies (evict, not drop); the
		 * second takes blocks out of the index.  A removal pulls the
		 * next member of the probe run into this slot (backward
		 * shift), so the slot is looked at again; what a removal
		 * moves never lands in a slot already passed with a block
		 * this pass would take. */
		while (evict_takes(e, b = index_slot(&ns->index, e->pos))) {
			e->n++;
			if (e->pass == 0) {
				store_block_spilled(s, b);
				break;
			}
			ns->c.evictions++;
			store_block_unindex(b);
			store_block_maybe_free(b);
		}
	}
	if (e->pos < e->cap)
		return false;
	if (e->pass == 1)
		return true;
	e->pass = 1;
	e->pos = 0;
	return false;
}

void store_prefetch(struct store *s, struct ns *ns, const uint8_t *keys,
		    uint32_t n, int32_t *ret)
{
	struct index_keys kk;

	index_keys_init(&kk, &ns->index, keys, n);
	for (uint32_t i = 0; i < n; i++) {
		struct block *b = index_keys_get(&kk, i);
		if (!b || b->state != BLOCK_RESIDENT) {
			ret[i] = b ? -EINPROGRESS : -ENOENT;
			continue;
		}
		if (b->extent && b->io != BLOCK_IO_READ) {
			ret[i] = 0;
			continue;
		}
		if (!b->extent && s->nvme_ops)
			s->nvme_ops->stage(s->nvme, b);
		ret[i] = -EINPROGRESS;
	}
}

void store_delete(struct store *s, struct ns *ns, const uint8_t *keys,
		  uint32_t n, int32_t *ret)
{
	struct index_keys kk;

	index_keys_init(&kk, &ns->index, keys, n);
	for (uint32_t i = 0; i < n; i++) {
		struct block *b = index_keys_get(&kk, i);
		if (s->recovering) {
			/* The scan may still find a copy of it. */
			ns->c.deferred++;
			ret[i] = -EAGAIN;
			continue;
		}
		if (!b) {
			ret[i] = -ENOENT;
			continue;
		}
		ns->c.deletes++;
		store_block_unindex(b);
		store_block_maybe_free(b);
		ret[i] = 0;
	}
}
