/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GPU path's codecs: gather-and-quantise and dequantise-and-scatter
 * between an engine's paged cache and coded blocks (proto/codec.h), one
 * launch for any number of blocks.  A CTA codes one (block, layer,
 * plane, head) tile at a time, in the steps of codec_tile.h, and walks
 * the rest of the work within its CTA budget as the copy kernel does
 * (layout_cuda.cu): a store coded over PCIe leaves the other SMs to the
 * engine.
 */
#include <errno.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "codec_tile.h"
#include "layout_cuda.h"

namespace {

/* Runs a step on every thread of the CTA, then a barrier. */
struct cta_exec {
	__device__ int64_t threads() const
	{
		return blockDim.x;
	}
	__device__ void run(const struct kvt_codec_tile *c, int step, int64_t arg)
	{
		kvt_codec_step(c, step, arg, threadIdx.x, blockDim.x);
		__syncthreads();
	}
};

/*
 * layer_base: [kvt_geom_n_bases(&cg.g)] engine pointers
 * indices:    [n_blocks] pages or [n_blocks * block_tokens] slots
 * blocks:     [n_blocks] pointers to the part's coded bytes
 *             (cg.layer_bytes * cg.g.n_layers)
 * dynamic shared memory: kvt_codec_smem_bytes(&cg, blockDim.x)
 */
__global__ void __launch_bounds__(KVT_CODEC_THREADS)
codec_kernel(struct kvt_codec_geom cg, int64_t layer_first, int64_t tiles, int32_t to_block,
	     int32_t access, uint8_t *const *layer_base, const int64_t *indices,
	     uint8_t *const *blocks, int64_t n_blocks)
{
	extern __shared__ int64_t smem[];
	struct cta_exec x;

	for (int64_t b = blockIdx.y; b < n_blocks; b += gridDim.y)
		for (int64_t s = blockIdx.x; s < tiles; s += gridDim.x) {
			struct kvt_codec_tile c;

			kvt_codec_tile_setup(&c, &cg, layer_first, s, layer_base, indices,
					     blocks[b], b, access, smem);
			kvt_codec_tile_run(x, &c, to_block);
		}
}

int codec_copy(int32_t to_block, const struct kvt_codec_geom *cg, int64_t layer_first,
	       int64_t n_layers, void *const *layer_base, const int64_t *indices,
	       void *const *blocks, int64_t n_blocks, uint32_t ptr_align, uint32_t max_ctas,
	       void *stream)
{
	struct kvt_codec_geom gv;
	int64_t tiles, smem, gy, gx;
	int32_t access;
	cudaError_t e;

	if (!cg || n_blocks < 0 || layer_first < 0 || n_layers <= 0 ||
	    layer_first > cg->g.n_layers - n_layers)
		return -EINVAL;
	if (n_blocks == 0)
		return 0;
	if (!layer_base || !indices || !blocks)
		return -EINVAL;
	smem = kvt_codec_smem_bytes(cg, KVT_CODEC_THREADS);
	if (smem > KVT_CODEC_SMEM_MAX)
		return -EOPNOTSUPP;

	gv = *cg;
	tiles = n_layers * cg->g.planes * cg->g.heads;
	access = (int32_t)kvt_codec_access(cg, ptr_align);
	gy = n_blocks < 65535 ? n_blocks : 65535;
	if (max_ctas && gy > max_ctas)
		gy = max_ctas;
	gx = max_ctas ? max_ctas / gy : tiles;
	gx = gx < 1 ? 1 : gx > tiles ? tiles : gx;
	gx = gx > INT32_MAX ? INT32_MAX : gx;
	{
		void *args[] = {&gv,	     &layer_first,	  &tiles,   &to_block,
				&access,     (void *)&layer_base, (void *)&indices,
				(void *)&blocks, &n_blocks};

		e = cudaLaunchKernel((const void *)codec_kernel, dim3((unsigned)gx, (unsigned)gy),
				     dim3(KVT_CODEC_THREADS), args, (size_t)smem,
				     (cudaStream_t)stream);
	}
	return e == cudaSuccess ? 0 : kvt_cuda_errno(e);
}

} /* namespace */

extern "C" {

int kvt_cuda_codec_gather(const struct kvt_codec_geom *cg, int64_t layer_first,
			  int64_t n_layers, void *const *layer_base, const int64_t *indices,
			  void *const *blocks, int64_t n_blocks, uint32_t ptr_align,
			  uint32_t max_ctas, void *stream)
{
	return codec_copy(1, cg, layer_first, n_layers, layer_base, indices, blocks, n_blocks,
			  ptr_align, max_ctas, stream);
}

int kvt_cuda_codec_scatter(const struct kvt_codec_geom *cg, int64_t layer_first,
			   int64_t n_layers, void *const *layer_base, const int64_t *indices,
			   void *const *blocks, int64_t n_blocks, uint32_t ptr_align,
			   uint32_t max_ctas, void *stream)
{
	return codec_copy(0, cg, layer_first, n_layers, layer_base, indices, blocks, n_blocks,
			  ptr_align, max_ctas, stream);
}

} /* extern "C" */
