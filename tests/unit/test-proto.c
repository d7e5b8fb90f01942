/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The wire format: every encoder/decoder pair round-trips non-trivial values,
 * the bytes on the wire are the documented little-endian layout, encoders
 * write every byte they emit, and decoders refuse each malformed field, every
 * truncation and trailing bytes.  Then the canonical namespace identity (its
 * layout, canonical form, validation, geometry and key completeness) and the
 * SCM_RIGHTS framing over a real socketpair.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvt-proto.h"
#include "check.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

typedef int (*dec_fn)(const uint8_t *p, size_t len);

/* ---- helpers ------------------------------------------------------ */

/* Give the buffer's storage a known fill, so a byte the encoder reserves
 * but never writes shows up as a difference between two fills. */
static void prefill(struct kvt_buf *b, uint8_t fill)
{
	kvt_buf_init(b);
	if (kvt_buf_reserve(b, 8192))
		memset(b->data, fill, b->cap);
	kvt_buf_reset(b);
}

static struct kvt_cursor payload_of(const struct kvt_buf *b)
{
	return (struct kvt_cursor){ b->data + KVT_HEADER_SIZE,
				    b->len - KVT_HEADER_SIZE };
}

static bool same_bytes(const struct kvt_buf *a, const struct kvt_buf *b)
{
	return a->error == 0 && b->error == 0 && a->len == b->len &&
	       memcmp(a->data, b->data, a->len) == 0;
}

/* Finish a message and check its header says what was asked for. */
static void check_frame(int line, struct kvt_buf *b, uint16_t version,
			uint16_t opcode, uint16_t flags, uint64_t rid)
{
	struct kvt_header h;

	if (kvt_msg_finish(b, 0) < 0 || kvt_header_parse(b->data, &h) < 0) {
		fprintf(stderr, "%s:%d: message does not frame\n", __FILE__,
			line);
		failures++;
		return;
	}
	if (h.magic != KVT_MAGIC || h.version != version ||
	    h.opcode != opcode || h.flags != flags || h.request_id != rid ||
	    h.length != b->len - KVT_HEADER_SIZE || h.n_fds != 0) {
		fprintf(stderr,
			"%s:%d: header mismatch: version %u opcode %u flags 0x%x rid %" PRIu64
			" length %u n_fds %u\n",
			__FILE__, line, h.version, h.opcode, h.flags,
			h.request_id, h.length, h.n_fds);
		failures++;
	}
}

#define CHECK_FRAME(b, v, op, fl, rid) check_frame(__LINE__, b, v, op, fl, rid)

/* Decode a copy of exactly len bytes, so a read past them is caught by the
 * sanitizers rather than landing in the rest of the message. */
static int dec_copy(dec_fn dec, const uint8_t *p, size_t len)
{
	uint8_t *copy = malloc(len ? len : 1);
	int r;

	if (!copy)
		abort();
	if (len)
		memcpy(copy, p, len);
	r = dec(copy, len);
	free(copy);
	return r;
}

static void put_raw_str(struct kvt_buf *b, const void *s, uint16_t n)
{
	kvt_put_u16(b, n);
	kvt_put_bytes(b, s, n);
}

/* The fixed part of a HELLO request: versions and features. */
static void put_hello_head(struct kvt_buf *b, uint32_t min, uint32_t max)
{
	kvt_put_u32(b, min);
	kvt_put_u32(b, max);
	kvt_put_u64(b, 0);
}

static void fill_key(uint8_t *key, unsigned seed)
{
	for (unsigned i = 0; i < KVT_KEY_SIZE; i++)
		key[i] = (uint8_t)(seed * 131 + i * 7 + 1);
}

/* ---- decoder wrappers --------------------------------------------- */

static struct kvt_record rec_scratch;

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

static int dec_ns_open_req(const uint8_t *p, size_t n)
{
	struct kvt_cursor c = { p, n };
	struct kvt_ns_open_req m;
	return kvt_dec_ns_open_req(&c, &m);
}

static int dec_ns_open_rep(const uint8_t *p, size_t n)
{
	struct kvt_cursor c = { p, n };
	struct kvt_ns_open_rep m;
	return kvt_dec_ns_open_rep(&c, &m);
}

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

static int dec_stats_req(const uint8_t *p, size_t n)
{
	struct kvt_cursor c = { p, n };
	uint32_t what;
	return kvt_dec_stats_req(&c, &what);
}

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

static int dec_error(const uint8_t *p, size_t n)
{
	struct kvt_cursor c = { p, n };
	struct kvt_error_rep m;
	return kvt_dec_error(&c, &m);
}

/* One record; records lie back to back, so the rest is not its business. */
static int dec_record(const uint8_t *p, size_t n)
{
	struct kvt_cursor c = { p, n };
	return kvt_dec_record(&c, &rec_scratch);
}

static int dec_identity(const uint8_t *p, size_t n)
{
	struct kvt_identity id;
	return kvt_identity_decode(p, n, &id);
}

/* ---- sample values ------------------------------------------------ */

#define RID UINT64_C(0x8877665544332211)

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

static void set_evict_req(struct kvt_evict_req *m)
{
	m->tenant_id = 0x0a0b0c0d;
	m->ns_id = 0xfffffffe;
	m->flags = KVT_EVICT_DROP;
}

static void set_ns_open_rep(struct kvt_ns_open_rep *m)
{
	m->ns_id = 0xa1b2c3d4;
	m->shards = 2;
	m->block_tokens = 16;
	m->shard_bytes = (UINT64_C(1) << 32) + 100;
	m->shard_stride = (UINT64_C(1) << 32) + 4096;
	m->slot_bytes = 2 * m->shard_stride;
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

static void set_extent_note(struct kvt_extent_note *m)
{
	m->extent_id = 0x00c0ffee;
	m->flags = KVT_EXTENT_HUGETLB | KVT_EXTENT_LOCKED;
	m->size = UINT64_C(64) << 30;
	m->slot_bytes = (UINT64_C(2) << 20) + 4096;
	m->numa_node = -1;
}

static const uint8_t lookup_states[7] = { KVT_STATE_HOST, KVT_STATE_DISK,
					  KVT_STATE_HOST, KVT_STATE_PENDING,
					  KVT_STATE_MISS, KVT_STATE_HOST,
					  KVT_STATE_DISK };
static const int32_t statuses[4] = { 0, -ENOENT, 0, -4095 };

/* ---- round trips -------------------------------------------------- */

static void test_hello(void)
{
	struct kvt_hello_req req, dreq;
	struct kvt_hello_rep rep, drep;
	struct kvt_buf b;
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
		CHECK_MSG(kvt_dec_hello_req(&c, &dreq) == 0, "bus id '%s'",
			  bus_ids[i]);
		CHECK_MSG(strcmp(dreq.pci_bus_id, bus_ids[i]) == 0 &&
				  strcmp(dreq.name, "gpu client") == 0,
			  "bus id '%s' came back as '%.40s'", bus_ids[i],
			  dreq.pci_bus_id);
	}
	CHECK(strlen(bus_ids[3]) == KVT_MAX_BUS_ID);

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
		CHECK_MSG(kvt_dec_hello_rep(&c, &drep) == 0 &&
				  drep.numa_node == nodes[i],
			  "numa_node %d", nodes[i]);
	}
	kvt_buf_free(&b);
}

static void test_evict(void)
{
	struct kvt_evict_req req, dreq;
	struct kvt_buf b;
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
		CHECK_MSG(kvt_dec_count_rep(&c, &v) == 0 && v == counts[i],
			  "count %" PRIu64, counts[i]);
	}
	kvt_enc_count_rep(&b, 1, KVT_OP_DELETE, 9, 77);
	CHECK_FRAME(&b, 1, KVT_OP_DELETE, KVT_FLAG_REPLY, 9);
	kvt_buf_free(&b);
}

static void test_ns_open(void)
{
	static const uint8_t ident[] = "not decoded here: opaque identity bytes";
	struct kvt_ns_open_req req, dreq;
	struct kvt_ns_open_rep rep, drep;
	struct kvt_buf b;
	struct kvt_cursor c;

	kvt_buf_init(&b);
	req.identity = ident;
	req.identity_len = sizeof(ident);
	kvt_enc_ns_open_req(&b, 1, RID, &req);
	CHECK_FRAME(&b, 1, KVT_OP_NS_OPEN, 0, RID);
	c = payload_of(&b);
	CHECK(kvt_dec_ns_open_req(&c, &dreq) == 0);
	CHECK(dreq.identity_len == sizeof(ident));
	CHECK(dreq.identity == b.data + KVT_HEADER_SIZE + 4);
	CHECK(memcmp(dreq.identity, ident, sizeof(ident)) == 0);

	/* The largest identity allowed. */
	uint8_t *big = malloc(KVT_MAX_IDENTITY);
	CHECK(big != NULL);
	if (big) {
		for (unsigned i = 0; i < KVT_MAX_IDENTITY; i++)
			big[i] = (uint8_t)(i * 13);
		req.identity = big;
		req.identity_len = KVT_MAX_IDENTITY;
		kvt_enc_ns_open_req(&b, 1, 5, &req);
		c = payload_of(&b);
		CHECK(kvt_dec_ns_open_req(&c, &dreq) == 0);
		CHECK(dreq.identity_len == KVT_MAX_IDENTITY &&
		      memcmp(dreq.identity, big, KVT_MAX_IDENTITY) == 0);
		free(big);
	}

	memset(&rep, 0, sizeof(rep));
	set_ns_open_rep(&rep);
	kvt_enc_ns_open_rep(&b, 1, RID, &rep);
	CHECK_FRAME(&b, 1, KVT_OP_NS_OPEN, KVT_FLAG_REPLY, RID);
	memset(&drep, 0x5c, sizeof(drep));
	c = payload_of(&b);
	CHECK(kvt_dec_ns_open_rep(&c, &drep) == 0);
	CHECK(drep.ns_id == rep.ns_id && drep.shards == rep.shards &&
	      drep.block_tokens == rep.block_tokens);
	CHECK(drep.shard_bytes == rep.shard_bytes);
	CHECK(drep.shard_stride == rep.shard_stride);
	CHECK(drep.slot_bytes == rep.slot_bytes);
	kvt_buf_free(&b);
}

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
	uint8_t keys[5][KVT_KEY_SIZE];
	struct kvt_buf b;

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
		CHECK_MSG(kvt_dec_keys_req(&c, 5, &d) == 0, "opcode %s",
			  kvt_opcode_name(ops[i].op));
		CHECK(d.ns_id == req.ns_id && d.arg == req.arg && d.n == 5);
		CHECK(d.keys && memcmp(d.keys, keys, sizeof(keys)) == 0);
	}

	/* No keys at all is a valid (empty) request. */
	struct kvt_keys_req none = { 1, 0, 0, NULL }, d;
	kvt_enc_keys_req(&b, 1, KVT_OP_LOOKUP, 1, &none);
	struct kvt_cursor c = payload_of(&b);
	CHECK(kvt_dec_keys_req(&c, 16, &d) == 0 && d.n == 0);

	/* The most keys a message can carry. */
	uint8_t *many = malloc((size_t)KVT_MAX_KEYS * KVT_KEY_SIZE);
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
		free(many);
	}
	kvt_buf_free(&b);
}

static void test_replies(void)
{
	struct kvt_buf b;
	struct kvt_cursor c;

	kvt_buf_init(&b);

	/* LOOKUP reply. */
	struct kvt_lookup_rep lr = { 7, 3, lookup_states }, dl;
	kvt_enc_lookup_rep(&b, 1, RID, &lr);
	CHECK_FRAME(&b, 1, KVT_OP_LOOKUP, KVT_FLAG_REPLY, RID);
	c = payload_of(&b);
	CHECK(kvt_dec_lookup_rep(&c, &dl) == 0);
	CHECK(dl.n == 7 && dl.leading == 3);
	CHECK(dl.states && memcmp(dl.states, lookup_states, 7) == 0);

	/* Slots replies for RESERVE and ACQUIRE. */
	struct kvt_slot s[3], ds[8];
	uint32_t n;
	memset(s, 0, sizeof(s));
	set_slots(s);
	const uint16_t slot_ops[] = { KVT_OP_RESERVE, KVT_OP_ACQUIRE };
	for (unsigned i = 0; i < 2; i++) {
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

	/* Handles requests for COMMIT, ABORT, RELEASE. */
	struct kvt_handle_arg h[4], dh[8];
	memset(h, 0, sizeof(h));
	set_handles(h);
	const uint16_t h_ops[] = { KVT_OP_COMMIT, KVT_OP_ABORT, KVT_OP_RELEASE };
	for (unsigned i = 0; i < 3; i++) {
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

	/* Status replies. */
	int32_t ds32[8];
	const uint16_t st_ops[] = { KVT_OP_COMMIT, KVT_OP_RELEASE,
				    KVT_OP_TOUCH, KVT_OP_DELETE };
	for (unsigned i = 0; i < ARRAY_SIZE(st_ops); i++) {
		kvt_enc_status_rep(&b, 1, st_ops[i], 77, statuses, 4);
		CHECK_FRAME(&b, 1, st_ops[i], KVT_FLAG_REPLY, 77);
		c = payload_of(&b);
		memset(ds32, 0x5c, sizeof(ds32));
		n = 99;
		CHECK(kvt_dec_status_rep(&c, ds32, 8, &n) == 0 && n == 4);
		CHECK(memcmp(ds32, statuses, sizeof(statuses)) == 0);
	}

	/* STATS request, every selector. */
	for (uint32_t what = 0; what <= KVT_STATS_ALL; what++) {
		uint32_t dw = 0xffffffff;
		kvt_enc_stats_req(&b, 1, what + 100, what);
		CHECK_FRAME(&b, 1, KVT_OP_STATS, 0, what + 100);
		c = payload_of(&b);
		CHECK(kvt_dec_stats_req(&c, &dw) == 0 && dw == what);
	}

	/* Extent notifications. */
	struct kvt_extent_note en, den;
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

	/* Errors. */
	struct kvt_error_rep er;
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
	kvt_buf_free(&b);
}

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
	const struct kvt_field *f;
	struct kvt_buf b;

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

	/* The most fields a record may have, with the longest names. */
	char name[KVT_MAX_FIELD_NAME + 1];
	kvt_buf_reset(&b);
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
	kvt_buf_free(&b);
}

/* ---- exact bytes -------------------------------------------------- */

static void test_layout(void)
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
	uint8_t key[KVT_KEY_SIZE];
	struct kvt_buf b;
	struct kvt_header h;

	for (unsigned i = 0; i < KVT_KEY_SIZE; i++)
		key[i] = (uint8_t)i;
	kvt_buf_init(&b);
	struct kvt_keys_req req = { 0x11223344, 1, 1, key };
	kvt_enc_keys_req(&b, 1, KVT_OP_LOOKUP, UINT64_C(0x0102030405060708),
			 &req);
	CHECK(kvt_msg_finish(&b, 0) == 0);
	CHECK(b.len == sizeof(want_keys) &&
	      memcmp(b.data, want_keys, sizeof(want_keys)) == 0);

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

	kvt_enc_error(&b, 1, KVT_OP_RESERVE, 42, -ENOSPC, "ful");
	CHECK(kvt_msg_finish(&b, 0) == 0);
	CHECK(b.len == sizeof(want_error) &&
	      memcmp(b.data, want_error, sizeof(want_error)) == 0);

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
	kvt_buf_free(&b);
}

/* ---- no uninitialised bytes --------------------------------------- */

static void encode_all_from(uint8_t fill, struct kvt_buf *out, unsigned which)
{
	struct kvt_hello_req hq;
	struct kvt_hello_rep hp;
	struct kvt_ns_open_rep nr;
	struct kvt_slot s[3];
	struct kvt_handle_arg h[4];
	struct kvt_extent_note en;
	uint8_t keys[2][KVT_KEY_SIZE];

	memset(&hq, fill, sizeof(hq));
	memset(&hp, fill, sizeof(hp));
	memset(&nr, fill, sizeof(nr));
	memset(s, fill, sizeof(s));
	memset(h, fill, sizeof(h));
	memset(&en, fill, sizeof(en));
	prefill(out, fill);
	switch (which) {
	case 0:
		set_hello_req(&hq);
		kvt_enc_hello_req(out, RID, &hq);
		break;
	case 1:
		set_hello_rep(&hp);
		kvt_enc_hello_rep(out, 1, RID, &hp);
		break;
	case 2:
		set_ns_open_rep(&nr);
		kvt_enc_ns_open_rep(out, 1, RID, &nr);
		break;
	case 3:
		set_slots(s);
		kvt_enc_slots_rep(out, 1, KVT_OP_ACQUIRE, RID, s, 3);
		break;
	case 4:
		set_handles(h);
		kvt_enc_handles_req(out, 1, KVT_OP_COMMIT, RID, h, 4);
		break;
	case 5:
		set_extent_note(&en);
		kvt_enc_extent_note(out, 1, &en);
		break;
	case 6: {
		fill_key(keys[0], 1);
		fill_key(keys[1], 2);
		struct kvt_keys_req kr;
		memset(&kr, fill, sizeof(kr));
		kr.ns_id = 5;
		kr.arg = 0;
		kr.n = 2;
		kr.keys = &keys[0][0];
		kvt_enc_keys_req(out, 1, KVT_OP_RESERVE, RID, &kr);
		break;
	}
	case 7: {
		struct kvt_lookup_rep lr;
		memset(&lr, fill, sizeof(lr));
		lr.n = 7;
		lr.leading = 3;
		lr.states = lookup_states;
		kvt_enc_lookup_rep(out, 1, RID, &lr);
		break;
	}
	case 8:
		kvt_enc_status_rep(out, 1, KVT_OP_COMMIT, RID, statuses, 4);
		break;
	case 9:
		kvt_enc_stats_req(out, 1, RID, KVT_STATS_ALL);
		break;
	case 10:
		kvt_enc_extent_retired(out, 1, 12);
		break;
	case 11:
		kvt_enc_error(out, 1, KVT_OP_LOOKUP, RID, -EINVAL, "bad");
		break;
	case 12:
		encode_records(out);
		return; /* records carry no header */
	case 14: {
		struct kvt_evict_req ev;
		memset(&ev, fill, sizeof(ev));
		set_evict_req(&ev);
		kvt_enc_evict_req(out, 1, RID, &ev);
		break;
	}
	case 15:
		kvt_enc_count_rep(out, 1, KVT_OP_ADMIN_EVICT, RID, 12345);
		break;
	case 16:
		/* No GPU and "any node". */
		set_hello_req(&hq);
		hq.pci_bus_id[0] = 0;
		kvt_enc_hello_req(out, RID, &hq);
		break;
	case 17:
		set_hello_rep(&hp);
		hp.numa_node = -1;
		kvt_enc_hello_rep(out, 1, RID, &hp);
		break;
	case 13: {
		struct kvt_ns_open_req q;
		static const uint8_t ident[] = { 1, 2, 3, 4, 5 };
		memset(&q, fill, sizeof(q));
		q.identity = ident;
		q.identity_len = sizeof(ident);
		kvt_enc_ns_open_req(out, 1, RID, &q);
		break;
	}
	}
	CHECK(kvt_msg_finish(out, 0) == 0);
}

#define N_ENCODERS 18

static void test_no_garbage(void)
{
	for (unsigned i = 0; i < N_ENCODERS; i++) {
		struct kvt_buf a, b;

		encode_all_from(0xaa, &a, i);
		encode_all_from(0x55, &b, i);
		CHECK_MSG(same_bytes(&a, &b),
			  "encoder %u emitted bytes that depend on padding or "
			  "buffer contents",
			  i);
		kvt_buf_free(&a);
		kvt_buf_free(&b);
	}
}

/* ---- header validation -------------------------------------------- */

static void test_header(void)
{
	struct kvt_buf b;
	struct kvt_header h;
	uint8_t hdr[KVT_HEADER_SIZE];

	kvt_buf_init(&b);
	kvt_enc_stats_req(&b, 1, 9, KVT_STATS_ALL);
	CHECK(kvt_msg_finish(&b, 0) == 0);
	memcpy(hdr, b.data, sizeof(hdr));
	CHECK(kvt_header_parse(hdr, &h) == 0);

#define PATCH16(off, v) (hdr[off] = (uint8_t)(v), hdr[(off) + 1] = (uint8_t)((v) >> 8))
#define PATCH32(off, v)                                            \
	do {                                                       \
		for (int _i = 0; _i < 4; _i++)                     \
			hdr[(off) + _i] = (uint8_t)((v) >> (8 * _i)); \
	} while (0)

	/* Bad magic: every byte of it, and byte order swapped. */
	for (int i = 0; i < 4; i++) {
		memcpy(hdr, b.data, sizeof(hdr));
		hdr[i] ^= 0x20;
		CHECK_MSG(kvt_header_parse(hdr, &h) == -EBADMSG, "magic byte %d", i);
	}
	memcpy(hdr, b.data, sizeof(hdr));
	PATCH32(0, 0x4b565431u);
	CHECK(kvt_header_parse(hdr, &h) == -EBADMSG);

	/* Versions outside what this build speaks. */
	const uint16_t bad_versions[] = { 0, KVT_PROTO_VERSION_MAX + 1, 0x100,
					  0xffff };
	for (unsigned i = 0; i < ARRAY_SIZE(bad_versions); i++) {
		memcpy(hdr, b.data, sizeof(hdr));
		PATCH16(4, bad_versions[i]);
		CHECK_MSG(kvt_header_parse(hdr, &h) == -EPROTONOSUPPORT,
			  "version %u", bad_versions[i]);
	}

	/* Length: the maximum is fine, one more is not. */
	memcpy(hdr, b.data, sizeof(hdr));
	PATCH32(8, KVT_MAX_PAYLOAD);
	CHECK(kvt_header_parse(hdr, &h) == 0 && h.length == KVT_MAX_PAYLOAD);
	PATCH32(8, KVT_MAX_PAYLOAD + 1);
	CHECK(kvt_header_parse(hdr, &h) == -EBADMSG);
	PATCH32(8, 0xffffffffu);
	CHECK(kvt_header_parse(hdr, &h) == -EBADMSG);

	/* Descriptors. */
	memcpy(hdr, b.data, sizeof(hdr));
	PATCH16(12, KVT_MAX_FDS);
	CHECK(kvt_header_parse(hdr, &h) == 0 && h.n_fds == KVT_MAX_FDS);
	PATCH16(12, KVT_MAX_FDS + 1);
	CHECK(kvt_header_parse(hdr, &h) == -EBADMSG);
	PATCH16(12, 0x100);
	CHECK(kvt_header_parse(hdr, &h) == -EBADMSG);

	/* Every known flag is accepted, every unknown bit refused. */
	memcpy(hdr, b.data, sizeof(hdr));
	PATCH16(14, KVT_FLAGS_KNOWN);
	CHECK(kvt_header_parse(hdr, &h) == 0 && h.flags == KVT_FLAGS_KNOWN);
	for (unsigned bit = 0; bit < 16; bit++) {
		uint16_t f = (uint16_t)(1u << bit);
		if (f & KVT_FLAGS_KNOWN)
			continue;
		PATCH16(14, f);
		CHECK_MSG(kvt_header_parse(hdr, &h) == -EBADMSG, "flag 0x%x", f);
	}

	/* The request id is opaque: any value. */
	memcpy(hdr, b.data, sizeof(hdr));
	memset(hdr + 16, 0xff, 8);
	CHECK(kvt_header_parse(hdr, &h) == 0 && h.request_id == UINT64_MAX);

	/* The framer refuses what the parser would refuse. */
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
	kvt_buf_free(&b);
#undef PATCH16
#undef PATCH32
}

/* ---- truncation and trailing bytes -------------------------------- */

struct sample {
	const char *name;
	dec_fn dec;
	size_t off;    /* where the decoded part starts */
	bool trailing; /* the decoder must refuse bytes after its end */
	struct kvt_buf b;
};

static void build_identity(struct kvt_identity *id);

static void test_truncation(void)
{
	static struct sample s[32];
	unsigned n = 0;
	uint8_t keys[3][KVT_KEY_SIZE];

	for (unsigned k = 0; k < 3; k++)
		fill_key(keys[k], 40 + k);
	for (unsigned i = 0; i < ARRAY_SIZE(s); i++)
		kvt_buf_init(&s[i].b);

#define ADD(nm, fn, o, tr) (s[n].name = (nm), s[n].dec = (fn), s[n].off = (o), s[n].trailing = (tr), &s[n++].b)
	struct kvt_hello_req hq;
	memset(&hq, 0, sizeof(hq));
	set_hello_req(&hq);
	kvt_enc_hello_req(ADD("hello_req", dec_hello_req, 24, true), 1, &hq);
	struct kvt_hello_rep hp;
	set_hello_rep(&hp);
	kvt_enc_hello_rep(ADD("hello_rep", dec_hello_rep, 24, true), 1, 1, &hp);
	struct kvt_hello_req hq0 = hq;
	hq0.pci_bus_id[0] = 0;
	kvt_enc_hello_req(ADD("hello_req without a bus id", dec_hello_req, 24, true),
			  1, &hq0);
	struct kvt_hello_rep hp0 = hp;
	hp0.numa_node = -1;
	kvt_enc_hello_rep(ADD("hello_rep any node", dec_hello_rep, 24, true), 1, 1,
			  &hp0);
	struct kvt_evict_req ev;
	set_evict_req(&ev);
	kvt_enc_evict_req(ADD("evict_req", dec_evict_req, 24, true), 1, 1, &ev);
	ev.flags = 0;
	kvt_enc_evict_req(ADD("evict_req host only", dec_evict_req, 24, true), 1, 1,
			  &ev);
	kvt_enc_count_rep(ADD("count_rep", dec_count_rep, 24, true), 1,
			  KVT_OP_ADMIN_EVICT, 1, UINT64_MAX);

	struct kvt_identity id;
	struct kvt_buf ib;
	kvt_buf_init(&ib);
	build_identity(&id);
	CHECK(kvt_identity_encode(&id, &ib) == 0);
	struct kvt_ns_open_req nq = { ib.data, (uint32_t)ib.len };
	kvt_enc_ns_open_req(ADD("ns_open_req", dec_ns_open_req, 24, true), 1, 1,
			    &nq);
	struct kvt_ns_open_rep nr;
	set_ns_open_rep(&nr);
	kvt_enc_ns_open_rep(ADD("ns_open_rep", dec_ns_open_rep, 24, true), 1, 1,
			    &nr);
	const uint16_t kops[] = { KVT_OP_LOOKUP, KVT_OP_RESERVE, KVT_OP_ACQUIRE,
				  KVT_OP_TOUCH, KVT_OP_DELETE };
	for (unsigned i = 0; i < ARRAY_SIZE(kops); i++) {
		struct kvt_keys_req kr = { 7, 1, 3, &keys[0][0] };
		kvt_enc_keys_req(ADD(kvt_opcode_name(kops[i]), dec_keys_req, 24,
				     true),
				 1, kops[i], 1, &kr);
	}
	struct kvt_lookup_rep lr = { 7, 3, lookup_states };
	kvt_enc_lookup_rep(ADD("lookup_rep", dec_lookup_rep, 24, true), 1, 1, &lr);
	struct kvt_slot sl[3];
	set_slots(sl);
	kvt_enc_slots_rep(ADD("slots_rep", dec_slots_rep, 24, true), 1,
			  KVT_OP_RESERVE, 1, sl, 3);
	struct kvt_handle_arg ha[4];
	set_handles(ha);
	kvt_enc_handles_req(ADD("handles_req", dec_handles_req, 24, true), 1,
			    KVT_OP_COMMIT, 1, ha, 4);
	kvt_enc_status_rep(ADD("status_rep", dec_status_rep, 24, true), 1,
			   KVT_OP_COMMIT, 1, statuses, 4);
	kvt_enc_stats_req(ADD("stats_req", dec_stats_req, 24, true), 1, 1, 5);
	struct kvt_extent_note en;
	set_extent_note(&en);
	kvt_enc_extent_note(ADD("extent_note", dec_extent_note, 24, true), 1, &en);
	kvt_enc_extent_retired(ADD("extent_retired", dec_extent_retired, 24, true),
			       1, 3);
	kvt_enc_error(ADD("error", dec_error, 24, true), 1, KVT_OP_LOOKUP, 1,
		      -EIO, "disk gone");
	struct kvt_buf *rb = ADD("record", dec_record, 0, false);
	kvt_rec_begin(rb, "tenant", 3);
	kvt_rec_u64(rb, "quota", 1ull << 33);
	kvt_rec_i64(rb, "balance", -7);
	kvt_rec_str(rb, "name", "uid:1000");
	CHECK(kvt_identity_encode(&id, ADD("identity", dec_identity, 0, true)) == 0);
#undef ADD

	for (unsigned i = 0; i < n; i++) {
		const uint8_t *p = s[i].b.data + s[i].off;
		size_t len = s[i].b.len - s[i].off;

		CHECK_MSG(s[i].b.error == 0 && len > 0, "%s", s[i].name);
		CHECK_MSG(dec_copy(s[i].dec, p, len) == 0, "%s does not decode",
			  s[i].name);
		for (size_t k = 0; k < len; k++)
			CHECK_MSG(dec_copy(s[i].dec, p, k) < 0,
				  "%s cut at %zu of %zu decodes", s[i].name, k,
				  len);
		if (s[i].trailing) {
			uint8_t *more = malloc(len + 1);
			if (!more)
				abort();
			memcpy(more, p, len);
			more[len] = 0;
			CHECK_MSG(dec_copy(s[i].dec, more, len + 1) < 0,
				  "%s with a trailing byte decodes", s[i].name);
			free(more);
		}
	}
	for (unsigned i = 0; i < ARRAY_SIZE(s); i++)
		kvt_buf_free(&s[i].b);
	kvt_buf_free(&ib);
}

/* ---- malformed fields --------------------------------------------- */

/* Decode the payload built in b (no header) with fn; expect r. */
static void expect_dec(int line, dec_fn fn, const struct kvt_buf *b, int want,
		       const char *what)
{
	int r = b->error ? b->error : dec_copy(fn, b->data, b->len);
	if (r != want) {
		fprintf(stderr, "%s:%d: %s: decode returned %d, expected %d\n",
			__FILE__, line, what, r, want);
		failures++;
	}
}

#define EXPECT_DEC(fn, b, want, what) expect_dec(__LINE__, fn, b, want, what)

static void test_malformed(void)
{
	struct kvt_buf b;
	uint8_t key[KVT_KEY_SIZE];
	char text[KVT_MAX_STRING + 8];

	kvt_buf_init(&b);
	fill_key(key, 9);
	memset(text, 't', sizeof(text));

	/* HELLO request: each case is well formed but for what it names, so
	 * it fails for that reason and not for a missing field. */
	kvt_buf_reset(&b);
	put_hello_head(&b, 2, 1);
	put_raw_str(&b, "x", 1);
	put_raw_str(&b, "", 0);
	EXPECT_DEC(dec_hello_req, &b, -EBADMSG, "hello min > max");
	kvt_buf_reset(&b);
	put_hello_head(&b, 1, 1);
	put_raw_str(&b, text, KVT_MAX_NAME + 1);
	put_raw_str(&b, "", 0);
	EXPECT_DEC(dec_hello_req, &b, -EBADMSG, "hello name over its max");
	kvt_buf_reset(&b);
	put_hello_head(&b, 1, 1);
	put_raw_str(&b, text, KVT_MAX_NAME);
	put_raw_str(&b, "", 0);
	EXPECT_DEC(dec_hello_req, &b, 0, "hello name at its max");
	kvt_buf_reset(&b);
	put_hello_head(&b, 1, 1);
	put_raw_str(&b, text, KVT_MAX_NAME);
	put_raw_str(&b, "0000:3b:00.0", 12);
	EXPECT_DEC(dec_hello_req, &b, 0, "hello name at its max with a bus id");
	kvt_buf_reset(&b);
	put_hello_head(&b, 1, 1);
	put_raw_str(&b, "ab\0cd", 5);
	put_raw_str(&b, "", 0);
	EXPECT_DEC(dec_hello_req, &b, -EBADMSG, "hello name with a NUL");
	kvt_buf_reset(&b);
	put_hello_head(&b, 1, 1);
	kvt_put_u16(&b, 10);
	kvt_put_bytes(&b, "abc", 3);
	EXPECT_DEC(dec_hello_req, &b, -EBADMSG, "hello name longer than the bytes");
	kvt_buf_reset(&b);
	put_hello_head(&b, 1, 1);
	put_raw_str(&b, "x", 1);
	EXPECT_DEC(dec_hello_req, &b, -EBADMSG, "hello without a bus id field");

	/* The bus id: its alphabet and its length. */
	static const struct {
		const char *id;
		uint16_t len;
		int want;
	} bus[] = {
		{ "0000:3b:00.0", 12, 0 },
		{ "0123456789abcdefABCDEF:.", 24, 0 },
		{ "00000000000000000000000000000000", 32, 0 },
		{ "000000000000000000000000000000000", 33, -EBADMSG },
		{ "0000:3g:00.0", 12, -EBADMSG },
		{ "0000:3G:00.0", 12, -EBADMSG },
		{ "0000:3b:00.0/", 13, -EBADMSG },
		{ "../../../etc", 12, -EBADMSG },
		{ "0000:3b:00 0", 12, -EBADMSG },
		{ "0000-3b-00.0", 12, -EBADMSG },
		{ "0000_3b", 7, -EBADMSG },
		{ "pci-0000", 8, -EBADMSG },
		{ "x", 1, -EBADMSG },
		{ "0000:3b:00.0\n", 13, -EBADMSG },
		{ "0000:3b:00.0\x80", 13, -EBADMSG },
		{ "0000:3b\0:00.0", 13, -EBADMSG },
		{ "0000:3b:00.0\0", 13, -EBADMSG },
	};
	for (unsigned i = 0; i < ARRAY_SIZE(bus); i++) {
		kvt_buf_reset(&b);
		put_hello_head(&b, 1, 1);
		put_raw_str(&b, "w", 1);
		put_raw_str(&b, bus[i].id, bus[i].len);
		CHECK_MSG(dec_copy(dec_hello_req, b.data, b.len) == bus[i].want,
			  "bus id '%.*s' (%u bytes): expected %d", bus[i].len,
			  bus[i].id, bus[i].len, bus[i].want);
	}
	kvt_buf_reset(&b);
	put_hello_head(&b, 1, 1);
	put_raw_str(&b, "w", 1);
	kvt_put_u16(&b, 12);
	kvt_put_bytes(&b, "0000:3b", 7);
	EXPECT_DEC(dec_hello_req, &b, -EBADMSG, "hello bus id longer than the bytes");
	kvt_buf_reset(&b);
	put_hello_head(&b, 1, 1);
	put_raw_str(&b, "w", 1);
	kvt_put_u16(&b, 0xffff);
	kvt_put_bytes(&b, text, 40);
	EXPECT_DEC(dec_hello_req, &b, -EBADMSG, "hello bus id length 65535");

	/* HELLO reply. */
	struct kvt_hello_rep hp;
	set_hello_rep(&hp);
	hp.max_keys = 0;
	kvt_enc_hello_rep(&b, 1, 1, &hp);
	CHECK(dec_copy(dec_hello_rep, b.data + 24, b.len - 24) == -EBADMSG);
	hp.max_keys = KVT_MAX_KEYS + 1;
	kvt_enc_hello_rep(&b, 1, 1, &hp);
	CHECK(dec_copy(dec_hello_rep, b.data + 24, b.len - 24) == -EBADMSG);
	set_hello_rep(&hp);
	const int32_t bad_nodes[] = { -2, 1024, 1025, -1024, INT32_MIN, INT32_MAX,
				      0x10000 };
	for (unsigned i = 0; i < ARRAY_SIZE(bad_nodes); i++) {
		hp.numa_node = bad_nodes[i];
		kvt_enc_hello_rep(&b, 1, 1, &hp);
		CHECK_MSG(dec_copy(dec_hello_rep, b.data + 24, b.len - 24) ==
				  -EBADMSG,
			  "numa_node %d", bad_nodes[i]);
	}
	const int32_t good_nodes[] = { -1, 0, 1023 };
	for (unsigned i = 0; i < ARRAY_SIZE(good_nodes); i++) {
		hp.numa_node = good_nodes[i];
		kvt_enc_hello_rep(&b, 1, 1, &hp);
		CHECK_MSG(dec_copy(dec_hello_rep, b.data + 24, b.len - 24) == 0,
			  "numa_node %d", good_nodes[i]);
	}
	/* A reply of the old layout, without numa_node, is too short. */
	hp.numa_node = 0;
	kvt_enc_hello_rep(&b, 1, 1, &hp);
	CHECK(dec_copy(dec_hello_rep, b.data + 24, b.len - 28) == -EBADMSG);

	/* ADMIN_EVICT: only KVT_EVICT_DROP is a flag. */
	static const uint32_t evict_flags[] = { 2, 3, 4, 0x100, 0x80000000u,
						0x80000001u, 0xffffffffu };
	for (unsigned i = 0; i < ARRAY_SIZE(evict_flags); i++) {
		kvt_buf_reset(&b);
		kvt_put_u32(&b, 1);
		kvt_put_u32(&b, 2);
		kvt_put_u32(&b, evict_flags[i]);
		CHECK_MSG(dec_copy(dec_evict_req, b.data, b.len) == -EBADMSG,
			  "evict flags 0x%x", evict_flags[i]);
	}
	for (uint32_t fl = 0; fl <= KVT_EVICT_DROP; fl++) {
		kvt_buf_reset(&b);
		kvt_put_u32(&b, UINT32_MAX);
		kvt_put_u32(&b, 0);
		kvt_put_u32(&b, fl);
		CHECK_MSG(dec_copy(dec_evict_req, b.data, b.len) == 0,
			  "evict flags 0x%x", fl);
	}

	/* A count is exactly eight bytes. */
	kvt_buf_reset(&b);
	kvt_put_u32(&b, 1);
	EXPECT_DEC(dec_count_rep, &b, -EBADMSG, "count of four bytes");
	kvt_put_u32(&b, 0);
	EXPECT_DEC(dec_count_rep, &b, 0, "count of eight bytes");
	kvt_put_u32(&b, 0);
	EXPECT_DEC(dec_count_rep, &b, -EBADMSG, "count of twelve bytes");

	/* NS_OPEN request. */
	static uint8_t big[KVT_MAX_IDENTITY + 1];
	kvt_buf_reset(&b);
	kvt_put_u32(&b, 0);
	EXPECT_DEC(dec_ns_open_req, &b, -EBADMSG, "identity_len 0");
	kvt_buf_reset(&b);
	kvt_put_u32(&b, KVT_MAX_IDENTITY + 1);
	kvt_put_bytes(&b, big, sizeof(big));
	EXPECT_DEC(dec_ns_open_req, &b, -EBADMSG, "identity_len > max");
	kvt_buf_reset(&b);
	kvt_put_u32(&b, 100);
	kvt_put_bytes(&b, big, 99);
	EXPECT_DEC(dec_ns_open_req, &b, -EBADMSG, "identity_len > bytes present");
	kvt_buf_reset(&b);
	kvt_put_u32(&b, 0xffffffff);
	kvt_put_bytes(&b, big, 16);
	EXPECT_DEC(dec_ns_open_req, &b, -EBADMSG, "identity_len 2^32-1");

	/* NS_OPEN reply: geometry that cannot hold. */
	struct {
		const char *what;
		uint32_t shards;
		uint64_t bytes, stride, slot;
	} nsr[] = {
		{ "shards 0", 0, 4096, 4096, 4096 },
		{ "shards > max tp", KVT_MAX_TP + 1, 4096, 4096, 4096 * 65 },
		{ "shard_bytes 0", 1, 0, 4096, 4096 },
		{ "stride < shard_bytes", 1, 8192, 4096, 8192 },
		{ "slot < shards * stride", 2, 4096, 4096, 4096 },
	};
	for (unsigned i = 0; i < ARRAY_SIZE(nsr); i++) {
		kvt_buf_reset(&b);
		kvt_put_u32(&b, 1);
		kvt_put_u32(&b, nsr[i].shards);
		kvt_put_u32(&b, 16);
		kvt_put_u64(&b, nsr[i].bytes);
		kvt_put_u64(&b, nsr[i].stride);
		kvt_put_u64(&b, nsr[i].slot);
		EXPECT_DEC(dec_ns_open_rep, &b, -EBADMSG, nsr[i].what);
	}

	/* Keys requests. */
	struct kvt_keys_req kr;
	struct kvt_cursor c;
	kvt_buf_reset(&b);
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
	kvt_buf_reset(&b);
	kvt_put_u32(&b, 1);
	kvt_put_u32(&b, 0);
	kvt_put_u32(&b, KVT_MAX_KEYS + 1);
	c = (struct kvt_cursor){ b.data, b.len };
	CHECK(kvt_dec_keys_req(&c, UINT32_MAX, &kr) == -E2BIG);
	kvt_buf_reset(&b);
	kvt_put_u32(&b, 1);
	kvt_put_u32(&b, 0);
	kvt_put_u32(&b, 0xffffffff);
	c = (struct kvt_cursor){ b.data, b.len };
	CHECK(kvt_dec_keys_req(&c, UINT32_MAX, &kr) == -E2BIG);

	/* LOOKUP reply. */
	for (unsigned bad = 4; bad < 256; bad += (bad < 8 ? 1 : 61)) {
		kvt_buf_reset(&b);
		kvt_put_u32(&b, 3);
		kvt_put_u32(&b, 0);
		kvt_put_u8(&b, KVT_STATE_HOST);
		kvt_put_u8(&b, KVT_STATE_MISS);
		kvt_put_u8(&b, (uint8_t)bad);
		EXPECT_DEC(dec_lookup_rep, &b, -EBADMSG, "lookup state > 3");
	}
	kvt_buf_reset(&b);
	kvt_put_u32(&b, 2);
	kvt_put_u32(&b, 3);
	kvt_put_u8(&b, 1);
	kvt_put_u8(&b, 1);
	EXPECT_DEC(dec_lookup_rep, &b, -EBADMSG, "lookup leading > n");
	kvt_buf_reset(&b);
	kvt_put_u32(&b, 2);
	kvt_put_u32(&b, 2);
	kvt_put_u8(&b, 1);
	kvt_put_u8(&b, 2);
	EXPECT_DEC(dec_lookup_rep, &b, 0, "lookup leading == n");
	kvt_buf_reset(&b);
	kvt_put_u32(&b, 5);
	kvt_put_u32(&b, 0);
	kvt_put_u8(&b, 1);
	EXPECT_DEC(dec_lookup_rep, &b, -EBADMSG, "lookup n > bytes present");
	kvt_buf_reset(&b);
	kvt_put_u32(&b, KVT_MAX_KEYS + 1);
	kvt_put_u32(&b, 0);
	kvt_buf_reserve(&b, KVT_MAX_KEYS + 1);
	memset(b.data + 8, 0, KVT_MAX_KEYS + 1);
	EXPECT_DEC(dec_lookup_rep, &b, -EBADMSG, "lookup n > KVT_MAX_KEYS");

	/* Slots replies. */
	struct kvt_slot sl[4];
	uint32_t n;
	kvt_buf_reset(&b);
	kvt_put_u32(&b, 2);
	for (int i = 0; i < 2; i++) {
		kvt_put_u32(&b, 0);
		kvt_put_u64(&b, 1);
		kvt_put_u32(&b, 1);
		kvt_put_u64(&b, 0);
	}
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
	const int32_t bad_status[] = { 1, 4096, INT32_MAX, -4096, INT32_MIN };
	for (unsigned i = 0; i < ARRAY_SIZE(bad_status); i++) {
		kvt_buf_reset(&b);
		kvt_put_u32(&b, 1);
		kvt_put_u32(&b, (uint32_t)bad_status[i]);
		kvt_put_u64(&b, 1);
		kvt_put_u32(&b, 1);
		kvt_put_u64(&b, 0);
		c = (struct kvt_cursor){ b.data, b.len };
		CHECK_MSG(kvt_dec_slots_rep(&c, sl, 4, &n) == -EBADMSG,
			  "slot status %d", bad_status[i]);
	}

	/* Handles requests. */
	struct kvt_handle_arg ha[4];
	kvt_buf_reset(&b);
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
	int32_t st[4];
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

	/* STATS request: each unknown selector bit. */
	for (unsigned bit = 4; bit < 32; bit++) {
		kvt_buf_reset(&b);
		kvt_put_u32(&b, UINT32_C(1) << bit);
		EXPECT_DEC(dec_stats_req, &b, -EBADMSG, "stats unknown bit");
	}

	/* Extent notes. */
	struct {
		const char *what;
		uint64_t size, slot;
	} ens[] = {
		{ "size not a multiple of 4096", (64u << 20) + 512, 2u << 20 },
		{ "size 4095", 4095, 4095 },
		{ "slot_bytes > size", 2u << 20, (2u << 20) + 4096 },
		{ "size 0", 0, 0 },
		{ "slot_bytes 0", 4096, 0 },
	};
	for (unsigned i = 0; i < ARRAY_SIZE(ens); i++) {
		kvt_buf_reset(&b);
		kvt_put_u32(&b, 1);
		kvt_put_u32(&b, 0);
		kvt_put_u64(&b, ens[i].size);
		kvt_put_u64(&b, ens[i].slot);
		kvt_put_u32(&b, 0);
		EXPECT_DEC(dec_extent_note, &b, -EBADMSG, ens[i].what);
	}

	/* Errors. */
	const int32_t bad_err[] = { 0, 1, EIO, INT32_MAX, -4096, INT32_MIN };
	for (unsigned i = 0; i < ARRAY_SIZE(bad_err); i++) {
		kvt_buf_reset(&b);
		kvt_put_u32(&b, (uint32_t)bad_err[i]);
		put_raw_str(&b, "why", 3);
		CHECK_MSG(dec_copy(dec_error, b.data, b.len) == -EBADMSG,
			  "error code %d", bad_err[i]);
	}
	kvt_buf_reset(&b);
	kvt_put_u32(&b, (uint32_t)-EIO);
	put_raw_str(&b, text, KVT_MAX_REASON + 1);
	EXPECT_DEC(dec_error, &b, -EBADMSG, "reason over its max");
	kvt_buf_reset(&b);
	kvt_put_u32(&b, (uint32_t)-EIO);
	put_raw_str(&b, text, KVT_MAX_REASON);
	EXPECT_DEC(dec_error, &b, 0, "reason at its max");
	kvt_buf_reset(&b);
	kvt_put_u32(&b, (uint32_t)-EIO);
	put_raw_str(&b, "disk\0gone", 9);
	EXPECT_DEC(dec_error, &b, -EBADMSG, "reason with a NUL");
	kvt_buf_reset(&b);
	kvt_put_u32(&b, (uint32_t)-EIO);
	put_raw_str(&b, "disk gone\0", 10);
	EXPECT_DEC(dec_error, &b, -EBADMSG, "reason ending in a NUL");

	/* Records: kind and field names. */
	static const struct {
		const char *name;
		uint8_t len;
	} bad_names[] = {
		{ "Daemon", 6 }, { "dae-mon", 7 }, { "dae mon", 7 },
		{ "dae.mon", 7 }, { "dae\x80", 4 }, { "dae\0mon", 7 },
		{ "", 0 },       { "a/b", 3 },     { "tab\t", 4 },
		{ "A", 1 },
	};
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

	/* Strings through the cursor directly. */
	char out[8];
	kvt_buf_reset(&b);
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

	kvt_buf_free(&b);
}

/* ---- namespace identity ------------------------------------------- */

static struct kvt_id_group mha(uint32_t layers, uint32_t kv_heads,
			       uint32_t head_bytes)
{
	return (struct kvt_id_group){ layers, KVT_ATTN_MHA, 0, 2, kv_heads,
				      head_bytes, 1, 0 };
}

/* Llama-3-8B-like: 32 layers, 8 KV heads of 128 fp16 values. */
static void build_identity(struct kvt_identity *id)
{
	memset(id, 0, sizeof(*id));
	id->key_scheme = 1;
	strcpy(id->model, "meta-llama/Meta-Llama-3-8B");
	for (unsigned i = 0; i < 32; i++)
		id->weights[i] = (uint8_t)(0xa0 + i);
	id->weights_len = 32;
	id->layer_first = 0;
	id->layer_end = 32;
	id->tp_size = 1;
	id->cp_size = 1;
	id->block_tokens = 16;
	id->n_groups = 1;
	id->groups[0] = mha(32, 8, 256);
}

/* An independent writer of identity fields, to craft non-canonical forms. */
struct idfield {
	uint16_t tag;
	uint32_t len;
	uint8_t data[300];
};

struct idlist {
	unsigned n;
	struct idfield f[24];
};

static void idl_add(struct idlist *l, uint16_t tag, const void *p, uint32_t len)
{
	struct idfield *f = &l->f[l->n++];
	f->tag = tag;
	f->len = len;
	if (len)
		memcpy(f->data, p, len);
}

static void idl_add_u32s(struct idlist *l, uint16_t tag, const uint32_t *v,
			 unsigned n)
{
	uint8_t d[64];
	for (unsigned i = 0; i < n; i++)
		for (unsigned k = 0; k < 4; k++)
			d[4 * i + k] = (uint8_t)(v[i] >> (8 * k));
	idl_add(l, tag, d, 4 * n);
}

static void idl_from(struct idlist *l, const struct kvt_identity *id)
{
	l->n = 0;
	idl_add_u32s(l, KVT_ID_KEY_SCHEME, &id->key_scheme, 1);
	idl_add(l, KVT_ID_MODEL, id->model, (uint32_t)strlen(id->model));
	idl_add(l, KVT_ID_WEIGHTS, id->weights, id->weights_len);
	uint32_t v[2] = { id->layer_first, id->layer_end };
	idl_add_u32s(l, KVT_ID_LAYERS, v, 2);
	uint32_t p[2] = { id->tp_size, id->cp_size };
	idl_add_u32s(l, KVT_ID_PARALLEL, p, 2);
	idl_add_u32s(l, KVT_ID_BLOCK_TOKENS, &id->block_tokens, 1);
	for (unsigned i = 0; i < id->n_groups; i++) {
		const struct kvt_id_group *g = &id->groups[i];
		uint32_t gv[8] = { g->n_layers, g->attn,     g->window,
				   g->planes,   g->kv_heads, g->head_bytes,
				   g->dtype,    g->scale_layout };
		idl_add_u32s(l, KVT_ID_GROUP, gv, 8);
	}
	if (id->salt_len)
		idl_add(l, KVT_ID_SALT, id->salt, id->salt_len);
}

static void idl_write(const struct idlist *l, struct kvt_buf *b)
{
	kvt_buf_reset(b);
	for (unsigned i = 0; i < l->n; i++) {
		kvt_put_u16(b, l->f[i].tag);
		kvt_put_u32(b, l->f[i].len);
		kvt_put_bytes(b, l->f[i].data, l->f[i].len);
	}
}

static void idl_remove(struct idlist *l, unsigned i)
{
	memmove(&l->f[i], &l->f[i + 1], (l->n - i - 1) * sizeof(l->f[0]));
	l->n--;
}

static void idl_insert(struct idlist *l, unsigned at, const struct idfield *f)
{
	memmove(&l->f[at + 1], &l->f[at], (l->n - at) * sizeof(l->f[0]));
	l->f[at] = *f;
	l->n++;
}

static unsigned idl_find(const struct idlist *l, uint16_t tag)
{
	for (unsigned i = 0; i < l->n; i++)
		if (l->f[i].tag == tag)
			return i;
	abort();
}

/*
 * The daemon recognises an identity it already has by re-encoding and
 * comparing bytes, so whatever decodes must be the canonical form itself.
 */
static int check_id_reject(int line, const struct idlist *l, const char *what)
{
	struct kvt_identity id;
	struct kvt_buf b, re;
	int r;

	kvt_buf_init(&b);
	kvt_buf_init(&re);
	idl_write(l, &b);
	r = dec_copy(dec_identity, b.data, b.len);
	if (r != -EBADMSG) {
		fprintf(stderr, "%s:%d: identity %s: decode returned %d, expected %d\n",
			__FILE__, line, what, r, -EBADMSG);
		failures++;
		if (r == 0 && kvt_identity_decode(b.data, b.len, &id) == 0 &&
		    (kvt_identity_encode(&id, &re) < 0 || !same_bytes(&b, &re)))
			fprintf(stderr,
				"%s:%d:   and it is not canonical: it re-encodes "
				"to %zu different bytes\n",
				__FILE__, line, re.len);
	}
	kvt_buf_free(&b);
	kvt_buf_free(&re);
	return r;
}

#define CHECK_ID_REJECT(l, what) check_id_reject(__LINE__, l, what)

static void check_roundtrip(int line, const struct kvt_identity *id)
{
	struct kvt_buf a, b;
	struct kvt_identity d;
	struct idlist l;

	kvt_buf_init(&a);
	kvt_buf_init(&b);
	idl_from(&l, id);
	idl_write(&l, &b);
	if (kvt_identity_encode(id, &a) != 0 || !same_bytes(&a, &b)) {
		fprintf(stderr, "%s:%d: identity does not encode to its layout\n",
			__FILE__, line);
		failures++;
		goto out;
	}
	memset(&d, 0x5c, sizeof(d));
	if (kvt_identity_decode(a.data, a.len, &d) != 0) {
		fprintf(stderr, "%s:%d: identity does not decode\n", __FILE__,
			line);
		failures++;
		goto out;
	}
	if (d.key_scheme != id->key_scheme || strcmp(d.model, id->model) ||
	    d.weights_len != id->weights_len ||
	    memcmp(d.weights, id->weights, id->weights_len) ||
	    d.layer_first != id->layer_first || d.layer_end != id->layer_end ||
	    d.tp_size != id->tp_size || d.cp_size != id->cp_size ||
	    d.block_tokens != id->block_tokens || d.n_groups != id->n_groups ||
	    memcmp(d.groups, id->groups, id->n_groups * sizeof(d.groups[0])) ||
	    d.salt_len != id->salt_len ||
	    memcmp(d.salt, id->salt, id->salt_len)) {
		fprintf(stderr, "%s:%d: identity decodes to other values\n",
			__FILE__, line);
		failures++;
	}
	if (kvt_identity_encode(&d, &b) != 0 || !same_bytes(&a, &b)) {
		fprintf(stderr, "%s:%d: encode(decode(encode(id))) differs\n",
			__FILE__, line);
		failures++;
	}
out:
	kvt_buf_free(&a);
	kvt_buf_free(&b);
}

#define CHECK_ROUNDTRIP(id) check_roundtrip(__LINE__, id)

static void test_identity_roundtrip(void)
{
	struct kvt_identity id, g1, g2;
	struct kvt_buf a, b;

	build_identity(&id);
	CHECK_ROUNDTRIP(&id);

	/* Salt, no weights, three groups of each kind, a later stage. */
	build_identity(&id);
	id.key_scheme = 0x01000007;
	strcpy(id.model, "google/gemma-2-27b \xe2\x9c\x93");
	id.weights_len = 0;
	id.layer_first = 10;
	id.layer_end = 10 + 4 + 6 + 2;
	id.tp_size = 4;
	id.cp_size = 2;
	id.block_tokens = 4096;
	id.n_groups = 3;
	id.groups[0] = (struct kvt_id_group){ 4, KVT_ATTN_SWA, 4096, 2, 16, 128,
					      7, 3 };
	id.groups[1] = mha(6, 16, 256);
	id.groups[2] = (struct kvt_id_group){ 2, KVT_ATTN_MLA, 0, 1, 1, 1152,
					      2, 0 };
	for (unsigned i = 0; i < KVT_MAX_FINGERPRINT; i++)
		id.salt[i] = (uint8_t)(0xff - i);
	id.salt_len = KVT_MAX_FINGERPRINT;
	CHECK_ROUNDTRIP(&id);

	/* The largest of everything. */
	build_identity(&id);
	memset(id.model, 'm', KVT_MAX_MODEL);
	id.model[KVT_MAX_MODEL] = 0;
	id.weights_len = KVT_MAX_FINGERPRINT;
	id.salt_len = 1;
	id.n_groups = KVT_MAX_GROUPS;
	id.layer_end = 2 * KVT_MAX_GROUPS;
	for (unsigned i = 0; i < KVT_MAX_GROUPS; i++)
		id.groups[i] = mha(2, 8, 256 + i);
	id.tp_size = KVT_MAX_TP;
	CHECK_ROUNDTRIP(&id);

	/* Padding and bytes past each length are not part of the identity. */
	kvt_buf_init(&a);
	kvt_buf_init(&b);
	memset(&g1, 0xaa, sizeof(g1));
	memset(&g2, 0x55, sizeof(g2));
	build_identity(&id);
	id.salt_len = 5;
	id.salt[0] = 9;
	for (int k = 0; k < 2; k++) {
		struct kvt_identity *g = k ? &g2 : &g1;
		g->key_scheme = id.key_scheme;
		strcpy(g->model, id.model);
		memcpy(g->weights, id.weights, id.weights_len);
		g->weights_len = id.weights_len;
		g->layer_first = id.layer_first;
		g->layer_end = id.layer_end;
		g->tp_size = id.tp_size;
		g->cp_size = id.cp_size;
		g->block_tokens = id.block_tokens;
		g->n_groups = 1;
		g->groups[0] = id.groups[0];
		memcpy(g->salt, id.salt, 5);
		g->salt_len = 5;
	}
	prefill(&a, 0xaa);
	prefill(&b, 0x55);
	CHECK(kvt_identity_encode(&g1, &a) == 0);
	CHECK(kvt_identity_encode(&g2, &b) == 0);
	CHECK(same_bytes(&a, &b));
	kvt_buf_free(&a);
	kvt_buf_free(&b);
}

static void test_identity_reject(void)
{
	struct kvt_identity id;
	struct idlist base, l;
	struct idfield f;
	static const struct {
		uint16_t tag;
		const char *name;
	} mandatory[] = {
		{ KVT_ID_KEY_SCHEME, "KEY_SCHEME" },
		{ KVT_ID_MODEL, "MODEL" },
		{ KVT_ID_WEIGHTS, "WEIGHTS" },
		{ KVT_ID_LAYERS, "LAYERS" },
		{ KVT_ID_PARALLEL, "PARALLEL" },
		{ KVT_ID_BLOCK_TOKENS, "BLOCK_TOKENS" },
		{ KVT_ID_GROUP, "GROUP" },
	};
	char what[96];

	build_identity(&id);
	id.salt_len = 3;
	memcpy(id.salt, "abc", 3);
	idl_from(&base, &id);
	CHECK(base.n == 8);

	/* The base decodes, so each rejection below is down to its change. */
	{
		struct kvt_buf b;
		kvt_buf_init(&b);
		idl_write(&base, &b);
		CHECK(dec_copy(dec_identity, b.data, b.len) == 0);
		kvt_buf_free(&b);
	}

	/* Out of order: every adjacent pair swapped. */
	for (unsigned i = 0; i + 1 < base.n; i++) {
		l = base;
		f = l.f[i];
		l.f[i] = l.f[i + 1];
		l.f[i + 1] = f;
		snprintf(what, sizeof(what), "with fields %u and %u swapped", i,
			 i + 1);
		CHECK_ID_REJECT(&l, what);
	}
	/* Salt first, groups last. */
	l = base;
	f = l.f[7];
	idl_remove(&l, 7);
	idl_insert(&l, 0, &f);
	CHECK_ID_REJECT(&l, "with SALT first");

	/* Each non-GROUP field twice. */
	for (unsigned i = 0; i < base.n; i++) {
		if (base.f[i].tag == KVT_ID_GROUP)
			continue;
		l = base;
		idl_insert(&l, i + 1, &base.f[i]);
		snprintf(what, sizeof(what), "with tag %u twice", base.f[i].tag);
		CHECK_ID_REJECT(&l, what);
	}

	/* Unknown tags, at the end and in the middle. */
	const uint16_t unknown[] = { 0, 9, 100, 0xffff };
	for (unsigned i = 0; i < ARRAY_SIZE(unknown); i++) {
		l = base;
		f.tag = unknown[i];
		f.len = 4;
		memset(f.data, 1, 4);
		idl_insert(&l, l.n, &f);
		snprintf(what, sizeof(what), "with unknown tag %u at the end",
			 unknown[i]);
		CHECK_ID_REJECT(&l, what);
	}
	l = base;
	f.tag = 0;
	f.len = 0;
	idl_insert(&l, 0, &f);
	CHECK_ID_REJECT(&l, "with tag 0 first");

	/* Each mandatory field missing. */
	for (unsigned i = 0; i < ARRAY_SIZE(mandatory); i++) {
		l = base;
		idl_remove(&l, idl_find(&l, mandatory[i].tag));
		snprintf(what, sizeof(what), "without %s", mandatory[i].name);
		CHECK_ID_REJECT(&l, what);
	}
	CHECK_ID_REJECT(&(struct idlist){ 0 }, "empty");

	/* Field lengths that do not fit their tag. */
	static const struct {
		uint16_t tag;
		uint32_t len;
		uint8_t byte;
		const char *what;
	} bad_len[] = {
		{ KVT_ID_KEY_SCHEME, 8, 1, "KEY_SCHEME of 8 bytes" },
		{ KVT_ID_KEY_SCHEME, 3, 1, "KEY_SCHEME of 3 bytes" },
		{ KVT_ID_MODEL, 0, 'm', "MODEL empty" },
		{ KVT_ID_MODEL, KVT_MAX_MODEL + 1, 'm', "MODEL over its max" },
		{ KVT_ID_WEIGHTS, KVT_MAX_FINGERPRINT + 1, 7, "WEIGHTS over its max" },
		{ KVT_ID_LAYERS, 4, 0, "LAYERS of 4 bytes" },
		{ KVT_ID_LAYERS, 12, 0, "LAYERS of 12 bytes" },
		{ KVT_ID_PARALLEL, 4, 1, "PARALLEL of 4 bytes" },
		{ KVT_ID_BLOCK_TOKENS, 2, 16, "BLOCK_TOKENS of 2 bytes" },
		{ KVT_ID_GROUP, 28, 0, "GROUP of 28 bytes" },
		{ KVT_ID_GROUP, 36, 0, "GROUP of 36 bytes" },
		{ KVT_ID_SALT, 0, 0, "SALT empty" },
		{ KVT_ID_SALT, KVT_MAX_FINGERPRINT + 1, 3, "SALT over its max" },
	};
	for (unsigned i = 0; i < ARRAY_SIZE(bad_len); i++) {
		l = base;
		unsigned at = idl_find(&l, bad_len[i].tag);
		if (bad_len[i].tag == KVT_ID_GROUP || bad_len[i].tag == KVT_ID_LAYERS ||
		    bad_len[i].tag == KVT_ID_PARALLEL || bad_len[i].tag == KVT_ID_KEY_SCHEME ||
		    bad_len[i].tag == KVT_ID_BLOCK_TOKENS) {
			/* keep the leading words, cut or extend the rest */
			uint32_t old = l.f[at].len;
			l.f[at].len = bad_len[i].len;
			if (bad_len[i].len > old)
				memset(l.f[at].data + old, bad_len[i].byte,
				       bad_len[i].len - old);
		} else {
			l.f[at].len = bad_len[i].len;
			memset(l.f[at].data, bad_len[i].byte, bad_len[i].len);
		}
		CHECK_ID_REJECT(&l, bad_len[i].what);
	}
	l = base;
	memcpy(l.f[1].data, "llama\0x", 7);
	l.f[1].len = 7;
	CHECK_ID_REJECT(&l, "MODEL with a NUL");

	/* A field length beyond the bytes present. */
	{
		struct kvt_buf b;
		kvt_buf_init(&b);
		idl_write(&base, &b);
		/* the SALT field's length is at len - 3 - 4 */
		b.data[b.len - 7] = 4;
		CHECK(dec_copy(dec_identity, b.data, b.len) == -EBADMSG);
		b.data[b.len - 7] = 0xff;
		b.data[b.len - 4] = 0xff;
		CHECK(dec_copy(dec_identity, b.data, b.len) == -EBADMSG);
		kvt_buf_free(&b);
	}

	/* Values: one struct change each, refused by decode and encode. */
	struct {
		const char *what;
		struct kvt_identity id;
	} v[24];
	unsigned nv = 0;
#define VARIANT(w) (v[nv].what = (w), build_identity(&v[nv].id), &v[nv++].id)
	VARIANT("layer sum short")->groups[0].n_layers = 31;
	VARIANT("layer sum long")->layer_end = 31;
	{
		struct kvt_identity *x = VARIANT("two groups, sum mismatch");
		x->n_groups = 2;
		x->groups[0].n_layers = 16;
		x->groups[1] = mha(17, 8, 256);
	}
	VARIANT("MHA with planes 1")->groups[0].planes = 1;
	VARIANT("MHA with a window")->groups[0].window = 128;
	{
		struct kvt_identity *x = VARIANT("MLA with kv_heads 8");
		x->groups[0] = (struct kvt_id_group){ 32, KVT_ATTN_MLA, 0, 1, 8,
						      1152, 1, 0 };
	}
	{
		struct kvt_identity *x = VARIANT("MLA with planes 2");
		x->groups[0] = (struct kvt_id_group){ 32, KVT_ATTN_MLA, 0, 2, 1,
						      1152, 1, 0 };
	}
	{
		struct kvt_identity *x = VARIANT("SWA without a window");
		x->groups[0].attn = KVT_ATTN_SWA;
	}
	VARIANT("unknown attention")->groups[0].attn = 3;
	VARIANT("kv_heads 0")->groups[0].kv_heads = 0;
	VARIANT("head_bytes 0")->groups[0].head_bytes = 0;
	VARIANT("n_groups 0")->n_groups = 0;
	VARIANT("tp 0")->tp_size = 0;
	VARIANT("tp over max")->tp_size = KVT_MAX_TP + 1;
	VARIANT("cp 0")->cp_size = 0;
	VARIANT("block_tokens 0")->block_tokens = 0;
	VARIANT("block_tokens over max")->block_tokens = KVT_MAX_BLOCK_TOKENS + 1;
	{
		struct kvt_identity *x = VARIANT("no layers");
		x->layer_first = x->layer_end = 32;
	}
	VARIANT("empty model")->model[0] = 0;
#undef VARIANT
	for (unsigned i = 0; i < nv; i++) {
		struct kvt_buf b;
		kvt_buf_init(&b);
		CHECK_MSG(kvt_identity_encode(&v[i].id, &b) == -EINVAL,
			  "encode %s", v[i].what);
		idl_from(&l, &v[i].id);
		CHECK_ID_REJECT(&l, v[i].what);
		kvt_buf_free(&b);
	}

	/* Sixteen groups are fine, seventeen are not. */
	build_identity(&id);
	id.n_groups = KVT_MAX_GROUPS;
	id.layer_end = KVT_MAX_GROUPS;
	for (unsigned i = 0; i < KVT_MAX_GROUPS; i++)
		id.groups[i] = mha(1, 8, 256);
	idl_from(&l, &id);
	{
		struct kvt_buf b;
		kvt_buf_init(&b);
		idl_write(&l, &b);
		CHECK(dec_copy(dec_identity, b.data, b.len) == 0);
		kvt_buf_free(&b);
	}
	id.layer_end = KVT_MAX_GROUPS + 1;
	idl_from(&l, &id);
	uint32_t gv[8] = { 1, KVT_ATTN_MHA, 0, 2, 8, 256, 1, 0 };
	struct idlist extra = { 0 };
	idl_add_u32s(&extra, KVT_ID_GROUP, gv, 8);
	idl_insert(&l, l.n, &extra.f[0]);
	CHECK_ID_REJECT(&l, "with 17 groups");

	/* Longer than any identity may be. */
	{
		uint8_t *p = calloc(1, KVT_MAX_IDENTITY + 1);
		struct kvt_buf b;
		kvt_buf_init(&b);
		idl_write(&base, &b);
		if (!p)
			abort();
		memcpy(p, b.data, b.len);
		CHECK(kvt_identity_decode(p, KVT_MAX_IDENTITY + 1, &id) == -EBADMSG);
		free(p);
		kvt_buf_free(&b);
	}
}

static void check_geometry(int line, const struct kvt_identity *id,
			   uint32_t shards, uint32_t heads, uint64_t shard_bytes,
			   uint64_t bytes_per_token)
{
	struct kvt_geometry g;
	int r = kvt_identity_geometry(id, &g);

	if (r != 0) {
		fprintf(stderr, "%s:%d: geometry returned %d\n", __FILE__, line, r);
		failures++;
		return;
	}
	uint64_t stride = (shard_bytes + 4095) / 4096 * 4096;
	if (g.shards != shards || g.heads_per_shard[0] != heads ||
	    g.shard_bytes != shard_bytes || g.bytes_per_token != bytes_per_token ||
	    g.block_tokens != id->block_tokens || g.shard_stride != stride ||
	    g.slot_bytes != stride * shards) {
		fprintf(stderr,
			"%s:%d: geometry: shards %u heads %u shard_bytes %" PRIu64
			" stride %" PRIu64 " slot %" PRIu64 " per token %" PRIu64 "\n",
			__FILE__, line, g.shards, g.heads_per_shard[0],
			g.shard_bytes, g.shard_stride, g.slot_bytes,
			g.bytes_per_token);
		failures++;
	}
}

#define CHECK_GEOMETRY(id, sh, h, sb, bpt) check_geometry(__LINE__, id, sh, h, sb, bpt)

static void test_geometry(void)
{
	struct kvt_identity id;
	struct kvt_geometry g;

	build_identity(&id);
	CHECK_GEOMETRY(&id, 1, 8, 2097152, 131072);
	id.tp_size = 2;
	CHECK_GEOMETRY(&id, 2, 4, 1048576, 131072);
	id.tp_size = 8;
	CHECK_GEOMETRY(&id, 8, 1, 262144, 131072);

	/* DeepSeek-V3: 61 MLA layers, one 576-value bf16 latent per token. */
	build_identity(&id);
	strcpy(id.model, "deepseek-ai/DeepSeek-V3");
	id.layer_end = 61;
	id.tp_size = 8;
	id.groups[0] = (struct kvt_id_group){ 61, KVT_ATTN_MLA, 0, 1, 1, 1152,
					      2, 0 };
	CHECK_GEOMETRY(&id, 1, 1, 70272 * 16, 70272);
	id.block_tokens = 64;
	CHECK_GEOMETRY(&id, 1, 1, 70272 * 64, 70272);

	/* Heads that do not divide among ranks. */
	build_identity(&id);
	id.tp_size = 3;
	CHECK(kvt_identity_geometry(&id, &g) == -EINVAL);
	id.groups[0].kv_heads = 12;
	id.tp_size = 8;
	CHECK(kvt_identity_geometry(&id, &g) == -EINVAL);

	/* Fewer heads than ranks: replicated, one per shard. */
	build_identity(&id);
	id.groups[0].kv_heads = 4;
	id.tp_size = 8;
	CHECK_GEOMETRY(&id, 8, 1, 32 * 2 * 256 * 16, 32 * 2 * 256 * 8);

	/* A stride rounded up to 4 KiB. */
	build_identity(&id);
	id.block_tokens = 3;
	id.groups[0] = mha(32, 8, 100);
	CHECK_GEOMETRY(&id, 1, 8, 32 * 2 * 8 * 100 * 3, 32 * 2 * 8 * 100);

	/* Mixed groups: MLA is stored once per shard set only when all are. */
	build_identity(&id);
	id.tp_size = 2;
	id.n_groups = 2;
	id.groups[0] = mha(16, 8, 256);
	id.groups[1] = (struct kvt_id_group){ 16, KVT_ATTN_SWA, 1024, 2, 4, 256,
					      1, 0 };
	CHECK(kvt_identity_geometry(&id, &g) == 0);
	CHECK(g.shards == 2 && g.heads_per_shard[0] == 4 &&
	      g.heads_per_shard[1] == 2);
	CHECK(g.shard_bytes == (uint64_t)(16 * 2 * 4 * 256 + 16 * 2 * 2 * 256) * 16);

	/* A slot of 1 GiB, and one of 2 GiB: the 1 GiB limit is the
	 * daemon's (one io_uring buffer), not the wire's. */
	build_identity(&id);
	id.block_tokens = 4096;
	id.groups[0] = mha(32, 8, 512);
	CHECK(kvt_identity_geometry(&id, &g) == 0 &&
	      g.slot_bytes == (UINT64_C(1) << 30));
	id.groups[0] = mha(32, 8, 1024);
	CHECK(kvt_identity_geometry(&id, &g) == 0 &&
	      g.slot_bytes == (UINT64_C(2) << 30));

	/* An invalid identity has no geometry. */
	build_identity(&id);
	id.groups[0].n_layers = 31;
	CHECK(kvt_identity_geometry(&id, &g) == -EINVAL);
}

/* The bytes of field #nth with tag in an encoded identity. */
static bool find_id_field(const struct kvt_buf *b, uint16_t tag, unsigned nth,
			  const uint8_t **ret, uint32_t *ret_len)
{
	struct kvt_cursor c = { b->data, b->len };
	while (c.left) {
		uint16_t t;
		uint32_t len;
		const uint8_t *p;
		if (kvt_get_u16(&c, &t) < 0 || kvt_get_u32(&c, &len) < 0 ||
		    kvt_get_bytes(&c, len, &p) < 0)
			return false;
		if (t == tag && nth-- == 0) {
			*ret = p;
			*ret_len = len;
			return true;
		}
	}
	return false;
}

/*
 * Changing one field must change the canonical encoding, and it must do so
 * in that field's own bytes (word `word` of the field, or anywhere in it
 * for word < 0): then no other field can stand in for it.
 */
static void check_differs(int line, const struct kvt_identity *x,
			  uint16_t tag, unsigned nth, int word, const char *what)
{
	struct kvt_identity base;
	struct kvt_buf a, b;
	const uint8_t *pa, *pb;
	uint32_t la, lb;

	build_identity(&base);
	base.salt_len = 4;
	memcpy(base.salt, "s4lt", 4);
	base.n_groups = 2;
	base.groups[0] = mha(16, 8, 256);
	base.groups[1] = mha(16, 8, 256);
	kvt_buf_init(&a);
	kvt_buf_init(&b);
	if (kvt_identity_encode(&base, &a) != 0 ||
	    kvt_identity_encode(x, &b) != 0) {
		fprintf(stderr, "%s:%d: %s: does not encode\n", __FILE__, line,
			what);
		failures++;
		goto out;
	}
	if (same_bytes(&a, &b)) {
		fprintf(stderr, "%s:%d: changing %s leaves the identity unchanged\n",
			__FILE__, line, what);
		failures++;
		goto out;
	}
	bool fa = find_id_field(&a, tag, nth, &pa, &la);
	bool fb = find_id_field(&b, tag, nth, &pb, &lb);
	bool differs;
	if (word < 0)
		differs = fa != fb || (fa && (la != lb || memcmp(pa, pb, la)));
	else
		differs = fa && fb && la == lb && la >= 4u * (unsigned)word + 4 &&
			  memcmp(pa + 4 * word, pb + 4 * word, 4) != 0;
	if (!differs) {
		fprintf(stderr, "%s:%d: changing %s does not change its own field\n",
			__FILE__, line, what);
		failures++;
	}
out:
	kvt_buf_free(&a);
	kvt_buf_free(&b);
}

static void test_key_completeness(void)
{
	struct kvt_identity x;
	struct kvt_buf a, b;

#define BASE()                                                           \
	(build_identity(&x), x.salt_len = 4, memcpy(x.salt, "s4lt", 4),      \
	 x.n_groups = 2, x.groups[0] = mha(16, 8, 256),                  \
	 x.groups[1] = mha(16, 8, 256), &x)
#define DIFFERS(tag, nth, word, what) \
	check_differs(__LINE__, &x, tag, nth, word, what)

	BASE()->key_scheme = 2;
	DIFFERS(KVT_ID_KEY_SCHEME, 0, 0, "key_scheme");
	strcpy(BASE()->model, "meta-llama/Meta-Llama-3-8B-Instruct");
	DIFFERS(KVT_ID_MODEL, 0, -1, "model name (longer)");
	BASE()->model[11] = 'm';
	DIFFERS(KVT_ID_MODEL, 0, -1, "model name (case)");
	BASE()->weights[31] ^= 1;
	DIFFERS(KVT_ID_WEIGHTS, 0, -1, "weights fingerprint (last bit)");
	BASE()->weights_len = 31;
	DIFFERS(KVT_ID_WEIGHTS, 0, -1, "weights fingerprint (length)");
	BASE()->weights_len = 0;
	DIFFERS(KVT_ID_WEIGHTS, 0, -1, "weights fingerprint (absent)");
	BASE()->layer_first = 1;
	x.groups[0].n_layers = 15;
	DIFFERS(KVT_ID_LAYERS, 0, 0, "layer_first");
	BASE()->layer_end = 31;
	x.groups[1].n_layers = 15;
	DIFFERS(KVT_ID_LAYERS, 0, 1, "layer_end");
	BASE()->layer_first = 32;
	x.layer_end = 64;
	DIFFERS(KVT_ID_LAYERS, 0, -1, "pipeline stage");
	BASE()->tp_size = 2;
	DIFFERS(KVT_ID_PARALLEL, 0, 0, "tp_size");
	BASE()->cp_size = 2;
	DIFFERS(KVT_ID_PARALLEL, 0, 1, "cp_size");
	BASE()->block_tokens = 32;
	DIFFERS(KVT_ID_BLOCK_TOKENS, 0, 0, "block_tokens");

	for (unsigned gi = 0; gi < 2; gi++) {
		char what[64];
#define GROUP_CASE(word, name, ...)                                         \
	do {                                                                \
		struct kvt_id_group *g = &BASE()->groups[gi];               \
		(void)g;                                                    \
		__VA_ARGS__;                                                \
		snprintf(what, sizeof(what), "group %u %s", gi, name);      \
		DIFFERS(KVT_ID_GROUP, gi, word, what);                      \
	} while (0)
		GROUP_CASE(0, "n_layers", g->n_layers = 17, x.layer_end = 33);
		GROUP_CASE(1, "attn", g->attn = KVT_ATTN_SWA, g->window = 4096);
		GROUP_CASE(2, "window", g->attn = KVT_ATTN_SWA, g->window = 4096);
		GROUP_CASE(3, "planes", *g = (struct kvt_id_group){ 16, KVT_ATTN_MLA,
								   0, 1, 1, 256, 1, 0 });
		GROUP_CASE(4, "kv_heads", g->kv_heads = 4);
		GROUP_CASE(5, "head_bytes", g->head_bytes = 512);
		GROUP_CASE(6, "dtype", g->dtype = 2);
		GROUP_CASE(7, "scale_layout", g->scale_layout = 1);
#undef GROUP_CASE
	}
	/* SWA: a different window is a different identity. */
	{
		BASE()->groups[0].attn = KVT_ATTN_SWA;
		x.groups[0].window = 4096;
		struct kvt_identity y = x;
		y.groups[0].window = 4097;
		kvt_buf_init(&a);
		kvt_buf_init(&b);
		CHECK(kvt_identity_encode(&x, &a) == 0);
		CHECK(kvt_identity_encode(&y, &b) == 0);
		CHECK(!same_bytes(&a, &b));
		kvt_buf_free(&a);
		kvt_buf_free(&b);
	}
	/* Group order is part of the identity. */
	BASE()->groups[1].head_bytes = 512;
	{
		struct kvt_identity y = x;
		y.groups[0] = x.groups[1];
		y.groups[1] = x.groups[0];
		kvt_buf_init(&a);
		kvt_buf_init(&b);
		CHECK(kvt_identity_encode(&x, &a) == 0);
		CHECK(kvt_identity_encode(&y, &b) == 0);
		CHECK(!same_bytes(&a, &b));
		kvt_buf_free(&a);
		kvt_buf_free(&b);
	}
	BASE()->salt[3] ^= 0x80;
	DIFFERS(KVT_ID_SALT, 0, -1, "salt (last byte)");
	BASE()->salt_len = 3;
	DIFFERS(KVT_ID_SALT, 0, -1, "salt (length)");
	BASE()->salt_len = 0;
	DIFFERS(KVT_ID_SALT, 0, -1, "salt (absent)");

	/* Length prefixes: moving bytes from one field to the next is not
	 * the same identity. */
	{
		struct kvt_identity y;
		(void)BASE();
		strcpy(x.model, "ab");
		x.weights_len = 1;
		x.weights[0] = 'c';
		y = x;
		strcpy(y.model, "a");
		y.weights_len = 2;
		memcpy(y.weights, "bc", 2);
		kvt_buf_init(&a);
		kvt_buf_init(&b);
		CHECK(kvt_identity_encode(&x, &a) == 0);
		CHECK(kvt_identity_encode(&y, &b) == 0);
		CHECK(!same_bytes(&a, &b));
		kvt_buf_free(&a);
		kvt_buf_free(&b);
	}
#undef BASE
#undef DIFFERS
}

/* ---- framing over a socketpair ------------------------------------ */

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

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

static void test_socket(void)
{
	int sv[2], mf[KVT_MAX_FDS], got[KVT_MAX_FDS + 2];
	unsigned n_got;
	uint8_t in[256];
	struct kvt_buf b;
	struct kvt_header h;
	char text[16];

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
		fprintf(stderr, "socketpair: %m\n");
		failures++;
		return;
	}
	for (int i = 0; i < KVT_MAX_FDS; i++) {
		snprintf(text, sizeof(text), "memfd-%d", i);
		mf[i] = make_memfd(text, text);
		CHECK(mf[i] >= 0);
	}
	int before = count_fds();
	CHECK(before > 0);

	/* Two descriptors with a message; both arrive close-on-exec. */
	kvt_buf_init(&b);
	struct kvt_extent_note en;
	set_extent_note(&en);
	kvt_enc_extent_note(&b, 1, &en);
	CHECK(kvt_msg_finish(&b, 2) == 0);
	CHECK(kvt_sendmsg(sv[0], b.data, b.len, mf, 2) == (ssize_t)b.len);
	n_got = 0;
	memset(got, -1, sizeof(got));
	CHECK(kvt_recvmsg(sv[1], in, sizeof(in), got, &n_got, KVT_MAX_FDS) ==
	      (ssize_t)b.len);
	CHECK(n_got == 2);
	CHECK(memcmp(in, b.data, b.len) == 0);
	CHECK(kvt_header_parse(in, &h) == 0 && h.n_fds == 2 &&
	      h.opcode == KVT_OP_EXTENT_ADDED);
	for (unsigned i = 0; i < n_got && i < 2; i++) {
		int fl = fcntl(got[i], F_GETFD);
		CHECK_MSG(fl >= 0 && (fl & FD_CLOEXEC), "received fd %u", i);
		CHECK(got[i] != mf[i] && same_file(got[i], mf[i]));
		char buf[16] = { 0 };
		snprintf(text, sizeof(text), "memfd-%u", i);
		CHECK(pread(got[i], buf, sizeof(buf) - 1, 0) == (ssize_t)strlen(text) &&
		      strcmp(buf, text) == 0);
		close(got[i]);
	}
	CHECK(count_fds() == before);

	/* Appended after descriptors already held, up to max_fds. */
	CHECK(kvt_sendmsg(sv[0], "ab", 2, mf, KVT_MAX_FDS) == 2);
	n_got = 1;
	got[0] = -7;
	CHECK(kvt_recvmsg(sv[1], in, sizeof(in), got, &n_got, KVT_MAX_FDS + 1) == 2);
	CHECK(n_got == KVT_MAX_FDS + 1 && got[0] == -7);
	for (unsigned i = 1; i < n_got; i++) {
		CHECK(same_file(got[i], mf[i - 1]));
		close(got[i]);
	}
	CHECK(count_fds() == before);

	/* Descriptors nobody asked for: refused, none left open. */
	CHECK(kvt_sendmsg(sv[0], b.data, b.len, mf, 2) == (ssize_t)b.len);
	n_got = 0;
	CHECK(kvt_recvmsg(sv[1], in, sizeof(in), got, &n_got, 0) == -EPROTO);
	CHECK(n_got == 0);
	CHECK_MSG(count_fds() == before, "%d fds open, %d before", count_fds(),
		  before);

	/* More than fit after those already held. */
	CHECK(kvt_sendmsg(sv[0], "x", 1, mf, 2) == 1);
	n_got = 1;
	got[0] = -7;
	CHECK(kvt_recvmsg(sv[1], in, sizeof(in), got, &n_got, 2) == -EPROTO);
	CHECK(n_got == 1 && got[0] == -7);
	CHECK(count_fds() == before);

	/* No descriptors: fine with max_fds 0. */
	CHECK(kvt_sendmsg(sv[0], "hello", 5, NULL, 0) == 5);
	n_got = 0;
	CHECK(kvt_recvmsg(sv[1], in, sizeof(in), got, &n_got, 0) == 5);
	CHECK(n_got == 0 && memcmp(in, "hello", 5) == 0);

	/* Limits and states of the socket. */
	int too_many[KVT_MAX_FDS + 1];
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

	for (int i = 0; i < KVT_MAX_FDS; i++)
		close(mf[i]);
	kvt_buf_free(&b);
}

int main(void)
{
	test_hello();
	test_evict();
	test_ns_open();
	test_keys();
	test_replies();
	test_records();
	test_layout();
	test_no_garbage();
	test_header();
	test_truncation();
	test_malformed();
	test_identity_roundtrip();
	test_identity_reject();
	test_geometry();
	test_key_completeness();
	test_socket();

	if (failures) {
		fprintf(stderr, "test-proto: %d check(s) failed\n", failures);
		return 1;
	}
	printf("test-proto: ok\n");
	return 0;
}
