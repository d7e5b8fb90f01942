/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Gather/scatter kernels and the batched-memcpy path between an engine's
 * paged KV cache and kvtier blocks (see layout_cuda.h).
 *
 * The kernel is one launch for any number of blocks.  Each work item is a
 * chunk of one segment (layout_seg.h) of one block; a group of lanes moves
 * it with the widest access every segment start allows, so NHD caches move
 * whole pages in 16-byte accesses while HND or odd-sized heads fall back to
 * narrower ones without a second code path.  The launch takes at most its
 * CTA budget (kvt_launch_plan(), layout_plan.c) and walks the rest of the
 * work with the same CTAs, so that a copy over PCIe, which keeps its SMs
 * waiting on the link, leaves the others to the engine's compute.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include <cuda_runtime.h>

#include "layout_cuda.h"

namespace {

/* Loads in flight per lane before their stores. */
constexpr int kUnroll = 4;

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
__global__ void __launch_bounds__(KVT_CTA_THREADS)
copy_kernel(struct kvt_geom g, struct kvt_seg sg, struct kvt_launch ln,
	    int32_t gather, uint8_t *const *layer_base, const int64_t *indices,
	    uint8_t *const *blocks, int64_t n_blocks)
{
	/* A CTA has ln.threads = lanes * per_cta threads; the lanes of one
	 * work item need not fill a power of two. */
	const int64_t lanes = ln.lanes;
	const int64_t lane = (int64_t)(threadIdx.x % (unsigned)ln.lanes);
	const I per_cta = (I)ln.per_cta;
	const I sub = (I)(threadIdx.x / (unsigned)ln.lanes);

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
			ep = reinterpret_cast<V *>(
				layer_base[kvt_geom_base_index(&g, l, p)] + eng);
			if (gather)
				copy_vecs<V>(bp, ep, v0 + lane, v1, lanes);
			else
				copy_vecs<V>(ep, bp, v0 + lane, v1, lanes);
		}
	}
}

template <typename V, typename I>
cudaError_t launch_one(dim3 grid, const struct kvt_geom *g,
		       const struct kvt_seg *sg, const struct kvt_launch *ln,
		       int32_t gather, void *const *layer_base,
		       const int64_t *indices, void *const *blocks,
		       int64_t n_blocks, cudaStream_t stream)
{
	struct kvt_geom gv = *g;
	struct kvt_seg sv = *sg;
	struct kvt_launch lv = *ln;
	void *args[] = {&gv, &sv, &lv, &gather, (void *)&layer_base,
			(void *)&indices, (void *)&blocks, &n_blocks};

	/* cudaLaunchKernel reports this launch's own error, where a launch
	 * with <<<>>> and cudaGetLastError() could also pick up (and clear)
	 * an earlier error of the caller's. */
	return cudaLaunchKernel((const void *)copy_kernel<V, I>, grid,
				dim3(ln->threads), args, 0, stream);
}

template <typename I>
cudaError_t launch_width(uint32_t width, dim3 grid, const struct kvt_geom *g,
			 const struct kvt_seg *sg,
			 const struct kvt_launch *ln, int32_t gather,
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
		uint32_t ptr_align, uint32_t max_ctas, void *stream)
{
	struct kvt_seg sg;
	struct kvt_launch ln;
	uint32_t width;
	cudaError_t e;
	dim3 grid;

	if (!g || n_blocks < 0 || !range_ok(g, layer_first, n_layers))
		return -EINVAL;
	if (n_blocks == 0)
		return 0;
	if (!layer_base || !indices || !blocks)
		return -EINVAL;

	kvt_seg_plan(g, layer_first, n_layers, &sg);
	width = kvt_seg_vec_bytes(g, &sg, ptr_align);
	if (kvt_launch_plan(sg.bytes / width, sg.per_block, n_blocks, max_ctas,
			    &ln) < 0)
		return -EINVAL;
	grid = dim3(ln.grid_x, ln.grid_y, 1);
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

#if CUDART_VERSION >= 12080
cudaError_t batch_call(int dir, void *const *dsts, const void *const *srcs,
		       const size_t *sizes, size_t cnt, cudaStream_t stream)
{
	struct cudaMemcpyAttributes attr = {};
	size_t attr_idx = 0;

	/* A gather reads engine pages the compute stream has just written:
	 * stream order.  A scatter reads pool memory nothing on the GPU
	 * writes while the lease holds: any order, so the engines may start
	 * reading before the stream reaches the copy.  Its writes stay in
	 * stream order.  The location hints stay zero; they apply to
	 * managed memory only. */
	attr.srcAccessOrder = dir == KVT_COPY_SCATTER
				      ? cudaMemcpySrcAccessOrderAny
				      : cudaMemcpySrcAccessOrderStream;
	attr.flags = cudaMemcpyFlagPreferOverlapWithCompute;
#if CUDART_VERSION >= 13000
	return cudaMemcpyBatchAsync((void **)dsts, (const void **)srcs,
				    sizes, cnt, &attr, &attr_idx, 1, stream);
#else
	/* 12.8 and 12.9 take non-const arrays and a failIdx. */
	size_t fail_idx = 0;

	return cudaMemcpyBatchAsync((void **)dsts, (void **)srcs,
				    (size_t *)sizes, cnt, &attr, &attr_idx, 1,
				    &fail_idx, stream);
#endif
}
#endif

int batch_copy(int dir, const struct kvt_geom *g, int64_t layer_first,
	       int64_t n_layers, void *const *layer_base,
	       const int64_t *indices, void *const *blocks, int64_t n_blocks,
	       void *stream)
{
	void **dsts = NULL;
	const void **srcs = NULL;
	size_t *sizes = NULL;
	int64_t n;
	int r;

	if (!g || n_blocks < 0 || !range_ok(g, layer_first, n_layers))
		return -EINVAL;
	if (g->index_kind != KVT_INDEX_PAGE || !kvt_cuda_batch_ok(stream))
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
	r = -ENOMEM;
	if (dsts && srcs && sizes) {
		n = kvt_batch_build(g, dir, layer_first, n_layers, layer_base,
				    indices, blocks, n_blocks, dsts, srcs,
				    sizes);
		r = n < 0 ? (int)n
			  : kvt_cuda_copy_runs(dir, dsts, srcs, sizes, n,
					       stream);
	}
	free(dsts);
	free(srcs);
	free(sizes);
	return r;
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

int kvt_cuda_copy_runs(int dir, void *const *dsts, const void *const *srcs,
		       const size_t *sizes, int64_t n, void *stream)
{
#if CUDART_VERSION >= 12080
	if (n < 0 || (dir != KVT_COPY_GATHER && dir != KVT_COPY_SCATTER))
		return -EINVAL;
	if (!kvt_cuda_batch_ok(stream))
		return -EOPNOTSUPP;
	if (n && (!dsts || !srcs || !sizes))
		return -EINVAL;
	for (int64_t off = 0; off < n; off += KVT_BATCH_MAX) {
		size_t cnt = (size_t)(n - off < KVT_BATCH_MAX ? n - off
							      : KVT_BATCH_MAX);
		cudaError_t e = batch_call(dir, dsts + off, srcs + off,
					   sizes + off, cnt,
					   (cudaStream_t)stream);

		if (e != cudaSuccess)
			return kvt_cuda_errno(e);
	}
	return 0;
#else
	(void)dir;
	(void)dsts;
	(void)srcs;
	(void)sizes;
	(void)n;
	(void)stream;
	return -EOPNOTSUPP;
#endif
}

int kvt_cuda_gather(const struct kvt_geom *g, int64_t layer_first,
		    int64_t n_layers, void *const *layer_base,
		    const int64_t *indices, void *const *blocks,
		    int64_t n_blocks, uint32_t ptr_align, uint32_t max_ctas,
		    void *stream)
{
	return kernel_copy(1, g, layer_first, n_layers, layer_base, indices,
			   blocks, n_blocks, ptr_align, max_ctas, stream);
}

int kvt_cuda_scatter(const struct kvt_geom *g, int64_t layer_first,
		     int64_t n_layers, void *const *layer_base,
		     const int64_t *indices, void *const *blocks,
		     int64_t n_blocks, uint32_t ptr_align, uint32_t max_ctas,
		     void *stream)
{
	return kernel_copy(0, g, layer_first, n_layers, layer_base, indices,
			   blocks, n_blocks, ptr_align, max_ctas, stream);
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
