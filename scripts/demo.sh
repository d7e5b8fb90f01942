#!/bin/sh
# The main job: build kvtier, start kvtierd on its built-in defaults in a
# private directory, serve three Llama-3-8B-shaped engine processes that
# share a 1024-token system prompt, show `kvtierctl status`, stop cleanly.
# Every byte an engine loads is checked against what the engine that
# computed it wrote; any difference fails the run.
set -eu
cd "$(dirname "$0")/.."
./scripts/deps.sh
[ -d build ] || meson setup build >/dev/null
ninja -C build >/dev/null

dir=$(mktemp -d /tmp/kvtier-demo.XXXXXX)
sock="$dir/kvtierd.sock"
daemon_pid=""
cleanup() {
	[ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT INT TERM

echo "== kvtierd (built-in defaults), socket $sock"
build/daemon/kvtierd --socket "$sock" 2>"$dir/kvtierd.log" &
daemon_pid=$!
i=0
until [ -S "$sock" ]; do
	i=$((i + 1))
	if [ $i -gt 500 ] || ! kill -0 "$daemon_pid" 2>/dev/null; then
		cat "$dir/kvtierd.log" >&2
		echo "kvtierd did not start" >&2
		exit 1
	fi
	sleep 0.02
done
cat "$dir/kvtierd.log"

engine=build/tests/engine-sim/kvt-engine
echo
echo "== engine A: system prompt (1024 tokens) + its own question (256 tokens)"
$engine --socket "$sock" --name engine-A --prefix 1024 --suffix 256 --suffix-seed 1 --expect-hits 0
echo
echo "== engines B and C at once: the same system prompt, their own questions"
$engine --socket "$sock" --name engine-B --prefix 1024 --suffix 256 --suffix-seed 2 --expect-hits 64 &
b=$!
$engine --socket "$sock" --name engine-C --prefix 1024 --suffix 256 --suffix-seed 3 --expect-hits 64 &
c=$!
wait $b
wait $c
echo
echo "== engine B again: its whole request is cached now"
$engine --socket "$sock" --name engine-B2 --prefix 1024 --suffix 256 --suffix-seed 2 --expect-hits 80 --no-store
echo
echo "== kvtierctl status"
build/client/kvtierctl --socket "$sock" status
echo
kill "$daemon_pid"
wait "$daemon_pid"
daemon_pid=""
tail -n 1 "$dir/kvtierd.log"
echo "demo: all engines verified every restored byte; kvtierd stopped cleanly"
