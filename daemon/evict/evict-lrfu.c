/* SPDX-License-Identifier: Apache-2.0 */
#include <stddef.h>
#include <string.h>

#include "evict-lrfu.h"
#include "evict-policy.h"
#include "keyhash.h"

void evict_lrfu_init(struct evict_lrfu *f)
{
	memset(f, 0, sizeof(*f));
	for (unsigned l = 0; l < EVICT_LRFU_LEVELS; l++)
		evict_lru_init(&f->level[l]);
	evict_lru_init(&f->refused);
	f->weight = EVICT_LRFU_WEIGHT;
}

unsigned evict_lrfu_level(unsigned count)
{
	unsigned l = 0;

	while (count > 1 && l + 1 < EVICT_LRFU_LEVELS) {
		count >>= 1;
		l++;
	}
	return l;
}

void evict_lrfu_tick(struct evict_lrfu *f)
{
	uint64_t per = f->size / EVICT_LRFU_TICKS;

	if (++f->refs >= (per ? per : 1)) {
		f->refs = 0;
		f->clock++;
	}
}

/* The level an entry of the given request level joins: with a weight of
 * 0 every entry joins level 0, one queue in exact LRU order (the stamps
 * alone would order the levels' tails only to a tick). */
static unsigned queue_level(const struct evict_lrfu *f, unsigned level)
{
	if (!f->weight)
		return 0;
	return level < EVICT_LRFU_LEVELS ? level : EVICT_LRFU_LEVELS - 1;
}

static struct evict_lru *queue_of(struct evict_lrfu *f, const struct evict_entry *x)
{
	return x->queue == EVICT_Q_SMALL ? &f->refused : &f->level[x->freq];
}

static void link_young(struct evict_lrfu *f, struct evict_entry *x)
{
	/* A stamp per use keeps each queue in stamp order: its old end is
	 * the least recently used of its level. */
	x->stamp = f->clock;
	evict_lru_insert(queue_of(f, x), &x->node);
	if (++f->n > f->size)
		f->size = f->n;
}

void evict_lrfu_insert(struct evict_lrfu *f, struct evict_entry *x, unsigned level, bool refused)
{
	if (x->queue == EVICT_Q_NONE) {
		x->queue = refused ? EVICT_Q_SMALL : EVICT_Q_MAIN;
		x->freq = (uint8_t)queue_level(f, level);
	}
	link_young(f, x);
}

void evict_lrfu_touch(struct evict_lrfu *f, struct evict_entry *x, unsigned level)
{
	if (!evict_node_linked(&x->node))
		return;
	evict_lrfu_remove(f, x);
	x->queue = EVICT_Q_MAIN;
	x->freq = (uint8_t)queue_level(f, level);
	link_young(f, x);
}

void evict_lrfu_remove(struct evict_lrfu *f, struct evict_entry *x)
{
	if (!evict_node_linked(&x->node))
		return;
	evict_lru_remove(queue_of(f, x), &x->node);
	f->n--;
}

struct evict_entry *evict_lrfu_victim(const struct evict_lrfu *f)
{
	const struct evict_entry *best = NULL;
	int64_t best_score = 0;

	if (f->refused.n)
		return evict_entry_of(f->refused.head.prev);
	for (unsigned l = 0; l < EVICT_LRFU_LEVELS; l++) {
		if (!f->level[l].n)
			continue;
		const struct evict_entry *x = evict_entry_of(f->level[l].head.prev);
		int64_t score = (int64_t)(uint32_t)(f->clock - x->stamp) - (int64_t)f->weight * l;
		/* Ties to the lower level: the less requested goes. */
		if (!best || score > best_score) {
			best = x;
			best_score = score;
		}
	}
	return (struct evict_entry *)best;
}

/* The refused queue is number -1 of the walk, the levels 0 up. */
static const struct evict_lru *walk_queue(const struct evict_lrfu *f, int q)
{
	return q < 0 ? &f->refused : &f->level[q];
}

static struct evict_entry *walk_from(const struct evict_lrfu *f, int q)
{
	for (; q < EVICT_LRFU_LEVELS; q++)
		if (walk_queue(f, q)->n)
			return evict_entry_of(walk_queue(f, q)->head.prev);
	return NULL;
}

struct evict_entry *evict_lrfu_oldest(const struct evict_lrfu *f)
{
	return walk_from(f, -1);
}

struct evict_entry *evict_lrfu_walk_next(const struct evict_lrfu *f, const struct evict_entry *x)
{
	int q = x->queue == EVICT_Q_SMALL ? -1 : x->freq;

	if (!evict_node_linked(&x->node))
		return NULL;
	if (x->node.prev != &walk_queue(f, q)->head)
		return evict_entry_of(x->node.prev);
	return walk_from(f, q + 1);
}

/* ---- the policy ---------------------------------------------------- */

void evict_lrfu_state_init(struct evict_lrfu_state *s, const struct keyhash *hash)
{
	evict_lrfu_init(&s->q);
	count_sketch_init(&s->sketch);
	s->hash = hash;
}

void evict_lrfu_state_done(struct evict_lrfu_state *s)
{
	count_sketch_done(&s->sketch);
}

unsigned evict_lrfu_request(struct evict_lrfu_state *s, const struct evict_entry *x,
			    uint64_t *ret_h, unsigned *ret_count)
{
	uint64_t h = keyhash(s->hash, &x->fp, sizeof(x->fp));

	/* Blocks come back long after they were evicted, and their counts
	 * are what tells them apart: the sketch covers EVICT_SKETCH_COLUMNS
	 * times the tier, so that the keys of several turnovers fit before
	 * a halving without filling every counter. */
	if (s->sketch.width < EVICT_SKETCH_COLUMNS * s->q.size &&
	    s->sketch.width < s->sketch.max_width)
		(void)count_sketch_reserve(&s->sketch, EVICT_SKETCH_COLUMNS * s->q.size);
	unsigned count = count_sketch_get(&s->sketch, h);
	unsigned level = evict_lrfu_level(count_sketch_add(&s->sketch, h));
	evict_lrfu_tick(&s->q);
	*ret_h = h;
	*ret_count = count;
	return level;
}

static int lrfu_init(void *state, const struct keyhash *hash)
{
	evict_lrfu_state_init(state, hash);
	return 0;
}

static void lrfu_done(void *state)
{
	evict_lrfu_state_done(state);
}

static void lrfu_insert(void *state, struct evict_entry *x)
{
	struct evict_lrfu_state *s = state;
	unsigned level = 0;

	/* A block that was pinned keeps its level: only a new one is a
	 * request. */
	if (x->queue == EVICT_Q_NONE) {
		uint64_t h;
		unsigned count;
		level = evict_lrfu_request(s, x, &h, &count);
	}
	evict_lrfu_insert(&s->q, x, level, false);
}

static void lrfu_remove(void *state, struct evict_entry *x)
{
	struct evict_lrfu_state *s = state;

	evict_lrfu_remove(&s->q, x);
}

static void lrfu_touch(void *state, struct evict_entry *x)
{
	struct evict_lrfu_state *s = state;
	uint64_t h;
	unsigned count;

	evict_lrfu_touch(&s->q, x, evict_lrfu_request(s, x, &h, &count));
}

static struct evict_entry *lrfu_victim(void *state)
{
	const struct evict_lrfu_state *s = state;

	return evict_lrfu_victim(&s->q);
}

static struct evict_entry *lrfu_oldest(const void *state)
{
	const struct evict_lrfu_state *s = state;

	return evict_lrfu_oldest(&s->q);
}

static struct evict_entry *lrfu_walk_next(const void *state, const struct evict_entry *x)
{
	const struct evict_lrfu_state *s = state;

	return evict_lrfu_walk_next(&s->q, x);
}

static uint64_t lrfu_count(const void *state)
{
	const struct evict_lrfu_state *s = state;

	return s->q.n;
}

const struct evict_policy_ops evict_policy_lrfu = {
	.name = "lrfu",
	.state_size = sizeof(struct evict_lrfu_state),
	.init = lrfu_init,
	.done = lrfu_done,
	.insert = lrfu_insert,
	.remove = lrfu_remove,
	.touch = lrfu_touch,
	.victim = lrfu_victim,
	.oldest = lrfu_oldest,
	.walk_next = lrfu_walk_next,
	.count = lrfu_count,
};
