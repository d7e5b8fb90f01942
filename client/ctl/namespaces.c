/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvtierctl namespaces: every namespace with all its counters.  Status
 * prints the same table with the main columns only.  BYTES is what the
 * namespace's blocks take in the pool, LOGICAL what they hold in the
 * engine's dtype: the two differ with a codec.
 */
#include <inttypes.h>

#include "ctl.h"
#include "macro.h"

/* The main columns, then every counter the daemon keeps. */
static const struct column ns_cols[] = {
	{"TENANT", false}, {"ID", true}, {"MODEL", false},
	{"LAYERS", true}, {"TP", true}, {"BLOCK TOKENS", true},
	{"BLOCK SIZE", true}, {"CODEC", false}, {"BLOCKS", true}, {"BYTES", true},
	{"LOGICAL", true}, {"HIT RATE", true}, {"STORES", true}, {"LOADS", true},
	{"EVICTIONS", true},
	/* all */
	{"RESERVED", true}, {"LOOKUPS", true},
	{"KEYS", true}, {"HITS", true}, {"MISSES", true},
	{"STORED", true}, {"LOADED", true}, {"ABORTS", true},
	{"DELETES", true}, {"REJECTED", true}, {"OPENS", true},
	/* the engine's hints */
	{"HINTS", true}, {"DEMOTIONS", true}, {"DEMOTED EVICTED", true},
	{"LAPSED", true},
};
#define NS_MAIN_COLS 15

static void add_main(struct table *t, const struct rec *x)
{
	char a[KVT_SIZE_LEN];

	table_add(t, "%s", rec_str(x, "tenant"));
	table_add(t, "%" PRIu64, rec_u64(x, "id"));
	table_add(t, "%s", rec_str(x, "model"));
	table_add(t, "%" PRIu64 "-%" PRIu64, rec_u64(x, "layer_first"), rec_u64(x, "layer_end"));
	table_add(t, "%" PRIu64, rec_u64(x, "tp"));
	table_add(t, "%" PRIu64, rec_u64(x, "block_tokens"));
	table_add(t, "%s", kvt_size_format(rec_u64(x, "block_bytes"), a, sizeof(a)));
	table_add(t, "%s", rec_str(x, "codec"));
	table_add(t, "%" PRIu64, rec_u64(x, "blocks"));
	table_add(t, "%s", kvt_size_format(rec_u64(x, "bytes"), a, sizeof(a)));
	/* What the blocks hold in the engine's own dtype. */
	table_add(t, "%s", kvt_size_format(rec_u64(x, "logical_bytes"), a, sizeof(a)));
	table_add(t, "%s", fmt_pct(a, sizeof(a), hit_rate(x)));
	table_add(t, "%" PRIu64, rec_u64(x, "stores"));
	table_add(t, "%" PRIu64, rec_u64(x, "loads"));
	table_add(t, "%" PRIu64, rec_u64(x, "evictions"));
}

static void add_counters(struct table *t, const struct rec *x)
{
	char a[KVT_SIZE_LEN];

	table_add(t, "%" PRIu64, rec_u64(x, "reserved"));
	table_add(t, "%" PRIu64, rec_u64(x, "lookups"));
	table_add(t, "%" PRIu64, rec_u64(x, "lookup_keys"));
	table_add(t, "%" PRIu64, rec_u64(x, "hits"));
	table_add(t, "%" PRIu64, rec_u64(x, "misses"));
	table_add(t, "%s", kvt_size_format(rec_u64(x, "store_bytes"), a, sizeof(a)));
	table_add(t, "%s", kvt_size_format(rec_u64(x, "load_bytes"), a, sizeof(a)));
	table_add(t, "%" PRIu64, rec_u64(x, "aborts"));
	table_add(t, "%" PRIu64, rec_u64(x, "deletes"));
	table_add(t, "%" PRIu64, rec_u64(x, "rejected"));
	table_add(t, "%" PRIu64, rec_u64(x, "opens"));
	table_add(t, "%" PRIu64, rec_u64(x, "hints"));
	table_add(t, "%" PRIu64, rec_u64(x, "demotions"));
	table_add(t, "%" PRIu64, rec_u64(x, "demoted_evictions"));
	table_add(t, "%" PRIu64, rec_u64(x, "lapsed"));
}

int print_namespaces(FILE *f, const struct snapshot *s, bool all)
{
	struct table t = TABLE_INIT(ns_cols, all ? ARRAY_SIZE(ns_cols) : NS_MAIN_COLS);
	int r;

	for (size_t i = 0; i < s->n; i++) {
		if (!rec_is(&s->recs[i], "namespace"))
			continue;
		add_main(&t, &s->recs[i]);
		if (all)
			add_counters(&t, &s->recs[i]);
	}
	r = table_print(&t, f);
	table_free(&t);
	return r;
}

static int namespaces_run(struct ctx *x)
{
	if (x->json) {
		struct json j = {.f = stdout};
		json_recs(&j, &x->snap, "namespace", true);
		return 0;
	}
	return print_namespaces(stdout, &x->snap, true);
}

const struct ctl_command ctl_cmd_namespaces = {
	.name = "namespaces",
	.args = "",
	.needs = CTL_NEEDS_STATS,
	.what = KVT_STATS_NAMESPACES,
	.json = true,
	.summary = "every namespace with all its counters",
	.run = namespaces_run,
};
