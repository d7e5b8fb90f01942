/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What every message goes through: the header parser refuses each bad
 * field, the framer refuses what the parser would, cursors read
 * little-endian and strings within their bounds, and kvt_sendmsg /
 * kvt_recvmsg carry descriptors over a real socketpair (close-on-exec,
 * appended, refused when unasked or too many, none leaked).  The
 * connection built on them is test-conn.c's.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../helpers.h"
#include "byteorder.h"
#include "proto-util.h"

/* ---- header validation -------------------------------------------- */

/* A valid STATS request's header in hdr. */
static void good_header(uint8_t *hdr)
{
	_cleanup_(kvt_buf_free) struct kvt_buf b;

	kvt_buf_init(&b);
	kvt_enc_stats_req(&b, 1, 9, KVT_STATS_ALL);
	CHECK(kvt_msg_finish(&b, 0) == 0);
	memcpy(hdr, b.data, KVT_HEADER_SIZE);
}

static void test_header_magic_version(void)
{
	uint8_t good[KVT_HEADER_SIZE], hdr[KVT_HEADER_SIZE];
	struct kvt_header h;

	good_header(good);
	memcpy(hdr, good, sizeof(hdr));
	CHECK(kvt_header_parse(hdr, &h) == 0);

	/* Bad magic: every byte of it, and byte order swapped. */
	for (int i = 0; i < 4; i++) {
		memcpy(hdr, good, sizeof(hdr));
		hdr[i] ^= 0x20;
		CHECK(kvt_header_parse(hdr, &h) == -EBADMSG, "magic byte %d", i);
	}
	memcpy(hdr, good, sizeof(hdr));
	kvt_put_le32(hdr + 0, 0x4b565431u);
	CHECK(kvt_header_parse(hdr, &h) == -EBADMSG);

	/* Versions outside what this build speaks. */
	const uint16_t bad_versions[] = { 0, KVT_PROTO_VERSION_MAX + 1, 0x100,
					  0xffff };
	for (unsigned i = 0; i < ARRAY_SIZE(bad_versions); i++) {
		memcpy(hdr, good, sizeof(hdr));
		kvt_put_le16(hdr + 4, bad_versions[i]);
		CHECK(kvt_header_parse(hdr, &h) == -EPROTONOSUPPORT,
		      "version %u", bad_versions[i]);
	}
}

static void test_header_fields(void)
{
	uint8_t good[KVT_HEADER_SIZE], hdr[KVT_HEADER_SIZE];
	struct kvt_header h;

	good_header(good);

	/* Length: the maximum is fine, one more is not. */
	memcpy(hdr, good, sizeof(hdr));
	kvt_put_le32(hdr + 8, KVT_MAX_PAYLOAD);
	CHECK(kvt_header_parse(hdr, &h) == 0 && h.length == KVT_MAX_PAYLOAD);
	kvt_put_le32(hdr + 8, KVT_MAX_PAYLOAD + 1);
	CHECK(kvt_header_parse(hdr, &h) == -EBADMSG);
	kvt_put_le32(hdr + 8, 0xffffffffu);
	CHECK(kvt_header_parse(hdr, &h) == -EBADMSG);

	/* Descriptors. */
	memcpy(hdr, good, sizeof(hdr));
	kvt_put_le16(hdr + 12, KVT_MAX_FDS);
	CHECK(kvt_header_parse(hdr, &h) == 0 && h.n_fds == KVT_MAX_FDS);
	kvt_put_le16(hdr + 12, KVT_MAX_FDS + 1);
	CHECK(kvt_header_parse(hdr, &h) == -EBADMSG);
	kvt_put_le16(hdr + 12, 0x100);
	CHECK(kvt_header_parse(hdr, &h) == -EBADMSG);

	/* Every known flag is accepted, every unknown bit refused. */
	memcpy(hdr, good, sizeof(hdr));
	kvt_put_le16(hdr + 14, KVT_FLAGS_KNOWN);
	CHECK(kvt_header_parse(hdr, &h) == 0 && h.flags == KVT_FLAGS_KNOWN);
	for (unsigned bit = 0; bit < 16; bit++) {
		uint16_t f = (uint16_t)(1u << bit);
		if (f & KVT_FLAGS_KNOWN)
			continue;
		kvt_put_le16(hdr + 14, f);
		CHECK(kvt_header_parse(hdr, &h) == -EBADMSG, "flag 0x%x", f);
	}

	/* The request id is opaque: any value. */
	memcpy(hdr, good, sizeof(hdr));
	memset(hdr + 16, 0xff, 8);
	CHECK(kvt_header_parse(hdr, &h) == 0 && h.request_id == UINT64_MAX);
}

/* The framer refuses what the parser would refuse. */
static void test_framer(void)
{
	_cleanup_(kvt_buf_free) struct kvt_buf b;
	struct kvt_header h;

	kvt_buf_init(&b);
	kvt_enc_stats_req(&b, 1, 9, KVT_STATS_ALL);
	CHECK(kvt_msg_finish(&b, KVT_MAX_FDS + 1) == -EMSGSIZE);
	kvt_msg_begin(&b, 1, KVT_OP_PING, 0, 1);
	CHECK(kvt_buf_reserve(&b, KVT_MAX_PAYLOAD) != NULL);
	CHECK(kvt_msg_finish(&b, 0) == 0);
	CHECK(kvt_header_parse(b.data, &h) == 0 && h.length == KVT_MAX_PAYLOAD);
	CHECK(kvt_buf_reserve(&b, 1) != NULL);
	CHECK(kvt_msg_finish(&b, 0) == -EMSGSIZE);
	kvt_buf_reset(&b);
	kvt_put_u32(&b, KVT_MAGIC);
	CHECK(kvt_msg_finish(&b, 0) == -EINVAL);
}

/* ---- cursors ------------------------------------------------------ */

static void test_cursor(void)
{
	/* Cursors read little-endian regardless of the host. */
	static const uint8_t le[] = { 0x01, 0x02, 0x03, 0x04, 0x05, 0x06,
				      0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c,
				      0x0d, 0x0e, 0x0f };
	struct kvt_cursor c = { le, sizeof(le) };
	uint8_t v8;
	uint16_t v16;
	uint32_t v32;
	uint64_t v64;

	CHECK(kvt_get_u8(&c, &v8) == 0 && v8 == 0x01);
	CHECK(kvt_get_u16(&c, &v16) == 0 && v16 == 0x0302);
	CHECK(kvt_get_u32(&c, &v32) == 0 && v32 == 0x07060504);
	CHECK(kvt_get_u64(&c, &v64) == 0 && v64 == UINT64_C(0x0f0e0d0c0b0a0908));
	CHECK(kvt_cursor_end(&c) == 0);
	CHECK(kvt_get_u8(&c, &v8) == -EBADMSG);

	/* Strings: the caller's bound and the room for the NUL. */
	_cleanup_(kvt_buf_free) struct kvt_buf b;
	char out[8];

	kvt_buf_init(&b);
	put_raw_str(&b, "abcdefgh", 8);
	c = (struct kvt_cursor){ b.data, b.len };
	CHECK(kvt_get_str(&c, 16, out, sizeof(out)) == -EBADMSG);
	c = (struct kvt_cursor){ b.data, b.len };
	CHECK(kvt_get_str(&c, 7, out, 64) == -EBADMSG);
	kvt_buf_reset(&b);
	put_raw_str(&b, "abcdefg", 7);
	c = (struct kvt_cursor){ b.data, b.len };
	CHECK(kvt_get_str(&c, 7, out, sizeof(out)) == 0 &&
	      strcmp(out, "abcdefg") == 0 && kvt_cursor_end(&c) == 0);
}

/* ---- descriptors over a socketpair -------------------------------- */

static int make_memfd(const char *name, const char *content)
{
	int fd = memfd_create(name, MFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (write(fd, content, strlen(content)) != (ssize_t)strlen(content)) {
		close(fd);
		return -EIO;
	}
	return fd;
}

static bool same_file(int a, int b)
{
	struct stat sa, sb;
	return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 &&
	       sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* A socketpair and KVT_MAX_FDS memfds, memfd-<i> holding its own name. */
static int socket_setup(int sv[2], int mf[KVT_MAX_FDS])
{
	char text[16];

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return -errno;
	for (int i = 0; i < KVT_MAX_FDS; i++) {
		snprintf(text, sizeof(text), "memfd-%d", i);
		mf[i] = make_memfd(text, text);
		CHECK(mf[i] >= 0);
	}
	return 0;
}

/* Two descriptors with a message; both arrive close-on-exec. */
static void check_two_fds(const int sv[2], const int mf[KVT_MAX_FDS], int before)
{
	_cleanup_(kvt_buf_free) struct kvt_buf b;
	int got[KVT_MAX_FDS + 2];
	uint8_t in[256];
	struct kvt_extent_note en;
	struct kvt_header h;
	unsigned n_got = 0;
	char text[16];

	kvt_buf_init(&b);
	set_extent_note(&en);
	kvt_enc_extent_note(&b, 1, &en);
	CHECK(kvt_msg_finish(&b, 2) == 0);
	CHECK(kvt_sendmsg(sv[0], b.data, b.len, mf, 2) == (ssize_t)b.len);
	memset(got, -1, sizeof(got));
	CHECK(kvt_recvmsg(sv[1], in, sizeof(in), got, &n_got, KVT_MAX_FDS) ==
	      (ssize_t)b.len);
	CHECK(n_got == 2);
	CHECK(memcmp(in, b.data, b.len) == 0);
	CHECK(kvt_header_parse(in, &h) == 0 && h.n_fds == 2 &&
	      h.opcode == KVT_OP_EXTENT_ADDED);
	for (unsigned i = 0; i < n_got && i < 2; i++) {
		int fl = fcntl(got[i], F_GETFD);
		CHECK(fl >= 0 && (fl & FD_CLOEXEC), "received fd %u", i);
		CHECK(got[i] != mf[i] && same_file(got[i], mf[i]));
		char buf[16] = { 0 };
		snprintf(text, sizeof(text), "memfd-%u", i);
		CHECK(pread(got[i], buf, sizeof(buf) - 1, 0) == (ssize_t)strlen(text) &&
		      strcmp(buf, text) == 0);
		close(got[i]);
	}
	CHECK(count_fds(getpid()) == before);

	/* Descriptors nobody asked for: refused, none left open. */
	CHECK(kvt_sendmsg(sv[0], b.data, b.len, mf, 2) == (ssize_t)b.len);
	n_got = 0;
	CHECK(kvt_recvmsg(sv[1], in, sizeof(in), got, &n_got, 0) == -EPROTO);
	CHECK(n_got == 0);
	CHECK(count_fds(getpid()) == before, "%d fds open, %d before", count_fds(getpid()),
	      before);
}

/* Received descriptors go after those already held, up to max_fds. */
static void check_appended(const int sv[2], const int mf[KVT_MAX_FDS], int before)
{
	int got[KVT_MAX_FDS + 2];
	uint8_t in[256];
	unsigned n_got = 1;

	CHECK(kvt_sendmsg(sv[0], "ab", 2, mf, KVT_MAX_FDS) == 2);
	got[0] = -7;
	CHECK(kvt_recvmsg(sv[1], in, sizeof(in), got, &n_got, KVT_MAX_FDS + 1) == 2);
	CHECK(n_got == KVT_MAX_FDS + 1 && got[0] == -7);
	for (unsigned i = 1; i < n_got; i++) {
		CHECK(same_file(got[i], mf[i - 1]));
		close(got[i]);
	}
	CHECK(count_fds(getpid()) == before);

	/* More than fit after those already held. */
	CHECK(kvt_sendmsg(sv[0], "x", 1, mf, 2) == 1);
	n_got = 1;
	got[0] = -7;
	CHECK(kvt_recvmsg(sv[1], in, sizeof(in), got, &n_got, 2) == -EPROTO);
	CHECK(n_got == 1 && got[0] == -7);
	CHECK(count_fds(getpid()) == before);
}

/* No descriptors, too many, and a socket that is shut or closed. */
static void check_limits(int sv[2], const int mf[KVT_MAX_FDS])
{
	int got[KVT_MAX_FDS + 2], too_many[KVT_MAX_FDS + 1];
	uint8_t in[256];
	unsigned n_got = 0;

	CHECK(kvt_sendmsg(sv[0], "hello", 5, NULL, 0) == 5);
	CHECK(kvt_recvmsg(sv[1], in, sizeof(in), got, &n_got, 0) == 5);
	CHECK(n_got == 0 && memcmp(in, "hello", 5) == 0);

	for (int i = 0; i <= KVT_MAX_FDS; i++)
		too_many[i] = mf[0];
	CHECK(kvt_sendmsg(sv[0], "x", 1, too_many, KVT_MAX_FDS + 1) == -EINVAL);
	n_got = 0;
	CHECK(kvt_recvmsg(sv[1], in, sizeof(in), got, &n_got, 4) == -EAGAIN);
	close(sv[0]);
	CHECK(kvt_recvmsg(sv[1], in, sizeof(in), got, &n_got, 4) == 0);
	CHECK(kvt_sendmsg(sv[1], "x", 1, NULL, 0) == -EPIPE);
	close(sv[1]);
	CHECK(kvt_sendmsg(sv[1], "x", 1, NULL, 0) == -EBADF);
}

static void test_socket(void)
{
	int sv[2], mf[KVT_MAX_FDS];
	int r = socket_setup(sv, mf);

	if (r < 0) {
		fprintf(stderr, "socketpair: %s\n", strerror(-r));
		failures++;
		return;
	}
	int before = count_fds(getpid());
	CHECK(before > 0);

	check_two_fds(sv, mf, before);
	check_appended(sv, mf, before);
	check_limits(sv, mf);
	for (int i = 0; i < KVT_MAX_FDS; i++)
		close(mf[i]);
}

int main(void)
{
	test_header_magic_version();
	test_header_fields();
	test_framer();
	test_cursor();
	test_socket();
	return proto_test_end("test-proto-header");
}
