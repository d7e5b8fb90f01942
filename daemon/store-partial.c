/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Blocks that some tensor-parallel ranks committed and the others never
 * did (a rank's store skipped, refused or lost with its connection before
 * it reserved): they are not visible, and nothing else would ever end
 * them.  Each is dropped [limits] partial_block_ms after its first shard
 * was committed, its slot freed; a reservation still out on it is then
 * answered -ECANCELED at its commit.
 *
 * The queue names blocks by tenant, namespace and key, never by pointer:
 * a block may go (completed, evicted, deleted) before its turn comes, and
 * is then simply not found, or found visible and left alone.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <time.h>

#include "macro.h"
#include "store-private.h"
#include "store.h"

struct partial {
	uint32_t tenant_id, ns_id;
	uint8_t key[KVT_KEY_SIZE];
	uint64_t deadline_ms; /* CLOCK_MONOTONIC */
	STAILQ_ENTRY(partial) link;
};

static uint64_t now_ms(void)
{
	return kvt_now_ns() / 1000000;
}

void store_partial_note(struct store *s, struct block *b)
{
	struct partial *p = malloc(sizeof(*p));

	if (!p)
		return; /* the block then waits for its other shards, or its end */
	p->tenant_id = b->ns->tenant->id;
	p->ns_id = b->ns->id;
	memcpy(p->key, b->key, KVT_KEY_SIZE);
	p->deadline_ms = now_ms() + s->config->partial_block_ms;
	STAILQ_INSERT_TAIL(&s->partials, p, link);
	s->n_partials++;
}

uint64_t store_partial_expire(struct store *s)
{
	uint64_t now = now_ms(), dropped = 0;
	struct partial *p;

	while ((p = STAILQ_FIRST(&s->partials)) && p->deadline_ms <= now) {
		STAILQ_REMOVE_HEAD(&s->partials, link);
		s->n_partials--;
		struct tenant *t = store_tenant_by_id(s, p->tenant_id);
		struct ns *ns = t ? store_ns_get(t, p->ns_id) : NULL;
		struct block *b = ns ? index_get(&ns->index, p->key) : NULL;
		free(p);
		if (!b || b->state == BLOCK_RESIDENT || !b->shards_committed)
			continue; /* completed, gone, or a new block under the key */
		ns->c.aborts++;
		ns->c.partial_drops++;
		store_block_unindex(b);
		store_block_maybe_free(b);
		dropped++;
	}
	return dropped;
}

void store_partial_done(struct store *s)
{
	struct partial *p;

	while ((p = STAILQ_FIRST(&s->partials))) {
		STAILQ_REMOVE_HEAD(&s->partials, link);
		free(p);
	}
	s->n_partials = 0;
}
