#!/bin/sh
# Run the fuzz targets under libFuzzer (clang), each for SECONDS (default 60).
# The same targets run as deterministic replays in every `meson test`.
#   ./scripts/fuzz.sh [SECONDS]
set -eu
cd "$(dirname "$0")/.."
secs=${1:-60}
command -v clang >/dev/null || { echo "fuzz.sh: needs clang (apt-get install clang)" >&2; exit 1; }
dir=build-fuzz
san="-fsanitize=address,undefined"
if [ ! -d "$dir" ]; then
	CC=clang meson setup "$dir" -Db_lundef=false -Dcuda=disabled \
		-Dc_args="$san -fsanitize=fuzzer-no-link -g" -Dc_link_args="$san" >/dev/null
fi
ninja -C "$dir" proto/libkvt-proto.a daemon/libkvtierd.a tests/fuzz/fuzz-wire \
	tests/fuzz/fuzz-session tests/fuzz/fuzz-spill >/dev/null
libs="$(pkg-config --libs libsystemd inih liburing libxxhash) -lnuma"
inc="-Iproto -Idaemon -I$dir"
clang $san -fsanitize=fuzzer -g $inc tests/fuzz/fuzz-wire.c "$dir/proto/libkvt-proto.a" \
	-o "$dir/fuzz-wire-libfuzzer"
clang $san -fsanitize=fuzzer -g $inc tests/fuzz/fuzz-session.c "$dir/daemon/libkvtierd.a" \
	"$dir/proto/libkvt-proto.a" $libs -o "$dir/fuzz-session-libfuzzer"
clang $san -fsanitize=fuzzer -g $inc tests/fuzz/fuzz-spill.c "$dir/daemon/libkvtierd.a" \
	"$dir/proto/libkvt-proto.a" $libs -o "$dir/fuzz-spill-libfuzzer"
for t in wire session spill; do
	mkdir -p "$dir/corpus-$t"
	"$dir/tests/fuzz/fuzz-$t" --seeds "$dir/corpus-$t"
	echo "== fuzz-$t for ${secs}s"
	"$dir/fuzz-$t-libfuzzer" -max_total_time="$secs" -max_len=16384 "$dir/corpus-$t"
done
