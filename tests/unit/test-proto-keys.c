/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Key batches: the one request layout of LOOKUP, RESERVE, ACQUIRE, TOUCH
 * and DELETE (a namespace, an argument, keys), from none to the most a
 * message carries, and the LOOKUP reply (per-key states and the leading
 * run of hits).  Each round-trips, lies on the wire as documented, and
 * refuses counts over the limits and states it does not know.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto-util.h"

static int dec_keys_req(const uint8_t *p, size_t n)
{
	struct kvt_cursor c = { p, n };
	struct kvt_keys_req m;
	return kvt_dec_keys_req(&c, KVT_MAX_KEYS, &m);
}

static int dec_lookup_rep(const uint8_t *p, size_t n)
{
	struct kvt_cursor c = { p, n };
	struct kvt_lookup_rep m;
	return kvt_dec_lookup_rep(&c, &m);
}

static const uint8_t lookup_states[7] = { KVT_STATE_HOST, KVT_STATE_DISK,
					  KVT_STATE_HOST, KVT_STATE_PENDING,
					  KVT_STATE_MISS, KVT_STATE_HOST,
					  KVT_STATE_DISK };

/* ---- key requests ------------------------------------------------- */

static void test_keys(void)
{
	static const struct {
		uint16_t op;
		uint32_t arg;
	} ops[] = {
		{ KVT_OP_LOOKUP, KVT_LOOKUP_TOUCH },
		{ KVT_OP_RESERVE, 3 },
		{ KVT_OP_ACQUIRE, 63 },
		{ KVT_OP_TOUCH, 0 },
		{ KVT_OP_DELETE, 0 },
	};
	_cleanup_(kvt_buf_free) struct kvt_buf b;
	uint8_t keys[5][KVT_KEY_SIZE];

	kvt_buf_init(&b);
	for (unsigned k = 0; k < 5; k++)
		fill_key(keys[k], k + 1);
	for (unsigned i = 0; i < ARRAY_SIZE(ops); i++) {
		struct kvt_keys_req req = { 0x0badf00d + i, ops[i].arg, 5,
					    &keys[0][0] };
		struct kvt_keys_req d;
		struct kvt_cursor c;

		kvt_enc_keys_req(&b, 1, ops[i].op, RID + i, &req);
		CHECK_FRAME(&b, 1, ops[i].op, 0, RID + i);
		CHECK(b.len == KVT_HEADER_SIZE + 12 + 5 * KVT_KEY_SIZE);
		c = payload_of(&b);
		memset(&d, 0x5c, sizeof(d));
		CHECK(kvt_dec_keys_req(&c, 5, &d) == 0, "opcode %s",
		      kvt_opcode_name(ops[i].op));
		CHECK(d.ns_id == req.ns_id && d.arg == req.arg && d.n == 5);
		CHECK(d.keys && memcmp(d.keys, keys, sizeof(keys)) == 0);
	}
}

static void test_keys_counts(void)
{
	_cleanup_(kvt_buf_free) struct kvt_buf b;

	kvt_buf_init(&b);
	/* No keys at all is a valid (empty) request. */
	struct kvt_keys_req none = { 1, 0, 0, NULL }, d;
	kvt_enc_keys_req(&b, 1, KVT_OP_LOOKUP, 1, &none);
	struct kvt_cursor c = payload_of(&b);
	CHECK(kvt_dec_keys_req(&c, 16, &d) == 0 && d.n == 0);

	/* The most keys a message can carry. */
	_cleanup_free_ uint8_t *many = malloc((size_t)KVT_MAX_KEYS * KVT_KEY_SIZE);
	CHECK(many != NULL);
	if (many) {
		for (unsigned k = 0; k < KVT_MAX_KEYS; k++)
			fill_key(many + (size_t)k * KVT_KEY_SIZE, k);
		struct kvt_keys_req full = { 2, 0, KVT_MAX_KEYS, many };
		kvt_enc_keys_req(&b, 1, KVT_OP_LOOKUP, 3, &full);
		CHECK(kvt_msg_finish(&b, 0) == 0);
		c = payload_of(&b);
		CHECK(kvt_dec_keys_req(&c, KVT_MAX_KEYS, &d) == 0);
		CHECK(d.n == KVT_MAX_KEYS &&
		      memcmp(d.keys, many, (size_t)KVT_MAX_KEYS * 32) == 0);
	}
}

static void test_keys_layout(void)
{
	static const uint8_t want_keys[] = {
		/* header */
		0x4b, 0x56, 0x54, 0x31, /* magic "KVT1" at 0 */
		0x01, 0x00,             /* version at 4 */
		0x03, 0x00,             /* opcode LOOKUP at 6 */
		0x2c, 0x00, 0x00, 0x00, /* length 44 at 8 */
		0x00, 0x00,             /* n_fds at 12 */
		0x00, 0x00,             /* flags at 14 */
		0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, /* rid at 16 */
		/* payload */
		0x44, 0x33, 0x22, 0x11, /* ns_id */
		0x01, 0x00, 0x00, 0x00, /* arg */
		0x01, 0x00, 0x00, 0x00, /* n */
		0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07,
		0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
		0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17,
		0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f,
	};
	_cleanup_(kvt_buf_free) struct kvt_buf b;
	uint8_t key[KVT_KEY_SIZE];

	for (unsigned i = 0; i < KVT_KEY_SIZE; i++)
		key[i] = (uint8_t)i;
	kvt_buf_init(&b);
	struct kvt_keys_req req = { 0x11223344, 1, 1, key };
	kvt_enc_keys_req(&b, 1, KVT_OP_LOOKUP, UINT64_C(0x0102030405060708),
			 &req);
	CHECK(kvt_msg_finish(&b, 0) == 0);
	CHECK(b.len == sizeof(want_keys) &&
	      memcmp(b.data, want_keys, sizeof(want_keys)) == 0);
}

/* Counts over the caller's limit or the wire's, and keys not all there. */
static void test_keys_malformed(void)
{
	_cleanup_(kvt_buf_free) struct kvt_buf b;
	uint8_t key[KVT_KEY_SIZE];
	struct kvt_keys_req kr;
	struct kvt_cursor c;

	kvt_buf_init(&b);
	fill_key(key, 9);
	kvt_put_u32(&b, 1);
	kvt_put_u32(&b, 0);
	kvt_put_u32(&b, 3);
	for (int i = 0; i < 3; i++)
		kvt_put_bytes(&b, key, sizeof(key));
	c = (struct kvt_cursor){ b.data, b.len };
	CHECK(kvt_dec_keys_req(&c, 3, &kr) == 0);
	c = (struct kvt_cursor){ b.data, b.len };
	CHECK(kvt_dec_keys_req(&c, 2, &kr) == -E2BIG);
	c = (struct kvt_cursor){ b.data, b.len - 32 };
	CHECK(kvt_dec_keys_req(&c, 3, &kr) == -EBADMSG);

	const uint32_t too_many[] = { KVT_MAX_KEYS + 1, 0xffffffff };
	for (unsigned i = 0; i < ARRAY_SIZE(too_many); i++) {
		kvt_buf_reset(&b);
		kvt_put_u32(&b, 1);
		kvt_put_u32(&b, 0);
		kvt_put_u32(&b, too_many[i]);
		c = (struct kvt_cursor){ b.data, b.len };
		CHECK(kvt_dec_keys_req(&c, UINT32_MAX, &kr) == -E2BIG,
		      "%u keys", too_many[i]);
	}
}

/* ---- LOOKUP reply ------------------------------------------------- */

static void test_lookup_rep(void)
{
	_cleanup_(kvt_buf_free) struct kvt_buf b;
	struct kvt_lookup_rep lr = { 7, 3, lookup_states }, dl;
	struct kvt_cursor c;

	kvt_buf_init(&b);
	kvt_enc_lookup_rep(&b, 1, RID, &lr);
	CHECK_FRAME(&b, 1, KVT_OP_LOOKUP, KVT_FLAG_REPLY, RID);
	c = payload_of(&b);
	CHECK(kvt_dec_lookup_rep(&c, &dl) == 0);
	CHECK(dl.n == 7 && dl.leading == 3);
	CHECK(dl.states && memcmp(dl.states, lookup_states, 7) == 0);
}

static void test_lookup_malformed(void)
{
	/* n, leading and the states present. */
	static const struct {
		const char *what;
		uint32_t n, leading;
		uint8_t states[3];
		unsigned n_states;
		int want;
	} reps[] = {
		{ "lookup leading > n", 2, 3, { 1, 1 }, 2, -EBADMSG },
		{ "lookup leading == n", 2, 2, { 1, 2 }, 2, 0 },
		{ "lookup n > bytes present", 5, 0, { 1 }, 1, -EBADMSG },
	};
	_cleanup_(kvt_buf_free) struct kvt_buf b;

	kvt_buf_init(&b);
	for (unsigned bad = 4; bad < 256; bad += (bad < 8 ? 1 : 61)) {
		kvt_buf_reset(&b);
		kvt_put_u32(&b, 3);
		kvt_put_u32(&b, 0);
		kvt_put_u8(&b, KVT_STATE_HOST);
		kvt_put_u8(&b, KVT_STATE_MISS);
		kvt_put_u8(&b, (uint8_t)bad);
		EXPECT_DEC(dec_lookup_rep, &b, -EBADMSG, "lookup state > 3");
	}
	for (unsigned i = 0; i < ARRAY_SIZE(reps); i++) {
		kvt_buf_reset(&b);
		kvt_put_u32(&b, reps[i].n);
		kvt_put_u32(&b, reps[i].leading);
		kvt_put_bytes(&b, reps[i].states, reps[i].n_states);
		EXPECT_DEC(dec_lookup_rep, &b, reps[i].want, reps[i].what);
	}
	kvt_buf_reset(&b);
	kvt_put_u32(&b, KVT_MAX_KEYS + 1);
	kvt_put_u32(&b, 0);
	kvt_buf_reserve(&b, KVT_MAX_KEYS + 1);
	memset(b.data + 8, 0, KVT_MAX_KEYS + 1);
	EXPECT_DEC(dec_lookup_rep, &b, -EBADMSG, "lookup n > KVT_MAX_KEYS");
}

/* ---- every encoder/decoder pair ----------------------------------- */

/* Three keys, for the row's opcode. */
static void enc_keys(struct kvt_buf *b, uint8_t fill, uint16_t op)
{
	uint8_t keys[3][KVT_KEY_SIZE];
	struct kvt_keys_req kr;

	for (unsigned k = 0; k < 3; k++)
		fill_key(keys[k], 40 + k);
	memset(&kr, fill, sizeof(kr));
	kr.ns_id = 7;
	kr.arg = 1;
	kr.n = 3;
	kr.keys = &keys[0][0];
	kvt_enc_keys_req(b, 1, op, RID, &kr);
}

static void enc_keys_two(struct kvt_buf *b, uint8_t fill, uint16_t op)
{
	uint8_t keys[2][KVT_KEY_SIZE];
	struct kvt_keys_req kr;

	fill_key(keys[0], 1);
	fill_key(keys[1], 2);
	memset(&kr, fill, sizeof(kr));
	kr.ns_id = 5;
	kr.arg = 0;
	kr.n = 2;
	kr.keys = &keys[0][0];
	kvt_enc_keys_req(b, 1, op, RID, &kr);
}

static void enc_lookup_rep(struct kvt_buf *b, uint8_t fill, uint16_t op)
{
	struct kvt_lookup_rep lr;

	memset(&lr, fill, sizeof(lr));
	lr.n = 7;
	lr.leading = 3;
	lr.states = lookup_states;
	kvt_enc_lookup_rep(b, 1, RID, &lr);
}

static const struct proto_sample samples[] = {
	{ "LOOKUP", enc_keys, KVT_OP_LOOKUP, dec_keys_req, false, true },
	{ "RESERVE", enc_keys, KVT_OP_RESERVE, dec_keys_req, false, true },
	{ "ACQUIRE", enc_keys, KVT_OP_ACQUIRE, dec_keys_req, false, true },
	{ "TOUCH", enc_keys, KVT_OP_TOUCH, dec_keys_req, false, true },
	{ "DELETE", enc_keys, KVT_OP_DELETE, dec_keys_req, false, true },
	{ "RESERVE of two keys", enc_keys_two, KVT_OP_RESERVE, dec_keys_req, false, true },
	{ "lookup_rep", enc_lookup_rep, 0, dec_lookup_rep, false, true },
};

int main(void)
{
	test_keys();
	test_keys_counts();
	test_keys_layout();
	test_keys_malformed();
	test_lookup_rep();
	test_lookup_malformed();
	CHECK_SAMPLES(samples);
	return proto_test_end("test-proto-keys");
}
