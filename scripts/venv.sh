#!/bin/sh
# The Python venv of the engine tests (transformers, vLLM on the CPU, torch):
# every package at the version tests/engines/requirements.txt pins, installed
# with uv and --no-deps, so that nothing is resolved anew.  Reused while the
# pin list is unchanged.  ~6 GB (torch from PyPI is the CUDA build; it runs
# on the CPU).
#   ./scripts/venv.sh DIR     (scripts/test.sh uses build/venv)
set -eu
cd "$(dirname "$0")/.."
dir=${1:?usage: venv.sh DIR}
req=tests/engines/requirements.txt
stamp="$dir/.kvtier-requirements"
if ! [ -x "$dir/bin/python" ] || ! cmp -s "$req" "$stamp"; then
	echo "venv.sh: installing the engine test packages into $dir (several minutes the first time)"
	rm -rf "$dir"
	python3 -m venv "$dir"
	"$dir/bin/pip" install -q uv==0.13.8
	"$dir/bin/uv" pip install --python "$dir/bin/python" --no-deps -q -r "$req"
	cp "$req" "$stamp"
fi
# The Python source of the vLLM release pyproject.toml's vllm extra names
# (its GPU build, which does not import without a GPU), in DIR/vllm-extra:
# test_extras.py checks the connector against its API.
pin=$(python3 -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["vllm"])')
if [ "$(cat "$dir/vllm-extra/.pin" 2>/dev/null)" != "$pin" ]; then
	rm -rf "$dir/vllm-extra"
	mkdir -p "$dir/vllm-extra"
	"$dir/bin/pip" download -q --no-deps --only-binary=:all: -d "$dir/vllm-extra" "$pin"
	python3 -c 'import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
z.extractall(sys.argv[2], [n for n in z.namelist() if n.endswith(".py")])' "$dir"/vllm-extra/vllm-*.whl "$dir/vllm-extra"
	rm -f "$dir"/vllm-extra/vllm-*.whl
	echo "$pin" >"$dir/vllm-extra/.pin"
fi
