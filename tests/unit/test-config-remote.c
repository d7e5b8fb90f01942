/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvtierd.conf's remote tiers: [remote.NAME] keys, their checks at the end
 * of the file, and which section serves which tenant.
 */
#include <stdlib.h>
#include <string.h>

#include "../check.h"
#include "config-util.h"

#define T "[tenant.alice]\nuids = 1000\n[tenant.bob]\nuids = 1001\n"
#define R(name, extra) "[remote." name "]\nceph_conf = /etc/ceph/ceph.conf\npool = p\ncapacity = 1G\n" extra

static const struct bad_case remote_errors[] = {
	{ "bad name", "[remote.a b]\npool = p\n", 2, "remote tier name 'a b'" },
	{ "unknown key", T "[remote.r]\nceph = /x\n", 6, "unknown key 'ceph' in [remote.r]" },
	{ "relative ceph_conf", T "[remote.r]\nceph_conf = ceph.conf\n", 6, "ceph_conf" },
	{ "bad capacity", T "[remote.r]\ncapacity = lots\n", 6, "[remote.r] capacity = 'lots'" },
	{ "bad queue_depth", T "[remote.r]\nqueue_depth = x\n", 6, "queue_depth" },
	{ "bad tenant name", T "[remote.r]\ntenants = al/ice\n", 6, "tenants" },
	{ "no pool", T "[remote.r]\nceph_conf = /c\ncapacity = 1G\n", 0, "needs ceph_conf, pool and capacity" },
	{ "capacity 0", T R("r", "capacity = 0\n"), 0, "needs ceph_conf, pool and capacity" },
	{ "timeout below a second", T R("r", "timeout_ms = 500\n"), 0, "timeout_ms must be 1000..600000" },
	{ "queue_depth 0", T R("r", "queue_depth = 0\n"), 0, "queue_depth must be 1..1024" },
	{ "queue_depth 1025", T R("r", "queue_depth = 1025\n"), 0, "queue_depth must be 1..1024" },
	{ "trim too often", T R("r", "trim_interval_ms = 10\n"), 0, "trim_interval_ms" },
	{ "unconfigured tenant", T R("r", "tenants = carol\n"), 0, "names tenant 'carol'" },
	{ "tenant twice", T R("a", "tenants = alice\n") R("b", "tenants = bob, alice\n"), 0,
	  "tenant 'alice' is in both [remote.a] and [remote.b]" },
	{ "two catch-alls", T R("a", "") R("b", ""), 0, "more than one [remote.NAME] without tenants" },
};

static void test_defaults_and_lookup(void)
{
	struct config c;
	char *err = NULL;

	CHECK(load_text(&c, T R("a", "tenants = alice\nuser = kvt-a\nkeyring = /k/a\n")
			      R("rest", "min_reuse = 0\ntimeout_ms = 1500\n"), &err) == 0);
	free(err);
	CHECK(c.n_remotes == 2);
	const struct remote_conf *a = &c.remotes[0], *rest = &c.remotes[1];
	CHECK(!strcmp(a->user, "kvt-a") && !strcmp(a->keyring, "/k/a") && a->n_tenants == 1);
	CHECK(!strcmp(rest->user, "admin") && !rest->keyring && rest->min_reuse == 0);
	CHECK(a->timeout_ms == 5000 && a->queue_depth == 32 && a->min_reuse == 1 &&
	      a->trim_interval_ms == 10000 && a->capacity == (1ull << 30));
	CHECK(rest->timeout_ms == 1500);
	/* Named tenants go to their section, the others to the catch-all,
	 * and uid tenants (not configured) to none. */
	CHECK(config_remote_for(&c, "alice") == a);
	CHECK(config_remote_for(&c, "bob") == rest);
	CHECK(config_remote_for(&c, "uid:1002") == NULL);
	config_free(&c);

	CHECK(load_text(&c, T R("only", "tenants = bob\n"), &err) == 0);
	free(err);
	CHECK(config_remote_for(&c, "alice") == NULL && config_remote_for(&c, "bob") == &c.remotes[0]);
	config_free(&c);
}

static void test_dump_round_trip(void)
{
	struct config c, d;
	char *err = NULL, *text = NULL;
	size_t len = 0;

	CHECK(load_text(&c, T R("a", "tenants = alice bob\nqueue_depth = 7\n"), &err) == 0);
	free(err);
	FILE *f = open_memstream(&text, &len);
	CHECK(f);
	config_remote_dump(&c, f);
	fclose(f);
	CHECK(strstr(text, "[remote.a]\n") && strstr(text, "tenants = alice bob\n") &&
	      strstr(text, "queue_depth = 7\n") && strstr(text, "capacity = 1G\n"));
	char *again = malloc(strlen(text) + sizeof(T));
	CHECK(again);
	strcpy(again, T);
	strcat(again, text);
	CHECK(load_text(&d, again, &err) == 0);
	free(err);
	CHECK(d.n_remotes == 1 && d.remotes[0].queue_depth == 7 && d.remotes[0].n_tenants == 2);
	config_free(&d);
	config_free(&c);
	free(again);
	free(text);
}

int main(void)
{
	config_test_begin();
	RUN_BAD_CASES(remote_errors);
	test_defaults_and_lookup();
	test_dump_round_trip();
	return config_test_end("test-config-remote");
}
