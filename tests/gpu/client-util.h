/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the GPU tests of the client's CUDA path share: a CUDA call checked
 * like any other check of the harness, and a job polled to its end.
 */
#pragma once

#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "harness.h"
#include "kvtier-cuda.h"

#define CUDA_CHECK(call)                                                   \
	do {                                                               \
		cudaError_t e_ = (call);                                   \
		CHECK(e_ == cudaSuccess, "%s: %s", #call,                  \
		      cudaGetErrorString(e_));                             \
	} while (0)

/* Polls until done; never a performance bound, only a hang guard. */
static inline int poll_done(kvt_cuda_job *job, int32_t *st)
{
	int r = 0;

	for (int i = 0; i < 30000 && r == 0; i++) {
		r = kvt_cuda_job_poll(job, st);
		if (r == 0)
			usleep(1000);
	}
	return r;
}
