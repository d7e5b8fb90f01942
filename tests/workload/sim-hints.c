/* SPDX-License-Identifier: Apache-2.0 */
#include <stdlib.h>
#include <string.h>

#include "sim-hints.h"

int sim_hints_init(struct sim_hints *h, const struct trace *t, unsigned mode,
		   uint64_t duration_us)
{
	*h = (struct sim_hints){.mode = mode, .duration_us = duration_us};
	if (!mode)
		return 0;
	h->until = calloc(t->n_blocks ? t->n_blocks : 1, sizeof(*h->until));
	return h->until ? 0 : -1;
}

void sim_hints_done(struct sim_hints *h)
{
	free(h->until);
	h->until = NULL;
}

static bool lapsed(void *userdata, const struct evict_entry *x)
{
	struct sim_hints *h = userdata;
	uint32_t id = (uint32_t)x->fp; /* the simulator's fingerprints are ids */
	if (!h->until[id] || h->until[id] > h->now_us)
		return false;
	h->until[id] = 0;
	return true;
}

bool sim_hints_due(struct sim_hints *h, uint64_t t_us)
{
	h->now_us = t_us;
	if (!h->mode || t_us < h->swept_us + 1000000)
		return false;
	h->swept_us = t_us;
	return true;
}

void sim_hints_lapse(struct sim_hints *h, struct evict *e)
{
	h->lapsed += evict_lapse(e, lapsed, h);
}

static void retain(struct sim_hints *h, struct evict *e, struct evict_entry *ent,
		   const uint32_t *ids, uint32_t from, uint32_t to, const uint8_t *state, uint8_t stored,
		   unsigned priority, uint64_t duration_us)
{
	for (uint32_t i = from; i < to; i++) {
		if (state[ids[i]] != stored)
			continue;
		evict_retain(e, &ent[ids[i]], priority);
		h->until[ids[i]] = duration_us ? h->now_us + duration_us : 0;
	}
}

static void end(struct sim_hints *h, struct evict *e, struct evict_entry *ent,
		const uint32_t *ids, uint32_t from, uint32_t to, const uint8_t *state, uint8_t stored,
		bool session)
{
	for (uint32_t i = from; i < to; i++) {
		if (state[ids[i]] != stored)
			continue;
		evict_end(e, &ent[ids[i]], session);
		if (ent[ids[i]].band == EVICT_BAND_LOW)
			h->until[ids[i]] = 0;
	}
}

void sim_hints_request(struct sim_hints *h, struct evict *e, struct evict_entry *ent,
		       const struct trace *t, const struct trace_req *r, const uint8_t *state,
		       uint8_t stored)
{
	const uint32_t *ids = t->ids + r->off;
	uint32_t all = r->n_lookup + r->n_new, shared = r->shared < all ? r->shared : all;

	if (h->mode & TRACE_HINT_SHARED)
		retain(h, e, ent, ids, 0, shared, state, stored, TRACE_HINT_SHARED_PRIORITY, 0);
	if ((h->mode & TRACE_HINT_TURNS) && !r->last)
		retain(h, e, ent, ids, shared, all, state, stored, TRACE_HINT_TURN_PRIORITY,
		       h->duration_us);
	if ((h->mode & TRACE_HINT_END) && r->last)
		end(h, e, ent, ids, shared, all, state, stored, true);
	if (h->mode & TRACE_HINT_REQUEST)
		end(h, e, ent, ids, 0, all, state, stored, false);
}

void sim_hints_forget(struct sim_hints *h, uint32_t id)
{
	if (h->until)
		h->until[id] = 0;
}
