/* SPDX-License-Identifier: Apache-2.0 */
/*
 * No cluster at all (its monitor's address has nobody listening): the
 * daemon starts at once, serves its local tiers, shows the remote tier as
 * connecting with the reason, and keeps retrying.  Needs no ceph daemons.
 */
#include <string.h>

#include "ceph.h"

int main(void)
{
	static struct daemon a;
	char out[8192], cfg[1024];

	/* A ceph.conf of a cluster that is not there, in the daemon's dir. */
	snprintf(cfg, sizeof(cfg),
		 "[tenant.alice]\nuids = 0\n[remote.gone]\nceph_conf = @DIR@/ceph.conf\n"
		 "pool = kvtier\ncapacity = 64M\ntimeout_ms = 1000\nmin_reuse = 0\n");
	node_start(&a, cfg);
	char path[256];
	snprintf(path, sizeof(path), "%s/ceph.conf", a.dir);
	FILE *f = fopen(path, "we");
	CHECK(f, "ceph.conf");
	fprintf(f, "[global]\nmon host = 127.0.0.1:1\nauth client required = none\n");
	fclose(f);

	kvt_client *c = client_connect(&a, "checker");
	CHECK(engine_run(&a, out, sizeof(out), "--model", "tiny", "--name", "A1", "--prefix", "128",
			 "--suffix", "0", "--expect-hits", "0", NULL) == 0, "A stores");
	CHECK(engine_run(&a, out, sizeof(out), "--model", "tiny", "--name", "A2", "--prefix", "128",
			 "--suffix", "0", "--expect-hits", "8", "--no-store", NULL) == 0,
	      "the local tier serves");
	CHECK(strstr(out, "every loaded byte verified"), "A2's bytes");
	WAIT_FOR(stat_get(c, "remote", "errors") >= 2, "connecting fails, and is retried");
	CHECK(stat_get(c, "remote", "up") == 0, "not up");
	CHECK(stat_get(c, "remote", "writes") == 0 && stat_get(c, "remote", "skipped") >= 8,
	      "write-backs skipped while connecting");
	CHECK(daemon_log_contains(&a, "cannot reach pool kvtier"), "the log says why");
	kvt_client_free(c);
	daemon_stop(&a);
	daemon_cleanup(&a);
	return 0;
}
