#!/bin/sh
# Every test suite: install, build, run the unit, protocol, integration and
# engine suites, then the same (less the engines, whose Python cannot load
# an instrumented library) under AddressSanitizer and UBSan.
# The engine suite (one test at a time, mostly computing) runs beside the
# others (mostly waiting on daemons, clusters and containers, one at a
# time): from the end of the plain build to the end of the sanitizers'
# tests, in a meson test of its own on the same build.
# Says how long each phase took; ends with one line "N passed, N failed,
# N skipped".
set -u
cd "$(dirname "$0")/.." || exit 1
t0=$(date +%s)
took() { # phase
	t=$(date +%s)
	echo "test.sh: $1 took $((t - t0)) s"
	t0=$t
}
./scripts/deps.sh || exit 1
took "installing the packages"

passed=0 failed=0 skipped=0
# Adds the counts of a meson test summary (its output, in file) to the totals;
# a summary without them (meson test did not get that far) is a failure.
count() { # file
	ok=$(sed -n 's/^Ok: *\([0-9]*\).*/\1/p' "$1")
	fail=$(sed -n 's/^Fail: *\([0-9]*\).*/\1/p' "$1")
	to=$(sed -n 's/^Timeout: *\([0-9]*\).*/\1/p' "$1")
	skip=$(sed -n 's/^Skipped: *\([0-9]*\).*/\1/p' "$1")
	[ -n "$ok" ] || fail=$((${fail:-0} + 1))
	passed=$((passed + ${ok:-0}))
	failed=$((failed + ${fail:-0} + ${to:-0}))
	skipped=$((skipped + ${skip:-0}))
}
build() { # build-dir, meson options...
	dir=$1
	shift
	if [ ! -d "$dir" ]; then
		if ! meson setup "$dir" "$@" >"$dir.setup.log" 2>&1; then
			cat "$dir.setup.log" >&2
			echo "kvtier: meson setup of $dir failed" >&2
			rm -rf "$dir"
			failed=$((failed + 1))
			return 1
		fi
	fi
	if ! ninja -C "$dir"; then
		echo "kvtier: build in $dir failed" >&2
		failed=$((failed + 1))
		return 1
	fi
	took "building $dir"
}
# meson test in a built dir, without a rebuild (built just before; and the
# engine suite's meson test may be at work in the same build), its output
# also in dir/test-summary.txt.
run_tests() { # build-dir, meson test options...
	dir=$1
	shift
	meson test -C "$dir" --no-rebuild --print-errorlogs "$@" | tee "$dir/test-summary.txt"
	count "$dir/test-summary.txt"
}

engines=
if build build; then
	# The engine suite (transformers, vLLM) runs in the main build only,
	# from a venv inside it, in a meson test of its own (its log
	# build/meson-logs/test-engines.*, its output build/test-engines.txt,
	# shown when it is over).
	if ! ./scripts/venv.sh build/venv; then
		echo "kvtier: the engine test venv could not be made (scripts/venv.sh)" >&2
		failed=$((failed + 1))
	fi
	took "the engine test venv"
	e0=$t0
	meson test -C build --no-rebuild --print-errorlogs --logbase test-engines --suite engines \
		>build/test-engines.txt 2>&1 &
	engines=$!
	trap 'kill "$engines" 2>/dev/null; exit 1' INT TERM
	run_tests build --num-processes 2 --no-suite engines
	took "the tests in build but the engines"
fi
# Sanitizers: leaks, out-of-bounds and undefined behaviour in the same tests,
# less the benchmarks' smoke runs (their code paths are the tests') and the
# GPU suite (its kernels never meet a GPU here: built for one architecture,
# their host emulation checked in the plain build).
if build build-asan -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug \
	-Dpython=disabled -Dgpu_archs=80; then
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		run_tests build-asan --num-processes 2 --no-suite bench --no-suite gpu
	took "the tests in build-asan"
fi
if [ -n "$engines" ]; then
	wait "$engines"
	trap - INT TERM
	cat build/test-engines.txt
	count build/test-engines.txt
	took "waiting for the engine tests"
	echo "test.sh: the engine tests took $((t0 - e0)) s, beside the others"
fi

# The fuzz targets under libFuzzer for a short fixed time each (findings
# stop it with the crashing input saved in build-fuzz/), alone.
if ./scripts/fuzz.sh 20; then
	passed=$((passed + 1))
else
	echo "kvtier: fuzzing found a problem (see above)" >&2
	failed=$((failed + 1))
fi
took "fuzzing"

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
