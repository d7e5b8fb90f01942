/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvt-policy-sim --nvme: every pair of host and NVMe capacity through the
 * two-tier model (tier-model.h), once per online policy, as a table or as
 * csv.  No Belady: there is none for two tiers.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>

#include "evict.h"
#include "tier-report.h"

static uint64_t to_blocks(double v, bool in_blocks, const struct trace *t)
{
	return in_blocks ? (uint64_t)v : (uint64_t)llround(v * (double)t->n_blocks);
}

int tier_report(const struct trace *t, const char *path, const bool *want,
			   const double *caps, unsigned n_caps, const double *nvme,
			   unsigned n_nvme, bool in_blocks, bool reverse, uint32_t small_percent,
			   const struct tier_cost *cost, bool csv)
{
	double lookups = (double)t->lookups, mb = cost->block_bytes / 1e9;

	if (csv)
		printf("capacity_fraction,capacity_blocks,nvme_fraction,nvme_blocks,policy,hit_rate,"
		       "hits,host_hits,nvme_hits,stray,host_evictions,nvme_evictions,nvme_bytes_written,"
		       "nvme_bytes_read,dropped,rejected,time_saved\n");
	else
		printf("# trace %s: %" PRIu64 " requests, %u distinct blocks (the working set)\n"
		       "# host tier (the policy) in front of NVMe (LRU); a tier that never evicts "
		       "gets %.4f\n"
		       "# %.0f bytes a block; host %.1f GB/s, NVMe %.1f GB/s, recompute %.0f tokens/s\n"
		       "%-9s %9s %-10s %9s %9s %9s %10s %10s %10s\n",
		       path, t->n_req, t->n_blocks, (double)trace_unbounded_hits(t) / lookups,
		       cost->block_bytes, cost->host_bytes_per_s / 1e9, cost->nvme_bytes_per_s / 1e9,
		       cost->recompute_tokens_per_s, "host", "nvme", "policy", "hit rate", "host",
		       "nvme", "GB written", "GB read", "time saved");
	for (unsigned k = 0; k < n_caps; k++)
		for (unsigned j = 0; j < n_nvme; j++)
			for (int p = 0; p < _EVICT_POLICY_MAX; p++) {
				struct tier_model_params tp = {
					.policy = p,
					.host_cap = to_blocks(caps[k], in_blocks, t),
					.nvme_cap = to_blocks(nvme[j], in_blocks, t),
					.release_reverse = reverse,
					.small_percent = small_percent,
				};
				struct tier_model_result r;
				if (!want[p])
					continue;
				if (tp.host_cap < 1)
					tp.host_cap = 1;
				if (tier_model_run(t, &tp, &r) < 0)
					return -ENOMEM;
				double hf = (double)tp.host_cap / (double)t->n_blocks;
				double nf = (double)tp.nvme_cap / (double)t->n_blocks;
				double saved = tier_cost_saved(cost, t, &r);
				if (csv)
					printf("%.4f,%" PRIu64 ",%.4f,%" PRIu64 ",%s,%.6f,%" PRIu64 ",%" PRIu64
					       ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%.0f,%.0f,%" PRIu64
					       ",%" PRIu64 ",%.4f\n", hf, tp.host_cap, nf, tp.nvme_cap,
					       evict_policy_to_string(p), (double)r.hits / lookups, r.hits, r.host_hits,
					       r.nvme_hits, r.stray, r.host_evictions, r.nvme_evictions,
					       (double)r.written * cost->block_bytes,
					       (double)r.read * cost->block_bytes, r.dropped, r.rejected, saved);
				else
					printf("%8.1f%% %8.1f%% %-10s %9.4f %9.4f %9.4f %10.1f %10.1f %10.3f\n",
					       100 * hf, 100 * nf, evict_policy_to_string(p), (double)r.hits / lookups,
					       (double)r.host_hits / lookups, (double)r.nvme_hits / lookups,
					       (double)r.written * mb, (double)r.read * mb, saved);
			}
	return 0;
}

