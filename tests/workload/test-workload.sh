#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# kvt-trace and kvt-policy-sim on a small trace: the same seed gives the
# same file byte for byte and another seed another one; every id's key is
# distinct (the key map never gave one key two ids); ids-only traces hold
# the same records; and the simulator's checks hold, shared and per tenant
# (Belady at least every online policy and at most a tier that never
# evicts, Belady and LRU never losing hits as the tier grows, every policy
# at the unbounded figure with room for the working set, Belady's tier
# always prefix-closed); the records say what the engine knows (system
# prompt, last turn), and the engine's lifecycle hints lose no block with
# room for everything and gain where the trace says they should.
#
# Usage: test-workload.sh KVT_TRACE KVT_POLICY_SIM
set -eu

trace=$1
sim=$2
. "$(dirname "$0")/steps.sh"

# Conversations close together, so turns of one overlap in a short trace.
args="--requests 1500 --rate 2 --think 10 --docs 200"
"$trace" --seed 7 $args -o "$dir/a.trace" 2>/dev/null || fail "kvt-trace failed"
"$trace" --seed 7 $args >"$dir/b.trace" 2>/dev/null || fail "kvt-trace to stdout failed"
cmp -s "$dir/a.trace" "$dir/b.trace" || fail "seed 7 gave two different traces"
"$trace" --seed 8 $args -o "$dir/c.trace" 2>/dev/null || fail "kvt-trace failed"
cmp -s "$dir/a.trace" "$dir/c.trace" && fail "seeds 7 and 8 gave the same trace"

records=$(grep -c '^R ' "$dir/a.trace")
[ "$records" -eq 1500 ] || fail "$records records, not 1500"
keys=$(grep -c '^K ' "$dir/a.trace")
distinct=$(grep '^K ' "$dir/a.trace" | sort -u | wc -l)
[ "$keys" -eq "$distinct" ] || fail "$keys K lines but $distinct distinct keys"
grep '^K ' "$dir/a.trace" | grep -qv '^K [0-9a-f]\{64\}$' && fail "a K line is not 64 hex digits"
# Every id is defined before it is used: ids are 0..keys-1.
maxid=$(awk '/^R /{for(i=10;i<=NF;i++){split($i,a,"+");e=a[1]+a[2]-1;if(e>m)m=e}} END{print m+0}' "$dir/a.trace")
[ "$maxid" -eq $((keys - 1)) ] || fail "largest id $maxid with $keys keys"

"$trace" --seed 7 $args --no-keys 2>/dev/null | grep '^R ' >"$dir/ids"
grep '^R ' "$dir/a.trace" | cmp -s - "$dir/ids" || fail "--no-keys changed the records"

caps=0.01,0.02,0.05,0.1,0.25,0.5,1
"$sim" --check --capacities $caps "$dir/a.trace" || fail "checks failed (shared tier)"
"$sim" --check --capacities $caps --partition tenant "$dir/a.trace" ||
	fail "checks failed (a tier per tenant)"
"$sim" --check --capacities $caps --release-order reverse --s3fifo-small 25 "$dir/c.trace" ||
	fail "checks failed (seed 8, releases tail first, S3-FIFO small queue 25%)"

# What the engine knows, in the records: a conversation's system prompt
# ("s", at most the blocks looked up, the same on every turn) and its
# last turn ("e", once, on the latest turn written).
awk '/^R / {
	s = 0; e = 0
	for (i = 10; i <= NF; i++) {
		if ($i ~ /^s[0-9]+$/) s = substr($i, 2) + 0
		if ($i == "e") e = 1
	}
	if (s > $8) { print "s" s " beyond " $8 " looked up in record " $2; bad = 1 }
	if (($5 in sys) && sys[$5] != s) { print "conversation " $5 " changed s"; bad = 1 }
	sys[$5] = s
	if ($5 in ended) { print "conversation " $5 " went on after its e"; bad = 1 }
	if (e) ended[$5] = 1
	n_e += e
}
END { if (!n_e) { print "no record ends a conversation"; bad = 1 } exit bad }' "$dir/a.trace" ||
	fail "the records' s and e fields are wrong"

# Lifecycle hints: with room for the working set no hint loses a block
# (every mode reaches the figure without hints), and on this trace ending
# sessions and retaining system prompts gains at 5 % (the hints reach the
# policy at all).
"$sim" --csv --capacities 0.05,1 --policies arc,lrfu-admit --hints request,end,turns,shared,end+shared,all \
	"$dir/a.trace" >"$dir/hints.csv" || fail "the simulator failed with --hints"
awk -F, 'NR > 1 {
	key = $1 "," $4
	if ($16 == "none") { base[key] = $6; next }
	if ($1 == "1.0000" && $6 != base[key]) { print key "/" $16 ": " $6 " tokens, " base[key] " without"; bad = 1 }
	if ($1 == "0.0500" && $16 == "end+shared" && !($6 > base[key])) { print key "/" $16 ": no gain"; bad = 1 }
	rows++
}
END { if (rows != 24) { print rows " hint rows, not 24"; bad = 1 } exit bad }' "$dir/hints.csv" ||
	fail "hints: see above"
echo "test-workload: ok"
