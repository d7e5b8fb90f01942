#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# Build kvtier's Debian packages from this checkout (docs/packaging.md):
# kvtierd, kvtier-tools, libkvtier-client0 and libkvtier-client-dev, with
# their -dbgsym packages, then check them with lintian.
#
# Usage: scripts/packages.sh [OUTDIR]     (default: build/debs)
#
# The tree is copied to OUTDIR/src first (what git tracks, and files it does
# not ignore), so that the build leaves the checkout as it was.  The build
# dependencies are debian/control's Build-Depends (as root: apt-get build-dep
# ./ installs them).  DEB_BUILD_OPTIONS defaults to "nocheck parallel=2": the
# test suites run from the source tree (scripts/test.sh); set it to
# "parallel=2" to run the unit suites inside the package build too.
# Ends with the .deb files in OUTDIR and lintian's report in
# OUTDIR/lintian.txt; fails on a lintian error.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$src/build/debs}
mkdir -p "$out"
out=$(cd "$out" && pwd)

for tool in dpkg-buildpackage dh lintian; do
	if ! command -v "$tool" >/dev/null 2>&1; then
		echo "kvtier: $tool is missing: apt-get install dpkg-dev debhelper lintian" >&2
		exit 1
	fi
done

version=$(dpkg-parsechangelog -l "$src/debian/changelog" -S Version)
rm -rf "$out/src"
mkdir -p "$out/src/kvtier-$version"
if git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
	(cd "$src" && git ls-files -z --cached --others --exclude-standard |
		tar --null -cf - -T -) | tar -xf - -C "$out/src/kvtier-$version"
else
	(cd "$src" && tar --exclude='./build*' --exclude='./obj-*' -cf - .) |
		tar -xf - -C "$out/src/kvtier-$version"
fi

# The previous build's files go, so that OUTDIR holds exactly this one.
rm -f "$out"/*.deb "$out"/*.changes "$out"/*.buildinfo "$out/lintian.txt"
nocheck=
case " ${DEB_BUILD_OPTIONS:=nocheck parallel=2} " in
*" nocheck "*) nocheck=-Pnocheck ;;
esac
export DEB_BUILD_OPTIONS
echo "kvtier: building the packages of $version in $out/src (DEB_BUILD_OPTIONS=$DEB_BUILD_OPTIONS)" >&2
if ! (cd "$out/src/kvtier-$version" && dpkg-buildpackage -b -us -uc $nocheck) \
	>"$out/build.log" 2>&1; then
	tail -n 40 "$out/build.log" >&2
	echo "kvtier: dpkg-buildpackage failed; the whole log is $out/build.log" >&2
	exit 1
fi
mv "$out/src"/*.deb "$out/src"/*.changes "$out/src"/*.buildinfo "$out/"

# Errors fail the build; warnings and the rest are listed.  Running as root
# is fine for reading packages: lintian's notice about it is dropped.
changes=$(ls "$out"/kvtier_"$version"_*.changes)
status=0
lintian --fail-on error --display-info "$changes" >"$out/lintian.txt" 2>&1 || status=$?
grep -v 'running with root privileges is not recommended' "$out/lintian.txt" |
	grep -E '^[EWI]:' >&2 || true
if [ "$status" -ne 0 ]; then
	echo "kvtier: lintian reports errors ($out/lintian.txt)" >&2
	exit 1
fi
ls -1 "$out"/*.deb
