/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Where an engine keeps its KV cache, and the copies between that layout
 * and kvtier's blocks: the descriptor the kernels (kernels/) work on.  Part
 * of libkvtier-client's public API; kvtier.h includes it.  It sits below
 * the library: nothing here refers to a client, a namespace or the daemon.
 */
#ifndef KVTIER_LAYOUT_H
#define KVTIER_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef KVT_EXPORT
#if defined(KVT_BUILDING_LIBRARY)
#define KVT_EXPORT __attribute__((visibility("default")))
#else
#define KVT_EXPORT
#endif
#endif

/* ------------------------------------------------------------------ */
/* Engine-side paged layouts (CPU copy path)                          */
/* ------------------------------------------------------------------ */

/** Whether kvt_layout indices name engine pages or token slots. */
#define KVT_INDEX_PAGE 0
#define KVT_INDEX_SLOT 1

/**
 * Where an engine keeps one rank's KV cache.  One descriptor covers vLLM
 * FlashAttention (NHD and HND), FlashInfer, MLA, cross-layer and dense
 * [B, H, S, D] caches through per-layer base pointers and byte strides,
 * and separate K and V allocations per layer (SGLang's k_buffer and
 * v_buffer) through per-plane base pointers.
 *
 * Element (layer l, plane p, page g, token t, head h) starts at
 *   layer_base[l] + p*stride_plane + g*stride_page + t*stride_token
 *                 + h*stride_head
 * or, with KVT_LAYOUT_PLANE_BASES in flags, at
 *   layer_base[l*planes + p] + g*stride_page + t*stride_token
 *                            + h*stride_head
 * and is head_bytes long.  With KVT_INDEX_SLOT, a block's indices are token
 * slots s (page = s / page_tokens, token = s % page_tokens; -1 = padding).
 *
 * With KVT_LAYOUT_K_COLUMNS, plane 0 (K) keeps each (page, head) column
 * by column, as vLLM's CPU attention does (its vec ISAs): element i, of
 * elem_bytes, of token t of head h of page g is at
 *   layer_base[l] + g*stride_page + h*stride_head
 *                 + (i*page_tokens + t)*elem_bytes
 * and stride_token applies to plane 1 (V) only.  The CPU path copies such
 * a plane element by element; the CUDA path refuses it.
 *
 * n_pages bounds the indices: a page (or a slot's page) at or past it is
 * refused with -EINVAL before anything is copied.  0 means unknown: the
 * CPU path then only refuses pages whose offset leaves int64 (the fields
 * were appended; zero-initialise the struct), and the CUDA path
 * (kvtier-cuda.h) refuses the layout, since a wild index there would
 * write outside the engine's cache and end its CUDA context.
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
	void *const *layer_base; /* [n_layers], or [n_layers * planes] with
				  * KVT_LAYOUT_PLANE_BASES */
	int64_t stride_plane; /* bytes */
	int64_t stride_page;  /* bytes */
	int64_t stride_token; /* bytes */
	int64_t stride_head;  /* bytes */
	uint64_t n_pages;     /* pages of the cache (B for dense); 0 unknown */
	uint32_t flags;       /* KVT_LAYOUT_* */
	uint32_t elem_bytes;  /* KVT_LAYOUT_K_COLUMNS: bytes of one element of
			       * K (1, 2, 4 or 8); otherwise 0 */
	uint32_t dtype;       /* KVT_DTYPE_* of the cache's elements; needed
			       * only with a codec */
	uint32_t codec;       /* KVT_CODEC_*: how a block holds them (below) */
} kvt_layout;

/** flags: layer_base is [n_layers * planes], one base per (layer, plane);
 * stride_plane is not used. */
#define KVT_LAYOUT_PLANE_BASES 0x1u
/** flags: K is kept column by column (see above); needs planes == 2,
 * elem_bytes, and no KVT_LAYOUT_PLANE_BASES. */
#define KVT_LAYOUT_K_COLUMNS 0x2u

/*
 * Codecs: with codec other than KVT_CODEC_NONE, gather quantises each
 * (layer, plane, head) of a block into a self-describing tile and scatter
 * dequantises it back into the cache's dtype (float32, float16 or
 * bfloat16; head_bytes a whole number of elements).  The tiles' format is
 * proto/codec.h's; the paged calls of kvtier.h set codec and dtype from
 * the namespace, whatever the layout says.  On an x86-64 CPU with
 * AVX-512, bfloat16 caches are coded with explicit vector code, to the
 * same bytes; KVTIER_CODEC_ISA=portable in the environment keeps the
 * portable loops.
 */
#define KVT_CODEC_NONE 0
#define KVT_CODEC_FP8_E4M3 1 /* scale per (layer, plane, head) of a block */
#define KVT_CODEC_INT4 2     /* K per channel, V per token in groups of 32 */

#define KVT_DTYPE_FLOAT32 1
#define KVT_DTYPE_FLOAT16 2
#define KVT_DTYPE_BFLOAT16 3

/** \return bytes of one kvtier block of block_tokens tokens for layout
 * (with its codec), or 0 for a layout no block can be made of. */
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
