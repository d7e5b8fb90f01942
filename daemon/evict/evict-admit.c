/* SPDX-License-Identifier: Apache-2.0 */
#include <stdlib.h>
#include <string.h>

#include "evict-admit.h"

static void shadow_free(struct evict_admit_shadow *s)
{
	free(s->ent);
	free(s->slot);
	memset(s, 0, sizeof(*s));
}

/* Setting i: the filter on in the odd ones, the weight by pairs. */
static bool setting_filter(unsigned i)
{
	return i & 1;
}

static uint32_t setting_weight(unsigned i)
{
	static const uint32_t weight[EVICT_ADMIT_SHADOWS / 2] = {
		EVICT_LRFU_WEIGHT, 0, 4 * EVICT_LRFU_WEIGHT};

	return weight[i / 2];
}

static int shadow_new(struct evict_admit_shadow *s, uint32_t size, uint32_t weight)
{
	shadow_free(s);
	evict_lrfu_init(&s->q);
	s->q.weight = weight;
	s->ent = calloc(size, sizeof(*s->ent));
	s->slot = calloc(2 * (size_t)size, sizeof(*s->slot));
	if (!s->ent || !s->slot) {
		shadow_free(s);
		return -1;
	}
	s->cap = size;
	/* The clock runs at the shadow's own scale. */
	s->q.size = size;
	return 0;
}

/* Linear probing over 2 cap slots (not a power of two: the index is a
 * multiply-shift of the hash into [0, 2 cap)). */
static uint32_t home(const struct evict_admit_shadow *s, uint64_t h)
{
	return (uint32_t)(((h >> 32) * (2 * (uint64_t)s->cap)) >> 32);
}

static uint32_t next_slot(const struct evict_admit_shadow *s, uint32_t i)
{
	return i + 1 == 2 * s->cap ? 0 : i + 1;
}

/* The slot holding h, or the empty one where it would go. */
static uint32_t find(const struct evict_admit_shadow *s, uint64_t h)
{
	uint32_t i = home(s, h);

	while (s->slot[i] && s->ent[s->slot[i] - 1].fp != h)
		i = next_slot(s, i);
	return i;
}

/* Backward-shift deletion: no tombstones, probe runs stay short. */
static void erase(struct evict_admit_shadow *s, uint32_t i)
{
	uint32_t j = i;

	s->slot[i] = 0;
	for (;;) {
		j = next_slot(s, j);
		if (!s->slot[j])
			return;
		uint32_t k = home(s, s->ent[s->slot[j] - 1].fp);
		/* j's entry may move to the hole at i unless its home lies in
		 * the cyclic range (i, j]. */
		bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
		if (stays)
			continue;
		s->slot[i] = s->slot[j];
		s->slot[j] = 0;
		i = j;
	}
}

/* A request in one shadow. */
static void shadow_ref(struct evict_admit_shadow *s, uint64_t h, bool filter, bool seen,
		       unsigned level)
{
	uint32_t i = find(s, h);

	evict_lrfu_tick(&s->q);
	if (s->slot[i]) {
		s->hits++;
		evict_lrfu_touch(&s->q, &s->ent[s->slot[i] - 1], level);
		return;
	}
	uint32_t e;
	if (s->used < s->cap) {
		e = s->used++;
	} else {
		struct evict_entry *v = evict_lrfu_victim(&s->q);
		e = (uint32_t)(v - s->ent);
		evict_lrfu_remove(&s->q, v);
		erase(s, find(s, v->fp));
		i = find(s, h); /* the shift may have moved h's empty slot */
	}
	memset(&s->ent[e], 0, sizeof(s->ent[e]));
	s->ent[e].fp = h;
	s->slot[i] = e + 1;
	evict_lrfu_insert(&s->q, &s->ent[e], level, filter && !seen);
}

void evict_admit_init(struct evict_admit *a)
{
	memset(a, 0, sizeof(*a));
	a->on = setting_filter(EVICT_ADMIT_START);
	a->weight = setting_weight(EVICT_ADMIT_START);
}

void evict_admit_done(struct evict_admit *a)
{
	for (unsigned i = 0; i < EVICT_ADMIT_SHADOWS; i++)
		shadow_free(&a->sh[i]);
}

/* Shadows for a main tier of size entries, empty; the decision so far
 * stays. */
static void rebuild(struct evict_admit *a, uint64_t size)
{
	uint32_t shift = 0;

	while (shift < EVICT_ADMIT_MAX_SHIFT && (size >> (shift + 1)) >= EVICT_ADMIT_MIN_SHADOW)
		shift++;
	uint64_t n = size >> shift;
	if (n > UINT32_MAX / 4)
		n = UINT32_MAX / 4;
	a->size = size;
	a->shift = shift;
	a->refs = 0;
	memset(a->score, 0, sizeof(a->score));
	for (unsigned i = 0; i < EVICT_ADMIT_SHADOWS; i++)
		if (shadow_new(&a->sh[i], (uint32_t)(n ? n : 1), setting_weight(i)) < 0) {
			/* sh[0] without a table: no shadow is fed */
			shadow_free(&a->sh[0]);
			return;
		}
}

static void decide(struct evict_admit *a)
{
	/* The setting the main tier is in (a test may set on directly). */
	unsigned cur = a->on ? 1 : 0;

	for (unsigned i = 0; i < EVICT_ADMIT_SHADOWS; i += 2)
		if (setting_weight(i) == a->weight)
			cur = i + (a->on ? 1 : 0);
	unsigned best = cur;
	for (unsigned i = 0; i < EVICT_ADMIT_SHADOWS; i++)
		a->score[i] = a->score[i] / 2 + a->sh[i].hits;
	for (unsigned i = 0; i < EVICT_ADMIT_SHADOWS; i++)
		if (a->score[i] > a->score[best])
			best = i;
	if (a->score[best] > a->score[cur] + a->score[cur] / EVICT_ADMIT_MARGIN) {
		a->on = setting_filter(best);
		a->weight = setting_weight(best);
		a->switches++;
	}
	for (unsigned i = 0; i < EVICT_ADMIT_SHADOWS; i++) {
		a->last_hits[i] = a->sh[i].hits;
		a->sh[i].hits = 0;
	}
	a->windows++;
	a->refs = 0;
}

void evict_admit_observe(struct evict_admit *a, uint64_t size, uint64_t h, bool seen,
			 unsigned level)
{
	/* Rebuilt when the tier has grown by half since: a few times while
	 * a tier fills, which it does before its first eviction. */
	if (size > a->size + a->size / 2)
		rebuild(a, size);
	/* Sampled on bits the sketch and the tables use least. */
	if (!a->sh[0].cap || ((h * UINT64_C(0xd6e8feb86659fd93)) >> 58) >> (6 - a->shift))
		return;
	for (unsigned i = 0; i < EVICT_ADMIT_SHADOWS; i++)
		shadow_ref(&a->sh[i], h, setting_filter(i), seen, level);
	if (++a->refs >= EVICT_ADMIT_WINDOW * (uint64_t)a->sh[0].cap)
		decide(a);
}

uint64_t evict_admit_bytes(const struct evict_admit *a)
{
	uint64_t b = 0;

	for (unsigned i = 0; i < EVICT_ADMIT_SHADOWS; i++)
		b += a->sh[i].cap * (sizeof(struct evict_entry) + 2 * sizeof(uint32_t));
	return b;
}
