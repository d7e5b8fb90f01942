/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The two-tier model of kvt-policy-sim: a host tier run by the daemon's
 * eviction code (daemon/evict/) in front of an NVMe tier that evicts LRU.
 * A block evicted from host is written back to NVMe unless NVMe already
 * holds it; a lookup's leading run is the blocks resident in either tier;
 * an NVMe block of the leading run is staged into host (which may evict
 * from host) and keeps its NVMe copy.  Pure bookkeeping over a trace, no
 * I/O: the costs are applied to the counts afterwards (tier_cost_saved).
 * No clairvoyant reference: Belady for two tiers is not modelled.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "trace.h"

struct tier_model_params {
	int policy;            /* enum evict_policy */
	uint64_t host_cap;     /* blocks, >= 1 */
	uint64_t nvme_cap;     /* blocks, 0: no NVMe tier */
	bool release_reverse;  /* leases released tail first */
	uint32_t small_percent; /* S3-FIFO's small queue, 0: the daemon's */
};

struct tier_model_result {
	uint64_t hits;                 /* leading-run blocks */
	uint64_t host_hits, nvme_hits; /* the same, by the tier they were found in */
	uint64_t stray;                /* resident blocks after a lookup's first miss */
	uint64_t host_evictions, nvme_evictions;
	uint64_t written;  /* blocks written back to NVMe */
	uint64_t read;     /* blocks read from NVMe: the NVMe hits staged */
	uint64_t dropped;  /* host evictions not written back: no NVMe room */
	uint64_t rejected; /* blocks not stored or staged: host all pinned */
};

/* What a block costs to move and to recompute. */
struct tier_cost {
	double block_bytes;
	double host_bytes_per_s; /* host to GPU */
	double nvme_bytes_per_s; /* NVMe to host */
	double recompute_tokens_per_s;
};

/*
 * Replay t through the two tiers of p.
 * \return 0 or -ENOMEM
 */
int tier_model_run(const struct trace *t, const struct tier_model_params *p,
		   struct tier_model_result *ret);

/*
 * The prefill time the hits save, as a fraction of recomputing every block
 * looked up: each hit saves its tokens' recompute and costs its load (a
 * host hit over host to GPU, an NVMe hit over NVMe to host and then host
 * to GPU, one after the other).  Write-back is not charged: it runs in the
 * background, off the request's path.
 */
double tier_cost_saved(const struct tier_cost *c, const struct trace *t,
		       const struct tier_model_result *r);
