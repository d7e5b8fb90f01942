/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The remote tier: blocks shared with other nodes through a Ceph RADOS
 * pool (librados).  Below host memory and NVMe: blocks reused locally are
 * written back to it, and a lookup that misses locally asks it for the
 * leading run in one round of parallel reads; what comes back is verified
 * (the spill slot header and checksum) and staged into the host pool.  One
 * RADOS namespace per tenant, objects named by namespace digest and key.
 * docs/remote.md has the set-up and what the tier promises.
 *
 * Without librados (-Drados=disabled, or none found) remote_start() logs
 * that [remote.NAME] is ignored and the daemon runs on its local tiers.
 */
#pragma once

#include <stdint.h>
#include <systemd/sd-event.h>

#include "config.h"
#include "kvt-config.h"

struct remote;
struct store;

enum remote_state {
	REMOTE_CONNECTING, /* not connected yet, or again after a failure */
	REMOTE_UP,
	REMOTE_DEGRADED,   /* operations failed: backing off, local tiers serve */
};

/* One [remote.NAME] as STATS shows it. */
struct remote_stats {
	const char *name, *pool, *state_reason;
	enum remote_state state;
	uint64_t capacity, used, objects; /* used, objects: at the last trim pass */
	uint64_t writes, write_bytes, reads, read_bytes;
	uint64_t reads_in_place; /* of reads: landed in their host slot, no copy */
	uint64_t misses;      /* keys asked for that the pool did not have */
	uint64_t rejected;    /* objects that failed verification: misses */
	uint64_t errors, timeouts, degraded;
	uint64_t skipped;     /* write-backs not made: degraded or queue full */
	uint64_t trim_passes, trimmed, trimmed_bytes;
	uint64_t in_flight;
	uint64_t lookup_rounds, lookup_usec; /* fetch rounds and their total time */
};

/* Per tenant, for the tenant records. */
struct remote_tenant_stats {
	const char *tier;
	uint64_t reads, read_bytes, writes, write_bytes, misses;
};

#if KVT_HAVE_RADOS
/* Connect (in the background: a cluster that is absent does not hold up
 * the start) and hand the store its remote tier.  Not called without a
 * [remote.NAME]. */
int remote_start(struct store *s, const struct config *c, sd_event *event, struct remote **ret);
void remote_free(struct remote *r);
/* Host memory that reads waited for may be ready: they go on. */
void remote_memory_ready(struct remote *r);
unsigned remote_count(const struct remote *r);
void remote_get_stats(const struct remote *r, unsigned i, struct remote_stats *ret);
/* \return 0, or -ENOENT when the tenant is not served */
int remote_tenant_stats(const struct remote *r, const char *tenant,
			struct remote_tenant_stats *ret);
const char *remote_state_name(enum remote_state s);
#endif
