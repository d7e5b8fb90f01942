/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "log.h"

enum fault_mode {
	FAULT_OFF,
	FAULT_ONCE,  /* the Nth call */
	FAULT_FROM,  /* the Nth and every later call */
	FAULT_EVERY, /* every Nth call */
};

struct fault_rule {
	enum fault_mode mode;
	uint64_t n;
	uint64_t calls;
	uint64_t injected;
};

bool fault_armed;
static struct fault_rule rules[_FAULT_SITE_MAX];

static const char *const site_names[_FAULT_SITE_MAX] = {
	[FAULT_SESSION_IN] = "session_in",
	[FAULT_SESSION_OUT] = "session_out",
	[FAULT_PROCESS] = "process",
	[FAULT_TENANT] = "tenant",
	[FAULT_NS] = "ns",
	[FAULT_EXTENT] = "extent",
	[FAULT_BLOCK] = "block",
	[FAULT_INDEX] = "index",
	[FAULT_HANDLE] = "handle",
	[FAULT_PARTIAL] = "partial",
	[FAULT_STATS] = "stats",
	[FAULT_SPILL_REGION] = "spill_region",
	[FAULT_WRITEBACK] = "writeback",
	[FAULT_RESTORE] = "restore",
	[FAULT_WRITE_EIO] = "write_eio",
	[FAULT_WRITE_ENOSPC] = "write_enospc",
	[FAULT_WRITE_SHORT] = "write_short",
	[FAULT_READ_EIO] = "read_eio",
	[FAULT_READ_SHORT] = "read_short",
	[FAULT_WRITE_EAGAIN] = "write_eagain",
	[FAULT_READ_EAGAIN] = "read_eagain",
	[FAULT_URING_SUBMIT] = "uring_submit",
	[FAULT_PEERPIDFD] = "peerpidfd",
	[FAULT_PIDFS] = "pidfs",
};

bool fault_check(enum fault_site site)
{
	struct fault_rule *r = &rules[site];
	/* Atomic: the NVMe tier's workers count their I/O sites on threads
	 * of their own. */
	uint64_t c = __atomic_add_fetch(&r->calls, 1, __ATOMIC_RELAXED);
	bool hit;

	switch (r->mode) {
	case FAULT_ONCE: hit = c == r->n; break;
	case FAULT_FROM: hit = c >= r->n; break;
	case FAULT_EVERY: hit = c % r->n == 0; break;
	default: hit = false; break;
	}
	if (!hit)
		return false;
	__atomic_add_fetch(&r->injected, 1, __ATOMIC_RELAXED);
	log_warning("Fault injected: %s call %llu", site_names[site], (unsigned long long)c);
	return true;
}

uint64_t fault_injected(enum fault_site site)
{
	return site < _FAULT_SITE_MAX ? __atomic_load_n(&rules[site].injected, __ATOMIC_RELAXED) : 0;
}

static int site_lookup(const char *name)
{
	for (int i = 0; i < _FAULT_SITE_MAX; i++)
		if (!strcmp(name, site_names[i]))
			return i;
	return -ENOENT;
}

static void arm(enum fault_site site, enum fault_mode mode, uint64_t n)
{
	rules[site].mode = mode;
	rules[site].n = n;
	fault_armed = true;
}

/* "site=N", "site=N+", "site=%N". */
static int parse_rule(char *tok)
{
	char *eq = strchr(tok, '='), *v, *end;
	enum fault_mode mode = FAULT_ONCE;
	unsigned long long n;

	if (!eq)
		return -EINVAL;
	*eq = 0;
	v = eq + 1;
	if (*v == '%') {
		mode = FAULT_EVERY;
		v++;
	}
	if (*v < '0' || *v > '9')
		return -EINVAL;
	errno = 0;
	n = strtoull(v, &end, 10);
	if (mode == FAULT_ONCE && *end == '+') {
		mode = FAULT_FROM;
		end++;
	}
	if (errno || *end || n == 0)
		return -EINVAL;

	int site = site_lookup(tok);
	if (site < 0)
		return -EINVAL;
	arm((enum fault_site)site, mode, n);
	return 0;
}

static int parse(const char *env, const char *value)
{
	char buf[512], *save = NULL;

	if (!value || !*value)
		return 0;
	if (strlen(value) >= sizeof(buf))
		return log_error_errno(-EINVAL, "%s is too long", env);
	memcpy(buf, value, strlen(value) + 1);
	for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
		if (parse_rule(tok) < 0) {
			char sites[400] = "";
			for (int i = 0; i < _FAULT_SITE_MAX; i++)
				snprintf(sites + strlen(sites), sizeof(sites) - strlen(sites), "%s%s",
					 i ? ", " : "", site_names[i]);
			return log_error_errno(-EINVAL, "%s='%s': '%s' is not of the form SITE=N, SITE=N+ or SITE=%%N (N >= 1; sites: %s)",
					       env, value, tok, sites);
		}
	return 0;
}

int fault_init(void)
{
	const char *faults = getenv(FAULT_ENV);
	int r;

	memset(rules, 0, sizeof(rules));
	fault_armed = false;
	r = parse(FAULT_ENV, faults);
	if (r < 0) {
		memset(rules, 0, sizeof(rules));
		fault_armed = false;
		return r;
	}
	if (fault_armed)
		log_warning("Fault injection armed (%s=%s): for tests only, never in production",
			    FAULT_ENV, faults);
	return 0;
}

void fault_report(void)
{
	char line[1024] = "";

	if (!fault_armed)
		return;
	for (int i = 0; i < _FAULT_SITE_MAX; i++)
		snprintf(line + strlen(line), sizeof(line) - strlen(line), "%s%s=%llu/%llu",
			 i ? " " : "", site_names[i], (unsigned long long)rules[i].injected,
			 (unsigned long long)rules[i].calls);
	log_info("Fault sites (injected/reached): %s", line);
}
