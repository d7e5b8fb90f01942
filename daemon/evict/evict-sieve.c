/* SPDX-License-Identifier: Apache-2.0 */
/*
 * SIEVE (Zhang et al., NSDI '24): one FIFO (EVICT_Q_MAIN), a visited bit
 * (freq), and a hand that moves from the oldest end clearing bits until it
 * finds a block not visited since the hand last passed.  A hit only sets
 * the bit: blocks never move.  stamp is not used.
 */
#include "evict-policy.h"

struct sieve_state {
	struct evict_lru q;
	struct evict_node *hand; /* where the next search starts; NULL: the oldest */
};

static int sieve_init(void *state, const struct keyhash *hash)
{
	struct sieve_state *s = state;

	evict_lru_init(&s->q);
	s->hand = NULL;
	return 0;
}

static void sieve_insert(void *state, struct evict_entry *x)
{
	struct sieve_state *s = state;

	if (x->queue == EVICT_Q_NONE) {
		x->freq = 0;
		x->queue = EVICT_Q_MAIN;
	}
	evict_lru_insert(&s->q, &x->node);
}

static void sieve_remove(void *state, struct evict_entry *x)
{
	struct sieve_state *s = state;

	/* The hand moves on to the next younger block: the one it would
	 * have looked at next. */
	if (s->hand == &x->node)
		s->hand = x->node.prev == &s->q.head ? NULL : x->node.prev;
	evict_lru_remove(&s->q, &x->node);
}

static void sieve_touch(void *state, struct evict_entry *x)
{
	x->freq = 1;
}

static struct evict_entry *sieve_victim(void *state)
{
	struct sieve_state *s = state;
	struct evict_lru *q = &s->q;
	struct evict_node *p = s->hand ? s->hand : q->head.prev;

	if (!q->n)
		return NULL;
	/* At most one lap clears every bit. */
	for (;;) {
		if (p == &q->head)
			p = q->head.prev;
		struct evict_entry *x = evict_entry_of(p);
		if (!x->freq) {
			s->hand = p;
			return x;
		}
		x->freq = 0;
		p = p->prev;
	}
}

/* The walk is the FIFO's order, oldest first, not the hand's: near the
 * victim, but the victim need not be the oldest. */
static struct evict_entry *sieve_oldest(const void *state)
{
	const struct sieve_state *s = state;

	return evict_lru_oldest(&s->q);
}

static struct evict_entry *sieve_walk_next(const void *state, const struct evict_entry *x)
{
	const struct sieve_state *s = state;

	return evict_lru_next(&s->q, x);
}

static uint64_t sieve_count(const void *state)
{
	const struct sieve_state *s = state;

	return s->q.n;
}

const struct evict_policy_ops evict_policy_sieve = {
	.name = "sieve",
	.state_size = sizeof(struct sieve_state),
	.init = sieve_init,
	.insert = sieve_insert,
	.remove = sieve_remove,
	.touch = sieve_touch,
	.victim = sieve_victim,
	.oldest = sieve_oldest,
	.walk_next = sieve_walk_next,
	.count = sieve_count,
};
