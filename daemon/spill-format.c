/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The on-disk format of spill files (docs/nvme.md): region and slot
 * headers encoded little-endian field by field, their checksums, and the
 * checks a header read back must pass.  Pure: no files, no global state.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "config.h"
#include "spill-private.h"
#include "spill.h"

/* Region header layout (docs/nvme.md). */
#define RH_MAGIC "KVTSPRG1"
#define RH_VERSION 8
#define RH_INDEX 12
#define RH_GENERATION 16
#define RH_SLOT_BYTES 24
#define RH_TENANT_LEN 32
#define RH_IDENTITY_LEN 36
#define RH_TENANT 40
#define RH_IDENTITY 72

/* Slot header layout. */
#define SH_MAGIC SPILL_SLOT_MAGIC
#define SH_VERSION 8
#define SH_REGION 12
#define SH_SLOT 16
#define SH_RESERVED 20
#define SH_GENERATION 24
#define SH_TENANT_HASH 32
#define SH_NS_DIGEST 40
#define SH_KEY 56
#define SH_PAYLOAD_LEN 88
#define SH_SEQ 96
#define SH_PAYLOAD_SUM 104
#define SH_SUM 112
#define SH_END 120

_Static_assert(SPILL_TENANT_MAX == CONFIG_MAX_TENANT_NAME,
	       "a region header holds any configured tenant name");
_Static_assert(RH_IDENTITY + SPILL_IDENTITY_MAX + 8 <= SPILL_REGION_HEADER_BYTES,
	       "the longest identity fits the region header");
_Static_assert(SPILL_REGION_HEADER_BYTES % SPILL_ALIGN == 0 &&
	       SPILL_SLOT_HEADER_BYTES % SPILL_ALIGN == 0 &&
	       SPILL_REGION_BYTES % SPILL_ALIGN == 0, "O_DIRECT alignment");

/* Every slot header's padding is checked at recovery: memcmp of the
 * buffer against itself one byte on runs at memory speed, a byte loop did
 * not (it was most of recovery's CPU). */
static bool all_zero(const uint8_t *p, size_t n)
{
	return n == 0 || (p[0] == 0 && memcmp(p, p + 1, n - 1) == 0);
}

void *spill_buf_alloc(size_t len)
{
	size_t n = (len + SPILL_ALIGN - 1) / SPILL_ALIGN * SPILL_ALIGN;
	void *p = aligned_alloc(SPILL_ALIGN, n ? n : SPILL_ALIGN);
	if (p)
		memset(p, 0, n ? n : SPILL_ALIGN);
	return p;
}

uint64_t spill_payload_sum(const void *payload, size_t len)
{
	return XXH3_64bits(payload, len);
}

uint64_t spill_tenant_hash(const char *tenant, size_t len)
{
	return XXH3_64bits(tenant, len);
}

void spill_ns_digest(const uint8_t *identity, size_t len, uint8_t ret[16])
{
	XXH128_hash_t h = XXH3_128bits(identity, len);
	kvt_put_le64(ret, h.low64);
	kvt_put_le64(ret + 8, h.high64);
}

uint64_t spill_stride_for(uint64_t slot_bytes)
{
	return SPILL_SLOT_HEADER_BYTES +
	       (slot_bytes + SPILL_ALIGN - 1) / SPILL_ALIGN * SPILL_ALIGN;
}

uint32_t spill_slots_per_region(uint64_t slot_bytes)
{
	if (slot_bytes == 0 || slot_bytes > SPILL_SLOT_BYTES_MAX)
		return 0;
	return (uint32_t)((SPILL_REGION_BYTES - SPILL_REGION_HEADER_BYTES) /
			  spill_stride_for(slot_bytes));
}

bool spill_tenant_valid(const char *tenant, uint32_t len)
{
	if (len == 0 || len > SPILL_TENANT_MAX)
		return false;
	return memchr(tenant, 0, len) == NULL;
}

int spill_region_header_encode(const struct spill_region_header *h,
			       uint8_t *buf, size_t len)
{
	if (len < SPILL_REGION_HEADER_BYTES || !spill_tenant_valid(h->tenant, h->tenant_len) ||
	    h->identity_len == 0 || h->identity_len > SPILL_IDENTITY_MAX || !h->identity ||
	    h->generation == 0 || spill_slots_per_region(h->slot_bytes) == 0)
		return -EINVAL;
	memset(buf, 0, SPILL_REGION_HEADER_BYTES);
	memcpy(buf, RH_MAGIC, 8);
	kvt_put_le32(buf + RH_VERSION, SPILL_FORMAT_VERSION);
	kvt_put_le32(buf + RH_INDEX, h->index);
	kvt_put_le64(buf + RH_GENERATION, h->generation);
	kvt_put_le64(buf + RH_SLOT_BYTES, h->slot_bytes);
	kvt_put_le32(buf + RH_TENANT_LEN, h->tenant_len);
	kvt_put_le32(buf + RH_IDENTITY_LEN, h->identity_len);
	memcpy(buf + RH_TENANT, h->tenant, h->tenant_len);
	memcpy(buf + RH_IDENTITY, h->identity, h->identity_len);
	size_t end = RH_IDENTITY + h->identity_len;
	kvt_put_le64(buf + end, XXH3_64bits(buf, end));
	return 0;
}

int spill_region_header_decode(const uint8_t *buf, size_t len,
			       struct spill_region_header *ret)
{
	struct spill_region_header h = {0};

	if (len < SPILL_REGION_HEADER_BYTES)
		return -EINVAL;
	if (all_zero(buf, SPILL_REGION_HEADER_BYTES))
		return -ENODATA;
	if (memcmp(buf, RH_MAGIC, 8) != 0)
		return -EBADMSG;
	if (kvt_get_le32(buf + RH_VERSION) != SPILL_FORMAT_VERSION)
		return -EPROTONOSUPPORT;
	h.index = kvt_get_le32(buf + RH_INDEX);
	h.generation = kvt_get_le64(buf + RH_GENERATION);
	h.slot_bytes = kvt_get_le64(buf + RH_SLOT_BYTES);
	h.tenant_len = kvt_get_le32(buf + RH_TENANT_LEN);
	h.identity_len = kvt_get_le32(buf + RH_IDENTITY_LEN);
	if (h.identity_len == 0 || h.identity_len > SPILL_IDENTITY_MAX)
		return -EBADMSG;
	size_t end = RH_IDENTITY + h.identity_len;
	if (kvt_get_le64(buf + end) != XXH3_64bits(buf, end))
		return -EBADMSG;
	/* Past the checksum the header is zeros, so that no byte of it can
	 * change unnoticed. */
	if (!all_zero(buf + end + 8, SPILL_REGION_HEADER_BYTES - end - 8))
		return -EBADMSG;
	if (h.tenant_len == 0 || h.tenant_len > SPILL_TENANT_MAX ||
	    !spill_tenant_valid((const char *)buf + RH_TENANT, h.tenant_len) ||
	    !all_zero(buf + RH_TENANT + h.tenant_len, 32 - h.tenant_len) ||
	    h.generation == 0 || spill_slots_per_region(h.slot_bytes) == 0)
		return -EBADMSG;
	memcpy(h.tenant, buf + RH_TENANT, h.tenant_len);
	h.tenant[h.tenant_len] = 0;
	h.identity = buf + RH_IDENTITY;
	*ret = h;
	return 0;
}

void spill_slot_header_init(struct spill_slot_header *h,
			    const struct spill_region *r, uint32_t slot,
			    const uint8_t key[KVT_KEY_SIZE], uint64_t payload_len,
			    uint64_t seq, uint64_t payload_sum)
{
	memset(h, 0, sizeof(*h));
	h->region = r->index;
	h->slot = slot;
	h->generation = r->generation;
	if (r->binding) {
		h->tenant_hash = r->binding->tenant_hash;
		memcpy(h->ns_digest, r->binding->ns_digest, 16);
	}
	memcpy(h->key, key, KVT_KEY_SIZE);
	h->payload_len = payload_len;
	h->seq = seq;
	h->payload_sum = payload_sum;
}

int spill_slot_header_encode(const struct spill_slot_header *h, uint8_t *buf,
			     size_t len)
{
	if (len < SPILL_SLOT_HEADER_BYTES)
		return -EINVAL;
	memset(buf, 0, SPILL_SLOT_HEADER_BYTES);
	memcpy(buf, SH_MAGIC, 8);
	kvt_put_le32(buf + SH_VERSION, SPILL_FORMAT_VERSION);
	kvt_put_le32(buf + SH_REGION, h->region);
	kvt_put_le32(buf + SH_SLOT, h->slot);
	kvt_put_le64(buf + SH_GENERATION, h->generation);
	kvt_put_le64(buf + SH_TENANT_HASH, h->tenant_hash);
	memcpy(buf + SH_NS_DIGEST, h->ns_digest, 16);
	memcpy(buf + SH_KEY, h->key, KVT_KEY_SIZE);
	kvt_put_le64(buf + SH_PAYLOAD_LEN, h->payload_len);
	kvt_put_le64(buf + SH_SEQ, h->seq);
	kvt_put_le64(buf + SH_PAYLOAD_SUM, h->payload_sum);
	kvt_put_le64(buf + SH_SUM, XXH3_64bits(buf, SH_SUM));
	return 0;
}

int spill_slot_header_decode(const uint8_t *buf, size_t len,
			     struct spill_slot_header *ret)
{
	struct spill_slot_header h;

	if (len < SPILL_SLOT_HEADER_BYTES)
		return -EINVAL;
	if (all_zero(buf, SPILL_SLOT_HEADER_BYTES))
		return -ENODATA;
	if (memcmp(buf, SH_MAGIC, 8) != 0)
		return -EBADMSG;
	if (kvt_get_le32(buf + SH_VERSION) != SPILL_FORMAT_VERSION)
		return -EPROTONOSUPPORT;
	if (kvt_get_le64(buf + SH_SUM) != XXH3_64bits(buf, SH_SUM) ||
	    kvt_get_le32(buf + SH_RESERVED) != 0 ||
	    !all_zero(buf + SH_END, SPILL_SLOT_HEADER_BYTES - SH_END))
		return -EBADMSG;
	h.region = kvt_get_le32(buf + SH_REGION);
	h.slot = kvt_get_le32(buf + SH_SLOT);
	h.generation = kvt_get_le64(buf + SH_GENERATION);
	h.tenant_hash = kvt_get_le64(buf + SH_TENANT_HASH);
	memcpy(h.ns_digest, buf + SH_NS_DIGEST, 16);
	memcpy(h.key, buf + SH_KEY, KVT_KEY_SIZE);
	h.payload_len = kvt_get_le64(buf + SH_PAYLOAD_LEN);
	h.seq = kvt_get_le64(buf + SH_SEQ);
	h.payload_sum = kvt_get_le64(buf + SH_PAYLOAD_SUM);
	if (h.generation == 0 || h.seq == 0 || h.payload_len == 0 ||
	    h.payload_len > SPILL_SLOT_BYTES_MAX)
		return -EBADMSG;
	*ret = h;
	return 0;
}

int spill_slot_header_match(const struct spill_slot_header *h,
			    const struct spill_region *r, uint32_t slot)
{
	const struct spill_binding *b = r->binding;

	if (!b || h->region != r->index || h->slot != slot || slot >= r->slots.n ||
	    h->generation != r->generation || h->tenant_hash != b->tenant_hash ||
	    memcmp(h->ns_digest, b->ns_digest, 16) != 0 ||
	    h->payload_len == 0 || h->payload_len > b->slot_bytes)
		return -ESTALE;
	return 0;
}

int spill_slot_header_verify(const struct spill_slot_header *h,
			     const struct spill_region *r, uint32_t slot,
			     const uint8_t key[KVT_KEY_SIZE], uint64_t payload_len,
			     uint64_t seq)
{
	if (spill_slot_header_match(h, r, slot) < 0 || h->payload_len != payload_len ||
	    h->seq != seq || memcmp(h->key, key, KVT_KEY_SIZE) != 0)
		return -ESTALE;
	return 0;
}

int spill_slot_check(const uint8_t *buf, size_t len,
		     const struct spill_region *r, uint32_t slot,
		     const uint8_t key[KVT_KEY_SIZE], uint64_t payload_len,
		     uint64_t seq, struct spill_slot_header *ret)
{
	struct spill_slot_header h;
	int r2 = spill_slot_header_decode(buf, len, &h);
	if (r2 < 0)
		return r2;
	r2 = spill_slot_header_verify(&h, r, slot, key, payload_len, seq);
	if (r2 < 0)
		return r2;
	if (ret)
		*ret = h;
	return 0;
}

int spill_payload_check(const struct spill_slot_header *h, const void *payload)
{
	return spill_payload_sum(payload, h->payload_len) == h->payload_sum ? 0 : -EBADMSG;
}
