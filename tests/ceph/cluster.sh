#!/bin/sh
# A single-machine Ceph cluster for tests and benchmarks: one ceph-mon, one
# ceph-mgr and one memstore ceph-osd on 127.0.0.1, cephx on, plain
# background processes with their pid files in DIR, stopped by pid.
#
#   cluster.sh start DIR [POOL]  make and start a cluster in DIR (empty or
#                                absent), with a replicated pool POOL
#                                (default kvtier) of size 1
#   cluster.sh stop DIR          stop its daemons by pid and wait for them
#   cluster.sh env DIR           print CEPH_CONF=... for a shell to eval
#   cluster.sh osd-freeze DIR    stop the OSD in its tracks (SIGSTOP): every
#                                operation hangs, as on a stuck node
#   cluster.sh osd-thaw DIR      let it go on (SIGCONT)
#   cluster.sh osd-kill DIR      SIGKILL the OSD and wait until it is gone
#   cluster.sh osd-start DIR     start it again.  Only with
#                                KVT_CEPH_STORE=bluestore (a file-backed
#                                BlueStore in DIR): a memstore OSD starts
#                                again empty, its placement groups stale
#
# Size: memstore keeps everything in the OSD's memory, KVT_CEPH_BYTES of it
# (default 512M); writes hang once it is full, so keep data well below it.
# KVT_CEPH_STORE=bluestore keeps it in a file of KVT_CEPH_BYTES (default 1G)
# instead, which survives the OSD being killed (~3 s more to start).
# Exit 77 when the ceph packages are not installed (scripts/deps.sh).
set -eu

usage() {
	echo "usage: $0 start|stop|env|osd-freeze|osd-thaw|osd-kill|osd-start DIR [POOL]" >&2
	exit 2
}
[ $# -ge 2 ] || usage
cmd=$1
dir=$2
pool=${3:-kvtier}
conf=$dir/ceph.conf

need() {
	for p in ceph-mon ceph-mgr ceph-osd ceph ceph-authtool monmaptool rados; do
		command -v "$p" >/dev/null 2>&1 || {
			echo "ceph not installed ($p missing): run scripts/deps.sh as root" >&2
			exit 77
		}
	done
}

# A free TCP port on 127.0.0.1 for the monitor.
free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

stop() {
	pids=""
	for f in "$dir"/run/*.pid; do
		[ -f "$f" ] || continue
		p=$(cat "$f" 2>/dev/null || true)
		[ -n "$p" ] && kill "$p" 2>/dev/null && kill -CONT "$p" 2>/dev/null && pids="$pids $p"
		rm -f "$f"
	done
	# Wait for them (not our children: poll), then make sure.
	for _ in $(seq 100); do
		alive=""
		for p in $pids; do kill -0 "$p" 2>/dev/null && alive="$alive $p"; done
		[ -z "$alive" ] && return 0
		sleep 0.1
	done
	for p in $alive; do kill -9 "$p" 2>/dev/null || true; done
}

start() {
	need
	mkdir -p "$dir"
	[ -z "$(ls -A "$dir")" ] || { echo "$dir is not empty" >&2; exit 1; }
	dir=$(cd "$dir" && pwd)
	conf=$dir/ceph.conf
	mkdir -p "$dir/run" "$dir/log" "$dir/mon.a" "$dir/mgr.x"
	fsid=$(python3 -c 'import uuid; print(uuid.uuid4())')
	port=$(free_port)
	cat >"$conf" <<CONF
[global]
fsid = $fsid
mon host = [v2:127.0.0.1:$port]
public addr = 127.0.0.1
ms bind ipv6 = false
auth cluster required = cephx
auth service required = cephx
auth client required = cephx
auth allow insecure global id reclaim = false
keyring = $dir/\$name.keyring
run dir = $dir/run
pid file = $dir/run/\$name.pid
admin socket = $dir/run/\$name.\$pid.asok
log file = $dir/log/\$name.log
log to stderr = false
mon data = $dir/mon.\$id
mgr data = $dir/mgr.\$id
osd data = $dir/osd.\$id
osd objectstore = ${KVT_CEPH_STORE:-memstore}
memstore device bytes = ${KVT_CEPH_BYTES:-536870912}
bluestore block create = true
bluestore block size = ${KVT_CEPH_BYTES:-1073741824}
bluestore block db create = false
bluestore block wal create = false
bluestore cache size = 67108864
osd pool default size = 1
osd pool default min size = 1
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon osd full ratio = 0.95
mgr initial modules =
osd op num shards = 2
osd op num threads per shard = 1
CONF
	ceph-authtool --create-keyring "$dir/mon..keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
	ceph-authtool --create-keyring "$dir/client.admin.keyring" --gen-key -n client.admin \
		--cap mon 'allow *' --cap osd 'allow *' --cap mgr 'allow *' --cap mds 'allow *' >/dev/null
	ceph-authtool "$dir/mon..keyring" --import-keyring "$dir/client.admin.keyring" >/dev/null
	cp "$dir/mon..keyring" "$dir/mon.a.keyring"
	monmaptool --create --addv a "[v2:127.0.0.1:$port]" --fsid "$fsid" "$dir/monmap" >/dev/null
	ceph-mon -c "$conf" --mkfs -i a --monmap "$dir/monmap" --keyring "$dir/mon.a.keyring"
	ceph-mon -c "$conf" -i a
	c="ceph -c $conf --connect-timeout 20"
	$c auth get-or-create mgr.x mon 'allow profile mgr' osd 'allow *' mds 'allow *' \
		-o "$dir/mgr.x.keyring" >/dev/null
	ceph-mgr -c "$conf" -i x 2>/dev/null
	# Under cephx the OSD's key must exist before --mkfs (or it fails to
	# fetch the mon config).
	uuid=$(python3 -c 'import uuid; print(uuid.uuid4())')
	key=$(ceph-authtool --gen-print-key)
	printf '{"cephx_secret": "%s"}\n' "$key" >"$dir/osd-secret.json"
	id=$($c osd new "$uuid" -i "$dir/osd-secret.json")
	rm -f "$dir/osd-secret.json"
	mkdir -p "$dir/osd.$id"
	ceph-authtool --create-keyring "$dir/osd.$id.keyring" --name "osd.$id" --add-key "$key" >/dev/null
	ceph-osd -c "$conf" -i "$id" --mkfs --osd-uuid "$uuid" >/dev/null 2>&1 ||
		{ echo "ceph-osd --mkfs failed: see $dir/log/osd.$id.log" >&2; stop; exit 1; }
	ceph-osd -c "$conf" -i "$id" 2>/dev/null
	$c osd pool create "$pool" 8 8 replicated >/dev/null 2>&1
	$c osd pool application enable "$pool" rados >/dev/null 2>&1
	# Serving once a write goes through (PG creation is most of the wait).
	for _ in $(seq 120); do
		if timeout 3 rados -c "$conf" -p "$pool" put cluster-probe "$conf" 2>/dev/null; then
			rados -c "$conf" -p "$pool" rm cluster-probe
			echo "$id" >"$dir/osd.id"
			echo "ceph: cluster up in $dir (mon 127.0.0.1:$port, pool $pool)" >&2
			return 0
		fi
		sleep 0.5
	done
	echo "ceph: the cluster in $dir did not come up: see $dir/log" >&2
	stop
	exit 1
}

osd_signal() {
	kill "-$1" "$(cat "$dir/run/osd.$(cat "$dir/osd.id").pid")"
}

osd_kill() {
	p=$(cat "$dir/run/osd.$(cat "$dir/osd.id").pid")
	kill -9 "$p"
	for _ in $(seq 100); do
		kill -0 "$p" 2>/dev/null || return 0
		sleep 0.1
	done
	echo "ceph: osd $p did not die" >&2
	exit 1
}

case $cmd in
start) start ;;
osd-freeze) osd_signal STOP ;;
osd-thaw) osd_signal CONT ;;
osd-kill) osd_kill ;;
osd-start) ceph-osd -c "$conf" -i "$(cat "$dir/osd.id")" 2>/dev/null ;;
stop) stop ;;
env) echo "CEPH_CONF=$(cd "$dir" && pwd)/ceph.conf" ;;
*) usage ;;
esac
