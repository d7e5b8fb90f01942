/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The registration thread of a CUDA context, and the process's pins.
 *
 * Pinning a pool with cudaHostRegister costs about a second per few GiB,
 * so no submission does it: this thread looks at the client's extents
 * when they change (the client's extents_gen, checked every REG_POLL_NS
 * and by every submission, which wakes it; a submission that finds a
 * block in memory not registered yet refuses that block with -EAGAIN and
 * wakes it too), registers new ones a chunk of at most REG_CHUNK at a
 * time, retries failed chunks with a backoff and unregisters the chunks
 * of extents that are gone once no job uses them (cuda-regtab.c has the
 * bookkeeping).
 *
 * Extents of a restarted daemon replace the old ones, whose ids start
 * over; an old extent stays mapped while the client holds handles in it
 * (an unfinished job's among them), and mmap likes to put new extents at
 * the old addresses: a range that looks the same may be other memory,
 * while the driver still pins the old pages under the old registration.
 * So every registration carries its extent and daemon instance, a lookup
 * must match both, and a new extent mapped where old pages are still
 * pinned waits until they are let go.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "cuda-internal.h"
#include "macro.h"

/* ---- the process's pins --------------------------------------------- */

static int pin_cuda(void *ud, uint8_t *host, uint64_t size, uint8_t **ret_dev,
		    bool *ret_owned)
{
	void *dev = NULL;
	cudaError_t e;

	(void)ud;
	/* Portable: every device may copy from it; mapped: it has a device
	 * address, which the kernel needs. */
	e = cudaHostRegister(host, size,
			     cudaHostRegisterPortable | cudaHostRegisterMapped);
	if (e == cudaErrorHostMemoryAlreadyRegistered) {
		/* The engine registered it (or a range around it): use that
		 * registration and leave it to its owner. */
		*ret_owned = false;
	} else if (e == cudaSuccess) {
		*ret_owned = true;
	} else {
		(void)cudaGetLastError();
		return kvt_cuda_errno(e);
	}
	(void)cudaGetLastError();
	if (cudaHostGetDevicePointer(&dev, host, 0) != cudaSuccess) {
		(void)cudaGetLastError();
		dev = NULL;
	}
	*ret_dev = dev;
	return 0;
}

static void unpin_cuda(void *ud, uint8_t *host)
{
	(void)ud;
	if (cudaHostUnregister(host) != cudaSuccess)
		(void)cudaGetLastError();
}

static const struct pin_ops pin_cuda_ops = {pin_cuda, unpin_cuda};
static struct pins process_pins = {.lock = PTHREAD_MUTEX_INITIALIZER,
				   .ops = &pin_cuda_ops};

struct pins *cuda_pins(void)
{
	return &process_pins;
}

/* ---- the thread ------------------------------------------------------ */

/* The client's extents as they are now, and the daemon instance they
 * belong to. */
static int snapshot_extents(kvt_client *c, struct ext_snap **ret,
			    uint32_t *ret_n, uint64_t *ret_instance,
			    uint64_t *ret_gen)
{
	struct ext_snap *s;
	uint32_t n;

	pthread_mutex_lock(&c->lock);
	*ret_instance = c->instance;
	*ret_gen = c->extents_gen;
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

/* One look at the extents; with ctx->lock held, dropped meanwhile. */
static void regs_look(kvt_cuda_ctx *ctx)
{
	struct ext_snap *ext = NULL;
	uint64_t instance = 0, gen = 0;
	uint32_t n = 0;
	int r;

	pthread_mutex_unlock(&ctx->lock);
	r = snapshot_extents(ctx->c, &ext, &n, &instance, &gen);
	pthread_mutex_lock(&ctx->lock);
	if (r == 0)
		ctx->seen_gen = gen;
	if (r == 0)
		r = regs_sync(&ctx->regs, cuda_pins(), ext, n, instance);
	if (r < 0)
		client_log(ctx->c, KVT_LOG_WARNING,
			   "CUDA: out of memory looking at the pool; retried "
			   "at the next submission");
	free(ext);
}

/* Pins what is due; with ctx->lock held, dropped around each pin. */
static void regs_work(kvt_cuda_ctx *ctx, uint64_t *ret_next_ns)
{
	struct reg *g;

	while (!ctx->quit &&
	       (g = regs_next_work(&ctx->regs, kvt_now_ns(), ret_next_ns))) {
		struct pin *pin = NULL;
		uint64_t t0, t1;
		int r;

		pthread_mutex_unlock(&ctx->lock);
		t0 = kvt_now_ns();
		r = regs_pin(&ctx->regs, cuda_pins(), g, &pin);
		t1 = kvt_now_ns();
		pthread_mutex_lock(&ctx->lock);
		regs_pin_done(&ctx->regs, cuda_pins(), g, r, pin, t1, t1 - t0);
		if (r < 0 && r != -EAGAIN)
			client_log(ctx->c, KVT_LOG_WARNING,
				   "CUDA: cannot pin %llu MiB of extent %u: "
				   "%s; %s, and pinning is retried",
				   (unsigned long long)(g->r.size >> 20),
				   g->extent_id, strerror(-r),
				   ctx->pageable
					   ? "copies use the pageable mapping"
					   : "its blocks cannot be copied by "
					     "the GPU meanwhile");
	}
}

/* Whether the client's extents changed since the last look. */
static bool extents_moved(kvt_cuda_ctx *ctx)
{
	uint64_t gen;

	pthread_mutex_lock(&ctx->c->lock);
	gen = ctx->c->extents_gen;
	pthread_mutex_unlock(&ctx->c->lock);
	return gen != ctx->seen_gen;
}

/* Sleeps until at_ns, a kick, or the next look at the extents: new ones
 * are pinned soon after they are mapped, not only once a submission
 * finds a block in them. */
static void wait_until(kvt_cuda_ctx *ctx, uint64_t at_ns)
{
	uint64_t poll = kvt_now_ns() + REG_POLL_NS;
	struct timespec ts;

	if (at_ns > poll)
		at_ns = poll;
	ts.tv_sec = (time_t)(at_ns / 1000000000u);
	ts.tv_nsec = (long)(at_ns % 1000000000u);
	pthread_cond_timedwait(&ctx->wake, &ctx->lock, &ts);
}

static void *regs_thread(void *arg)
{
	kvt_cuda_ctx *ctx = arg;
	cudaError_t e = cudaSetDevice(ctx->device);

	if (e != cudaSuccess) {
		(void)cudaGetLastError();
		client_log(ctx->c, KVT_LOG_WARNING,
			   "CUDA: the registration thread cannot use device "
			   "%d: %s", ctx->device, cudaGetErrorString(e));
	}
	pthread_mutex_lock(&ctx->lock);
	while (!ctx->quit) {
		uint64_t next = UINT64_MAX, want = ctx->sync_req;
		bool moved;

		if (want != ctx->sync_done)
			regs_look(ctx);
		regs_work(ctx, &next);
		if (want != ctx->sync_done) {
			ctx->sync_done = want;
			pthread_cond_broadcast(&ctx->synced);
		}
		if (!ctx->quit && ctx->sync_req == ctx->sync_done) {
			wait_until(ctx, next);
			if (ctx->quit)
				break;
			/* Without the context's lock: the client's is never
			 * taken inside it. */
			pthread_mutex_unlock(&ctx->lock);
			moved = extents_moved(ctx);
			pthread_mutex_lock(&ctx->lock);
			if (moved && ctx->sync_req == ctx->sync_done)
				ctx->sync_req++;
		}
	}
	pthread_mutex_unlock(&ctx->lock);
	return NULL;
}

int cuda_regs_start(kvt_cuda_ctx *ctx)
{
	pthread_condattr_t ca;
	int r;

	ctx->regs = (struct regs){.owner = ctx->c, .chunk = REG_CHUNK,
				  .pageable = ctx->pageable};
	pthread_mutex_init(&ctx->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&ctx->wake, &ca);
	pthread_cond_init(&ctx->synced, &ca);
	pthread_condattr_destroy(&ca);
	/* The first look is asked for before the thread runs. */
	ctx->sync_req = 1;
	r = -pthread_create(&ctx->thread, NULL, regs_thread, ctx);
	if (r < 0) {
		client_log(ctx->c, KVT_LOG_WARNING,
			   "CUDA: cannot start the registration thread: %s",
			   strerror(-r));
		pthread_cond_destroy(&ctx->wake);
		pthread_cond_destroy(&ctx->synced);
		pthread_mutex_destroy(&ctx->lock);
		return r;
	}
	ctx->thread_started = true;
	return 0;
}

void cuda_regs_stop(kvt_cuda_ctx *ctx)
{
	if (!ctx->thread_started)
		return;
	pthread_mutex_lock(&ctx->lock);
	ctx->quit = true;
	pthread_cond_broadcast(&ctx->wake);
	pthread_mutex_unlock(&ctx->lock);
	pthread_join(ctx->thread, NULL);
	regs_free(&ctx->regs, cuda_pins());
	pthread_cond_destroy(&ctx->wake);
	pthread_cond_destroy(&ctx->synced);
	pthread_mutex_destroy(&ctx->lock);
	ctx->thread_started = false;
}

void cuda_regs_kick_locked(kvt_cuda_ctx *ctx)
{
	if (ctx->sync_req == ctx->sync_done)
		ctx->sync_req++;
	pthread_cond_signal(&ctx->wake);
}

int cuda_regs_wait(kvt_cuda_ctx *ctx, int timeout_ms)
{
	uint64_t mine, at = timeout_ms < 0 ? UINT64_MAX
					   : kvt_now_ns() + (uint64_t)timeout_ms *
								1000000u;
	struct timespec ts = {(time_t)(at / 1000000000u),
			      (long)(at % 1000000000u)};
	int r = 0;

	pthread_mutex_lock(&ctx->lock);
	mine = ++ctx->sync_req;
	pthread_cond_signal(&ctx->wake);
	while (ctx->sync_done < mine && r == 0) {
		if (at == UINT64_MAX)
			pthread_cond_wait(&ctx->synced, &ctx->lock);
		else if (pthread_cond_timedwait(&ctx->synced, &ctx->lock,
						&ts) == ETIMEDOUT)
			r = ctx->sync_done < mine ? -ETIMEDOUT : 0;
	}
	pthread_mutex_unlock(&ctx->lock);
	return r;
}

void cuda_regs_stats(kvt_cuda_ctx *ctx, kvt_cuda_stats *s)
{
	const struct regs *rs = &ctx->regs;

	for (size_t i = 0; i < rs->t.n; i++) {
		const struct reg *g = (const struct reg *)rs->t.v[i];

		s->ranges++;
		switch (g->state) {
		case REG_PINNED:
			s->ranges_pinned++;
			s->bytes_pinned += g->r.size;
			break;
		case REG_PENDING:
		case REG_PINNING:
			s->ranges_pending++;
			s->bytes_pending += g->r.size;
			break;
		case REG_FAILED:
			s->ranges_failed++;
			s->bytes_failed += g->r.size;
			break;
		case REG_STALE:
			s->ranges_stale++;
			break;
		}
	}
	s->pin_calls = rs->pin_calls;
	s->pin_failures = rs->pin_failures;
	s->pin_ns = rs->pin_ns;
	s->pin_max_ns = rs->pin_max_ns;
}
