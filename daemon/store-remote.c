/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the remote tier (remote.c) asks of the store: a block to fetch a
 * key into, the end of that fetch, and the host copy of a block to write
 * back.  The tier does the cluster I/O; the block states are here.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store-private.h"
#include "store.h"

int store_remote_block(struct store *s, struct ns *ns, const uint8_t *key, struct block **ret)
{
	if (index_get(&ns->index, key))
		return -EEXIST;
	/* No host slot yet: the tier takes one (store_host_slot()) when it
	 * sends the read, or once the bytes have checked. */
	struct block *b = store_block_new(s, ns, key);
	if (!b)
		return -ENOMEM;
	b->state = BLOCK_RESERVED;
	/* Every shard taken: a client's RESERVE of the key is refused
	 * (-EBUSY) while the bytes are on their way. */
	b->shards_taken = store_all_shards(ns);
	b->io = BLOCK_IO_FETCH;
	if (index_put(&ns->index, b) < 0) {
		b->io = BLOCK_IO_NONE;
		store_block_maybe_free(b);
		return -ENOMEM;
	}
	b->indexed = true;
	ns->blocks_reserved++;
	*ret = b;
	return 0;
}

void store_remote_fetched(struct store *s, struct block *b, bool ok)
{
	struct ns *ns = b->ns;
	uint8_t key[KVT_KEY_SIZE];
	bool was_indexed = b->indexed;

	memcpy(key, b->key, KVT_KEY_SIZE);
	b->io = BLOCK_IO_NONE;
	if (b->indexed && ok && b->extent) {
		store_block_resident(b);
		b->remote = BLOCK_REMOTE_STORED;
		b->staged = true;
		ns->blocks_reserved--;
		ns->blocks_resident++;
		ns->c.restores++;
		ns->tenant->dirty += b->extent->slot_bytes; /* not on NVMe yet */
		store_block_ledger(b);
		store_evict_maybe_insert(b);
	} else {
		store_block_unindex(b);
		store_block_maybe_free(b);
	}
	/* Clients waiting for it hear that it is settled: in host memory, or
	 * a miss at their next LOOKUP.  Those told of runs hear once, when
	 * the whole run has (store_remote_run_settled()). */
	if (was_indexed && s->run_block_ready)
		s->run_block_ready(s->userdata, ns, key);
}

void store_remote_run_settled(struct store *s, struct ns *ns, const uint8_t *key, uint32_t n,
			      uint32_t served)
{
	if (s->run_ready)
		s->run_ready(s->userdata, ns, key, n, served);
}

struct block *store_remote_find(struct store *s, uint32_t tenant_id, uint32_t ns_id,
				const uint8_t *key)
{
	struct tenant *t = store_tenant_by_id(s, tenant_id);
	struct ns *ns = t ? store_ns_get(t, ns_id) : NULL;
	struct block *b = ns ? index_get(&ns->index, key) : NULL;

	if (!b || b->state != BLOCK_RESIDENT || !b->extent || b->io == BLOCK_IO_READ)
		return NULL;
	return b;
}

void store_remote_state(struct store *s, struct block *b, enum block_remote st)
{
	b->remote = st;
}
