/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The NVMe tier's start (spill files, I/O engine, recovery of the index),
 * shutdown, statistics, and the table through which the store reaches it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>

#include "log.h"
#include "nvme-private.h"

/* The store's view of this tier (store.h). */
static void tier_extent_added(void *nvme, struct extent *e)
{
	struct nvme *n = nvme;

	io_buffer_add(n->io, e->map, e->size);
}

static void tier_kick(void *nvme)
{
	nvme_kick(nvme);
}

static int tier_stage(void *nvme, struct block *b)
{
	return nvme_stage(nvme, b);
}

static void tier_slot_drop(void *nvme, struct spill_region *r, uint32_t slot)
{
	nvme_slot_drop(nvme, r, slot);
}

static const struct store_nvme_ops tier_ops = {
	.extent_added = tier_extent_added,
	.kick = tier_kick,
	.stage = tier_stage,
	.slot_drop = tier_slot_drop,
};

static int recover_slot(struct spill_region *r, uint32_t slot, const struct spill_slot_header *h,
			void *userdata)
{
	struct nvme *n = userdata;
	const struct spill_binding *bd = r->binding;
	return store_recover_block(n->store, bd->tenant, bd->identity, bd->identity_len, h->key, r,
				   slot, h->seq);
}

int nvme_start(struct store *s, const struct config *c, sd_event *event, struct nvme **ret)
{
	struct spill_file_conf conf[CONFIG_MAX_SPILL_FILES];
	struct nvme *n;
	int r;

	n = calloc(1, sizeof(*n));
	if (!n)
		return -ENOMEM;
	n->store = s;
	n->config = c;
	n->event = event;
	nvme_io_init();
	for (uint32_t i = 0; i < c->n_spills; i++)
		conf[i] = (struct spill_file_conf){c->spills[i].path, c->spills[i].capacity};
	r = spill_open(conf, c->n_spills, &n->spill);
	if (r < 0)
		goto fail;
	/* The index first, then clients: READY follows recovery.  Reading
	 * every slot header takes time on a large tier: ask systemd for it
	 * (about a minute per TiB here, and a margin). */
	uint64_t total = 0;
	for (uint32_t i = 0; i < c->n_spills; i++)
		total += c->spills[i].capacity;
	sd_notifyf(false, "EXTEND_TIMEOUT_USEC=%llu",
		   (unsigned long long)(30 + 60 * (total >> 40)) * 1000000ULL);
	r = spill_recover(n->spill, recover_slot, n, &n->rec);
	if (r < 0) {
		log_error_errno(r, "NVMe recovery failed: %m");
		goto fail;
	}
	static const enum io_engine_kind kinds[] = {IO_ENGINE_AUTO, IO_ENGINE_URING,
						    IO_ENGINE_THREADS};
	r = io_engine_new(event, kinds[c->nvme_engine], c->nvme_queue_depth, &n->io);
	if (r < 0) {
		log_error_errno(r, "Failed to start the NVMe I/O engine: %m");
		goto fail;
	}
	n->file_io = calloc(n->spill->n_files, sizeof(int));
	if (!n->file_io) {
		r = -ENOMEM;
		goto fail;
	}
	for (unsigned i = 0; i < n->spill->n_files; i++) {
		r = io_file_add(n->io, n->spill->files[i].fd);
		if (r < 0)
			goto fail;
		n->file_io[i] = r;
	}
	r = sd_event_add_defer(event, &n->kick, nvme_writeback_run, n);
	if (r < 0)
		goto fail;
	sd_event_source_set_enabled(n->kick, SD_EVENT_OFF);
	store_set_nvme(s, &tier_ops, n);
	log_info("NVMe tier: %u spill file(s), engine %s (%s); recovered %llu block(s), dropped %llu torn or corrupt, in %llu ms",
		 n->spill->n_files, io_engine_name(n->io), io_engine_reason(n->io),
		 (unsigned long long)(n->rec.slots_recovered - n->rec.slots_replaced),
		 (unsigned long long)n->rec.slots_dropped,
		 (unsigned long long)(n->rec.elapsed_ns / 1000000));
	*ret = n;
	return 0;
fail:
	nvme_free(n);
	return r;
}

/* Ops whose I/O the kernel still held when the engine gave up waiting for
 * it at shutdown: never freed, since a read may still land in their header
 * buffer.  Kept reachable from here so that leak checkers do not count them
 * as lost. */
static LIST_HEAD(, op) ops_abandoned = LIST_HEAD_INITIALIZER(ops_abandoned);

static bool op_held(const struct op *op)
{
	return io_req_held(&op->hdr) || io_req_held(&op->data) || io_req_held(&op->region_hdr);
}

void nvme_free(struct nvme *n)
{
	unsigned abandoned = 0;

	if (!n)
		return;
	if (n->store->nvme == n)
		store_set_nvme(n->store, NULL, NULL);
	sd_event_source_disable_unref(n->kick);
	sd_event_source_disable_unref(n->retry);
	/* Cancels and waits for I/O in flight: its buffers are pool and op
	 * memory.  Their callbacks do not run, so the ops are freed here:
	 * those the kernel has given back, and no other. */
	io_engine_free(n->io);
	while (!LIST_EMPTY(&n->ops_list)) {
		struct op *op = LIST_FIRST(&n->ops_list);
		if (op->b)
			store_nvme_abandoned(n->store, op->b);
		if (!op_held(op)) {
			nvme_op_free(op);
			continue;
		}
		nvme_op_untrack(n, op);
		op->n = NULL;
		op->b = NULL;
		op->region = NULL;
		LIST_INSERT_HEAD(&ops_abandoned, op, link);
		abandoned++;
	}
	if (abandoned > 0)
		log_error("%u spill I/O operation(s) still held by the kernel at shutdown: their memory is left allocated, not freed",
			  abandoned);
	spill_free(n->spill);
	free(n->file_io);
	free(n);
}

void nvme_get_stats(const struct nvme *n, struct nvme_stats *ret)
{
	*ret = n->st;
	ret->in_flight = io_in_flight(n->io);
	ret->engine = io_engine_name(n->io);
	ret->engine_reason = io_engine_reason(n->io);
	ret->recovered = n->rec.slots_recovered - n->rec.slots_replaced;
	ret->recovery_dropped = n->rec.slots_dropped;
	ret->recovery_ms = n->rec.elapsed_ns / 1000000;
	ret->files = n->spill->n_files;
	ret->capacity = ret->used = ret->blocks = 0;
	for (unsigned i = 0; i < n->spill->n_files; i++) {
		const struct spill_file *f = &n->spill->files[i];
		ret->capacity += f->capacity;
		ret->files_failed += f->error != 0;
		for (uint32_t j = 0; j < f->n_regions; j++) {
			const struct spill_region *r = &f->regions[j];
			if (!r->binding)
				continue;
			uint64_t used = r->slots.n - r->slots.n_free;
			ret->blocks += used;
			ret->used += used * r->stride;
		}
	}
}

uint32_t nvme_tenant_regions(const struct nvme *n, const char *tenant)
{
	return spill_tenant_regions(n->spill, tenant);
}
