/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The remote tier's objects (daemon/remote-format.c): names, and the spill
 * slot header on every object, checked against what was asked for.  A
 * changed byte anywhere, a short object, another tenant, namespace or key,
 * and a spill slot passed off as an object are all refused.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"
#include "remote-private.h"

#define PAYLOAD 8192

static void make_ns(struct tenant *t, struct ns *ns, const char *tenant, uint8_t *identity,
		    uint8_t salt)
{
	memset(t, 0, sizeof(*t));
	memset(ns, 0, sizeof(*ns));
	snprintf(t->name, sizeof(t->name), "%s", tenant);
	for (int i = 0; i < 64; i++)
		identity[i] = (uint8_t)(i + salt);
	ns->tenant = t;
	ns->identity = identity;
	ns->identity_len = 64;
}

int main(void)
{
	struct tenant ta, tb;
	struct ns a, other_ns, b;
	uint8_t ida[64], idb[64], idc[64], key[KVT_KEY_SIZE], key2[KVT_KEY_SIZE];
	size_t len = SPILL_SLOT_HEADER_BYTES + PAYLOAD;
	uint8_t *obj = malloc(len), *copy = malloc(len);
	char oid[REMOTE_OID_LEN + 1];

	make_ns(&ta, &a, "alice", ida, 0);
	make_ns(&ta, &other_ns, "alice", idb, 1);
	other_ns.tenant = a.tenant;
	make_ns(&tb, &b, "bob", idc, 0);
	for (int i = 0; i < KVT_KEY_SIZE; i++) {
		key[i] = (uint8_t)(0xa0 + i);
		key2[i] = key[i];
	}
	key2[31] ^= 1;
	for (size_t i = 0; i < PAYLOAD; i++)
		obj[SPILL_SLOT_HEADER_BYTES + i] = (uint8_t)(i * 31);

	remote_oid(&a, key, oid);
	CHECK(strlen(oid) == REMOTE_OID_LEN && oid[32] == '.');
	/* The namespace part is the digest of the identity that the header
	 * carries. */
	uint8_t digest[16];
	char hex[33];
	spill_ns_digest(ida, sizeof(ida), digest);
	for (int i = 0; i < 16; i++)
		snprintf(hex + 2 * i, 3, "%02x", digest[i]);
	CHECK(!strncmp(oid, hex, 32), "%.32s, want %s", oid, hex);
	CHECK(!strcmp(oid + 33 + 56, "bcbdbebf")); /* the key's last bytes */
	/* Another namespace's object of the same key has another name, so
	 * neither overwrites the other; another tenant's is told apart by
	 * its RADOS namespace. */
	char oid2[REMOTE_OID_LEN + 1];
	remote_oid(&other_ns, key, oid2);
	CHECK(strncmp(oid, oid2, 32) && !strcmp(oid + 32, oid2 + 32), "%s, %s", oid, oid2);
	remote_oid(&b, key, oid2);
	CHECK(!strcmp(oid, oid2));

	CHECK(remote_header_encode(&a, key, obj + SPILL_SLOT_HEADER_BYTES, PAYLOAD, obj) == 0);
	CHECK(remote_object_check(&a, key, obj, len, PAYLOAD) == 0);
	/* Short, long-claimed, another length. */
	CHECK(remote_object_check(&a, key, obj, len - 1, PAYLOAD) == -ENODATA);
	CHECK(remote_object_check(&a, key, obj, SPILL_SLOT_HEADER_BYTES, PAYLOAD) == -ENODATA);
	CHECK(remote_object_check(&a, key, obj, 0, PAYLOAD) == -ENODATA);
	CHECK(remote_object_check(&a, key, obj, len - 4096, PAYLOAD - 4096) == -ESTALE);
	/* Whose, which namespace, which key. */
	CHECK(remote_object_check(&b, key, obj, len, PAYLOAD) == -ESTALE);
	CHECK(remote_object_check(&other_ns, key, obj, len, PAYLOAD) == -ESTALE);
	CHECK(remote_object_check(&a, key2, obj, len, PAYLOAD) == -ESTALE);
	/* Every byte of header and payload matters: flip each (a stride of
	 * them, to keep the test short) and it is refused. */
	int passed = 0;
	for (size_t i = 0; i < len; i += 61) {
		memcpy(copy, obj, len);
		copy[i] ^= 0x40;
		passed += remote_object_check(&a, key, copy, len, PAYLOAD) == 0;
	}
	CHECK(passed == 0, "%d changed objects passed", passed);
	/* An all-zero header (an object truncated and extended) is refused. */
	memcpy(copy, obj, len);
	memset(copy, 0, SPILL_SLOT_HEADER_BYTES);
	CHECK(remote_object_check(&a, key, copy, len, PAYLOAD) == -EBADMSG);
	/* A spill slot's header (region generation, not the remote one) is
	 * not an object, even for the same tenant, namespace and key. */
	struct spill_slot_header h;
	CHECK(spill_slot_header_decode(obj, SPILL_SLOT_HEADER_BYTES, &h) == 0);
	h.generation = 12345;
	h.region = 3;
	CHECK(spill_slot_header_encode(&h, copy, SPILL_SLOT_HEADER_BYTES) == 0);
	memcpy(copy + SPILL_SLOT_HEADER_BYTES, obj + SPILL_SLOT_HEADER_BYTES, PAYLOAD);
	CHECK(remote_object_check(&a, key, copy, len, PAYLOAD) == -EBADMSG);

	/* Read in two parts (header into a buffer, payload into a host slot
	 * elsewhere): the same verdicts. */
	struct spill_slot_header want;
	uint8_t *head = malloc(SPILL_SLOT_HEADER_BYTES), *body = malloc(PAYLOAD);
	CHECK(head && body);
	memcpy(head, obj, SPILL_SLOT_HEADER_BYTES);
	memcpy(body, obj + SPILL_SLOT_HEADER_BYTES, PAYLOAD);
	remote_object_expect(&a, key, PAYLOAD, &want);
	CHECK(remote_object_verify_parts(&want, head, SPILL_SLOT_HEADER_BYTES, body, PAYLOAD) == 0);
	CHECK(remote_object_verify_parts(&want, head, SPILL_SLOT_HEADER_BYTES, body, PAYLOAD - 1) ==
	      -ENODATA);
	CHECK(remote_object_verify_parts(&want, head, 100, body, 0) == -ENODATA);
	body[PAYLOAD / 2] ^= 1;
	CHECK(remote_object_verify_parts(&want, head, SPILL_SLOT_HEADER_BYTES, body, PAYLOAD) ==
	      -EBADMSG);
	body[PAYLOAD / 2] ^= 1;
	remote_object_expect(&a, key2, PAYLOAD, &want);
	CHECK(remote_object_verify_parts(&want, head, SPILL_SLOT_HEADER_BYTES, body, PAYLOAD) ==
	      -ESTALE);
	free(head);
	free(body);

	free(obj);
	free(copy);
	return failures ? 1 : 0;
}
