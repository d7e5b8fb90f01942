#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# The shipped units: systemd parses every line of them, kvtierd.service keeps
# an exposure of at most 1.0 in `systemd-analyze security`, and none of the
# settings that would raise that score at the cost of a function (tenant
# isolation, NUMA placement) has crept in.
#
# Usage: test-unit-security.sh SYSTEMD_DIR   (the source tree's systemd/)
# Exit: 0 pass, 1 fail, 77 skipped (with the reason).

set -u

# Skipped, to meson (tests/skip.h).
KVT_TEST_SKIP=77
LIMIT=1.0
dir=${1:-}
if [ -z "$dir" ] || [ ! -f "$dir/kvtierd.service" ] || [ ! -f "$dir/kvtierd.socket" ]; then
	echo "usage: $0 SYSTEMD_DIR (with kvtierd.service and kvtierd.socket)" >&2
	exit 1
fi

if ! command -v systemd-analyze >/dev/null 2>&1; then
	echo "SKIP: systemd-analyze is not installed (apt-get install systemd)"
	exit $KVT_TEST_SKIP
fi
# --offline=true appeared in systemd 250.
if ! systemd-analyze security --help 2>/dev/null | grep -q -- '--offline'; then
	echo "SKIP: this systemd-analyze ($(systemd-analyze --version | head -n 1)) has no security --offline"
	exit $KVT_TEST_SKIP
fi

tmp=$(mktemp -d /tmp/kvt-unit-XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0

# Parse errors and unknown keys are only warnings for systemd (the line is
# ignored, so a misspelt hardening option silently protects nothing): any
# output on stderr fails.  Verification checks that ExecStart= names an
# executable, so the copies point it at one; the man page named in
# Documentation= need not be installed here.
cp "$dir/kvtierd.service" "$dir/kvtierd.socket" "$tmp/" || exit 1
sed -i 's|^ExecStart=[^ ]*|ExecStart=/bin/true|' "$tmp/kvtierd.service" || exit 1
if ! systemd-analyze verify --man=no "$tmp/kvtierd.service" "$tmp/kvtierd.socket" \
	>"$tmp/verify.out" 2>&1 || [ -s "$tmp/verify.out" ]; then
	echo "FAIL: systemd-analyze verify reports problems in the units:"
	sed 's/^/  /' "$tmp/verify.out"
	fail=1
fi

if ! systemd-analyze security --offline=true --no-pager "$dir/kvtierd.service" \
	>"$tmp/security.out" 2>"$tmp/security.err"; then
	echo "FAIL: systemd-analyze security --offline=true failed:"
	cat "$tmp/security.err"
	exit 1
fi
if [ -s "$tmp/security.err" ]; then
	echo "FAIL: systemd-analyze security warns about the unit:"
	sed 's/^/  /' "$tmp/security.err"
	fail=1
fi
score=$(sed -n 's/.*Overall exposure level for kvtierd\.service: *\([0-9][0-9.]*\).*/\1/p' \
	"$tmp/security.out")
if [ -z "$score" ]; then
	echo "FAIL: no 'Overall exposure level' in the output of systemd-analyze security:"
	tail -n 5 "$tmp/security.out"
	exit 1
fi
echo "exposure level of kvtierd.service: $score (limit $LIMIT)"
if awk -v s="$score" -v l="$LIMIT" 'BEGIN { exit !(s > l) }'; then
	echo "FAIL: exposure $score is above $LIMIT; what still counts:"
	grep '✗' "$tmp/security.out"
	fail=1
fi

# Each of these would lower the score and break the daemon.
check_absent() {
	file=$1
	pattern=$2
	why=$3
	if grep -Eq "$pattern" "$dir/$file"; then
		echo "FAIL: $file: $(grep -E "$pattern" "$dir/$file" | head -n 1): $why"
		fail=1
	fi
}
check_absent kvtierd.service '^PrivateUsers=[[:space:]]*(yes|true|on|1|self|identity)' \
	"every client uid would arrive as 65534 and tenants could not be told apart"
check_absent kvtierd.service '^SystemCallFilter=[[:space:]]*~.*@resources' \
	"it blocks mbind(), so NUMA placement of extents would stop"
check_absent kvtierd.service '^LimitMEMLOCK=[[:space:]]*[0-9]' \
	"a finite limit leaves pools unlocked unless the daemon gets CAP_IPC_LOCK; use infinity"
check_absent kvtierd.socket '^SocketMode=[[:space:]]*0*[0-7]?[0-7][0-7][1-7][[:space:]]*$' \
	"the socket must not be open to every local user (0660 and SocketGroup=)"
if ! grep -Eq '^SocketGroup=[[:space:]]*[^[:space:]]' "$dir/kvtierd.socket"; then
	echo "FAIL: kvtierd.socket: no SocketGroup= for the engine users"
	fail=1
fi

exit $fail
