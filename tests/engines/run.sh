#!/bin/sh
# One engine test file under pytest in the engine venv; exit 77 (skipped)
# without it.  Env: KVT_VENV, PYTHONPATH (the built package), KVTIERD.
set -u
# Skipped, to meson (tests/skip.h).
KVT_TEST_SKIP=77
test_file=$1
py="${KVT_VENV:-}/bin/python"
if [ ! -x "$py" ]; then
	echo "skipped: no engine venv at ${KVT_VENV:-?} (./scripts/venv.sh BUILD/venv makes it)"
	exit $KVT_TEST_SKIP
fi
# vLLM leaves sockets and a compile cache in TMPDIR: a private one.
TMPDIR=$(mktemp -d /tmp/kvt-engine-test.XXXXXX)
# Open to other uids: a test connects as uid 65534 to a daemon in there.
chmod 755 "$TMPDIR"
export TMPDIR HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
"$py" -m pytest -q -p no:cacheprovider "$(dirname "$0")/$test_file"
rc=$?
rm -rf "$TMPDIR"
[ "$rc" -eq 5 ] && { echo "skipped: no test collected"; exit $KVT_TEST_SKIP; }
exit "$rc"
