/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Index math between an engine's paged KV cache and kvtier's block layout.
 *
 * This header is the single definition of that math: the CPU copy path
 * (layout_cpu.c) and the CUDA kernels both include it, so the two can only
 * disagree about how they move bytes, never about where the bytes are.
 * It therefore holds nothing but static inline arithmetic on a plain struct
 * that can be passed by value to a kernel; host pointers (kvt_layout's
 * layer_base) stay out of it.
 *
 * All offsets are int64 byte offsets.  The descriptor is validated on the
 * host before it is turned into a kvt_geom (see layout_cpu.c), which is what
 * makes the products below safe from overflow.
 */
#ifndef KVT_LAYOUT_H
#define KVT_LAYOUT_H

#include <errno.h>
#include <stdint.h>

#ifdef __CUDACC__
#define KVT_HD __host__ __device__
#else
#define KVT_HD
#endif

/* Same values as in kvtier-layout.h; repeated so that device code needs only this file. */
#ifndef KVT_INDEX_PAGE
#define KVT_INDEX_PAGE 0
#define KVT_INDEX_SLOT 1
#endif

/* kvt_geom_locate() results, both success. */
#define KVT_GEOM_TOKEN 0 /* the block token lives in the engine cache */
#define KVT_GEOM_PAD   1 /* the block token is padding (slot -1) */

/*
 * The scalar part of a kvt_layout plus the block size, widened to int64 so
 * that every product below is computed in 64 bits.
 */
struct kvt_geom {
	int64_t n_layers;
	int64_t planes;       /* 2 for K and V, 1 for an MLA latent */
	int64_t heads;
	int64_t head_bytes;
	int64_t page_tokens;  /* tokens per engine page */
	int64_t block_tokens; /* tokens per kvtier block */
	int64_t stride_plane; /* engine byte strides */
	int64_t stride_page;
	int64_t stride_token;
	int64_t stride_head;
	int64_t n_pages;      /* pages of the engine cache; 0 unknown */
	int32_t index_kind;   /* KVT_INDEX_PAGE or KVT_INDEX_SLOT */
	int32_t plane_bases;  /* one base per (layer, plane); stride_plane 0 */
	int64_t k_column_elem; /* plane 0 column by column, elements of this
				* many bytes (KVT_LAYOUT_K_COLUMNS); 0: not */
};

/* Which base pointer (layer_base[]) element (layer, plane) is relative to. */
KVT_HD static inline int64_t kvt_geom_base_index(const struct kvt_geom *g,
						 int64_t layer, int64_t plane)
{
	return g->plane_bases ? layer * g->planes + plane : layer;
}

/* Entries of layer_base[]. */
KVT_HD static inline int64_t kvt_geom_n_bases(const struct kvt_geom *g)
{
	return g->plane_bases ? g->n_layers * g->planes : g->n_layers;
}

/* Bytes of one token of one plane of one layer in a kvtier block. */
KVT_HD static inline int64_t kvt_geom_token_bytes(const struct kvt_geom *g)
{
	return g->heads * g->head_bytes;
}

/* Bytes of one kvtier block. */
KVT_HD static inline int64_t kvt_geom_block_bytes(const struct kvt_geom *g)
{
	return g->n_layers * g->planes * g->block_tokens *
	       kvt_geom_token_bytes(g);
}

/*
 * Byte offset of element (plane, page, token, head) relative to its base,
 * layer_base[kvt_geom_base_index()]; the layer enters only through that,
 * which is how cross-layer caches (one buffer, layers interleaved inside a
 * page) and per-layer tensors share one descriptor.
 */
KVT_HD static inline int64_t kvt_geom_engine_offset(const struct kvt_geom *g,
						    int64_t plane, int64_t page,
						    int64_t token, int64_t head)
{
	return plane * g->stride_plane + page * g->stride_page +
	       token * g->stride_token + head * g->stride_head;
}

/*
 * With k_column_elem: byte offset of element i of (page, token, head) of
 * plane 0 relative to its base; a head's elements are page_tokens *
 * k_column_elem bytes apart.
 */
KVT_HD static inline int64_t kvt_geom_column_offset(const struct kvt_geom *g,
						    int64_t page, int64_t token,
						    int64_t head, int64_t i)
{
	return page * g->stride_page + head * g->stride_head +
	       (i * g->page_tokens + token) * g->k_column_elem;
}

/* Byte offset of (layer, plane, token, head) in a block laid out as
 * [layer][plane][token][head][head_bytes]. */
KVT_HD static inline int64_t kvt_geom_block_offset(const struct kvt_geom *g,
						   int64_t layer, int64_t plane,
						   int64_t token, int64_t head)
{
	return (((layer * g->planes + plane) * g->block_tokens + token) *
			g->heads + head) * g->head_bytes;
}

/*
 * Where token t of block `block` lives in the engine cache.
 *
 * KVT_INDEX_PAGE: indices[block] is the engine page and t the token in it
 * (block_tokens == page_tokens).  KVT_INDEX_SLOT: indices[block *
 * block_tokens + t] is a token slot, page = slot / page_tokens, token =
 * slot % page_tokens, and -1 marks padding.
 *
 * indices: [n_blocks] (PAGE) or [n_blocks * block_tokens] (SLOT)
 * \return KVT_GEOM_TOKEN with *ret_page and *ret_token set, KVT_GEOM_PAD
 *         for a padding slot, or -EINVAL for a negative page or slot, or
 *         a page at or past n_pages when that is known
 */
KVT_HD static inline int kvt_geom_locate(const struct kvt_geom *g,
					 const int64_t *indices, int64_t block,
					 int64_t t, int64_t *ret_page,
					 int64_t *ret_token)
{
	int64_t s;

	if (g->index_kind == KVT_INDEX_PAGE) {
		s = indices[block];
		if (s < 0 || (g->n_pages && s >= g->n_pages))
			return -EINVAL;
		*ret_page = s;
		*ret_token = t;
		return KVT_GEOM_TOKEN;
	}

	s = indices[block * g->block_tokens + t];
	if (s == -1)
		return KVT_GEOM_PAD;
	if (s < 0 || (g->n_pages && s / g->page_tokens >= g->n_pages))
		return -EINVAL;
	*ret_page = s / g->page_tokens;
	*ret_token = s % g->page_tokens;
	return KVT_GEOM_TOKEN;
}

#endif
