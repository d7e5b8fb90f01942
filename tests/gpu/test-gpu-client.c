/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The client's CUDA path against a real kvtierd: blocks stored from one
 * engine layout on the GPU (vLLM FlashAttention NHD) come back, through
 * the pool, into another (FlashInfer) and the other way round, layer by
 * layer, with the expected bytes from the CPU path.  Also: per-key status
 * (a miss, an existing block), commit only after completion (the blocks
 * are invisible until polled), a GPU-side wait for a store, the CPU copy
 * path reading what the GPU stored, and registration after the daemon
 * restarted and the pool was mapped anew.
 *
 * Without a device: checks the arguments of every entry point and that
 * the context refuses with -ENODEV, then exits 77.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "harness.h"
#include "kvtier-cuda.h"

#define N_LAYERS 4
#define HEADS 8
#define HEAD_BYTES 256
#define BS 16
#define N_PAGES 16
#define N_BLOCKS 6
#define POISON 0xff

#define CUDA_CHECK(call)                                                   \
	do {                                                               \
		cudaError_t e_ = (call);                                   \
		CHECK(e_ == cudaSuccess, "%s: %s", #call,                  \
		      cudaGetErrorString(e_));                             \
	} while (0)

enum kind { FA_NHD, FLASHINFER };

/* One engine cache: a host image (the truth) and its device copy. */
struct cache {
	enum kind kind;
	size_t layer_bytes;
	uint8_t *host[N_LAYERS];
	uint8_t *dev[N_LAYERS];
	void *host_base[N_LAYERS];
	void *dev_base[N_LAYERS];
	kvt_layout lay;
};

static void cache_init(struct cache *c, enum kind kind)
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
		.stride_token = H * hb,
		.stride_head = hb,
	};
	if (kind == FA_NHD) {
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

/* Polls until done; never a performance bound, only a hang guard. */
static int poll_done(kvt_cuda_job *job, int32_t *st)
{
	int r = 0;

	for (int i = 0; i < 30000 && r == 0; i++) {
		r = kvt_cuda_job_poll(job, st);
		if (r == 0)
			usleep(1000);
	}
	return r;
}

static void make_keys(uint8_t *keys, int n, uint8_t tag)
{
	for (int i = 0; i < n; i++) {
		memset(keys + i * KVT_KEY_BYTES, tag, KVT_KEY_BYTES);
		keys[i * KVT_KEY_BYTES] = (uint8_t)i;
	}
}

/*
 * Stores N_BLOCKS pages of src on the GPU, checks the pool through the CPU
 * path, loads them into dst on the GPU layer by layer, and compares dst
 * with the CPU path's scatter of the same blocks.
 */
static void round_trip(kvt_client *c, kvt_ns *ns, kvt_cuda_ctx *ctx,
		       struct cache *src, struct cache *dst, uint8_t tag,
		       cudaStream_t compute)
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
	make_keys(keys, N_BLOCKS + 1, tag);

	/* The expected blocks, from the CPU path. */
	src->lay.layer_base = src->host_base;
	r = kvt_layout_gather(&src->lay, BS, pages, N_BLOCKS, want);
	CHECK(r == 0, "CPU gather: %d", r);

	/* Store from the GPU; nothing is visible before the poll. */
	src->lay.layer_base = src->dev_base;
	r = kvt_cuda_store_submit(ctx, ns, 0, &src->lay, keys, N_BLOCKS, pages,
				  compute, &job);
	CHECK(r == N_BLOCKS, "store submit: %d (%s)", r,
	      r < 0 ? strerror(-r) : "");
	CHECK(kvt_cuda_job_size(job) == N_BLOCKS, "job size");
	r = kvt_lookup(ns, keys, N_BLOCKS, 0, states);
	CHECK(r == 0, "%d blocks visible before their copy was polled", r);
	CHECK(kvt_cuda_job_wait_stream(job, compute) == 0, "wait_stream");
	r = poll_done(job, st);
	CHECK(r == 1, "store poll: %d", r);
	for (int i = 0; i < N_BLOCKS; i++)
		CHECK(st[i] == 0, "store status %d: %d", i, st[i]);
	kvt_cuda_job_free(job);
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
	r = kvt_cuda_load_submit(ctx, ns, 0, &dst->lay, keys, N_BLOCKS + 1,
				 dpages, compute, &job);
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
	cudaError_t e;
	int n_dev = 0, r;

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
		kvt_cuda_job_free(NULL);
		kvt_cuda_ctx_free(NULL);
	}

	e = cudaGetDeviceCount(&n_dev);
	if (e != cudaSuccess || n_dev == 0) {
		r = kvt_cuda_ctx_new(c, 0, &ctx);
		CHECK(r == -ENODEV, "context without a device: %d", r);
		kvt_ns_close(ns);
		kvt_client_free(c);
		daemon_stop(&d);
		daemon_cleanup(&d);
		printf("no CUDA device: %s\n",
		       cudaGetErrorString(e != cudaSuccess ? e
							   : cudaErrorNoDevice));
		return KVT_TEST_SKIP;
	}

	CHECK(kvt_cuda_ctx_new(c, n_dev, &ctx) == -ENODEV, "device out of range");
	r = kvt_cuda_ctx_new(c, 0, &ctx);
	CHECK(r == 0, "context: %d", r);
	CUDA_CHECK(cudaSetDevice(0));
	CUDA_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
	cache_init(&nhd, FA_NHD);
	cache_init(&fi, FLASHINFER);

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

	cache_fill(&nhd, 1, 0);
	cache_fill(&fi, 2, 0);
	round_trip(c, ns, ctx, &nhd, &fi, 0x11, compute);
	round_trip(c, ns, ctx, &fi, &nhd, 0x22, compute);

	/* A restarted daemon maps new extents (perhaps at the old
	 * addresses): the old registrations must go before the new ones. */
	daemon_stop(&d);
	daemon_restart(&d, NULL);
	WAIT_FOR(kvt_client_ping(c) == 0, "the client to reconnect");
	cache_fill(&nhd, 3, 0);
	round_trip(c, ns, ctx, &nhd, &fi, 0x33, compute);

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
