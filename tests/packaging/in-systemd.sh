#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# Run by test-packages.sh inside a Debian 12 container whose PID 1 is
# systemd, as root, with the .deb files in /debs.  One step per call:
#
#   in-systemd.sh install   apt installs the packages: the user, the group,
#                           the enabled units, the listening socket
#   in-systemd.sh serve     systemctl start, kvtierctl status as root, as a
#                           member of kvtier and as a user outside it;
#                           start by the socket; reload; restart after SIGKILL;
#                           the scrape endpoint through its drop-in: the
#                           series of kvtierctl metrics, name for name
#   in-systemd.sh keep      the host tier across restarts: 1 GiB stored by
#                           kvt-engine (the real client, from the build
#                           tree); kill -9 (systemd restarts the daemon,
#                           which adopts its fd store), an upgrade in place
#                           (SIGUSR2) and systemctl restart, with a client
#                           loading throughout: every block back byte-exact
#                           from host memory (there is no NVMe tier); then
#                           systemctl stop and start: nothing kept
#   in-systemd.sh purge     apt-get purge leaves nothing behind but the
#                           system user and group (Debian keeps those)
#
# Prints one line per check; exits 1 at the first that fails.
set -u

fail() {
	echo "FAIL: $*"
	exit 1
}
ok() {
	echo "ok: $*"
}
main_pid() {
	systemctl show -p MainPID --value kvtierd.service
}
# Waits for a condition (a command) without a time limit of its own: meson's
# timeout ends a test that hangs.
wait_for() {
	until "$@"; do sleep 0.1; done
}
# The daemon's pid as kvtierctl status shows it to root.
status_pid() {
	kvtierctl status 2>&1 | sed -n 's/^Daemon: *kvtierd .*, pid \([0-9]*\)$/\1/p'
}
# kvt-engine on a 1 GiB prefix (512 blocks of 2 MiB); more arguments.
engine() {
	kvt-engine --socket /run/kvtierd/kvtierd.sock --model llama3-8b --prefix 8192 \
		--prefix-seed 40 --suffix 0 "$@"
}
# A field of kvtierctl's keep record.
kept() {
	kvtierctl --json status 2>/dev/null | tr -d ' \n' |
		sed -n "s/.*\"keep\":{[^}]*\"$1\":\([0-9]*\).*/\1/p"
}
restarted() { # old pid: a new main pid that answers
	p=$(main_pid)
	[ "$p" != 0 ] && [ "$p" != "$1" ] && [ -n "$(kept kept)" ]
}
adopted() { # n: the daemon answers, and adopted n blocks
	[ "$(kept adopted_blocks)" = "$1" ]
}
answers() { # the daemon answers an admin's status
	[ -n "$(kept kept)" ]
}
# Every file and directory of the root file system that packages may leave,
# less what changes on its own (logs, apt's and dpkg's own state, journals).
snapshot() {
	find / -xdev \( -path /proc -o -path /sys -o -path /dev -o -path /run -o -path /tmp \
		-o -path /var/tmp -o -path /var/log -o -path /var/lib/apt -o -path /var/cache/apt \
		-o -path /var/lib/dpkg -o -path /var/cache/debconf -o -path /var/cache/ldconfig \
		-o -path /var/lib/systemd/random-seed -o -path /var/lib/systemd/timers \
		-o -path /var/lib/systemd/catalog -o -path /root/kvt-test \) -prune -o -print |
		sort
}

case ${1:-} in
install)
	# The container's PID 1 may still be starting: its bus first.
	wait_for test -S /run/systemd/private
	state=$(systemctl is-system-running --wait)
	case $state in
	running | degraded) ok "systemd is $state" ;;
	*) fail "systemd is $state" ;;
	esac
	# Users made before the snapshot, so that purge's comparison sees only
	# what the packages did.
	useradd -m eng || fail "useradd eng"
	useradd -m outsider || fail "useradd outsider"
	mkdir -p /root/kvt-test && snapshot >/root/kvt-test/before.txt
	debs=$(ls /debs/kvtierd_*.deb /debs/kvtier-tools_*.deb /debs/libkvtier-client0_*.deb \
		/debs/libkvtier-client-dev_*.deb)
	# shellcheck disable=SC2086
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $debs \
		>/root/kvt-test/apt-install.log 2>&1 || { cat /root/kvt-test/apt-install.log; fail "apt-get install"; }
	ok "apt-get install $(echo "$debs" | sed 's|/debs/||g' | paste -sd' ' -)"
	getent passwd kvtierd >/dev/null || fail "no user kvtierd after install"
	getent group kvtier >/dev/null || fail "no group kvtier after install"
	ok "sysusers: $(id kvtierd), group $(getent group kvtier)"
	for u in kvtierd.service kvtierd.socket; do
		[ "$(systemctl is-enabled $u)" = enabled ] || fail "$u is $(systemctl is-enabled $u)"
	done
	[ "$(systemctl is-active kvtierd.socket)" = active ] || fail "kvtierd.socket is not active"
	[ -S /run/kvtierd/kvtierd.sock ] || fail "no socket /run/kvtierd/kvtierd.sock"
	[ "$(systemctl is-active kvtierd.service)" = active ] || fail "kvtierd.service did not start"
	# After the service's start too: for root and the group kvtier only.
	sock=$(stat -c '%a %U:%G' /run/kvtierd/kvtierd.sock)
	[ "$sock" = "660 root:kvtier" ] || fail "the socket is $sock, not 660 root:kvtier"
	ok "kvtierd.service and kvtierd.socket enabled and started, the socket $sock"
	dpkg-query -W -f='${Conffiles}\n' kvtierd | grep -q '^ /etc/kvtierd/kvtierd.conf ' ||
		fail "/etc/kvtierd/kvtierd.conf is not a conffile of kvtierd"
	ok "/etc/kvtierd/kvtierd.conf is a conffile"
	;;

serve)
	systemctl stop kvtierd.service
	[ "$(systemctl is-active kvtierd.service)" = inactive ] || fail "kvtierd.service did not stop"
	systemctl start kvtierd || fail "systemctl start kvtierd"
	[ "$(systemctl is-active kvtierd.service)" = active ] || fail "kvtierd.service is not active after start"
	pid=$(main_pid)
	[ "$(status_pid)" = "$pid" ] || { kvtierctl status; fail "kvtierctl status as root does not show the daemon's pid $pid"; }
	ok "systemctl start kvtierd: pid $pid; kvtierctl status as root answers"

	# A tenant sees the daemon, not its pid, and only its own tenant.
	usermod -aG kvtier eng || fail "usermod"
	out=$(runuser -u eng -- kvtierctl status 2>&1) || fail "kvtierctl status as eng, a member of kvtier: $out"
	for want in '^Daemon: *kvtierd [0-9.]*, protocol [0-9]*$' '^Socket: */run/kvtierd/kvtierd.sock$' \
		'^(Only your own tenant is shown'; do
		echo "$out" | grep -q "$want" || fail "kvtierctl status as eng, a member of kvtier: $out"
	done
	ok "kvtierctl status as a member of kvtier answers (no KVTIER_SOCKET): $(echo "$out" | head -n 1)"
	out=$(runuser -u outsider -- kvtierctl status 2>&1) && fail "a user outside kvtier was served"
	echo "$out" | grep -q 'Permission denied' || fail "a user outside kvtier: $out"
	ok "a user outside kvtier is refused: $(echo "$out" | head -n 1)"

	# Sandboxing: no capabilities, no new privileges, a seccomp filter (the
	# mount namespace is checked from outside, where /proc/PID/ns can be read).
	st=/proc/$pid/status
	grep -q '^CapEff:[[:space:]]*0000000000000000$' "$st" || fail "the daemon has capabilities: $(grep CapEff "$st")"
	grep -q '^NoNewPrivs:[[:space:]]*1$' "$st" || fail "NoNewPrivs is not set"
	grep -q '^Seccomp:[[:space:]]*2$' "$st" || fail "no seccomp filter"
	[ "$(stat -c %U "/proc/$pid")" = kvtierd ] || fail "the daemon does not run as kvtierd"
	ok "the daemon runs as kvtierd with no capabilities, NoNewPrivs and a seccomp filter"

	# Started by the socket: a client connecting to a stopped service.
	systemctl stop kvtierd.service
	[ "$(systemctl is-active kvtierd.socket)" = active ] || fail "the socket stopped with the service"
	spid=$(status_pid)
	if [ -z "$spid" ] || [ "$spid" != "$(main_pid)" ] || [ "$spid" = "$pid" ]; then
		fail "a connection to the socket did not start the service (pid '$spid')"
	fi
	pid=$spid
	ok "a client's connection starts the stopped service through kvtierd.socket: pid $pid"

	# Reload: a live key changed in the conffile, applied by the same process.
	sed -i 's/^quarantine_ms = 500$/quarantine_ms = 750/' /etc/kvtierd/kvtierd.conf
	grep -q '^quarantine_ms = 750$' /etc/kvtierd/kvtierd.conf || fail "could not edit the conffile"
	since=$(date '+%Y-%m-%d %H:%M:%S')
	systemctl reload kvtierd || { journalctl -u kvtierd -n 20 --no-pager; fail "systemctl reload kvtierd"; }
	wait_for sh -c "journalctl -u kvtierd --since '$since' -o cat --no-pager | grep -q '^Reloaded /etc/kvtierd/kvtierd.conf; changed: '"
	line=$(journalctl -u kvtierd --since "$since" -o cat --no-pager | grep '^Reloaded /etc/kvtierd/kvtierd.conf; changed: ')
	echo "$line" | grep -q quarantine_ms || fail "the reload did not apply quarantine_ms: $line"
	[ "$(main_pid)" = "$pid" ] || fail "the reload replaced the daemon (pid $(main_pid), was $pid)"
	[ "$(systemctl is-active kvtierd.service)" = active ] || fail "kvtierd.service is not active after reload"
	[ "$(status_pid)" = "$pid" ] || fail "kvtierctl status after the reload"
	ok "systemctl reload kvtierd: same pid $pid, log: $line"

	# SIGKILL: systemd restarts it (Restart=on-failure), and it serves again.
	n=$(systemctl show -p NRestarts --value kvtierd.service)
	since=$(date '+%Y-%m-%d %H:%M:%S')
	kill -KILL "$pid" || fail "kill -KILL $pid"
	wait_for sh -c "p=\$(systemctl show -p MainPID --value kvtierd.service); [ \$p != 0 ] && [ \$p != $pid ] && [ \$(systemctl is-active kvtierd.service) = active ]"
	new=$(main_pid)
	[ "$(systemctl show -p NRestarts --value kvtierd.service)" -gt "$n" ] || fail "NRestarts did not grow"
	journalctl -u kvtierd --since "$since" -o cat --no-pager | grep -q 'status=9/KILL' ||
		fail "the journal does not show the kill"
	[ "$(status_pid)" = "$new" ] || fail "kvtierctl status after the restart"
	ok "SIGKILL of pid $pid: systemd restarted it as pid $new, which serves"

	# The scrape endpoint under systemd: the shipped drop-in opens TCP to
	# localhost, and GET /metrics (bash's /dev/tcp: no HTTP client in
	# the image) names what kvtierctl metrics names.  Both undone after.
	mkdir -p /etc/systemd/system/kvtierd.service.d
	cp /usr/share/kvtier/kvtierd-metrics.conf /etc/systemd/system/kvtierd.service.d/metrics.conf ||
		fail "no /usr/share/kvtier/kvtierd-metrics.conf"
	cp /etc/kvtierd/kvtierd.conf /root/kvt-test/kvtierd.conf.saved
	printf '\n[metrics]\nlisten = 127.0.0.1:9464\n' >>/etc/kvtierd/kvtierd.conf
	systemctl daemon-reload
	systemctl restart kvtierd || { journalctl -u kvtierd -n 20 --no-pager; fail "restart with [metrics] listen"; }
	scrape() {
		bash -c 'exec 3<>/dev/tcp/127.0.0.1/9464 &&
			printf "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n" >&3 && cat <&3' 2>/dev/null
	}
	wait_for sh -c "journalctl -u kvtierd -o cat --no-pager | grep -q 'Serving metrics on http://127.0.0.1:9464/metrics'"
	names() {
		tr -d '\r' | grep '^kvtier_' | sed 's/[{ ].*//' | sort -u
	}
	http=$(scrape)
	echo "$http" | head -n 1 | grep -q '^HTTP/1.[01] 200' || fail "GET /metrics under systemd: $(echo "$http" | head -n 1)"
	a=$(echo "$http" | names)
	b=$(kvtierctl metrics | names)
	[ -n "$a" ] && [ "$a" = "$b" ] || fail "the endpoint's series differ from kvtierctl metrics': $(echo "$a" | wc -l) and $(echo "$b" | wc -l)"
	ok "GET /metrics under systemd (the kvtierd-metrics.conf drop-in): $(echo "$a" | wc -l) series, kvtierctl metrics' own"
	rm -r /etc/systemd/system/kvtierd.service.d
	cp /root/kvt-test/kvtierd.conf.saved /etc/kvtierd/kvtierd.conf
	systemctl daemon-reload
	systemctl restart kvtierd || fail "restart without the endpoint"
	;;

keep)
	# 1 GiB: 512 blocks of 2 MiB (Llama-3-8B's shape, 8192 tokens).  The
	# steps before started the unit often: systemd's start limit is reset.
	printf '[pool]\ncapacity = 2G\nextent_size = 256M\n' >/etc/kvtierd/kvtierd.conf
	systemctl reset-failed kvtierd.service
	systemctl restart kvtierd || fail "systemctl restart kvtierd"
	wait_for answers
	out=$(engine 2>&1) || fail "kvt-engine store: $out"
	echo "$out" | grep -q '512 computed, 512 stored; every loaded byte verified' ||
		fail "kvt-engine store: $out"
	ok "kvt-engine stored 512 blocks of 2 MiB (1 GiB) in host memory"
	# A client loading the prefix again and again, every byte checked,
	# while the daemon goes away and comes back (misses meanwhile).
	rm -f /root/kvt-test/loop.stop /root/kvt-test/loop.fail
	(
		while [ ! -e /root/kvt-test/loop.stop ]; do
			engine --no-store >/root/kvt-test/loop.out 2>&1
			if grep -q 'VERIFY FAILED\|differ' /root/kvt-test/loop.out; then
				cp /root/kvt-test/loop.out /root/kvt-test/loop.fail
			fi
		done
	) &
	loop=$!

	pid=$(main_pid)
	kill -KILL "$pid" || fail "kill -KILL $pid"
	wait_for restarted "$pid"
	[ "$(kept adopted_blocks)" = 512 ] || { kvtierctl status; fail "kill -9: $(kept adopted_blocks) blocks adopted, not 512"; }
	out=$(engine --no-store --expect-hits 512 2>&1) || fail "kill -9: the blocks back: $out"
	ok "kill -9 of pid $pid, systemd's restart: pid $(main_pid) adopted 512 blocks in $(kept adopt_ms) ms from the fd store, all 512 hit byte-exact"

	pid=$(main_pid)
	systemctl kill -s USR2 kvtierd.service || fail "systemctl kill -s USR2"
	wait_for adopted 512
	[ "$(main_pid)" = "$pid" ] || fail "the upgrade in place changed the main pid ($pid, now $(main_pid))"
	[ "$(systemctl is-active kvtierd.service)" = active ] || fail "kvtierd.service is not active after the upgrade"
	out=$(engine --no-store --expect-hits 512 2>&1) || fail "upgrade: the blocks back: $out"
	ok "upgrade in place (systemctl kill -s USR2): the same pid $pid adopted 512 blocks in $(kept adopt_ms) ms, all 512 hit"

	v=$(systemctl --version | sed -n 's/^systemd \([0-9]*\).*/\1/p')
	pid=$(main_pid)
	systemctl restart kvtierd || fail "systemctl restart kvtierd"
	wait_for restarted "$pid"
	[ "$(kept adopted_blocks)" = 512 ] || fail "systemctl restart under systemd $v: $(kept adopted_blocks) blocks adopted, not 512"
	out=$(engine --no-store --expect-hits 512 2>&1) || fail "restart: the blocks back: $out"
	ok "systemctl restart under systemd $v: pid $(main_pid) adopted 512 blocks, all 512 hit"
	touch /root/kvt-test/loop.stop
	wait $loop
	[ ! -e /root/kvt-test/loop.fail ] || fail "a client loading throughout got wrong bytes: $(cat /root/kvt-test/loop.fail)"
	ok "a client loading throughout never got other bytes"

	systemctl stop kvtierd.service
	systemctl start kvtierd.service || fail "systemctl start kvtierd"
	wait_for answers
	[ "$(kept adopted_blocks)" = 0 ] || fail "systemd $v kept the store across systemctl stop ($(kept adopted_blocks) blocks)"
	ok "systemctl stop, then start, under systemd $v: nothing kept (the store and its memory go with a stop)"
	;;

purge)
	DEBIAN_FRONTEND=noninteractive apt-get purge -y kvtierd kvtier-tools libkvtier-client0 \
		libkvtier-client-dev >/root/kvt-test/apt-purge.log 2>&1 || { cat /root/kvt-test/apt-purge.log; fail "apt-get purge"; }
	ok "apt-get purge kvtierd kvtier-tools libkvtier-client0 libkvtier-client-dev"
	systemctl daemon-reload
	units=$(systemctl list-units --all --no-legend 'kvtierd*' | grep -v 'not-found' || true)
	[ -z "$units" ] || fail "units left: $units"
	[ -z "$(ps -u kvtierd -o pid= 2>/dev/null)" ] || fail "processes of kvtierd left: $(ps -u kvtierd -o pid,args)"
	for d in /run/kvtierd /etc/kvtierd /var/lib/kvtierd /var/cache/kvtierd; do
		[ ! -e $d ] || fail "$d left behind"
	done
	ls -d /tmp/systemd-private-*-kvtierd.service-* /var/tmp/systemd-private-*-kvtierd.service-* \
		2>/dev/null && fail "private /tmp of the unit left behind"
	snapshot >/root/kvt-test/after.txt
	left=$(comm -13 /root/kvt-test/before.txt /root/kvt-test/after.txt)
	[ -z "$left" ] || fail "left behind after purge: $left"
	ok "nothing left on the file system (outside logs and apt's and dpkg's own state)"
	ok "left by Debian's policy on system users: $(getent passwd kvtierd | cut -d: -f1,3,4,6), group $(getent group kvtier | cut -d: -f1,3)"
	;;
*)
	echo "usage: $0 install|serve|keep|purge" >&2
	exit 2
	;;
esac
exit 0
