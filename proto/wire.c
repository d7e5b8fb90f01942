/* SPDX-License-Identifier: Apache-2.0 */
/* Byte buffers, bounds-checked cursors and framing with SCM_RIGHTS. */
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kvt-proto.h"

void kvt_buf_init(struct kvt_buf *b)
{
	memset(b, 0, sizeof(*b));
}

void kvt_buf_free(struct kvt_buf *b)
{
	free(b->data);
	kvt_buf_init(b);
}

void kvt_buf_reset(struct kvt_buf *b)
{
	b->len = 0;
	b->error = 0;
}

uint8_t *kvt_buf_reserve(struct kvt_buf *b, size_t n)
{
	if (b->error)
		return NULL;
	if (n > SIZE_MAX / 2 - b->len) {
		b->error = -ENOMEM;
		return NULL;
	}
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->len + n)
			cap *= 2;
		uint8_t *d = realloc(b->data, cap);
		if (!d) {
			b->error = -ENOMEM;
			return NULL;
		}
		b->data = d;
		b->cap = cap;
	}
	uint8_t *p = b->data + b->len;
	b->len += n;
	return p;
}

void kvt_put_u8(struct kvt_buf *b, uint8_t v)
{
	uint8_t *p = kvt_buf_reserve(b, 1);
	if (p)
		p[0] = v;
}

void kvt_put_u16(struct kvt_buf *b, uint16_t v)
{
	uint8_t *p = kvt_buf_reserve(b, 2);
	if (p) {
		p[0] = (uint8_t)v;
		p[1] = (uint8_t)(v >> 8);
	}
}

void kvt_put_u32(struct kvt_buf *b, uint32_t v)
{
	uint8_t *p = kvt_buf_reserve(b, 4);
	if (p)
		for (int i = 0; i < 4; i++)
			p[i] = (uint8_t)(v >> (8 * i));
}

void kvt_put_u64(struct kvt_buf *b, uint64_t v)
{
	uint8_t *p = kvt_buf_reserve(b, 8);
	if (p)
		for (int i = 0; i < 8; i++)
			p[i] = (uint8_t)(v >> (8 * i));
}

void kvt_put_bytes(struct kvt_buf *b, const void *src, size_t n)
{
	uint8_t *p = kvt_buf_reserve(b, n);
	if (p && n)
		memcpy(p, src, n);
}

void kvt_put_str(struct kvt_buf *b, const char *s)
{
	size_t n = s ? strnlen(s, KVT_MAX_STRING) : 0;
	kvt_put_u16(b, (uint16_t)n);
	kvt_put_bytes(b, s, n);
}

int kvt_get_bytes(struct kvt_cursor *c, size_t n, const uint8_t **ret)
{
	if (n > c->left)
		return -EBADMSG;
	*ret = c->p;
	c->p += n;
	c->left -= n;
	return 0;
}

int kvt_get_u8(struct kvt_cursor *c, uint8_t *ret)
{
	const uint8_t *p;
	int r = kvt_get_bytes(c, 1, &p);
	if (r < 0)
		return r;
	*ret = p[0];
	return 0;
}

int kvt_get_u16(struct kvt_cursor *c, uint16_t *ret)
{
	const uint8_t *p;
	int r = kvt_get_bytes(c, 2, &p);
	if (r < 0)
		return r;
	*ret = (uint16_t)(p[0] | (p[1] << 8));
	return 0;
}

int kvt_get_u32(struct kvt_cursor *c, uint32_t *ret)
{
	const uint8_t *p;
	int r = kvt_get_bytes(c, 4, &p);
	if (r < 0)
		return r;
	uint32_t v = 0;
	for (int i = 3; i >= 0; i--)
		v = (v << 8) | p[i];
	*ret = v;
	return 0;
}

int kvt_get_u64(struct kvt_cursor *c, uint64_t *ret)
{
	const uint8_t *p;
	int r = kvt_get_bytes(c, 8, &p);
	if (r < 0)
		return r;
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	*ret = v;
	return 0;
}

int kvt_get_str(struct kvt_cursor *c, size_t max, char *ret, size_t ret_size)
{
	uint16_t n;
	const uint8_t *p;
	int r = kvt_get_u16(c, &n);
	if (r < 0)
		return r;
	if (n > max || n >= ret_size)
		return -EBADMSG;
	r = kvt_get_bytes(c, n, &p);
	if (r < 0)
		return r;
	/* Strings are text for logs and tables: no embedded NULs. */
	if (memchr(p, 0, n))
		return -EBADMSG;
	memcpy(ret, p, n);
	ret[n] = 0;
	return 0;
}

int kvt_cursor_end(const struct kvt_cursor *c)
{
	return c->left == 0 ? 0 : -EBADMSG;
}

void kvt_msg_begin(struct kvt_buf *b, uint16_t version, uint16_t opcode,
		   uint16_t flags, uint64_t request_id)
{
	kvt_buf_reset(b);
	kvt_put_u32(b, KVT_MAGIC);
	kvt_put_u16(b, version);
	kvt_put_u16(b, opcode);
	kvt_put_u32(b, 0); /* length, patched by kvt_msg_finish */
	kvt_put_u16(b, 0); /* n_fds, patched */
	kvt_put_u16(b, flags);
	kvt_put_u64(b, request_id);
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
	for (int i = 0; i < 4; i++)
		b->data[8 + i] = (uint8_t)(payload >> (8 * i));
	b->data[12] = (uint8_t)n_fds;
	b->data[13] = (uint8_t)(n_fds >> 8);
	return 0;
}

int kvt_header_parse(const uint8_t *p, struct kvt_header *ret)
{
	struct kvt_cursor c = {p, KVT_HEADER_SIZE};
	struct kvt_header h;

	(void)kvt_get_u32(&c, &h.magic);
	(void)kvt_get_u16(&c, &h.version);
	(void)kvt_get_u16(&c, &h.opcode);
	(void)kvt_get_u32(&c, &h.length);
	(void)kvt_get_u16(&c, &h.n_fds);
	(void)kvt_get_u16(&c, &h.flags);
	(void)kvt_get_u64(&c, &h.request_id);
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
			if (n_got < sizeof(got) / sizeof(got[0]))
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
