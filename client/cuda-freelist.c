/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Events, job array buffers and the copy engines' run list of a CUDA
 * context, kept for reuse: creating an event or pinning a buffer costs
 * more than a job's copies of a few blocks, every job needs them, and a
 * load needs a run list per layer.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#include "cuda-internal.h"

int cuda_ev_get(kvt_cuda_ctx *ctx, cudaEvent_t *ret)
{
	cudaError_t e;

	if (ctx->n_free_ev) {
		*ret = ctx->free_ev[--ctx->n_free_ev];
		return 0;
	}
	/* Without timing an event is a pure dependency and cheapest to
	 * record and wait for. */
	e = cudaEventCreateWithFlags(ret, cudaEventDisableTiming);
	return e == cudaSuccess ? 0 : cuda_fail(ctx, e, "cudaEventCreate");
}

void cuda_ev_put(kvt_cuda_ctx *ctx, cudaEvent_t ev)
{
	if (!ev)
		return;
	if (ctx->n_free_ev == ctx->cap_free_ev) {
		size_t cap = ctx->cap_free_ev ? 2 * ctx->cap_free_ev : 64;
		cudaEvent_t *p = realloc(ctx->free_ev, cap * sizeof(*p));

		if (!p) {
			cudaEventDestroy(ev);
			return;
		}
		ctx->free_ev = p;
		ctx->cap_free_ev = cap;
	}
	ctx->free_ev[ctx->n_free_ev++] = ev;
}

int cuda_meta_get(kvt_cuda_ctx *ctx, size_t need, struct meta **ret)
{
	struct meta *m;
	cudaError_t e;

	for (struct meta **pp = &ctx->free_meta; *pp; pp = &(*pp)->next)
		if ((*pp)->cap >= need) {
			m = *pp;
			*pp = m->next;
			m->next = NULL;
			*ret = m;
			return 0;
		}

	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->cap = need < META_MIN ? META_MIN : (need + 4095) & ~(size_t)4095;
	/* Pinned, so that the upload is a real asynchronous copy and the
	 * submitting thread never waits for it. */
	e = cudaMallocHost((void **)&m->host, m->cap);
	if (e != cudaSuccess) {
		free(m);
		return cuda_fail(ctx, e, "cudaMallocHost");
	}
	e = cudaMalloc((void **)&m->dev, m->cap);
	if (e != cudaSuccess) {
		cudaFreeHost(m->host);
		free(m);
		return cuda_fail(ctx, e, "cudaMalloc");
	}
	*ret = m;
	return 0;
}

void cuda_meta_put(kvt_cuda_ctx *ctx, struct meta *m)
{
	if (!m)
		return;
	m->next = ctx->free_meta;
	ctx->free_meta = m;
}

int cuda_runs_reserve(kvt_cuda_ctx *ctx, size_t n)
{
	size_t cap = ctx->run_cap ? ctx->run_cap : 256;
	void **d;
	const void **s;
	size_t *z;

	if (n <= ctx->run_cap)
		return 0;
	while (cap < n) {
		if (cap > SIZE_MAX / 2 / sizeof(void *))
			return -ENOMEM;
		cap *= 2;
	}
	/* Each array keeps what it had if a later one fails. */
	d = realloc(ctx->run_dst, cap * sizeof(*d));
	if (!d)
		return -ENOMEM;
	ctx->run_dst = d;
	s = realloc(ctx->run_src, cap * sizeof(*s));
	if (!s)
		return -ENOMEM;
	ctx->run_src = s;
	z = realloc(ctx->run_size, cap * sizeof(*z));
	if (!z)
		return -ENOMEM;
	ctx->run_size = z;
	ctx->run_cap = cap;
	return 0;
}

void cuda_freelist_free(kvt_cuda_ctx *ctx)
{
	free(ctx->run_dst);
	free(ctx->run_src);
	free(ctx->run_size);
	while (ctx->free_meta) {
		struct meta *m = ctx->free_meta;

		ctx->free_meta = m->next;
		cudaFreeHost(m->host);
		cudaFree(m->dev);
		free(m);
	}
	for (size_t i = 0; i < ctx->n_free_ev; i++)
		cudaEventDestroy(ctx->free_ev[i]);
	free(ctx->free_ev);
}
