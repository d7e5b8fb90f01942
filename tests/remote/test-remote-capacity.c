/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Capacity: three nodes write several times the tier's capacity into one
 * shared namespace; the node holding the trim lock removes the oldest
 * objects, and the pool, measured with the cluster's own tools, ends
 * within the configured capacity, still holding blocks.
 */
#include <string.h>

#include "ceph.h"

#define NODES 3
#define CAPACITY (1u << 20)

static uint64_t passes(kvt_client **c)
{
	uint64_t n = 0;
	for (int i = 0; i < NODES; i++)
		n += stat_get(c[i], "remote", "trim_passes");
	return n;
}

int main(void)
{
	struct ceph ceph;
	static struct daemon d[NODES];
	kvt_client *c[NODES];
	char sec[1024], cfg[2048], out[256];

	ceph_start(&ceph);
	ceph_remote_section(&ceph, sec, sizeof(sec), "shared",
			    "min_reuse = 0\ntrim_interval_ms = 300\n");
	/* capacity = 1M: the section's later key wins over the helper's. */
	snprintf(cfg, sizeof(cfg), "[tenant.alice]\nuids = 0\n%scapacity = 1M\n", sec);
	for (int i = 0; i < NODES; i++) {
		node_start(&d[i], cfg);
		c[i] = client_connect(&d[i], "checker");
	}
	for (int i = 0; i < NODES; i++)
		WAIT_FOR(stat_get(c[i], "remote", "up") == 1, "connected");
	/* 3 nodes x 4 prefixes x 8 blocks of 32 KiB + header: 3.4 MiB. */
	for (int p = 0; p < 4; p++)
		for (int i = 0; i < NODES; i++) {
			char seed[16], name[16];
			snprintf(seed, sizeof(seed), "%d", 10 + p * NODES + i);
			snprintf(name, sizeof(name), "n%d-p%d", i, p);
			CHECK(engine_run(&d[i], out, sizeof(out), "--model", "tiny", "--name", name,
					 "--prefix", "128", "--prefix-seed", seed, "--suffix", "0",
					 "--expect-hits", "0", NULL) == 0, "%s", name);
		}
	uint64_t written = 0;
	for (int i = 0; i < NODES; i++) {
		WAIT_FOR(stat_get(c[i], "remote", "writes") == 32, "each node's 32 write-backs");
		written += stat_get(c[i], "remote", "write_bytes");
	}
	CHECK(written >= 3 * CAPACITY, "written %llu", (unsigned long long)written);
	uint64_t p0 = passes(c);
	WAIT_FOR(passes(c) >= p0 + 2, "two trim passes after the last write");

	/* The cluster's account: every object's size in the namespace. */
	CHECK(ceph_sh(&ceph, out, sizeof(out),
		      "rados -p kvtier -N alice ls | grep -v kvtier.trim | while read o; do "
		      "rados -p kvtier -N alice stat $o; done | awk '{s += $NF; n++} END {print s + 0, n + 0}'") == 0,
	      "stat");
	unsigned long long bytes = 0, objects = 0;
	CHECK(sscanf(out, "%llu %llu", &bytes, &objects) == 2, "parse '%s'", out);
	CHECK(bytes <= CAPACITY, "the namespace holds %llu bytes, above the capacity", bytes);
	CHECK(objects > 0, "trimming keeps the newest blocks");
	uint64_t trimmed = 0;
	for (int i = 0; i < NODES; i++)
		trimmed += stat_get(c[i], "remote", "trimmed");
	CHECK(trimmed > 0 && trimmed + objects == 3 * 32, "%llu trimmed, %llu kept, of 96",
	      (unsigned long long)trimmed, objects);

	for (int i = 0; i < NODES; i++) {
		kvt_client_free(c[i]);
		daemon_stop(&d[i]);
		daemon_cleanup(&d[i]);
	}
	ceph_stop(&ceph);
	return 0;
}
