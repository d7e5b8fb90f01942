/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CUDA data path's internals (kvtier-cuda.h), shared by its files.
 * They call one way, each only those above it:
 *
 *   cuda-regtab.c    registration bookkeeping, without CUDA (pure)
 *   cuda-device.c    the context's device, and CUDA errors we handle
 *   cuda-freelist.c  events and job array buffers, kept for reuse
 *   cuda-registry.c  the registration thread, the process's pins
 *   cuda-ctx.c       kvt_cuda_ctx_new / _free, options and stats
 *   cuda-jobs.c      a submitted job: waits, completion, its end
 *   cuda-copy.c      a job's copies queued: paths, run lists, kernels
 *   cuda-submit.c    load and store submission: checks, leases, lookups
 */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "client-internal.h"
#include "cuda-regtab.h"
#include "kvtier-cuda.h"
#include "layout_cuda.h"

/* One registration covers at most this much: the pool's buffers are at
 * most 1 GiB and slots never cross them, so no copy spans two, and no
 * driver call pins more than this at once. */
#define REG_CHUNK (UINT64_C(1) << 30)
/* How often the registration thread looks whether the client mapped
 * new extents, when nothing else wakes it. */
#define REG_POLL_NS (UINT64_C(100) * 1000 * 1000)
/* How long a submission with KVT_CUDA_SUBMIT_WAIT_PINNED waits for the
 * registration thread at most. */
#define SUBMIT_WAIT_MS 30000
/* Smallest job array buffer; they are kept and reused. */
#define META_MIN (64u * 1024)

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
	uint32_t copy_path;         /* KVT_CUDA_PATH_* */
	struct kvt_copy_model model; /* with the CTA budget */

	/* The registrations and their thread.  lock guards regs, the sync
	 * counters, quit and the counters below it; the submitting thread
	 * takes it once per submission, the registration thread never
	 * holds it while the driver pins. */
	pthread_mutex_t lock;
	pthread_cond_t wake;   /* to the thread: work or quit */
	pthread_cond_t synced; /* from the thread: sync_done moved */
	pthread_t thread;
	bool thread_started;
	bool quit;
	uint64_t sync_req, sync_done;
	uint64_t seen_gen; /* the client's extents_gen at the last look */
	struct regs regs;
	uint64_t copies_kernel, copies_engine, blocks_unpinned;

	/* The run list of the copy engines' path, kept between copies. */
	void **run_dst;
	const void **run_src;
	size_t *run_size;
	size_t run_cap;

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
	struct reg **regs;   /* [n_regs] registrations the copies use; each
			      * counted in its users */
	size_t n_regs;
	bool unpinned;       /* a block is in pageable memory */
	uint32_t n_layers;
	cudaEvent_t *layer_ev; /* [n_layers] loads: one per layer */
	cudaEvent_t done;
	struct meta *meta;
	bool finished;
	int result;
};


/* One layer group's share of a job's copies (a namespace whose groups
 * differ in geometry has one per group, each with its own layout). */
struct part {
	struct kvt_geom g;
	/* A namespace with a codec: g with its tiles (cg.g is g); the
	 * codec's kernels, never the copy engines, move the part. */
	struct kvt_codec_geom cg;
	bool coded;
	const kvt_layout *layout;
	size_t per;             /* indices per block */
	uint64_t offset;        /* of the group's bytes in a block */
	uint32_t layer0;        /* its first layer among the job's */
	const int64_t *indices; /* the caller's, [n * per] */
	int64_t *idx;           /* [n_q * per] the queued blocks' */
};

/* ---- cuda-device.c ---- */

/* Every entry point that creates or queues work runs on the context's
 * device and puts the caller's current device back. */
int cuda_dev_enter(const kvt_cuda_ctx *ctx, int *ret_prev);
void cuda_dev_leave(const kvt_cuda_ctx *ctx, int prev);
/* Logs a failed call and clears CUDA's error state. */
int cuda_fail(kvt_cuda_ctx *ctx, cudaError_t e, const char *what);
/* Logs a failed launch of ours (a negative errno from kernels/). */
int cuda_fail_errno(kvt_cuda_ctx *ctx, int r, const char *what);
/* Whether a CUDA device `device` can be used, with the reason logged and
 * left for kvt_client_error() when not: no device, no driver, a driver
 * older than the runtime. */
int cuda_dev_check(kvt_client *c, int device);

/* ---- cuda-freelist.c ---- */

int cuda_ev_get(kvt_cuda_ctx *ctx, cudaEvent_t *ret);
/* NULL is ignored. */
void cuda_ev_put(kvt_cuda_ctx *ctx, cudaEvent_t ev);
/* A buffer of at least need bytes, pinned on the host and on the device. */
int cuda_meta_get(kvt_cuda_ctx *ctx, size_t need, struct meta **ret);
/* NULL is ignored. */
void cuda_meta_put(kvt_cuda_ctx *ctx, struct meta *m);
/* Room for n runs in ctx->run_*; kept for later copies. */
int cuda_runs_reserve(kvt_cuda_ctx *ctx, size_t n);
/* Destroys what the free lists hold; the context's streams are idle. */
void cuda_freelist_free(kvt_cuda_ctx *ctx);

/* ---- cuda-registry.c ---- */

/* The process's pins, shared by its contexts. */
struct pins *cuda_pins(void);
/* Sets up ctx->lock, ctx->regs and starts the registration thread. */
int cuda_regs_start(kvt_cuda_ctx *ctx);
/* Stops the thread and releases every registration; no job is left. */
void cuda_regs_stop(kvt_cuda_ctx *ctx);
/* Asks the thread to look at the client's extents again; with ctx->lock
 * held. */
void cuda_regs_kick_locked(kvt_cuda_ctx *ctx);
/* Asks for a look and waits for it and for every pin it starts. */
int cuda_regs_wait(kvt_cuda_ctx *ctx, int timeout_ms);
/* The registration state into *ret, under ctx->lock. */
void cuda_regs_stats(kvt_cuda_ctx *ctx, kvt_cuda_stats *ret);

/* ---- cuda-jobs.c ---- */

/* Gives back the job's uses of its registrations (ctx->lock not held). */
void cuda_job_unuse_regs(kvt_cuda_job *job);
/* Frees a job and its arrays; its events and handles are dealt with. */
void cuda_job_free_arrays(kvt_cuda_job *job);

/* ---- cuda-copy.c ---- */

/* Queues the copies of the job's n_q blocks (at blk_dev for the kernel,
 * blk_host for the copy engines) on st, part by part; a load's layer
 * events after each layer. */
int cuda_job_queue(kvt_cuda_job *job, const struct part *parts,
		   uint32_t n_parts, void *const *blk_dev,
		   void *const *blk_host, cudaStream_t st);
