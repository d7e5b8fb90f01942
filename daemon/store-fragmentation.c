/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fragmentation as the store sees it: a tenant's classes handed to the
 * arithmetic of fragmentation.c, for the statistics and for the warning
 * given when a class starves while another holds free slots.
 */
#include <stdlib.h>
#include <time.h>

#include "fragmentation.h"
#include "log.h"
#include "macro.h"
#include "pool.h"
#include "size.h"
#include "store-private.h"
#include "store.h"

/* One warning a minute per tenant at most: a starved class starves on
 * every store, and the log must still show other things. */
#define FRAG_WARN_INTERVAL_USEC (60ULL * 1000000)

static uint64_t now_usec(void)
{
	return kvt_now_ns() / 1000;
}

void store_frag_classes(const struct store *s, const struct tenant *t, struct frag_class *ret,
			uint64_t *ret_room)
{
	const struct pool *p = s->pool;
	uint64_t quota_left = t->quota > t->allocated ? t->quota - t->allocated : 0;
	uint64_t pool_left = p->capacity > p->allocated ? p->capacity - p->allocated : 0;

	for (uint32_t i = 0; i < t->n_classes; i++) {
		const struct slot_class *c = t->classes[i];
		ret[i] = (struct frag_class){
			.slot_bytes = c->slot_bytes,
			.extent_bytes = c->extent_bytes,
			.slots = c->slots,
			.used_slots = c->used_slots,
			.next_extent_bytes = pool_extent_bytes(p, c->slot_bytes),
		};
	}
	/* Namespaces of different geometry may share a class (the same slot
	 * size), each with its own payload per block. */
	for (uint32_t i = 0; i < t->n_ns; i++) {
		const struct ns *ns = t->nss[i];
		for (uint32_t j = 0; j < t->n_classes; j++)
			if (t->classes[j] == ns->cls)
				ret[j].data_bytes += (ns->blocks_resident + ns->blocks_reserved) *
						     ns->geo.shard_bytes * ns->geo.shards;
	}
	*ret_room = quota_left < pool_left ? quota_left : pool_left;
}

static void frag_warn(struct store *s, struct tenant *t, const struct slot_class *c,
		      const struct frag_tenant *f)
{
	char stranded[KVT_SIZE_LEN], block[KVT_SIZE_LEN];
	uint32_t alert = s->config->fragmentation_alert_ppm;

	log_warning("Tenant %s: host memory fragmented: blocks fill %u.%u%% of its extents ([pool] fragmentation_alert %u.%u%%) and %s of free slots are stranded in other block sizes, while %s blocks evict or are refused (%llu starved allocations, %llu since the last warning); "
		    "give each block size a tenant of its own, lower [pool] extent_size, or restart kvtierd to return the extents (kvtierctl status shows each block size)",
		    t->name, f->fill_ppm / 10000, f->fill_ppm / 1000 % 10, alert / 10000,
		    alert / 1000 % 10, kvt_size_format(f->stranded_bytes, stranded, sizeof(stranded)),
		    kvt_size_format(c->slot_bytes, block, sizeof(block)),
		    (unsigned long long)c->starved, (unsigned long long)t->frag_unwarned);
	s->frag_warnings++;
}

void store_frag_no_room(struct store *s, struct tenant *t, struct slot_class *c)
{
	struct frag_class stack[16], *cls = stack;
	uint32_t self = 0;
	uint64_t room;

	if (t->n_classes > 16 && !(cls = malloc(sizeof(*cls) * t->n_classes)))
		return;
	store_frag_classes(s, t, cls, &room);
	for (uint32_t i = 0; i < t->n_classes; i++)
		if (t->classes[i] == c)
			self = i;
	if (frag_starved(cls, t->n_classes, self)) {
		c->starved++;
		t->frag_unwarned++;
		uint64_t now = now_usec();
		struct frag_tenant f;
		frag_tenant_compute(cls, t->n_classes, room, s->config->fragmentation_alert_ppm,
				    NULL, &f);
		if (f.fragmented && (!t->frag_warned_usec ||
				     now - t->frag_warned_usec >= FRAG_WARN_INTERVAL_USEC)) {
			frag_warn(s, t, c, &f);
			t->frag_warned_usec = now;
			t->frag_unwarned = 0;
		}
	}
	if (cls != stack)
		free(cls);
}
