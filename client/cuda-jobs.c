/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A CUDA job after its submission (cuda-submit.c): waits for it on the
 * GPU, its completion seen by polling on the caller's thread, and its
 * end.  Only a finished job releases its leases or commits its blocks, so
 * a slot is never reused, nor a block shown to another process, while a
 * copy may still touch it.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "cuda-internal.h"

void cuda_job_unuse_regs(kvt_cuda_job *job)
{
	kvt_cuda_ctx *ctx = job->ctx;

	if (!job->n_regs)
		return;
	pthread_mutex_lock(&ctx->lock);
	for (size_t i = 0; i < job->n_regs; i++)
		job->regs[i]->users--;
	job->n_regs = 0;
	regs_collect(&ctx->regs, cuda_pins());
	pthread_mutex_unlock(&ctx->lock);
}

void cuda_job_free_arrays(kvt_cuda_job *job)
{
	free(job->status);
	free(job->which);
	free(job->handles);
	free(job->regs);
	free(job->layer_ev);
	free(job);
}

/* Commits a finished store's blocks, those whose copy failed as failed. */
static void job_commit(kvt_cuda_job *job, int copy_err)
{
	kvt_cuda_ctx *ctx = job->ctx;
	uint8_t *ok = malloc(job->n_q);
	int32_t *st = calloc(job->n_q, sizeof(*st));
	int r;

	if (!ok || !st) {
		/* Without memory to say which copies succeeded, abort them
		 * all: dropping a block is safe, publishing a bad one is
		 * not. */
		kvt_abort(ctx->c, job->handles, job->n_q, NULL);
		for (size_t q = 0; q < job->n_q; q++)
			job->status[job->which[q]] = -ENOMEM;
		job->result = -ENOMEM;
	} else {
		size_t unsent = 0;

		memset(ok, copy_err == 0, job->n_q);
		r = kvt_commit(ctx->c, job->handles, ok, job->n_q, st);
		for (size_t q = 0; q < job->n_q; q++) {
			/* Not committed for want of the daemon: still ours,
			 * and given back (unsent <= q). */
			if (st[q] == -ENOTCONN)
				job->handles[unsent++] = job->handles[q];
			job->status[job->which[q]] =
				copy_err ? copy_err : st[q];
		}
		if (unsent)
			kvt_abort(ctx->c, job->handles, unsent, NULL);
		if (r < 0)
			job->result = r;
	}
	free(ok);
	free(st);
}

/* Runs on the caller's thread once the job's copies have completed (or
 * failed): only now may slots be released or blocks become visible. */
static void job_finish(kvt_cuda_job *job, int copy_err)
{
	kvt_cuda_ctx *ctx = job->ctx;

	if (job->kind == JOB_LOAD) {
		for (size_t q = 0; q < job->n_q; q++)
			job->status[job->which[q]] = copy_err;
		/* The daemon drops a gone client's leases itself. */
		if (job->n_q)
			kvt_release(ctx->c, job->handles, job->n_q, NULL);
	} else if (job->n_q) {
		job_commit(job, copy_err);
	}
	if (copy_err && job->result == 0)
		job->result = copy_err;

	cuda_job_unuse_regs(job);
	cuda_meta_put(ctx, job->meta);
	job->meta = NULL;
	job->finished = true;
}

/* stream waits for ev, on the context's device (where a NULL stream is
 * that device's legacy stream). */
static int stream_wait(kvt_cuda_job *job, void *stream, cudaEvent_t ev)
{
	kvt_cuda_ctx *ctx = job->ctx;
	cudaError_t e;
	int prev = 0, r;

	r = cuda_dev_enter(ctx, &prev);
	if (r < 0)
		return r;
	e = cudaStreamWaitEvent((cudaStream_t)stream, ev, 0);
	r = e == cudaSuccess ? 0 : cuda_fail(ctx, e, "cudaStreamWaitEvent");
	cuda_dev_leave(ctx, prev);
	return r;
}

KVT_EXPORT int kvt_cuda_wait_layer(kvt_cuda_job *job, uint32_t layer,
				   void *compute_stream)
{
	if (!job || job->kind != JOB_LOAD || layer >= job->n_layers)
		return -EINVAL;
	return stream_wait(job, compute_stream, job->layer_ev[layer]);
}

KVT_EXPORT int kvt_cuda_job_wait_stream(kvt_cuda_job *job, void *stream)
{
	if (!job)
		return -EINVAL;
	return stream_wait(job, stream, job->done);
}

static int job_report(const kvt_cuda_job *job, int32_t *ret_status)
{
	if (ret_status)
		memcpy(ret_status, job->status, job->n * sizeof(*ret_status));
	if (!job->finished)
		return 0;
	return job->result < 0 ? job->result : 1;
}

/* Sees whether (block) or when the job's copies completed, and finishes
 * it then; on the context's device, since finishing may unregister
 * memory. */
static void job_check(kvt_cuda_job *job, bool block)
{
	kvt_cuda_ctx *ctx = job->ctx;
	cudaError_t e;
	int prev = 0;
	bool entered;

	entered = cuda_dev_enter(ctx, &prev) == 0;
	e = block ? cudaEventSynchronize(job->done) : cudaEventQuery(job->done);
	if (e != cudaErrorNotReady) {
		if (e != cudaSuccess)
			cuda_fail(ctx, e, "a copy");
		job_finish(job, e == cudaSuccess ? 0 : -EIO);
	}
	if (entered)
		cuda_dev_leave(ctx, prev);
}

KVT_EXPORT int kvt_cuda_job_poll(kvt_cuda_job *job, int32_t *ret_status)
{
	if (!job)
		return -EINVAL;
	if (!job->finished)
		job_check(job, false);
	return job_report(job, ret_status);
}

KVT_EXPORT int kvt_cuda_job_wait(kvt_cuda_job *job, int32_t *ret_status)
{
	if (!job)
		return -EINVAL;
	if (!job->finished)
		job_check(job, true);
	return job_report(job, ret_status);
}

KVT_EXPORT size_t kvt_cuda_job_size(const kvt_cuda_job *job)
{
	return job ? job->n : 0;
}

KVT_EXPORT void kvt_cuda_job_free(kvt_cuda_job *job)
{
	kvt_cuda_ctx *ctx;

	if (!job)
		return;
	ctx = job->ctx;
	if (!job->finished)
		kvt_cuda_job_wait(job, NULL);
	/* The events go back only now: a wait_layer after completion must
	 * still find this job's record, not a later job's. */
	for (uint32_t l = 0; l < job->n_layers; l++)
		cuda_ev_put(ctx, job->layer_ev[l]);
	cuda_ev_put(ctx, job->done);
	cuda_job_free_arrays(job);
}

