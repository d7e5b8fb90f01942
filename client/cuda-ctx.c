/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A CUDA context of libkvtier-client (kvtier-cuda.h): its device, its load
 * and store streams, its copy policy, the registration thread, and what it
 * reports.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "cuda-internal.h"

static int opts_check(const kvt_cuda_opts *o)
{
	if (!o)
		return 0;
	if (o->size < sizeof(uint32_t) * 4 ||
	    (o->flags & ~KVT_CUDA_PIN_BACKGROUND) ||
	    o->copy_path > KVT_CUDA_PATH_ENGINE || o->max_ctas > 65535)
		return -EINVAL;
	return 0;
}

static int streams_new(kvt_cuda_ctx *ctx)
{
	int least = 0, greatest = 0;
	cudaError_t e;

	/* Non-blocking: the engine's work on the legacy default stream must
	 * not serialise with our copies.  Loads are on the critical path of
	 * the next forward pass, stores are not; the CTA budget, not the
	 * priority, is what leaves the SMs to compute. */
	e = cudaDeviceGetStreamPriorityRange(&least, &greatest);
	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		least = greatest = 0;
	}
	e = cudaStreamCreateWithPriority(&ctx->load, cudaStreamNonBlocking,
					 greatest);
	if (e == cudaSuccess)
		e = cudaStreamCreateWithPriority(&ctx->store,
						 cudaStreamNonBlocking, least);
	return e == cudaSuccess ? 0 : cuda_fail(ctx, e, "cudaStreamCreate");
}

static void ctx_destroy(kvt_cuda_ctx *ctx)
{
	if (ctx->load)
		cudaStreamDestroy(ctx->load);
	if (ctx->store)
		cudaStreamDestroy(ctx->store);
	cuda_freelist_free(ctx);
	(void)cudaGetLastError();
}

KVT_EXPORT int kvt_cuda_ctx_new_opts(kvt_client *c, int device,
				     const kvt_cuda_opts *opts,
				     kvt_cuda_ctx **ret)
{
	kvt_cuda_ctx *ctx;
	int prev = 0, pageable = 0, r;

	if (!c || !ret || device < 0 || opts_check(opts) < 0)
		return -EINVAL;
	r = cuda_dev_check(c, device);
	if (r < 0)
		return r;

	ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return -ENOMEM;
	/* Like a namespace, a context keeps the client's memory: freed in
	 * either order, neither touches freed memory. */
	ctx->c = client_ref(c);
	ctx->device = device;
	kvt_copy_model_default(&ctx->model);
	if (opts) {
		ctx->copy_path = opts->copy_path;
		if (opts->max_ctas)
			ctx->model.max_ctas = opts->max_ctas;
	}

	r = cuda_dev_enter(ctx, &prev);
	if (r < 0) {
		client_unref(ctx->c);
		free(ctx);
		return r;
	}
	if (cudaDeviceGetAttribute(&pageable, cudaDevAttrPageableMemoryAccess,
				   device) != cudaSuccess) {
		(void)cudaGetLastError();
		pageable = 0;
	}
	ctx->pageable = pageable != 0;
	r = streams_new(ctx);
	if (r == 0)
		r = cuda_regs_start(ctx);
	if (r < 0) {
		ctx_destroy(ctx);
		cuda_dev_leave(ctx, prev);
		client_unref(ctx->c);
		free(ctx);
		return r;
	}
	cuda_dev_leave(ctx, prev);
	if (!opts || !(opts->flags & KVT_CUDA_PIN_BACKGROUND))
		(void)cuda_regs_wait(ctx, -1);
	*ret = ctx;
	return 0;
}

KVT_EXPORT int kvt_cuda_ctx_new(kvt_client *c, int device,
				kvt_cuda_ctx **ret)
{
	return kvt_cuda_ctx_new_opts(c, device, NULL, ret);
}

KVT_EXPORT int kvt_cuda_ctx_wait_pinned(kvt_cuda_ctx *ctx, int timeout_ms)
{
	if (!ctx)
		return -EINVAL;
	return cuda_regs_wait(ctx, timeout_ms);
}

KVT_EXPORT int kvt_cuda_ctx_stats(kvt_cuda_ctx *ctx, kvt_cuda_stats *ret)
{
	kvt_cuda_stats s = {0};

	if (!ctx || !ret || ret->size < sizeof(uint32_t))
		return -EINVAL;
	pthread_mutex_lock(&ctx->lock);
	cuda_regs_stats(ctx, &s);
	s.copies_kernel = ctx->copies_kernel;
	s.copies_engine = ctx->copies_engine;
	s.blocks_unpinned = ctx->blocks_unpinned;
	pthread_mutex_unlock(&ctx->lock);
	s.size = ret->size < sizeof(s) ? ret->size : (uint32_t)sizeof(s);
	memcpy(ret, &s, s.size);
	return 0;
}

KVT_EXPORT void kvt_cuda_ctx_free(kvt_cuda_ctx *ctx)
{
	int prev = 0;
	bool entered;

	if (!ctx)
		return;
	entered = cuda_dev_enter(ctx, &prev) == 0;
	cudaStreamSynchronize(ctx->load);
	cudaStreamSynchronize(ctx->store);
	cuda_regs_stop(ctx);
	ctx_destroy(ctx);
	if (entered)
		cuda_dev_leave(ctx, prev);
	client_unref(ctx->c);
	free(ctx);
}
