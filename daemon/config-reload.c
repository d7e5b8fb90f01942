/* SPDX-License-Identifier: Apache-2.0 */
/*
 * SIGHUP: which keys of a reloaded configuration take effect at once and
 * which wait for a restart.  Pure: the manager applies the result.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

static void note(char *buf, size_t size, const char *name)
{
	size_t len = strlen(buf);
	snprintf(buf + len, size - len, "%s%s", buf[0] ? ", " : "", name);
}

static bool str_eq(const char *a, const char *b)
{
	return (!a && !b) || (a && b && !strcmp(a, b));
}

static bool tenant_sockets_equal(const struct config *a, const struct config *b)
{
	for (uint32_t i = 0; i < a->n_tenants; i++) {
		const struct tenant_conf *t = config_tenant(b, a->tenants[i].name);
		if (a->tenants[i].socket && (!t || !str_eq(a->tenants[i].socket, t->socket)))
			return false;
	}
	for (uint32_t i = 0; i < b->n_tenants; i++) {
		const struct tenant_conf *t = config_tenant(a, b->tenants[i].name);
		if (b->tenants[i].socket && (!t || !str_eq(b->tenants[i].socket, t->socket)))
			return false;
	}
	return true;
}

/* A socket's mode is set when it is bound: a tenant that keeps its socket
 * keeps its mode until a restart. */
static bool tenant_socket_modes_equal(const struct config *a, const struct config *b)
{
	for (uint32_t i = 0; i < a->n_tenants; i++) {
		const struct tenant_conf *t = config_tenant(b, a->tenants[i].name);
		if (a->tenants[i].socket && t && t->socket &&
		    a->tenants[i].socket_mode != t->socket_mode)
			return false;
	}
	return true;
}

static bool spills_equal(const struct config *a, const struct config *b)
{
	if (a->n_spills != b->n_spills)
		return false;
	for (uint32_t i = 0; i < a->n_spills; i++)
		if (!str_eq(a->spills[i].path, b->spills[i].path) ||
		    a->spills[i].capacity != b->spills[i].capacity)
			return false;
	return true;
}

/* Every key of every [remote.NAME], as --check-config prints them. */
static bool remotes_equal(const struct config *a, const struct config *b)
{
	char *da = NULL, *db = NULL;
	size_t na = 0, nb = 0;
	FILE *fa = open_memstream(&da, &na), *fb = open_memstream(&db, &nb);
	bool eq = false;

	if (fa && fb) {
		config_remote_dump(a, fa);
		config_remote_dump(b, fb);
	}
	if (fa)
		fclose(fa);
	if (fb)
		fclose(fb);
	eq = fa && fb && na == nb && memcmp(da, db, na) == 0;
	free(da);
	free(db);
	return eq;
}

void config_reload(struct config *cur, struct config *fresh, char *changed, size_t changed_size,
		   char *restart, size_t restart_size)
{
	changed[0] = restart[0] = 0;
#define NOTE(buf, name) note(buf, buf##_size, name)
#define LIVE(field, name)                \
	if (cur->field != fresh->field) { \
		NOTE(changed, name);     \
		cur->field = fresh->field; \
	}
#define RESTART(same, name)         \
	if (!(same))                 \
		NOTE(restart, name)

	LIVE(capacity, "[pool] capacity");
	LIVE(fragmentation_alert_ppm, "[pool] fragmentation_alert");
	LIVE(quarantine_ms, "[daemon] quarantine_ms");
	LIVE(log_level, "[daemon] log_level");
	LIVE(handshake_timeout_ms, "[daemon] handshake_timeout_ms");
	if (cur->n_admin_gids != fresh->n_admin_gids ||
	    memcmp(cur->admin_gids, fresh->admin_gids, sizeof(cur->admin_gids[0]) * cur->n_admin_gids)) {
		NOTE(changed, "[daemon] admin_groups");
		cur->n_admin_gids = fresh->n_admin_gids;
		memcpy(cur->admin_gids, fresh->admin_gids, sizeof(cur->admin_gids));
	}
	LIVE(default_quota, "[tenants] default_quota");
	LIVE(default_nvme_quota, "[tenants] default_nvme_quota");
	LIVE(refuse_unknown, "[tenants] unknown");
	LIVE(max_connections, "[limits] connections");
	LIVE(max_connections_per_uid, "[limits] connections_per_uid");
	LIVE(max_namespaces, "[limits] namespaces_per_tenant");
	LIVE(max_keys, "[limits] keys_per_request");
	LIVE(max_handles, "[limits] handles_per_tenant");
	LIVE(max_output_bytes, "[limits] output_bytes");
	LIVE(partial_block_ms, "[limits] partial_block_ms");
	RESTART(str_eq(cur->socket_path, fresh->socket_path), "[daemon] socket");
	RESTART(str_eq(cur->runtime_dir, fresh->runtime_dir), "[daemon] runtime_dir");
	RESTART(cur->extent_size == fresh->extent_size, "[pool] extent_size");
	RESTART(cur->hugepages == fresh->hugepages, "[pool] hugepages");
	RESTART(cur->lock == fresh->lock, "[pool] lock");
	RESTART(cur->numa == fresh->numa, "[pool] numa");
	RESTART(cur->keep == fresh->keep, "[pool] keep");
	RESTART(cur->eviction == fresh->eviction, "[pool] eviction");
	RESTART(str_eq(cur->sysfs_root, fresh->sysfs_root), "[pool] topology_root");
	RESTART(tenant_sockets_equal(cur, fresh), "[tenant.*] socket");
	RESTART(tenant_socket_modes_equal(cur, fresh), "[tenant.*] socket_mode");
	RESTART(cur->nvme_engine == fresh->nvme_engine, "[nvme] engine");
	RESTART(cur->nvme_queue_depth == fresh->nvme_queue_depth, "[nvme] queue_depth");
	RESTART(cur->nvme_recovery == fresh->nvme_recovery, "[nvme] recovery");
	RESTART(spills_equal(cur, fresh), "[spill.*]");
	RESTART(remotes_equal(cur, fresh), "[remote.*]");
	RESTART(str_eq(cur->metrics_listen, fresh->metrics_listen), "[metrics] listen");
	LIVE(writeback_high, "[nvme] writeback_high");
	LIVE(writeback_low, "[nvme] writeback_low");
#undef LIVE
#undef RESTART
#undef NOTE

	/* Tenants (members, quotas) apply to connections from now on; their
	 * own sockets stay as they were bound. */
	{
		struct tenant_conf *old = cur->tenants;
		uint32_t n_old = cur->n_tenants;
		cur->tenants = fresh->tenants;
		cur->n_tenants = fresh->n_tenants;
		fresh->tenants = old;
		fresh->n_tenants = n_old;
	}
}
