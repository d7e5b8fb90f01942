/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The daemon's STATS records in the Prometheus text exposition format,
 * version 0.0.4: what `kvtierctl metrics` prints and what kvtierd's scrape
 * endpoint ([metrics] listen) serves, from this one table, so the two
 * cannot name a series differently.  The main fields get names with their
 * units and types; any other numeric field of a record becomes
 * kvtier_<kind>_<field> (untyped), so what a newer daemon adds is exported
 * before this table learns about it.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "kvt-proto.h"
#include "macro.h"
#include "prom.h"

struct metric {
	const char *field; /* in the record */
	const char *name;  /* after "kvtier_" */
	const char *type;  /* gauge or counter */
	const char *help;
	unsigned divisor;  /* 1000: milliseconds to seconds; 1000000: ppm to a ratio; 0: as sent */
};

static const struct metric daemon_metrics[] = {
	{"uptime_s", "uptime_seconds", "gauge", "Seconds since kvtierd started.", 0},
	{"capacity", "pool_capacity_bytes", "gauge", "Capacity of the host memory pool.", 0},
	{"allocated", "pool_allocated_bytes", "gauge", "Host memory allocated to pool extents.", 0},
	{"used", "pool_used_bytes", "gauge", "Pool bytes in slots that hold or are receiving a block.", 0},
	{"free", "pool_free_bytes", "gauge", "Pool capacity not in used slots.", 0},
	{"extents", "pool_extents", "gauge", "Memory extents in the host pool.", 0},
	{"extents_hugetlb", "pool_hugetlb_extents", "gauge", "Pool extents backed by hugetlbfs pages.", 0},
	{"extents_thp", "pool_thp_extents", "gauge", "Pool extents backed by transparent huge pages.", 0},
	{"extents_locked", "pool_locked_extents", "gauge", "Pool extents locked in memory.", 0},
	{"populate_ms", "pool_populate_seconds_total", "counter", "Time spent pre-faulting pool extents.", 1000},
	{"extents_ahead", "pool_extents_ahead_total", "counter", "Pool extents whose memory was made ahead of need on a thread.", 0},
	{"ahead_bytes", "pool_ahead_bytes", "gauge", "Memory of the pool extent made ahead and not yet taken.", 0},
	{"numa_nodes", "numa_nodes", "gauge", "NUMA nodes the pool places extents on.", 0},
	{"numa_fallbacks", "numa_fallbacks_total", "counter", "Pool extents placed on another NUMA node than the one asked for.", 0},
	{"tenants", "tenants", "gauge", "Tenants with state in the daemon.", 0},
	{"namespaces", "namespaces", "gauge", "Namespaces of all tenants.", 0},
	{"blocks", "blocks", "gauge", "Blocks resident in host memory.", 0},
	{"handles", "handles", "gauge", "Open leases and reservations.", 0},
	{"clients", "clients", "gauge", "Connected clients.", 0},
	{"connections", "connections_total", "counter", "Connections accepted.", 0},
	{"refused", "connections_refused_total", "counter", "Connections refused.", 0},
	{"malformed", "connections_malformed_total", "counter", "Connections closed for a malformed message.", 0},
	{"quarantined", "quarantined_handles_total", "counter", "Handles of exited processes held back until their copies could have landed.", 0},
	{"accept_failures", "accept_failures_total", "counter", "Connections that could not be taken in for want of descriptors or memory.", 0},
	{"nvme_refused", "nvme_writeback_refused_total", "counter", "Write-backs to NVMe refused for want of spill space (the tenant's blocks stay in host memory only).", 0},
	{"nvme_reclaims", "nvme_regions_reclaimed_total", "counter", "Spill regions taken back from a tenant above its NVMe quota for one below it.", 0},
	{"fragmentation_alert_ppm", "fragmentation_alert_ratio", "gauge", "[pool] fragmentation_alert: a tenant below this fill with memory stranded is fragmented (0: off).", 1000000},
	{"fragmented_tenants", "fragmented_tenants", "gauge", "Tenants fragmented now (kvtier_tenant_fragmented).", 0},
	{"fragmentation_warnings", "fragmentation_warnings_total", "counter", "Fragmentation warnings logged (at most one a minute per tenant).", 0},
	{"turns", "turns_total", "counter", "Turns sessions have taken at the event loop.", 0},
	{"turns_yielded", "turns_yielded_total", "counter", "Turns that ended with work left, the session waiting behind others.", 0},
	{"turns_waiting", "turns_waiting", "gauge", "Sessions waiting for their next turn.", 0},
	{"dispatches", "loop_dispatches_total", "counter", "Events the daemon's loop has dispatched.", 0},
	{"dispatch_max_us", "loop_dispatch_max_seconds", "gauge", "The longest one dispatch held the loop since start.", 1000000},
	{"dispatches_slow", "loop_dispatches_slow_total", "counter", "Dispatches that held the loop 5 ms or more.", 0},
	{"memory_waits", "loop_memory_waits_total", "counter", "Requests that waited off the loop for an extent's memory.", 0},
	{"handshake_timeouts", "connections_handshake_timeouts_total", "counter", "Connections closed for not saying HELLO in time.", 0},
	{"nvme_capacity", "nvme_capacity_bytes", "gauge", "Capacity of the spill files (the NVMe tier).", 0},
	{"nvme_used", "nvme_used_bytes", "gauge", "Spill file bytes holding blocks.", 0},
	{"nvme_blocks", "nvme_blocks", "gauge", "Blocks with a copy on NVMe.", 0},
	{"nvme_writes", "nvme_writes_total", "counter", "Blocks written back to NVMe.", 0},
	{"nvme_reads", "nvme_reads_total", "counter", "Blocks read back from NVMe.", 0},
	{"nvme_write_bytes", "nvme_written_bytes_total", "counter", "Bytes written to the spill files.", 0},
	{"nvme_read_bytes", "nvme_read_bytes_total", "counter", "Bytes read from the spill files.", 0},
	{"nvme_in_flight", "nvme_in_flight", "gauge", "NVMe reads and writes in flight.", 0},
	{"nvme_io_errors", "nvme_io_errors_total", "counter", "NVMe reads and writes that failed.", 0},
	{"nvme_checksum_errors", "nvme_checksum_errors_total", "counter", "Blocks read from NVMe whose checksum did not match (misses).", 0},
	{"nvme_dirty_drops", "nvme_dirty_drops_total", "counter", "Blocks evicted from host memory before their write-back to NVMe had landed.", 0},
};
/* Identity, not measurements: pid changes with every restart, and the
 * version and protocol are labels of kvtier_info. */
static const char *const daemon_skip[] = {"pid", "protocol", NULL};

static const struct metric node_metrics[] = {
	{"extents", "node_extents", "gauge", "Pool extents on this NUMA node.", 0},
	{"allocated", "node_allocated_bytes", "gauge", "Pool memory allocated on this NUMA node.", 0},
	{"used", "node_used_bytes", "gauge", "Pool bytes in used slots on this NUMA node.", 0},
};
static const char *const node_skip[] = {"node", NULL};

static const struct metric tenant_metrics[] = {
	{"quota", "tenant_quota_bytes", "gauge", "Host pool bytes the tenant may use.", 0},
	{"allocated", "tenant_allocated_bytes", "gauge", "Host pool bytes allocated to the tenant.", 0},
	{"used", "tenant_used_bytes", "gauge", "Host pool bytes in the tenant's used slots.", 0},
	{"blocks", "tenant_blocks", "gauge", "The tenant's blocks resident in host memory.", 0},
	{"namespaces", "tenant_namespaces", "gauge", "The tenant's namespaces.", 0},
	{"clients", "tenant_clients", "gauge", "The tenant's connected clients.", 0},
	{"handles", "tenant_handles", "gauge", "The tenant's open leases and reservations.", 0},
	{"hits", "tenant_hits_total", "counter", "Looked-up keys that were resident, over the tenant's namespaces.", 0},
	{"misses", "tenant_misses_total", "counter", "Looked-up keys that were not stored, over the tenant's namespaces.", 0},
	{"stores", "tenant_stores_total", "counter", "Blocks stored, over the tenant's namespaces.", 0},
	{"evictions", "tenant_evictions_total", "counter", "Blocks evicted, over the tenant's namespaces.", 0},
	{"nvme_regions", "tenant_nvme_regions", "gauge", "Spill regions the tenant holds, weighed against its NVMe quota.", 0},
	{"nvme_refused", "tenant_nvme_writeback_refused_total", "counter", "The tenant's write-backs to NVMe refused for want of spill space.", 0},
	{"fill_ppm", "tenant_fill_ratio", "gauge", "Bytes of block payload over bytes of the tenant's extents (1 with no extents).", 1000000},
	{"stranded_bytes", "tenant_stranded_bytes", "gauge", "Free slots of one block size while another block size of the tenant cannot get an extent.", 0},
	{"starved", "tenant_starved_allocations_total", "counter", "Slots that had to be taken by eviction, or were refused, while another block size of the tenant held free slots.", 0},
	{"fragmented", "tenant_fragmented", "gauge", "1 while the tenant's fill is below [pool] fragmentation_alert with memory stranded.", 0},
	{"nvme_quota", "tenant_nvme_quota_bytes", "gauge", "Spill file bytes the tenant may use.", 0},
	{"nvme_used", "tenant_nvme_used_bytes", "gauge", "Spill file bytes holding the tenant's blocks.", 0},
};
static const char *const tenant_skip[] = {"id", "uid", NULL};

static const struct metric ns_metrics[] = {
	{"block_bytes", "namespace_block_size_bytes", "gauge", "Pool bytes of one block (every tensor-parallel shard).", 0},
	{"blocks", "namespace_blocks", "gauge", "Blocks resident in host memory.", 0},
	{"reserved", "namespace_reserved_blocks", "gauge", "Blocks being written (reserved, not yet committed).", 0},
	{"bytes", "namespace_used_bytes", "gauge", "Host pool bytes of the resident blocks.", 0},
	{"lookups", "namespace_lookups_total", "counter", "Lookup requests.", 0},
	{"lookup_keys", "namespace_lookup_keys_total", "counter", "Keys in lookup requests.", 0},
	{"hits", "namespace_hits_total", "counter", "Looked-up keys that were resident.", 0},
	{"misses", "namespace_misses_total", "counter", "Looked-up keys that were not stored.", 0},
	{"stores", "namespace_stores_total", "counter", "Blocks stored (every shard committed).", 0},
	{"store_bytes", "namespace_stored_bytes_total", "counter", "Bytes of blocks stored.", 0},
	{"loads", "namespace_loads_total", "counter", "Shards leased for loading.", 0},
	{"load_bytes", "namespace_loaded_bytes_total", "counter", "Bytes of shards leased for loading.", 0},
	{"evictions", "namespace_evictions_total", "counter", "Blocks evicted.", 0},
	{"aborts", "namespace_aborts_total", "counter", "Reservations aborted or failed.", 0},
	{"deletes", "namespace_deletes_total", "counter", "Blocks deleted by clients.", 0},
	{"rejected", "namespace_rejected_total", "counter", "Requests refused for this namespace.", 0},
	{"opens", "namespace_opens_total", "counter", "Times clients opened the namespace.", 0},
	{"hints", "namespace_hints_total", "counter", "Keys named in the engine's lifecycle hints (kvt_retain, kvt_end).", 0},
	{"demotions", "namespace_demotions_total", "counter", "Blocks demoted by a hint (an end of request or session, or a low priority).", 0},
	{"demoted_evictions", "namespace_demoted_evictions_total", "counter", "Blocks evicted while demoted: room the hints handed back.", 0},
	{"lapsed", "namespace_lapsed_retentions_total", "counter", "Retentions whose duration ran out.", 0},
	{"spilled", "namespace_nvme_blocks", "gauge", "Blocks with a copy on NVMe.", 0},
	{"spills", "namespace_nvme_writes_total", "counter", "Blocks written back to NVMe.", 0},
	{"restores", "namespace_nvme_restores_total", "counter", "Blocks read back from NVMe into host memory.", 0},
	{"disk_hits", "namespace_nvme_hits_total", "counter", "Looked-up keys found on NVMe only.", 0},
	{"dirty_drops", "namespace_nvme_dirty_drops_total", "counter", "Blocks evicted before their write-back to NVMe had landed.", 0},
};
/* Geometry and identity: labels of kvtier_namespace_info. */
static const char *const ns_skip[] = {"id", "layer_first", "layer_end", "tp", "block_tokens", NULL};

static const struct metric class_metrics[] = {
	{"extents", "class_extents", "gauge", "Pool extents of this block size (slot class).", 0},
	{"empty_extents", "class_empty_extents", "gauge", "Extents of this block size with every slot free (never returned before a restart).", 0},
	{"extent_bytes", "class_extent_bytes", "gauge", "Bytes of the extents of this block size.", 0},
	{"slots", "class_slots", "gauge", "Slots in the extents of this block size.", 0},
	{"free_slots", "class_free_slots", "gauge", "Free slots in the extents of this block size.", 0},
	{"data_bytes", "class_data_bytes", "gauge", "Payload bytes of the blocks in the used slots.", 0},
	{"padding_bytes", "class_padding_bytes", "gauge", "Bytes of used slots beyond their blocks' payload (shards rounded up to 4 KiB).", 0},
	{"tail_bytes", "class_tail_bytes", "gauge", "Bytes at the ends of extents that no slot fits in.", 0},
	{"free_bytes", "class_free_bytes", "gauge", "Bytes of free slots (usable by this block size only).", 0},
	{"fill_ppm", "class_fill_ratio", "gauge", "Payload bytes over extent bytes for this block size (1 with no extents).", 1000000},
	{"can_grow", "class_can_grow", "gauge", "1 while one more extent of this block size fits the tenant's quota and the pool.", 0},
	{"starved", "class_starved_allocations_total", "counter", "Slots of this block size taken by eviction, or refused, while another block size held free slots.", 0},
	{"retained", "class_retained_blocks", "gauge", "Evictable blocks of this block size retained above the default priority by the engines' hints.", 0},
	{"demoted", "class_demoted_blocks", "gauge", "Evictable blocks of this block size demoted by the engines' hints: the first to go.", 0},
	{"policy_lookups", "class_policy_lookups_total", "counter", "Lookups the eviction policy's shadow tiers scored (lrfu-admit; 0 for other policies).", 0},
	{"policy_switches", "class_policy_switches_total", "counter", "Times the eviction policy changed its setting on what its shadows measured (lrfu-admit).", 0},
	{"policy_filter", "class_policy_admission_filter", "gauge", "The requests a new block needs before to be stored outside probation (lrfu-admit's admission filter: 0 off, 1 seen before, 2 strict).", 0},
	{"policy_weight", "class_policy_lrfu_weight", "gauge", "The eviction policy's weight of how often a block was requested against how recently (lrfu-admit; 0: LRU).", 0},
};
/* The block size is a label. */
static const char *const class_skip[] = {"slot_bytes", NULL};

static const struct metric remote_metrics[] = {
	{"up", "remote_up", "gauge", "1 while the remote tier's cluster answers; 0 while connecting or degraded (local tiers serve).", 0},
	{"capacity", "remote_capacity_bytes", "gauge", "[remote.NAME] capacity: what its tenants keep in the pool, all nodes together.", 0},
	{"used", "remote_used_bytes", "gauge", "Bytes of the tier's objects at the last trim pass of the node holding the trim lock (0 elsewhere).", 0},
	{"objects", "remote_objects", "gauge", "The tier's objects at that pass.", 0},
	{"writes", "remote_writes_total", "counter", "Blocks written back to the remote tier.", 0},
	{"write_bytes", "remote_written_bytes_total", "counter", "Block bytes written back to the remote tier.", 0},
	{"reads", "remote_reads_total", "counter", "Blocks fetched from the remote tier, verified and staged into host memory.", 0},
	{"read_bytes", "remote_read_bytes_total", "counter", "Block bytes fetched from the remote tier.", 0},
	{"reads_in_place", "remote_reads_in_place_total", "counter", "Of the blocks fetched, those read straight into their host slot (no copy).", 0},
	{"misses", "remote_misses_total", "counter", "Keys asked for that the pool did not have.", 0},
	{"rejected", "remote_rejected_total", "counter", "Objects that failed verification (header, length, checksum): misses.", 0},
	{"errors", "remote_errors_total", "counter", "Cluster operations that failed.", 0},
	{"timeouts", "remote_timeouts_total", "counter", "Cluster operations that ran past [remote.NAME] timeout_ms.", 0},
	{"degraded", "remote_degraded_total", "counter", "Times the tier went from up to degraded.", 0},
	{"skipped", "remote_writeback_skipped_total", "counter", "Write-backs not made: the tier degraded or its queue full.", 0},
	{"in_flight", "remote_in_flight", "gauge", "Cluster operations in flight.", 0},
	{"lookup_rounds", "remote_fetch_rounds_total", "counter", "Lookups that asked the remote tier for their leading run.", 0},
	{"read_usec", "remote_read_seconds_total", "counter", "Time from submission to completion of the fetches that hit.", 1000000},
	{"trim_passes", "remote_trim_passes_total", "counter", "Trim passes this node made holding the trim lock.", 0},
	{"trimmed", "remote_trimmed_total", "counter", "Objects this node removed to keep the tier within its capacity.", 0},
	{"trimmed_bytes", "remote_trimmed_bytes_total", "counter", "Bytes of those objects.", 0},
};
static const char *const remote_skip[] = {"queue_depth", NULL};

static const char *const no_skip[] = {NULL};

static const struct metric loop_metrics[] = {
	{"turns_cut", "turns_cut_total", "counter", "Turns ended early because another socket, timer or completion was ready.", 0},
	{"turns_cut_work_us", "turns_cut_work_seconds_total", "counter", "The work of the turns that were cut, in all: at least the quantum each.", 1000000},
};

struct kind {
	const char *kind;
	const char *prefix; /* of generic names: "tenant" */
	const struct metric *metrics;
	size_t n_metrics;
	const char *const *skip;
};

static const struct kind kinds[] = {
	{"daemon", "daemon", daemon_metrics, ARRAY_SIZE(daemon_metrics), daemon_skip},
	{"node", "node", node_metrics, ARRAY_SIZE(node_metrics), node_skip},
	{"tenant", "tenant", tenant_metrics, ARRAY_SIZE(tenant_metrics), tenant_skip},
	{"class", "class", class_metrics, ARRAY_SIZE(class_metrics), class_skip},
	{"namespace", "namespace", ns_metrics, ARRAY_SIZE(ns_metrics), ns_skip},
	{"remote", "remote", remote_metrics, ARRAY_SIZE(remote_metrics), remote_skip},
	{"loop", "loop", loop_metrics, ARRAY_SIZE(loop_metrics), no_skip},
	/* One record each, every field as sent. */
	{"recovery", "nvme_recovery", NULL, 0, no_skip},
	{"erasures", "nvme_erasures", NULL, 0, no_skip},
	{"keep", "keep", NULL, 0, no_skip},
};

/* The length of the UTF-8 sequence at s, or 0 when it is not one (overlong,
 * a surrogate, past U+10FFFF, cut short). */
static size_t utf8_len(const unsigned char *s)
{
	size_t n;
	uint32_t cp;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		n = 2, cp = s[0] & 0x1f;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		n = 3, cp = s[0] & 0x0f;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		n = 4, cp = s[0] & 0x07;
	else
		return 0;
	for (size_t i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10ffff ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return n;
}

/* The format allows any UTF-8 in a label value but needs \, " and newline
 * escaped; names come from clients, so invalid bytes become U+FFFD. */
static void put_label_value(FILE *f, const char *str)
{
	const unsigned char *s = (const unsigned char *)str;

	putc('"', f);
	while (*s) {
		size_t n = utf8_len(s);
		if (n == 0) {
			fputs("\xef\xbf\xbd", f);
			s++;
		} else if (*s == '\\' || *s == '"') {
			putc('\\', f);
			putc(*s++, f);
		} else if (*s == '\n') {
			fputs("\\n", f);
			s++;
		} else {
			fwrite(s, 1, n, f);
			s += n;
		}
	}
	putc('"', f);
}

/* HELP text escapes only \ and newline. */
static void put_help(FILE *f, const char *name, const char *help)
{
	fprintf(f, "# HELP kvtier_%s ", name);
	for (; *help; help++) {
		if (*help == '\\')
			fputs("\\\\", f);
		else if (*help == '\n')
			fputs("\\n", f);
		else
			putc(*help, f);
	}
	putc('\n', f);
}

static void put_labels(FILE *f, const struct rec *r)
{
	char id[24];

	if (rec_is(r, "node")) {
		const struct field *n = rec_field(r, "node");
		if (n && n->type == KVT_FIELD_I64)
			snprintf(id, sizeof(id), "%" PRId64, (int64_t)n->u);
		else
			snprintf(id, sizeof(id), "%" PRIu64, rec_u64(r, "node"));
		fputs("{node=", f);
		put_label_value(f, id);
		putc('}', f);
	} else if (rec_is(r, "tenant")) {
		fputs("{tenant=", f);
		put_label_value(f, rec_str(r, "name"));
		putc('}', f);
	} else if (rec_is(r, "class")) {
		snprintf(id, sizeof(id), "%" PRIu64, rec_u64(r, "slot_bytes"));
		fputs("{tenant=", f);
		put_label_value(f, rec_str(r, "tenant"));
		fputs(",slot_bytes=", f);
		put_label_value(f, id);
		putc('}', f);
	} else if (rec_is(r, "remote")) {
		fputs("{tier=", f);
		put_label_value(f, rec_str(r, "name"));
		fputs(",pool=", f);
		put_label_value(f, rec_str(r, "pool"));
		putc('}', f);
	} else if (rec_is(r, "namespace")) {
		snprintf(id, sizeof(id), "%" PRIu64, rec_u64(r, "id"));
		fputs("{tenant=", f);
		put_label_value(f, rec_str(r, "tenant"));
		fputs(",namespace=", f);
		put_label_value(f, id);
		fputs(",model=", f);
		put_label_value(f, rec_str(r, "model"));
		putc('}', f);
	}
}

static bool numeric(const struct field *fl)
{
	return fl && (fl->type == KVT_FIELD_U64 || fl->type == KVT_FIELD_I64);
}

static void put_value(FILE *f, const struct field *fl, unsigned divisor)
{
	if (divisor > 1)
		fprintf(f, " %.*f\n", divisor >= 1000000 ? 6 : 3, (double)fl->u / divisor);
	else if (fl->type == KVT_FIELD_I64)
		fprintf(f, " %" PRId64 "\n", (int64_t)fl->u);
	else
		fprintf(f, " %" PRIu64 "\n", fl->u);
}

/* One family: HELP and TYPE once, then a sample per record that has the
 * field.  Nothing at all when none has it (a non-admin view). */
static void put_family(FILE *f, const struct snapshot *s, const char *kind,
		       const struct metric *m)
{
	bool started = false;

	for (size_t i = 0; i < s->n; i++) {
		const struct rec *r = &s->recs[i];
		const struct field *fl;
		if (!rec_is(r, kind))
			continue;
		fl = rec_field(r, m->field);
		if (!numeric(fl))
			continue;
		if (!started) {
			put_help(f, m->name, m->help);
			fprintf(f, "# TYPE kvtier_%s %s\n", m->name, m->type);
			started = true;
		}
		fprintf(f, "kvtier_%s", m->name);
		put_labels(f, r);
		put_value(f, fl, m->divisor);
	}
}

static bool in_list(const char *const *list, const char *s)
{
	for (; *list; list++)
		if (strcmp(*list, s) == 0)
			return true;
	return false;
}

static bool known_field(const struct kind *k, const char *field)
{
	for (size_t i = 0; i < k->n_metrics; i++)
		if (strcmp(k->metrics[i].field, field) == 0)
			return true;
	return in_list(k->skip, field);
}

/* A name one of the tables already gives out: a new daemon field must not
 * make a second family of the same name. */
static bool taken_name(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(kinds); i++)
		for (size_t j = 0; j < kinds[i].n_metrics; j++)
			if (strcmp(kinds[i].metrics[j].name, name) == 0)
				return true;
	return false;
}

/* Every numeric field of kind no table describes, once each, in the
 * order the daemon sends them. */
static int put_generic(FILE *f, const struct snapshot *s, const struct kind *k)
{
	for (size_t i = 0; i < s->n; i++) {
		const struct rec *r = &s->recs[i];
		if (!rec_is(r, k->kind))
			continue;
		for (uint32_t j = 0; j < r->n_fields; j++) {
			const struct field *fl = &r->fields[j];
			char name[160], help[256];
			bool seen = false;

			if (!numeric(fl) || known_field(k, fl->name))
				continue;
			/* Handled at the first record that has it. */
			for (size_t e = 0; e < i && !seen; e++) {
				const struct rec *q = &s->recs[e];
				seen = rec_is(q, k->kind) && numeric(rec_field(q, fl->name));
			}
			for (uint32_t e = 0; e < j && !seen; e++)
				seen = strcmp(r->fields[e].name, fl->name) == 0;
			if (seen)
				continue;
			snprintf(name, sizeof(name), "%s_%s", k->prefix, fl->name);
			for (char *p = name; *p; p++)
				if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
				      (*p >= '0' && *p <= '9') || *p == '_'))
					*p = '_';
			if (taken_name(name))
				continue;
			snprintf(help, sizeof(help), "Field %s of kvtierd's %s records, as sent.",
				 fl->name, k->kind);
			put_family(f, s, k->kind,
				   &(struct metric){fl->name, name, "untyped", help, 0});
		}
	}
	return 0;
}

int kvt_prom_write(FILE *f, const struct snapshot *s)
{
	const struct rec *d = snapshot_find(s, "daemon");
	bool any_ns = false;

	if (d) {
		put_help(f, "info", "kvtierd's version and protocol; always 1.");
		fputs("# TYPE kvtier_info gauge\nkvtier_info{version=", f);
		put_label_value(f, rec_str(d, "version"));
		fprintf(f, ",protocol=\"%" PRIu64 "\"} 1\n", rec_u64(d, "protocol"));
	}
	for (size_t i = 0; i < ARRAY_SIZE(kinds); i++) {
		for (size_t j = 0; j < kinds[i].n_metrics; j++)
			put_family(f, s, kinds[i].kind, &kinds[i].metrics[j]);
		put_generic(f, s, &kinds[i]);
	}

	for (size_t i = 0; i < s->n; i++) {
		const struct rec *r = &s->recs[i];
		char v[24];
		if (!rec_is(r, "namespace"))
			continue;
		if (!any_ns) {
			put_help(f, "namespace_info", "A namespace's geometry; always 1.");
			fputs("# TYPE kvtier_namespace_info gauge\n", f);
			any_ns = true;
		}
		fprintf(f, "kvtier_namespace_info{tenant=");
		put_label_value(f, rec_str(r, "tenant"));
		snprintf(v, sizeof(v), "%" PRIu64, rec_u64(r, "id"));
		fputs(",namespace=", f);
		put_label_value(f, v);
		fputs(",model=", f);
		put_label_value(f, rec_str(r, "model"));
		fprintf(f, ",layers=\"%" PRIu64 "-%" PRIu64 "\",tp=\"%" PRIu64
			   "\",block_tokens=\"%" PRIu64 "\"} 1\n",
			rec_u64(r, "layer_first"), rec_u64(r, "layer_end"), rec_u64(r, "tp"),
			rec_u64(r, "block_tokens"));
	}
	return ferror(f) ? -EIO : 0;
}
