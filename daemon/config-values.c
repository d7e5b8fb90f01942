/* SPDX-License-Identifier: Apache-2.0 */
/* The values of kvtierd.conf: one parser per kind of value (config-values.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include "codec.h"
#include "config.h"
#include "config-values.h"
#include "size.h"

int conf_size(const char *v, void *field, const char **expect)
{
	*expect = "a size such as 4096, 512M or 64G";
	return kvt_size_parse(v, field);
}

int conf_u32(const char *v, void *field, const char **expect)
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

int conf_string(const char *v, void *field, const char **expect)
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

int conf_listen_parse(const char *v, struct sockaddr_storage *ret, unsigned *ret_len)
{
	char host[INET6_ADDRSTRLEN + 1];
	const char *colon, *h = v;
	size_t n;
	char *end;

	memset(ret, 0, sizeof(*ret));
	if (*v == '[') {
		const char *close = strchr(v, ']');
		if (!close || close[1] != ':')
			return -EINVAL;
		h = v + 1;
		n = (size_t)(close - h);
		colon = close + 1;
	} else {
		colon = strrchr(v, ':');
		if (!colon)
			return -EINVAL;
		n = (size_t)(colon - v);
	}
	if (n == 0 || n >= sizeof(host) || colon[1] < '0' || colon[1] > '9')
		return -EINVAL;
	memcpy(host, h, n);
	host[n] = 0;
	errno = 0;
	unsigned long port = strtoul(colon + 1, &end, 10);
	if (errno || *end || port > 65535)
		return -EINVAL;
	if (*v != '[') {
		struct sockaddr_in *a = (struct sockaddr_in *)ret;
		if (inet_pton(AF_INET, host, &a->sin_addr) != 1)
			return -EINVAL;
		a->sin_family = AF_INET;
		a->sin_port = htons((uint16_t)port);
		*ret_len = sizeof(*a);
	} else {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)ret;
		if (inet_pton(AF_INET6, host, &a->sin6_addr) != 1)
			return -EINVAL;
		a->sin6_family = AF_INET6;
		a->sin6_port = htons((uint16_t)port);
		*ret_len = sizeof(*a);
	}
	return 0;
}

int conf_listen(const char *v, void *field, const char **expect)
{
	struct sockaddr_storage sa;
	unsigned len;

	*expect = "ADDRESS:PORT with a numeric address (127.0.0.1:9464, [::1]:9464)";
	if (conf_listen_parse(v, &sa, &len) < 0)
		return -EINVAL;
	return conf_string(v, field, expect);
}

int conf_path(const char *v, void *field, const char **expect)
{
	*expect = "an absolute path";
	if (v[0] != '/' || strlen(v) >= 108)
		return -EINVAL;
	return conf_string(v, field, expect);
}

int conf_hugepages(const char *v, void *field, const char **expect)
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

int conf_lock(const char *v, void *field, const char **expect)
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

int conf_numa(const char *v, void *field, const char **expect)
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

int conf_eviction(const char *v, void *field, const char **expect)
{
	int p = evict_policy_from_string(v);
	*expect = "arc, lru, s3fifo, sieve, lrfu or lrfu-admit";
	if (p < 0)
		return p;
	*(enum evict_policy *)field = (enum evict_policy)p;
	return 0;
}

int conf_engine(const char *v, void *field, const char **expect)
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

int conf_recovery(const char *v, void *field, const char **expect)
{
	*expect = "foreground or background";
	if (!strcmp(v, "foreground"))
		*(enum nvme_recovery *)field = NVME_RECOVERY_FOREGROUND;
	else if (!strcmp(v, "background"))
		*(enum nvme_recovery *)field = NVME_RECOVERY_BACKGROUND;
	else
		return -EINVAL;
	return 0;
}

int conf_codecs(const char *v, void *field, const char **expect)
{
	uint32_t mask = 0;

	*expect = "one or more of none, fp8-e4m3, int4";
	while (*v) {
		size_t n = strcspn(v, " \t,");
		uint32_t c;
		if (n == 0) {
			v++;
			continue;
		}
		for (c = 0; c < KVT_CODEC_COUNT; c++)
			if (strlen(kvt_codec_name(c)) == n && !strncmp(v, kvt_codec_name(c), n))
				break;
		if (c == KVT_CODEC_COUNT)
			return -EINVAL;
		mask |= 1u << c;
		v += n;
	}
	if (!mask)
		return -EINVAL;
	*(uint32_t *)field = mask;
	return 0;
}

int conf_percent(const char *v, void *field, const char **expect)
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

/* "0.3" or "30%": parts per million, so that the daemon compares ratios
 * without floating point and a dump reads back as the same value. */
int conf_ratio(const char *v, void *field, const char **expect)
{
	uint64_t whole = 0, frac = 0, scale = 1000000;
	const char *p = v;

	*expect = "a ratio from 0 to 1 (such as 0.3) or a percentage (30%)";
	if (*p < '0' || *p > '9')
		return -EINVAL;
	for (; *p >= '0' && *p <= '9'; p++)
		if ((whole = whole * 10 + (uint64_t)(*p - '0')) > 100)
			return -EINVAL;
	if (*p == '.') {
		/* Digits past the sixth are below a part per million. */
		for (p++; *p >= '0' && *p <= '9'; p++)
			if (scale > 1) {
				scale /= 10;
				frac += (uint64_t)(*p - '0') * scale;
			}
	}
	uint64_t ppm = whole * 1000000 + frac;
	if (*p == '%') {
		ppm /= 100;
		p++;
	}
	if (*p || ppm > 1000000)
		return -EINVAL;
	*(uint32_t *)field = (uint32_t)ppm;
	return 0;
}

int conf_bool(const char *v, void *field, const char **expect)
{
	*expect = "yes or no";
	if (!strcmp(v, "yes"))
		*(bool *)field = true;
	else if (!strcmp(v, "no"))
		*(bool *)field = false;
	else
		return -EINVAL;
	return 0;
}

int conf_unknown(const char *v, void *field, const char **expect)
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

int conf_log_level(const char *v, void *field, const char **expect)
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
int conf_ids(const char *v, bool groups, uint32_t *ids, uint32_t *n, const char **expect)
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

/* Shared by the section parsers (config.c, config-remote.c). */
const struct tenant_conf *config_tenant(const struct config *c, const char *name)
{
	for (uint32_t i = 0; i < c->n_tenants; i++)
		if (!strcmp(c->tenants[i].name, name))
			return &c->tenants[i];
	return NULL;
}

bool config_name_ok(const char *s)
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
