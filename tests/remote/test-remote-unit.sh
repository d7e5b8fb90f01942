#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# systemd/kvtierd-remote.conf: every line parses, and kvtierd.service with
# it keeps an exposure of at most 1.5 in `systemd-analyze security` (the
# network it opens, and nothing else, is the difference from the unit's).
#
# Usage: test-remote-unit.sh SYSTEMD_DIR.  Exit 0, 1, or 77 (skipped).
set -u
dir=$1
if ! systemd-analyze security --help 2>/dev/null | grep -q -- '--offline'; then
	echo "SKIP: no systemd-analyze security --offline here"
	exit 77
fi
tmp=$(mktemp -d /tmp/kvt-unit-XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
# The drop-in's [Service] lines merged into the unit's [Service] section.
sed -n '/^\[Service\]/,$p' "$dir/kvtierd-remote.conf" | grep -v -e '^\[Service\]' -e '^#' -e '^$' >"$tmp/dropin"
sed 's|^ExecStart=.*|ExecStart=/bin/true|' "$dir/kvtierd.service" |
	awk -v f="$tmp/dropin" '/^\[Install\]/ { while ((getline l < f) > 0) print l } { print }' \
		>"$tmp/kvtierd.service"
out=$(systemd-analyze security --offline=true "$tmp/kvtierd.service" 2>"$tmp/err")
if [ -s "$tmp/err" ]; then
	echo "systemd-analyze complained:" >&2
	cat "$tmp/err" >&2
	exit 1
fi
for want in "PrivateNetwork=  *Service has access" "RestrictAddressFamilies=~AF_NETLINK  *Service cannot" \
	"RestrictAddressFamilies=~AF_PACKET  *Service cannot" "IPAddressDeny=  *Service defines IP address allow list"; do
	echo "$out" | grep -q "$want" || { echo "expected: $want" >&2; exit 1; }
done
score=$(echo "$out" | sed -n 's/.*Overall exposure level for kvtierd.service: \([0-9.]*\).*/\1/p')
echo "exposure with the remote drop-in: $score"
awk -v s="$score" 'BEGIN { exit !(s != "" && s <= 1.5) }' || { echo "above 1.5" >&2; exit 1; }
