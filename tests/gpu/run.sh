#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# GPU checks of kvtier's data path, in one run of a few minutes on one GPU:
#
#   1. builds tests/gpu/test-gpu-layout and tests/gpu/bench-gpu with nvcc
#      alone (kernels/*.cu, kernels/layout_plan.c, kernels/layout_cpu.c):
#      no daemon, no client library, none of liburing, libnuma, libsystemd,
#      inih or libcrypto;
#   2. where those are installed, also configures the whole tree with
#      -Dcuda=enabled, builds it (the client's CUDA backend included) and
#      runs test-gpu-client (the client's CUDA path against kvtierd);
#      and, where a Python with torch, transformers and pytest is found
#      (KVT_PYTHON), tests/engines/test_hf.py's exactness case on CUDA
#      through the library's CUDA path;
#   3. runs the layout test (every layout against the CPU path);
#   4. runs the benchmark and prints its table last.
#
# Usage: tests/gpu/run.sh [OUTPUT_DIR]
# OUTPUT_DIR (created if needed; default: a new temporary directory) gets
# summary.txt, build.log, meson.log (and meson-testlog.txt),
# test-gpu-layout.log, bench-gpu.log and table.txt.
# Exit status: 0 passed, 1 failed, 77 no CUDA device (the build still ran).

set -u

# Skipped, to meson (tests/skip.h).
KVT_TEST_SKIP=77

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-$(mktemp -d "${TMPDIR:-/tmp}/kvtier-gpu.XXXXXX")}
mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)
build=$(mktemp -d "${TMPDIR:-/tmp}/kvtier-gpu-build.XXXXXX") || exit 1
trap 'rm -rf "$build"' EXIT INT TERM

NVCC=${NVCC:-nvcc}
CC=${CC:-cc}
# The architectures meson builds for: sm_80, sm_90, and PTX for newer ones.
gencode="-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=[sm_90,compute_90]"

say() {
	printf '%s\n' "$*" | tee -a "$out/summary.txt"
}

: >"$out/summary.txt"
say "kvtier GPU run: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), output in $out"
command -v nvidia-smi >/dev/null 2>&1 &&
	nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >>"$out/summary.txt" 2>&1

# ---- 1. direct build ------------------------------------------------------
say "== build (nvcc, no project dependencies)"
(
	set -ex
	"$NVCC" --version
	"$CC" -std=c17 -O2 -Wall -Wextra -I"$root/client" -I"$root/kernels" \
		-c "$root/kernels/layout_cpu.c" -o "$build/layout_cpu.o"
	"$CC" -std=c17 -O2 -Wall -Wextra -I"$root/client" -I"$root/kernels" \
		-c "$root/kernels/layout_plan.c" -o "$build/layout_plan.o"
	# shellcheck disable=SC2086
	"$NVCC" -std=c++17 -O2 $gencode -Xcompiler=-Wall,-Wextra \
		-I"$root/client" -I"$root/kernels" \
		-c "$root/kernels/layout_cuda.cu" -o "$build/layout_cuda.o"
	for prog in test-gpu-layout bench-gpu; do
		# shellcheck disable=SC2086
		"$NVCC" -std=c++17 -O2 $gencode -Xcompiler=-Wall,-Wextra \
			-I"$root/client" -I"$root/kernels" \
			"$here/$prog.cu" "$build/layout_cuda.o" \
			"$build/layout_plan.o" "$build/layout_cpu.o" \
			-o "$build/$prog"
	done
) >"$out/build.log" 2>&1
# Not `if ! ( ... )`: set -e does not apply inside a tested command.
build_rc=$?
if [ $build_rc -ne 0 ]; then
	say "build FAILED; see $out/build.log"
	tail -n 30 "$out/build.log"
	exit 1
fi
say "build ok"

# ---- 2. the whole tree, where its dependencies are installed ---------------
meson_status="not run"
if command -v meson >/dev/null 2>&1 && command -v ninja >/dev/null 2>&1; then
	if meson setup "$build/meson" "$root" -Dcuda=enabled >"$out/meson.log" 2>&1; then
		if ninja -C "$build/meson" >>"$out/meson.log" 2>&1; then
			# test-gpu-layout runs below from the direct build;
			# here the client's CUDA path against a real daemon.
			if meson test -C "$build/meson" --print-errorlogs test-gpu-client >>"$out/meson.log" 2>&1; then
				meson_status="built with -Dcuda=enabled; test-gpu-client passed (or skipped)"
			else
				meson_status="built with -Dcuda=enabled; test-gpu-client FAILED"
			fi
			# transformers on the GPU through the CUDA path, where a
			# Python with torch, transformers and pytest is at hand
			# (KVT_PYTHON, default python3).
			py=${KVT_PYTHON:-python3}
			if "$py" -c 'import torch, transformers, pytest, tokenizers' >/dev/null 2>&1; then
				if KVTIERD="$build/meson/daemon/kvtierd" PYTHONPATH="$build/meson/client/python" \
					"$py" -m pytest -q -p no:cacheprovider -k cuda \
					"$root/tests/engines/test_hf.py" >"$out/engines-gpu.log" 2>&1; then
					meson_status="$meson_status; transformers on CUDA passed"
				else
					meson_status="$meson_status; transformers on CUDA FAILED (engines-gpu.log)"
				fi
			else
				meson_status="$meson_status; transformers on CUDA skipped (no torch/transformers/pytest for $py)"
			fi
			cp "$build/meson/meson-logs/testlog.txt" "$out/meson-testlog.txt" 2>/dev/null
		else
			meson_status="build with -Dcuda=enabled FAILED"
		fi
	else
		meson_status="skipped: meson setup failed (the daemon's -dev packages are probably missing; see meson.log)"
	fi
fi
say "== meson: $meson_status"

# ---- 3. the layout test ----------------------------------------------------
say "== test-gpu-layout"
"$build/test-gpu-layout" >"$out/test-gpu-layout.log" 2>&1
test_rc=$?
tail -n 5 "$out/test-gpu-layout.log" | tee -a "$out/summary.txt"
case $test_rc in
0) say "test-gpu-layout passed" ;;
"$KVT_TEST_SKIP") say "test-gpu-layout skipped" ;;
*) say "test-gpu-layout FAILED (exit $test_rc); see $out/test-gpu-layout.log" ;;
esac

# ---- 4. the benchmark ----------------------------------------------------------
say "== bench-gpu"
"$build/bench-gpu" >"$out/bench-gpu.log" 2>&1
bench_rc=$?
if [ $bench_rc -eq 0 ]; then
	# The table is everything after the benchmark's first blank line.
	sed -n '/^$/,$p' "$out/bench-gpu.log" >"$out/table.txt"
elif [ $bench_rc -eq $KVT_TEST_SKIP ]; then
	cat "$out/bench-gpu.log" >"$out/table.txt"
else
	say "bench-gpu FAILED (exit $bench_rc); see $out/bench-gpu.log"
	tail -n 20 "$out/bench-gpu.log"
fi

case $meson_status in
*FAILED*) meson_failed=1 ;;
*) meson_failed=0 ;;
esac

echo
cat "$out/table.txt" 2>/dev/null
if [ $test_rc -ne 0 ] && [ $test_rc -ne $KVT_TEST_SKIP ]; then
	exit 1
fi
if [ $meson_failed -ne 0 ] || { [ $bench_rc -ne 0 ] && [ $bench_rc -ne $KVT_TEST_SKIP ]; }; then
	exit 1
fi
if [ $test_rc -eq $KVT_TEST_SKIP ]; then
	exit $KVT_TEST_SKIP
fi
exit 0
