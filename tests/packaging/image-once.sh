# SPDX-License-Identifier: Apache-2.0
#
# Sourced by test-packages.sh and test-kube.sh: the Debian packages of this
# tree and the kvtierd image built from them, once per tree for both tests.
# Functions only; nothing runs when sourced.

# kvt_test_image SOURCE_DIR WORK_DIR: prints the name of the kvtierd image
# (scripts/image.sh) built from the packages of SOURCE_DIR as it is now
# (scripts/packages.sh, into WORK_DIR/debs).  Both are built by whichever
# test comes first, under a lock, and reused by the other while the tree's
# files (what git tracks and what it does not ignore, as packages.sh copies
# them) and DEB_BUILD_OPTIONS stay the same; the image of an earlier tree
# is removed.  The image's name carries WORK_DIR too, so that builds of the
# same tree in other folders, side by side, neither share nor remove it.
# Returns 1 when a build fails, with its messages on stderr.
kvt_test_image() {
	_src=$1 _work=$2
	if git -C "$_src" rev-parse --git-dir >/dev/null 2>&1; then
		_key=$( (cd "$_src" && git ls-files -z --cached --others --exclude-standard |
			xargs -0 sha256sum 2>/dev/null
			echo "${DEB_BUILD_OPTIONS:-}"
			echo "$_work") | sha256sum | cut -c1-12)
	else
		_key=tree-$$
	fi
	_image=localhost/kvtierd-test:$_key
	mkdir -p "$_work"
	(
		flock 9
		if [ "$(cat "$_work/image.key" 2>/dev/null)" = "$_key" ] &&
			podman image exists "$_image" && [ -n "$(ls "$_work"/debs/kvtierd_*.deb 2>/dev/null)" ]; then
			echo "   (the packages and the image of this tree are built already: $_image)" >&2
			exit 0
		fi
		"$_src/scripts/packages.sh" "$_work/debs" >/dev/null || exit 1
		"$_src/scripts/image.sh" "$_work/debs" "$_image" >/dev/null || exit 1
		_old=$(cat "$_work/image.key" 2>/dev/null)
		if [ -n "$_old" ] && [ "$_old" != "$_key" ]; then
			podman rmi "localhost/kvtierd-test:$_old" >/dev/null 2>&1
		fi
		echo "$_key" >"$_work/image.key"
	) 9>"$_work/image.lock" || return 1
	echo "$_image"
}
