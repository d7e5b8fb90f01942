/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CUDA data path of libkvtier-client (kvtier-cuda.h): registration of
 * the pool with the driver, load and store jobs on their own streams, and
 * completion by polling on the caller's thread.
 *
 * A job's life: submit leases (load) or reserves (store) its keys on the
 * caller's thread, translates each slot to a device address, uploads the
 * job's small arrays (layer bases, indices, block addresses) in one copy
 * and queues the data copies; poll sees the job's last event complete and
 * only then releases or commits, so a slot is never reused, nor a block
 * shown to another process, while a copy may still touch it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "client-internal.h"
#include "kvtier-cuda.h"
#include "layout_cuda.h"

/* One registration covers at most this much: the pool's buffers are at
 * most 1 GiB and slots never cross them, so no copy spans two. */
#define REG_CHUNK (UINT64_C(1) << 30)
/* Smallest job array buffer; they are kept and reused. */
#define META_MIN (64u * 1024)

enum job_kind {
	JOB_LOAD,
	JOB_STORE,
};

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

/* ---- devices -------------------------------------------------------- */

/* Every entry point that creates or queues work runs on the context's
 * device and puts the caller's current device back. */
static int dev_enter(const kvt_cuda_ctx *ctx, int *ret_prev)
{
	cudaError_t e = cudaGetDevice(ret_prev);

	if (e == cudaSuccess && *ret_prev != ctx->device)
		e = cudaSetDevice(ctx->device);
	return e == cudaSuccess ? 0 : kvt_cuda_errno(e);
}

static void dev_leave(const kvt_cuda_ctx *ctx, int prev)
{
	if (prev != ctx->device)
		cudaSetDevice(prev);
}

/* An error we handled must not surface in the engine's next
 * cudaGetLastError(). */
static int cuda_fail(kvt_cuda_ctx *ctx, cudaError_t e, const char *what)
{
	(void)cudaGetLastError();
	client_log(ctx->c, KVT_LOG_WARNING, "CUDA: %s failed: %s", what,
		   cudaGetErrorString(e));
	return kvt_cuda_errno(e);
}

/* ---- events and job arrays ------------------------------------------ */

static int ev_get(kvt_cuda_ctx *ctx, cudaEvent_t *ret)
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

static void ev_put(kvt_cuda_ctx *ctx, cudaEvent_t ev)
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

static int meta_get(kvt_cuda_ctx *ctx, size_t need, struct meta **ret)
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

static void meta_put(kvt_cuda_ctx *ctx, struct meta *m)
{
	if (!m)
		return;
	m->next = ctx->free_meta;
	ctx->free_meta = m;
}

/* ---- registration of the pool ---------------------------------------- */

struct ext_snap {
	uint32_t id;
	uint8_t *base;
	uint64_t size;
};

/* The client's extents as they are now, and the daemon instance they
 * belong to; the lock is not held while the driver pins, which can take
 * long. */
static int snapshot_extents(kvt_client *c, struct ext_snap **ret,
			    uint32_t *ret_n, uint64_t *ret_instance)
{
	struct ext_snap *s;
	uint32_t n;

	pthread_mutex_lock(&c->lock);
	*ret_instance = c->instance;
	n = c->n_extents;
	s = calloc(n ? n : 1, sizeof(*s));
	if (s)
		for (uint32_t i = 0; i < n; i++)
			s[i] = (struct ext_snap){c->extents[i]->id,
						 c->extents[i]->base,
						 c->extents[i]->size};
	pthread_mutex_unlock(&c->lock);
	if (!s)
		return -ENOMEM;
	*ret = s;
	*ret_n = n;
	return 0;
}

static void reg_drop(struct reg *r)
{
	if (r->owned) {
		cudaError_t e = cudaHostUnregister(r->host);

		if (e != cudaSuccess)
			(void)cudaGetLastError();
	}
	free(r);
}

/* Unregisters stale ranges no unfinished job uses any more. */
static void regs_collect(kvt_cuda_ctx *ctx)
{
	struct reg **pp = &ctx->regs;

	while (*pp) {
		struct reg *r = *pp;

		if (r->stale && r->users == 0) {
			*pp = r->next;
			reg_drop(r);
		} else {
			pp = &r->next;
		}
	}
}

static void reg_add(kvt_cuda_ctx *ctx, uint32_t id, uint8_t *host,
		    uint64_t size)
{
	struct reg *r = calloc(1, sizeof(*r));
	cudaError_t e;
	void *dev = NULL;
	bool pinned = false;

	if (!r)
		return;
	r->extent_id = id;
	r->host = host;
	r->size = size;

	/* Portable: every device may copy from it; mapped: it has a device
	 * address, which the kernel needs. */
	e = cudaHostRegister(host, size,
			     cudaHostRegisterPortable | cudaHostRegisterMapped);
	if (e == cudaSuccess) {
		r->owned = true;
		pinned = true;
	} else if (e == cudaErrorHostMemoryAlreadyRegistered) {
		/* The engine registered it (or a range around it): use that
		 * registration and leave it to its owner. */
		(void)cudaGetLastError();
		pinned = true;
	} else {
		cuda_fail(ctx, e, "cudaHostRegister");
		client_log(ctx->c, KVT_LOG_WARNING,
			   "CUDA: extent %u (%llu MiB at offset %p) is not pinned%s",
			   id, (unsigned long long)(size >> 20), (void *)host,
			   ctx->pageable ? "; copies use the pageable mapping"
					 : "; its blocks cannot be copied by the GPU");
	}
	if (pinned) {
		e = cudaHostGetDevicePointer(&dev, host, 0);
		if (e != cudaSuccess) {
			cuda_fail(ctx, e, "cudaHostGetDevicePointer");
			dev = NULL;
		}
	}
	if (!dev && ctx->pageable)
		dev = host;
	r->dev = dev;
	r->next = ctx->regs;
	ctx->regs = r;
}

static bool overlaps(const struct reg *r, const uint8_t *p, uint64_t n)
{
	return p < r->host + r->size && r->host < p + n;
}

/*
 * Brings the registrations in line with the client's extents: ranges of
 * extents that are gone become stale and are unregistered once unused;
 * new extents are registered chunk by chunk.
 *
 * A restarted daemon's extents replace the old ones, whose ids start
 * over; an old extent stays mapped while the client holds handles in it
 * (the unfinished jobs' among them) and is unmapped after, and mmap likes
 * to put new extents at the old addresses: a range that looks the same may
 * be other memory, while the driver still pins the old pages under the old
 * registration.  So every range of an earlier daemon instance is stale,
 * whatever its id and address.  A new extent mapped where a stale range is
 * still pinned for an unfinished job waits for that job: registering over
 * it would find the old registration and copy to the old pages.  (A
 * reconnect to the same daemon keeps the mappings, and the ranges.)
 */
static int regs_sync(kvt_cuda_ctx *ctx)
{
	struct ext_snap *ext;
	uint64_t instance;
	uint32_t n;
	int r;

	r = snapshot_extents(ctx->c, &ext, &n, &instance);
	if (r < 0)
		return r;

	if (instance != ctx->instance) {
		for (struct reg *g = ctx->regs; g; g = g->next)
			g->stale = true;
		ctx->instance = instance;
	}
	for (struct reg *g = ctx->regs; g; g = g->next) {
		bool live = false;

		for (uint32_t i = 0; i < n && !live; i++)
			live = g->extent_id == ext[i].id &&
			       g->host >= ext[i].base &&
			       g->host + g->size <= ext[i].base + ext[i].size;
		if (!live)
			g->stale = true;
	}
	regs_collect(ctx);

	for (uint32_t i = 0; i < n; i++) {
		for (uint64_t off = 0; off < ext[i].size; off += REG_CHUNK) {
			uint8_t *p = ext[i].base + off;
			uint64_t len = ext[i].size - off < REG_CHUNK
					       ? ext[i].size - off
					       : REG_CHUNK;
			bool have = false, blocked = false;

			for (struct reg *g = ctx->regs; g; g = g->next) {
				if (!g->stale && g->host == p &&
				    g->size == len)
					have = true;
				else if (g->stale && overlaps(g, p, len))
					blocked = true;
			}
			if (!have && !blocked)
				reg_add(ctx, ext[i].id, p, len);
		}
	}
	free(ext);
	return 0;
}

/* Whether [p, p + bytes) lies where a stale range is still pinned. */
static bool stale_overlap(const kvt_cuda_ctx *ctx, void *p, uint64_t bytes)
{
	for (const struct reg *g = ctx->regs; g; g = g->next)
		if (g->stale && overlaps(g, p, bytes))
			return true;
	return false;
}

/* The device address of [p, p + bytes) and its registration, or NULL. */
static uint8_t *dev_addr(kvt_cuda_ctx *ctx, void *p, uint64_t bytes,
			 struct reg **ret_reg)
{
	uint8_t *h = p;

	for (struct reg *g = ctx->regs; g; g = g->next) {
		if (g->stale || h < g->host || bytes > g->size ||
		    (uint64_t)(h - g->host) > g->size - bytes)
			continue;
		*ret_reg = g;
		return g->dev ? g->dev + (h - g->host) : NULL;
	}
	return NULL;
}

/* ---- context -------------------------------------------------------- */

KVT_EXPORT int kvt_cuda_ctx_new(kvt_client *c, int device,
				kvt_cuda_ctx **ret)
{
	kvt_cuda_ctx *ctx;
	int n_dev = 0, prev = 0, least = 0, greatest = 0, pageable = 0, r;
	cudaError_t e;

	if (!c || !ret || device < 0)
		return -EINVAL;
	e = cudaGetDeviceCount(&n_dev);
	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		client_log(c, KVT_LOG_DEBUG, "CUDA: no device: %s",
			   cudaGetErrorString(e));
		return -ENODEV;
	}
	if (device >= n_dev)
		return -ENODEV;

	ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return -ENOMEM;
	/* Like a namespace, a context keeps the client's memory: freed in
	 * either order, neither touches freed memory. */
	ctx->c = client_ref(c);
	ctx->device = device;

	r = dev_enter(ctx, &prev);
	if (r < 0) {
		free(ctx);
		return r;
	}
	if (cudaDeviceGetAttribute(&pageable, cudaDevAttrPageableMemoryAccess,
				   device) != cudaSuccess) {
		(void)cudaGetLastError();
		pageable = 0;
	}
	ctx->pageable = pageable != 0;

	/* Non-blocking: the engine's work on the legacy default stream must
	 * not serialise with our copies.  Loads are on the critical path of
	 * the next forward pass, stores are not. */
	e = cudaDeviceGetStreamPriorityRange(&least, &greatest);
	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		least = greatest = 0;
	}
	e = cudaStreamCreateWithPriority(&ctx->load, cudaStreamNonBlocking,
					 greatest);
	if (e == cudaSuccess)
		e = cudaStreamCreateWithPriority(&ctx->store,
						 cudaStreamNonBlocking, least);
	if (e != cudaSuccess) {
		r = cuda_fail(ctx, e, "cudaStreamCreate");
		goto fail;
	}
	r = regs_sync(ctx);
	if (r < 0)
		goto fail;
	dev_leave(ctx, prev);
	*ret = ctx;
	return 0;

fail:
	if (ctx->load)
		cudaStreamDestroy(ctx->load);
	if (ctx->store)
		cudaStreamDestroy(ctx->store);
	dev_leave(ctx, prev);
	client_unref(ctx->c);
	free(ctx);
	return r;
}

KVT_EXPORT void kvt_cuda_ctx_free(kvt_cuda_ctx *ctx)
{
	int prev = 0;
	bool entered;

	if (!ctx)
		return;
	entered = dev_enter(ctx, &prev) == 0;
	cudaStreamSynchronize(ctx->load);
	cudaStreamSynchronize(ctx->store);
	while (ctx->regs) {
		struct reg *g = ctx->regs;

		ctx->regs = g->next;
		reg_drop(g);
	}
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
	cudaStreamDestroy(ctx->load);
	cudaStreamDestroy(ctx->store);
	(void)cudaGetLastError();
	if (entered)
		dev_leave(ctx, prev);
	client_unref(ctx->c);
	free(ctx);
}

/* ---- jobs ----------------------------------------------------------- */

static void job_free_arrays(kvt_cuda_job *job)
{
	free(job->status);
	free(job->which);
	free(job->handles);
	free(job->regs);
	free(job->layer_ev);
	free(job);
}

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
		uint8_t *ok = malloc(job->n_q);
		int32_t *st = calloc(job->n_q, sizeof(*st));
		int r;

		if (!ok || !st) {
			/* Without memory to say which copies succeeded,
			 * abort them all: dropping a block is safe,
			 * publishing a bad one is not. */
			kvt_abort(ctx->c, job->handles, job->n_q, NULL);
			for (size_t q = 0; q < job->n_q; q++)
				job->status[job->which[q]] = -ENOMEM;
			job->result = -ENOMEM;
		} else {
			size_t unsent = 0;

			memset(ok, copy_err == 0, job->n_q);
			r = kvt_commit(ctx->c, job->handles, ok, job->n_q, st);
			for (size_t q = 0; q < job->n_q; q++) {
				/* Not committed for want of the daemon: still
				 * ours, and given back (unsent <= q). */
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
	if (copy_err && job->result == 0)
		job->result = copy_err;

	for (size_t i = 0; i < job->n_regs; i++)
		job->regs[i]->users--;
	regs_collect(ctx);
	meta_put(ctx, job->meta);
	job->meta = NULL;
	job->finished = true;
}

static void job_use_reg(kvt_cuda_job *job, struct reg *g)
{
	for (size_t i = 0; i < job->n_regs; i++)
		if (job->regs[i] == g)
			return;
	job->regs[job->n_regs++] = g;
}

/* The arrays a kernel launch reads, laid out in one buffer so that one
 * copy uploads them. */
struct job_arrays {
	void **layer_base; /* [n_layers] */
	int64_t *indices;  /* [n_q * per] */
	void **blocks;     /* [n_q] device addresses */
};

static void arrays_at(uint8_t *base, uint32_t n_layers, size_t n_idx,
		      struct job_arrays *ret)
{
	ret->layer_base = (void **)base;
	ret->indices = (int64_t *)(base + n_layers * sizeof(void *));
	ret->blocks = (void **)(base + n_layers * sizeof(void *) +
				n_idx * sizeof(int64_t));
}

/*
 * Queues the copies of a job on st.  blk_dev and blk_host are the queued
 * blocks' addresses as the kernel and as cudaMemcpyBatchAsync see them.
 */
static int job_queue(kvt_cuda_job *job, const struct kvt_geom *g,
		     const kvt_layout *layout, const int64_t *idx_host,
		     size_t per, void *const *blk_dev, void *const *blk_host,
		     cudaStream_t st)
{
	kvt_cuda_ctx *ctx = job->ctx;
	uint32_t nl = layout->n_layers;
	size_t n_idx = job->n_q * per, bytes;
	struct job_arrays ha, da = {0};
	uint32_t align = 1;
	int path, r = 0;
	cudaError_t e;

	if (job->kind == JOB_LOAD)
		path = kvt_cuda_path(g, 0, 1, layout->layer_base, st);
	else
		path = kvt_cuda_path(g, 0, nl, layout->layer_base, st);

	if (path == KVT_PATH_KERNEL) {
		bytes = nl * sizeof(void *) + n_idx * sizeof(int64_t) +
			job->n_q * sizeof(void *);
		r = meta_get(ctx, bytes, &job->meta);
		if (r < 0)
			return r;
		arrays_at(job->meta->host, nl, n_idx, &ha);
		arrays_at(job->meta->dev, nl, n_idx, &da);
		memcpy(ha.layer_base, layout->layer_base, nl * sizeof(void *));
		memcpy(ha.indices, idx_host, n_idx * sizeof(int64_t));
		memcpy(ha.blocks, blk_dev, job->n_q * sizeof(void *));
		e = cudaMemcpyAsync(job->meta->dev, job->meta->host, bytes,
				    cudaMemcpyHostToDevice, st);
		if (e != cudaSuccess)
			return cuda_fail(ctx, e, "cudaMemcpyAsync");
		align = kvt_ptr_align((const void *const *)layout->layer_base,
				      nl);
		if (kvt_ptr_align((const void *const *)blk_dev,
				  (int64_t)job->n_q) < align)
			align = kvt_ptr_align((const void *const *)blk_dev,
					      (int64_t)job->n_q);
	}

	if (job->kind == JOB_STORE) {
		if (path == KVT_PATH_BATCH)
			r = kvt_cuda_gather_batch(g, 0, nl, layout->layer_base,
						  idx_host, blk_host,
						  (int64_t)job->n_q, st);
		else
			r = kvt_cuda_gather(g, 0, nl, da.layer_base,
					    da.indices, da.blocks,
					    (int64_t)job->n_q, align, st);
		return r;
	}

	for (uint32_t l = 0; l < nl; l++) {
		if (path == KVT_PATH_BATCH)
			r = kvt_cuda_scatter_batch(g, l, 1, layout->layer_base,
						   idx_host, blk_host,
						   (int64_t)job->n_q, st);
		else
			r = kvt_cuda_scatter(g, l, 1, da.layer_base,
					     da.indices, da.blocks,
					     (int64_t)job->n_q, align, st);
		if (r < 0)
			return r;
		e = cudaEventRecord(job->layer_ev[l], st);
		if (e != cudaSuccess)
			return cuda_fail(ctx, e, "cudaEventRecord");
	}
	return 0;
}

static int job_submit(kvt_cuda_ctx *ctx, enum job_kind kind, kvt_ns *ns,
		      uint32_t shard, const kvt_layout *layout,
		      const uint8_t *keys, size_t n, const int64_t *indices,
		      void *compute_stream, kvt_cuda_job **ret_job)
{
	cudaStream_t st = kind == JOB_LOAD ? ctx->load : ctx->store;
	kvt_slot_ref *refs = NULL;
	kvt_cuda_job *job = NULL;
	void **blk_dev = NULL, **blk_host = NULL;
	uint64_t *bad = NULL;
	int64_t *idx = NULL;
	size_t per, n_bad = 0;
	struct kvt_geom g;
	cudaEvent_t after = NULL;
	cudaError_t e;
	int prev = 0, r;
	bool entered = false, held = false;

	if (!ctx || !ns || !layout || !ret_job || (n && (!keys || !indices)))
		return -EINVAL;
	/* The count is returned as an int. */
	if (ns->c != ctx->c || n > INT32_MAX)
		return -EINVAL;
	if (kvt_geom_from_layout(layout, ns->info.block_tokens, &g) < 0 ||
	    kvt_layout_block_bytes(layout, ns->info.block_tokens) !=
		    ns->info.shard_bytes ||
	    !layout->layer_base)
		return -EINVAL;
	for (uint32_t l = 0; l < layout->n_layers; l++)
		if (!layout->layer_base[l])
			return -EINVAL;
	/* Every index is checked before a key is leased or reserved. */
	if (kvt_geom_check_indices(&g, indices, (int64_t)n) < 0)
		return -EINVAL;
	per = g.index_kind == KVT_INDEX_SLOT ? (size_t)g.block_tokens : 1;

	r = -ENOMEM;
	job = calloc(1, sizeof(*job));
	if (!job)
		goto out;
	job->ctx = ctx;
	job->kind = kind;
	job->n = n;
	job->n_layers = kind == JOB_LOAD ? layout->n_layers : 0;
	job->status = calloc(n ? n : 1, sizeof(*job->status));
	job->which = calloc(n ? n : 1, sizeof(*job->which));
	job->handles = calloc(n ? n : 1, sizeof(*job->handles));
	job->regs = calloc(n ? n : 1, sizeof(*job->regs));
	job->layer_ev = calloc(job->n_layers ? job->n_layers : 1,
			       sizeof(*job->layer_ev));
	refs = calloc(n ? n : 1, sizeof(*refs));
	blk_dev = calloc(n ? n : 1, sizeof(*blk_dev));
	blk_host = calloc(n ? n : 1, sizeof(*blk_host));
	bad = calloc(n ? n : 1, sizeof(*bad));
	idx = calloc(n ? n * per : 1, sizeof(*idx));
	if (!job->status || !job->which || !job->handles || !job->regs ||
	    !job->layer_ev || !refs || !blk_dev || !blk_host || !bad || !idx)
		goto out;

	r = dev_enter(ctx, &prev);
	if (r < 0)
		goto out;
	entered = true;
	for (uint32_t l = 0; l < job->n_layers; l++) {
		r = ev_get(ctx, &job->layer_ev[l]);
		if (r < 0)
			goto out;
	}
	r = ev_get(ctx, &job->done);
	if (r < 0)
		goto out;

	if (n) {
		r = kind == JOB_LOAD ? kvt_acquire(ns, shard, keys, n, refs)
				     : kvt_reserve(ns, shard, keys, n, refs);
		if (r < 0)
			goto out;
	}
	held = true;
	/* Extents may have been added (or remapped by a reconnect) since
	 * the last submission; the slots just handed out may be in them. */
	regs_sync(ctx);

	for (size_t i = 0; i < n; i++) {
		struct reg *rg = NULL;
		uint8_t *d;
		size_t q = job->n_q;

		job->status[i] = refs[i].status;
		if (refs[i].status != 0)
			continue;
		d = dev_addr(ctx, refs[i].ptr, refs[i].bytes, &rg);
		if (!d) {
			/* Pool memory mapped anew over a range an unfinished
			 * job still has pinned is usable once that job is
			 * freed. */
			job->status[i] = stale_overlap(ctx, refs[i].ptr,
						       refs[i].bytes)
						 ? -EAGAIN
						 : -EFAULT;
			bad[n_bad++] = refs[i].handle;
			continue;
		}
		job->which[q] = i;
		job->handles[q] = refs[i].handle;
		blk_dev[q] = d;
		blk_host[q] = refs[i].ptr;
		memcpy(idx + q * per, indices + i * per, per * sizeof(*idx));
		job_use_reg(job, rg);
		job->status[i] = KVT_CUDA_IN_FLIGHT;
		job->n_q++;
	}
	drop_handles(ctx, kind, bad, n_bad);

	/* Loads overwrite pages the compute stream may still read; stores
	 * read pages it is still writing. */
	r = ev_get(ctx, &after);
	if (r < 0)
		goto out;
	e = cudaEventRecord(after, (cudaStream_t)compute_stream);
	if (e == cudaSuccess)
		e = cudaStreamWaitEvent(st, after, 0);
	/* The wait took the event's state when it was queued, so the event
	 * can serve the next job at once. */
	ev_put(ctx, after);
	if (e != cudaSuccess) {
		r = cuda_fail(ctx, e, "waiting for the compute stream");
		goto out;
	}

	if (job->n_q) {
		r = job_queue(job, &g, layout, idx, per, blk_dev, blk_host, st);
		if (r < 0)
			goto out;
	} else {
		/* Nothing to copy; the layer events still mark this point of
		 * the load stream, so waiting for them stays valid. */
		for (uint32_t l = 0; l < job->n_layers; l++) {
			e = cudaEventRecord(job->layer_ev[l], st);
			if (e != cudaSuccess) {
				r = cuda_fail(ctx, e, "cudaEventRecord");
				goto out;
			}
		}
	}
	e = cudaEventRecord(job->done, st);
	if (e != cudaSuccess) {
		r = cuda_fail(ctx, e, "cudaEventRecord");
		goto out;
	}

	for (size_t i = 0; i < job->n_regs; i++)
		job->regs[i]->users++;
	r = (int)job->n_q;
	*ret_job = job;
	job = NULL;

out:
	if (job) {
		/* Some copies may be queued already: the slots can only be
		 * handed back once the stream has drained. */
		if (held && job->n_q) {
			cudaStreamSynchronize(st);
			(void)cudaGetLastError();
			drop_handles(ctx, kind, job->handles, job->n_q);
		}
		if (entered) {
			for (uint32_t l = 0; l < job->n_layers; l++)
				ev_put(ctx, job->layer_ev[l]);
			ev_put(ctx, job->done);
			meta_put(ctx, job->meta);
		}
		job_free_arrays(job);
	}
	if (entered)
		dev_leave(ctx, prev);
	free(refs);
	free(blk_dev);
	free(blk_host);
	free(bad);
	free(idx);
	return r;
}

KVT_EXPORT int kvt_cuda_load_submit(kvt_cuda_ctx *ctx, kvt_ns *ns,
				    uint32_t shard, const kvt_layout *layout,
				    const uint8_t *keys, size_t n,
				    const int64_t *indices,
				    void *compute_stream,
				    kvt_cuda_job **ret_job)
{
	return job_submit(ctx, JOB_LOAD, ns, shard, layout, keys, n, indices,
			  compute_stream, ret_job);
}

KVT_EXPORT int kvt_cuda_store_submit(kvt_cuda_ctx *ctx, kvt_ns *ns,
				     uint32_t shard, const kvt_layout *layout,
				     const uint8_t *keys, size_t n,
				     const int64_t *indices,
				     void *compute_stream,
				     kvt_cuda_job **ret_job)
{
	return job_submit(ctx, JOB_STORE, ns, shard, layout, keys, n, indices,
			  compute_stream, ret_job);
}

KVT_EXPORT int kvt_cuda_wait_layer(kvt_cuda_job *job, uint32_t layer,
				   void *compute_stream)
{
	cudaError_t e;

	if (!job || job->kind != JOB_LOAD || layer >= job->n_layers)
		return -EINVAL;
	e = cudaStreamWaitEvent((cudaStream_t)compute_stream,
				job->layer_ev[layer], 0);
	return e == cudaSuccess ? 0
				: cuda_fail(job->ctx, e, "cudaStreamWaitEvent");
}

KVT_EXPORT int kvt_cuda_job_wait_stream(kvt_cuda_job *job, void *stream)
{
	cudaError_t e;

	if (!job)
		return -EINVAL;
	e = cudaStreamWaitEvent((cudaStream_t)stream, job->done, 0);
	return e == cudaSuccess ? 0
				: cuda_fail(job->ctx, e, "cudaStreamWaitEvent");
}

static int job_report(const kvt_cuda_job *job, int32_t *ret_status)
{
	if (ret_status)
		memcpy(ret_status, job->status, job->n * sizeof(*ret_status));
	if (!job->finished)
		return 0;
	return job->result < 0 ? job->result : 1;
}

KVT_EXPORT int kvt_cuda_job_poll(kvt_cuda_job *job, int32_t *ret_status)
{
	cudaError_t e;

	if (!job)
		return -EINVAL;
	if (!job->finished) {
		e = cudaEventQuery(job->done);
		if (e == cudaErrorNotReady)
			return job_report(job, ret_status);
		if (e != cudaSuccess)
			cuda_fail(job->ctx, e, "a copy");
		job_finish(job, e == cudaSuccess ? 0 : -EIO);
	}
	return job_report(job, ret_status);
}

KVT_EXPORT int kvt_cuda_job_wait(kvt_cuda_job *job, int32_t *ret_status)
{
	cudaError_t e;

	if (!job)
		return -EINVAL;
	if (!job->finished) {
		e = cudaEventSynchronize(job->done);
		if (e != cudaSuccess)
			cuda_fail(job->ctx, e, "a copy");
		job_finish(job, e == cudaSuccess ? 0 : -EIO);
	}
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
		ev_put(ctx, job->layer_ev[l]);
	ev_put(ctx, job->done);
	job_free_arrays(job);
}
