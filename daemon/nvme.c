/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>
#include <time.h>

#include "fault.h"
#include "io.h"
#include "log.h"
#include "nvme.h"
#include "pool.h"
#include "spill.h"
#include "store.h"

struct op;

struct nvme {
	struct op *ops_list; /* every op in flight, freed at shutdown */
	struct store *store;
	const struct config *config;
	sd_event *event;
	struct spill *spill;
	struct io_engine *io;
	int *file_io; /* the engine's index of each spill file */
	sd_event_source *kick;
	sd_event_source *retry; /* write-back again after a failure */
	uint64_t backoff_usec, backoff_until;
	struct nvme_stats st;
	struct spill_recovery rec;
	unsigned ops; /* write-backs and stagings in flight */
};

/* One write-back or staging: a slot header and a payload, two I/Os (the
 * header always from or into the daemon's own memory), and for a region
 * bound by this write-back its region header too. */
struct op {
	struct nvme *n;
	struct block *b;
	bool write;
	struct spill_region *region;
	uint32_t slot;
	uint64_t seq;
	uint8_t *hbuf;
	struct io_req hdr, data, region_hdr;
	unsigned pending;
	int error;
	bool region_written;
	struct op *prev, *next; /* nvme.ops_list */
};

/* A zeroed slot header: written over a dropped block's, so that a restart
 * does not bring back what was deleted. */
static uint8_t *zero_header;

static void op_track(struct nvme *n, struct op *op)
{
	op->next = n->ops_list;
	if (n->ops_list)
		n->ops_list->prev = op;
	n->ops_list = op;
}

static void op_untrack(struct nvme *n, struct op *op)
{
	if (op->prev)
		op->prev->next = op->next;
	else if (n->ops_list == op)
		n->ops_list = op->next;
	if (op->next)
		op->next->prev = op->prev;
	op->prev = op->next = NULL;
}

static uint8_t *slot_memory(const struct block *b)
{
	return b->extent->map + (uint64_t)b->slot * b->extent->slot_bytes;
}

static void op_free(struct op *op)
{
	if (op->n)
		op_untrack(op->n, op);
	free(op->hbuf);
	free(op);
}

static void io_failed(struct nvme *n, struct spill_region *r, int error)
{
	n->st.io_errors++;
	/* A device error takes the whole file out (its blocks become misses
	 * as they are asked for); the host tier keeps serving. */
	if (error == -EIO && r && !r->file->error)
		spill_file_fail(r->file, error);
}

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

static void writeback_done(struct io_req *req, int result, void *userdata)
{
	struct op *op = userdata;
	struct nvme *n = op->n;

	if (result < 0 && !op->error)
		op->error = result;
	if (req == &op->region_hdr)
		spill_region_header_written(op->region);
	if (--op->pending)
		return;
	n->ops--;
	op->region->ios--;
	struct block *b = op->b;
	b->ns->tenant->disk_writing -= spill_slot_stride(op->region);
	if (op->error) {
		io_failed(n, op->region, op->error);
		/* Whatever of it landed may be a whole, valid slot (an error
		 * can come after the bytes): erased like any dropped slot, or a
		 * restart would bring back a block the index never had. */
		nvme_slot_drop(n, op->region, op->slot);
		store_block_cleaned(n->store, b, false);
		writeback_backoff(n);
	} else {
		n->backoff_usec = 0;
		n->st.writes++;
		n->st.write_bytes += op->data.len;
		b->disk = op->region;
		b->disk_slot = op->slot;
		b->disk_seq = op->seq;
		store_disk_linked(b);
		store_block_cleaned(n->store, b, true);
	}
	op_free(op);
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

static int writeback_one(struct nvme *n, struct block *b)
{
	struct ns *ns = b->ns;
	struct spill_region *r;
	uint64_t sum;
	uint32_t slot;
	int bound, r2;

	/* Its NVMe quota: the tenant's own coldest copies make room, so one
	 * tenant's spill never takes another's space. */
	uint64_t stride = spill_stride_for(b->extent->slot_bytes);
	while (ns->tenant->disk_bytes + ns->tenant->disk_writing + stride > ns->tenant->nvme_quota) {
		n->st.quota_full++;
		if (store_nvme_evict_tenant(n->store, ns) < 0) {
			writeback_refused(n, ns, -EDQUOT, b->extent->slot_bytes);
			return -EDQUOT;
		}
	}
	bound = spill_region_find(n->spill, ns->tenant->name, ns->identity, ns->identity_len,
				  b->extent->slot_bytes, &r);
	if (bound == -ENOSPC) {
		n->st.disk_full++;
		bound = make_room(n, ns);
		if (bound == 0) {
			bound = spill_region_find(n->spill, ns->tenant->name, ns->identity,
						  ns->identity_len, b->extent->slot_bytes, &r);
			if (bound == -ENOSPC)
				bound = -EINPROGRESS; /* room is being made */
		}
	}
	if (bound == -ENOSPC || bound == -E2BIG)
		writeback_refused(n, ns, bound, b->extent->slot_bytes);
	if (bound < 0)
		return bound;
	r2 = spill_slot_alloc(r, &slot);
	if (r2 < 0)
		return r2;
	struct op *op = fault_hit(FAULT_WRITEBACK) ? NULL : calloc(1, sizeof(*op));
	if (op)
		op->hbuf = spill_buf_alloc(SPILL_SLOT_HEADER_BYTES);
	if (!op || !op->hbuf) {
		if (op)
			op_free(op);
		/* Nothing was written to it. */
		spill_slot_free(r, slot);
		return -ENOMEM;
	}
	/* The checksum comes from the daemon's own mapping, under the SIGBUS
	 * guard: a client that punched a hole loses this block, nothing else. */
	r2 = pool_guarded_sum(slot_memory(b), b->extent->slot_bytes, spill_payload_sum, &sum);
	if (r2 < 0) {
		log_warning("Block of namespace %s/%u faulted in host memory (a client punched a hole?): dropped",
			    ns->tenant->name, ns->id);
		spill_slot_free(r, slot);
		op_free(op);
		store_block_drop(n->store, b);
		return 0;
	}
	struct spill_slot_header h;
	op->n = n;
	op_track(n, op);
	op->b = b;
	op->write = true;
	op->region = r;
	op->slot = slot;
	op->seq = spill_next_seq(n->spill);
	r->ios++;
	ns->tenant->disk_writing += spill_slot_stride(r); /* as writeback_done takes it */
	spill_slot_header_init(&h, r, slot, b->key, b->extent->slot_bytes, op->seq, sum);
	spill_slot_header_encode(&h, op->hbuf, SPILL_SLOT_HEADER_BYTES);

	int file = n->file_io[r->file->number];
	uint64_t off = spill_slot_offset(r, slot);
	op->hdr = (struct io_req){.file = file, .offset = off, .buf = op->hbuf,
				  .len = SPILL_SLOT_HEADER_BYTES, .write = true,
				  .done = writeback_done, .userdata = op};
	op->data = (struct io_req){.file = file, .offset = off + SPILL_SLOT_HEADER_BYTES,
				   .buf = slot_memory(b), .len = (uint32_t)b->extent->slot_bytes,
				   .write = true, .done = writeback_done, .userdata = op};
	op->pending = 2;
	if (bound == 1) {
		op->region_hdr = (struct io_req){.file = file, .offset = r->offset, .buf = r->header,
						 .len = SPILL_REGION_HEADER_BYTES, .write = true,
						 .done = writeback_done, .userdata = op};
		op->pending++;
	}
	/* It keeps its place on the eviction list (a write-back says nothing
	 * of how recently it was used); eviction passes it by while the
	 * write reads the slot. */
	b->io = BLOCK_IO_WRITE;
	n->ops++;
	if (bound == 1)
		io_submit(n->io, &op->region_hdr);
	io_submit(n->io, &op->hdr);
	io_submit(n->io, &op->data);
	return 1;
}

/* Write back, coldest first, the dirty blocks of every tenant above the
 * high watermark until its dirty bytes are down to the low one. */
static int on_kick(sd_event_source *src, void *userdata)
{
	struct nvme *n = userdata;
	struct store *s = n->store;
	unsigned limit = n->config->nvme_queue_depth / 2 ? n->config->nvme_queue_depth / 2 : 1;
	/* A few blocks a turn: their writes go out at the end of this turn
	 * while the next ones are hashed, and clients are answered between. */
	unsigned budget = 4, started = 0;
	uint64_t now = 0;

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
		for (uint32_t c = 0; c < t->n_classes; c++) {
			struct evict *lru = &t->classes[c]->lru;
			struct evict_entry *node = evict_oldest(lru);
			while (node && t->dirty > low && n->ops < limit) {
				struct evict_entry *prev = evict_walk_next(lru, node);
				struct block *b = (struct block *)((char *)node - offsetof(struct block, lru));
				if (!b->clean && b->extent && b->io == BLOCK_IO_NONE && !b->disk) {
					int r = writeback_one(n, b);
					if (r == -ENOMEM)
						writeback_backoff(n);
					if (r < 0)
						break;
					if (r > 0 && ++started >= budget) {
						/* More next turn. */
						sd_event_source_set_enabled(src, SD_EVENT_ONESHOT);
						return 0;
					}
				}
				node = prev;
			}
		}
	}
	return 0;
}

void nvme_kick(struct nvme *n)
{
	if (n && n->kick)
		sd_event_source_set_enabled(n->kick, SD_EVENT_ONESHOT);
}

static void stage_done(struct io_req *req, int result, void *userdata)
{
	struct op *op = userdata;
	struct nvme *n = op->n;
	struct block *b = op->b;

	if (result < 0 && !op->error)
		op->error = result;
	if (--op->pending)
		return;
	n->ops--;
	op->region->ios--;
	if (op->error) {
		io_failed(n, b->disk, op->error);
		store_block_drop(n->store, b);
		op_free(op);
		nvme_kick(n);
		return;
	}
	/* Verified on every restore: the header (where, whose, which key,
	 * which write) and the payload against its checksum. */
	struct spill_slot_header h;
	uint64_t sum;
	int r = spill_slot_check(op->hbuf, SPILL_SLOT_HEADER_BYTES, b->disk, b->disk_slot, b->key,
				 b->extent->slot_bytes, b->disk_seq, &h);
	if (r == 0)
		r = pool_guarded_sum(slot_memory(b), b->extent->slot_bytes, spill_payload_sum, &sum);
	if (r == 0 && sum != h.payload_sum)
		r = -EBADMSG;
	if (r < 0) {
		n->st.checksum_errors++;
		log_warning("Block of namespace %s/%u failed verification on restore (%s): dropped",
			    b->ns->tenant->name, b->ns->id, strerror(-r));
		store_block_drop(n->store, b);
	} else {
		n->st.reads++;
		n->st.read_bytes += op->data.len;
		store_block_restored(n->store, b);
	}
	op_free(op);
	/* Write-back may have stopped at the queue depth these reads held. */
	nvme_kick(n);
}

int nvme_stage(struct nvme *n, struct block *b)
{
	int r;

	if (b->io != BLOCK_IO_NONE || b->extent || !b->disk)
		return 0;
	if (b->disk->file->error) {
		store_block_drop(n->store, b);
		return -EIO;
	}
	struct op *op = fault_hit(FAULT_RESTORE) ? NULL : calloc(1, sizeof(*op));
	if (op)
		op->hbuf = spill_buf_alloc(SPILL_SLOT_HEADER_BYTES);
	if (!op || !op->hbuf) {
		if (op)
			op_free(op);
		return -ENOMEM;
	}
	r = store_host_slot(n->store, b->ns, b);
	if (r < 0) {
		/* No host memory for it right now: it stays on NVMe, and a
		 * later lookup tries again. */
		op_free(op);
		return r;
	}
	b->io = BLOCK_IO_READ;
	op->n = n;
	op_track(n, op);
	op->b = b;
	op->region = b->disk;
	op->region->ios++;
	int file = n->file_io[b->disk->file->number];
	uint64_t off = spill_slot_offset(b->disk, b->disk_slot);
	op->hdr = (struct io_req){.file = file, .offset = off, .buf = op->hbuf,
				  .len = SPILL_SLOT_HEADER_BYTES, .done = stage_done, .userdata = op};
	op->data = (struct io_req){.file = file, .offset = off + SPILL_SLOT_HEADER_BYTES,
				   .buf = slot_memory(b), .len = (uint32_t)b->extent->slot_bytes,
				   .done = stage_done, .userdata = op};
	op->pending = 2;
	n->ops++;
	io_submit(n->io, &op->hdr);
	io_submit(n->io, &op->data);
	return 0;
}

static void erase_done(struct io_req *req, int result, void *userdata)
{
	struct op *op = userdata;
	struct nvme *n = op->n;

	n->ops--;
	if (result < 0)
		io_failed(n, op->region, result);
	/* Reusable only now: a new header must not race the zeros.  A
	 * write-back may have been waiting for this room. */
	spill_slot_free(op->region, op->slot);
	op_free(op);
	nvme_kick(n);
}

void nvme_slot_drop(struct nvme *n, struct spill_region *r, uint32_t slot)
{
	struct op *op = NULL;

	if (n && !r->file->error && zero_header)
		op = calloc(1, sizeof(*op));
	if (!op) {
		spill_slot_free(r, slot);
		return;
	}
	op->n = n;
	op_track(n, op);
	op->region = r;
	op->slot = slot;
	op->hdr = (struct io_req){.file = n->file_io[r->file->number],
				  .offset = spill_slot_offset(r, slot), .buf = zero_header,
				  .len = SPILL_SLOT_HEADER_BYTES, .write = true,
				  .done = erase_done, .userdata = op};
	n->ops++;
	io_submit(n->io, &op->hdr);
}

/* The store's view of this tier (store.h). */
static void tier_extent_added(void *tier, struct extent *e)
{
	struct nvme *n = tier;

	io_buffer_add(n->io, e->map, e->size);
}

static void tier_kick(void *tier)
{
	nvme_kick(tier);
}

static int tier_stage(void *tier, struct block *b)
{
	return nvme_stage(tier, b);
}

static void tier_slot_drop(void *tier, struct spill_region *r, uint32_t slot)
{
	nvme_slot_drop(tier, r, slot);
}

static const struct store_tier_ops tier_ops = {
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
	if (!zero_header)
		zero_header = spill_buf_alloc(SPILL_SLOT_HEADER_BYTES);
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
	r = sd_event_add_defer(event, &n->kick, on_kick, n);
	if (r < 0)
		goto fail;
	sd_event_source_set_enabled(n->kick, SD_EVENT_OFF);
	store_set_tier(s, &tier_ops, n);
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
static struct op *ops_abandoned;

static bool op_held(const struct op *op)
{
	return io_req_held(&op->hdr) || io_req_held(&op->data) || io_req_held(&op->region_hdr);
}

void nvme_free(struct nvme *n)
{
	unsigned abandoned = 0;

	if (!n)
		return;
	if (n->store->tier == n)
		store_set_tier(n->store, NULL, NULL);
	sd_event_source_disable_unref(n->kick);
	sd_event_source_disable_unref(n->retry);
	/* Cancels and waits for I/O in flight: its buffers are pool and op
	 * memory.  Their callbacks do not run, so the ops are freed here:
	 * those the kernel has given back, and no other. */
	io_engine_free(n->io);
	while (n->ops_list) {
		struct op *op = n->ops_list;
		if (op->b)
			op->b->io = BLOCK_IO_NONE;
		if (!op_held(op)) {
			op_free(op);
			continue;
		}
		op_untrack(n, op);
		op->n = NULL;
		op->b = NULL;
		op->region = NULL;
		op->next = ops_abandoned;
		ops_abandoned = op;
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
