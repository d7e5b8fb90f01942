/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Gather/scatter kernels and the batched-memcpy path between an engine's
 * paged KV cache and kvtier blocks (see layout_cuda.h).
 *
 * The kernel is one launch for any number of blocks.  Each work item is a
 * chunk of one segment (layout_seg.h) of one block; a group of lanes moves
 * it with the widest access every segment start allows, so NHD caches move
 * whole pages in 16-byte accesses while HND or odd-sized heads fall back to
 * narrower ones without a second code path.  Long segments are cut into
 * chunks so that enough CTAs are in flight to cover PCIe latency when the
 * blocks are in pinned host memory.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include <cuda_runtime.h>

#include "layout_cuda.h"

namespace {

constexpr int kThreads = 256;
/* Vectors one work item moves at most. */
constexpr int64_t kChunkVecs = 4 * kThreads;
/* Loads in flight per lane before their stores. */
constexpr int kUnroll = 4;
constexpr unsigned kMaxGridY = 65535;
constexpr unsigned kMaxGridX = 1u << 20;

struct launch_shape {
	int64_t vps;        /* vectors per segment */
	int64_t chunk_vecs; /* vectors per work item */
	int64_t n_chunks;   /* work items per segment */
	int64_t items;      /* work items per block */
	int32_t lanes_log2; /* lanes per work item, log2 */
};

/*
 * Moves vectors [v, end) of src to dst with a stride of lanes, kUnroll
 * loads ahead of their stores.  Sources are read once, so they are loaded
 * with the streaming hint; destinations keep the default policy because
 * the engine reads a prefetched layer right after it lands.
 */
template <typename V>
__device__ __forceinline__ void copy_vecs(V *dst, const V *src, int64_t v,
					  int64_t end, int64_t lanes)
{
	for (; v + (kUnroll - 1) * lanes < end; v += kUnroll * lanes) {
		V r[kUnroll];

#pragma unroll
		for (int u = 0; u < kUnroll; u++)
			r[u] = __ldcs(src + v + u * lanes);
#pragma unroll
		for (int u = 0; u < kUnroll; u++)
			dst[v + u * lanes] = r[u];
	}
	for (; v < end; v += lanes)
		dst[v] = __ldcs(src + v);
}

/*
 * layer_base: [g.n_layers] engine pointers, one per layer
 * indices:    [n_blocks] pages or [n_blocks * block_tokens] slots
 * blocks:     [n_blocks] pointers to [kvt_geom_block_bytes(g)] bytes
 *
 * I is the type work items are split in: uint32_t when ln.items fits in
 * 31 bits, else int64_t.  Addresses are always computed in int64.
 */
template <typename V, typename I>
__global__ void __launch_bounds__(kThreads)
copy_kernel(struct kvt_geom g, struct kvt_seg sg, struct launch_shape ln,
	    int32_t gather, uint8_t *const *layer_base, const int64_t *indices,
	    uint8_t *const *blocks, int64_t n_blocks)
{
	const int64_t lanes = (int64_t)1 << ln.lanes_log2;
	const int64_t lane = threadIdx.x & (lanes - 1);
	const I per_cta = (I)(kThreads >> ln.lanes_log2);
	const I sub = (I)(threadIdx.x >> ln.lanes_log2);

	for (int64_t b = blockIdx.y; b < n_blocks; b += gridDim.y) {
		uint8_t *block = blocks[b];

		for (I it = (I)blockIdx.x * per_cta + sub; it < (I)ln.items;
		     it += (I)gridDim.x * per_cta) {
			I s = it / (I)ln.n_chunks;
			int64_t chunk = (int64_t)(it % (I)ln.n_chunks);
			int64_t l, p, t, h, eng = 0, blk = 0, v0, v1;
			V *bp, *ep;
			int r;

			kvt_seg_split<I>(&sg, s, &l, &p, &t, &h);
			r = kvt_seg_locate(&g, indices, b, l, p, t, h, &eng,
					   &blk);
			/* A bad index was refused on the host; should one
			 * slip through, touch nothing rather than guess. */
			if (r < 0)
				continue;
			v0 = chunk * ln.chunk_vecs;
			v1 = v0 + ln.chunk_vecs < ln.vps ? v0 + ln.chunk_vecs
							 : ln.vps;
			bp = reinterpret_cast<V *>(block + blk);
			if (r == KVT_GEOM_PAD) {
				V zero{};

				if (gather)
					for (int64_t v = v0 + lane; v < v1;
					     v += lanes)
						bp[v] = zero;
				continue;
			}
			ep = reinterpret_cast<V *>(layer_base[l] + eng);
			if (gather)
				copy_vecs<V>(bp, ep, v0 + lane, v1, lanes);
			else
				copy_vecs<V>(ep, bp, v0 + lane, v1, lanes);
		}
	}
}

template <typename V, typename I>
cudaError_t launch_one(dim3 grid, const struct kvt_geom *g,
		       const struct kvt_seg *sg, const struct launch_shape *ln,
		       int32_t gather, void *const *layer_base,
		       const int64_t *indices, void *const *blocks,
		       int64_t n_blocks, cudaStream_t stream)
{
	struct kvt_geom gv = *g;
	struct kvt_seg sv = *sg;
	struct launch_shape lv = *ln;
	void *args[] = {&gv, &sv, &lv, &gather, (void *)&layer_base,
			(void *)&indices, (void *)&blocks, &n_blocks};

	/* cudaLaunchKernel reports this launch's own error, where a launch
	 * with <<<>>> and cudaGetLastError() could also pick up (and clear)
	 * an earlier error of the caller's. */
	return cudaLaunchKernel((const void *)copy_kernel<V, I>, grid,
				dim3(kThreads), args, 0, stream);
}

template <typename I>
cudaError_t launch_width(uint32_t width, dim3 grid, const struct kvt_geom *g,
			 const struct kvt_seg *sg,
			 const struct launch_shape *ln, int32_t gather,
			 void *const *layer_base, const int64_t *indices,
			 void *const *blocks, int64_t n_blocks,
			 cudaStream_t stream)
{
	switch (width) {
	case 16:
		return launch_one<uint4, I>(grid, g, sg, ln, gather, layer_base,
					    indices, blocks, n_blocks, stream);
	case 8:
		return launch_one<uint2, I>(grid, g, sg, ln, gather, layer_base,
					    indices, blocks, n_blocks, stream);
	case 4:
		return launch_one<unsigned int, I>(grid, g, sg, ln, gather,
						   layer_base, indices, blocks,
						   n_blocks, stream);
	case 2:
		return launch_one<unsigned short, I>(grid, g, sg, ln, gather,
						     layer_base, indices,
						     blocks, n_blocks, stream);
	default:
		return launch_one<unsigned char, I>(grid, g, sg, ln, gather,
						    layer_base, indices, blocks,
						    n_blocks, stream);
	}
}

int range_ok(const struct kvt_geom *g, int64_t layer_first, int64_t n_layers)
{
	return layer_first >= 0 && n_layers > 0 &&
	       layer_first <= g->n_layers - n_layers;
}

int kernel_copy(int32_t gather, const struct kvt_geom *g, int64_t layer_first,
		int64_t n_layers, void *const *layer_base,
		const int64_t *indices, void *const *blocks, int64_t n_blocks,
		uint32_t ptr_align, void *stream)
{
	struct kvt_seg sg;
	struct launch_shape ln;
	int64_t lanes, per_cta, ctas;
	uint32_t width;
	dim3 grid;
	cudaError_t e;

	if (!g || n_blocks < 0 || !range_ok(g, layer_first, n_layers))
		return -EINVAL;
	if (n_blocks == 0)
		return 0;
	if (!layer_base || !indices || !blocks)
		return -EINVAL;

	kvt_seg_plan(g, layer_first, n_layers, &sg);
	width = kvt_seg_vec_bytes(g, &sg, ptr_align);
	ln.vps = sg.bytes / width;
	ln.chunk_vecs = ln.vps < kChunkVecs ? ln.vps : kChunkVecs;
	ln.n_chunks = (ln.vps + ln.chunk_vecs - 1) / ln.chunk_vecs;
	if (sg.per_block > INT64_MAX / ln.n_chunks)
		return -EINVAL;
	ln.items = sg.per_block * ln.n_chunks;

	/* Lanes per item: enough to cover a chunk once, up to a CTA. */
	ln.lanes_log2 = 0;
	while (((int64_t)1 << ln.lanes_log2) < ln.chunk_vecs &&
	       ((int64_t)1 << ln.lanes_log2) < kThreads)
		ln.lanes_log2++;
	lanes = (int64_t)1 << ln.lanes_log2;
	per_cta = kThreads / lanes;

	ctas = (ln.items + per_cta - 1) / per_cta;
	grid.x = (unsigned)(ctas < kMaxGridX ? ctas : kMaxGridX);
	grid.y = (unsigned)(n_blocks < kMaxGridY ? n_blocks : kMaxGridY);
	grid.z = 1;

	if (ln.items <= INT32_MAX)
		e = launch_width<uint32_t>(width, grid, g, &sg, &ln, gather,
					   layer_base, indices, blocks,
					   n_blocks, (cudaStream_t)stream);
	else
		e = launch_width<int64_t>(width, grid, g, &sg, &ln, gather,
					  layer_base, indices, blocks, n_blocks,
					  (cudaStream_t)stream);
	return e == cudaSuccess ? 0 : kvt_cuda_errno(e);
}

/* Copies per cudaMemcpyBatchAsync call, to bound one call's arrays. */
constexpr int64_t kBatchMax = 4096;

int batch_copy(int dir, const struct kvt_geom *g, int64_t layer_first,
	       int64_t n_layers, void *const *layer_base,
	       const int64_t *indices, void *const *blocks, int64_t n_blocks,
	       void *stream)
{
#if CUDART_VERSION >= 12080
	void **dsts = NULL;
	const void **srcs = NULL;
	size_t *sizes = NULL;
	int64_t n;
	int r = 0;

	if (!g || n_blocks < 0 || !range_ok(g, layer_first, n_layers))
		return -EINVAL;
	if (g->index_kind != KVT_INDEX_PAGE)
		return -EOPNOTSUPP;
	if (!kvt_cuda_batch_ok(stream))
		return -EOPNOTSUPP;
	if (n_blocks == 0)
		return 0;
	if (!layer_base || !indices || !blocks)
		return -EINVAL;

	n = kvt_batch_count(g, layer_first, n_layers, layer_base, n_blocks);
	if (n < 0)
		return (int)n;
	if ((uint64_t)n > SIZE_MAX / sizeof(void *))
		return -ENOMEM;
	dsts = (void **)malloc((size_t)n * sizeof(*dsts));
	srcs = (const void **)malloc((size_t)n * sizeof(*srcs));
	sizes = (size_t *)malloc((size_t)n * sizeof(*sizes));
	if (!dsts || !srcs || !sizes) {
		r = -ENOMEM;
		goto out;
	}
	n = kvt_batch_build(g, dir, layer_first, n_layers, layer_base,
			    indices, blocks, n_blocks, dsts, srcs, sizes);
	if (n < 0) {
		r = (int)n;
		goto out;
	}

	for (int64_t off = 0; off < n; off += kBatchMax) {
		size_t cnt = (size_t)(n - off < kBatchMax ? n - off : kBatchMax);
		struct cudaMemcpyAttributes attr = {};
		size_t attr_idx = 0;
		cudaError_t e;

		/* Stream order: a store reads engine pages the compute
		 * stream has just written, a load overwrites pages that
		 * earlier work on this stream may still read.  The location
		 * hints stay zero; they apply to managed memory only. */
		attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
		attr.flags = cudaMemcpyFlagPreferOverlapWithCompute;
#if CUDART_VERSION >= 13000
		e = cudaMemcpyBatchAsync(dsts + off, srcs + off, sizes + off,
					 cnt, &attr, &attr_idx, 1,
					 (cudaStream_t)stream);
#else
		/* 12.8 and 12.9 take non-const arrays and a failIdx. */
		size_t fail_idx = 0;

		e = cudaMemcpyBatchAsync(dsts + off, (void **)(srcs + off),
					 sizes + off, cnt, &attr, &attr_idx, 1,
					 &fail_idx, (cudaStream_t)stream);
#endif
		if (e != cudaSuccess) {
			r = kvt_cuda_errno(e);
			goto out;
		}
	}
out:
	free(dsts);
	free(srcs);
	free(sizes);
	return r;
#else
	(void)dir;
	(void)g;
	(void)layer_first;
	(void)n_layers;
	(void)layer_base;
	(void)indices;
	(void)blocks;
	(void)n_blocks;
	(void)stream;
	return -EOPNOTSUPP;
#endif
}

} /* namespace */

extern "C" {

int kvt_cuda_errno(int cuda_error)
{
	switch ((cudaError_t)cuda_error) {
	case cudaSuccess:
		return 0;
	case cudaErrorMemoryAllocation:
		return -ENOMEM;
	case cudaErrorNoDevice:
	case cudaErrorInsufficientDriver:
	case cudaErrorInvalidDevice:
		return -ENODEV;
	case cudaErrorInvalidValue:
	case cudaErrorInvalidResourceHandle:
	case cudaErrorInvalidDevicePointer:
		return -EINVAL;
	case cudaErrorNotSupported:
		return -EOPNOTSUPP;
	case cudaErrorNotReady:
		return -EAGAIN;
	default:
		return -EIO;
	}
}

int kvt_cuda_batch_ok(void *stream)
{
#if CUDART_VERSION >= 12080
	int driver = 0;

	/* The legacy default stream is refused by the API itself; a 12.x
	 * runtime may run on an older 12.x driver without the entry point. */
	if (!stream || (cudaStream_t)stream == cudaStreamLegacy)
		return 0;
	if (cudaDriverGetVersion(&driver) != cudaSuccess)
		return 0;
	return driver >= 12080;
#else
	(void)stream;
	return 0;
#endif
}

int kvt_cuda_path(const struct kvt_geom *g, int64_t layer_first,
		  int64_t n_layers, void *const *layer_base, void *stream)
{
	return kvt_copy_path(g, layer_first, n_layers, layer_base,
			     kvt_cuda_batch_ok(stream));
}

int kvt_cuda_gather(const struct kvt_geom *g, int64_t layer_first,
		    int64_t n_layers, void *const *layer_base,
		    const int64_t *indices, void *const *blocks,
		    int64_t n_blocks, uint32_t ptr_align, void *stream)
{
	return kernel_copy(1, g, layer_first, n_layers, layer_base, indices,
			   blocks, n_blocks, ptr_align, stream);
}

int kvt_cuda_scatter(const struct kvt_geom *g, int64_t layer_first,
		     int64_t n_layers, void *const *layer_base,
		     const int64_t *indices, void *const *blocks,
		     int64_t n_blocks, uint32_t ptr_align, void *stream)
{
	return kernel_copy(0, g, layer_first, n_layers, layer_base, indices,
			   blocks, n_blocks, ptr_align, stream);
}

int kvt_cuda_gather_batch(const struct kvt_geom *g, int64_t layer_first,
			  int64_t n_layers, void *const *layer_base,
			  const int64_t *indices, void *const *blocks,
			  int64_t n_blocks, void *stream)
{
	return batch_copy(KVT_COPY_GATHER, g, layer_first, n_layers,
			  layer_base, indices, blocks, n_blocks, stream);
}

int kvt_cuda_scatter_batch(const struct kvt_geom *g, int64_t layer_first,
			   int64_t n_layers, void *const *layer_base,
			   const int64_t *indices, void *const *blocks,
			   int64_t n_blocks, void *stream)
{
	return batch_copy(KVT_COPY_SCATTER, g, layer_first, n_layers,
			  layer_base, indices, blocks, n_blocks, stream);
}

} /* extern "C" */
