/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The remote tier's objects (pure): names, and the spill slot header every
 * object starts with (spill.h), so that a restore checks whose block it
 * is and its payload exactly as it does for a slot read back from NVMe.
 *
 * An object is SPILL_SLOT_HEADER_BYTES of header, then the block's bytes.
 * The header's region and slot are 0 and its generation is
 * REMOTE_GENERATION: no spill slot has that one, so neither kind of copy
 * passes for the other.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "remote-private.h"

#define REMOTE_GENERATION UINT64_C(0x6b76742d72656d31) /* "kvt-rem1" */

void remote_oid(const struct ns *ns, const uint8_t *key, char ret[REMOTE_OID_LEN + 1])
{
	static const char hex[] = "0123456789abcdef";
	uint8_t digest[16];
	char *p = ret;

	/* The namespace digest the object's header carries names the
	 * namespace on every node alike: every field of the identity, so
	 * namespaces that differ in any (the key scheme, the codec, the
	 * model) never write the same object.  The key is the client's
	 * chain hash. */
	spill_ns_digest(ns->identity, ns->identity_len, digest);
	for (int i = 0; i < 16; i++) {
		*p++ = hex[digest[i] >> 4];
		*p++ = hex[digest[i] & 15];
	}
	*p++ = '.';
	for (int i = 0; i < KVT_KEY_SIZE; i++) {
		*p++ = hex[key[i] >> 4];
		*p++ = hex[key[i] & 15];
	}
	*p = 0;
}

static void header_for(const struct ns *ns, const uint8_t *key, size_t len,
		       struct spill_slot_header *h)
{
	memset(h, 0, sizeof(*h));
	h->generation = REMOTE_GENERATION;
	h->tenant_hash = spill_tenant_hash(ns->tenant->name, strlen(ns->tenant->name));
	spill_ns_digest(ns->identity, ns->identity_len, h->ns_digest);
	memcpy(h->key, key, KVT_KEY_SIZE);
	h->payload_len = len;
	h->seq = 1;
}

int remote_header_encode(const struct ns *ns, const uint8_t *key, const uint8_t *payload,
			 size_t len, uint8_t *buf)
{
	struct spill_slot_header h;

	header_for(ns, key, len, &h);
	h.payload_sum = spill_payload_sum(payload, len);
	return spill_slot_header_encode(&h, buf, SPILL_SLOT_HEADER_BYTES);
}

void remote_object_expect(const struct ns *ns, const uint8_t *key, size_t payload_len,
			  struct spill_slot_header *ret)
{
	header_for(ns, key, payload_len, ret);
}

int remote_object_verify(const struct spill_slot_header *want, const uint8_t *obj,
			 size_t obj_len)
{
	if (obj_len < SPILL_SLOT_HEADER_BYTES)
		return -ENODATA;
	return remote_object_verify_parts(want, obj, SPILL_SLOT_HEADER_BYTES,
					  obj + SPILL_SLOT_HEADER_BYTES,
					  obj_len - SPILL_SLOT_HEADER_BYTES);
}

int remote_object_verify_parts(const struct spill_slot_header *want, const uint8_t *head,
			       size_t head_len, const uint8_t *body, size_t body_len)
{
	struct spill_slot_header h;

	if (head_len != SPILL_SLOT_HEADER_BYTES || body_len != want->payload_len)
		return -ENODATA;
	int r = spill_slot_header_decode(head, SPILL_SLOT_HEADER_BYTES, &h);
	if (r < 0)
		return r == -ENODATA ? -EBADMSG : r;
	if (h.generation != want->generation || h.region || h.slot)
		return -EBADMSG;
	if (h.tenant_hash != want->tenant_hash ||
	    memcmp(h.ns_digest, want->ns_digest, sizeof(h.ns_digest)) ||
	    memcmp(h.key, want->key, KVT_KEY_SIZE) || h.payload_len != want->payload_len)
		return -ESTALE;
	return spill_payload_check(&h, body);
}

int remote_object_check(const struct ns *ns, const uint8_t *key, const uint8_t *obj,
			size_t obj_len, size_t payload_len)
{
	struct spill_slot_header want;

	remote_object_expect(ns, key, payload_len, &want);
	return remote_object_verify(&want, obj, obj_len);
}
