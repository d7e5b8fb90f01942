/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvtierd.conf: the dump (--check-config) read back as a config.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../check.h"
#include "config-util.h"

/*
 * --check-config prints the effective configuration; read back as a file
 * it must give that same configuration.
 */
static bool same_tenants(const struct config *a, const struct config *b)
{
	if (a->n_tenants != b->n_tenants)
		return false;
	for (uint32_t i = 0; i < a->n_tenants; i++) {
		const struct tenant_conf *x = &a->tenants[i], *y = &b->tenants[i];
		if (strcmp(x->name, y->name) || x->quota != y->quota ||
		    x->nvme_quota != y->nvme_quota || x->codecs != y->codecs ||
		    !has_ids(x->uids, x->n_uids, y->uids, y->n_uids) ||
		    !has_ids(x->gids, x->n_gids, y->gids, y->n_gids) ||
		    !x->socket != !y->socket ||
		    (x->socket && strcmp(x->socket, y->socket)))
			return false;
	}
	return true;
}

static bool same_nvme(const struct config *a, const struct config *b)
{
	if (a->nvme_engine != b->nvme_engine || a->nvme_queue_depth != b->nvme_queue_depth ||
	    a->writeback_high != b->writeback_high || a->writeback_low != b->writeback_low ||
	    a->n_spills != b->n_spills)
		return false;
	for (uint32_t i = 0; i < a->n_spills; i++) {
		const struct spill_conf *x = &a->spills[i], *y = &b->spills[i];
		if (strcmp(x->name, y->name) || !x->path || !y->path ||
		    strcmp(x->path, y->path) || x->capacity != y->capacity)
			return false;
	}
	return true;
}

/* Dump a, read the dump back, compare; frees a. */
static void check_dump(int line, struct config *ap)
{
	struct config a = *ap, b;
	char *err;
	char dump_path[128];
	FILE *f;

	snprintf(dump_path, sizeof(dump_path), "%s/dump.conf", conf_dir);
	f = fopen(dump_path, "we");
	CHECK(f != NULL);
	if (!f) {
		config_free(ap);
		return;
	}
	config_dump(&a, f);
	fclose(f);
	CHECK(config_defaults(&b) == 0);
	int r = load_captured(&b, dump_path, &err);
	if (r != 0 || strcmp(a.socket_path, b.socket_path) ||
	    strcmp(a.runtime_dir, b.runtime_dir) ||
	    a.quarantine_ms != b.quarantine_ms || a.log_level != b.log_level ||
	    a.capacity != b.capacity || a.extent_size != b.extent_size ||
	    a.hugepages != b.hugepages || a.lock != b.lock ||
	    a.default_quota != b.default_quota ||
	    a.default_nvme_quota != b.default_nvme_quota || a.eviction != b.eviction ||
	    a.handshake_timeout_ms != b.handshake_timeout_ms ||
	    a.n_admin_gids != b.n_admin_gids ||
	    !has_ids(a.admin_gids, a.n_admin_gids, b.admin_gids, b.n_admin_gids) ||
	    a.refuse_unknown != b.refuse_unknown ||
	    a.max_connections != b.max_connections ||
	    a.max_connections_per_uid != b.max_connections_per_uid ||
	    a.max_namespaces != b.max_namespaces || a.max_keys != b.max_keys ||
	    a.max_handles != b.max_handles || a.partial_block_ms != b.partial_block_ms ||
	    a.max_output_bytes != b.max_output_bytes || a.numa != b.numa ||
	    !a.sysfs_root != !b.sysfs_root ||
	    (a.sysfs_root && strcmp(a.sysfs_root, b.sysfs_root)) ||
	    !same_tenants(&a, &b) || !same_nvme(&a, &b)) {
		fprintf(stderr,
			"%s:%d: the dump does not read back as the same configuration "
			"(load %d%s%s; log_level %d -> %d, capacity %" PRIu64 " -> %" PRIu64
			", default_quota %" PRIu64 " -> %" PRIu64 ", output_bytes %" PRIu64
			" -> %" PRIu64 "; numa %d -> %d; tenants %u -> %u; "
			"[nvme] engine %d -> %d, queue_depth %u -> %u, writeback %u/%u -> %u/%u; "
			"spill files %u -> %u)\n",
			__FILE__, line, r, err[0] ? ": " : "", err, a.log_level,
			b.log_level, a.capacity, b.capacity, a.default_quota,
			b.default_quota, a.max_output_bytes, b.max_output_bytes,
			(int)a.numa, (int)b.numa, a.n_tenants, b.n_tenants,
			(int)a.nvme_engine, (int)b.nvme_engine, a.nvme_queue_depth,
			b.nvme_queue_depth, a.writeback_high, a.writeback_low,
			b.writeback_high, b.writeback_low, a.n_spills, b.n_spills);
		failures++;
	}
	free(err);
	config_free(ap);
	config_free(&b);
	unlink(dump_path);
}

static void check_dump_reload(int line, const char *text)
{
	struct config a;
	char *err;

	CHECK(config_defaults(&a) == 0);
	int r = load_captured(&a, write_conf("src.conf", text), &err);
	CHECK(r == 0, "line %d: the source does not load: %s", line, err);
	free(err);
	check_dump(line, &a);
}

static void test_dump(void)
{
	/* Whole MiB everywhere and the default log level. */
	check_dump_reload(__LINE__,
			  "[daemon]\nsocket = /run/a.sock\nquarantine_ms = 9\n"
			  "[pool]\ncapacity = 2G\nextent_size = 32M\nhugepages = thp\n"
			  "lock = no\n[tenants]\ndefault_quota = 1G\nunknown = refuse\n"
			  "[limits]\nconnections = 3\nkeys_per_request = 100\n");
	check_dump_reload(__LINE__, "");
	/* A log level other than the default. */
	check_dump_reload(__LINE__, "[daemon]\nlog_level = debug\n");
	/* Administrators, the handshake deadline and NVMe quotas. */
	check_dump_reload(__LINE__,
			  "[daemon]\nadmin_groups = root, 4711 4712\nhandshake_timeout_ms = 250\n"
			  "[tenants]\ndefault_nvme_quota = 3G\n"
			  "[tenant.a]\nuids = 1000\nnvme_quota = 300000000\n");
	/* A tenant's codecs, in any order and separated either way. */
	check_dump_reload(__LINE__, "[tenant.a]\nuids = 1000\ncodecs = int4,  none\n"
				    "[tenant.b]\nuids = 1001\ncodecs = fp8-e4m3\n");
	/* Sizes that are not whole MiB: a quota of 512K is not "0M" (which
	 * means the whole capacity). */
	check_dump_reload(__LINE__, "[tenants]\ndefault_quota = 512K\n");
	check_dump_reload(__LINE__, "[pool]\ncapacity = 300000000\n");
	/* The NUMA keys. */
	check_dump_reload(__LINE__, "[pool]\nnuma = off\n");
	check_dump_reload(__LINE__, "[pool]\neviction = s3fifo\n");
	check_dump_reload(__LINE__, "[pool]\neviction = lru\n");
	check_dump_reload(__LINE__, "[pool]\nnuma = auto\ntopology_root = /srv/topo\n");
	/* Tenants: members by name come back as numbers; quotas that are not
	 * whole MiB; a tenant with only a socket; every kind of key. */
	check_dump_reload(__LINE__,
			  "[daemon]\nsocket = /run/t/main.sock\n"
			  "[pool]\ncapacity = 4G\nnuma = off\ntopology_root = /srv/topo\n"
			  "[tenants]\ndefault_quota = 1536K\nunknown = refuse\n"
			  "[tenant.inference]\nuids = root, 1000 nobody\ngids = nogroup 2000\n"
			  "quota = 8G\nsocket = /run/t/inference.sock\n"
			  "[tenant.Batch_jobs-2]\ngids = 3000\n"
			  "[tenant.box]\nsocket = /run/t/box.sock\nquota = 300000000\n"
			  "[tenant.big]\nuids = 4294967294\nquota = 0\n");
	/* The full file (64 uids in one tenant). */
	char many[512];
	int n = snprintf(many, sizeof(many), "[tenant.many]\nuids =");
	for (int i = 0; i < 64; i++)
		n += snprintf(many + n, sizeof(many) - (size_t)n, " %d", i);
	snprintf(many + n, sizeof(many) - (size_t)n, "\ngids = 1 2 3\n");
	check_dump_reload(__LINE__, many);
	check_dump_reload(__LINE__, full_conf);
	/* The NVMe tier: every engine, the range ends, spill capacities that
	 * are not whole MiB, files in the order the file names them. */
	check_dump_reload(__LINE__, "[nvme]\nengine = io_uring\nqueue_depth = 1\n"
				    "writeback_high = 100%\nwriteback_low = 100\n");
	check_dump_reload(__LINE__, "[nvme]\nengine = auto\nqueue_depth = 4096\n"
				    "writeback_high = 0\nwriteback_low = 0%\n");
	check_dump_reload(__LINE__,
			  "[nvme]\nengine = threads\n"
			  "[spill.z]\npath = /srv/z\ncapacity = 300000000\n"
			  "[spill.a]\npath = /srv/a\ncapacity = 1T\n"
			  "[spill.M_1-x]\ncapacity = 64M\npath = /srv/m\n"
			  "[spill.z]\ncapacity = 65537K\n");
}

/*
 * Members named in the file are dumped as numbers, which can be much
 * longer than the names ("u01" for uid 2000001): the largest valid lists
 * (64 uids and 64 gids of ten digits) must still read back, since
 * --check-config promises a valid configuration file.
 */
static void test_dump_wide(void)
{
	struct config c;
	char *err;

	CHECK(config_defaults(&c) == 0);
	int r = load_captured(&c, write_conf("src.conf",
					     "[tenant.wide]\nuids = 1\ngids = 1\n"),
			      &err);
	CHECK(r == 0, "%s", err);
	free(err);
	if (r == 0 && c.n_tenants == 1) {
		struct tenant_conf *t = &c.tenants[0];
		for (uint32_t i = 0; i < CONFIG_MAX_IDS; i++) {
			t->uids[i] = 4000000000u + i;
			t->gids[i] = 3000000000u + i;
		}
		t->n_uids = t->n_gids = CONFIG_MAX_IDS;
		check_dump(__LINE__, &c);
	} else if (r == 0) {
		config_free(&c);
	}
}

int main(void)
{
	config_test_begin();
	test_dump();
	test_dump_wide();
	return config_test_end("test-config-dump");
}
