/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvtierd.conf's [remote.NAME] sections: a RADOS pool shared with other
 * nodes, the cluster user that reaches it, and the tenants it serves.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "config-values.h"
#include "log.h"
#include "macro.h"
#include "size.h"

static const struct remote_key {
	const char *key;
	conf_parser parse;
	size_t offset;
} remote_keys[] = {
	{"ceph_conf", conf_path, offsetof(struct remote_conf, ceph_conf)},
	{"user", conf_string, offsetof(struct remote_conf, user)},
	{"keyring", conf_path, offsetof(struct remote_conf, keyring)},
	{"pool", conf_string, offsetof(struct remote_conf, pool)},
	{"capacity", conf_size, offsetof(struct remote_conf, capacity)},
	{"timeout_ms", conf_u32, offsetof(struct remote_conf, timeout_ms)},
	{"queue_depth", conf_u32, offsetof(struct remote_conf, queue_depth)},
	{"min_reuse", conf_u32, offsetof(struct remote_conf, min_reuse)},
	{"trim_interval_ms", conf_u32, offsetof(struct remote_conf, trim_interval_ms)},
};

static struct remote_conf *remote_get(struct config *c, const char *name)
{
	for (uint32_t i = 0; i < c->n_remotes; i++)
		if (!strcmp(c->remotes[i].name, name))
			return &c->remotes[i];
	if (c->n_remotes >= CONFIG_MAX_REMOTES)
		return NULL;
	struct remote_conf *r = realloc(c->remotes, sizeof(*r) * (c->n_remotes + 1));
	if (!r)
		return NULL;
	c->remotes = r;
	r = &c->remotes[c->n_remotes++];
	memset(r, 0, sizeof(*r));
	snprintf(r->name, sizeof(r->name), "%s", name);
	if (!(r->user = strdup("admin")))
		return NULL;
	r->timeout_ms = 5000;
	r->queue_depth = 32;
	r->min_reuse = 1;
	r->trim_interval_ms = 10000;
	return r;
}

/* "alice bob": tenant names, appended. */
static int tenants_parse(struct remote_conf *rc, const char *v, const char **expect)
{
	*expect = "tenant names separated by spaces or commas";
	char buf[CONFIG_MAX_TENANT_NAME + 1];
	while (*v) {
		size_t n = strcspn(v, " ,\t");
		if (n == 0) {
			v++;
			continue;
		}
		if (n > CONFIG_MAX_TENANT_NAME || rc->n_tenants >= ARRAY_SIZE(rc->tenants))
			return -EINVAL;
		memcpy(buf, v, n);
		buf[n] = 0;
		if (!config_name_ok(buf))
			return -EINVAL;
		snprintf(rc->tenants[rc->n_tenants++], sizeof(rc->tenants[0]), "%s", buf);
		v += n;
	}
	return 0;
}

int config_remote_item(struct config *c, const char *path, int line, const char *name,
		       const char *key, const char *value)
{
	const char *expect = "";
	int r = -ENOENT;

	if (!config_name_ok(name)) {
		log_error("%s:%d: remote tier name '%s' must be 1-%d letters, digits, '-' or '_'",
			  path, line, name, CONFIG_MAX_TENANT_NAME);
		return -EINVAL;
	}
	struct remote_conf *rc = remote_get(c, name);
	if (!rc) {
		log_error("%s:%d: more than %d remote tiers", path, line, CONFIG_MAX_REMOTES);
		return -E2BIG;
	}
	if (!strcmp(key, "tenants"))
		r = tenants_parse(rc, value, &expect);
	for (size_t i = 0; r == -ENOENT && i < ARRAY_SIZE(remote_keys); i++) {
		if (strcmp(remote_keys[i].key, key))
			continue;
		r = remote_keys[i].parse(value, (char *)rc + remote_keys[i].offset, &expect);
	}
	if (r == -ENOENT) {
		log_error("%s:%d: unknown key '%s' in [remote.%s] (known: ceph_conf, user, keyring, pool, capacity, timeout_ms, queue_depth, min_reuse, trim_interval_ms, tenants)",
			  path, line, key, name);
		return -EINVAL;
	}
	if (r == -ENOMEM)
		return r;
	if (r < 0) {
		log_error("%s:%d: [remote.%s] %s = '%s' is invalid: expected %s", path, line, name,
			  key, value, expect);
		return -EINVAL;
	}
	return 0;
}

static bool names_tenant(const struct remote_conf *rc, const char *tenant)
{
	for (uint32_t i = 0; i < rc->n_tenants; i++)
		if (!strcmp(rc->tenants[i], tenant))
			return true;
	return false;
}

const struct remote_conf *config_remote_for(const struct config *c, const char *tenant)
{
	const struct remote_conf *any = NULL;

	if (!config_tenant(c, tenant))
		return NULL;
	for (uint32_t i = 0; i < c->n_remotes; i++) {
		if (names_tenant(&c->remotes[i], tenant))
			return &c->remotes[i];
		if (!c->remotes[i].n_tenants && !any)
			any = &c->remotes[i];
	}
	return any;
}

int config_remote_validate(const struct config *c, const char *path)
{
	int r = 0;
	uint32_t catch_all = 0;

	for (uint32_t i = 0; i < c->n_remotes; i++) {
		const struct remote_conf *a = &c->remotes[i];
		if (!a->ceph_conf || !a->pool || !a->capacity) {
			log_error("%s: [remote.%s] needs ceph_conf, pool and capacity", path, a->name);
			r = -EINVAL;
		}
		if (a->timeout_ms < 1000 || a->timeout_ms > 600000) {
			log_error("%s: [remote.%s] timeout_ms must be 1000..600000 (whole seconds for librados)",
				  path, a->name);
			r = -EINVAL;
		}
		if (a->queue_depth == 0 || a->queue_depth > 1024) {
			log_error("%s: [remote.%s] queue_depth must be 1..1024", path, a->name);
			r = -EINVAL;
		}
		if (a->trim_interval_ms < 100) {
			log_error("%s: [remote.%s] trim_interval_ms must be at least 100", path, a->name);
			r = -EINVAL;
		}
		catch_all += a->n_tenants == 0;
		for (uint32_t t = 0; t < a->n_tenants; t++) {
			if (!config_tenant(c, a->tenants[t])) {
				log_error("%s: [remote.%s] names tenant '%s', which has no [tenant.%s]",
					  path, a->name, a->tenants[t], a->tenants[t]);
				r = -EINVAL;
			}
			for (uint32_t j = 0; j < i; j++)
				if (names_tenant(&c->remotes[j], a->tenants[t])) {
					log_error("%s: tenant '%s' is in both [remote.%s] and [remote.%s]",
						  path, a->tenants[t], c->remotes[j].name, a->name);
					r = -EINVAL;
				}
		}
	}
	if (catch_all > 1) {
		log_error("%s: more than one [remote.NAME] without tenants: at most one serves the tenants no other names",
			  path);
		r = -EINVAL;
	}
	return r;
}

void config_remote_dump(const struct config *c, FILE *f)
{
	char q[32];

	for (uint32_t i = 0; i < c->n_remotes; i++) {
		const struct remote_conf *a = &c->remotes[i];
		fprintf(f, "[remote.%s]\nceph_conf = %s\nuser = %s\n", a->name,
			a->ceph_conf ? a->ceph_conf : "", a->user ? a->user : "");
		if (a->keyring)
			fprintf(f, "keyring = %s\n", a->keyring);
		fprintf(f, "pool = %s\ncapacity = %s\ntimeout_ms = %u\nqueue_depth = %u\n"
			"min_reuse = %u\ntrim_interval_ms = %u\n",
			a->pool ? a->pool : "", kvt_size_format_exact(a->capacity, q, sizeof(q)),
			a->timeout_ms, a->queue_depth, a->min_reuse, a->trim_interval_ms);
		if (a->n_tenants) {
			fprintf(f, "tenants =");
			for (uint32_t t = 0; t < a->n_tenants; t++)
				fprintf(f, " %s", a->tenants[t]);
			fputc('\n', f);
		}
		fputc('\n', f);
	}
}

void config_remote_free(struct config *c)
{
	for (uint32_t i = 0; i < c->n_remotes; i++) {
		free(c->remotes[i].ceph_conf);
		free(c->remotes[i].user);
		free(c->remotes[i].keyring);
		free(c->remotes[i].pool);
	}
	free(c->remotes);
	c->remotes = NULL;
	c->n_remotes = 0;
}
