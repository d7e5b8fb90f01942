/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "evict.h"
#include "keyhash.h"
#include "macro.h"

#define S3FIFO_FREQ_MAX 3

/* ---- policy-generic ------------------------------------------------ */

#define entry_of(n) evict_entry_of(n)

static struct evict_lru *queue_of(struct evict *e, uint8_t q)
{
	return &e->q[q == EVICT_Q_SMALL ? 1 : 0];
}

void evict_init(struct evict *e, enum evict_policy policy, const struct keyhash *hash)
{
	memset(e, 0, sizeof(*e));
	e->policy = policy;
	evict_ghost_init(&e->ghost[0], hash);
	evict_ghost_init(&e->ghost[1], hash);
	e->small_percent = EVICT_S3FIFO_SMALL_PERCENT;
	evict_lru_init(&e->q[0]);
	evict_lru_init(&e->q[1]);
	for (int b = 0; b < _EVICT_BANDS; b++)
		evict_lru_init(&e->band[b]);
	evict_lrfu_init(&e->lrfu);
	count_sketch_init(&e->sketch);
	evict_admit_init(&e->admit);
}

void evict_done(struct evict *e)
{
	evict_ghost_done(&e->ghost[0]);
	evict_ghost_done(&e->ghost[1]);
	count_sketch_done(&e->sketch);
	evict_admit_done(&e->admit);
}

static bool is_lrfu(const struct evict *e)
{
	return e->policy == EVICT_LRFU || e->policy == EVICT_LRFU_ADMIT;
}

/*
 * A request of x's block (a hit, or a new block stored): counted in the
 * sketch, shown to the admission filter's shadows.  \return its level;
 * ret_seen tells whether the sketch had counted it before.
 */
static unsigned lrfu_request(struct evict *e, const struct evict_entry *x, bool *ret_seen)
{
	uint64_t h = keyhash(e->ghost[0].hash, &x->fp, sizeof(x->fp));

	/* Blocks come back long after they were evicted, and their counts
	 * are what tells them apart: the sketch covers EVICT_SKETCH_COLUMNS
	 * times the tier, so that the keys of several turnovers fit before
	 * a halving without filling every counter. */
	if (e->sketch.width < EVICT_SKETCH_COLUMNS * e->lrfu.size &&
	    e->sketch.width < e->sketch.max_width)
		(void)count_sketch_reserve(&e->sketch, EVICT_SKETCH_COLUMNS * e->lrfu.size);
	bool seen = count_sketch_get(&e->sketch, h) > 0;
	unsigned level = evict_lrfu_level(count_sketch_add(&e->sketch, h));
	evict_lrfu_tick(&e->lrfu);
	if (e->policy == EVICT_LRFU_ADMIT)
		evict_admit_observe(&e->admit, e->lrfu.size, h, seen, level);
	*ret_seen = seen;
	return level;
}

static void lrfu_insert(struct evict *e, struct evict_entry *x)
{
	bool seen = true;
	unsigned level = 0;

	if (x->queue == EVICT_Q_NONE)
		level = lrfu_request(e, x, &seen);
	bool refused = !seen && e->policy == EVICT_LRFU_ADMIT && e->admit.on;
	e->refused += refused;
	evict_lrfu_insert(&e->lrfu, x, level, refused);
}

/* ARC's ghost lists are nominally as long as the other queue is (T1 + B1
 * and T2 + B2 each at most the cache); their lengths only steer how fast
 * the target moves, so the nominal ones will do. */
static uint64_t arc_ghost_len(const struct evict *e, int i)
{
	uint64_t n = e->q[i ? 0 : 1].n;
	return n ? n : 1;
}

static void arc_admit(struct evict *e, struct evict_entry *x)
{
	uint64_t c = evict_policy_count(e) + 1;

	if (evict_ghost_take(&e->ghost[1], x->fp)) {
		/* Evicted from T1 too soon: give recency more room. */
		uint64_t d = arc_ghost_len(e, 0) / arc_ghost_len(e, 1);
		e->arc_p += d ? d : 1;
		if (e->arc_p > c)
			e->arc_p = c;
		x->queue = EVICT_Q_MAIN;
	} else if (evict_ghost_take(&e->ghost[0], x->fp)) {
		/* Evicted from T2 too soon: give frequency more room. */
		uint64_t d = arc_ghost_len(e, 1) / arc_ghost_len(e, 0);
		d = d ? d : 1;
		e->arc_p = e->arc_p > d ? e->arc_p - d : 0;
		x->queue = EVICT_Q_MAIN;
	} else {
		x->queue = EVICT_Q_SMALL;
	}
}

static void policy_insert(struct evict *e, struct evict_entry *x)
{
	if (is_lrfu(e)) {
		lrfu_insert(e, x);
		return;
	}
	if (x->queue == EVICT_Q_NONE) {
		x->freq = 0;
		if (e->policy == EVICT_ARC)
			arc_admit(e, x);
		/* A block dropped from probation and stored again while it is
		 * remembered proved itself: it skips probation. */
		else if (e->policy == EVICT_S3FIFO && !evict_ghost_take(&e->ghost[1], x->fp))
			x->queue = EVICT_Q_SMALL;
		else
			x->queue = EVICT_Q_MAIN;
	}
	evict_lru_insert(queue_of(e, x->queue), &x->node);
}

static void policy_remove(struct evict *e, struct evict_entry *x)
{
	if (!evict_entry_linked(x))
		return;
	if (is_lrfu(e)) {
		evict_lrfu_remove(&e->lrfu, x);
		return;
	}
	if (e->hand == &x->node)
		e->hand = x->node.prev == &e->q[0].head ? NULL : x->node.prev;
	evict_lru_remove(queue_of(e, x->queue), &x->node);
}

static void policy_touch(struct evict *e, struct evict_entry *x)
{
	if (!evict_entry_linked(x))
		return;
	switch (e->policy) {
	case EVICT_LRU:
		evict_lru_touch(queue_of(e, x->queue), &x->node);
		break;
	case EVICT_S3FIFO:
		if (x->freq < S3FIFO_FREQ_MAX)
			x->freq++;
		break;
	case EVICT_SIEVE:
		x->freq = 1;
		break;
	case EVICT_LRFU:
	case EVICT_LRFU_ADMIT: {
		bool seen;
		evict_lrfu_touch(&e->lrfu, x, lrfu_request(e, x, &seen));
		break;
	}
	case EVICT_ARC:
		/* Hit since it was stored: T2's young end. */
		evict_lru_remove(queue_of(e, x->queue), &x->node);
		x->queue = EVICT_Q_MAIN;
		evict_lru_insert(queue_of(e, x->queue), &x->node);
		break;
	default:
		break;
	}
}

static struct evict_entry *arc_victim(struct evict *e)
{
	struct evict_lru *t1 = &e->q[1], *t2 = &e->q[0];

	if (t1->n && (t1->n > e->arc_p || !t2->n))
		return entry_of(t1->head.prev);
	return t2->n ? entry_of(t2->head.prev) : NULL;
}

static struct evict_entry *s3fifo_victim(struct evict *e)
{
	struct evict_lru *main_q = &e->q[0], *small = &e->q[1];

	/* Every turn either moves an entry out of small or takes a hit off
	 * one in main: it ends. */
	for (;;) {
		if (small->n && (small->n * 100 >= evict_policy_count(e) * e->small_percent || !main_q->n)) {
			struct evict_entry *x = entry_of(small->head.prev);
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
		struct evict_entry *x = entry_of(main_q->head.prev);
		if (x->freq == 0)
			return x;
		x->freq--;
		evict_lru_touch(main_q, &x->node);
	}
}

static struct evict_entry *sieve_victim(struct evict *e)
{
	struct evict_lru *q = &e->q[0];
	struct evict_node *p = e->hand ? e->hand : q->head.prev;

	if (!q->n)
		return NULL;
	/* At most one lap clears every bit. */
	for (;;) {
		if (p == &q->head)
			p = q->head.prev;
		struct evict_entry *x = entry_of(p);
		if (!x->freq) {
			e->hand = p;
			return x;
		}
		x->freq = 0;
		p = p->prev;
	}
}

static struct evict_entry *policy_victim(struct evict *e)
{
	switch (e->policy) {
	case EVICT_S3FIFO:
		return s3fifo_victim(e);
	case EVICT_SIEVE:
		return sieve_victim(e);
	case EVICT_ARC:
		return arc_victim(e);
	case EVICT_LRFU:
	case EVICT_LRFU_ADMIT:
		return evict_lrfu_victim(&e->lrfu);
	default: {
		struct evict_node *n = evict_lru_victim(&e->q[0]);
		return n ? entry_of(n) : NULL;
	}
	}
}

static struct evict_entry *policy_oldest(const struct evict *e)
{
	if (is_lrfu(e))
		return evict_lrfu_oldest(&e->lrfu);
	for (int q = 1; q >= 0; q--)
		if (e->q[q].n)
			return entry_of(e->q[q].head.prev);
	return NULL;
}

static struct evict_entry *policy_walk_next(const struct evict *e, const struct evict_entry *x)
{
	int q = x->queue == EVICT_Q_SMALL ? 1 : 0;

	if (is_lrfu(e))
		return evict_lrfu_walk_next(&e->lrfu, x);
	if (!evict_entry_linked(x))
		return NULL;
	if (x->node.prev != &e->q[q].head)
		return entry_of(x->node.prev);
	return q == 1 && e->q[0].n ? entry_of(e->q[0].head.prev) : NULL;
}

static void policy_evicted(struct evict *e, struct evict_entry *x)
{
	if (!evict_entry_linked(x))
		return;
	int q = x->queue == EVICT_Q_SMALL ? 1 : 0;
	policy_remove(e, x);
	if (e->policy == EVICT_S3FIFO && q == 1)
		evict_ghost_put(&e->ghost[1], x->fp, evict_policy_count(e) + 1);
	else if (e->policy == EVICT_ARC)
		evict_ghost_put(&e->ghost[q], x->fp, arc_ghost_len(e, q));
}

/* ---- retention bands ------------------------------------------------ */

/* The order victims are taken in, and walks go. */
static const uint8_t band_order[_EVICT_BANDS] = {
	EVICT_BAND_LOW, EVICT_BAND_DEFAULT, EVICT_BAND_HIGH, EVICT_BAND_TOP,
};

void evict_insert(struct evict *e, struct evict_entry *x)
{
	if (x->band == EVICT_BAND_DEFAULT)
		policy_insert(e, x);
	else
		evict_lru_insert(&e->band[x->band], &x->node);
}

void evict_remove(struct evict *e, struct evict_entry *x)
{
	if (x->band == EVICT_BAND_DEFAULT)
		policy_remove(e, x);
	else
		evict_lru_remove(&e->band[x->band], &x->node);
}

void evict_touch(struct evict *e, struct evict_entry *x)
{
	x->reused = true;
	if (x->band == EVICT_BAND_DEFAULT)
		policy_touch(e, x);
	else if (x->band == EVICT_BAND_LOW)
		evict_set_band(e, x, EVICT_BAND_DEFAULT);
	else
		evict_lru_touch(&e->band[x->band], &x->node);
}

void evict_set_band(struct evict *e, struct evict_entry *x, unsigned band)
{
	if (band >= _EVICT_BANDS || band == x->band)
		return;
	bool linked = evict_entry_linked(x);
	if (linked)
		evict_remove(e, x);
	x->band = (uint8_t)band;
	if (linked)
		evict_insert(e, x);
}

void evict_retain(struct evict *e, struct evict_entry *x, unsigned priority)
{
	evict_set_band(e, x, evict_band_of_priority(priority));
}

void evict_end(struct evict *e, struct evict_entry *x, bool session)
{
	if (session || (x->band == EVICT_BAND_DEFAULT && !x->reused))
		evict_set_band(e, x, EVICT_BAND_LOW);
}

uint64_t evict_lapse(struct evict *e, evict_lapsed_fn lapsed, void *userdata)
{
	static const uint8_t raised[] = {EVICT_BAND_HIGH, EVICT_BAND_TOP};
	uint64_t n = 0;

	for (unsigned i = 0; i < ARRAY_SIZE(raised); i++) {
		struct evict_lru *l = &e->band[raised[i]];
		for (struct evict_node *p = l->head.prev, *prev; p != &l->head; p = prev) {
			prev = p->prev;
			if (!lapsed(userdata, entry_of(p)))
				continue;
			evict_set_band(e, entry_of(p), EVICT_BAND_DEFAULT);
			n++;
		}
	}
	return n;
}

/* The oldest entry of the band at position i of band_order or after. */
static struct evict_entry *oldest_from(const struct evict *e, int i)
{
	for (; i < _EVICT_BANDS; i++) {
		uint8_t b = band_order[i];
		struct evict_entry *x = NULL;
		if (b == EVICT_BAND_DEFAULT)
			x = policy_oldest(e);
		else if (e->band[b].n)
			x = entry_of(e->band[b].head.prev);
		if (x)
			return x;
	}
	return NULL;
}

static int band_position(unsigned band)
{
	for (int i = 0; i < _EVICT_BANDS; i++)
		if (band_order[i] == band)
			return i;
	return _EVICT_BANDS;
}

struct evict_entry *evict_victim(struct evict *e)
{
	if (e->band[EVICT_BAND_LOW].n)
		return entry_of(e->band[EVICT_BAND_LOW].head.prev);
	struct evict_entry *x = policy_victim(e);
	return x ? x : oldest_from(e, band_position(EVICT_BAND_DEFAULT) + 1);
}

struct evict_entry *evict_oldest(const struct evict *e)
{
	return oldest_from(e, 0);
}

struct evict_entry *evict_walk_next(const struct evict *e, const struct evict_entry *x)
{
	struct evict_entry *next = NULL;

	if (!evict_entry_linked(x))
		return NULL;
	if (x->band == EVICT_BAND_DEFAULT)
		next = policy_walk_next(e, x);
	else if (x->node.prev != &e->band[x->band].head)
		next = entry_of(x->node.prev);
	return next ? next : oldest_from(e, band_position(x->band) + 1);
}

void evict_evicted(struct evict *e, struct evict_entry *x)
{
	/* A raised or demoted block is not the policy's to remember. */
	if (x->band == EVICT_BAND_DEFAULT)
		policy_evicted(e, x);
	else
		evict_lru_remove(&e->band[x->band], &x->node);
}

static const char *const policy_names[_EVICT_POLICY_MAX] = {
	[EVICT_LRU] = "lru",
	[EVICT_S3FIFO] = "s3fifo",
	[EVICT_SIEVE] = "sieve",
	[EVICT_ARC] = "arc",
	[EVICT_LRFU] = "lrfu",
	[EVICT_LRFU_ADMIT] = "lrfu-admit",
};

const char *evict_policy_to_string(enum evict_policy p)
{
	return (unsigned)p < _EVICT_POLICY_MAX ? policy_names[p] : NULL;
}

int evict_policy_from_string(const char *s)
{
	for (int i = 0; s && i < _EVICT_POLICY_MAX; i++)
		if (!strcmp(s, policy_names[i]))
			return i;
	return -EINVAL;
}
