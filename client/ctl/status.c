/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvtierctl status: the daemon summary, the host pool, the NVMe tier and
 * the remote tiers, then the NUMA nodes, tenants, block sizes (their fragmentation) and
 * namespaces; or all of it as one JSON object.
 */
#include <inttypes.h>
#include <string.h>

#include "ctl.h"
#include "macro.h"

/* One "label: value" line, only when the daemon sent the field: a
 * non-admin view carries version, protocol and uptime only. */
static void print_size_line(const struct rec *d, const char *label, const char *field)
{
	char a[KVT_SIZE_LEN], b[32];

	if (!rec_has(d, field))
		return;
	if (strcmp(field, "capacity") == 0) {
		printf("%-13s%s\n", label, kvt_size_format(rec_u64(d, field), a, sizeof(a)));
		return;
	}
	printf("%-13s%s (%s)\n", label, kvt_size_format(rec_u64(d, field), a, sizeof(a)),
	       fmt_pct(b, sizeof(b), ratio_of(rec_u64(d, field), rec_u64(d, "capacity"))));
}

static void print_nvme(const struct rec *d, const struct rec *rec, const struct rec *er)
{
	char cap[KVT_SIZE_LEN], used[KVT_SIZE_LEN];
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
	       " ms", "  recovery:", rec_u64(d, "nvme_recovered"),
	       rec_u64(d, "nvme_recovery_dropped"), rec_u64(d, "nvme_recovery_ms"));
	if (rec && rec_u64(rec, "running"))
		printf("; running: %" PRIu64 " of %" PRIu64 " regions", rec_u64(rec, "regions"),
		       rec_u64(rec, "regions_total"));
	putchar('\n');
	if (er)
		printf("%-13s%" PRIu64 " under way, %" PRIu64 " done, %" PRIu64 " failed\n",
		       "  erasures:", rec_u64(er, "erasing"), rec_u64(er, "erased"),
		       rec_u64(er, "failures"));
}

static void print_pool(const struct rec *d)
{
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
	if (rec_has(d, "fragmentation_alert_ppm")) {
		uint64_t alert = rec_u64(d, "fragmentation_alert_ppm");
		char a[32];
		printf("%-13s%" PRIu64 " tenant(s), %" PRIu64 " warning(s); ", "Fragmented:",
		       rec_u64(d, "fragmented_tenants"), rec_u64(d, "fragmentation_warnings"));
		if (alert)
			printf("alert below %s fill\n", fmt_pct(a, sizeof(a), (double)alert / 1e6));
		else
			printf("alert off\n");
	}
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
	print_pool(d);
	print_numa_line(stdout, d);
	const struct rec *nr = snapshot_find(&x->snap, "numa");
	if (nr)
		printf("%-13s%s\n", "", rec_str(nr, "reason"));
	if (rec_has(d, "nvme_engine"))
		print_nvme(d, snapshot_find(&x->snap, "recovery"), snapshot_find(&x->snap, "erasures"));
	const struct rec *k = snapshot_find(&x->snap, "keep");
	if (k) {
		char sz[KVT_SIZE_LEN];
		printf("%-13s%s", "Kept:", rec_u64(k, "kept") ? "the host tier outlives a restart"
							 : "nothing ([pool] keep = no)");
		if (rec_u64(k, "adopted_extents"))
			printf("; adopted at start: %" PRIu64 " block(s) in %" PRIu64
			       " extent(s) (%s), %" PRIu64 " lease(s) and %" PRIu64
			       " reservation(s) open, %" PRIu64 " record(s) refused, in %" PRIu64 " ms",
			       rec_u64(k, "adopted_blocks"), rec_u64(k, "adopted_extents"),
			       kvt_size_format(rec_u64(k, "adopted_bytes"), sz, sizeof(sz)),
			       rec_u64(k, "adopted_leases"), rec_u64(k, "adopted_reservations"),
			       rec_u64(k, "adopted_bad"), rec_u64(k, "adopt_ms"));
		putchar('\n');
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
	if (rec_has(d, "dispatch_max_us"))
		printf("%-13slongest dispatch %.1f ms, %" PRIu64 " of %" PRIu64 " over 5 ms\n",
		       "Loop:", (double)rec_u64(d, "dispatch_max_us") / 1000.0,
		       rec_u64(d, "dispatches_slow"), rec_u64(d, "dispatches"));
	if (!rec_has(d, "capacity"))
		printf("\n(Only your own tenant is shown; run as root or as kvtierd's user for the whole daemon.)\n");
}

/* One line block per [remote.NAME]: state, use against capacity, traffic
 * and errors; its tenants' shares are columns of the tenants table. */
static void print_remote(const struct rec *r)
{
	char cap[KVT_SIZE_LEN], used[KVT_SIZE_LEN];
	uint64_t c = rec_u64(r, "capacity"), u = rec_u64(r, "used");

	printf("%-13s%s, pool %s: %s", "Remote tier:", rec_str(r, "name"), rec_str(r, "pool"),
	       rec_str(r, "state"));
	if (strcmp(rec_str(r, "state"), "up"))
		printf(" (%s; local tiers serve)", rec_str(r, "reason"));
	putchar('\n');
	printf("%-13s%s of %s (%.1f%%, %" PRIu64 " objects, at the last trim pass here)\n",
	       "  used:", kvt_size_format(u, used, sizeof(used)), kvt_size_format(c, cap, sizeof(cap)),
	       c ? 100.0 * (double)u / (double)c : 0.0, rec_u64(r, "objects"));
	printf("%-13s%" PRIu64 " written back (%.1f MiB), %" PRIu64 " fetched (%.1f MiB) in %" PRIu64
	       " rounds, %" PRIu64 " misses, %" PRIu64 " in flight\n",
	       "  I/O:", rec_u64(r, "writes"), (double)rec_u64(r, "write_bytes") / (1 << 20),
	       rec_u64(r, "reads"), (double)rec_u64(r, "read_bytes") / (1 << 20),
	       rec_u64(r, "lookup_rounds"), rec_u64(r, "misses"), rec_u64(r, "in_flight"));
	printf("%-13s%" PRIu64 " operations (%" PRIu64 " timed out), %" PRIu64
	       " objects failed verification, degraded %" PRIu64 " times, %" PRIu64
	       " write-backs skipped\n",
	       "  errors:", rec_u64(r, "errors"), rec_u64(r, "timeouts"), rec_u64(r, "rejected"),
	       rec_u64(r, "degraded"), rec_u64(r, "skipped"));
	printf("%-13s%" PRIu64 " passes, %" PRIu64 " objects (%.1f MiB) removed\n", "  trimming:",
	       rec_u64(r, "trim_passes"), rec_u64(r, "trimmed"),
	       (double)rec_u64(r, "trimmed_bytes") / (1 << 20));
}

/* Each tenant's traffic with its remote tier. */
static int print_remote_tenants(FILE *f, const struct snapshot *s)
{
	static const struct column cols[] = {
		{"TENANT", false}, {"TIER", false}, {"FETCHED", true}, {"BYTES IN", true},
		{"WRITTEN", true}, {"BYTES OUT", true}, {"MISSES", true},
	};
	struct table t = TABLE_INIT(cols, ARRAY_SIZE(cols));
	char a[KVT_SIZE_LEN], b[KVT_SIZE_LEN];
	int r;

	for (size_t i = 0; i < s->n; i++) {
		const struct rec *x = &s->recs[i];
		if (!rec_is(x, "tenant") || !rec_has(x, "remote_tier"))
			continue;
		table_add(&t, "%s", rec_str(x, "name"));
		table_add(&t, "%s", rec_str(x, "remote_tier"));
		table_add(&t, "%" PRIu64, rec_u64(x, "remote_reads"));
		table_add(&t, "%s", kvt_size_format(rec_u64(x, "remote_read_bytes"), a, sizeof(a)));
		table_add(&t, "%" PRIu64, rec_u64(x, "remote_writes"));
		table_add(&t, "%s", kvt_size_format(rec_u64(x, "remote_write_bytes"), b, sizeof(b)));
		table_add(&t, "%" PRIu64, rec_u64(x, "remote_misses"));
	}
	r = table_print(&t, f);
	table_free(&t);
	return r;
}

/* Per tenant and block size: what its extents hold, and what they hold
 * that no other block size can use. */
static int print_classes(FILE *f, const struct snapshot *s)
{
	static const struct column cols[] = {
		{"TENANT", false}, {"SLOT", true},    {"EXTENTS", true}, {"EMPTY", true},
		{"ALLOCATED", true}, {"FILL", true},  {"FREE", true},    {"PADDING", true},
		{"STARVED", true}, {"RETAINED", true}, {"DEMOTED", true},
	};
	struct table t = TABLE_INIT(cols, ARRAY_SIZE(cols));
	char a[KVT_SIZE_LEN], b[KVT_SIZE_LEN], c[KVT_SIZE_LEN], d[KVT_SIZE_LEN], p[32];
	int r;

	for (size_t i = 0; i < s->n; i++) {
		const struct rec *x = &s->recs[i];
		if (!rec_is(x, "class"))
			continue;
		table_add(&t, "%s", rec_str(x, "tenant"));
		table_add(&t, "%s", kvt_size_format(rec_u64(x, "slot_bytes"), a, sizeof(a)));
		table_add(&t, "%" PRIu64, rec_u64(x, "extents"));
		table_add(&t, "%" PRIu64, rec_u64(x, "empty_extents"));
		table_add(&t, "%s", kvt_size_format(rec_u64(x, "extent_bytes"), b, sizeof(b)));
		/* No extents: nothing to fill (JSON says 1, a table "-"). */
		table_add(&t, "%s", fmt_pct(p, sizeof(p), rec_u64(x, "extent_bytes") ?
					(double)rec_u64(x, "fill_ppm") / 1e6 : -1));
		table_add(&t, "%s", kvt_size_format(rec_u64(x, "free_bytes"), c, sizeof(c)));
		table_add(&t, "%s", kvt_size_format(rec_u64(x, "padding_bytes"), d, sizeof(d)));
		table_add(&t, "%" PRIu64, rec_u64(x, "starved"));
		table_add(&t, "%" PRIu64, rec_u64(x, "retained"));
		table_add(&t, "%" PRIu64, rec_u64(x, "demoted"));
	}
	r = table_print(&t, f);
	table_free(&t);
	for (size_t i = 0; r >= 0 && i < s->n; i++) {
		const struct rec *x = &s->recs[i];
		if (!rec_is(x, "tenant") || !rec_u64(x, "fragmented"))
			continue;
		fprintf(f, "Tenant %s is fragmented: blocks fill %s of its extents and %s of free slots are stranded in other block sizes (see kvtierctl(1), FRAGMENTATION).\n",
			rec_str(x, "name"), fmt_pct(p, sizeof(p), (double)rec_u64(x, "fill_ppm") / 1e6),
			kvt_size_format(rec_u64(x, "stranded_bytes"), a, sizeof(a)));
	}
	return r;
}

static void status_json(const struct snapshot *s)
{
	const struct rec *d = snapshot_find(s, "daemon");
	struct json j = {.f = stdout};

	json_open(&j, '{');
	json_key(&j, "daemon");
	if (d)
		json_rec(&j, d, false);
	else
		json_null(&j);
	json_key(&j, "nodes");
	json_recs(&j, s, "node", false);
	json_key(&j, "tenants");
	json_recs(&j, s, "tenant", true);
	json_key(&j, "namespaces");
	json_recs(&j, s, "namespace", true);
	json_key(&j, "classes");
	json_recs(&j, s, "class", false);
	json_key(&j, "remotes");
	json_recs(&j, s, "remote", false);
	/* For admins (recovery and erasures with an NVMe tier). */
	for (size_t i = 0; i < 3; i++) {
		static const char *const one[] = {"recovery", "erasures", "keep"};
		const struct rec *r = snapshot_find(s, one[i]);
		if (r) {
			json_key(&j, one[i]);
			json_rec(&j, r, false);
		}
	}
	if (snapshot_find(s, "client")) {
		json_key(&j, "clients");
		json_recs(&j, s, "client", false);
	}
	json_close(&j, '}');
}

static int status_run(struct ctx *x)
{
	const struct rec *d = snapshot_find(&x->snap, "daemon");

	if (x->json) {
		status_json(&x->snap);
		return 0;
	}
	if (d)
		print_daemon(x, d);
	for (size_t i = 0; i < x->snap.n; i++)
		if (rec_is(&x->snap.recs[i], "remote"))
			print_remote(&x->snap.recs[i]);
	if (snapshot_find(&x->snap, "node")) {
		printf("\nNUMA nodes:\n");
		TRY(print_nodes(stdout, &x->snap));
	}
	printf("\nTenants:\n");
	TRY(print_tenants(stdout, &x->snap));
	if (snapshot_find(&x->snap, "remote")) {
		printf("\nRemote tier, per tenant:\n");
		TRY(print_remote_tenants(stdout, &x->snap));
	}
	printf("\nBlock sizes:\n");
	TRY(print_classes(stdout, &x->snap));
	printf("\nNamespaces:\n");
	return print_namespaces(stdout, &x->snap, false);
}

const struct ctl_command ctl_cmd_status = {
	.name = "status",
	.args = "",
	.needs = CTL_NEEDS_STATS,
	.what = STATS_STATUS,
	.json = true,
	.summary = "daemon summary, host pool, NUMA nodes, tenants, block sizes and namespaces",
	.run = status_run,
};
