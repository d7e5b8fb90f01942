/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvtierd.conf: a file that sets every key (config-util.c's full_conf),
 * every value of each enum, a file loaded over another, and the file
 * syntax: comments, blank lines, spaces, a BOM and CRLF line ends.
 */
#include <errno.h>
#include <grp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include "../check.h"
#include "config-util.h"

static void check_full(int line, const struct config *c)
{
	if (!c->socket_path || strcmp(c->socket_path, "/run/kvt-test/ctl.sock") ||
	    !c->runtime_dir || strcmp(c->runtime_dir, "/run/kvt-test") ||
	    c->quarantine_ms != 1234 || c->log_level != LOG_DEBUG ||
	    c->capacity != (UINT64_C(64) << 30) ||
	    c->extent_size != (UINT64_C(256) << 20) ||
	    c->hugepages != HUGEPAGES_HUGETLB || c->lock != LOCK_YES ||
	    c->default_quota != (UINT64_C(3) << 30) || !c->refuse_unknown ||
	    c->max_connections != 77 || c->max_connections_per_uid != 7 ||
	    c->max_namespaces != 9 || c->max_keys != 8192 ||
	    c->max_handles != 123456 ||
	    c->max_output_bytes != (UINT64_C(16) << 20) || c->partial_block_ms != 2500 ||
	    c->numa != NUMA_OFF || !c->sysfs_root ||
	    strcmp(c->sysfs_root, "/srv/kvt-test/topology")) {
		fprintf(stderr, "%s:%d: a key of the full file did not land\n",
			__FILE__, line);
		failures++;
	}

	const struct group *ng = getgrnam("nogroup");
	const struct tenant_conf *t = config_tenant(c, "inference");
	if (c->n_tenants != 3 || !t || t != &c->tenants[0] || t->n_uids != 3 ||
	    t->uids[0] != 1000 || t->uids[1] != 1001 || t->uids[2] != 0 ||
	    t->n_gids != 2 || (ng && t->gids[0] != ng->gr_gid) ||
	    t->gids[1] != 2000 || t->quota != (UINT64_C(8) << 30) ||
	    !t->socket || strcmp(t->socket, "/run/kvt-test/inference/inference.sock") || t->socket_dir) {
		fprintf(stderr, "%s:%d: [tenant.inference] did not land\n",
			__FILE__, line);
		failures++;
	}
	t = config_tenant(c, "Batch_jobs-2");
	if (!t || t != &c->tenants[1] || t->n_uids != 0 || t->n_gids != 1 ||
	    t->gids[0] != 3000 || t->quota != 0 || t->socket != NULL) {
		fprintf(stderr, "%s:%d: [tenant.Batch_jobs-2] did not land\n",
			__FILE__, line);
		failures++;
	}
	t = config_tenant(c, "box");
	if (!t || t != &c->tenants[2] || t->n_uids != 0 || t->n_gids != 0 ||
	    t->quota != 1536 * 1024 || !t->socket || !t->socket_dir ||
	    strcmp(t->socket, "/run/kvt-test/box/kvtierd.sock")) {
		fprintf(stderr, "%s:%d: [tenant.box] did not land\n", __FILE__,
			line);
		failures++;
	}
	if (c->nvme_engine != NVME_ENGINE_THREADS || c->nvme_queue_depth != 256 ||
	    c->writeback_high != 90 || c->writeback_low != 45 || c->n_spills != 2 ||
	    strcmp(c->spills[0].name, "nvme0") || !c->spills[0].path ||
	    strcmp(c->spills[0].path, "/var/cache/kvtierd/spill0") ||
	    c->spills[0].capacity != (UINT64_C(64) << 30) ||
	    strcmp(c->spills[1].name, "nvme1-b") || !c->spills[1].path ||
	    strcmp(c->spills[1].path, "/mnt/nvme1/kvtier/spill") ||
	    c->spills[1].capacity != (UINT64_C(1536) << 20)) {
		fprintf(stderr, "%s:%d: [nvme] or [spill.*] did not land\n", __FILE__,
			line);
		failures++;
	}
	/* Names are exact: case and prefixes matter. */
	if (config_tenant(c, "Inference") || config_tenant(c, "inf") ||
	    config_tenant(c, "batch_jobs-2") || config_tenant(c, "")) {
		fprintf(stderr, "%s:%d: config_tenant matched a wrong name\n",
			__FILE__, line);
		failures++;
	}
}

static void test_full(void)
{
	struct config c;
	char *err;
	const char *path = write_conf("full.conf", full_conf);

	CHECK(config_defaults(&c) == 0);
	CHECK(load_captured(&c, path, &err) == 0);
	CHECK(err[0] == 0, "%s", err);
	free(err);
	check_full(__LINE__, &c);
	config_free(&c);
}

/* Every other enum value; a file changes only what it names. */
static void test_enums(void)
{
	static const struct {
		const char *text;
		int hugepages, lock, level, refuse;
	} e[] = {
		{ "[pool]\nhugepages = auto\n", HUGEPAGES_AUTO, -1, -1, -1 },
		{ "[pool]\nhugepages = thp\n", HUGEPAGES_THP, -1, -1, -1 },
		{ "[pool]\nhugepages = off\n", HUGEPAGES_OFF, -1, -1, -1 },
		{ "[pool]\nlock = auto\n", -1, LOCK_AUTO, -1, -1 },
		{ "[pool]\nlock = no\n", -1, LOCK_NO, -1, -1 },
		{ "[daemon]\nlog_level = error\n", -1, -1, LOG_ERR, -1 },
		{ "[daemon]\nlog_level = warning\n", -1, -1, LOG_WARNING, -1 },
		{ "[daemon]\nlog_level = notice\n", -1, -1, LOG_NOTICE, -1 },
		{ "[daemon]\nlog_level = info\n", -1, -1, LOG_INFO, -1 },
		{ "[tenants]\nunknown = allow\n", -1, -1, -1, 0 },
		{ "[tenants]\nunknown = refuse\n", -1, -1, -1, 1 },
	};
	struct config c;
	const char *path;
	char *err;

	for (size_t i = 0; i < sizeof(e) / sizeof(e[0]); i++) {
		CHECK(config_defaults(&c) == 0);
		path = write_conf("enum.conf", e[i].text);
		CHECK(load_captured(&c, path, &err) == 0);
		free(err);
		CHECK(e[i].hugepages < 0 ? c.hugepages == HUGEPAGES_AUTO
					 : (int)c.hugepages == e[i].hugepages,
		      "%s", e[i].text);
		CHECK(e[i].lock < 0 ? c.lock == LOCK_AUTO
				    : (int)c.lock == e[i].lock,
		      "%s", e[i].text);
		CHECK(e[i].level < 0 ? c.log_level == LOG_INFO
				     : c.log_level == e[i].level,
		      "%s", e[i].text);
		CHECK(e[i].refuse < 0 ? !c.refuse_unknown
				      : c.refuse_unknown == (e[i].refuse == 1),
		      "%s", e[i].text);
		CHECK(c.capacity == (UINT64_C(256) << 20) && c.max_keys == 4096);
		config_free(&c);
	}
}

/* [pool] numa, both ways, over each other. */
static void test_numa_twice(void)
{
	struct config c;
	char *err;

	CHECK(config_defaults(&c) == 0);
	CHECK(load_captured(&c, write_conf("enum.conf", "[pool]\nnuma = off\n"),
			    &err) == 0);
	free(err);
	CHECK(c.numa == NUMA_OFF && c.sysfs_root == NULL);
	CHECK(load_captured(&c, write_conf("enum.conf", "[pool]\nnuma = auto\n"),
			    &err) == 0);
	free(err);
	CHECK(c.numa == NUMA_AUTO && c.hugepages == HUGEPAGES_AUTO);
	config_free(&c);
	CHECK(c.sysfs_root == NULL && c.tenants == NULL && c.n_tenants == 0);
}

/* Loading over a loaded config replaces strings without leaking. */
static void test_load_over(void)
{
	struct config c;
	char *err;

	CHECK(config_defaults(&c) == 0);
	CHECK(load_captured(&c, write_conf("a.conf", full_conf), &err) == 0);
	free(err);
	CHECK(load_captured(&c, write_conf("b.conf", "[daemon]\nsocket = /x/y.sock\n"),
			    &err) == 0);
	free(err);
	CHECK(strcmp(c.socket_path, "/x/y.sock") == 0);
	CHECK(strcmp(c.runtime_dir, "/run/kvt-test") == 0);
	CHECK(c.sysfs_root && strcmp(c.sysfs_root, "/srv/kvt-test/topology") == 0);
	CHECK(load_captured(&c, write_conf("b.conf", "[pool]\ntopology_root = /t2\n"),
			    &err) == 0);
	free(err);
	CHECK(c.sysfs_root && strcmp(c.sysfs_root, "/t2") == 0);
	config_free(&c);
}

/* Comments, blank lines, spaces and CRLF line ends. */
static void test_syntax(void)
{
	struct config c;
	const char *path;
	char *err;

	CHECK(config_defaults(&c) == 0);
	path = write_conf("style.conf",
			  "\xef\xbb\xbf; BOM, then a comment\r\n"
			  "  [pool]  \r\n"
			  "capacity=1T\r\n"
			  "extent_size   =   1G   ; inline comment\r\n"
			  "# done\r\n");
	CHECK(load_captured(&c, path, &err) == 0);
	CHECK(err[0] == 0, "%s", err);
	free(err);
	CHECK(c.capacity == (UINT64_C(1) << 40));
	CHECK(c.extent_size == (UINT64_C(1) << 30));
	config_free(&c);
}

int main(void)
{
	config_test_begin();
	test_full();
	test_enums();
	test_numa_twice();
	test_load_over();
	test_syntax();
	return config_test_end("test-config-full");
}
