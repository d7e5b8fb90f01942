/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CUDA data path's device switching and error reporting: the lowest
 * CUDA layer of cuda-*.c, shared by all of them.
 */
#include <errno.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "cuda-internal.h"
#include "layout_cuda.h"

int cuda_dev_enter(const kvt_cuda_ctx *ctx, int *ret_prev)
{
	cudaError_t e = cudaGetDevice(ret_prev);

	if (e == cudaSuccess && *ret_prev != ctx->device)
		e = cudaSetDevice(ctx->device);
	if (e == cudaSuccess)
		return 0;
	(void)cudaGetLastError();
	client_log(ctx->c, KVT_LOG_WARNING,
		   "CUDA: cannot switch to device %d: %s", ctx->device,
		   cudaGetErrorString(e));
	return kvt_cuda_errno(e);
}

void cuda_dev_leave(const kvt_cuda_ctx *ctx, int prev)
{
	cudaError_t e;

	if (prev == ctx->device)
		return;
	/* The caller's work would go to our device from now on: say so. */
	e = cudaSetDevice(prev);
	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		client_log(ctx->c, KVT_LOG_ERR,
			   "CUDA: cannot switch back to device %d: %s; the "
			   "calling thread is left on device %d",
			   prev, cudaGetErrorString(e), ctx->device);
	}
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

int cuda_fail_errno(kvt_cuda_ctx *ctx, int r, const char *what)
{
	(void)cudaGetLastError();
	client_log(ctx->c, KVT_LOG_WARNING, "CUDA: %s failed: %s", what,
		   strerror(-r));
	return r;
}

int cuda_dev_check(kvt_client *c, int device)
{
	int n_dev = 0, driver = 0;
	cudaError_t e = cudaGetDeviceCount(&n_dev);

	if (e == cudaSuccess && device < n_dev)
		return 0;
	(void)cudaGetLastError();
	if (cudaDriverGetVersion(&driver) != cudaSuccess) {
		(void)cudaGetLastError();
		driver = 0;
	}
	if (e == cudaSuccess)
		client_log(c, KVT_LOG_DEBUG,
			   "CUDA: no device %d (%d present)", device, n_dev);
	else if (driver == 0)
		client_log(c, KVT_LOG_DEBUG, "CUDA: no driver: %s",
			   cudaGetErrorString(e));
	else if (driver < CUDART_VERSION)
		client_log(c, KVT_LOG_WARNING,
			   "CUDA: the driver (%d) is older than the runtime "
			   "libkvtier-client was built with (%d): update the "
			   "driver",
			   driver, CUDART_VERSION);
	else
		client_log(c, e == cudaErrorNoDevice ? KVT_LOG_DEBUG
						     : KVT_LOG_WARNING,
			   "CUDA: no usable device: %s", cudaGetErrorString(e));
	return -ENODEV;
}
