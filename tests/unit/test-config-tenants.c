/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvtierd.conf's [tenant.NAME] sections: names, members by number and by
 * name, quotas, own sockets, the errors in each and the rules between
 * tenants, and the limits (ids per tenant, tenants, line length).
 */
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"
#include "config-util.h"

/* [tenant.NAME] sections, refused at the line of the error. */
static void test_tenant_errors(void)
{
	static const struct bad_case cases[] = {
		{ "tenant name with a blank", "[tenant.bad name]\nuids = 1000\n", 2,
		  "bad name" },
		{ "tenant name with a dot", "# t\n[tenant.a.b]\nuids = 1000\n", 3,
		  "a.b" },
		{ "tenant name with a slash", "[tenant.a/b]\ngids = 5\n", 2, "a/b" },
		{ "tenant name with a colon", "[tenant.uid:5]\ngids = 5\n", 2, "uid:5" },
		{ "tenant name not ASCII", "[tenant.caf\xc3\xa9]\ngids = 5\n", 2,
		  "tenant name" },
		{ "empty tenant name", "[tenant.]\nuids = 1000\n", 2, "tenant name" },
		{ "tenant name of 32 characters",
		  "[tenant.abcdefghijklmnopqrstuvwxyz012345]\n\nuids = 1000\n", 3,
		  "abcdefghijklmnopqrstuvwxyz012345" },
		{ "bad tenant name in a later key",
		  "[tenant.x+y]\n; c\nquota = 1G\n", 3, "x+y" },
		{ "[tenant] without a name", "[tenant]\nuids = 1000\n", 2,
		  "unknown section" },
		{ "unknown key in a tenant", "[tenant.a]\nuids = 1000\nquotas = 1G\n", 3,
		  "quotas" },
		{ "[tenants] key in a tenant", "[tenant.a]\nuids = 1000\n\nunknown = allow\n",
		  4, "unknown key 'unknown'" },
		{ "tenant key in [tenants]", "[tenants]\nuids = 1000\n", 2, "uids" },
		{ "unknown user", "[tenant.a]\nuids = 1000, kvt-no-such-user\n", 2,
		  "no such user" },
		{ "unknown user alone", "\n[tenant.a]\nuids = kvt-no-such-user\n", 3,
		  "kvt-no-such-user" },
		{ "unknown group", "[tenant.a]\ngids = root kvt-no-such-group\n", 2,
		  "no such user or group" },
		{ "uid with a suffix", "[tenant.a]\nuids = 1000x\n", 2, "uids" },
		{ "negative uid", "[tenant.a]\nuids = -1\n", 2, "uids" },
		{ "uid 2^32-1 (the invalid uid)", "[tenant.a]\nuids = 4294967295\n", 2,
		  "uids" },
		{ "uid over u32", "[tenant.a]\nuids = 4294967296\n", 2, "uids" },
		{ "gid over u32", "[tenant.a]\ngids = 99999999999999999999\n", 2, "gids" },
		{ "empty uids", "[tenant.a]\nuids =\n", 2, "uids" },
		{ "uids of separators only", "[tenant.a]\nuids = , ,\n", 2, "uids" },
		{ "empty gids", "[tenant.a]\ngids =\n", 2, "gids" },
		{ "bad quota", "[tenant.a]\nuids = 1000\nquota = 1.5GB2\n", 3, "quota" },
		{ "negative quota", "[tenant.a]\n\nquota = -1\nuids = 1000\n", 3, "quota" },
		{ "quota with a unit only", "[tenant.a]\nuids = 1000\nquota = G\n", 3,
		  "quota" },
		{ "quota over 2^64", "[tenant.a]\nuids = 1000\nquota = 16777216T\n", 3,
		  "quota" },
		{ "relative tenant socket", "[tenant.a]\nsocket = run/a.sock\n", 2,
		  "socket" },
		{ "tenant socket too long",
		  "[tenant.a]\nsocket = /aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
		  2, "socket" },
		{ "relative socket_dir", "[tenant.a]\nsocket_dir = run/a\n", 2, "socket_dir" },
		{ "socket_dir too long for its socket",
		  "[tenant.a]\nsocket_dir = /aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
		  2, "at most 94 bytes" },
		{ "socket_dir /", "[tenant.a]\nsocket_dir = /\n", 2, "socket_dir" },
		{ "socket and socket_dir", "[tenant.a]\nsocket = /run/t/a.sock\nsocket_dir = /run/t/a\n",
		  3, "both socket and socket_dir" },
		{ "socket_dir and socket", "[tenant.a]\nsocket_dir = /run/t/a\nsocket = /run/t/a.sock\n",
		  3, "both socket and socket_dir" },
		{ "socket_mode 0777", "[tenant.a]\nsocket_dir = /run/t/a\nsocket_mode = 0777\n", 3,
		  "0660 or 0666" },
		{ "socket_mode in words", "[tenant.a]\nsocket_dir = /run/t/a\nsocket_mode = open\n", 3,
		  "socket_mode" },
		{ "error in the second of two tenants",
		  "[tenant.a]\nuids = 1000\n[tenant.b]\nuids = 1001\ngids = 12q\n", 5,
		  "[tenant.b] gids" },
	};

	RUN_BAD_CASES(cases);
}

/* The rules between tenants, and with the main socket: checked once the
 * file has parsed, reported with the file. */
static void test_tenant_rules(void)
{
	static const struct bad_case cases[] = {
		{ "a tenant nobody can belong to", "[tenant.lonely]\nquota = 1G\n", 0,
		  "[tenant.lonely]" },
		{ "a tenant nobody can belong to, among others",
		  "[tenant.a]\nuids = 1000\n[tenant.b]\nquota = 0\n[tenant.c]\ngids = 7\n",
		  0, "[tenant.b]" },
		{ "a uid in two tenants",
		  "[tenant.a]\nuids = 1000 1001\n[tenant.b]\nuids = 7, 1001\n", 0,
		  "uid 1001" },
		{ "a uid in two tenants, once by name",
		  "[tenant.a]\nuids = root\n[tenant.b]\ngids = 5\n[tenant.c]\nuids = 9 0\n",
		  0, "uid 0" },
		{ "a uid in two tenants, named in the other",
		  "[tenant.one]\nuids = 1000\n[tenant.two]\nuids = 2000\n[tenant.one]\n"
		  "uids = 2000\n",
		  0, "uid 2000" },
		{ "two tenants on one socket",
		  "[tenant.a]\nsocket = /run/t/s.sock\n[tenant.b]\nuids = 5\n"
		  "socket = /run/t/s.sock\n",
		  0, "share socket" },
		{ "a tenant on the main socket",
		  "[daemon]\nsocket = /run/t/main.sock\n[tenant.a]\nsocket = /run/t/main.sock\n",
		  0, "main socket" },
		{ "a socket_dir holding the main socket",
		  "[daemon]\nsocket = /run/t/kvtierd.sock\n[tenant.a]\nsocket_dir = /run/t\n",
		  0, "main socket" },
		{ "a socket_dir holding the main socket of a runtime_dir",
		  "[daemon]\nruntime_dir = /run/t/\n[tenant.a]\nsocket_dir = /run/t/\n",
		  0, "main socket" },
		{ "a socket_dir holding another tenant's socket",
		  "[tenant.a]\nsocket = /run/t/a/b.sock\n[tenant.b]\nsocket_dir = /run/t/a\n",
		  0, "another tenant's socket" },
		{ "socket_mode = 0666 on a socket =",
		  "[tenant.a]\nsocket = /run/t/a/a.sock\nsocket_mode = 0666\n", 0,
		  "socket_mode = 0666 needs socket_dir" },
		{ "socket_mode = 0666 with no socket", "[tenant.a]\nuids = 5\nsocket_mode = 0666\n",
		  0, "socket_mode = 0666 needs socket_dir" },
		{ "a tenant on the main socket, set after it",
		  "[tenant.a]\nsocket = /run/t/main.sock\n[daemon]\nsocket = /run/t/main.sock\n",
		  0, "main socket" },
	};
	static const char *good[] = {
		"[tenant.a]\nuids = 1000\n",
		"[tenant.a]\ngids = 1000\n",
		"[tenant.a]\nsocket = /run/t/a.sock\n",
		/* A group may be in several tenants; sockets merely differ. */
		"[tenant.a]\ngids = 100\nsocket = /run/t/a.sock\n"
		"[tenant.b]\ngids = 100\nsocket = /run/t/b.sock\n",
		"[tenant.a]\nuids = 1000\n[tenant.b]\ngids = 1000\n",
		/* Directories of their own, and one below the main socket's. */
		"[daemon]\nsocket = /run/t/kvtierd.sock\n[tenant.a]\nsocket_dir = /run/t/a\n"
		"[tenant.b]\nsocket_dir = /run/t/b/\n[tenant.c]\nsocket = /run/t/c/c.sock\n",
		"[tenant.abcdefghijklmnopqrstuvwxyz01234]\nuids = 5\n",
		"[tenant.A-Z_a-z_0-9]\nuids = 5\n",
		"[tenant.-]\nuids = 5\n",
		"[tenant.a]\nuids = 5\nquota = 0\n",
		"[tenant.a]\nuids = 5\nquota = 1T\n",
	};

	RUN_BAD_CASES(cases);
	RUN_GOOD_CASES(good);
}

/* Names resolve to ids, in the order given, mixed with numbers and any
 * mix of separators. */
static void test_tenant_members(void)
{
	struct config c;
	char *err;
	int r;

	const struct passwd *pw = getpwnam("nobody");
	const struct group *gr = getgrnam("nogroup");
	uint32_t nobody = pw ? pw->pw_uid : 65534;
	uint32_t nogroup = gr ? gr->gr_gid : 65534;
	CHECK(nobody == 65534);
	r = load_text(&c,
		      "[tenant.named]\n"
		      "uids = root,1000  nobody\t42 , 7\n"
		      "gids = nogroup root,,5\n",
		      &err);
	CHECK(r == 0, "%s", err);
	free(err);
	if (r == 0) {
		const uint32_t u[] = { 0, 1000, nobody, 42, 7 };
		const uint32_t g[] = { nogroup, 0, 5 };
		const struct tenant_conf *t = config_tenant(&c, "named");
		CHECK(c.n_tenants == 1 && t);
		CHECK(t && has_ids(t->uids, t->n_uids, u, 5));
		CHECK(t && has_ids(t->gids, t->n_gids, g, 3));
		CHECK(t && t->quota == 0 && t->socket == NULL);
		config_free(&c);
	}
}

/* A scalar key given twice keeps the last value, uids and gids add up (a
 * long list may span lines); a section given twice is one tenant. */
static void test_tenant_twice(void)
{
	struct config c;
	char *err;
	int r;

	r = load_text(&c,
		      "[tenant.a]\nuids = 1 2 3\nquota = 1G\n[pool]\nlock = no\n"
		      "[tenant.a]\nuids = 4\nsocket = /run/t/a.sock\n",
		      &err);
	CHECK(r == 0, "%s", err);
	free(err);
	if (r == 0) {
		const uint32_t u[] = { 1, 2, 3, 4 };
		CHECK(c.n_tenants == 1);
		CHECK(has_ids(c.tenants[0].uids, c.tenants[0].n_uids, u, 4));
		CHECK(c.tenants[0].quota == (UINT64_C(1) << 30));
		CHECK(c.tenants[0].socket &&
		      strcmp(c.tenants[0].socket, "/run/t/a.sock") == 0);
		config_free(&c);
	}
	/* A socket = beside the main socket loads, with a warning that names
	 * socket_dir. */
	r = load_text(&c, "[daemon]\nsocket = /run/t/main.sock\n[tenant.a]\nsocket = /run/t/a.sock\n",
		      &err);
	CHECK(r == 0, "%s", err);
	CHECK(err && strstr(err, "warning") && strstr(err, "beside the daemon's main socket") &&
	      strstr(err, "socket_dir"), "%s", err ? err : "");
	free(err);
	if (r == 0)
		config_free(&c);
	/* socket_dir = DIR: DIR/kvtierd.sock, however DIR ends. */
	r = load_text(&c, "[tenant.a]\nsocket_dir = /run/t/a//\n", &err);
	CHECK(r == 0, "%s", err);
	free(err);
	if (r == 0) {
		CHECK(c.tenants[0].socket_dir && c.tenants[0].socket &&
		      strcmp(c.tenants[0].socket, "/run/t/a/kvtierd.sock") == 0);
		CHECK(c.tenants[0].socket_mode == 0660, "socket_mode %o", c.tenants[0].socket_mode);
		config_free(&c);
	}
	/* socket_mode: 0660 by default, 0666 for a socket_dir. */
	r = load_text(&c, "[tenant.a]\nsocket_mode = 0666\nsocket_dir = /run/t/a\n"
			  "[tenant.b]\nsocket_dir = /run/t/b\nsocket_mode = 0660\n", &err);
	CHECK(r == 0, "%s", err);
	free(err);
	if (r == 0) {
		CHECK(c.tenants[0].socket_mode == 0666 && c.tenants[1].socket_mode == 0660);
		config_free(&c);
	}
}

/* At most 64 uids and 64 gids. */
static void test_tenant_ids_limit(void)
{
	struct config c;
	char *err, text[1024];
	int r, n;

	for (int gids = 0; gids < 2; gids++) {
		for (int count = 64; count <= 65; count++) {
			n = snprintf(text, sizeof(text), "[tenant.many]\n%s =",
				     gids ? "gids" : "uids");
			for (int i = 0; i < count; i++)
				n += snprintf(text + n, sizeof(text) - (size_t)n,
					      " %d", i);
			snprintf(text + n, sizeof(text) - (size_t)n, "\n");
			r = load_text(&c, text, &err);
			if (count == 64) {
				CHECK(r == 0, "64 %s: %s", gids ? "gids" : "uids",
				      err);
				if (r == 0) {
					const struct tenant_conf *t = &c.tenants[0];
					uint32_t got = gids ? t->n_gids : t->n_uids;
					const uint32_t *ids = gids ? t->gids : t->uids;
					CHECK(got == 64 && ids[0] == 0 && ids[63] == 63);
					config_free(&c);
				}
			} else {
				char want[160];
				snprintf(want, sizeof(want), "tenant.conf:2:");
				CHECK(r < 0 && strstr(err, want) &&
					      strstr(err, gids ? "gids" : "uids"),
				      "65 %s: load %d: %s",
				      gids ? "gids" : "uids", r, err);
			}
			free(err);
		}
	}
}

/* Up to 256 tenants. */
static void test_tenant_count_limit(void)
{
	struct config c;
	char *err;
	int r, n;

	for (int count = 256; count <= 257; count++) {
		static char big[16384];
		n = 0;
		for (int i = 0; i < count; i++)
			n += snprintf(big + n, sizeof(big) - (size_t)n,
				      "[tenant.t%d]\nuids = %d\n", i, 10000 + i);
		r = load_text(&c, big, &err);
		if (count == 256) {
			CHECK(r == 0, "256 tenants: %s", err);
			if (r == 0) {
				CHECK(c.n_tenants == 256);
				const struct tenant_conf *t = config_tenant(&c, "t255");
				CHECK(t && t->n_uids == 1 && t->uids[0] == 10255);
				config_free(&c);
			}
		} else {
			CHECK(r < 0 && strstr(err, "tenant.conf:514:") &&
				      strstr(err, "256 tenants"),
			      "257 tenants: load %d: %s", r, err);
		}
		free(err);
	}
}

/*
 * kvtierd.conf(5): a line is at most 199 bytes, and a longer one is
 * refused.  A uids line whose cut falls on a blank must not come back as
 * just its tail (inih hands the tail on as a continuation line, which
 * replaces the value): that would move every uid before the cut out of
 * the tenant without a word.
 */
static void test_tenant_long_line(void)
{
	struct config c;
	char *err, text[1024];
	int r, n;

	n = snprintf(text, sizeof(text), "[tenant.long]\n");
	int start = n;
	n += snprintf(text + n, sizeof(text) - (size_t)n, "uids = 1");
	uint32_t listed = 1;
	while (n - start + 6 < 199 - 1) {
		n += snprintf(text + n, sizeof(text) - (size_t)n, " %u",
			      10000 + listed);
		listed++;
	}
	/* One more id that ends the line's first 199 bytes exactly. */
	text[n++] = ' ';
	while (n - start < 199)
		text[n++] = '7';
	listed++;
	n += snprintf(text + n, sizeof(text) - (size_t)n, " 2000 2001\n");
	listed += 2;
	CHECK(text[start + 199] == ' ' && strlen(text + start) > 200);
	r = load_text(&c, text, &err);
	CHECK(r < 0 || c.tenants[0].n_uids == listed,
	      "a %zu-byte uids line of %u ids loaded as %u id(s), starting with %u",
	      strlen(text + start) - 1, listed, c.tenants[0].n_uids,
	      c.tenants[0].uids[0]);
	if (r == 0)
		config_free(&c);
	free(err);
}

int main(void)
{
	config_test_begin();
	test_tenant_errors();
	test_tenant_rules();
	test_tenant_members();
	test_tenant_twice();
	test_tenant_ids_limit();
	test_tenant_count_limit();
	test_tenant_long_line();
	return config_test_end("test-config-tenants");
}
