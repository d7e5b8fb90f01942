/* SPDX-License-Identifier: Apache-2.0 */
/*
 * How the GPU copy path cuts blocks into contiguous segments.
 *
 * A block is [layer][plane][token][head][head_bytes].  Trailing dimensions
 * whose engine strides continue the one below them collapse into one
 * segment: heads of a token (NHD), then the tokens of a page (NHD with
 * page indices), then both planes of a layer (FlashInfer, cross-layer).
 * A segment is then contiguous on both sides, and the kernel, the batched
 * memcpy path and the host emulation in the tests all walk the same
 * segments through kvt_seg_locate(), which takes every address from
 * layout.h.
 *
 * Included from C and CUDA; nothing here touches memory except indices.
 */
#ifndef KVT_LAYOUT_SEG_H
#define KVT_LAYOUT_SEG_H

#include <stdint.h>

#include "layout.h"

struct kvt_seg {
	int64_t bytes;       /* contiguous bytes of one segment, both sides */
	int64_t layer_first; /* first layer of the launch */
	int64_t n_l;         /* segments along layers, planes, tokens, heads */
	int64_t n_p;
	int64_t n_t;
	int64_t n_h;
	int64_t per_block;   /* n_l * n_p * n_t * n_h */
};

/*
 * Segments of layers [layer_first, layer_first + n_layers) of a block.
 * Layers never merge here: layer_base is per layer, so only a caller that
 * has looked at the pointers can merge them (kvt_copy_run_bytes()).
 */
KVT_HD static inline void kvt_seg_plan(const struct kvt_geom *g,
				       int64_t layer_first, int64_t n_layers,
				       struct kvt_seg *ret)
{
	int64_t tb = kvt_geom_token_bytes(g);
	int heads_merge, tokens_merge, planes_merge;

	heads_merge = g->heads == 1 || g->stride_head == g->head_bytes;
	/* Tokens are known to be consecutive in the engine only when the
	 * block is one page (or one token). */
	tokens_merge = heads_merge &&
		       (g->block_tokens == 1 ||
			(g->index_kind == KVT_INDEX_PAGE &&
			 g->stride_token == tb));
	/* Planes with bases of their own are in separate allocations. */
	planes_merge = tokens_merge &&
		       (g->planes == 1 ||
			(!g->plane_bases &&
			 g->stride_plane == g->block_tokens * tb));

	ret->layer_first = layer_first;
	ret->n_l = n_layers;
	ret->n_p = planes_merge ? 1 : g->planes;
	ret->n_t = tokens_merge ? 1 : g->block_tokens;
	ret->n_h = heads_merge ? 1 : g->heads;
	ret->bytes = g->head_bytes * (heads_merge ? g->heads : 1) *
		     (tokens_merge ? g->block_tokens : 1) *
		     (planes_merge ? g->planes : 1);
	ret->per_block = ret->n_l * ret->n_p * ret->n_t * ret->n_h;
}

/*
 * Decomposes segment s (0 <= s < per_block) of a block into (layer, plane,
 * token, head).  The index type is a template parameter in CUDA and C++:
 * the kernel splits in 32 bits when per_block fits, because 64-bit
 * division costs tens of instructions on a GPU; C callers split in int64.
 */
#ifdef __cplusplus
template <typename kvt_seg_index>
#else
typedef int64_t kvt_seg_index;
#endif
KVT_HD static inline void kvt_seg_split(const struct kvt_seg *sg,
					kvt_seg_index s, int64_t *ret_layer,
					int64_t *ret_plane, int64_t *ret_token,
					int64_t *ret_head)
{
	*ret_head = (int64_t)(s % (kvt_seg_index)sg->n_h);
	s /= (kvt_seg_index)sg->n_h;
	*ret_token = (int64_t)(s % (kvt_seg_index)sg->n_t);
	s /= (kvt_seg_index)sg->n_t;
	*ret_plane = (int64_t)(s % (kvt_seg_index)sg->n_p);
	*ret_layer = sg->layer_first + (int64_t)(s / (kvt_seg_index)sg->n_p);
}

/*
 * Where segment (l, p, t, h) of block b lives: *ret_blk is its offset in
 * the block, *ret_eng its offset from layer_base[kvt_geom_base_index(g, l,
 * p)].
 *
 * indices: [n_blocks] (PAGE) or [n_blocks * block_tokens] (SLOT)
 * \return KVT_GEOM_TOKEN with both offsets set, KVT_GEOM_PAD with only
 *         *ret_blk set, or -EINVAL for a bad index
 */
KVT_HD static inline int kvt_seg_locate(const struct kvt_geom *g,
					const int64_t *indices, int64_t b,
					int64_t l, int64_t p, int64_t t,
					int64_t h, int64_t *ret_eng,
					int64_t *ret_blk)
{
	int64_t page = 0, token = 0;
	int r;

	*ret_blk = kvt_geom_block_offset(g, l, p, t, h);
	r = kvt_geom_locate(g, indices, b, t, &page, &token);
	if (r == KVT_GEOM_TOKEN)
		*ret_eng = kvt_geom_engine_offset(g, p, page, token, h);
	return r;
}

#endif
