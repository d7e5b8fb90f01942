/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The client's CUDA path for a namespace with a codec, against a real
 * kvtierd: a bfloat16 paged cache on the GPU stored with fp8-e4m3, then
 * int4, by the codec kernels.  The pool must hold exactly the bytes the
 * CPU path encodes (kvt_layout_gather with the codec); a load on the GPU,
 * layer by layer, must write exactly what the CPU path's scatter writes,
 * and the CPU path's load (kvt_load_paged) the same; every value within
 * the codec's bound of the one stored.
 *
 * Without a device: exits 77 (1 when the driver is too old or CUDA fails
 * otherwise).
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "client-util.h"
#include "gpu-probe.h"

#define LAYERS 2
#define HEADS 4
#define D 128 /* bfloat16 elements of a head */
#define BS 16
#define N_PAGES 16
#define N_BLOCKS 6
#define POISON 0xff

struct cache {
	size_t bytes; /* of one layer: (2, NP, BS, H, D) */
	uint8_t *host[LAYERS], *dev[LAYERS];
	void *hbase[LAYERS], *dbase[LAYERS];
	kvt_layout lay;
};

static const char *codec_str(uint32_t codec)
{
	return codec == KVT_CODEC_INT4 ? "int4" : "fp8-e4m3";
}

static uint16_t to_bf16(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

static float from_bf16(const uint8_t *p)
{
	uint32_t u = (uint32_t)(p[0] | p[1] << 8) << 16;
	float f;

	memcpy(&f, &u, 4);
	return f;
}

static void cache_init(struct cache *c)
{
	int64_t hb = 2 * D;

	memset(c, 0, sizeof(*c));
	c->bytes = (size_t)(2 * N_PAGES * BS * HEADS * hb);
	for (int l = 0; l < LAYERS; l++) {
		c->host[l] = malloc(c->bytes);
		CHECK(c->host[l], "out of memory");
		CUDA_CHECK(cudaMalloc((void **)&c->dev[l], c->bytes));
		c->hbase[l] = c->host[l];
		c->dbase[l] = c->dev[l];
	}
	c->lay = (kvt_layout){.n_layers = LAYERS, .planes = 2, .heads = HEADS,
			      .head_bytes = (uint32_t)hb, .page_tokens = BS,
			      .index_kind = KVT_INDEX_PAGE,
			      .stride_plane = N_PAGES * BS * HEADS * hb,
			      .stride_page = BS * HEADS * hb, .stride_token = HEADS * hb,
			      .stride_head = hb, .n_pages = N_PAGES};
}

/* Normal values (a codec keeps no NaNs), or poison; to the device too. */
static void cache_fill(struct cache *c, int poison)
{
	for (int l = 0; l < LAYERS; l++) {
		for (size_t i = 0; i < c->bytes; i += 2) {
			uint16_t h = to_bf16((float)rand() / RAND_MAX * 4.0f - 2.0f);

			c->host[l][i] = poison ? POISON : (uint8_t)h;
			c->host[l][i + 1] = poison ? POISON : (uint8_t)(h >> 8);
		}
		CUDA_CHECK(cudaMemcpy(c->dev[l], c->host[l], c->bytes, cudaMemcpyHostToDevice));
	}
	CUDA_CHECK(cudaDeviceSynchronize());
}

static void cache_free(struct cache *c)
{
	for (int l = 0; l < LAYERS; l++) {
		free(c->host[l]);
		cudaFree(c->dev[l]);
	}
}

/* Stores the blocks of pages pg through the CUDA path, retrying blocks
 * whose memory was not pinned yet. */
static void cuda_store(kvt_cuda_ctx *ctx, kvt_ns *ns, const kvt_layout *lay,
		       const uint8_t *keys, const int64_t *pg, cudaStream_t compute)
{
	int32_t st[N_BLOCKS];
	kvt_cuda_job *job = NULL;
	int r, again = 1;

	for (int round = 0; round < 3 && again; round++) {
		CHECK(kvt_cuda_ctx_wait_pinned(ctx, 60000) == 0, "wait_pinned");
		r = kvt_cuda_store_submit(ctx, ns, 0, lay, keys, N_BLOCKS, pg, compute, &job);
		CHECK(r >= 0, "store: %d", r);
		CHECK(poll_done(job, st) == 1, "store poll");
		kvt_cuda_job_free(job);
		again = 0;
		for (int i = 0; i < N_BLOCKS; i++)
			again += st[i] == -EAGAIN;
	}
	for (int i = 0; i < N_BLOCKS; i++)
		CHECK(st[i] == 0 || st[i] == -EEXIST, "store %d: %d", i, st[i]);
}

static void round_trip(kvt_client *c, kvt_cuda_ctx *ctx, cudaStream_t compute, uint32_t codec)
{
	kvt_layer_group grp = {.n_layers = LAYERS, .attn = KVT_ATTN_MHA, .planes = 2,
			       .kv_heads = HEADS, .head_bytes = 2 * D,
			       .dtype = KVT_DTYPE_BFLOAT16};
	kvt_ns_desc desc = {.model = "gpu-codec", .layer_end = LAYERS, .tp_size = 1,
			    .cp_size = 1, .block_tokens = BS, .n_groups = 1, .groups = &grp,
			    .codec = codec};
	uint8_t keys[N_BLOCKS * KVT_KEY_BYTES];
	int64_t pg[N_BLOCKS], pg2[N_BLOCKS];
	void *want[N_BLOCKS], *got[N_BLOCKS];
	kvt_layout coded;
	struct cache src, cpu, gpu;
	int32_t st[N_BLOCKS];
	kvt_cuda_job *job = NULL;
	kvt_ns *ns = NULL;
	kvt_ns_info info;
	uint8_t *tmp;
	double worst = 0;
	int r;

	CHECK(kvt_ns_open(c, &desc, &ns) == 0, "ns: %s", kvt_client_error(c));
	kvt_ns_get_info(ns, &info);
	cache_init(&src);
	cache_init(&cpu);
	cache_init(&gpu);
	cache_fill(&src, 0);
	make_keys(keys, N_BLOCKS, (0x77ull + codec) << 32);
	for (int i = 0; i < N_BLOCKS; i++) {
		pg[i] = (i * 5 + 1) % N_PAGES;
		pg2[i] = (i * 7 + 3) % N_PAGES;
		want[i] = malloc(info.shard_bytes);
		got[i] = malloc(info.shard_bytes);
		CHECK(want[i] && got[i], "out of memory");
	}
	/* The CPU path's encoding of the same pages. */
	coded = src.lay;
	coded.codec = codec;
	coded.dtype = KVT_DTYPE_BFLOAT16;
	coded.layer_base = src.hbase;
	CHECK(kvt_layout_block_bytes(&coded, BS) == info.shard_bytes, "%s: shard %llu",
	      codec_str(codec), (unsigned long long)info.shard_bytes);
	CHECK(kvt_layout_gather(&coded, BS, pg, N_BLOCKS, want) == 0, "CPU gather");

	/* Stored from the GPU: the pool holds the CPU path's bytes. */
	src.lay.layer_base = src.dbase;
	cuda_store(ctx, ns, &src.lay, keys, pg, compute);
	r = kvt_load(ns, 0, keys, N_BLOCKS, got, st);
	CHECK(r == N_BLOCKS, "%s: CPU load: %d", codec_str(codec), r);
	for (int i = 0; i < N_BLOCKS; i++)
		CHECK(memcmp(got[i], want[i], info.shard_bytes) == 0,
		      "%s: pool block %d differs from the CPU path's encoding",
		      codec_str(codec), i);

	/* Loaded on the GPU into other pages, layer by layer, and by the CPU
	 * path: the same bytes, every other byte left poisoned. */
	cache_fill(&cpu, 1);
	cache_fill(&gpu, 1);
	cpu.lay.layer_base = cpu.hbase;
	r = kvt_load_paged(ns, 0, &cpu.lay, keys, N_BLOCKS, pg2, st);
	CHECK(r == N_BLOCKS, "%s: kvt_load_paged: %d", codec_str(codec), r);
	gpu.lay.layer_base = gpu.dbase;
	r = kvt_cuda_load_submit(ctx, ns, 0, &gpu.lay, keys, N_BLOCKS, pg2, compute, &job);
	CHECK(r == N_BLOCKS, "%s: load: %d", codec_str(codec), r);
	for (uint32_t l = 0; l < LAYERS; l++)
		CHECK(kvt_cuda_wait_layer(job, l, compute) == 0, "wait layer");
	CHECK(poll_done(job, st) == 1, "load poll");
	kvt_cuda_job_free(job);
	tmp = malloc(gpu.bytes);
	CHECK(tmp, "out of memory");
	for (int l = 0; l < LAYERS; l++) {
		CUDA_CHECK(cudaMemcpy(tmp, gpu.dev[l], gpu.bytes, cudaMemcpyDeviceToHost));
		CHECK(memcmp(tmp, cpu.host[l], gpu.bytes) == 0,
		      "%s: layer %d loaded on the GPU differs from the CPU path's",
		      codec_str(codec), l);
		/* Within the codec's bound of what was stored: values in
		 * [-2, 2], fp8 keeps 3 mantissa bits, int4 sixteen steps of a
		 * range of at most 4; bfloat16 rounds the result. */
		for (int i = 0; i < N_BLOCKS; i++)
			for (int64_t e = 0; e < BS * HEADS * D * 2; e++) {
				int64_t p = e / (BS * HEADS * D), rest = e % (BS * HEADS * D);
				size_t o = (size_t)(p * src.lay.stride_plane + rest * 2);
				float x = from_bf16(src.host[l] + o + pg[i] * src.lay.stride_page);
				float y = from_bf16(tmp + o + pg2[i] * src.lay.stride_page);
				double err = fabs((double)x - y);
				double lim = codec == KVT_CODEC_FP8_E4M3
						     ? fabs(x) / 16 + 0x1p-9 + fabs(y) / 256
						     : 4.0 / 30 + 0x1p-6 + fabs(y) / 256;

				if (err > lim) {
					CHECK(0, "%s: layer %d block %d element %lld: %g for %g",
					      codec_str(codec), l, i, (long long)e, y, x);
					goto out;
				}
				worst = err > worst ? err : worst;
			}
	}
out:
	printf("%s: largest error %g\n", codec_str(codec), worst);
	free(tmp);
	for (int i = 0; i < N_BLOCKS; i++) {
		free(want[i]);
		free(got[i]);
	}
	cache_free(&src);
	cache_free(&cpu);
	cache_free(&gpu);
	kvt_ns_close(ns);
}

int main(void)
{
	kvt_cuda_ctx *ctx = NULL;
	cudaStream_t compute;
	struct daemon d;
	kvt_client *c;
	int probe = kvt_gpu_probe();

	if (probe != 0)
		return probe;
	daemon_start(&d, NULL);
	c = client_connect(&d, "gpu-codec");
	CHECK(kvt_cuda_ctx_new(c, 0, &ctx) == 0, "context");
	CUDA_CHECK(cudaSetDevice(0));
	CUDA_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
	srand(28);
	round_trip(c, ctx, compute, KVT_CODEC_FP8_E4M3);
	round_trip(c, ctx, compute, KVT_CODEC_INT4);
	cudaStreamDestroy(compute);
	kvt_cuda_ctx_free(ctx);
	kvt_client_free(c);
	daemon_stop(&d);
	daemon_cleanup(&d);
	printf("ok\n");
	return 0;
}
