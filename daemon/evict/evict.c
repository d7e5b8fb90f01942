/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "evict.h"
#include "macro.h"

#define entry_of(n) evict_entry_of(n)

/* ---- the policy ----------------------------------------------------- */

static const struct evict_policy_ops *const policies[_EVICT_POLICY_MAX] = {
#define EVICT_POLICY_ROW(id, name) [id] = &evict_policy_##name,
	EVICT_POLICIES(EVICT_POLICY_ROW)
#undef EVICT_POLICY_ROW
};

const struct evict_policy_ops *evict_policy_ops(enum evict_policy p)
{
	return (unsigned)p < _EVICT_POLICY_MAX ? policies[p] : NULL;
}

int evict_init(struct evict *e, enum evict_policy policy, const struct keyhash *hash)
{
	const struct evict_policy_ops *ops = evict_policy_ops(policy);

	memset(e, 0, sizeof(*e));
	for (int b = 0; b < _EVICT_BANDS; b++)
		evict_lru_init(&e->band[b]);
	if (!ops)
		return -EINVAL;
	void *state = calloc(1, ops->state_size);
	if (!state)
		return -ENOMEM;
	int r = ops->init(state, hash);
	if (r < 0) {
		free(state);
		return r;
	}
	e->ops = ops;
	e->state = state;
	return 0;
}

void evict_done(struct evict *e)
{
	if (!e->state)
		return;
	if (e->ops->done)
		e->ops->done(e->state);
	free(e->state);
	e->state = NULL;
	e->ops = NULL;
}

/* The policy answers for its linked entries only; an unlinked one is not
 * its business until it is inserted. */
static void policy_remove(struct evict *e, struct evict_entry *x)
{
	if (evict_entry_linked(x))
		e->ops->remove(e->state, x);
}

static void policy_touch(struct evict *e, struct evict_entry *x)
{
	if (evict_entry_linked(x))
		e->ops->touch(e->state, x);
}

static void policy_evicted(struct evict *e, struct evict_entry *x)
{
	if (!evict_entry_linked(x))
		return;
	if (e->ops->evicted)
		e->ops->evicted(e->state, x);
	else
		e->ops->remove(e->state, x);
}

/* ---- retention bands ------------------------------------------------ */

/* The order victims are taken in, and walks go. */
static const uint8_t band_order[_EVICT_BANDS] = {
	EVICT_BAND_LOW, EVICT_BAND_DEFAULT, EVICT_BAND_HIGH, EVICT_BAND_TOP,
};

void evict_insert(struct evict *e, struct evict_entry *x)
{
	if (x->band == EVICT_BAND_DEFAULT)
		e->ops->insert(e->state, x);
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

void evict_lookup(struct evict *e, const uint64_t *fp, size_t n, bool head)
{
	if (e->state && e->ops->lookup)
		e->ops->lookup(e->state, fp, n, head);
}

void evict_report(const struct evict *e, struct evict_report *r)
{
	*r = (struct evict_report){0};
	if (e->state && e->ops->report)
		e->ops->report(e->state, r);
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
			x = e->ops->oldest(e->state);
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
	struct evict_entry *x = e->ops->victim(e->state);
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
		next = e->ops->walk_next(e->state, x);
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

const char *evict_policy_to_string(enum evict_policy p)
{
	const struct evict_policy_ops *ops = evict_policy_ops(p);

	return ops ? ops->name : NULL;
}

int evict_policy_from_string(const char *s)
{
	for (int i = 0; s && i < _EVICT_POLICY_MAX; i++)
		if (!strcmp(s, policies[i]->name))
			return i;
	return -EINVAL;
}
