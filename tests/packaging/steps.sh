# SPDX-License-Identifier: Apache-2.0
#
# Sourced by test-packages.sh and test-kube.sh: how they skip (77, with the
# reason), fail and name their steps (each with the time the one before
# took), and what both need to run at all.  Functions only.

KVT_TEST_SKIP=77

skip() {
	echo "SKIP: $*"
	exit $KVT_TEST_SKIP
}
fail() {
	echo "FAIL: $*"
	exit 1
}
step() {
	now=$(date +%s)
	[ -n "${t_step:-}" ] && echo "   ($((now - t_step)) s)"
	t_step=$now
	echo "== $*"
}

# kvt_test_needs [TOOL...]: root, podman able to run, and the tools that
# build the packages and the image, with TOOL... besides; skips without.
kvt_test_needs() {
	[ "$(id -u)" -eq 0 ] || skip "needs root (podman and mmdebstrap as root; scripts/deps.sh installs them)"
	for tool in podman mmdebstrap runc dpkg-buildpackage dh lintian flock "$@"; do
		command -v "$tool" >/dev/null 2>&1 ||
			skip "$tool is not installed (scripts/deps.sh installs podman mmdebstrap runc debhelper lintian)"
	done
}
