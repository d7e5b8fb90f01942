/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Whether a GPU test can run here, told apart: no GPU or no driver at all
 * is a skip (77); a driver older than the runtime the test was built with,
 * or any other error of cudaGetDeviceCount, is a failure, since it means a
 * GPU machine that cannot run the code it is meant to run.
 *
 * Included by the GPU tests (C and CUDA).
 */
#pragma once

#include <stdio.h>

#include <cuda_runtime_api.h>

#include "../skip.h"

/* \return 0 (a device is there), KVT_TEST_SKIP or 1, with the reason
 * printed for the last two. */
static inline int kvt_gpu_probe(void)
{
	int n_dev = 0, driver = 0;
	cudaError_t e = cudaGetDeviceCount(&n_dev);

	if (e == cudaSuccess && n_dev > 0)
		return 0;
	(void)cudaGetLastError();
	if (cudaDriverGetVersion(&driver) != cudaSuccess)
		driver = 0;
	if (e == cudaSuccess || e == cudaErrorNoDevice) {
		printf("no GPU: no CUDA device (driver %d)\n", driver);
		return KVT_TEST_SKIP;
	}
	if (driver == 0) {
		printf("no GPU: no CUDA driver (%s)\n", cudaGetErrorString(e));
		return KVT_TEST_SKIP;
	}
	if (driver < CUDART_VERSION) {
		printf("CUDA driver too old: driver %d, runtime %d (%s)\n",
		       driver, CUDART_VERSION, cudaGetErrorString(e));
		return 1;
	}
	printf("CUDA error: %s (driver %d, runtime %d)\n",
	       cudaGetErrorString(e), driver, CUDART_VERSION);
	return 1;
}
