/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Write-back: dirty blocks of tenants above the high watermark go to the
 * spill files in the background, coldest first, so that host eviction only
 * drops clean blocks.  Room on NVMe comes from the tenant's own quota and,
 * in whole regions, from tenants above theirs; a device that keeps failing
 * is backed off from.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "fault.h"
#include "log.h"
#include "nvme-private.h"
#include "pool.h"

/* After a failed write-back the next waits, twice as long after each
 * failure in a row: a device that keeps refusing writes must not keep the
 * loop rewriting.  The timer also stands in for the completions that would
 * otherwise kick write-back: with nothing in flight none come, and until
 * the next commit host eviction could only drop dirty blocks. */
#define BACKOFF_MIN_USEC (10 * 1000)
#define BACKOFF_MAX_USEC (1000 * 1000)

static int on_retry(sd_event_source *src, uint64_t usec, void *userdata)
{
	nvme_kick(userdata);
	return 0;
}

static void writeback_backoff(struct nvme *n)
{
	uint64_t now = 0;

	n->backoff_usec = n->backoff_usec ? n->backoff_usec * 2 : BACKOFF_MIN_USEC;
	if (n->backoff_usec > BACKOFF_MAX_USEC)
		n->backoff_usec = BACKOFF_MAX_USEC;
	sd_event_now(n->event, CLOCK_MONOTONIC, &now);
	n->backoff_until = now + n->backoff_usec;
	if (n->retry)
		(void)sd_event_source_set_time(n->retry, n->backoff_until);
	else if (sd_event_add_time(n->event, &n->retry, CLOCK_MONOTONIC, n->backoff_until, 0,
				   on_retry, n) < 0)
		return;
	sd_event_source_set_enabled(n->retry, SD_EVENT_ONESHOT);
}

void nvme_writeback_ended(struct op *op)
{
	struct nvme *n = op->n;
	struct block *b = op->b;
	bool faulted = op->sum_error < 0, indexed = b->indexed;

	if (op->region_hdr.len) {
		if (op->region_result < 0 && !op->error)
			op->error = op->region_result;
		spill_region_header_written(op->region);
	}
	n->ops--;
	op->region->ios--;
	if (faulted) {
		/* Nothing of the slot was written; the store erases it. */
		log_warning("Block of namespace %s/%u faulted in host memory (a client punched a hole?): dropped",
			    b->ns->tenant->name, b->ns->id);
	} else if (op->error) {
		nvme_io_failed(n, op->region, op->error);
		writeback_backoff(n);
	} else {
		n->backoff_usec = 0;
		n->st.writes++;
		n->st.write_bytes += op->data.len;
	}
	/* A slot the block could not keep is erased by the store. */
	store_nvme_written(n->store, b, op->region, op->slot, op->seq, !op->error && !faulted);
	/* One no longer indexed was freed just now. */
	if (faulted && indexed)
		store_block_drop(n->store, b);
	nvme_op_free(op);
	nvme_kick(n);
}

/* Regions a tenant's NVMe quota covers, rounded up: a quota smaller than a
 * region still entitles its tenant to one. */
static uint32_t quota_regions(const struct tenant *t)
{
	uint64_t q = t->nvme_quota / SPILL_REGION_BYTES + (t->nvme_quota % SPILL_REGION_BYTES != 0);
	return q > UINT32_MAX ? UINT32_MAX : (uint32_t)q;
}

/*
 * Every usable region is taken, and ns needs a slot.  A region holds one
 * namespace's blocks, so a tenant with a few blocks in many namespaces can
 * hold far more regions than its NVMe quota covers; space follows the
 * quotas in whole regions instead.  A tenant holding fewer regions than its
 * quota covers takes one back from the tenant furthest above its own: that
 * tenant's copies there are given up (a block also in host memory only
 * becomes dirty; one only on NVMe is lost, to its own tenant's quota).
 * Taking only while below and only from above means a region never goes
 * back and forth.  When the quotas, in regions, fit in the files, the
 * tenant asking always finds such a tenant.  Otherwise the namespace's own
 * least recently used copy makes room.
 * \return 0 when a slot may be free now; -EINPROGRESS while a region is
 *         being emptied for it; -ENOSPC when nothing can be done; -ENOMEM
 */
static int make_room(struct nvme *n, struct ns *ns)
{
	struct store *s = n->store;
	struct tenant *t = ns->tenant, *victim = NULL;
	uint32_t held = spill_tenant_regions(n->spill, t->name), most = 0;

	for (uint32_t i = 0; held < quota_regions(t) && i < s->n_tenants; i++) {
		struct tenant *u = s->tenants[i];
		uint32_t h = spill_tenant_regions(n->spill, u->name), q = quota_regions(u);
		if (u != t && h > q && h - q > most) {
			victim = u;
			most = h - q;
		}
	}
	if (victim) {
		struct spill_region *r;
		int k = spill_region_victim(n->spill, victim->name, &r);
		if (k == -EBUSY)
			return -EINPROGRESS; /* the completions of its I/O kick again */
		if (k == 0)
			k = spill_region_reclaim(r, t->name);
		if (k == -ENOMEM)
			return k;
		if (k == 0) {
			uint32_t used = r->slots.n - r->slots.n_free;
			uint64_t dropped = store_nvme_evict_region(s, r);
			n->st.reclaims++;
			log_info("NVMe tier: a spill region of tenant %s (%u held, its NVMe quota covers %u) taken back for tenant %s (%u held, its quota covers %u); %llu of the %u copies in it given up",
				 victim->name, most + quota_regions(victim), quota_regions(victim),
				 t->name, held, quota_regions(t), (unsigned long long)dropped, used);
			/* Free once the erasures of its slot headers land; their
			 * completions kick write-back. */
			return -EINPROGRESS;
		}
	}
	/* The freed slot is reusable once its header is erased; the erasure's
	 * completion kicks write-back again. */
	if (store_nvme_evict(s, ns) == 0)
		return 0;
	return -ENOSPC;
}

/* Refused write-backs are retried on every turn, so they are logged at most
 * this often per tenant, with how many there were in between; the counters
 * (STATS nvme_refused) have them all. */
#define REFUSED_LOG_USEC (10 * 1000 * 1000)

static void writeback_refused(struct nvme *n, struct ns *ns, int error, uint64_t slot_bytes)
{
	struct tenant *t = ns->tenant;
	uint64_t now = 0;
	char why[256];

	n->st.refused++;
	t->nvme_refused++;
	t->nvme_refused_unlogged++;
	sd_event_now(n->event, CLOCK_MONOTONIC, &now);
	if (t->nvme_refused_logged_usec && now - t->nvme_refused_logged_usec < REFUSED_LOG_USEC)
		return;
	uint32_t held = spill_tenant_regions(n->spill, t->name);
	if (error == -E2BIG)
		snprintf(why, sizeof(why), "its blocks of %llu bytes are larger than a spill region holds",
			 (unsigned long long)slot_bytes);
	else if (error == -EDQUOT && spill_stride_for(slot_bytes) > t->nvme_quota)
		snprintf(why, sizeof(why), "one block's spill slot (%llu bytes) is larger than its NVMe quota (%llu bytes)",
			 (unsigned long long)spill_stride_for(slot_bytes),
			 (unsigned long long)t->nvme_quota);
	else if (error == -EDQUOT)
		snprintf(why, sizeof(why), "its NVMe quota (%llu bytes) is full of copies of blocks still in host memory",
			 (unsigned long long)t->nvme_quota);
	else if (held >= quota_regions(t))
		snprintf(why, sizeof(why), "it holds %u spill regions (each holds one namespace's blocks), as many as its NVMe quota covers or more, and namespace %u has no NVMe copy to give up",
			 held, ns->id);
	else
		snprintf(why, sizeof(why), "every spill region is held by tenants within their NVMe quotas, which add up to more than the spill files");
	log_warning("NVMe write-back refused for tenant %s: %s; its blocks stay in host memory only (%llu refused since the last message)",
		    t->name, why, (unsigned long long)t->nvme_refused_unlogged);
	t->nvme_refused_unlogged = 0;
	t->nvme_refused_logged_usec = now ? now : 1;
}

/* A region for b's copy, within its tenant's NVMe quota: its tenant's own
 * coldest copies make room for the quota, so one tenant's spill never
 * takes another's space; make_room() for the files.
 * \return spill_region_find()'s 0 or 1, or a negative errno */
static int writeback_region(struct nvme *n, struct block *b, struct spill_region **ret)
{
	struct ns *ns = b->ns;
	int bound;

	uint64_t stride = spill_stride_for(b->extent->slot_bytes);
	while (ns->tenant->disk_bytes + ns->tenant->disk_writing + stride > ns->tenant->nvme_quota) {
		n->st.quota_full++;
		if (store_nvme_evict_tenant(n->store, ns) < 0) {
			writeback_refused(n, ns, -EDQUOT, b->extent->slot_bytes);
			return -EDQUOT;
		}
	}
	bound = spill_region_find(n->spill, ns->tenant->name, ns->identity, ns->identity_len,
				  b->extent->slot_bytes, ret);
	if (bound == -ENOSPC) {
		n->st.disk_full++;
		bound = make_room(n, ns);
		if (bound == 0) {
			bound = spill_region_find(n->spill, ns->tenant->name, ns->identity,
						  ns->identity_len, b->extent->slot_bytes, ret);
			if (bound == -ENOSPC)
				bound = -EINPROGRESS; /* room is being made */
		}
	}
	if (bound == -ENOSPC || bound == -E2BIG)
		writeback_refused(n, ns, bound, b->extent->slot_bytes);
	return bound;
}

static int writeback_one(struct nvme *n, struct block *b)
{
	struct spill_region *r;
	uint32_t slot;
	int bound, r2;

	bound = writeback_region(n, b, &r);
	if (bound < 0)
		return bound;
	r2 = spill_slot_alloc(r, &slot);
	if (r2 < 0)
		return r2;
	struct op *op = nvme_op_new(FAULT_WRITEBACK);
	if (!op) {
		/* Nothing was written to it. */
		spill_slot_free(r, slot);
		return -ENOMEM;
	}
	op->n = n;
	nvme_op_track(n, op);
	op->b = b;
	op->kind = OP_WRITEBACK;
	op->write = true;
	op->region = r;
	op->slot = slot;
	op->seq = spill_next_seq(n->spill);
	r->ios++;
	/* The payload's checksum is the worker's: it reads the bytes there,
	 * off the event loop, and encodes the header with it. */
	spill_slot_header_init(&op->h, r, slot, b->key, b->extent->slot_bytes, op->seq, 0);

	uint64_t off = spill_slot_offset(r, slot);
	op->hdr = (struct io_req){.offset = off, .buf = op->hbuf, .len = SPILL_SLOT_HEADER_BYTES,
				  .write = true};
	op->data = (struct io_req){.offset = off + SPILL_SLOT_HEADER_BYTES,
				   .buf = nvme_slot_memory(b), .len = (uint32_t)b->extent->slot_bytes,
				   .write = true};
	if (bound == 1)
		op->region_hdr = (struct io_req){.offset = r->offset, .buf = r->header,
						 .len = SPILL_REGION_HEADER_BYTES, .write = true};
	store_nvme_writing(n->store, b, r);
	n->ops++;
	nvme_worker_submit(nvme_worker_of(n, r), op);
	return 1;
}

/* Write back, coldest first, the dirty blocks of every tenant above the
 * high watermark until its dirty bytes are down to the low one. */
int nvme_writeback_run(sd_event_source *src, void *userdata)
{
	struct nvme *n = userdata;
	struct store *s = n->store;
	/* Half of each file's queue depth, the rest for stagings. */
	unsigned limit = n->config->nvme_queue_depth / 2 ? n->config->nvme_queue_depth / 2 : 1;
	limit *= n->spill->n_files;
	/* A few blocks a turn, so that clients are answered between. */
	unsigned budget = 4 * n->spill->n_files, started = 0;
	uint64_t now = 0;

	if (n->recovery)
		return 0; /* no slot is handed out before recovery ends */
	sd_event_now(n->event, CLOCK_MONOTONIC, &now);
	if (now < n->backoff_until)
		return 0; /* backing off: the retry timer kicks again */

	/* The pool as a whole counts too: tenants share it, and one can fill
	 * it before reaching its own watermark. */
	uint64_t pool_used = 0;
	for (uint32_t i = 0; i < s->n_tenants; i++)
		pool_used += store_tenant_used(s->tenants[i]);
	bool pool_high = pool_used > s->pool->capacity / 100 * n->config->writeback_high;

	for (uint32_t i = 0; i < s->n_tenants; i++) {
		struct tenant *t = s->tenants[i];
		uint64_t high = t->quota / 100 * n->config->writeback_high;
		uint64_t low = t->quota / 100 * n->config->writeback_low;
		if (store_tenant_used(t) <= high && !(pool_high && t->dirty))
			continue;
		struct store_dirty w;
		struct block *b;
		store_dirty_begin(&w, t);
		while (t->dirty > low && n->ops < limit && (b = store_dirty_next(&w))) {
			int r = writeback_one(n, b);
			if (r == -ENOMEM)
				writeback_backoff(n);
			if (r < 0) {
				store_dirty_skip_class(&w);
				continue;
			}
			if (r > 0 && ++started >= budget) {
				/* More next turn. */
				sd_event_source_set_enabled(src, SD_EVENT_ONESHOT);
				return 0;
			}
		}
	}
	return 0;
}
