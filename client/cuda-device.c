/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CUDA data path's device switching and error reporting: the lowest
 * layer of cuda-*.c, shared by all of them.
 */
#include <cuda_runtime_api.h>

#include "cuda-internal.h"
#include "layout_cuda.h"

int cuda_dev_enter(const kvt_cuda_ctx *ctx, int *ret_prev)
{
	cudaError_t e = cudaGetDevice(ret_prev);

	if (e == cudaSuccess && *ret_prev != ctx->device)
		e = cudaSetDevice(ctx->device);
	return e == cudaSuccess ? 0 : kvt_cuda_errno(e);
}

void cuda_dev_leave(const kvt_cuda_ctx *ctx, int prev)
{
	if (prev != ctx->device)
		cudaSetDevice(prev);
}

/* An error we handled must not surface in the engine's next
 * cudaGetLastError(). */
int cuda_fail(kvt_cuda_ctx *ctx, cudaError_t e, const char *what)
{
	(void)cudaGetLastError();
	client_log(ctx->c, KVT_LOG_WARNING, "CUDA: %s failed: %s", what,
		   cudaGetErrorString(e));
	return kvt_cuda_errno(e);
}
