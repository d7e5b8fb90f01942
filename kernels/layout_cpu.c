/* SPDX-License-Identifier: Apache-2.0 */
/*
 * CPU copy path between an engine's paged KV cache and kvtier blocks.
 *
 * This is also the reference the CUDA kernels are tested against, so it
 * takes every address from layout.h and only decides how to move bytes:
 * a block token maps to (page, token-in-page); consecutive block tokens that
 * land on consecutive tokens of one page form a run, and a run of one
 * (layer, plane) is copied with as few memcpy calls as the strides allow.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "codec.h"
#include "codec_cpu.h"
#include "kvtier-layout.h"
#include "layout.h"
#include "layout_cuda.h"

struct copy_ctx {
	struct kvt_geom g;
	void *const *base;    /* [kvt_geom_n_bases()] layer_base */
	uint64_t page_extent; /* bytes a page spans past its start, |strides| */
	size_t token_bytes;   /* heads * head_bytes */
	int heads_contig;     /* heads of a token are back to back */
};

static uint64_t abs64(int64_t v)
{
	/* Through uint64 so that INT64_MIN does not overflow. */
	return v < 0 ? -(uint64_t)v : (uint64_t)v;
}

/* *acc += n * |stride|, refusing anything that leaves int64. */
static int span_add(uint64_t *acc, uint64_t n, int64_t stride)
{
	uint64_t v;

	if (__builtin_mul_overflow(n, abs64(stride), &v) ||
	    __builtin_add_overflow(*acc, v, acc) || *acc > INT64_MAX)
		return -EINVAL;
	return 0;
}

/* Bytes one page spans past its start, or -EINVAL beyond int64.  A K
 * plane kept by columns spans its heads' columns. */
static int geom_page_extent(const struct kvt_geom *g, uint64_t *ret)
{
	uint64_t extent = (uint64_t)g->head_bytes, columns = 0;

	if (span_add(&extent, (uint64_t)g->planes - 1, g->stride_plane) < 0 ||
	    span_add(&extent, (uint64_t)g->page_tokens - 1, g->stride_token) < 0 ||
	    span_add(&extent, (uint64_t)g->heads - 1, g->stride_head) < 0)
		return -EINVAL;
	if (g->k_column_elem &&
	    (span_add(&columns, (uint64_t)g->page_tokens, g->head_bytes) < 0 ||
	     span_add(&columns, (uint64_t)g->heads - 1, g->stride_head) < 0))
		return -EINVAL;
	*ret = extent > columns ? extent : columns;
	return 0;
}

/* The descriptor's K-by-columns part: none (0), or a valid element size
 * with two planes and one base per layer. */
static int check_k_columns(const kvt_layout *layout)
{
	uint32_t e = layout->elem_bytes;

	if (!(layout->flags & KVT_LAYOUT_K_COLUMNS))
		return e ? -EINVAL : 0;
	if ((e != 1 && e != 2 && e != 4 && e != 8) || layout->head_bytes % e ||
	    layout->planes != 2 || (layout->flags & KVT_LAYOUT_PLANE_BASES))
		return -EINVAL;
	return 0;
}

/* The descriptor's codec: none, or one that reads whole elements of its
 * dtype in every head (and in K's columns). */
static int check_codec(const kvt_layout *layout)
{
	uint32_t eb = kvt_codec_dtype_bytes(layout->dtype);

	if (layout->codec == KVT_CODEC_NONE)
		return 0;
	if (!kvt_codec_name(layout->codec) || eb == 0 || layout->head_bytes % eb ||
	    ((layout->flags & KVT_LAYOUT_K_COLUMNS) && layout->elem_bytes != eb))
		return -EINVAL;
	return 0;
}

/*
 * Validates the scalar part of a descriptor and widens it.  Beyond the
 * documented constraints this bounds the block size and the bytes one page
 * spans, so that no offset computed by layout.h can overflow int64 for a
 * page id that check_page() accepted.
 */
static int geom_init(const kvt_layout *layout, uint32_t block_tokens,
		     struct kvt_geom *ret_geom, uint64_t *ret_page_extent)
{
	struct kvt_geom g;
	uint64_t bytes, extent;

	if (!layout || block_tokens == 0)
		return -EINVAL;
	if (layout->n_layers == 0 || layout->heads == 0 ||
	    layout->head_bytes == 0 || layout->page_tokens == 0)
		return -EINVAL;
	if (layout->planes != 1 && layout->planes != 2)
		return -EINVAL;
	if ((layout->flags & ~(KVT_LAYOUT_PLANE_BASES | KVT_LAYOUT_K_COLUMNS)) ||
	    check_k_columns(layout) < 0 || check_codec(layout) < 0 ||
	    layout->n_pages > INT64_MAX)
		return -EINVAL;
	switch (layout->index_kind) {
	case KVT_INDEX_PAGE:
		/* A page is copied whole into one block. */
		if (block_tokens != layout->page_tokens)
			return -EINVAL;
		break;
	case KVT_INDEX_SLOT:
		break;
	default:
		return -EINVAL;
	}

	bytes = layout->n_layers;
	if (__builtin_mul_overflow(bytes, (uint64_t)layout->planes, &bytes) ||
	    __builtin_mul_overflow(bytes, (uint64_t)block_tokens, &bytes) ||
	    __builtin_mul_overflow(bytes, (uint64_t)layout->heads, &bytes) ||
	    __builtin_mul_overflow(bytes, (uint64_t)layout->head_bytes, &bytes) ||
	    bytes > INT64_MAX || bytes > SIZE_MAX)
		return -EINVAL;

	g = (struct kvt_geom){
		.n_layers = layout->n_layers,
		.planes = layout->planes,
		.heads = layout->heads,
		.head_bytes = layout->head_bytes,
		.page_tokens = layout->page_tokens,
		.block_tokens = block_tokens,
		/* With a base per plane, planes are apart by their bases. */
		.stride_plane = (layout->flags & KVT_LAYOUT_PLANE_BASES)
					? 0
					: layout->stride_plane,
		.stride_page = layout->stride_page,
		.stride_token = layout->stride_token,
		.stride_head = layout->stride_head,
		.n_pages = (int64_t)layout->n_pages,
		.index_kind = (int32_t)layout->index_kind,
		.plane_bases = (layout->flags & KVT_LAYOUT_PLANE_BASES) != 0,
		.k_column_elem = (layout->flags & KVT_LAYOUT_K_COLUMNS)
					 ? layout->elem_bytes
					 : 0,
	};
	if (geom_page_extent(&g, &extent) < 0)
		return -EINVAL;
	*ret_geom = g;
	if (ret_page_extent)
		*ret_page_extent = extent;
	return 0;
}

static int ctx_init(struct copy_ctx *c, const kvt_layout *layout,
		    uint32_t block_tokens)
{
	int r;

	r = geom_init(layout, block_tokens, &c->g, &c->page_extent);
	if (r < 0)
		return r;
	if (!layout->layer_base)
		return -EINVAL;
	for (int64_t l = 0; l < kvt_geom_n_bases(&c->g); l++)
		if (!layout->layer_base[l])
			return -EINVAL;

	c->base = layout->layer_base;
	c->token_bytes = (size_t)kvt_geom_token_bytes(&c->g);
	c->heads_contig = c->g.heads == 1 ||
			  c->g.stride_head == c->g.head_bytes;
	return 0;
}

/* A page past the engine's pages (when it said how many it has), or
 * whose offset would not fit in int64. */
static int check_page(const struct kvt_geom *g, uint64_t extent, int64_t page)
{
	if (page < 0 || (g->n_pages && page >= g->n_pages))
		return -EINVAL;
	return span_add(&extent, (uint64_t)page, g->stride_page);
}

/* Every index is checked before the first byte moves, so a refused scatter
 * leaves the engine cache untouched. */
static int check_indices(const struct kvt_geom *g, uint64_t extent,
			 const int64_t *indices, size_t n_blocks)
{
	size_t n = n_blocks;

	if (g->index_kind == KVT_INDEX_SLOT &&
	    __builtin_mul_overflow(n_blocks, (size_t)g->block_tokens, &n))
		return -EINVAL;
	/* kvt_geom_locate() addresses indices with int64. */
	if (n > INT64_MAX)
		return -EINVAL;

	for (size_t i = 0; i < n; i++) {
		int64_t s = indices[i];

		if (g->index_kind == KVT_INDEX_SLOT) {
			if (s == -1)
				continue;
			if (s < 0)
				return -EINVAL;
			s /= g->page_tokens;
		}
		if (check_page(g, extent, s) < 0)
			return -EINVAL;
	}
	return 0;
}

/* The CPU path's checks are the one definition of a valid descriptor and
 * valid indices; the GPU path (layout_plan.c, client/cuda-submit.c) uses
 * these.  A kvt_geom has no codec: a coded layout is refused here, so
 * that it never reaches the uncoded copies, and taken by
 * kvt_codec_geom_from_layout() for the codecs' kernels. */
int kvt_geom_from_layout(const kvt_layout *layout, uint32_t block_tokens,
			 struct kvt_geom *ret)
{
	int r;

	if (!ret)
		return -EINVAL;
	r = geom_init(layout, block_tokens, ret, NULL);
	if (r < 0)
		return r;
	return layout->codec == KVT_CODEC_NONE ? 0 : -EOPNOTSUPP;
}

int kvt_codec_geom_from_layout(const kvt_layout *layout, uint32_t block_tokens,
			       struct kvt_codec_geom *ret)
{
	struct kvt_geom g;
	int r;

	if (!ret)
		return -EINVAL;
	r = geom_init(layout, block_tokens, &g, NULL);
	if (r < 0)
		return r;
	return kvt_codec_geom_init(&g, layout->codec, layout->dtype, ret);
}

int kvt_geom_check_indices(const struct kvt_geom *g, const int64_t *indices,
			   int64_t n_blocks)
{
	uint64_t extent;

	if (!g || n_blocks < 0 || geom_page_extent(g, &extent) < 0)
		return -EINVAL;
	if (n_blocks == 0)
		return 0;
	if (!indices)
		return -EINVAL;
	return check_indices(g, extent, indices, (size_t)n_blocks);
}

static inline void move_bytes(int to_block, uint8_t *eng, uint8_t *blk,
			      size_t n)
{
	if (to_block)
		memcpy(blk, eng, n);
	else
		memcpy(eng, blk, n);
}

/* copy_run() of a K plane kept by columns: element by element. */
static void copy_columns(const struct copy_ctx *c, int to_block, uint8_t *base,
			 int64_t page, int64_t token, int64_t n, uint8_t *blk)
{
	const struct kvt_geom *g = &c->g;
	int64_t e = g->k_column_elem, per_head = g->head_bytes / e;

	for (int64_t i = 0; i < n; i++)
		for (int64_t h = 0; h < g->heads; h++) {
			uint8_t *b = blk + (i * g->heads + h) * g->head_bytes;

			for (int64_t x = 0; x < per_head; x++)
				move_bytes(to_block,
					   base + kvt_geom_column_offset(
							  g, page, token + i, h, x),
					   b + x * e, (size_t)e);
		}
}

/*
 * Copies n consecutive tokens of one (layer, plane): engine tokens
 * token..token+n-1 of page, block tokens t..t+n-1.  With heads back to back
 * a token is one memcpy; when tokens are back to back as well the whole run
 * is one.
 */
static inline void copy_run(const struct copy_ctx *c, int to_block,
			    int64_t layer, int64_t plane, int64_t page,
			    int64_t token, int64_t t, int64_t n,
			    uint8_t *block)
{
	const struct kvt_geom *g = &c->g;
	uint8_t *base = (uint8_t *)c->base[kvt_geom_base_index(g, layer, plane)];
	uint8_t *eng = base + kvt_geom_engine_offset(g, plane, page, token, 0);
	uint8_t *blk = block + kvt_geom_block_offset(g, layer, plane, t, 0);
	size_t tb = c->token_bytes;

	if (plane == 0 && g->k_column_elem) {
		copy_columns(c, to_block, base, page, token, n, blk);
		return;
	}

	if (c->heads_contig) {
		if (n == 1 || g->stride_token == (int64_t)tb) {
			move_bytes(to_block, eng, blk, (size_t)n * tb);
			return;
		}
		for (int64_t i = 0; i < n; i++)
			move_bytes(to_block, eng + i * g->stride_token,
				   blk + i * (int64_t)tb, tb);
		return;
	}

	for (int64_t i = 0; i < n; i++) {
		uint8_t *e = eng + i * g->stride_token;
		uint8_t *b = blk + i * (int64_t)tb;

		for (int64_t h = 0; h < g->heads; h++)
			move_bytes(to_block, e + h * g->stride_head,
				   b + h * g->head_bytes, (size_t)g->head_bytes);
	}
}

static void copy_block(const struct copy_ctx *c, int to_block,
		       const int64_t *indices, int64_t b, uint8_t *block)
{
	const struct kvt_geom *g = &c->g;
	int64_t n;

	for (int64_t t = 0; t < g->block_tokens; t += n) {
		int64_t page = 0, token = 0;
		int r;

		r = kvt_geom_locate(g, indices, b, t, &page, &token);
		n = 1;
		if (g->index_kind == KVT_INDEX_PAGE) {
			n = g->block_tokens;
		} else {
			/* Grow the run while the next slot is the next token
			 * of the same page, or padding follows padding. */
			while (t + n < g->block_tokens) {
				int64_t p2 = 0, tk2 = 0;
				int r2;

				r2 = kvt_geom_locate(g, indices, b, t + n, &p2,
						     &tk2);
				if (r2 != r)
					break;
				if (r == KVT_GEOM_TOKEN &&
				    (p2 != page || tk2 != token + n))
					break;
				n++;
			}
		}

		if (r == KVT_GEOM_PAD) {
			if (!to_block)
				continue;
			for (int64_t l = 0; l < g->n_layers; l++)
				for (int64_t p = 0; p < g->planes; p++)
					memset(block + kvt_geom_block_offset(
							       g, l, p, t, 0),
					       0, (size_t)n * c->token_bytes);
			continue;
		}

		for (int64_t l = 0; l < g->n_layers; l++)
			for (int64_t p = 0; p < g->planes; p++)
				copy_run(c, to_block, l, p, page, token, t, n,
					 block);
	}
}

/*
 * Gather passes its writable blocks in dst, scatter its read-only ones in
 * src.  Two parameters rather than one cast array keep each caller's array
 * read through its own type.
 */
static int layout_copy(const kvt_layout *layout, uint32_t block_tokens,
		       const int64_t *indices, size_t n_blocks, int to_block,
		       void *const *dst, const void *const *src)
{
	struct copy_ctx c;
	int r;

	r = ctx_init(&c, layout, block_tokens);
	if (r < 0)
		return r;
	if (n_blocks == 0)
		return 0;
	if (!indices || (to_block ? !dst : !src))
		return -EINVAL;
	for (size_t i = 0; i < n_blocks; i++)
		if (to_block ? !dst[i] : !src[i])
			return -EINVAL;
	r = check_indices(&c.g, c.page_extent, indices, n_blocks);
	if (r < 0)
		return r;
	if (layout->codec != KVT_CODEC_NONE)
		return kvt_codec_copy(&c.g, c.base, layout->codec, layout->dtype, indices,
				      n_blocks, to_block, dst, src);

	/* copy_block() only reads a block when !to_block. */
	for (size_t i = 0; i < n_blocks; i++)
		copy_block(&c, to_block, indices, (int64_t)i,
			   to_block ? (uint8_t *)dst[i] : (uint8_t *)src[i]);
	return 0;
}

KVT_EXPORT uint64_t kvt_layout_block_bytes(const kvt_layout *layout,
					   uint32_t block_tokens)
{
	struct kvt_geom g;

	/* The return type has no room for an errno: 0 is never a valid
	 * size, so it stands for a descriptor that was refused. */
	if (geom_init(layout, block_tokens, &g, NULL) < 0)
		return 0;
	if (layout->codec != KVT_CODEC_NONE)
		return kvt_codec_block_bytes(&g, layout->codec, layout->dtype);
	return (uint64_t)kvt_geom_block_bytes(&g);
}

KVT_EXPORT int kvt_layout_gather(const kvt_layout *layout,
				 uint32_t block_tokens, const int64_t *indices,
				 size_t n_blocks, void *const *blocks)
{
	return layout_copy(layout, block_tokens, indices, n_blocks, 1, blocks,
			   NULL);
}

KVT_EXPORT int kvt_layout_scatter(const kvt_layout *layout,
				  uint32_t block_tokens, const int64_t *indices,
				  size_t n_blocks, const void *const *blocks)
{
	return layout_copy(layout, block_tokens, indices, n_blocks, 0, NULL,
			   blocks);
}
