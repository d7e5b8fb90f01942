/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The client's CUDA path for a namespace whose layer groups differ in
 * geometry, against a real kvtierd: sliding-window K and V layers, then
 * MLA latent layers, each group with its own layout and block table
 * (kvt_cuda_submit_opts.layouts, group_indices).  The pool must hold
 * each group's block after the other's, as the CPU path gathers them, and
 * a load must put every byte back, layer by layer across the groups.
 *
 * Without a device: exits 77 (1 when the driver is too old or CUDA fails
 * otherwise).
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

#define HEADS 8
#define HEAD_BYTES 256
#define BS 16
#define N_PAGES 16
#define N_BLOCKS 6
#define POISON 0xff

/* Two groups' caches, on the host (the truth) and on the device. */
#define G_LAYERS 2
#define G_LAT 1152 /* an MLA latent row: 576 bf16 values */

struct gcache {
	size_t bytes[2];                 /* of one layer, per group */
	uint8_t *host[2][G_LAYERS], *dev[2][G_LAYERS];
	void *hbase[2][G_LAYERS], *dbase[2][G_LAYERS];
	kvt_layout lay[2];
};

static void gcache_init(struct gcache *g)
{
	int64_t hb = HEAD_BYTES, H = HEADS, bs = BS, np = N_PAGES;

	memset(g, 0, sizeof(*g));
	g->bytes[0] = (size_t)(2 * np * bs * H * hb); /* (2, NP, BS, H, D) */
	g->bytes[1] = (size_t)(np * bs * G_LAT);      /* (NP, BS, latent) */
	for (int k = 0; k < 2; k++)
		for (int l = 0; l < G_LAYERS; l++) {
			g->host[k][l] = malloc(g->bytes[k]);
			CHECK(g->host[k][l], "out of memory");
			CUDA_CHECK(cudaMalloc((void **)&g->dev[k][l], g->bytes[k]));
			g->hbase[k][l] = g->host[k][l];
			g->dbase[k][l] = g->dev[k][l];
		}
	g->lay[0] = (kvt_layout){.n_layers = G_LAYERS, .planes = 2, .heads = HEADS,
				 .head_bytes = HEAD_BYTES, .page_tokens = BS,
				 .index_kind = KVT_INDEX_PAGE,
				 .stride_plane = np * bs * H * hb,
				 .stride_page = bs * H * hb, .stride_token = H * hb,
				 .stride_head = hb, .n_pages = N_PAGES};
	g->lay[1] = (kvt_layout){.n_layers = G_LAYERS, .planes = 1, .heads = 1,
				 .head_bytes = G_LAT, .page_tokens = BS,
				 .index_kind = KVT_INDEX_PAGE,
				 .stride_page = bs * G_LAT, .stride_token = G_LAT,
				 .stride_head = G_LAT, .n_pages = N_PAGES};
}

/* Fills (or poisons) the host images and copies them to the device. */
static void gcache_fill(struct gcache *g, int poison)
{
	for (int k = 0; k < 2; k++)
		for (int l = 0; l < G_LAYERS; l++) {
			for (size_t i = 0; i < g->bytes[k]; i++)
				g->host[k][l][i] = poison ? POISON : (uint8_t)rand();
			CUDA_CHECK(cudaMemcpy(g->dev[k][l], g->host[k][l],
					      g->bytes[k], cudaMemcpyHostToDevice));
		}
	CUDA_CHECK(cudaDeviceSynchronize());
}

/*
 * A namespace of two layer groups of different geometry (sliding-window
 * K and V layers, then MLA latent layers), each group with its own block
 * table: stored through one layout per group, read by the CPU path as the
 * groups' blocks one after the other, and loaded back layer by layer.
 */
static void groups_round_trip(kvt_client *c, kvt_cuda_ctx *ctx,
			      cudaStream_t compute)
{
	kvt_layer_group grp[2] = {
		{.n_layers = G_LAYERS, .attn = KVT_ATTN_SWA, .window = 128,
		 .planes = 2, .kv_heads = HEADS, .head_bytes = HEAD_BYTES,
		 .dtype = 1},
		{.n_layers = G_LAYERS, .attn = KVT_ATTN_MLA, .planes = 1,
		 .kv_heads = 1, .head_bytes = G_LAT, .dtype = 1},
	};
	kvt_ns_desc desc = {.model = "gpu-groups", .layer_end = 2 * G_LAYERS,
			    .tp_size = 1, .cp_size = 1, .block_tokens = BS,
			    .n_groups = 2, .groups = grp};
	uint8_t keys[N_BLOCKS * KVT_KEY_BYTES];
	int64_t pg[2][N_BLOCKS];
	const int64_t *gi[2] = {pg[0], pg[1]};
	const kvt_layout *gl[2];
	void *want[N_BLOCKS], *got[N_BLOCKS], *part[N_BLOCKS];
	const void *cpart[N_BLOCKS];
	kvt_cuda_submit_opts o = {.size = sizeof(o),
				  .after = KVT_CUDA_AFTER_STREAM,
				  .stream = compute, .n_groups = 2,
				  .layouts = gl, .group_indices = gi};
	uint64_t s1;
	int32_t st[N_BLOCKS];
	kvt_cuda_job *job = NULL;
	struct gcache g;
	kvt_ns *ns = NULL;
	kvt_ns_info info;
	int r;

	CHECK(kvt_ns_open(c, &desc, &ns) == 0, "groups ns: %s",
	      kvt_client_error(c));
	kvt_ns_get_info(ns, &info);
	gcache_init(&g);
	gcache_fill(&g, 0);
	s1 = kvt_layout_block_bytes(&g.lay[0], BS);
	CHECK(s1 + kvt_layout_block_bytes(&g.lay[1], BS) == info.shard_bytes,
	      "groups: %llu bytes per shard", (unsigned long long)info.shard_bytes);
	make_keys(keys, N_BLOCKS, 0x66ull << 32);
	for (int i = 0; i < N_BLOCKS; i++) {
		pg[0][i] = (i * 5 + 1) % N_PAGES;
		pg[1][i] = (i * 3 + 2) % N_PAGES;
		want[i] = malloc(info.shard_bytes);
		got[i] = malloc(info.shard_bytes);
		CHECK(want[i] && got[i], "out of memory");
	}
	/* The expected blocks: each group's block after the other's. */
	for (int k = 0; k < 2; k++) {
		for (int i = 0; i < N_BLOCKS; i++)
			part[i] = (uint8_t *)want[i] + (k ? s1 : 0);
		g.lay[k].layer_base = g.hbase[k];
		CHECK(kvt_layout_gather(&g.lay[k], BS, pg[k], N_BLOCKS, part) == 0,
		      "CPU gather");
		g.lay[k].layer_base = g.dbase[k];
		gl[k] = &g.lay[k];
	}

	/* A layout beside the groups is refused. */
	r = kvt_cuda_store_submit_opts(ctx, ns, 0, &g.lay[0], keys, N_BLOCKS,
				       pg[0], &o, &job);
	CHECK(r == -EINVAL, "layout and groups: %d", r);
	for (int round = 0; round < 3; round++) {
		CHECK(kvt_cuda_ctx_wait_pinned(ctx, 60000) == 0, "wait_pinned");
		r = kvt_cuda_store_submit_opts(ctx, ns, 0, NULL, keys, N_BLOCKS,
					       NULL, &o, &job);
		CHECK(r >= 0, "groups store: %d", r);
		CHECK(poll_done(job, st) == 1, "groups store poll");
		kvt_cuda_job_free(job);
		r = 0;
		for (int i = 0; i < N_BLOCKS; i++)
			r += st[i] == -EAGAIN;
		if (!r)
			break;
	}
	for (int i = 0; i < N_BLOCKS; i++)
		CHECK(st[i] == 0 || st[i] == -EEXIST, "groups store %d: %d", i,
		      st[i]);
	r = kvt_load(ns, 0, keys, N_BLOCKS, got, st);
	CHECK(r == N_BLOCKS, "groups CPU load: %d", r);
	for (int i = 0; i < N_BLOCKS; i++)
		CHECK(memcmp(got[i], want[i], info.shard_bytes) == 0,
		      "groups: pool block %d differs from the CPU gather", i);

	/* Back into poisoned caches; the layers count across the groups. */
	gcache_fill(&g, 1);
	for (int k = 0; k < 2; k++) {
		for (int i = 0; i < N_BLOCKS; i++)
			cpart[i] = (uint8_t *)want[i] + (k ? s1 : 0);
		g.lay[k].layer_base = g.hbase[k];
		CHECK(kvt_layout_scatter(&g.lay[k], BS, pg[k], N_BLOCKS, cpart) == 0,
		      "CPU scatter");
		g.lay[k].layer_base = g.dbase[k];
	}
	r = kvt_cuda_load_submit_opts(ctx, ns, 0, NULL, keys, N_BLOCKS, NULL,
				      &o, &job);
	CHECK(r == N_BLOCKS, "groups load: %d", r);
	for (uint32_t l = 0; l < 2 * G_LAYERS; l++)
		CHECK(kvt_cuda_wait_layer(job, l, compute) == 0, "wait layer");
	CHECK(kvt_cuda_wait_layer(job, 2 * G_LAYERS, compute) == -EINVAL,
	      "layer past the groups accepted");
	CHECK(poll_done(job, st) == 1, "groups load poll");
	kvt_cuda_job_free(job);
	for (int k = 0; k < 2; k++)
		for (int l = 0; l < G_LAYERS; l++) {
			uint8_t *tmp = malloc(g.bytes[k]);

			CHECK(tmp, "out of memory");
			CUDA_CHECK(cudaMemcpy(tmp, g.dev[k][l], g.bytes[k],
					      cudaMemcpyDeviceToHost));
			CHECK(memcmp(tmp, g.host[k][l], g.bytes[k]) == 0,
			      "groups: group %d layer %d differs", k, l);
			free(tmp);
		}
	for (int i = 0; i < N_BLOCKS; i++) {
		free(want[i]);
		free(got[i]);
	}
	for (int k = 0; k < 2; k++)
		for (int l = 0; l < G_LAYERS; l++) {
			free(g.host[k][l]);
			cudaFree(g.dev[k][l]);
		}
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
	c = client_connect(&d, "gpu-groups");
	CHECK(kvt_cuda_ctx_new(c, 0, &ctx) == 0, "context");
	CUDA_CHECK(cudaSetDevice(0));
	CUDA_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
	srand(9);
	groups_round_trip(c, ctx, compute);
	cudaStreamDestroy(compute);
	kvt_cuda_ctx_free(ctx);
	kvt_client_free(c);
	daemon_stop(&d);
	daemon_cleanup(&d);
	printf("ok\n");
	return 0;
}
