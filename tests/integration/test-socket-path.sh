#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# kvtierd --socket PATH takes what [daemon] socket takes: an absolute path
# shorter than 108 bytes (sun_path).  Any other is refused at once, as a
# usage error (exit 2) with a message that says why, before the daemon
# touches anything (here: before it creates its spill file), and never bound
# cut short; a path of exactly 107 bytes is served.
#
# Usage: test-socket-path.sh KVTIERD
# Exit: 0 pass, 1 fail.

set -u

kvtierd=${1:?usage: $0 KVTIERD}
dir=$(mktemp -d /tmp/kvt-sock-XXXXXX) || exit 1
pid=
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	rm -rf "$dir"
}
trap cleanup EXIT
fail() {
	echo "FAIL: $*"
	[ -f "$dir/err" ] && sed 's/^/  kvtierd: /' "$dir/err"
	exit 1
}

cat >"$dir/kvtierd.conf" <<EOF
[daemon]
socket = $dir/kvtierd.sock
runtime_dir = $dir
[pool]
capacity = 16M
extent_size = 2M
[spill.a]
path = $dir/spill0
capacity = 64M
EOF

# A string of n bytes of c.
repeat() {
	printf "%${1}s" "" | tr ' ' "$2"
}

# Start kvtierd --socket $1 (from $dir) and wait until it has exited or
# listens on $2; sets status (the exit status, or "listening").
start() {
	rm -f "$dir/err"
	(cd "$dir" && exec "$kvtierd" --config "$dir/kvtierd.conf" --socket "$1") 2>"$dir/err" &
	pid=$!
	status=
	i=0
	# Only a hang guard: each case ends in an exit or a listening socket.
	while [ $i -lt 1000 ]; do
		if ! kill -0 "$pid" 2>/dev/null; then
			wait "$pid"
			status=$?
			pid=
			return
		fi
		if [ -S "$2" ]; then
			status=listening
			return
		fi
		sleep 0.01
		i=$((i + 1))
	done
	fail "kvtierd --socket '$1' neither exited nor listened"
}

stop() {
	kill "$pid"
	wait "$pid"
	rc=$?
	pid=
	[ $rc -eq 0 ] || fail "kvtierd exited with $rc on SIGTERM"
}

# Refused: exit 2, the message, and nothing created in $dir.
refused() {
	path=$1 why=$2 cut=$3
	start "$path" "$cut"
	[ "$status" = 2 ] || fail "--socket of ${#path} bytes ('$path'): status $status, not 2 (a usage error)"
	grep -q "$why" "$dir/err" || fail "--socket '$path': the message does not say '$why'"
	[ -e "$dir/spill0" ] && fail "--socket '$path': refused only after the NVMe tier started"
	[ -e "$cut" ] && fail "--socket '$path': a socket was bound at '$cut'"
	echo "refused (status 2): --socket of ${#path} bytes: $(cat "$dir/err")"
}

# 200 bytes, absolute: what sun_path would have kept is 107 of them.
long="$dir/$(repeat $((200 - ${#dir} - 1)) a)"
refused "$long" "shorter than 108 bytes" "$(printf %.107s "$long")"
# Relative, short and long: relative to what the clients cannot know.
refused "kvt.sock" "must be absolute" "$dir/kvt.sock"
refused "$(repeat 150 b)" "must be absolute" "$dir/$(repeat 107 b)"

# 107 bytes: the longest that fits, and it is served.
fit="$dir/$(repeat $((107 - ${#dir} - 1)) c)"
start "$fit" "$fit"
[ "$status" = listening ] || fail "--socket of 107 bytes: exited with $status"
stop
echo "served: --socket of ${#fit} bytes"
exit 0
