#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# The previous release's client library against this daemon: engines are
# not restarted for a daemon upgrade, so the daemon must serve the library
# they were built with.  The library and kvt-engine of the commit named in
# tests/compat/previous-release are built from this checkout's history
# (kept in the build directory, built once), and drive a daemon built from
# this tree: a prefix stored, loaded back with every byte checked, an
# upgrade in place (SIGUSR2) under the old client, and the prefix loaded
# back again.
#
# Usage: test-previous-client.sh SOURCE_DIR BUILD_DIR KVTIERD
# Exit: 0 pass, 1 fail, 77 skipped (no git history here).
set -u
src=${1:?usage} build=${2:?usage} kvtierd=${3:?usage}
KVT_TEST_SKIP=77
fail() {
	echo "FAIL: $*"
	[ -f "$tmp/kvtierd.log" ] && tail -n 20 "$tmp/kvtierd.log"
	exit 1
}

rev=$(sed -n 's/^\([0-9a-f]\{40\}\).*/\1/p' "$src/tests/compat/previous-release")
if ! command -v git >/dev/null 2>&1 || ! git -C "$src" cat-file -e "$rev^{commit}" 2>/dev/null; then
	echo "SKIP: the previous release ($rev) is not in this checkout's history (a shallow clone?)"
	exit $KVT_TEST_SKIP
fi
old=$build/previous-client
if [ ! -x "$old/build/tests/engine-sim/kvt-engine" ]; then
	rm -rf "$old"
	mkdir -p "$old/src"
	git -C "$src" archive "$rev" | tar -x -C "$old/src" || fail "git archive $rev"
	meson setup "$old/build" "$old/src" -Dcuda=disabled -Dpython=disabled -Drados=disabled \
		>"$old/setup.log" 2>&1 || { cat "$old/setup.log"; fail "meson setup of $rev"; }
	ninja -C "$old/build" tests/engine-sim/kvt-engine >"$old/build.log" 2>&1 ||
		{ tail -n 30 "$old/build.log"; fail "building $rev's library and kvt-engine"; }
fi
engine() { # the old kvt-engine on the old library; more arguments
	LD_LIBRARY_PATH=$old/build/client "$old/build/tests/engine-sim/kvt-engine" \
		--socket "$tmp/kvtierd.sock" --model tiny --prefix 1024 --suffix 0 "$@"
}

tmp=$(mktemp -d /tmp/kvt-compat-XXXXXX) || exit 1
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
: >"$tmp/kvtierd.conf"
"$kvtierd" --config "$tmp/kvtierd.conf" --socket "$tmp/kvtierd.sock" >"$tmp/kvtierd.log" 2>&1 &
pid=$!
until [ -S "$tmp/kvtierd.sock" ]; do
	kill -0 "$pid" 2>/dev/null || fail "kvtierd exited at start"
	sleep 0.05
done

out=$(engine 2>&1) || fail "the old client's store: $out"
echo "$out" | grep -q '64 computed, 64 stored; every loaded byte verified' || fail "store: $out"
echo "ok: the $rev client stored 64 blocks"
out=$(engine --no-store --expect-hits 64 2>&1) || fail "the old client's load: $out"
echo "ok: the $rev client loaded them back, every byte checked"
kill -USR2 "$pid"
until [ "$(grep -c 'Adopted the host tier' "$tmp/kvtierd.log")" -ge 1 ]; do
	kill -0 "$pid" 2>/dev/null || fail "kvtierd exited during the upgrade in place"
	sleep 0.05
done
out=$(engine --no-store --expect-hits 64 2>&1) || fail "the old client's load after the upgrade: $out"
echo "ok: after an upgrade in place, the $rev client loaded them back again"
exit 0
