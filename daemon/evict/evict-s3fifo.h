/* SPDX-License-Identifier: Apache-2.0 */
/*
 * S3-FIFO (Yang et al., SOSP '23): new blocks enter a small FIFO
 * (EVICT_Q_SMALL, a tenth of the entries); those hit while there move to
 * the main FIFO (EVICT_Q_MAIN), the others leave and are remembered in a
 * ghost list, so that a block stored again soon after goes straight to
 * main.  Main is a FIFO with reinsertion on a 2-bit hit counter (freq).
 * stamp is not used.
 *
 * The state is in this header for what reads or sets it from outside
 * (the policy simulator's --s3fifo-small, tests), through evict_state().
 */
#pragma once

#include <stdint.h>

#include "evict-ghost.h"
#include "evict-list.h"

/* The paper's share for S3-FIFO's small queue.  On the traces of
 * docs/workload.md a larger one gains when the tier holds the live
 * conversations and loses when it does not. */
#define EVICT_S3FIFO_SMALL_PERCENT 10

struct evict_s3fifo_state {
	struct evict_lru main, small;
	struct evict_ghost ghost; /* evictions from small */
	/* The small queue's share of the entries, in percent; set by
	 * evict_init, may be changed at any time. */
	uint32_t small_percent;
};
