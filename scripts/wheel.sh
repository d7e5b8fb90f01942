#!/bin/sh
# The wheel of the Python package kvtier, built the way a release builds
# it: `python -m build --wheel` with the build tools pinned in
# scripts/wheel-requirements.txt (in a venv of their own), then
# `auditwheel repair` (a manylinux wheel that carries what the extension
# needs beyond the manylinux libraries: libcrypto), then abi3audit (the
# extension keeps to CPython's stable ABI), then what the wheel holds: its
# name, files, the libraries the extension needs and its CUDA code
# (cuobjdump --list-elf / --list-ptx).
#
#   ./scripts/wheel.sh [OUT [NAME_FILE]]     (OUT: build/wheel by default)
#
# OUT/kvtier-VERSION-cp311-abi3-manylinux_*.whl is the wheel (earlier ones
# there are removed), OUT/listing.txt what it holds, NAME_FILE (if given)
# the wheel's path.  meson's build folder (OUT/meson) is kept: a second run
# rebuilds what changed (a release starts from an empty OUT).  The CUDA kernels and the CUDA path are in the
# wheel whenever nvcc is found (on PATH, else in $CUDA_PATH/bin,
# $CUDA_HOME/bin or /usr/local/cuda/bin); the listing says when they are
# not.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$top/build/wheel}
name_file=${2:-}
mkdir -p "$out"
out=$(cd "$out" && pwd)
case $name_file in
"" | /*) ;;
*) name_file=$(pwd)/$name_file ;;
esac
cd "$top"
t0=$(date +%s)

# The tools, reused while the pins are unchanged (as scripts/venv.sh).
tools=$out/tools
req=scripts/wheel-requirements.txt
if ! [ -x "$tools/bin/python" ] || ! cmp -s "$req" "$tools/.kvtier-requirements"; then
	echo "wheel.sh: installing the build tools into $tools"
	rm -rf "$tools"
	python3 -m venv "$tools"
	"$tools/bin/pip" install -q --disable-pip-version-check --no-deps -r "$req"
	cp "$req" "$tools/.kvtier-requirements"
fi
PATH=$tools/bin:$PATH
if ! command -v nvcc >/dev/null 2>&1; then
	for d in ${CUDA_PATH:+"$CUDA_PATH/bin"} ${CUDA_HOME:+"$CUDA_HOME/bin"} /usr/local/cuda/bin; do
		if [ -x "$d/nvcc" ]; then
			PATH=$PATH:$d
			break
		fi
	done
fi
export PATH

rm -rf "$out/dist" "$out/repaired"
python -m build --wheel --no-isolation --outdir "$out/dist" -Cbuild-dir="$out/meson" "$top"
rm -f "$out"/kvtier-*.whl
auditwheel repair --wheel-dir "$out/repaired" "$out"/dist/kvtier-*.whl
mv "$out"/repaired/kvtier-*.whl "$out/"
rmdir "$out/repaired"
wheel=$(ls "$out"/kvtier-*.whl)
abi3audit --strict --summary "$wheel"

# What the wheel holds.
x=$out/unpacked
rm -rf "$x"
mkdir "$x"
python -m zipfile -e "$wheel" "$x"
so=$(ls "$x"/kvtier/_kvtier*.so)
cuobjdump=$(ls "$tools"/lib/python*/site-packages/nvidia/*/bin/cuobjdump)
{
	echo "wheel: $(basename "$wheel"), $(wc -c <"$wheel") bytes"
	python -m zipfile -l "$wheel"
	echo "the extension needs:"
	readelf -d "$so" | sed -n 's/.*(\(NEEDED\|RPATH\|RUNPATH\)) *\(.*\)/  \1 \2/p'
	if "$cuobjdump" --list-elf "$so" >"$x/elf.txt" 2>&1; then
		echo "CUDA code (cuobjdump --list-elf, --list-ptx):"
		sed 's/^/  /' "$x/elf.txt"
		"$cuobjdump" --list-ptx "$so" | sed 's/^/  /'
	else
		echo "CUDA code: none (built without nvcc: the wheel has no CUDA path)"
	fi
} >"$out/listing.txt"
cat "$out/listing.txt"
rm -rf "$x"
[ -z "$name_file" ] || echo "$wheel" >"$name_file"
echo "wheel.sh: $wheel in $(($(date +%s) - t0)) s"
