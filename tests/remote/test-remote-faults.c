/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The cluster stops answering in the middle of a run (its only OSD frozen
 * for longer than the operation timeout): engines on both nodes keep
 * being served from the local tiers, every byte right; the tier shows as
 * degraded; once the OSD answers again the tier recovers by itself and
 * shares prefixes again.
 */
#include <string.h>

#include "ceph.h"

static int run(const struct daemon *d, const char *name, const char *seed, const char *hits,
	       bool store)
{
	char out[8192];
	int r = engine_run(d, out, sizeof(out), "--model", "tiny", "--name", name, "--prefix",
			   "128", "--prefix-seed", seed, "--suffix", "0", "--expect-hits", hits,
			   store ? NULL : "--no-store", NULL);
	CHECK(r != 0 || strstr(out, "every loaded byte verified"), "%s: a wrong byte", name);
	return r;
}

int main(void)
{
	struct ceph ceph;
	struct daemon a, b;
	char sec[1024], cfg[2048];

	ceph_start(&ceph);
	ceph_remote_section(&ceph, sec, sizeof(sec), "shared", "min_reuse = 0\ntimeout_ms = 2000\n");
	snprintf(cfg, sizeof(cfg), "[tenant.alice]\nuids = 0\n%s", sec);
	daemon_start(&a, cfg);
	daemon_start(&b, cfg);
	kvt_client *ca = client_connect(&a, "checker");
	kvt_client *cb = client_connect(&b, "checker");
	WAIT_FOR(stat_get(ca, "remote", "up") == 1 && stat_get(cb, "remote", "up") == 1,
		 "both nodes connected");
	CHECK(run(&a, "A1", "1", "0", true) == 0, "A stores prefix 1");
	WAIT_FOR(stat_get(ca, "remote", "writes") == 8, "written back");
	CHECK(run(&b, "B1", "1", "8", false) == 0, "B shares it");

	CHECK(ceph_sh(&ceph, NULL, 0, "sh %s osd-freeze %s", getenv("KVT_CEPH_CLUSTER"), ceph.dir) == 0,
	      "freeze the OSD");
	/* B's fetch round for a new prefix times out: misses, computed. */
	CHECK(run(&b, "B2", "2", "0", true) == 0, "B computes prefix 2 with the cluster gone");
	WAIT_FOR(stat_get(cb, "remote", "up") == 0 && stat_get(cb, "remote", "degraded") >= 1,
		 "B's tier degraded");
	CHECK(stat_get(cb, "remote", "timeouts") >= 1, "by operation timeouts");
	/* Local tiers keep serving, on both nodes. */
	CHECK(run(&a, "A2", "1", "8", false) == 0, "A: its prefix from host memory");
	CHECK(run(&b, "B3", "2", "8", false) == 0, "B: its own prefix from host memory");
	CHECK(run(&b, "B4", "1", "8", false) == 0, "B: A's prefix, staged before");
	CHECK(run(&a, "A3", "3", "0", true) == 0, "A stores prefix 3 meanwhile");
	WAIT_FOR(stat_get(ca, "remote", "up") == 0, "A's tier degraded too (its write-backs time out)");

	CHECK(ceph_sh(&ceph, NULL, 0, "sh %s osd-thaw %s", getenv("KVT_CEPH_CLUSTER"), ceph.dir) == 0,
	      "thaw the OSD");
	WAIT_FOR(stat_get(ca, "remote", "up") == 1 && stat_get(cb, "remote", "up") == 1,
		 "both tiers recover by themselves");
	uint64_t w = stat_get(ca, "remote", "writes");
	CHECK(run(&a, "A4", "4", "0", true) == 0, "A stores prefix 4");
	WAIT_FOR(stat_get(ca, "remote", "writes") == w + 8, "written back again");
	CHECK(run(&b, "B5", "4", "8", false) == 0, "B shares prefix 4: the tier is back");

	kvt_client_free(ca);
	kvt_client_free(cb);
	daemon_stop(&a);
	daemon_stop(&b);
	daemon_cleanup(&a);
	daemon_cleanup(&b);
	ceph_stop(&ceph);
	return 0;
}
