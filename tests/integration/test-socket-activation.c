/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Socket activation, as kvtierd.socket does it, with systemd-socket-activate
 * in systemd's place: it listens, and starts kvtierd on the first connection
 * with the listening socket as fd 3.  The daemon must serve that socket (not
 * the one its configuration names), serve clients beyond the one that woke
 * it, and leave the socket file alone when it stops, since systemd keeps
 * listening on it for the next start.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static struct daemon d;
static char config_socket[192];

static void cleanup(void)
{
	if (d.pid > 0) {
		kill(d.pid, SIGKILL);
		waitpid(d.pid, NULL, 0);
		d.pid = 0;
	}
	if (config_socket[0])
		unlink(config_socket);
	if (d.dir[0])
		daemon_cleanup(&d);
}

static bool find_in_path(const char *name, char *ret, size_t size)
{
	const char *path = getenv("PATH");
	char buf[4096];

	snprintf(buf, sizeof(buf), "%s", path && *path ? path : "/usr/bin:/bin");
	for (char *save = NULL, *dir = strtok_r(buf, ":", &save); dir;
	     dir = strtok_r(NULL, ":", &save)) {
		snprintf(ret, size, "%s/%s", dir, name);
		if (access(ret, X_OK) == 0)
			return true;
	}
	return false;
}

static bool log_contains(const char *what)
{
	char line[1024];
	bool found = false;
	FILE *f = fopen(d.log, "re");

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, what) != NULL;
	fclose(f);
	return found;
}

int main(void)
{
	static uint8_t blk[4][32768], back[32768];
	char activate[512];
	struct stat st;
	FILE *f;

	if (!find_in_path("systemd-socket-activate", activate, sizeof(activate))) {
		printf("SKIP: systemd-socket-activate is not installed (apt-get install systemd)\n");
		return KVT_TEST_SKIP;
	}
	const char *kvtierd = getenv("KVTIERD");
	if (!kvtierd || !*kvtierd)
		kvtierd = "kvtierd";

	atexit(cleanup);
	/* A daemon that never answers fails the test in seconds, not after
	 * the client's default reply deadline. */
	setenv("KVTIER_TIMEOUT_MS", "10000", 0);
	snprintf(d.dir, sizeof(d.dir), "/tmp/kvt-activate-XXXXXX");
	CHECK(mkdtemp(d.dir), "mkdtemp");
	snprintf(d.socket, sizeof(d.socket), "%s/activated.sock", d.dir);
	snprintf(d.config, sizeof(d.config), "%s/kvtierd.conf", d.dir);
	snprintf(d.log, sizeof(d.log), "%s/kvtierd.log", d.dir);
	/* The configuration names another socket: only the passed one may be
	 * served. */
	snprintf(config_socket, sizeof(config_socket), "%s/configured.sock", d.dir);
	f = fopen(d.config, "we");
	CHECK(f, "cannot write %s", d.config);
	fprintf(f, "[daemon]\nsocket = %s\nruntime_dir = %s\n[pool]\ncapacity = 16M\nextent_size = 2M\n",
		config_socket, d.dir);
	fclose(f);

	d.pid = fork();
	CHECK(d.pid >= 0, "fork");
	if (d.pid == 0) {
		int fd = open(d.log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (fd < 0)
			_exit(127);
		dup2(fd, 1);
		dup2(fd, 2);
		/* It execs the daemon in place, so this pid becomes kvtierd's. */
		execl(activate, "systemd-socket-activate", "-l", d.socket, kvtierd, "--config",
		      d.config, "--verbose", (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 1500 && lstat(d.socket, &st) < 0; i++) {
		if (waitpid(d.pid, NULL, WNOHANG) != 0) {
			d.pid = 0;
			CHECK(0, "systemd-socket-activate exited (log: %s)", d.log);
		}
		usleep(20000);
	}
	CHECK(lstat(d.socket, &st) == 0 && S_ISSOCK(st.st_mode),
	      "systemd-socket-activate listens on %s", d.socket);

	/* This connection starts the daemon, which then answers its HELLO. */
	kvt_client *c = client_connect(&d, "activated");
	CHECK(log_contains("socket passed by systemd"),
	      "kvtierd logs that it serves the passed socket (log: %s)", d.log);
	CHECK(lstat(config_socket, &st) < 0 && errno == ENOENT,
	      "kvtierd did not bind the configured socket %s as well", config_socket);

	kvt_ns *ns = engine_ns(c, "tiny", 1);
	uint8_t keys[4 * 32];
	engine_keys(11, 64, 0, 0, keys, 4);
	const void *srcs[4];
	for (int i = 0; i < 4; i++) {
		memset(blk[i], 'k' + i, sizeof(blk[i]));
		srcs[i] = blk[i];
	}
	CHECK(kvt_store(ns, 0, keys, 4, srcs, NULL) == 4, "store: %s", kvt_client_error(c));
	void *dst[1] = {back};
	CHECK(kvt_load(ns, 0, keys + 3 * 32, 1, dst, NULL) == 1, "load: %s", kvt_client_error(c));
	CHECK(!memcmp(back, blk[3], sizeof(back)), "byte-exact through the activated socket");

	/* Later connections are accepted on the same socket. */
	kvt_client *c2 = client_connect(&d, "second");
	kvt_ns *ns2 = engine_ns(c2, "tiny", 1);
	memset(back, 0, sizeof(back));
	CHECK(kvt_load(ns2, 0, keys + 1 * 32, 1, dst, NULL) == 1, "load on a second connection: %s",
	      kvt_client_error(c2));
	CHECK(!memcmp(back, blk[1], sizeof(back)), "byte-exact on a second connection");
	kvt_ns_close(ns2);
	kvt_client_free(c2);
	kvt_ns_close(ns);
	kvt_client_free(c);

	daemon_stop(&d);
	CHECK(lstat(d.socket, &st) == 0 && S_ISSOCK(st.st_mode),
	      "the passed socket's file is still there after the daemon stopped");
	return 0;
}
