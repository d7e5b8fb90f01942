/* SPDX-License-Identifier: Apache-2.0 */
#include <stdlib.h>
#include <string.h>

#include "evict-admit.h"
#include "keyhash.h"

static void shadow_free(struct evict_admit_shadow *s)
{
	free(s->ent);
	free(s->slot);
	memset(s, 0, sizeof(*s));
}

/* The settings (evict-admit.h): the filter and the LRFU weight. */
static const struct {
	uint32_t filter, weight;
} settings[EVICT_ADMIT_SHADOWS] = {
	{EVICT_ADMIT_FILTER_OFF, EVICT_LRFU_WEIGHT},
	{EVICT_ADMIT_FILTER_SEEN, EVICT_LRFU_WEIGHT},
	{EVICT_ADMIT_FILTER_OFF, 0},
	{EVICT_ADMIT_FILTER_SEEN, 0},
	{EVICT_ADMIT_FILTER_OFF, 4 * EVICT_LRFU_WEIGHT},
	{EVICT_ADMIT_FILTER_SEEN, 4 * EVICT_LRFU_WEIGHT},
	{EVICT_ADMIT_FILTER_STRICT, EVICT_LRFU_WEIGHT},
	{EVICT_ADMIT_FILTER_STRICT, 4 * EVICT_LRFU_WEIGHT},
};

static uint32_t setting_filter(unsigned i)
{
	return settings[i].filter;
}

static uint32_t setting_weight(unsigned i)
{
	return settings[i].weight;
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

/* A lookup's block in one shadow, head first: a hit counts only while
 * every sampled block before it in the chain hit too (run is the shadow's
 * run of this lookup, false once a block missed), as the tier is scored;
 * a miss is stored, as the engine will store it.  A block the main tier
 * stores (store) is stored where it is not yet.  \return whether the
 * shadow changed: a request. */
static bool shadow_ref(struct evict_admit_shadow *s, uint64_t h, uint32_t filter, unsigned count,
		       unsigned level, bool store)
{
	uint32_t i = find(s, h);

	if (s->slot[i] && store)
		return false;
	evict_lrfu_tick(&s->q);
	if (s->slot[i]) {
		s->hits += s->run;
		s->run_hits += s->run;
		evict_lrfu_touch(&s->q, &s->ent[s->slot[i] - 1], level);
		return true;
	}
	s->run = false;
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
	evict_lrfu_insert(&s->q, &s->ent[e], level, count < filter);
	return true;
}

void evict_admit_init(struct evict_admit *a)
{
	memset(a, 0, sizeof(*a));
	a->filter = setting_filter(EVICT_ADMIT_START);
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
	memset(a->diff, 0, sizeof(a->diff));
	memset(a->diff2, 0, sizeof(a->diff2));
	for (unsigned i = 0; i < EVICT_ADMIT_SHADOWS; i++)
		if (shadow_new(&a->sh[i], (uint32_t)(n ? n : 1), setting_weight(i)) < 0) {
			/* sh[0] without a table: no shadow is fed */
			shadow_free(&a->sh[0]);
			return;
		}
}

/* The setting the main tier is in (a test may set filter directly; one
 * not in the table counts as the start). */
static unsigned current(const struct evict_admit *a)
{
	for (unsigned i = 0; i < EVICT_ADMIT_SHADOWS; i++)
		if (setting_filter(i) == a->filter && setting_weight(i) == a->weight)
			return i;
	return EVICT_ADMIT_START;
}

/* A lookup ends: each setting's leading run against the current one's. */
static void lookup_end(struct evict_admit *a)
{
	unsigned cur = current(a);

	for (unsigned i = 0; i < EVICT_ADMIT_SHADOWS; i++) {
		int64_t d = (int64_t)a->sh[i].run_hits - (int64_t)a->sh[cur].run_hits;
		a->diff[i] += d;
		a->diff2[i] += (uint64_t)(d * d);
	}
	for (unsigned i = 0; i < EVICT_ADMIT_SHADOWS; i++)
		a->sh[i].run_hits = 0;
}

static uint64_t decay(uint64_t x)
{
	return x - x / EVICT_ADMIT_DECAY;
}

/* The strict filter is a stricter form of the filter: it is tried only
 * from a setting whose filter has shown it pays, never straight from no
 * filter.  Fewer settings to leave LRU for, fewer leaves on noise. */
static bool reachable(unsigned cur, unsigned i)
{
	return setting_filter(i) != EVICT_ADMIT_FILTER_STRICT ||
	       setting_filter(cur) != EVICT_ADMIT_FILTER_OFF;
}

/* The lead a setting needs over the current one: 1/EVICT_ADMIT_MARGIN,
 * and twice that to leave the start (LRU), where a tier should stay
 * unless another setting is clearly better. */
static uint64_t margin(unsigned cur)
{
	return cur == EVICT_ADMIT_START ? EVICT_ADMIT_MARGIN / 2 : EVICT_ADMIT_MARGIN;
}

static void decide(struct evict_admit *a)
{
	unsigned cur = current(a);
	unsigned best = cur;
	for (unsigned i = 0; i < EVICT_ADMIT_SHADOWS; i++)
		a->score[i] = decay(a->score[i]) + a->sh[i].hits;
	for (unsigned i = 0; i < EVICT_ADMIT_SHADOWS; i++) {
		a->diff[i] = a->diff[i] < 0 ? -(int64_t)decay((uint64_t)-a->diff[i])
					    : (int64_t)decay((uint64_t)a->diff[i]);
		a->diff2[i] = decay(a->diff2[i]);
	}
	lookup_end(a);
	/* Only a lead the lookups agree on: the sum of the paired
	 * differences beyond EVICT_ADMIT_Z standard errors of it (their
	 * spread measured, not assumed), not one lucky lookup's run. */
	for (unsigned i = 0; i < EVICT_ADMIT_SHADOWS; i++)
		if (reachable(cur, i) && a->score[i] > a->score[best] && a->diff[i] > 0 &&
		    (uint64_t)a->diff[i] * (uint64_t)a->diff[i] >
			    EVICT_ADMIT_Z * EVICT_ADMIT_Z * a->diff2[i])
			best = i;
	if (best != cur && a->score[best] > a->score[cur] + a->score[cur] / margin(cur)) {
		a->filter = setting_filter(best);
		a->weight = setting_weight(best);
		a->switches++;
		/* The differences were against the setting left. */
		memset(a->diff, 0, sizeof(a->diff));
		memset(a->diff2, 0, sizeof(a->diff2));
	}
	for (unsigned i = 0; i < EVICT_ADMIT_SHADOWS; i++) {
		a->last_hits[i] = a->sh[i].hits;
		a->sh[i].hits = 0;
	}
	a->windows++;
	a->refs = 0;
}

/* Rebuilt when the tier has grown by half since: a few times while a
 * tier fills, which it does before its first eviction.  \return whether
 * h is sampled */
static bool sampled(struct evict_admit *a, uint64_t size, uint64_t h)
{
	if (size > a->size + a->size / 2)
		rebuild(a, size);
	/* Sampled on bits the sketch and the tables use least. */
	return a->sh[0].cap && !(((h * UINT64_C(0xd6e8feb86659fd93)) >> 58) >> (6 - a->shift));
}

static void observe(struct evict_admit *a, uint64_t h, unsigned count, unsigned level, bool store)
{
	bool ref = false;

	for (unsigned i = 0; i < EVICT_ADMIT_SHADOWS; i++)
		ref |= shadow_ref(&a->sh[i], h, setting_filter(i), count, level, store);
	if (ref && ++a->refs >= EVICT_ADMIT_WINDOW * (uint64_t)a->sh[0].cap)
		decide(a);
}

void evict_admit_lookup(struct evict_admit *a, struct evict_lrfu_state *l, const uint64_t *fp,
			size_t n, bool head)
{
	if (head) {
		lookup_end(a);
		a->lookups++;
		for (unsigned i = 0; i < EVICT_ADMIT_SHADOWS; i++)
			a->sh[i].run = true;
	}
	for (size_t k = 0; k < n; k++) {
		uint64_t h = keyhash(l->hash, &fp[k], sizeof(fp[k]));
		if (!sampled(a, l->q.size, h))
			continue;
		unsigned c = count_sketch_get(&l->sketch, h);
		observe(a, h, c, evict_lrfu_level(c + 1), false);
	}
}

void evict_admit_observe(struct evict_admit *a, uint64_t size, uint64_t h, unsigned count,
			 unsigned level)
{
	if (sampled(a, size, h))
		observe(a, h, count, level, true);
}

uint64_t evict_admit_bytes(const struct evict_admit *a)
{
	uint64_t b = 0;

	for (unsigned i = 0; i < EVICT_ADMIT_SHADOWS; i++)
		b += a->sh[i].cap * (sizeof(struct evict_entry) + 2 * sizeof(uint32_t));
	return b;
}
