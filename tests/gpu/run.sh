#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
#
# Every GPU check of kvtier's data path, in one run of at most 8 minutes
# on one GPU (KVT_GPU_LIMIT_S, default 470 s, bounds the whole run; each
# step has its own limit within it):
#
#   build     kernels/*.cu, kernels/layout_plan.c, layout_cpu.c, codec_cpu.c,
#             tests/gpu/test-gpu-layout, bench-gpu, gpu-probe and
#             tests/unit/test-codec-tile (the codec kernels on the host) with nvcc
#             alone, and the CPU unit tests of the planning and of the
#             registration bookkeeping with cc: none of the daemon's
#             dependencies needed;
#   unit      test-cuda-plan, test-cuda-regtab, test-codec-tile (CPU);
#   probe     no GPU (the GPU steps are skipped: exit 77) told apart from a
#             driver older than the runtime or any other CUDA error (a
#             failure), and the device named;
#   layout    test-gpu-layout: every layout against the CPU path, by the
#             kernel (whole grid and a budget of 3 CTAs) and the copy
#             engines, with blocks in device memory, cudaHostAlloc memory
#             and a cudaHostRegister'ed memfd, and 70,000 blocks;
#   bench     bench-gpu: bandwidth of each path against cudaMemcpyAsync
#             from 64 KiB to 4 MiB blocks, overlap beside compute on every
#             SM, prefetch after the caller's event (figures.txt);
#   memcheck  compute-sanitizer --tool memcheck on the reduced sweep;
#   e2e       the whole tree with -Dcuda=enabled, and test-gpu-client and
#             test-gpu-groups: the client's CUDA path against a real
#             kvtierd (every copy path, the submit options, two contexts,
#             layer groups of different geometry), and test-gpu-codec:
#             fp8-e4m3 and int4 namespaces stored and loaded by the codec
#             kernels, against the CPU path's bytes.  Where the daemon's -dev packages are missing, the
#             .deb files in tests/gpu/debs (or $KVT_DEBS), fetched on a
#             machine with the registry by tests/gpu/fetch-debs.sh, are
#             unpacked into a private root with `dpkg -x` and built
#             against (KVT_USE_DEBS=1 uses them even where meson would
#             find the machine's own);
#   wheel     with KVT_WHEEL=FILE (a wheel of scripts/wheel.sh, carried
#             here), that wheel unpacked for KVT_PYTHON: it imports, has
#             the CUDA path, and cuda_unavailable() finds nothing missing
#             on this GPU; the hf and vllm steps then import it instead
#             of the tree's build;
#   hf        where a Python with torch, transformers and pytest is found
#             (KVT_PYTHON), tests/engines/test_hf.py's CUDA cases through
#             the library's CUDA path;
#   vllm      tests/engines/test_vllm_gpu.py: CUDA tensors shaped and
#             strided exactly as vLLM 0.32 allocates them for its GPU
#             backends (every layout order, kernel split and dtype, from
#             a record made on the CPU), stored and loaded through the
#             CUDA path and compared byte for byte with the backend's
#             own K/V split.
#
# Usage: [KVT_WHEEL=kvtier-*.whl] tests/gpu/run.sh OUTDIR
# OUTDIR gets summary.txt first (a line per step as it ends, so a run cut
# short still reports), a log per step, figures.txt and table.txt.
# Exit status: 0 passed, 1 a step failed or ran out of time, 77 no GPU
# (the CPU steps passed).

# The step functions run through `bash -c` (exported), not inline.
# shellcheck disable=SC2317
set -u -o pipefail

KVT_TEST_SKIP=77
LIMIT=${KVT_GPU_LIMIT_S:-470}

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
if [ $# -ne 1 ]; then
	echo "usage: $0 OUTDIR" >&2
	exit 2
fi
mkdir -p "$1" || exit 1
out=$(cd "$1" && pwd)
build=$(mktemp -d "${TMPDIR:-/tmp}/kvtier-gpu-build.XXXXXX") || exit 1
trap 'rm -rf "$build"' EXIT
t0=$(date +%s)
failed=0
gpu=0

NVCC=${NVCC:-nvcc}
CC=${CC:-cc}
# The direct build's architectures: the lent machines' (sm_80, sm_90; PTX
# for newer ones), fewer than meson's (meson.build: what the wheel ships),
# to keep this step short.
gencode="-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=[sm_90,compute_90]"

summary=$out/summary.txt
say() {
	printf '%s\n' "$*" | tee -a "$summary"
}
left() {
	echo $((LIMIT - ($(date +%s) - t0)))
}

# step NAME CAP CMD...: runs CMD within min(CAP, what is left) seconds,
# its output in OUTDIR/NAME.log, and says how it ended.  Sets step_rc.
step() {
	local name=$1 cap=$2 lim s
	shift 2
	lim=$(left)
	[ "$lim" -gt "$cap" ] && lim=$cap
	if [ "$lim" -le 5 ]; then
		say "$name: not run (the run's ${LIMIT} s are spent)"
		step_rc=124
		failed=1
		return
	fi
	s=$(date +%s)
	# Functions of this script run in a bash of their own (exported).
	if [ "$(type -t "$1")" = function ]; then
		set -- bash -c "$1"
	fi
	timeout -k 10 "$lim" "$@" >"$out/$name.log" 2>&1
	step_rc=$?
	case $step_rc in
	0) say "$name: ok ($(($(date +%s) - s)) s)" ;;
	"$KVT_TEST_SKIP") say "$name: skipped: $(tail -n 1 "$out/$name.log")" ;;
	124 | 137) say "$name: TIMED OUT after $lim s (see $name.log)"; failed=1 ;;
	*) say "$name: FAILED, exit $step_rc (see $name.log)"; failed=1 ;;
	esac
}

: >"$summary"
say "kvtier GPU run: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown), limit $LIMIT s"
command -v nvidia-smi >/dev/null 2>&1 &&
	nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >>"$summary" 2>&1

# ---- build ----------------------------------------------------------------
build_all() {
	set -ex
	"$NVCC" --version
	local cflags="-std=c17 -O2 -Wall -Wextra -D_GNU_SOURCE -I$root/client -I$root/kernels -I$root/proto -I$root/tests/unit"
	# shellcheck disable=SC2086
	"$CC" $cflags -c "$root/kernels/layout_cpu.c" -o "$build/layout_cpu.o"
	# shellcheck disable=SC2086
	"$CC" $cflags -ffp-contract=off -fno-trapping-math \
		-c "$root/kernels/codec_cpu.c" -o "$build/codec_cpu.o"
	# shellcheck disable=SC2086
	"$CC" $cflags -c "$root/kernels/layout_plan.c" -o "$build/layout_plan.o"
	# shellcheck disable=SC2086
	"$CC" $cflags "$root/tests/unit/test-cuda-plan.c" "$build/layout_plan.o" \
		"$build/layout_cpu.o" "$build/codec_cpu.o" "$root/proto/identity.c" \
		"$root/proto/wire.c" -o "$build/test-cuda-plan"
	# shellcheck disable=SC2086
	"$CC" $cflags -pthread "$root/tests/unit/test-cuda-regtab.c" \
		"$root/client/cuda-regtab.c" -o "$build/test-cuda-regtab"
	# shellcheck disable=SC2086
	"$NVCC" -std=c++17 -O2 $gencode -Xcompiler=-Wall,-Wextra \
		-I"$root/client" -I"$root/kernels" -I"$root/proto" \
		-c "$root/kernels/layout_cuda.cu" -o "$build/layout_cuda.o"
	# shellcheck disable=SC2086
	"$NVCC" -std=c++17 -O2 $gencode -Xcompiler=-Wall,-Wextra \
		-I"$root/client" -I"$root/kernels" -I"$root/proto" \
		-c "$root/kernels/codec_cuda.cu" -o "$build/codec_cuda.o"
	# The codec kernels' tile steps on the host, against codec_cpu.c.
	# shellcheck disable=SC2086
	"$NVCC" -std=c++17 -O2 $gencode -Xcompiler=-Wall,-Wextra,-ffp-contract=off \
		-I"$root/client" -I"$root/kernels" -I"$root/proto" -I"$root/tests/unit" \
		"$root/tests/unit/test-codec-tile.cu" "$build/layout_plan.o" \
		"$build/layout_cpu.o" "$build/codec_cpu.o" -o "$build/test-codec-tile"
	# shellcheck disable=SC2086
	"$NVCC" -std=c++17 -O2 $gencode -Xcompiler=-Wall,-Wextra \
		-I"$root/client" -I"$root/kernels" -I"$root/proto" \
		"$here/test-gpu-layout.cu" "$here/layout-case.cu" \
		"$build/layout_cuda.o" "$build/codec_cuda.o" "$build/layout_plan.o" \
		"$build/layout_cpu.o" "$build/codec_cpu.o" -o "$build/test-gpu-layout"
	# shellcheck disable=SC2086
	"$NVCC" -std=c++17 -O2 $gencode -Xcompiler=-Wall,-Wextra \
		-I"$root/client" -I"$root/kernels" -I"$root/proto" \
		"$here/bench-gpu.cu" "$build/layout_cuda.o" "$build/codec_cuda.o" \
		"$build/layout_plan.o" "$build/layout_cpu.o" "$build/codec_cpu.o" \
		-o "$build/bench-gpu"
	"$NVCC" -O2 "$here/gpu-probe.c" -o "$build/gpu-probe"
}
export here root out build NVCC CC gencode
export -f build_all
step build 240 build_all
if [ "$step_rc" -ne 0 ]; then
	tail -n 30 "$out/build.log"
	say "result: FAILED (build)"
	exit 1
fi

# ---- unit -------------------------------------------------------------------
unit() {
	"$build/test-cuda-plan" && "$build/test-cuda-regtab" && "$build/test-codec-tile"
}
export -f unit
step unit 60 unit

# ---- probe ----------------------------------------------------------------
step probe 30 "$build/gpu-probe"
case $step_rc in
0) gpu=1; cat "$out/probe.log" >>"$summary" ;;
"$KVT_TEST_SKIP") gpu=0 ;;
*) gpu=0 ;; # failed already: a driver too old, or another CUDA error
esac

# ---- layout -------------------------------------------------------------
# Without a GPU it still runs its host emulation, and exits 77 after it.
step layout 150 "$build/test-gpu-layout"
[ "$step_rc" -ne "$KVT_TEST_SKIP" ] && tail -n 3 "$out/layout.log" >>"$summary"

if [ "$gpu" -eq 1 ]; then
	# ---- bench ----------------------------------------------------------
	step bench 150 "$build/bench-gpu"
	grep '^FIGURE' "$out/bench.log" | sed 's/^FIGURE //' >"$out/figures.txt"
	grep '^FIGURE \(overlap\|start\|model\)' "$out/bench.log" |
		sed 's/^FIGURE /  /' >>"$summary"
	grep '^FIGURE bw' "$out/bench.log" | sed 's/^FIGURE bw //' >"$out/table.txt"

	# ---- memcheck -------------------------------------------------------
	sanitizer=$(command -v compute-sanitizer ||
		ls "$(dirname "$(command -v "$NVCC")")"/compute-sanitizer 2>/dev/null ||
		ls "$(dirname "$(command -v "$NVCC")")"/../compute-sanitizer/compute-sanitizer 2>/dev/null)
	if [ -n "$sanitizer" ]; then
		step memcheck 150 env KVT_GPU_SWEEP=reduced "$sanitizer" \
			--tool memcheck --error-exitcode 1 "$build/test-gpu-layout"
		tail -n 2 "$out/memcheck.log" >>"$summary"
	else
		say "memcheck: NOT RUN: no compute-sanitizer on PATH or next to $NVCC (counted as a failure: memory safety unproven)"
		failed=1
	fi
fi

# ---- e2e --------------------------------------------------------------------
# The daemon's dependencies from unpacked .deb files, when the machine
# lacks them: a private root that pkg-config (or the unpacked pkgconf)
# resolves every -I and -L into.
sysroot_setup() {
	local debs=${KVT_DEBS:-$here/debs} sys=$build/sysroot d tmp
	ls "$debs"/*.deb >/dev/null 2>&1 || return 1
	mkdir -p "$sys"
	for d in "$debs"/*.deb; do
		if command -v dpkg >/dev/null 2>&1; then
			dpkg -x "$d" "$sys" || return 1
		else
			tmp=$(mktemp -d "$build/deb.XXXXXX")
			(cd "$tmp" && ar x "$d" && tar -xf data.tar.* -C "$sys") || return 1
		fi
	done
	local lib=$sys/usr/lib/x86_64-linux-gnu
	export PKG_CONFIG_SYSROOT_DIR=$sys
	export PKG_CONFIG_LIBDIR=$lib/pkgconfig:$sys/usr/share/pkgconfig
	export LD_LIBRARY_PATH=$lib:$sys/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	export LIBRARY_PATH=$lib${LIBRARY_PATH:+:$LIBRARY_PATH}
	if ! command -v pkg-config >/dev/null 2>&1; then
		printf '[binaries]\npkg-config = '"'%s'"'\n' "$sys/usr/bin/pkgconf" >"$build/native.ini"
		native="--native-file $build/native.ini"
	fi
	echo "dependencies from $debs, unpacked in $sys"
}

e2e() {
	local opts="-Dcuda=enabled -Dpython=auto" native=""
	# shellcheck disable=SC2086
	if [ -n "${KVT_USE_DEBS:-}" ] ||
		! meson setup "$build/meson" "$root" $opts >"$out/e2e-setup.log" 2>&1; then
		echo "meson setup failed with the machine's packages (e2e-setup.log)"
		sysroot_setup || {
			echo "no .deb files in ${KVT_DEBS:-$here/debs}: run tests/gpu/fetch-debs.sh where the registry is, and carry the folder"
			return 1
		}
		rm -rf "$build/meson"
		# shellcheck disable=SC2086
		meson setup "$build/meson" "$root" $opts $native || return 1
	fi
	ninja -C "$build/meson" || return 1
	# test-gpu-layout ran above from the direct build.
	meson test -C "$build/meson" --print-errorlogs test-gpu-client test-gpu-groups \
		test-gpu-codec
	local rc=$?
	cp "$build/meson/meson-logs/testlog.txt" "$out/e2e-testlog.txt" 2>/dev/null
	return "$rc"
}
export -f sysroot_setup e2e
if command -v meson >/dev/null 2>&1 && command -v ninja >/dev/null 2>&1; then
	# Without a GPU test-gpu-client skips, after checking the arguments
	# of every entry point against a real daemon.
	step e2e 240 e2e
	grep -E '^ *[0-9]+/[0-9]+ .*(OK|FAIL|SKIP)' "$out/e2e.log" >>"$summary"
else
	say "e2e: FAILED: meson or ninja missing"
	failed=1
fi

# ---- hf, vllm -------------------------------------------------------------
# tests/engines' Python on the GPU, where KVT_PYTHON (default python3) has
# torch and what the file needs, and the tree was built with its Python
# package; pytest from the carried wheels (tests/gpu/fetch-debs.sh) where
# that Python has none.  py_tests "MODULES" FILE [PYTEST ARGS...]
py_tests() {
	local py=${KVT_PYTHON:-python3} mods=$1 file=$2 w
	shift 2
	if ! "$py" -c 'import pytest' >/dev/null 2>&1; then
		for w in "${KVT_DEBS:-$here/debs}"/py/*.whl; do
			[ -f "$w" ] && "$py" -m zipfile -e "$w" "$build/py" >/dev/null 2>&1
		done
		export PYTHONPATH=$build/py${PYTHONPATH:+:$PYTHONPATH}
	fi
	# The wheel's package when one was given (the wheel step), else the tree's.
	local pkg=$build/meson/client/python
	[ -n "${KVT_WHEEL:-}" ] && pkg=$build/wheel
	if ! "$py" -c "import torch, pytest${mods:+, $mods}" >/dev/null 2>&1 ||
		[ ! -d "$pkg" ]; then
		echo "no torch, pytest${mods:+ and $mods} for $py, or no Python package at $pkg"
		return 77
	fi
	KVTIERD="$build/meson/daemon/kvtierd" PYTHONPATH="$pkg${PYTHONPATH:+:$PYTHONPATH}" \
		"$py" -m pytest -q -p no:cacheprovider -rs "$@" "$root/tests/engines/$file"
}
# The wheel, unpacked as pip would install it, on this GPU.
wheel() {
	local py=${KVT_PYTHON:-python3}
	set -e
	rm -rf "$build/wheel"
	"$py" -m zipfile -e "$KVT_WHEEL" "$build/wheel"
	(cd / && PYTHONPATH="$build/wheel" "$py" -c '
import sys, kvtier
print("kvtier", kvtier.version(), "from", kvtier._kvtier.__file__, "on Python", sys.version.split()[0])
assert kvtier._kvtier.__file__.startswith(sys.argv[1]), "not the wheel package"
assert kvtier.HAVE_CUDA, "the wheel has no CUDA path"
why = kvtier.cuda_unavailable(0)
assert why is None, why
print("the CUDA path can run on device 0")
' "$build/wheel")
}
# transformers through the library's CUDA path.
hf() {
	py_tests transformers test_hf.py -k cuda
}
# The views vLLM allocates for its GPU backends, rebuilt from the record
# made on the CPU (tests/engines/vllm-views.json: vLLM is not needed
# here), through the CUDA path's kernel and copy engines.
vllm() {
	py_tests "" test_vllm_gpu.py
}
if [ "$gpu" -eq 1 ] && [ -n "${KVT_WHEEL:-}" ]; then
	export KVT_WHEEL
	export -f wheel
	step wheel 60 wheel
	tail -n 2 "$out/wheel.log" >>"$summary"
fi
if [ "$gpu" -eq 1 ] && [ -d "$build/meson" ]; then
	export -f py_tests hf vllm
	step hf 120 hf
	step vllm 120 vllm
fi

if [ "$failed" -ne 0 ]; then
	say "result: FAILED ($(($(date +%s) - t0)) s)"
	exit 1
fi
if [ "$gpu" -ne 1 ]; then
	say "result: no GPU; the CPU steps passed ($(($(date +%s) - t0)) s)"
	exit $KVT_TEST_SKIP
fi
say "result: passed ($(($(date +%s) - t0)) s)"
exit 0
