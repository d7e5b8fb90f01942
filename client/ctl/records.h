/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Copies of the kvt_stats() records a command prints (snapshot.h), and the
 * ratios every view needs.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvtier.h"

#include "snapshot.h"

/* A kvt_record_fn: copies r into the snapshot userdata points to (the
 * library reuses one record for every callback). */
int snapshot_add(const kvt_record *r, void *userdata);

/* \return hits / (hits + misses), or a negative number when there were no
 * lookups (so callers print "-" or null rather than a made-up 0%). */
double hit_rate(const struct rec *r);
/* part / whole, or -1 when whole is 0 */
double ratio_of(uint64_t part, uint64_t whole);
