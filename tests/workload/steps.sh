# SPDX-License-Identifier: Apache-2.0
# What the workload tests share, sourced by each: a scratch directory
# removed at exit, and fail, which names the test.
name=$(basename "$0" .sh)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

fail() {
	echo "$name: $*" >&2
	exit 1
}
