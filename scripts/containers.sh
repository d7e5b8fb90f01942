# SPDX-License-Identifier: Apache-2.0
#
# Sourced by scripts/image.sh and tests/packaging/test-packages.sh: how to
# run podman here, and Debian 12 images made from the Debian archive with
# mmdebstrap (no registry).  Functions only; nothing runs when sourced.

# podman with runc where it is installed: crun, podman's default elsewhere,
# refuses cgroup v1 hosts ("cgroups in hybrid mode not supported").
kvt_podman() {
	if command -v runc >/dev/null 2>&1; then
		podman --runtime runc "$@"
	else
		podman "$@"
	fi
}

# Options for `podman run`: open files and processes in the container
# limited to what a daemon and its tests need (16384, 4096) or this host's
# hard limit if lower, since podman's defaults may exceed what the host lets
# it set ("setrlimit: Operation not permitted").
kvt_ulimits() {
	awk '/^Max open files/ { n = $5 } /^Max processes/ { u = $4 }
		END {
			if (n == "unlimited" || n > 16384) n = 16384
			if (u == "unlimited" || u > 4096) u = 4096
			printf "--ulimit nofile=%d:%d --ulimit nproc=%d:%d\n", n, n, u, u
		}' /proc/self/limits
}

# The packages that .deb files depend on, one per line, sorted: the first
# of each set of alternatives, without versions, less the files' own
# packages.
kvt_deb_deps() {
	own=$(for d in "$@"; do dpkg-deb -f "$d" Package; done)
	for d in "$@"; do
		dpkg-deb -f "$d" Pre-Depends
		dpkg-deb -f "$d" Depends
	done | tr ',' '\n' | sed -e 's/|.*//' -e 's/(.*)//' -e 's/:any//' -e 's/[[:space:]]//g' |
		grep -v '^$' | sort -u | grep -vxF "$own" || true
}

# kvt_debian_image CACHEDIR VARIANT PACKAGES [lean]: prints the name of a
# podman image of Debian 12 (mmdebstrap's VARIANT, with PACKAGES, a
# comma-separated list), made once for each set of packages: the image, or
# the root file system's tarball in CACHEDIR, is reused when it exists.
# "lean": without documentation, manual pages and translations (dpkg leaves
# them out of every package installed later too), copyright files kept.
# Returns 2 when mmdebstrap fails (no archive reachable, typically), with
# its log's end on stderr.
kvt_debian_image() {
	cache=$1 variant=$2 pkgs=$3 lean=${4:-}
	key=$(printf '%s\n' bookworm merged-usr "$variant" "$pkgs" "$lean" | sha256sum | cut -c1-12)
	image=localhost/kvtier-debian:$variant-$key
	if podman image exists "$image"; then
		echo "$image"
		return 0
	fi
	mkdir -p "$cache"
	tar=$cache/debian-$variant-$key.tar
	if [ ! -s "$tar" ]; then
		echo "kvtier: mmdebstrap --variant=$variant bookworm with $pkgs" >&2
		# The merged-usr hook merges /usr as debootstrap does; without it
		# init-system-helpers (which procps needs) pulls in usrmerge, and
		# usrmerge perl (47 MB).
		set --
		if [ "$lean" = lean ]; then
			set -- --dpkgopt='path-exclude=/usr/share/doc/*' \
				--dpkgopt='path-include=/usr/share/doc/*/copyright' \
				--dpkgopt='path-exclude=/usr/share/man/*' \
				--dpkgopt='path-exclude=/usr/share/info/*' \
				--dpkgopt='path-exclude=/usr/share/locale/*' \
				--dpkgopt='path-include=/usr/share/locale/locale.alias'
		fi
		if ! mmdebstrap --variant="$variant" --include="$pkgs" "$@" \
			--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr bookworm \
			"$cache/partial-$key.tar" >"$cache/debian-$variant-$key.log" 2>&1; then
			tail -n 20 "$cache/debian-$variant-$key.log" >&2
			rm -f "$cache/partial-$key.tar"
			return 2
		fi
		mv "$cache/partial-$key.tar" "$tar"
	fi
	# An imported image has no PATH of its own.
	podman import -q --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		"$tar" "$image" >/dev/null || return 1
	echo "$image"
}
