#!/bin/sh
# Install what kvtier builds and tests with, from Debian 12 packages.
# Runs as root; a no-op when everything is already there.  The ceph
# packages (~280 MiB, ~30 s) are for the remote tier and its tests; the
# packaging tools and podman (~30 s) for the Debian packages and the
# container image (tests/packaging).
set -eu
pkgs="meson ninja-build gcc pkg-config liburing-dev libnuma-dev libsystemd-dev libinih-dev libssl-dev libsmartcols-dev libxxhash-dev libmicrohttpd-dev python3 python3-dev python3-venv systemd groff-base fio clang libclang-rt-14-dev ceph-mon ceph-mgr ceph-osd ceph-common librados-dev dpkg-dev debhelper lintian podman mmdebstrap uidmap runc"
missing=""
for p in $pkgs; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "kvtier: missing packages:$missing; run as root or: sudo apt-get install$missing" >&2
		exit 1
	fi
	echo "kvtier: installing$missing" >&2
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
