/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tests/gpu/run.sh's first look at the machine: exits 0 with the device
 * printed, 77 when there is no GPU or no driver, 1 when the driver is
 * older than the runtime this was built with or CUDA fails otherwise
 * (gpu-probe.h).
 */
#include <stdio.h>

#include <cuda_runtime_api.h>

#include "gpu-probe.h"

int main(void)
{
	struct cudaDeviceProp prop;
	int r = kvt_gpu_probe(), driver = 0;

	if (r != 0)
		return r;
	if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess ||
	    cudaDriverGetVersion(&driver) != cudaSuccess) {
		printf("CUDA error reading device 0\n");
		return 1;
	}
	printf("GPU: %s, sm_%d%d, %d SMs, %.0f GiB; driver %d, runtime %d\n",
	       prop.name, prop.major, prop.minor, prop.multiProcessorCount,
	       prop.totalGlobalMem / 1073741824.0, driver, CUDART_VERSION);
	return 0;
}
