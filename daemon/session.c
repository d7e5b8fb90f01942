/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One client connection: its life, its socket's events, its limits on
 * output.  Framing, buffers and the descriptor queue are the connection's
 * (proto/conn.h); what its messages ask for is requests.c's, which the
 * session reaches through m->session_ops.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fault.h"
#include "log.h"
#include "macro.h"
#include "manager.h"
#include "process.h"
#include "session.h"
#include "store.h"
#include "turns.h"

#define READS_PER_WAKEUP 16
#define READ_PIECE (64 * 1024)

static int session_io(sd_event_source *src, int fd, uint32_t revents, void *userdata);

static int on_hello_timeout(sd_event_source *src, uint64_t usec, void *userdata)
{
	struct session *s = userdata;

	if (!s->hello && !s->dead) {
		s->m->c.handshake_timeouts++;
		session_kill(s, "no HELLO within [daemon] handshake_timeout_ms");
	}
	return 0;
}

/* The input buffer grows through here, so that fault injection can fail
 * it (session_in). */
static void *in_realloc(void *p, size_t size, void *userdata)
{
	return fault_hit(FAULT_SESSION_IN) ? NULL : realloc(p, size);
}

int session_new(struct manager *m, int fd, struct session **ret)
{
	_cleanup_free_ struct session *s = calloc(1, sizeof(*s));
	_cleanup_(sd_event_source_disable_unrefp) sd_event_source *io = NULL;
	_cleanup_(sd_event_source_disable_unrefp) sd_event_source *timer = NULL;
	struct ucred cred;
	socklen_t len = sizeof(cred);

	if (!s)
		return -ENOMEM;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		return -errno;
	TRY(sd_event_add_io(m->event, &io, fd, EPOLLIN, session_io, s));
	/* A connection that never says HELLO holds a slot of the connection
	 * limits for nothing: it gets a deadline. */
	TRY(sd_event_add_time_relative(m->event, &timer, CLOCK_MONOTONIC,
				       (uint64_t)m->config->handshake_timeout_ms * 1000, 0,
				       on_hello_timeout, s));
	/* Clients never send descriptors: one that does is refused (-EPROTO). */
	kvt_conn_init(&s->conn, fd, 0);
	s->conn.in_realloc = in_realloc;
	/* A large request (8192 keys are 256 KiB) is read a piece a wakeup:
	 * one read of all of it would hold the loop for tens of
	 * microseconds, with a neighbour's request waiting behind the copy. */
	s->conn.max_read = READ_PIECE;
	s->uid = cred.uid;
	s->gid = cred.gid;
	s->pid = cred.pid;
	s->m = m;
	s->id = ++m->next_session_id;
	s->version = KVT_PROTO_VERSION_MIN;
	s->numa_node = -1;
	sd_event_now(m->event, CLOCK_MONOTONIC, &s->connected_usec);
	s->io = TAKE_PTR(io);
	s->hello_timer = TAKE_PTR(timer);
	settle_init(&s->settles);
	LIST_INSERT_HEAD(&m->sessions, s, link);
	m->n_sessions++;
	*ret = TAKE_PTR(s);
	return 0;
}

void session_free(struct session *s)
{
	if (!s)
		return;
	LIST_REMOVE(s, link);
	turns_forget(&s->m->turns, s);
	if (s->waiting == SESSION_WAITS_ERASURES)
		s->m->erasure_waiters--;
	free(s->work);
	settle_clear(&s->settles);
	s->m->n_sessions--;
	sd_event_source_disable_unref(s->io);
	sd_event_source_disable_unref(s->hello_timer);
	if (s->tenant)
		s->tenant->n_sessions--;
	if (s->process)
		process_session_closed(s->process);
	kvt_conn_free(&s->conn); /* closes the socket */
	free(s);
}

void session_kill(struct session *s, const char *why)
{
	if (s->dead)
		return;
	s->dead = true;
	sd_event_source_set_enabled(s->io, SD_EVENT_OFF);
	if (why)
		log_info("Client %u (pid %d, uid %u, '%s'): closing connection: %s",
			 s->id, (int)s->pid, (unsigned)s->uid, s->name, why);
	s->m->session_ops->dead(s->m);
}

static void update_events(struct session *s)
{
	uint32_t ev = 0;
	if (s->dead)
		return;
	if (!s->paused && !s->queued && !s->waiting)
		ev |= EPOLLIN;
	if (kvt_conn_out_pending(&s->conn))
		ev |= EPOLLOUT;
	sd_event_source_set_io_events(s->io, ev);
	sd_event_source_set_enabled(s->io, ev ? SD_EVENT_ON : SD_EVENT_OFF);
}

void session_settled(struct session *s)
{
	update_events(s);
}

int session_send(struct session *s, const struct kvt_buf *msg, const int *fds,
		 unsigned n_fds)
{
	uint64_t limit = s->m->config->max_output_bytes;
	uint64_t queued = s->conn.out_bytes;

	if (s->dead)
		return -ECONNRESET;
	if (msg->error)
		return msg->error;
	/* A client that does not read its replies must not grow our memory:
	 * past twice the limit it is disconnected.  The config keeps the limit
	 * at most 1G; the comparison does not rely on it to stay unwrapped. */
	uint64_t cap = limit > UINT64_MAX / 2 ? UINT64_MAX : 2 * limit;
	if (queued > cap || msg->len > cap - queued) {
		session_kill(s, "client does not read its replies ([limits] output_bytes)");
		return -ENOBUFS;
	}

	/* As if the socket took none of it and the queue's allocation
	 * failed (fault.h). */
	if (fault_hit(FAULT_SESSION_OUT)) {
		session_kill(s, "out of memory");
		return -ENOMEM;
	}

	bool was_queued = kvt_conn_out_pending(&s->conn);
	int r = kvt_conn_send(&s->conn, msg, fds, n_fds);
	if (r < 0) {
		session_kill(s, r == -ENOMEM ? "out of memory" : NULL);
		return r;
	}
	if (!was_queued && !kvt_conn_out_pending(&s->conn))
		return 0; /* the socket took it all */
	if (s->conn.out_bytes > limit)
		s->paused = true;
	update_events(s);
	return 0;
}

void session_announce_extent(struct session *s, const struct extent *e)
{
	struct kvt_buf b;
	struct kvt_extent_note n = {
		.extent_id = e->id,
		.flags = e->flags,
		.size = e->size,
		.slot_bytes = e->slot_bytes,
		.numa_node = e->node,
	};

	kvt_buf_init(&b);
	kvt_enc_extent_note(&b, s->version, &n);
	if (kvt_msg_finish(&b, 1) == 0)
		session_send(s, &b, &e->fd, 1);
	kvt_buf_free(&b);
}

bool session_is_admin(const struct session *s)
{
	return s->admin;
}

/* The client was told a block is on NVMe: for a while, tell it when staged
 * blocks land (a client that stops asking stops getting them, so an idle
 * connection's queue does not grow). */
#define READY_INTEREST_USEC (30 * 1000000ULL)

void session_want_ready(struct session *s)
{
	uint64_t now = 0;
	sd_event_now(s->m->event, CLOCK_MONOTONIC, &now);
	s->ready_until = now + READY_INTEREST_USEC;
}

bool session_wants_ready(const struct session *s)
{
	uint64_t now = 0;
	if (!(s->features & KVT_FEATURE_READY) || !s->ready_until)
		return false;
	sd_event_now(s->m->event, CLOCK_MONOTONIC, &now);
	return now < s->ready_until;
}

static void tell_settled(void *userdata, const struct kvt_settled *m)
{
	struct session *s = userdata;
	struct kvt_buf b;

	kvt_buf_init(&b);
	kvt_enc_settled(&b, s->version, m);
	if (kvt_msg_finish(&b, 0) == 0)
		session_send(s, &b, NULL, 0);
	kvt_buf_free(&b);
}

void session_watch_settle(struct session *s, struct ns *ns, uint32_t ns_id, uint64_t request_id,
			  const uint8_t *keys, const uint8_t *states, uint32_t n)
{
	uint64_t now = 0;

	sd_event_now(s->m->event, CLOCK_MONOTONIC, &now);
	if (settle_watch(&s->settles, ns, ns_id, request_id, keys, states, n, now, tell_settled,
			 s) < 0)
		session_want_ready(s);
}

void session_block_settled(struct session *s, struct ns *ns)
{
	if (s->settles.n)
		settle_advance(&s->settles, ns, tell_settled, s);
}

static int session_io(sd_event_source *src, int fd, uint32_t revents, void *userdata)
{
	struct session *s = userdata;

	if (revents & EPOLLOUT) {
		if (kvt_conn_flush(&s->conn) < 0) {
			session_kill(s, NULL);
			return 0;
		}
		if (s->paused && s->conn.out_bytes <= s->m->config->max_output_bytes / 2) {
			s->paused = false;
			turns_request(&s->m->turns, s);
		}
		update_events(s);
	}
	if (!(revents & (EPOLLIN | EPOLLHUP | EPOLLERR)) || s->paused || s->queued ||
	    s->waiting || s->dead)
		return 0;

	/* A queued session reads no more: what it has sent waits its turn,
	 * and a request under way keeps its bytes where they are.  Nor once
	 * a turn's worth of work is done in this wakeup: a client that sends
	 * its next request while the last is handled would otherwise be
	 * served again and again before the loop looks at the other sockets
	 * (the turns' queue only knows of those it has read).  The socket
	 * stays readable, and its turn comes after theirs. */
	uint64_t until = kvt_now_ns() + TURN_NSEC;
	for (int i = 0; i < READS_PER_WAKEUP && !s->dead && !s->paused && !s->queued && !s->waiting;
	     i++) {
		if (i > 0 && kvt_now_ns() >= until)
			break;
		ssize_t n = kvt_conn_recv(&s->conn, false);
		if (n == -EAGAIN)
			break;
		if (n == -ENOMEM) {
			session_kill(s, "out of memory");
			return 0;
		}
		if (n == -EPROTO) {
			s->m->c.malformed++;
			session_kill(s, "client sent file descriptors, which this protocol never accepts");
			return 0;
		}
		if (n <= 0) {
			/* A client that exits with replies unread resets the
			 * connection: an ordinary close. */
			session_kill(s, n == 0 || n == -ECONNRESET ? NULL : "read error");
			return 0;
		}
		turns_request(&s->m->turns, s);
		/* A piece of a message, nothing to serve yet: the rest at the
		 * next wakeup, after the other sockets that are ready. */
		if (n == READ_PIECE && !s->queued)
			break;
	}
	return 0;
}
