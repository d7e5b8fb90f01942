/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The cluster stops answering in the middle of a run, twice: its only OSD
 * frozen for longer than the operation timeout, then killed (SIGKILL) and
 * started again (a file-backed BlueStore OSD, so its data survives).
 * Engines on both nodes keep being served from the local tiers, every
 * byte right; the tier shows as degraded; once the OSD answers again the
 * tier recovers by itself and shares prefixes again.
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

static int osd(const struct ceph *ceph, const char *what)
{
	return ceph_sh(ceph, NULL, 0, "sh %s %s %s", getenv("KVT_CEPH_CLUSTER"), what, ceph->dir);
}

int main(void)
{
	struct ceph ceph;
	static struct daemon a, b;

	setenv("KVT_CEPH_STORE", "bluestore", 1);
	ceph_start(&ceph);
	kvt_client *ca, *cb;
	two_nodes(&ceph, "min_reuse = 0\ntimeout_ms = 2000\n", &a, &b, &ca, &cb);
	CHECK(run(&a, "A1", "1", "0", true) == 0, "A stores prefix 1");
	WAIT_FOR(stat_get(ca, "remote", "writes") == 8, "written back");
	CHECK(run(&b, "B1", "1", "8", false) == 0, "B shares it");

	CHECK(osd(&ceph, "osd-freeze") == 0, "freeze the OSD");
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

	CHECK(osd(&ceph, "osd-thaw") == 0, "thaw the OSD");
	WAIT_FOR(stat_get(ca, "remote", "up") == 1 && stat_get(cb, "remote", "up") == 1,
		 "both tiers recover by themselves");
	uint64_t w = stat_get(ca, "remote", "writes");
	CHECK(run(&a, "A4", "4", "0", true) == 0, "A stores prefix 4");
	/* At least A4's eight: A3's, retried from the queue, may land too. */
	WAIT_FOR(stat_get(ca, "remote", "writes") >= w + 8, "written back again");
	CHECK(run(&b, "B5", "4", "8", false) == 0, "B shares prefix 4: the tier is back");

	/* Killed and started again. */
	CHECK(osd(&ceph, "osd-kill") == 0, "kill the OSD");
	CHECK(run(&b, "B6", "5", "0", true) == 0, "B computes prefix 5 with the OSD dead");
	WAIT_FOR(stat_get(cb, "remote", "up") == 0, "B's tier degraded");
	CHECK(run(&a, "A5", "4", "8", false) == 0, "A: local hits with the OSD dead");
	CHECK(run(&b, "B7", "1", "8", false) == 0, "B: local hits with the OSD dead");
	CHECK(osd(&ceph, "osd-start") == 0, "start the OSD again");
	/* The OSD boots and the monitor marks it up (~10 s here), then the
	 * next probe (backoff at most 10 s) finds it: a longer wait. */
	for (int i = 0; i < 45 && !(stat_get(ca, "remote", "up") == 1 && stat_get(cb, "remote", "up") == 1); i++)
		sleep(2);
	WAIT_FOR(stat_get(ca, "remote", "up") == 1 && stat_get(cb, "remote", "up") == 1,
		 "both tiers recover after the restart");
	/* What was written before the kill is still shared (BlueStore kept
	 * it), and new write-backs land. */
	CHECK(run(&b, "B8", "3", "8", false) == 0 || run(&b, "B8b", "3", "0", false) == 0,
	      "B: A's prefix 3 (if A wrote it back before the kill), never a wrong byte");
	w = stat_get(ca, "remote", "writes");
	CHECK(run(&a, "A6", "6", "0", true) == 0, "A stores prefix 6");
	/* A's tier learns of the restart by its write-backs timing out: they
	 * wait in its queue until it has connected afresh. */
	for (int i = 0; i < 45 && stat_get(ca, "remote", "writes") < w + 8; i++)
		sleep(2);
	WAIT_FOR(stat_get(ca, "remote", "writes") >= w + 8, "written back after the restart");
	CHECK(run(&b, "B9", "6", "8", false) == 0, "B shares prefix 6");
	CHECK(run(&b, "B10", "4", "8", false) == 0, "B: prefix 4 (local since B5)");

	two_nodes_stop(&ceph, &a, &b, ca, cb);
	return 0;
}
