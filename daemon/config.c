/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvtierd.conf: one table of {section, key, parser, field}.  Defaults are set
 * before parsing, so a file only names what it changes.
 */
#include <errno.h>
#include <grp.h>
#include <ini.h>
#include <pwd.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "config.h"
#include "log.h"
#include "size.h"

typedef int (*conf_parser)(const char *value, void *field, const char **ret_expect);

static int conf_size(const char *v, void *field, const char **expect)
{
	*expect = "a size such as 4096, 512M or 64G";
	return kvt_size_parse(v, field);
}

static int conf_u32(const char *v, void *field, const char **expect)
{
	char *end;
	*expect = "a whole number up to 4294967295";
	if (*v < '0' || *v > '9')
		return -EINVAL;
	errno = 0;
	unsigned long long x = strtoull(v, &end, 10);
	if (errno || end == v || *end || x > UINT32_MAX)
		return -EINVAL;
	*(uint32_t *)field = (uint32_t)x;
	return 0;
}

static int conf_string(const char *v, void *field, const char **expect)
{
	*expect = "a non-empty string";
	if (!*v)
		return -EINVAL;
	char *s = strdup(v);
	if (!s)
		return -ENOMEM;
	free(*(char **)field);
	*(char **)field = s;
	return 0;
}

static int conf_path(const char *v, void *field, const char **expect)
{
	*expect = "an absolute path";
	if (v[0] != '/' || strlen(v) >= 108)
		return -EINVAL;
	return conf_string(v, field, expect);
}

static int conf_hugepages(const char *v, void *field, const char **expect)
{
	static const char *names[] = {"auto", "hugetlb", "thp", "off"};
	*expect = "auto, hugetlb, thp or off";
	for (unsigned i = 0; i < 4; i++)
		if (!strcmp(v, names[i])) {
			*(enum hugepage_mode *)field = (enum hugepage_mode)i;
			return 0;
		}
	return -EINVAL;
}

static int conf_lock(const char *v, void *field, const char **expect)
{
	static const char *names[] = {"auto", "yes", "no"};
	*expect = "auto, yes or no";
	for (unsigned i = 0; i < 3; i++)
		if (!strcmp(v, names[i])) {
			*(enum lock_mode *)field = (enum lock_mode)i;
			return 0;
		}
	return -EINVAL;
}

static int conf_numa(const char *v, void *field, const char **expect)
{
	*expect = "auto or off";
	if (!strcmp(v, "auto"))
		*(enum numa_mode *)field = NUMA_AUTO;
	else if (!strcmp(v, "off"))
		*(enum numa_mode *)field = NUMA_OFF;
	else
		return -EINVAL;
	return 0;
}

static int conf_eviction(const char *v, void *field, const char **expect)
{
	int p = evict_policy_from_string(v);
	*expect = "arc, lru, s3fifo or sieve";
	if (p < 0)
		return p;
	*(enum evict_policy *)field = (enum evict_policy)p;
	return 0;
}

static int conf_engine(const char *v, void *field, const char **expect)
{
	static const char *names[] = {"auto", "io_uring", "threads"};
	*expect = "auto, io_uring or threads";
	for (unsigned i = 0; i < 3; i++)
		if (!strcmp(v, names[i])) {
			*(enum nvme_engine *)field = (enum nvme_engine)i;
			return 0;
		}
	return -EINVAL;
}

static int conf_percent(const char *v, void *field, const char **expect)
{
	char *end;
	*expect = "a percentage from 0% to 100%";
	if (*v < '0' || *v > '9')
		return -EINVAL;
	unsigned long x = strtoul(v, &end, 10);
	if (*end == '%')
		end++;
	if (*end || x > 100)
		return -EINVAL;
	*(uint32_t *)field = (uint32_t)x;
	return 0;
}

static int conf_unknown(const char *v, void *field, const char **expect)
{
	*expect = "allow or refuse";
	if (!strcmp(v, "allow"))
		*(bool *)field = false;
	else if (!strcmp(v, "refuse"))
		*(bool *)field = true;
	else
		return -EINVAL;
	return 0;
}

static int conf_log_level(const char *v, void *field, const char **expect)
{
	static const struct { const char *n; int l; } levels[] = {
		{"error", LOG_ERR}, {"warning", LOG_WARNING},
		{"notice", LOG_NOTICE}, {"info", LOG_INFO}, {"debug", LOG_DEBUG},
	};
	*expect = "error, warning, notice, info or debug";
	for (unsigned i = 0; i < 5; i++)
		if (!strcmp(v, levels[i].n)) {
			*(int *)field = levels[i].l;
			return 0;
		}
	return -EINVAL;
}

/* "1000, alice 1002": numeric ids or names, for uids or gids. */
static int parse_ids(const char *v, bool groups, uint32_t *ids, uint32_t *n,
		     const char **expect)
{
	char buf[1024];
	static char too_many[96];
	*expect = groups ? "group names or gids, separated by spaces or commas"
			 : "user names or uids, separated by spaces or commas";
	snprintf(buf, sizeof(buf), "%s", v);
	/* Repeated keys add: a long list may span several lines. */
	for (char *save = NULL, *tok = strtok_r(buf, " ,\t", &save); tok;
	     tok = strtok_r(NULL, " ,\t", &save)) {
		char *end;
		unsigned long id;
		if (*n >= CONFIG_MAX_IDS) {
			snprintf(too_many, sizeof(too_many), "at most %d %s per tenant; use gids for large groups",
				 CONFIG_MAX_IDS, groups ? "gids" : "uids");
			*expect = too_many;
			return -E2BIG;
		}
		errno = 0;
		id = strtoul(tok, &end, 10);
		if (*tok >= '0' && *tok <= '9' && !*end && !errno && id < UINT32_MAX) {
			ids[(*n)++] = (uint32_t)id;
			continue;
		}
		if (groups) {
			struct group *g = getgrnam(tok);
			if (!g)
				return -ENOENT;
			ids[(*n)++] = g->gr_gid;
		} else {
			struct passwd *pw = getpwnam(tok);
			if (!pw)
				return -ENOENT;
			ids[(*n)++] = pw->pw_uid;
		}
	}
	return *n ? 0 : -EINVAL;
}

const struct tenant_conf *config_tenant(const struct config *c, const char *name)
{
	for (uint32_t i = 0; i < c->n_tenants; i++)
		if (!strcmp(c->tenants[i].name, name))
			return &c->tenants[i];
	return NULL;
}

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
	return t;
}

static bool tenant_name_ok(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > CONFIG_MAX_TENANT_NAME)
		return false;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || *s == '-' || *s == '_'))
			return false;
	return true;
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
	{"pool", "topology_root", conf_path, offsetof(struct config, sysfs_root)},
	{"pool", "eviction", conf_eviction, offsetof(struct config, eviction)},
	{"tenants", "default_quota", conf_size, offsetof(struct config, default_quota)},
	{"tenants", "default_nvme_quota", conf_size, offsetof(struct config, default_nvme_quota)},
	{"tenants", "unknown", conf_unknown, offsetof(struct config, refuse_unknown)},
	{"nvme", "engine", conf_engine, offsetof(struct config, nvme_engine)},
	{"nvme", "queue_depth", conf_u32, offsetof(struct config, nvme_queue_depth)},
	{"nvme", "writeback_high", conf_percent, offsetof(struct config, writeback_high)},
	{"nvme", "writeback_low", conf_percent, offsetof(struct config, writeback_low)},
	{"limits", "connections", conf_u32, offsetof(struct config, max_connections)},
	{"limits", "connections_per_uid", conf_u32, offsetof(struct config, max_connections_per_uid)},
	{"limits", "namespaces_per_tenant", conf_u32, offsetof(struct config, max_namespaces)},
	{"limits", "keys_per_request", conf_u32, offsetof(struct config, max_keys)},
	{"limits", "handles_per_tenant", conf_u32, offsetof(struct config, max_handles)},
	{"limits", "output_bytes", conf_size, offsetof(struct config, max_output_bytes)},
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
	c->eviction = EVICT_ARC; /* chosen on the traces of docs/workload.md */
	c->lock = LOCK_AUTO;
	c->default_quota = 0; /* a quarter of the capacity */
	c->refuse_unknown = false;
	c->max_connections = 1024;
	c->max_connections_per_uid = 256;
	c->max_namespaces = 64;
	c->max_keys = 4096;
	c->max_handles = 65536;
	c->max_output_bytes = 8ULL << 20;
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

	if (!tenant_name_ok(name)) {
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
		r = parse_ids(value, false, t->uids, &t->n_uids, &expect);
	else if (!strcmp(key, "gids"))
		r = parse_ids(value, true, t->gids, &t->n_gids, &expect);
	else if (!strcmp(key, "quota"))
		r = conf_size(value, &t->quota, &expect);
	else if (!strcmp(key, "nvme_quota"))
		r = conf_size(value, &t->nvme_quota, &expect);
	else if (!strcmp(key, "socket"))
		r = conf_path(value, &t->socket, &expect);
	else {
		log_error("%s:%d: unknown key '%s' in [tenant.%s] (known: uids, gids, quota, nvme_quota, socket)",
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

	if (!tenant_name_ok(name)) {
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
	if (!strcmp(section, "daemon") && !strcmp(key, "admin_groups")) {
		const char *expect = "";
		int r = parse_ids(value, true, ctx->c->admin_gids, &ctx->c->n_admin_gids, &expect);
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
		log_error("%s:%d: unknown section [%s] (known: daemon, pool, tenants, tenant.NAME, nvme, spill.NAME, limits)",
			  ctx->path, line, section);
	else
		log_error("%s:%d: unknown key '%s' in [%s]; see kvtierd.conf(5)",
			  ctx->path, line, key, section);
	ctx->error = -EINVAL;
	return 1;
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
	}
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
	for (uint32_t i = 0; i < c->n_tenants; i++)
		free(c->tenants[i].socket);
	free(c->tenants);
	for (uint32_t i = 0; i < c->n_spills; i++)
		free(c->spills[i].path);
	free(c->spills);
	c->spills = NULL;
	c->n_spills = 0;
	c->tenants = NULL;
	c->n_tenants = 0;
	c->socket_path = c->runtime_dir = c->sysfs_root = NULL;
}

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
		"eviction = %s\n",
		kvt_size_format_exact(c->capacity, a, sizeof(a)), kvt_size_format_exact(c->extent_size, b, sizeof(b)),
		hp[c->hugepages], lk[c->lock], c->numa == NUMA_OFF ? "off" : "auto",
		evict_policy_to_string(c->eviction));
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
		if (t->socket)
			fprintf(f, "socket = %s\n", t->socket);
		fputc('\n', f);
	}
	static const char *eng[] = {"auto", "io_uring", "threads"};
	fprintf(f, "[nvme]\nengine = %s\nqueue_depth = %u\nwriteback_high = %u%%\nwriteback_low = %u%%\n\n",
		eng[c->nvme_engine], c->nvme_queue_depth, c->writeback_high, c->writeback_low);
	for (uint32_t i = 0; i < c->n_spills; i++)
		fprintf(f, "[spill.%s]\npath = %s\ncapacity = %s\n\n", c->spills[i].name,
			c->spills[i].path ? c->spills[i].path : "",
			kvt_size_format_exact(c->spills[i].capacity, q, sizeof(q)));
	fprintf(f, "[limits]\nconnections = %u\nconnections_per_uid = %u\n"
		"namespaces_per_tenant = %u\nkeys_per_request = %u\n"
		"handles_per_tenant = %u\noutput_bytes = %s\n",
		c->max_connections, c->max_connections_per_uid, c->max_namespaces, c->max_keys,
		c->max_handles, kvt_size_format_exact(c->max_output_bytes, o, sizeof(o)));
}
