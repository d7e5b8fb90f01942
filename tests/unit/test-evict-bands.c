/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The retention bands the engine's hints set (evict.h), under every
 * policy: victims come from the demoted band first (oldest first), then the
 * policy's own, then the raised bands (high before top); the walk the
 * NVMe tier uses goes in the same order and visits every entry once; a
 * hit on a demoted entry returns it to the policy; an end of request
 * demotes only entries nobody hit and nobody raised, an end of session
 * every one; lapse returns exactly the raised entries it is told have run
 * out, and looks at no other;
 * an unlinked entry keeps the band it is given until it is inserted.
 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "../check.h"
#include "evict.h"
#include "keyhash.h"

#define N 24

static struct keyhash hash;
static struct evict_entry ent[N];

static int id(const struct evict_entry *x)
{
	return x ? (int)(x - ent) : -1;
}

static void fresh(struct evict *e, enum evict_policy p)
{
	CHECK(evict_init(e, p, &hash) == 0);
	memset(ent, 0, sizeof(ent));
	for (int i = 0; i < N; i++) {
		ent[i].fp = (uint64_t)i + 1;
		evict_insert(e, &ent[i]);
	}
}

/* Evict everything; the order victims came in. */
static void drain(struct evict *e, int *order)
{
	for (int i = 0; i < N; i++) {
		struct evict_entry *v = evict_victim(e);
		order[i] = id(v);
		if (v)
			evict_evicted(e, v);
	}
	CHECK(evict_victim(e) == NULL);
	CHECK(evict_count(e) == 0);
}

static bool in(int x, int lo, int hi)
{
	return x >= lo && x < hi;
}

static void victims_by_band(enum evict_policy p)
{
	struct evict e;
	int order[N];

	/* 0-5 top, 6-11 high, 12-17 default, 18-23 demoted (18 first). */
	fresh(&e, p);
	for (int i = 0; i < 6; i++) {
		evict_retain(&e, &ent[i], 90);
		evict_retain(&e, &ent[6 + i], 60);
	}
	for (int i = 18; i < 24; i++)
		evict_end(&e, &ent[i], true);
	CHECK(evict_count(&e) == N);
	CHECK(evict_policy_count(&e) == 6);
	CHECK(e.band[EVICT_BAND_LOW].n == 6 && e.band[EVICT_BAND_HIGH].n == 6 &&
	      e.band[EVICT_BAND_TOP].n == 6);

	/* The walk: every entry once, in the victims' band order. */
	int seen[N] = {0}, k = 0, last_band = -1;
	static const int rank[_EVICT_BANDS] = {
		[EVICT_BAND_LOW] = 0, [EVICT_BAND_DEFAULT] = 1, [EVICT_BAND_HIGH] = 2,
		[EVICT_BAND_TOP] = 3};
	for (struct evict_entry *x = evict_oldest(&e); x; x = evict_walk_next(&e, x), k++) {
		CHECK(k < N && !seen[id(x)]);
		seen[id(x)] = 1;
		CHECK(rank[x->band] >= last_band, "%s: walk went back to band %u",
		      evict_policy_to_string(p), x->band);
		last_band = rank[x->band];
	}
	CHECK(k == N, "%s: the walk saw %d of %d", evict_policy_to_string(p), k, N);

	drain(&e, order);
	for (int i = 0; i < 6; i++)
		CHECK(order[i] == 18 + i, "%s: victim %d is %d, not demoted %d",
		      evict_policy_to_string(p), i, order[i], 18 + i);
	for (int i = 6; i < 12; i++)
		CHECK(in(order[i], 12, 18), "%s: victim %d is %d, not a default one",
		      evict_policy_to_string(p), i, order[i]);
	for (int i = 12; i < 18; i++)
		CHECK(order[i] == 6 + (i - 12), "%s: victim %d is %d, not high %d",
		      evict_policy_to_string(p), i, order[i], 6 + (i - 12));
	for (int i = 18; i < 24; i++)
		CHECK(order[i] == i - 18);
	evict_done(&e);
}

static void end_and_hits(enum evict_policy p)
{
	struct evict e;

	fresh(&e, p);
	/* A request's end: 0 was hit since stored, 1 raised, 2 its own. */
	evict_touch(&e, &ent[0]);
	evict_retain(&e, &ent[1], 50);
	for (int i = 0; i < 3; i++)
		evict_end(&e, &ent[i], false);
	CHECK(ent[0].band == EVICT_BAND_DEFAULT);
	CHECK(ent[1].band == EVICT_BAND_HIGH);
	CHECK(ent[2].band == EVICT_BAND_LOW);
	/* A session's end: raised or hit, all go. */
	evict_end(&e, &ent[0], true);
	evict_end(&e, &ent[1], true);
	CHECK(ent[0].band == EVICT_BAND_LOW && ent[1].band == EVICT_BAND_LOW);
	CHECK(id(evict_victim(&e)) == 2); /* demoted first */
	/* A hit undoes a demotion, linked or not. */
	evict_touch(&e, &ent[2]);
	CHECK(ent[2].band == EVICT_BAND_DEFAULT && ent[2].reused);
	evict_remove(&e, &ent[0]); /* a lease */
	evict_touch(&e, &ent[0]);
	CHECK(ent[0].band == EVICT_BAND_DEFAULT);
	evict_insert(&e, &ent[0]);
	CHECK(e.band[EVICT_BAND_LOW].n == 1 && id(evict_victim(&e)) == 1);
	/* An unlinked entry takes its band when it comes back. */
	evict_remove(&e, &ent[3]);
	evict_retain(&e, &ent[3], 100);
	CHECK(!evict_entry_linked(&ent[3]) && e.band[EVICT_BAND_TOP].n == 0);
	evict_insert(&e, &ent[3]);
	CHECK(e.band[EVICT_BAND_TOP].n == 1);
	/* Priority 35 is the policy's again. */
	evict_retain(&e, &ent[3], KVT_PRIORITY_DEFAULT);
	CHECK(ent[3].band == EVICT_BAND_DEFAULT && e.band[EVICT_BAND_TOP].n == 0);
	CHECK(evict_count(&e) == N);
	evict_done(&e);
}

static bool odd_lapsed(void *userdata, const struct evict_entry *x)
{
	int *calls = userdata;
	(*calls)++;
	return id(x) % 2;
}

static void lapse(enum evict_policy p)
{
	struct evict e;
	int calls = 0;

	fresh(&e, p);
	for (int i = 0; i < 8; i++)
		evict_retain(&e, &ent[i], i < 4 ? 60 : 95);
	evict_retain(&e, &ent[8], 10); /* below the default: no duration, not looked at */
	evict_remove(&e, &ent[7]);     /* leased: not on a list, not looked at */
	CHECK(evict_lapse(&e, odd_lapsed, &calls) == 3); /* 1, 3, 5 */
	CHECK(calls == 7);
	for (int i = 0; i < 7; i++)
		CHECK(ent[i].band == (i % 2 ? EVICT_BAND_DEFAULT
					    : i < 4 ? EVICT_BAND_HIGH : EVICT_BAND_TOP));
	CHECK(ent[7].band == EVICT_BAND_TOP && ent[8].band == EVICT_BAND_LOW);
	evict_insert(&e, &ent[7]);
	CHECK(evict_count(&e) == N);
	evict_done(&e);
}

int main(void)
{
	keyhash_init_seed(&hash, 7);
	for (int p = 0; p < _EVICT_POLICY_MAX; p++) {
		victims_by_band(p);
		end_and_hits(p);
		lapse(p);
	}
	return failures ? 1 : 0;
}
