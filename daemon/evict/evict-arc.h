/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ARC (Megiddo and Modha, FAST '03): blocks seen once (T1,
 * EVICT_Q_SMALL) and blocks hit since they were stored (T2,
 * EVICT_Q_MAIN), both LRU, with a ghost list of each one's evictions (B1,
 * B2); a block stored again while remembered moves T1's target size
 * toward the list whose ghost remembered it, so the split between recency
 * and frequency follows the traffic.  freq and stamp are not used.
 *
 * The state is in this header for the tests, through evict_state().
 */
#pragma once

#include <stdint.h>

#include "evict-ghost.h"
#include "evict-list.h"

struct evict_arc_state {
	struct evict_lru t1, t2;
	struct evict_ghost b1, b2; /* evictions from t1, from t2 */
	uint64_t p;                /* T1's target size, in entries */
};
