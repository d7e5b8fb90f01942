/* SPDX-License-Identifier: Apache-2.0 */
/* --check-config: the effective configuration in the file's own syntax. */
#include <stdio.h>
#include <string.h>
#include <syslog.h>

#include "codec.h"
#include "config.h"
#include "size.h"

void config_dump(const struct config *c, FILE *f)
{
	static const char *hp[] = {"auto", "hugetlb", "thp", "off"};
	static const char *lk[] = {"auto", "yes", "no"};
	const char *level = "info";
	char a[KVT_SIZE_LEN], b[KVT_SIZE_LEN], q[KVT_SIZE_LEN], o[KVT_SIZE_LEN];

	switch (c->log_level) {
	case LOG_ERR: level = "error"; break;
	case LOG_WARNING: level = "warning"; break;
	case LOG_NOTICE: level = "notice"; break;
	case LOG_DEBUG: level = "debug"; break;
	}
	fprintf(f, "[daemon]\nsocket = %s\nruntime_dir = %s\nquarantine_ms = %u\nlog_level = %s\n"
		"handshake_timeout_ms = %u\n",
		c->socket_path, c->runtime_dir, c->quarantine_ms, level, c->handshake_timeout_ms);
	for (uint32_t j = 0; j < c->n_admin_gids; j++)
		fprintf(f, "%s %u%s", j % 8 ? "" : "admin_groups =", c->admin_gids[j],
			j % 8 == 7 || j + 1 == c->n_admin_gids ? "\n" : "");
	fputc('\n', f);
	fprintf(f, "[pool]\ncapacity = %s\nextent_size = %s\nhugepages = %s\nlock = %s\nnuma = %s\n"
		"eviction = %s\nkeep = %s\n",
		kvt_size_format_exact(c->capacity, a, sizeof(a)), kvt_size_format_exact(c->extent_size, b, sizeof(b)),
		hp[c->hugepages], lk[c->lock], c->numa == NUMA_OFF ? "off" : "auto",
		evict_policy_to_string(c->eviction), c->keep ? "yes" : "no");
	fprintf(f, "fragmentation_alert = %u.%06u\n", c->fragmentation_alert_ppm / 1000000,
		c->fragmentation_alert_ppm % 1000000);
	if (c->sysfs_root)
		fprintf(f, "topology_root = %s\n", c->sysfs_root);
	fputc('\n', f);
	fprintf(f, "[tenants]\n# 0: a quarter of [pool] capacity; root and kvtierd's own uid get all of it\n"
		"default_quota = %s\n"
		"# 0: the same share of the spill files as of the pool\n"
		"default_nvme_quota = %s\nunknown = %s\n\n",
		kvt_size_format_exact(c->default_quota, q, sizeof(q)),
		kvt_size_format_exact(c->default_nvme_quota, o, sizeof(o)), c->refuse_unknown ? "refuse" : "allow");
	for (uint32_t i = 0; i < c->n_tenants; i++) {
		const struct tenant_conf *t = &c->tenants[i];
		fprintf(f, "[tenant.%s]\n", t->name);
		/* Eight ids a line: every line stays within inih's limit. */
		for (uint32_t j = 0; j < t->n_uids; j++)
			fprintf(f, "%s %u%s", j % 8 ? "" : "uids =", t->uids[j],
				j % 8 == 7 || j + 1 == t->n_uids ? "\n" : "");
		for (uint32_t j = 0; j < t->n_gids; j++)
			fprintf(f, "%s %u%s", j % 8 ? "" : "gids =", t->gids[j],
				j % 8 == 7 || j + 1 == t->n_gids ? "\n" : "");
		if (t->quota)
			fprintf(f, "quota = %s\n", kvt_size_format_exact(t->quota, q, sizeof(q)));
		if (t->nvme_quota)
			fprintf(f, "nvme_quota = %s\n", kvt_size_format_exact(t->nvme_quota, q, sizeof(q)));
		if (t->codecs) {
			fputs("codecs =", f);
			for (uint32_t k = 0; k < KVT_CODEC_COUNT; k++)
				if (t->codecs & (1u << k))
					fprintf(f, " %s", kvt_codec_name(k));
			fputc('\n', f);
		}
		if (t->socket && t->socket_dir)
			fprintf(f, "socket_dir = %.*s\n", (int)(strrchr(t->socket, '/') - t->socket),
				t->socket);
		else if (t->socket)
			fprintf(f, "socket = %s\n", t->socket);
		if (t->socket && t->socket_mode != 0660)
			fprintf(f, "socket_mode = %04o\n", t->socket_mode);
		fputc('\n', f);
	}
	static const char *eng[] = {"auto", "io_uring", "threads"};
	fprintf(f, "[nvme]\nengine = %s\nqueue_depth = %u\nwriteback_high = %u%%\nwriteback_low = %u%%\nrecovery = %s\n\n",
		eng[c->nvme_engine], c->nvme_queue_depth, c->writeback_high, c->writeback_low,
		c->nvme_recovery == NVME_RECOVERY_BACKGROUND ? "background" : "foreground");
	for (uint32_t i = 0; i < c->n_spills; i++)
		fprintf(f, "[spill.%s]\npath = %s\ncapacity = %s\n\n", c->spills[i].name,
			c->spills[i].path ? c->spills[i].path : "",
			kvt_size_format_exact(c->spills[i].capacity, q, sizeof(q)));
	config_remote_dump(c, f);
	if (c->metrics_listen)
		fprintf(f, "[metrics]\nlisten = %s\n\n", c->metrics_listen);
	else
		fputs("[metrics]\n# listen: off (no scrape endpoint)\n\n", f);
	fprintf(f, "[limits]\nconnections = %u\nconnections_per_uid = %u\n"
		"namespaces_per_tenant = %u\nkeys_per_request = %u\n"
		"handles_per_tenant = %u\noutput_bytes = %s\npartial_block_ms = %u\n",
		c->max_connections, c->max_connections_per_uid, c->max_namespaces, c->max_keys,
		c->max_handles, kvt_size_format_exact(c->max_output_bytes, o, sizeof(o)),
		c->partial_block_ms);
}
