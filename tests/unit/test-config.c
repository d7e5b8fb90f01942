/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvtierd.conf: defaults, a file that sets every key, each kind of error
 * with the file:line it must be reported at (stderr is captured around each
 * load), size parsing, validation, tenant sections (members by number and by
 * name, quotas, own sockets, the rules between tenants), the NVMe tier's
 * [nvme] and [spill.NAME] sections (values, ranges, the rules between spill
 * files), and the dump read back as a config.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <pwd.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <syslog.h>
#include <unistd.h>

#include "config.h"
#include "check.h"

static char dir[64];

/* Write content to DIR/name; the path is returned in a static buffer. */
static const char *write_conf(const char *name, const char *content)
{
	static char path[128];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "we");
	if (!f || fputs(content, f) < 0 || fclose(f) != 0) {
		fprintf(stderr, "cannot write %s: %m\n", path);
		exit(1);
	}
	return path;
}

/* config_load with stderr captured into *ret_err (malloc'd). */
static int load_captured(struct config *c, const char *path, char **ret_err)
{
	char errpath[128];
	int fd, saved, r;

	snprintf(errpath, sizeof(errpath), "%s/stderr", dir);
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

static void check_defaults(int line, const struct config *c)
{
	if (c->quarantine_ms != 500 || c->log_level != LOG_INFO ||
	    c->capacity != (UINT64_C(256) << 20) ||
	    c->extent_size != (UINT64_C(64) << 20) ||
	    c->hugepages != HUGEPAGES_AUTO || c->lock != LOCK_AUTO ||
	    c->default_quota != 0 || c->refuse_unknown ||
	    c->max_connections != 1024 || c->max_connections_per_uid != 256 ||
	    c->max_namespaces != 64 || c->max_keys != 4096 ||
	    c->max_handles != 65536 ||
	    c->max_output_bytes != (UINT64_C(8) << 20) ||
	    c->numa != NUMA_AUTO || c->sysfs_root != NULL ||
	    c->n_tenants != 0 || c->tenants != NULL ||
	    c->nvme_engine != NVME_ENGINE_AUTO || c->nvme_queue_depth != 64 ||
	    c->writeback_high != 80 || c->writeback_low != 60 ||
	    c->n_spills != 0 || c->spills != NULL) {
		fprintf(stderr, "%s:%d: not the built-in defaults\n", __FILE__,
			line);
		failures++;
	}
}

static void test_defaults(void)
{
	struct config c;

	CHECK(config_defaults(&c) == 0);
	check_defaults(__LINE__, &c);
	if (geteuid() == 0) {
		CHECK(c.runtime_dir && strcmp(c.runtime_dir, "/run/kvtierd") == 0);
		CHECK(c.socket_path &&
		      strcmp(c.socket_path, "/run/kvtierd/kvtierd.sock") == 0);
	}
	/* The defaults are a valid configuration on their own. */
	char *err = NULL;
	CHECK(load_captured(&c, NULL, &err) == 0);
	CHECK_MSG(err[0] == 0, "%s", err);
	free(err);
	config_free(&c);
	CHECK(c.socket_path == NULL && c.runtime_dir == NULL);
	config_free(&c);

	/* Paths for an unprivileged user, in a child that drops to one. */
	if (geteuid() != 0)
		return;
	pid_t pid = fork();
	if (pid == 0) {
		int bad = 0;
		char want[64];
		if (setresgid(65534, 65534, 65534) < 0 ||
		    setresuid(65534, 65534, 65534) < 0)
			_exit(77);
		setenv("XDG_RUNTIME_DIR", "/run/user/65534", 1);
		bad |= config_defaults(&c) != 0;
		bad |= strcmp(c.runtime_dir, "/run/user/65534/kvtierd") != 0;
		bad |= strcmp(c.socket_path, "/run/user/65534/kvtierd/kvtierd.sock") != 0;
		config_free(&c);
		/* Not absolute: not trusted. */
		setenv("XDG_RUNTIME_DIR", "run/user/65534", 1);
		snprintf(want, sizeof(want), "/tmp/kvtierd-%u", 65534u);
		bad |= config_defaults(&c) != 0 || strcmp(c.runtime_dir, want) != 0;
		config_free(&c);
		unsetenv("XDG_RUNTIME_DIR");
		bad |= config_defaults(&c) != 0 || strcmp(c.runtime_dir, want) != 0;
		strcat(want, "/kvtierd.sock");
		bad |= strcmp(c.socket_path, want) != 0;
		config_free(&c);
		_exit(bad ? 1 : 0);
	}
	int status = 0;
	CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
	CHECK_MSG(WIFEXITED(status) &&
		  (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 77),
		  "unprivileged defaults wrong (status 0x%x)", status);
}

static const char full_conf[] =
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
	"socket = /run/kvt-test/inference.sock\n"
	"\n"
	"[tenant.Batch_jobs-2]\n"
	"gids = 3000\n"
	"\n"
	"[tenant.box]\n"
	"socket = /run/kvt-test/box.sock\n"
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
	"output_bytes = 16M\n";

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
	    c->max_output_bytes != (UINT64_C(16) << 20) ||
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
	    !t->socket || strcmp(t->socket, "/run/kvt-test/inference.sock")) {
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
	    t->quota != 1536 * 1024 || !t->socket ||
	    strcmp(t->socket, "/run/kvt-test/box.sock")) {
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
	CHECK_MSG(err[0] == 0, "%s", err);
	free(err);
	check_full(__LINE__, &c);
	config_free(&c);

	/* Every other enum value; a file changes only what it names. */
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
	for (size_t i = 0; i < sizeof(e) / sizeof(e[0]); i++) {
		CHECK(config_defaults(&c) == 0);
		path = write_conf("enum.conf", e[i].text);
		CHECK(load_captured(&c, path, &err) == 0);
		free(err);
		CHECK_MSG(e[i].hugepages < 0 ? c.hugepages == HUGEPAGES_AUTO
					     : (int)c.hugepages == e[i].hugepages,
			  "%s", e[i].text);
		CHECK_MSG(e[i].lock < 0 ? c.lock == LOCK_AUTO
					: (int)c.lock == e[i].lock,
			  "%s", e[i].text);
		CHECK_MSG(e[i].level < 0 ? c.log_level == LOG_INFO
					 : c.log_level == e[i].level,
			  "%s", e[i].text);
		CHECK_MSG(e[i].refuse < 0 ? !c.refuse_unknown
					  : c.refuse_unknown == (e[i].refuse == 1),
			  "%s", e[i].text);
		CHECK(c.capacity == (UINT64_C(256) << 20) && c.max_keys == 4096);
		config_free(&c);
	}

	/* [pool] numa, both ways, over each other. */
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

	/* Loading over a loaded config replaces strings without leaking. */
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

	/* Comments, blank lines, spaces and CRLF line ends. */
	CHECK(config_defaults(&c) == 0);
	path = write_conf("style.conf",
			  "\xef\xbb\xbf; BOM, then a comment\r\n"
			  "  [pool]  \r\n"
			  "capacity=1T\r\n"
			  "extent_size   =   1G   ; inline comment\r\n"
			  "# done\r\n");
	CHECK(load_captured(&c, path, &err) == 0);
	CHECK_MSG(err[0] == 0, "%s", err);
	free(err);
	CHECK(c.capacity == (UINT64_C(1) << 40));
	CHECK(c.extent_size == (UINT64_C(1) << 30));
	config_free(&c);
}

struct bad_case {
	const char *what;
	const char *text;
	int line;          /* where the error must be reported; 0: no line */
	const char *names; /* and a word the message must contain */
};

static void run_bad(int src_line, const struct bad_case *b)
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
			__FILE__, src_line, b->what, r, want,
			b->names ? " and " : "", b->names ? b->names : "", err);
		failures++;
	}
	free(err);
	config_free(&c);
}

static void test_errors(void)
{
	static const struct bad_case cases[] = {
		{ "unknown section", "# c\n\n[daemon]\nquarantine_ms = 1\n[bogus]\nkey = 1\n",
		  6, "unknown section [bogus]" },
		{ "unknown key", "[pool]\ncapacity = 1G\n\n; x\ncapacty = 2G\n", 5,
		  "capacty" },
		{ "unknown key in a later section",
		  "[pool]\ncapacity = 1G\n[limits]\nconnections = 5\nfds = 3\n", 5,
		  "fds" },
		{ "size 12Q", "[daemon]\n\n[pool]\ncapacity = 12Q\n", 4, "capacity" },
		{ "admin group unknown", "[daemon]\nlog_level = info\nadmin_groups = kvt-no-such-group\n",
		  3, "no such group" },
		{ "admin groups empty", "[daemon]\nadmin_groups = ,\n", 2, "admin_groups" },
		{ "eviction clock", "[pool]\ncapacity = 1G\neviction = clock\n", 3, "s3fifo" },
		{ "nvme_quota 1X", "[tenant.a]\nuids = 5\nnvme_quota = 1X\n", 3, "nvme_quota" },
		{ "default_nvme_quota -3", "[tenants]\ndefault_nvme_quota = -3\n", 2,
		  "default_nvme_quota" },
		{ "size -1", "[pool]\n\n\ncapacity = -1\n", 4, "capacity" },
		{ "size 99999999999999999999G", "[pool]\ncapacity = 99999999999999999999G\n",
		  2, "capacity" },
		{ "size 2^64", "[pool]\nextent_size = 16777216T\n", 2, "extent_size" },
		{ "size empty", "[tenants]\n\ndefault_quota =\n", 3, "default_quota" },
		{ "size with a space", "[limits]\noutput_bytes = 16 M\n", 2, "output_bytes" },
		{ "size 1.5Q", "[pool]\ncapacity = 1.5Q\n", 2, "capacity" },
		{ "bad enum hugepages", "[pool]\nhugepages = maybe\n", 2, "hugepages" },
		{ "bad enum lock", "\n[pool]\nlock = true\n", 3, "lock" },
		{ "bad enum case", "[pool]\nlock = YES\n", 2, "lock" },
		{ "bad enum unknown", "[tenants]\nunknown = deny\n", 2, "unknown" },
		{ "bad enum log_level", "[daemon]\nlog_level = verbose\n", 2, "log_level" },
		{ "bad number", "[limits]\n# a\n# b\nconnections = 12x\n", 4, "connections" },
		{ "negative number", "[limits]\nconnections_per_uid = -1\n", 2,
		  "connections_per_uid" },
		{ "number over u32", "[limits]\nhandles_per_tenant = 4294967296\n", 2,
		  "handles_per_tenant" },
		{ "number empty", "[daemon]\nquarantine_ms =\n", 2, "quarantine_ms" },
		{ "relative socket path", "[daemon]\nsocket = run/kvtierd.sock\n", 2,
		  "socket" },
		{ "relative runtime_dir", "[daemon]\n\nruntime_dir = ./run\n", 3,
		  "runtime_dir" },
		{ "socket path too long for sun_path",
		  "[daemon]\nsocket = /aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
		  2, "socket" },
		{ "syntax error", "[pool]\ncapacity = 1G\n\nthis is not a setting\n", 4,
		  "syntax" },
		{ "syntax error: unclosed section", "# a\n[pool\ncapacity = 1G\n", 2,
		  "syntax" },
		{ "key outside any section", "capacity = 1G\n", 1, NULL },
		{ "error after a long comment",
		  "# 0123456789012345678901234567890123456789012345678901234567890123456789"
		  "0123456789012345678901234567890123456789012345678901234567890123456789"
		  "0123456789012345678901234567890123456789\n"
		  "[pool]\nbogus = 1\n",
		  3, "bogus" },
		/* An over-long line is refused, at its own line. */
		{ "over-long line",
		  "[pool]\n# 0123456789012345678901234567890123456789012345678901234567890123456789"
		  "0123456789012345678901234567890123456789012345678901234567890123456789"
		  "0123456789012345678901234567890123456789012345678901234567890123456789\n"
		  "lock = no\n",
		  2, "longer than" },
		{ "bad enum numa", "[pool]\nnuma = on\n", 2, "numa" },
		{ "bad enum numa case", "[pool]\n\nnuma = Auto\n", 3, "numa" },
		{ "numa empty", "[pool]\nnuma =\n", 2, "numa" },
		{ "relative topology_root", "[pool]\ntopology_root = sys/fake\n", 2,
		  "topology_root" },
		{ "empty topology_root", "[pool]\n#\ntopology_root =\n", 3,
		  "topology_root" },
		/* [tenant.NAME] sections. */
		{ "tenant name with a blank", "[tenant.bad name]\nuids = 1000\n", 2,
		  "bad name" },
		{ "tenant name with a dot", "# t\n[tenant.a.b]\nuids = 1000\n", 3,
		  "a.b" },
		{ "tenant name with a slash", "[tenant.a/b]\ngids = 5\n", 2, "a/b" },
		{ "tenant name with a colon", "[tenant.uid:5]\ngids = 5\n", 2, "uid:5" },
		{ "tenant name not ASCII", "[tenant.caf\xc3\xa9]\ngids = 5\n", 2,
		  "tenant name" },
		{ "empty tenant name", "[tenant.]\nuids = 1000\n", 2, "tenant name" },
		{ "tenant name of 32 characters",
		  "[tenant.abcdefghijklmnopqrstuvwxyz012345]\n\nuids = 1000\n", 3,
		  "abcdefghijklmnopqrstuvwxyz012345" },
		{ "bad tenant name in a later key",
		  "[tenant.x+y]\n; c\nquota = 1G\n", 3, "x+y" },
		{ "[tenant] without a name", "[tenant]\nuids = 1000\n", 2,
		  "unknown section" },
		{ "unknown key in a tenant", "[tenant.a]\nuids = 1000\nquotas = 1G\n", 3,
		  "quotas" },
		{ "[tenants] key in a tenant", "[tenant.a]\nuids = 1000\n\nunknown = allow\n",
		  4, "unknown key 'unknown'" },
		{ "tenant key in [tenants]", "[tenants]\nuids = 1000\n", 2, "uids" },
		{ "unknown user", "[tenant.a]\nuids = 1000, kvt-no-such-user\n", 2,
		  "no such user" },
		{ "unknown user alone", "\n[tenant.a]\nuids = kvt-no-such-user\n", 3,
		  "kvt-no-such-user" },
		{ "unknown group", "[tenant.a]\ngids = root kvt-no-such-group\n", 2,
		  "no such user or group" },
		{ "uid with a suffix", "[tenant.a]\nuids = 1000x\n", 2, "uids" },
		{ "negative uid", "[tenant.a]\nuids = -1\n", 2, "uids" },
		{ "uid 2^32-1 (the invalid uid)", "[tenant.a]\nuids = 4294967295\n", 2,
		  "uids" },
		{ "uid over u32", "[tenant.a]\nuids = 4294967296\n", 2, "uids" },
		{ "gid over u32", "[tenant.a]\ngids = 99999999999999999999\n", 2, "gids" },
		{ "empty uids", "[tenant.a]\nuids =\n", 2, "uids" },
		{ "uids of separators only", "[tenant.a]\nuids = , ,\n", 2, "uids" },
		{ "empty gids", "[tenant.a]\ngids =\n", 2, "gids" },
		{ "bad quota", "[tenant.a]\nuids = 1000\nquota = 1.5GB2\n", 3, "quota" },
		{ "negative quota", "[tenant.a]\n\nquota = -1\nuids = 1000\n", 3, "quota" },
		{ "quota with a unit only", "[tenant.a]\nuids = 1000\nquota = G\n", 3,
		  "quota" },
		{ "quota over 2^64", "[tenant.a]\nuids = 1000\nquota = 16777216T\n", 3,
		  "quota" },
		{ "relative tenant socket", "[tenant.a]\nsocket = run/a.sock\n", 2,
		  "socket" },
		{ "tenant socket too long",
		  "[tenant.a]\nsocket = /aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
		  2, "socket" },
		{ "error in the second of two tenants",
		  "[tenant.a]\nuids = 1000\n[tenant.b]\nuids = 1001\ngids = 12q\n", 5,
		  "[tenant.b] gids" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		run_bad(__LINE__, &cases[i]);

	/* Several errors: each is reported at its own line. */
	struct config c;
	char *err;
	CHECK(config_defaults(&c) == 0);
	const char *path = write_conf("multi.conf",
				      "[pool]\ncapacity = 1X\n\n[limits]\nconnections = z\n");
	CHECK(load_captured(&c, path, &err) < 0);
	char w1[160], w2[160];
	snprintf(w1, sizeof(w1), "%s:2:", path);
	snprintf(w2, sizeof(w2), "%s:5:", path);
	CHECK_MSG(strstr(err, w1) && strstr(err, w2), "%s", err);
	free(err);
	config_free(&c);

	/* A file that is not there. */
	CHECK(config_defaults(&c) == 0);
	char missing[128];
	snprintf(missing, sizeof(missing), "%s/missing.conf", dir);
	CHECK(load_captured(&c, missing, &err) == -ENOENT);
	CHECK_MSG(strstr(err, missing) != NULL, "%s", err);
	free(err);
	config_free(&c);
}

static void test_validation(void)
{
	static const struct bad_case cases[] = {
		{ "extent_size below 2M", "[pool]\nextent_size = 1M\n", 0, "extent_size" },
		{ "extent_size 2M - 1", "[pool]\nextent_size = 2097151\n", 0, "extent_size" },
		{ "extent_size above 1G",
		  "[pool]\ncapacity = 8G\nextent_size = 2G\n", 0, "extent_size" },
		{ "capacity below extent_size",
		  "[pool]\ncapacity = 32M\nextent_size = 64M\n", 0, "capacity" },
		{ "keys_per_request 0", "[limits]\nkeys_per_request = 0\n", 0,
		  "keys_per_request" },
		{ "keys_per_request 9000", "[limits]\nkeys_per_request = 9000\n", 0,
		  "keys_per_request" },
		{ "keys_per_request 8193", "[limits]\nkeys_per_request = 8193\n", 0,
		  "keys_per_request" },
		{ "connections 0", "[limits]\nconnections = 0\n", 0, "limits" },
		{ "handshake_timeout_ms 99", "[daemon]\nhandshake_timeout_ms = 99\n", 0,
		  "handshake_timeout_ms" },
		{ "handshake_timeout_ms 600001", "[daemon]\nhandshake_timeout_ms = 600001\n", 0,
		  "handshake_timeout_ms" },
		{ "connections_per_uid 0", "[limits]\nconnections_per_uid = 0\n", 0, "limits" },
		{ "namespaces 0", "[limits]\nnamespaces_per_tenant = 0\n", 0, "limits" },
		{ "handles 0", "[limits]\nhandles_per_tenant = 0\n", 0, "limits" },
		{ "output_bytes below 2M", "[limits]\noutput_bytes = 1M\n", 0,
		  "output_bytes" },
		{ "output_bytes above 1G", "[limits]\noutput_bytes = 1025M\n", 0,
		  "output_bytes" },
		/* Twice it is 2^64: a check of "twice the limit" that wraps
		 * to 0 would close every connection at its first reply. */
		{ "output_bytes 2^63", "[limits]\noutput_bytes = 8388608T\n", 0,
		  "output_bytes" },
		{ "a tenant nobody can belong to", "[tenant.lonely]\nquota = 1G\n", 0,
		  "[tenant.lonely]" },
		{ "a tenant nobody can belong to, among others",
		  "[tenant.a]\nuids = 1000\n[tenant.b]\nquota = 0\n[tenant.c]\ngids = 7\n",
		  0, "[tenant.b]" },
		{ "a uid in two tenants",
		  "[tenant.a]\nuids = 1000 1001\n[tenant.b]\nuids = 7, 1001\n", 0,
		  "uid 1001" },
		{ "a uid in two tenants, once by name",
		  "[tenant.a]\nuids = root\n[tenant.b]\ngids = 5\n[tenant.c]\nuids = 9 0\n",
		  0, "uid 0" },
		{ "a uid in two tenants, named in the other",
		  "[tenant.one]\nuids = 1000\n[tenant.two]\nuids = 2000\n[tenant.one]\n"
		  "uids = 2000\n",
		  0, "uid 2000" },
		{ "two tenants on one socket",
		  "[tenant.a]\nsocket = /run/t/s.sock\n[tenant.b]\nuids = 5\n"
		  "socket = /run/t/s.sock\n",
		  0, "share socket" },
		{ "a tenant on the main socket",
		  "[daemon]\nsocket = /run/t/main.sock\n[tenant.a]\nsocket = /run/t/main.sock\n",
		  0, "main socket" },
		{ "a tenant on the main socket, set after it",
		  "[tenant.a]\nsocket = /run/t/main.sock\n[daemon]\nsocket = /run/t/main.sock\n",
		  0, "main socket" },
	};
	static const char *good[] = {
		"[pool]\nextent_size = 2M\n",
		"[pool]\ncapacity = 1G\nextent_size = 1G\n",
		"[pool]\ncapacity = 64M\nextent_size = 64M\n",
		"[limits]\nkeys_per_request = 1\n",
		"[limits]\nkeys_per_request = 8192\n",
		"[limits]\noutput_bytes = 2M\n",
		"[limits]\noutput_bytes = 1G\n",
		"[limits]\nconnections = 1\nconnections_per_uid = 1\n"
		"namespaces_per_tenant = 1\nhandles_per_tenant = 1\n",
		"[limits]\nconnections = 4294967295\n",
		"[tenant.a]\nuids = 1000\n",
		"[tenant.a]\ngids = 1000\n",
		"[tenant.a]\nsocket = /run/t/a.sock\n",
		/* A group may be in several tenants; sockets merely differ. */
		"[tenant.a]\ngids = 100\nsocket = /run/t/a.sock\n"
		"[tenant.b]\ngids = 100\nsocket = /run/t/b.sock\n",
		"[tenant.a]\nuids = 1000\n[tenant.b]\ngids = 1000\n",
		"[tenant.abcdefghijklmnopqrstuvwxyz01234]\nuids = 5\n",
		"[tenant.A-Z_a-z_0-9]\nuids = 5\n",
		"[tenant.-]\nuids = 5\n",
		"[tenant.a]\nuids = 5\nquota = 0\n",
		"[tenant.a]\nuids = 5\nquota = 1T\n",
		"[pool]\nnuma = off\ntopology_root = /\n",
	};
	struct config c;
	char *err;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		run_bad(__LINE__, &cases[i]);
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		CHECK(config_defaults(&c) == 0);
		int r = load_captured(&c, write_conf("good.conf", good[i]), &err);
		CHECK_MSG(r == 0, "%s returned %d: %s", good[i], r, err);
		free(err);
		config_free(&c);
	}
	/* The bounds land as written. */
	CHECK(config_defaults(&c) == 0);
	CHECK(load_captured(&c, write_conf("edge.conf",
					   "[pool]\ncapacity = 1G\nextent_size = 1G\n"
					   "[limits]\nconnections = 4294967295\n"),
			    &err) == 0);
	free(err);
	CHECK(c.extent_size == (UINT64_C(1) << 30) && c.capacity == c.extent_size);
	CHECK(c.max_connections == UINT32_MAX);
	config_free(&c);
}

/* Load text; 0 and the config in *c, or the error (c freed). */
static int load_text(struct config *c, const char *text, char **ret_err)
{
	int r;

	CHECK(config_defaults(c) == 0);
	r = load_captured(c, write_conf("tenant.conf", text), ret_err);
	if (r < 0)
		config_free(c);
	return r;
}

static bool has_ids(const uint32_t *ids, uint32_t n, const uint32_t *want,
		    uint32_t n_want)
{
	if (n != n_want)
		return false;
	for (uint32_t i = 0; i < n; i++)
		if (ids[i] != want[i])
			return false;
	return true;
}

static void test_tenants(void)
{
	struct config c;
	char *err, text[1024];
	int r, n;

	/* Names resolve to ids, in the order given, mixed with numbers and
	 * any mix of separators. */
	const struct passwd *pw = getpwnam("nobody");
	const struct group *gr = getgrnam("nogroup");
	uint32_t nobody = pw ? pw->pw_uid : 65534;
	uint32_t nogroup = gr ? gr->gr_gid : 65534;
	CHECK(nobody == 65534);
	r = load_text(&c,
		      "[tenant.named]\n"
		      "uids = root,1000  nobody\t42 , 7\n"
		      "gids = nogroup root,,5\n",
		      &err);
	CHECK_MSG(r == 0, "%s", err);
	free(err);
	if (r == 0) {
		const uint32_t u[] = { 0, 1000, nobody, 42, 7 };
		const uint32_t g[] = { nogroup, 0, 5 };
		const struct tenant_conf *t = config_tenant(&c, "named");
		CHECK(c.n_tenants == 1 && t);
		CHECK(t && has_ids(t->uids, t->n_uids, u, 5));
		CHECK(t && has_ids(t->gids, t->n_gids, g, 3));
		CHECK(t && t->quota == 0 && t->socket == NULL);
		config_free(&c);
	}

	/* A scalar key given twice keeps the last value, uids and gids add
	 * up (a long list may span lines); a section given twice is one
	 * tenant. */
	r = load_text(&c,
		      "[tenant.a]\nuids = 1 2 3\nquota = 1G\n[pool]\nlock = no\n"
		      "[tenant.a]\nuids = 4\nsocket = /run/t/a.sock\n",
		      &err);
	CHECK_MSG(r == 0, "%s", err);
	free(err);
	if (r == 0) {
		const uint32_t u[] = { 1, 2, 3, 4 };
		CHECK(c.n_tenants == 1);
		CHECK(has_ids(c.tenants[0].uids, c.tenants[0].n_uids, u, 4));
		CHECK(c.tenants[0].quota == (UINT64_C(1) << 30));
		CHECK(c.tenants[0].socket &&
		      strcmp(c.tenants[0].socket, "/run/t/a.sock") == 0);
		config_free(&c);
	}

	/* At most 64 uids and 64 gids. */
	for (int gids = 0; gids < 2; gids++) {
		for (int count = 64; count <= 65; count++) {
			n = snprintf(text, sizeof(text), "[tenant.many]\n%s =",
				     gids ? "gids" : "uids");
			for (int i = 0; i < count; i++)
				n += snprintf(text + n, sizeof(text) - (size_t)n,
					      " %d", i);
			snprintf(text + n, sizeof(text) - (size_t)n, "\n");
			r = load_text(&c, text, &err);
			if (count == 64) {
				CHECK_MSG(r == 0, "64 %s: %s", gids ? "gids" : "uids",
					  err);
				if (r == 0) {
					const struct tenant_conf *t = &c.tenants[0];
					uint32_t got = gids ? t->n_gids : t->n_uids;
					const uint32_t *ids = gids ? t->gids : t->uids;
					CHECK(got == 64 && ids[0] == 0 && ids[63] == 63);
					config_free(&c);
				}
			} else {
				char want[160];
				snprintf(want, sizeof(want), "tenant.conf:2:");
				CHECK_MSG(r < 0 && strstr(err, want) &&
						  strstr(err, gids ? "gids" : "uids"),
					  "65 %s: load %d: %s",
					  gids ? "gids" : "uids", r, err);
			}
			free(err);
		}
	}

	/* Up to 256 tenants. */
	for (int count = 256; count <= 257; count++) {
		static char big[16384];
		n = 0;
		for (int i = 0; i < count; i++)
			n += snprintf(big + n, sizeof(big) - (size_t)n,
				      "[tenant.t%d]\nuids = %d\n", i, 10000 + i);
		r = load_text(&c, big, &err);
		if (count == 256) {
			CHECK_MSG(r == 0, "256 tenants: %s", err);
			if (r == 0) {
				CHECK(c.n_tenants == 256);
				const struct tenant_conf *t = config_tenant(&c, "t255");
				CHECK(t && t->n_uids == 1 && t->uids[0] == 10255);
				config_free(&c);
			}
		} else {
			CHECK_MSG(r < 0 && strstr(err, "tenant.conf:514:") &&
					  strstr(err, "256 tenants"),
				  "257 tenants: load %d: %s", r, err);
		}
		free(err);
	}

	/*
	 * kvtierd.conf(5): a line is at most 199 bytes, and a longer one is
	 * refused.  A uids line whose cut
	 * falls on a blank must not come back as just its tail (inih hands
	 * the tail on as a continuation line, which replaces the value):
	 * that would move every uid before the cut out of the tenant without
	 * a word.
	 */
	n = snprintf(text, sizeof(text), "[tenant.long]\n");
	int start = n;
	n += snprintf(text + n, sizeof(text) - (size_t)n, "uids = 1");
	uint32_t listed = 1;
	while (n - start + 6 < 199 - 1) {
		n += snprintf(text + n, sizeof(text) - (size_t)n, " %u",
			      10000 + listed);
		listed++;
	}
	/* One more id that ends the line's first 199 bytes exactly. */
	text[n++] = ' ';
	while (n - start < 199)
		text[n++] = '7';
	listed++;
	n += snprintf(text + n, sizeof(text) - (size_t)n, " 2000 2001\n");
	listed += 2;
	CHECK(text[start + 199] == ' ' && strlen(text + start) > 200);
	r = load_text(&c, text, &err);
	CHECK_MSG(r < 0 || c.tenants[0].n_uids == listed,
		  "a %zu-byte uids line of %u ids loaded as %u id(s), starting with %u",
		  strlen(text + start) - 1, listed, c.tenants[0].n_uids,
		  c.tenants[0].uids[0]);
	if (r == 0)
		config_free(&c);
	free(err);
}

/*
 * [nvme] and [spill.NAME]: every value of every key, the ranges, the rules
 * between spill files, and what is left to the start (the files themselves).
 */
static void test_nvme(void)
{
	static const struct bad_case cases[] = {
		/* [nvme] values, reported at their line. */
		{ "bad engine", "[nvme]\nengine = uring\n", 2, "[nvme] engine = 'uring'" },
		{ "bad engine case", "[nvme]\n\nengine = IO_URING\n", 3, "engine" },
		{ "engine empty", "[nvme]\nengine =\n", 2, "engine" },
		{ "queue_depth not a number", "[nvme]\nqueue_depth = 64k\n", 2, "queue_depth" },
		{ "queue_depth negative", "[nvme]\n# c\nqueue_depth = -1\n", 3, "queue_depth" },
		{ "queue_depth over u32", "[nvme]\nqueue_depth = 4294967296\n", 2, "queue_depth" },
		{ "writeback_high 101", "[nvme]\nwriteback_high = 101\n", 2,
		  "[nvme] writeback_high = '101'" },
		{ "writeback_high 101%", "[nvme]\n\nwriteback_high = 101%\n", 3, "writeback_high" },
		{ "writeback_low 101", "[nvme]\nwriteback_low = 101\n", 2, "writeback_low" },
		{ "writeback_high -1", "[nvme]\nwriteback_high = -1\n", 2, "writeback_high" },
		{ "writeback_low -1", "[nvme]\nwriteback_low = -1\n", 2,
		  "expected a percentage from 0% to 100%" },
		{ "writeback_high 80%%x", "[nvme]\nwriteback_high = 80%%x\n", 2, "'80%%x'" },
		{ "writeback_high 80%x", "[nvme]\nwriteback_high = 80%x\n", 2, "'80%x'" },
		{ "writeback_low 80%%", "[nvme]\nwriteback_low = 80%%\n", 2, "writeback_low" },
		{ "writeback_high with a blank before %", "[nvme]\nwriteback_high = 80 %\n", 2,
		  "writeback_high" },
		{ "writeback_high as a fraction", "[nvme]\nwriteback_high = 0.8\n", 2,
		  "writeback_high" },
		{ "writeback_low with a sign", "[nvme]\nwriteback_low = +60\n", 2, "writeback_low" },
		{ "writeback_low only %", "[nvme]\nwriteback_low = %\n", 2, "writeback_low" },
		{ "writeback_high empty", "[nvme]\nwriteback_high =\n", 2, "writeback_high" },
		{ "writeback_high past unsigned long",
		  "[nvme]\nwriteback_high = 99999999999999999999999\n", 2, "writeback_high" },
		{ "unknown key in [nvme]", "[nvme]\nengine = auto\nqueue = 8\n", 3,
		  "unknown key 'queue' in [nvme]" },
		{ "spill key in [nvme]", "[nvme]\npath = /srv/spill0\n", 2,
		  "unknown key 'path' in [nvme]" },
		{ "[nvme] key in a spill section",
		  "[spill.a]\npath = /srv/a\ncapacity = 64G\nengine = threads\n", 4,
		  "unknown key 'engine' in [spill.a]" },
		/* [spill.NAME]: names, keys and values, reported at their line. */
		{ "bad spill name", "[spill.a b]\npath = /srv/s\ncapacity = 64G\n", 2,
		  "spill file name 'a b'" },
		{ "spill name with a dot", "# s\n[spill.nvme.0]\npath = /srv/s\n", 3, "nvme.0" },
		{ "spill name with a slash", "[spill.nvme/0]\ncapacity = 64G\n", 2, "nvme/0" },
		{ "spill name not ASCII", "[spill.caf\xc3\xa9]\ncapacity = 64G\n", 2,
		  "spill file name" },
		{ "empty spill name", "[spill.]\npath = /srv/s\n", 2, "spill file name ''" },
		{ "spill name of 32 characters",
		  "[spill.abcdefghijklmnopqrstuvwxyz012345]\n\npath = /srv/s\n", 3,
		  "abcdefghijklmnopqrstuvwxyz012345" },
		{ "[spill] without a name", "[spill]\npath = /srv/s\n", 2, "unknown section [spill]" },
		{ "unknown key in [spill.X]", "[spill.x]\npath = /srv/s\nsize = 64G\n", 3,
		  "unknown key 'size' in [spill.x] (known: path, capacity)" },
		{ "tenant key in [spill.X]", "[spill.x]\n\n\nquota = 1G\n", 4,
		  "unknown key 'quota' in [spill.x]" },
		{ "relative spill path", "[spill.x]\npath = spill0\ncapacity = 64G\n", 2,
		  "[spill.x] path = 'spill0'" },
		{ "spill path too long",
		  "[spill.x]\ncapacity = 64G\npath = /aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
		  3, "[spill.x] path" },
		{ "empty spill path", "[spill.x]\npath =\ncapacity = 64G\n", 2, "path" },
		{ "spill capacity with a blank", "[spill.x]\npath = /srv/s\ncapacity = 64 G\n", 3,
		  "[spill.x] capacity = '64 G'" },
		{ "spill capacity negative", "[spill.x]\npath = /srv/s\ncapacity = -1\n", 3,
		  "capacity" },
		{ "spill capacity 1.5Q", "[spill.x]\ncapacity = 1.5Q\npath = /srv/s\n", 2,
		  "capacity" },
		{ "spill capacity over 2^64", "[spill.x]\npath = /srv/s\ncapacity = 16777216T\n", 3,
		  "capacity" },
		{ "error in the second of two spill files",
		  "[spill.a]\npath = /srv/a\ncapacity = 64G\n[spill.b]\npath = /srv/b\n"
		  "capacity = 64Q\n",
		  6, "[spill.b] capacity" },
		/* Rules checked once the file has parsed: the file, no line. */
		{ "queue_depth 0", "[nvme]\nqueue_depth = 0\n", 0,
		  "[nvme] queue_depth must be 1..4096" },
		{ "queue_depth 5000", "[nvme]\nqueue_depth = 5000\n", 0,
		  "[nvme] queue_depth must be 1..4096" },
		{ "queue_depth 4097", "[nvme]\nqueue_depth = 4097\n", 0, "queue_depth" },
		{ "writeback_low above writeback_high",
		  "[nvme]\nwriteback_high = 60%\nwriteback_low = 70%\n", 0,
		  "[nvme] writeback_low (70%) must not exceed writeback_high (60%)" },
		{ "writeback_low above the default writeback_high", "[nvme]\nwriteback_low = 81\n",
		  0, "writeback_low (81%) must not exceed writeback_high (80%)" },
		{ "writeback_high below the default writeback_low", "[nvme]\nwriteback_high = 59\n",
		  0, "writeback_low (60%) must not exceed writeback_high (59%)" },
		{ "writeback_high 0 with the default low", "[nvme]\nwriteback_high = 0%\n", 0,
		  "writeback_low" },
		{ "spill without a path", "[spill.a]\ncapacity = 64G\n", 0,
		  "[spill.a] needs both path and capacity" },
		{ "spill without a capacity", "[spill.b]\npath = /srv/b\n", 0,
		  "[spill.b] needs both path and capacity" },
		{ "spill of capacity 0", "[spill.c]\npath = /srv/c\ncapacity = 0\n", 0,
		  "[spill.c] needs both path and capacity" },
		{ "spill without a capacity, among others",
		  "[spill.a]\npath = /srv/a\ncapacity = 1T\n[spill.b]\npath = /srv/b\n"
		  "[spill.c]\npath = /srv/c\ncapacity = 1T\n",
		  0, "[spill.b] needs both" },
		{ "two spills with the same path",
		  "[spill.a]\npath = /srv/s\ncapacity = 64G\n[spill.b]\npath = /srv/s\n"
		  "capacity = 1T\n",
		  0, "[spill.a] and [spill.b] name the same file /srv/s" },
		{ "the same path, first and third of three",
		  "[spill.a]\npath = /srv/s\ncapacity = 64G\n[spill.b]\npath = /srv/t\n"
		  "capacity = 64G\n[spill.c]\ncapacity = 64G\npath = /srv/s\n",
		  0, "[spill.a] and [spill.c] name the same file" },
		{ "the same path, set by a later line",
		  "[spill.a]\npath = /srv/a\ncapacity = 64G\n[spill.b]\npath = /srv/b\n"
		  "capacity = 64G\n[spill.a]\npath = /srv/b\n",
		  0, "same file /srv/b" },
	};
	static const char *good[] = {
		"[nvme]\n",
		"[nvme]\nqueue_depth = 1\n",
		"[nvme]\nqueue_depth = 4096\n",
		"[nvme]\nwriteback_low = 80\n", /* equal to the default high */
		"[nvme]\nwriteback_high = 60%\n", /* equal to the default low */
		/* The 64M minimum is the start's to check, against the file. */
		"[spill.a]\npath = /srv/a\ncapacity = 1\n",
		/* Two spellings of one file: refused at start (device and
		 * inode), not by the parser. */
		"[spill.a]\npath = /srv/a\ncapacity = 64M\n[spill.b]\npath = /srv//a\n"
		"capacity = 64M\n",
		/* A spill file may share a tenant's name. */
		"[tenant.a]\nuids = 5\n[spill.a]\npath = /srv/a\ncapacity = 64M\n",
		"[spill.abcdefghijklmnopqrstuvwxyz01234]\npath = /srv/a\ncapacity = 64M\n",
		"[spill.A-Z_a-z_0-9]\npath = /srv/a\ncapacity = 64M\n",
		"[spill.-]\npath = /srv/a\ncapacity = 64M\n",
	};
	/* Values as they land; -1: the default. */
	static const struct {
		const char *text;
		int engine, queue_depth, high, low;
	} ok[] = {
		{ "[nvme]\nengine = auto\n", NVME_ENGINE_AUTO, -1, -1, -1 },
		{ "[nvme]\nengine = io_uring\n", NVME_ENGINE_URING, -1, -1, -1 },
		{ "[nvme]\nengine = threads\n", NVME_ENGINE_THREADS, -1, -1, -1 },
		{ "[nvme]\nqueue_depth = 1\n", -1, 1, -1, -1 },
		{ "[nvme]\nqueue_depth = 4096\n", -1, 4096, -1, -1 },
		{ "[nvme]\nqueue_depth = 0064\n", -1, 64, -1, -1 },
		{ "[nvme]\nwriteback_high = 0%\nwriteback_low = 0%\n", -1, -1, 0, 0 },
		{ "[nvme]\nwriteback_high = 100%\nwriteback_low = 100%\n", -1, -1, 100, 100 },
		{ "[nvme]\nwriteback_high = 100\nwriteback_low = 99%\n", -1, -1, 100, 99 },
		{ "[nvme]\nwriteback_high = 70\nwriteback_low = 70\n", -1, -1, 70, 70 },
		{ "[nvme]\nwriteback_high = 95%\n", -1, -1, 95, -1 },
		{ "[nvme]\nwriteback_low = 5\n", -1, -1, -1, 5 },
		/* The last value of a key counts. */
		{ "[nvme]\nqueue_depth = 8\nqueue_depth = 16\nengine = threads\n[nvme]\n"
		  "engine = io_uring\n",
		  NVME_ENGINE_URING, 16, -1, -1 },
	};
	struct config c;
	char *err;
	int r;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		run_bad(__LINE__, &cases[i]);
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		CHECK(config_defaults(&c) == 0);
		r = load_captured(&c, write_conf("good.conf", good[i]), &err);
		CHECK_MSG(r == 0, "%s returned %d: %s", good[i], r, err);
		free(err);
		config_free(&c);
	}
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		CHECK(config_defaults(&c) == 0);
		r = load_captured(&c, write_conf("good.conf", ok[i].text), &err);
		CHECK_MSG(r == 0 && err[0] == 0, "%s returned %d: %s", ok[i].text, r, err);
		free(err);
		CHECK_MSG((int)c.nvme_engine == (ok[i].engine < 0 ? NVME_ENGINE_AUTO : ok[i].engine),
			  "%s: engine %d", ok[i].text, (int)c.nvme_engine);
		CHECK_MSG(c.nvme_queue_depth ==
				  (uint32_t)(ok[i].queue_depth < 0 ? 64 : ok[i].queue_depth),
			  "%s: queue_depth %u", ok[i].text, c.nvme_queue_depth);
		CHECK_MSG(c.writeback_high == (uint32_t)(ok[i].high < 0 ? 80 : ok[i].high),
			  "%s: writeback_high %u", ok[i].text, c.writeback_high);
		CHECK_MSG(c.writeback_low == (uint32_t)(ok[i].low < 0 ? 60 : ok[i].low),
			  "%s: writeback_low %u", ok[i].text, c.writeback_low);
		CHECK(c.n_spills == 0 && c.spills == NULL);
		config_free(&c);
	}

	/* A section given twice is one spill file, in the place of its first
	 * appearance; keys come in any order and the last value counts. */
	r = load_text(&c,
		      "[spill.b]\ncapacity = 1G\n[spill.a]\npath = /srv/a\ncapacity = 2G\n"
		      "[nvme]\nengine = threads\n[spill.b]\npath = /srv/b1\npath = /srv/b2\n"
		      "capacity = 3G\n",
		      &err);
	CHECK_MSG(r == 0, "%s", err);
	free(err);
	if (r == 0) {
		CHECK(c.n_spills == 2);
		CHECK(c.n_spills == 2 && !strcmp(c.spills[0].name, "b") &&
		      c.spills[0].path && !strcmp(c.spills[0].path, "/srv/b2") &&
		      c.spills[0].capacity == (UINT64_C(3) << 30));
		CHECK(c.n_spills == 2 && !strcmp(c.spills[1].name, "a") &&
		      c.spills[1].path && !strcmp(c.spills[1].path, "/srv/a") &&
		      c.spills[1].capacity == (UINT64_C(2) << 30));
		CHECK(c.nvme_engine == NVME_ENGINE_THREADS);
		config_free(&c);
		CHECK(c.spills == NULL && c.n_spills == 0);
	}

	/* Up to 64 spill files; the 65th is refused at its first key. */
	for (int count = 64; count <= 65; count++) {
		static char big[8192];
		int n = 0;
		for (int i = 0; i < count; i++)
			n += snprintf(big + n, sizeof(big) - (size_t)n,
				      "[spill.s%d]\npath = /srv/spill%d\ncapacity = 64M\n", i, i);
		CHECK(config_defaults(&c) == 0);
		r = load_captured(&c, write_conf("nvme.conf", big), &err);
		if (count == 64) {
			CHECK_MSG(r == 0, "64 spill files: %s", err);
			CHECK(r < 0 || (c.n_spills == 64 && !strcmp(c.spills[63].name, "s63") &&
					!strcmp(c.spills[63].path, "/srv/spill63")));
		} else {
			/* [spill.s64] is line 193, its first key line 194. */
			CHECK_MSG(r < 0 && strstr(err, "nvme.conf:194:") &&
					  strstr(err, "more than 64 spill files"),
				  "65 spill files: load %d: %s", r, err);
		}
		free(err);
		config_free(&c);
	}

	/* Sizes follow the one grammar (tests/unit/test-size.c has it whole). */
	struct config sc;
	char *serr = NULL;
	int sr = load_text(&sc, "[spill.x]\npath = /srv/s\ncapacity = 1.5T\n[pool]\ncapacity = 4096MiB\n",
			  &serr);
	CHECK_MSG(sr == 0, "fractional sizes: %s", serr);
	CHECK(sr < 0 || (sc.spills[0].capacity == UINT64_C(3) << 39 &&
			sc.capacity == UINT64_C(4) << 30));
	free(serr);
	if (sr == 0)
		config_free(&sc);
}

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
		    x->nvme_quota != y->nvme_quota ||
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

	snprintf(dump_path, sizeof(dump_path), "%s/dump.conf", dir);
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
	    a.max_handles != b.max_handles ||
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
	CHECK_MSG(r == 0, "line %d: the source does not load: %s", line, err);
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

	/*
	 * Members named in the file are dumped as numbers, which can be much
	 * longer than the names ("u01" for uid 2000001): the largest valid
	 * lists (64 uids and 64 gids of ten digits) must still read back,
	 * since --check-config promises a valid configuration file.
	 */
	struct config c;
	char *err;
	CHECK(config_defaults(&c) == 0);
	int r = load_captured(&c, write_conf("src.conf",
					     "[tenant.wide]\nuids = 1\ngids = 1\n"),
			      &err);
	CHECK_MSG(r == 0, "%s", err);
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

static void cleanup(void)
{
	static const char *names[] = { "full.conf", "enum.conf", "a.conf",
				       "b.conf",    "style.conf", "bad.conf",
				       "multi.conf", "good.conf", "edge.conf",
				       "src.conf",  "dump.conf", "tenant.conf",
				       "nvme.conf", "stderr" };
	char path[128];

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		unlink(path);
	}
	if (rmdir(dir) < 0)
		fprintf(stderr, "cannot remove %s: %m\n", dir);
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");

	/* Plain "kvtierd: error: ..." lines, whatever runs the test. */
	unsetenv("JOURNAL_STREAM");
	snprintf(dir, sizeof(dir), "%s/kvt-config-XXXXXX",
		 tmp && tmp[0] == '/' && strlen(tmp) < 32 ? tmp : "/tmp");
	if (!mkdtemp(dir)) {
		fprintf(stderr, "mkdtemp: %m\n");
		return 1;
	}

	test_defaults();
	test_full();
	test_errors();
	test_validation();
	test_tenants();
	test_nvme();
	test_dump();
	cleanup();

	if (failures) {
		fprintf(stderr, "test-config: %d check(s) failed\n", failures);
		return 1;
	}
	printf("test-config: ok\n");
	return 0;
}
