/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The client's CUDA path against a real kvtierd: blocks stored from one
 * engine layout on the GPU (vLLM FlashAttention NHD) come back, through
 * the pool, into another (FlashInfer) and the other way round, layer by
 * layer, with the expected bytes from the CPU path, through each copy
 * path (the cost model's, the kernel within a CTA budget of 2, the copy
 * engines).  Also: per-key status (a miss, an existing block), commit only
 * after completion (the blocks are invisible until polled), a GPU-side
 * wait for a store, the CPU copy path reading what the GPU stored, loads
 * after the caller's event and at once, a layout without n_pages or with
 * a page past it refused, two contexts on one client (the first one's end leaves the second copying), the
 * registration statistics, and registration after the daemon restarted
 * and the pool was mapped anew.
 *
 * Without a device: checks the arguments of every entry point and that
 * the context refuses with -ENODEV, then exits 77 (1 when the driver is
 * too old or CUDA fails otherwise).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "client-util.h"
#include "gpu-probe.h"
#include "../engine-layouts.h"

#define N_LAYERS 4
#define HEADS 8
#define HEAD_BYTES 256
#define BS 16
#define N_PAGES 16
#define N_BLOCKS 6
#define POISON 0xff

/* One engine cache: a host image (the truth) and its device copy. */
struct cache {
	enum layout_kind kind;
	size_t layer_bytes;
	uint8_t *host[N_LAYERS];
	uint8_t *dev[N_LAYERS];
	void *host_base[N_LAYERS];
	void *dev_base[N_LAYERS];
	kvt_layout lay;
};

static void cache_init(struct cache *c, enum layout_kind kind)
{
	int64_t hb = HEAD_BYTES, H = HEADS, bs = BS, np = N_PAGES;

	memset(c, 0, sizeof(*c));
	c->kind = kind;
	c->layer_bytes = (size_t)2 * np * bs * H * hb;
	for (int l = 0; l < N_LAYERS; l++) {
		c->host[l] = malloc(c->layer_bytes);
		CHECK(c->host[l], "out of memory");
		CUDA_CHECK(cudaMalloc((void **)&c->dev[l], c->layer_bytes));
		c->host_base[l] = c->host[l];
		c->dev_base[l] = c->dev[l];
	}
	c->lay = (kvt_layout){
		.n_layers = N_LAYERS,
		.planes = 2,
		.heads = HEADS,
		.head_bytes = HEAD_BYTES,
		.page_tokens = BS,
		.index_kind = KVT_INDEX_PAGE,
		.n_pages = N_PAGES,
		.stride_token = H * hb,
		.stride_head = hb,
	};
	if (kind == K_FA_NHD) {
		/* (2, NP, BS, H, D) */
		c->lay.stride_plane = np * bs * H * hb;
		c->lay.stride_page = bs * H * hb;
	} else {
		/* (NP, 2, BS, H, D) */
		c->lay.stride_page = 2 * bs * H * hb;
		c->lay.stride_plane = bs * H * hb;
	}
}

static void cache_free(struct cache *c)
{
	for (int l = 0; l < N_LAYERS; l++) {
		free(c->host[l]);
		cudaFree(c->dev[l]);
	}
}

static void cache_fill(struct cache *c, unsigned seed, int poison)
{
	srand(seed);
	for (int l = 0; l < N_LAYERS; l++) {
		for (size_t i = 0; i < c->layer_bytes; i++)
			c->host[l][i] = poison ? POISON : (uint8_t)rand();
		CUDA_CHECK(cudaMemcpy(c->dev[l], c->host[l], c->layer_bytes,
				      cudaMemcpyHostToDevice));
	}
	/* A pageable cudaMemcpy may return before its DMA has landed, and
	 * the library's streams do not wait for the legacy stream. */
	CUDA_CHECK(cudaDeviceSynchronize());
}

/* The device copy must equal the host image. */
static void cache_compare(const struct cache *c, const char *what)
{
	uint8_t *tmp = malloc(c->layer_bytes);

	CHECK(tmp, "out of memory");
	for (int l = 0; l < N_LAYERS; l++) {
		CUDA_CHECK(cudaMemcpy(tmp, c->dev[l], c->layer_bytes,
				      cudaMemcpyDeviceToHost));
		CHECK(memcmp(tmp, c->host[l], c->layer_bytes) == 0,
		      "%s: layer %d differs from the CPU path", what, l);
	}
	free(tmp);
}

static kvt_ns *open_ns(kvt_client *c)
{
	kvt_layer_group g = {.n_layers = N_LAYERS, .attn = KVT_ATTN_MHA,
			     .planes = 2, .kv_heads = HEADS,
			     .head_bytes = HEAD_BYTES, .dtype = 1};
	kvt_ns_desc desc = {.model = "gpu-client", .layer_end = N_LAYERS,
			    .tp_size = 1, .cp_size = 1, .block_tokens = BS,
			    .n_groups = 1, .groups = &g};
	kvt_ns *ns = NULL;
	int r = kvt_ns_open(c, &desc, &ns);

	CHECK(r == 0, "ns open: %s %s", strerror(-r), kvt_client_error(c));
	return ns;
}

/*
 * Stores N_BLOCKS pages of src on the GPU, checks the pool through the CPU
 * path, loads them into dst on the GPU layer by layer, and compares dst
 * with the CPU path's scatter of the same blocks.
 */
/*
 * Blocks in memory the registration thread has not pinned yet come back
 * -EAGAIN (the pool may grow while the test reserves): wait for it and
 * store those again, at most twice.
 */
static void store_rest(kvt_ns *ns, kvt_cuda_ctx *ctx, const kvt_layout *lay,
		       const uint8_t *keys, const int64_t *pages, int32_t *st,
		       cudaStream_t compute)
{
	for (int round = 0; round < 2; round++) {
		uint8_t k[N_BLOCKS * KVT_KEY_BYTES];
		int64_t p[N_BLOCKS];
		int32_t st2[N_BLOCKS];
		int which[N_BLOCKS], n = 0, r;
		kvt_cuda_job *job = NULL;

		for (int i = 0; i < N_BLOCKS; i++)
			if (st[i] == -EAGAIN) {
				memcpy(k + n * KVT_KEY_BYTES,
				       keys + i * KVT_KEY_BYTES, KVT_KEY_BYTES);
				p[n] = pages[i];
				which[n++] = i;
			}
		if (!n)
			return;
		CHECK(kvt_cuda_ctx_wait_pinned(ctx, 60000) == 0, "wait_pinned");
		r = kvt_cuda_store_submit(ctx, ns, 0, lay, k, (size_t)n, p,
					  compute, &job);
		CHECK(r >= 0, "store again: %d", r);
		CHECK(poll_done(job, st2) == 1, "store again: poll");
		for (int i = 0; i < n; i++)
			st[which[i]] = st2[i];
		kvt_cuda_job_free(job);
	}
}

/* How a round trip's load is told when the pages are free. */
enum after { AFTER_STREAM, AFTER_EVENT, AFTER_NONE };

static void round_trip(kvt_client *c, kvt_ns *ns, kvt_cuda_ctx *ctx,
		       struct cache *src, struct cache *dst, uint8_t tag,
		       cudaStream_t compute, enum after after)
{
	uint8_t keys[(N_BLOCKS + 1) * KVT_KEY_BYTES], states[N_BLOCKS + 1];
	int64_t pages[N_BLOCKS + 1], dpages[N_BLOCKS + 1];
	void *want[N_BLOCKS], *got[N_BLOCKS];
	const void *cwant[N_BLOCKS];
	int32_t st[N_BLOCKS + 1];
	kvt_ns_info info;
	kvt_cuda_job *job = NULL;
	int r;

	kvt_ns_get_info(ns, &info);
	for (int i = 0; i < N_BLOCKS; i++) {
		pages[i] = (i * 5 + tag) % N_PAGES;
		dpages[i] = (i * 3 + 1) % N_PAGES;
		want[i] = malloc(info.shard_bytes);
		got[i] = malloc(info.shard_bytes);
		CHECK(want[i] && got[i], "out of memory");
		cwant[i] = want[i];
	}
	make_keys(keys, N_BLOCKS + 1, (uint64_t)tag << 32);

	/* The expected blocks, from the CPU path. */
	src->lay.layer_base = src->host_base;
	r = kvt_layout_gather(&src->lay, BS, pages, N_BLOCKS, want);
	CHECK(r == 0, "CPU gather: %d", r);

	/* Store from the GPU; nothing is visible before the poll. */
	src->lay.layer_base = src->dev_base;
	r = kvt_cuda_store_submit(ctx, ns, 0, &src->lay, keys, N_BLOCKS, pages,
				  compute, &job);
	/* Blocks in an extent the pool grew by are refused until it is
	 * pinned (store_rest). */
	CHECK(r >= 0, "store submit: %d (%s)", r, r < 0 ? strerror(-r) : "");
	CHECK(kvt_cuda_job_size(job) == N_BLOCKS, "job size");
	r = kvt_lookup(ns, keys, N_BLOCKS, 0, states);
	CHECK(r == 0, "%d blocks visible before their copy was polled", r);
	CHECK(kvt_cuda_job_wait_stream(job, compute) == 0, "wait_stream");
	r = poll_done(job, st);
	CHECK(r == 1, "store poll: %d", r);
	kvt_cuda_job_free(job);
	store_rest(ns, ctx, &src->lay, keys, pages, st, compute);
	for (int i = 0; i < N_BLOCKS; i++)
		CHECK(st[i] == 0, "store status %d: %d", i, st[i]);
	r = kvt_lookup(ns, keys, N_BLOCKS, 0, states);
	CHECK(r == N_BLOCKS, "%d of %d stored blocks visible", r, N_BLOCKS);

	/* What the GPU put in the pool, read by the CPU path. */
	r = kvt_load(ns, 0, keys, N_BLOCKS, got, st);
	CHECK(r == N_BLOCKS, "CPU load: %d", r);
	for (int i = 0; i < N_BLOCKS; i++)
		CHECK(memcmp(got[i], want[i], info.shard_bytes) == 0,
		      "pool block %d differs from the CPU gather", i);

	/* Storing again: every key exists. */
	r = kvt_cuda_store_submit(ctx, ns, 0, &src->lay, keys, N_BLOCKS, pages,
				  compute, &job);
	CHECK(r == 0, "second store queued %d", r);
	CHECK(poll_done(job, st) == 1, "second store poll");
	for (int i = 0; i < N_BLOCKS; i++)
		CHECK(st[i] == -EEXIST, "second store status %d: %d", i, st[i]);
	kvt_cuda_job_free(job);

	/* Load into the other layout, layer by layer; the last key is a
	 * miss. */
	cache_fill(dst, 7, 1);
	dst->lay.layer_base = dst->host_base;
	r = kvt_layout_scatter(&dst->lay, BS, dpages, N_BLOCKS, cwant);
	CHECK(r == 0, "CPU scatter: %d", r);
	dst->lay.layer_base = dst->dev_base;
	dpages[N_BLOCKS] = N_PAGES - 1;
	keys[N_BLOCKS * KVT_KEY_BYTES + 1] ^= 0x55;
	if (after == AFTER_STREAM) {
		r = kvt_cuda_load_submit(ctx, ns, 0, &dst->lay, keys,
					 N_BLOCKS + 1, dpages, compute, &job);
	} else {
		kvt_cuda_submit_opts o = {.size = sizeof(o)};
		cudaEvent_t ev;

		/* The pages are free once the compute stream's fill is done:
		 * an event of it, or (none) after waiting for it. */
		CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
		CUDA_CHECK(cudaEventRecord(ev, compute));
		if (after == AFTER_EVENT) {
			o.after = KVT_CUDA_AFTER_EVENT;
			o.event = ev;
		} else {
			o.after = KVT_CUDA_AFTER_NONE;
			CUDA_CHECK(cudaEventSynchronize(ev));
		}
		r = kvt_cuda_load_submit_opts(ctx, ns, 0, &dst->lay, keys,
					      N_BLOCKS + 1, dpages, &o, &job);
		CUDA_CHECK(cudaEventDestroy(ev));
	}
	CHECK(r == N_BLOCKS, "load submit: %d", r);
	for (uint32_t l = 0; l < N_LAYERS; l++)
		CHECK(kvt_cuda_wait_layer(job, l, compute) == 0, "wait layer");
	CHECK(kvt_cuda_wait_layer(job, N_LAYERS, compute) == -EINVAL,
	      "layer out of range accepted");
	CUDA_CHECK(cudaStreamSynchronize(compute));
	r = poll_done(job, st);
	CHECK(r == 1, "load poll: %d", r);
	for (int i = 0; i < N_BLOCKS; i++)
		CHECK(st[i] == 0, "load status %d: %d", i, st[i]);
	CHECK(st[N_BLOCKS] == -ENOENT, "missing key: %d", st[N_BLOCKS]);
	/* A wait after completion is still valid. */
	CHECK(kvt_cuda_wait_layer(job, 0, compute) == 0, "late wait");
	kvt_cuda_job_free(job);
	cache_compare(dst, "GPU load");

	for (int i = 0; i < N_BLOCKS; i++) {
		free(want[i]);
		free(got[i]);
	}
}

int main(void)
{
	struct daemon d;
	struct cache nhd, fi;
	kvt_cuda_ctx *ctx = NULL;
	kvt_cuda_job *job = NULL;
	cudaStream_t compute;
	kvt_client *c;
	kvt_ns *ns;
	int n_dev = 0, probe, r;

	CHECK(kvt_cuda_ctx_new(NULL, 0, &ctx) == -EINVAL, "NULL client");
	daemon_start(&d, NULL);
	c = client_connect(&d, "gpu-client");
	ns = open_ns(c);

	/* Every entry point checks its arguments, with a device or without:
	 * a job call without a job, a submission without a context. */
	{
		kvt_layout lay = {0};
		uint8_t k[KVT_KEY_BYTES] = {1};
		int64_t p = 0;

		r = kvt_cuda_load_submit(NULL, ns, 0, &lay, k, 1, &p, NULL, &job);
		CHECK(r == -EINVAL, "load without a context: %d", r);
		r = kvt_cuda_store_submit(NULL, ns, 0, &lay, k, 1, &p, NULL, &job);
		CHECK(r == -EINVAL, "store without a context: %d", r);
		CHECK(job == NULL, "a refused submission returned a job");
		CHECK(kvt_cuda_wait_layer(NULL, 0, NULL) == -EINVAL, "wait_layer");
		CHECK(kvt_cuda_job_wait_stream(NULL, NULL) == -EINVAL, "wait_stream");
		CHECK(kvt_cuda_job_poll(NULL, NULL) == -EINVAL, "poll");
		CHECK(kvt_cuda_job_wait(NULL, NULL) == -EINVAL, "wait");
		CHECK(kvt_cuda_job_size(NULL) == 0, "size");
		{
			kvt_cuda_submit_opts o = {.size = sizeof(o),
						  .after = KVT_CUDA_AFTER_EVENT};
			kvt_cuda_opts co = {.size = sizeof(co), .copy_path = 3};
			kvt_cuda_stats cs = {.size = sizeof(cs)};

			r = kvt_cuda_load_submit_opts(NULL, ns, 0, &lay, k, 1,
						      &p, &o, &job);
			CHECK(r == -EINVAL, "opts without a context: %d", r);
			CHECK(kvt_cuda_ctx_new_opts(c, 0, &co, &ctx) == -EINVAL,
			      "unknown copy path accepted");
			co.copy_path = 0;
			co.max_ctas = 70000;
			CHECK(kvt_cuda_ctx_new_opts(c, 0, &co, &ctx) == -EINVAL,
			      "a budget past 65535 accepted");
			CHECK(kvt_cuda_ctx_stats(NULL, &cs) == -EINVAL, "stats");
			CHECK(kvt_cuda_ctx_wait_pinned(NULL, 0) == -EINVAL,
			      "wait_pinned");
		}
		kvt_cuda_job_free(NULL);
		kvt_cuda_ctx_free(NULL);
	}

	probe = kvt_gpu_probe();
	if (probe != 0) {
		r = kvt_cuda_ctx_new(c, 0, &ctx);
		CHECK(r == -ENODEV, "context without a device: %d", r);
		kvt_ns_close(ns);
		kvt_client_free(c);
		daemon_stop(&d);
		daemon_cleanup(&d);
		return probe;
	}
	CUDA_CHECK(cudaGetDeviceCount(&n_dev));

	CHECK(kvt_cuda_ctx_new(c, n_dev, &ctx) == -ENODEV, "device out of range");
	r = kvt_cuda_ctx_new(c, 0, &ctx);
	CHECK(r == 0, "context: %d", r);
	CUDA_CHECK(cudaSetDevice(0));
	CUDA_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
	cache_init(&nhd, K_FA_NHD);
	cache_init(&fi, K_FLASHINFER);

	/* A layout that does not match the namespace is refused. */
	nhd.lay.layer_base = nhd.dev_base;
	nhd.lay.heads = HEADS / 2;
	{
		uint8_t k[KVT_KEY_BYTES] = {1};
		int64_t p = 0;

		r = kvt_cuda_store_submit(ctx, ns, 0, &nhd.lay, k, 1, &p,
					  compute, &job);
		CHECK(r == -EINVAL, "mismatched layout: %d", r);
		nhd.lay.heads = HEADS;
		p = -3;
		r = kvt_cuda_load_submit(ctx, ns, 0, &nhd.lay, k, 1, &p, NULL,
					 &job);
		CHECK(r == -EINVAL, "bad page: %d", r);
	}

	/* Without n_pages, or with a page past it: refused, nothing leased. */
	{
		uint8_t k[KVT_KEY_BYTES] = {1};
		int64_t p = N_PAGES;

		nhd.lay.layer_base = nhd.dev_base;
		r = kvt_cuda_load_submit(ctx, ns, 0, &nhd.lay, k, 1, &p, NULL,
					 &job);
		CHECK(r == -EINVAL, "page past n_pages: %d", r);
		nhd.lay.n_pages = 0;
		p = 0;
		r = kvt_cuda_load_submit(ctx, ns, 0, &nhd.lay, k, 1, &p, NULL,
					 &job);
		CHECK(r == -EINVAL, "no n_pages: %d", r);
		nhd.lay.n_pages = N_PAGES;
	}

	cache_fill(&nhd, 1, 0);
	cache_fill(&fi, 2, 0);
	round_trip(c, ns, ctx, &nhd, &fi, 0x11, compute, AFTER_STREAM);
	round_trip(c, ns, ctx, &fi, &nhd, 0x22, compute, AFTER_EVENT);

	/* Two more contexts on the same client, one per forced path: they
	 * share the pins of the first, and their end unpins nothing the
	 * first still copies with (the round trip after the restart). */
	{
		kvt_cuda_opts ok = {.size = sizeof(ok),
				    .copy_path = KVT_CUDA_PATH_KERNEL,
				    .max_ctas = 2};
		kvt_cuda_opts oe = {.size = sizeof(oe),
				    .copy_path = KVT_CUDA_PATH_ENGINE,
				    .flags = KVT_CUDA_PIN_BACKGROUND};
		kvt_cuda_ctx *ck = NULL, *ce = NULL;
		kvt_cuda_stats sk = {.size = sizeof(sk)};

		ok.flags = 0x80;
		CHECK(kvt_cuda_ctx_new_opts(c, 0, &ok, &ck) == -EINVAL,
		      "unknown flag");
		ok.flags = 0;
		CHECK(kvt_cuda_ctx_new_opts(c, 0, &ok, &ck) == 0, "kernel ctx");
		CHECK(kvt_cuda_ctx_new_opts(c, 0, &oe, &ce) == 0, "engine ctx");
		CHECK(kvt_cuda_ctx_wait_pinned(ce, 60000) == 0, "wait_pinned");
		cache_fill(&nhd, 4, 0);
		round_trip(c, ns, ck, &nhd, &fi, 0x44, compute, AFTER_NONE);
		round_trip(c, ns, ce, &fi, &nhd, 0x55, compute, AFTER_EVENT);
		CHECK(kvt_cuda_ctx_stats(ck, &sk) == 0, "stats");
		CHECK(sk.copies_engine == 0 && sk.copies_kernel >= 2,
		      "forced kernel: %llu kernel, %llu engine copies",
		      (unsigned long long)sk.copies_kernel,
		      (unsigned long long)sk.copies_engine);
		kvt_cuda_ctx_free(ck);
		kvt_cuda_ctx_free(ce);
	}
	{
		kvt_cuda_stats st = {.size = sizeof(st)};

		CHECK(kvt_cuda_ctx_stats(ctx, &st) == 0, "stats");
		CHECK(st.ranges_pinned >= 1 && st.bytes_pinned > 0 &&
			      st.pin_calls >= st.ranges_pinned,
		      "stats: %u pinned ranges, %llu bytes, %llu pins",
		      st.ranges_pinned, (unsigned long long)st.bytes_pinned,
		      (unsigned long long)st.pin_calls);
		printf("pinned %llu MiB in %u ranges, %.1f ms in all, longest "
		       "%.1f ms\n", (unsigned long long)(st.bytes_pinned >> 20),
		       st.ranges_pinned, st.pin_ns / 1e6, st.pin_max_ns / 1e6);
	}

	/* A restarted daemon maps new extents (perhaps at the old
	 * addresses): the old registrations must go before the new ones. */
	daemon_stop(&d);
	daemon_restart(&d, NULL);
	WAIT_FOR(kvt_client_ping(c) == 0, "the client to reconnect");
	cache_fill(&nhd, 3, 0);
	round_trip(c, ns, ctx, &nhd, &fi, 0x33, compute, AFTER_STREAM);

	cache_free(&nhd);
	cache_free(&fi);
	cudaStreamDestroy(compute);
	kvt_cuda_ctx_free(ctx);
	kvt_ns_close(ns);
	kvt_client_free(c);
	daemon_stop(&d);
	daemon_cleanup(&d);
	printf("ok\n");
	return 0;
}
