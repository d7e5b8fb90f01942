/* SPDX-License-Identifier: Apache-2.0 */
/* Framing with SCM_RIGHTS, and the connection both ends of the socket use. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "byteorder.h"
#include "conn.h"
#include "macro.h"

_Static_assert(KVT_MAX_FDS <= KVT_CONN_MAX_FDS_OUT,
	       "a message's descriptors go in one sendmsg()");

/* ---- framing ------------------------------------------------------ */

/* Offsets in the header (docs/protocol.md §2).  The header is written
 * and read at these fixed offsets rather than through the cursors: every
 * message passes here, and a call per field costs more than the field. */
#define HDR_MAGIC 0
#define HDR_VERSION 4
#define HDR_OPCODE 6
#define HDR_LENGTH 8
#define HDR_N_FDS 12
#define HDR_FLAGS 14
#define HDR_REQUEST_ID 16

void kvt_msg_begin(struct kvt_buf *b, uint16_t version, uint16_t opcode,
		   uint16_t flags, uint64_t request_id)
{
	kvt_buf_reset(b);
	uint8_t *p = kvt_buf_reserve(b, KVT_HEADER_SIZE);
	if (!p)
		return;
	kvt_put_le32(p + HDR_MAGIC, KVT_MAGIC);
	kvt_put_le16(p + HDR_VERSION, version);
	kvt_put_le16(p + HDR_OPCODE, opcode);
	kvt_put_le32(p + HDR_LENGTH, 0); /* patched by kvt_msg_finish */
	kvt_put_le16(p + HDR_N_FDS, 0);  /* patched */
	kvt_put_le16(p + HDR_FLAGS, flags);
	kvt_put_le64(p + HDR_REQUEST_ID, request_id);
}

int kvt_msg_finish(struct kvt_buf *b, uint16_t n_fds)
{
	if (b->error)
		return b->error;
	if (b->len < KVT_HEADER_SIZE)
		return -EINVAL;
	size_t payload = b->len - KVT_HEADER_SIZE;
	if (payload > KVT_MAX_PAYLOAD || n_fds > KVT_MAX_FDS)
		return -EMSGSIZE;
	kvt_put_le32(b->data + HDR_LENGTH, payload);
	kvt_put_le16(b->data + HDR_N_FDS, n_fds);
	return 0;
}

void kvt_msg_add_flags(struct kvt_buf *b, uint16_t flags)
{
	if (b->error || b->len < KVT_HEADER_SIZE)
		return;
	kvt_put_le16(b->data + HDR_FLAGS, kvt_get_le16(b->data + HDR_FLAGS) | flags);
}

int kvt_header_parse(const uint8_t *p, struct kvt_header *ret)
{
	struct kvt_header h = {
		.magic = kvt_get_le32(p + HDR_MAGIC),
		.version = kvt_get_le16(p + HDR_VERSION),
		.opcode = kvt_get_le16(p + HDR_OPCODE),
		.length = kvt_get_le32(p + HDR_LENGTH),
		.n_fds = kvt_get_le16(p + HDR_N_FDS),
		.flags = kvt_get_le16(p + HDR_FLAGS),
		.request_id = kvt_get_le64(p + HDR_REQUEST_ID),
	};

	if (h.magic != KVT_MAGIC)
		return -EBADMSG;
	if (h.version < KVT_PROTO_VERSION_MIN ||
	    h.version > KVT_PROTO_VERSION_MAX)
		return -EPROTONOSUPPORT;
	if (h.length > KVT_MAX_PAYLOAD || h.n_fds > KVT_MAX_FDS ||
	    (h.flags & ~KVT_FLAGS_KNOWN))
		return -EBADMSG;
	*ret = h;
	return 0;
}

/* ---- sendmsg and recvmsg with descriptors --------------------------- */

ssize_t kvt_sendmsg(int fd, const void *data, size_t len, const int *fds,
		    unsigned n_fds)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * KVT_MAX_FDS)];
	} control;
	struct iovec iov = {(void *)data, len};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};

	if (n_fds > KVT_MAX_FDS)
		return -EINVAL;
	if (n_fds > 0) {
		memset(&control, 0, sizeof(control));
		mh.msg_control = control.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * n_fds);
		struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * n_fds);
		memcpy(CMSG_DATA(cm), fds, sizeof(int) * n_fds);
	}
	for (;;) {
		ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n >= 0)
			return n;
		if (errno == EINTR)
			continue;
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	}
}

static void close_fds(const int *fds, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		close(fds[i]);
}

static ssize_t recv_impl(int fd, void *buf, size_t len, int *fds, unsigned *n_fds,
			 unsigned max_fds, int flags)
{
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(int) * KVT_MAX_FDS)];
	} control;
	struct iovec iov = {buf, len};
	struct msghdr mh = {
		.msg_iov = &iov,
		.msg_iovlen = 1,
		.msg_control = control.buf,
		.msg_controllen = sizeof(control.buf),
	};
	ssize_t n;

	/* Close-on-exec from the start: no window in which a fork+exec in
	 * another thread inherits what the peer sent. */
	do
		n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC | flags);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;

	int got[KVT_MAX_FDS * 2];
	unsigned n_got = 0;
	bool bad = (mh.msg_flags & MSG_CTRUNC) != 0;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm;
	     cm = CMSG_NXTHDR(&mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) {
			bad = true;
			continue;
		}
		size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k; i++) {
			int f;
			memcpy(&f, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			if (n_got < ARRAY_SIZE(got))
				got[n_got++] = f;
			else
				close(f);
		}
	}
	if (bad || *n_fds + n_got > max_fds) {
		close_fds(got, n_got);
		return -EPROTO;
	}
	memcpy(fds + *n_fds, got, n_got * sizeof(int));
	*n_fds += n_got;
	return n;
}

ssize_t kvt_recvmsg(int fd, void *buf, size_t len, int *fds, unsigned *n_fds,
		    unsigned max_fds)
{
	return recv_impl(fd, buf, len, fds, n_fds, max_fds, MSG_DONTWAIT);
}

ssize_t kvt_recvmsg_wait(int fd, void *buf, size_t len, int *fds, unsigned *n_fds,
			 unsigned max_fds)
{
	return recv_impl(fd, buf, len, fds, n_fds, max_fds, 0);
}

/* ---- the connection: input ----------------------------------------- */

void kvt_conn_init(struct kvt_conn *c, int fd, unsigned max_in_fds)
{
	memset(c, 0, sizeof(*c));
	c->fd = fd;
	c->max_in_fds = max_in_fds < KVT_CONN_MAX_IN_FDS ? max_in_fds : KVT_CONN_MAX_IN_FDS;
	TAILQ_INIT(&c->out);
}

static void out_free_all(struct kvt_conn *c)
{
	struct kvt_conn_out *o;

	while ((o = TAILQ_FIRST(&c->out))) {
		TAILQ_REMOVE(&c->out, o, link);
		free(o);
	}
	c->out_bytes = 0;
}

void kvt_conn_close(struct kvt_conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	close_fds(c->in_fds, c->n_in_fds);
	c->n_in_fds = 0;
	c->in_off = c->in_len = c->msg_len = 0;
	out_free_all(c);
}

void kvt_conn_open(struct kvt_conn *c, int fd)
{
	kvt_conn_close(c);
	c->fd = fd;
}

void kvt_conn_free(struct kvt_conn *c)
{
	kvt_conn_close(c);
	free(c->in);
	c->in = NULL;
	c->in_cap = 0;
}

size_t kvt_conn_buffered(const struct kvt_conn *c)
{
	return c->in_len - c->in_off;
}

/* Room for the rest of the message that has begun to arrive, or for a
 * chunk when none has; the unread bytes move to the front first. */
static int in_reserve(struct kvt_conn *c)
{
	size_t want = KVT_CONN_IN_CHUNK;

	if (c->in_off) {
		memmove(c->in, c->in + c->in_off, c->in_len - c->in_off);
		c->in_len -= c->in_off;
		c->in_off = 0;
		c->msg_len = 0;
	}
	if (c->in_len >= KVT_HEADER_SIZE) {
		struct kvt_header h;
		if (kvt_header_parse(c->in, &h) == 0 &&
		    KVT_HEADER_SIZE + (size_t)h.length > c->in_len)
			want = KVT_HEADER_SIZE + (size_t)h.length - c->in_len;
	}
	if (c->in_cap - c->in_len >= want && c->in_cap > c->in_len)
		return 0;
	/* Bounded: a header promises at most KVT_MAX_PAYLOAD. */
	size_t cap = c->in_len + (want > KVT_CONN_IN_CHUNK ? want : KVT_CONN_IN_CHUNK);
	uint8_t *p = c->in_realloc ? c->in_realloc(c->in, cap, c->userdata)
				   : realloc(c->in, cap);
	if (!p)
		return -ENOMEM;
	c->in = p;
	c->in_cap = cap;
	return 0;
}

ssize_t kvt_conn_recv(struct kvt_conn *c, bool wait)
{
	if (c->fd < 0)
		return -ENOTCONN;
	TRY(in_reserve(c));
	size_t room = c->in_cap - c->in_len;
	if (c->max_read && room > c->max_read)
		room = c->max_read;
	ssize_t n = recv_impl(c->fd, c->in + c->in_len, room, c->in_fds,
			      &c->n_in_fds, c->max_in_fds, wait ? 0 : MSG_DONTWAIT);
	if (n > 0)
		c->in_len += (size_t)n;
	return n;
}

int kvt_conn_next(struct kvt_conn *c, struct kvt_header *ret, struct kvt_cursor *ret_payload)
{
	struct kvt_header h;

	if (c->in_len - c->in_off < KVT_HEADER_SIZE)
		return 0;
	TRY(kvt_header_parse(c->in + c->in_off, &h));
	size_t total = KVT_HEADER_SIZE + (size_t)h.length;
	if (c->in_len - c->in_off < total)
		return 0;
	c->msg_len = total;
	*ret = h;
	*ret_payload = (struct kvt_cursor){c->in + c->in_off + KVT_HEADER_SIZE, h.length};
	return 1;
}

void kvt_conn_consume(struct kvt_conn *c)
{
	c->in_off += c->msg_len;
	c->msg_len = 0;
	if (c->in_off == c->in_len)
		c->in_off = c->in_len = 0;
}

int kvt_conn_take_fds(struct kvt_conn *c, unsigned n, int *ret)
{
	if (n > c->n_in_fds)
		return -EBADMSG;
	memcpy(ret, c->in_fds, n * sizeof(int));
	memmove(c->in_fds, c->in_fds + n, (c->n_in_fds - n) * sizeof(int));
	c->n_in_fds -= n;
	return 0;
}

/* ---- the connection: output ---------------------------------------- */

int kvt_conn_flush(struct kvt_conn *c)
{
	struct kvt_conn_out *o;

	while ((o = TAILQ_FIRST(&c->out))) {
		ssize_t n = kvt_sendmsg(c->fd, o->data + o->sent, o->len - o->sent,
					o->sent ? NULL : o->fds, o->sent ? 0 : o->n_fds);
		if (n == -EAGAIN)
			break;
		if (n < 0)
			return (int)n;
		o->n_fds = 0; /* they travelled with the first byte */
		o->sent += (size_t)n;
		c->out_bytes -= (uint64_t)n;
		if (o->sent < o->len)
			break;
		TAILQ_REMOVE(&c->out, o, link);
		free(o);
	}
	return 0;
}

int kvt_conn_send(struct kvt_conn *c, const struct kvt_buf *msg, const int *fds,
		  unsigned n_fds)
{
	size_t done = 0;

	if (msg->error)
		return msg->error;
	if (n_fds > KVT_MAX_FDS)
		return -EINVAL;
	if (c->fd < 0)
		return -ENOTCONN;
	/* Nothing queued: straight to the socket, and only what it does not
	 * take is copied into the queue. */
	if (TAILQ_EMPTY(&c->out)) {
		ssize_t n = kvt_sendmsg(c->fd, msg->data, msg->len, fds, n_fds);
		if (n < 0 && n != -EAGAIN)
			return (int)n;
		if (n > 0) {
			done = (size_t)n;
			n_fds = 0; /* they travelled with the first byte */
		}
		if (done == msg->len)
			return 0;
	}

	size_t left = msg->len - done;
	struct kvt_conn_out *o = malloc(sizeof(*o) + left);
	if (!o)
		return -ENOMEM;
	o->len = left;
	o->sent = 0;
	o->n_fds = n_fds;
	memcpy(o->data, msg->data + done, left);
	/* Borrowed, not duplicated: a peer that does not read would otherwise
	 * pin a descriptor per queued message. */
	if (n_fds)
		memcpy(o->fds, fds, n_fds * sizeof(int));
	TAILQ_INSERT_TAIL(&c->out, o, link);
	c->out_bytes += left;
	return kvt_conn_flush(c);
}
