#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# kvt-policy-sim --nvme on a small trace, every online policy, host at 1 %
# and 5 % of the working set, NVMe at 0, 25 % and 100 %:
# - the leading-run hits of the pair are the host hits plus the NVMe hits
#   (counted apart from the total), and NVMe reads are the NVMe hits;
# - with no NVMe there are no NVMe hits, and the host hits are the one-tier
#   simulator's at the same capacity (the same calls in the same order);
# - with NVMe the pair has at least the hits of host alone and at most
#   those of a tier that never evicts;
# - with NVMe room for the whole working set and nothing refused, the pair
#   reaches the never-evict figure: no block stored is ever lost.
#
# Usage: test-tiers.sh KVT_TRACE KVT_POLICY_SIM
set -eu

trace=$1
sim=$2
. "$(dirname "$0")/steps.sh"

"$trace" --seed 7 --requests 1500 --rate 2 --think 10 --docs 200 --no-keys \
	-o "$dir/t.trace" 2>/dev/null || fail "kvt-trace failed"
bt=$(awk '$1 == "block_tokens" { print $2 }' "$dir/t.trace")
[ -n "$bt" ] || fail "no block_tokens line"

# One tier: the host-only figures, and at 100 % the never-evict one (every
# policy reaches it there, which test-workload checks).
"$sim" --csv --capacities 0.01,0.05,1 "$dir/t.trace" >"$dir/one.csv" ||
	fail "one-tier run failed"
"$sim" --csv --block-bytes 1000 --capacities 0.01,0.05 --nvme 0,0.25,1 \
	"$dir/t.trace" >"$dir/two.csv" || fail "two-tier run failed"
rows=$(($(wc -l <"$dir/two.csv") - 1))
[ "$rows" -eq 36 ] || fail "$rows two-tier rows, not 2 x 3 x 6"

awk -F, -v bt="$bt" '
	# one.csv: capacity_fraction,capacity_blocks,partition,policy,hit_rate,tokens_saved,...
	FNR == 1 { next }
	FILENAME ~ /one.csv$/ {
		if ($4 == "lru" && $1 == "1.0000") unbounded = $6 / bt
		one[$2 "," $4] = $6 / bt
		next
	}
	# two.csv: capacity_fraction,capacity_blocks,nvme_fraction,nvme_blocks,policy,
	# hit_rate,hits,host_hits,nvme_hits,stray,host_evictions,nvme_evictions,
	# nvme_bytes_written,nvme_bytes_read,dropped,rejected,time_saved
	{
		key = $2 "," $5
		if ($7 != $8 + $9) bad(key " nvme " $4 ": " $7 " hits, " $8 " host + " $9 " nvme")
		if ($14 != $9 * 1000) bad(key " nvme " $4 ": read " $14 " bytes for " $9 " hits")
		if ($7 > unbounded) bad(key " nvme " $4 ": " $7 " hits beat never-evict " unbounded)
		if ($4 == 0) {
			if ($9 != 0 || $13 != 0) bad(key ": NVMe hits or writes with no NVMe")
			if (!(key in one) || $8 != one[key])
				bad(key ": host alone " $8 " hits, one-tier simulator " one[key])
			alone[key] = $7
			next
		}
		if ($9 > 0) used++
		if (!(key in alone) || $7 < alone[key])
			bad(key " nvme " $4 ": " $7 " hits, below host alone " alone[key])
		if ($3 == "1.0000" && $16 == 0) {
			full++
			if ($7 != unbounded) bad(key ": room for everything, " $7 " hits of " unbounded)
		}
	}
	function bad(m) { print "test-tiers: " m > "/dev/stderr"; failed = 1 }
	END {
		if (unbounded == "") bad("no never-evict figure")
		if (!used) bad("no run had an NVMe hit")
		if (!full) bad("no run with room for everything refused nothing")
		exit failed
	}' "$dir/one.csv" "$dir/two.csv" || fail "checks failed"

# The text report names every column it prints.
"$sim" --capacities 0.01 --nvme 0.25 --policies arc "$dir/t.trace" >"$dir/two.txt" ||
	fail "text report failed"
grep -q '^host .*GB written.*time saved$' "$dir/two.txt" || fail "text report has no header"
[ "$(grep -c ' arc ' "$dir/two.txt")" -eq 1 ] || fail "text report: not one arc line"
"$sim" --check --nvme 0.25 "$dir/t.trace" 2>/dev/null && fail "--check with --nvme accepted"
echo "test-tiers: ok"
