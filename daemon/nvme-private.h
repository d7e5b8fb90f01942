/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the NVMe tier's files share and no one else uses.  nvme.c (start,
 * shutdown, statistics, the store's view of the tier) calls
 * nvme-writeback.c and nvme-io.c; nvme-writeback.c calls nvme-io.c; and
 * nvme-io.c (an operation's lifetime, staging, erasing) calls neither.
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

struct nvme {
	LIST_HEAD(, op) ops_list; /* every op in flight, freed at shutdown */
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
	struct ns *erase_ns;   /* an erasure's, for store_nvme_erased() */
	uint64_t erase_token;
	uint8_t *hbuf;
	struct io_req hdr, data, region_hdr;
	unsigned pending;
	int error;
	bool region_written;
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

/* nvme-writeback.c: the kick source's handler. */
int nvme_writeback_run(sd_event_source *src, void *userdata);
