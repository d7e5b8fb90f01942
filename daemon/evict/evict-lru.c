/* SPDX-License-Identifier: Apache-2.0 */
/*
 * LRU: the least recently used block goes.  One queue (EVICT_Q_MAIN); a
 * hit moves a block to its young end.  freq and stamp are not used.
 */
#include "evict-policy.h"

struct lru_state {
	struct evict_lru q;
};

static int lru_init(void *state, const struct keyhash *hash)
{
	struct lru_state *s = state;

	evict_lru_init(&s->q);
	return 0;
}

static void lru_insert(void *state, struct evict_entry *x)
{
	struct lru_state *s = state;

	if (x->queue == EVICT_Q_NONE) {
		x->freq = 0;
		x->queue = EVICT_Q_MAIN;
	}
	evict_lru_insert(&s->q, &x->node);
}

static void lru_remove(void *state, struct evict_entry *x)
{
	struct lru_state *s = state;

	evict_lru_remove(&s->q, &x->node);
}

static void lru_touch(void *state, struct evict_entry *x)
{
	struct lru_state *s = state;

	evict_lru_touch(&s->q, &x->node);
}

static struct evict_entry *lru_victim(void *state)
{
	struct lru_state *s = state;
	struct evict_node *n = evict_lru_victim(&s->q);

	return n ? evict_entry_of(n) : NULL;
}

static struct evict_entry *lru_oldest(const void *state)
{
	const struct lru_state *s = state;

	return evict_lru_oldest(&s->q);
}

static struct evict_entry *lru_walk_next(const void *state, const struct evict_entry *x)
{
	const struct lru_state *s = state;

	return evict_lru_next(&s->q, x);
}

static uint64_t lru_count(const void *state)
{
	const struct lru_state *s = state;

	return s->q.n;
}

const struct evict_policy_ops evict_policy_lru = {
	.name = "lru",
	.state_size = sizeof(struct lru_state),
	.init = lru_init,
	.insert = lru_insert,
	.remove = lru_remove,
	.touch = lru_touch,
	.victim = lru_victim,
	.oldest = lru_oldest,
	.walk_next = lru_walk_next,
	.count = lru_count,
};
