/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvtierd.conf: one table of {section, key, parser, field}.  Defaults are set
 * before parsing, so a file only names what it changes.
 */
#include <errno.h>
#include <ini.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "config.h"
#include "kvt-config.h"
#include "config-values.h"
#include "log.h"
#include "size.h"

static struct tenant_conf *tenant_conf_get(struct config *c, const char *name)
{
	for (uint32_t i = 0; i < c->n_tenants; i++)
		if (!strcmp(c->tenants[i].name, name))
			return &c->tenants[i];
	if (c->n_tenants >= CONFIG_MAX_TENANTS)
		return NULL;
	struct tenant_conf *t = realloc(c->tenants, sizeof(*t) * (c->n_tenants + 1));
	if (!t)
		return NULL;
	c->tenants = t;
	t = &c->tenants[c->n_tenants++];
	memset(t, 0, sizeof(*t));
	snprintf(t->name, sizeof(t->name), "%s", name);
	t->socket_mode = 0660;
	return t;
}

static const struct conf_item {
	const char *section;
	const char *key;
	conf_parser parse;
	size_t offset;
} conf_table[] = {
	{"daemon", "socket", conf_path, offsetof(struct config, socket_path)},
	{"daemon", "runtime_dir", conf_path, offsetof(struct config, runtime_dir)},
	{"daemon", "quarantine_ms", conf_u32, offsetof(struct config, quarantine_ms)},
	{"daemon", "log_level", conf_log_level, offsetof(struct config, log_level)},
	{"daemon", "handshake_timeout_ms", conf_u32, offsetof(struct config, handshake_timeout_ms)},
	{"pool", "capacity", conf_size, offsetof(struct config, capacity)},
	{"pool", "extent_size", conf_size, offsetof(struct config, extent_size)},
	{"pool", "hugepages", conf_hugepages, offsetof(struct config, hugepages)},
	{"pool", "lock", conf_lock, offsetof(struct config, lock)},
	{"pool", "numa", conf_numa, offsetof(struct config, numa)},
	{"pool", "keep", conf_bool, offsetof(struct config, keep)},
	{"pool", "topology_root", conf_path, offsetof(struct config, sysfs_root)},
	{"pool", "eviction", conf_eviction, offsetof(struct config, eviction)},
	{"pool", "fragmentation_alert", conf_ratio, offsetof(struct config, fragmentation_alert_ppm)},
	{"tenants", "default_quota", conf_size, offsetof(struct config, default_quota)},
	{"tenants", "default_nvme_quota", conf_size, offsetof(struct config, default_nvme_quota)},
	{"tenants", "unknown", conf_unknown, offsetof(struct config, refuse_unknown)},
	{"nvme", "engine", conf_engine, offsetof(struct config, nvme_engine)},
	{"nvme", "queue_depth", conf_u32, offsetof(struct config, nvme_queue_depth)},
	{"nvme", "writeback_high", conf_percent, offsetof(struct config, writeback_high)},
	{"nvme", "writeback_low", conf_percent, offsetof(struct config, writeback_low)},
	{"nvme", "recovery", conf_recovery, offsetof(struct config, nvme_recovery)},
	{"metrics", "listen", conf_listen, offsetof(struct config, metrics_listen)},
	{"limits", "connections", conf_u32, offsetof(struct config, max_connections)},
	{"limits", "connections_per_uid", conf_u32, offsetof(struct config, max_connections_per_uid)},
	{"limits", "namespaces_per_tenant", conf_u32, offsetof(struct config, max_namespaces)},
	{"limits", "keys_per_request", conf_u32, offsetof(struct config, max_keys)},
	{"limits", "handles_per_tenant", conf_u32, offsetof(struct config, max_handles)},
	{"limits", "output_bytes", conf_size, offsetof(struct config, max_output_bytes)},
	{"limits", "partial_block_ms", conf_u32, offsetof(struct config, partial_block_ms)},
};

int config_defaults(struct config *c)
{
	const char *base = "/run/kvtierd";
	char buf[256];

	memset(c, 0, sizeof(*c));
	/* Under systemd, RuntimeDirectory= says where (first of a list). */
	const char *rd = getenv("RUNTIME_DIRECTORY");
	if (rd && rd[0] == '/' && strcspn(rd, ":") < 80) {
		snprintf(buf, sizeof(buf), "%.*s", (int)strcspn(rd, ":"), rd);
		base = buf;
	} else if (geteuid() != 0) {
		const char *xdg = getenv("XDG_RUNTIME_DIR");
		if (xdg && xdg[0] == '/' && strlen(xdg) < 80) {
			snprintf(buf, sizeof(buf), "%s/kvtierd", xdg);
			base = buf;
		} else {
			snprintf(buf, sizeof(buf), "/tmp/kvtierd-%u",
				 (unsigned)geteuid());
			base = buf;
		}
	}
	c->runtime_dir = strdup(base);
	if (asprintf(&c->socket_path, "%s/kvtierd.sock", base) < 0)
		c->socket_path = NULL;
	if (!c->runtime_dir || !c->socket_path)
		return -ENOMEM;
	c->quarantine_ms = 500;
	c->handshake_timeout_ms = 5000;
	c->log_level = LOG_INFO;
	c->capacity = 256ULL << 20;
	c->extent_size = 64ULL << 20;
	c->hugepages = HUGEPAGES_AUTO;
	c->eviction = EVICT_LRFU_ADMIT; /* chosen on the traces of docs/workload.md */
	c->lock = LOCK_AUTO;
	c->keep = true;
	c->fragmentation_alert_ppm = 300000; /* 0.3: where operators see large prefills fail */
	c->default_quota = 0; /* a quarter of the capacity */
	c->refuse_unknown = false;
	c->max_connections = 1024;
	c->max_connections_per_uid = 256;
	c->max_namespaces = 64;
	c->max_keys = 4096;
	c->max_handles = 65536;
	c->max_output_bytes = 8ULL << 20;
	c->partial_block_ms = 60000;
	c->nvme_engine = NVME_ENGINE_AUTO;
	c->nvme_queue_depth = 64;
	c->writeback_high = 80;
	c->writeback_low = 60;
	return 0;
}

struct parse_ctx {
	struct config *c;
	const char *path;
	FILE *f;
	int line;     /* line of the chunk read last */
	bool line_done;
	bool long_line; /* a line did not fit inih's buffer */
	bool socket_set, runtime_dir_set;
	int error;
};

/* Debian's inih does not pass line numbers to handlers: count them here. */
static char *read_line(char *str, int num, void *stream)
{
	struct parse_ctx *ctx = stream;
	char *r = fgets(str, num, ctx->f);

	if (r) {
		if (ctx->line_done)
			ctx->line++;
		size_t n = strlen(r);
		ctx->line_done = n > 0 && r[n - 1] == '\n';
		/* inih would read the rest of an over-long line as a line of its
		 * own (a continuation, if it starts with a blank): refuse it
		 * rather than let a list lose members silently. */
		if (!ctx->line_done && n + 1 >= (size_t)num && !feof(ctx->f)) {
			log_error("%s:%d: line longer than %d bytes; split it (uids and gids may be given on several lines)",
				  ctx->path, ctx->line, num - 1);
			ctx->error = -EINVAL;
			ctx->long_line = true;
			char rest[256];
			while (fgets(rest, sizeof(rest), ctx->f) && !strchr(rest, '\n'))
				;
			ctx->line_done = true;
		}
	}
	return r;
}

static int tenant_item(struct parse_ctx *ctx, const char *name, const char *key,
		       const char *value, int line)
{
	const char *expect = "";
	struct tenant_conf *t;
	int r;

	if (!config_name_ok(name)) {
		log_error("%s:%d: tenant name '%s' must be 1-%d letters, digits, '-' or '_'",
			  ctx->path, line, name, CONFIG_MAX_TENANT_NAME);
		ctx->error = -EINVAL;
		return 1;
	}
	t = tenant_conf_get(ctx->c, name);
	if (!t) {
		log_error("%s:%d: more than %d tenants", ctx->path, line, CONFIG_MAX_TENANTS);
		ctx->error = -E2BIG;
		return 1;
	}
	if (!strcmp(key, "uids"))
		r = conf_ids(value, false, t->uids, &t->n_uids, &expect);
	else if (!strcmp(key, "gids"))
		r = conf_ids(value, true, t->gids, &t->n_gids, &expect);
	else if (!strcmp(key, "quota"))
		r = conf_size(value, &t->quota, &expect);
	else if (!strcmp(key, "nvme_quota"))
		r = conf_size(value, &t->nvme_quota, &expect);
	else if (!strcmp(key, "codecs"))
		r = conf_codecs(value, &t->codecs, &expect);
	else if (!strcmp(key, "socket") || !strcmp(key, "socket_dir")) {
		bool dir = !strcmp(key, "socket_dir");
		if (t->socket && t->socket_dir != dir) {
			log_error("%s:%d: [tenant.%s] has both socket and socket_dir; give one",
				  ctx->path, line, name);
			ctx->error = -EINVAL;
			return 1;
		}
		r = conf_path(value, &t->socket, &expect);
		if (r >= 0 && dir) {
			/* DIR/kvtierd.sock, within sun_path. */
			char *s = NULL;
			int n = (int)strlen(value);
			while (n > 1 && value[n - 1] == '/')
				n--;
			expect = "an absolute path of at most 94 bytes";
			if (n > 94 || n == 1)
				r = -EINVAL;
			else if (asprintf(&s, "%.*s/%s", n, value, CONFIG_TENANT_SOCKET_NAME) < 0)
				r = -ENOMEM;
			free(t->socket);
			t->socket = r < 0 ? NULL : s;
		}
		t->socket_dir = dir;
	} else if (!strcmp(key, "socket_mode")) {
		expect = "0660 or 0666";
		r = -EINVAL;
		if (!strcmp(value, "0660") || !strcmp(value, "0666")) {
			t->socket_mode = value[3] == '6' ? 0666 : 0660;
			r = 0;
		}
	} else {
		log_error("%s:%d: unknown key '%s' in [tenant.%s] (known: uids, gids, quota, nvme_quota, codecs, socket, socket_dir, socket_mode)",
			  ctx->path, line, key, name);
		ctx->error = -EINVAL;
		return 1;
	}
	if (r < 0) {
		log_error("%s:%d: [tenant.%s] %s = '%s' is invalid: expected %s%s", ctx->path,
			  line, name, key, value, expect,
			  r == -ENOENT ? " (no such user or group)" : "");
		ctx->error = -EINVAL;
	}
	return 1;
}

static int spill_item(struct parse_ctx *ctx, const char *name, const char *key,
		      const char *value, int line)
{
	struct config *c = ctx->c;
	const char *expect = "";
	struct spill_conf *sc = NULL;
	int r;

	if (!config_name_ok(name)) {
		log_error("%s:%d: spill file name '%s' must be 1-%d letters, digits, '-' or '_'",
			  ctx->path, line, name, CONFIG_MAX_TENANT_NAME);
		ctx->error = -EINVAL;
		return 1;
	}
	for (uint32_t i = 0; i < c->n_spills; i++)
		if (!strcmp(c->spills[i].name, name))
			sc = &c->spills[i];
	if (!sc) {
		if (c->n_spills >= CONFIG_MAX_SPILL_FILES ||
		    !(sc = realloc(c->spills, sizeof(*sc) * (c->n_spills + 1)))) {
			log_error("%s:%d: more than %d spill files", ctx->path, line,
				  CONFIG_MAX_SPILL_FILES);
			ctx->error = -E2BIG;
			return 1;
		}
		c->spills = sc;
		sc = &c->spills[c->n_spills++];
		memset(sc, 0, sizeof(*sc));
		snprintf(sc->name, sizeof(sc->name), "%s", name);
	}
	if (!strcmp(key, "path"))
		r = conf_path(value, &sc->path, &expect);
	else if (!strcmp(key, "capacity"))
		r = conf_size(value, &sc->capacity, &expect);
	else {
		log_error("%s:%d: unknown key '%s' in [spill.%s] (known: path, capacity)",
			  ctx->path, line, key, name);
		ctx->error = -EINVAL;
		return 1;
	}
	if (r < 0) {
		log_error("%s:%d: [spill.%s] %s = '%s' is invalid: expected %s", ctx->path, line,
			  name, key, value, expect);
		ctx->error = -EINVAL;
	}
	return 1;
}

static int on_item(void *user, const char *section, const char *key,
		   const char *value)
{
	struct parse_ctx *ctx = user;
	bool known_section = false;
	int line = ctx->line;

	if (!strncmp(section, "tenant.", 7))
		return tenant_item(ctx, section + 7, key, value, line);
	if (!strncmp(section, "spill.", 6))
		return spill_item(ctx, section + 6, key, value, line);
	if (!strncmp(section, "remote.", 7)) {
		int r = config_remote_item(ctx->c, ctx->path, line, section + 7, key, value);
		if (r == -ENOMEM)
			return 0;
		if (r < 0)
			ctx->error = r;
		return 1;
	}
	if (!strcmp(section, "daemon") && !strcmp(key, "admin_groups")) {
		const char *expect = "";
		int r = conf_ids(value, true, ctx->c->admin_gids, &ctx->c->n_admin_gids, &expect);
		if (r < 0) {
			log_error("%s:%d: [daemon] admin_groups = '%s' is invalid: expected %s%s",
				  ctx->path, line, value, expect,
				  r == -ENOENT ? " (no such group)" : "");
			ctx->error = -EINVAL;
		}
		return 1;
	}

	for (size_t i = 0; i < sizeof(conf_table) / sizeof(conf_table[0]); i++) {
		const struct conf_item *it = &conf_table[i];
		if (strcmp(it->section, section))
			continue;
		known_section = true;
		if (strcmp(it->key, key))
			continue;
		const char *expect = "";
		int r = it->parse(value, (char *)ctx->c + it->offset, &expect);
		if (it->offset == offsetof(struct config, socket_path))
			ctx->socket_set = true;
		if (it->offset == offsetof(struct config, runtime_dir))
			ctx->runtime_dir_set = true;
		if (r == -ENOMEM)
			return 0;
		if (r < 0) {
			log_error("%s:%d: [%s] %s = '%s' is invalid: expected %s",
				  ctx->path, line, section, key, value, expect);
			ctx->error = -EINVAL;
		}
		return 1;
	}
	if (!known_section)
		log_error("%s:%d: unknown section [%s] (known: daemon, pool, tenants, tenant.NAME, nvme, spill.NAME, remote.NAME, metrics, limits)",
			  ctx->path, line, section);
	else
		log_error("%s:%d: unknown key '%s' in [%s]; see kvtierd.conf(5)",
			  ctx->path, line, key, section);
	ctx->error = -EINVAL;
	return 1;
}

/* The length of a socket path's directory, without the slashes that end
 * it (runtime_dir = /run/t/ makes /run/t//kvtierd.sock). */
static size_t dir_len(const char *p)
{
	size_t n = (size_t)(strrchr(p, '/') - p);

	while (n > 1 && p[n - 1] == '/')
		n--;
	return n;
}

/* Whether two socket paths are in the same directory. */
static bool same_dir(const char *a, const char *b)
{
	size_t n = dir_len(a);

	return n == dir_len(b) && !strncmp(a, b, n);
}

/* A tenant's socket directory is mounted into its pods: whoever is there
 * may connect to every socket in it, and root through the main socket is
 * an administrator.  So a socket_dir holds its tenant's socket alone; a
 * socket = beside another is only warned about (it was always allowed, and
 * is safe where the file itself is what containers get). */
static int validate_socket_dir(const struct config *c, const struct tenant_conf *a,
			       const char *path)
{
	const char *other = NULL;

	if (c->socket_path && same_dir(a->socket, c->socket_path))
		other = "the daemon's main socket";
	for (uint32_t j = 0; !other && j < c->n_tenants; j++) {
		const struct tenant_conf *b = &c->tenants[j];
		if (b != a && b->socket && same_dir(a->socket, b->socket))
			other = "another tenant's socket";
	}
	if (!other)
		return 0;
	if (a->socket_dir) {
		log_error("%s: [tenant.%s] socket_dir also holds %s: give each tenant a directory of its own, which its pods mount",
			  path, a->name, other);
		return -EINVAL;
	}
	log_warning("%s: [tenant.%s] socket %s is beside %s: a container that mounts its directory may connect to both; give the tenant socket_dir = a directory of its own",
		    path, a->name, a->socket, other);
	return 0;
}

/* Tenants: someone can belong to each, and no uid or socket is in two. */
static int validate_tenants(const struct config *c, const char *path)
{
	int r = 0;

	for (uint32_t i = 0; i < c->n_tenants; i++) {
		const struct tenant_conf *a = &c->tenants[i];
		if (!a->n_uids && !a->n_gids && !a->socket) {
			log_error("%s: [tenant.%s] names no uids, gids or socket: nobody can belong to it",
				  path, a->name);
			r = -EINVAL;
		}
		for (uint32_t j = 0; j < i; j++) {
			const struct tenant_conf *b = &c->tenants[j];
			for (uint32_t x = 0; x < a->n_uids; x++)
				for (uint32_t y = 0; y < b->n_uids; y++)
					if (a->uids[x] == b->uids[y]) {
						log_error("%s: uid %u is in both [tenant.%s] and [tenant.%s]",
							  path, a->uids[x], b->name, a->name);
						r = -EINVAL;
					}
			if (a->socket && b->socket && !strcmp(a->socket, b->socket)) {
				log_error("%s: [tenant.%s] and [tenant.%s] share socket %s", path,
					  b->name, a->name, a->socket);
				r = -EINVAL;
			}
		}
		if (a->socket && c->socket_path && !strcmp(a->socket, c->socket_path)) {
			log_error("%s: [tenant.%s] socket is the daemon's main socket", path, a->name);
			r = -EINVAL;
		}
		if (a->socket && validate_socket_dir(c, a, path) < 0)
			r = -EINVAL;
		if (a->socket_mode == 0666 && !a->socket_dir) {
			log_error("%s: [tenant.%s] socket_mode = 0666 needs socket_dir: only a directory of the tenant's own, mounted into its pods, may open its socket to every uid",
				  path, a->name);
			r = -EINVAL;
		}
	}
	return r;
}

/* Spill files: each complete, no file named twice. */
static int validate_spills(const struct config *c, const char *path)
{
	int r = 0;

	for (uint32_t i = 0; i < c->n_spills; i++) {
		const struct spill_conf *a = &c->spills[i];
		if (!a->path || !a->capacity) {
			log_error("%s: [spill.%s] needs both path and capacity", path, a->name);
			r = -EINVAL;
		}
		for (uint32_t j = 0; j < i; j++)
			if (a->path && c->spills[j].path && !strcmp(a->path, c->spills[j].path)) {
				log_error("%s: [spill.%s] and [spill.%s] name the same file %s", path,
					  c->spills[j].name, a->name, a->path);
				r = -EINVAL;
			}
	}
	return r;
}

static int config_validate(const struct config *c, const char *path)
{
	int r = 0;

	if (c->extent_size < CONFIG_EXTENT_SIZE_MIN || c->extent_size > CONFIG_EXTENT_SIZE_MAX) {
		log_error("%s: [pool] extent_size must be between 2M and 1G (one io_uring buffer)", path);
		r = -EINVAL;
	}
	if (c->capacity < c->extent_size) {
		log_error("%s: [pool] capacity must be at least extent_size", path);
		r = -EINVAL;
	}
	if (c->handshake_timeout_ms < 100 || c->handshake_timeout_ms > 600000) {
		log_error("%s: [daemon] handshake_timeout_ms must be 100..600000", path);
		r = -EINVAL;
	}
	if (c->max_keys == 0 || c->max_keys > 8192) {
		log_error("%s: [limits] keys_per_request must be 1..8192", path);
		r = -EINVAL;
	}
	if (c->max_connections == 0 || c->max_connections_per_uid == 0 ||
	    c->max_namespaces == 0 || c->max_handles == 0) {
		log_error("%s: [limits] values must be at least 1", path);
		r = -EINVAL;
	}
	if (c->partial_block_ms < 100 || c->partial_block_ms > 3600000) {
		log_error("%s: [limits] partial_block_ms must be 100..3600000", path);
		r = -EINVAL;
	}
	if (c->metrics_listen && !KVT_HAVE_MICROHTTPD) {
		log_error("%s: [metrics] listen: this kvtierd was built without libmicrohttpd (meson -Dmetrics=enabled), so it has no scrape endpoint; use kvtierctl metrics", path);
		r = -EINVAL;
	}
	if (validate_tenants(c, path) < 0)
		r = -EINVAL;
	if (validate_spills(c, path) < 0)
		r = -EINVAL;
	if (config_remote_validate(c, path) < 0)
		r = -EINVAL;
	if (c->writeback_low > c->writeback_high) {
		log_error("%s: [nvme] writeback_low (%u%%) must not exceed writeback_high (%u%%)",
			  path, c->writeback_low, c->writeback_high);
		r = -EINVAL;
	}
	if (c->nvme_queue_depth == 0 || c->nvme_queue_depth > 4096) {
		log_error("%s: [nvme] queue_depth must be 1..4096", path);
		r = -EINVAL;
	}
	/* One full reply at least; at most 1G, so the queue a connection may
	 * grow to (twice the limit) stays a size, not a wrapped number. */
	if (c->max_output_bytes < CONFIG_OUTPUT_BYTES_MIN ||
	    c->max_output_bytes > CONFIG_OUTPUT_BYTES_MAX) {
		log_error("%s: [limits] output_bytes must be 2M..1G", path);
		r = -EINVAL;
	}
	return r;
}

int config_load(struct config *c, const char *path)
{
	struct parse_ctx ctx = {
		.c = c, .path = path ? path : "(defaults)", .line_done = true,
	};

	if (path) {
		FILE *f = fopen(path, "re");
		if (!f)
			return log_error_errno(-errno, "Failed to open config '%s': %m", path);
		ctx.f = f;
		int line = ini_parse_stream(read_line, &ctx, on_item, &ctx);
		fclose(f);
		if (line > 0) {
			/* inih counts lines itself; after an over-long line its
			 * count is off, and that line was reported already. */
			if (!ctx.long_line)
				log_error("%s:%d: syntax error (expected [section] or key = value)",
					  path, line);
			return -EINVAL;
		}
		if (line < 0)
			return log_error_errno(-ENOMEM, "Failed to parse '%s': %m", path);
		if (ctx.error)
			return ctx.error;
	}
	/* The socket lives in the runtime directory unless named itself. */
	if (ctx.runtime_dir_set && !ctx.socket_set) {
		char *s;
		if (asprintf(&s, "%s/kvtierd.sock", c->runtime_dir) < 0)
			return -ENOMEM;
		free(c->socket_path);
		c->socket_path = s;
	}
	return config_validate(c, ctx.path);
}

void config_free(struct config *c)
{
	free(c->socket_path);
	free(c->runtime_dir);
	free(c->sysfs_root);
	free(c->metrics_listen);
	c->metrics_listen = NULL;
	for (uint32_t i = 0; i < c->n_tenants; i++)
		free(c->tenants[i].socket);
	free(c->tenants);
	for (uint32_t i = 0; i < c->n_spills; i++)
		free(c->spills[i].path);
	free(c->spills);
	c->spills = NULL;
	c->n_spills = 0;
	config_remote_free(c);
	c->tenants = NULL;
	c->n_tenants = 0;
	c->socket_path = c->runtime_dir = c->sysfs_root = NULL;
}
