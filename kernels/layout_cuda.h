/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GPU copy path between an engine's paged KV cache and kvtier blocks.
 *
 * Two ways to move the bytes, both one submission per batch of blocks:
 *
 *   - a gather/scatter kernel (kvt_cuda_gather/kvt_cuda_scatter) that
 *     walks every segment of every block (layout_seg.h) with the widest
 *     access the alignment allows;
 *   - cudaMemcpyBatchAsync over the contiguous segments
 *     (kvt_cuda_gather_batch/kvt_cuda_scatter_batch), where the toolkit
 *     and driver have it (CUDA 12.8+), so that copy engines move long runs
 *     while the SMs compute.
 *
 * Which one a copy takes is decided in one place, kvt_copy_path(), by a
 * cost model (struct kvt_copy_model) that measurements retune without
 * touching callers.  The kernel runs within a CTA budget, so that a
 * prefetch leaves the SMs to the attention it is meant to hide behind.
 *
 * The host-side helpers (kvt_geom_from_layout and friends, layout_plan.c)
 * are plain C and need no CUDA; the launchers live in layout_cuda.cu.
 * Launchers take the stream as void * (a cudaStream_t) and return 0 or a
 * negative errno; none of them synchronises.
 */
#ifndef KVT_LAYOUT_CUDA_H
#define KVT_LAYOUT_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "codec_tile.h"
#include "kvtier-layout.h"
#include "layout.h"
#include "layout_seg.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVT_COPY_GATHER 0  /* engine cache -> blocks */
#define KVT_COPY_SCATTER 1 /* blocks -> engine cache */

#define KVT_PATH_KERNEL 0 /* the gather/scatter kernel, within a CTA budget */
#define KVT_PATH_BATCH 1  /* the copy engines: cudaMemcpyBatchAsync over runs */

/* Threads of a copy CTA at most, and vectors one work item moves at most. */
#define KVT_CTA_THREADS 256
#define KVT_CHUNK_VECS 1024
/* Runs per cudaMemcpyBatchAsync call, to bound one call's arrays. */
#define KVT_BATCH_MAX 4096
/* CTAs a copy kernel takes when its caller sets no budget: enough to keep
 * some 128 KiB of loads in flight over PCIe, few enough to leave almost
 * every SM to attention and GEMMs (an H200 has 132). */
#define KVT_CTA_BUDGET_DEFAULT 8

/*
 * The cost model that picks a copy's path.  Times in ns, bandwidths in
 * bytes per ns (GB/s).  The defaults are first guesses, to be replaced by
 * the figures tests/gpu/bench-gpu measures (docs/benchmarks.md says which
 * still wait for a GPU).
 */
struct kvt_copy_model {
	double link_bpns;  /* host <-> device bandwidth of the copy engines */
	double call_ns;    /* one cudaMemcpyBatchAsync call (CPU) */
	double run_ns;     /* one run of it: building the entry on the CPU
			    * and the engine's per-copy cost */
	double launch_ns;  /* one kernel launch */
	double cta_bpns;   /* bytes per ns one copy CTA moves over PCIe */
	uint32_t max_ctas; /* the kernel's CTA budget; 0: unbounded */
};

/* Estimated times of one copy by each path (kvt_copy_cost). */
struct kvt_copy_cost {
	double batch_ns;
	double kernel_ns;
};

/*
 * The shape of one kernel launch (kvt_launch_plan): work items are chunks
 * of segments; a group of `lanes` threads moves one, per_cta groups share
 * a CTA.  lanes need not be a power of two, so a 1152-byte MLA row (72
 * vectors of 16 bytes) gets 72 lanes, not 128 of which 56 idle.
 */
struct kvt_launch {
	int64_t vps;        /* vectors per segment */
	int64_t chunk_vecs; /* vectors per work item */
	int64_t n_chunks;   /* work items per segment */
	int64_t items;      /* work items per block */
	int32_t lanes;      /* threads per work item */
	int32_t per_cta;    /* work items per CTA */
	uint32_t threads;   /* lanes * per_cta <= KVT_CTA_THREADS */
	uint32_t grid_x;    /* CTAs along the items of a block */
	uint32_t grid_y;    /* CTAs along blocks */
};

/* ---- host helpers (layout_plan.c) ---------------------------------- */

/**
 * Validates layout for blocks of block_tokens tokens (the checks of
 * kvt_layout_gather) and widens it into *ret.  layer_base is not looked at.
 * \return 0, -EINVAL, or -EOPNOTSUPP for a layout with a codec (which
 *         kvt_codec_geom_from_layout() takes)
 */
int kvt_geom_from_layout(const kvt_layout *layout, uint32_t block_tokens,
			 struct kvt_geom *ret);

/**
 * The same for a layout with a codec (layout->codec and layout->dtype):
 * its geometry and its tiles (kvt_codec_geom_init()).
 * \return 0, or -EINVAL (codec none included)
 */
int kvt_codec_geom_from_layout(const kvt_layout *layout, uint32_t block_tokens,
			       struct kvt_codec_geom *ret);

/**
 * Checks every index as kvt_layout_gather does: pages >= 0, slots >= 0 or
 * -1, and no page whose offset leaves int64.  Checking before the first
 * launch is what keeps a refused copy from writing anything.
 *
 * indices: [n_blocks] (PAGE) or [n_blocks * block_tokens] (SLOT), host
 * \return 0 or -EINVAL
 */
int kvt_geom_check_indices(const struct kvt_geom *g, const int64_t *indices,
			   int64_t n_blocks);

/**
 * The largest power of two, at most 16, that divides every pointer.
 * ptrs: [n] host array
 */
uint32_t kvt_ptr_align(const void *const *ptrs, int64_t n);

/**
 * Bytes per access the kernel uses for segments sg: the largest power of
 * two <= 16 dividing the segment length, every stride that moves a
 * segment's start, and ptr_align.
 */
uint32_t kvt_seg_vec_bytes(const struct kvt_geom *g, const struct kvt_seg *sg,
			   uint32_t ptr_align);

/**
 * Length of the contiguous runs a copy of layers [layer_first,
 * layer_first + n_layers) is made of: a segment of kvt_seg_plan(), or a
 * whole range of layers when each layer's segment is a full layer of the
 * block and layer_base[l + 1] == layer_base[l] + that length (a
 * cross-layer cache).
 *
 * layer_base: [kvt_geom_n_bases(g)] host array of engine pointers
 */
int64_t kvt_copy_run_bytes(const struct kvt_geom *g, int64_t layer_first,
			   int64_t n_layers, void *const *layer_base);

/** The default model, with max_ctas = KVT_CTA_BUDGET_DEFAULT. */
void kvt_copy_model_default(struct kvt_copy_model *ret);

/**
 * The model's times for n_runs runs of `bytes` in all: the copy engines
 * pay call_ns per KVT_BATCH_MAX runs and run_ns per run on top of the
 * bytes at link_bpns; the kernel pays a launch and moves the bytes at
 * min(link_bpns, max_ctas * cta_bpns).
 */
void kvt_copy_cost(const struct kvt_copy_model *m, int64_t n_runs,
		   int64_t bytes, struct kvt_copy_cost *ret);

/**
 * THE path rule: KVT_PATH_BATCH when batch_ok (cudaMemcpyBatchAsync is
 * usable on this stream and every block is pinned), indices are pages
 * (slots may be padding, which needs zero fill) and the model says the
 * copy engines take no longer than the kernel within its budget (ties go
 * to the engines, which leave the SMs to compute); else KVT_PATH_KERNEL.
 * Pure, so that it is tested and retuned in one place.
 *
 * layer_base: [kvt_geom_n_bases(g)] host array
 */
int kvt_copy_path(const struct kvt_geom *g, int64_t layer_first,
		  int64_t n_layers, void *const *layer_base, int64_t n_blocks,
		  const struct kvt_copy_model *m, int batch_ok);

/**
 * The launch of a copy kernel over n_blocks blocks of per_block segments
 * of vps vectors each, within max_ctas CTAs (0: as many as cover the
 * work, up to the grid's limits).  Blocks past grid_y and items past
 * grid_x * per_cta are walked by the same CTAs in turn, so any number of
 * blocks (more than 65,535 too) is covered.
 * \return 0 or -EINVAL (vps or per_block < 1, or a count past int64)
 */
int kvt_launch_plan(int64_t vps, int64_t per_block, int64_t n_blocks,
		    uint32_t max_ctas, struct kvt_launch *ret);

/**
 * The run list of a batched copy: one (dst, src, size) per contiguous run
 * of layers [layer_first, layer_first + n_layers) of every block, in the
 * direction dir.  Runs never span two blocks, so a run never crosses from
 * one registered pool buffer into another.  Indices must be pages.
 *
 * layer_base: [kvt_geom_n_bases(g)] host array of engine pointers
 * indices:    [n_blocks] host array of pages
 * blocks:     [n_blocks] host array of block pointers
 * dsts, srcs, sizes: [kvt_batch_count()] filled
 * \return the number of runs or -EINVAL
 */
int64_t kvt_batch_count(const struct kvt_geom *g, int64_t layer_first,
			int64_t n_layers, void *const *layer_base,
			int64_t n_blocks);
int64_t kvt_batch_build(const struct kvt_geom *g, int dir,
			int64_t layer_first, int64_t n_layers,
			void *const *layer_base, const int64_t *indices,
			void *const *blocks, int64_t n_blocks, void **dsts,
			const void **srcs, size_t *sizes);

/* ---- launchers (layout_cuda.cu) ------------------------------------ */

/**
 * Gather layers [layer_first, layer_first + n_layers) of n_blocks blocks
 * from the engine cache into blocks, in one kernel launch of at most
 * max_ctas CTAs (kvt_launch_plan()).  Padding slots become zeros.  The arrays are read by the kernel, so they must be
 * device-readable (device memory, or mapped pinned host memory) and stay
 * unchanged until the launch completes.
 *
 * g:          a descriptor from kvt_geom_from_layout(), by value on the host
 * layer_base: [kvt_geom_n_bases(g)] device-readable array of engine
 *             pointers, each the base of one layer (or layer and plane) as
 *             in kvt_layout
 * indices:    [n_blocks] (PAGE) or [n_blocks * block_tokens] (SLOT),
 *             device-readable, checked by kvt_geom_check_indices()
 * blocks:     [n_blocks] device-readable array of device-accessible
 *             pointers, each to [kvt_geom_block_bytes(g)] bytes
 * ptr_align:  a power of two dividing every layer_base[l] and blocks[b]
 *             (kvt_ptr_align() over the host copies; 1 when unknown)
 * max_ctas:   the CTA budget; 0 covers the whole copy at once (device to
 *             device copies that nothing computes beside)
 * stream:     cudaStream_t
 * \return 0, -EINVAL on bad arguments, or a negative errno for the launch
 */
int kvt_cuda_gather(const struct kvt_geom *g, int64_t layer_first,
		    int64_t n_layers, void *const *layer_base,
		    const int64_t *indices, void *const *blocks,
		    int64_t n_blocks, uint32_t ptr_align, uint32_t max_ctas,
		    void *stream);

/** The inverse of kvt_cuda_gather; padding slots are skipped.  blocks as
 * there, read-only. */
int kvt_cuda_scatter(const struct kvt_geom *g, int64_t layer_first,
		     int64_t n_layers, void *const *layer_base,
		     const int64_t *indices, void *const *blocks,
		     int64_t n_blocks, uint32_t ptr_align, uint32_t max_ctas,
		     void *stream);

/**
 * Queue a run list (kvt_batch_build()) on the copy engines, in calls of
 * at most KVT_BATCH_MAX runs.  The arrays are read during the call and
 * may be reused when it returns.  A scatter's sources are pool memory
 * that nothing on the GPU writes, so the engines may read them out of
 * stream order (cudaMemcpySrcAccessOrderAny); a gather reads engine pages
 * the stream's earlier work writes, in stream order.  Every host pointer
 * must be pinned: the batch API would otherwise stage pageable memory
 * synchronously.
 *
 * dsts, srcs, sizes: [n] host arrays
 * stream:     cudaStream_t; not the legacy default stream
 * \return 0, -EOPNOTSUPP (see kvt_cuda_batch_ok), -EINVAL, or a negative
 *         errno from CUDA
 */
int kvt_cuda_copy_runs(int dir, void *const *dsts, const void *const *srcs,
		       const size_t *sizes, int64_t n, void *stream);

/**
 * Gather through cudaMemcpyBatchAsync: kvt_batch_build() into arrays of
 * its own, then kvt_cuda_copy_runs() (the client keeps its run arrays and
 * calls those two itself).  Page indices only.
 *
 * layer_base: [kvt_geom_n_bases(g)] host array of device pointers
 * indices:    [n_blocks] host array of pages
 * blocks:     [n_blocks] host array of pointers (pinned/registered host
 *             or device), each to [kvt_geom_block_bytes(g)] bytes
 * stream:     cudaStream_t; not the legacy default stream
 * \return 0, -EOPNOTSUPP where the toolkit, the driver or the stream
 *         cannot batch (see kvt_cuda_batch_ok), -EINVAL, or a negative
 *         errno from CUDA
 */
int kvt_cuda_gather_batch(const struct kvt_geom *g, int64_t layer_first,
			  int64_t n_layers, void *const *layer_base,
			  const int64_t *indices, void *const *blocks,
			  int64_t n_blocks, void *stream);

/** The inverse of kvt_cuda_gather_batch. */
int kvt_cuda_scatter_batch(const struct kvt_geom *g, int64_t layer_first,
			   int64_t n_layers, void *const *layer_base,
			   const int64_t *indices, void *const *blocks,
			   int64_t n_blocks, void *stream);

/**
 * \return 1 when cudaMemcpyBatchAsync can be used on stream: built with
 *         CUDA 12.8 or newer, a driver of 12.8 or newer, and a stream other
 *         than the legacy default stream; else 0.
 */
int kvt_cuda_batch_ok(void *stream);

/**
 * The codecs' kernels (codec_cuda.cu): quantise layers [layer_first,
 * layer_first + n_layers) of n_blocks blocks out of the engine's cache
 * into coded blocks of cg (proto/codec.h; the same bytes as the CPU
 * path's kvt_layout_gather), or dequantise them back; padding slots read
 * as zeros and are not written.  One launch, at most max_ctas CTAs of
 * KVT_CODEC_THREADS (0: as many as there are tiles and blocks).
 *
 * cg:         from kvt_codec_geom_from_layout(), by value on the host
 * layer_base, indices: as for kvt_cuda_gather, device-readable
 * blocks:     [n_blocks] device-readable array of device-accessible
 *             pointers, each to [cg->layer_bytes * cg->g.n_layers] bytes
 * ptr_align:  a power of two dividing every layer_base[l] and blocks[b]
 * \return 0, -EINVAL on bad arguments, -EOPNOTSUPP for tiles whose
 *         state passes KVT_CODEC_SMEM_MAX (kvt_codec_smem_bytes()), or a
 *         negative errno for the launch
 */
int kvt_cuda_codec_gather(const struct kvt_codec_geom *cg, int64_t layer_first,
			  int64_t n_layers, void *const *layer_base, const int64_t *indices,
			  void *const *blocks, int64_t n_blocks, uint32_t ptr_align,
			  uint32_t max_ctas, void *stream);

/** The inverse of kvt_cuda_codec_gather; blocks as there, read-only. */
int kvt_cuda_codec_scatter(const struct kvt_codec_geom *cg, int64_t layer_first,
			   int64_t n_layers, void *const *layer_base, const int64_t *indices,
			   void *const *blocks, int64_t n_blocks, uint32_t ptr_align,
			   uint32_t max_ctas, void *stream);

/** A cudaError_t as a negative errno (-ENOMEM, -ENODEV, -EINVAL, -EIO). */
int kvt_cuda_errno(int cuda_error);

#ifdef __cplusplus
}
#endif

#endif
