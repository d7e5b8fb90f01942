/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libkvtier-client: the engine-side library of kvtier.
 *
 * An engine connects to kvtierd, opens a namespace that describes its model
 * and KV geometry, and then stores and loads blocks.  Block payloads move
 * through shared memory that the library maps; only control messages cross
 * the socket.
 *
 * Conventions: every function that can fail returns 0 (or a count) on
 * success and a negative errno on failure.  Handles are opaque.  The header
 * is usable from C89 compilers that provide <stdint.h> and from FFI binders
 * (no bool, no off_t, no bit fields).
 */
#ifndef KVTIER_H
#define KVTIER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(KVT_BUILDING_LIBRARY)
#define KVT_EXPORT __attribute__((visibility("default")))
#else
#define KVT_EXPORT
#endif

#define KVT_KEY_BYTES 32

/* ------------------------------------------------------------------ */
/* Version                                                            */
/* ------------------------------------------------------------------ */

/** \return the library version as "MAJOR.MINOR.PATCH"; never NULL. */
KVT_EXPORT const char *kvt_version(void);

/** \return the newest wire protocol version this library speaks. */
KVT_EXPORT uint32_t kvt_protocol_version(void);

/* ------------------------------------------------------------------ */
/* Block keys                                                         */
/* ------------------------------------------------------------------ */

/**
 * Key of one block: SHA-256(parent ‖ tokens as u32 little-endian ‖ extra).
 *
 * \param parent     key of the previous block, or NULL for the first block
 *                   of a sequence (hashed as 32 zero bytes)
 * \param tokens     [n_tokens] token ids of this block
 * \param extra      optional bytes mixed into this block (LoRA id,
 *                   multimodal hashes, a salt); may be NULL when extra_len 0
 * \param ret_key    [32] receives the key
 * \return 0 or a negative errno
 */
KVT_EXPORT int kvt_hash_block(const uint8_t *parent, const uint32_t *tokens,
			      size_t n_tokens, const void *extra,
			      size_t extra_len, uint8_t *ret_key);

/**
 * Keys of every full block of a token sequence, chained from parent.
 * A trailing partial block gets no key.
 *
 * \param parent       key before tokens[0], or NULL at the start of a sequence
 * \param tokens       [n_tokens]
 * \param block_tokens tokens per block (> 0)
 * \param extra        mixed into the first block only (salt, LoRA id)
 * \param ret_keys     [max_keys * 32] receives the keys, back to back
 * \return the number of keys written (n_tokens / block_tokens, at most
 *         max_keys) or a negative errno
 */
KVT_EXPORT int kvt_hash_chain(const uint8_t *parent, const uint32_t *tokens,
			      size_t n_tokens, uint32_t block_tokens,
			      const void *extra, size_t extra_len,
			      uint8_t *ret_keys, size_t max_keys);

/* ------------------------------------------------------------------ */
/* Engine-side paged layouts (CPU copy path)                          */
/* ------------------------------------------------------------------ */

/** Whether kvt_layout indices name engine pages or token slots. */
#define KVT_INDEX_PAGE 0
#define KVT_INDEX_SLOT 1

/**
 * Where an engine keeps one rank's KV cache.  One descriptor covers vLLM
 * FlashAttention (NHD and HND), FlashInfer, MLA, cross-layer and dense
 * [B, H, S, D] caches through per-layer base pointers and byte strides.
 *
 * Element (layer l, plane p, page g, token t, head h) starts at
 *   layer_base[l] + p*stride_plane + g*stride_page + t*stride_token
 *                 + h*stride_head
 * and is head_bytes long.  With KVT_INDEX_SLOT, a block's indices are token
 * slots s (page = s / page_tokens, token = s % page_tokens; -1 = padding).
 *
 * kvtier's block layout is [layer][plane][token][head][head_bytes],
 * contiguous.
 */
typedef struct kvt_layout {
	uint32_t n_layers;    /* layers held by this rank */
	uint32_t planes;      /* 2 for K and V, 1 for an MLA latent */
	uint32_t heads;       /* KV heads held by this rank */
	uint32_t head_bytes;  /* bytes of one head of one token */
	uint32_t page_tokens; /* tokens per engine page */
	uint32_t index_kind;  /* KVT_INDEX_PAGE or KVT_INDEX_SLOT */
	void *const *layer_base; /* [n_layers] */
	int64_t stride_plane; /* bytes */
	int64_t stride_page;  /* bytes */
	int64_t stride_token; /* bytes */
	int64_t stride_head;  /* bytes */
} kvt_layout;

/** \return bytes of one kvtier block of block_tokens tokens for layout. */
KVT_EXPORT uint64_t kvt_layout_block_bytes(const kvt_layout *layout,
					   uint32_t block_tokens);

/**
 * Copy n_blocks blocks from the engine's paged cache into block buffers.
 *
 * \param indices  KVT_INDEX_PAGE: [n_blocks] page ids (block_tokens must
 *                 equal page_tokens); KVT_INDEX_SLOT: [n_blocks *
 *                 block_tokens] token slots, -1 for padding (zero filled)
 * \param blocks   [n_blocks] destination buffers of kvt_layout_block_bytes
 * \return 0 or a negative errno (-EINVAL on a bad descriptor or index)
 */
KVT_EXPORT int kvt_layout_gather(const kvt_layout *layout,
				 uint32_t block_tokens, const int64_t *indices,
				 size_t n_blocks, void *const *blocks);

/** The inverse of kvt_layout_gather; padding slots are skipped. */
KVT_EXPORT int kvt_layout_scatter(const kvt_layout *layout,
				  uint32_t block_tokens, const int64_t *indices,
				  size_t n_blocks, const void *const *blocks);

#ifdef __cplusplus
}
#endif

#endif
