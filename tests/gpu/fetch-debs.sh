#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
#
# Fetches, on a machine with the package registry (Debian 12), the .deb
# files the daemon's build needs on a GPU machine that has nvcc, meson and
# ninja but no -dev packages and no registry: tests/gpu/run.sh unpacks them
# there with `dpkg -x` (or ar and tar) into a private root and builds the
# whole tree against it.
#
# With them, pytest's wheels (pinned as in tests/engines/requirements.txt)
# in DIR/py, for a GPU machine whose Python has torch but not pytest.
#
# Usage: tests/gpu/fetch-debs.sh [DIR]    (default: tests/gpu/debs, which
# git ignores; carry it to the GPU machine with the tree, ~7 MiB)
set -eu -o pipefail

here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-$here/debs}
# The daemon's dependencies (meson.build), their runtime libraries, and
# pkgconf for a machine without pkg-config.
pkgs="liburing-dev liburing2 libnuma-dev libnuma1 libsystemd-dev libsystemd0
libinih-dev libinih1 libxxhash-dev libxxhash0 libssl-dev libssl3
libsmartcols-dev libsmartcols1 libmicrohttpd-dev libmicrohttpd12 libgnutls30
pkgconf pkgconf-bin libpkgconf3"

mkdir -p "$dir"
cd "$dir"
# shellcheck disable=SC2086
apt-get download $pkgs
reqs=$here/../engines/requirements.txt
py=${PYTHON:-python3}
# shellcheck disable=SC2046
"$py" -m pip download --no-deps --only-binary=:all: -d "$dir/py" \
	$(grep -E '^(pytest|pluggy|iniconfig|packaging)==' "$reqs")
ls -l "$dir"
