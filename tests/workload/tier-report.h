/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The report of kvt-policy-sim --nvme (tier-report.c).
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "tier-model.h"
#include "trace.h"

/*
 * For each host capacity caps[k] and NVMe capacity nvme[j] (fractions of
 * t's working set, or blocks when in_blocks) and each online policy p with
 * want[p], run the two tiers and print one line: hits per tier, NVMe bytes
 * written and read, the prefill time saved at cost.
 * \return 0 or -ENOMEM
 */
int tier_report(const struct trace *t, const char *path, const bool *want, const double *caps,
		unsigned n_caps, const double *nvme, unsigned n_nvme, bool in_blocks, bool reverse,
		uint32_t small_percent, const struct tier_cost *cost, bool csv);
