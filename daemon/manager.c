/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <fcntl.h>
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

#include "fault.h"
#include "kvt-config.h"
#include "log.h"
#include "macro.h"
#include "manager.h"
#include "metrics-http.h"
#include "nvme.h"
#include "remote.h"
#include "process.h"
#include "requests.h"
#include "session.h"

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

static void on_extent_added(void *userdata, struct tenant *t, struct extent *e)
{
	struct manager *m = userdata;
	struct session *s;

	/* Every connection of the tenant may be handed this extent's slots
	 * (handles cross connections), so all of them learn of it now,
	 * ahead of any reply that names it. */
	LIST_FOREACH(s, &m->sessions, link)
		if (s->tenant == t && s->pool && !s->dead)
			session_announce_extent(s, e);
}

/* A staged or fetched block settled: the tenant's connections' LOOKUPs
 * waiting for it move on (one SETTLED each, once all their keys have), and
 * BLOCK_READY goes to those that asked to be told of each block (a client
 * waiting for a staged block sleeps on its socket, not in a poll loop); of
 * a remote run's key, only to those not told of runs. */
static void block_ready_send(struct manager *m, struct ns *ns, const uint8_t *key, bool of_run)
{
	struct session *s;
	struct kvt_buf b;

	kvt_buf_init(&b);
	LIST_FOREACH(s, &m->sessions, link) {
		if (s->dead || s->tenant != ns->tenant)
			continue;
		session_block_settled(s, ns);
		if (!session_wants_ready(s) || (of_run && (s->features & KVT_FEATURE_RUNS)))
			continue;
		kvt_enc_block_ready(&b, s->version, ns->id, key);
		if (kvt_msg_finish(&b, 0) == 0)
			session_send(s, &b, NULL, 0);
	}
	kvt_buf_free(&b);
}

static struct process *on_owner_adopt(void *userdata, int32_t pid, uint64_t start_time)
{
	return process_adopt(userdata, pid, start_time);
}

static void on_keep(void *userdata, const char *name, int fd, bool fresh)
{
	struct manager *m = userdata;
	keep_fd(&m->keep, name, fd, fresh);
}

static int on_take(void *userdata, const char *name)
{
	struct manager *m = userdata;
	return keep_take(&m->keep, name);
}

static void on_let_go(void *userdata, const char *name)
{
	struct manager *m = userdata;
	keep_let_go(&m->keep, name);
}

static const struct store_keep_ops keep_ops = {
	.keep = on_keep,
	.take = on_take,
	.let_go = on_let_go,
};

int manager_keep(struct manager *m)
{
	int r = keep_collect(&m->keep);
	if (r < 0)
		return r;
	int fd = keep_take(&m->keep, "ledger");
	if (fd >= 0 && !m->config->keep) {
		log_info("[pool] keep = no: the host tier an earlier kvtierd kept is let go");
		close(fd);
		keep_let_go(&m->keep, "ledger");
	} else if (fd >= 0) {
		const struct store_adopted *a = &m->adopted;
		r = store_adopt(&m->store, fd, &keep_ops, m, &m->adopted);
		if (r == -ENOMEM)
			return log_error_errno(r, "Failed to adopt the host tier an earlier kvtierd kept: %m");
		if (r < 0) {
			log_warning_errno(r, "The host tier an earlier kvtierd kept cannot be adopted (%m); starting empty");
			keep_let_go(&m->keep, "ledger");
		} else {
			log_info("Adopted the host tier an earlier kvtierd kept: %u extent(s) (%llu MiB) and %llu block(s) of %u namespace(s), %llu lease(s) and %llu reservation(s) open, in %llu ms; %llu record(s) failed their check, %u extent(s) did not match their ledger",
				 a->extents, (unsigned long long)(a->bytes >> 20),
				 (unsigned long long)a->blocks, a->namespaces,
				 (unsigned long long)a->leases,
				 (unsigned long long)a->reservations,
				 (unsigned long long)(a->elapsed_ns / 1000000),
				 (unsigned long long)a->records_bad, a->extents_bad);
		}
		process_adopt_end(m);
	}
	keep_close_untaken(&m->keep);
	if (!m->store.ledger && m->config->keep) {
		r = store_keep_begin(&m->store, &keep_ops, m);
		if (r < 0)
			log_warning_errno(r, "No ledger for the host tier (%m): a restart will not keep it");
	}
	return 0;
}

static void on_erasure_ended(void *userdata)
{
	requests_erasures_ended(userdata);
}

static void on_block_ready(void *userdata, struct ns *ns, const uint8_t *key)
{
	block_ready_send(userdata, ns, key, false);
}

static void on_run_block_ready(void *userdata, struct ns *ns, const uint8_t *key)
{
	block_ready_send(userdata, ns, key, true);
}

/* One RUN_READY for a remote run: its waiters look up once, not once per
 * block. */
static void on_run_ready(void *userdata, struct ns *ns, const uint8_t *key, uint32_t n,
			 uint32_t served)
{
	struct manager *m = userdata;
	struct session *s;
	struct kvt_buf b;
	struct kvt_run_ready msg = {.ns_id = ns->id, .n_keys = n, .n_served = served, .key = key};

	kvt_buf_init(&b);
	LIST_FOREACH(s, &m->sessions, link) {
		if (s->dead || s->tenant != ns->tenant || !session_wants_ready(s) ||
		    !(s->features & KVT_FEATURE_RUNS))
			continue;
		kvt_enc_run_ready(&b, s->version, &msg);
		if (kvt_msg_finish(&b, 0) == 0)
			session_send(s, &b, NULL, 0);
	}
	kvt_buf_free(&b);
}

static void manager_schedule_reap(struct manager *m);

static const struct session_ops session_ops = {
	.dead = manager_schedule_reap,
};

static const struct turns_ops turns_ops = {
	.work = requests_process,
	.settled = session_settled,
};

int manager_new(struct config *c, struct manager **ret)
{
	struct manager *m = calloc(1, sizeof(*m));
	int r;

	if (!m)
		return -ENOMEM;
	m->config = c;
	LIST_INIT(&m->sessions);
	m->session_ops = &session_ops;
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
	r = turns_init(&m->turns, m->event, &turns_ops);
	if (r < 0) {
		manager_free(m);
		return r;
	}
	pool_init(&m->pool, c);
	r = store_init(&m->store, &m->pool, c, on_extent_added, m);
	if (r < 0) {
		log_error_errno(r, "Failed to draw the secret of the key hash: %m");
		manager_free(m);
		return r;
	}
	m->store.erasure_ended = on_erasure_ended;
	m->store.block_ready = on_block_ready;
	m->store.run_block_ready = on_run_block_ready;
	m->store.run_ready = on_run_ready;
	m->store.handle_taken = process_handle_link;
	m->store.handle_ended = process_handle_unlink;
	m->store.owner_id = process_owner_id;
	m->store.owner_adopt = on_owner_adopt;
	m->keep.activation_fd = -1;
	sd_event_now(m->event, CLOCK_MONOTONIC, &m->started_usec);
	*ret = m;
	return 0;
}

void manager_free(struct manager *m)
{
	if (!m)
		return;
#if KVT_HAVE_MICROHTTPD
	metrics_http_free(m->metrics);
	m->metrics = NULL;
#endif
	while (!LIST_EMPTY(&m->sessions))
		session_free(LIST_FIRST(&m->sessions));
	/* First: they wait for I/O into and out of blocks and the pool. */
#if KVT_HAVE_RADOS
	remote_free(m->remote);
	m->remote = NULL;
#endif
	nvme_free(m->nvme);
	m->nvme = NULL;
	store_partial_done(&m->store);
	store_done(&m->store);
	pool_done(&m->pool);
	process_free_all(m);
	for (uint32_t i = 0; i < m->n_listeners; i++) {
		struct listener *l = m->listeners[i];
		sd_event_source_disable_unref(l->source);
		close(l->fd);
		if (l->owned)
			unlink(l->path);
		free(l);
	}
	turns_done(&m->turns);
	keep_done(&m->keep);
	sd_event_source_disable_unref(m->reap_source);
	sd_event_source_disable_unref(m->status_source);
	sd_event_source_disable_unref(m->hints_source);
	sd_event_source_disable_unref(m->ahead_source);
	sd_event_source_disable_unref(m->accept_retry);
	kvt_buf_free(&m->reply);
	free(m->slots);
	free(m->status);
	free(m->states);
	free(m->handles);
	sd_event_unref(m->event);
	free(m);
}


static void accept_resume(struct manager *m);

static int on_reap(sd_event_source *src, void *userdata)
{
	struct manager *m = userdata;
	struct session *s = LIST_FIRST(&m->sessions);

	while (s) {
		struct session *next = LIST_NEXT(s, link);
		if (s->dead)
			session_free(s);
		s = next;
	}
	/* Their sockets (and pidfds) are closed: room for a waiting client. */
	accept_resume(m);
	return 0;
}

/* A session was marked dead (session_ops.dead). */
static void manager_schedule_reap(struct manager *m)
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

/*
 * Out of descriptors (or memory), accept() fails and leaves the connection
 * queued, so a listener left armed wakes the loop again at once: the daemon
 * spun on one core and logged a line per turn.  Instead the listeners go
 * off until descriptors are freed: when connections close (on_reap), and,
 * for descriptors freed elsewhere or a limit raised from outside, on a
 * timer.  Waiting clients stay in the listen backlog meanwhile.
 */
#define ACCEPT_RETRY_USEC (1000 * 1000ULL)
#define ACCEPT_LOG_INTERVAL_USEC (10 * 1000 * 1000ULL)
/* A connection and the pidfd of a new client process. */
#define ACCEPT_FDS_NEEDED 2

static void listeners_enable(struct manager *m, int enabled)
{
	for (uint32_t i = 0; i < m->n_listeners; i++)
		sd_event_source_set_enabled(m->listeners[i]->source, enabled);
}

/* Whether a client can be taken in now.  Probed with dup()s: the limit
 * alone does not say how many descriptors are in use. */
static bool fds_available(struct manager *m)
{
	int fds[ACCEPT_FDS_NEEDED];
	unsigned got = 0;

	if (!m->n_listeners)
		return false;
	while (got < ACCEPT_FDS_NEEDED) {
		int fd = fcntl(m->listeners[0]->fd, F_DUPFD_CLOEXEC, 0);
		if (fd < 0)
			break;
		fds[got++] = fd;
	}
	for (unsigned i = 0; i < got; i++)
		close(fds[i]);
	return got == ACCEPT_FDS_NEEDED;
}

static int on_accept_retry(sd_event_source *src, uint64_t usec, void *userdata)
{
	accept_resume(userdata);
	return 0;
}

static void accept_resume(struct manager *m)
{
	if (!m->accept_paused)
		return;
	if (!fds_available(m)) {
		if (sd_event_source_set_time_relative(m->accept_retry, ACCEPT_RETRY_USEC) >= 0)
			sd_event_source_set_enabled(m->accept_retry, SD_EVENT_ONESHOT);
		return;
	}
	m->accept_paused = false;
	sd_event_source_set_enabled(m->accept_retry, SD_EVENT_OFF);
	listeners_enable(m, SD_EVENT_ON);
	if (m->accept_pause_logged)
		log_info("Accepting clients again");
	m->accept_pause_logged = false;
}

/* Listeners off until accept_resume finds descriptors free. */
static void accept_stop(struct manager *m)
{
	int r;

	/* From now on every accept is preceded by a probe, until a turn
	 * empties the backlog: a connection accepted into the last free
	 * descriptor would be refused for want of its pidfd. */
	m->accept_probe = true;
	if (m->accept_paused)
		return;
	if (!m->accept_retry) {
		r = sd_event_add_time_relative(m->event, &m->accept_retry, CLOCK_MONOTONIC,
					       ACCEPT_RETRY_USEC, 0, on_accept_retry, m);
		if (r < 0) {
			/* Without the timer only a closing connection would
			 * bring the listeners back: keep them on. */
			log_warning_errno(r, "Failed to add the accept retry timer, ignoring: %m");
			return;
		}
	} else {
		sd_event_source_set_time_relative(m->accept_retry, ACCEPT_RETRY_USEC);
		sd_event_source_set_enabled(m->accept_retry, SD_EVENT_ONESHOT);
	}
	m->accept_paused = true;
	listeners_enable(m, SD_EVENT_OFF);
}

/* accept() or the client's pidfd failed for want of descriptors or memory. */
static void accept_failed(struct manager *m, int error)
{
	uint64_t now = 0;

	m->c.accept_failures++;
	sd_event_now(m->event, CLOCK_MONOTONIC, &now);
	if (!m->accept_logged_usec || now - m->accept_logged_usec >= ACCEPT_LOG_INTERVAL_USEC) {
		char more[64] = "";
		if (m->accept_unlogged)
			snprintf(more, sizeof(more), " (and %llu time(s) since the last message)",
				 (unsigned long long)m->accept_unlogged);
		log_warning_errno(error, "Failed to accept a client, pausing until %s: %m%s",
				  error == -EMFILE || error == -ENFILE
					  ? "descriptors are freed (raise LimitNOFILE=)"
					  : "memory is freed",
				  more);
		m->accept_logged_usec = now;
		m->accept_unlogged = 0;
		m->accept_pause_logged = true;
	} else {
		m->accept_unlogged++;
	}
	accept_stop(m);
}

static int on_accept(sd_event_source *src, int lfd, uint32_t revents, void *userdata)
{
	struct listener *l = userdata;
	struct manager *m = l->m;
	struct ucred cred;
	socklen_t len = sizeof(cred);
	char why[200];

	for (int i = 0; i < 64; i++) {
		if (m->accept_probe && !fds_available(m)) {
			accept_stop(m);
			return 0;
		}
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0) {
			if (errno == EAGAIN)
				m->accept_probe = false; /* all waiting clients served */
			if (errno == ECONNABORTED)
				continue;
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
			    errno == ENOMEM)
				accept_failed(m, -errno);
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
		/* Per uid and socket: every container on its own tenant
		 * socket may be uid 0 without sharing one allowance. */
		uint32_t mine = 0;
		struct session *s;
		LIST_FOREACH(s, &m->sessions, link)
			mine += s->uid == cred.uid && !s->dead && !strcmp(s->via_tenant, l->tenant);
		if (mine >= m->config->max_connections_per_uid) {
			snprintf(why, sizeof(why), "uid %u already has %u connections ([limits] connections_per_uid)",
				 (unsigned)cred.uid, mine);
			refuse(m, fd, -EMFILE, why);
			continue;
		}

		int pidfd = -1;
		socklen_t pl = sizeof(pidfd);
		if (fault_hit(FAULT_PEERPIDFD) ||
		    getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &pl) < 0)
			pidfd = -1;
		if (cred.pid == 0 && pidfd < 0) {
			/* In a pid namespace this daemon cannot see, and no
			 * pidfd to watch it by: nothing would tell its
			 * connections from another's or say when it exits. */
			if (!m->pidns_refusal_logged)
				log_warning("Refusing clients in another pid namespace: this kernel has no SO_PEERPIDFD to watch them by; run kvtierd on Linux 6.5 or later, or in their pid namespace or an ancestor of it (in Kubernetes: hostPID: true)");
			m->pidns_refusal_logged = true;
			refuse(m, fd, -ESRCH,
			       "kvtierd cannot watch this process: it is in another pid namespace and this kernel has no SO_PEERPIDFD; run kvtierd on Linux 6.5 or later, or in the clients' pid namespace (in Kubernetes: hostPID: true)");
			continue;
		}
		struct process *p;
		int r = process_get(m, cred.pid, pidfd, &p);
		if (r < 0) {
			log_warning_errno(r, "Failed to watch client pid %d, refusing it: %m", (int)cred.pid);
			refuse(m, fd, r, "the daemon cannot watch this process (pidfd)");
			if (r == -EMFILE || r == -ENFILE) {
				accept_failed(m, r);
				return 0;
			}
			continue;
		}
		r = session_new(m, fd, &s);
		if (r < 0) {
			process_session_closed(p);
			close(fd);
			continue;
		}
		s->process = p;
		snprintf(s->via_tenant, sizeof(s->via_tenant), "%s", l->tenant);
		m->c.accepted++;
	}
	return 0;
}

/* dir and its missing parents, dir itself with mode (under the umask). */
static int make_runtime_dir(const char *dir, mode_t mode)
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
	if (mkdir(path, mode) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

/* A socket open to every uid (socket_mode = 0666) in a directory that
 * every uid can traverse: made 0711 (others may reach the socket, not list
 * the directory); one that was there already gets o+x where it is ours,
 * else a warning says why clients will not get through. */
static void open_socket_dir(const char *dir)
{
	struct stat st;

	if (stat(dir, &st) < 0 || (st.st_mode & S_IXOTH))
		return;
	if (chmod(dir, (st.st_mode & 07777) | S_IXOTH) < 0)
		log_warning_errno(-errno, "Failed to let every uid through '%s' (owner %u, mode %04o) for its socket_mode = 0666 socket: %m; only its owner and group can connect",
				  dir, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
}

static int listener_watch(struct manager *m, int fd, bool owned, const char *path,
			  const char *tenant)
{
	if (m->n_listeners >= MANAGER_MAX_LISTENERS)
		return -E2BIG;
	struct listener *l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->fd = fd;
	l->owned = owned;
	l->m = m;
	snprintf(l->path, sizeof(l->path), "%s", path);
	snprintf(l->tenant, sizeof(l->tenant), "%s", tenant ? tenant : "");
	int r = sd_event_add_io(m->event, &l->source, fd, EPOLLIN, on_accept, l);
	if (r < 0) {
		free(l);
		return log_error_errno(r, "Failed to watch the listening socket: %m");
	}
	m->listeners[m->n_listeners++] = l;
	return 0;
}

/* Bind a socket of ours at path with mode: 0666 for the main socket (every
 * uid is its own tenant, isolated by what the kernel says of it); a
 * tenant's own is its socket_mode, 0660 unless its directory, mounted into
 * that tenant's containers only, is what keeps others out (0666). */
static int listener_bind(struct manager *m, const char *path, const char *tenant, mode_t mode)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd, r;

	if (strlen(path) >= sizeof(sa.sun_path))
		return log_error_errno(-ENAMETOOLONG, "Socket path '%s' is too long (max %zu bytes)",
				       path, sizeof(sa.sun_path) - 1);
	memcpy(sa.sun_path, path, strlen(path) + 1);
	char dir[256];
	snprintf(dir, sizeof(dir), "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash && slash != dir) {
		*slash = 0;
		r = make_runtime_dir(dir, tenant && mode == 0666 ? 0711 : 0755);
		if (r < 0)
			return log_error_errno(r, "Failed to create '%s' for the socket: %m", dir);
		if (tenant && mode == 0666)
			open_socket_dir(dir);
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
			return log_error_errno(-EEXIST, "'%s' exists and is not a socket; remove it or choose another path", path);
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
	if (chmod(path, mode) < 0)
		log_warning_errno(-errno, "Failed to chmod '%s', ignoring: %m", path);
	if (listen(fd, 128) < 0) {
		r = -errno;
		close(fd);
		unlink(path);
		return log_error_errno(r, "Failed to listen on '%s': %m", path);
	}
	r = listener_watch(m, fd, true, path, tenant);
	if (r < 0) {
		close(fd);
		unlink(path);
		return r;
	}
	if (tenant)
		log_info("Listening on %s for tenant %s, mode %04o", path, tenant, (unsigned)mode);
	else
		log_info("Listening on %s", path);
	return 0;
}

/* A socket handed over by a re-execution (keep.c) for path: watched
 * again as it was.  \return 1 when there was one, 0, or a negative errno */
static int listener_kept(struct manager *m, const char *name, const char *path,
			 const char *tenant)
{
	struct keep *k = &m->keep;

	for (uint32_t i = 0; i < k->n_sockets; i++) {
		struct keep_fd *s = &k->sockets[i];
		if (s->fd < 0 || strcmp(s->name, name))
			continue;
		struct sockaddr_un sa;
		socklen_t len = sizeof(sa);
		if (getsockname(s->fd, (struct sockaddr *)&sa, &len) < 0 ||
		    sa.sun_family != AF_UNIX || strcmp(sa.sun_path, path)) {
			/* The configuration names another path now. */
			close(s->fd);
			s->fd = -1;
			return 0;
		}
		int fd = s->fd;
		s->fd = -1;
		int r = listener_watch(m, fd, !!strcmp(name, "socket"), path, tenant);
		if (r < 0)
			close(fd);
		return r < 0 ? r : 1;
	}
	return 0;
}

int manager_listen(struct manager *m)
{
	int r;

	/* The tenants' sockets first: a client that reaches the main socket
	 * (or a script that waits for it) finds every other one there. */
	for (uint32_t i = 0; i < m->config->n_tenants; i++) {
		const struct tenant_conf *t = &m->config->tenants[i];
		char name[64];
		if (!t->socket)
			continue;
		snprintf(name, sizeof(name), "socket.%s", t->name);
		r = listener_kept(m, name, t->socket, t->name);
		if (r == 0)
			r = listener_bind(m, t->socket, t->name, t->socket_mode);
		if (r < 0)
			return r;
	}
	r = listener_kept(m, "socket", m->config->socket_path, NULL);
	m->socket_activated = r > 0; /* it came from systemd at first */
	if (r == 0)
		r = listener_kept(m, "socket.owned", m->config->socket_path, NULL);
	/* Sockets kept for what the configuration no longer names. */
	for (uint32_t i = 0; i < m->keep.n_sockets; i++) {
		struct keep_fd *s = &m->keep.sockets[i];
		if (s->fd >= 0) {
			close(s->fd);
			s->fd = -1;
		}
	}
	if (r < 0)
		return r;
	if (r > 0) {
		log_info("Listening on the socket kept across the re-execution");
	} else if (m->keep.activation_fd >= 0) {
		int fd = m->keep.activation_fd;
		m->keep.activation_fd = -1;
		if (sd_is_socket_unix(fd, SOCK_STREAM, 1, NULL, 0) <= 0)
			return log_error_errno(-EINVAL, "The activation socket is not a listening AF_UNIX stream socket");
		/* A passed socket may be blocking (systemd-socket-activate's
		 * is); the accept loop would then wait inside the event loop
		 * for the next client, serving no one and starving the
		 * watchdog. */
		int fl = fcntl(fd, F_GETFL);
		if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
			return log_error_errno(-errno, "Failed to make the activation socket non-blocking: %m");
		r = listener_watch(m, fd, false, m->config->socket_path, NULL);
		if (r < 0)
			return r;
		m->socket_activated = true;
		log_info("Listening on the socket passed by systemd");
	} else {
		r = listener_bind(m, m->config->socket_path, NULL, 0666);
		if (r < 0)
			return r;
	}
#if KVT_HAVE_MICROHTTPD
	if (m->config->metrics_listen)
		return metrics_http_start(m, &m->metrics);
#endif
	return 0;
}

#define STATUS_INTERVAL_USEC (5 * 1000000ULL)
#define HINTS_INTERVAL_USEC (1000000ULL)

static void notify_status(struct manager *m)
{
	uint64_t used = 0, blocks = 0;
	for (uint32_t i = 0; i < m->store.n_tenants; i++) {
		struct tenant *t = m->store.tenants[i];
		used += store_tenant_used(t);
		for (uint32_t j = 0; j < t->n_ns; j++)
			blocks += t->nss[j]->blocks_resident;
	}
	struct nvme_stats ns = {0};
	if (m->nvme)
		nvme_get_stats(m->nvme, &ns);
	if (ns.recovering) {
		/* Served meanwhile: say how far, so that a slow start is not
		 * taken for a hang. */
		sd_notifyf(false, "STATUS=recovering spill files: %llu/%llu regions, %llu blocks; host %llu/%llu MiB used, %u clients",
			   (unsigned long long)ns.recovery_regions,
			   (unsigned long long)ns.recovery_regions_total,
			   (unsigned long long)ns.recovered, (unsigned long long)(used >> 20),
			   (unsigned long long)(m->pool.capacity >> 20), m->n_sessions);
		return;
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

/* Once a second: the engine's retentions whose duration has passed, and
 * blocks whose tensor-parallel shards did not all come. */
static int on_hints_timer(sd_event_source *src, uint64_t usec, void *userdata)
{
	struct manager *m = userdata;
	store_hints_lapse(&m->store);
	store_partial_expire(&m->store);
	sd_event_source_set_time(src, usec + HINTS_INTERVAL_USEC);
	return 0;
}

int manager_reload(struct manager *m)
{
	struct config fresh, *cur = m->config;
	char changed[512], restart[512];
	int r;

	if (config_defaults(&fresh) < 0)
		return -ENOMEM;
	r = config_load(&fresh, m->config_path);
	if (r < 0) {
		config_free(&fresh);
		log_error("Reload of %s failed (see above); still running on the previous configuration",
			  m->config_path ? m->config_path : "(built-in defaults)");
		return r;
	}
	if (m->socket_override) {
		free(fresh.socket_path);
		fresh.socket_path = strdup(m->socket_override);
	}
	sd_notify(false, "RELOADING=1");

	config_reload(cur, &fresh, changed, sizeof(changed), restart, sizeof(restart));
	config_free(&fresh);

	pool_set_capacity(&m->pool, cur->capacity);
	if (m->pool.allocated > cur->capacity)
		log_warning("Capacity %llu MiB is below the %llu MiB already in extents: no new extents until blocks are evicted; held extents stay until restart",
			    (unsigned long long)(cur->capacity >> 20),
			    (unsigned long long)(m->pool.allocated >> 20));
	store_reload(&m->store);
	/* A lowered [limits] partial_block_ms: the blocks already past it go
	 * now, not at the next sweep. */
	store_partial_expire(&m->store);
	log_set_max_level(cur->log_level);
	log_info("Reloaded %s; changed: %s", m->config_path ? m->config_path : "(built-in defaults)",
		 changed[0] ? changed : "nothing");
	if (restart[0])
		log_warning("Changed but needs a restart to take effect (still running on the old values): %s",
			    restart);
	sd_notify(false, "READY=1");
	notify_status(m);
	return 0;
}

static int on_reload_signal(sd_event_source *src, const struct signalfd_siginfo *si, void *userdata)
{
	manager_reload(userdata);
	return 0;
}

/* An upgrade in place (keep.h): the binary on disk re-executed in this
 * process with the host tier and the sockets; clients reconnect.  The I/O
 * under the store ends first, as at shutdown: its buffers are pool memory,
 * and the spill files' locks go with their descriptors.  Should the exec
 * itself fail after that, the daemon exits with a failure, for the service
 * manager to start it again (it adopts the same way). */
static void manager_upgrade(struct manager *m)
{
	struct keep_fd sockets[MANAGER_MAX_LISTENERS];
	uint32_t n = 0;

	if (!m->store.ledger) {
		log_warning("SIGUSR2: the host tier is not kept ([pool] keep = no, or no ledger): no upgrade in place; restart the daemon instead");
		return;
	}
	if (access(m->exe, X_OK) < 0) {
		log_error_errno(-errno, "SIGUSR2: cannot execute '%s': %m; this daemon goes on", m->exe);
		return;
	}
	log_info("SIGUSR2: upgrading in place: re-executing %s", m->exe);
	sd_notify(false, "RELOADING=1\nSTATUS=Re-executing for an upgrade in place");
#if KVT_HAVE_RADOS
	remote_free(m->remote);
	m->remote = NULL;
#endif
	nvme_free(m->nvme);
	m->nvme = NULL;
	for (uint32_t i = 0; i < m->n_listeners; i++) {
		const struct listener *l = m->listeners[i];
		sockets[n].fd = l->fd;
		if (l->tenant[0])
			snprintf(sockets[n].name, sizeof(sockets[n].name), "socket.%s", l->tenant);
		else
			snprintf(sockets[n].name, sizeof(sockets[n].name), "%s",
				 l->owned ? "socket.owned" : "socket");
		n++;
	}
	keep_reexec(&m->keep, m->exe, m->argv, sockets, n);
	log_error("The upgrade in place failed after the NVMe tier stopped; exiting for the service manager to start kvtierd again");
	sd_event_exit(m->event, -EIO);
}

static int on_upgrade_signal(sd_event_source *src, const struct signalfd_siginfo *si,
			     void *userdata)
{
	manager_upgrade(userdata);
	return 0;
}

static int on_signal(sd_event_source *src, const struct signalfd_siginfo *si, void *userdata)
{
	struct manager *m = userdata;
	log_info("Received %s, shutting down", strsignal((int)si->ssi_signo));
	sd_event_exit(m->event, 0);
	return 0;
}

/* An extent's memory made ahead is ready: the requests and the remote
 * tier's reads that waited for it go on. */
static int on_extent_ahead(sd_event_source *src, int fd, uint32_t revents, void *userdata)
{
	struct manager *m = userdata;

	pool_ahead_clear(&m->pool);
	requests_memory_ready(m);
#if KVT_HAVE_RADOS
	if (m->remote)
		remote_memory_ready(m->remote);
#endif
	return 0;
}

/* sd_event_loop, with each dispatch timed: a dispatch runs one event
 * source, so the longest is the longest any request or timer held the
 * loop, and a neighbour's request waited behind it. */
static int run_loop(struct manager *m)
{
	sd_event *e = m->event;
	int r;

	for (;;) {
		r = sd_event_get_state(e);
		if (r == SD_EVENT_FINISHED)
			break;
		r = sd_event_prepare(e);
		if (r == 0)
			r = sd_event_wait(e, UINT64_MAX);
		if (r < 0)
			return r;
		if (r == 0)
			continue;
		uint64_t t0 = kvt_now_ns();
		r = sd_event_dispatch(e);
		uint64_t took = kvt_now_ns() - t0;
		if (r < 0)
			return r;
		m->c.dispatches++;
		if (took > m->c.dispatch_max_ns)
			m->c.dispatch_max_ns = took;
		m->c.dispatches_slow += took >= MANAGER_SLOW_DISPATCH_NS;
	}
	int code = 0;
	r = sd_event_get_exit_code(e, &code);
	return r < 0 ? r : code;
}

void manager_block_signals(void)
{
	sigset_t ss;

	sigemptyset(&ss);
	sigaddset(&ss, SIGTERM);
	sigaddset(&ss, SIGINT);
	sigaddset(&ss, SIGHUP);
	sigaddset(&ss, SIGUSR2);
	sigprocmask(SIG_BLOCK, &ss, NULL);
	signal(SIGPIPE, SIG_IGN);
}

int manager_run(struct manager *m)
{
	uint64_t watchdog_usec = 0;
	int r;

	manager_block_signals();
	sd_event_add_signal(m->event, NULL, SIGTERM, on_signal, m);
	sd_event_add_signal(m->event, NULL, SIGINT, on_signal, m);
	sd_event_add_signal(m->event, NULL, SIGHUP, on_reload_signal, m);
	sd_event_add_signal(m->event, NULL, SIGUSR2, on_upgrade_signal, m);
	/* With WatchdogSec= the loop itself sends WATCHDOG=1, from whichever
	 * iteration comes after a quarter of the interval: a dispatch that
	 * blocks for more than about three quarters of it gets the daemon
	 * restarted. */
	r = sd_event_set_watchdog(m->event, true);
	if (r < 0)
		log_warning_errno(r, "Failed to enable the systemd watchdog, ignoring: %m");
	else if (r > 0 && sd_watchdog_enabled(false, &watchdog_usec) > 0)
		log_info("Watchdog on: systemd expects WATCHDOG=1 at least every %llu ms",
			 (unsigned long long)(watchdog_usec / 1000));

	/* The one-line occupancy summary systemctl status shows; the timer
	 * also keeps the loop's clock source open from the start, so the
	 * daemon's descriptor count does not grow with its first client. */
	r = sd_event_add_time_relative(m->event, &m->status_source, CLOCK_MONOTONIC,
				       STATUS_INTERVAL_USEC, 0, on_status_timer, m);
	if (r < 0)
		return log_error_errno(r, "Failed to add the status timer: %m");
	sd_event_source_set_enabled(m->status_source, SD_EVENT_ON);
	r = sd_event_add_time_relative(m->event, &m->hints_source, CLOCK_MONOTONIC,
				       HINTS_INTERVAL_USEC, 0, on_hints_timer, m);
	if (r < 0)
		return log_error_errno(r, "Failed to add the hints timer: %m");
	sd_event_source_set_enabled(m->hints_source, SD_EVENT_ON);
	if (pool_ahead_fd(&m->pool) >= 0) {
		r = sd_event_add_io(m->event, &m->ahead_source, pool_ahead_fd(&m->pool), EPOLLIN,
				    on_extent_ahead, m);
		if (r < 0)
			return log_error_errno(r, "Failed to watch the pool's extents made ahead: %m");
	}
	sd_notify(false, "READY=1");
	notify_status(m);
	r = run_loop(m);
	sd_notify(false, "STOPPING=1");
	return r;
}
