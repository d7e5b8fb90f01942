/* SPDX-License-Identifier: Apache-2.0 */
#include <signal.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ceph.h"

static struct ceph *running; /* stopped at exit, a failed check too */
static struct daemon *nodes[8];  /* killed at exit if still running */

static const char *script(void)
{
	const char *s = getenv("KVT_CEPH_CLUSTER");
	return s ? s : "tests/ceph/cluster.sh";
}

static void stop_at_exit(void)
{
	for (size_t i = 0; i < sizeof(nodes) / sizeof(nodes[0]); i++)
		if (nodes[i] && nodes[i]->pid > 0)
			daemon_kill(nodes[i]);
	if (running)
		ceph_stop(running);
}

static void at_exit_once(void)
{
	static bool registered;
	if (!registered)
		atexit(stop_at_exit);
	registered = true;
}

void node_start(struct daemon *d, const char *config)
{
	at_exit_once();
	daemon_start(d, config);
	for (size_t i = 0; i < sizeof(nodes) / sizeof(nodes[0]); i++)
		if (!nodes[i] || nodes[i] == d) {
			nodes[i] = d;
			break;
		}
}

void two_nodes(const struct ceph *c, const char *extra, struct daemon *a, struct daemon *b,
	       kvt_client **ret_ca, kvt_client **ret_cb)
{
	two_nodes_with(c, "", extra, a, b, ret_ca, ret_cb);
}

void two_nodes_with(const struct ceph *c, const char *config, const char *extra,
		    struct daemon *a, struct daemon *b, kvt_client **ret_ca, kvt_client **ret_cb)
{
	char sec[1024], cfg[2048];

	ceph_remote_section(c, sec, sizeof(sec), "shared", extra);
	snprintf(cfg, sizeof(cfg), "%s[tenant.alice]\nuids = 0\n%s", config, sec);
	node_start(a, cfg);
	node_start(b, cfg);
	*ret_ca = client_connect(a, "checker");
	*ret_cb = client_connect(b, "checker");
	WAIT_FOR(stat_get(*ret_ca, "remote", "up") == 1 && stat_get(*ret_cb, "remote", "up") == 1,
		 "both nodes connected");
}

void two_nodes_stop(struct ceph *c, struct daemon *a, struct daemon *b, kvt_client *ca,
		    kvt_client *cb)
{
	kvt_client_free(ca);
	kvt_client_free(cb);
	daemon_stop(a);
	daemon_stop(b);
	daemon_cleanup(a);
	daemon_cleanup(b);
	ceph_stop(c);
}

void ceph_start(struct ceph *c)
{
	char cmd[512];

	memset(c, 0, sizeof(*c));
	snprintf(c->dir, sizeof(c->dir), "/tmp/kvt-ceph-XXXXXX");
	CHECK(mkdtemp(c->dir), "mkdtemp");
	snprintf(c->conf, sizeof(c->conf), "%s/ceph.conf", c->dir);
	snprintf(cmd, sizeof(cmd), "sh %s start %s", script(), c->dir);
	int r = system(cmd);
	if (WIFEXITED(r) && WEXITSTATUS(r) == KVT_TEST_SKIP) {
		printf("SKIP: the ceph packages are not installed (scripts/deps.sh installs them)\n");
		rmdir(c->dir);
		exit(KVT_TEST_SKIP);
	}
	CHECK(WIFEXITED(r) && WEXITSTATUS(r) == 0, "the test cluster did not start (see %s/log)",
	      c->dir);
	running = c;
	at_exit_once();
}

void ceph_stop(struct ceph *c)
{
	char cmd[512];

	if (!c->dir[0])
		return;
	snprintf(cmd, sizeof(cmd), "sh %s stop %s", script(), c->dir);
	if (system(cmd) != 0)
		fprintf(stderr, "stopping the cluster in %s failed\n", c->dir);
	if (!getenv("KVT_KEEP")) {
		snprintf(cmd, sizeof(cmd), "rm -rf %s", c->dir);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", c->dir);
	}
	c->dir[0] = 0;
	running = NULL;
}

int ceph_sh(const struct ceph *c, char *out, size_t size, const char *fmt, ...)
{
	char body[2048], cmd[2304];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(body, sizeof(body), fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof(cmd), "CEPH_CONF=%s; export CEPH_CONF; %s", c->conf, body);
	FILE *p = popen(cmd, "r");
	CHECK(p, "popen");
	size_t len = 0, n;
	char sink[4096];
	while ((n = fread(out ? out + len : sink, 1, out ? size - 1 - len : sizeof(sink), p)) > 0)
		if (out)
			len += n;
	if (out)
		out[len] = 0;
	int r = pclose(p);
	return WIFEXITED(r) ? WEXITSTATUS(r) : -1;
}

int ceph_osd_pid(const struct ceph *c)
{
	char path[256];
	snprintf(path, sizeof(path), "%s/run/osd.0.pid", c->dir);
	FILE *f = fopen(path, "re");
	int pid = -1;
	if (f) {
		if (fscanf(f, "%d", &pid) != 1)
			pid = -1;
		fclose(f);
	}
	return pid;
}

void ceph_remote_section(const struct ceph *c, char *buf, size_t size, const char *name,
			 const char *extra)
{
	snprintf(buf, size,
		 "[remote.%s]\nceph_conf = %s\npool = kvtier\ncapacity = 64M\ntimeout_ms = 3000\n%s\n",
		 name, c->conf, extra ? extra : "");
}

struct daemon node_tenant_socket(const struct daemon *d, const char *tenant)
{
	struct daemon t = *d;
	snprintf(t.socket, sizeof(t.socket), "%s/%s.sock", d->dir, tenant);
	return t;
}

struct named_query {
	const char *kind, *name_field, *name, *field;
	uint64_t value;
	bool found;
};

static int named_cb(const kvt_record *r, void *userdata)
{
	struct named_query *q = userdata;
	const char *name = NULL;

	if (q->found || strcmp(kvt_record_kind(r), q->kind))
		return 0;
	for (uint32_t i = 0; i < kvt_record_n_fields(r); i++)
		if (!strcmp(kvt_record_field_name(r, i), q->name_field) &&
		    kvt_record_field_type(r, i) == KVT_FIELD_STR)
			name = kvt_record_field_str(r, i);
	if (name && !strcmp(name, q->name) && kvt_record_get_u64(r, q->field, &q->value) == 0)
		q->found = true;
	return 0;
}

uint64_t stat_named(kvt_client *c, const char *kind, const char *name_field, const char *name,
		    const char *field)
{
	struct named_query q = {kind, name_field, name, field, 0, false};
	int r = kvt_stats(c, KVT_STATS_ALL, named_cb, &q);
	CHECK(r == 0, "stats: %s", strerror(-r));
	CHECK(q.found, "no field %s in the %s record of %s %s", field, kind, name_field, name);
	return q.value;
}

void key_hex(const uint8_t *key, char *out)
{
	for (int i = 0; i < 32; i++)
		sprintf(out + 2 * i, "%02x", key[i]);
}
