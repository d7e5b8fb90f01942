/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The daemon's notices about the pool: EXTENT_ADDED (the extent's id,
 * flags, size, slot size and NUMA node; its memfd travels with it) and
 * EXTENT_RETIRED.  Both are NOTIFY messages with request id 0; they
 * round-trip, and an extent whose sizes cannot hold is refused.  SETTLED,
 * the one notice for a LOOKUP's staged keys: the LOOKUP's request id in
 * its payload, and counts that cannot hold (no keys, more in host memory
 * than were staging, more keys than a request has) are refused.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "proto-util.h"

static int dec_extent_note(const uint8_t *p, size_t n)
{
	struct kvt_cursor c = { p, n };
	struct kvt_extent_note m;
	return kvt_dec_extent_note(&c, &m);
}

static int dec_extent_retired(const uint8_t *p, size_t n)
{
	struct kvt_cursor c = { p, n };
	uint32_t id;
	return kvt_dec_extent_retired(&c, &id);
}

static void test_extent_notes(void)
{
	_cleanup_(kvt_buf_free) struct kvt_buf b;
	struct kvt_extent_note en, den;
	struct kvt_cursor c;

	kvt_buf_init(&b);
	memset(&en, 0, sizeof(en));
	set_extent_note(&en);
	kvt_enc_extent_note(&b, 1, &en);
	CHECK_FRAME(&b, 1, KVT_OP_EXTENT_ADDED, KVT_FLAG_NOTIFY, 0);
	c = payload_of(&b);
	memset(&den, 0x5c, sizeof(den));
	CHECK(kvt_dec_extent_note(&c, &den) == 0);
	CHECK(den.extent_id == en.extent_id && den.flags == en.flags &&
	      den.size == en.size && den.slot_bytes == en.slot_bytes &&
	      den.numa_node == -1);
	en.numa_node = 3;
	en.slot_bytes = en.size;
	kvt_enc_extent_note(&b, 1, &en);
	c = payload_of(&b);
	CHECK(kvt_dec_extent_note(&c, &den) == 0 && den.numa_node == 3 &&
	      den.slot_bytes == en.size);

	uint32_t rid_id = 0;
	kvt_enc_extent_retired(&b, 1, 0xfeedface);
	CHECK_FRAME(&b, 1, KVT_OP_EXTENT_RETIRED, KVT_FLAG_NOTIFY, 0);
	c = payload_of(&b);
	CHECK(kvt_dec_extent_retired(&c, &rid_id) == 0 &&
	      rid_id == 0xfeedface);
}

static void test_extent_malformed(void)
{
	static const struct {
		const char *what;
		uint64_t size, slot;
	} ens[] = {
		{ "size not a multiple of 4096", (64u << 20) + 512, 2u << 20 },
		{ "size 4095", 4095, 4095 },
		{ "slot_bytes > size", 2u << 20, (2u << 20) + 4096 },
		{ "size 0", 0, 0 },
		{ "slot_bytes 0", 4096, 0 },
	};
	_cleanup_(kvt_buf_free) struct kvt_buf b;

	kvt_buf_init(&b);
	for (unsigned i = 0; i < ARRAY_SIZE(ens); i++) {
		kvt_buf_reset(&b);
		kvt_put_u32(&b, 1);
		kvt_put_u32(&b, 0);
		kvt_put_u64(&b, ens[i].size);
		kvt_put_u64(&b, ens[i].slot);
		kvt_put_u32(&b, 0);
		EXPECT_DEC(dec_extent_note, &b, -EBADMSG, ens[i].what);
	}
}

static int dec_settled(const uint8_t *p, size_t n)
{
	struct kvt_cursor c = { p, n };
	struct kvt_settled m;
	return kvt_dec_settled(&c, &m);
}

static void test_settled(void)
{
	_cleanup_(kvt_buf_free) struct kvt_buf b;
	struct kvt_settled m = { RID, 7, 128, 127 }, d;
	struct kvt_cursor c;

	kvt_buf_init(&b);
	kvt_enc_settled(&b, 1, &m);
	CHECK_FRAME(&b, 1, KVT_OP_SETTLED, KVT_FLAG_NOTIFY, 0);
	CHECK(b.len == KVT_HEADER_SIZE + 20);
	c = payload_of(&b);
	memset(&d, 0x5c, sizeof(d));
	CHECK(kvt_dec_settled(&c, &d) == 0);
	CHECK(d.request_id == RID && d.ns_id == 7 && d.n_keys == 128 && d.n_host == 127);
	CHECK(!strcmp(kvt_opcode_name(KVT_OP_SETTLED), "SETTLED"));

	static const struct {
		const char *what;
		uint32_t n_keys, n_host;
	} bad[] = {
		{ "no keys", 0, 0 },
		{ "more in host memory than staging", 4, 5 },
		{ "more keys than a request has", KVT_MAX_KEYS + 1, 0 },
	};
	for (unsigned i = 0; i < ARRAY_SIZE(bad); i++) {
		kvt_buf_reset(&b);
		kvt_put_u64(&b, 1);
		kvt_put_u32(&b, 1);
		kvt_put_u32(&b, bad[i].n_keys);
		kvt_put_u32(&b, bad[i].n_host);
		EXPECT_DEC(dec_settled, &b, -EBADMSG, bad[i].what);
	}
	kvt_buf_reset(&b);
	kvt_put_u64(&b, 1);
	kvt_put_u32(&b, 1);
	kvt_put_u32(&b, KVT_MAX_KEYS);
	kvt_put_u32(&b, KVT_MAX_KEYS);
	EXPECT_DEC(dec_settled, &b, 0, "a request's most keys, all in host memory");
}

/* ---- every encoder/decoder pair ----------------------------------- */

static void enc_note(struct kvt_buf *b, uint8_t fill, uint16_t op)
{
	struct kvt_extent_note en;

	memset(&en, fill, sizeof(en));
	set_extent_note(&en);
	kvt_enc_extent_note(b, 1, &en);
}

static void enc_retired(struct kvt_buf *b, uint8_t fill, uint16_t op)
{
	kvt_enc_extent_retired(b, 1, 12);
}

static void enc_retired_3(struct kvt_buf *b, uint8_t fill, uint16_t op)
{
	kvt_enc_extent_retired(b, 1, 3);
}

static void enc_settled(struct kvt_buf *b, uint8_t fill, uint16_t op)
{
	struct kvt_settled m;

	memset(&m, fill, sizeof(m));
	m.request_id = RID;
	m.ns_id = 3;
	m.n_keys = 48;
	m.n_host = 0;
	kvt_enc_settled(b, 1, &m);
}

static const struct proto_sample samples[] = {
	{ "extent_note", enc_note, 0, dec_extent_note, false, true },
	{ "extent_retired", enc_retired, 0, dec_extent_retired, false, true },
	{ "extent_retired 3", enc_retired_3, 0, dec_extent_retired, false, true },
	{ "settled", enc_settled, 0, dec_settled, false, true },
};

int main(void)
{
	test_extent_notes();
	test_extent_malformed();
	test_settled();
	CHECK_SAMPLES(samples);
	return proto_test_end("test-proto-notices");
}
