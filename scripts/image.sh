#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# The container image of kvtierd (docs/packaging.md), from the Debian
# packages that scripts/packages.sh builds and the Debian archive alone:
# mmdebstrap makes a Debian 12 root file system with the packages' run-time
# dependencies (no registry is involved), podman installs kvtierd,
# kvtier-tools and libkvtier-client0 into it with dpkg and commits the
# result.
#
# Usage: scripts/image.sh [DEBDIR [IMAGE]]
#   DEBDIR  where the .deb files are (default: build/debs); the root file
#           system's tarball is kept in DEBDIR/rootfs for the next build
#   IMAGE   the image's name (default: localhost/kvtierd:VERSION)
#
# The image runs the daemon, not an init system: as the user kvtierd, on
# the socket /run/kvtierd/kvtierd.sock (mount a directory there to share it
# with clients in other containers, with :U or chown to the image's kvtierd
# uid), reading /etc/kvtierd/kvtierd.conf (mount your own over it); spill
# files may go to /var/cache/kvtierd.  Arguments given to `podman run` after
# the image name are passed to kvtierd.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
. "$src/scripts/containers.sh"
debs=${1:-$src/build/debs}
image=${2:-}

daemon=
for f in "$debs"/kvtierd_*.deb; do
	[ -f "$f" ] && daemon=$f
done
if [ -z "$daemon" ]; then
	echo "kvtier: no kvtierd_*.deb in $debs: run scripts/packages.sh first" >&2
	exit 1
fi
version=$(dpkg-deb -f "$daemon" Version)
arch=$(dpkg-deb -f "$daemon" Architecture)
image=${image:-localhost/kvtierd:$version}
files="libkvtier-client0_${version}_$arch.deb kvtier-tools_${version}_$arch.deb kvtierd_${version}_$arch.deb"
paths=
for f in $files; do
	if [ ! -f "$debs/$f" ]; then
		echo "kvtier: $debs/$f is missing: run scripts/packages.sh first" >&2
		exit 1
	fi
	paths="$paths $debs/$f"
done

# Their dependencies, from the archive.  No systemd: postinst creates the
# user and the group with the standalone systemd-sysusers, the other
# alternative that kvtierd's Depends names.
# shellcheck disable=SC2086
deps=$(kvt_deb_deps $paths | sed 's/^systemd$/systemd-standalone-sysusers/' | paste -sd, -)
base=$(kvt_debian_image "$debs/rootfs" essential "$deps" lean)

# Installed with dpkg, from the files alone: every dependency is in the
# base already.  The directories systemd would make for the unit
# (RuntimeDirectory=, StateDirectory=, CacheDirectory=) are made here.
name=kvtier-image-$$
# shellcheck disable=SC2046
kvt_podman run --name "$name" --network none $(kvt_ulimits) -v "$debs:/debs:ro" "$base" \
	sh -ec "
		dpkg -i $(for f in $files; do printf '/debs/%s ' "$f"; done) >/dev/null
		install -d -o kvtierd -g kvtierd -m 0755 /run/kvtierd
		install -d -o kvtierd -g kvtierd -m 0700 /var/lib/kvtierd /var/cache/kvtierd
		rm -rf /var/cache/apt/* /var/lib/apt/lists/* /var/log/*.log
	" || {
	podman rm -f "$name" >/dev/null 2>&1
	exit 1
}
old=$(podman image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)
podman commit -q \
	--change 'USER kvtierd' \
	--change 'WORKDIR /var/lib/kvtierd' \
	--change 'ENTRYPOINT ["/usr/sbin/kvtierd", "--socket", "/run/kvtierd/kvtierd.sock"]' \
	--change 'CMD []' \
	--change 'STOPSIGNAL SIGTERM' \
	--change "LABEL org.opencontainers.image.title=kvtierd org.opencontainers.image.version=$version" \
	"$name" "$image" >/dev/null
podman rm "$name" >/dev/null
# The previous build of this name, now untagged, goes too.
if [ -n "$old" ] && [ "$old" != "$(podman image inspect --format '{{.Id}}' "$image")" ]; then
	podman rmi "$old" >/dev/null 2>&1 || true
fi
echo "$image"
