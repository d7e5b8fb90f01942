/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvtierctl metrics: the daemon's records in the Prometheus text exposition
 * format, rendered by proto/prom.c, which kvtierd's scrape endpoint shares.
 */
#include "ctl.h"
#include "prom.h"

static int metrics_run(struct ctx *x)
{
	return kvt_prom_write(stdout, &x->snap);
}

static void metrics_help(FILE *f)
{
	fputs("metrics:\n"
	      "  Prometheus text format 0.0.4: pool, NUMA node, tenant, block size and\n"
	      "  namespace gauges and counters (kvtier_pool_used_bytes,\n"
	      "  kvtier_node_used_bytes{node}, kvtier_tenant_used_bytes{tenant},\n"
	      "  kvtier_namespace_hits_total{tenant,namespace,model},\n"
	      "  kvtier_class_fill_ratio{tenant,slot_bytes},\n"
	      "  kvtier_tenant_fragmented{tenant}, ...).  For node_exporter's textfile\n"
	      "  collector, write a temporary file and rename it, so the collector never\n"
	      "  reads half a file:\n"
	      "    kvtierctl metrics > /var/lib/node_exporter/textfile/kvtier.prom.$$ &&\n"
	      "      mv /var/lib/node_exporter/textfile/kvtier.prom.$$ \\\n"
	      "         /var/lib/node_exporter/textfile/kvtier.prom\n"
	      "  (from a timer or cron, as root for the whole daemon).  When kvtierd is\n"
	      "  down the old file stays; alert on node_textfile_mtime_seconds.\n"
	      "  kvtierd serves the same series over HTTP itself when kvtierd.conf sets\n"
	      "  [metrics] listen (kvtierd.conf(5)).\n",
	      f);
}

const struct ctl_command ctl_cmd_metrics = {
	.name = "metrics",
	.args = "",
	.needs = CTL_NEEDS_STATS,
	.what = KVT_PROM_STATS,
	.no_json = "metrics prints Prometheus text, not JSON; drop --json",
	.summary = "Prometheus text exposition (for node_exporter's textfile collector)",
	.help = metrics_help,
	.run = metrics_run,
};
