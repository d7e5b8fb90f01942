#!/bin/sh
# Every comparative benchmark of kvtier, in one run on this machine:
#
#   host tier     bench-host: store+load of 64 KiB - 4 MiB blocks against
#                 memcpy and against Redis (hiredis, Unix socket); the
#                 control round trip and one-key lookup/acquire against a
#                 bare AF_UNIX ping-pong; batched lookups in keys/s
#   NVMe tier     bench-nvme: spill and restore against fio (restores of
#                 128 blocks a load and of a block a load), also over 1 and
#                 2 spill files against fio with 1 and 2 jobs
#   scale         bench-scale: lookup latency and daemon memory per block as
#                 the index grows, batched lookups against a plain table in
#                 its own process; recovery time against blocks on disk;
#                 write-back of N dirty blocks against the same writes bare
#   codec         bench-codec: store+load of a bfloat16 paged cache stored
#                 as fp8-e4m3 and int4 against codec none and memcpy
#   restart       bench-restart: the host tier kept across an upgrade in
#                 place against NVMe recovery, loaded back against memcpy;
#                 the ledger's cost on the store path (keep = yes / no)
#   fair          bench-fair: another tenant's one-key lookups beside a
#                 tenant that floods 8192-key lookups, against them alone
#   evict         scripts/bench-evict.sh: every eviction policy on every
#                 trace of docs/workload.md against Belady and LRU (hit
#                 counts of the simulator; $MOONCAKE_CONV adds Mooncake's
#                 conversation trace)
#
# then tables (markdown, ready to paste into docs/benchmarks.md) and
# gnuplot plots of the results, all in one results directory.
#
# Usage: scripts/bench.sh [--quick|--long] [--build DIR] [--out DIR]
#                         [--no-install] [--only PARTS]
#
#   --quick       fewer pairs and smaller sizes: a check that everything
#                 works, not figures to publish (a few minutes)
#   --long        more pairs, the index up to 10^7 blocks, 10^6 blocks on
#                 disk and 10^6 dirty blocks, where memory and disk allow
#                 (also KVT_BENCH_LONG=1)
#   --build DIR   meson build directory (default build-bench; set up when
#                 missing)
#   --out DIR     results directory (default DIR/bench-results/DATE-MODE
#                 under the build directory)
#   --no-install  do not install missing packages (parts that need them
#                 are skipped)
#   --only PARTS  comma-separated subset of
#                 host,nvme,scale,codec,restart,fair,evict
#
# It runs as root to install packages (apt-get) and to lock the daemon's
# pool; the Redis server it starts is its own, with a private
# configuration, and it is stopped by its pid at the end.
set -eu
cd "$(dirname "$0")/.."

mode=default
build="build-bench"
out=
install=1
only=host,nvme,scale,codec,restart,fair,evict
[ "${KVT_BENCH_LONG:-0}" = 1 ] && mode=long
while [ $# -gt 0 ]; do
	case $1 in
	--quick) mode=quick ;;
	--long) mode=long ;;
	--build) build=$2; shift ;;
	--out) out=$2; shift ;;
	--no-install) install=0 ;;
	--only) only=$2; shift ;;
	-h|--help) sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "bench.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
	esac
	shift
done
want() { case ",$only," in *",$1,"*) return 0 ;; esac; return 1; }
say() { echo "bench.sh: $*" >&2; }

# ---- packages --------------------------------------------------------------
# fio is bench-nvme's limit, redis-server and libhiredis-dev bench-host's
# peer, gnuplot-nox draws the plots.  The build itself needs what deps.sh
# installs.
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "ok installed"; }
missing=
for p in fio redis-server libhiredis-dev gnuplot-nox; do
	have_pkg "$p" || missing="$missing $p"
done
if [ -n "$missing" ]; then
	if [ "$install" = 1 ] && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
		say "installing$missing"
		./scripts/deps.sh
		apt-get update -qq
		# shellcheck disable=SC2086 # one word per package
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
		reconfigure=1
	else
		say "missing packages:$missing; the parts that need them are skipped (apt-get install$missing)"
	fi
fi

# ---- build -----------------------------------------------------------------
if [ ! -d "$build" ]; then
	meson setup "$build" >"$build.setup.log" 2>&1 || { cat "$build.setup.log" >&2; exit 1; }
elif [ "${reconfigure:-0}" = 1 ]; then
	# libhiredis-dev may be new: bench-host finds it only when configured anew.
	meson setup --reconfigure "$build" >/dev/null
fi
ninja -C "$build" daemon/kvtierd client/kvtierctl tests/bench/bench-host \
	tests/bench/bench-nvme tests/bench/bench-scale tests/bench/bench-codec \
	tests/bench/bench-restart tests/bench/bench-fair >&2
case $build in
/*) abs=$build ;;
*) abs=$PWD/$build ;;
esac
kvtierd=$abs/daemon/kvtierd
bench=$abs/tests/bench

# ---- what each mode runs ---------------------------------------------------
case $mode in
quick)
	host_args="--pairs 5 --rounds 1 --mib 16 --pings 2000 --batches 200"
	nvme_args="--pairs 5 --mib 256 --engine io_uring --files 1,2"
	scale_args="--pairs 5 --max 100000 --recovery-max 10000 --writeback-max 10000 --iters 1000 --batches 100"
	codec_args="--pairs 3 --mib 32"
	restart_args="--max-gib 1 --pairs 3"
	fair_args="--load lookup --pairs 3 --iters 500" ;;
default)
	host_args=""
	nvme_args="--files 1,2"
	scale_args=""
	codec_args=""
	restart_args=""
	fair_args="--load lookup --pairs 11 --iters 2000" ;;
long)
	host_args="--pairs 15"
	nvme_args="--pairs 15 --files 1,2"
	scale_args="--pairs 11 --max 10000000 --recovery-max 1000000 --writeback-max 1000000"
	codec_args="--pairs 15"
	restart_args="--max-gib 4 --pairs 15"
	fair_args="--load lookup --pairs 21 --iters 2000" ;;
esac

stamp=$(date +%Y%m%d-%H%M%S)
[ -n "$out" ] || out=$build/bench-results/$stamp-$mode
mkdir -p "$out"
out=$(cd "$out" && pwd)
say "mode $mode; results in $out"

# ---- the Redis server ------------------------------------------------------
redis_pid=
redis_dir=
cleanup() {
	if [ -n "$redis_pid" ]; then
		kill "$redis_pid" 2>/dev/null || true
		wait "$redis_pid" 2>/dev/null || true
		redis_pid=
	fi
	[ -z "$redis_dir" ] || rm -rf "$redis_dir"
	redis_dir=
}
trap cleanup EXIT
trap 'cleanup; exit 130' INT TERM HUP

# No persistence and no TCP: a cache on a Unix socket, as the offload
# systems that use Redis as a shared tier run it next to the engine.
redis_start() {
	command -v redis-server >/dev/null || { say "no redis-server: bench-host runs without the Redis peer"; return 1; }
	"$bench/bench-host" --help | grep -q "not built" && { say "bench-host was built without hiredis: no Redis peer"; return 1; }
	redis_dir=$(mktemp -d /tmp/kvt-bench-redis-XXXXXX)
	cat >"$redis_dir/redis.conf" <<-EOF
	port 0
	unixsocket $redis_dir/redis.sock
	unixsocketperm 700
	save ""
	appendonly no
	daemonize no
	dir $redis_dir
	logfile $redis_dir/redis.log
	EOF
	redis-server "$redis_dir/redis.conf" &
	redis_pid=$!
	i=0
	while [ ! -S "$redis_dir/redis.sock" ]; do
		if ! kill -0 "$redis_pid" 2>/dev/null || [ $i -ge 100 ]; then
			say "redis-server did not start:"; cat "$redis_dir/redis.log" >&2
			cleanup
			return 1
		fi
		sleep 0.1
		i=$((i + 1))
	done
	redis-server --version >"$out/redis-version.txt"
}

# ---- the machine -----------------------------------------------------------
{
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "mode: $mode"
	echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- 2>/dev/null || echo ' (with uncommitted changes)')"
	echo "kernel: $(uname -sr)"
	echo "cpu: $(nproc) x $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
	echo "memory: $(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)"
	# shellcheck disable=SC1091
	echo "os: $(. /etc/os-release && echo "$PRETTY_NAME")"
	thp=/sys/kernel/mm/transparent_hugepage
	echo "thp: anon $(sed 's/.*\[\(.*\)\].*/\1/' $thp/enabled 2>/dev/null), shmem $(sed 's/.*\[\(.*\)\].*/\1/' $thp/shmem_enabled 2>/dev/null); nr_hugepages $(cat /proc/sys/vm/nr_hugepages)"
	echo "disk: $(df -P /var/tmp | awk 'NR == 2 { print $1 }') under /var/tmp"
	echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
	command -v fio >/dev/null && echo "fio: $(fio --version | sed 's/^fio-//')"
	command -v redis-server >/dev/null && echo "redis: $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/')"
	pkg-config --exists hiredis 2>/dev/null && echo "hiredis: $(pkg-config --modversion hiredis)"
	command -v gnuplot >/dev/null && echo "gnuplot: $(gnuplot --version | sed 's/^gnuplot //')"
} >"$out/machine.txt"

# ---- the runs --------------------------------------------------------------
# Each program writes one JSON line on stdout and its table and progress
# on stderr; 77 means skipped, with the reason on stdout.
: >"$out/timing.txt"
run() { # name, program, arguments...
	name=$1
	shift
	say "$name: $*"
	t0=$(date +%s)
	rc=0
	KVTIERD=$kvtierd "$@" --json >"$out/$name.json" 2>"$out/$name.log" || rc=$?
	t1=$(date +%s)
	echo "$name $((t1 - t0)) s, exit $rc" >>"$out/timing.txt"
	case $rc in
	0) sed -n '/^$/,$p' "$out/$name.log" | grep -v "^bench-" >&2 || true ;;
	77) say "$name skipped: $(cat "$out/$name.json")"; mv "$out/$name.json" "$out/$name.skipped" ;;
	*) say "$name failed (exit $rc), see $out/$name.log"; tail -20 "$out/$name.log" >&2
	   mv "$out/$name.json" "$out/$name.failed"; failed=1 ;;
	esac
}
failed=0
t_start=$(date +%s)
if want host; then
	redis_arg=
	redis_start && redis_arg="--redis $redis_dir/redis.sock"
	# shellcheck disable=SC2086
	run host "$bench/bench-host" $host_args $redis_arg
	cleanup
fi
# shellcheck disable=SC2086
want nvme && run nvme "$bench/bench-nvme" $nvme_args
# shellcheck disable=SC2086
want scale && run scale "$bench/bench-scale" $scale_args
# shellcheck disable=SC2086
want codec && run codec "$bench/bench-codec" $codec_args

want restart && run restart "$bench/bench-restart" $restart_args
# The daemon's loop on a CPU of its own, B and A on another: where B and
# the loop share a CPU a lookup is a switch, across CPUs a wakeup, and an
# unpinned run's pairs differ by where the scheduler put them.
if [ "$(nproc)" -ge 2 ]; then fair_args="$fair_args --pin split"; fi
# shellcheck disable=SC2086
want fair && run fair "$bench/bench-fair" $fair_args
if want evict; then
	# Hit counts, not times: the same in every mode.
	say "evict: scripts/bench-evict.sh $build $out/evict"
	t0=$(date +%s)
	rc=0
	scripts/bench-evict.sh "$build" "$out/evict" >"$out/evict.txt" 2>"$out/evict.log" || rc=$?
	echo "evict $(($(date +%s) - t0)) s, exit $rc" >>"$out/timing.txt"
	if [ $rc = 0 ]; then
		cat "$out/evict.txt" >&2
	else
		say "evict failed (exit $rc), see $out/evict.log"; tail -20 "$out/evict.log" >&2
		mv "$out/evict.txt" "$out/evict.failed"; failed=1
	fi
fi
echo "total $(($(date +%s) - t_start)) s" >>"$out/timing.txt"

# ---- tables and plots ------------------------------------------------------
python3 scripts/bench-report.py "$out"
say "results: $out (section for docs/benchmarks.md: $out/benchmarks-section.md)"
cat "$out/timing.txt" >&2
exit $failed
