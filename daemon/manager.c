/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "log.h"
#include "manager.h"
#include "process.h"
#include "session.h"

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

static void on_extent_added(void *userdata, struct tenant *t, struct extent *e)
{
	struct manager *m = userdata;

	/* Every connection of the tenant may be handed this extent's slots
	 * (handles cross connections), so all of them learn of it now,
	 * ahead of any reply that names it. */
	for (struct session *s = m->sessions; s; s = s->next)
		if (s->tenant == t && s->pool && !s->dead)
			session_announce_extent(s, e);
}

int manager_new(struct config *c, struct manager **ret)
{
	struct manager *m = calloc(1, sizeof(*m));
	int r;

	if (!m)
		return -ENOMEM;
	m->config = c;
	m->listen_fd = -1;
	kvt_buf_init(&m->reply);
	m->slots = calloc(KVT_MAX_KEYS, sizeof(*m->slots));
	m->status = calloc(KVT_MAX_KEYS, sizeof(*m->status));
	m->states = calloc(KVT_MAX_KEYS, sizeof(*m->states));
	m->handles = calloc(KVT_MAX_KEYS, sizeof(*m->handles));
	if (!m->slots || !m->status || !m->states || !m->handles) {
		manager_free(m);
		return -ENOMEM;
	}
	r = sd_event_default(&m->event);
	if (r < 0) {
		manager_free(m);
		return r;
	}
	pool_init(&m->pool, c);
	store_init(&m->store, &m->pool, c, on_extent_added, m);
	sd_event_now(m->event, CLOCK_MONOTONIC, &m->started_usec);
	*ret = m;
	return 0;
}

void manager_free(struct manager *m)
{
	if (!m)
		return;
	while (m->sessions)
		session_free(m->sessions);
	store_done(&m->store);
	process_free_all(m);
	sd_event_source_disable_unref(m->listen_source);
	sd_event_source_disable_unref(m->reap_source);
	sd_event_source_disable_unref(m->status_source);
	if (m->listen_fd >= 0) {
		close(m->listen_fd);
		if (m->socket_owned)
			unlink(m->config->socket_path);
	}
	kvt_buf_free(&m->reply);
	free(m->slots);
	free(m->status);
	free(m->states);
	free(m->handles);
	sd_event_unref(m->event);
	free(m);
}

bool manager_is_admin(const struct manager *m, uid_t uid)
{
	return uid == 0 || uid == geteuid();
}

static int on_reap(sd_event_source *src, void *userdata)
{
	struct manager *m = userdata;
	struct session *s = m->sessions;

	while (s) {
		struct session *next = s->next;
		if (s->dead)
			session_free(s);
		s = next;
	}
	return 0;
}

void manager_schedule_reap(struct manager *m)
{
	if (m->reap_source)
		sd_event_source_set_enabled(m->reap_source, SD_EVENT_ONESHOT);
	else if (sd_event_add_defer(m->event, &m->reap_source, on_reap, m) >= 0)
		sd_event_source_set_enabled(m->reap_source, SD_EVENT_ONESHOT);
}

static void refuse(struct manager *m, int fd, int error, const char *why)
{
	struct kvt_buf b;

	/* The client is waiting for its HELLO reply: give it the reason. */
	m->c.refused++;
	kvt_buf_init(&b);
	kvt_enc_error(&b, KVT_PROTO_VERSION_MIN, KVT_OP_HELLO, 0, error, why);
	if (kvt_msg_finish(&b, 0) == 0)
		(void)kvt_sendmsg(fd, b.data, b.len, NULL, 0);
	kvt_buf_free(&b);
	close(fd);
}

static int on_accept(sd_event_source *src, int lfd, uint32_t revents, void *userdata)
{
	struct manager *m = userdata;
	struct ucred cred;
	socklen_t len = sizeof(cred);
	char why[200];

	for (int i = 0; i < 64; i++) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0) {
			if (errno == EAGAIN || errno == EINTR)
				return 0;
			if (errno == EMFILE || errno == ENFILE)
				log_warning_errno(-errno, "Failed to accept a client (raise LimitNOFILE=): %m");
			return 0;
		}
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
			close(fd);
			continue;
		}
		if (m->n_sessions >= m->config->max_connections) {
			snprintf(why, sizeof(why), "the daemon has %u connections ([limits] connections)",
				 m->n_sessions);
			refuse(m, fd, -EMFILE, why);
			continue;
		}
		uint32_t mine = 0;
		for (struct session *s = m->sessions; s; s = s->next)
			mine += s->uid == cred.uid;
		if (mine >= m->config->max_connections_per_uid) {
			snprintf(why, sizeof(why), "uid %u already has %u connections ([limits] connections_per_uid)",
				 (unsigned)cred.uid, mine);
			refuse(m, fd, -EMFILE, why);
			continue;
		}

		int pidfd = -1;
		socklen_t pl = sizeof(pidfd);
		if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &pl) < 0)
			pidfd = -1;
		struct process *p;
		int r = process_get(m, cred.pid, pidfd, &p);
		if (r < 0) {
			log_warning_errno(r, "Failed to watch client pid %d, refusing it: %m", (int)cred.pid);
			refuse(m, fd, r, "the daemon cannot watch this process (pidfd)");
			continue;
		}
		struct session *s;
		r = session_new(m, fd, &s);
		if (r < 0) {
			process_session_closed(p);
			close(fd);
			continue;
		}
		s->process = p;
		m->c.accepted++;
	}
	return 0;
}

static int make_runtime_dir(const char *dir)
{
	char path[256];
	size_t n = strlen(dir);

	if (n >= sizeof(path))
		return -ENAMETOOLONG;
	memcpy(path, dir, n + 1);
	for (char *p = path + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(path, 0755) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(path, 0755) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

int manager_listen(struct manager *m)
{
	const char *path = m->config->socket_path;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int n, fd, r;

	n = sd_listen_fds(1);
	if (n > 1)
		return log_error_errno(-EINVAL, "Socket activation passed %d sockets; kvtierd takes one", n);
	if (n == 1) {
		fd = SD_LISTEN_FDS_START;
		if (sd_is_socket_unix(fd, SOCK_STREAM, 1, NULL, 0) <= 0)
			return log_error_errno(-EINVAL, "The activation socket is not a listening AF_UNIX stream socket");
		m->listen_fd = fd;
		m->socket_activated = true;
		log_info("Listening on the socket passed by systemd");
	} else {
		if (strlen(path) >= sizeof(sa.sun_path))
			return log_error_errno(-ENAMETOOLONG, "Socket path '%s' is too long (max %zu bytes)",
					       path, sizeof(sa.sun_path) - 1);
		strcpy(sa.sun_path, path);
		char dir[256];
		snprintf(dir, sizeof(dir), "%s", path);
		char *slash = strrchr(dir, '/');
		if (slash && slash != dir) {
			*slash = 0;
			r = make_runtime_dir(dir);
			if (r < 0)
				return log_error_errno(r, "Failed to create '%s' for the socket: %m", dir);
		}
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
		if (fd < 0)
			return log_error_errno(-errno, "Failed to create socket: %m");
		/* A socket file left by a dead daemon is removed; a live one is
		 * never stolen. */
		struct stat st;
		if (lstat(path, &st) == 0) {
			if (!S_ISSOCK(st.st_mode)) {
				close(fd);
				return log_error_errno(-EEXIST, "'%s' exists and is not a socket; remove it or choose another --socket", path);
			}
			int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
			if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
				close(probe);
				close(fd);
				return log_error_errno(-EADDRINUSE, "Another kvtierd is listening on '%s'", path);
			}
			if (probe >= 0)
				close(probe);
			unlink(path);
		}
		if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
			r = -errno;
			close(fd);
			return log_error_errno(r, "Failed to bind '%s': %m", path);
		}
		/* Any local user may connect: each is its own tenant, isolated
		 * by the uid the kernel reports. */
		if (chmod(path, 0666) < 0)
			log_warning_errno(-errno, "Failed to chmod '%s', ignoring: %m", path);
		if (listen(fd, 128) < 0) {
			r = -errno;
			close(fd);
			unlink(path);
			return log_error_errno(r, "Failed to listen on '%s': %m", path);
		}
		m->listen_fd = fd;
		m->socket_owned = true;
		log_info("Listening on %s", path);
	}
	r = sd_event_add_io(m->event, &m->listen_source, m->listen_fd, EPOLLIN, on_accept, m);
	if (r < 0)
		return log_error_errno(r, "Failed to watch the listening socket: %m");
	return 0;
}

#define STATUS_INTERVAL_USEC (5 * 1000000ULL)

static void notify_status(struct manager *m)
{
	uint64_t used = 0, blocks = 0;
	for (uint32_t i = 0; i < m->store.n_tenants; i++) {
		struct tenant *t = m->store.tenants[i];
		used += store_tenant_used(t);
		for (uint32_t j = 0; j < t->n_ns; j++)
			blocks += t->nss[j]->blocks_resident;
	}
	sd_notifyf(false, "STATUS=host %llu/%llu MiB used, %llu blocks, %u clients",
		   (unsigned long long)(used >> 20), (unsigned long long)(m->pool.capacity >> 20),
		   (unsigned long long)blocks, m->n_sessions);
}

static int on_status_timer(sd_event_source *src, uint64_t usec, void *userdata)
{
	struct manager *m = userdata;
	notify_status(m);
	sd_event_source_set_time(src, usec + STATUS_INTERVAL_USEC);
	return 0;
}

static int on_signal(sd_event_source *src, const struct signalfd_siginfo *si, void *userdata)
{
	struct manager *m = userdata;
	log_info("Received %s, shutting down", strsignal((int)si->ssi_signo));
	sd_event_exit(m->event, 0);
	return 0;
}

int manager_run(struct manager *m)
{
	sigset_t ss;
	int r;

	sigemptyset(&ss);
	sigaddset(&ss, SIGTERM);
	sigaddset(&ss, SIGINT);
	sigprocmask(SIG_BLOCK, &ss, NULL);
	signal(SIGPIPE, SIG_IGN);
	sd_event_add_signal(m->event, NULL, SIGTERM, on_signal, m);
	sd_event_add_signal(m->event, NULL, SIGINT, on_signal, m);
	sd_event_set_watchdog(m->event, true);

	/* The one-line occupancy summary systemctl status shows; the timer
	 * also keeps the loop's clock source open from the start, so the
	 * daemon's descriptor count does not grow with its first client. */
	r = sd_event_add_time_relative(m->event, &m->status_source, CLOCK_MONOTONIC,
				       STATUS_INTERVAL_USEC, 0, on_status_timer, m);
	if (r < 0)
		return log_error_errno(r, "Failed to add the status timer: %m");
	sd_event_source_set_enabled(m->status_source, SD_EVENT_ON);
	sd_notify(false, "READY=1");
	notify_status(m);
	r = sd_event_loop(m->event);
	sd_notify(false, "STOPPING=1");
	return r;
}
