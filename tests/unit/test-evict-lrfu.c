/* SPDX-License-Identifier: Apache-2.0 */
/*
 * LRFU and its admission filter (daemon/evict-lrfu.c, evict-lrfu-admit.c,
 * evict-admit.c, the count sketch): a block requested once goes before one
 * requested often even when it is the more recent; counts halve; a block
 * not seen before goes on probation while the filter is on; and the filter
 * turns itself off on traffic it hurts and on on traffic it helps.  The
 * random walk every policy passes is test-evict's.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"
#include "count-sketch.h"
#include "evict-lrfu-admit.h"
#include "evict-lrfu.h"
#include "evict.h"
#include "keyhash.h"
#define RNG_SEED UINT64_C(0x243f6a8885a308d3)
#include "rng.h"

static struct keyhash test_hash;

static void fresh(struct evict_entry *x, uint64_t fp)
{
	memset(x, 0, sizeof(*x));
	x->fp = fp;
}

static void test_sketch(void)
{
	struct count_sketch s;

	count_sketch_init(&s);
	CHECK(count_sketch_get(&s, 42) == 0);
	CHECK(count_sketch_reserve(&s, 4096) == 0);
	CHECK(s.width == 4096 && s.period == 2048);
	for (unsigned i = 1; i <= 20; i++)
		CHECK(count_sketch_add(&s, 42) == (i < COUNT_SKETCH_MAX ? i : COUNT_SKETCH_MAX));
	for (unsigned i = 0; i < 9; i++)
		count_sketch_add(&s, 7);
	CHECK(count_sketch_get(&s, 7) == 9);
	count_sketch_halve(&s);
	CHECK(count_sketch_get(&s, 42) == 7);
	CHECK(count_sketch_get(&s, 7) == 4);
	/* Growing keeps every count an upper bound: exact here, where no
	 * other key shares a counter. */
	CHECK(count_sketch_reserve(&s, 1 << 16) == 0);
	CHECK(s.width == 1 << 16);
	CHECK(count_sketch_get(&s, 42) == 7 && count_sketch_get(&s, 7) == 4);
	/* The period: w/2 requests of other keys halve it again, and a key
	 * requested once is forgotten. */
	count_sketch_add(&s, 99);
	uint64_t h0 = s.halvings;
	for (uint64_t i = 0; i < s.width / 2; i++)
		count_sketch_add(&s, rnd());
	CHECK(s.halvings == h0 + 1);
	CHECK(count_sketch_get(&s, 42) <= 3);
	CHECK(count_sketch_get(&s, 99) == 0, "%u", count_sketch_get(&s, 99));
	/* Keys never counted mostly read 0 at half a period's load. */
	unsigned seen = 0;
	for (unsigned i = 0; i < 10000; i++)
		seen += count_sketch_get(&s, rnd()) > 0;
	CHECK(seen < 1000, "%u of 10000 unseen keys pass for seen", seen);
	count_sketch_done(&s);
}

/* A conservative count-min sketch never counts a key below its true count
 * (up to COUNT_SKETCH_MAX), however many keys share its counters: a
 * sketch of the smallest width, far too narrow for the keys, with skewed
 * traffic and no halving, checked against exact counts. */
static void test_sketch_never_under(void)
{
	enum { KEYS = 4096 };
	static unsigned truth[KEYS];
	struct count_sketch s;

	count_sketch_init(&s);
	s.max_width = COUNT_SKETCH_MIN_WIDTH;
	CHECK(count_sketch_reserve(&s, 1 << 20) == 0);
	CHECK(s.width == COUNT_SKETCH_MIN_WIDTH, "%" PRIu64, s.width);
	/* A period far longer than the sketch is made for, so that its 256
	 * counters a row fill with the 4096 keys' counts. */
	s.period = UINT64_C(1) << 20;
	uint64_t over = 0;
	for (uint64_t i = 0; i < 20000; i++) {
		/* Key k with probability about 1/(k+1): a few hot, many rare. */
		unsigned k = (unsigned)(rnd() % KEYS);
		k = (unsigned)(rnd() % (k + 1));
		unsigned got = count_sketch_add(&s, UINT64_C(0x9e3779b97f4a7c15) * (k + 1));
		truth[k]++;
		unsigned want = truth[k] < COUNT_SKETCH_MAX ? truth[k] : COUNT_SKETCH_MAX;
		CHECK(got >= want, "key %u: %u counted %u times", k, got, truth[k]);
		over += got > want;
	}
	CHECK(s.halvings == 0);
	for (unsigned k = 0; k < KEYS; k++) {
		unsigned want = truth[k] < COUNT_SKETCH_MAX ? truth[k] : COUNT_SKETCH_MAX;
		unsigned got = count_sketch_get(&s, UINT64_C(0x9e3779b97f4a7c15) * (k + 1));
		CHECK(got >= want, "key %u: estimate %u, true %u", k, got, truth[k]);
	}
	/* So narrow a sketch must over-count some: otherwise the keys did not
	 * share counters and the check above proved nothing. */
	CHECK(over > 0);
	count_sketch_done(&s);
}

/* The sketch stops at max_width whatever it is asked to cover, and the
 * policy's sketch stops at the default bound however large the tier:
 * its memory is a constant, not so much per block. */
static void test_sketch_bounded(void)
{
	struct count_sketch s;

	count_sketch_init(&s);
	CHECK(count_sketch_reserve(&s, UINT64_C(1) << 40) == 0);
	CHECK(s.width == COUNT_SKETCH_DEFAULT_MAX_WIDTH);
	CHECK(count_sketch_bytes(&s) == COUNT_SKETCH_ROWS * COUNT_SKETCH_DEFAULT_MAX_WIDTH / 2);
	CHECK(count_sketch_bytes(&s) <= (UINT64_C(8) << 20), "%" PRIu64 " bytes",
	      count_sketch_bytes(&s));
	/* Halving works at the bound too. */
	for (unsigned i = 0; i < 6; i++)
		count_sketch_add(&s, 1234);
	count_sketch_halve(&s);
	CHECK(count_sketch_get(&s, 1234) == 3);
	count_sketch_done(&s);

	/* A tier listing 4 times the entries at which the per-entry sizing
	 * reaches the bound. */
	uint64_t n = 4 * (COUNT_SKETCH_DEFAULT_MAX_WIDTH / EVICT_SKETCH_COLUMNS);
	struct evict_entry *x = calloc(n, sizeof(*x));
	struct evict e;
	CHECK(x != NULL);
	CHECK(evict_init(&e, EVICT_LRFU_ADMIT, &test_hash) == 0);
	const struct evict_lrfu_admit_state *a = evict_state(&e, &evict_policy_lrfu_admit);
	for (uint64_t i = 0; i < n; i++) {
		fresh(&x[i], i + 1);
		evict_insert(&e, &x[i]);
	}
	CHECK(evict_count(&e) == n);
	CHECK(a->lrfu.sketch.width == COUNT_SKETCH_DEFAULT_MAX_WIDTH, "%" PRIu64,
	      a->lrfu.sketch.width);
	/* Sketch and shadows together: the bound (8 MiB), and the shadows'
	 * 1/64 sample of six entries of 40 bytes. */
	uint64_t bytes = count_sketch_bytes(&a->lrfu.sketch) + evict_admit_bytes(&a->admit);
	CHECK(bytes <= (UINT64_C(8) << 20) + 4 * n, "%" PRIu64 " bytes for %" PRIu64 " entries",
	      bytes, n);
	evict_done(&e);
	free(x);
}

/* Requested once and recent, against requested often and older: the
 * one-hit block goes first, where LRU would take the other. */
static void test_frequency_wins(void)
{
	static struct evict_entry x[16];
	struct evict e;

	CHECK(evict_init(&e, EVICT_LRFU, &test_hash) == 0);
	for (int i = 0; i < 16; i++)
		fresh(&x[i], (uint64_t)i);
	evict_insert(&e, &x[0]);
	for (int k = 0; k < 6; k++)
		evict_touch(&e, &x[0]);
	CHECK(x[0].freq == 2); /* 7 requests: level log2(7) */
	for (int i = 1; i < 4; i++)
		evict_insert(&e, &x[i]);
	CHECK(evict_victim(&e) == &x[1]);
	evict_evicted(&e, &x[1]);
	CHECK(evict_victim(&e) == &x[2]);
	/* The same with LRU: the frequent one is the oldest. */
	struct evict l;
	CHECK(evict_init(&l, EVICT_LRU, &test_hash) == 0);
	for (int i = 4; i < 8; i++) {
		evict_insert(&l, &x[i]);
		if (i == 4)
			for (int k = 0; k < 6; k++)
				evict_touch(&l, &x[i]);
	}
	CHECK(evict_victim(&l) == &x[4]);
	evict_done(&l);
	evict_done(&e);
}

/* After halving the counts, a touch puts a block at a lower level. */
static void test_decay(void)
{
	static struct evict_entry x;
	struct evict e;

	CHECK(evict_init(&e, EVICT_LRFU, &test_hash) == 0);
	struct evict_lrfu_state *l = evict_state(&e, &evict_policy_lrfu);
	fresh(&x, 5);
	evict_insert(&e, &x);
	for (int k = 0; k < 8; k++)
		evict_touch(&e, &x);
	CHECK(x.freq == 3); /* 9 requests */
	count_sketch_halve(&l->sketch);
	count_sketch_halve(&l->sketch);
	evict_touch(&e, &x); /* 9 -> 4 -> 2, +1 = 3 */
	CHECK(x.freq == 1, "level %u", x.freq);
	evict_done(&e);
}

/* With the filter on, a block never requested before goes on probation
 * and is the next victim; one the sketch has seen does not. */
static void test_filter_refuses(void)
{
	static struct evict_entry x[8];
	struct evict e;

	CHECK(evict_init(&e, EVICT_LRFU_ADMIT, &test_hash) == 0);
	struct evict_lrfu_admit_state *a = evict_state(&e, &evict_policy_lrfu_admit);
	for (int i = 0; i < 8; i++)
		fresh(&x[i], (uint64_t)i + 100);
	for (int i = 0; i < 4; i++)
		evict_insert(&e, &x[i]);
	CHECK(x[0].queue == EVICT_Q_MAIN && a->refused == 0);
	a->admit.filter = EVICT_ADMIT_FILTER_SEEN;
	evict_insert(&e, &x[4]);
	CHECK(x[4].queue == EVICT_Q_SMALL && a->refused == 1);
	CHECK(evict_victim(&e) == &x[4]);
	/* Dropped, then stored again: seen once before, admitted. */
	evict_evicted(&e, &x[4]);
	fresh(&x[4], 104);
	evict_insert(&e, &x[4]);
	CHECK(x[4].queue == EVICT_Q_MAIN && a->refused == 1);
	CHECK(evict_victim(&e) == &x[0]);
	/* A hit on probation admits. */
	evict_insert(&e, &x[5]);
	CHECK(x[5].queue == EVICT_Q_SMALL);
	evict_touch(&e, &x[5]);
	CHECK(x[5].queue == EVICT_Q_MAIN && evict_victim(&e) != &x[5]);
	evict_done(&e);
}

/* With the strict filter, a block requested once before still goes on
 * probation; one requested twice before does not. */
static void test_strict_filter(void)
{
	static struct evict_entry x[8];
	struct evict e;

	CHECK(evict_init(&e, EVICT_LRFU_ADMIT, &test_hash) == 0);
	struct evict_lrfu_admit_state *a = evict_state(&e, &evict_policy_lrfu_admit);
	for (int i = 0; i < 8; i++)
		fresh(&x[i], (uint64_t)i + 200);
	for (int i = 0; i < 4; i++)
		evict_insert(&e, &x[i]);
	a->admit.filter = EVICT_ADMIT_FILTER_STRICT;
	evict_insert(&e, &x[4]);
	CHECK(x[4].queue == EVICT_Q_SMALL && a->refused == 1);
	/* Dropped and stored again: requested once before, still refused. */
	evict_evicted(&e, &x[4]);
	fresh(&x[4], 204);
	evict_insert(&e, &x[4]);
	CHECK(x[4].queue == EVICT_Q_SMALL && a->refused == 2);
	CHECK(evict_victim(&e) == &x[4]);
	/* A third time: twice before, admitted. */
	evict_evicted(&e, &x[4]);
	fresh(&x[4], 204);
	evict_insert(&e, &x[4]);
	CHECK(x[4].queue == EVICT_Q_MAIN && a->refused == 2);
	/* The filter that asks for one request before admits a block the
	 * strict one refused. */
	fresh(&x[5], 205);
	evict_insert(&e, &x[5]);
	CHECK(x[5].queue == EVICT_Q_SMALL && a->refused == 3);
	evict_evicted(&e, &x[5]);
	fresh(&x[5], 205);
	a->admit.filter = EVICT_ADMIT_FILTER_SEEN;
	evict_insert(&e, &x[5]);
	CHECK(x[5].queue == EVICT_Q_MAIN && a->refused == 3);
	struct evict_report r = {0};
	evict_report(&e, &r);
	CHECK(r.filter == EVICT_ADMIT_FILTER_SEEN, "filter %u", r.filter);
	evict_done(&e);
}

/* A tier of cap blocks serving a reference stream of keys, each an index
 * into ents. */
struct cache {
	struct evict e;
	struct evict_lrfu_admit_state *a; /* e's */
	struct evict_entry *ents;
	uint64_t cap, hits, refs;
};

static void cache_ref(struct cache *c, uint64_t key)
{
	struct evict_entry *x = &c->ents[key];

	/* A lookup of one key, as kvtierd's lookup gives it to the policy
	 * before touching its hit. */
	evict_lookup(&c->e, &key, 1, true);
	c->refs++;
	if (evict_entry_linked(x)) {
		c->hits++;
		evict_touch(&c->e, x);
		return;
	}
	if (evict_count(&c->e) >= c->cap) {
		struct evict_entry *v = evict_victim(&c->e);
		evict_evicted(&c->e, v);
		fresh(v, (uint64_t)(v - c->ents));
	}
	evict_insert(&c->e, x);
}

static void cache_init(struct cache *c, uint64_t cap, uint64_t keys, bool on)
{
	memset(c, 0, sizeof(*c));
	CHECK(evict_init(&c->e, EVICT_LRFU_ADMIT, &test_hash) == 0);
	c->a = evict_state(&c->e, &evict_policy_lrfu_admit);
	c->a->admit.filter = on ? EVICT_ADMIT_FILTER_SEEN : EVICT_ADMIT_FILTER_OFF;
	c->cap = cap;
	c->ents = calloc(keys, sizeof(*c->ents));
	for (uint64_t i = 0; c->ents && i < keys; i++)
		c->ents[i].fp = i;
}

/* Every block is requested twice, 64 requests apart, and never again: the
 * filter would cost every second request.  It must turn off. */
static void test_filter_turns_off(void)
{
	enum { CAP = 2048, STEPS = 150000 };
	struct cache c;

	cache_init(&c, CAP, STEPS, true);
	if (!c.ents) {
		CHECK(!"out of memory");
		return;
	}
	for (uint64_t i = 0; i < STEPS; i++) {
		cache_ref(&c, i);
		if (i >= 32)
			cache_ref(&c, i - 32);
	}
	CHECK(!c.a->admit.filter && c.a->admit.windows >= 8,
	      "filter %u after %" PRIu64 " windows (shadow hits off %" PRIu64 ", on %" PRIu64 ")",
	      c.a->admit.filter, c.a->admit.windows, c.a->admit.last_hits[0], c.a->admit.last_hits[1]);
	/* Off, the second requests hit. */
	CHECK(c.hits > c.refs / 3, "%" PRIu64 " hits of %" PRIu64, c.hits, c.refs);
	free(c.ents);
	evict_done(&c.e);
}

/* A hot set of half the tier, each block requested every four turnovers (8 x 1024 requests)
 * between requests of blocks used once: without the filter the one-off
 * blocks push the hot ones out.  It must turn on. */
static void test_filter_turns_on(void)
{
	enum { CAP = 2048, HOT = CAP / 2, SCAN = 7, ROUNDS = 16 };
	uint64_t keys = HOT + (uint64_t)HOT * SCAN * ROUNDS, next_scan = HOT;
	struct cache c;

	cache_init(&c, CAP, keys, false);
	if (!c.ents) {
		CHECK(!"out of memory");
		return;
	}
	for (unsigned r = 0; r < ROUNDS; r++)
		for (uint64_t h = 0; h < HOT; h++) {
			cache_ref(&c, h);
			for (unsigned k = 0; k < SCAN; k++)
				cache_ref(&c, next_scan++);
		}
	CHECK(c.a->admit.filter && c.a->admit.windows >= 4,
	      "filter %u after %" PRIu64 " windows (shadow hits off %" PRIu64 ", on %" PRIu64 ")",
	      c.a->admit.filter, c.a->admit.windows, c.a->admit.last_hits[0], c.a->admit.last_hits[1]);
	CHECK(c.a->refused > 0);
	CHECK(c.a->admit.last_hits[1] > 4 * c.a->admit.last_hits[0], "shadow hits off %" PRIu64 ", on %" PRIu64, c.a->admit.last_hits[0], c.a->admit.last_hits[1]);
	free(c.ents);
	evict_done(&c.e);
}

int main(void)
{
	keyhash_init_seed(&test_hash, UINT64_C(0x7e57));
	/* The entry every block embeds did not grow. */
	CHECK(sizeof(struct evict_entry) == 32);
	test_sketch();
	test_sketch_never_under();
	test_sketch_bounded();
	test_frequency_wins();
	test_decay();
	test_filter_refuses();
	test_strict_filter();
	test_filter_turns_off();
	test_filter_turns_on();
	if (failures) {
		fprintf(stderr, "test-evict-lrfu: %d check(s) failed\n", failures);
		return 1;
	}
	printf("test-evict-lrfu: ok\n");
	return 0;
}
