/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Every decoder of the wire format on arbitrary bytes: no crash, no read
 * out of bounds, and whatever decodes re-encodes to something that decodes
 * to the same values.
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "kvt-proto.h"

static void check(int cond)
{
	if (!cond)
		abort();
}

static void identity_roundtrip(const uint8_t *p, size_t n)
{
	struct kvt_identity id;
	if (kvt_identity_decode(p, n, &id) < 0)
		return;
	struct kvt_geometry g;
	(void)kvt_identity_geometry(&id, &g);
	/* Canonical: what decodes is exactly what the encoder writes. */
	struct kvt_buf b;
	kvt_buf_init(&b);
	check(kvt_identity_encode(&id, &b) == 0);
	check(b.len == n && memcmp(b.data, p, n) == 0);
	kvt_buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct kvt_slot slots[KVT_MAX_KEYS];
	static struct kvt_handle_arg handles[KVT_MAX_KEYS];
	static int32_t status[KVT_MAX_KEYS];
	static struct kvt_record rec;

	if (size < 1)
		return 0;
	uint8_t which = data[0];
	struct kvt_cursor c = {data + 1, size - 1};
	uint32_t n;

	if (size >= 1 + KVT_HEADER_SIZE) {
		struct kvt_header h;
		(void)kvt_header_parse(data + 1, &h);
	}
	switch (which % 16) {
	case 0: {
		struct kvt_hello_req m;
		if (kvt_dec_hello_req(&c, &m) == 0) {
			struct kvt_buf b;
			kvt_buf_init(&b);
			kvt_enc_hello_req(&b, 1, &m);
			struct kvt_cursor c2 = {b.data + KVT_HEADER_SIZE, b.len - KVT_HEADER_SIZE};
			struct kvt_hello_req m2;
			check(kvt_dec_hello_req(&c2, &m2) == 0);
			check(!strcmp(m.name, m2.name) && !strcmp(m.pci_bus_id, m2.pci_bus_id) &&
			      m.features == m2.features);
			kvt_buf_free(&b);
		}
		break;
	}
	case 1: {
		struct kvt_hello_rep m;
		(void)kvt_dec_hello_rep(&c, &m);
		break;
	}
	case 2: {
		struct kvt_ns_open_req m;
		if (kvt_dec_ns_open_req(&c, &m) == 0)
			identity_roundtrip(m.identity, m.identity_len);
		break;
	}
	case 3: {
		struct kvt_ns_open_rep m;
		(void)kvt_dec_ns_open_rep(&c, &m);
		break;
	}
	case 4: {
		struct kvt_keys_req m;
		if (kvt_dec_keys_req(&c, KVT_MAX_KEYS, &m) == 0 && m.n) {
			/* The keys are in the message: touch the last byte. */
			volatile uint8_t last = m.keys[(size_t)m.n * KVT_KEY_SIZE - 1];
			(void)last;
		}
		break;
	}
	case 5: {
		struct kvt_lookup_rep m;
		(void)kvt_dec_lookup_rep(&c, &m);
		break;
	}
	case 6:
		(void)kvt_dec_slots_rep(&c, slots, KVT_MAX_KEYS, &n);
		break;
	case 7:
		(void)kvt_dec_handles_req(&c, KVT_MAX_KEYS, handles, &n);
		break;
	case 8:
		(void)kvt_dec_status_rep(&c, status, KVT_MAX_KEYS, &n);
		break;
	case 9: {
		uint32_t what;
		(void)kvt_dec_stats_req(&c, &what);
		break;
	}
	case 10: {
		struct kvt_extent_note m;
		(void)kvt_dec_extent_note(&c, &m);
		break;
	}
	case 11: {
		struct kvt_error_rep m;
		(void)kvt_dec_error(&c, &m);
		break;
	}
	case 12:
		while (c.left && kvt_dec_record(&c, &rec) == 0)
			(void)kvt_record_get(&rec, "used");
		break;
	case 13: {
		struct kvt_evict_req m;
		(void)kvt_dec_evict_req(&c, &m);
		break;
	}
	case 15: {
		/* SETTLED: what decodes re-encodes to the same bytes. */
		struct kvt_settled m;
		if (kvt_dec_settled(&c, &m) == 0) {
			struct kvt_buf b;
			kvt_buf_init(&b);
			kvt_enc_settled(&b, 1, &m);
			check(b.len == size - 1 + KVT_HEADER_SIZE &&
			      !memcmp(b.data + KVT_HEADER_SIZE, data + 1, size - 1));
			check(m.n_keys >= 1 && m.n_host <= m.n_keys);
			kvt_buf_free(&b);
		}
		break;
	}
	default:
		identity_roundtrip(data + 1, size - 1);
		break;
	}
	return 0;
}

static void emit_payload(fuzz_seed_fn emit, void *ud, uint8_t which, struct kvt_buf *b)
{
	uint8_t buf[8192];
	size_t n = b->len - KVT_HEADER_SIZE;
	if (n + 1 > sizeof(buf))
		return;
	buf[0] = which;
	memcpy(buf + 1, b->data + KVT_HEADER_SIZE, n);
	emit(buf, n + 1, ud);
}

void fuzz_seeds(fuzz_seed_fn emit, void *ud)
{
	struct kvt_buf b;
	uint8_t keys[4 * KVT_KEY_SIZE];
	memset(keys, 0x5a, sizeof(keys));
	kvt_buf_init(&b);

	struct kvt_hello_req hr = {1, 1, KVT_FEATURES_ALL, "seed", "0000:3b:00.0"};
	kvt_enc_hello_req(&b, 1, &hr);
	emit_payload(emit, ud, 0, &b);
	struct kvt_hello_rep hp = {1, 7, 1, 2, 4096, 65536, 1 << 30, 0};
	kvt_enc_hello_rep(&b, 1, 1, &hp);
	emit_payload(emit, ud, 1, &b);

	struct kvt_identity id = {.key_scheme = 1, .model = "seed", .layer_end = 4,
				  .tp_size = 2, .cp_size = 1, .block_tokens = 16, .n_groups = 2};
	id.groups[0] = (struct kvt_id_group){2, KVT_ATTN_MHA, 0, 2, 8, 256, 1, 0};
	id.groups[1] = (struct kvt_id_group){2, KVT_ATTN_SWA, 128, 2, 8, 256, 1, 0};
	struct kvt_buf ident;
	kvt_buf_init(&ident);
	kvt_identity_encode(&id, &ident);
	struct kvt_ns_open_req nr = {ident.data, (uint32_t)ident.len};
	kvt_enc_ns_open_req(&b, 1, 1, &nr);
	emit_payload(emit, ud, 2, &b);
	uint8_t raw[4200];
	raw[0] = 14;
	memcpy(raw + 1, ident.data, ident.len);
	emit(raw, ident.len + 1, ud);

	struct kvt_ns_open_rep np = {1, 2, 16, 1 << 20, 1 << 20, 2 << 20};
	kvt_enc_ns_open_rep(&b, 1, 1, &np);
	emit_payload(emit, ud, 3, &b);
	struct kvt_keys_req kr = {1, 0, 4, keys};
	kvt_enc_keys_req(&b, 1, KVT_OP_LOOKUP, 1, &kr);
	emit_payload(emit, ud, 4, &b);
	uint8_t states[4] = {1, 1, 3, 0};
	struct kvt_lookup_rep lr = {4, 2, states};
	kvt_enc_lookup_rep(&b, 1, 1, &lr);
	emit_payload(emit, ud, 5, &b);
	struct kvt_slot sl[2] = {{0, 99, 1, 4096}, {-28, 0, 0, 0}};
	kvt_enc_slots_rep(&b, 1, KVT_OP_RESERVE, 1, sl, 2);
	emit_payload(emit, ud, 6, &b);
	struct kvt_handle_arg ha[2] = {{99, 1}, {100, 0}};
	kvt_enc_handles_req(&b, 1, KVT_OP_COMMIT, 1, ha, 2);
	emit_payload(emit, ud, 7, &b);
	int32_t st[3] = {0, -2, -125};
	kvt_enc_status_rep(&b, 1, KVT_OP_COMMIT, 1, st, 3);
	emit_payload(emit, ud, 8, &b);
	kvt_enc_stats_req(&b, 1, 1, KVT_STATS_ALL);
	emit_payload(emit, ud, 9, &b);
	struct kvt_extent_note en = {1, KVT_EXTENT_LOCKED, 2 << 20, 32768, 0};
	kvt_enc_extent_note(&b, 1, &en);
	emit_payload(emit, ud, 10, &b);
	kvt_enc_error(&b, 1, KVT_OP_LOOKUP, 1, -7, "too many keys");
	emit_payload(emit, ud, 11, &b);
	kvt_msg_begin(&b, 1, KVT_OP_STATS, KVT_FLAG_REPLY, 1);
	kvt_rec_begin(&b, "tenant", 3);
	kvt_rec_u64(&b, "used", 4096);
	kvt_rec_i64(&b, "node", -1);
	kvt_rec_str(&b, "name", "uid:0");
	emit_payload(emit, ud, 12, &b);
	struct kvt_evict_req er = {1, 1, KVT_EVICT_DROP};
	kvt_enc_evict_req(&b, 1, 1, &er);
	emit_payload(emit, ud, 13, &b);
	struct kvt_settled sd = {7, 1, 128, 120};
	kvt_enc_settled(&b, 1, &sd);
	emit_payload(emit, ud, 15, &b);
	kvt_buf_free(&ident);
	kvt_buf_free(&b);
}
