/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Block keys (key scheme 2): known answers computed independently with
 * Python's hashlib (SHA-256 over parent ‖ struct.pack('<I', token)... ‖
 * extra, nothing before the first block's tokens), chain linkage and
 * argument checks.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kvtier.h"
#include "../check.h"

static void from_hex(const char *hex, uint8_t *ret_key)
{
	for (int i = 0; i < KVT_KEY_BYTES; i++) {
		unsigned int v;

		sscanf(hex + 2 * i, "%2x", &v);
		ret_key[i] = (uint8_t)v;
	}
}

static void check_key(int line, const uint8_t *key, const char *hex)
{
	uint8_t want[KVT_KEY_BYTES];

	from_hex(hex, want);
	if (memcmp(key, want, KVT_KEY_BYTES) != 0) {
		fprintf(stderr, "%s:%d: key ", __FILE__, line);
		for (int i = 0; i < KVT_KEY_BYTES; i++)
			fprintf(stderr, "%02x", key[i]);
		fprintf(stderr, " != %s\n", hex);
		failures++;
	}
}

#define CHECK_KEY(key, hex) check_key(__LINE__, key, hex)

static void test_known_answers(void)
{
	static const uint32_t t2[] = { 1, 2, 3, 0xdeadbeef };
	static const uint32_t t3[] = { 100000, 7 };
	uint32_t t4[1000];
	uint8_t parent[KVT_KEY_BYTES], key[KVT_KEY_BYTES];

	/* sha256 of nothing */
	CHECK(kvt_hash_block(NULL, NULL, 0, NULL, 0, key) == 0);
	CHECK_KEY(key, "e3b0c44298fc1c149afbf4c8996fb924"
		       "27ae41e4649b934ca495991b7852b855");

	CHECK(kvt_hash_block(NULL, t2, 4, NULL, 0, key) == 0);
	CHECK_KEY(key, "df42dfb3c7accc830b1f546c5f25d933"
		       "cefe826f9a004bff9493ebac8011fe7e");

	for (int i = 0; i < KVT_KEY_BYTES; i++)
		parent[i] = (uint8_t)i;
	CHECK(kvt_hash_block(parent, t3, 2, "lora-7", 6, key) == 0);
	CHECK_KEY(key, "1227017cdc2c5277e7939fb317fc8a87"
		       "686f36a6d28d2ffcd27683624a260cbd");

	/* Longer than the library's serialisation chunk. */
	for (uint32_t i = 0; i < 1000; i++)
		t4[i] = i * 7919u;
	CHECK(kvt_hash_block(NULL, t4, 1000, NULL, 0, key) == 0);
	CHECK_KEY(key, "cbdd46a69bf08206ee389cfd98fa0e30"
		       "f7ffee638b8d65da6d87fc4a5d32501d");

	/* ret_key may be the parent it is chained from. */
	CHECK(kvt_hash_block(parent, t3, 2, "lora-7", 6, parent) == 0);
	CHECK_KEY(parent, "1227017cdc2c5277e7939fb317fc8a87"
			  "686f36a6d28d2ffcd27683624a260cbd");
}

static void chain_tokens(uint32_t *tokens, size_t n)
{
	for (size_t i = 0; i < n; i++)
		tokens[i] = (uint32_t)(i * 2654435761u + 12345u);
}

static void test_chain(void)
{
	static const char *const want[] = {
		"76954cb8bd671a3d34418742cfba587ffe665459bbbbdbfccdef82fb8e1c949c",
		"ce69863ec6b389d61a06dde70c6f5598c2e73255266718cb0a477ce6e809b503",
		"bc04af4a623f172924f72d2df3f716e3fc951b150bc83019a13df65febb0161b",
	};
	uint32_t tokens[14];
	uint8_t keys[5 * KVT_KEY_BYTES], key[KVT_KEY_BYTES];
	uint8_t sentinel[KVT_KEY_BYTES];
	int r;

	chain_tokens(tokens, 14);

	/* 14 tokens in blocks of 4: three keys, the last 2 tokens get none. */
	memset(keys, 0xa5, sizeof(keys));
	memset(sentinel, 0xa5, sizeof(sentinel));
	r = kvt_hash_chain(NULL, tokens, 14, 4, "salt", 4, keys, 5);
	CHECK(r == 3);
	for (int i = 0; i < 3; i++)
		CHECK_KEY(keys + i * KVT_KEY_BYTES, want[i]);
	CHECK(memcmp(keys + 3 * KVT_KEY_BYTES, sentinel, KVT_KEY_BYTES) == 0);

	/* Linkage: the first key carries extra, the others do not. */
	CHECK(kvt_hash_block(NULL, tokens, 4, "salt", 4, key) == 0);
	CHECK(memcmp(key, keys, KVT_KEY_BYTES) == 0);
	for (int i = 1; i < 3; i++) {
		CHECK(kvt_hash_block(keys + (i - 1) * KVT_KEY_BYTES,
				     tokens + 4 * i, 4, NULL, 0, key) == 0);
		CHECK(memcmp(key, keys + i * KVT_KEY_BYTES, KVT_KEY_BYTES) ==
		      0);
	}

	/* A partial trailing block changes nothing: 12 and 15 tokens give
	 * the same keys as 14. */
	r = kvt_hash_chain(NULL, tokens, 12, 4, "salt", 4, keys, 5);
	CHECK(r == 3);
	for (int i = 0; i < 3; i++)
		CHECK_KEY(keys + i * KVT_KEY_BYTES, want[i]);
	{
		uint32_t more[15];

		chain_tokens(more, 15);
		r = kvt_hash_chain(NULL, more, 15, 4, "salt", 4, keys, 5);
		CHECK(r == 3);
		CHECK_KEY(keys + 2 * KVT_KEY_BYTES, want[2]);
	}

	/* max_keys bounds the count and the bytes written. */
	memset(keys, 0xa5, sizeof(keys));
	r = kvt_hash_chain(NULL, tokens, 14, 4, "salt", 4, keys, 2);
	CHECK(r == 2);
	CHECK_KEY(keys, want[0]);
	CHECK_KEY(keys + KVT_KEY_BYTES, want[1]);
	CHECK(memcmp(keys + 2 * KVT_KEY_BYTES, sentinel, KVT_KEY_BYTES) == 0);

	r = kvt_hash_chain(NULL, tokens, 14, 4, "salt", 4, NULL, 0);
	CHECK(r == 0);
	r = kvt_hash_chain(NULL, tokens, 3, 4, "salt", 4, keys, 5);
	CHECK(r == 0);

	/* Continuing from a parent equals hashing the whole chain at once. */
	r = kvt_hash_chain(keys, tokens + 4, 8, 4, NULL, 0,
			   keys + KVT_KEY_BYTES, 2);
	CHECK(r == 2);
	CHECK_KEY(keys + KVT_KEY_BYTES, want[1]);
	CHECK_KEY(keys + 2 * KVT_KEY_BYTES, want[2]);

	/* A block size of one token. */
	r = kvt_hash_chain(NULL, tokens, 3, 1, NULL, 0, keys, 5);
	CHECK(r == 3);
	CHECK(kvt_hash_block(NULL, tokens, 1, NULL, 0, key) == 0);
	CHECK(memcmp(key, keys, KVT_KEY_BYTES) == 0);
	CHECK(kvt_hash_block(keys + KVT_KEY_BYTES, tokens + 2, 1, NULL, 0,
			     key) == 0);
	CHECK(memcmp(key, keys + 2 * KVT_KEY_BYTES, KVT_KEY_BYTES) == 0);
}

static void test_sensitivity(void)
{
	uint32_t tokens[8];
	uint8_t base[KVT_KEY_BYTES], key[KVT_KEY_BYTES];
	uint8_t parent[KVT_KEY_BYTES];
	uint8_t keys[2][2 * KVT_KEY_BYTES];

	chain_tokens(tokens, 8);
	memset(parent, 0x11, sizeof(parent));
	CHECK(kvt_hash_block(parent, tokens, 8, "x", 1, base) == 0);

	tokens[5] ^= 1;
	CHECK(kvt_hash_block(parent, tokens, 8, "x", 1, key) == 0);
	CHECK(memcmp(key, base, KVT_KEY_BYTES) != 0);
	tokens[5] ^= 1;

	/* Token order is part of the key. */
	{
		uint32_t tmp = tokens[0];

		tokens[0] = tokens[1];
		tokens[1] = tmp;
		CHECK(kvt_hash_block(parent, tokens, 8, "x", 1, key) == 0);
		CHECK(memcmp(key, base, KVT_KEY_BYTES) != 0);
		tokens[1] = tokens[0];
		tokens[0] = tmp;
	}

	CHECK(kvt_hash_block(parent, tokens, 8, "y", 1, key) == 0);
	CHECK(memcmp(key, base, KVT_KEY_BYTES) != 0);
	CHECK(kvt_hash_block(parent, tokens, 8, NULL, 0, key) == 0);
	CHECK(memcmp(key, base, KVT_KEY_BYTES) != 0);

	parent[31] ^= 0x80;
	CHECK(kvt_hash_block(parent, tokens, 8, "x", 1, key) == 0);
	CHECK(memcmp(key, base, KVT_KEY_BYTES) != 0);
	parent[31] ^= 0x80;

	/* A NULL parent is an absent prefix (key scheme 2), not 32 zero
	 * bytes (key scheme 1). */
	memset(parent, 0, sizeof(parent));
	CHECK(kvt_hash_block(NULL, tokens, 8, "x", 1, base) == 0);
	CHECK(kvt_hash_block(parent, tokens, 8, "x", 1, key) == 0);
	CHECK(memcmp(key, base, KVT_KEY_BYTES) != 0);

	/* extra of the first block reaches every later key through the
	 * chain, and different salts give different chains. */
	CHECK(kvt_hash_chain(NULL, tokens, 8, 4, "a", 1, keys[0], 2) == 2);
	CHECK(kvt_hash_chain(NULL, tokens, 8, 4, "b", 1, keys[1], 2) == 2);
	CHECK(memcmp(keys[0], keys[1], KVT_KEY_BYTES) != 0);
	CHECK(memcmp(keys[0] + KVT_KEY_BYTES, keys[1] + KVT_KEY_BYTES,
		     KVT_KEY_BYTES) != 0);
}

/*
 * The key hashes the plain concatenation parent ‖ tokens ‖ extra, with no
 * length fields.  Tokens have a fixed width, so with a fixed token count
 * (which a namespace's block_tokens guarantees) the split between tokens
 * and extra is unambiguous.  Across different token counts it is not: k
 * tokens plus 4*m bytes of extra hash like k+m tokens whose last m
 * little-endian encodings are those bytes.  Pin that down so a change to
 * the encoding is a deliberate one.
 */
static void test_concatenation(void)
{
	static const uint32_t three[] = { 7, 8, 0x04030201 };
	static const uint8_t tail[] = { 0x01, 0x02, 0x03, 0x04 };
	uint8_t a[KVT_KEY_BYTES], b[KVT_KEY_BYTES];

	CHECK(kvt_hash_block(NULL, three, 3, NULL, 0, a) == 0);
	CHECK(kvt_hash_block(NULL, three, 2, tail, 4, b) == 0);
	CHECK(memcmp(a, b, KVT_KEY_BYTES) == 0);

	/* Same token count, different extra: always different keys. */
	CHECK(kvt_hash_block(NULL, three, 2, tail, 3, b) == 0);
	CHECK(memcmp(a, b, KVT_KEY_BYTES) != 0);
}

static void test_arguments(void)
{
	uint32_t tokens[8] = { 0 };
	uint8_t key[KVT_KEY_BYTES], keys[2 * KVT_KEY_BYTES];

	CHECK(kvt_hash_block(NULL, tokens, 8, NULL, 0, NULL) == -EINVAL);
	CHECK(kvt_hash_block(NULL, NULL, 8, NULL, 0, key) == -EINVAL);
	CHECK(kvt_hash_block(NULL, tokens, 8, NULL, 3, key) == -EINVAL);
	CHECK(kvt_hash_block(NULL, tokens, 8, "", 0, key) == 0);

	CHECK(kvt_hash_chain(NULL, tokens, 8, 0, NULL, 0, keys, 2) ==
	      -EINVAL);
	CHECK(kvt_hash_chain(NULL, NULL, 8, 4, NULL, 0, keys, 2) == -EINVAL);
	CHECK(kvt_hash_chain(NULL, NULL, 0, 4, NULL, 0, keys, 2) == 0);
	CHECK(kvt_hash_chain(NULL, tokens, 8, 4, NULL, 1, keys, 2) == -EINVAL);
	CHECK(kvt_hash_chain(NULL, tokens, 8, 4, NULL, 0, NULL, 2) == -EINVAL);
}

int main(void)
{
	test_known_answers();
	test_chain();
	test_sensitivity();
	test_concatenation();
	test_arguments();

	if (failures) {
		fprintf(stderr, "test-hash: %d check(s) failed\n", failures);
		return 1;
	}
	printf("test-hash: ok\n");
	return 0;
}
