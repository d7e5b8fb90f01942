/* SPDX-License-Identifier: Apache-2.0 */
/* The kvtierd.conf tests' shared part (config-util.h). */
#include <dirent.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "../check.h"
#include "config-util.h"

char conf_dir[64];

const char *write_conf(const char *name, const char *content)
{
	static char path[128];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", conf_dir, name);
	f = fopen(path, "we");
	if (!f || fputs(content, f) < 0 || fclose(f) != 0) {
		fprintf(stderr, "cannot write %s: %m\n", path);
		exit(1);
	}
	return path;
}

int load_captured(struct config *c, const char *path, char **ret_err)
{
	char errpath[128];
	int fd, saved, r;

	snprintf(errpath, sizeof(errpath), "%s/stderr", conf_dir);
	fd = open(errpath, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	saved = dup(STDERR_FILENO);
	if (fd < 0 || saved < 0) {
		fprintf(stderr, "cannot capture stderr: %m\n");
		exit(1);
	}
	fflush(stderr);
	dup2(fd, STDERR_FILENO);
	r = config_load(c, path);
	fflush(stderr);
	dup2(saved, STDERR_FILENO);
	close(saved);

	off_t len = lseek(fd, 0, SEEK_END);
	char *buf = malloc((size_t)len + 1);
	if (!buf || pread(fd, buf, (size_t)len, 0) != len) {
		fprintf(stderr, "cannot read captured stderr\n");
		exit(1);
	}
	buf[len] = 0;
	close(fd);
	unlink(errpath);
	*ret_err = buf;
	return r;
}

const char full_conf[] =
	"# every key\n"
	"[daemon]\n"
	"socket = /run/kvt-test/ctl.sock\n"
	"runtime_dir = /run/kvt-test\n"
	"quarantine_ms = 1234\n"
	"log_level = debug\n"
	"\n"
	"[pool]\n"
	"capacity = 64G\n"
	"extent_size = 256M\n"
	"hugepages = hugetlb\n"
	"lock = yes\n"
	"numa = off\n"
	"topology_root = /srv/kvt-test/topology\n"
	"\n"
	"; tenants\n"
	"[tenants]\n"
	"default_quota = 3G\n"
	"unknown = refuse\n"
	"\n"
	"[tenant.inference]\n"
	"uids = 1000, 1001 root\n"
	"gids = nogroup,2000\n"
	"quota = 8G\n"
	"socket = /run/kvt-test/inference/inference.sock\n"
	"\n"
	"[tenant.Batch_jobs-2]\n"
	"gids = 3000\n"
	"\n"
	"[tenant.box]\n"
	"socket_dir = /run/kvt-test/box\n"
	"quota = 1536K\n"
	"\n"
	"[nvme]\n"
	"engine = threads\n"
	"queue_depth = 256\n"
	"writeback_high = 90%\n"
	"writeback_low = 45\n"
	"\n"
	"[spill.nvme0]\n"
	"path = /var/cache/kvtierd/spill0\n"
	"capacity = 64G\n"
	"\n"
	"[spill.nvme1-b]\n"
	"capacity = 1536M\n"
	"path = /mnt/nvme1/kvtier/spill\n"
	"\n"
	"[limits]\n"
	"connections = 77\n"
	"connections_per_uid = 7\n"
	"namespaces_per_tenant = 9\n"
	"keys_per_request = 8192\n"
	"handles_per_tenant = 123456\n"
	"output_bytes = 16M\n"
	"partial_block_ms = 2500\n";

int load_text(struct config *c, const char *text, char **ret_err)
{
	int r;

	CHECK(config_defaults(c) == 0);
	r = load_captured(c, write_conf("tenant.conf", text), ret_err);
	if (r < 0)
		config_free(c);
	return r;
}

bool has_ids(const uint32_t *ids, uint32_t n, const uint32_t *want,
	     uint32_t n_want)
{
	if (n != n_want)
		return false;
	for (uint32_t i = 0; i < n; i++)
		if (ids[i] != want[i])
			return false;
	return true;
}

void run_bad(const char *src_file, int src_line, const struct bad_case *b)
{
	struct config c;
	char *err, want[192];
	const char *path;
	int r;

	path = write_conf("bad.conf", b->text);
	CHECK(config_defaults(&c) == 0);
	r = load_captured(&c, path, &err);
	if (b->line)
		snprintf(want, sizeof(want), "%s:%d:", path, b->line);
	else
		snprintf(want, sizeof(want), "%s:", path);
	if (r >= 0 || !strstr(err, want) ||
	    (b->names && !strstr(err, b->names))) {
		fprintf(stderr,
			"%s:%d: %s: config_load returned %d, expected an error "
			"naming '%s'%s%s; it printed:\n%s",
			src_file, src_line, b->what, r, want,
			b->names ? " and " : "", b->names ? b->names : "", err);
		failures++;
	}
	free(err);
	config_free(&c);
}

void run_good(const char *text)
{
	struct config c;
	char *err;

	CHECK(config_defaults(&c) == 0);
	int r = load_captured(&c, write_conf("good.conf", text), &err);
	CHECK(r == 0, "%s returned %d: %s", text, r, err);
	free(err);
	config_free(&c);
}

void config_test_begin(void)
{
	const char *tmp = getenv("TMPDIR");

	unsetenv("JOURNAL_STREAM");
	snprintf(conf_dir, sizeof(conf_dir), "%s/kvt-config-XXXXXX",
		 tmp && tmp[0] == '/' && strlen(tmp) < 32 ? tmp : "/tmp");
	if (!mkdtemp(conf_dir)) {
		fprintf(stderr, "mkdtemp: %m\n");
		exit(1);
	}
}

int config_test_end(const char *name)
{
	DIR *d = opendir(conf_dir);
	const struct dirent *de;

	/* Whatever files the test wrote: each test names its own. */
	while (d && (de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		unlinkat(dirfd(d), de->d_name, 0);
	}
	if (d)
		closedir(d);
	if (rmdir(conf_dir) < 0)
		fprintf(stderr, "cannot remove %s: %m\n", conf_dir);

	if (failures) {
		fprintf(stderr, "%s: %d check(s) failed\n", name, failures);
		return 1;
	}
	printf("%s: ok\n", name);
	return 0;
}
