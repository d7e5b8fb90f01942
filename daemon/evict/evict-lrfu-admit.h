/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lrfu-admit: LRFU (evict-lrfu.h) with the admission filter that turns
 * itself on and off (evict-admit.h).  While shadow tiers find the filter
 * pays, a block the sketch has not seen before (or, with the strict
 * filter, not twice) is stored on probation, on LRFU's refused queue
 * (EVICT_Q_SMALL), and evicted first unless it is hit there.  The entry's
 * fields are LRFU's.
 *
 * The state is in this header for what reads it (the policy simulator's
 * report, tests), through evict_state().
 */
#pragma once

#include <stdint.h>

#include "evict-admit.h"
#include "evict-lrfu.h"

struct evict_lrfu_admit_state {
	struct evict_lrfu_state lrfu;
	struct evict_admit admit;
	uint64_t refused; /* new blocks the filter put on probation */
};
