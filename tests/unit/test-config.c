/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvtierd.conf: defaults, a file that sets every key, each kind of error
 * with the file:line it must be reported at (stderr is captured around each
 * load), size parsing, validation, and the dump read back as a config.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
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

static int failures;
static char dir[64];

#define CHECK(cond)                                                        \
	do {                                                               \
		if (!(cond)) {                                             \
			fprintf(stderr, "%s:%d: check failed: %s\n",       \
				__FILE__, __LINE__, #cond);                \
			failures++;                                        \
		}                                                          \
	} while (0)

#define CHECK_MSG(cond, ...)                                               \
	do {                                                               \
		if (!(cond)) {                                             \
			fprintf(stderr, "%s:%d: check failed: %s: ",       \
				__FILE__, __LINE__, #cond);                \
			fprintf(stderr, __VA_ARGS__);                      \
			fputc('\n', stderr);                               \
			failures++;                                        \
		}                                                          \
	} while (0)

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
	    c->max_output_bytes != (UINT64_C(8) << 20)) {
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
	"\n"
	"; tenants\n"
	"[tenants]\n"
	"default_quota = 3G\n"
	"unknown = refuse\n"
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
	    c->max_output_bytes != (UINT64_C(16) << 20)) {
		fprintf(stderr, "%s:%d: a key of the full file did not land\n",
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

	/* Loading over a loaded config replaces strings without leaking. */
	CHECK(config_defaults(&c) == 0);
	CHECK(load_captured(&c, write_conf("a.conf", full_conf), &err) == 0);
	free(err);
	CHECK(load_captured(&c, write_conf("b.conf", "[daemon]\nsocket = /x/y.sock\n"),
			    &err) == 0);
	free(err);
	CHECK(strcmp(c.socket_path, "/x/y.sock") == 0);
	CHECK(strcmp(c.runtime_dir, "/run/kvt-test") == 0);
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
		{ "size -1", "[pool]\n\n\ncapacity = -1\n", 4, "capacity" },
		{ "size 99999999999999999999G", "[pool]\ncapacity = 99999999999999999999G\n",
		  2, "capacity" },
		{ "size 2^64", "[pool]\nextent_size = 16777216T\n", 2, "extent_size" },
		{ "size empty", "[tenants]\n\ndefault_quota =\n", 3, "default_quota" },
		{ "size with a space", "[limits]\noutput_bytes = 16 M\n", 2, "output_bytes" },
		{ "size 1.5G", "[pool]\ncapacity = 1.5G\n", 2, "capacity" },
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
		{ "connections_per_uid 0", "[limits]\nconnections_per_uid = 0\n", 0, "limits" },
		{ "namespaces 0", "[limits]\nnamespaces_per_tenant = 0\n", 0, "limits" },
		{ "handles 0", "[limits]\nhandles_per_tenant = 0\n", 0, "limits" },
		{ "output_bytes below 2M", "[limits]\noutput_bytes = 1M\n", 0,
		  "output_bytes" },
	};
	static const char *good[] = {
		"[pool]\nextent_size = 2M\n",
		"[pool]\ncapacity = 1G\nextent_size = 1G\n",
		"[pool]\ncapacity = 64M\nextent_size = 64M\n",
		"[limits]\nkeys_per_request = 1\n",
		"[limits]\nkeys_per_request = 8192\n",
		"[limits]\noutput_bytes = 2M\n",
		"[limits]\nconnections = 1\nconnections_per_uid = 1\n"
		"namespaces_per_tenant = 1\nhandles_per_tenant = 1\n",
		"[limits]\nconnections = 4294967295\n",
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

static void test_parse_size(void)
{
	static const struct {
		const char *s;
		uint64_t v;
	} ok[] = {
		{ "0", 0 },
		{ "1", 1 },
		{ "4096", 4096 },
		{ "1K", 1024 },
		{ "1k", 1024 },
		{ "3KiB", 3072 },
		{ "3KB", 3072 },
		{ "512M", UINT64_C(512) << 20 },
		{ "5MiB", UINT64_C(5) << 20 },
		{ "2m", UINT64_C(2) << 20 },
		{ "64G", UINT64_C(68719476736) },
		{ "64GiB", UINT64_C(68719476736) },
		{ "1g", UINT64_C(1) << 30 },
		{ "4T", UINT64_C(4) << 40 },
		{ "1t", UINT64_C(1) << 40 },
		{ "2TiB", UINT64_C(2) << 40 },
		{ "16777215T", UINT64_C(16777215) << 40 },
		{ "17179869183G", UINT64_C(17179869183) << 30 },
		{ "18446744073709551615", UINT64_MAX },
	};
	static const struct {
		const char *s;
		int err; /* 0: any negative errno */
	} bad[] = {
		{ "", -EINVAL },
		{ "G", -EINVAL },
		{ "K1", -EINVAL },
		{ "12Q", -EINVAL },
		{ "-1", -EINVAL },
		{ "-0", -EINVAL },
		{ "1.5G", -EINVAL },
		{ "1 G", -EINVAL },
		{ "1GG", -EINVAL },
		{ "1GiBx", -EINVAL },
		{ "1KiBB", -EINVAL },
		{ "1P", -EINVAL },
		{ "0x10", -EINVAL },
		{ "99999999999999999999G", 0 },
		{ "18446744073709551616", 0 },
		{ "17179869184G", -ERANGE },
		{ "16777216T", -ERANGE },
		{ "18014398509481984K", -ERANGE },
		/* strtoull skips blanks and then takes a sign: still negative */
		{ " -1", -EINVAL },
		{ "\t-5G", 0 },
	};

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		uint64_t v = 0xdead;
		int r = parse_size(ok[i].s, &v);
		CHECK_MSG(r == 0 && v == ok[i].v, "parse_size(\"%s\") = %d, %" PRIu64,
			  ok[i].s, r, v);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		uint64_t v = 0xdead;
		int r = parse_size(bad[i].s, &v);
		CHECK_MSG(bad[i].err ? r == bad[i].err : r < 0,
			  "parse_size(\"%s\") = %d, %" PRIu64, bad[i].s, r, v);
		CHECK_MSG(v == 0xdead, "parse_size(\"%s\") wrote %" PRIu64,
			  bad[i].s, v);
	}
	uint64_t v;
	CHECK(parse_size(NULL, &v) == -EINVAL);
}

/*
 * --check-config prints the effective configuration; read back as a file
 * it must give that same configuration.
 */
static void check_dump_reload(int line, const char *text)
{
	struct config a, b;
	char *err;
	char dump_path[128];
	FILE *f;

	CHECK(config_defaults(&a) == 0);
	CHECK(load_captured(&a, write_conf("src.conf", text), &err) == 0);
	free(err);
	snprintf(dump_path, sizeof(dump_path), "%s/dump.conf", dir);
	f = fopen(dump_path, "we");
	CHECK(f != NULL);
	if (!f)
		return;
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
	    a.refuse_unknown != b.refuse_unknown ||
	    a.max_connections != b.max_connections ||
	    a.max_connections_per_uid != b.max_connections_per_uid ||
	    a.max_namespaces != b.max_namespaces || a.max_keys != b.max_keys ||
	    a.max_handles != b.max_handles ||
	    a.max_output_bytes != b.max_output_bytes) {
		fprintf(stderr,
			"%s:%d: the dump does not read back as the same configuration "
			"(load %d%s%s; log_level %d -> %d, capacity %" PRIu64 " -> %" PRIu64
			", default_quota %" PRIu64 " -> %" PRIu64 ", output_bytes %" PRIu64
			" -> %" PRIu64 ")\n",
			__FILE__, line, r, err[0] ? ": " : "", err, a.log_level,
			b.log_level, a.capacity, b.capacity, a.default_quota,
			b.default_quota, a.max_output_bytes, b.max_output_bytes);
		failures++;
	}
	free(err);
	config_free(&a);
	config_free(&b);
	unlink(dump_path);
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
	/* Sizes that are not whole MiB: a quota of 512K is not "0M" (which
	 * means the whole capacity). */
	check_dump_reload(__LINE__, "[tenants]\ndefault_quota = 512K\n");
	check_dump_reload(__LINE__, "[pool]\ncapacity = 300000000\n");
}

static void cleanup(void)
{
	static const char *names[] = { "full.conf", "enum.conf", "a.conf",
				       "b.conf",    "style.conf", "bad.conf",
				       "multi.conf", "good.conf", "edge.conf",
				       "src.conf",  "dump.conf", "stderr" };
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
	test_parse_size();
	test_dump();
	cleanup();

	if (failures) {
		fprintf(stderr, "test-config: %d check(s) failed\n", failures);
		return 1;
	}
	printf("test-config: ok\n");
	return 0;
}
