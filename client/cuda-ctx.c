/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A CUDA context of libkvtier-client (kvtier-cuda.h): its device, its load
 * and store streams, and the registration of the pool at its start.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#include "cuda-internal.h"

KVT_EXPORT int kvt_cuda_ctx_new(kvt_client *c, int device,
				kvt_cuda_ctx **ret)
{
	kvt_cuda_ctx *ctx;
	int n_dev = 0, prev = 0, least = 0, greatest = 0, pageable = 0, r;
	cudaError_t e;

	if (!c || !ret || device < 0)
		return -EINVAL;
	e = cudaGetDeviceCount(&n_dev);
	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		client_log(c, KVT_LOG_DEBUG, "CUDA: no device: %s",
			   cudaGetErrorString(e));
		return -ENODEV;
	}
	if (device >= n_dev)
		return -ENODEV;

	ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return -ENOMEM;
	/* Like a namespace, a context keeps the client's memory: freed in
	 * either order, neither touches freed memory. */
	ctx->c = client_ref(c);
	ctx->device = device;

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

	/* Non-blocking: the engine's work on the legacy default stream must
	 * not serialise with our copies.  Loads are on the critical path of
	 * the next forward pass, stores are not. */
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
	if (e != cudaSuccess) {
		r = cuda_fail(ctx, e, "cudaStreamCreate");
		goto fail;
	}
	r = cuda_regs_sync(ctx);
	if (r < 0)
		goto fail;
	cuda_dev_leave(ctx, prev);
	*ret = ctx;
	return 0;

fail:
	if (ctx->load)
		cudaStreamDestroy(ctx->load);
	if (ctx->store)
		cudaStreamDestroy(ctx->store);
	cuda_dev_leave(ctx, prev);
	client_unref(ctx->c);
	free(ctx);
	return r;
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
	cuda_regs_free(ctx);
	cuda_freelist_free(ctx);
	cudaStreamDestroy(ctx->load);
	cudaStreamDestroy(ctx->store);
	(void)cudaGetLastError();
	if (entered)
		cuda_dev_leave(ctx, prev);
	client_unref(ctx->c);
	free(ctx);
}
