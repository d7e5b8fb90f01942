/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tenants from the configuration: by uid, by group, by a tenant's own
 * listening socket (containers where every client is root), each with its
 * quota; unknown uids refused when the configuration says so.
 */
#include <errno.h>
#include <grp.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static struct daemon d;

struct seen {
	char name[64];
	uint64_t quota;
};

/* This process's own client record names its tenant. */
static int client_cb(const kvt_record *r, void *userdata)
{
	struct seen *s = userdata;
	uint64_t pid;
	if (!strcmp(kvt_record_kind(r), "client") && kvt_record_get_u64(r, "pid", &pid) == 0 &&
	    pid == (uint64_t)getpid())
		snprintf(s->name, sizeof(s->name), "%s", kvt_record_get_str(r, "tenant"));
	return 0;
}

static int id_cb(const kvt_record *r, void *userdata)
{
	uint64_t *id = userdata;
	const char *name = kvt_record_get_str(r, "name");
	if (!strcmp(kvt_record_kind(r), "tenant") && name && !strcmp(name, "alpha"))
		kvt_record_get_u64(r, "id", id);
	return 0;
}

static int tenant_cb(const kvt_record *r, void *userdata)
{
	struct seen *s = userdata;
	const char *name = kvt_record_get_str(r, "name");
	if (!strcmp(kvt_record_kind(r), "tenant") && name && !strcmp(name, s->name))
		kvt_record_get_u64(r, "quota", &s->quota);
	return 0;
}

/* Connect (as uid/gid if not root), open a namespace, report the tenant. */
static void expect_tenant(const char *socket, uid_t uid, gid_t gid, const char *want,
			  uint64_t quota)
{
	pid_t pid = fork();
	if (pid == 0) {
		harness_in_child();
		if (uid && (setgroups(0, NULL) < 0 || setgid(gid) < 0 || setuid(uid) < 0))
			_exit(3);
		kvt_client *c = NULL;
		int r = kvt_client_connect(socket, "tenant-test", &c);
		if (!want) {
			CHECK(r < 0, "uid %u must be refused", (unsigned)uid);
			CHECK(strstr(kvt_connect_error(), "refuses unknown uids"), "reason: %s",
			      kvt_connect_error());
			_exit(0);
		}
		CHECK(r == 0, "uid %u connects: %s", (unsigned)uid, kvt_connect_error());
		kvt_ns *ns = engine_ns(c, "tiny", 1);
		(void)ns;
		struct seen s = {"", 0};
		CHECK(kvt_stats(c, KVT_STATS_CLIENTS, client_cb, &s) == 0, "stats");
		CHECK(kvt_stats(c, KVT_STATS_TENANTS, tenant_cb, &s) == 0, "stats");
		CHECK(!strcmp(s.name, want), "uid %u is in tenant '%s', want '%s'", (unsigned)uid,
		      s.name, want);
		CHECK(s.quota == quota, "tenant %s quota %llu, want %llu", want,
		      (unsigned long long)s.quota, (unsigned long long)quota);
		kvt_client_free(c);
		_exit(0);
	}
	CHECK(wait_exit(pid) == 0, "tenant check for uid %u", (unsigned)uid);
}

/* How many tenants a uid sees, with an extra supplementary group or none;
 * whether an admin-only call succeeds. */
static void expect_view(uid_t uid, gid_t extra, uint32_t tenants, uint32_t victim,
			bool may_evict)
{
	pid_t pid = fork();
	if (pid == 0) {
		harness_in_child();
		gid_t groups[1] = {extra};
		if (setgroups(extra ? 1 : 0, groups) < 0 || setgid(uid) < 0 || setuid(uid) < 0)
			_exit(3);
		kvt_client *c = client_connect(&d, "viewer");
		uint32_t n = stat_count(c, "tenant");
		CHECK(n == tenants, "uid %u (group %u) sees %u tenants, want %u", (unsigned)uid,
		      (unsigned)extra, n, tenants);
		int64_t r = kvt_admin_evict(c, victim, 1, 0);
		CHECK(may_evict ? r >= 0 : r == -EPERM, "uid %u (group %u) evicting: %lld",
		      (unsigned)uid, (unsigned)extra, (long long)r);
		kvt_client_free(c);
		_exit(0);
	}
	CHECK(wait_exit(pid) == 0, "view check for uid %u", (unsigned)uid);
}

int main(void)
{
	if (geteuid() != 0) {
		printf("skipped: switching uids needs root\n");
		return KVT_TEST_SKIP;
	}
	daemon_start(&d, "[daemon]\nadmin_groups = 65530\n"
			 "[tenants]\nunknown = refuse\n"
			 "[tenant.alpha]\nuids = 65534\nquota = 4M\n"
			 "[tenant.beta]\ngids = 65533\n"
			 "[tenant.gamma]\nsocket = @DIR@/gamma.sock\nquota = 2M\n");
	char gamma[200];
	snprintf(gamma, sizeof(gamma), "%s/gamma.sock", d.dir);

	expect_tenant(d.socket, 65534, 65534, "alpha", 4u << 20);
	/* beta by group; default quota is a quarter of the 16M pool. */
	expect_tenant(d.socket, 65532, 65533, "beta", 4u << 20);
	expect_tenant(d.socket, 65531, 65531, NULL, 0);
	/* Root through gamma's own socket is gamma; through the main one, itself. */
	expect_tenant(gamma, 0, 0, "gamma", 2u << 20);
	expect_tenant(d.socket, 0, 0, "uid:0", 16u << 20);

	kvt_client *c = client_connect(&d, "admin");
	CHECK(stat_count(c, "tenant") == 4, "alpha, beta, gamma and uid:0");
	CHECK(stat_get(c, "daemon", "refused") >= 1, "the refusal is counted");
	uint64_t alpha = 0;
	CHECK(kvt_stats(c, KVT_STATS_TENANTS, id_cb, &alpha) == 0 && alpha, "alpha's id");
	kvt_client_free(c);

	/* Root through a tenant's own socket is that tenant, never an admin,
	 * and the refusal says why rather than blaming the uid. */
	kvt_client *g = NULL;
	CHECK(kvt_client_connect(gamma, "root-in-gamma", &g) == 0, "root through gamma's socket");
	CHECK(kvt_admin_evict(g, (uint32_t)alpha, 1, 0) == -EPERM, "root through gamma may not evict");
	CHECK(strstr(kvt_client_error(g), "gamma's socket") != NULL,
	      "the refusal names the tenant socket: '%s'", kvt_client_error(g));
	kvt_client_free(g);

	/* A member of admin_groups (here by a supplementary group) sees every
	 * tenant and may evict; the same uid without it sees its own. */
	expect_view(65534, 65530, 4, (uint32_t)alpha, true);
	expect_view(65534, 0, 1, (uint32_t)alpha, false);
	daemon_stop(&d);
	daemon_cleanup(&d);
	return 0;
}
