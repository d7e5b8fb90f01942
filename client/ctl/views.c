/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The views status and top both print: the tenants, the NUMA nodes and the
 * NUMA summary line.
 */
#include <inttypes.h>

#include "ctl.h"
#include "macro.h"

int print_tenants(FILE *f, const struct snapshot *s)
{
	static const struct column cols[] = {
		{"TENANT", false}, {"QUOTA", true}, {"USED", true},
		{"BLOCKS", true}, {"NAMESPACES", true}, {"CLIENTS", true},
		{"HIT RATE", true},
	};
	struct table t = TABLE_INIT(cols, ARRAY_SIZE(cols));
	char a[KVT_SIZE_LEN], b[KVT_SIZE_LEN], c[32];
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
		table_add(&t, "%s", fmt_pct(c, sizeof(c), hit_rate(x)));
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
	struct table t = TABLE_INIT(cols, ARRAY_SIZE(cols));
	char a[KVT_SIZE_LEN], b[32];
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
