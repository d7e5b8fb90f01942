/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Framing and the connection: one socket, the bytes and descriptors that
 * have arrived on it, and the messages waiting to leave.  Both ends of the
 * socket use it (the daemon's sessions, the client library); what a
 * message means, when to read and what to do with a peer that breaks the
 * rules stay theirs.  No policy, no global state, no logging.
 *
 * Input: kvt_conn_recv() reads what the socket has; kvt_conn_next() hands
 * out the next whole message, its header validated and its length checked
 * against the bytes present, until kvt_conn_consume() drops it.
 * Descriptors queue in arrival order; a message takes its n_fds of them
 * with kvt_conn_take_fds().
 *
 * Output: kvt_conn_send() writes a finished message straight to the socket
 * when nothing is queued and copies only what the socket did not take;
 * kvt_conn_flush() writes the queue.  A message's descriptors travel with
 * its first byte, in one sendmsg() of their own.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>
#include <sys/types.h>

#include "kvt-proto.h"

/* ---- framing ------------------------------------------------------ */

/* Start a message in b (which it resets); finish patches the length. */
void kvt_msg_begin(struct kvt_buf *b, uint16_t version, uint16_t opcode,
		   uint16_t flags, uint64_t request_id);
int kvt_msg_finish(struct kvt_buf *b, uint16_t n_fds);
/* Add header flags to a message begun in b (KVT_FLAG_MORE: another reply
 * to the same request follows this one). */
void kvt_msg_add_flags(struct kvt_buf *b, uint16_t flags);

/* Parse and validate a header (magic, flags, length and fd limits). */
int kvt_header_parse(const uint8_t *p, struct kvt_header *ret);

/*
 * At most this many descriptors in one sendmsg() (libwayland's bound,
 * well inside the kernel's SCM_MAX_FD).  A message carries at most
 * KVT_MAX_FDS and each goes in a sendmsg() of its own, so the bound holds
 * by construction; the assertion in conn.c keeps it so.
 */
#define KVT_CONN_MAX_FDS_OUT 28

/*
 * sendmsg() of len bytes with n_fds descriptors attached to the first byte.
 * Returns bytes sent (possibly short), -EAGAIN, or another negative errno.
 */
ssize_t kvt_sendmsg(int fd, const void *data, size_t len, const int *fds,
		    unsigned n_fds);

/*
 * recvmsg() into buf; received descriptors (close-on-exec) are appended to
 * fds[*n_fds .. max_fds).  Descriptors beyond max_fds, or a truncated control
 * message, close everything received in this call and return -EPROTO.
 * Returns bytes read, 0 at end of stream, or a negative errno.
 */
ssize_t kvt_recvmsg(int fd, void *buf, size_t len, int *fds, unsigned *n_fds,
		    unsigned max_fds);
/* The same, blocking (up to the socket's SO_RCVTIMEO, then -EAGAIN):
 * a waiting client sleeps in one recvmsg() instead of poll() + recvmsg(). */
ssize_t kvt_recvmsg_wait(int fd, void *buf, size_t len, int *fds, unsigned *n_fds,
			 unsigned max_fds);

/* ---- the connection ----------------------------------------------- */

/* Descriptors that may wait in one connection's input queue. */
#define KVT_CONN_MAX_IN_FDS (KVT_MAX_FDS * 2)

/* The input buffer grows by at least this much, so small messages cost
 * one recvmsg() per batch rather than one each. */
#define KVT_CONN_IN_CHUNK (64 * 1024)

/* A message, or what is left of it, waiting for the socket. */
struct kvt_conn_out {
	TAILQ_ENTRY(kvt_conn_out) link;
	size_t len, sent;
	int fds[KVT_MAX_FDS]; /* borrowed (see kvt_conn_send) */
	unsigned n_fds;
	uint8_t data[];
};

TAILQ_HEAD(kvt_conn_queue, kvt_conn_out);

struct kvt_conn {
	int fd; /* -1 when closed */
	/* Descriptors the peer may have waiting (0: it may send none, and a
	 * message that carries one is refused with -EPROTO). */
	unsigned max_in_fds;
	/* Grows the input buffer: realloc() unless set (the daemon's fault
	 * injection fails it on purpose). */
	void *(*in_realloc)(void *ptr, size_t size, void *userdata);
	void *userdata;
	/* Bytes one kvt_conn_recv() reads at most (0: as many as fit). */
	size_t max_read;

	uint8_t *in;
	size_t in_off; /* start of the unread bytes */
	size_t in_len; /* end of the bytes read */
	size_t in_cap;
	size_t msg_len; /* of the message kvt_conn_next() handed out, else 0 */
	int in_fds[KVT_CONN_MAX_IN_FDS];
	unsigned n_in_fds;

	struct kvt_conn_queue out;
	uint64_t out_bytes; /* queued, not yet written */
};

/* A connection over fd (which it owns from now on), or closed with -1. */
void kvt_conn_init(struct kvt_conn *c, int fd, unsigned max_in_fds);
/* Close the socket, the descriptors received and not taken, and drop the
 * input and the queue; the buffer stays for the next kvt_conn_open(). */
void kvt_conn_close(struct kvt_conn *c);
/* Start over on a new socket after kvt_conn_close(). */
void kvt_conn_open(struct kvt_conn *c, int fd);
/* kvt_conn_close(), and free the buffers. */
void kvt_conn_free(struct kvt_conn *c);

/*
 * Read once from the socket into the input buffer (wait: block, up to the
 * socket's SO_RCVTIMEO).  Returns the bytes read, 0 at end of stream,
 * -EAGAIN, -ENOMEM when the buffer cannot grow, -EPROTO for descriptors
 * past max_in_fds, or the socket's negative errno.
 */
ssize_t kvt_conn_recv(struct kvt_conn *c, bool wait);
/*
 * The next whole message: 1 with its header and a cursor over its payload
 * (valid until kvt_conn_consume or kvt_conn_recv), 0 while it has not all
 * arrived, or the header's negative errno (-EBADMSG, -EPROTONOSUPPORT).
 */
int kvt_conn_next(struct kvt_conn *c, struct kvt_header *ret, struct kvt_cursor *ret_payload);
/* Drop the message kvt_conn_next() handed out. */
void kvt_conn_consume(struct kvt_conn *c);
/* Bytes read and not yet consumed. */
size_t kvt_conn_buffered(const struct kvt_conn *c);
/* Move n received descriptors, oldest first, to ret (the caller owns them
 * then); -EBADMSG when fewer than n have arrived. */
int kvt_conn_take_fds(struct kvt_conn *c, unsigned n, int *ret);

/*
 * Send a finished message: straight to the socket when nothing is queued,
 * and what the socket does not take is queued.  The descriptors are
 * borrowed, not duplicated: until they are sent they must stay open and
 * mean the same file.  Returns 0, -ENOMEM when the queue cannot grow
 * (nothing of the rest is queued then), msg->error, or the socket's
 * negative errno.
 */
int kvt_conn_send(struct kvt_conn *c, const struct kvt_buf *msg, const int *fds,
		  unsigned n_fds);
/* Write queued messages until the socket is full: 0, or the socket's
 * negative errno. */
int kvt_conn_flush(struct kvt_conn *c);
/* Whether messages wait for the socket. */
static inline bool kvt_conn_out_pending(const struct kvt_conn *c)
{
	return !TAILQ_EMPTY(&c->out);
}
