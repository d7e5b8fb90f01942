/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The NVMe tier: blocks written back from host memory to spill files in the
 * background, so that host eviction only drops clean blocks; blocks staged
 * back into host memory when looked up or acquired, verified header and
 * payload on every restore; the index rebuilt from the spill files at
 * start.  The format is spill.h's, the I/O the engine's (io.c); the
 * decisions are here, and the block states are the store's.
 */
#pragma once

#include <stdint.h>
#include <systemd/sd-event.h>

#include "config.h"

struct nvme;
struct store;
struct block;
struct extent;
struct spill_region;

struct nvme_stats {
	uint64_t capacity, used, blocks;
	uint64_t writes, reads, write_bytes, read_bytes;
	uint64_t in_flight;
	uint64_t io_errors, checksum_errors, disk_full;
	uint64_t quota_full; /* a tenant at its NVMe quota made room */
	uint64_t refused;    /* write-backs refused for want of space */
	uint64_t reclaims;   /* regions taken back for a tenant within its quota */
	uint64_t recovered, recovery_dropped, recovery_ms;
	/* While recovery runs (clients served meanwhile): regions parsed of
	 * all, and the blocks found so far are in recovered. */
	bool recovering;
	uint64_t recovery_regions, recovery_regions_total;
	unsigned files, files_failed;
	const char *engine, *engine_reason;
};

/* Open the spill files, start the I/O engine and recover the index.  Not
 * called (and s->nvme stays NULL) when no [spill.NAME] is configured.  With
 * [nvme] recovery = background it returns once recovery has begun: the
 * rest runs on the event loop, several reads in flight, while clients are
 * served (blocks not recovered yet are misses; write-back waits), and a
 * recovery that fails ends the event loop with its error.  Otherwise it
 * returns when recovery is over. */
int nvme_start(struct store *s, const struct config *c, sd_event *event, struct nvme **ret);
void nvme_free(struct nvme *n);
void nvme_get_stats(const struct nvme *n, struct nvme_stats *ret);
/* Spill regions the tenant holds (spill_tenant_regions()). */
uint32_t nvme_tenant_regions(const struct nvme *n, const char *tenant);
