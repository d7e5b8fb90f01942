/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The registration table of a CUDA context: which ranges of the pool are
 * registered with the driver (pinned, with a device address), kept in
 * line with the client's extents, and the lookup of a slot's device
 * address.  A range stays registered while an unfinished job's copies
 * use it, even after its extent is gone.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#include "cuda-internal.h"

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

void cuda_regs_collect(kvt_cuda_ctx *ctx)
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
int cuda_regs_sync(kvt_cuda_ctx *ctx)
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
	cuda_regs_collect(ctx);

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

bool cuda_regs_stale_overlap(const kvt_cuda_ctx *ctx, void *p,
			     uint64_t bytes)
{
	for (const struct reg *g = ctx->regs; g; g = g->next)
		if (g->stale && overlaps(g, p, bytes))
			return true;
	return false;
}

uint8_t *cuda_regs_dev_addr(kvt_cuda_ctx *ctx, void *p, uint64_t bytes,
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


void cuda_regs_free(kvt_cuda_ctx *ctx)
{
	while (ctx->regs) {
		struct reg *g = ctx->regs;

		ctx->regs = g->next;
		reg_drop(g);
	}
}
