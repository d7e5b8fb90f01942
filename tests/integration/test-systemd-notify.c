/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvtierd speaks systemd's notification protocol, checked against a real
 * NOTIFY_SOCKET listener instead of systemd: READY=1 only once its socket
 * answers, a STATUS= line, WATCHDOG=1 again and again at the interval that
 * WATCHDOG_USEC asks for, STOPPING=1 on SIGTERM, and the ledger's memfd
 * handed to the file descriptor store (FDSTORE=1 with FDNAME=, one
 * descriptor each, never a descriptor with anything else).  Every datagram must
 * come from the daemon's own pid, the only sender that systemd's default
 * NotifyAccess=main accepts.
 *
 * Timing is checked only against generous deadlines: the watchdog interval
 * here is 400 ms, so the pings come every 200-300 ms, and the test asks for
 * three of them within ten seconds.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define WATCHDOG_USEC 400000
#define WATCHDOG_PINGS 3
#define DEADLINE_MS 10000

static struct daemon d;
static char notify_path[192];

static void cleanup(void)
{
	if (d.pid > 0) {
		kill(d.pid, SIGKILL);
		waitpid(d.pid, NULL, 0);
		d.pid = 0;
	}
	if (notify_path[0])
		unlink(notify_path);
	if (d.dir[0])
		daemon_cleanup(&d);
}

static int notify_listen(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int one = 1;
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	CHECK(fd >= 0, "socket: %s", strerror(errno));
	CHECK(strlen(path) < sizeof(sa.sun_path), "notify socket path too long");
	strcpy(sa.sun_path, path);
	CHECK(bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0, "bind %s: %s", path,
	      strerror(errno));
	/* The kernel then attaches the sender's credentials to each datagram,
	 * as systemd has it do on its own notification socket. */
	CHECK(setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) == 0, "SO_PASSCRED");
	return fd;
}

/* One datagram within timeout_ms: 1 and its text, sender and how many
 * descriptors came with it (closed here), or 0. */
static int notify_recv(int fd, int timeout_ms, char *buf, size_t size, pid_t *ret_pid,
		       int *ret_fds)
{
	struct pollfd p = {fd, POLLIN, 0};
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(struct ucred)) + CMSG_SPACE(8 * sizeof(int))];
	} ctl;
	struct iovec iov = {buf, size - 1};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = &ctl,
			    .msg_controllen = sizeof(ctl)};

	if (poll(&p, 1, timeout_ms) <= 0)
		return 0;
	ssize_t n = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	if (n < 0 && errno == EAGAIN)
		return 0;
	CHECK(n >= 0, "recvmsg: %s", strerror(errno));
	CHECK(!(mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)), "a notification was truncated");
	buf[n] = 0;
	*ret_pid = 0;
	*ret_fds = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
			struct ucred uc;
			memcpy(&uc, CMSG_DATA(c), sizeof(uc));
			*ret_pid = uc.pid;
		} else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
			for (int i = 0; i < k; i++) {
				int got;
				memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
				close(got);
			}
			*ret_fds += k;
		}
	return 1;
}

static void spawn(void)
{
	char pid[32], usec[32];

	d.pid = fork();
	CHECK(d.pid >= 0, "fork");
	if (d.pid == 0) {
		int fd = open(d.log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (fd < 0)
			_exit(127);
		dup2(fd, 1);
		dup2(fd, 2);
		/* What systemd sets for a Type=notify service with WatchdogSec=;
		 * the pid is this process's own, which exec keeps. */
		snprintf(pid, sizeof(pid), "%d", (int)getpid());
		snprintf(usec, sizeof(usec), "%d", WATCHDOG_USEC);
		unsetenv("LISTEN_FDS");
		unsetenv("LISTEN_PID");
		unsetenv("LISTEN_FDNAMES");
		setenv("NOTIFY_SOCKET", notify_path, 1);
		setenv("WATCHDOG_USEC", usec, 1);
		setenv("WATCHDOG_PID", pid, 1);
		const char *bin = getenv("KVTIERD");
		execl(bin && *bin ? bin : "kvtierd", "kvtierd", "--config", d.config, "--verbose",
		      (char *)NULL);
		_exit(127);
	}
}

/* Each datagram holds one or more newline-separated assignments. */
struct seen {
	bool ready, stopping;
	bool ledger; /* the ledger's root went to the fd store */
	unsigned watchdog, fdstore;
	char status[256];
	uint64_t first_ping_ms, last_ping_ms;
};

static void parse(const struct daemon *dm, pid_t daemon_pid, char *msg, pid_t sender, int fds,
		  struct seen *s)
{
	CHECK(sender == daemon_pid, "a notification came from pid %d, not from the daemon (%d): '%s'",
	      (int)sender, (int)daemon_pid, msg);
	/* A descriptor for the store comes alone, named. */
	bool store = strstr(msg, "FDSTORE=1\nFDNAME=") == msg;
	CHECK(store ? fds == 1 : fds == 0, "%d descriptor(s) with '%s'", fds, msg);
	if (store) {
		s->fdstore++;
		s->ledger |= !strcmp(msg + strlen("FDSTORE=1\nFDNAME="), "ledger");
		return;
	}
	for (char *save = NULL, *line = strtok_r(msg, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		if (!strcmp(line, "READY=1")) {
			CHECK(!s->ready, "READY=1 was sent twice");
			s->ready = true;
			/* Right now, not eventually: a client must be served the
			 * moment systemd considers the daemon started. */
			kvt_client *c = client_connect(dm, "notify-probe");
			CHECK(kvt_client_connected(c), "a client is served right after READY=1");
			kvt_client_free(c);
		} else if (!strncmp(line, "STATUS=", 7)) {
			snprintf(s->status, sizeof(s->status), "%s", line + 7);
		} else if (!strcmp(line, "WATCHDOG=1")) {
			uint64_t t = now_ms();
			if (!s->watchdog)
				s->first_ping_ms = t;
			s->last_ping_ms = t;
			s->watchdog++;
		} else if (!strcmp(line, "STOPPING=1")) {
			s->stopping = true;
		}
	}
}

int main(void)
{
	struct seen s = {0};
	char msg[4096];
	pid_t sender;
	int fds;
	FILE *f;

	atexit(cleanup);
	/* A daemon that never answers fails the test in seconds, not after
	 * the client's default reply deadline. */
	setenv("KVTIER_TIMEOUT_MS", "10000", 0);
	snprintf(d.dir, sizeof(d.dir), "/tmp/kvt-notify-XXXXXX");
	CHECK(mkdtemp(d.dir), "mkdtemp");
	snprintf(d.socket, sizeof(d.socket), "%s/kvtierd.sock", d.dir);
	snprintf(d.config, sizeof(d.config), "%s/kvtierd.conf", d.dir);
	snprintf(d.log, sizeof(d.log), "%s/kvtierd.log", d.dir);
	snprintf(notify_path, sizeof(notify_path), "%s/notify", d.dir);
	f = fopen(d.config, "we");
	CHECK(f, "cannot write %s", d.config);
	fprintf(f, "[daemon]\nsocket = %s\nruntime_dir = %s\n[pool]\ncapacity = 16M\nextent_size = 2M\n",
		d.socket, d.dir);
	fclose(f);

	int nfd = notify_listen(notify_path);
	spawn();

	uint64_t deadline = now_ms() + DEADLINE_MS;
	while ((!s.ready || !s.status[0] || s.watchdog < WATCHDOG_PINGS) && now_ms() < deadline) {
		if (waitpid(d.pid, NULL, WNOHANG) != 0) {
			d.pid = 0;
			CHECK(0, "kvtierd exited (log: %s)", d.log);
		}
		if (notify_recv(nfd, 100, msg, sizeof(msg), &sender, &fds))
			parse(&d, d.pid, msg, sender, fds, &s);
	}
	CHECK(s.ledger, "the ledger's memfd was not given to the fd store (FDSTORE=1, FDNAME=ledger)");
	CHECK(s.ready, "no READY=1 within %d ms", DEADLINE_MS);
	CHECK(s.status[0], "no STATUS= line within %d ms", DEADLINE_MS);
	CHECK(s.watchdog >= WATCHDOG_PINGS, "%u WATCHDOG=1 within %d ms with WATCHDOG_USEC=%d, want %d",
	      s.watchdog, DEADLINE_MS, WATCHDOG_USEC, WATCHDOG_PINGS);
	fprintf(stderr, "STATUS=%s\n%u watchdog pings, %.0f ms apart on average (interval %d ms)\n",
		s.status, s.watchdog,
		(double)(s.last_ping_ms - s.first_ping_ms) / (s.watchdog - 1), WATCHDOG_USEC / 1000);

	/* What the daemon sent before it exited stays queued here. */
	pid_t daemon_pid = d.pid;
	daemon_stop(&d);
	while (!s.stopping && notify_recv(nfd, 0, msg, sizeof(msg), &sender, &fds))
		parse(&d, daemon_pid, msg, sender, fds, &s);
	CHECK(s.stopping, "no STOPPING=1 after SIGTERM");

	close(nfd);
	return 0;
}
