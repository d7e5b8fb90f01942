/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Host-side planning of the GPU copy path: descriptor checks, access
 * width, run lengths, the path rule and the run list of a batched copy.
 * Plain C without CUDA, so the client and the tests can use it anywhere,
 * and every address still comes from layout.h through layout_seg.h.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "layout_cuda.h"

static uint64_t abs64(int64_t v)
{
	return v < 0 ? -(uint64_t)v : (uint64_t)v;
}

static uint32_t align_of(uint64_t v)
{
	uint32_t a = 16;

	while (a > 1 && v % a)
		a >>= 1;
	return a;
}

uint32_t kvt_ptr_align(const void *const *ptrs, int64_t n)
{
	uintptr_t acc = 0;

	for (int64_t i = 0; i < n; i++)
		acc |= (uintptr_t)ptrs[i];
	return align_of(acc);
}

uint32_t kvt_seg_vec_bytes(const struct kvt_geom *g, const struct kvt_seg *sg,
			   uint32_t ptr_align)
{
	/* OR-ing values keeps exactly the low bits that limit alignment. */
	uint64_t acc = (uint64_t)sg->bytes | abs64(g->stride_page);
	uint32_t a;

	if (sg->n_p > 1)
		acc |= abs64(g->stride_plane);
	/* Slots put a block token anywhere in a page; pages start at token
	 * 0 when the tokens of a block are one segment. */
	if (sg->n_t > 1 || g->index_kind == KVT_INDEX_SLOT)
		acc |= abs64(g->stride_token);
	if (sg->n_h > 1)
		acc |= abs64(g->stride_head);
	a = align_of(acc);
	ptr_align = ptr_align ? align_of(ptr_align) : 1;
	return a < ptr_align ? a : ptr_align;
}

/* Whether every layer of the range is one segment and the layers follow
 * each other in the engine as they do in the block. */
static int layers_merge(const struct kvt_geom *g, const struct kvt_seg *sg,
			void *const *layer_base)
{
	int64_t layer = sg->bytes;

	if (sg->n_l < 2 || sg->n_p != 1 || sg->n_t != 1 || sg->n_h != 1 ||
	    !layer_base)
		return 0;
	if (layer != g->planes * g->block_tokens * kvt_geom_token_bytes(g))
		return 0;
	for (int64_t l = sg->layer_first + 1; l < sg->layer_first + sg->n_l;
	     l++)
		if ((uintptr_t)layer_base[l] !=
		    (uintptr_t)layer_base[l - 1] + (uintptr_t)layer)
			return 0;
	return 1;
}

int64_t kvt_copy_run_bytes(const struct kvt_geom *g, int64_t layer_first,
			   int64_t n_layers, void *const *layer_base)
{
	struct kvt_seg sg;

	kvt_seg_plan(g, layer_first, n_layers, &sg);
	if (layers_merge(g, &sg, layer_base))
		return sg.bytes * sg.n_l;
	return sg.bytes;
}

int kvt_copy_path(const struct kvt_geom *g, int64_t layer_first,
		  int64_t n_layers, void *const *layer_base, int batch_ok)
{
	if (!batch_ok || g->index_kind != KVT_INDEX_PAGE)
		return KVT_PATH_KERNEL;
	if (kvt_copy_run_bytes(g, layer_first, n_layers, layer_base) <
	    KVT_BATCH_MIN_RUN)
		return KVT_PATH_KERNEL;
	return KVT_PATH_BATCH;
}

static int range_ok(const struct kvt_geom *g, int64_t layer_first,
		    int64_t n_layers)
{
	return layer_first >= 0 && n_layers > 0 &&
	       layer_first <= g->n_layers - n_layers;
}

int64_t kvt_batch_count(const struct kvt_geom *g, int64_t layer_first,
			int64_t n_layers, void *const *layer_base,
			int64_t n_blocks)
{
	struct kvt_seg sg;

	if (!range_ok(g, layer_first, n_layers) || n_blocks < 0)
		return -EINVAL;
	kvt_seg_plan(g, layer_first, n_layers, &sg);
	if (layers_merge(g, &sg, layer_base))
		return n_blocks;
	if (n_blocks && sg.per_block > INT64_MAX / n_blocks)
		return -EINVAL;
	return n_blocks * sg.per_block;
}

int64_t kvt_batch_build(const struct kvt_geom *g, int dir,
			int64_t layer_first, int64_t n_layers,
			void *const *layer_base, const int64_t *indices,
			void *const *blocks, int64_t n_blocks, void **dsts,
			const void **srcs, size_t *sizes)
{
	struct kvt_seg sg;
	int64_t k = 0, per, bytes;

	if (!range_ok(g, layer_first, n_layers) || n_blocks < 0 ||
	    g->index_kind != KVT_INDEX_PAGE ||
	    (dir != KVT_COPY_GATHER && dir != KVT_COPY_SCATTER))
		return -EINVAL;
	kvt_seg_plan(g, layer_first, n_layers, &sg);
	per = sg.per_block;
	bytes = sg.bytes;
	if (layers_merge(g, &sg, layer_base)) {
		/* One run per block: the first layer's segment, n_l long. */
		per = 1;
		bytes = sg.bytes * sg.n_l;
	}

	for (int64_t b = 0; b < n_blocks; b++) {
		for (int64_t s = 0; s < per; s++) {
			int64_t l, p, t, h, eng = 0, blk = 0;
			uint8_t *e, *k_blk;

			kvt_seg_split(&sg, s, &l, &p, &t, &h);
			if (kvt_seg_locate(g, indices, b, l, p, t, h, &eng,
					   &blk) != KVT_GEOM_TOKEN)
				return -EINVAL;
			e = (uint8_t *)layer_base[l] + eng;
			k_blk = (uint8_t *)blocks[b] + blk;
			dsts[k] = dir == KVT_COPY_GATHER ? (void *)k_blk
							 : (void *)e;
			srcs[k] = dir == KVT_COPY_GATHER ? (const void *)e
							 : (const void *)k_blk;
			sizes[k] = (size_t)bytes;
			k++;
		}
	}
	return k;
}
