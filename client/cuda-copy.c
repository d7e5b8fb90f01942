/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The copies of a CUDA job, queued on its stream (cuda-submit.c has found
 * the blocks): for each layer group of the block (a part), the path the
 * cost model picks (kernels/layout_plan.c), then either the context's run
 * list on the copy engines or the kernel over arrays uploaded in one copy
 * for the whole job.  A load is queued layer by layer, with the layer's
 * event after each.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "cuda-internal.h"
#include "layout_cuda.h"

/* The arrays one part's kernel launches read. */
struct part_arrays {
	void **layer_base; /* [n_bases] */
	int64_t *indices;  /* [n_q * per] */
	void **blocks;     /* [n_q] device addresses of the part's bytes */
	uint32_t align;    /* common to the bases and the block addresses */
};

static size_t part_bytes(const struct part *p, size_t n_q)
{
	return (size_t)kvt_geom_n_bases(&p->g) * sizeof(void *) +
	       n_q * p->per * sizeof(int64_t) + n_q * sizeof(void *);
}

/* Where each part's arrays lie in a buffer at base. */
static void arrays_at(uint8_t *base, const struct part *parts, uint32_t n,
		      size_t n_q, struct part_arrays *ret)
{
	for (uint32_t k = 0; k < n; k++) {
		size_t nb = (size_t)kvt_geom_n_bases(&parts[k].g);

		ret[k].layer_base = (void **)base;
		ret[k].indices = (int64_t *)(base + nb * sizeof(void *));
		ret[k].blocks = (void **)(base + nb * sizeof(void *) +
					  n_q * parts[k].per * sizeof(int64_t));
		base += part_bytes(&parts[k], n_q);
	}
}

/* Uploads every kernel part's arrays in one copy on st; *ret_dev[k] gets
 * where part k's are on the device.  blk_dev: [n_parts][n_q]. */
static int job_upload(kvt_cuda_job *job, const struct part *parts,
		      uint32_t n_parts, void **blk_dev, cudaStream_t st,
		      struct part_arrays *ret_dev)
{
	kvt_cuda_ctx *ctx = job->ctx;
	struct part_arrays ha[KVT_MAX_GROUPS];
	size_t bytes = 0, n_q = job->n_q;
	cudaError_t e;
	int r;

	for (uint32_t k = 0; k < n_parts; k++)
		bytes += part_bytes(&parts[k], n_q);
	r = cuda_meta_get(ctx, bytes, &job->meta);
	if (r < 0)
		return r;
	arrays_at(job->meta->host, parts, n_parts, n_q, ha);
	arrays_at(job->meta->dev, parts, n_parts, n_q, ret_dev);
	for (uint32_t k = 0; k < n_parts; k++) {
		const struct part *p = &parts[k];
		int64_t nb = kvt_geom_n_bases(&p->g);
		void **blk = blk_dev + k * n_q;
		uint32_t a;

		memcpy(ha[k].layer_base, p->layout->layer_base,
		       (size_t)nb * sizeof(void *));
		memcpy(ha[k].indices, p->idx, n_q * p->per * sizeof(int64_t));
		memcpy(ha[k].blocks, blk, n_q * sizeof(void *));
		a = kvt_ptr_align((const void *const *)p->layout->layer_base,
				  nb);
		ret_dev[k].align = kvt_ptr_align((const void *const *)blk,
						 (int64_t)n_q);
		if (a < ret_dev[k].align)
			ret_dev[k].align = a;
	}
	e = cudaMemcpyAsync(job->meta->dev, job->meta->host, bytes,
			    cudaMemcpyHostToDevice, st);
	return e == cudaSuccess ? 0 : cuda_fail(ctx, e, "cudaMemcpyAsync");
}

/* The path of part p's copies: the context's policy, the cost model, and
 * only pinned blocks on the copy engines (they would stage pageable
 * memory synchronously).  Coded blocks are the codec kernel's: the
 * engines only move bytes. */
static int part_path(const kvt_cuda_job *job, const struct part *p,
		     cudaStream_t st)
{
	kvt_cuda_ctx *ctx = job->ctx;
	int64_t nl = job->kind == JOB_LOAD ? 1 : p->g.n_layers;
	int batch_ok = !p->coded && ctx->copy_path != KVT_CUDA_PATH_KERNEL &&
		       !job->unpinned && p->g.index_kind == KVT_INDEX_PAGE &&
		       kvt_cuda_batch_ok(st);

	if (ctx->copy_path == KVT_CUDA_PATH_ENGINE)
		return batch_ok ? KVT_PATH_BATCH : KVT_PATH_KERNEL;
	return kvt_copy_path(&p->g, 0, nl, p->layout->layer_base,
			     (int64_t)job->n_q, &ctx->model, batch_ok);
}

/* Layers [l0, l0 + nl) of part p of every queued block on the copy
 * engines, through the context's run list. */
static int part_runs(kvt_cuda_job *job, const struct part *p, int dir,
		     void *const *blk_host, int64_t l0, int64_t nl,
		     cudaStream_t st)
{
	kvt_cuda_ctx *ctx = job->ctx;
	int64_t n = kvt_batch_count(&p->g, l0, nl, p->layout->layer_base,
				    (int64_t)job->n_q);
	int r;

	if (n < 0)
		return (int)n;
	r = cuda_runs_reserve(ctx, (size_t)n);
	if (r < 0)
		return r;
	n = kvt_batch_build(&p->g, dir, l0, nl, p->layout->layer_base, p->idx,
			    blk_host, (int64_t)job->n_q, ctx->run_dst,
			    ctx->run_src, ctx->run_size);
	if (n < 0)
		return (int)n;
	return kvt_cuda_copy_runs(dir, ctx->run_dst, ctx->run_src,
				  ctx->run_size, n, st);
}

/* Layers [l0, l0 + nl) of part k by its path. */
static int part_copy(kvt_cuda_job *job, const struct part *p, int path,
		     const struct part_arrays *da, void *const *blk_host,
		     int64_t l0, int64_t nl, cudaStream_t st)
{
	uint32_t budget = job->ctx->model.max_ctas;
	int dir = job->kind == JOB_LOAD ? KVT_COPY_SCATTER : KVT_COPY_GATHER;
	int r;

	if (p->coded)
		r = dir == KVT_COPY_SCATTER
			    ? kvt_cuda_codec_scatter(&p->cg, l0, nl, da->layer_base,
						     da->indices, da->blocks,
						     (int64_t)job->n_q, da->align,
						     budget, st)
			    : kvt_cuda_codec_gather(&p->cg, l0, nl, da->layer_base,
						    da->indices, da->blocks,
						    (int64_t)job->n_q, da->align,
						    budget, st);
	else if (path == KVT_PATH_BATCH)
		r = part_runs(job, p, dir, blk_host, l0, nl, st);
	else if (dir == KVT_COPY_SCATTER)
		r = kvt_cuda_scatter(&p->g, l0, nl, da->layer_base, da->indices,
				     da->blocks, (int64_t)job->n_q, da->align,
				     budget, st);
	else
		r = kvt_cuda_gather(&p->g, l0, nl, da->layer_base, da->indices,
				    da->blocks, (int64_t)job->n_q, da->align,
				    budget, st);
	if (r < 0)
		return cuda_fail_errno(job->ctx, r,
				       path == KVT_PATH_BATCH
					       ? "cudaMemcpyBatchAsync"
					       : "a copy kernel launch");
	return 0;
}

/* Queues every part: a store's at once, a load's layer by layer with an
 * event after each.  blk: [2][n_parts][n_q], device then host addresses
 * of each part's bytes. */
static int queue_parts(kvt_cuda_job *job, const struct part *parts,
		       uint32_t n_parts, void **blk, cudaStream_t st)
{
	kvt_cuda_ctx *ctx = job->ctx;
	struct part_arrays da[KVT_MAX_GROUPS];
	int path[KVT_MAX_GROUPS], kernels = 0, r;
	size_t n_q = job->n_q;
	void **host = blk + (size_t)n_parts * n_q;
	cudaError_t e;

	for (uint32_t k = 0; k < n_parts; k++) {
		path[k] = part_path(job, &parts[k], st);
		kernels += path[k] == KVT_PATH_KERNEL;
	}
	if (kernels) {
		r = job_upload(job, parts, n_parts, blk, st, da);
		if (r < 0)
			return r;
	}
	for (uint32_t k = 0; k < n_parts; k++) {
		const struct part *p = &parts[k];
		int64_t steps = job->kind == JOB_LOAD ? p->g.n_layers : 1;
		int64_t nl = job->kind == JOB_LOAD ? 1 : p->g.n_layers;

		for (int64_t l = 0; l < steps; l++) {
			r = part_copy(job, p, path[k], &da[k], host + k * n_q,
				      l, nl, st);
			if (r < 0)
				return r;
			if (job->kind != JOB_LOAD)
				continue;
			e = cudaEventRecord(job->layer_ev[p->layer0 + l], st);
			if (e != cudaSuccess)
				return cuda_fail(ctx, e, "cudaEventRecord");
		}
	}
	pthread_mutex_lock(&ctx->lock);
	ctx->copies_kernel += (uint64_t)kernels;
	ctx->copies_engine += n_parts - (uint64_t)kernels;
	pthread_mutex_unlock(&ctx->lock);
	return 0;
}

int cuda_job_queue(kvt_cuda_job *job, const struct part *parts,
		   uint32_t n_parts, void *const *blk_dev,
		   void *const *blk_host, cudaStream_t st)
{
	size_t n_q = job->n_q;
	void **blk = malloc(2 * (size_t)n_parts * (n_q ? n_q : 1) *
			    sizeof(*blk));
	int r;

	if (!blk)
		return -ENOMEM;
	/* Each part's bytes start at its offset in the block. */
	for (uint32_t k = 0; k < n_parts; k++)
		for (size_t q = 0; q < n_q; q++) {
			blk[k * n_q + q] = (uint8_t *)blk_dev[q] +
					   parts[k].offset;
			blk[(n_parts + k) * n_q + q] =
				(uint8_t *)blk_host[q] + parts[k].offset;
		}
	r = queue_parts(job, parts, n_parts, blk, st);
	free(blk);
	return r;
}
