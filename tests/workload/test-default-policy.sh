#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# kvtierd's default eviction policy against LRU on the API-traffic trace
# family of docs/workload.md (kvt-trace with the parameters taken from the
# published characterisation of a cloud provider's to-B traffic), small
# and deterministic: two seeds, one tier shared by all tenants, at 1 % to
# 50 % of the working set.  The check is on hit counts from the simulator
# (prefill tokens its leading-run hits save), never on time:
# - the default has at least LRU's hits at every size;
# - Belady has at least the default's (kvt-policy-sim --check, which also
#   checks Belady against a tier that never evicts);
# - the run names the daemon's default: "default" in --policies is what
#   kvtierd takes when kvtierd.conf names no policy;
# - on the full API-traffic trace (20 000 requests) the default reaches the
#   goal of docs/workload.md: 0.45 of Belady's hits at 1 % of the working
#   set and 0.50 at 2 %.
#
# With the importer and the synthetic Mooncake trace (../shared/data), the
# same check on its first 600 requests at 1 % to 25 %: a slice where the
# default of d734066 had fewer hits than LRU at 5 % (it switched to
# settings its shadows favoured on noise).  Without the trace that part is
# skipped with a note.
#
# Usage: test-default-policy.sh KVT_TRACE KVT_POLICY_SIM [KVT_TRACE_IMPORT JSONL]
set -eu

trace=$1
sim=$2
import=${3:-}
jsonl=${4:-}
. "$(dirname "$0")/steps.sh"

# check_default LABEL ROWS CSV: the default saves at least LRU's tokens at
# each of the ROWS capacities of CSV, and LRU saves some at the smallest.
check_default() {
	# capacity_fraction,capacity_blocks,partition,policy,hit_rate,tokens_saved,...
	awk -F, -v label="$1" -v rows="$2" '
		NR == 1 { next }
		$4 == "lru" { lru[$1] = $6 + 0; n++; if (small == "" || $1 + 0 < small + 0) small = $1 }
		$4 != "lru" && $4 != "belady" { def[$1] = $6 + 0; name = $4 }
		END {
			if (n != rows || name == "") {
				printf "%s: %d LRU rows, default \"%s\"\n", label, n, name
				exit 1
			}
			bad = 0
			for (c in lru) {
				printf "%s at %s: %s saves %d tokens, lru %d\n", label, c, name, def[c], lru[c]
				if (!(c in def) || def[c] < lru[c])
					bad = 1
			}
			if (lru[small] == 0)
				bad = 1 # LRU hits nothing: the trace is not what it should be
			exit bad
		}' "$3" >"$dir/report" || {
		cat "$dir/report" >&2
		fail "$1: the default policy has fewer hits than LRU"
	}
	cat "$dir/report"
}

caps=0.01,0.02,0.05,0.1,0.25,0.5
for seed in 1 2; do
	t="$dir/api-$seed.trace"
	"$trace" --seed "$seed" --requests 3000 --turns 1 --tenants 200 \
		--tenant-zipf 0.5 --system-prompts 32 --system-zipf 0.8 \
		--system-len 2048 --rag-fraction 0.3 --rag-docs 2 --docs 200 \
		--doc-zipf 0.8 --doc-len 1024 --user-len 512 --output-len 128 \
		--rate 500 --no-keys -o "$t" 2>/dev/null || fail "kvt-trace failed"
	"$sim" --csv --check --policies lru,default,belady --capacities "$caps" "$t" \
		>"$dir/out.csv" || fail "seed $seed: kvt-policy-sim --check failed"
	check_default "seed $seed" 6 "$dir/out.csv"
done

# The goal on the API-traffic trace of docs/workload.md itself (20 000
# requests, the parameters above): at least 0.45 of Belady's tokens saved
# at 1 % of the working set and 0.50 at 2 %.  4475a61's default got 0.412
# and 0.492 (it had no strict filter).
t="$dir/api.trace"
"$trace" --seed 1 --requests 20000 --turns 1 --tenants 200 --tenant-zipf 0.5 \
	--system-prompts 32 --system-zipf 0.8 --system-len 2048 --rag-fraction 0.3 \
	--rag-docs 2 --docs 200 --doc-zipf 0.8 --doc-len 1024 --user-len 512 \
	--output-len 128 --rate 500 --no-keys -o "$t" 2>/dev/null || fail "kvt-trace failed"
"$sim" --csv --policies lru,default,belady --capacities 0.01,0.02 "$t" >"$dir/out.csv" ||
	fail "api: kvt-policy-sim failed"
check_default "api" 2 "$dir/out.csv"
# capacity_fraction,...,policy,hit_rate,tokens_saved: the default's tokens
# against Belady's, in integers: 100 x default >= goal x Belady.
awk -F, '
	NR == 1 { next }
	$4 == "belady" { bel[$1] = $6 + 0; next }
	$4 != "lru" { def[$1] = $6 + 0 }
	END {
		bad = 0
		n = split("0.0100 45 0.0200 50", g, " ")
		for (i = 1; i < n; i += 2) {
			c = g[i]
			printf "api at %s: the default saves %d tokens, Belady %d (goal %d %%)\n", c, def[c], bel[c], g[i + 1]
			if (!(c in bel) || bel[c] == 0 || 100 * def[c] < g[i + 1] * bel[c])
				bad = 1
		}
		exit bad
	}' "$dir/out.csv" >"$dir/report" || {
	cat "$dir/report" >&2
	fail "api: the default policy is below the goal of 0.45 / 0.50 of Belady at 1 % / 2 %"
}
cat "$dir/report"

if [ -n "$import" ] && [ -r "$jsonl" ]; then
	head -n 600 "$jsonl" >"$dir/mc-syn.jsonl"
	"$import" --no-keys -o "$dir/mc-syn.trace" "$dir/mc-syn.jsonl" 2>/dev/null ||
		fail "kvt-trace-import failed"
	[ "$(grep -c '^R ' "$dir/mc-syn.trace")" -eq 600 ] || fail "the mc-syn slice is not 600 records"
	"$sim" --csv --check --policies lru,default,belady --capacities 0.01,0.02,0.05,0.1,0.25 \
		"$dir/mc-syn.trace" >"$dir/out.csv" || fail "mc-syn slice: kvt-policy-sim --check failed"
	check_default "mc-syn slice" 5 "$dir/out.csv"
else
	echo "test-default-policy: no Mooncake trace at '$jsonl': its slice is not checked"
fi
echo "test-default-policy: ok"
