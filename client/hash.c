/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Block keys, key scheme 2: k_i = SHA-256(k_{i-1} ‖ tokens_i as u32
 * little-endian ‖ extra_i), the first block hashed with no parent at all.
 * The byte order is fixed so that a key computed on any host, or in
 * another language, names the same block; without extra it is SGLang's
 * page hash too.
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>

#include <openssl/evp.h>

#include "byteorder.h"
#include "kvtier.h"

/* Tokens are serialised through a stack buffer of this many at a time. */
#define HASH_TOKEN_CHUNK 256

static int hash_one(EVP_MD_CTX *ctx, const uint8_t *parent,
		    const uint32_t *tokens, size_t n_tokens, const void *extra,
		    size_t extra_len, uint8_t *ret_key)
{
	uint8_t buf[HASH_TOKEN_CHUNK * 4];
	uint8_t md[EVP_MAX_MD_SIZE];
	unsigned int len = 0;

	if (EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1)
		return -EIO;
	if (parent && EVP_DigestUpdate(ctx, parent, KVT_KEY_BYTES) != 1)
		return -EIO;

	while (n_tokens > 0) {
		size_t n = n_tokens < HASH_TOKEN_CHUNK ? n_tokens
						       : HASH_TOKEN_CHUNK;

		/* Explicit little-endian bytes; on little-endian hosts
		 * these are plain stores. */
		for (size_t i = 0; i < n; i++)
			kvt_put_le32(buf + 4 * i, tokens[i]);
		if (EVP_DigestUpdate(ctx, buf, 4 * n) != 1)
			return -EIO;
		tokens += n;
		n_tokens -= n;
	}

	if (extra_len > 0 && EVP_DigestUpdate(ctx, extra, extra_len) != 1)
		return -EIO;

	/* Through a local buffer so that a failure never leaves a partly
	 * written key behind. */
	if (EVP_DigestFinal_ex(ctx, md, &len) != 1 || len != KVT_KEY_BYTES)
		return -EIO;
	memcpy(ret_key, md, KVT_KEY_BYTES);
	return 0;
}

KVT_EXPORT int kvt_hash_block(const uint8_t *parent, const uint32_t *tokens,
			      size_t n_tokens, const void *extra,
			      size_t extra_len, uint8_t *ret_key)
{
	EVP_MD_CTX *ctx;
	int r;

	if (!ret_key)
		return -EINVAL;
	if (!tokens && n_tokens > 0)
		return -EINVAL;
	if (!extra && extra_len > 0)
		return -EINVAL;

	ctx = EVP_MD_CTX_new();
	if (!ctx)
		return -ENOMEM;
	r = hash_one(ctx, parent, tokens, n_tokens, extra, extra_len, ret_key);
	EVP_MD_CTX_free(ctx);
	return r;
}

KVT_EXPORT int kvt_hash_chain(const uint8_t *parent, const uint32_t *tokens,
			      size_t n_tokens, uint32_t block_tokens,
			      const void *extra, size_t extra_len,
			      uint8_t *ret_keys, size_t max_keys)
{
	EVP_MD_CTX *ctx;
	size_t n_keys;
	int r = 0;

	if (block_tokens == 0)
		return -EINVAL;
	if (!tokens && n_tokens > 0)
		return -EINVAL;
	if (!extra && extra_len > 0)
		return -EINVAL;
	if (!ret_keys && max_keys > 0)
		return -EINVAL;

	n_keys = n_tokens / block_tokens;
	if (n_keys > max_keys)
		n_keys = max_keys;
	/* The count is returned as an int. */
	if (n_keys > INT_MAX)
		return -EOVERFLOW;
	if (n_keys == 0)
		return 0;

	/* One context for the whole chain: re-initialising it is cheaper
	 * than allocating one per block. */
	ctx = EVP_MD_CTX_new();
	if (!ctx)
		return -ENOMEM;

	for (size_t i = 0; i < n_keys; i++) {
		const uint8_t *prev = i == 0 ? parent
					     : ret_keys + (i - 1) * KVT_KEY_BYTES;

		r = hash_one(ctx, prev, tokens + i * block_tokens, block_tokens,
			     i == 0 ? extra : NULL, i == 0 ? extra_len : 0,
			     ret_keys + i * KVT_KEY_BYTES);
		if (r < 0)
			break;
	}

	EVP_MD_CTX_free(ctx);
	return r < 0 ? r : (int)n_keys;
}
