/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The remote tier against the cluster it runs on, in the same run: `rados
 * bench` writes and reads objects of the same size (a Llama-3-8B block and
 * its 4 KiB header) at the same queue depth, and one object at a time for
 * the round trip; then node A writes 64 reused blocks back, node B
 * restores them for one lookup, and B's lookups of 4-block leading runs
 * are timed from LOOKUP until the blocks are in host memory.  Prints
 * ratios to docs/benchmarks.md's format.  Not a pass/fail test.
 *
 *   build/tests/remote/bench-remote   (KVT_CEPH_BYTES=1610612736 is set)
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "ceph.h"

#define BLOCKS 64
#define DEPTH 16
#define RUN 4
#define RUNS 10

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

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

int main(void)
{
	struct ceph ceph;
	static struct daemon a, b;
	static char out[65536];
	char sec[1024], cfg[2048], extra[128];
	const size_t obj = (2u << 20) + 4096, small = (32u << 10) + 4096;

	setenv("KVT_CEPH_BYTES", "1610612736", 0);
	ceph_start(&ceph);
	CHECK(ceph_sh(&ceph, out, sizeof(out), "rados bench -p kvtier 30 write -b %zu -t %d --max-objects %d --no-cleanup 2>&1",
		      obj, DEPTH, BLOCKS) == 0, "rados bench write");
	double w_lim = bench_field(out, "Bandwidth (MB/sec):");
	CHECK(ceph_sh(&ceph, out, sizeof(out), "rados bench -p kvtier 30 seq -t %d 2>&1", DEPTH) == 0, "seq");
	double r_lim = bench_field(out, "Bandwidth (MB/sec):");
	CHECK(ceph_sh(&ceph, out, sizeof(out), "rados bench -p kvtier 30 seq -t 1 2>&1") == 0, "seq -t 1");
	double rtt = bench_field(out, "Average Latency(s):");
	CHECK(ceph_sh(&ceph, NULL, 0, "rados -p kvtier cleanup >/dev/null 2>&1") == 0, "cleanup");
	/* The same for a small block (the tiny model's 32 KiB): a round trip
	 * that moves little. */
	CHECK(ceph_sh(&ceph, out, sizeof(out), "rados bench -p kvtier 30 write -b %zu -t 1 --max-objects %d --no-cleanup 2>&1 && "
		      "rados bench -p kvtier 30 seq -t 1 2>&1 && rados -p kvtier cleanup >/dev/null 2>&1",
		      small, BLOCKS) == 0, "small objects");
	double rtt_small = bench_field(strstr(out, "Total time run") + 1, "Average Latency(s):");

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
	double t0 = now_s();
	while (stat_get(ca, "remote", "writes") < BLOCKS)
		usleep(1000);
	double wb = (double)BLOCKS * obj / (now_s() - t0) / 1e6;
	CHECK(wait_exit(pid) == 0, "A2");
	double rs = (double)BLOCKS * obj / restore(cb, "llama3-8b", 1, BLOCKS) / 1e6;

	double lat[RUNS], lat_small[RUNS];
	uint64_t written = BLOCKS;
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
	printf("restore      %8.1f MB/s   rados bench seq   %8.1f MB/s   ratio %.2f\n", rs, r_lim, rs / r_lim);
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
