#!/bin/sh
# Run the fuzz targets under libFuzzer (clang) with ASan and UBSan, each for
# SECONDS (default 60), starting from the seed corpus in tests/fuzz/corpus/
# (written by `fuzz-TARGET --seeds DIR`); what libFuzzer finds on the way
# goes to build-fuzz/corpus-TARGET.  The same targets run as deterministic
# replays in every `meson test`; scripts/test.sh runs this for 20 s each.
#   ./scripts/fuzz.sh [SECONDS]
set -eu
cd "$(dirname "$0")/.."
secs=${1:-60}
command -v clang >/dev/null || { echo "fuzz.sh: needs clang (apt-get install clang)" >&2; exit 1; }
dir=build-fuzz
san="-fsanitize=address,undefined"
# The targets link the daemon's library by hand, without librados: the
# remote tier is not fuzzed here (its object checks are spill-format.c's,
# which fuzz-spill covers).
if [ ! -d "$dir" ]; then
	CC=clang meson setup "$dir" -Db_lundef=false -Dcuda=disabled -Drados=disabled \
		-Dc_args="$san -fsanitize=fuzzer-no-link -g" -Dc_link_args="$san" >/dev/null
else
	meson configure "$dir" -Drados=disabled >/dev/null
fi
ninja -C "$dir" proto/libkvt-proto.a daemon/libkvtierd.a >/dev/null
libs="$(pkg-config --libs libsystemd inih liburing libxxhash libmicrohttpd) -lnuma"
inc="-Iproto -Ikernels -Idaemon -Idaemon/evict -I$dir"
clang $san -fsanitize=fuzzer -g $inc tests/fuzz/fuzz-wire.c "$dir/proto/libkvt-proto.a" \
	-o "$dir/fuzz-wire-libfuzzer"
daemon_target() { # name, sources...
	t=$1
	shift
	clang $san -fsanitize=fuzzer -g $inc "$@" "$dir/daemon/libkvtierd.a" \
		"$dir/proto/libkvt-proto.a" $libs -o "$dir/fuzz-$t-libfuzzer"
}
daemon_target session tests/fuzz/fuzz-session.c tests/fuzz/fuzz-daemon.c
daemon_target sessions tests/fuzz/fuzz-sessions.c tests/fuzz/fuzz-daemon.c
daemon_target spill tests/fuzz/fuzz-spill.c
daemon_target recovery tests/fuzz/fuzz-recovery.c
for t in ${KVT_FUZZ_TARGETS:-wire session sessions spill recovery}; do
	mkdir -p "$dir/corpus-$t"
	echo "== fuzz-$t for ${secs}s"
	"$dir/fuzz-$t-libfuzzer" -max_total_time="$secs" -max_len=16384 -print_final_stats=1 -artifact_prefix="$dir/" \
		"$dir/corpus-$t" "tests/fuzz/corpus/$t"
done
