/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The NVMe tier's I/O operations: an op's lifetime (a slot header and a
 * payload, two I/Os), staging a block back into host memory with its
 * header and payload verified, and erasing the header of a dropped slot
 * before the slot is reused.  The I/O and the payload checksums are the
 * spill file's worker's (nvme-worker.c); the decisions are made here, on
 * the event loop, when it hands an op back.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "log.h"
#include "nvme-private.h"
#include "pool.h"

/* A zeroed slot header: written over a dropped block's, so that a restart
 * does not bring back what was deleted.  Never freed: an erasure the kernel
 * still held at shutdown may read it. */
static uint8_t *zero_header;

void nvme_io_init(void)
{
	if (!zero_header)
		zero_header = spill_buf_alloc(SPILL_SLOT_HEADER_BYTES);
}

struct op *nvme_op_new(enum fault_site fault)
{
	struct op *op = fault_hit(fault) ? NULL : calloc(1, sizeof(*op));

	if (op)
		op->hbuf = spill_buf_alloc(SPILL_SLOT_HEADER_BYTES);
	if (op && !op->hbuf) {
		nvme_op_free(op);
		return NULL;
	}
	return op;
}

void nvme_op_track(struct nvme *n, struct op *op)
{
	LIST_INSERT_HEAD(&n->ops_list, op, link);
}

void nvme_op_untrack(struct nvme *n, struct op *op)
{
	LIST_REMOVE(op, link);
}

void nvme_op_free(struct op *op)
{
	if (op->n) /* tracked from when it is given its tier */
		nvme_op_untrack(op->n, op);
	free(op->hbuf);
	free(op);
}

void nvme_io_failed(struct nvme *n, struct spill_region *r, int error)
{
	n->st.io_errors++;
	/* A device error takes the whole file out (its blocks become misses
	 * as they are asked for); the host tier keeps serving. */
	if (error == -EIO && r && !r->file->error)
		spill_file_fail(r->file, error);
}

void nvme_kick(struct nvme *n)
{
	if (n && n->kick)
		sd_event_source_set_enabled(n->kick, SD_EVENT_ONESHOT);
}

/* Whether any tenant has dirty bytes, which write-back may have to write. */
static bool writeback_pending(const struct nvme *n)
{
	const struct store *s = n->store;

	for (uint32_t i = 0; i < s->n_tenants; i++)
		if (s->tenants[i]->dirty)
			return true;
	return false;
}

void nvme_stage_ended(struct op *op)
{
	struct nvme *n = op->n;
	struct block *b = op->b;

	n->ops--;
	op->region->ios--;
	if (op->error) {
		nvme_io_failed(n, op->region, op->error);
		store_block_drop(n->store, b);
		nvme_op_free(op);
		nvme_kick(n);
		return;
	}
	/* Verified on every restore: the header (where, whose, which key,
	 * which write) and the payload against its checksum, which the
	 * worker computed from the bytes it read. */
	struct spill_slot_header h;
	const struct block_disk *d = block_disk(b);
	int r = spill_slot_check(op->hbuf, SPILL_SLOT_HEADER_BYTES, d->region, d->slot, b->key,
				 b->extent->slot_bytes, d->seq, &h);
	if (r == 0)
		r = op->sum_error;
	if (r == 0 && op->sum != h.payload_sum)
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
	nvme_op_free(op);
	/* Write-back may have stopped at the queue depth these reads held,
	 * or the slot taken may have brought the pool past its watermark:
	 * either needs dirty bytes to write.  Without any, no kick: it would
	 * cost every restored block a turn of the loop that finds nothing. */
	if (writeback_pending(n))
		nvme_kick(n);
}

int nvme_stage(struct nvme *n, struct block *b)
{
	int r;

	const struct block_disk *d = block_disk(b);

	if (b->io != BLOCK_IO_NONE || b->extent || !d)
		return 0;
	if (d->region->file->error) {
		store_block_drop(n->store, b);
		return -EIO;
	}
	struct op *op = nvme_op_new(FAULT_RESTORE);
	if (!op)
		return -ENOMEM;
	r = store_host_slot(n->store, b->ns, b, true);
	if (r < 0) {
		/* No host memory for it right now: it stays on NVMe, and a
		 * later lookup tries again. */
		nvme_op_free(op);
		return r;
	}
	store_nvme_staging(n->store, b);
	op->n = n;
	nvme_op_track(n, op);
	op->b = b;
	op->kind = OP_STAGE;
	op->region = d->region;
	op->region->ios++;
	uint64_t off = spill_slot_offset(d->region, d->slot);
	op->hdr = (struct io_req){.offset = off, .buf = op->hbuf, .len = SPILL_SLOT_HEADER_BYTES};
	op->data = (struct io_req){.offset = off + SPILL_SLOT_HEADER_BYTES,
				   .buf = nvme_slot_memory(b), .len = (uint32_t)b->extent->slot_bytes};
	n->ops++;
	nvme_worker_submit(nvme_worker_of(n, d->region), op);
	return 0;
}

void nvme_erase_ended(struct op *op)
{
	struct nvme *n = op->n;

	n->ops--;
	if (op->error < 0)
		nvme_io_failed(n, op->region, op->error);
	/* Reusable only now: a new header must not race the zeros.  A
	 * write-back may have been waiting for this room. */
	spill_slot_free(op->region, op->slot);
	store_nvme_erased(n->store, op->erase_ns, op->erase_token, op->error >= 0);
	nvme_op_free(op);
	nvme_kick(n);
}

void nvme_slot_drop(struct nvme *n, struct spill_region *r, uint32_t slot, struct ns *ns,
		    uint64_t token)
{
	struct op *op = NULL;

	if (!r->file->error && zero_header)
		op = calloc(1, sizeof(*op));
	if (!op) {
		/* Not erased: the copy may come back after a restart, and
		 * the store keeps its key from being stored again. */
		spill_slot_free(r, slot);
		store_nvme_erased(n->store, ns, token, false);
		return;
	}
	op->n = n;
	nvme_op_track(n, op);
	op->kind = OP_ERASE;
	op->region = r;
	op->slot = slot;
	op->erase_ns = ns;
	op->erase_token = token;
	op->hdr = (struct io_req){.offset = spill_slot_offset(r, slot), .buf = zero_header,
				  .len = SPILL_SLOT_HEADER_BYTES, .write = true};
	n->ops++;
	nvme_worker_submit(nvme_worker_of(n, r), op);
}

