/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Host-side planning of the GPU copy path: access width, run lengths, the
 * cost model and the path rule, the shape of a kernel launch within its
 * CTA budget, and the run list of a batched copy.
 * Plain C without CUDA, so the client and the tests can use it anywhere,
 * and every address still comes from layout.h through layout_seg.h.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "codec_tile.h"
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

void kvt_copy_model_default(struct kvt_copy_model *ret)
{
	/* PCIe 5.0 x16 as the copy engines reach it; a few microseconds
	 * per call and launch; a CTA of 256 threads with 4 loads of 16 bytes
	 * in flight each (16 KiB) against ~4 us of PCIe round trip. */
	*ret = (struct kvt_copy_model){
		.link_bpns = 50.0,
		.call_ns = 4000.0,
		.run_ns = 1000.0,
		.launch_ns = 4000.0,
		.cta_bpns = 4.0,
		.max_ctas = KVT_CTA_BUDGET_DEFAULT,
	};
}

void kvt_copy_cost(const struct kvt_copy_model *m, int64_t n_runs,
		   int64_t bytes, struct kvt_copy_cost *ret)
{
	double calls = (double)((n_runs + KVT_BATCH_MAX - 1) / KVT_BATCH_MAX);
	double kbw = m->link_bpns;

	if (m->max_ctas && m->max_ctas * m->cta_bpns < kbw)
		kbw = m->max_ctas * m->cta_bpns;
	ret->batch_ns = calls * m->call_ns + (double)n_runs * m->run_ns +
			(double)bytes / m->link_bpns;
	ret->kernel_ns = m->launch_ns + (double)bytes / kbw;
}

int kvt_copy_path(const struct kvt_geom *g, int64_t layer_first,
		  int64_t n_layers, void *const *layer_base, int64_t n_blocks,
		  const struct kvt_copy_model *m, int batch_ok)
{
	struct kvt_copy_cost cost;
	int64_t runs, bytes;

	if (!batch_ok || g->index_kind != KVT_INDEX_PAGE || n_blocks <= 0)
		return KVT_PATH_KERNEL;
	runs = kvt_batch_count(g, layer_first, n_layers, layer_base,
			       n_blocks);
	if (runs <= 0)
		return KVT_PATH_KERNEL;
	/* Fits: the descriptor bounds a block to int64, and n_blocks blocks
	 * are in memory. */
	bytes = n_blocks * (kvt_geom_block_bytes(g) / g->n_layers) * n_layers;
	kvt_copy_cost(m, runs, bytes, &cost);
	return cost.batch_ns <= cost.kernel_ns ? KVT_PATH_BATCH
					       : KVT_PATH_KERNEL;
}

/* Lanes per work item: as many as cover a chunk in the fewest rounds, not
 * rounded up to a power of two, and as many items per CTA as fit. */
static void lane_plan(struct kvt_launch *ln)
{
	int64_t rounds = (ln->chunk_vecs + KVT_CTA_THREADS - 1) /
			 KVT_CTA_THREADS;

	ln->lanes = (int32_t)((ln->chunk_vecs + rounds - 1) / rounds);
	ln->per_cta = KVT_CTA_THREADS / ln->lanes;
	ln->threads = (uint32_t)(ln->lanes * ln->per_cta);
}

int kvt_launch_plan(int64_t vps, int64_t per_block, int64_t n_blocks,
		    uint32_t max_ctas, struct kvt_launch *ret)
{
	/* The grid's limits: 2^31 - 1 along x (kept to 2^20, plenty), 65,535
	 * along y. */
	const int64_t max_x = INT64_C(1) << 20, max_y = 65535;
	struct kvt_launch ln = {0};
	int64_t ctas, gy, gx;

	if (vps < 1 || per_block < 1 || n_blocks < 1)
		return -EINVAL;
	ln.vps = vps;
	ln.chunk_vecs = vps < KVT_CHUNK_VECS ? vps : KVT_CHUNK_VECS;
	ln.n_chunks = vps / ln.chunk_vecs + (vps % ln.chunk_vecs != 0); /* no overflow near INT64_MAX */
	if (per_block > INT64_MAX / ln.n_chunks)
		return -EINVAL;
	ln.items = per_block * ln.n_chunks;
	lane_plan(&ln);

	ctas = ln.items / ln.per_cta + (ln.items % ln.per_cta != 0);
	gy = n_blocks < max_y ? n_blocks : max_y;
	if (max_ctas && gy > max_ctas)
		gy = max_ctas;
	gx = ctas < max_x ? ctas : max_x;
	if (max_ctas && gx > max_ctas / gy)
		gx = max_ctas / gy;
	ln.grid_x = (uint32_t)(gx > 0 ? gx : 1);
	ln.grid_y = (uint32_t)gy;
	*ret = ln;
	return 0;
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
			e = (uint8_t *)layer_base[kvt_geom_base_index(g, l, p)] +
			    eng;
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

uint32_t kvt_codec_access(const struct kvt_codec_geom *cg, uint32_t ptr_align)
{
	const struct kvt_geom *g = &cg->g;
	uint64_t acc = (uint64_t)ptr_align | abs64(g->stride_page) | abs64(g->stride_token) |
		       abs64(g->stride_head) | (uint64_t)g->head_bytes;
	uint32_t r = 0;

	if (!g->plane_bases)
		acc |= abs64(g->stride_plane);
	/* A tile's offset in a block is a multiple of 4 (codec.h). */
	if (ptr_align % 4 == 0)
		r |= KVT_CODEC_TILE_ALIGNED;
	if (ptr_align && acc % (uint64_t)cg->elem_bytes == 0)
		r |= KVT_CODEC_ELEM_ALIGNED;
	return r;
}
