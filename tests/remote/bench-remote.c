/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The remote tier against the cluster it runs on, in the same run: `rados
 * bench` writes and reads objects of the same size (a Llama-3-8B block and
 * its 4 KiB header) at the same queue depth, and one object at a time for
 * the round trip; then node A writes 64 reused blocks back, node B
 * restores them for one lookup (into a cold pool, then another 64 into a
 * warm one), and B's lookups of 4-block leading runs
 * are timed from LOOKUP until the blocks are in host memory.  Prints
 * ratios to docs/benchmarks.md's format.  Not a pass/fail test.
 *
 * The CPU time of the daemon doing each (utime + stime of every thread,
 * librados's included, from /proc/PID/stat around the measured window),
 * per GB of objects moved.
 *
 * With --peer mooncake, also Mooncake Store in the same run
 * (bench-mooncake.py): the same objects put and got, the same number at
 * the same concurrency, over TCP on loopback; skipped, saying why, where
 * its virtual environment (scripts/mooncake-venv.sh) is missing or it
 * cannot run.
 *
 * With --neighbour, only this: while node B restores a 64-block leading
 * run at its default queue depth, a neighbour on B does one-key lookups
 * of a block of its own; its median and worst beside the restore, against
 * the same neighbour alone just before (KVTIERD=an older build's kvtierd
 * gives the figures before a change).
 *
 *   build/tests/remote/bench-remote [--peer mooncake | --neighbour]
 *   (KVT_CEPH_BYTES=1610612736 is set)
 */
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "ceph.h"

#define BLOCKS 64
#define DEPTH 16
#define RUN 4
#define RUNS 10

/* A number after label in rados bench's report. */
static double bench_field(const char *out, const char *label)
{
	const char *p = strstr(out, label);
	double v = 0;
	CHECK(p && sscanf(p + strlen(label), " %lf", &v) == 1, "no '%s' in rados bench output", label);
	return v;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* CPU seconds the process has used, all its threads. */
static double cpu_s(pid_t pid)
{
	char path[64], buf[1024];
	unsigned long utime = 0, stime = 0;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	CHECK(f, "open %s", path);
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	/* After the command's ")": state, then fields 4..13, utime, stime. */
	const char *p = strrchr(buf, ')');
	CHECK(p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime,
			  &stime) == 2, "parse %s", path);
	return (double)(utime + stime) / (double)sysconf(_SC_CLK_TCK);
}

/* Mooncake Store's put and get of BLOCKS objects of obj bytes, DEPTH at a
 * time; false (and why, printed) when it cannot run here. */
static bool mooncake(size_t obj, double *ret_put, double *ret_get)
{
	const char *venv = getenv("KVT_MOONCAKE_VENV"), *driver = getenv("KVT_BENCH_MOONCAKE");
	char cmd[1024], line[256];
	bool put = false, get = false;

	if (!venv || !driver) {
		printf("mooncake: KVT_MOONCAKE_VENV and KVT_BENCH_MOONCAKE not set (meson sets them): skipped\n");
		return false;
	}
	snprintf(cmd, sizeof(cmd),
		 "%s/bin/python %s %s/bin/python \"$(%s/bin/python -c 'import mooncake, os; "
		 "print(os.path.join(os.path.dirname(mooncake.__file__), \"mooncake_master\"))' 2>/dev/null)\" "
		 "%d %zu %d 2>/dev/null",
		 venv, driver, venv, venv, BLOCKS, obj, DEPTH);
	FILE *p = popen(cmd, "r");
	CHECK(p, "popen");
	while (fgets(line, sizeof(line), p)) {
		put |= sscanf(line, "mooncake put MB/s %lf", ret_put) == 1;
		get |= sscanf(line, "mooncake get MB/s %lf", ret_get) == 1;
		if (!strncmp(line, "mooncake: ", 10))
			printf("%s", line);
	}
	int st = pclose(p);
	if (!put || !get) {
		printf("mooncake: no figures (exit status %d): skipped\n", st);
		return false;
	}
	return true;
}

/* `rados bench seq` of the block's objects, now: MB/s. */
static double seq_limit(const struct ceph *ceph, char *out, size_t size)
{
	CHECK(ceph_sh(ceph, out, size, "rados bench -p kvtier 30 seq -t %d 2>&1", DEPTH) == 0, "seq");
	return bench_field(out, "Bandwidth (MB/sec):");
}

/* LOOKUP until every key of the run is in host memory. */
static double restore(kvt_client *c, const char *model, uint64_t seed, uint32_t n)
{
	uint8_t keys[BLOCKS * 32], st[BLOCKS];
	kvt_ns *ns = engine_ns(c, model, 1);
	CHECK(engine_keys(seed, n * 16, 0, 0, keys, n) == n, "keys");
	double t0 = now_s();
	/* The lookup stages the whole run; the node reads it at its queue
	 * depth, the next key as each read completes. */
	int r = kvt_lookup(ns, keys, n, 0, st);
	if (r > 0)
		r = kvt_wait_resident(ns, keys, n, 30000);
	double t = now_s() - t0;
	CHECK(r == (int)n, "restored %d of %u", r, n);
	CHECK(kvt_lookup(ns, keys, n, 0, st) == (int)n && st[n - 1] == KVT_HOST, "in host memory");
	kvt_ns_close(ns);
	return t;
}

static void store_reused(const struct daemon *a, const char *model, uint64_t seed, uint32_t n)
{
	char out[4096], p[16], s[16];
	snprintf(p, sizeof(p), "%u", n * 16);
	snprintf(s, sizeof(s), "%llu", (unsigned long long)seed);
	CHECK(engine_run(a, out, sizeof(out), "--model", model, "--prefix", p, "--prefix-seed", s,
			 "--suffix", "0", "--name", "A", NULL) == 0, "A stores");
	CHECK(engine_run(a, out, sizeof(out), "--model", model, "--prefix", p, "--prefix-seed", s,
			 "--suffix", "0", "--name", "A-reuse", "--no-store", NULL) == 0, "A reuses");
}

/* ---- --neighbour ------------------------------------------------------ */

#define NEIGHBOUR_ROUNDS 7
#define NEIGHBOUR_MAX (1u << 20)

struct neighbour {
	atomic_int stop;
	atomic_int started;
	double p50_us, worst_us;
	unsigned n;
};

static int cmp_double(const void *a, const void *b);

/* One-key lookups of key until told to stop; median and worst. */
static pid_t neighbour_start(const struct daemon *b, const uint8_t *key, struct neighbour *nb)
{
	atomic_store(&nb->stop, 0);
	atomic_store(&nb->started, 0);
	pid_t pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid)
		return pid;
	harness_in_child();
	static double v[NEIGHBOUR_MAX];
	kvt_client *c = client_connect(b, "neighbour");
	kvt_ns *ns = engine_ns(c, "tiny", 1);
	unsigned n = 0;
	uint8_t st;
	atomic_store(&nb->started, 1);
	while (!atomic_load(&nb->stop) && n < NEIGHBOUR_MAX) {
		double t0 = now_s();
		CHECK(kvt_lookup(ns, key, 1, 0, &st) == 1 && st == KVT_HOST, "the neighbour's block");
		v[n++] = (now_s() - t0) * 1e6;
	}
	qsort(v, n, sizeof(v[0]), cmp_double);
	nb->p50_us = v[n / 2];
	nb->worst_us = v[n - 1];
	nb->n = n;
	_exit(0);
}

static void neighbour_stop(pid_t pid, struct neighbour *nb)
{
	atomic_store(&nb->stop, 1);
	CHECK(wait_exit(pid) == 0, "the neighbour");
}

static double median_of(double *v, unsigned n)
{
	qsort(v, n, sizeof(v[0]), cmp_double);
	return v[n / 2];
}

static int neighbour_main(void)
{
	struct ceph ceph;
	static struct daemon a, b;
	char sec[1024], cfg[2048];
	struct neighbour *nb = mmap(NULL, sizeof(*nb), PROT_READ | PROT_WRITE,
				    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK(nb != MAP_FAILED, "mmap");

	setenv("KVT_CEPH_BYTES", "1610612736", 0);
	ceph_start(&ceph);
	/* The default queue depth: what a node runs with. */
	ceph_remote_section(&ceph, sec, sizeof(sec), "shared", "");
	snprintf(cfg, sizeof(cfg),
		 "[pool]\ncapacity = 1G\nextent_size = 64M\n[tenant.alice]\nuids = 0\nquota = 1G\n%scapacity = 1400M\n",
		 sec);
	node_start(&a, cfg);
	node_start(&b, cfg);
	kvt_client *ca = client_connect(&a, "bench");
	kvt_client *cb = client_connect(&b, "bench");
	WAIT_FOR(stat_get(ca, "remote", "up") == 1 && stat_get(cb, "remote", "up") == 1, "up");

	/* The neighbour's block, on node B only. */
	uint8_t key[32];
	kvt_ns *tiny = engine_ns(cb, "tiny", 1);
	kvt_ns_info info;
	CHECK(kvt_ns_get_info(tiny, &info) == 0, "ns info");
	CHECK(engine_keys(999, 16, 0, 0, key, 1) == 1, "key");
	void *block = calloc(1, info.block_bytes);
	const void *src = block;
	int32_t st;
	CHECK(block && kvt_store(tiny, 0, key, 1, &src, &st) == 1 && st == 0, "the neighbour's store");

	double alone_p50[NEIGHBOUR_ROUNDS], alone_worst[NEIGHBOUR_ROUNDS];
	double beside_p50[NEIGHBOUR_ROUNDS], beside_worst[NEIGHBOUR_ROUNDS], took[NEIGHBOUR_ROUNDS];
	uint64_t written = 0;
	for (int i = 0; i < NEIGHBOUR_ROUNDS; i++) {
		/* Node A computes and reuses a run of BLOCKS blocks: written back. */
		store_reused(&a, "llama3-8b", 300 + i, BLOCKS);
		written += BLOCKS;
		while (stat_get(ca, "remote", "writes") < written)
			usleep(1000);
		/* The neighbour alone, for about as long as the restore takes. */
		pid_t pid = neighbour_start(&b, key, nb);
		while (!atomic_load(&nb->started))
			usleep(100);
		usleep(i ? (useconds_t)(took[i - 1] * 1e6) : 500000);
		neighbour_stop(pid, nb);
		alone_p50[i] = nb->p50_us;
		alone_worst[i] = nb->worst_us;
		/* Beside node B's restore of the run. */
		pid = neighbour_start(&b, key, nb);
		while (!atomic_load(&nb->started))
			usleep(100);
		took[i] = restore(cb, "llama3-8b", 300 + i, BLOCKS);
		neighbour_stop(pid, nb);
		beside_p50[i] = nb->p50_us;
		beside_worst[i] = nb->worst_us;
		fprintf(stderr, "round %d: restore %.0f ms; neighbour alone p50 %.1f worst %.0f us, beside p50 %.1f worst %.0f us\n",
			i + 1, took[i] * 1e3, alone_p50[i], alone_worst[i], beside_p50[i], beside_worst[i]);
	}
	printf("node B restores %d blocks of 2 MiB from the remote tier (queue depth 32), %d rounds; "
	       "a neighbour's one-key lookups on B, medians of the rounds:\n", BLOCKS, NEIGHBOUR_ROUNDS);
	printf("| neighbour | p50 (us) | worst (us) |\n|---|---|---|\n");
	printf("| alone | %.1f | %.0f |\n", median_of(alone_p50, NEIGHBOUR_ROUNDS),
	       median_of(alone_worst, NEIGHBOUR_ROUNDS));
	printf("| beside the restore | %.1f | %.0f |\n", median_of(beside_p50, NEIGHBOUR_ROUNDS),
	       median_of(beside_worst, NEIGHBOUR_ROUNDS));
	printf("restore of %d blocks: median %.0f ms\n", BLOCKS, median_of(took, NEIGHBOUR_ROUNDS) * 1e3);
	free(block);
	kvt_ns_close(tiny);
	two_nodes_stop(&ceph, &a, &b, ca, cb);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "--neighbour"))
		return neighbour_main();
	bool peer = argc == 3 && !strcmp(argv[1], "--peer") && !strcmp(argv[2], "mooncake");
	if (argc > 1 && !peer) {
		fprintf(stderr, "usage: bench-remote [--peer mooncake | --neighbour]\n");
		return 2;
	}
	struct ceph ceph;
	static struct daemon a, b;
	static char out[65536];
	char sec[1024], cfg[2048], extra[128];
	const size_t obj = (2u << 20) + 4096, small = (32u << 10) + 4096;

	setenv("KVT_CEPH_BYTES", "1610612736", 0);
	ceph_start(&ceph);
	/* A small block (the tiny model's 32 KiB): a round trip that moves
	 * little. */
	CHECK(ceph_sh(&ceph, out, sizeof(out), "rados bench -p kvtier 30 write -b %zu -t 1 --max-objects %d --no-cleanup 2>&1 && "
		      "rados bench -p kvtier 30 seq -t 1 2>&1 && rados -p kvtier cleanup >/dev/null 2>&1",
		      small, BLOCKS) == 0, "small objects");
	double rtt_small = bench_field(strstr(out, "Total time run") + 1, "Average Latency(s):");
	/* The block's objects stay: `seq` reads them again right before each
	 * restore, so that each ratio is to a limit measured beside it (the
	 * two cores are shared, and the limit moves within a run). */
	CHECK(ceph_sh(&ceph, out, sizeof(out), "rados bench -p kvtier 30 write -b %zu -t %d --max-objects %d --no-cleanup 2>&1",
		      obj, DEPTH, BLOCKS) == 0, "rados bench write");
	double w_lim = bench_field(out, "Bandwidth (MB/sec):");
	CHECK(ceph_sh(&ceph, out, sizeof(out), "rados bench -p kvtier 30 seq -t 1 2>&1") == 0, "seq -t 1");
	double rtt = bench_field(out, "Average Latency(s):");

	snprintf(extra, sizeof(extra), "queue_depth = %d\n", DEPTH);
	ceph_remote_section(&ceph, sec, sizeof(sec), "shared", extra);
	snprintf(cfg, sizeof(cfg),
		 "[pool]\ncapacity = 512M\nextent_size = 64M\n[tenant.alice]\nuids = 0\nquota = 512M\n%scapacity = 1G\n",
		 sec);
	node_start(&a, cfg);
	node_start(&b, cfg);
	kvt_client *ca = client_connect(&a, "bench");
	kvt_client *cb = client_connect(&b, "bench");
	WAIT_FOR(stat_get(ca, "remote", "up") == 1 && stat_get(cb, "remote", "up") == 1, "up");

	/* Write-back: from the reuse that queues all 64 to the last done. */
	char p[16];
	snprintf(p, sizeof(p), "%u", BLOCKS * 16);
	CHECK(engine_run(&a, out, sizeof(out), "--prefix", p, "--suffix", "0", "--name", "A", NULL) == 0, "A");
	/* Timed from the first write-back in flight: the reusing engine's
	 * start (its connect pre-faults the pool) is not the tier's. */
	pid_t pid = fork();
	if (pid == 0) {
		harness_in_child();
		_exit(engine_run(&a, out, sizeof(out), "--prefix", p, "--suffix", "0", "--name", "A2",
				 "--no-store", NULL));
	}
	while (stat_get(ca, "remote", "in_flight") == 0 && stat_get(ca, "remote", "writes") == 0)
		usleep(200);
	double t0 = now_s(), cpu0 = cpu_s(a.pid);
	while (stat_get(ca, "remote", "writes") < BLOCKS)
		usleep(1000);
	double wb = (double)BLOCKS * obj / (now_s() - t0) / 1e6;
	double wb_cpu = cpu_s(a.pid) - cpu0;
	CHECK(wait_exit(pid) == 0, "A2");
	double r_lim = seq_limit(&ceph, out, sizeof(out));
	cpu0 = cpu_s(b.pid);
	double rs = (double)BLOCKS * obj / restore(cb, "llama3-8b", 1, BLOCKS) / 1e6;
	double rs_cpu = cpu_s(b.pid) - cpu0;
	double gb = (double)BLOCKS * obj / 1e9;
	uint64_t in_place = stat_sum(cb, "remote", "reads_in_place"); /* 0: a daemon before it */

	/* Again into a warm pool, as on a node that has run a while: B
	 * drops the 64 blocks (their slots free, the extents stay) and
	 * restores another 64 A wrote back, without making extents. */
	uint8_t keys[BLOCKS * 32];
	kvt_ns *big = engine_ns(cb, "llama3-8b", 1);
	CHECK(engine_keys(1, BLOCKS * 16, 0, 0, keys, BLOCKS) == BLOCKS, "keys");
	CHECK(kvt_delete(big, keys, BLOCKS) == BLOCKS, "B drops the restored blocks");
	kvt_ns_close(big);
	store_reused(&a, "llama3-8b", 2, BLOCKS);
	while (stat_get(ca, "remote", "writes") < 2 * BLOCKS)
		usleep(1000);
	uint64_t extents0 = stat_get(cb, "daemon", "extents");
	double r_lim_warm = seq_limit(&ceph, out, sizeof(out));
	cpu0 = cpu_s(b.pid);
	double rs_warm = (double)BLOCKS * obj / restore(cb, "llama3-8b", 2, BLOCKS) / 1e6;
	double rs_warm_cpu = cpu_s(b.pid) - cpu0;
	CHECK(stat_get(cb, "daemon", "extents") == extents0, "no extent made for the warm restore");

	double lat[RUNS], lat_small[RUNS];
	uint64_t written = 2 * BLOCKS;
	for (int i = 0; i < RUNS; i++) {
		store_reused(&a, "llama3-8b", 100 + i, RUN);
		store_reused(&a, "tiny", 200 + i, RUN);
		written += 2 * RUN;
		while (stat_get(ca, "remote", "writes") < written)
			usleep(1000);
		lat[i] = restore(cb, "llama3-8b", 100 + i, RUN);
		lat_small[i] = restore(cb, "tiny", 200 + i, RUN);
	}
	qsort(lat, RUNS, sizeof(lat[0]), cmp_double);
	qsort(lat_small, RUNS, sizeof(lat[0]), cmp_double);

	printf("object %zu B, queue depth %d, %d objects; memstore OSD on this machine\n", obj, DEPTH, BLOCKS);
	printf("write-back   %8.1f MB/s   rados bench write %8.1f MB/s   ratio %.2f\n", wb, w_lim, wb / w_lim);
	printf("restore      %8.1f MB/s   rados bench seq   %8.1f MB/s   ratio %.2f   (pool cold: extents made meanwhile; %llu of %d read in place)\n",
	       rs, r_lim, rs / r_lim, (unsigned long long)in_place, BLOCKS);
	printf("restore      %8.1f MB/s   rados bench seq   %8.1f MB/s   ratio %.2f   (pool warm)\n",
	       rs_warm, r_lim_warm, rs_warm / r_lim_warm);
	printf("daemon CPU   write-back %.2f s/GB (node A, %.3f s; it also serves the engine reusing the blocks)   "
	       "restore %.2f s/GB cold (node B, %.3f s), %.2f s/GB warm (%.3f s)\n",
	       wb_cpu / gb, wb_cpu, rs_cpu / gb, rs_cpu, rs_warm_cpu / gb, rs_warm_cpu);
	double mc_put, mc_get;
	if (peer && mooncake(obj, &mc_put, &mc_get)) {
		printf("| %d objects of %zu B, depth %d | kvtier (Ceph) | Mooncake Store | rados bench | kvtier / Mooncake | kvtier / rados bench |\n",
		       BLOCKS, obj, DEPTH);
		printf("|---|---|---|---|---|---|\n");
		printf("| write-back / put | %.1f MB/s | %.1f MB/s | %.1f MB/s | %.2f | %.2f |\n", wb,
		       mc_put, w_lim, wb / mc_put, wb / w_lim);
		printf("| restore / get, pool cold | %.1f MB/s | %.1f MB/s | %.1f MB/s | %.2f | %.2f |\n", rs,
		       mc_get, r_lim, rs / mc_get, rs / r_lim);
		printf("| restore / get, pool warm | %.1f MB/s | %.1f MB/s | %.1f MB/s | %.2f | %.2f |\n",
		       rs_warm, mc_get, r_lim_warm, rs_warm / mc_get, rs_warm / r_lim_warm);
	}
	double xfer = RUN * obj / (r_lim * 1e6);
	printf("lookup of a %d-block remote leading run, 2 MiB blocks: median %.2f ms (min %.2f, max %.2f); "
	       "one RADOS read (rados bench seq -t 1) %.2f ms: ratio %.2f; %d objects at rados bench's bandwidth %.2f ms: ratio %.2f\n",
	       RUN, lat[RUNS / 2] * 1e3, lat[0] * 1e3, lat[RUNS - 1] * 1e3, rtt * 1e3,
	       lat[RUNS / 2] / rtt, RUN, xfer * 1e3, lat[RUNS / 2] / xfer);
	printf("lookup of a %d-block remote leading run, 32 KiB blocks: median %.2f ms (min %.2f, max %.2f); "
	       "one RADOS read of one such object %.2f ms: ratio %.2f\n",
	       RUN, lat_small[RUNS / 2] * 1e3, lat_small[0] * 1e3, lat_small[RUNS - 1] * 1e3,
	       rtt_small * 1e3, lat_small[RUNS / 2] / rtt_small);
	two_nodes_stop(&ceph, &a, &b, ca, cb);
	return 0;
}
