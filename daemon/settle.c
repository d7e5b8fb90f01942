/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A LOOKUP's wait for its staged keys, for one SETTLED notice (settle.h).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "settle.h"
#include "store.h"

struct settle_watch {
	LIST_ENTRY(settle_watch) link;
	const struct ns *ns; /* compared only: the block's namespace is the one read */
	uint64_t request_id;
	uint64_t since_usec;
	uint32_t ns_id;
	uint32_t n, next; /* keys; the first not known to have settled */
	uint8_t keys[][KVT_KEY_SIZE];
};

void settle_init(struct settle_set *set)
{
	LIST_INIT(&set->watches);
	set->n = 0;
}

static void watch_free(struct settle_set *set, struct settle_watch *w)
{
	LIST_REMOVE(w, link);
	set->n--;
	free(w);
}

/* Past every key that has settled; once past the last, the notice, with
 * how many are in host memory now (a key settled early may have been
 * evicted since: the client looks up again either way). */
static bool watch_advance(struct settle_watch *w, struct ns *ns, settle_done_fn done,
			  void *userdata)
{
	while (w->next < w->n && store_key_arrival(ns, w->keys[w->next]) != KVT_STATE_DISK)
		w->next++;
	if (w->next < w->n)
		return false;
	struct kvt_settled m = {.request_id = w->request_id, .ns_id = w->ns_id, .n_keys = w->n};
	for (uint32_t i = 0; i < w->n; i++)
		m.n_host += store_key_arrival(ns, w->keys[i]) == KVT_STATE_HOST;
	done(userdata, &m);
	return true;
}

int settle_watch(struct settle_set *set, struct ns *ns, uint32_t ns_id, uint64_t request_id,
		 const uint8_t *keys, const uint8_t *states, uint32_t n, uint64_t now_usec,
		 settle_done_fn done, void *userdata)
{
	struct settle_watch *w, *next;
	uint32_t k = 0;

	for (w = LIST_FIRST(&set->watches); w; w = next) {
		next = LIST_NEXT(w, link);
		if (now_usec - w->since_usec > SETTLE_WATCH_USEC)
			watch_free(set, w);
	}
	if (set->n >= SETTLE_WATCHES_MAX)
		return -EMFILE;
	for (uint32_t i = 0; i < n; i++)
		k += states[i] == KVT_STATE_DISK;
	if (!k)
		return 0;
	w = malloc(sizeof(*w) + (size_t)k * KVT_KEY_SIZE);
	if (!w)
		return -ENOMEM;
	*w = (struct settle_watch){.ns = ns, .request_id = request_id, .since_usec = now_usec,
				   .ns_id = ns_id, .n = k};
	k = 0;
	for (uint32_t i = 0; i < n; i++)
		if (states[i] == KVT_STATE_DISK)
			memcpy(w->keys[k++], keys + (size_t)i * KVT_KEY_SIZE, KVT_KEY_SIZE);
	LIST_INSERT_HEAD(&set->watches, w, link);
	set->n++;
	if (watch_advance(w, ns, done, userdata))
		watch_free(set, w);
	return 0;
}

void settle_advance(struct settle_set *set, struct ns *ns, settle_done_fn done, void *userdata)
{
	struct settle_watch *w, *next;

	for (w = LIST_FIRST(&set->watches); w; w = next) {
		next = LIST_NEXT(w, link);
		if (w->ns == ns && watch_advance(w, ns, done, userdata))
			watch_free(set, w);
	}
}

void settle_clear(struct settle_set *set)
{
	while (!LIST_EMPTY(&set->watches))
		watch_free(set, LIST_FIRST(&set->watches));
}
