/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libkvtier-client: the CUDA data path.
 *
 * Present in libkvtier-client when it was built with CUDA (kvt-config.h's
 * KVT_HAVE_CUDA).  The CUDA runtime is linked into the library, its
 * symbols local: it needs the NVIDIA driver alone, one that serves the
 * runtime's CUDA version (kvt_cuda_device_check says why not).  Moves blocks
 * between an engine's paged KV cache in GPU memory
 * and kvtier's pool without the CPU touching the bytes:
 *
 *   - the pool's extents are registered with the CUDA driver (pinned) in
 *     chunks of at most 1 GiB, by a thread of the context, so that neither
 *     start-up nor a submission waits for the driver to pin a large pool;
 *     a pin is shared by every context of the process that maps the same
 *     memory and undone when the last lets go; a failed one is retried;
 *   - each copy takes the path a cost model picks: the copy engines
 *     (cudaMemcpyBatchAsync) where runs are long, else a gather/scatter
 *     kernel limited to a few CTAs (kvt_cuda_opts.max_ctas), so that a
 *     prefetch over PCIe leaves the SMs to attention and GEMMs;
 *   - loads are queued per layer on a load stream with one event per
 *     layer; kvt_cuda_wait_layer() makes the engine's compute stream wait
 *     for one layer on the GPU, so layer l computes while layer l+1 loads;
 *     a load starts after the work queued on the compute stream, or, when
 *     the caller says so (kvt_cuda_submit_opts), after an event of its own
 *     or at once, so that the next step's prefetch overlaps this step;
 *   - stores wait for an event of the compute stream, copy on a store
 *     stream, and commit a block only after its copy has completed;
 *   - a namespace whose layer groups differ in geometry is copied with a
 *     layout (and, if the engine keeps one, a block table) per group;
 *   - completion is observed by polling (kvt_cuda_job_poll), on the
 *     caller's thread: commits and releases talk to the daemon from there,
 *     never from a CUDA callback.
 *
 * Streams are cudaStream_t passed as void *, so the header needs no CUDA
 * headers and binds from Python without a compiler.  Conventions as in
 * kvtier.h: 0 (or a count) on success, a negative errno on failure.
 *
 * A context and its jobs are used by one thread at a time (the context's
 * own registration thread aside, which may call the client's log handler
 * too).
 */
#ifndef KVTIER_CUDA_H
#define KVTIER_CUDA_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include "kvtier.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvt_cuda_ctx kvt_cuda_ctx;
typedef struct kvt_cuda_job kvt_cuda_job;

/** kvt_cuda_opts.copy_path */
#define KVT_CUDA_PATH_AUTO 0   /* the cost model picks, per copy */
#define KVT_CUDA_PATH_KERNEL 1 /* always the kernel (within max_ctas) */
#define KVT_CUDA_PATH_ENGINE 2 /* the copy engines wherever they can (page
				* indices, pinned blocks, CUDA 12.8+) */

/** kvt_cuda_opts.flags: return at once and register the pool mapped now
 * in the background too (see kvt_cuda_ctx_wait_pinned). */
#define KVT_CUDA_PIN_BACKGROUND 0x1u

/**
 * Options of kvt_cuda_ctx_new_opts.  Zero-initialise it and set size to
 * sizeof(kvt_cuda_opts): fields are only ever appended.
 */
typedef struct kvt_cuda_opts {
	uint32_t size;
	uint32_t flags;     /* KVT_CUDA_PIN_BACKGROUND */
	uint32_t copy_path; /* KVT_CUDA_PATH_* */
	uint32_t max_ctas;  /* CTAs one copy kernel may occupy at a time;
			     * 0: 8, at most 65535 */
} kvt_cuda_opts;

/**
 * Whether the CUDA path can run on CUDA device `device` in this process:
 * the check kvt_cuda_ctx_new makes first, without a client.  When it
 * cannot, why (unless NULL) receives the reason in words, within why_len
 * bytes: no NVIDIA driver, a driver older than the CUDA runtime linked
 * into the library (with the driver that runtime needs), no device.
 *
 * \return 0, -ENODEV (why says which), -EINVAL (device < 0)
 */
KVT_EXPORT int kvt_cuda_device_check(int device, char *why, size_t why_len);

/**
 * Set up the CUDA path of client c on CUDA device `device`: create a load
 * and a store stream (non-blocking; loads at the highest priority), start
 * the context's registration thread and wait until it has registered every
 * pool extent mapped now.  Extents that arrive later are registered by
 * that thread; until then their blocks are refused with -EAGAIN.  The
 * calling thread's current device is left as it was.
 *
 * A range the engine has already registered is used as it is
 * (cudaErrorHostMemoryAlreadyRegistered), and a range another context of
 * the process registered is shared with it (the last one to let go
 * unregisters it).  When pinning fails (e.g. RLIMIT_MEMLOCK), it is
 * retried after 1 s, 2 s, ... up to 64 s; meanwhile copies use the
 * pageable mapping where the device can address it
 * (cudaDevAttrPageableMemoryAccess, and then never the copy engines),
 * else the blocks of that range fail with -EFAULT.
 *
 * \return 0, -ENODEV (no such device, no driver, or a driver older than
 *         the CUDA runtime the library was built with: the log and
 *         kvt_client_error() say which), -EINVAL, -ENOMEM
 */
KVT_EXPORT int kvt_cuda_ctx_new(kvt_client *c, int device, kvt_cuda_ctx **ret);

/**
 * kvt_cuda_ctx_new with options (NULL: the defaults).
 * \return as kvt_cuda_ctx_new; -EINVAL for an unknown flag or path
 */
KVT_EXPORT int kvt_cuda_ctx_new_opts(kvt_client *c, int device,
				     const kvt_cuda_opts *opts,
				     kvt_cuda_ctx **ret);

/**
 * Wait until the registration thread has seen the pool as it is now and
 * pinned (or failed to pin) all of it.  timeout_ms < 0 waits for good.
 * \return 0, -ETIMEDOUT, -EINVAL
 */
KVT_EXPORT int kvt_cuda_ctx_wait_pinned(kvt_cuda_ctx *ctx, int timeout_ms);

/**
 * What a context has registered and how its copies went.  Zero-initialise
 * it and set size to sizeof(kvt_cuda_stats): fields are only appended.
 */
typedef struct kvt_cuda_stats {
	uint32_t size;
	uint32_t ranges;         /* registrations kept, in every state */
	uint32_t ranges_pinned;
	uint32_t ranges_pending; /* waiting for the thread, or being pinned */
	uint32_t ranges_failed;  /* failed; retried after 1 s, 2 s, ... 64 s */
	uint32_t ranges_stale;   /* of extents gone, kept for unfinished jobs */
	uint64_t bytes_pinned;
	uint64_t bytes_pending;
	uint64_t bytes_failed;
	uint64_t pin_calls;      /* pin attempts, a pin shared with another
				  * context of the process included */
	uint64_t pin_failures;   /* attempts the driver refused */
	uint64_t pin_ns;         /* time spent pinning, in all */
	uint64_t pin_max_ns;     /* the longest single pin */
	uint64_t copies_kernel;  /* copies queued through the kernel */
	uint64_t copies_engine;  /* through the copy engines */
	uint64_t blocks_unpinned; /* blocks refused for memory not pinned */
} kvt_cuda_stats;

/**
 * Fill *ret (up to ret->size bytes).
 * \return 0 or -EINVAL
 */
KVT_EXPORT int kvt_cuda_ctx_stats(kvt_cuda_ctx *ctx, kvt_cuda_stats *ret);

/**
 * Wait for the context's streams, unregister what it registered and free
 * it.  Free every job of the context first.  The context keeps its
 * client's memory, so it may be freed before or after kvt_client_free;
 * after that every submission fails with -ENOTCONN.  NULL is ignored.
 */
KVT_EXPORT void kvt_cuda_ctx_free(kvt_cuda_ctx *ctx);

/**
 * Load blocks from the pool into the engine's paged cache.
 *
 * Leases each key (kvt_acquire) and queues, per layer of layout, one copy
 * of that layer of every leased block on the load stream, followed by an
 * event for the layer.  Returns without waiting for the GPU.  Blocks on
 * NVMe are not waited for: they are reported -EAGAIN (submit them again
 * later) and nothing is copied for them.  Blocks in memory the pool has
 * just grown into are waited for until the registration thread has pinned
 * it (KVT_CUDA_SUBMIT_WAIT_PINNED).
 *
 * \param layout          engine cache; layer_base are device pointers;
 *                        kvt_layout_block_bytes(layout, block_tokens)
 *                        must equal the namespace's shard_bytes; n_pages
 *                        must be set (every index is checked against it,
 *                        since a wild one would write outside the cache
 *                        and end the engine's CUDA context)
 * \param keys            [n * 32]
 * \param indices         [n] pages or [n * block_tokens] slots, host
 *                        memory, as in kvt_layout_scatter; copied
 * \param compute_stream  the engine's stream (cudaStream_t; NULL is the
 *                        legacy default stream): the copies start after
 *                        the work queued on it so far, which may still be
 *                        using the pages
 * \param ret_job         receives the job, also when no block was queued
 * \return the number of blocks queued, or a negative errno; on an error
 *         nothing is queued or leased and *ret_job is untouched
 */
KVT_EXPORT int kvt_cuda_load_submit(kvt_cuda_ctx *ctx, kvt_ns *ns,
				    uint32_t shard, const kvt_layout *layout,
				    const uint8_t *keys, size_t n,
				    const int64_t *indices,
				    void *compute_stream,
				    kvt_cuda_job **ret_job);

/** kvt_cuda_submit_opts.after: when a job's copies may start. */
#define KVT_CUDA_AFTER_STREAM 0 /* after the work queued on `stream` so
				 * far (what *_submit does) */
#define KVT_CUDA_AFTER_EVENT 1  /* after `event` (a cudaEvent_t the caller
				 * recorded when the pages became free) */
#define KVT_CUDA_AFTER_NONE 2   /* at once: the caller vouches that nothing
				 * on the GPU uses the pages */

/** kvt_cuda_submit_opts.flags: a block in memory the pool has just grown
 * into, which the registration thread has not pinned yet, makes the
 * submission wait (at most 30 s) for it to be pinned, instead of being
 * refused with -EAGAIN at once.  What kvt_cuda_load_submit and
 * kvt_cuda_store_submit do. */
#define KVT_CUDA_SUBMIT_WAIT_PINNED 0x1u

/**
 * Options of kvt_cuda_load_submit_opts / kvt_cuda_store_submit_opts.
 * Zero-initialise it and set size to sizeof(kvt_cuda_submit_opts).
 */
typedef struct kvt_cuda_submit_opts {
	uint32_t size;
	uint32_t after;   /* KVT_CUDA_AFTER_* */
	void *stream;     /* AFTER_STREAM: cudaStream_t (NULL: legacy) */
	void *event;      /* AFTER_EVENT: cudaEvent_t, not NULL */
	/* A namespace whose layer groups differ in geometry (sliding-window
	 * and full attention, MLA beside MHA): one layout per group, in
	 * layer order, and the submission's own layout NULL.  A block is
	 * then each group's block (kvt_layout_block_bytes of its layout)
	 * after the other, which is the namespace's block; a load's layers
	 * (kvt_cuda_wait_layer) are counted across the groups.  0: the
	 * submission's layout covers the whole block. */
	uint32_t n_groups;                    /* 0..16 */
	uint32_t flags;                       /* KVT_CUDA_SUBMIT_* */
	const kvt_layout *const *layouts;     /* [n_groups] */
	/* [n_groups] each group's indices, for engines with a block table
	 * per group; NULL: the submission's indices for every group */
	const int64_t *const *group_indices;
} kvt_cuda_submit_opts;

/**
 * kvt_cuda_load_submit, starting when opts says: with
 * KVT_CUDA_AFTER_EVENT the prefetch of the next step's blocks can run
 * while the compute stream still works on this step, as long as the
 * event marks when the destination pages were last read.  With
 * opts->n_groups, layout is NULL (one layout per group in opts), and
 * indices may be NULL when opts->group_indices is set.  Every layout's
 * n_pages must be set.
 * \return as kvt_cuda_load_submit; -EINVAL for bad opts, or groups whose
 *         blocks do not add up to the namespace's shard
 */
KVT_EXPORT int kvt_cuda_load_submit_opts(kvt_cuda_ctx *ctx, kvt_ns *ns,
					 uint32_t shard,
					 const kvt_layout *layout,
					 const uint8_t *keys, size_t n,
					 const int64_t *indices,
					 const kvt_cuda_submit_opts *opts,
					 kvt_cuda_job **ret_job);

/** kvt_cuda_store_submit, starting when opts says (the event then marks
 * when the pages were written). */
KVT_EXPORT int kvt_cuda_store_submit_opts(kvt_cuda_ctx *ctx, kvt_ns *ns,
					  uint32_t shard,
					  const kvt_layout *layout,
					  const uint8_t *keys, size_t n,
					  const int64_t *indices,
					  const kvt_cuda_submit_opts *opts,
					  kvt_cuda_job **ret_job);

/**
 * Make compute_stream wait until layer `layer` of a load job has landed.
 * The CPU does not wait.  Layers may be waited for in any order and more
 * than once; waiting for the last layer waits for the whole job.
 *
 * \param compute_stream  cudaStream_t; NULL is the legacy default stream
 * \return 0, -EINVAL (not a load job, layer out of range), or a negative
 *         errno from CUDA
 */
KVT_EXPORT int kvt_cuda_wait_layer(kvt_cuda_job *job, uint32_t layer,
				   void *compute_stream);

/**
 * Store blocks from the engine's paged cache into the pool.
 *
 * Reserves each key (kvt_reserve), records an event on compute_stream and
 * queues on the store stream, after that event, one copy of every
 * reserved block.  Nothing waits on the CPU.  The blocks are committed by
 * the kvt_cuda_job_poll() (or _wait) that sees the copy completed, so no
 * other process can read a block before its bytes are in the pool.
 *
 * \param layout, keys, indices  as in kvt_cuda_load_submit; indices as in
 *                        kvt_layout_gather (padding slots store zeros)
 * \param compute_stream  the stream that wrote the KV being stored; NULL
 *                        is the legacy default stream.  The pages must
 *                        not be overwritten before the job completes
 *                        (kvt_cuda_job_poll, or kvt_cuda_job_wait_stream
 *                        on the stream that overwrites them).
 * \return the number of blocks queued, or a negative errno; on an error
 *         nothing is queued or reserved and *ret_job is untouched
 */
KVT_EXPORT int kvt_cuda_store_submit(kvt_cuda_ctx *ctx, kvt_ns *ns,
				     uint32_t shard, const kvt_layout *layout,
				     const uint8_t *keys, size_t n,
				     const int64_t *indices,
				     void *compute_stream,
				     kvt_cuda_job **ret_job);

/** Per-key status of a job still in flight (see kvt_cuda_job_poll). */
#define KVT_CUDA_IN_FLIGHT (-EINPROGRESS)

/**
 * Whether a job has completed, without blocking.  On completion (the
 * first time it is seen) the job finishes on this thread: a load releases
 * its leases, a store commits its blocks (failed copies are committed as
 * failed, never as done).
 *
 * \param ret_status  [n] per key, or NULL.  Loads: 0 loaded, -ENOENT
 *                    miss, -EAGAIN not available yet (on NVMe, in pool
 *                    memory the registration thread has not pinned yet,
 *                    or in memory mapped anew while an older job still
 *                    holds the old registration; submit it again later,
 *                    or kvt_cuda_ctx_wait_pinned first), -EFAULT pool
 *                    memory whose pinning failed and that the GPU cannot
 *                    read unpinned (pinning is retried; see
 *                    kvt_cuda_ctx_stats), -EIO the copy failed, or
 *                    kvt_acquire's status.  Stores: 0 stored,
 *                    -EEXIST already stored, -EAGAIN and -EFAULT as for
 *                    loads, -EIO, or kvt_reserve's and kvt_commit's
 *                    status (-ESTALE: reserved from a daemon that has
 *                    restarted since; nothing was stored).  Keys whose
 *                    copy is still in flight read KVT_CUDA_IN_FLIGHT.
 *                    A job in flight across a daemon restart copies from
 *                    the memory it leased or reserved, which stays mapped
 *                    and registered until the job is finished.
 * \return 1 when the job is complete, 0 while copies are in flight, or a
 *         negative errno (the job is then complete too, and ret_status
 *         holds the error for each affected key)
 */
KVT_EXPORT int kvt_cuda_job_poll(kvt_cuda_job *job, int32_t *ret_status);

/**
 * Block until the job's copies have completed, then as kvt_cuda_job_poll.
 * \return 1 or a negative errno
 */
KVT_EXPORT int kvt_cuda_job_wait(kvt_cuda_job *job, int32_t *ret_status);

/**
 * Make stream wait, on the GPU, until every copy of the job has completed:
 * for an engine that reuses the pages of a store (or of a load) sooner
 * than it polls.  The CPU does not wait.
 * \return 0 or a negative errno
 */
KVT_EXPORT int kvt_cuda_job_wait_stream(kvt_cuda_job *job, void *stream);

/** \return the number of keys of the job (the n it was submitted with). */
KVT_EXPORT size_t kvt_cuda_job_size(const kvt_cuda_job *job);

/**
 * Free a job.  A job still in flight is waited for and finished first
 * (kvt_cuda_job_wait), since its leases and reservations may only end
 * after its copies.  NULL is ignored.
 */
KVT_EXPORT void kvt_cuda_job_free(kvt_cuda_job *job);

#ifdef __cplusplus
}
#endif

#endif
