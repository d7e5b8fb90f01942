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
if [ -x "$dir/bin/python" ] && cmp -s "$req" "$stamp"; then
	exit 0
fi
echo "venv.sh: installing the engine test packages into $dir (several minutes the first time)"
rm -rf "$dir"
python3 -m venv "$dir"
"$dir/bin/pip" install -q uv==0.13.8
"$dir/bin/uv" pip install --python "$dir/bin/python" --no-deps -q -r "$req"
cp "$req" "$stamp"
