/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the NVMe tier's files share and no one else uses.  nvme.c (start,
 * shutdown, statistics, the store's view of the tier) calls
 * nvme-writeback.c and nvme-io.c; nvme-writeback.c calls nvme-io.c; and
 * nvme-io.c (an operation's lifetime, staging, erasing) calls neither.
 * All of them hand ops to nvme-worker.c (a spill file's thread, ring and
 * checksums), which hands them back through a callback that nvme.c sets
 * to call nvme-writeback.c's or nvme-io.c's end of the op.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>
#include <systemd/sd-event.h>

#include "fault.h"
#include "io.h"
#include "nvme.h"
#include "spill.h"
#include "store.h"

struct nvme_worker;

struct nvme {
	LIST_HEAD(, op) ops_list; /* every op in flight, freed at shutdown */
	struct store *store;
	const struct config *config;
	sd_event *event;
	struct spill *spill;
	/* One per spill file, in file order: its thread, ring and checksums. */
	struct nvme_worker **workers;
	sd_event_source *kick;
	sd_event_source *retry; /* write-back again after a failure */
	uint64_t backoff_usec, backoff_until;
	struct nvme_stats st;
	struct spill_recovery rec;
	unsigned ops; /* write-backs and stagings in flight */
	/* Recovery in progress (NULL once over): write-back waits for it,
	 * stagings of the blocks it found already run. */
	struct spill_recover *recovery;
	struct io_engine *rio; /* recovery's own engine, freed after it */
	int *rfile;            /* its index of each spill file */
	sd_event_source *rio_end;
	struct recover_read *reads; /* SPILL_RECOVER_READS_MAX */
	struct recover_read *reads_free;
	int recovery_error;
	/* The namespace of the binding recovery's current read is of: looked
	 * up once per read (a read is parsed in one dispatch, so it cannot be
	 * freed meanwhile). */
	const struct spill_binding *rec_binding;
	struct ns *rec_ns; /* NULL: declined */
	uint64_t rec_scope;
	int rec_ns_found;
};

/* One read of recovery's through the engine. */
struct recover_read {
	struct nvme *n;
	struct spill_read rd;
	struct io_req req;
	struct recover_read *next_free;
};

enum op_kind { OP_WRITEBACK, OP_STAGE, OP_ERASE };

/* One write-back or staging: a slot header and a payload, two I/Os (the
 * header always from or into the daemon's own memory), and for a region
 * bound by this write-back its region header too; or one erasure, the
 * header alone.  Set up on the event loop, carried out by its file's
 * worker (nvme-worker.c), decided on the event loop again. */
struct op {
	struct nvme *n;
	struct block *b;
	enum op_kind kind;
	bool write;
	struct spill_region *region;
	uint32_t slot;
	uint64_t seq;
	struct ns *erase_ns;   /* an erasure's, for store_nvme_erased() */
	uint64_t erase_token;
	uint8_t *hbuf;
	/* A write-back's slot header, but for the payload's checksum: the
	 * worker adds that and encodes it into hbuf. */
	struct spill_slot_header h;
	struct io_req hdr, data, region_hdr; /* region_hdr.len 0: none */
	/* The worker's: requests not ended yet, and what it found. */
	unsigned pending;
	int error;         /* the first I/O error */
	int region_result; /* of region_hdr */
	uint64_t sum;      /* the payload's checksum, unless sum_error */
	int sum_error;     /* -EFAULT: the payload's memory faulted */
	struct nvme_worker *w;
	unsigned reqs;     /* its I/O requests, for in_flight */
	struct op *next_w; /* the worker's hand-over lists */
	LIST_ENTRY(op) link; /* nvme.ops_list, or the abandoned ones */
};

static inline uint8_t *nvme_slot_memory(const struct block *b)
{
	return b->extent->map + (uint64_t)b->slot * b->extent->slot_bytes;
}

/* nvme-io.c */
/* Before the first nvme_slot_drop(): the zeroed header it writes. */
void nvme_io_init(void);
/* A new op, with its header buffer; fault is its fault.h site.  NULL: no
 * memory. */
struct op *nvme_op_new(enum fault_site fault);
/* On n's list of ops in flight, until nvme_op_free(). */
void nvme_op_track(struct nvme *n, struct op *op);
void nvme_op_untrack(struct nvme *n, struct op *op);
void nvme_op_free(struct op *op);
/* An I/O error: counted, and a device error fails the file. */
void nvme_io_failed(struct nvme *n, struct spill_region *r, int error);
/* Write back now, if above the high watermark. */
void nvme_kick(struct nvme *n);
/* Give up an NVMe slot durably: its header is zeroed before the slot can
 * be reused, so a restart does not recover what was dropped; the store
 * hears when that has ended (store_nvme_erased(), with ns and token), as
 * the store's nvme_ops->slot_drop. */
void nvme_slot_drop(struct nvme *n, struct spill_region *r, uint32_t slot, struct ns *ns,
		    uint64_t token);
/* Bring a block that is only on NVMe back into host memory, as the
 * store's nvme_ops->stage (store.h). */
int nvme_stage(struct nvme *n, struct block *b);

/* Every I/O of a staging or an erasure has ended (handed back by its
 * worker): decide its outcome, on the event loop. */
void nvme_stage_ended(struct op *op);
void nvme_erase_ended(struct op *op);

static inline struct nvme_worker *nvme_worker_of(struct nvme *n, const struct spill_region *r)
{
	return n->workers[r->file->number];
}

/* nvme-writeback.c: the kick source's handler. */
int nvme_writeback_run(sd_event_source *src, void *userdata);
/* A write-back op has ended. */
void nvme_writeback_ended(struct op *op);

/* nvme-worker.c: a spill file's worker thread with an I/O engine of its
 * own (kind, queue_depth as io_engine_new()'s) for fd alone; ended() runs
 * on event for every op handed back.  On failure *ret is set too, for
 * nvme_worker_free(). */
typedef void (*nvme_op_ended_fn)(struct op *op, void *userdata);
int nvme_worker_new(sd_event *event, unsigned file, int fd, enum io_engine_kind kind,
		    unsigned queue_depth, nvme_op_ended_fn ended, void *userdata,
		    struct nvme_worker **ret);
/* Stop the thread, cancel and wait for the I/O it holds (io_engine_free:
 * requests the kernel still holds keep io_req_held()).  Ended ops not
 * handed back and ops never started stay on n's list of ops; no
 * nvme_op_ended() runs from here.  Accepts NULL. */
void nvme_worker_free(struct nvme_worker *w);
/* A pool extent ops may point into: registered with its ring before any
 * op handed over after this call starts. */
void nvme_worker_buffer_add(struct nvme_worker *w, void *base, size_t len);
/* Carry op out: its requests' buffers, offsets and lengths set (file and
 * callbacks are the worker's), region_hdr.len 0 unless it writes one. */
void nvme_worker_submit(struct nvme_worker *w, struct op *op);
/* I/O requests handed over and not back. */
unsigned nvme_worker_in_flight(const struct nvme_worker *w);
/* Its engine's name, and why that engine (io_engine_reason()). */
const char *nvme_worker_engine(const struct nvme_worker *w, const char **reason);
