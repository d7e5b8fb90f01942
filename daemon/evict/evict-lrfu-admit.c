/* SPDX-License-Identifier: Apache-2.0 */
#include "evict-lrfu-admit.h"
#include "evict-policy.h"

/* A request of x's block, in LRFU's count; a new block is stored in the
 * filter's shadows too (a hit was scored there by its lookup).
 * \return its level; ret_count the sketch's count of it before. */
static unsigned request(struct evict_lrfu_admit_state *s, const struct evict_entry *x,
			unsigned *ret_count, bool stored)
{
	uint64_t h;
	unsigned level = evict_lrfu_request(&s->lrfu, x, &h, ret_count);

	if (stored)
		evict_admit_observe(&s->admit, s->lrfu.q.size, h, *ret_count, level);
	s->lrfu.q.weight = s->admit.weight;
	return level;
}

static int admit_init(void *state, const struct keyhash *hash)
{
	struct evict_lrfu_admit_state *s = state;

	evict_lrfu_state_init(&s->lrfu, hash);
	evict_admit_init(&s->admit);
	s->refused = 0;
	return 0;
}

static void admit_done(void *state)
{
	struct evict_lrfu_admit_state *s = state;

	evict_lrfu_state_done(&s->lrfu);
	evict_admit_done(&s->admit);
}

static void admit_insert(void *state, struct evict_entry *x)
{
	struct evict_lrfu_admit_state *s = state;
	unsigned count = COUNT_SKETCH_MAX, level = 0;

	/* A block that was pinned was admitted, or is still on probation:
	 * only a new one is a request, and only a new one is judged, after
	 * the shadows have seen it. */
	if (x->queue == EVICT_Q_NONE)
		level = request(s, x, &count, true);
	bool refused = count < s->admit.filter;
	s->refused += refused;
	evict_lrfu_insert(&s->lrfu.q, x, level, refused);
}

static void admit_remove(void *state, struct evict_entry *x)
{
	struct evict_lrfu_admit_state *s = state;

	evict_lrfu_remove(&s->lrfu.q, x);
}

/* A hit on probation admits the block. */
static void admit_touch(void *state, struct evict_entry *x)
{
	struct evict_lrfu_admit_state *s = state;
	unsigned count;

	evict_lrfu_touch(&s->lrfu.q, x, request(s, x, &count, false));
}

/* The shadows score the lookup's leading run. */
static void admit_lookup(void *state, const uint64_t *fp, size_t n, bool head)
{
	struct evict_lrfu_admit_state *s = state;

	evict_admit_lookup(&s->admit, &s->lrfu, fp, n, head);
	s->lrfu.q.weight = s->admit.weight;
}

static struct evict_entry *admit_victim(void *state)
{
	const struct evict_lrfu_admit_state *s = state;

	return evict_lrfu_victim(&s->lrfu.q);
}

static struct evict_entry *admit_oldest(const void *state)
{
	const struct evict_lrfu_admit_state *s = state;

	return evict_lrfu_oldest(&s->lrfu.q);
}

static struct evict_entry *admit_walk_next(const void *state, const struct evict_entry *x)
{
	const struct evict_lrfu_admit_state *s = state;

	return evict_lrfu_walk_next(&s->lrfu.q, x);
}

static uint64_t admit_count(const void *state)
{
	const struct evict_lrfu_admit_state *s = state;

	return s->lrfu.q.n;
}

static void admit_report(const void *state, struct evict_report *r)
{
	const struct evict_lrfu_admit_state *s = state;

	r->lookups = s->admit.lookups;
	r->switches = s->admit.switches;
	r->weight = s->admit.weight;
	r->filter = s->admit.filter;
}

const struct evict_policy_ops evict_policy_lrfu_admit = {
	.name = "lrfu-admit",
	.state_size = sizeof(struct evict_lrfu_admit_state),
	.init = admit_init,
	.done = admit_done,
	.insert = admit_insert,
	.remove = admit_remove,
	.touch = admit_touch,
	.lookup = admit_lookup,
	.victim = admit_victim,
	.oldest = admit_oldest,
	.walk_next = admit_walk_next,
	.count = admit_count,
	.report = admit_report,
};
