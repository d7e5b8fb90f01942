/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CUDA data path's internals (kvtier-cuda.h), shared by its files.
 * They call one way, each only those above it:
 *
 *   cuda-device.c    the context's device, and CUDA errors we handle
 *   cuda-freelist.c  events and job array buffers, kept for reuse
 *   cuda-registry.c  which ranges of the pool are registered, lookups
 *   cuda-ctx.c       kvt_cuda_ctx_new / _free
 *   cuda-jobs.c      a submitted job: waits, completion, its end
 *   cuda-submit.c    load and store submission: leases, copies queued
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "client-internal.h"
#include "kvtier-cuda.h"

/* One registration covers at most this much: the pool's buffers are at
 * most 1 GiB and slots never cross them, so no copy spans two. */
#define REG_CHUNK (UINT64_C(1) << 30)
/* Smallest job array buffer; they are kept and reused. */
#define META_MIN (64u * 1024)

/* One range registered with cudaHostRegister (or found registered). */
struct reg {
	struct reg *next;
	uint32_t extent_id;
	uint8_t *host;
	uint64_t size;
	uint8_t *dev;   /* its device address; NULL when the GPU cannot
			 * address it */
	bool owned;     /* we registered it, so we unregister it */
	bool stale;     /* its extent is no longer mapped by the client */
	uint32_t users; /* unfinished jobs whose copies use it */
};

/* Pinned staging and device copy of one job's arrays. */
struct meta {
	struct meta *next;
	uint8_t *host;
	uint8_t *dev;
	size_t cap;
};

struct kvt_cuda_ctx {
	kvt_client *c;
	int device;
	bool pageable; /* the device addresses pageable host memory */
	cudaStream_t load;
	cudaStream_t store;
	struct reg *regs;
	uint64_t instance; /* the daemon instance regs belong to */
	struct meta *free_meta;
	cudaEvent_t *free_ev;
	size_t n_free_ev, cap_free_ev;
};

enum job_kind {
	JOB_LOAD,
	JOB_STORE,
};

struct kvt_cuda_job {
	kvt_cuda_ctx *ctx;
	enum job_kind kind;
	size_t n;
	int32_t *status;     /* [n] */
	size_t n_q;          /* keys whose copy was queued */
	size_t *which;       /* [n_q] key of each queued copy */
	uint64_t *handles;   /* [n_q] lease or reservation */
	struct reg **regs;   /* [n_regs] registrations the copies use */
	size_t n_regs;
	uint32_t n_layers;
	cudaEvent_t *layer_ev; /* [n_layers] loads: one per layer */
	cudaEvent_t done;
	struct meta *meta;
	bool finished;
	int result;
};


/* ---- cuda-device.c ---- */

/* Every entry point that creates or queues work runs on the context's
 * device and puts the caller's current device back. */
int cuda_dev_enter(const kvt_cuda_ctx *ctx, int *ret_prev);
void cuda_dev_leave(const kvt_cuda_ctx *ctx, int prev);
/* Logs a failed call and clears CUDA's error state. */
int cuda_fail(kvt_cuda_ctx *ctx, cudaError_t e, const char *what);

/* ---- cuda-freelist.c ---- */

int cuda_ev_get(kvt_cuda_ctx *ctx, cudaEvent_t *ret);
/* NULL is ignored. */
void cuda_ev_put(kvt_cuda_ctx *ctx, cudaEvent_t ev);
/* A buffer of at least need bytes, pinned on the host and on the device. */
int cuda_meta_get(kvt_cuda_ctx *ctx, size_t need, struct meta **ret);
/* NULL is ignored. */
void cuda_meta_put(kvt_cuda_ctx *ctx, struct meta *m);
/* Destroys what the free lists hold; the context's streams are idle. */
void cuda_freelist_free(kvt_cuda_ctx *ctx);

/* ---- cuda-registry.c ---- */

/* Registers the client's new extents, marks gone ones stale. */
int cuda_regs_sync(kvt_cuda_ctx *ctx);
/* Unregisters stale ranges no unfinished job uses any more. */
void cuda_regs_collect(kvt_cuda_ctx *ctx);
/* Unregisters every range; no job is left. */
void cuda_regs_free(kvt_cuda_ctx *ctx);
/* Whether [p, p + bytes) lies where a stale range is still pinned. */
bool cuda_regs_stale_overlap(const kvt_cuda_ctx *ctx, void *p,
			     uint64_t bytes);
/* The device address of [p, p + bytes) and its registration, or NULL. */
uint8_t *cuda_regs_dev_addr(kvt_cuda_ctx *ctx, void *p, uint64_t bytes,
			    struct reg **ret_reg);

/* ---- cuda-jobs.c ---- */

/* Frees a job and its arrays; its events and handles are dealt with. */
void cuda_job_free_arrays(kvt_cuda_job *job);
