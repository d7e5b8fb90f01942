/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The administrative messages: ADMIN_EVICT and its count reply, the STATS
 * request with its selector bits, and the records STATS replies are made
 * of (kinds, named fields of three types, the limits on each).  Each
 * round-trips, lies on the wire as documented, and refuses every
 * malformed field.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "proto-util.h"

static struct kvt_record rec_scratch;

static int dec_evict_req(const uint8_t *p, size_t n)
{
	struct kvt_cursor c = { p, n };
	struct kvt_evict_req m;
	return kvt_dec_evict_req(&c, &m);
}

static int dec_count_rep(const uint8_t *p, size_t n)
{
	struct kvt_cursor c = { p, n };
	uint64_t v;
	return kvt_dec_count_rep(&c, &v);
}

static int dec_stats_req(const uint8_t *p, size_t n)
{
	struct kvt_cursor c = { p, n };
	uint32_t what;
	return kvt_dec_stats_req(&c, &what);
}

/* One record; records lie back to back, so the rest is not its business. */
static int dec_record(const uint8_t *p, size_t n)
{
	struct kvt_cursor c = { p, n };
	return kvt_dec_record(&c, &rec_scratch);
}

static void set_evict_req(struct kvt_evict_req *m)
{
	m->tenant_id = 0x0a0b0c0d;
	m->ns_id = 0xfffffffe;
	m->flags = KVT_EVICT_DROP;
}

/* ---- ADMIN_EVICT and the count reply ------------------------------ */

static void test_evict(void)
{
	_cleanup_(kvt_buf_free) struct kvt_buf b;
	struct kvt_evict_req req, dreq;
	struct kvt_cursor c;

	kvt_buf_init(&b);
	memset(&req, 0, sizeof(req));
	set_evict_req(&req);
	kvt_enc_evict_req(&b, 1, RID, &req);
	CHECK_FRAME(&b, 1, KVT_OP_ADMIN_EVICT, 0, RID);
	CHECK(b.len == KVT_HEADER_SIZE + 12);
	memset(&dreq, 0x5c, sizeof(dreq));
	c = payload_of(&b);
	CHECK(kvt_dec_evict_req(&c, &dreq) == 0);
	CHECK(dreq.tenant_id == req.tenant_id && dreq.ns_id == req.ns_id &&
	      dreq.flags == KVT_EVICT_DROP);

	/* Host memory only, and the extreme ids. */
	req.tenant_id = 0;
	req.ns_id = UINT32_MAX;
	req.flags = 0;
	kvt_enc_evict_req(&b, 1, 4, &req);
	c = payload_of(&b);
	memset(&dreq, 0x5c, sizeof(dreq));
	CHECK(kvt_dec_evict_req(&c, &dreq) == 0);
	CHECK(dreq.tenant_id == 0 && dreq.ns_id == UINT32_MAX && dreq.flags == 0);

	CHECK(strcmp(kvt_opcode_name(KVT_OP_ADMIN_EVICT), "ADMIN_EVICT") == 0);
	CHECK(KVT_OP_ADMIN_EVICT == 13);

	/* The count reply, for ADMIN_EVICT and any other opcode. */
	const uint64_t counts[] = { 0, 1, UINT64_C(0x0102030405060708),
				    UINT64_MAX };
	for (unsigned i = 0; i < ARRAY_SIZE(counts); i++) {
		uint64_t v = 0x5c5c;
		kvt_enc_count_rep(&b, 1, KVT_OP_ADMIN_EVICT, RID + i, counts[i]);
		CHECK_FRAME(&b, 1, KVT_OP_ADMIN_EVICT, KVT_FLAG_REPLY, RID + i);
		CHECK(b.len == KVT_HEADER_SIZE + 8);
		c = payload_of(&b);
		CHECK(kvt_dec_count_rep(&c, &v) == 0 && v == counts[i],
		      "count %" PRIu64, counts[i]);
	}
	kvt_enc_count_rep(&b, 1, KVT_OP_DELETE, 9, 77);
	CHECK_FRAME(&b, 1, KVT_OP_DELETE, KVT_FLAG_REPLY, 9);
}

static void test_evict_layout(void)
{
	static const uint8_t want_evict[] = {
		0x4b, 0x56, 0x54, 0x31,
		0x01, 0x00,
		0x0d, 0x00,             /* ADMIN_EVICT */
		0x0c, 0x00, 0x00, 0x00, /* 12 */
		0x00, 0x00,
		0x00, 0x00,
		0x2a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
		0x04, 0x03, 0x02, 0x01, /* tenant_id */
		0xd0, 0xc0, 0xb0, 0xa0, /* ns_id */
		0x01, 0x00, 0x00, 0x00, /* KVT_EVICT_DROP */
	};
	static const uint8_t want_count[] = {
		0x4b, 0x56, 0x54, 0x31,
		0x01, 0x00,
		0x0d, 0x00,
		0x08, 0x00, 0x00, 0x00,
		0x00, 0x00,
		0x01, 0x00, /* REPLY */
		0x2b, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
		0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11,
	};
	_cleanup_(kvt_buf_free) struct kvt_buf b;

	kvt_buf_init(&b);
	struct kvt_evict_req ev = { 0x01020304, 0xa0b0c0d0, KVT_EVICT_DROP };
	kvt_enc_evict_req(&b, 1, 42, &ev);
	CHECK(kvt_msg_finish(&b, 0) == 0);
	CHECK(b.len == sizeof(want_evict) &&
	      memcmp(b.data, want_evict, sizeof(want_evict)) == 0);

	kvt_enc_count_rep(&b, 1, KVT_OP_ADMIN_EVICT, 43,
			  UINT64_C(0x1122334455667788));
	CHECK(kvt_msg_finish(&b, 0) == 0);
	CHECK(b.len == sizeof(want_count) &&
	      memcmp(b.data, want_count, sizeof(want_count)) == 0);
}

static void test_evict_malformed(void)
{
	/* Only KVT_EVICT_DROP is a flag. */
	static const struct {
		uint32_t tenant_id, ns_id, flags;
		int want;
	} evicts[] = {
		{ 1, 2, 2, -EBADMSG },
		{ 1, 2, 3, -EBADMSG },
		{ 1, 2, 4, -EBADMSG },
		{ 1, 2, 0x100, -EBADMSG },
		{ 1, 2, 0x80000000u, -EBADMSG },
		{ 1, 2, 0x80000001u, -EBADMSG },
		{ 1, 2, 0xffffffffu, -EBADMSG },
		{ UINT32_MAX, 0, 0, 0 },
		{ UINT32_MAX, 0, KVT_EVICT_DROP, 0 },
	};
	_cleanup_(kvt_buf_free) struct kvt_buf b;

	kvt_buf_init(&b);
	for (unsigned i = 0; i < ARRAY_SIZE(evicts); i++) {
		kvt_buf_reset(&b);
		kvt_put_u32(&b, evicts[i].tenant_id);
		kvt_put_u32(&b, evicts[i].ns_id);
		kvt_put_u32(&b, evicts[i].flags);
		CHECK(dec_copy(dec_evict_req, b.data, b.len) == evicts[i].want,
		      "evict flags 0x%x", evicts[i].flags);
	}

	/* A count is exactly eight bytes. */
	kvt_buf_reset(&b);
	kvt_put_u32(&b, 1);
	EXPECT_DEC(dec_count_rep, &b, -EBADMSG, "count of four bytes");
	kvt_put_u32(&b, 0);
	EXPECT_DEC(dec_count_rep, &b, 0, "count of eight bytes");
	kvt_put_u32(&b, 0);
	EXPECT_DEC(dec_count_rep, &b, -EBADMSG, "count of twelve bytes");
}

/* ---- STATS -------------------------------------------------------- */

static void test_stats_req(void)
{
	_cleanup_(kvt_buf_free) struct kvt_buf b;
	struct kvt_cursor c;

	kvt_buf_init(&b);
	/* Every selector. */
	for (uint32_t what = 0; what <= KVT_STATS_ALL; what++) {
		uint32_t dw = 0xffffffff;
		kvt_enc_stats_req(&b, 1, what + 100, what);
		CHECK_FRAME(&b, 1, KVT_OP_STATS, 0, what + 100);
		c = payload_of(&b);
		CHECK(kvt_dec_stats_req(&c, &dw) == 0 && dw == what);
	}

	/* Each unknown selector bit. */
	for (unsigned bit = 4; bit < 32; bit++) {
		kvt_buf_reset(&b);
		kvt_put_u32(&b, UINT32_C(1) << bit);
		EXPECT_DEC(dec_stats_req, &b, -EBADMSG, "stats unknown bit");
	}
}

/* ---- records ------------------------------------------------------ */

static void encode_records(struct kvt_buf *b)
{
	kvt_buf_reset(b);
	kvt_rec_begin(b, "namespace", 6);
	kvt_rec_u64(b, "bytes_resident", UINT64_MAX);
	kvt_rec_i64(b, "delta", -42);
	kvt_rec_i64(b, "floor", INT64_MIN);
	kvt_rec_str(b, "model", "meta-llama/Meta-Llama-3-8B \"q\" \xc3\xa9");
	kvt_rec_str(b, "empty", "");
	kvt_rec_u64(b, "n_2", 0x0102030405060708);
	kvt_rec_begin(b, "daemon", 1);
	kvt_rec_i64(b, "uptime_s", INT64_MAX);
}

static void test_records(void)
{
	static struct kvt_record r1, r2;
	_cleanup_(kvt_buf_free) struct kvt_buf b;
	const struct kvt_field *f;

	kvt_buf_init(&b);
	encode_records(&b);
	CHECK(b.error == 0);
	struct kvt_cursor c = { b.data, b.len };
	CHECK(kvt_dec_record(&c, &r1) == 0);
	CHECK(kvt_dec_record(&c, &r2) == 0);
	CHECK(kvt_cursor_end(&c) == 0);

	CHECK(strcmp(r1.kind, "namespace") == 0 && r1.n_fields == 6);
	f = kvt_record_get(&r1, "bytes_resident");
	CHECK(f && f->type == KVT_FIELD_U64 && f->u == UINT64_MAX);
	f = kvt_record_get(&r1, "delta");
	CHECK(f && f->type == KVT_FIELD_I64 && (int64_t)f->u == -42);
	f = kvt_record_get(&r1, "floor");
	CHECK(f && f->type == KVT_FIELD_I64 && (int64_t)f->u == INT64_MIN);
	f = kvt_record_get(&r1, "model");
	CHECK(f && f->type == KVT_FIELD_STR &&
	      strcmp(f->s, "meta-llama/Meta-Llama-3-8B \"q\" \xc3\xa9") == 0);
	f = kvt_record_get(&r1, "empty");
	CHECK(f && f->type == KVT_FIELD_STR && f->s[0] == 0);
	f = kvt_record_get(&r1, "n_2");
	CHECK(f && f->u == 0x0102030405060708);
	CHECK(kvt_record_get(&r1, "absent") == NULL);
	CHECK(kvt_record_get(&r1, "delt") == NULL);

	CHECK(strcmp(r2.kind, "daemon") == 0 && r2.n_fields == 1);
	f = kvt_record_get(&r2, "uptime_s");
	CHECK(f && f->type == KVT_FIELD_I64 && (int64_t)f->u == INT64_MAX);
}

static void test_records_limits(void)
{
	static struct kvt_record r1;
	_cleanup_(kvt_buf_free) struct kvt_buf b;
	struct kvt_cursor c;

	/* The most fields a record may have, with the longest names. */
	char name[KVT_MAX_FIELD_NAME + 1];
	kvt_buf_init(&b);
	memset(name, 'k', KVT_MAX_FIELD_NAME);
	name[KVT_MAX_FIELD_NAME] = 0;
	kvt_rec_begin(&b, name, KVT_MAX_FIELDS);
	for (unsigned i = 0; i < KVT_MAX_FIELDS; i++) {
		memset(name, '_', KVT_MAX_FIELD_NAME);
		name[0] = 'f';
		name[1] = (char)('0' + i / 10);
		name[2] = (char)('0' + i % 10);
		kvt_rec_u64(&b, name, i);
	}
	c = (struct kvt_cursor){ b.data, b.len };
	CHECK(kvt_dec_record(&c, &r1) == 0 && kvt_cursor_end(&c) == 0);
	CHECK(r1.n_fields == KVT_MAX_FIELDS && strlen(r1.kind) == 48);
	CHECK(strlen(r1.fields[63].name) == KVT_MAX_FIELD_NAME &&
	      r1.fields[63].u == 63);

	/* A string field of the maximum length. */
	static char longs[KVT_MAX_STRING + 1];
	memset(longs, 's', KVT_MAX_STRING);
	kvt_buf_reset(&b);
	kvt_rec_begin(&b, "client", 1);
	kvt_rec_str(&b, "comm", longs);
	c = (struct kvt_cursor){ b.data, b.len };
	CHECK(kvt_dec_record(&c, &r1) == 0 &&
	      strlen(r1.fields[0].s) == KVT_MAX_STRING);
}

/* Kinds and field names: lower case, digits and '_', 1..48 bytes. */
static void test_records_names(void)
{
	static const struct {
		const char *name;
		uint8_t len;
	} bad_names[] = {
		{ "Daemon", 6 }, { "dae-mon", 7 }, { "dae mon", 7 },
		{ "dae.mon", 7 }, { "dae\x80", 4 }, { "dae\0mon", 7 },
		{ "", 0 },       { "a/b", 3 },     { "tab\t", 4 },
		{ "A", 1 },
	};
	_cleanup_(kvt_buf_free) struct kvt_buf b;

	kvt_buf_init(&b);
	for (unsigned i = 0; i < ARRAY_SIZE(bad_names); i++) {
		/* as the kind */
		kvt_buf_reset(&b);
		kvt_put_u8(&b, bad_names[i].len);
		kvt_put_bytes(&b, bad_names[i].name, bad_names[i].len);
		kvt_put_u16(&b, 0);
		EXPECT_DEC(dec_record, &b, -EBADMSG, "bad record kind");
		/* as a field name */
		kvt_buf_reset(&b);
		kvt_rec_begin(&b, "daemon", 1);
		kvt_put_u8(&b, KVT_FIELD_U64);
		kvt_put_u8(&b, bad_names[i].len);
		kvt_put_bytes(&b, bad_names[i].name, bad_names[i].len);
		kvt_put_u64(&b, 1);
		EXPECT_DEC(dec_record, &b, -EBADMSG, "bad field name");
	}
	kvt_buf_reset(&b);
	kvt_put_u8(&b, KVT_MAX_FIELD_NAME + 1);
	for (int i = 0; i <= KVT_MAX_FIELD_NAME; i++)
		kvt_put_u8(&b, 'a');
	kvt_put_u16(&b, 0);
	EXPECT_DEC(dec_record, &b, -EBADMSG, "record kind over its max");
	kvt_buf_reset(&b);
	kvt_put_u8(&b, KVT_MAX_FIELD_NAME);
	for (int i = 0; i < KVT_MAX_FIELD_NAME; i++)
		kvt_put_u8(&b, 'a');
	kvt_put_u16(&b, 0);
	EXPECT_DEC(dec_record, &b, 0, "record kind at its max");
}

/* Field types, string fields, and the field count. */
static void test_records_fields(void)
{
	static char text[KVT_MAX_STRING + 8];
	_cleanup_(kvt_buf_free) struct kvt_buf b;

	kvt_buf_init(&b);
	memset(text, 't', sizeof(text));
	const uint8_t bad_types[] = { 0, 4, 0x81, 255 };
	for (unsigned i = 0; i < ARRAY_SIZE(bad_types); i++) {
		kvt_buf_reset(&b);
		kvt_rec_begin(&b, "daemon", 1);
		kvt_put_u8(&b, bad_types[i]);
		kvt_put_u8(&b, 1);
		kvt_put_u8(&b, 'x');
		kvt_put_u64(&b, 1);
		EXPECT_DEC(dec_record, &b, -EBADMSG, "unknown field type");
	}
	kvt_buf_reset(&b);
	kvt_rec_begin(&b, "daemon", 1);
	kvt_put_u8(&b, KVT_FIELD_STR);
	kvt_put_u8(&b, 1);
	kvt_put_u8(&b, 's');
	put_raw_str(&b, "a\0b", 3);
	EXPECT_DEC(dec_record, &b, -EBADMSG, "string field with a NUL");
	kvt_buf_reset(&b);
	kvt_rec_begin(&b, "daemon", 1);
	kvt_put_u8(&b, KVT_FIELD_STR);
	kvt_put_u8(&b, 1);
	kvt_put_u8(&b, 's');
	put_raw_str(&b, text, KVT_MAX_STRING + 1);
	EXPECT_DEC(dec_record, &b, -EBADMSG, "string field over its max");
	kvt_buf_reset(&b);
	kvt_rec_begin(&b, "daemon", KVT_MAX_FIELDS + 1);
	for (int i = 0; i <= KVT_MAX_FIELDS; i++) {
		char nm[8];
		snprintf(nm, sizeof(nm), "f%d", i);
		kvt_rec_u64(&b, nm, 1);
	}
	EXPECT_DEC(dec_record, &b, -EBADMSG, "more fields than allowed");
	kvt_buf_reset(&b);
	kvt_rec_begin(&b, "daemon", 3);
	kvt_rec_u64(&b, "a", 1);
	EXPECT_DEC(dec_record, &b, -EBADMSG, "fewer fields than counted");
}

/* ---- every encoder/decoder pair ----------------------------------- */

static void enc_evict(struct kvt_buf *b, uint8_t fill, uint16_t op)
{
	struct kvt_evict_req m;

	memset(&m, fill, sizeof(m));
	set_evict_req(&m);
	kvt_enc_evict_req(b, 1, RID, &m);
}

static void enc_evict_host(struct kvt_buf *b, uint8_t fill, uint16_t op)
{
	struct kvt_evict_req m;

	memset(&m, fill, sizeof(m));
	set_evict_req(&m);
	m.flags = 0;
	kvt_enc_evict_req(b, 1, 1, &m);
}

static void enc_count(struct kvt_buf *b, uint8_t fill, uint16_t op)
{
	kvt_enc_count_rep(b, 1, KVT_OP_ADMIN_EVICT, RID, 12345);
}

static void enc_count_max(struct kvt_buf *b, uint8_t fill, uint16_t op)
{
	kvt_enc_count_rep(b, 1, KVT_OP_ADMIN_EVICT, 1, UINT64_MAX);
}

static void enc_stats_all(struct kvt_buf *b, uint8_t fill, uint16_t op)
{
	kvt_enc_stats_req(b, 1, RID, KVT_STATS_ALL);
}

static void enc_stats_5(struct kvt_buf *b, uint8_t fill, uint16_t op)
{
	kvt_enc_stats_req(b, 1, 1, 5);
}

/* Records carry no header. */
static void enc_records(struct kvt_buf *b, uint8_t fill, uint16_t op)
{
	encode_records(b);
}

static void enc_record(struct kvt_buf *b, uint8_t fill, uint16_t op)
{
	kvt_rec_begin(b, "tenant", 3);
	kvt_rec_u64(b, "quota", 1ull << 33);
	kvt_rec_i64(b, "balance", -7);
	kvt_rec_str(b, "name", "uid:1000");
}

static const struct proto_sample samples[] = {
	{ "evict_req", enc_evict, 0, dec_evict_req, false, true },
	{ "evict_req host only", enc_evict_host, 0, dec_evict_req, false, true },
	{ "count_rep", enc_count, 0, dec_count_rep, false, true },
	{ "count_rep of UINT64_MAX", enc_count_max, 0, dec_count_rep, false, true },
	{ "stats_req of everything", enc_stats_all, 0, dec_stats_req, false, true },
	{ "stats_req", enc_stats_5, 0, dec_stats_req, false, true },
	/* Two records back to back: one decoder call takes only the first. */
	{ "records", enc_records, 0, NULL, true, false },
	{ "record", enc_record, 0, dec_record, true, false },
};

int main(void)
{
	test_evict();
	test_evict_layout();
	test_evict_malformed();
	test_stats_req();
	test_records();
	test_records_limits();
	test_records_names();
	test_records_fields();
	CHECK_SAMPLES(samples);
	return proto_test_end("test-proto-admin");
}
