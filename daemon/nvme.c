/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The NVMe tier's start (spill files, a worker for each, recovery of the index),
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

	for (unsigned i = 0; i < n->spill->n_files; i++)
		nvme_worker_buffer_add(n->workers[i], e->map, e->size);
}

static void tier_kick(void *nvme)
{
	nvme_kick(nvme);
}

static int tier_stage(void *nvme, struct block *b)
{
	return nvme_stage(nvme, b);
}

static void tier_slot_drop(void *nvme, struct spill_region *r, uint32_t slot, struct ns *ns,
			   uint64_t token)
{
	nvme_slot_drop(nvme, r, slot, ns, token);
}

/* A worker handed an op back: its end is its kind's. */
static void op_ended(struct op *op, void *userdata)
{
	switch (op->kind) {
	case OP_WRITEBACK: nvme_writeback_ended(op); break;
	case OP_STAGE: nvme_stage_ended(op); break;
	case OP_ERASE: nvme_erase_ended(op); break;
	}
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

	if (bd != n->rec_binding) {
		n->rec_ns_found = store_recover_ns(n->store, bd->tenant, bd->identity,
						   bd->identity_len, &n->rec_ns, &n->rec_scope);
		if (n->rec_ns_found < 0)
			return n->rec_ns_found;
		n->rec_binding = bd;
	}
	/* A declined namespace's copies are erased too (rec_ns NULL). */
	return store_recover_block_in(n->store, n->rec_ns, n->rec_scope, h->key, r, slot, h->seq);
}

static void recover_pump(struct nvme *n);

static void recover_read_done(struct io_req *req, int result, void *userdata)
{
	struct recover_read *rr = userdata;
	struct nvme *n = rr->n;

	n->rec_binding = NULL; /* clients ran since the last read */
	spill_recover_done(n->recovery, &rr->rd, result);
	n->rec_binding = NULL;
	rr->next_free = n->reads_free;
	n->reads_free = rr;
	recover_pump(n);
}

static void recovery_io_free(struct nvme *n)
{
	sd_event_source_disable_unref(n->rio_end);
	n->rio_end = NULL;
	io_engine_free(n->rio);
	n->rio = NULL;
	free(n->rfile);
	n->rfile = NULL;
}

static int on_recovery_io_end(sd_event_source *src, void *userdata)
{
	recovery_io_free(userdata);
	return 0;
}

static void recover_end(struct nvme *n)
{
	int r = spill_recover_end(n->recovery, &n->rec);

	spill_recover_free(n->recovery);
	n->recovery = NULL;
	free(n->reads);
	n->reads = NULL;
	/* Not from inside one of its own completions. */
	if (sd_event_add_defer(n->event, &n->rio_end, on_recovery_io_end, n) < 0)
		log_warning("Failed to schedule the end of recovery's I/O engine; it stays, idle");
	store_recovering(n->store, false);
	if (r < 0) {
		log_error_errno(r, "NVMe recovery failed: %m");
		n->recovery_error = r;
		/* Served in the background: the daemon stops with the error. */
		sd_event_exit(n->event, r);
		return;
	}
	const char *reason;
	const char *engine = nvme_worker_engine(n->workers[0], &reason);
	log_info("NVMe tier: %u spill file(s), a worker each, engine %s (%s); recovered %llu block(s), dropped %llu torn or corrupt, in %llu ms",
		 n->spill->n_files, engine, reason,
		 (unsigned long long)(n->rec.slots_recovered - n->rec.slots_replaced),
		 (unsigned long long)n->rec.slots_dropped,
		 (unsigned long long)(n->rec.elapsed_ns / 1000000));
	nvme_kick(n); /* what was stored meanwhile */
}

/* As many of recovery's reads in flight as it has buffers for; parsed in
 * recover_read_done(), one completion per event-loop dispatch. */
static void recover_pump(struct nvme *n)
{
	while (n->reads_free) {
		struct recover_read *rr = n->reads_free;
		if (spill_recover_next(n->recovery, &rr->rd) <= 0)
			break;
		n->reads_free = rr->next_free;
		rr->req = (struct io_req){.file = n->rfile[rr->rd.file], .offset = rr->rd.offset,
					  .buf = rr->rd.buf, .len = rr->rd.len,
					  .done = recover_read_done, .userdata = rr};
		io_submit(n->rio, &rr->req);
	}
	if (spill_recover_idle(n->recovery))
		recover_end(n);
}

static int recover_begin(struct nvme *n)
{
	static const enum io_engine_kind kinds[] = {IO_ENGINE_AUTO, IO_ENGINE_URING,
						    IO_ENGINE_THREADS};
	int r = spill_recover_begin(n->spill, recover_slot, n, &n->recovery);

	if (r < 0)
		return r;
	/* Its own engine: as deep as recovery reads, and its reads never
	 * wait behind (or count as) the tier's. */
	r = io_engine_new(n->event, kinds[n->config->nvme_engine], SPILL_RECOVER_READS_MAX, &n->rio);
	if (r < 0)
		return r;
	io_engine_unfaulted(n->rio);
	n->rfile = calloc(n->spill->n_files, sizeof(int));
	if (!n->rfile)
		return -ENOMEM;
	for (unsigned i = 0; i < n->spill->n_files; i++) {
		r = io_file_add(n->rio, n->spill->files[i].fd);
		if (r < 0)
			return r;
		n->rfile[i] = r;
	}
	n->reads = calloc(SPILL_RECOVER_READS_MAX, sizeof(*n->reads));
	if (!n->reads)
		return -ENOMEM;
	for (unsigned i = 0; i < SPILL_RECOVER_READS_MAX; i++) {
		n->reads[i].n = n;
		n->reads[i].next_free = n->reads_free;
		n->reads_free = &n->reads[i];
	}
	return 0;
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
	static const enum io_engine_kind kinds[] = {IO_ENGINE_AUTO, IO_ENGINE_URING,
						    IO_ENGINE_THREADS};
	n->workers = calloc(n->spill->n_files, sizeof(*n->workers));
	if (!n->workers) {
		r = -ENOMEM;
		goto fail;
	}
	/* A worker, ring and queue depth for each file: the files (one device
	 * each, often) work in parallel, and none waits behind another. */
	for (unsigned i = 0; i < n->spill->n_files; i++) {
		r = nvme_worker_new(event, i, n->spill->files[i].fd, kinds[c->nvme_engine],
				    c->nvme_queue_depth, op_ended, n, &n->workers[i]);
		if (r < 0) {
			log_error_errno(r, "Failed to start the NVMe I/O worker of %s: %m",
					c->spills[i].path);
			goto fail;
		}
	}
	/* Extents adopted from an earlier daemon are there already. */
	for (uint32_t i = 0; i < s->n_tenants; i++)
		for (uint32_t j = 0; j < s->tenants[i]->n_classes; j++) {
			const struct slot_class *cl = s->tenants[i]->classes[j];
			for (uint32_t k = 0; k < cl->n_extents; k++)
				tier_extent_added(n, cl->extents[k]);
		}
	r = sd_event_add_defer(event, &n->kick, nvme_writeback_run, n);
	if (r < 0)
		goto fail;
	sd_event_source_set_enabled(n->kick, SD_EVENT_OFF);
	/* The tier serves the blocks recovery finds as it finds them (each
	 * verified again when it is read); write-back waits for the end. */
	store_set_nvme(s, &tier_ops, n);
	r = recover_begin(n);
	if (r < 0) {
		log_error_errno(r, "NVMe recovery failed: %m");
		goto fail;
	}
	if (c->nvme_recovery == NVME_RECOVERY_BACKGROUND) {
		r = store_recovering(s, true);
		if (r < 0)
			goto fail;
		log_info("NVMe tier: recovering %u spill file(s) while serving; blocks not recovered yet are misses",
			 n->spill->n_files);
		recover_pump(n);
		*ret = n;
		return 0;
	}
	/* The index first, then clients: READY follows recovery.  Reading
	 * every slot header takes time on a large tier: ask systemd for it
	 * (about a minute per TiB at queue depth 1, and a margin). */
	uint64_t total = 0;
	for (uint32_t i = 0; i < c->n_spills; i++)
		total += c->spills[i].capacity;
	sd_notifyf(false, "EXTEND_TIMEOUT_USEC=%llu",
		   (unsigned long long)(30 + 60 * (total >> 40)) * 1000000ULL);
	recover_pump(n);
	while (n->recovery) {
		r = sd_event_run(event, UINT64_MAX);
		if (r < 0) {
			log_error_errno(r, "Event loop failed during NVMe recovery: %m");
			goto fail;
		}
	}
	if (n->recovery_error < 0) {
		r = n->recovery_error;
		goto fail;
	}
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

static void workers_free(struct nvme *n)
{
	for (unsigned i = 0; n->workers && i < n->spill->n_files; i++)
		nvme_worker_free(n->workers[i]);
	free(n->workers);
	n->workers = NULL;
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
	/* Stops the workers, which cancel and wait for I/O in flight: its
	 * buffers are pool and op memory.  No op is handed back, so the ops
	 * are freed here: those the kernel has given back, and no other. */
	workers_free(n);
	recovery_io_free(n);
	/* Recovery's reads are back or cancelled: its buffers can go, unless
	 * the kernel still holds one of them. */
	bool held = false;
	for (unsigned i = 0; n->reads && i < SPILL_RECOVER_READS_MAX; i++)
		held |= io_req_held(&n->reads[i].req);
	if (!held) {
		spill_recover_free(n->recovery);
		free(n->reads);
	}
	store_recovering(n->store, false);
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
	free(n);
}

void nvme_get_stats(const struct nvme *n, struct nvme_stats *ret)
{
	*ret = n->st;
	ret->in_flight = 0;
	for (unsigned i = 0; i < n->spill->n_files; i++)
		ret->in_flight += nvme_worker_in_flight(n->workers[i]);
	ret->engine = nvme_worker_engine(n->workers[0], &ret->engine_reason);
	struct spill_recovery rec = n->rec;
	ret->recovering = n->recovery != NULL;
	ret->recovery_regions = ret->recovery_regions_total = 0;
	for (unsigned i = 0; i < n->spill->n_files; i++)
		ret->recovery_regions_total += n->spill->files[i].n_regions;
	ret->recovery_regions = ret->recovery_regions_total;
	if (n->recovery) {
		spill_recover_get(n->recovery, &rec);
		spill_recover_position(n->recovery, &ret->recovery_regions,
				       &ret->recovery_regions_total);
	}
	ret->recovered = rec.slots_recovered - rec.slots_replaced;
	ret->recovery_dropped = rec.slots_dropped;
	ret->recovery_ms = rec.elapsed_ns / 1000000;
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
