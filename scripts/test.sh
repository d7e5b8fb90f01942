#!/bin/sh
# Every test suite: install, build, run the unit, protocol, integration and
# engine suites, then the same (less the engines, whose Python cannot load
# an instrumented library) under AddressSanitizer and UBSan.
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
run_suite() { # build-dir, meson options...  (env TEST_ARGS: meson test's own)
	dir=$1
	shift
	if [ ! -d "$dir" ]; then
		if ! meson setup "$dir" "$@" >"$dir.setup.log" 2>&1; then
			cat "$dir.setup.log" >&2
			echo "kvtier: meson setup of $dir failed" >&2
			rm -rf "$dir"
			failed=$((failed + 1))
			return
		fi
	fi
	if ! ninja -C "$dir"; then
		echo "kvtier: build in $dir failed" >&2
		failed=$((failed + 1))
		return
	fi
	took "building $dir"
	# The engine suite (transformers, vLLM) runs in the main build only,
	# from a venv inside it.
	if [ "$dir" = build ] && ! ./scripts/venv.sh "$dir/venv"; then
		echo "kvtier: the engine test venv could not be made (scripts/venv.sh)" >&2
		failed=$((failed + 1))
	fi
	[ "$dir" = build ] && took "the engine test venv"
	# shellcheck disable=SC2086 # TEST_ARGS: words
	meson test -C "$dir" --print-errorlogs --num-processes 2 ${TEST_ARGS:-} | tee "$dir/test-summary.txt"
	ok=$(sed -n 's/^Ok: *\([0-9]*\).*/\1/p' "$dir/test-summary.txt")
	fail=$(sed -n 's/^Fail: *\([0-9]*\).*/\1/p' "$dir/test-summary.txt")
	to=$(sed -n 's/^Timeout: *\([0-9]*\).*/\1/p' "$dir/test-summary.txt")
	skip=$(sed -n 's/^Skipped: *\([0-9]*\).*/\1/p' "$dir/test-summary.txt")
	[ -n "$ok" ] || fail=$((${fail:-0} + 1))
	passed=$((passed + ${ok:-0}))
	failed=$((failed + ${fail:-0} + ${to:-0}))
	skipped=$((skipped + ${skip:-0}))
	took "the tests in $dir"
}

run_suite build
# Sanitizers: leaks, out-of-bounds and undefined behaviour in the same tests,
# less the benchmarks' smoke runs (their code paths are the tests') and the
# GPU suite (its kernels never meet a GPU here: built for one architecture,
# their host emulation checked in the plain build).
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	TEST_ARGS="--no-suite bench --no-suite gpu" run_suite build-asan -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug -Dpython=disabled -Dgpu_archs=80

# The fuzz targets under libFuzzer for a short fixed time each (findings
# stop it with the crashing input saved in build-fuzz/).
if ./scripts/fuzz.sh 20; then
	passed=$((passed + 1))
else
	echo "kvtier: fuzzing found a problem (see above)" >&2
	failed=$((failed + 1))
fi
took "fuzzing"

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
