/* SPDX-License-Identifier: Apache-2.0 */
#include "evict-policy.h"
#include "evict-s3fifo.h"

#define S3FIFO_FREQ_MAX 3

static struct evict_lru *queue_of(struct evict_s3fifo_state *s, const struct evict_entry *x)
{
	return x->queue == EVICT_Q_SMALL ? &s->small : &s->main;
}

static uint64_t s3fifo_count(const void *state)
{
	const struct evict_s3fifo_state *s = state;

	return s->main.n + s->small.n;
}

static int s3fifo_init(void *state, const struct keyhash *hash)
{
	struct evict_s3fifo_state *s = state;

	evict_lru_init(&s->main);
	evict_lru_init(&s->small);
	evict_ghost_init(&s->ghost, hash);
	s->small_percent = EVICT_S3FIFO_SMALL_PERCENT;
	return 0;
}

static void s3fifo_done(void *state)
{
	struct evict_s3fifo_state *s = state;

	evict_ghost_done(&s->ghost);
}

static void s3fifo_insert(void *state, struct evict_entry *x)
{
	struct evict_s3fifo_state *s = state;

	if (x->queue == EVICT_Q_NONE) {
		x->freq = 0;
		/* A block dropped from probation and stored again while it is
		 * remembered proved itself: it skips probation. */
		x->queue = evict_ghost_take(&s->ghost, x->fp) ? EVICT_Q_MAIN : EVICT_Q_SMALL;
	}
	evict_lru_insert(queue_of(s, x), &x->node);
}

static void s3fifo_remove(void *state, struct evict_entry *x)
{
	evict_lru_remove(queue_of(state, x), &x->node);
}

static void s3fifo_touch(void *state, struct evict_entry *x)
{
	if (x->freq < S3FIFO_FREQ_MAX)
		x->freq++;
}

static struct evict_entry *s3fifo_victim(void *state)
{
	struct evict_s3fifo_state *s = state;
	struct evict_lru *main_q = &s->main, *small = &s->small;

	/* Every turn either moves an entry out of small or takes a hit off
	 * one in main: it ends. */
	for (;;) {
		if (small->n && (small->n * 100 >= s3fifo_count(s) * s->small_percent || !main_q->n)) {
			struct evict_entry *x = evict_entry_of(small->head.prev);
			if (x->freq == 0)
				return x;
			evict_lru_remove(small, &x->node);
			x->queue = EVICT_Q_MAIN;
			x->freq = 0;
			evict_lru_insert(main_q, &x->node);
			continue;
		}
		if (!main_q->n)
			return NULL;
		struct evict_entry *x = evict_entry_of(main_q->head.prev);
		if (x->freq == 0)
			return x;
		x->freq--;
		evict_lru_touch(main_q, &x->node);
	}
}

/* The small queue from its old end, then the main one: near the victims'
 * order, which depends on hits not yet looked at. */
static struct evict_entry *s3fifo_oldest(const void *state)
{
	const struct evict_s3fifo_state *s = state;

	return s->small.n ? evict_lru_oldest(&s->small) : evict_lru_oldest(&s->main);
}

static struct evict_entry *s3fifo_walk_next(const void *state, const struct evict_entry *x)
{
	const struct evict_s3fifo_state *s = state;
	const struct evict_lru *q = x->queue == EVICT_Q_SMALL ? &s->small : &s->main;

	struct evict_entry *next = evict_lru_next(q, x);

	return next || q == &s->main ? next : evict_lru_oldest(&s->main);
}

/* Only a block that leaves from probation is remembered: one evicted from
 * main had its chance. */
static void s3fifo_evicted(void *state, struct evict_entry *x)
{
	struct evict_s3fifo_state *s = state;
	bool small = x->queue == EVICT_Q_SMALL;

	s3fifo_remove(s, x);
	if (small)
		evict_ghost_put(&s->ghost, x->fp, s3fifo_count(s) + 1);
}

const struct evict_policy_ops evict_policy_s3fifo = {
	.name = "s3fifo",
	.state_size = sizeof(struct evict_s3fifo_state),
	.init = s3fifo_init,
	.done = s3fifo_done,
	.insert = s3fifo_insert,
	.remove = s3fifo_remove,
	.touch = s3fifo_touch,
	.victim = s3fifo_victim,
	.oldest = s3fifo_oldest,
	.walk_next = s3fifo_walk_next,
	.evicted = s3fifo_evicted,
	.count = s3fifo_count,
};
