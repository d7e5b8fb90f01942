/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tenants on both nodes never see each other's blocks through the remote
 * tier.  First with a cephx user per tenant, restricted to its RADOS
 * namespace: the cluster itself refuses the other namespace.  Then with
 * one shared user: the daemon keeps each tenant in its own namespace, and
 * an object copied from one tenant's namespace into another's fails the
 * header check (it names its tenant) and is a miss.
 */
#include <string.h>

#include "ceph.h"

#define TENANTS "[tenant.alice]\nsocket = @DIR@/alice.sock\n[tenant.bob]\nsocket = @DIR@/bob.sock\n"

static int engine(const struct daemon *d, const char *tenant, const char *name, const char *seed,
		  const char *hits, bool store)
{
	char out[8192];
	struct daemon t = node_tenant_socket(d, tenant);
	return engine_run(&t, out, sizeof(out), "--model", "tiny", "--name", name, "--prefix",
			  "128", "--prefix-seed", seed, "--suffix", "0", "--expect-hits", hits,
			  store ? NULL : "--no-store", NULL);
}

static void per_tenant_users(struct ceph *ceph)
{
	static struct daemon a, b;
	char cfg[4096], ra[1024], rb[1024], extra[512];

	for (int i = 0; i < 2; i++) {
		const char *t = i ? "bob" : "alice";
		CHECK(ceph_sh(ceph, NULL, 0,
			      "ceph auth get-or-create client.t-%s mon 'allow r' "
			      "osd 'allow rwx pool=kvtier namespace=%s' -o %s/t-%s.keyring",
			      t, t, ceph->dir, t) == 0, "user for %s", t);
		snprintf(extra, sizeof(extra), "user = t-%s\nkeyring = %s/t-%s.keyring\ntenants = %s\nmin_reuse = 0\n",
			 t, ceph->dir, t, t);
		ceph_remote_section(ceph, i ? rb : ra, sizeof(ra), i ? "b" : "a", extra);
	}
	snprintf(cfg, sizeof(cfg), TENANTS "%s%s", ra, rb);
	node_start(&a, cfg);
	node_start(&b, cfg);
	kvt_client *ca = client_connect(&a, "checker");
	kvt_client *cb = client_connect(&b, "checker");
	/* A write-back of a tenant whose connection is still connecting is
	 * skipped, not queued: every connection up on both nodes first. */
	WAIT_FOR(stat_named(ca, "remote", "name", "a", "up") == 1 &&
		 stat_named(ca, "remote", "name", "b", "up") == 1 &&
		 stat_named(cb, "remote", "name", "a", "up") == 1 &&
		 stat_named(cb, "remote", "name", "b", "up") == 1, "all four connections");

	CHECK(engine(&a, "alice", "alice@A", "1", "0", true) == 0, "alice stores on A");
	WAIT_FOR(stat_named(ca, "remote", "name", "a", "writes") == 8, "alice's 8 written back");
	CHECK(engine(&b, "bob", "bob@B", "1", "0", false) == 0,
	      "bob on B: the same keys, but nothing in his namespace");
	WAIT_FOR(stat_named(cb, "remote", "name", "b", "misses") == 8, "bob's 8 keys asked for: misses");
	CHECK(engine(&b, "alice", "alice@B", "1", "8", false) == 0, "alice on B: her 8");
	CHECK(stat_named(cb, "tenant", "name", "alice", "remote_reads") == 8, "alice's reads");
	CHECK(stat_named(cb, "tenant", "name", "bob", "remote_reads") == 0, "none for bob");

	/* The cluster's own refusal: bob's user cannot list or read alice's. */
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "rados --id t-bob -k %s/t-bob.keyring -p kvtier", ceph->dir);
	CHECK(ceph_sh(ceph, NULL, 0, "%s -N alice ls >/dev/null 2>&1", cmd) != 0,
	      "bob's user lists alice's namespace");
	CHECK(ceph_sh(ceph, NULL, 0, "o=$(rados -p kvtier -N alice ls | head -1); %s -N alice get $o /dev/null 2>/dev/null", cmd) != 0,
	      "bob's user reads alice's object");
	CHECK(ceph_sh(ceph, NULL, 0, "%s -N bob ls >/dev/null", cmd) == 0, "bob's user lists his own");

	kvt_client_free(ca);
	kvt_client_free(cb);
	daemon_stop(&a);
	daemon_stop(&b);
	daemon_cleanup(&a);
	daemon_cleanup(&b);
}

static void shared_user(struct ceph *ceph)
{
	static struct daemon c, d;
	char cfg[4096], sec[1024];

	ceph_remote_section(ceph, sec, sizeof(sec), "shared", "min_reuse = 0\n");
	snprintf(cfg, sizeof(cfg), TENANTS "%s", sec);
	node_start(&c, cfg);
	node_start(&d, cfg);
	kvt_client *cc = client_connect(&c, "checker");
	kvt_client *cd = client_connect(&d, "checker");
	WAIT_FOR(stat_get(cc, "remote", "up") == 1 && stat_get(cd, "remote", "up") == 1,
		 "both nodes connected");

	CHECK(engine(&c, "bob", "bob@C", "2", "0", true) == 0, "bob stores prefix 2 on C");
	WAIT_FOR(stat_get(cc, "remote", "writes") == 8, "bob's 8 written back");
	CHECK(engine(&d, "alice", "alice@D", "2", "0", false) == 0,
	      "alice on D does not see bob's prefix");
	CHECK(ceph_sh(ceph, NULL, 0, "test $(rados -p kvtier -N bob ls | wc -l) -eq 8") == 0,
	      "bob's objects in his namespace");

	/* Alice's prefix 1 objects (from the first part), copied into bob's
	 * namespace under the same names: bob's daemon finds them, and
	 * refuses each. */
	CHECK(ceph_sh(ceph, NULL, 0,
		      "for o in $(rados -p kvtier -N alice ls | grep -v kvtier.trim); do "
		      "rados -p kvtier -N alice get $o %s/o && rados -p kvtier -N bob put $o %s/o || exit 1; done",
		      ceph->dir, ceph->dir) == 0, "copy");
	CHECK(engine(&d, "bob", "bob@D", "1", "0", false) == 0, "bob: alice's copied objects are misses");
	WAIT_FOR(stat_get(cd, "remote", "rejected") == 8, "all 8 refused by the header check");
	CHECK(stat_named(cd, "tenant", "name", "bob", "remote_reads") == 0, "nothing loaded for bob");

	kvt_client_free(cc);
	kvt_client_free(cd);
	daemon_stop(&c);
	daemon_stop(&d);
	daemon_cleanup(&c);
	daemon_cleanup(&d);
}

int main(void)
{
	struct ceph ceph;

	ceph_start(&ceph);
	per_tenant_users(&ceph);
	shared_user(&ceph);
	ceph_stop(&ceph);
	return 0;
}
