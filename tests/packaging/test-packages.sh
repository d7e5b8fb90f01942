#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# The Debian packages and the container image, built and run for real
# (docs/packaging.md):
#
#  1. scripts/packages.sh builds the packages from this tree (lintian
#     without errors);
#  2. a Debian 12 container with systemd as PID 1 (mmdebstrap, podman)
#     installs them with apt, and in-systemd.sh checks the units under a real
#     systemd: start, kvtierctl status as root and as a member of kvtier,
#     socket activation, reload, restart after SIGKILL, the sandbox in
#     force, the scrape endpoint through its drop-in, and apt-get purge
#     leaving nothing behind;
#  3. scripts/image.sh's kvtierd image (built in step 1, with the
#     packages, once per tree for this test and test-kube.sh), a daemon container
#     serves clients in other containers through a shared socket directory:
#     kvt-engine stores a prefix's blocks from one container, kvt-engine in
#     another loads them and checks every byte, kvtierctl in a third answers,
#     and a fourth in the daemon's network namespace (as a pod's containers
#     share one) scrapes its metrics endpoint.
#
# Usage: test-packages.sh SOURCE_DIR WORK_DIR KVT_ENGINE
#   WORK_DIR keeps the packages and the root file systems' tarballs between
#   runs (mmdebstrap runs once per set of packages).
# Exit: 0 pass, 1 fail, 77 skipped (with the reason).
set -u

src=${1:?usage: $0 SOURCE_DIR WORK_DIR KVT_ENGINE}
work=${2:?usage: $0 SOURCE_DIR WORK_DIR KVT_ENGINE}
engine=${3:?usage: $0 SOURCE_DIR WORK_DIR KVT_ENGINE}
here=$(cd "$(dirname "$0")" && pwd)
# meson's LD_LIBRARY_PATH names this build's library: not the one the
# package build links against, or the one the containers load.
unset LD_LIBRARY_PATH
. "$src/scripts/containers.sh"
. "$here/image-once.sh"
. "$here/steps.sh"

kvt_test_needs
podman info >/dev/null 2>&1 || skip "podman cannot run here: $(podman info 2>&1 | tail -n 1)"
[ -x "$engine" ] || fail "no kvt-engine at $engine"

mkdir -p "$work"
debs=$work/debs
t0=$(date +%s)
sysd='' daemon=''
cleanup() {
	for c in $sysd $daemon; do
		podman rm -f -t 0 "$c" >/dev/null 2>&1
	done
	[ -n "${sockdir:-}" ] && rm -rf "$sockdir" "$sockdir.conf"
}
trap cleanup EXIT

step "1. packages (scripts/packages.sh $debs) and the kvtierd image (scripts/image.sh)"
# Once per tree for this test and test-kube (image-once.sh).
tag=$(kvt_test_image "$src" "$work") || {
	# The packages built, the image's root file system did not: no archive.
	[ -n "$(ls "$debs"/kvtierd_*.deb 2>/dev/null)" ] &&
		[ -z "$(podman images -q --filter 'reference=localhost/kvtier-debian:essential-*')" ] &&
		skip "mmdebstrap could not make the image's root file system (is the Debian archive reachable?)"
	fail "scripts/packages.sh or scripts/image.sh"
}
for f in "$debs"/*.deb; do
	echo "   $(stat -c %s "$f") $(basename "$f")"
done

step "2. the packages under systemd as PID 1"
set -- "$debs"/kvtierd_*.deb "$debs"/kvtier-tools_*.deb "$debs"/libkvtier-client0_*.deb \
	"$debs"/libkvtier-client-dev_*.deb
deps=$(kvt_deb_deps "$@" | paste -sd, -)
base=$(kvt_debian_image "$debs/rootfs" apt "systemd,systemd-sysv,$deps")
case $? in
0) ;;
2) skip "mmdebstrap could not make a Debian 12 root file system (is the Debian archive reachable?)" ;;
*) fail "could not make the systemd image" ;;
esac
sysd=kvt-systemd-$$
# CAP_SYS_ADMIN: without it systemd cannot make the unit's namespaces and
# runs the daemon without the mount sandbox ("assuming containerized
# execution"); with it the sandbox is what a host gives.  No network: the
# image holds every dependency.
# shellcheck disable=SC2046
kvt_podman run -d --name "$sysd" $(kvt_ulimits) --systemd=always --cap-add SYS_ADMIN \
	--network none -v "$debs:/debs:ro" -v "$here/in-systemd.sh:/in-systemd.sh:ro" \
	-v "$engine:/usr/local/bin/kvt-engine:ro" \
	"$base" /sbin/init >/dev/null || fail "podman run of $base with systemd"
podman exec "$sysd" sh /in-systemd.sh install || fail "install under systemd"
# The mount sandbox, read where /proc/PID/ns of another user can be.
pid=$(podman exec "$sysd" systemctl show -p MainPID --value kvtierd.service)
if [ "$pid" != 0 ]; then
	sandbox=$(podman exec --privileged "$sysd" sh -c "
		[ \"\$(readlink /proc/$pid/ns/mnt)\" != \"\$(readlink /proc/1/ns/mnt)\" ] || exit 1
		awk '\$5 == \"/\" { print \$6 }' /proc/$pid/mountinfo")
	case $sandbox in
	ro,* | ro) echo "ok: the daemon has its own mount namespace with / read-only (ProtectSystem=strict)" ;;
	*) fail "the daemon's mount sandbox is not in force (root: '$sandbox')" ;;
	esac
fi
podman exec "$sysd" sh /in-systemd.sh serve || {
	podman exec "$sysd" journalctl -u kvtierd --no-pager -n 30
	fail "serving under systemd"
}
podman exec "$sysd" sh /in-systemd.sh keep || {
	podman exec "$sysd" journalctl -u kvtierd --no-pager -n 30
	fail "the host tier across restarts under systemd"
}
podman exec "$sysd" sh /in-systemd.sh purge || fail "purge under systemd"
podman rm -f -t 0 "$sysd" >/dev/null
sysd=

step "3. the kvtierd image, clients in other containers"
podman image inspect --format '   {{.Size}} bytes, user {{.Config.User}}, entrypoint {{.Config.Entrypoint}}' "$tag"
sockdir=$(mktemp -d "$work/sock-XXXXXX")
daemon=kvt-daemon-$$
# :U gives the directory to the image's kvtierd user.  The pool is small:
# what a test needs, whatever the host has.
cat >"$sockdir.conf" <<EOF
[pool]
capacity = 64M
extent_size = 16M
[metrics]
listen = 127.0.0.1:9464
EOF
# shellcheck disable=SC2046
kvt_podman run -d --name "$daemon" $(kvt_ulimits) --network none \
	-v "$sockdir:/run/kvtierd:U" -v "$sockdir.conf:/etc/kvtierd/kvtierd.conf:ro" \
	"$tag" >/dev/null || fail "podman run of the image"
until [ -S "$sockdir/kvtierd.sock" ]; do
	[ "$(podman inspect -f '{{.State.Running}}' "$daemon")" = true ] || {
		podman logs "$daemon"
		fail "the daemon's container stopped"
	}
	sleep 0.1
done
podman logs "$daemon" 2>&1 | grep -q 'capacity 64 MiB' || {
	podman logs "$daemon"
	fail "the daemon did not read the mounted configuration"
}
echo "ok: the daemon's container listens on $sockdir/kvtierd.sock, configured by a mounted file"
# A client container: the same image, kvt-engine from the build tree (the
# image's libkvtier-client0 serves it), in the daemon's pid namespace, since
# the daemon tells clients apart by the pid SO_PEERCRED reports (0 for a
# process in a namespace it cannot see: docs/packaging.md).
client() {
	entry=$1
	shift
	# shellcheck disable=SC2046
	kvt_podman run --rm $(kvt_ulimits) --network none --pid "container:$daemon" \
		-v "$sockdir:/run/kvtierd" -v "$engine:/usr/local/bin/kvt-engine:ro" \
		--user root --entrypoint "$entry" "$tag" "$@"
}
out=$(client kvt-engine --socket /run/kvtierd/kvtierd.sock --model tiny --prefix 256 \
	--suffix 0 --name store 2>&1) || fail "kvt-engine store: $out"
echo "$out" | grep -q '16 computed, 16 stored; every loaded byte verified' || fail "kvt-engine store: $out"
echo "ok: $out"
out=$(client kvt-engine --socket /run/kvtierd/kvtierd.sock --model tiny --prefix 256 \
	--suffix 0 --no-store --expect-hits 16 --name load 2>&1) || fail "kvt-engine load: $out"
echo "$out" | grep -q '16 leading hits reused.*every loaded byte verified' || fail "kvt-engine load: $out"
echo "ok: $out"
out=$(client kvtierctl --socket /run/kvtierd/kvtierd.sock status 2>&1) || fail "kvtierctl status: $out"
echo "$out" | grep -q '^Daemon: *kvtierd .*, pid 1$' || fail "kvtierctl status: $out"
echo "$out" | grep -q '^Contents: *tenants 1, namespaces 1, blocks 16,' || fail "kvtierctl status: $out"
echo "ok: kvtierctl status from another container: $(echo "$out" | grep '^Contents:')"
# The scrape endpoint from another container in the daemon's network
# namespace, as a pod's containers share one: the series kvtierctl metrics
# names, and the 16 blocks stored (bash's /dev/tcp: no HTTP client in the
# image).
# shellcheck disable=SC2046
out=$(kvt_podman run --rm $(kvt_ulimits) --network "container:$daemon" --user root \
	--entrypoint bash "$tag" -c 'exec 3<>/dev/tcp/127.0.0.1/9464 &&
		printf "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n" >&3 && cat <&3' | tr -d '\r') ||
	fail "GET /metrics from another container"
echo "$out" | head -n 1 | grep -q '^HTTP/1.[01] 200' || fail "GET /metrics: $(echo "$out" | head -n 1)"
echo "$out" | grep -q '^kvtier_namespace_stores_total{.*} 16$' || fail "GET /metrics: no 16 blocks stored in $(echo "$out" | grep stores_total)"
a=$(echo "$out" | grep '^kvtier_' | sed 's/[{ ].*//' | sort -u)
b=$(client kvtierctl --socket /run/kvtierd/kvtierd.sock metrics | grep '^kvtier_' | sed 's/[{ ].*//' | sort -u)
[ -n "$a" ] && [ "$a" = "$b" ] || fail "the endpoint's series differ from kvtierctl metrics': $(echo "$a" | wc -l) and $(echo "$b" | wc -l)"
echo "ok: GET /metrics from a container in the daemon's network namespace: $(echo "$a" | wc -l) series, kvtierctl metrics' own, 16 blocks stored"
podman stop -t 10 "$daemon" >/dev/null
podman logs "$daemon" 2>&1 | tail -n 1 | sed 's/^/   last log line: /'
step "done in $(($(date +%s) - t0)) s"
exit 0
