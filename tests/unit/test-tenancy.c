/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tenant resolution and quotas over a configuration read from a file: the
 * listening socket's tenant before the uid, the uid before the groups, the
 * primary and supplementary groups alike (the first section in the file
 * wins), unknown uids as tenants of their own or refused, the operator's
 * uids never refused and given the whole capacity, and the quota rules
 * (own quota, default_quota, a quarter of the capacity, never above it).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config.h"
#include "tenancy.h"
#include "../check.h"

static char dir[64];

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#define MiB (UINT64_C(1) << 20)
#define GiB (UINT64_C(1) << 30)

/* config_defaults, then text as a file over them; exits if it does not
 * load, since nothing after it would mean anything. */
static void load(struct config *c, const char *text)
{
	char path[128];
	FILE *f;

	snprintf(path, sizeof(path), "%s/tenancy.conf", dir);
	f = fopen(path, "we");
	if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
		fprintf(stderr, "cannot write %s: %m\n", path);
		exit(1);
	}
	if (config_defaults(c) < 0 || config_load(c, path) < 0) {
		fprintf(stderr, "test configuration does not load:\n%s", text);
		unlink(path);
		exit(1);
	}
	unlink(path);
}

/* A uid that is neither root nor ours, and named by no test file. */
static uid_t stranger(uid_t base)
{
	while (base == 0 || base == geteuid())
		base++;
	return base;
}

struct want {
	int r;
	const char *name;
	bool configured;
	uint64_t quota;
};

static void check_resolve(int line, const struct config *c, const struct peer *p,
			  struct want w)
{
	struct tenant_choice t;
	int r;

	memset(&t, 0x5c, sizeof(t));
	r = tenancy_resolve(c, p, &t);
	if (r != w.r) {
		fprintf(stderr,
			"%s:%d: uid %u gid %u via %s: tenancy_resolve returned %d, expected %d\n",
			__FILE__, line, (unsigned)p->uid, (unsigned)p->gid,
			p->via_tenant ? p->via_tenant : "(main)", r, w.r);
		failures++;
		return;
	}
	if (r < 0)
		return;
	if (strcmp(t.name, w.name) || t.configured != w.configured ||
	    t.quota != w.quota || t.uid != p->uid) {
		fprintf(stderr,
			"%s:%d: uid %u gid %u via %s: got tenant '%.32s' configured %d "
			"quota %" PRIu64 " uid %u; expected '%s' configured %d quota %" PRIu64
			"\n",
			__FILE__, line, (unsigned)p->uid, (unsigned)p->gid,
			p->via_tenant ? p->via_tenant : "(main)", t.name, t.configured,
			t.quota, (unsigned)t.uid, w.name, w.configured, w.quota);
		failures++;
	}
	/* The quota it carries is what tenancy_quota says of it. */
	if (tenancy_quota(c, &t) != t.quota) {
		fprintf(stderr, "%s:%d: tenancy_quota disagrees with the resolved quota\n",
			__FILE__, line);
		failures++;
	}
}

#define RESOLVE(c, p, ...) check_resolve(__LINE__, c, p, (struct want){ __VA_ARGS__ })

static const char tenants_conf[] =
	"[pool]\n"
	"capacity = 1G\n"
	"extent_size = 64M\n"
	"\n"
	"[tenant.box]\n"
	"socket = /run/kvt-tenancy/box.sock\n"
	"quota = 100M\n"
	"\n"
	"[tenant.shared]\n"
	"socket = /run/kvt-tenancy/shared.sock\n"
	"gids = 4000\n"
	"\n"
	/* a group tenant before the uid tenant that claims the same peer */
	"[tenant.staff]\n"
	"gids = 777\n"
	"quota = 64M\n"
	"\n"
	"[tenant.alice]\n"
	"uids = 1000, 1001\n"
	"\n"
	"[tenant.grp]\n"
	"gids = 2000 2001\n"
	"quota = 2G\n"
	"\n"
	"[tenant.grp2]\n"
	"gids = 2001 3000\n"
	"quota = 48M\n"
	"\n"
	"[tenant.ops]\n"
	"uids = 0\n";

static void test_precedence(void)
{
	struct config c;
	const uint64_t quarter = 256 * MiB;

	load(&c, tenants_conf);

	/* The listening socket's tenant, whoever connects through it. */
	RESOLVE(&c, &((struct peer){ .uid = 1000, .gid = 2000, .via_tenant = "box" }),
		0, "box", true, 100 * MiB);
	RESOLVE(&c, &((struct peer){ .uid = 0, .gid = 0, .via_tenant = "box" }),
		0, "box", true, 100 * MiB);
	const gid_t sup777[] = { 777, 2000 };
	RESOLVE(&c, &((struct peer){ .uid = 1000, .gid = 777, .groups = sup777,
				     .n_groups = 2, .via_tenant = "shared" }),
		0, "shared", true, quarter);
	RESOLVE(&c, &((struct peer){ .uid = stranger(5000), .gid = 5000,
				     .via_tenant = "box" }),
		0, "box", true, 100 * MiB);

	/* The uid before any group, even a group tenant earlier in the file. */
	RESOLVE(&c, &((struct peer){ .uid = 1000, .gid = 777 }),
		0, "alice", true, quarter);
	RESOLVE(&c, &((struct peer){ .uid = 1001, .gid = 100, .groups = sup777,
				     .n_groups = 2 }),
		0, "alice", true, quarter);
	/* Root in a tenant section is that tenant's, with the default quota. */
	RESOLVE(&c, &((struct peer){ .uid = 0, .gid = 2000 }), 0, "ops", true, quarter);

	/* The primary group, and any supplementary group. */
	uid_t u = stranger(5000);
	RESOLVE(&c, &((struct peer){ .uid = u, .gid = 777 }), 0, "staff", true, 64 * MiB);
	RESOLVE(&c, &((struct peer){ .uid = u, .gid = 2000 }), 0, "grp", true, GiB);
	RESOLVE(&c, &((struct peer){ .uid = u, .gid = 3000 }), 0, "grp2", true, 48 * MiB);
	const gid_t sup3000[] = { 9, 10, 3000 };
	RESOLVE(&c, &((struct peer){ .uid = u, .gid = 100, .groups = sup3000,
				     .n_groups = 3 }),
		0, "grp2", true, 48 * MiB);
	const gid_t sup2000[] = { 2000 };
	RESOLVE(&c, &((struct peer){ .uid = u, .gid = 100, .groups = sup2000,
				     .n_groups = 1 }),
		0, "grp", true, GiB);
	/* A group of the socket-only tenant counts too. */
	RESOLVE(&c, &((struct peer){ .uid = u, .gid = 4000 }), 0, "shared", true, quarter);

	/* A group in two tenants: the first section in the file wins, by the
	 * primary group or a supplementary one alike. */
	RESOLVE(&c, &((struct peer){ .uid = u, .gid = 2001 }), 0, "grp", true, GiB);
	const gid_t sup2001[] = { 2001 };
	RESOLVE(&c, &((struct peer){ .uid = u, .gid = 3000, .groups = sup2001,
				     .n_groups = 1 }),
		0, "grp", true, GiB);
	const gid_t sup_late[] = { 3000, 777 };
	RESOLVE(&c, &((struct peer){ .uid = u, .gid = 100, .groups = sup_late,
				     .n_groups = 2 }),
		0, "staff", true, 64 * MiB);
	/* Only n_groups entries are groups. */
	RESOLVE(&c, &((struct peer){ .uid = u, .gid = 100, .groups = sup_late,
				     .n_groups = 1 }),
		0, "grp2", true, 48 * MiB);

	/* A socket whose tenant a reload removed: by uid and groups. */
	RESOLVE(&c, &((struct peer){ .uid = 1000, .gid = 3000, .via_tenant = "gone" }),
		0, "alice", true, quarter);
	RESOLVE(&c, &((struct peer){ .uid = u, .gid = 3000, .via_tenant = "gone" }),
		0, "grp2", true, 48 * MiB);

	/* Nobody claims it: a tenant of its own. */
	char name[32];
	snprintf(name, sizeof(name), "uid:%u", (unsigned)u);
	RESOLVE(&c, &((struct peer){ .uid = u, .gid = 100 }), 0, name, false, quarter);
	const gid_t none[] = { 1, 2, 3 };
	RESOLVE(&c, &((struct peer){ .uid = u, .gid = 100, .groups = none,
				     .n_groups = 3 }),
		0, name, false, quarter);
	config_free(&c);
}

static void test_unknown(void)
{
	struct config c;
	char name[32];
	uid_t u = stranger(6000), big = stranger(4294967294u);

	/* default_quota 0: a quarter of the capacity. */
	load(&c, "[pool]\ncapacity = 1G\n");
	snprintf(name, sizeof(name), "uid:%u", (unsigned)u);
	RESOLVE(&c, &((struct peer){ .uid = u, .gid = u }), 0, name, false, 256 * MiB);
	snprintf(name, sizeof(name), "uid:%u", (unsigned)big);
	RESOLVE(&c, &((struct peer){ .uid = big, .gid = 0 }), 0, name, false, 256 * MiB);
	/* The operator: root and our own uid get everything. */
	RESOLVE(&c, &((struct peer){ .uid = 0, .gid = 0 }), 0, "uid:0", false, GiB);
	snprintf(name, sizeof(name), "uid:%u", (unsigned)geteuid());
	RESOLVE(&c, &((struct peer){ .uid = geteuid(), .gid = 100 }), 0, name, false, GiB);
	CHECK(tenancy_is_admin(0) && tenancy_is_admin(geteuid()) && !tenancy_is_admin(u));
	config_free(&c);

	/* A quarter of a capacity that is not a multiple of four. */
	load(&c, "[pool]\ncapacity = 300000002\nextent_size = 2M\n");
	snprintf(name, sizeof(name), "uid:%u", (unsigned)u);
	RESOLVE(&c, &((struct peer){ .uid = u, .gid = u }), 0, name, false, 75000000);
	config_free(&c);

	/* default_quota when set; never above the capacity; not for root. */
	load(&c, "[pool]\ncapacity = 1G\n[tenants]\ndefault_quota = 100M\n");
	snprintf(name, sizeof(name), "uid:%u", (unsigned)u);
	RESOLVE(&c, &((struct peer){ .uid = u, .gid = u }), 0, name, false, 100 * MiB);
	RESOLVE(&c, &((struct peer){ .uid = 0, .gid = 0 }), 0, "uid:0", false, GiB);
	config_free(&c);
	load(&c, "[pool]\ncapacity = 1G\n[tenants]\ndefault_quota = 5G\n");
	RESOLVE(&c, &((struct peer){ .uid = u, .gid = u }), 0, name, false, GiB);
	config_free(&c);
	load(&c, "[pool]\ncapacity = 1G\n[tenants]\ndefault_quota = 1G\n");
	RESOLVE(&c, &((struct peer){ .uid = u, .gid = u }), 0, name, false, GiB);
	config_free(&c);

	/* unknown = refuse: strangers are refused, the operator is not, and
	 * neither is anyone a tenant section claims. */
	load(&c, "[pool]\ncapacity = 1G\n[tenants]\nunknown = refuse\ndefault_quota = 32M\n"
		 "[tenant.t]\nuids = 1000\ngids = 2000\nsocket = /run/kvt-tenancy/t.sock\n");
	RESOLVE(&c, &((struct peer){ .uid = u, .gid = u }), -EACCES);
	const gid_t sup[] = { 5, 6 };
	RESOLVE(&c, &((struct peer){ .uid = u, .gid = u, .groups = sup, .n_groups = 2 }),
		-EACCES);
	RESOLVE(&c, &((struct peer){ .uid = u, .gid = u, .via_tenant = "gone" }), -EACCES);
	RESOLVE(&c, &((struct peer){ .uid = 0, .gid = 0 }), 0, "uid:0", false, GiB);
	snprintf(name, sizeof(name), "uid:%u", (unsigned)geteuid());
	RESOLVE(&c, &((struct peer){ .uid = geteuid(), .gid = 100 }), 0, name, false, GiB);
	RESOLVE(&c, &((struct peer){ .uid = 1000, .gid = u }), 0, "t", true, 32 * MiB);
	RESOLVE(&c, &((struct peer){ .uid = u, .gid = 2000 }), 0, "t", true, 32 * MiB);
	const gid_t sup2000[] = { 2000 };
	RESOLVE(&c, &((struct peer){ .uid = u, .gid = u, .groups = sup2000,
				     .n_groups = 1 }),
		0, "t", true, 32 * MiB);
	RESOLVE(&c, &((struct peer){ .uid = u, .gid = u, .via_tenant = "t" }),
		0, "t", true, 32 * MiB);
	config_free(&c);
}

/* Another daemon user: in a child whose effective uid is not root, that
 * uid is the operator too, and root still is. */
static void test_other_euid(void)
{
	if (geteuid() != 0)
		return;
	pid_t pid = fork();
	if (pid == 0) {
		struct config c;
		struct tenant_choice t;
		struct peer me = { .uid = 4321, .gid = 4321 };
		struct peer root = { .uid = 0, .gid = 0 };
		struct peer other = { .uid = 4322, .gid = 4322 };
		int bad = 0;

		load(&c, "[pool]\ncapacity = 1G\n[tenants]\nunknown = refuse\n"
			 "default_quota = 10M\n");
		if (setresuid(4321, 4321, 0) < 0)
			_exit(200);
		bad |= !tenancy_is_admin(4321) << 0;
		bad |= !tenancy_is_admin(0) << 1;
		bad |= tenancy_is_admin(4322) << 2;
		bad |= (tenancy_resolve(&c, &me, &t) != 0 || strcmp(t.name, "uid:4321") ||
			t.quota != GiB || t.configured) << 3;
		bad |= (tenancy_resolve(&c, &root, &t) != 0 || t.quota != GiB) << 4;
		bad |= (tenancy_resolve(&c, &other, &t) != -EACCES) << 5;
		c.refuse_unknown = false;
		bad |= (tenancy_resolve(&c, &other, &t) != 0 || t.quota != 10 * MiB) << 6;
		config_free(&c);
		_exit(bad);
	}
	int status = 0;
	CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) &&
		      (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 200),
	      "as euid 4321: failed checks 0x%x (status 0x%x)",
	      WIFEXITED(status) ? WEXITSTATUS(status) : 0, status);
}

static void test_quota(void)
{
	struct config c, d;
	struct tenant_choice t;
	uid_t u = stranger(7000);

	load(&c, "[pool]\ncapacity = 2G\n"
		 "[tenant.own]\nuids = 1000\nquota = 300M\n"
		 "[tenant.zero]\nuids = 1001\nquota = 0\n"
		 "[tenant.huge]\nuids = 1002\nquota = 1T\n"
		 "[tenant.exact]\nuids = 1003\nquota = 2G\n"
		 "[tenant.withroot]\nuids = 0 1004\n");
	RESOLVE(&c, &((struct peer){ .uid = 1000, .gid = 1 }), 0, "own", true, 300 * MiB);
	RESOLVE(&c, &((struct peer){ .uid = 1001, .gid = 1 }), 0, "zero", true, 512 * MiB);
	RESOLVE(&c, &((struct peer){ .uid = 1002, .gid = 1 }), 0, "huge", true, 2 * GiB);
	RESOLVE(&c, &((struct peer){ .uid = 1003, .gid = 1 }), 0, "exact", true, 2 * GiB);
	RESOLVE(&c, &((struct peer){ .uid = 1004, .gid = 1 }), 0, "withroot", true,
		512 * MiB);
	RESOLVE(&c, &((struct peer){ .uid = 0, .gid = 0 }), 0, "withroot", true, 512 * MiB);

	/* The same tenants under a reloaded configuration. */
	load(&d, "[pool]\ncapacity = 1G\n[tenants]\ndefault_quota = 96M\n"
		 "[tenant.own]\nuids = 1000\nquota = 200M\n"
		 "[tenant.zero]\nuids = 1001\n");
	CHECK(tenancy_resolve(&c, &((struct peer){ .uid = 1000, .gid = 1 }), &t) == 0);
	CHECK(tenancy_quota(&d, &t) == 200 * MiB);
	CHECK(tenancy_resolve(&c, &((struct peer){ .uid = 1001, .gid = 1 }), &t) == 0);
	CHECK(tenancy_quota(&d, &t) == 96 * MiB);
	/* removed by the reload: the default rules */
	CHECK(tenancy_resolve(&c, &((struct peer){ .uid = 1002, .gid = 1 }), &t) == 0);
	CHECK(t.configured && tenancy_quota(&d, &t) == 96 * MiB);
	/* still the operator's, capped by the new capacity */
	CHECK(tenancy_resolve(&d, &((struct peer){ .uid = 0, .gid = 0 }), &t) == 0);
	CHECK(!t.configured && tenancy_quota(&c, &t) == 2 * GiB &&
	      tenancy_quota(&d, &t) == GiB);
	CHECK(tenancy_resolve(&d, &((struct peer){ .uid = u, .gid = 1 }), &t) == 0);
	CHECK(tenancy_quota(&c, &t) == 512 * MiB && tenancy_quota(&d, &t) == 96 * MiB);
	config_free(&d);

	/* A choice filled by hand, as the daemon keeps it. */
	memset(&t, 0, sizeof(t));
	strcpy(t.name, "own");
	t.configured = true;
	t.uid = u;
	CHECK(tenancy_quota(&c, &t) == 300 * MiB);
	strcpy(t.name, "nosuch");
	CHECK(tenancy_quota(&c, &t) == 512 * MiB);
	t.configured = false;
	t.uid = 0;
	CHECK(tenancy_quota(&c, &t) == 2 * GiB);
	t.uid = u;
	CHECK(tenancy_quota(&c, &t) == 512 * MiB);

	/* Never above the capacity, whatever the configuration holds. */
	c.capacity = 100 * MiB;
	c.default_quota = 0;
	CHECK(tenancy_resolve(&c, &((struct peer){ .uid = 1000, .gid = 1 }), &t) == 0);
	CHECK(t.quota == 100 * MiB);
	CHECK(tenancy_resolve(&c, &((struct peer){ .uid = u, .gid = 1 }), &t) == 0);
	CHECK(t.quota == 25 * MiB);
	c.default_quota = UINT64_MAX;
	CHECK(tenancy_resolve(&c, &((struct peer){ .uid = u, .gid = 1 }), &t) == 0);
	CHECK(t.quota == 100 * MiB);
	config_free(&c);
}

/* A configuration filled by hand, without a file. */
static void test_by_hand(void)
{
	struct config c;
	struct tenant_conf tc[2];
	struct tenant_choice t;
	uid_t u = stranger(8000);

	CHECK(config_defaults(&c) == 0);
	memset(tc, 0, sizeof(tc));
	strcpy(tc[0].name, "g");
	tc[0].n_gids = 1;
	tc[0].gids[0] = 50;
	strcpy(tc[1].name, "a");
	tc[1].n_uids = 2;
	tc[1].uids[0] = 60;
	tc[1].uids[1] = u;
	tc[1].quota = 1;
	c.tenants = tc;
	c.n_tenants = 2;
	c.capacity = 400 * MiB;

	CHECK(tenancy_resolve(&c, &((struct peer){ .uid = u, .gid = 50 }), &t) == 0);
	CHECK(strcmp(t.name, "a") == 0 && t.configured && t.quota == 1);
	CHECK(tenancy_resolve(&c, &((struct peer){ .uid = 61, .gid = 50 }), &t) == 0);
	CHECK(strcmp(t.name, "g") == 0 && t.configured && t.quota == 100 * MiB);
	CHECK(tenancy_resolve(&c, &((struct peer){ .uid = 61, .gid = 51,
						   .via_tenant = "g" }),
			      &t) == 0);
	CHECK(strcmp(t.name, "g") == 0 && t.uid == 61);
	/* No tenants at all. */
	c.n_tenants = 0;
	CHECK(tenancy_resolve(&c, &((struct peer){ .uid = 60, .gid = 50,
						   .via_tenant = "a" }),
			      &t) == 0);
	CHECK(strcmp(t.name, "uid:60") == 0 && !t.configured && t.quota == 100 * MiB);
	c.refuse_unknown = true;
	CHECK(tenancy_resolve(&c, &((struct peer){ .uid = 60, .gid = 50 }), &t) == -EACCES);
	c.tenants = NULL;
	config_free(&c);
}

/* Administrators: the operator's uids and members of admin_groups by
 * primary or supplementary group, never through a tenant's socket. */
static void test_admin_groups(void)
{
	struct config c;
	uid_t u = stranger(4400);
	gid_t sup[] = {7, 4711};

	load(&c, "[daemon]\nadmin_groups = 4711, 4712\n[tenant.a]\nuids = 4401\nsocket = /tmp/kvt-a.sock\n");
	CHECK(c.n_admin_gids == 2 && c.admin_gids[0] == 4711 && c.admin_gids[1] == 4712);
	CHECK(tenancy_peer_is_admin(&c, &((struct peer){ .uid = 0, .gid = 0 })));
	CHECK(tenancy_peer_is_admin(&c, &((struct peer){ .uid = geteuid(), .gid = 1 })));
	CHECK(!tenancy_peer_is_admin(&c, &((struct peer){ .uid = u, .gid = u })));
	CHECK(tenancy_peer_is_admin(&c, &((struct peer){ .uid = u, .gid = 4712 })));
	CHECK(tenancy_peer_is_admin(&c, &((struct peer){ .uid = u, .gid = u, .groups = sup,
							 .n_groups = 2 })));
	CHECK(!tenancy_peer_is_admin(&c, &((struct peer){ .uid = u, .gid = u, .groups = sup,
							  .n_groups = 1 })));
	/* Through a tenant's own socket nobody administers, root included. */
	CHECK(!tenancy_peer_is_admin(&c, &((struct peer){ .uid = 0, .gid = 4711,
							  .via_tenant = "a" })));
	config_free(&c);

	load(&c, "[tenant.a]\nuids = 4401\n");
	CHECK(c.n_admin_gids == 0);
	CHECK(!tenancy_peer_is_admin(&c, &((struct peer){ .uid = u, .gid = 4711 })));
	config_free(&c);
}

/* NVMe quotas: own, default, the host share of the spill files, the
 * operator's all of them, never above them. */
static void test_nvme_quota(void)
{
	struct config c;
	struct tenant_choice ch;
	uid_t u = stranger(4500);

	load(&c, "[pool]\ncapacity = 1G\n[spill.a]\npath = /tmp/kvt-a.spill\ncapacity = 6G\n"
		 "[spill.b]\npath = /tmp/kvt-b.spill\ncapacity = 2G\n"
		 "[tenant.own]\nuids = 4501\nnvme_quota = 3G\n"
		 "[tenant.big]\nuids = 4502\nnvme_quota = 20G\n"
		 "[tenant.half]\nuids = 4503\nquota = 512M\n");
	CHECK(tenancy_resolve(&c, &((struct peer){ .uid = 4501, .gid = 1 }), &ch) == 0 &&
	      ch.nvme_quota == 3 * GiB);
	CHECK(tenancy_resolve(&c, &((struct peer){ .uid = 4502, .gid = 1 }), &ch) == 0 &&
	      ch.nvme_quota == 8 * GiB);
	CHECK(tenancy_resolve(&c, &((struct peer){ .uid = 4503, .gid = 1 }), &ch) == 0 &&
	      ch.nvme_quota == 4 * GiB);
	CHECK(tenancy_resolve(&c, &((struct peer){ .uid = u, .gid = u }), &ch) == 0 &&
	      ch.nvme_quota == 2 * GiB);
	CHECK(tenancy_resolve(&c, &((struct peer){ .uid = 0, .gid = 0 }), &ch) == 0 &&
	      ch.nvme_quota == 8 * GiB);
	config_free(&c);

	load(&c, "[tenants]\ndefault_nvme_quota = 1G\n[spill.a]\npath = /tmp/kvt-a.spill\n"
		 "capacity = 6G\n");
	CHECK(tenancy_resolve(&c, &((struct peer){ .uid = u, .gid = u }), &ch) == 0 &&
	      ch.nvme_quota == GiB);
	config_free(&c);

	/* Without spill files there is nothing to share. */
	load(&c, "[tenant.own]\nuids = 4501\nnvme_quota = 3G\n");
	CHECK(tenancy_resolve(&c, &((struct peer){ .uid = 4501, .gid = 1 }), &ch) == 0 &&
	      ch.nvme_quota == 0);
	config_free(&c);
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");

	unsetenv("JOURNAL_STREAM");
	snprintf(dir, sizeof(dir), "%s/kvt-tenancy-XXXXXX",
		 tmp && tmp[0] == '/' && strlen(tmp) < 32 ? tmp : "/tmp");
	if (!mkdtemp(dir)) {
		fprintf(stderr, "mkdtemp: %m\n");
		return 1;
	}

	test_precedence();
	test_unknown();
	test_other_euid();
	test_quota();
	test_by_hand();
	test_admin_groups();
	test_nvme_quota();

	if (rmdir(dir) < 0)
		fprintf(stderr, "cannot remove %s: %m\n", dir);
	if (failures) {
		fprintf(stderr, "test-tenancy: %d check(s) failed\n", failures);
		return 1;
	}
	printf("test-tenancy: ok\n");
	return 0;
}
