/* SPDX-License-Identifier: Apache-2.0 */
#include "evict-arc.h"
#include "evict-policy.h"

static struct evict_lru *queue_of(struct evict_arc_state *s, const struct evict_entry *x)
{
	return x->queue == EVICT_Q_SMALL ? &s->t1 : &s->t2;
}

static uint64_t arc_count(const void *state)
{
	const struct evict_arc_state *s = state;

	return s->t1.n + s->t2.n;
}

/* The ghost lists are nominally as long as the other queue is (T1 + B1
 * and T2 + B2 each at most the cache); their lengths only steer how fast
 * the target moves, so the nominal ones will do. */
static uint64_t nominal(uint64_t n)
{
	return n ? n : 1;
}

static uint64_t b1_len(const struct evict_arc_state *s)
{
	return nominal(s->t2.n);
}

static uint64_t b2_len(const struct evict_arc_state *s)
{
	return nominal(s->t1.n);
}

static int arc_init(void *state, const struct keyhash *hash)
{
	struct evict_arc_state *s = state;

	evict_lru_init(&s->t1);
	evict_lru_init(&s->t2);
	evict_ghost_init(&s->b1, hash);
	evict_ghost_init(&s->b2, hash);
	s->p = 0;
	return 0;
}

static void arc_done(void *state)
{
	struct evict_arc_state *s = state;

	evict_ghost_done(&s->b1);
	evict_ghost_done(&s->b2);
}

/* Where a new block goes, and what its ghost says of the target. */
static void arc_admit(struct evict_arc_state *s, struct evict_entry *x)
{
	uint64_t c = arc_count(s) + 1;

	if (evict_ghost_take(&s->b1, x->fp)) {
		/* Evicted from T1 too soon: give recency more room. */
		uint64_t d = b2_len(s) / b1_len(s);
		s->p += d ? d : 1;
		if (s->p > c)
			s->p = c;
		x->queue = EVICT_Q_MAIN;
	} else if (evict_ghost_take(&s->b2, x->fp)) {
		/* Evicted from T2 too soon: give frequency more room. */
		uint64_t d = b1_len(s) / b2_len(s);
		d = d ? d : 1;
		s->p = s->p > d ? s->p - d : 0;
		x->queue = EVICT_Q_MAIN;
	} else {
		x->queue = EVICT_Q_SMALL;
	}
}

static void arc_insert(void *state, struct evict_entry *x)
{
	struct evict_arc_state *s = state;

	if (x->queue == EVICT_Q_NONE) {
		x->freq = 0;
		arc_admit(s, x);
	}
	evict_lru_insert(queue_of(s, x), &x->node);
}

static void arc_remove(void *state, struct evict_entry *x)
{
	evict_lru_remove(queue_of(state, x), &x->node);
}

/* Hit since it was stored: T2's young end. */
static void arc_touch(void *state, struct evict_entry *x)
{
	struct evict_arc_state *s = state;

	evict_lru_remove(queue_of(s, x), &x->node);
	x->queue = EVICT_Q_MAIN;
	evict_lru_insert(&s->t2, &x->node);
}

static struct evict_entry *arc_victim(void *state)
{
	struct evict_arc_state *s = state;

	if (s->t1.n && (s->t1.n > s->p || !s->t2.n))
		return evict_entry_of(s->t1.head.prev);
	return s->t2.n ? evict_entry_of(s->t2.head.prev) : NULL;
}

/* T1 from its old end, then T2. */
static struct evict_entry *arc_oldest(const void *state)
{
	const struct evict_arc_state *s = state;

	return s->t1.n ? evict_lru_oldest(&s->t1) : evict_lru_oldest(&s->t2);
}

static struct evict_entry *arc_walk_next(const void *state, const struct evict_entry *x)
{
	const struct evict_arc_state *s = state;
	const struct evict_lru *q = x->queue == EVICT_Q_SMALL ? &s->t1 : &s->t2;

	struct evict_entry *next = evict_lru_next(q, x);

	return next || q == &s->t2 ? next : evict_lru_oldest(&s->t2);
}

/* Every eviction is remembered, in the ghost of the queue it left. */
static void arc_evicted(void *state, struct evict_entry *x)
{
	struct evict_arc_state *s = state;
	bool t1 = x->queue == EVICT_Q_SMALL;

	arc_remove(s, x);
	if (t1)
		evict_ghost_put(&s->b1, x->fp, b1_len(s));
	else
		evict_ghost_put(&s->b2, x->fp, b2_len(s));
}

const struct evict_policy_ops evict_policy_arc = {
	.name = "arc",
	.state_size = sizeof(struct evict_arc_state),
	.init = arc_init,
	.done = arc_done,
	.insert = arc_insert,
	.remove = arc_remove,
	.touch = arc_touch,
	.victim = arc_victim,
	.oldest = arc_oldest,
	.walk_next = arc_walk_next,
	.evicted = arc_evicted,
	.count = arc_count,
};
