/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Slots and handles: the slots reply of RESERVE and ACQUIRE (per key a
 * status, a handle, the extent and offset), the handles request of
 * COMMIT, ABORT and RELEASE, and the per-handle status reply.  Each
 * round-trips, fits exactly at the caller's maximum, and refuses counts
 * over it or over the bytes present, flags other than 0 and 1, and
 * statuses that are not 0 or a negative errno.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "proto-util.h"

static int dec_slots_rep(const uint8_t *p, size_t n)
{
	struct kvt_cursor c = { p, n };
	struct kvt_slot s[16];
	uint32_t k;
	return kvt_dec_slots_rep(&c, s, 16, &k);
}

static int dec_handles_req(const uint8_t *p, size_t n)
{
	struct kvt_cursor c = { p, n };
	struct kvt_handle_arg h[16];
	uint32_t k;
	return kvt_dec_handles_req(&c, 16, h, &k);
}

static int dec_status_rep(const uint8_t *p, size_t n)
{
	struct kvt_cursor c = { p, n };
	int32_t s[16];
	uint32_t k;
	return kvt_dec_status_rep(&c, s, 16, &k);
}

static void set_slots(struct kvt_slot *s)
{
	s[0].status = 0;
	s[0].handle = UINT64_C(0xfedcba9876543210);
	s[0].extent_id = 3;
	s[0].offset = UINT64_C(5) << 32;
	s[1].status = -ENOSPC;
	s[1].handle = 0;
	s[1].extent_id = 0;
	s[1].offset = 0;
	s[2].status = 0;
	s[2].handle = 1;
	s[2].extent_id = 0xffffffff;
	s[2].offset = UINT64_C(0x7ffff000);
}

static void set_handles(struct kvt_handle_arg *h)
{
	h[0].handle = UINT64_C(0x1111222233334444);
	h[0].flag = 1;
	h[1].handle = UINT64_MAX;
	h[1].flag = 0;
	h[2].handle = 0;
	h[2].flag = 1;
	h[3].handle = UINT64_C(0x8000000000000001);
	h[3].flag = 0;
}

static const int32_t statuses[4] = { 0, -ENOENT, 0, -4095 };

/* ---- round trips -------------------------------------------------- */

/* Slots replies for RESERVE and ACQUIRE. */
static void test_slots_rep(void)
{
	static const uint16_t slot_ops[] = { KVT_OP_RESERVE, KVT_OP_ACQUIRE };
	_cleanup_(kvt_buf_free) struct kvt_buf b;
	struct kvt_slot s[3], ds[8];
	struct kvt_cursor c;
	uint32_t n;

	kvt_buf_init(&b);
	memset(s, 0, sizeof(s));
	set_slots(s);
	for (unsigned i = 0; i < ARRAY_SIZE(slot_ops); i++) {
		kvt_enc_slots_rep(&b, 1, slot_ops[i], RID, s, 3);
		CHECK_FRAME(&b, 1, slot_ops[i], KVT_FLAG_REPLY, RID);
		CHECK(b.len == KVT_HEADER_SIZE + 4 + 3 * 24);
		c = payload_of(&b);
		memset(ds, 0x5c, sizeof(ds));
		n = 99;
		CHECK(kvt_dec_slots_rep(&c, ds, 8, &n) == 0 && n == 3);
		for (unsigned k = 0; k < 3; k++) {
			CHECK(ds[k].status == s[k].status);
			CHECK(ds[k].handle == s[k].handle);
			CHECK(ds[k].extent_id == s[k].extent_id);
			CHECK(ds[k].offset == s[k].offset);
		}
	}
	/* Exactly max slots fits. */
	kvt_enc_slots_rep(&b, 1, KVT_OP_RESERVE, 1, s, 3);
	c = payload_of(&b);
	CHECK(kvt_dec_slots_rep(&c, ds, 3, &n) == 0 && n == 3);
}

/* Handles requests for COMMIT, ABORT, RELEASE; status replies. */
static void test_handles(void)
{
	static const uint16_t h_ops[] = { KVT_OP_COMMIT, KVT_OP_ABORT,
					  KVT_OP_RELEASE };
	static const uint16_t st_ops[] = { KVT_OP_COMMIT, KVT_OP_RELEASE,
					   KVT_OP_TOUCH, KVT_OP_DELETE };
	_cleanup_(kvt_buf_free) struct kvt_buf b;
	struct kvt_handle_arg h[4], dh[8];
	struct kvt_cursor c;
	int32_t ds32[8];
	uint32_t n;

	kvt_buf_init(&b);
	memset(h, 0, sizeof(h));
	set_handles(h);
	for (unsigned i = 0; i < ARRAY_SIZE(h_ops); i++) {
		kvt_enc_handles_req(&b, 1, h_ops[i], RID - i, h, 4);
		CHECK_FRAME(&b, 1, h_ops[i], 0, RID - i);
		CHECK(b.len == KVT_HEADER_SIZE + 4 + 4 * 9);
		c = payload_of(&b);
		memset(dh, 0x5c, sizeof(dh));
		n = 99;
		CHECK(kvt_dec_handles_req(&c, 8, dh, &n) == 0 && n == 4);
		for (unsigned k = 0; k < 4; k++)
			CHECK(dh[k].handle == h[k].handle &&
			      dh[k].flag == h[k].flag);
	}

	for (unsigned i = 0; i < ARRAY_SIZE(st_ops); i++) {
		kvt_enc_status_rep(&b, 1, st_ops[i], 77, statuses, 4);
		CHECK_FRAME(&b, 1, st_ops[i], KVT_FLAG_REPLY, 77);
		c = payload_of(&b);
		memset(ds32, 0x5c, sizeof(ds32));
		n = 99;
		CHECK(kvt_dec_status_rep(&c, ds32, 8, &n) == 0 && n == 4);
		CHECK(memcmp(ds32, statuses, sizeof(statuses)) == 0);
	}
}

/* ---- malformed fields --------------------------------------------- */

static void put_slot(struct kvt_buf *b, int32_t status)
{
	kvt_put_u32(b, (uint32_t)status);
	kvt_put_u64(b, 1);
	kvt_put_u32(b, 1);
	kvt_put_u64(b, 0);
}

static void test_slots_malformed(void)
{
	static const int32_t bad_status[] = { 1, 4096, INT32_MAX, -4096,
					      INT32_MIN };
	_cleanup_(kvt_buf_free) struct kvt_buf b;
	struct kvt_slot sl[4];
	struct kvt_cursor c;
	uint32_t n;

	kvt_buf_init(&b);
	kvt_put_u32(&b, 2);
	for (int i = 0; i < 2; i++)
		put_slot(&b, 0);
	c = (struct kvt_cursor){ b.data, b.len };
	CHECK(kvt_dec_slots_rep(&c, sl, 2, &n) == 0 && n == 2);
	c = (struct kvt_cursor){ b.data, b.len };
	CHECK(kvt_dec_slots_rep(&c, sl, 1, &n) == -EBADMSG);
	b.data[0] = 3;
	c = (struct kvt_cursor){ b.data, b.len };
	CHECK(kvt_dec_slots_rep(&c, sl, 4, &n) == -EBADMSG);
	b.data[0] = 1;
	c = (struct kvt_cursor){ b.data, b.len };
	CHECK(kvt_dec_slots_rep(&c, sl, 4, &n) == -EBADMSG);
	for (unsigned i = 0; i < ARRAY_SIZE(bad_status); i++) {
		kvt_buf_reset(&b);
		kvt_put_u32(&b, 1);
		put_slot(&b, bad_status[i]);
		c = (struct kvt_cursor){ b.data, b.len };
		CHECK(kvt_dec_slots_rep(&c, sl, 4, &n) == -EBADMSG,
		      "slot status %d", bad_status[i]);
	}
}

static void test_handles_malformed(void)
{
	_cleanup_(kvt_buf_free) struct kvt_buf b;
	struct kvt_handle_arg ha[4];
	struct kvt_cursor c;
	int32_t st[4];
	uint32_t n;

	kvt_buf_init(&b);
	kvt_put_u32(&b, 3);
	for (int i = 0; i < 3; i++) {
		kvt_put_u64(&b, (uint64_t)i);
		kvt_put_u8(&b, 1);
	}
	c = (struct kvt_cursor){ b.data, b.len };
	CHECK(kvt_dec_handles_req(&c, 3, ha, &n) == 0 && n == 3);
	c = (struct kvt_cursor){ b.data, b.len };
	CHECK(kvt_dec_handles_req(&c, 2, ha, &n) == -E2BIG);
	c = (struct kvt_cursor){ b.data, b.len - 9 };
	CHECK(kvt_dec_handles_req(&c, 4, ha, &n) == -EBADMSG);
	b.data[b.len - 1] = 2;
	c = (struct kvt_cursor){ b.data, b.len };
	CHECK(kvt_dec_handles_req(&c, 4, ha, &n) == -EBADMSG);
	b.data[b.len - 1] = 0xff;
	c = (struct kvt_cursor){ b.data, b.len };
	CHECK(kvt_dec_handles_req(&c, 4, ha, &n) == -EBADMSG);
	kvt_buf_reset(&b);
	kvt_put_u32(&b, 0xffffffff);
	c = (struct kvt_cursor){ b.data, b.len };
	CHECK(kvt_dec_handles_req(&c, UINT32_MAX, ha, &n) < 0);

	/* Status replies. */
	kvt_buf_reset(&b);
	kvt_put_u32(&b, 2);
	kvt_put_u32(&b, 0);
	kvt_put_u32(&b, (uint32_t)-ENOENT);
	c = (struct kvt_cursor){ b.data, b.len };
	CHECK(kvt_dec_status_rep(&c, st, 2, &n) == 0 && n == 2);
	c = (struct kvt_cursor){ b.data, b.len };
	CHECK(kvt_dec_status_rep(&c, st, 1, &n) == -EBADMSG);
	b.data[0] = 3;
	c = (struct kvt_cursor){ b.data, b.len };
	CHECK(kvt_dec_status_rep(&c, st, 4, &n) == -EBADMSG);
	b.data[0] = 2;
	kvt_put_u32(&b, (uint32_t)-4096);
	b.data[0] = 3;
	c = (struct kvt_cursor){ b.data, b.len };
	CHECK(kvt_dec_status_rep(&c, st, 4, &n) == -EBADMSG);
}

/* ---- every encoder/decoder pair ----------------------------------- */

static void enc_slots(struct kvt_buf *b, uint8_t fill, uint16_t op)
{
	struct kvt_slot s[3];

	memset(s, fill, sizeof(s));
	set_slots(s);
	kvt_enc_slots_rep(b, 1, op, RID, s, 3);
}

static void enc_handles(struct kvt_buf *b, uint8_t fill, uint16_t op)
{
	struct kvt_handle_arg h[4];

	memset(h, fill, sizeof(h));
	set_handles(h);
	kvt_enc_handles_req(b, 1, op, RID, h, 4);
}

static void enc_status(struct kvt_buf *b, uint8_t fill, uint16_t op)
{
	kvt_enc_status_rep(b, 1, op, RID, statuses, 4);
}

static const struct proto_sample samples[] = {
	{ "slots_rep", enc_slots, KVT_OP_RESERVE, dec_slots_rep, false, true },
	{ "slots_rep of ACQUIRE", enc_slots, KVT_OP_ACQUIRE, dec_slots_rep, false, true },
	{ "handles_req", enc_handles, KVT_OP_COMMIT, dec_handles_req, false, true },
	{ "status_rep", enc_status, KVT_OP_COMMIT, dec_status_rep, false, true },
};

int main(void)
{
	test_slots_rep();
	test_handles();
	test_slots_malformed();
	test_handles_malformed();
	CHECK_SAMPLES(samples);
	return proto_test_end("test-proto-slots");
}
