/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The decoders of the spill file format on arbitrary bytes, as recovery and
 * every restore meet them on disk: no crash, no read out of bounds, and
 * whatever decodes re-encodes to exactly the bytes it came from (every byte
 * of a header is covered by its checksum or must be zero).  A slot header
 * that decodes passes spill_slot_check for the place and block it names and
 * for no other; one that does not decode fails it with the decoder's error.
 *
 * The first input byte says what to do with the rest:
 *   bit 0  a slot header (else a region header);
 *   bit 1  zero-pad the bytes to a whole header (else decode them as they
 *          are, in a buffer of exactly their size, short ones included);
 *   bit 2  write the right checksum over them first, so that mutations get
 *          past it to the field, padding and range checks.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "byteorder.h"
#include "fuzz.h"
#include "spill.h"

/* Offsets of docs/nvme.md §2.1 and §2.2. */
#define RH_IDENTITY_LEN 36
#define RH_IDENTITY 72
#define SH_SUM 112

static void check(int cond)
{
	if (!cond)
		abort();
}

static void region_case(const uint8_t *buf, size_t len)
{
	struct spill_region_header h;
	int r = spill_region_header_decode(buf, len, &h);

	if (len < SPILL_REGION_HEADER_BYTES) {
		check(r == -EINVAL);
		return;
	}
	check(r == 0 || r == -ENODATA || r == -EBADMSG || r == -EPROTONOSUPPORT);
	if (r < 0)
		return;
	/* What decodes is in range... */
	check(h.generation != 0);
	check(spill_slots_per_region(h.slot_bytes) > 0);
	check(h.tenant_len >= 1 && h.tenant_len <= SPILL_TENANT_MAX);
	check(strlen(h.tenant) == h.tenant_len);
	check(h.identity_len >= 1 && h.identity_len <= SPILL_IDENTITY_MAX);
	check(h.identity == buf + RH_IDENTITY);
	/* ...and canonical: the encoder writes exactly these bytes. */
	static uint8_t again[SPILL_REGION_HEADER_BYTES];
	check(spill_region_header_encode(&h, again, sizeof(again)) == 0);
	check(memcmp(again, buf, SPILL_REGION_HEADER_BYTES) == 0);
	/* The encoder refuses a buffer that is one byte short. */
	check(spill_region_header_encode(&h, again, sizeof(again) - 1) == -EINVAL);
}

/* A bound region that h belongs to, at slot h->slot. */
static void region_for(const struct spill_slot_header *h, struct spill_region *r,
		       struct spill_binding *b)
{
	memset(b, 0, sizeof(*b));
	memset(r, 0, sizeof(*r));
	b->tenant_hash = h->tenant_hash;
	memcpy(b->ns_digest, h->ns_digest, sizeof(b->ns_digest));
	b->slot_bytes = h->payload_len;
	r->binding = b;
	r->index = h->region;
	r->generation = h->generation;
	/* slots.n is all the check reads of the allocator. */
	r->slots.n = h->slot < UINT32_MAX ? h->slot + 1 : UINT32_MAX;
}

static void slot_case(const uint8_t *buf, size_t len)
{
	struct spill_slot_header h, got;
	struct spill_region r;
	struct spill_binding b;
	int rd = spill_slot_header_decode(buf, len, &h);

	if (len < SPILL_SLOT_HEADER_BYTES) {
		check(rd == -EINVAL);
		return;
	}
	check(rd == 0 || rd == -ENODATA || rd == -EBADMSG || rd == -EPROTONOSUPPORT);
	if (rd < 0) {
		/* spill_slot_check decodes first and passes its error on. */
		static const uint8_t key[KVT_KEY_SIZE];
		struct spill_slot_header any = {.region = 1, .slot = 2, .generation = 3,
						.payload_len = 4096, .seq = 5};
		region_for(&any, &r, &b);
		check(spill_slot_check(buf, len, &r, 2, key, 4096, 5, &got) == rd);
		return;
	}
	check(h.generation != 0 && h.seq != 0);
	check(h.payload_len >= 1 && h.payload_len <= SPILL_SLOT_BYTES_MAX);
	static uint8_t again[SPILL_SLOT_HEADER_BYTES];
	check(spill_slot_header_encode(&h, again, sizeof(again)) == 0);
	check(memcmp(again, buf, SPILL_SLOT_HEADER_BYTES) == 0);
	check(spill_slot_header_encode(&h, again, sizeof(again) - 1) == -EINVAL);

	/* The payload, when the input carries all of it. */
	if (len - SPILL_SLOT_HEADER_BYTES >= h.payload_len) {
		const uint8_t *payload = buf + SPILL_SLOT_HEADER_BYTES;
		int want = spill_payload_sum(payload, h.payload_len) == h.payload_sum ? 0 : -EBADMSG;
		check(spill_payload_check(&h, payload) == want);
	}

	region_for(&h, &r, &b);
	if (h.slot == UINT32_MAX) {
		/* No region has a slot UINT32_MAX (slots.n is a uint32_t). */
		check(spill_slot_header_match(&h, &r, h.slot) == -ESTALE);
		check(spill_slot_check(buf, len, &r, h.slot, h.key, h.payload_len, h.seq, NULL) ==
		      -ESTALE);
		return;
	}
	check(spill_slot_header_match(&h, &r, h.slot) == 0);
	memset(&got, 0, sizeof(got));
	check(spill_slot_check(buf, len, &r, h.slot, h.key, h.payload_len, h.seq, &got) == 0);
	check(spill_slot_header_encode(&got, again, sizeof(again)) == 0);
	check(memcmp(again, buf, SPILL_SLOT_HEADER_BYTES) == 0);

	/* Any one thing other than what the header names: stale. */
	uint8_t key[KVT_KEY_SIZE];
	memcpy(key, h.key, sizeof(key));
	key[h.seq % KVT_KEY_SIZE] ^= 1;
	check(spill_slot_check(buf, len, &r, h.slot, key, h.payload_len, h.seq, NULL) == -ESTALE);
	check(spill_slot_check(buf, len, &r, h.slot, h.key, h.payload_len + 1, h.seq, NULL) ==
	      -ESTALE);
	check(spill_slot_check(buf, len, &r, h.slot, h.key, h.payload_len, h.seq ^ 1, NULL) ==
	      -ESTALE);
	check(spill_slot_check(buf, len, &r, h.slot + 1, h.key, h.payload_len, h.seq, NULL) ==
	      -ESTALE);
	struct spill_region r2 = r;
	struct spill_binding b2 = b;
	r2.binding = &b2;
	r2.index ^= 1;
	check(spill_slot_header_match(&h, &r2, h.slot) == -ESTALE);
	r2.index = r.index;
	r2.generation ^= 1;
	check(spill_slot_header_match(&h, &r2, h.slot) == -ESTALE);
	r2.generation = r.generation;
	b2.tenant_hash ^= 1;
	check(spill_slot_header_match(&h, &r2, h.slot) == -ESTALE);
	b2.tenant_hash = b.tenant_hash;
	b2.ns_digest[15] ^= 0x80;
	check(spill_slot_header_match(&h, &r2, h.slot) == -ESTALE);
	b2.ns_digest[15] = b.ns_digest[15];
	b2.slot_bytes = h.payload_len - 1; /* the payload no longer fits */
	check(spill_slot_header_match(&h, &r2, h.slot) == -ESTALE);
	b2.slot_bytes = b.slot_bytes;
	r2.binding = NULL; /* an unbound region */
	check(spill_slot_header_match(&h, &r2, h.slot) == -ESTALE);
	r2.binding = &b2;
	check(spill_slot_header_match(&h, &r2, h.slot) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	const uint8_t mode = data[0];
	const bool slot = mode & 1, pad = mode & 2, fix = mode & 4;
	const size_t header = slot ? SPILL_SLOT_HEADER_BYTES : SPILL_REGION_HEADER_BYTES;
	size_t n = size - 1;
	size_t len = pad && n < header ? header : n;

	/* Exactly len bytes on the heap: a read past them is a sanitizer
	 * error, not a read of the fuzzer's buffer. */
	uint8_t *buf = calloc(1, len ? len : 1);
	if (!buf)
		return 0;
	memcpy(buf, data + 1, n);
	if (fix && !slot && len >= RH_IDENTITY) {
		uint32_t id_len = kvt_get_le32(buf + RH_IDENTITY_LEN);
		if (id_len >= 1 && id_len <= SPILL_IDENTITY_MAX && len >= RH_IDENTITY + id_len + 8)
			kvt_put_le64(buf + RH_IDENTITY + id_len, XXH3_64bits(buf, RH_IDENTITY + id_len));
	} else if (fix && slot && len >= SH_SUM + 8) {
		kvt_put_le64(buf + SH_SUM, XXH3_64bits(buf, SH_SUM));
	}
	if (slot)
		slot_case(buf, len);
	else
		region_case(buf, len);
	free(buf);
	return 0;
}

/* mode, then bytes; trailing zeros trimmed for the padded modes. */
static void emit_mode(fuzz_seed_fn emit, void *ud, uint8_t mode, const uint8_t *p, size_t n)
{
	static uint8_t buf[1 + SPILL_REGION_HEADER_BYTES + 8192];
	if (mode & 2)
		while (n && p[n - 1] == 0)
			n--;
	if (n + 1 > sizeof(buf))
		return;
	buf[0] = mode;
	memcpy(buf + 1, p, n);
	emit(buf, n + 1, ud);
}

static void emit_region(fuzz_seed_fn emit, void *ud, const char *tenant, uint32_t identity_len,
			uint64_t slot_bytes, uint32_t index)
{
	static uint8_t identity[SPILL_IDENTITY_MAX], hdr[SPILL_REGION_HEADER_BYTES];
	struct spill_region_header h = {.index = index, .generation = 0x9e3779b97f4a7c15ull,
					.slot_bytes = slot_bytes};
	for (uint32_t i = 0; i < identity_len; i++)
		identity[i] = (uint8_t)(i * 7 + 1);
	h.tenant_len = (uint32_t)strlen(tenant);
	memcpy(h.tenant, tenant, h.tenant_len + 1);
	h.identity_len = identity_len;
	h.identity = identity;
	if (spill_region_header_encode(&h, hdr, sizeof(hdr)) < 0)
		abort();
	emit_mode(emit, ud, 0, hdr, sizeof(hdr));
	emit_mode(emit, ud, 2, hdr, sizeof(hdr));
	emit_mode(emit, ud, 6, hdr, sizeof(hdr));
}

static void emit_slot(fuzz_seed_fn emit, void *ud, uint32_t region, uint32_t slot,
		      uint64_t payload_len, uint64_t seq, bool with_payload)
{
	static uint8_t buf[SPILL_SLOT_HEADER_BYTES + 4096];
	static const uint8_t identity[] = "seed identity";
	struct spill_slot_header h = {.region = region, .slot = slot,
				      .generation = 0x0123456789abcdefull,
				      .payload_len = payload_len, .seq = seq};
	memset(buf, 0, sizeof(buf));
	for (size_t i = 0; i < 4096; i++)
		buf[SPILL_SLOT_HEADER_BYTES + i] = (uint8_t)(i * 13 + 5);
	h.tenant_hash = spill_tenant_hash("uid:1000", 8);
	spill_ns_digest(identity, sizeof(identity) - 1, h.ns_digest);
	for (int i = 0; i < KVT_KEY_SIZE; i++)
		h.key[i] = (uint8_t)(0xa0 + i);
	h.payload_sum = spill_payload_sum(buf + SPILL_SLOT_HEADER_BYTES,
					  payload_len < 4096 ? payload_len : 4096);
	if (spill_slot_header_encode(&h, buf, sizeof(buf)) < 0)
		abort();
	emit_mode(emit, ud, 1, buf, with_payload ? sizeof(buf) : SPILL_SLOT_HEADER_BYTES);
	emit_mode(emit, ud, 3, buf, SPILL_SLOT_HEADER_BYTES);
	emit_mode(emit, ud, 7, buf, SPILL_SLOT_HEADER_BYTES);
}

void fuzz_seeds(fuzz_seed_fn emit, void *ud)
{
	static uint8_t zeros[SPILL_REGION_HEADER_BYTES];

	/* Region headers: typical, every field at its largest, at its
	 * smallest. */
	emit_region(emit, ud, "uid:1000", 200, 32768, 3);
	emit_region(emit, ud, "abcdefghijklmnopqrstuvwxyz01234", SPILL_IDENTITY_MAX,
		    SPILL_SLOT_BYTES_MAX, UINT32_MAX);
	emit_region(emit, ud, "a", 1, 1, 0);
	/* Slot headers: with the payload they describe, and at the limits. */
	emit_slot(emit, ud, 3, 7, 4096, 42, true);
	emit_slot(emit, ud, 0, 0, 1, 1, true);
	emit_slot(emit, ud, UINT32_MAX, UINT32_MAX - 1, SPILL_SLOT_BYTES_MAX, UINT64_MAX, false);
	emit_slot(emit, ud, 9, UINT32_MAX, 2048, 2, false);
	/* Never written (all zeros), both kinds. */
	emit_mode(emit, ud, 2, zeros, 0);
	emit_mode(emit, ud, 3, zeros, 0);
	emit_mode(emit, ud, 0, zeros, SPILL_REGION_HEADER_BYTES);
	emit_mode(emit, ud, 1, zeros, SPILL_SLOT_HEADER_BYTES);
	/* Another format version: encoded, then the version patched. */
	static uint8_t v2[SPILL_REGION_HEADER_BYTES];
	struct spill_region_header h = {.generation = 1, .slot_bytes = 4096, .tenant_len = 1,
					.tenant = "t", .identity_len = 1,
					.identity = (const uint8_t *)"i"};
	if (spill_region_header_encode(&h, v2, sizeof(v2)) < 0)
		abort();
	v2[8] = 2;
	emit_mode(emit, ud, 2, v2, sizeof(v2));
}
