#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The reuse of a kvtier trace (v1, docs/workload.md), by the measures of
published trace studies: the share of multi-turn requests, the hit rate of a
tier that never evicts (leading runs only), the share of reuses that come
within 10 seconds and 10 minutes of the block's previous use, and the share
of all reuses that go to the 10 % of distinct blocks reused most.

A reuse is a looked-up block that a request before it looked up or stored.

Usage: kvt-trace-stats.py TRACE
"""
import collections
import sys


def main(path):
    last = {}
    reused = collections.Counter()
    reuses = within_10s = within_10min = 0
    requests = multi = lookups = hits = 0
    with open(path) as f:
        for line in f:
            if not line.startswith("R "):
                continue
            # R seq time_us tenant conversation turn kind lookup new runs...
            fld = line.split()
            t = int(fld[2]) / 1e6
            requests += 1
            multi += int(fld[5]) > 1
            n_lookup = int(fld[7])
            ids = []
            for run in fld[9:]:
                if "+" not in run:
                    break  # s<N>, e
                first, count = run.split("+")
                ids.extend(range(int(first), int(first) + int(count)))
            leading = True
            for i, b in enumerate(ids):
                if i < n_lookup:
                    lookups += 1
                    if b in last:
                        reuses += 1
                        reused[b] += 1
                        within_10s += t - last[b] <= 10
                        within_10min += t - last[b] <= 600
                        hits += leading
                    else:
                        leading = False
                last[b] = t
    top = sorted(reused.values(), reverse=True)[: max(1, len(last) // 10)]
    r = max(1, reuses)
    print(f"requests={requests} multi_turn={multi / max(1, requests):.4f} "
          f"blocks={len(last)} looked_up={lookups} "
          f"unbounded_hit_rate={hits / max(1, lookups):.3f} "
          f"reuse_within_10s={within_10s / r:.3f} "
          f"reuse_within_10min={within_10min / r:.3f} "
          f"top_10pct_blocks_reuse_share={sum(top) / r:.3f}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
