#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# deploy/kubernetes/ played with real containers (podman kube play; no
# cluster), as docs/kubernetes.md describes:
#
#  1. the DaemonSet kvtierd's pod template, played as a Pod with the
#     ConfigMap kvtierd-config (sizes made small: kube-pods.py), on the
#     kvtierd image test-packages builds (the same one: image-once.sh): its
#     init container owns the host directories, the daemon serves the
#     tenant sockets it made in them and has made its spill file;
#  2. two engine pods from vllm-engine.yaml's pod template, each in its own
#     pid and user namespace (hostUsers: false: host-mapped ids, through
#     the tenant's 0666 socket), their only host path the tenant's socket
#     directory:
#     kvt-engine (the build's, served by the image's libkvtier-client0)
#     stores a 256-token prefix as root with no capabilities, the second,
#     as uid 1000, finds the 16 blocks and loads them, every byte checked;
#  3. kvtierctl in the daemon's pod shows the tenant, its namespace and
#     the 16 blocks;
#  4. the daemon pod replaced by a new one (old one down first, as the
#     DaemonSet's rolling update does), under an engine pod started
#     before: kvt-engine in it reaches the new daemon through the socket
#     directory it mounted before, which recovered its spill file and
#     started with an empty host tier; podman kube down removes every pod.
#
# Usage: test-kube.sh SOURCE_DIR WORK_DIR KVT_ENGINE
# Environment:
#   KVT_KUBE_HOSTPID=1  the daemon and the engines in the host's pid
#                       namespace (hostPID: true) instead of their own
#   KVT_KUBE_HOSTUSERS=1  the engine pods in the host's user namespace
#                       (hostUsers removed) instead of their own
#                       (vllm-engine.yaml's hostUsers: false)
# Exit: 0 pass, 1 fail, 77 skipped (with the reason).
set -u

src=${1:?usage: $0 SOURCE_DIR WORK_DIR KVT_ENGINE}
work=${2:?usage: $0 SOURCE_DIR WORK_DIR KVT_ENGINE}
engine=${3:?usage: $0 SOURCE_DIR WORK_DIR KVT_ENGINE}
here=$(cd "$(dirname "$0")" && pwd)
unset LD_LIBRARY_PATH
. "$src/scripts/containers.sh"
. "$here/image-once.sh"
. "$here/steps.sh"

kvt_test_needs python3
python3 -c 'import yaml' 2>/dev/null || skip "python3-yaml is not installed (apt-get install python3-yaml)"
podman info >/dev/null 2>&1 || skip "podman cannot run here: $(podman info 2>&1 | tail -n 1)"
[ -x "$engine" ] || fail "no kvt-engine at $engine"
engine=$(cd "$(dirname "$engine")" && pwd)/$(basename "$engine")
mkdir -p "$work"
work=$(cd "$work" && pwd)
t0=$(date +%s)

step "1. the kvtierd image (built once per tree with test-packages: image-once.sh)"
image=$(kvt_test_image "$src" "$work") || {
	# The packages built, their root file system did not: no archive.
	[ -n "$(ls "$work"/debs/kvtierd_*.deb 2>/dev/null)" ] &&
		[ -z "$(podman images -q --filter 'reference=localhost/kvtier-debian:essential-*')" ] &&
		skip "mmdebstrap could not make the image's root file system (is the Debian archive reachable?)"
	fail "the packages or the image"
}
t_image=$(date +%s)

dir=$(mktemp -d "$work/kube-XXXXXX")
prefix=kvt-kube-$$
play="$dir/play"
mkdir -p "$play" "$dir/host/run" "$dir/host/nvme0"
# podman kube play takes no --runtime or --ulimit: containers.conf does
# (../shared/reference/containers.md).  runc where it is installed, as
# kvt_podman.
ulimits=$(kvt_ulimits | awk '{ printf "\"%s\", \"%s\"", $2, $4 }')
{
	echo "[containers]"
	echo "default_ulimits = [$ulimits]"
	if command -v runc >/dev/null 2>&1; then
		echo "[engine]"
		echo 'runtime = "runc"'
	fi
} >"$dir/containers.conf"
export CONTAINERS_CONF="$dir/containers.conf"

cleanup() {
	for f in "$play"/engine-*.yaml "$play"/init-*.yaml "$play/daemon.yaml"; do
		[ -f "$f" ] && podman kube down "$f" >/dev/null 2>&1
	done
	# podman 4.3 may fail to remove a pod whose user namespace's mounts
	# are busy: removed by name then.
	for p in $(podman pod ps --filter "name=^$prefix-" --format '{{.Name}}' 2>/dev/null); do
		podman pod rm -f "$p" >/dev/null 2>&1
	done
	# The ConfigMap's volume (kube-pods.py names it after the test), which
	# podman kube down leaves behind.
	podman volume rm -f "$prefix-kvtierd-config" >/dev/null 2>&1
	rm -rf "$dir"
}
trap cleanup EXIT

hostpid='' hostusers=''
[ "${KVT_KUBE_HOSTPID:-0}" = 1 ] && hostpid=--hostpid
[ "${KVT_KUBE_HOSTUSERS:-0}" = 1 ] && hostusers=--host-users
tiny="--model tiny --prefix 256 --suffix 0"
python3 "$here/kube-pods.py" "$src/deploy/kubernetes" "$play" --prefix "$prefix" \
	--image "$image" --hostdir "$dir/host" --kvt-engine "$engine" \
	--engine "store:0:$tiny --name store" \
	--engine "load:1000:$tiny --no-store --expect-hits 16 --name load" \
	--engine "stay:1000:" \
	--conf pool.capacity=64M --conf pool.extent_size=16M \
	--conf tenant.chat.quota=32M --conf tenant.batch.quota=16M \
	--conf tenant.chat.nvme_quota=64M --conf tenant.batch.nvme_quota=64M \
	--conf spill.nvme0.capacity=128M $hostpid $hostusers || fail "kube-pods.py"

step "2. the DaemonSet's pod template as a Pod (podman kube play)"
# Its init containers first, each played as a pod of its own and waited
# for (kube-pods.py says why).
for f in "$play"/init-*.yaml; do
	[ -f "$f" ] || continue
	name=$(basename "$f" .yaml)
	name=${name#init-}
	c=$prefix-$name-$name
	out=$(podman kube play "$f" 2>&1) || fail "podman kube play $f: $out"
	rc=$(podman wait "$c") || fail "podman wait $c"
	[ "$rc" = 0 ] || fail "the init container $name exited with $rc: $(podman logs "$c" 2>&1)"
	podman kube down "$f" >/dev/null 2>&1 || fail "podman kube down $f"
	echo "ok: the init container $name ran to completion"
done
daemon=$prefix-kvtierd-kvtierd
sock=$dir/host/run/tenants/chat/kvtierd.sock
out=$(podman kube play "$play/daemon.yaml" 2>&1) || fail "podman kube play daemon.yaml: $out"
until [ -S "$sock" ]; do
	state=$(podman inspect -f '{{.State.Status}}' "$daemon" 2>/dev/null)
	case $state in
	exited | stopped)
		podman logs "$daemon" 2>&1 | tail -n 20
		fail "the daemon's container stopped ($state)"
		;;
	esac
	sleep 0.1
done
logs=$(podman logs "$daemon" 2>&1)
echo "$logs" | grep -q 'Host pool: capacity 64 MiB in extents of 16 MiB' ||
	fail "the daemon did not read the ConfigMap: $logs"
echo "ok: the daemon pod read the ConfigMap (a 64 MiB pool) and listens on the tenants' sockets"
# The init container gave the host directories to the image's user, in
# which the daemon made the tenants' directories, their sockets (0660, its
# group) and the spill file.
ls=$(stat -c '%u:%g %a %n' "$dir/host/run" "$dir/host/nvme0" "$dir/host/run/tenants/chat" \
	"$dir/host/run/tenants/batch" "$sock" \
	"$dir/host/run/tenants/batch/kvtierd.sock" "$dir/host/nvme0/spill0" 2>&1) || fail "$ls"
echo "$ls" | sed 's/^/   /'
uid=$(podman exec "$daemon" id -u) || fail "podman exec id"
[ "$uid" != 0 ] || fail "the daemon runs as root"
[ "$(echo "$ls" | awk -v u="$uid" '$1 != u ":" u' | wc -l)" = 0 ] || fail "not all of them are the daemon's ($uid)"
# socket_mode = 0666 (kvtierd-config.yaml): the socket every uid's, its
# directory every uid's to traverse, not to list.
for t in chat batch; do
	[ "$(stat -c %a "$dir/host/run/tenants/$t/kvtierd.sock")" = 666 ] || fail "the tenant $t's socket is not mode 0666"
	[ "$(stat -c %a "$dir/host/run/tenants/$t")" = 711 ] || fail "the tenant $t's directory is not mode 0711"
done
[ "$(stat -c %s "$dir/host/nvme0/spill0")" = 134217728 ] || fail "the spill file is not 128 MiB"
caps=$(podman exec "$daemon" awk '/^Cap(Eff|Prm|Bnd):/ { printf "%s %s ", $1, $2 }' /proc/1/status)
echo "   the daemon: uid $uid, $caps"
for set in CapEff CapPrm CapBnd; do
	echo "$caps" | grep -q "$set: 0000000000000000" || fail "the daemon has capabilities: $caps"
done
echo "ok: the init container owned the host directories; the daemon runs as uid $uid with no capability"

step "3. two engine pods, each in a pid namespace of its own, through the tenant's socket directory"
daemon_pidns=$(podman exec "$daemon" readlink /proc/1/ns/pid)
host_pidns=$(readlink /proc/self/ns/pid)
host_userns=$(readlink /proc/self/ns/user)
engine_pod() {
	name=$1 expect=$2
	c=$prefix-$name-vllm
	out=$(podman kube play "$play/engine-$name.yaml" 2>&1) || fail "podman kube play engine-$name.yaml: $out"
	rc=$(podman wait "$c") || fail "podman wait $c"
	out=$(podman logs "$c" 2>&1)
	echo "$out" | sed 's/^/   /'
	ns=$(echo "$out" | sed -n 's/^pid namespace \([^,]*\),.*/\1/p')
	if [ -n "$hostpid" ] && [ "$ns" != "$host_pidns" ]; then
		skip "podman $(podman version -f '{{.Client.Version}}') kube play ignores hostPID: true (engine $name in $ns, the host in $host_pidns)"
	fi
	if [ "$rc" != 0 ] && [ -z "$hostpid" ] &&
		podman logs "$daemon" 2>&1 | grep -q 'Failed to watch client pid 0, refusing it'; then
		# Before Linux 6.5 there is no SO_PEERPIDFD: the daemon has no
		# pidfd for a client in another pid namespace (pid 0) and refuses
		# it (docs/packaging.md).
		skip "kvtierd refuses clients in other pid namespaces on Linux $(uname -r) (no SO_PEERPIDFD before 6.5); KVT_KUBE_HOSTPID=1 runs them in the host's"
	fi
	[ "$rc" = 0 ] || fail "kvt-engine $name exited with $rc"
	echo "$out" | grep -q "$expect" || fail "kvt-engine $name: no '$expect'"
	if [ -n "$hostpid" ]; then
		[ "$ns" = "$host_pidns" ] || fail "engine $name is not in the host's pid namespace ($ns)"
	else
		[ -n "$ns" ] && [ "$ns" != "$daemon_pidns" ] && [ "$ns" != "$host_pidns" ] ||
			fail "engine $name is not in a pid namespace of its own ($ns; daemon $daemon_pidns, host $host_pidns)"
	fi
	echo "$out" | grep -q "^pid namespace .*, CapEff 0000000000000000$" ||
		fail "engine $name has capabilities"
	uns=$(echo "$out" | sed -n 's/.*, user namespace \([^,]*\),.*/\1/p')
	if [ -n "$hostusers" ]; then
		[ "$uns" = "$host_userns" ] || fail "engine $name is not in the host's user namespace ($uns)"
	else
		[ -n "$uns" ] && [ "$uns" != "$host_userns" ] || fail "engine $name is in the host's user namespace"
	fi
	podman kube down "$play/engine-$name.yaml" >/dev/null 2>&1 ||
		podman pod rm -f "$prefix-$name" >/dev/null 2>&1
}
engine_pod store '16 computed, 16 stored; every loaded byte verified'
echo "ok: the first engine pod stored 16 blocks"
engine_pod load '16 leading hits reused.*every loaded byte verified'
echo "ok: the second engine pod loaded them back, every byte checked"
if [ -n "$hostpid" ]; then
	echo "ok: both in the host's pid namespace ($host_pidns) with the daemon (KVT_KUBE_HOSTPID=1)"
else
	echo "ok: each in a pid namespace of its own, neither the daemon's ($daemon_pidns) nor the host's ($host_pidns)"
fi
if [ -n "$hostusers" ]; then
	echo "ok: both in the host's user namespace ($host_userns, KVT_KUBE_HOSTUSERS=1)"
else
	echo "ok: each in a user namespace of its own, not the host's ($host_userns): host-mapped ids through the 0666 socket"
fi

step "4. kvtierctl in the daemon's pod"
out=$(podman exec "$daemon" kvtierctl status 2>&1) || fail "kvtierctl status: $out"
echo "$out" | sed -n '/^Daemon:/p;/^Host pool:/p;/^Pages:/p;/^Lock:/p;/^NVMe tier:/p;/^  blocks:/p;/^Contents:/p;/^Tenants:/,/^$/p' | sed 's/^/   /'
echo "$out" | grep -q '^Contents: *tenants 1, namespaces 1, blocks 16,' || fail "kvtierctl status: $out"
echo "$out" | grep -q '^chat .* 16 *1 ' || fail "kvtierctl status: no tenant chat with 16 blocks: $out"
echo "ok: kvtierctl counts the tenant chat, one namespace, 16 blocks"
# The scrape endpoint the ConfigMap opens ([metrics] listen) on the port
# the DaemonSet names, from inside the pod's network namespace as the
# PodMonitor's Prometheus reaches it at the pod's address (bash's
# /dev/tcp: no HTTP client in the image).
port=$(sed -n 's/^ *listen = .*:\([0-9]*\)$/\1/p' "$src/deploy/kubernetes/kvtierd-config.yaml")
[ -n "$port" ] || fail "no [metrics] listen in kvtierd-config.yaml"
out=$(podman exec "$daemon" bash -c "exec 3<>/dev/tcp/127.0.0.1/$port &&
	printf 'GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3 && cat <&3" | tr -d '\r') ||
	fail "GET /metrics on port $port in the daemon's pod"
echo "$out" | head -n 1 | grep -q '^HTTP/1.[01] 200' || fail "GET /metrics: $(echo "$out" | head -n 1)"
echo "$out" | grep -q '^kvtier_tenant_.*{.*tenant="chat".*}' || fail "GET /metrics: no series of the tenant chat"
echo "$out" | grep -q '^kvtier_namespace_stores_total{.*} 16$' ||
	fail "GET /metrics: no 16 blocks stored in $(echo "$out" | grep stores_total)"
echo "ok: GET /metrics on the pod's port $port: $(echo "$out" | grep -c '^kvtier_') samples, the tenant chat's, 16 blocks stored"

step "5. a new daemon pod, as a rolling update makes it, under an engine pod that stays"
# An engine pod started before the new daemon, its socket directory
# mounted then: kvt-engine run in it (podman exec) reaches the old daemon,
# then the new one through the same mount.
stay=$prefix-stay-vllm
out=$(podman kube play "$play/engine-stay.yaml" 2>&1) || fail "podman kube play engine-stay.yaml: $out"
in_stay() {
	podman exec "$stay" kvt-engine --socket /run/kvtier/kvtierd.sock $tiny "$@" 2>&1
}
# Its ids as the node sees them: a user namespace of its own maps uid 0
# to an unprivileged host uid, in no group of the node's.
map=$(cat "/proc/$(podman inspect -f '{{.State.Pid}}' "$stay")/uid_map" | awk '{ print $1 "->" $2 "+" $3 }' | paste -sd' ')
echo "   the staying engine pod's uid map (inside->host+count): $map"
if [ -z "$hostusers" ]; then
	case "$map" in
	0-\>0+*) fail "the staying engine pod's uid 0 is the host's: $map" ;;
	esac
fi
out=$(in_stay --no-store --expect-hits 16 --name stay-before) || fail "kvt-engine in the staying pod: $out"
echo "   $out"
echo "$out" | grep -q '16 leading hits reused.*every loaded byte verified' || fail "kvt-engine stay-before: $out"
old_id=$(podman inspect -f '{{.Id}}' "$daemon")
# The old pod goes first (SIGTERM), then the new one comes, init container
# first, as the DaemonSet's RollingUpdate with maxSurge 0 does.
podman kube down "$play/daemon.yaml" >/dev/null 2>&1 || fail "podman kube down daemon.yaml"
for f in "$play"/init-*.yaml; do
	[ -f "$f" ] || continue
	name=$(basename "$f" .yaml)
	name=${name#init-}
	out=$(podman kube play "$f" 2>&1) || fail "podman kube play $f: $out"
	rc=$(podman wait "$prefix-$name-$name") || fail "podman wait $prefix-$name-$name"
	[ "$rc" = 0 ] || fail "the init container $name exited with $rc the second time"
	podman kube down "$f" >/dev/null 2>&1 || fail "podman kube down $f"
done
out=$(podman kube play "$play/daemon.yaml" 2>&1) || fail "podman kube play daemon.yaml again: $out"
# The old socket file stays until the new daemon replaces it: ready is
# what the new one says.
until podman logs "$daemon" 2>&1 | grep -q 'kvtierd .* ready'; do
	case $(podman inspect -f '{{.State.Status}}' "$daemon" 2>/dev/null) in
	exited | stopped) fail "the new daemon's container stopped: $(podman logs "$daemon" 2>&1 | tail -n 20)" ;;
	esac
	sleep 0.1
done
[ "$(podman inspect -f '{{.Id}}' "$daemon")" != "$old_id" ] || fail "the daemon's container is the old one"
logs=$(podman logs "$daemon" 2>&1)
echo "$logs" | grep 'Spill recovery:' | sed 's/^/   /'
echo "$logs" | grep -q 'Spill recovery: 1 file(s)' || fail "the new daemon did not recover the spill file: $logs"
# The old daemon's socket file, which the new one replaced, would refuse
# the connection (the file system may give the new one the same inode).
out=$(in_stay --name stay-after) || fail "kvt-engine in the staying pod, new daemon: $out"
echo "   $out"
echo "$out" | grep -q '0 leading hits reused.*16 computed, 16 stored; every loaded byte verified' ||
	fail "kvt-engine stay-after: $out"
echo "ok: the staying engine pod reached the new daemon through the directory it mounted before; the host tier started empty"
# podman 4.3 now and then fails to remove a pod in a user namespace of its
# own (its mounts busy): removed by name then, as cleanup does; step 6
# checks that nothing is left.
if ! out=$(podman kube down "$play/engine-stay.yaml" 2>&1); then
	echo "   (podman kube down engine-stay.yaml: $(echo "$out" | tail -n 1); removed by name)"
	out=$(podman pod rm -f "$prefix-stay" 2>&1) || fail "podman pod rm $prefix-stay: $out"
fi

step "6. podman kube down"
for f in "$play"/daemon.yaml; do
	podman kube down "$f" >/dev/null 2>&1 || fail "podman kube down $f"
done
left=$(podman ps -a --filter "name=^$prefix-" --format '{{.Names}}')
[ -z "$left" ] || fail "containers left: $left"
left=$(podman pod ps --filter "name=^$prefix-" --format '{{.Name}}')
[ -z "$left" ] || fail "pods left: $left"
echo "ok: no pod or container left"
step "done in $(($(date +%s) - t0)) s, $(($(date +%s) - t_image)) s of it after the image"
exit 0
