/* SPDX-License-Identifier: Apache-2.0 */
/* kvtierctl clients: the connected clients. */
#include <inttypes.h>

#include "ctl.h"
#include "macro.h"

static int print_clients(FILE *f, const struct snapshot *s)
{
	static const struct column cols[] = {
		{"ID", true}, {"PID", true}, {"UID", true}, {"TENANT", false},
		{"NAME", false}, {"PROTOCOL", true}, {"REQUESTS", true},
		{"HANDLES", true}, {"QUEUED", true}, {"CONNECTED", true},
	};
	struct table t = TABLE_INIT(cols, ARRAY_SIZE(cols));
	char a[KVT_SIZE_LEN];
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
	r = table_print(&t, f);
	table_free(&t);
	return r;
}

static int clients_run(struct ctx *x)
{
	if (x->json) {
		struct json j = {.f = stdout};
		json_recs(&j, &x->snap, "client", false);
		return 0;
	}
	return print_clients(stdout, &x->snap);
}

const struct ctl_command ctl_cmd_clients = {
	.name = "clients",
	.args = "",
	.needs = CTL_NEEDS_STATS,
	.what = KVT_STATS_CLIENTS,
	.json = true,
	.summary = "connected clients: pid, uid, tenant, requests, handles",
	.run = clients_run,
};
