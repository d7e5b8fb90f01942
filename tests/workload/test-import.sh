#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# kvt-trace-import on a hand-written Mooncake sample (mooncake-sample.jsonl:
# a partial last block, a shared prefix, remapped ids far from 0, unknown
# fields with nested values and strings, a blank line, odd spacing): the
# records and ids are checked exactly, at three block sizes and in both
# tail modes.  Keys are one per id, distinct and the same from run to run.
# Every kind of malformed line is refused with its line number, and no
# prefix of a line crashes the importer.
#
# With "mooncake" and the synthetic Mooncake trace, the imported trace
# passes kvt-policy-sim --check instead (exit 77 without the trace).
#
# Usage: test-import.sh KVT_TRACE_IMPORT KVT_POLICY_SIM SAMPLE [mooncake JSONL]
set -eu

import=$1
sim=$2
sample=$3
. "$(dirname "$0")/steps.sh"

if [ "${4:-}" = mooncake ]; then
	src=${5:-}
	if [ ! -r "$src" ]; then
		echo "test-import: SKIP: no Mooncake trace at '$src'"
		exit 77
	fi
	"$import" --no-keys -o "$dir/m.trace" "$src" 2>"$dir/err" || fail "import failed: $(cat "$dir/err")"
	records=$(grep -c '^R ' "$dir/m.trace")
	lines=$(grep -c . "$src")
	[ "$records" -eq "$lines" ] || fail "$records records from $lines lines"
	"$sim" --check --capacities 0.01,1 --policies lru,arc,belady "$dir/m.trace" >"$dir/out" ||
		fail "kvt-policy-sim checks failed on the imported trace"
	echo "test-import: ok (Mooncake trace)"
	exit 0
fi

# expect NAME ARGS...: the records of the sample imported with ARGS are
# the lines that follow on standard input.
expect() {
	name=$1
	shift
	"$import" --no-keys "$@" "$sample" 2>"$dir/err" >"$dir/got" || fail "$name: $(cat "$dir/err")"
	grep '^R ' "$dir/got" >"$dir/records" || true
	cat >"$dir/want"
	diff -u "$dir/want" "$dir/records" >&2 || fail "$name: records differ"
}

# 128-token blocks, 4 per hash id: 1300 tokens are two full ids and 276
# tokens of the last, which are 2 full blocks and a rest of 20 tokens.
# Line 3 shares 907, 13 with line 1; line 4 has line 1's last id full,
# whose first two blocks are line 1's; line 6 is 100 tokens, no full block.
expect "128-token blocks" --block-tokens 128 <<'EOF'
R 0 5000 0 0 1 c 10 0 0+10
R 1 5000 0 1 1 c 12 0 0+8 10+4
R 2 7000000 0 2 1 c 12 0 0+10 14+2
R 3 7000000 0 3 1 c 10 0 0+10
R 4 7001000 0 4 1 c 0 0
EOF
# Kept, the rest of 20 tokens is a block of its own (10), shared by line
# 5 (same id, same cut) and not by line 4's full third block (15); line
# 6's 100 tokens of 907 are not 907's full first block (0).  Answers
# complete (1536 + 128) / 128 - 12 = 1 and (1300 + 300) / 128 - 10 = 2
# blocks, each new.
expect "kept tails, answer blocks" --block-tokens 128 --partial-tail block --answer-blocks <<'EOF'
R 0 5000 0 0 1 c 11 0 0+11
R 1 5000 0 1 1 c 12 0 0+8 11+4
R 2 7000000 0 2 1 c 12 1 0+10 15+3
R 3 7000000 0 3 1 c 11 2 0+11 18+2
R 4 7001000 0 4 1 c 1 0 20+1
EOF
# The default, 16-token blocks: 276 tokens are 17 blocks and 4 tokens;
# line 6's 100 tokens of 907 are 6 full blocks, the same as 907's first
# six anywhere.
expect "16-token blocks" <<'EOF'
R 0 5000 0 0 1 c 81 0 0+81
R 1 5000 0 1 1 c 96 0 0+64 81+32
R 2 7000000 0 2 1 c 96 0 0+81 113+15
R 3 7000000 0 3 1 c 81 0 0+81
R 4 7001000 0 4 1 c 6 0 0+6
EOF
expect "512-token blocks" --block-tokens 512 <<'EOF'
R 0 5000 0 0 1 c 2 0 0+2
R 1 5000 0 1 1 c 3 0 0+3
R 2 7000000 0 2 1 c 3 0 0+2 3+1
R 3 7000000 0 3 1 c 2 0 0+2
R 4 7001000 0 4 1 c 0 0
EOF

# Keys: one K line per id, each before its first use, distinct, 64 hex
# digits; the same file twice; the same records as without keys.
"$import" --partial-tail block --answer-blocks --block-tokens 128 -o "$dir/k1" "$sample" 2>/dev/null ||
	fail "import with keys failed"
"$import" --partial-tail block --answer-blocks --block-tokens 128 "$sample" >"$dir/k2" 2>/dev/null
cmp -s "$dir/k1" "$dir/k2" || fail "two imports of the sample differ"
keys=$(grep -c '^K ' "$dir/k1")
[ "$keys" -eq 21 ] || fail "$keys K lines, not 21"
[ "$(grep '^K ' "$dir/k1" | sort -u | wc -l)" -eq 21 ] || fail "two ids share a key"
grep '^K ' "$dir/k1" | grep -qv '^K [0-9a-f]\{64\}$' && fail "a K line is not 64 hex digits"
"$import" --no-keys --partial-tail block --answer-blocks --block-tokens 128 "$sample" 2>/dev/null |
	grep '^R ' >"$dir/k3"
grep '^R ' "$dir/k1" | cmp -s - "$dir/k3" || fail "--no-keys changed the records"
"$sim" --check --capacities 0.1,0.5,1 "$dir/k1" >/dev/null || fail "kvt-policy-sim checks failed"

# refused NAME LINE MESSAGE: a trace whose second line is LINE stops
# there, saying MESSAGE, and leaves no output file.
good='{"timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": [1]}'
refused() {
	printf '%s\n%s\n%s\n' "$good" "$2" "$good" >"$dir/bad.jsonl"
	if "$import" -o "$dir/bad.trace" "$dir/bad.jsonl" 2>"$dir/err"; then
		fail "$1: accepted"
	fi
	grep -q "bad.jsonl:2: .*$3" "$dir/err" || fail "$1: said '$(cat "$dir/err")', not ':2: ... $3'"
	[ ! -e "$dir/bad.trace" ] || fail "$1: left a half trace"
}
refused "bad JSON" '{"timestamp": 1, "input_length": 10 "output_length": 1, "hash_ids": [1]}' \
	"bad JSON at column 37: ',' or '}' expected"
refused "cut short" '{"timestamp": 1, "input_length": 10, "output_le' "bad JSON: the line ends"
refused "not an object" '[1, 2]' "bad JSON at column 1"
refused "after the object" "$good x" "bad JSON at column 75: the end of the line"
refused "leading zero" '{"timestamp": 01, "input_length": 10, "output_length": 1, "hash_ids": [1]}' \
	"leading zero"
refused "missing field" '{"timestamp": 1, "input_length": 10, "output_length": 1}' \
	"missing field 'hash_ids'"
refused "twice" '{"timestamp": 1, "timestamp": 2, "input_length": 10, "output_length": 1, "hash_ids": [1]}' \
	"field 'timestamp' appears twice"
refused "negative" '{"timestamp": -4, "input_length": 10, "output_length": 1, "hash_ids": [1]}' \
	"timestamp: -4 is negative"
refused "fraction" '{"timestamp": 1, "input_length": 10.5, "output_length": 1, "hash_ids": [1]}' \
	"input_length: 10.5 is not an integer"
refused "exponent" '{"timestamp": 1, "input_length": 10, "output_length": 1e3, "hash_ids": [1]}' \
	"output_length: 1e3 is not an integer"
refused "a string" '{"timestamp": "1", "input_length": 10, "output_length": 1, "hash_ids": [1]}' \
	"timestamp: a non-negative integer expected"
refused "too large" '{"timestamp": 18446744073709551616, "input_length": 10, "output_length": 1, "hash_ids": [1]}' \
	"does not fit 64 bits"
refused "id not integer" '{"timestamp": 1, "input_length": 600, "output_length": 1, "hash_ids": [1, 2.5]}' \
	"hash_ids: 2.5 is not an integer"
refused "ids not an array" '{"timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": 1}' \
	"hash_ids: an array expected"
refused "too few ids" '{"timestamp": 1, "input_length": 1025, "output_length": 1, "hash_ids": [1, 2]}' \
	"input_length 1025 needs 3 blocks of 512 tokens, but hash_ids has 2"
refused "too many ids" '{"timestamp": 1, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2, 3]}' \
	"needs 2 blocks"
refused "id twice" '{"timestamp": 1, "input_length": 1500, "output_length": 1, "hash_ids": [7, 8, 7]}' \
	"hash id 7 appears twice in one prompt"
refused "time goes back" '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}' \
	"timestamp 0 is before the previous request's 1"
refused "nested too deep" "{\"x\": $(printf '[%.0s' $(seq 100))" "nested deeper than 64"
refused "bad escape" '{"x": "\q", "timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": [1]}' \
	"bad JSON at column 8"
printf '%s\n\n{"timestamp": 1,\000 "input_length": 10}\n' "$good" >"$dir/nul.jsonl"
"$import" "$dir/nul.jsonl" >/dev/null 2>"$dir/err" && fail "a NUL byte accepted"
grep -q "nul.jsonl:3: a NUL byte" "$dir/err" || fail "NUL byte: said '$(cat "$dir/err")'"
printf '\n\n' >"$dir/empty.jsonl"
"$import" "$dir/empty.jsonl" >/dev/null 2>&1 && fail "a trace without requests accepted"
"$import" --block-tokens 48 "$sample" >/dev/null 2>&1 && fail "--block-tokens 48 accepted"

# No prefix of a line crashes it: each is imported (0) or refused (1).
line=$(sed -n 2p "$sample")
n=${#line}
i=1
while [ "$i" -lt "$n" ]; do
	printf '%s\n' "$line" | cut -c "1-$i" >"$dir/cut.jsonl"
	rc=0
	"$import" "$dir/cut.jsonl" >/dev/null 2>&1 || rc=$?
	[ "$rc" -le 1 ] || fail "a prefix of $i bytes of line 2 ended the import with $rc"
	i=$((i + 7))
done
echo "test-import: ok"
