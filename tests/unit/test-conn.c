/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The connection (proto/conn.c) over socketpairs: messages split at every
 * byte and batched, lengths checked before use, the descriptor queue
 * (close-on-exec, limits, nothing leaked), the output queue of a full
 * socket, and the header flags it sets.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../check.h"
#include "../helpers.h"
#include "conn.h"

static void pair(int sv[2])
{
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) < 0)
		abort();
}

/* A PING-shaped message with payload bytes 0, 1, 2, ... */
static void message(struct kvt_buf *b, uint64_t rid, size_t payload)
{
	kvt_msg_begin(b, KVT_PROTO_VERSION_MIN, KVT_OP_PING, 0, rid);
	for (size_t i = 0; i < payload; i++)
		kvt_put_u8(b, (uint8_t)i);
}

static int payload_ok(const struct kvt_cursor *c, size_t n)
{
	if (c->left != n)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (c->p[i] != (uint8_t)i)
			return 0;
	return 1;
}

static void test_split_and_batched(void)
{
	struct kvt_conn in;
	struct kvt_header h;
	struct kvt_cursor c;
	struct kvt_buf b;
	int sv[2];

	pair(sv);
	kvt_conn_init(&in, sv[1], 0);
	kvt_buf_init(&b);
	message(&b, 7, 100);
	CHECK(kvt_msg_finish(&b, 0) == 0);
	/* One byte at a time: no message until the last byte is there. */
	for (size_t i = 0; i < b.len; i++) {
		CHECK(kvt_conn_next(&in, &h, &c) == 0);
		CHECK(write(sv[0], b.data + i, 1) == 1);
		CHECK(kvt_conn_recv(&in, false) == 1);
	}
	CHECK(kvt_conn_next(&in, &h, &c) == 1);
	CHECK(h.request_id == 7 && h.opcode == KVT_OP_PING && h.length == 100);
	CHECK(payload_ok(&c, 100));
	kvt_conn_consume(&in);
	CHECK(kvt_conn_buffered(&in) == 0);
	CHECK(kvt_conn_next(&in, &h, &c) == 0);

	/* Three in one write, the last cut short: two come out. */
	struct kvt_buf all;
	kvt_buf_init(&all);
	for (uint64_t rid = 1; rid <= 3; rid++) {
		message(&b, rid, 10 * rid);
		CHECK(kvt_msg_finish(&b, 0) == 0);
		kvt_put_bytes(&all, b.data, rid == 3 ? b.len - 1 : b.len);
	}
	CHECK(write(sv[0], all.data, all.len) == (ssize_t)all.len);
	CHECK(kvt_conn_recv(&in, false) == (ssize_t)all.len);
	for (uint64_t rid = 1; rid <= 2; rid++) {
		CHECK(kvt_conn_next(&in, &h, &c) == 1 && h.request_id == rid);
		CHECK(payload_ok(&c, 10 * rid));
		kvt_conn_consume(&in);
	}
	CHECK(kvt_conn_next(&in, &h, &c) == 0);
	CHECK(write(sv[0], b.data + b.len - 1, 1) == 1);
	CHECK(kvt_conn_recv(&in, false) == 1);
	CHECK(kvt_conn_next(&in, &h, &c) == 1 && h.request_id == 3 && payload_ok(&c, 30));
	kvt_conn_consume(&in);
	CHECK(kvt_conn_recv(&in, false) == -EAGAIN);

	/* The largest payload the wire allows, through a growing buffer. */
	message(&b, 9, KVT_MAX_PAYLOAD);
	CHECK(kvt_msg_finish(&b, 0) == 0);
	struct kvt_conn out;
	kvt_conn_init(&out, sv[0], 0);
	CHECK(kvt_conn_send(&out, &b, NULL, 0) == 0);
	int got = 0;
	for (int i = 0; i < 100000 && !got; i++) {
		CHECK(kvt_conn_flush(&out) == 0);
		ssize_t n = kvt_conn_recv(&in, false);
		CHECK(n > 0 || n == -EAGAIN);
		got = kvt_conn_next(&in, &h, &c);
	}
	CHECK(got == 1 && h.length == KVT_MAX_PAYLOAD && payload_ok(&c, KVT_MAX_PAYLOAD));
	CHECK(!kvt_conn_out_pending(&out) && out.out_bytes == 0);
	kvt_conn_consume(&in);

	/* A header that lies is refused before its length is used. */
	uint8_t bad[KVT_HEADER_SIZE];
	memcpy(bad, b.data, sizeof(bad));
	bad[0] ^= 1;
	CHECK(write(sv[0], bad, sizeof(bad)) == (ssize_t)sizeof(bad));
	CHECK(kvt_conn_recv(&in, false) == (ssize_t)sizeof(bad));
	CHECK(kvt_conn_next(&in, &h, &c) == -EBADMSG);

	kvt_conn_free(&out);
	kvt_conn_free(&in);
	kvt_buf_free(&b);
	kvt_buf_free(&all);
}

static void test_fds(void)
{
	int before = count_fds(getpid());
	struct kvt_conn out, in;
	struct kvt_header h;
	struct kvt_cursor c;
	struct kvt_buf b;
	int sv[2], fds[2], got[KVT_MAX_FDS];

	pair(sv);
	kvt_conn_init(&out, sv[0], 0);
	kvt_conn_init(&in, sv[1], KVT_CONN_MAX_IN_FDS);
	kvt_buf_init(&b);
	fds[0] = open("/dev/null", O_RDONLY | O_CLOEXEC);
	fds[1] = open("/dev/null", O_RDONLY | O_CLOEXEC);
	message(&b, 1, 8);
	CHECK(kvt_msg_finish(&b, 2) == 0);
	CHECK(kvt_conn_send(&out, &b, fds, 2) == 0);
	CHECK(kvt_conn_recv(&in, false) == (ssize_t)b.len);
	CHECK(kvt_conn_next(&in, &h, &c) == 1 && h.n_fds == 2);
	CHECK(kvt_conn_take_fds(&in, 3, got) == -EBADMSG);
	CHECK(kvt_conn_take_fds(&in, 2, got) == 0);
	for (int i = 0; i < 2; i++) {
		CHECK(fcntl(got[i], F_GETFD) & FD_CLOEXEC);
		close(got[i]);
	}
	kvt_conn_consume(&in);

	/* Received and never taken: closed with the connection. */
	CHECK(kvt_conn_send(&out, &b, fds, 2) == 0);
	CHECK(kvt_conn_recv(&in, false) == (ssize_t)b.len);
	CHECK(in.n_in_fds == 2);
	kvt_conn_free(&in);

	/* A peer that may send none: -EPROTO, and nothing stays open. */
	pair(sv);
	kvt_conn_init(&in, sv[1], 0);
	kvt_conn_open(&out, sv[0]);
	CHECK(kvt_conn_send(&out, &b, fds, 2) == 0);
	CHECK(kvt_conn_recv(&in, false) == -EPROTO);
	CHECK(in.n_in_fds == 0);

	/* More than a message may carry is not sent. */
	int many[KVT_MAX_FDS + 1];
	for (int i = 0; i <= KVT_MAX_FDS; i++)
		many[i] = fds[0];
	CHECK(kvt_conn_send(&out, &b, many, KVT_MAX_FDS + 1) == -EINVAL);

	close(fds[0]);
	close(fds[1]);
	kvt_conn_free(&in);
	kvt_conn_free(&out);
	kvt_buf_free(&b);
	CHECK(count_fds(getpid()) == before);
}

/* A socket that takes little: the rest queues, in order, with the
 * descriptors on the first byte of their message. */
static void test_queue(void)
{
	int before = count_fds(getpid());
	struct kvt_conn out, in;
	struct kvt_header h;
	struct kvt_cursor c;
	struct kvt_buf b;
	int sv[2], small = 4096, devnull, got;

	pair(sv);
	setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
	setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
	kvt_conn_init(&out, sv[0], 0);
	kvt_conn_init(&in, sv[1], KVT_CONN_MAX_IN_FDS);
	kvt_buf_init(&b);
	devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
	for (uint64_t rid = 1; rid <= 8; rid++) {
		message(&b, rid, 20000);
		CHECK(kvt_msg_finish(&b, rid == 5) == 0);
		CHECK(kvt_conn_send(&out, &b, rid == 5 ? &devnull : NULL, rid == 5) == 0);
	}
	CHECK(kvt_conn_out_pending(&out) && out.out_bytes > 0);
	uint64_t next = 1;
	for (int i = 0; i < 100000 && next <= 8; i++) {
		CHECK(kvt_conn_flush(&out) == 0);
		ssize_t n = kvt_conn_recv(&in, false);
		CHECK(n > 0 || n == -EAGAIN);
		while (kvt_conn_next(&in, &h, &c) == 1) {
			CHECK(h.request_id == next && payload_ok(&c, 20000));
			CHECK(h.n_fds == (next == 5));
			if (h.n_fds && kvt_conn_take_fds(&in, 1, &got) == 0)
				close(got);
			kvt_conn_consume(&in);
			next++;
		}
	}
	CHECK(next == 9);
	CHECK(!kvt_conn_out_pending(&out) && out.out_bytes == 0);
	CHECK(in.n_in_fds == 0); /* sent once, with the first byte only */

	/* Queued output goes with the connection. */
	message(&b, 1, 60000);
	CHECK(kvt_msg_finish(&b, 0) == 0);
	CHECK(kvt_conn_send(&out, &b, NULL, 0) == 0);
	CHECK(kvt_conn_send(&out, &b, NULL, 0) == 0);
	CHECK(kvt_conn_out_pending(&out));
	kvt_conn_close(&out);
	CHECK(!kvt_conn_out_pending(&out) && out.out_bytes == 0 && out.fd < 0);
	CHECK(kvt_conn_send(&out, &b, NULL, 0) == -ENOTCONN);

	/* A peer gone: the socket's error. */
	kvt_conn_free(&out);
	pair(sv);
	kvt_conn_open(&out, sv[0]);
	close(sv[1]);
	CHECK(kvt_conn_send(&out, &b, NULL, 0) == -EPIPE);

	close(devnull);
	kvt_conn_free(&out);
	kvt_conn_free(&in);
	kvt_buf_free(&b);
	CHECK(count_fds(getpid()) == before);
}

static void *no_memory(void *p, size_t size, void *userdata)
{
	(*(int *)userdata)++;
	return NULL;
}

static void test_flags_and_growth(void)
{
	struct kvt_header h;
	struct kvt_conn in;
	struct kvt_buf b;
	int sv[2], calls = 0;

	kvt_buf_init(&b);
	kvt_msg_begin(&b, KVT_PROTO_VERSION_MIN, KVT_OP_STATS, KVT_FLAG_REPLY, 3);
	kvt_msg_add_flags(&b, KVT_FLAG_MORE);
	CHECK(kvt_msg_finish(&b, 0) == 0);
	CHECK(kvt_header_parse(b.data, &h) == 0);
	CHECK(h.flags == (KVT_FLAG_REPLY | KVT_FLAG_MORE) && h.request_id == 3);

	/* The buffer grows only through the hook, and a failure is -ENOMEM. */
	pair(sv);
	kvt_conn_init(&in, sv[1], 0);
	in.in_realloc = no_memory;
	in.userdata = &calls;
	CHECK(write(sv[0], b.data, b.len) == (ssize_t)b.len);
	CHECK(kvt_conn_recv(&in, false) == -ENOMEM && calls == 1);
	kvt_conn_free(&in);
	close(sv[0]);
	kvt_buf_free(&b);
}

int main(void)
{
	test_split_and_batched();
	test_fds();
	test_queue();
	test_flags_and_growth();
	if (failures) {
		fprintf(stderr, "%d check(s) failed\n", failures);
		return 1;
	}
	return 0;
}
