#!/bin/sh
# One engine test file under pytest in the engine venv; exit 77 (skipped)
# without it.  The package under test is the build's wheel (meson's target
# kvtier-wheel, scripts/wheel.sh: brought up to date here, its path in
# KVT_WHEEL_FILE), installed into the venv when it is not there yet; the
# tests import it from the venv and nowhere else (checked).
# Env: KVT_VENV, KVT_BUILD_ROOT, KVT_WHEEL_FILE, KVTIERD.
set -u
# Skipped, to meson (tests/skip.h).
KVT_TEST_SKIP=77
test_file=$1
py="${KVT_VENV:-}/bin/python"
if [ ! -x "$py" ]; then
	echo "skipped: no engine venv at ${KVT_VENV:-?} (./scripts/venv.sh BUILD/venv makes it)"
	exit $KVT_TEST_SKIP
fi
# The engine tests run one at a time (is_parallel: false), and
# scripts/test.sh runs the other suites beside them with --no-rebuild: no
# other ninja is at work in the build.
log=$(mktemp /tmp/kvt-wheel.XXXXXX)
if ! ninja -C "${KVT_BUILD_ROOT:?}" "${KVT_WHEEL_FILE#"$KVT_BUILD_ROOT"/}" >"$log" 2>&1; then
	cat "$log"
	rm -f "$log"
	echo "the wheel could not be built (scripts/wheel.sh)"
	exit 1
fi
grep '^wheel.sh: ' "$log"
rm -f "$log"
wheel=$(cat "${KVT_WHEEL_FILE:?}") || exit 1
stamp=$KVT_VENV/.kvtier-wheel
if ! sha256sum "$wheel" | cmp -s - "$stamp"; then
	"$py" -m pip install -q --disable-pip-version-check --no-deps --force-reinstall "$wheel" ||
		exit 1
	sha256sum "$wheel" >"$stamp"
fi
unset PYTHONPATH
# The package the tests import: the wheel's, in the venv.
(cd / && "$py" -c '
import os, sys, kvtier
venv = os.path.realpath(sys.argv[1])
for f in (kvtier.__file__, kvtier._kvtier.__file__):
    if not os.path.realpath(f).startswith(venv + os.sep):
        sys.exit(f"kvtier is imported from {f}, not from the venv {venv}")
' "$KVT_VENV") || exit 1
# vLLM leaves sockets and a compile cache in TMPDIR: a private one.
TMPDIR=$(mktemp -d /tmp/kvt-engine-test.XXXXXX)
# Open to other uids: a test connects as uid 65534 to a daemon in there.
chmod 755 "$TMPDIR"
export TMPDIR HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
# vLLM's and inductor's compile caches: one per build, shared by the test
# files (whose engines compile the same graphs), nothing left in $HOME.
export VLLM_CACHE_ROOT="$KVT_BUILD_ROOT/compile-cache/vllm"
export TORCHINDUCTOR_CACHE_DIR="$KVT_BUILD_ROOT/compile-cache/inductor"
"$py" -m pytest -q -p no:cacheprovider "$(dirname "$0")/$test_file"
rc=$?
rm -rf "$TMPDIR"
[ "$rc" -eq 5 ] && { echo "skipped: no test collected"; exit $KVT_TEST_SKIP; }
exit "$rc"
