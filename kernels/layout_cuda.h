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
 * Which one a copy takes is decided in one place, kvt_copy_path(), so
 * that measurements can retune it without touching callers.
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

#include "kvtier-layout.h"
#include "layout.h"
#include "layout_seg.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVT_COPY_GATHER 0  /* engine cache -> blocks */
#define KVT_COPY_SCATTER 1 /* blocks -> engine cache */

#define KVT_PATH_KERNEL 0 /* the gather/scatter kernel */
#define KVT_PATH_BATCH 1  /* cudaMemcpyBatchAsync over contiguous runs */

/*
 * Contiguous runs at least this long go through cudaMemcpyBatchAsync.
 * A first guess, not a measurement: copy engines reach full PCIe speed
 * from a few tens of KiB per copy, and below that the per-copy overhead
 * of the batch and the SMs' finer granularity favour the kernel.
 */
#define KVT_BATCH_MIN_RUN (64 * 1024)

/* ---- host helpers (layout_plan.c) ---------------------------------- */

/**
 * Validates layout for blocks of block_tokens tokens (the checks of
 * kvt_layout_gather) and widens it into *ret.  layer_base is not looked at.
 * \return 0 or -EINVAL
 */
int kvt_geom_from_layout(const kvt_layout *layout, uint32_t block_tokens,
			 struct kvt_geom *ret);

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
 * layer_base: [g->n_layers] host array of engine pointers
 */
int64_t kvt_copy_run_bytes(const struct kvt_geom *g, int64_t layer_first,
			   int64_t n_layers, void *const *layer_base);

/**
 * THE path rule: KVT_PATH_BATCH when batch_ok (cudaMemcpyBatchAsync is
 * usable on this stream), indices are pages (slots may be padding, which
 * needs zero fill) and runs are at least KVT_BATCH_MIN_RUN; else
 * KVT_PATH_KERNEL.  Kept pure so that it can be tested and retuned from
 * measurements (tests/gpu/bench-gpu) in one place.
 *
 * layer_base: [g->n_layers] host array
 */
int kvt_copy_path(const struct kvt_geom *g, int64_t layer_first,
		  int64_t n_layers, void *const *layer_base, int batch_ok);

/**
 * The run list of a batched copy: one (dst, src, size) per contiguous run
 * of layers [layer_first, layer_first + n_layers) of every block, in the
 * direction dir.  Runs never span two blocks, so a run never crosses from
 * one registered pool buffer into another.  Indices must be pages.
 *
 * layer_base: [g->n_layers] host array of engine pointers
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
 * from the engine cache into blocks, in one kernel launch.  Padding slots
 * become zeros.  The arrays are read by the kernel, so they must be
 * device-readable (device memory, or mapped pinned host memory) and stay
 * unchanged until the launch completes.
 *
 * g:          a descriptor from kvt_geom_from_layout(), by value on the host
 * layer_base: [g->n_layers] device-readable array of engine pointers, each
 *             the base of one layer as in kvt_layout
 * indices:    [n_blocks] (PAGE) or [n_blocks * block_tokens] (SLOT),
 *             device-readable, checked by kvt_geom_check_indices()
 * blocks:     [n_blocks] device-readable array of device-accessible
 *             pointers, each to [kvt_geom_block_bytes(g)] bytes
 * ptr_align:  a power of two dividing every layer_base[l] and blocks[b]
 *             (kvt_ptr_align() over the host copies; 1 when unknown)
 * stream:     cudaStream_t
 * \return 0, -EINVAL on bad arguments, or a negative errno for the launch
 */
int kvt_cuda_gather(const struct kvt_geom *g, int64_t layer_first,
		    int64_t n_layers, void *const *layer_base,
		    const int64_t *indices, void *const *blocks,
		    int64_t n_blocks, uint32_t ptr_align, void *stream);

/** The inverse of kvt_cuda_gather; padding slots are skipped.  blocks as
 * there, read-only. */
int kvt_cuda_scatter(const struct kvt_geom *g, int64_t layer_first,
		     int64_t n_layers, void *const *layer_base,
		     const int64_t *indices, void *const *blocks,
		     int64_t n_blocks, uint32_t ptr_align, void *stream);

/**
 * Gather through cudaMemcpyBatchAsync; the arrays are host arrays, read
 * during the call.  Page indices only.
 *
 * layer_base: [g->n_layers] host array of device pointers
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

/** kvt_copy_path() with batch_ok from kvt_cuda_batch_ok(stream). */
int kvt_cuda_path(const struct kvt_geom *g, int64_t layer_first,
		  int64_t n_layers, void *const *layer_base, void *stream);

/** A cudaError_t as a negative errno (-ENOMEM, -ENODEV, -EINVAL, -EIO). */
int kvt_cuda_errno(int cuda_error);

#ifdef __cplusplus
}
#endif

#endif
