#!/bin/sh
# Mooncake Store, the peer bench-remote --peer mooncake compares the
# remote tier with: its CPU-only wheel (mooncake_master and the Python
# client), pinned, in a virtual environment inside the build directory.
#   scripts/mooncake-venv.sh BUILD_DIR     (makes BUILD_DIR/venv-mooncake)
set -eu
version=0.3.13.post1
venv="${1:?usage: mooncake-venv.sh BUILD_DIR}/venv-mooncake"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q "mooncake-transfer-engine-non-cuda==$version"
