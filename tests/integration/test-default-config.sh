#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# The configuration file the daemon reads by default is the one its
# documentation names: `kvtierd --help`, the man pages kvtierd(8) and
# kvtierd.conf(5) as this build installs them, and the systemd unit as this
# build installs it all name the same path, and nothing else as the
# configuration.  A build with the default prefix (/usr) reads
# /etc/kvtierd/kvtierd.conf, where operators look for it and where the
# pages in the source tree say it is.
#
# Usage: test-default-config.sh KVTIERD MAN_DIR UNIT PREFIX
#   MAN_DIR  the directory of the installed form of kvtierd.8 and
#            kvtierd.conf.5 (the build's docs/)
#   UNIT     the installed form of kvtierd.service (the build's systemd/)
#   PREFIX   the build's prefix
# Exit: 0 pass, 1 fail.

set -u

kvtierd=${1:?usage: $0 KVTIERD MAN_DIR UNIT PREFIX}
man_dir=${2:?} unit=${3:?} prefix=${4:?}
failed=0
fail() {
	echo "FAIL: $*"
	failed=1
}

# "-c, --config FILE    read FILE (default PATH if it exists,"
path=$("$kvtierd" --help | sed -n 's/.*(default \([^ ]*\) if it exists.*/\1/p')
[ -n "$path" ] || { echo "FAIL: kvtierd --help names no default configuration"; exit 1; }
echo "kvtierd --help: $path"
case $path in
/*) ;;
*) fail "the default configuration '$path' is not absolute" ;;
esac
if [ "$prefix" = /usr ] && [ "$path" != /etc/kvtierd/kvtierd.conf ]; then
	fail "prefix /usr reads '$path', not /etc/kvtierd/kvtierd.conf"
fi

# Every configuration path a file names (DIR/kvtierd/kvtierd.conf, also
# the .example beside it, with groff's \: break points removed) must be in
# the same directory as $path, and $path itself must be named.
names_only() {
	file=$1
	[ -f "$file" ] || { fail "$file does not exist"; return; }
	found=$(sed 's/\\://g' "$file" | grep -o '[^ "(]*/kvtierd/kvtierd\.conf[.a-z]*' | sort -u)
	dir=${path%/kvtierd.conf}
	for p in $found; do
		case $p in
		"$path" | "$dir/kvtierd.conf.example") ;;
		*) fail "$file names '$p', outside $dir (kvtierd --help: $path)" ;;
		esac
	done
	echo "$found" | grep -qx "$path" || fail "$file does not name $path"
	echo "$file: $(echo $found)"
}
names_only "$man_dir/kvtierd.8"
names_only "$man_dir/kvtierd.conf.5"
names_only "$unit"

exit $failed
