/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Submission of CUDA load and store jobs (kvtier-cuda.h), on the caller's
 * thread: it leases (load) or reserves (store) the keys, translates each
 * slot to a device address (a binary search in the context's
 * registrations; nothing is registered here), and has cuda-copy.c queue
 * the data copies on the context's load or store stream.  cuda-jobs.c
 * sees them complete.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "cuda-internal.h"
#include "layout_cuda.h"
#include "macro.h"

/* Ends leases or reservations whose copy never started. */
static void drop_handles(kvt_cuda_ctx *ctx, enum job_kind kind,
			 const uint64_t *handles, size_t n)
{
	if (!n)
		return;
	if (kind == JOB_LOAD)
		kvt_release(ctx->c, handles, n, NULL);
	else
		kvt_abort(ctx->c, handles, n, NULL);
}

/* Counts the job among g's users, once; with ctx->lock held.  Jobs use
 * few registrations (a 1 GiB chunk holds many blocks), so the list stays
 * short. */
static void job_use_reg(kvt_cuda_job *job, struct reg *g)
{
	for (size_t i = job->n_regs; i-- > 0;)
		if (job->regs[i] == g)
			return;
	job->regs[job->n_regs++] = g;
	g->users++;
}

/* What a submission needs only until its copies are queued; the arrays
 * are sized for n keys, of which the first n_q are queued. */
struct submit {
	struct part parts[KVT_MAX_GROUPS];
	uint32_t n_parts;
	uint32_t n_layers;   /* of all parts */
	kvt_slot_ref *refs;  /* [n] what kvt_acquire / kvt_reserve gave */
	void **blk_dev;      /* [n_q] the queued blocks' device addresses */
	void **blk_host;     /* [n_q] and their host addresses */
	uint64_t *bad;       /* handles of blocks the GPU cannot address */
};

static void submit_done(struct submit *s)
{
	free(s->refs);
	free(s->blk_dev);
	free(s->blk_host);
	free(s->bad);
	for (uint32_t k = 0; k < s->n_parts; k++)
		free(s->parts[k].idx);
}

static int opts_check(const kvt_cuda_submit_opts *o)
{
	if (o->size < offsetof(kvt_cuda_submit_opts, event) ||
	    (o->size >= offsetof(kvt_cuda_submit_opts, layouts) &&
	     (o->flags & ~KVT_CUDA_SUBMIT_WAIT_PINNED)))
		return -EINVAL;
	switch (o->after) {
	case KVT_CUDA_AFTER_STREAM:
	case KVT_CUDA_AFTER_NONE:
		return 0;
	case KVT_CUDA_AFTER_EVENT:
		return o->size >= sizeof(*o) && o->event ? 0 : -EINVAL;
	default:
		return -EINVAL;
	}
}

/* A part per layout: its geometry, its bounds, its place in the block;
 * every index checked before a key is leased or reserved. */
static int part_init(const kvt_cuda_ctx *ctx, const kvt_ns *ns, uint32_t n_groups,
		     uint32_t k, const kvt_layout *layout, const int64_t *indices,
		     size_t n, struct part *p, uint64_t offset, uint32_t layer0)
{
	uint32_t block_tokens = ns->info.block_tokens;
	kvt_layout coded;

	if (!layout || !layout->layer_base || (n && !indices))
		return -EINVAL;
	p->coded = ns->info.codec != KVT_CODEC_NONE;
	if (p->coded) {
		if (ns_coded_layout(ns, n_groups, k, layout, &coded) < 0 ||
		    kvt_codec_geom_from_layout(&coded, block_tokens, &p->cg) < 0)
			return -EINVAL;
		p->g = p->cg.g;
	} else if (kvt_geom_from_layout(layout, block_tokens, &p->g) < 0) {
		return -EINVAL;
	}
	/* K by columns is vLLM's CPU attention's, never a GPU cache's. */
	if (p->g.k_column_elem) {
		client_log(ctx->c, KVT_LOG_WARNING,
			   "CUDA: a layout with K kept by columns "
			   "(KVT_LAYOUT_K_COLUMNS) is copied on the CPU only");
		return -EINVAL;
	}
	/* An index past the cache would be written on the GPU, out of
	 * bounds: the bound is required here. */
	if (!layout->n_pages) {
		client_log(ctx->c, KVT_LOG_WARNING,
			   "CUDA: layout.n_pages is 0; set it to the pages of "
			   "the engine's cache so that every index is checked");
		return -EINVAL;
	}
	for (int64_t l = 0; l < kvt_geom_n_bases(&p->g); l++)
		if (!layout->layer_base[l])
			return -EINVAL;
	/* A tile's state lives in the CTA's shared memory. */
	if (p->coded &&
	    kvt_codec_smem_bytes(&p->cg, KVT_CODEC_THREADS) > KVT_CODEC_SMEM_MAX) {
		snprintf(ns->c->error, sizeof(ns->c->error),
			 "CUDA: tiles of %lld tokens of %lld elements are past the "
			 "codec kernel's shared memory: copy through host memory "
			 "(kvt_store_paged/kvt_load_paged)",
			 (long long)p->g.block_tokens, (long long)p->cg.d);
		return -EOPNOTSUPP;
	}
	if (kvt_geom_check_indices(&p->g, indices, (int64_t)n) < 0)
		return -EINVAL;
	p->layout = layout;
	p->indices = indices;
	p->per = p->g.index_kind == KVT_INDEX_SLOT ? (size_t)p->g.block_tokens
						   : 1;
	p->offset = offset;
	p->layer0 = layer0;
	return 0;
}

/* Every argument is checked, and every index, before a key is leased or
 * reserved; fills s->parts: one for layout, or one per layer group of
 * opts, whose blocks follow each other in the namespace's block. */
static int submit_check(const kvt_cuda_ctx *ctx, const kvt_ns *ns,
			const kvt_layout *layout, const uint8_t *keys,
			size_t n, const int64_t *indices,
			const kvt_cuda_submit_opts *opts,
			kvt_cuda_job *const *ret_job, struct submit *s)
{
	uint32_t groups = 0;
	uint64_t off = 0;
	int r;

	if (!ctx || !ns || !opts || !ret_job || (n && !keys) ||
	    opts_check(opts) < 0)
		return -EINVAL;
	/* The count is returned as an int. */
	if (ns->c != ctx->c || n > INT32_MAX)
		return -EINVAL;
	if (opts->size >= offsetof(kvt_cuda_submit_opts, group_indices) +
				  sizeof(opts->group_indices))
		groups = opts->n_groups;
	if (groups ? layout || !opts->layouts || groups > KVT_MAX_GROUPS
		   : !layout)
		return -EINVAL;
	s->n_parts = groups ? groups : 1;
	for (uint32_t k = 0; k < s->n_parts; k++) {
		const kvt_layout *lk = groups ? opts->layouts[k] : layout;
		const int64_t *ik = groups && opts->group_indices
					    ? opts->group_indices[k]
					    : indices;

		r = lk && lk->n_layers <= UINT32_MAX - s->n_layers
			    ? part_init(ctx, ns, s->n_parts, k, lk, ik, n,
					&s->parts[k], off, s->n_layers)
			    : -EINVAL;
		if (r < 0) {
			s->n_parts = k;
			return r;
		}
		/* Coded blocks are [layer][plane][head] tiles: a layer's
		 * part of them is contiguous, as it is uncoded. */
		off += s->parts[k].coded
			       ? (uint64_t)(s->parts[k].cg.layer_bytes *
					    s->parts[k].g.n_layers)
			       : (uint64_t)kvt_geom_block_bytes(&s->parts[k].g);
		s->n_layers += lk->n_layers;
	}
	return off == ns->info.shard_bytes ? 0 : -EINVAL;
}

/* A job of n keys and its arrays, and the submission's; NULL when out of
 * memory (and nothing kept). */
static kvt_cuda_job *job_new(kvt_cuda_ctx *ctx, enum job_kind kind,
			     size_t n, struct submit *s)
{
	kvt_cuda_job *job = calloc(1, sizeof(*job));
	bool idx_ok = true;

	if (!job)
		return NULL;
	job->ctx = ctx;
	job->kind = kind;
	job->n = n;
	job->n_layers = kind == JOB_LOAD ? s->n_layers : 0;
	job->status = calloc(n ? n : 1, sizeof(*job->status));
	job->which = calloc(n ? n : 1, sizeof(*job->which));
	job->handles = calloc(n ? n : 1, sizeof(*job->handles));
	job->regs = calloc(n ? n : 1, sizeof(*job->regs));
	job->layer_ev = calloc(job->n_layers ? job->n_layers : 1,
			       sizeof(*job->layer_ev));
	s->refs = calloc(n ? n : 1, sizeof(*s->refs));
	s->blk_dev = calloc(n ? n : 1, sizeof(*s->blk_dev));
	s->blk_host = calloc(n ? n : 1, sizeof(*s->blk_host));
	s->bad = calloc(n ? n : 1, sizeof(*s->bad));
	for (uint32_t k = 0; k < s->n_parts; k++) {
		struct part *p = &s->parts[k];

		p->idx = calloc(n ? n * p->per : 1, sizeof(*p->idx));
		idx_ok &= p->idx != NULL;
	}
	if (!job->status || !job->which || !job->handles || !job->regs ||
	    !job->layer_ev || !s->refs || !s->blk_dev || !s->blk_host ||
	    !s->bad || !idx_ok) {
		cuda_job_free_arrays(job);
		return NULL;
	}
	return job;
}

/* The events of a load's layers and of the job's end. */
static int job_get_events(kvt_cuda_job *job)
{
	int r;

	for (uint32_t l = 0; l < job->n_layers; l++) {
		r = cuda_ev_get(job->ctx, &job->layer_ev[l]);
		if (r < 0)
			return r;
	}
	return cuda_ev_get(job->ctx, &job->done);
}

/* The daemon instance the slots just handed out belong to, and the
 * generation of the client's extents. */
static uint64_t client_instance(kvt_client *c, uint64_t *ret_gen)
{
	uint64_t v;

	pthread_mutex_lock(&c->lock);
	v = c->instance;
	*ret_gen = c->extents_gen;
	pthread_mutex_unlock(&c->lock);
	return v;
}

/*
 * Takes the blocks the daemon handed out whose memory is registered into
 * the job's queue; the others end at once, with their status (-EAGAIN:
 * not pinned yet, which wakes the registration thread; -EFAULT).  One
 * binary search per block, under the context's lock.
 */
/* Whether a block handed out is in memory not pinned yet (with
 * ctx->lock held). */
static bool refs_unpinned(const kvt_cuda_ctx *ctx, const kvt_slot_ref *refs,
			  size_t n, uint64_t instance)
{
	for (size_t i = 0; i < n; i++) {
		int err;

		if (refs[i].status == 0 &&
		    !regs_lookup(&ctx->regs, refs[i].ptr, refs[i].bytes,
				 refs[i].extent_id, instance, &err) &&
		    err == -EAGAIN)
			return true;
	}
	return false;
}

static void job_translate(kvt_cuda_job *job, struct submit *s, size_t n,
			  bool wait_pinned)
{
	kvt_cuda_ctx *ctx = job->ctx;
	kvt_slot_ref *refs = s->refs;
	uint64_t gen, instance = client_instance(ctx->c, &gen);
	size_t n_bad = 0;

	pthread_mutex_lock(&ctx->lock);
	/* Extents the thread has not seen: it looks now. */
	if (gen != ctx->seen_gen)
		cuda_regs_kick_locked(ctx);
	/* The pool grew under these blocks: the thread pins the new memory
	 * while this submission waits, when the caller would rather wait. */
	if (wait_pinned && refs_unpinned(ctx, refs, n, instance)) {
		pthread_mutex_unlock(&ctx->lock);
		(void)cuda_regs_wait(ctx, SUBMIT_WAIT_MS);
		pthread_mutex_lock(&ctx->lock);
	}
	for (size_t i = 0; i < n; i++) {
		struct reg *rg;
		size_t q = job->n_q;
		int err;

		job->status[i] = refs[i].status;
		if (refs[i].status != 0)
			continue;
		rg = regs_lookup(&ctx->regs, refs[i].ptr, refs[i].bytes,
				 refs[i].extent_id, instance, &err);
		if (!rg) {
			job->status[i] = err;
			s->bad[n_bad++] = refs[i].handle;
			ctx->blocks_unpinned++;
			cuda_regs_kick_locked(ctx);
			continue;
		}
		job->which[q] = i;
		job->handles[q] = refs[i].handle;
		s->blk_dev[q] = rg->dev + ((uint8_t *)refs[i].ptr - rg->r.host);
		s->blk_host[q] = refs[i].ptr;
		for (uint32_t k = 0; k < s->n_parts; k++) {
			struct part *p = &s->parts[k];

			memcpy(p->idx + q * p->per, p->indices + i * p->per,
			       p->per * sizeof(*p->idx));
		}
		job_use_reg(job, rg);
		job->unpinned |= rg->pin == NULL;
		job->status[i] = KVT_CUDA_IN_FLIGHT;
		job->n_q++;
	}
	pthread_mutex_unlock(&ctx->lock);
	drop_handles(ctx, job->kind, s->bad, n_bad);
}

/* Loads overwrite pages the engine may still read, stores read pages it
 * may still write: st waits for what opts says (by default, the work
 * queued on the compute stream now). */
static int job_after(kvt_cuda_job *job, const kvt_cuda_submit_opts *opts,
		     cudaStream_t st)
{
	kvt_cuda_ctx *ctx = job->ctx;
	cudaEvent_t after = NULL;
	cudaError_t e;
	int r;

	if (opts->after == KVT_CUDA_AFTER_NONE)
		return 0;
	if (opts->after == KVT_CUDA_AFTER_EVENT) {
		e = cudaStreamWaitEvent(st, (cudaEvent_t)opts->event, 0);
		return e == cudaSuccess
			       ? 0
			       : cuda_fail(ctx, e, "waiting for the event");
	}
	r = cuda_ev_get(ctx, &after);
	if (r < 0)
		return r;
	e = cudaEventRecord(after, (cudaStream_t)opts->stream);
	if (e == cudaSuccess)
		e = cudaStreamWaitEvent(st, after, 0);
	/* The wait took the event's state when it was queued, so the event
	 * can serve the next job at once. */
	cuda_ev_put(ctx, after);
	if (e != cudaSuccess)
		return cuda_fail(ctx, e, "waiting for the compute stream");
	return 0;
}

/* Queues the job's copies on st, and its events after them. */
static int job_enqueue(kvt_cuda_job *job, const struct submit *s,
		       cudaStream_t st)
{
	kvt_cuda_ctx *ctx = job->ctx;
	cudaError_t e;
	int r;

	if (job->n_q) {
		r = cuda_job_queue(job, s->parts, s->n_parts, s->blk_dev,
				   s->blk_host, st);
		if (r < 0)
			return r;
	} else {
		/* Nothing to copy; the layer events still mark this point of
		 * the load stream, so waiting for them stays valid. */
		for (uint32_t l = 0; l < job->n_layers; l++) {
			e = cudaEventRecord(job->layer_ev[l], st);
			if (e != cudaSuccess)
				return cuda_fail(ctx, e, "cudaEventRecord");
		}
	}
	e = cudaEventRecord(job->done, st);
	if (e != cudaSuccess)
		return cuda_fail(ctx, e, "cudaEventRecord");
	return 0;
}

/* Undoes a submission that failed part way: held, its keys were leased
 * or reserved; entered, it got events (and maybe arrays). */
static void job_unwind(kvt_cuda_job *job, cudaStream_t st, bool held,
		       bool entered)
{
	kvt_cuda_ctx *ctx = job->ctx;

	/* Some copies may be queued already: the slots can only be handed
	 * back once the stream has drained. */
	if (held && job->n_q) {
		cudaStreamSynchronize(st);
		(void)cudaGetLastError();
		drop_handles(ctx, job->kind, job->handles, job->n_q);
	}
	cuda_job_unuse_regs(job);
	if (entered) {
		for (uint32_t l = 0; l < job->n_layers; l++)
			cuda_ev_put(ctx, job->layer_ev[l]);
		cuda_ev_put(ctx, job->done);
		cuda_meta_put(ctx, job->meta);
	}
	cuda_job_free_arrays(job);
}

static int job_submit(kvt_cuda_ctx *ctx, enum job_kind kind, kvt_ns *ns,
		      uint32_t shard, const kvt_layout *layout,
		      const uint8_t *keys, size_t n, const int64_t *indices,
		      const kvt_cuda_submit_opts *opts, kvt_cuda_job **ret_job)
{
	_cleanup_(submit_done) struct submit s = {0};
	kvt_cuda_job *job;
	cudaStream_t st;
	int prev = 0, r;
	bool entered = false, held = false;

	r = submit_check(ctx, ns, layout, keys, n, indices, opts, ret_job, &s);
	if (r < 0)
		return r;
	st = kind == JOB_LOAD ? ctx->load : ctx->store;
	job = job_new(ctx, kind, n, &s);
	if (!job)
		return -ENOMEM;

	r = cuda_dev_enter(ctx, &prev);
	if (r < 0)
		goto out;
	entered = true;
	r = job_get_events(job);
	if (r < 0)
		goto out;
	if (n) {
		r = kind == JOB_LOAD ? kvt_acquire(ns, shard, keys, n, s.refs)
				     : kvt_reserve(ns, shard, keys, n, s.refs);
		if (r < 0)
			goto out;
	}
	held = true;
	job_translate(job, &s, n,
		      opts->size >= offsetof(kvt_cuda_submit_opts, layouts) &&
			      (opts->flags & KVT_CUDA_SUBMIT_WAIT_PINNED));
	r = job_after(job, opts, st);
	if (r < 0)
		goto out;
	r = job_enqueue(job, &s, st);
	if (r < 0)
		goto out;

	r = (int)job->n_q;
	*ret_job = job;
	job = NULL;
out:
	if (job)
		job_unwind(job, st, held, entered);
	if (entered)
		cuda_dev_leave(ctx, prev);
	return r;
}

/* What the submissions without options wait for. */
static kvt_cuda_submit_opts after_stream(void *stream)
{
	return (kvt_cuda_submit_opts){.size = sizeof(kvt_cuda_submit_opts),
				      .after = KVT_CUDA_AFTER_STREAM,
				      .stream = stream,
				      .flags = KVT_CUDA_SUBMIT_WAIT_PINNED};
}

KVT_EXPORT int kvt_cuda_load_submit(kvt_cuda_ctx *ctx, kvt_ns *ns,
				    uint32_t shard, const kvt_layout *layout,
				    const uint8_t *keys, size_t n,
				    const int64_t *indices,
				    void *compute_stream,
				    kvt_cuda_job **ret_job)
{
	kvt_cuda_submit_opts o = after_stream(compute_stream);

	return job_submit(ctx, JOB_LOAD, ns, shard, layout, keys, n, indices,
			  &o, ret_job);
}

KVT_EXPORT int kvt_cuda_store_submit(kvt_cuda_ctx *ctx, kvt_ns *ns,
				     uint32_t shard, const kvt_layout *layout,
				     const uint8_t *keys, size_t n,
				     const int64_t *indices,
				     void *compute_stream,
				     kvt_cuda_job **ret_job)
{
	kvt_cuda_submit_opts o = after_stream(compute_stream);

	return job_submit(ctx, JOB_STORE, ns, shard, layout, keys, n, indices,
			  &o, ret_job);
}

KVT_EXPORT int kvt_cuda_load_submit_opts(kvt_cuda_ctx *ctx, kvt_ns *ns,
					 uint32_t shard,
					 const kvt_layout *layout,
					 const uint8_t *keys, size_t n,
					 const int64_t *indices,
					 const kvt_cuda_submit_opts *opts,
					 kvt_cuda_job **ret_job)
{
	return job_submit(ctx, JOB_LOAD, ns, shard, layout, keys, n, indices,
			  opts, ret_job);
}

KVT_EXPORT int kvt_cuda_store_submit_opts(kvt_cuda_ctx *ctx, kvt_ns *ns,
					  uint32_t shard,
					  const kvt_layout *layout,
					  const uint8_t *keys, size_t n,
					  const int64_t *indices,
					  const kvt_cuda_submit_opts *opts,
					  kvt_cuda_job **ret_job)
{
	return job_submit(ctx, JOB_STORE, ns, shard, layout, keys, n, indices,
			  opts, ret_job);
}
