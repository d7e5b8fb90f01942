/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CUDA data path's device switching and error reporting: the lowest
 * CUDA layer of cuda-*.c, shared by all of them.
 */
#include <errno.h>
#include <stdio.h>
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

/* The driver a CUDA runtime of major version `major` needs, at least (the
 * release notes' minimum for the first of its minor versions; the later
 * ones run on it too). */
static const char *driver_needed(int major)
{
	switch (major) {
	case 12: return "525";
	case 13: return "580";
	default: return NULL;
	}
}

/* Whether device `device` can be used: 0, or the log level its reason
 * (in why) deserves: debug for a machine without a GPU or driver, which
 * is no fault, warning for one that has them but cannot serve. */
static int dev_why(int device, char *why, size_t len)
{
	int n_dev = 0, driver = 0, rt = CUDART_VERSION;
	const char *need = driver_needed(rt / 1000);
	char needs[32] = "";
	cudaError_t e = cudaGetDeviceCount(&n_dev);

	if (e == cudaSuccess && device < n_dev)
		return 0;
	(void)cudaGetLastError();
	if (cudaDriverGetVersion(&driver) != cudaSuccess) {
		(void)cudaGetLastError();
		driver = 0;
	}
	if (need)
		snprintf(needs, sizeof(needs), " (driver %s or newer)", need);
	if (e == cudaSuccess || e == cudaErrorNoDevice) {
		if (n_dev == 0)
			snprintf(why, len, "no CUDA device: the NVIDIA driver (CUDA %d.%d) sees no GPU",
				 driver / 1000, driver % 1000 / 10);
		else
			snprintf(why, len, "no CUDA device %d: %d present", device, n_dev);
		return KVT_LOG_DEBUG;
	}
	if (driver == 0) {
		snprintf(why, len,
			 "no NVIDIA driver (libcuda.so.1 cannot be loaded): the CUDA path "
			 "needs one for its CUDA %d.%d runtime%s",
			 rt / 1000, rt % 1000 / 10, needs);
		return KVT_LOG_DEBUG;
	}
	if (driver < rt) {
		snprintf(why, len,
			 "the NVIDIA driver serves CUDA %d.%d, older than the CUDA %d.%d "
			 "runtime libkvtier-client was built with: update the driver%s, or "
			 "build libkvtier-client with a CUDA toolkit no newer than %d.%d",
			 driver / 1000, driver % 1000 / 10, rt / 1000, rt % 1000 / 10, needs,
			 driver / 1000, driver % 1000 / 10);
		return KVT_LOG_WARNING;
	}
	snprintf(why, len, "no usable CUDA device: %s", cudaGetErrorString(e));
	return KVT_LOG_WARNING;
}

KVT_EXPORT int kvt_cuda_device_check(int device, char *why, size_t why_len)
{
	char buf[KVT_MAX_REASON];

	if (device < 0)
		return -EINVAL;
	if (dev_why(device, buf, sizeof(buf)) == 0)
		return 0;
	if (why && why_len)
		snprintf(why, why_len, "%s", buf);
	return -ENODEV;
}

int cuda_dev_check(kvt_client *c, int device)
{
	char why[KVT_MAX_REASON];
	int level = dev_why(device, why, sizeof(why));

	if (level == 0)
		return 0;
	client_log(c, level, "CUDA: %s", why);
	/* kvt_client_error() says why, as for the library's other refusals. */
	snprintf(c->error, sizeof(c->error), "%s", why);
	return -ENODEV;
}
