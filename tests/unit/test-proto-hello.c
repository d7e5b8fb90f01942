/* SPDX-License-Identifier: Apache-2.0 */
/*
 * HELLO: the request (versions, features, name, the client's PCI bus id)
 * and the reply (version, features, tenant and session, limits, NUMA node)
 * round-trip at the ends of their ranges, lie on the wire as documented,
 * and each malformed field is refused on its own.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "proto-util.h"

static int dec_hello_req(const uint8_t *p, size_t n)
{
	struct kvt_cursor c = { p, n };
	struct kvt_hello_req m;
	return kvt_dec_hello_req(&c, &m);
}

static int dec_hello_rep(const uint8_t *p, size_t n)
{
	struct kvt_cursor c = { p, n };
	struct kvt_hello_rep m;
	return kvt_dec_hello_rep(&c, &m);
}

static void set_hello_req(struct kvt_hello_req *m)
{
	m->min_version = 1;
	m->max_version = 7;
	m->features = KVT_FEATURES_ALL | (UINT64_C(1) << 63);
	strcpy(m->name, "vllm-worker-17 (pid 4242)");
	strcpy(m->pci_bus_id, "0000:3b:00.0");
}

static void set_hello_rep(struct kvt_hello_rep *m)
{
	m->version = 1;
	m->features = KVT_FEATURE_RECORDS | (UINT64_C(1) << 40);
	m->tenant_id = 0x01020304;
	m->session_id = 0xdeadbeef;
	m->max_keys = 4096;
	m->max_handles = 65536;
	m->quota_bytes = UINT64_C(0x0123456789abcdef);
	m->numa_node = 1;
}

/* ---- round trips -------------------------------------------------- */

static void test_hello_req(void)
{
	_cleanup_(kvt_buf_free) struct kvt_buf b;
	struct kvt_hello_req req, dreq;
	struct kvt_cursor c;

	kvt_buf_init(&b);
	memset(&req, 0, sizeof(req));
	set_hello_req(&req);
	kvt_enc_hello_req(&b, RID, &req);
	CHECK_FRAME(&b, KVT_PROTO_VERSION_MIN, KVT_OP_HELLO, 0, RID);
	CHECK(b.len == KVT_HEADER_SIZE + 16 + 2 + strlen(req.name) + 2 + 12);
	memset(&dreq, 0x5c, sizeof(dreq));
	c = payload_of(&b);
	CHECK(kvt_dec_hello_req(&c, &dreq) == 0);
	CHECK(dreq.min_version == 1 && dreq.max_version == 7);
	CHECK(dreq.features == req.features);
	CHECK(strcmp(dreq.name, req.name) == 0);
	CHECK(strcmp(dreq.pci_bus_id, "0000:3b:00.0") == 0);

	/* A name of exactly the maximum length. */
	memset(req.name, 'n', KVT_MAX_NAME);
	req.name[KVT_MAX_NAME] = 0;
	req.min_version = req.max_version = 3;
	kvt_enc_hello_req(&b, 1, &req);
	c = payload_of(&b);
	CHECK(kvt_dec_hello_req(&c, &dreq) == 0);
	CHECK(strlen(dreq.name) == KVT_MAX_NAME);
	CHECK(dreq.min_version == 3 && dreq.max_version == 3);
	CHECK(strcmp(dreq.pci_bus_id, "0000:3b:00.0") == 0);

	/* An empty name. */
	req.name[0] = 0;
	kvt_enc_hello_req(&b, 1, &req);
	c = payload_of(&b);
	CHECK(kvt_dec_hello_req(&c, &dreq) == 0);
	CHECK(dreq.name[0] == 0);

	/* Bus ids: none, short form, upper case, the whole alphabet at the
	 * maximum length. */
	static const char *const bus_ids[] = {
		"",
		"3b:00.0",
		"0000:3B:00.0",
		"0123456789abcdefABCDEF:.00000000",
		"ffff:ff:1f.7",
	};
	strcpy(req.name, "gpu client");
	for (unsigned i = 0; i < ARRAY_SIZE(bus_ids); i++) {
		snprintf(req.pci_bus_id, sizeof(req.pci_bus_id), "%s", bus_ids[i]);
		kvt_enc_hello_req(&b, 1, &req);
		c = payload_of(&b);
		memset(&dreq, 0x5c, sizeof(dreq));
		CHECK(kvt_dec_hello_req(&c, &dreq) == 0, "bus id '%s'",
		      bus_ids[i]);
		CHECK(strcmp(dreq.pci_bus_id, bus_ids[i]) == 0 &&
			      strcmp(dreq.name, "gpu client") == 0,
		      "bus id '%s' came back as '%.40s'", bus_ids[i],
		      dreq.pci_bus_id);
	}
	CHECK(strlen(bus_ids[3]) == KVT_MAX_BUS_ID);
}

static void test_hello_rep(void)
{
	_cleanup_(kvt_buf_free) struct kvt_buf b;
	struct kvt_hello_rep rep, drep;
	struct kvt_cursor c;

	kvt_buf_init(&b);
	memset(&rep, 0, sizeof(rep));
	set_hello_rep(&rep);
	kvt_enc_hello_rep(&b, 1, RID, &rep);
	CHECK_FRAME(&b, 1, KVT_OP_HELLO, KVT_FLAG_REPLY, RID);
	CHECK(b.len == KVT_HEADER_SIZE + 40);
	memset(&drep, 0x5c, sizeof(drep));
	c = payload_of(&b);
	CHECK(kvt_dec_hello_rep(&c, &drep) == 0);
	CHECK(drep.version == rep.version);
	CHECK(drep.features == rep.features);
	CHECK(drep.tenant_id == rep.tenant_id);
	CHECK(drep.session_id == rep.session_id);
	CHECK(drep.max_keys == rep.max_keys);
	CHECK(drep.max_handles == rep.max_handles);
	CHECK(drep.quota_bytes == rep.quota_bytes);
	CHECK(drep.numa_node == 1);

	/* max_keys at both ends of its range. */
	rep.max_keys = 1;
	kvt_enc_hello_rep(&b, 1, 2, &rep);
	c = payload_of(&b);
	CHECK(kvt_dec_hello_rep(&c, &drep) == 0 && drep.max_keys == 1);
	rep.max_keys = KVT_MAX_KEYS;
	kvt_enc_hello_rep(&b, 1, 2, &rep);
	c = payload_of(&b);
	CHECK(kvt_dec_hello_rep(&c, &drep) == 0 &&
	      drep.max_keys == KVT_MAX_KEYS);

	/* numa_node: "any" and both ends of the node range. */
	const int32_t nodes[] = { -1, 0, 2, 1023 };
	for (unsigned i = 0; i < ARRAY_SIZE(nodes); i++) {
		rep.numa_node = nodes[i];
		kvt_enc_hello_rep(&b, 1, 3, &rep);
		c = payload_of(&b);
		drep.numa_node = 0x5c5c;
		CHECK(kvt_dec_hello_rep(&c, &drep) == 0 &&
			      drep.numa_node == nodes[i],
		      "numa_node %d", nodes[i]);
	}
}

/* ---- exact bytes -------------------------------------------------- */

static void test_hello_layout(void)
{
	static const uint8_t want_hello_req[] = {
		0x4b, 0x56, 0x54, 0x31,
		0x01, 0x00,             /* always the oldest version */
		0x01, 0x00,             /* HELLO */
		0x22, 0x00, 0x00, 0x00, /* 34 */
		0x00, 0x00,
		0x00, 0x00,
		0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,
		0x01, 0x00, 0x00, 0x00, /* min_version */
		0x02, 0x00, 0x00, 0x00, /* max_version */
		0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* features */
		0x02, 0x00, 'w', '0',   /* name */
		0x0c, 0x00, '0', '0', '0', '0', ':', '3', 'b', ':', '0', '0',
		'.', '0',               /* pci_bus_id */
	};
	static const uint8_t want_hello_rep[] = {
		0x4b, 0x56, 0x54, 0x31,
		0x01, 0x00,
		0x01, 0x00,
		0x28, 0x00, 0x00, 0x00, /* 40 */
		0x03, 0x00,             /* 3 fds */
		0x01, 0x00,             /* REPLY */
		0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01,
		0x01, 0x00, 0x00, 0x00, /* version */
		0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, /* features */
		0x04, 0x03, 0x02, 0x01, /* tenant */
		0xef, 0xbe, 0xad, 0xde, /* session */
		0x00, 0x10, 0x00, 0x00, /* max_keys 4096 */
		0x00, 0x00, 0x01, 0x00, /* max_handles 65536 */
		0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe, /* quota */
		0xfe, 0x03, 0x00, 0x00, /* numa_node 1022 */
	};
	_cleanup_(kvt_buf_free) struct kvt_buf b;
	struct kvt_header h;

	kvt_buf_init(&b);
	struct kvt_hello_rep rep = {
		.version = 1,
		.features = UINT64_C(0x8000000000000003),
		.tenant_id = 0x01020304,
		.session_id = 0xdeadbeef,
		.max_keys = 4096,
		.max_handles = 65536,
		.quota_bytes = UINT64_C(0xfedcba9876543210),
		.numa_node = 1022,
	};
	kvt_enc_hello_rep(&b, 1, UINT64_C(0x0123456789abcdef), &rep);
	CHECK(kvt_msg_finish(&b, 3) == 0);
	CHECK(b.len == sizeof(want_hello_rep) &&
	      memcmp(b.data, want_hello_rep, sizeof(want_hello_rep)) == 0);
	CHECK(kvt_header_parse(b.data, &h) == 0);
	CHECK(h.magic == KVT_MAGIC && h.version == 1 &&
	      h.opcode == KVT_OP_HELLO && h.length == 40 && h.n_fds == 3 &&
	      h.flags == KVT_FLAG_REPLY &&
	      h.request_id == UINT64_C(0x0123456789abcdef));
	/* "Any node" is -1 as two's complement. */
	rep.numa_node = -1;
	kvt_enc_hello_rep(&b, 1, 1, &rep);
	CHECK(kvt_msg_finish(&b, 0) == 0 && b.len == sizeof(want_hello_rep) &&
	      memcmp(b.data + b.len - 4, "\xff\xff\xff\xff", 4) == 0);

	struct kvt_hello_req hreq;
	memset(&hreq, 0, sizeof(hreq));
	hreq.min_version = 1;
	hreq.max_version = 2;
	hreq.features = 5;
	strcpy(hreq.name, "w0");
	strcpy(hreq.pci_bus_id, "0000:3b:00.0");
	kvt_enc_hello_req(&b, UINT64_C(0x0102030405060708), &hreq);
	CHECK(kvt_msg_finish(&b, 0) == 0);
	CHECK(b.len == sizeof(want_hello_req) &&
	      memcmp(b.data, want_hello_req, sizeof(want_hello_req)) == 0);
	/* No GPU: an empty string, two zero bytes, at the very end. */
	hreq.pci_bus_id[0] = 0;
	kvt_enc_hello_req(&b, 1, &hreq);
	CHECK(kvt_msg_finish(&b, 0) == 0);
	CHECK(b.len == sizeof(want_hello_req) - 12 && b.data[8] == 0x16 &&
	      b.data[b.len - 2] == 0 && b.data[b.len - 1] == 0);
}

/* ---- malformed fields --------------------------------------------- */

static char text[KVT_MAX_STRING + 8]; /* 't' throughout, set in main */

/*
 * A HELLO request built field by field: well formed but for what the row
 * names, so it fails for that reason and not for a missing field.  A
 * length is written as lie when that is set; bus NULL leaves the field
 * out.
 */
static const struct hello_req_case {
	const char *what; /* NULL: the bus id speaks for itself */
	uint32_t min, max;
	const char *name;
	uint16_t name_len, name_lie;
	const char *bus;
	uint16_t bus_len, bus_lie;
	int want;
} hello_reqs[] = {
	{ "min > max", 2, 1, "x", 1, 0, "", 0, 0, -EBADMSG },
	{ "name over its max", 1, 1, text, KVT_MAX_NAME + 1, 0, "", 0, 0, -EBADMSG },
	{ "name at its max", 1, 1, text, KVT_MAX_NAME, 0, "", 0, 0, 0 },
	{ "name at its max with a bus id", 1, 1, text, KVT_MAX_NAME, 0,
	  "0000:3b:00.0", 12, 0, 0 },
	{ "name with a NUL", 1, 1, "ab\0cd", 5, 0, "", 0, 0, -EBADMSG },
	{ "name longer than the bytes", 1, 1, "abc", 3, 10, NULL, 0, 0, -EBADMSG },
	{ "without a bus id field", 1, 1, "x", 1, 0, NULL, 0, 0, -EBADMSG },
	/* The bus id: its alphabet and its length. */
	{ NULL, 1, 1, "w", 1, 0, "0000:3b:00.0", 12, 0, 0 },
	{ NULL, 1, 1, "w", 1, 0, "0123456789abcdefABCDEF:.", 24, 0, 0 },
	{ NULL, 1, 1, "w", 1, 0, "00000000000000000000000000000000", 32, 0, 0 },
	{ NULL, 1, 1, "w", 1, 0, "000000000000000000000000000000000", 33, 0, -EBADMSG },
	{ NULL, 1, 1, "w", 1, 0, "0000:3g:00.0", 12, 0, -EBADMSG },
	{ NULL, 1, 1, "w", 1, 0, "0000:3G:00.0", 12, 0, -EBADMSG },
	{ NULL, 1, 1, "w", 1, 0, "0000:3b:00.0/", 13, 0, -EBADMSG },
	{ NULL, 1, 1, "w", 1, 0, "../../../etc", 12, 0, -EBADMSG },
	{ NULL, 1, 1, "w", 1, 0, "0000:3b:00 0", 12, 0, -EBADMSG },
	{ NULL, 1, 1, "w", 1, 0, "0000-3b-00.0", 12, 0, -EBADMSG },
	{ NULL, 1, 1, "w", 1, 0, "0000_3b", 7, 0, -EBADMSG },
	{ NULL, 1, 1, "w", 1, 0, "pci-0000", 8, 0, -EBADMSG },
	{ NULL, 1, 1, "w", 1, 0, "x", 1, 0, -EBADMSG },
	{ NULL, 1, 1, "w", 1, 0, "0000:3b:00.0\n", 13, 0, -EBADMSG },
	{ NULL, 1, 1, "w", 1, 0, "0000:3b:00.0\x80", 13, 0, -EBADMSG },
	{ NULL, 1, 1, "w", 1, 0, "0000:3b\0:00.0", 13, 0, -EBADMSG },
	{ NULL, 1, 1, "w", 1, 0, "0000:3b:00.0\0", 13, 0, -EBADMSG },
	{ "bus id longer than the bytes", 1, 1, "w", 1, 0, "0000:3b", 7, 12,
	  -EBADMSG },
	{ "bus id length 65535", 1, 1, "w", 1, 0, text, 40, 0xffff, -EBADMSG },
};

static void put_field(struct kvt_buf *b, const char *s, uint16_t len,
		      uint16_t lie)
{
	kvt_put_u16(b, lie ? lie : len);
	kvt_put_bytes(b, s, len);
}

static void test_hello_req_malformed(void)
{
	_cleanup_(kvt_buf_free) struct kvt_buf b;

	kvt_buf_init(&b);
	for (unsigned i = 0; i < ARRAY_SIZE(hello_reqs); i++) {
		const struct hello_req_case *t = &hello_reqs[i];

		kvt_buf_reset(&b);
		kvt_put_u32(&b, t->min);
		kvt_put_u32(&b, t->max);
		kvt_put_u64(&b, 0);
		put_field(&b, t->name, t->name_len, t->name_lie);
		if (t->bus)
			put_field(&b, t->bus, t->bus_len, t->bus_lie);
		int r = dec_copy(dec_hello_req, b.data, b.len);
		CHECK(r == t->want,
		      "hello %s (bus id '%.*s', %u bytes): returned %d, expected %d",
		      t->what ? t->what : "request", t->bus ? t->bus_len : 0,
		      t->bus ? t->bus : "", t->bus_len, r, t->want);
	}
}

/* HELLO replies: the sample but for max_keys and numa_node, and cut
 * bytes short of its end. */
static const struct hello_rep_case {
	const char *what;
	uint32_t max_keys;
	int32_t numa_node;
	unsigned cut;
	int want;
} hello_reps[] = {
	{ "max_keys 0", 0, 1, 0, -EBADMSG },
	{ "max_keys over its max", KVT_MAX_KEYS + 1, 1, 0, -EBADMSG },
	{ "numa_node -2", 4096, -2, 0, -EBADMSG },
	{ "numa_node 1024", 4096, 1024, 0, -EBADMSG },
	{ "numa_node 1025", 4096, 1025, 0, -EBADMSG },
	{ "numa_node -1024", 4096, -1024, 0, -EBADMSG },
	{ "numa_node INT32_MIN", 4096, INT32_MIN, 0, -EBADMSG },
	{ "numa_node INT32_MAX", 4096, INT32_MAX, 0, -EBADMSG },
	{ "numa_node 0x10000", 4096, 0x10000, 0, -EBADMSG },
	{ "numa_node -1", 4096, -1, 0, 0 },
	{ "numa_node 0", 4096, 0, 0, 0 },
	{ "numa_node 1023", 4096, 1023, 0, 0 },
	/* The old layout, without numa_node, is too short. */
	{ "without numa_node", 4096, 0, 4, -EBADMSG },
};

static void test_hello_rep_malformed(void)
{
	_cleanup_(kvt_buf_free) struct kvt_buf b;
	struct kvt_hello_rep hp;

	kvt_buf_init(&b);
	for (unsigned i = 0; i < ARRAY_SIZE(hello_reps); i++) {
		const struct hello_rep_case *t = &hello_reps[i];

		set_hello_rep(&hp);
		hp.max_keys = t->max_keys;
		hp.numa_node = t->numa_node;
		kvt_enc_hello_rep(&b, 1, 1, &hp);
		int r = dec_copy(dec_hello_rep, b.data + KVT_HEADER_SIZE,
				 b.len - KVT_HEADER_SIZE - t->cut);
		CHECK(r == t->want, "hello reply %s: returned %d, expected %d",
		      t->what, r, t->want);
	}
}

/* ---- every encoder/decoder pair ----------------------------------- */

static void enc_req(struct kvt_buf *b, uint8_t fill, uint16_t op)
{
	struct kvt_hello_req m;

	memset(&m, fill, sizeof(m));
	set_hello_req(&m);
	kvt_enc_hello_req(b, RID, &m);
}

/* No GPU. */
static void enc_req_no_bus(struct kvt_buf *b, uint8_t fill, uint16_t op)
{
	struct kvt_hello_req m;

	memset(&m, fill, sizeof(m));
	set_hello_req(&m);
	m.pci_bus_id[0] = 0;
	kvt_enc_hello_req(b, RID, &m);
}

static void enc_rep(struct kvt_buf *b, uint8_t fill, uint16_t op)
{
	struct kvt_hello_rep m;

	memset(&m, fill, sizeof(m));
	set_hello_rep(&m);
	kvt_enc_hello_rep(b, 1, RID, &m);
}

static void enc_rep_any_node(struct kvt_buf *b, uint8_t fill, uint16_t op)
{
	struct kvt_hello_rep m;

	memset(&m, fill, sizeof(m));
	set_hello_rep(&m);
	m.numa_node = -1;
	kvt_enc_hello_rep(b, 1, RID, &m);
}

static const struct proto_sample samples[] = {
	{ "hello_req", enc_req, 0, dec_hello_req, false, true },
	{ "hello_rep", enc_rep, 0, dec_hello_rep, false, true },
	{ "hello_req without a bus id", enc_req_no_bus, 0, dec_hello_req, false, true },
	{ "hello_rep any node", enc_rep_any_node, 0, dec_hello_rep, false, true },
};

int main(void)
{
	memset(text, 't', sizeof(text));
	test_hello_req();
	test_hello_rep();
	test_hello_layout();
	test_hello_req_malformed();
	test_hello_rep_malformed();
	CHECK_SAMPLES(samples);
	return proto_test_end("test-proto-hello");
}
