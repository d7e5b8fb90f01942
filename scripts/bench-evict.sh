#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# The eviction policies on every trace of docs/workload.md ("The default on
# production and API traffic"): kvt-policy-sim, every policy and Belady,
# one shared tier at 1, 2, 5, 10 and 25 % of the working set.  Writes a csv
# per trace and prints, per trace, the default policy's fraction of Belady
# at each size, LRU's, and whether the default has fewer hits than LRU
# anywhere.  The figures are hit counts of the simulator, not times.
#
# Usage: scripts/bench-evict.sh [BUILD [OUT]]
#   BUILD   meson build directory with tests/workload built (default build)
#   OUT     where the traces and csv files go (default BUILD/bench-evict)
# The Mooncake traces are used where they are:
#   ../shared/data/mooncake-fast25-synthetic.jsonl (mc-syn), and
#   $MOONCAKE_CONV, the release's traces/conversation_trace.jsonl (mc-conv:
#   git clone https://github.com/kvcache-ai/Mooncake, FAST25-release/).
set -eu
cd "$(dirname "$0")/.."
build=${1:-build}
out=${2:-$build/bench-evict}
B=$build/tests/workload
mkdir -p "$out"
ninja -C "$build" tests/workload/kvt-trace tests/workload/kvt-trace-import \
	tests/workload/kvt-policy-sim >&2

$B/kvt-trace --seed 7 --requests 1500 --rate 2 --think 10 --docs 200 --no-keys \
	-o "$out/ci.trace" 2>/dev/null
$B/kvt-trace --requests 50000 --no-keys -o "$out/default.trace" 2>/dev/null
$B/kvt-trace --requests 50000 --no-keys --rag-fraction 0.7 --rag-docs 3 \
	--turns 2 --think 60 --docs 5000 -o "$out/rag.trace" 2>/dev/null
# The parameters of the ATC '25 characterisation's trace B: docs/workload.md.
$B/kvt-trace --no-keys --requests 20000 --turns 1 --tenants 200 --tenant-zipf 0.5 \
	--system-prompts 32 --system-zipf 0.8 --system-len 2048 --rag-fraction 0.3 \
	--rag-docs 2 --docs 200 --doc-zipf 0.8 --doc-len 1024 --user-len 512 \
	--output-len 128 --rate 500 -o "$out/api.trace" 2>/dev/null
traces="ci default rag api"
syn=../shared/data/mooncake-fast25-synthetic.jsonl
if [ -f "$syn" ]; then
	$B/kvt-trace-import --no-keys -o "$out/mc-syn.trace" "$syn" 2>/dev/null
	traces="$traces mc-syn"
fi
if [ -n "${MOONCAKE_CONV:-}" ]; then
	$B/kvt-trace-import --no-keys -o "$out/mc-conv.trace" "$MOONCAKE_CONV" 2>/dev/null
	traces="$traces mc-conv"
fi

echo "trace    size  default  of-belady  lru  below-lru"
for t in $traces; do
	$B/kvt-policy-sim --csv --policies lru,s3fifo,sieve,arc,lrfu,lrfu-admit,default,belady \
		--capacities 0.01,0.02,0.05,0.1,0.25 "$out/$t.trace" >"$out/$t.csv"
	def=$($B/kvt-policy-sim --policies default --capacities 1 "$out/ci.trace" |
		awk '$1 == "100.0%" { print $3 }')
	# capacity_fraction,capacity_blocks,partition,policy,hit_rate,tokens_saved,of_belady
	awk -F, -v t="$t" -v def="$def" '
		NR > 1 && $4 == "lru" { lru[$1] = $6; lrub[$1] = $7 }
		NR > 1 && $4 == def { d[$1] = $6; db[$1] = $7; order[++n] = $1 }
		END {
			for (i = 1; i <= n; i++) {
				c = order[i]
				printf "%-8s %4g%%  %-10s %.3f  %.3f  %s\n", t, 100 * c, def, db[c],
				       lrub[c], d[c] + 0 < lru[c] + 0 ? "yes" : "no"
			}
		}' "$out/$t.csv"
done
