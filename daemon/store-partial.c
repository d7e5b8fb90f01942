/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Blocks that some tensor-parallel ranks committed and the others never
 * did (a rank's store skipped, refused or lost with its connection before
 * it reserved): they are not visible, and nothing else would ever end
 * them.  Each is dropped once [limits] partial_block_ms has passed since
 * its first shard was committed, its slot freed; a reservation still out
 * on it is then answered -ECANCELED at its commit.
 *
 * The deadline is the block's own (its first commit, kept in its record,
 * struct partial in store-private.h) and the limit in force when it is
 * checked: a reload applies to the blocks already waiting.  Under one
 * limit the queue, in the order of first commits, is in the order of
 * deadlines, so the sweep looks at its head only.  A record ends with its
 * block (store-blocks.c), so the queue holds no block but the partial
 * ones, and a later attempt at the same key has a record of its own.
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/queue.h>

#include "fault.h"
#include "macro.h"
#include "store-private.h"
#include "store.h"

static uint64_t now_ms(void)
{
	return kvt_now_ns() / 1000000;
}

int store_partial_note(struct store *s, struct block *b)
{
	struct partial *p = fault_hit(FAULT_PARTIAL) ? NULL : malloc(sizeof(*p));

	if (!p)
		return -ENOMEM;
	p->block = b;
	p->shards_taken = b->shards_taken;
	p->first_ms = now_ms();
	TAILQ_INSERT_TAIL(&s->partials, p, link);
	b->partial = p;
	return 0;
}

uint64_t store_partial_expire(struct store *s)
{
	uint64_t now = now_ms(), limit = s->config->partial_block_ms, dropped = 0;
	struct partial *p;

	while ((p = TAILQ_FIRST(&s->partials)) && now - p->first_ms >= limit) {
		struct block *b = p->block;
		b->ns->c.aborts++;
		b->ns->c.partial_drops++;
		store_block_unindex(b); /* its record with it */
		store_block_maybe_free(b);
		dropped++;
	}
	return dropped;
}

void store_partial_done(struct store *s)
{
	struct partial *p;

	/* Shutdown: the blocks go without looking at their shard bits. */
	while ((p = TAILQ_FIRST(&s->partials))) {
		TAILQ_REMOVE(&s->partials, p, link);
		free(p);
	}
}
