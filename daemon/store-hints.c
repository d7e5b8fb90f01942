/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The engine's hints (HINT, kvt-proto.h): retention priorities, with a
 * duration after which they lapse, and the ends of requests and sessions.
 * The rules are the eviction policy's (evict_retain, evict_end,
 * evict_lapse in evict.c, which the simulator runs too); this file finds
 * the blocks, keeps their durations, counts what the hints did, and moves
 * the blocks' places in write-back's queue with their bands.
 */
#include <errno.h>
#include <stddef.h>
#include <time.h>

#include "macro.h"
#include "store-private.h"
#include "store.h"

/* The hints' clock: whole seconds, CLOCK_MONOTONIC. */
static uint32_t now_s(void)
{
	return (uint32_t)(kvt_now_ns() / 1000000000u);
}

static struct block *block_of(const struct evict_entry *x)
{
	return container_of(x, struct block, evict);
}

bool store_hint_valid(uint32_t arg, const char **ret_reason)
{
	unsigned kind = KVT_HINT_KIND(arg), priority = KVT_HINT_PRIORITY(arg);

	*ret_reason = NULL;
	if (kind == KVT_HINT_RETAIN) {
		if (priority > KVT_PRIORITY_MAX)
			*ret_reason = "a retention priority is 0 to 100";
	} else if (kind == KVT_HINT_END_REQUEST || kind == KVT_HINT_END_SESSION) {
		if (priority || KVT_HINT_DURATION(arg))
			*ret_reason = "an end of request or session carries no priority or duration";
	} else {
		*ret_reason = "unknown hint: this daemon knows retain (1), end of request (2) "
			      "and end of session (3)";
	}
	return !*ret_reason;
}

/* When b's retention lapses: 0 for none.  The store counts the blocks
 * with one, so that the sweep costs nothing while there are none. */
static void set_until(struct store *s, struct block *b, uint32_t until)
{
	s->timed_hints += (until != 0) - (b->hint_until != 0);
	b->hint_until = until;
}

static void hint_one(struct store *s, struct ns *ns, struct block *b, uint32_t arg,
		     uint32_t now)
{
	struct evict *e = &ns->cls->policy;
	unsigned kind = KVT_HINT_KIND(arg);
	uint8_t was = b->evict.band;

	if (kind == KVT_HINT_RETAIN) {
		uint32_t duration = KVT_HINT_DURATION(arg);
		evict_retain(e, &b->evict, KVT_HINT_PRIORITY(arg));
		bool raised = b->evict.band == EVICT_BAND_HIGH || b->evict.band == EVICT_BAND_TOP;
		set_until(s, b, duration && raised ? now + duration : 0);
	} else {
		evict_end(e, &b->evict, kind == KVT_HINT_END_SESSION);
		if (b->evict.band == EVICT_BAND_LOW)
			set_until(s, b, 0);
	}
	store_dirty_update(b, 0); /* to its band's queue, or out if demoted */
	ns->c.demotions += was != EVICT_BAND_LOW && b->evict.band == EVICT_BAND_LOW;
}

void store_hint(struct store *s, struct ns *ns, uint32_t arg, const uint8_t *keys,
		uint32_t n, int32_t *ret)
{
	uint32_t now = now_s();
	struct index_keys kk;

	index_keys_init(&kk, &ns->index, keys, n);
	for (uint32_t i = 0; i < n; i++) {
		struct block *b = index_keys_get(&kk, i);
		if (!b) {
			ret[i] = -ENOENT;
			continue;
		}
		hint_one(s, ns, b, arg, now);
		ns->c.hints++;
		ret[i] = 0;
	}
}

struct lapse {
	struct store *s;
	uint32_t now;
};

static bool lapsed(void *userdata, const struct evict_entry *x)
{
	struct lapse *l = userdata;
	struct block *b = block_of(x);

	if (!b->hint_until || b->hint_until > l->now)
		return false;
	set_until(l->s, b, 0);
	b->ns->c.lapsed++;
	store_dirty_update(b, DIRTY_LAPSED);
	return true;
}

uint64_t store_hints_lapse(struct store *s)
{
	struct lapse l = {s, now_s()};
	uint64_t n = 0;

	if (!s->timed_hints)
		return 0;
	for (uint32_t i = 0; i < s->n_tenants; i++) {
		struct tenant *t = s->tenants[i];
		for (uint32_t c = 0; c < t->n_classes; c++)
			if (t->classes[c]->policy.band[EVICT_BAND_HIGH].n ||
			    t->classes[c]->policy.band[EVICT_BAND_TOP].n)
				n += evict_lapse(&t->classes[c]->policy, lapsed, &l);
	}
	return n;
}
