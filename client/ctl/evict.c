/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvtierctl evict and drop: the one admin action, taking a namespace's
 * blocks out of host memory (evict) or out of every tier (drop).  The
 * tenant and namespace are looked up in the status records first, so a
 * typo is answered with the names that exist.
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "ctl.h"

/* By name first: a configured tenant may well be called "42". */
static const struct rec *find_tenant(const struct snapshot *s, const char *arg)
{
	uint64_t id;

	for (size_t i = 0; i < s->n; i++)
		if (rec_is(&s->recs[i], "tenant") && strcmp(rec_str(&s->recs[i], "name"), arg) == 0)
			return &s->recs[i];
	if (ctl_parse_u64(arg, &id) < 0)
		return NULL;
	for (size_t i = 0; i < s->n; i++)
		if (rec_is(&s->recs[i], "tenant") && rec_has(&s->recs[i], "id") &&
		    rec_u64(&s->recs[i], "id") == id)
			return &s->recs[i];
	return NULL;
}

static const struct rec *find_namespace(const struct snapshot *s, const char *tenant,
					uint64_t id)
{
	for (size_t i = 0; i < s->n; i++) {
		const struct rec *r = &s->recs[i];
		if (rec_is(r, "namespace") && strcmp(rec_str(r, "tenant"), tenant) == 0 &&
		    rec_u64(r, "id") == id)
			return r;
	}
	return NULL;
}

static void say_needs_admin(const char *socket)
{
	fprintf(stderr, "kvtierctl: evicting a namespace needs an admin of kvtierd at %s: root, kvtierd's own user or a member of [daemon] admin_groups, through the daemon's main socket (a tenant's socket never carries admin rights)\n",
		socket);
}

/* The tenants (tenant NULL) or the tenant's namespaces, on stderr. */
static void list_known(const struct snapshot *s, const char *tenant)
{
	const char *sep = "";

	for (size_t i = 0; i < s->n; i++) {
		const struct rec *r = &s->recs[i];
		if (!tenant && rec_is(r, "tenant")) {
			fprintf(stderr, "%s%s (id %" PRIu64 ")", sep, rec_str(r, "name"),
				rec_u64(r, "id"));
			sep = ", ";
		} else if (tenant && rec_is(r, "namespace") &&
			   strcmp(rec_str(r, "tenant"), tenant) == 0) {
			fprintf(stderr, "%s%" PRIu64 " (%s)", sep, rec_u64(r, "id"),
				rec_str(r, "model"));
			sep = ", ";
		}
	}
	if (!*sep)
		fputs("none", stderr);
}

struct evicted {
	bool drop;
	const char *tenant_name;
	uint64_t tenant_id, ns_id;
	const struct rec *ns; /* NULL when only the ids are known */
	int64_t blocks;
};

static void print_evicted(const struct ctx *x, const struct evicted *e)
{
	uint64_t bytes = e->ns ? (uint64_t)e->blocks * rec_u64(e->ns, "block_bytes") : 0;
	char a[KVT_SIZE_LEN];

	if (x->json) {
		struct json j = {.f = stdout};
		json_open(&j, '{');
		json_key(&j, "action");
		json_str(&j, e->drop ? "drop" : "evict");
		json_key(&j, "tenant");
		json_str(&j, e->tenant_name);
		json_u64_or_null(&j, "tenant_id", e->tenant_id, true);
		json_u64_or_null(&j, "namespace", e->ns_id, true);
		json_str_or_null(&j, "model", e->ns ? rec_str(e->ns, "model") : NULL);
		json_u64_or_null(&j, "blocks", (uint64_t)e->blocks, true);
		json_u64_or_null(&j, "bytes", bytes, e->ns != NULL);
		json_close(&j, '}');
		return;
	}
	printf("%s %" PRId64 " block%s", e->drop ? "Dropped" : "Evicted", e->blocks,
	       e->blocks == 1 ? "" : "s");
	if (e->ns)
		printf(" (%s)", kvt_size_format(bytes, a, sizeof(a)));
	printf(" of namespace %" PRIu64, e->ns_id);
	if (e->ns)
		printf(" (%s)", rec_str(e->ns, "model"));
	printf(" of tenant %s%s\n", e->tenant_name,
	       e->drop ? " from every tier" : " from host memory");
}

/* Ask the daemon and report.  tenant and ns are the records when this
 * view of the daemon has them, NULL when only the ids are known. */
static int evict_ids(struct ctx *x, bool drop, const struct rec *tenant, uint64_t tenant_id,
		     const struct rec *ns, uint64_t ns_id)
{
	struct evicted e = {
		.drop = drop, .tenant_name = tenant ? rec_str(tenant, "name") : x->args[0],
		.tenant_id = tenant_id, .ns_id = ns_id, .ns = ns,
	};

	timeout_arm();
	e.blocks = kvt_admin_evict(x->client, (uint32_t)tenant_id, (uint32_t)ns_id, drop);
	timeout_disarm();
	if (e.blocks < 0) {
		const char *why = kvt_client_error(x->client);
		fprintf(stderr, "kvtierctl: cannot %s namespace %" PRIu64 " of tenant %s: %s%s%s\n",
			drop ? "drop" : "evict", ns_id, e.tenant_name, strerror((int)-e.blocks),
			why[0] ? ": " : "", why);
		if (e.blocks == -EPERM || e.blocks == -EACCES)
			say_needs_admin(x->socket);
		else if (e.blocks == -ENOENT && ns)
			fprintf(stderr, "kvtierctl: it went away meanwhile (the daemon restarted?)\n");
		return EXIT_DAEMON;
	}
	print_evicted(x, &e);
	return 0;
}

/* A tenant the records do not show. */
static int evict_unknown_tenant(struct ctx *x, bool drop, uint64_t ns_id)
{
	const struct rec *d = snapshot_find(&x->snap, "daemon");
	uint64_t tenant_id;

	/* Without the admin view the daemon lists only the caller's own
	 * tenant, so "unknown" would be misleading.  Ids can still go to the
	 * daemon, which has the last word on permission. */
	if (!d || !rec_has(d, "capacity")) {
		if (ctl_parse_u64(x->args[0], &tenant_id) == 0 && tenant_id <= UINT32_MAX)
			return evict_ids(x, drop, NULL, tenant_id, NULL, ns_id);
		say_needs_admin(x->socket);
		return EXIT_DAEMON;
	}
	fprintf(stderr, "kvtierctl: kvtierd at %s has no tenant '%s'; its tenants: ", x->socket,
		x->args[0]);
	list_known(&x->snap, NULL);
	fputc('\n', stderr);
	return EXIT_DAEMON;
}

static int evict_or_drop(struct ctx *x, bool drop)
{
	const struct rec *t, *ns;
	uint64_t ns_id;

	if (ctl_parse_u64(x->args[1], &ns_id) < 0 || ns_id > UINT32_MAX) {
		fprintf(stderr, "kvtierctl: NAMESPACE must be a namespace id as 'kvtierctl namespaces' shows it, not '%s'\nTry 'kvtierctl --help'.\n",
			x->args[1]);
		return EXIT_USAGE;
	}
	t = find_tenant(&x->snap, x->args[0]);
	if (!t)
		return evict_unknown_tenant(x, drop, ns_id);
	ns = find_namespace(&x->snap, rec_str(t, "name"), ns_id);
	if (!ns) {
		fprintf(stderr, "kvtierctl: tenant %s has no namespace %" PRIu64 "; its namespaces: ",
			rec_str(t, "name"), ns_id);
		list_known(&x->snap, rec_str(t, "name"));
		fputc('\n', stderr);
		return EXIT_DAEMON;
	}
	return evict_ids(x, drop, t, rec_u64(t, "id"), ns, ns_id);
}

static int evict_run(struct ctx *x)
{
	return evict_or_drop(x, false);
}

static int drop_run(struct ctx *x)
{
	return evict_or_drop(x, true);
}

static void evict_help(FILE *f)
{
	fputs("evict, drop:\n"
	      "  TENANT is a tenant's name as status shows it (uid:1000, or a configured\n"
	      "  name) or its numeric id; NAMESPACE is the namespace's id.  Prints how\n"
	      "  many blocks went.  Engines see misses for them and recompute.\n",
	      f);
}

const struct ctl_command ctl_cmd_evict = {
	.name = "evict",
	.args = "TENANT NAMESPACE",
	.n_args = 2,
	.needs = CTL_NEEDS_STATS,
	.what = STATS_STATUS,
	.json = true,
	.summary = "evict a namespace from host memory; NVMe copies stay (root or kvtierd's uid)",
	.help = evict_help,
	.run = evict_run,
};

const struct ctl_command ctl_cmd_drop = {
	.name = "drop",
	.args = "TENANT NAMESPACE",
	.n_args = 2,
	.needs = CTL_NEEDS_STATS,
	.what = STATS_STATUS,
	.json = true,
	.summary = "drop a namespace's blocks from every tier (root or kvtierd's uid)",
	.run = drop_run,
};
