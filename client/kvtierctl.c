/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvtierctl: what a running kvtierd holds, as tables for people, JSON for
 * programs and Prometheus text for monitoring; the one admin action there
 * is (dropping a namespace's blocks); and the capacity plan for a model.
 * Everything about the daemon comes from kvt_stats() records; this tool
 * only selects, copies and formats them.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl-plan.h"
#include "ctl.h"
#include "kvt-config.h"

#define N_ELEMS(a) (sizeof(a) / sizeof((a)[0]))

static int verbose;

/* ------------------------------------------------------------------ */
/* Views                                                              */
/* ------------------------------------------------------------------ */

int print_tenants(FILE *f, const struct snapshot *s)
{
	static const struct column cols[] = {
		{"TENANT", false}, {"QUOTA", true}, {"USED", true},
		{"BLOCKS", true}, {"NAMESPACES", true}, {"CLIENTS", true},
		{"HIT RATE", true},
	};
	struct table t = {.cols = cols, .n_cols = N_ELEMS(cols)};
	char a[32], b[32], c[32];
	int r;

	for (size_t i = 0; i < s->n; i++) {
		const struct rec *x = &s->recs[i];
		if (!rec_is(x, "tenant"))
			continue;
		table_add(&t, "%s", rec_str(x, "name"));
		table_add(&t, "%s", kvt_size_format(rec_u64(x, "quota"), a, sizeof(a)));
		table_add(&t, "%s (%s)", kvt_size_format(rec_u64(x, "used"), b, sizeof(b)),
			  fmt_pct(c, sizeof(c), ratio_of(rec_u64(x, "used"), rec_u64(x, "quota"))));
		table_add(&t, "%" PRIu64, rec_u64(x, "blocks"));
		table_add(&t, "%" PRIu64, rec_u64(x, "namespaces"));
		table_add(&t, "%" PRIu64, rec_u64(x, "clients"));
		table_add(&t, "%s", fmt_pct(a, sizeof(a), hit_rate(x)));
	}
	r = table_print(&t, f);
	table_free(&t);
	return r;
}

int print_nodes(FILE *f, const struct snapshot *s)
{
	static const struct column cols[] = {
		{"NODE", true}, {"EXTENTS", true}, {"ALLOCATED", true}, {"USED", true},
	};
	struct table t = {.cols = cols, .n_cols = N_ELEMS(cols)};
	char a[32], b[32];
	int r;

	for (size_t i = 0; i < s->n; i++) {
		const struct rec *x = &s->recs[i];
		const struct field *node;
		if (!rec_is(x, "node"))
			continue;
		node = rec_field(x, "node");
		if (node && node->type == KVT_FIELD_I64)
			table_add(&t, "%" PRId64, (int64_t)node->u);
		else
			table_add(&t, "%" PRIu64, rec_u64(x, "node"));
		table_add(&t, "%" PRIu64, rec_u64(x, "extents"));
		table_add(&t, "%s", kvt_size_format(rec_u64(x, "allocated"), a, sizeof(a)));
		/* Used against allocated: a node's share of the capacity is not
		 * fixed, only what was placed there. */
		table_add(&t, "%s (%s)", kvt_size_format(rec_u64(x, "used"), a, sizeof(a)),
			  fmt_pct(b, sizeof(b), ratio_of(rec_u64(x, "used"), rec_u64(x, "allocated"))));
	}
	r = table_print(&t, f);
	table_free(&t);
	return r;
}

void print_numa_line(FILE *f, const struct rec *d)
{
	uint64_t nodes = rec_u64(d, "numa_nodes"), fallbacks = rec_u64(d, "numa_fallbacks");

	if (!rec_has(d, "numa_nodes"))
		return;
	fprintf(f, "%-13s%" PRIu64 " node%s, %" PRIu64 " fallback%s", "NUMA:", nodes,
		nodes == 1 ? "" : "s", fallbacks, fallbacks == 1 ? "" : "s");
	if (fallbacks)
		fputs(" (extents placed off the node they were meant for)", f);
	putc('\n', f);
}

static int print_namespaces(const struct snapshot *s, bool all)
{
	static const struct column short_cols[] = {
		{"TENANT", false}, {"ID", true}, {"MODEL", false},
		{"LAYERS", true}, {"TP", true}, {"BLOCK TOKENS", true},
		{"BLOCK SIZE", true}, {"BLOCKS", true}, {"BYTES", true},
		{"HIT RATE", true}, {"STORES", true}, {"LOADS", true},
		{"EVICTIONS", true},
	};
	/* The same first columns, then every counter the daemon keeps. */
	static const struct column all_cols[] = {
		{"TENANT", false}, {"ID", true}, {"MODEL", false},
		{"LAYERS", true}, {"TP", true}, {"BLOCK TOKENS", true},
		{"BLOCK SIZE", true}, {"BLOCKS", true}, {"BYTES", true},
		{"HIT RATE", true}, {"STORES", true}, {"LOADS", true},
		{"EVICTIONS", true}, {"RESERVED", true}, {"LOOKUPS", true},
		{"KEYS", true}, {"HITS", true}, {"MISSES", true},
		{"STORED", true}, {"LOADED", true}, {"ABORTS", true},
		{"DELETES", true}, {"REJECTED", true}, {"OPENS", true},
	};
	struct table t = {
		.cols = all ? all_cols : short_cols,
		.n_cols = all ? N_ELEMS(all_cols) : N_ELEMS(short_cols),
	};
	char a[32];
	int r;

	for (size_t i = 0; i < s->n; i++) {
		const struct rec *x = &s->recs[i];
		if (!rec_is(x, "namespace"))
			continue;
		table_add(&t, "%s", rec_str(x, "tenant"));
		table_add(&t, "%" PRIu64, rec_u64(x, "id"));
		table_add(&t, "%s", rec_str(x, "model"));
		table_add(&t, "%" PRIu64 "-%" PRIu64, rec_u64(x, "layer_first"),
			  rec_u64(x, "layer_end"));
		table_add(&t, "%" PRIu64, rec_u64(x, "tp"));
		table_add(&t, "%" PRIu64, rec_u64(x, "block_tokens"));
		table_add(&t, "%s", kvt_size_format(rec_u64(x, "block_bytes"), a, sizeof(a)));
		table_add(&t, "%" PRIu64, rec_u64(x, "blocks"));
		table_add(&t, "%s", kvt_size_format(rec_u64(x, "bytes"), a, sizeof(a)));
		table_add(&t, "%s", fmt_pct(a, sizeof(a), hit_rate(x)));
		table_add(&t, "%" PRIu64, rec_u64(x, "stores"));
		table_add(&t, "%" PRIu64, rec_u64(x, "loads"));
		table_add(&t, "%" PRIu64, rec_u64(x, "evictions"));
		if (!all)
			continue;
		table_add(&t, "%" PRIu64, rec_u64(x, "reserved"));
		table_add(&t, "%" PRIu64, rec_u64(x, "lookups"));
		table_add(&t, "%" PRIu64, rec_u64(x, "lookup_keys"));
		table_add(&t, "%" PRIu64, rec_u64(x, "hits"));
		table_add(&t, "%" PRIu64, rec_u64(x, "misses"));
		table_add(&t, "%s", kvt_size_format(rec_u64(x, "store_bytes"), a, sizeof(a)));
		table_add(&t, "%s", kvt_size_format(rec_u64(x, "load_bytes"), a, sizeof(a)));
		table_add(&t, "%" PRIu64, rec_u64(x, "aborts"));
		table_add(&t, "%" PRIu64, rec_u64(x, "deletes"));
		table_add(&t, "%" PRIu64, rec_u64(x, "rejected"));
		table_add(&t, "%" PRIu64, rec_u64(x, "opens"));
	}
	r = table_print(&t, stdout);
	table_free(&t);
	return r;
}

static int print_clients(const struct snapshot *s)
{
	static const struct column cols[] = {
		{"ID", true}, {"PID", true}, {"UID", true}, {"TENANT", false},
		{"NAME", false}, {"PROTOCOL", true}, {"REQUESTS", true},
		{"HANDLES", true}, {"QUEUED", true}, {"CONNECTED", true},
	};
	struct table t = {.cols = cols, .n_cols = N_ELEMS(cols)};
	char a[32];
	int r;

	for (size_t i = 0; i < s->n; i++) {
		const struct rec *x = &s->recs[i];
		if (!rec_is(x, "client"))
			continue;
		table_add(&t, "%" PRIu64, rec_u64(x, "id"));
		table_add(&t, "%" PRIu64, rec_u64(x, "pid"));
		table_add(&t, "%" PRIu64, rec_u64(x, "uid"));
		table_add(&t, "%s", rec_str(x, "tenant"));
		table_add(&t, "%s", rec_str(x, "name"));
		table_add(&t, "%" PRIu64, rec_u64(x, "protocol"));
		table_add(&t, "%" PRIu64, rec_u64(x, "requests"));
		table_add(&t, "%" PRIu64, rec_u64(x, "handles"));
		table_add(&t, "%s", kvt_size_format(rec_u64(x, "queued_bytes"), a, sizeof(a)));
		table_add(&t, "%s", fmt_duration(a, sizeof(a), rec_u64(x, "connected_s")));
	}
	r = table_print(&t, stdout);
	table_free(&t);
	return r;
}

/* One "label: value" line, only when the daemon sent the field: a
 * non-admin view carries version, protocol and uptime only. */
static void print_size_line(const struct rec *d, const char *label,
			    const char *field)
{
	char a[32], b[32];

	if (!rec_has(d, field))
		return;
	if (strcmp(field, "capacity") == 0) {
		printf("%-13s%s\n", label, kvt_size_format(rec_u64(d, field), a, sizeof(a)));
		return;
	}
	printf("%-13s%s (%s)\n", label, kvt_size_format(rec_u64(d, field), a, sizeof(a)),
	       fmt_pct(b, sizeof(b), ratio_of(rec_u64(d, field), rec_u64(d, "capacity"))));
}

static void print_daemon(const struct ctx *x, const struct rec *d)
{
	char a[32];

	printf("%-13skvtierd %s, protocol %" PRIu64, "Daemon:", rec_str(d, "version"),
	       rec_u64(d, "protocol"));
	if (rec_has(d, "pid"))
		printf(", pid %" PRIu64, rec_u64(d, "pid"));
	putchar('\n');
	printf("%-13s%s\n", "Uptime:", fmt_duration(a, sizeof(a), rec_u64(d, "uptime_s")));
	printf("%-13s%s\n", "Socket:", rec_has(d, "socket") ? rec_str(d, "socket") : x->socket);
	print_size_line(d, "Host pool:", "capacity");
	print_size_line(d, "  allocated:", "allocated");
	print_size_line(d, "  used:", "used");
	print_size_line(d, "  free:", "free");
	if (rec_has(d, "extents")) {
		printf("%-13s%" PRIu64, "  extents:", rec_u64(d, "extents"));
		if (rec_has(d, "extents_hugetlb"))
			printf(" (%" PRIu64 " hugetlb, %" PRIu64 " THP, %" PRIu64 " locked)",
			       rec_u64(d, "extents_hugetlb"), rec_u64(d, "extents_thp"),
			       rec_u64(d, "extents_locked"));
		putchar('\n');
	}
	if (rec_has(d, "pages"))
		printf("%-13s%s\n", "Pages:", rec_str(d, "pages"));
	if (rec_has(d, "lock"))
		printf("%-13s%s\n", "Lock:", rec_str(d, "lock"));
	if (rec_has(d, "eviction"))
		printf("%-13s%s\n", "Eviction:", rec_str(d, "eviction"));
	print_numa_line(stdout, d);
	if (rec_has(d, "nvme_engine")) {
		char cap[32], used[32];
		uint64_t c = rec_u64(d, "nvme_capacity"), u = rec_u64(d, "nvme_used");
		printf("%-13s%s\n", "NVMe tier:", kvt_size_format(c, cap, sizeof(cap)));
		printf("%-13s%s (%.1f%%)\n", "  used:", kvt_size_format(u, used, sizeof(used)),
		       c ? 100.0 * (double)u / (double)c : 0.0);
		printf("%-13s%" PRIu64 " in %" PRIu64 " file(s), %" PRIu64 " failed; engine %s (%s)\n",
		       "  blocks:", rec_u64(d, "nvme_blocks"), rec_u64(d, "nvme_files"),
		       rec_u64(d, "nvme_files_failed"), rec_str(d, "nvme_engine"),
		       rec_str(d, "nvme_engine_reason"));
		printf("%-13s%" PRIu64 " written (%.1f MiB), %" PRIu64 " read (%.1f MiB), %" PRIu64
		       " in flight\n", "  I/O:", rec_u64(d, "nvme_writes"),
		       (double)rec_u64(d, "nvme_write_bytes") / (1 << 20), rec_u64(d, "nvme_reads"),
		       (double)rec_u64(d, "nvme_read_bytes") / (1 << 20), rec_u64(d, "nvme_in_flight"));
		printf("%-13s%" PRIu64 " I/O, %" PRIu64 " checksum; %" PRIu64 " times full, %" PRIu64
		       " at a tenant's NVMe quota\n",
		       "  errors:", rec_u64(d, "nvme_io_errors"), rec_u64(d, "nvme_checksum_errors"),
		       rec_u64(d, "nvme_full"), rec_u64(d, "nvme_quota_full"));
		if (rec_has(d, "nvme_refused"))
			printf("%-13s%" PRIu64 " write-backs refused for want of space, %" PRIu64
			       " regions taken back for a tenant within its quota\n",
			       "  space:", rec_u64(d, "nvme_refused"), rec_u64(d, "nvme_reclaims"));
		printf("%-13s%" PRIu64 " blocks recovered, %" PRIu64 " torn or corrupt dropped, %" PRIu64
		       " ms\n", "  recovery:", rec_u64(d, "nvme_recovered"),
		       rec_u64(d, "nvme_recovery_dropped"), rec_u64(d, "nvme_recovery_ms"));
	}
	if (rec_has(d, "tenants"))
		printf("%-13stenants %" PRIu64 ", namespaces %" PRIu64 ", blocks %" PRIu64
		       ", handles %" PRIu64 "\n", "Contents:",
		       rec_u64(d, "tenants"), rec_u64(d, "namespaces"),
		       rec_u64(d, "blocks"), rec_u64(d, "handles"));
	if (rec_has(d, "clients"))
		printf("%-13s%" PRIu64 "\n", "Clients:", rec_u64(d, "clients"));
	if (rec_has(d, "connections"))
		printf("%-13s%" PRIu64 " accepted, %" PRIu64 " refused, %" PRIu64
		       " malformed\n", "Connections:", rec_u64(d, "connections"),
		       rec_u64(d, "refused"), rec_u64(d, "malformed"));
	if (!rec_has(d, "capacity"))
		printf("\n(Only your own tenant is shown; run as root or as kvtierd's user for the whole daemon.)\n");
}

/* ------------------------------------------------------------------ */
/* status, clients, namespaces                                        */
/* ------------------------------------------------------------------ */

static int cmd_status(struct ctx *x)
{
	const struct rec *d = snapshot_find(&x->snap, "daemon");
	int r;

	if (x->json) {
		struct json j = {.f = stdout};
		json_open(&j, '{');
		json_key(&j, "daemon");
		if (d)
			json_rec(&j, d, false);
		else
			json_null(&j);
		json_key(&j, "nodes");
		json_recs(&j, &x->snap, "node", false);
		json_key(&j, "tenants");
		json_recs(&j, &x->snap, "tenant", true);
		json_key(&j, "namespaces");
		json_recs(&j, &x->snap, "namespace", true);
		if (snapshot_find(&x->snap, "client")) {
			json_key(&j, "clients");
			json_recs(&j, &x->snap, "client", false);
		}
		json_close(&j, '}');
		return 0;
	}
	if (d)
		print_daemon(x, d);
	if (snapshot_find(&x->snap, "node")) {
		printf("\nNUMA nodes:\n");
		r = print_nodes(stdout, &x->snap);
		if (r < 0)
			return r;
	}
	printf("\nTenants:\n");
	r = print_tenants(stdout, &x->snap);
	if (r < 0)
		return r;
	printf("\nNamespaces:\n");
	return print_namespaces(&x->snap, false);
}

static int cmd_clients(struct ctx *x)
{
	if (x->json) {
		struct json j = {.f = stdout};
		json_recs(&j, &x->snap, "client", false);
		return 0;
	}
	return print_clients(&x->snap);
}

static int cmd_namespaces(struct ctx *x)
{
	if (x->json) {
		struct json j = {.f = stdout};
		json_recs(&j, &x->snap, "namespace", true);
		return 0;
	}
	return print_namespaces(&x->snap, true);
}

/* ------------------------------------------------------------------ */
/* evict, drop                                                        */
/* ------------------------------------------------------------------ */

/* A whole decimal number, nothing around it. \return 0 or -EINVAL/-ERANGE */
static int parse_u64(const char *s, uint64_t *ret)
{
	uint64_t v = 0;

	if (!*s)
		return -EINVAL;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return -EINVAL;
		if (__builtin_mul_overflow(v, 10, &v) ||
		    __builtin_add_overflow(v, (uint64_t)(*s - '0'), &v))
			return -ERANGE;
	}
	*ret = v;
	return 0;
}

/* By name first: a configured tenant may well be called "42". */
static const struct rec *find_tenant(const struct snapshot *s, const char *arg)
{
	uint64_t id;

	for (size_t i = 0; i < s->n; i++)
		if (rec_is(&s->recs[i], "tenant") && strcmp(rec_str(&s->recs[i], "name"), arg) == 0)
			return &s->recs[i];
	if (parse_u64(arg, &id) < 0)
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

/* Ask the daemon and report.  tenant and ns are the records when this
 * view of the daemon has them, NULL when only the ids are known. */
static int evict_ids(struct ctx *x, bool drop, const struct rec *tenant, uint64_t tenant_id,
		     const struct rec *ns, uint64_t ns_id)
{
	const char *verb = drop ? "drop" : "evict";
	const char *tenant_name = tenant ? rec_str(tenant, "name") : x->args[0];
	uint64_t block_bytes = ns ? rec_u64(ns, "block_bytes") : 0;
	char a[32];
	int64_t n;

	timeout_arm();
	n = kvt_admin_evict(x->client, (uint32_t)tenant_id, (uint32_t)ns_id, drop);
	timeout_disarm();
	if (n < 0) {
		const char *why = kvt_client_error(x->client);
		fprintf(stderr, "kvtierctl: cannot %s namespace %" PRIu64 " of tenant %s: %s%s%s\n",
			verb, ns_id, tenant_name, strerror((int)-n), why[0] ? ": " : "", why);
		if (n == -EPERM || n == -EACCES)
			say_needs_admin(x->socket);
		else if (n == -ENOENT && ns)
			fprintf(stderr, "kvtierctl: it went away meanwhile (the daemon restarted?)\n");
		return EXIT_DAEMON;
	}

	if (x->json) {
		struct json j = {.f = stdout};
		json_open(&j, '{');
		json_key(&j, "action");
		json_str(&j, verb);
		json_key(&j, "tenant");
		json_str(&j, tenant_name);
		json_key(&j, "tenant_id");
		json_u64(&j, tenant_id);
		json_key(&j, "namespace");
		json_u64(&j, ns_id);
		json_key(&j, "model");
		if (ns)
			json_str(&j, rec_str(ns, "model"));
		else
			json_null(&j);
		json_key(&j, "blocks");
		json_u64(&j, (uint64_t)n);
		json_key(&j, "bytes");
		if (ns)
			json_u64(&j, (uint64_t)n * block_bytes);
		else
			json_null(&j);
		json_close(&j, '}');
		return 0;
	}
	printf("%s %" PRId64 " block%s", drop ? "Dropped" : "Evicted", n, n == 1 ? "" : "s");
	if (ns)
		printf(" (%s)", kvt_size_format((uint64_t)n * block_bytes, a, sizeof(a)));
	printf(" of namespace %" PRIu64, ns_id);
	if (ns)
		printf(" (%s)", rec_str(ns, "model"));
	printf(" of tenant %s%s\n", tenant_name,
	       drop ? " from every tier" : " from host memory");
	return 0;
}

static int cmd_evict_or_drop(struct ctx *x, bool drop)
{
	const struct rec *d = snapshot_find(&x->snap, "daemon");
	const struct rec *t, *ns;
	uint64_t ns_id, tenant_id;

	if (parse_u64(x->args[1], &ns_id) < 0 || ns_id > UINT32_MAX) {
		fprintf(stderr, "kvtierctl: NAMESPACE must be a namespace id as 'kvtierctl namespaces' shows it, not '%s'\nTry 'kvtierctl --help'.\n",
			x->args[1]);
		return EXIT_USAGE;
	}
	t = find_tenant(&x->snap, x->args[0]);
	if (!t) {
		/* Without the admin view the daemon lists only the caller's
		 * own tenant, so "unknown" would be misleading.  Ids can still
		 * go to the daemon, which has the last word on permission. */
		if (!d || !rec_has(d, "capacity")) {
			if (parse_u64(x->args[0], &tenant_id) == 0 && tenant_id <= UINT32_MAX)
				return evict_ids(x, drop, NULL, tenant_id, NULL, ns_id);
			say_needs_admin(x->socket);
			return EXIT_DAEMON;
		}
		fprintf(stderr, "kvtierctl: kvtierd at %s has no tenant '%s'; its tenants: ",
			x->socket, x->args[0]);
		list_known(&x->snap, NULL);
		fputc('\n', stderr);
		return EXIT_DAEMON;
	}
	tenant_id = rec_u64(t, "id");
	ns = find_namespace(&x->snap, rec_str(t, "name"), ns_id);
	if (!ns) {
		fprintf(stderr, "kvtierctl: tenant %s has no namespace %" PRIu64 "; its namespaces: ",
			rec_str(t, "name"), ns_id);
		list_known(&x->snap, rec_str(t, "name"));
		fputc('\n', stderr);
		return EXIT_DAEMON;
	}
	return evict_ids(x, drop, t, tenant_id, ns, ns_id);
}

static int cmd_evict(struct ctx *x)
{
	return cmd_evict_or_drop(x, false);
}

static int cmd_drop(struct ctx *x)
{
	return cmd_evict_or_drop(x, true);
}

/* ------------------------------------------------------------------ */
/* plan                                                               */
/* ------------------------------------------------------------------ */

struct plan_opts {
	const char *model;
	uint64_t layers, kv_heads, head_dim, latent_dim, bytes_per_token;
	bool mla;
	const char *dtype;
	uint64_t tokens, batch, block_tokens, tp;
	uint64_t host_capacity, nvme_capacity;
	bool host_given, nvme_given;
};

static struct plan_opts popts = {.batch = 1, .block_tokens = 16, .tp = 1};

struct tier {
	const char *name, *source;
	uint64_t capacity;
	struct plan_fit fit;
};

static int plan_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int plan_usage(const char *fmt, ...)
{
	va_list ap;

	fputs("kvtierctl plan: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\nTry 'kvtierctl --help'.\n", stderr);
	return EXIT_USAGE;
}

static void list_presets(FILE *f, const char *indent)
{
	size_t n;
	const struct plan_preset *p = plan_presets(&n);

	for (size_t i = 0; i < n; i++) {
		if (p[i].mla)
			fprintf(f, "%s%-14s %-34s MLA, %u layers, latent %u, %s\n", indent,
				p[i].name, p[i].description, p[i].layers, p[i].latent_dim,
				p[i].dtype);
		else
			fprintf(f, "%s%-14s %-34s %u layers, %u KV heads, head dim %u, %s\n",
				indent, p[i].name, p[i].description, p[i].layers, p[i].kv_heads,
				p[i].head_dim, p[i].dtype);
	}
}

/* The host tier from a reachable daemon's pool; silence when there is
 * none, because plan is as useful on a laptop as on a serving node. */
static void plan_daemon_capacity(struct ctx *x, struct tier *ret, size_t *n_tiers)
{
	const struct rec *d;
	int r;

	/* The library's own deadline, not the alarm: the alarm ends the
	 * program, and a silent daemon must not cost plan its answer. */
	setenv("KVTIER_TIMEOUT_MS", "3000", 0);
	kvt_connect_opts copts = {.size = sizeof(copts), .flags = KVT_CONNECT_OBSERVER,
				 .socket_path = x->socket, .name = "kvtierctl"};
	r = kvt_client_connect_opts(&copts, &x->client);
	if (r < 0) {
		if (verbose)
			fprintf(stderr, "kvtierctl plan: no kvtierd at %s (%s); no tier from it\n",
				x->socket, strerror(-r));
		return;
	}
	r = kvt_stats(x->client, KVT_STATS_DAEMON, snapshot_add, &x->snap);
	d = r >= 0 && x->snap.error >= 0 ? snapshot_find(&x->snap, "daemon") : NULL;
	if (!d || !rec_has(d, "capacity")) {
		if (verbose)
			fprintf(stderr, "kvtierctl plan: kvtierd at %s did not say its capacity%s\n",
				x->socket, d ? " (that needs root or kvtierd's uid)" : "");
		return;
	}
	ret[*n_tiers] = (struct tier){.name = "host", .source = "kvtierd",
				      .capacity = rec_u64(d, "capacity")};
	(*n_tiers)++;
}

static void json_u64_or_null(struct json *j, const char *key, uint64_t v, bool have)
{
	json_key(j, key);
	if (have)
		json_u64(j, v);
	else
		json_null(j);
}

static int cmd_plan(struct ctx *x)
{
	const struct plan_opts *o = &popts;
	const struct plan_preset *preset = NULL;
	struct plan_geometry g = {0};
	struct plan p;
	struct tier tiers[3];
	size_t n_tiers = 0;
	uint64_t bytes = 0, rank_bytes = 0, per_context = 0;
	const char *dtype = NULL;
	bool custom_bpt = o->bytes_per_token != 0;
	char a[32], b[32], c[32], d[32];
	int r;

	if (o->model) {
		preset = plan_preset_find(o->model);
		if (!preset) {
			fprintf(stderr, "kvtierctl plan: no preset '%s'; the presets are:\n", o->model);
			list_presets(stderr, "  ");
			fprintf(stderr, "or describe the model with --layers, --kv-heads and --head-dim (MLA: --mla --layers --latent-dim).\n");
			return EXIT_USAGE;
		}
	}
	if (custom_bpt && (o->model || o->layers || o->kv_heads || o->head_dim || o->latent_dim))
		return plan_usage("--bytes-per-token replaces the model geometry; drop --model, --layers, --kv-heads, --head-dim and --latent-dim");
	if (custom_bpt && o->dtype)
		return plan_usage("--dtype has no effect with --bytes-per-token, which already counts the element size");

	g.mla = preset ? preset->mla : o->mla;
	if (preset && o->mla && !preset->mla)
		return plan_usage("--mla: %s is not an MLA model", preset->name);
	if (g.mla && (o->kv_heads || o->head_dim))
		return plan_usage("an MLA cache has no KV heads: give --latent-dim (kv_lora_rank + rope head dim) instead of --kv-heads/--head-dim");
	if (!g.mla && o->latent_dim)
		return plan_usage("--latent-dim is for MLA models: add --mla");
	g.tp = o->tp;
	g.block_tokens = o->block_tokens;
	if (custom_bpt) {
		g.bytes_per_token = o->bytes_per_token;
	} else {
		int dtype_bytes;

		/* Explicit numbers override the preset's: a pipeline stage
		 * holds only some of the model's layers. */
		g.layers = o->layers ? o->layers : preset ? preset->layers : 0;
		g.kv_heads = o->kv_heads ? o->kv_heads : preset ? preset->kv_heads : 0;
		g.head_dim = o->head_dim ? o->head_dim : preset ? preset->head_dim : 0;
		g.latent_dim = o->latent_dim ? o->latent_dim : preset ? preset->latent_dim : 0;
		if (!g.layers && !g.kv_heads && !g.head_dim && !g.latent_dim && !g.mla)
			return plan_usage("which model? Give --model NAME, --layers/--kv-heads/--head-dim, --mla --layers --latent-dim, or --bytes-per-token");
		if (!g.layers)
			return plan_usage("missing --layers");
		if (g.mla && !g.latent_dim)
			return plan_usage("missing --latent-dim (kv_lora_rank + rope head dim, 576 for DeepSeek-V3)");
		if (!g.mla && !g.kv_heads)
			return plan_usage("missing --kv-heads");
		if (!g.mla && !g.head_dim)
			return plan_usage("missing --head-dim");
		dtype = o->dtype ? o->dtype : preset ? preset->dtype : "fp16";
		dtype_bytes = plan_dtype_bytes(dtype);
		if (dtype_bytes < 0) {
			size_t n;
			const struct plan_dtype *dt = plan_dtypes(&n);
			fprintf(stderr, "kvtierctl plan: unknown --dtype '%s'; one of:", dtype);
			for (size_t i = 0; i < n; i++)
				fprintf(stderr, " %s", dt[i].name);
			fputs("\n", stderr);
			return EXIT_USAGE;
		}
		g.dtype_bytes = (uint64_t)dtype_bytes;
	}

	r = plan_compute(&g, &p);
	if (r == -EOVERFLOW)
		return plan_usage("the figures pass 2^64 bytes; check the inputs");
	if (r == -EINVAL && custom_bpt)
		return plan_usage("--bytes-per-token %" PRIu64 " does not split evenly over --tp %" PRIu64,
				  g.bytes_per_token, g.tp);
	if (r == -EINVAL)
		return plan_usage("--tp %" PRIu64 " and %" PRIu64 " KV heads: the ranks must split the heads evenly, or each hold a replica of one",
				  g.tp, g.kv_heads);
	if (r < 0)
		return plan_usage("%s", strerror(-r));
	if (o->tokens) {
		r = plan_context_bytes(&p, o->tokens, o->batch, &bytes, &rank_bytes);
		if (r < 0)
			return plan_usage("--tokens %" PRIu64 " x --batch %" PRIu64 " passes 2^64 bytes",
					  o->tokens, o->batch);
		per_context = o->tokens / p.block_tokens + (o->tokens % p.block_tokens != 0);
	}

	/* Not refusals: the plan is arithmetic, but the operator should know
	 * kvtierd would not open such a namespace. */
	if (g.tp > PLAN_MAX_TP)
		fprintf(stderr, "kvtierctl plan: note: kvtierd accepts at most %u tensor-parallel ranks\n",
			PLAN_MAX_TP);
	if (p.block_tokens > PLAN_MAX_BLOCK_TOKENS)
		fprintf(stderr, "kvtierctl plan: note: kvtierd accepts at most %u tokens per block\n",
			PLAN_MAX_BLOCK_TOKENS);
	if (p.slot_bytes > PLAN_MAX_SLOT_BYTES)
		fprintf(stderr, "kvtierctl plan: note: a block of %s is past kvtierd's 1 GiB limit; use fewer --block-tokens\n",
			kvt_size_format(p.slot_bytes, a, sizeof(a)));

	if (o->host_given)
		tiers[n_tiers++] = (struct tier){"host", "--host-capacity", o->host_capacity, {0}};
	if (o->nvme_given)
		tiers[n_tiers++] = (struct tier){"nvme", "--nvme-capacity", o->nvme_capacity, {0}};
	if (!o->host_given && !o->nvme_given)
		plan_daemon_capacity(x, tiers, &n_tiers);
	for (size_t i = 0; i < n_tiers; i++) {
		r = plan_fit(&p, tiers[i].capacity, o->tokens, o->batch, &tiers[i].fit);
		if (r < 0)
			return plan_usage("the %s tier's token count passes 2^64", tiers[i].name);
	}

	if (x->json) {
		struct json j = {.f = stdout};
		json_open(&j, '{');
		json_key(&j, "model");
		if (preset)
			json_str(&j, preset->name);
		else
			json_null(&j);
		json_key(&j, "attention");
		if (custom_bpt && !g.mla)
			json_null(&j);
		else
			json_str(&j, g.mla ? "mla" : "gqa");
		json_u64_or_null(&j, "layers", g.layers, !custom_bpt);
		json_u64_or_null(&j, "kv_heads", g.kv_heads, !custom_bpt && !g.mla);
		json_u64_or_null(&j, "head_dim", g.head_dim, !custom_bpt && !g.mla);
		json_u64_or_null(&j, "latent_dim", g.latent_dim, !custom_bpt && g.mla);
		json_key(&j, "dtype");
		if (dtype)
			json_str(&j, dtype);
		else
			json_null(&j);
		json_u64_or_null(&j, "dtype_bytes", g.dtype_bytes, !custom_bpt);
		json_u64_or_null(&j, "tp", p.tp, true);
		json_u64_or_null(&j, "block_tokens", p.block_tokens, true);
		json_u64_or_null(&j, "tokens", o->tokens, o->tokens != 0);
		json_u64_or_null(&j, "batch", o->batch, true);
		json_u64_or_null(&j, "bytes_per_token", p.bytes_per_token, true);
		json_u64_or_null(&j, "bytes_per_token_per_rank", p.bytes_per_token_rank, true);
		json_u64_or_null(&j, "shards", p.shards, true);
		json_u64_or_null(&j, "bytes_per_block", p.block_bytes, true);
		json_u64_or_null(&j, "slot_bytes", p.slot_bytes, true);
		json_u64_or_null(&j, "blocks_per_context", per_context, o->tokens != 0);
		json_u64_or_null(&j, "bytes", bytes, o->tokens != 0);
		json_u64_or_null(&j, "bytes_per_rank", rank_bytes, o->tokens != 0);
		json_key(&j, "tiers");
		json_open(&j, '[');
		for (size_t i = 0; i < n_tiers; i++) {
			json_open(&j, '{');
			json_key(&j, "tier");
			json_str(&j, tiers[i].name);
			json_key(&j, "source");
			json_str(&j, tiers[i].source);
			json_u64_or_null(&j, "capacity", tiers[i].capacity, true);
			json_u64_or_null(&j, "blocks", tiers[i].fit.blocks, true);
			json_u64_or_null(&j, "tokens", tiers[i].fit.tokens, true);
			json_u64_or_null(&j, "contexts", tiers[i].fit.contexts, o->tokens != 0);
			json_u64_or_null(&j, "batches", tiers[i].fit.batches, o->tokens != 0);
			json_close(&j, '}');
		}
		json_close(&j, ']');
		json_close(&j, '}');
		return 0;
	}

	if (custom_bpt)
		printf("%-18sgiven as %s bytes per token%s\n", "Model:",
		       fmt_count(a, sizeof(a), p.bytes_per_token), g.mla ? " (MLA: stored once)" : "");
	else if (g.mla)
		printf("%-18s%s%s%s%sMLA, %" PRIu64 " layers, latent %" PRIu64 ", %s (%" PRIu64 " B)\n",
		       "Model:", preset ? preset->name : "", preset ? " (" : "",
		       preset ? preset->description : "", preset ? "): " : "", g.layers,
		       g.latent_dim, dtype, g.dtype_bytes);
	else
		printf("%-18s%s%s%s%sGQA, %" PRIu64 " layers, %" PRIu64 " KV heads, head dim %" PRIu64
		       ", %s (%" PRIu64 " B)\n",
		       "Model:", preset ? preset->name : "", preset ? " (" : "",
		       preset ? preset->description : "", preset ? "): " : "", g.layers, g.kv_heads,
		       g.head_dim, dtype, g.dtype_bytes);
	printf("%-18s%s (%s)\n", "Bytes per token:", fmt_count(a, sizeof(a), p.bytes_per_token),
	       kvt_size_format(p.bytes_per_token, b, sizeof(b)));
	if (p.tp > 1) {
		if (g.mla)
			printf("%-18s%" PRIu64 " ranks; the latent is the same on each, stored once\n",
			       "Tensor parallel:", p.tp);
		else
			printf("%-18s%" PRIu64 " ranks, %s (%s) per token on each%s\n", "Tensor parallel:",
			       p.tp, fmt_count(a, sizeof(a), p.bytes_per_token_rank),
			       kvt_size_format(p.bytes_per_token_rank, b, sizeof(b)),
			       !custom_bpt && g.kv_heads < g.tp ? " (KV heads replicated)" : "");
	}
	printf("%-18s%s (%s) of %" PRIu64 " tokens; kvtierd slot %s (%s)\n", "Bytes per block:",
	       fmt_count(a, sizeof(a), p.block_bytes), kvt_size_format(p.block_bytes, b, sizeof(b)),
	       p.block_tokens, fmt_count(c, sizeof(c), p.slot_bytes),
	       kvt_size_format(p.slot_bytes, d, sizeof(d)));
	if (o->tokens) {
		printf("%-18s%s tokens x %" PRIu64 " = %s B (%s)", "Context:",
		       fmt_count(a, sizeof(a), o->tokens), o->batch, fmt_count(b, sizeof(b), bytes),
		       kvt_size_format(bytes, c, sizeof(c)));
		if (p.tp > 1 && !g.mla)
			printf("; %s per rank", kvt_size_format(rank_bytes, d, sizeof(d)));
		printf("\n%-18s%s per context\n", "Blocks:", fmt_count(a, sizeof(a), per_context));
	}
	putchar('\n');
	if (n_tiers == 0) {
		printf("No tiers: give --host-capacity/--nvme-capacity, or run this where kvtierd\n"
		       "is reachable (as root or its user) to size its host pool.\n");
		return 0;
	}
	{
		static const struct column cols[] = {
			{"TIER", false}, {"CAPACITY", true}, {"FROM", false}, {"BLOCKS", true},
			{"TOKENS", true}, {"CONTEXTS", true}, {"BATCHES", true},
		};
		struct table t = {.cols = cols,
				  .n_cols = !o->tokens ? 5 : o->batch > 1 ? 7 : 6};
		for (size_t i = 0; i < n_tiers; i++) {
			table_add(&t, "%s", tiers[i].name);
			table_add(&t, "%s", kvt_size_format(tiers[i].capacity, a, sizeof(a)));
			table_add(&t, "%s", tiers[i].source);
			table_add(&t, "%s", fmt_count(a, sizeof(a), tiers[i].fit.blocks));
			table_add(&t, "%s", fmt_count(a, sizeof(a), tiers[i].fit.tokens));
			if (t.n_cols > 5)
				table_add(&t, "%s", fmt_count(a, sizeof(a), tiers[i].fit.contexts));
			if (t.n_cols > 6)
				table_add(&t, "%s", fmt_count(a, sizeof(a), tiers[i].fit.batches));
		}
		r = table_print(&t, stdout);
		table_free(&t);
	}
	return r;
}

/* ------------------------------------------------------------------ */
/* Commands                                                           */
/* ------------------------------------------------------------------ */

enum {
	NEEDS_NONE,   /* plan: the daemon is optional */
	NEEDS_STATS,  /* connect, fetch what, then run */
	NEEDS_CLIENT, /* connect, then run (it fetches itself) */
};

static const struct command {
	const char *name;
	const char *args;  /* positional arguments, for help */
	int n_args;
	int needs;
	uint32_t what;     /* only what the command shows crosses the socket */
	bool json;         /* has a --json form */
	int (*run)(struct ctx *x);
	const char *help;
} commands[] = {
	{"status", "", 0, NEEDS_STATS, STATS_STATUS, true, cmd_status,
	 "daemon summary, host pool, NUMA nodes, tenants and namespaces"},
	{"clients", "", 0, NEEDS_STATS, KVT_STATS_CLIENTS, true, cmd_clients,
	 "connected clients: pid, uid, tenant, requests, handles"},
	{"namespaces", "", 0, NEEDS_STATS, KVT_STATS_NAMESPACES, true, cmd_namespaces,
	 "every namespace with all its counters"},
	{"top", "", 0, NEEDS_CLIENT, STATS_STATUS, false, cmd_top,
	 "live status with per-namespace rates (lookups/s, hit rate, MiB/s)"},
	{"metrics", "", 0, NEEDS_STATS, STATS_STATUS, false, cmd_metrics,
	 "Prometheus text exposition (for node_exporter's textfile collector)"},
	{"evict", "TENANT NAMESPACE", 2, NEEDS_STATS, STATS_STATUS, true, cmd_evict,
	 "evict a namespace from host memory; NVMe copies stay (root or kvtierd's uid)"},
	{"drop", "TENANT NAMESPACE", 2, NEEDS_STATS, STATS_STATUS, true, cmd_drop,
	 "drop a namespace's blocks from every tier (root or kvtierd's uid)"},
	{"plan", "", 0, NEEDS_NONE, 0, true, cmd_plan,
	 "KV-cache bytes per token and block, and what fits in each tier"},
};

/* ------------------------------------------------------------------ */
/* Main                                                               */
/* ------------------------------------------------------------------ */

static void help(void)
{
	printf("Usage: kvtierctl [OPTIONS] COMMAND [ARGS]\n"
	       "\n"
	       "Show what a running kvtierd holds (the host pool, NUMA nodes, tenants,\n"
	       "namespaces and clients), export it to Prometheus, drop a namespace's\n"
	       "blocks, and size the KV cache of a model.  Sizes in tables are\n"
	       "human-readable (KiB = 1024 B); --json prints raw numbers for programs.\n"
	       "\n"
	       "Commands:\n");
	for (size_t i = 0; i < N_ELEMS(commands); i++) {
		char head[40];
		snprintf(head, sizeof(head), "%s %s", commands[i].name, commands[i].args);
		printf("  %-27s %s\n", head, commands[i].help);
	}
	printf("\n"
	       "Options:\n"
	       "  -s, --socket PATH     talk to the kvtierd listening on PATH\n"
	       "                        (default %s)\n"
	       "      --json            print JSON instead of tables (status, clients,\n"
	       "                        namespaces, evict, drop, plan)\n"
	       "  -v, --verbose         show the client library's warnings and errors\n"
	       "                        (twice: also its informational messages)\n"
	       "  -h, --help            show this help\n"
	       "  -V, --version         show the version\n"
	       "\n"
	       "top:\n"
	       "  -i, --interval SEC    refresh every SEC seconds (default 1; fractions work)\n"
	       "  -n, --iterations N    stop after N refreshes (default: until q or Ctrl-C)\n"
	       "  Rates are counter deltas between refreshes; the first refresh has none.\n"
	       "  On a terminal the screen is redrawn in place; otherwise each refresh is\n"
	       "  printed after the last, without escape codes.\n"
	       "\n"
	       "evict, drop:\n"
	       "  TENANT is a tenant's name as status shows it (uid:1000, or a configured\n"
	       "  name) or its numeric id; NAMESPACE is the namespace's id.  Prints how\n"
	       "  many blocks went.  Engines see misses for them and recompute.\n"
	       "\n"
	       "plan (needs no daemon):\n"
	       "      --model NAME      a preset (below); explicit options override its numbers\n"
	       "      --layers N --kv-heads N --head-dim N    an MHA/GQA model\n"
	       "      --mla --layers N --latent-dim N         an MLA model (latent = kv_lora_rank\n"
	       "                        + rope head dim; stored once, not per head or rank)\n"
	       "      --bytes-per-token N   skip the geometry: N bytes per token, all ranks\n"
	       "      --dtype T         fp16, bf16, fp8 (fp8_e4m3, fp8_e5m2), fp32 or int8\n"
	       "                        (default: the preset's, else fp16)\n"
	       "      --tokens N        context length (128K = 131072); adds per-context figures\n"
	       "      --batch N         contexts of that length at once (default 1)\n"
	       "      --block-tokens N  tokens per kvtier block (default 16)\n"
	       "      --tp N            tensor-parallel ranks: per-rank bytes too (default 1)\n"
	       "      --host-capacity SIZE, --nvme-capacity SIZE\n"
	       "                        tier sizes such as 64G, 1.5T or 512MiB (binary units).\n"
	       "                        Without either, a reachable kvtierd's pool capacity is\n"
	       "                        the host tier; without that, no tier rows.\n"
	       "  Bytes per token: MHA/GQA 2 x layers x kv_heads x head_dim x dtype bytes;\n"
	       "  MLA layers x latent_dim x dtype bytes.  A tier holds whole kvtierd slots\n"
	       "  (each rank's share of a block rounded up to 4 KiB); tokens and contexts\n"
	       "  that fit round down, and a context counts its last partial block whole.\n"
	       "  Presets:\n",
	       kvt_default_socket());
	list_presets(stdout, "    ");
	printf("  plan --json prints one object: model, attention (\"gqa\", \"mla\"), layers,\n"
	       "  kv_heads, head_dim, latent_dim, dtype, dtype_bytes, tp, block_tokens,\n"
	       "  tokens, batch, bytes_per_token, bytes_per_token_per_rank, shards,\n"
	       "  bytes_per_block, slot_bytes, blocks_per_context, bytes (tokens x batch x\n"
	       "  bytes_per_token), bytes_per_rank, and tiers: [{tier, source, capacity,\n"
	       "  blocks, tokens, contexts, batches}].  Every size is a number of bytes;\n"
	       "  what does not apply is null.\n"
	       "\n"
	       "metrics:\n"
	       "  Prometheus text format 0.0.4: pool, NUMA node, tenant and namespace\n"
	       "  gauges and counters (kvtier_pool_used_bytes, kvtier_node_used_bytes{node},\n"
	       "  kvtier_tenant_used_bytes{tenant}, kvtier_namespace_hits_total{tenant,\n"
	       "  namespace,model}, ...).  For node_exporter's textfile collector, write a\n"
	       "  temporary file and rename it, so the collector never reads half a file:\n"
	       "    kvtierctl metrics > /var/lib/node_exporter/textfile/kvtier.prom.$$ &&\n"
	       "      mv /var/lib/node_exporter/textfile/kvtier.prom.$$ \\\n"
	       "         /var/lib/node_exporter/textfile/kvtier.prom\n"
	       "  (from a timer or cron, as root for the whole daemon).  When kvtierd is\n"
	       "  down the old file stays; alert on node_textfile_mtime_seconds.\n"
	       "\n"
	       "Examples:\n"
	       "  kvtierctl status\n"
	       "  kvtierctl --socket /tmp/kvt.sock clients\n"
	       "  kvtierctl --json namespaces | jq '.[] | {model, hit_rate}'\n"
	       "  kvtierctl top --interval 2\n"
	       "  sudo kvtierctl evict uid:1000 3\n"
	       "  kvtierctl plan --model llama3-70b --tokens 128K --tp 8 --host-capacity 512G\n"
	       "  kvtierctl plan --layers 80 --kv-heads 8 --head-dim 128 --tokens 131072 --json\n"
	       "  kvtierctl plan --model deepseek-v3 --tokens 32K --batch 16 --nvme-capacity 3.5T\n"
	       "\n"
	       "Environment:\n"
	       "  KVTIER_SOCKET         the socket when --socket is not given\n"
	       "\n"
	       "Exit status:\n"
	       "  0  success\n"
	       "  1  kvtierd could not be reached, refused the request (evict and drop\n"
	       "     need root or kvtierd's uid) or has no such tenant or namespace\n"
	       "  2  bad usage\n");
}

static void log_stderr(int level, const char *message, void *userdata)
{
	const char *what;

	if (level > KVT_LOG_WARNING && verbose < 2)
		return;
	what = level <= KVT_LOG_ERR ? "error" : level <= KVT_LOG_WARNING ? "warning" : "info";
	fprintf(stderr, "kvtierctl: libkvtier-client %s: %s\n", what, message);
}

static void connect_failed(const char *path, int r)
{
	fprintf(stderr, "kvtierctl: cannot connect to kvtierd at %s: %s\n", path, strerror(-r));
	switch (-r) {
	case ENOENT:
	case ECONNREFUSED:
	case ENOTSOCK:
		fprintf(stderr, "kvtierctl: is kvtierd running? start it with 'kvtierd --socket %s' or 'systemctl start kvtierd', or point KVTIER_SOCKET at its socket\n",
			path);
		break;
	case EACCES:
	case EPERM:
		fprintf(stderr, "kvtierctl: the socket or its directory is not open to you; run as root or as a user kvtierd accepts\n");
		break;
	default:
		/* The daemon's own reason reaches only the log handler. */
		if (!verbose)
			fprintf(stderr, "kvtierctl: run with -v for the reason\n");
		break;
	}
}

/* The alarm is a last resort against a daemon that accepts and never
 * answers: nothing can be resumed after it, so it ends the program. */
#define REPLY_TIMEOUT_S 10

static char timeout_msg[256];
static void (*timeout_hook)(void);

static void on_alarm(int sig)
{
	ssize_t n;

	if (timeout_hook)
		timeout_hook();
	n = write(STDERR_FILENO, timeout_msg, strlen(timeout_msg));
	(void)n;
	_exit(EXIT_DAEMON);
}

static void timeout_setup(const char *path)
{
	struct sigaction sa = {.sa_handler = on_alarm};

	snprintf(timeout_msg, sizeof(timeout_msg),
		 "kvtierctl: kvtierd at %s did not answer within %d s\n", path,
		 REPLY_TIMEOUT_S);
	sigaction(SIGALRM, &sa, NULL);
}

void timeout_arm(void)
{
	alarm(REPLY_TIMEOUT_S);
}

void timeout_disarm(void)
{
	alarm(0);
}

void timeout_on_expire(void (*fn)(void))
{
	timeout_hook = fn;
}

int ctx_fetch(struct ctx *x, uint32_t what, bool quiet)
{
	struct snapshot s = {0};
	int r;

	timeout_arm();
	r = kvt_stats(x->client, what, snapshot_add, &s);
	timeout_disarm();
	if (r >= 0 && s.error < 0)
		r = s.error;
	if (r < 0) {
		if (!quiet) {
			const char *why = kvt_client_error(x->client);
			fprintf(stderr, "kvtierctl: cannot read statistics from kvtierd at %s: %s%s%s\n",
				x->socket, strerror(-r), why[0] ? ": " : "", why);
		}
		snapshot_clear(&s);
		return r;
	}
	snapshot_clear(&x->snap);
	x->snap = s;
	return 0;
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs("kvtierctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\nTry 'kvtierctl --help'.\n", stderr);
	return EXIT_USAGE;
}

/* A count option: a whole number, at least min. */
static int opt_count(const char *name, const char *arg, uint64_t min, uint64_t *ret)
{
	uint64_t v;

	if (plan_parse_count(arg, &v) < 0 || v < min)
		return usage_error("%s needs a whole number%s, not '%s'", name,
				   min ? " of at least 1" : "", arg);
	*ret = v;
	return 0;
}

static int opt_size(const char *name, const char *arg, uint64_t *ret)
{
	if (kvt_size_parse(arg, ret) < 0)
		return usage_error("%s needs a size such as 64G, 1.5T or 512MiB, not '%s'", name, arg);
	return 0;
}

int main(int argc, char **argv)
{
	enum {
		OPT_JSON = 0x100,
		OPT_MODEL, OPT_LAYERS, OPT_KV_HEADS, OPT_HEAD_DIM, OPT_MLA, OPT_LATENT_DIM,
		OPT_BPT, OPT_DTYPE, OPT_TOKENS, OPT_BATCH, OPT_BLOCK_TOKENS, OPT_TP,
		OPT_HOST_CAP, OPT_NVME_CAP,
	};
	static const struct option opts[] = {
		{"socket", required_argument, NULL, 's'},
		{"json", no_argument, NULL, OPT_JSON},
		{"verbose", no_argument, NULL, 'v'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{"interval", required_argument, NULL, 'i'},
		{"iterations", required_argument, NULL, 'n'},
		{"model", required_argument, NULL, OPT_MODEL},
		{"layers", required_argument, NULL, OPT_LAYERS},
		{"kv-heads", required_argument, NULL, OPT_KV_HEADS},
		{"head-dim", required_argument, NULL, OPT_HEAD_DIM},
		{"mla", no_argument, NULL, OPT_MLA},
		{"latent-dim", required_argument, NULL, OPT_LATENT_DIM},
		{"bytes-per-token", required_argument, NULL, OPT_BPT},
		{"dtype", required_argument, NULL, OPT_DTYPE},
		{"tokens", required_argument, NULL, OPT_TOKENS},
		{"batch", required_argument, NULL, OPT_BATCH},
		{"block-tokens", required_argument, NULL, OPT_BLOCK_TOKENS},
		{"tp", required_argument, NULL, OPT_TP},
		{"host-capacity", required_argument, NULL, OPT_HOST_CAP},
		{"nvme-capacity", required_argument, NULL, OPT_NVME_CAP},
		{},
	};
	struct ctx x = {.top = {.interval_s = 1.0}};
	const struct command *cmd = NULL;
	const char *top_opt = NULL, *plan_opt = NULL;
	struct plan_opts *po = &popts;
	int c, idx, r, ret = EXIT_DAEMON;

	/* Options may come before or after the command ("kvtierctl status
	 * --json"); each is checked against the command below. */
	while ((c = getopt_long(argc, argv, "s:vhVi:n:", opts, &idx)) >= 0) {
		if (c >= OPT_MODEL && !plan_opt)
			plan_opt = opts[idx].name;
		switch (c) {
		case 's':
			x.socket = optarg;
			x.socket_given = true;
			break;
		case OPT_JSON:
			x.json = true;
			break;
		case 'v':
			verbose++;
			break;
		case 'h':
			help();
			return 0;
		case 'V':
			printf("kvtierctl %s (libkvtier-client %s, protocol %u)\n",
			       KVT_VERSION, kvt_version(), (unsigned)kvt_protocol_version());
			return 0;
		case 'i': {
			char *end;
			double v;
			errno = 0;
			v = strtod(optarg, &end);
			/* Below 10 ms the tool would be most of the daemon's load. */
			if (errno || end == optarg || *end || !isfinite(v) || v < 0.01 || v > 86400)
				return usage_error("--interval needs seconds between 0.01 and 86400, not '%s'",
						   optarg);
			x.top.interval_s = v;
			top_opt = "--interval";
			break;
		}
		case 'n':
			if (opt_count("--iterations", optarg, 1, &x.top.iterations))
				return EXIT_USAGE;
			top_opt = "--iterations";
			break;
		case OPT_MODEL:
			po->model = optarg;
			break;
		case OPT_LAYERS:
			if (opt_count("--layers", optarg, 1, &po->layers))
				return EXIT_USAGE;
			break;
		case OPT_KV_HEADS:
			if (opt_count("--kv-heads", optarg, 1, &po->kv_heads))
				return EXIT_USAGE;
			break;
		case OPT_HEAD_DIM:
			if (opt_count("--head-dim", optarg, 1, &po->head_dim))
				return EXIT_USAGE;
			break;
		case OPT_MLA:
			po->mla = true;
			break;
		case OPT_LATENT_DIM:
			if (opt_count("--latent-dim", optarg, 1, &po->latent_dim))
				return EXIT_USAGE;
			break;
		case OPT_BPT:
			if (opt_count("--bytes-per-token", optarg, 1, &po->bytes_per_token))
				return EXIT_USAGE;
			break;
		case OPT_DTYPE:
			po->dtype = optarg;
			break;
		case OPT_TOKENS:
			if (opt_count("--tokens", optarg, 1, &po->tokens))
				return EXIT_USAGE;
			break;
		case OPT_BATCH:
			if (opt_count("--batch", optarg, 1, &po->batch))
				return EXIT_USAGE;
			break;
		case OPT_BLOCK_TOKENS:
			if (opt_count("--block-tokens", optarg, 1, &po->block_tokens))
				return EXIT_USAGE;
			break;
		case OPT_TP:
			if (opt_count("--tp", optarg, 1, &po->tp))
				return EXIT_USAGE;
			break;
		case OPT_HOST_CAP:
			if (opt_size("--host-capacity", optarg, &po->host_capacity))
				return EXIT_USAGE;
			po->host_given = true;
			break;
		case OPT_NVME_CAP:
			if (opt_size("--nvme-capacity", optarg, &po->nvme_capacity))
				return EXIT_USAGE;
			po->nvme_given = true;
			break;
		default:
			/* getopt has said what was wrong. */
			fputs("Try 'kvtierctl --help'.\n", stderr);
			return EXIT_USAGE;
		}
	}
	if (optind >= argc)
		return usage_error("no command given (one of: status, clients, namespaces, top, metrics, evict, drop, plan)");
	for (size_t i = 0; i < N_ELEMS(commands); i++)
		if (strcmp(argv[optind], commands[i].name) == 0)
			cmd = &commands[i];
	if (!cmd)
		return usage_error("unknown command '%s'", argv[optind]);
	x.args = argv + optind + 1;
	x.n_args = argc - optind - 1;
	if (x.n_args < cmd->n_args)
		return usage_error("%s needs %s", cmd->name, cmd->args);
	if (x.n_args > cmd->n_args)
		return usage_error("unexpected argument '%s'", x.args[cmd->n_args]);
	if (top_opt && cmd->run != cmd_top)
		return usage_error("%s is an option of top, not of %s", top_opt, cmd->name);
	if (plan_opt && cmd->run != cmd_plan)
		return usage_error("--%s is an option of plan, not of %s", plan_opt, cmd->name);
	if (x.json && !cmd->json)
		return usage_error(cmd->run == cmd_metrics
				   ? "metrics prints Prometheus text, not JSON; drop --json"
				   : "%s has no JSON form; use 'kvtierctl --json status' for a snapshot",
				   cmd->name);
	if (!x.socket)
		x.socket = kvt_default_socket();
	if (!x.socket[0])
		return usage_error("--socket needs a non-empty PATH");

	if (verbose)
		kvt_set_default_log(log_stderr, NULL);
	if (cmd->needs != NEEDS_NONE) {
		timeout_setup(x.socket);
		timeout_arm();
		kvt_connect_opts copts = {.size = sizeof(copts), .flags = KVT_CONNECT_OBSERVER,
					 .socket_path = x.socket, .name = "kvtierctl"};
		r = kvt_client_connect_opts(&copts, &x.client);
		timeout_disarm();
		if (r < 0) {
			connect_failed(x.socket, r);
			return EXIT_DAEMON;
		}
		if (verbose)
			kvt_client_set_log(x.client, log_stderr, NULL);
		if (cmd->needs == NEEDS_STATS && ctx_fetch(&x, cmd->what, false) < 0)
			goto out;
	}
	r = cmd->run(&x);
	if (r < 0) {
		fprintf(stderr, "kvtierctl: %s\n", strerror(-r));
		goto out;
	}
	ret = r;
	/* A full disk or a closed pipe must not look like success. */
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "kvtierctl: cannot write the output: %m\n");
		ret = EXIT_DAEMON;
	}
out:
	snapshot_clear(&x.snap);
	kvt_client_free(x.client);
	return ret;
}
