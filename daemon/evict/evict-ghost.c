/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdlib.h>

#include "evict-ghost.h"
#include "keyhash.h"

#define GHOST_MIN_SLOTS 64

static uint64_t ghost_hash(const struct evict_ghost *g, uint64_t fp)
{
	/* Keyed: a caller's sequential ids are not uniform, and fingerprints
	 * a client could aim must not pile into one probe run. */
	return keyhash(g->hash, &fp, sizeof(fp));
}

static bool ghost_live(const struct evict_ghost *g, const struct evict_ghost_slot *s)
{
	return s->expire > g->seq;
}

/* The slot holding fp, or the empty slot that ends its probe sequence. */
static struct evict_ghost_slot *ghost_find(struct evict_ghost_slot *slots, uint64_t cap,
					   uint64_t fp, struct evict_ghost_slot **ret_reusable,
					   const struct evict_ghost *g)
{
	uint64_t i = ghost_hash(g, fp) & (cap - 1);

	if (ret_reusable)
		*ret_reusable = NULL;
	for (;; i = (i + 1) & (cap - 1)) {
		struct evict_ghost_slot *s = &slots[i];
		if (s->expire == 0 || s->fp == fp)
			return s;
		if (ret_reusable && !*ret_reusable && !ghost_live(g, s))
			*ret_reusable = s;
	}
}

/* Rebuild with room for four times what can be live: the window, or what
 * is live now if a shrinking window left more than that. */
static int ghost_rebuild(struct evict_ghost *g, uint64_t window)
{
	uint64_t live = 0, cap = GHOST_MIN_SLOTS;

	for (uint64_t i = 0; i < g->cap; i++)
		live += ghost_live(g, &g->slots[i]);
	if (live < window)
		live = window;
	while (cap < 4 * live)
		cap *= 2;
	struct evict_ghost_slot *slots = calloc(cap, sizeof(*slots));
	if (!slots)
		return -ENOMEM;
	uint64_t used = 0;
	for (uint64_t i = 0; i < g->cap; i++) {
		const struct evict_ghost_slot *s = &g->slots[i];
		if (!ghost_live(g, s))
			continue;
		*ghost_find(slots, cap, s->fp, NULL, g) = *s;
		used++;
	}
	free(g->slots);
	g->slots = slots;
	g->cap = cap;
	g->used = used;
	return 0;
}

void evict_ghost_init(struct evict_ghost *g, const struct keyhash *hash)
{
	*g = (struct evict_ghost){.hash = hash};
}

void evict_ghost_done(struct evict_ghost *g)
{
	free(g->slots);
	*g = (struct evict_ghost){.hash = g->hash};
}

void evict_ghost_put(struct evict_ghost *g, uint64_t fp, uint64_t window)
{
	if (window == 0)
		window = 1;
	if ((g->used + 1) * 4 > g->cap * 3 && ghost_rebuild(g, window) < 0 &&
	    g->used + 1 >= g->cap)
		return; /* no room and none to be had: forget it */

	struct evict_ghost_slot *reusable;
	struct evict_ghost_slot *s = ghost_find(g->slots, g->cap, fp, &reusable, g);
	if (s->expire == 0) {
		if (reusable)
			s = reusable;
		else
			g->used++;
	}
	g->seq++;
	s->fp = fp;
	s->expire = g->seq + window;
}

bool evict_ghost_take(struct evict_ghost *g, uint64_t fp)
{
	if (!g->cap)
		return false;
	struct evict_ghost_slot *s = ghost_find(g->slots, g->cap, fp, NULL, g);
	if (s->expire == 0 || !ghost_live(g, s))
		return false;
	s->expire = 1;
	return true;
}
