/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The store's tenants: made on first use with the quotas the configuration
 * gives them, found by name or id, requoted on reload, and freed with
 * everything they hold at shutdown (store_done(), store.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "log.h"
#include "ledger.h"
#include "store-private.h"
#include "store.h"

void store_tenant_free(struct store *s, struct tenant *t)
{
	/* Shutdown: blocks that only handles still hold go with the last. */
	for (uint32_t i = 0; i < t->handles_cap; i++) {
		struct handle *h = t->handles[i];
		if (!h)
			continue;
		if (--h->block->handles == 0 && !h->block->indexed) {
			if (block_disk(h->block))
				slab_free(&s->disk_copies, h->block->disk_copy);
			slab_free(&s->blocks, h->block);
		}
		free(h);
	}
	for (uint32_t i = 0; i < t->n_ns; i++)
		store_ns_free(s, t->nss[i]);
	for (uint32_t i = 0; i < t->n_classes; i++) {
		struct slot_class *c = t->classes[i];
		for (uint32_t j = 0; j < c->n_extents; j++) {
			ledger_extent_free(c->extents[j]->ledger);
			pool_extent_free(s->pool, c->extents[j]);
		}
		free(c->extents);
		evict_done(&c->policy);
		free(c);
	}
	free(t->classes);
	free(t->nss);
	ledger_handles_free(t->handle_ledger);
	free(t->handles);
	free(t->handle_gen);
	free(t->handle_free);
	free(t);
}

struct tenant *store_tenant_find(struct store *s, const char *name)
{
	for (uint32_t i = 0; i < s->n_tenants; i++)
		if (!strcmp(s->tenants[i]->name, name))
			return s->tenants[i];
	return NULL;
}

int store_tenant_get(struct store *s, const struct tenant_choice *ch, struct tenant **ret)
{
	struct tenant *t = store_tenant_find(s, ch->name);
	if (t) {
		*ret = t;
		return 0;
	}
	t = fault_hit(FAULT_TENANT) ? NULL : calloc(1, sizeof(*t));
	if (!t || !ARRAY_GROW(s->tenants, s->n_tenants, struct tenant *)) {
		free(t);
		return -ENOMEM;
	}
	t->id = s->next_tenant_id++;
	t->next_extent_id = 1;
	t->store = s;
	t->choice = *ch;
	t->uid = ch->configured ? (uid_t)-1 : ch->uid;
	snprintf(t->name, sizeof(t->name), "%s", ch->name);
	t->quota = tenancy_quota(s->config, ch);
	t->nvme_quota = tenancy_nvme_quota(s->config, ch);
	s->tenants[s->n_tenants++] = t;
	if (s->config->n_spills)
		log_info("Tenant %s: quota %llu MiB, NVMe quota %llu MiB", t->name,
			 (unsigned long long)(t->quota >> 20), (unsigned long long)(t->nvme_quota >> 20));
	else
		log_info("Tenant %s: quota %llu MiB", t->name, (unsigned long long)(t->quota >> 20));
	*ret = t;
	return 0;
}

void store_reload(struct store *s)
{
	for (uint32_t i = 0; i < s->n_tenants; i++) {
		struct tenant *t = s->tenants[i];
		uint64_t q = tenancy_quota(s->config, &t->choice);
		if (q != t->quota)
			log_info("Tenant %s: quota %llu -> %llu MiB%s", t->name,
				 (unsigned long long)(t->quota >> 20), (unsigned long long)(q >> 20),
				 q < t->allocated ? " (below what it holds: it shrinks by eviction as it stores)" : "");
		t->quota = q;
		q = tenancy_nvme_quota(s->config, &t->choice);
		if (q != t->nvme_quota)
			log_info("Tenant %s: NVMe quota %llu -> %llu MiB%s", t->name,
				 (unsigned long long)(t->nvme_quota >> 20), (unsigned long long)(q >> 20),
				 q < t->disk_bytes ? " (below what it holds: it shrinks as it spills)" : "");
		t->nvme_quota = q;
	}
	/* Watermarks and quotas may be lower now: write-back looks at once,
	 * not at the next block stored. */
	if (s->nvme_ops)
		s->nvme_ops->kick(s->nvme);
}

uint64_t store_tenant_used(const struct tenant *t)
{
	uint64_t used = 0;
	for (uint32_t i = 0; i < t->n_classes; i++)
		used += t->classes[i]->used_slots * t->classes[i]->slot_bytes;
	return used;
}

struct tenant *store_tenant_by_id(struct store *s, uint32_t id)
{
	for (uint32_t i = 0; i < s->n_tenants; i++)
		if (s->tenants[i]->id == id)
			return s->tenants[i];
	return NULL;
}
