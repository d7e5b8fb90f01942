/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The error reply any request may get (REPLY | ERROR: a negative errno and
 * a reason): it round-trips, turns a positive errno negative, cuts a long
 * reason, lies on the wire as documented, and refuses codes that are not
 * a negative errno and reasons over their maximum or holding a NUL.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "proto-util.h"

static int dec_error(const uint8_t *p, size_t n)
{
	struct kvt_cursor c = { p, n };
	struct kvt_error_rep m;
	return kvt_dec_error(&c, &m);
}

static void test_error(void)
{
	_cleanup_(kvt_buf_free) struct kvt_buf b;
	struct kvt_error_rep er;
	struct kvt_cursor c;

	kvt_buf_init(&b);
	kvt_enc_error(&b, 1, KVT_OP_RESERVE, RID, -ENOSPC,
		      "pool is full: 12 of 12 extents in use");
	CHECK_FRAME(&b, 1, KVT_OP_RESERVE, KVT_FLAG_REPLY | KVT_FLAG_ERROR, RID);
	c = payload_of(&b);
	memset(&er, 0x5c, sizeof(er));
	CHECK(kvt_dec_error(&c, &er) == 0);
	CHECK(er.error == -ENOSPC);
	CHECK(strcmp(er.reason, "pool is full: 12 of 12 extents in use") == 0);

	/* The encoder turns a positive errno into the negative one. */
	kvt_enc_error(&b, 1, KVT_OP_HELLO, 1, EPROTONOSUPPORT, NULL);
	c = payload_of(&b);
	CHECK(kvt_dec_error(&c, &er) == 0 && er.error == -EPROTONOSUPPORT &&
	      er.reason[0] == 0);

	/* A reason of exactly the maximum, and one the encoder must cut. */
	char reason[KVT_MAX_REASON + 40];
	memset(reason, 'r', sizeof(reason) - 1);
	reason[sizeof(reason) - 1] = 0;
	kvt_enc_error(&b, 1, KVT_OP_STATS, 1, -4095, reason);
	c = payload_of(&b);
	CHECK(kvt_dec_error(&c, &er) == 0 && er.error == -4095 &&
	      strlen(er.reason) == KVT_MAX_REASON);
}

static void test_error_layout(void)
{
	static const uint8_t want_error[] = {
		0x4b, 0x56, 0x54, 0x31,
		0x01, 0x00,
		0x04, 0x00,
		0x09, 0x00, 0x00, 0x00,
		0x00, 0x00,
		0x03, 0x00, /* REPLY | ERROR */
		0x2a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
		0xe4, 0xff, 0xff, 0xff, /* -28 */
		0x03, 0x00, 'f', 'u', 'l',
	};
	_cleanup_(kvt_buf_free) struct kvt_buf b;

	kvt_buf_init(&b);
	kvt_enc_error(&b, 1, KVT_OP_RESERVE, 42, -ENOSPC, "ful");
	CHECK(kvt_msg_finish(&b, 0) == 0);
	CHECK(b.len == sizeof(want_error) &&
	      memcmp(b.data, want_error, sizeof(want_error)) == 0);
}

static void test_error_malformed(void)
{
	static char text[KVT_MAX_STRING + 8];
	static const int32_t bad_err[] = { 0, 1, EIO, INT32_MAX, -4096, INT32_MIN };
	/* Reasons after -EIO. */
	static const struct {
		const char *what;
		const char *reason;
		uint16_t len;
		int want;
	} reasons[] = {
		{ "reason over its max", text, KVT_MAX_REASON + 1, -EBADMSG },
		{ "reason at its max", text, KVT_MAX_REASON, 0 },
		{ "reason with a NUL", "disk\0gone", 9, -EBADMSG },
		{ "reason ending in a NUL", "disk gone\0", 10, -EBADMSG },
	};
	_cleanup_(kvt_buf_free) struct kvt_buf b;

	kvt_buf_init(&b);
	memset(text, 't', sizeof(text));
	for (unsigned i = 0; i < ARRAY_SIZE(bad_err); i++) {
		kvt_buf_reset(&b);
		kvt_put_u32(&b, (uint32_t)bad_err[i]);
		put_raw_str(&b, "why", 3);
		CHECK(dec_copy(dec_error, b.data, b.len) == -EBADMSG,
		      "error code %d", bad_err[i]);
	}
	for (unsigned i = 0; i < ARRAY_SIZE(reasons); i++) {
		kvt_buf_reset(&b);
		kvt_put_u32(&b, (uint32_t)-EIO);
		put_raw_str(&b, reasons[i].reason, reasons[i].len);
		EXPECT_DEC(dec_error, &b, reasons[i].want, reasons[i].what);
	}
}

/* ---- every encoder/decoder pair ----------------------------------- */

static void enc_error_bad(struct kvt_buf *b, uint8_t fill, uint16_t op)
{
	kvt_enc_error(b, 1, op, RID, -EINVAL, "bad");
}

static void enc_error_gone(struct kvt_buf *b, uint8_t fill, uint16_t op)
{
	kvt_enc_error(b, 1, op, 1, -EIO, "disk gone");
}

static const struct proto_sample samples[] = {
	{ "error", enc_error_gone, KVT_OP_LOOKUP, dec_error, false, true },
	{ "error -EINVAL", enc_error_bad, KVT_OP_LOOKUP, dec_error, false, true },
};

int main(void)
{
	test_error();
	test_error_layout();
	test_error_malformed();
	CHECK_SAMPLES(samples);
	return proto_test_end("test-proto-error");
}
