/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The store's life: made empty at start, handed its tiers below host
 * memory once they are up and taken them back before they go, and freed
 * with every tenant at shutdown.
 */
#include <stdlib.h>
#include <string.h>

#include "keyhash.h"
#include "ledger.h"
#include "store-private.h"
#include "store.h"

int store_init(struct store *s, struct pool *p, const struct config *c,
	       store_extent_added_fn fn, void *userdata)
{
	memset(s, 0, sizeof(*s));
	s->pool = p;
	s->config = c;
	s->extent_added = fn;
	s->userdata = userdata;
	s->next_tenant_id = 1;
	slab_init(&s->blocks, sizeof(struct block));
	slab_init(&s->disk_copies, sizeof(struct block_disk));
	slab_init(&s->dirty_entries, sizeof(struct block_dirty));
	TAILQ_INIT(&s->partials);
	return keyhash_init_random(&s->keyhash);
}

void store_done(struct store *s)
{
	for (uint32_t i = 0; i < s->n_tenants; i++)
		store_tenant_free(s, s->tenants[i]);
	free(s->tenants);
	s->tenants = NULL;
	s->n_tenants = 0;
	slab_done(&s->blocks);
	slab_done(&s->disk_copies);
	slab_done(&s->dirty_entries);
	store_erasures_done(s);
	ledger_free(s->ledger);
	s->ledger = NULL;
}

void store_set_nvme(struct store *s, const struct store_nvme_ops *ops, void *nvme)
{
	s->nvme_ops = ops;
	s->nvme = ops ? nvme : NULL;
}

void store_set_remote(struct store *s, const struct store_remote_ops *ops, void *remote)
{
	s->remote_ops = ops;
	s->remote = ops ? remote : NULL;
}
