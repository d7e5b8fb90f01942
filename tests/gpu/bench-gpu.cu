/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GPU copy path benchmark.  Every figure is a ratio against a limit
 * measured in the same run on the same buffers.
 *
 *   bandwidth  for block sizes of 64 KiB to 4 MiB and two layouts (vLLM
 *              NHD pages, per layer and plane; MLA latent rows), each path
 *              both ways between the engine cache and the pool: the kernel
 *              within the default CTA budget, the kernel over the whole
 *              grid (what it was before the budget), and the copy engines
 *              (cudaMemcpyBatchAsync), against one cudaMemcpyAsync of the
 *              same bytes; "model" marks the path kvt_copy_path() picks.
 *              The model's constants measured here are printed too.
 *   overlap    layer-wise prefetch beside a compute kernel that fills
 *              every SM with FMA work: how much of the copy time is
 *              hidden, and how much slower the compute gets, per path.
 *   start      a prefetch for the next step, queued after this step's
 *              compute: waiting on an event of the compute stream (the
 *              old behaviour) against an event the caller recorded when
 *              the pages became free (kvt_cuda_submit_opts).
 *
 * The pool is what kvtierd hands a client: a shared memfd mapping,
 * touched once and registered with cudaHostRegister in 1 GiB chunks.
 * Lines starting "FIGURE" are for tests/gpu/run.sh.  Exits 77 without a
 * device.  Not a pass/fail test.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "kvtier.h"
#include "layout_cuda.h"
#include "gpu-probe.h"
#include "../engine-layouts.h"

#define TOTAL (UINT64_C(256) << 20) /* bytes per measurement */
#define REPS 3
#define REG_CHUNK (UINT64_C(1) << 30)
#define MAX_LAYERS 32

#define CUDA_OK(call)                                                     \
	do {                                                              \
		cudaError_t e_ = (call);                                  \
		if (e_ != cudaSuccess) {                                  \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__,      \
				__LINE__, #call, cudaGetErrorString(e_)); \
			exit(1);                                          \
		}                                                         \
	} while (0)

struct bench {
	enum layout_kind kind;
	kvt_layout lay;
	struct kvt_geom g;
	uint64_t block_bytes, total;
	int64_t n_blocks, n_pages;
	uint8_t *engine;    /* device */
	void *base[MAX_LAYERS];
	int64_t *idx;       /* [n_blocks] pages, host */
	uint8_t *pool;      /* registered memfd mapping */
	size_t pool_bytes;
	void **pool_blk;    /* [n_blocks] host addresses */
	uint8_t *flat;      /* device buffer of the memcpy limits */
	void **d_base;      /* kernel-readable arrays */
	int64_t *d_idx;
	void **d_pool;
	uint32_t align;
	cudaStream_t s, s2;
	int batch_ok;
	const char *name;
};

static int n_sms;

static void setup_pool(struct bench *b)
{
	int fd = memfd_create("kvtier-bench-pool", MFD_CLOEXEC);
	void **dev = (void **)malloc(b->n_blocks * sizeof(void *));

	b->pool_bytes = (size_t)b->total;
	if (fd < 0 || ftruncate(fd, (off_t)b->pool_bytes) < 0) {
		perror("memfd");
		exit(1);
	}
	b->pool = (uint8_t *)mmap(NULL, b->pool_bytes, PROT_READ | PROT_WRITE,
				  MAP_SHARED, fd, 0);
	close(fd);
	if (b->pool == MAP_FAILED) {
		perror("mmap");
		exit(1);
	}
	memset(b->pool, 0x5a, b->pool_bytes);
	for (size_t off = 0; off < b->pool_bytes; off += REG_CHUNK)
		CUDA_OK(cudaHostRegister(
			b->pool + off,
			b->pool_bytes - off < REG_CHUNK ? b->pool_bytes - off
							: REG_CHUNK,
			cudaHostRegisterPortable | cudaHostRegisterMapped));
	b->pool_blk = (void **)malloc(b->n_blocks * sizeof(void *));
	for (int64_t i = 0; i < b->n_blocks; i++) {
		uint8_t *h = b->pool + i * b->block_bytes;
		size_t chunk = (size_t)(h - b->pool) / REG_CHUNK * REG_CHUNK;
		uint8_t *d;

		CUDA_OK(cudaHostGetDevicePointer((void **)&d, b->pool + chunk,
						 0));
		b->pool_blk[i] = h;
		dev[i] = d + ((h - b->pool) - chunk);
	}
	CUDA_OK(cudaMalloc((void **)&b->d_pool, b->n_blocks * sizeof(void *)));
	CUDA_OK(cudaMemcpy(b->d_pool, dev, b->n_blocks * sizeof(void *),
			   cudaMemcpyHostToDevice));
	b->align = kvt_ptr_align((const void *const *)dev, b->n_blocks);
	free(dev);
}

/*
 * n_layers layers of tokens tokens per block: NHD with 2 KV heads of 256
 * bytes (8 KiB per token over 8 layers), or one MLA row of 1152 bytes.
 */
static void bench_init(struct bench *b, enum layout_kind kind, uint32_t n_layers,
		       uint32_t tokens)
{
	int64_t hb = kind == K_MLA ? 1152 : 256, H = kind == K_MLA ? 1 : 2;
	int64_t planes = kind == K_MLA ? 1 : 2, np, layer_bytes;
	uint32_t a;

	memset(b, 0, sizeof(*b));
	b->kind = kind;
	b->name = layout_kind_name(kind);
	b->block_bytes = (uint64_t)(n_layers * planes * tokens * H * hb);
	b->n_blocks = (int64_t)(TOTAL / b->block_bytes);
	b->total = b->block_bytes * (uint64_t)b->n_blocks;
	b->n_pages = np = 2 * b->n_blocks;
	b->lay = (kvt_layout){.n_layers = n_layers, .planes = (uint32_t)planes,
			      .heads = (uint32_t)H, .head_bytes = (uint32_t)hb,
			      .page_tokens = tokens,
			      .index_kind = KVT_INDEX_PAGE, .layer_base = b->base,
			      .stride_plane = np * tokens * H * hb,
			      .stride_page = tokens * H * hb,
			      .stride_token = H * hb, .stride_head = hb,
			      .n_pages = (uint64_t)np, .flags = 0,
			      .elem_bytes = 0, .dtype = 0, .codec = KVT_CODEC_NONE};
	layer_bytes = np * planes * tokens * H * hb;
	CUDA_OK(cudaMalloc((void **)&b->engine, (size_t)layer_bytes * n_layers));
	CUDA_OK(cudaMemset(b->engine, 0x3c, (size_t)layer_bytes * n_layers));
	for (uint32_t l = 0; l < n_layers; l++)
		b->base[l] = b->engine + l * layer_bytes;
	if (kvt_geom_from_layout(&b->lay, tokens, &b->g) < 0) {
		fprintf(stderr, "%s: descriptor refused\n", b->name);
		exit(1);
	}
	/* Every other page, so that no two blocks are neighbours. */
	b->idx = (int64_t *)malloc(b->n_blocks * sizeof(int64_t));
	for (int64_t i = 0; i < b->n_blocks; i++)
		b->idx[i] = (i * 2 + 1) % np;
	setup_pool(b);
	CUDA_OK(cudaMalloc((void **)&b->flat, b->total));
	CUDA_OK(cudaMalloc((void **)&b->d_base, n_layers * sizeof(void *)));
	CUDA_OK(cudaMalloc((void **)&b->d_idx, b->n_blocks * sizeof(int64_t)));
	CUDA_OK(cudaMemcpy(b->d_base, b->base, n_layers * sizeof(void *),
			   cudaMemcpyHostToDevice));
	CUDA_OK(cudaMemcpy(b->d_idx, b->idx, b->n_blocks * sizeof(int64_t),
			   cudaMemcpyHostToDevice));
	a = kvt_ptr_align((const void *const *)b->base, n_layers);
	b->align = a < b->align ? a : b->align;
	/* Copies on a stream of the highest priority, as the client's load
	 * stream: their CTAs get the first free slots. */
	{
		int least = 0, greatest = 0;

		CUDA_OK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
		CUDA_OK(cudaStreamCreateWithPriority(
			&b->s, cudaStreamNonBlocking, least));
		CUDA_OK(cudaStreamCreateWithPriority(
			&b->s2, cudaStreamNonBlocking, greatest));
	}
	b->batch_ok = kvt_cuda_batch_ok(b->s);
	CUDA_OK(cudaDeviceSynchronize());
}

static void bench_free(struct bench *b)
{
	cudaStreamDestroy(b->s);
	cudaStreamDestroy(b->s2);
	for (size_t off = 0; off < b->pool_bytes; off += REG_CHUNK)
		cudaHostUnregister(b->pool + off);
	munmap(b->pool, b->pool_bytes);
	cudaFree(b->engine);
	cudaFree(b->flat);
	cudaFree(b->d_base);
	cudaFree(b->d_idx);
	cudaFree(b->d_pool);
	free(b->idx);
	free(b->pool_blk);
}

enum path { P_BUDGET, P_GRID, P_ENGINE, P_COUNT };
static const char *const path_name[P_COUNT] = {"kernel/8", "kernel/grid",
					       "engines"};

/* Queues layers [l0, l0 + nl) of every block by path p (dir: gather or
 * scatter), or, with p == P_COUNT, the cudaMemcpyAsync of the same bytes. */
static void queue(struct bench *b, int p, int dir, int64_t l0, int64_t nl,
		  cudaStream_t s)
{
	size_t bytes = (size_t)(b->total / b->lay.n_layers * nl);
	int r = 0;

	if (p == P_COUNT) {
		CUDA_OK(cudaMemcpyAsync(
			dir == KVT_COPY_GATHER ? (void *)b->pool : b->flat,
			dir == KVT_COPY_GATHER ? (void *)b->flat : b->pool,
			bytes,
			dir == KVT_COPY_GATHER ? cudaMemcpyDeviceToHost
					       : cudaMemcpyHostToDevice,
			s));
		return;
	}
	if (p == P_ENGINE)
		r = dir == KVT_COPY_GATHER
			    ? kvt_cuda_gather_batch(&b->g, l0, nl, b->base,
						    b->idx, b->pool_blk,
						    b->n_blocks, s)
			    : kvt_cuda_scatter_batch(&b->g, l0, nl, b->base,
						     b->idx, b->pool_blk,
						     b->n_blocks, s);
	else
		r = (dir == KVT_COPY_GATHER ? kvt_cuda_gather
					    : kvt_cuda_scatter)(
			&b->g, l0, nl, b->d_base, b->d_idx, b->d_pool,
			b->n_blocks, b->align,
			p == P_BUDGET ? KVT_CTA_BUDGET_DEFAULT : 0, s);
	if (r < 0) {
		fprintf(stderr, "%s: %s: %s\n", b->name, path_name[p],
			strerror(-r));
		exit(1);
	}
}

/* Milliseconds of one copy of every layer: the best of REPS after a warm
 * up. */
static double time_copy(struct bench *b, int p, int dir)
{
	cudaEvent_t e0, e1;
	double best = 1e30;

	CUDA_OK(cudaEventCreate(&e0));
	CUDA_OK(cudaEventCreate(&e1));
	queue(b, p, dir, 0, b->lay.n_layers, b->s);
	for (int i = 0; i < REPS; i++) {
		float ms;

		CUDA_OK(cudaEventRecord(e0, b->s));
		queue(b, p, dir, 0, b->lay.n_layers, b->s);
		CUDA_OK(cudaEventRecord(e1, b->s));
		CUDA_OK(cudaEventSynchronize(e1));
		CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
		best = ms < best ? ms : best;
	}
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	return best;
}

/* The model's constants as this run measures them, from the 4 MiB and
 * 64 KiB NHD points: the link, a CTA's share, a run's cost. */
static double fit_link, fit_cta, fit_run;

static void bench_bandwidth(struct bench *b)
{
	struct kvt_copy_model m;
	int64_t runs = kvt_batch_count(&b->g, 0, b->lay.n_layers, b->base,
				       b->n_blocks);
	int model;

	kvt_copy_model_default(&m);
	model = kvt_copy_path(&b->g, 0, b->lay.n_layers, b->base, b->n_blocks,
			      &m, b->batch_ok);
	for (int dir = 0; dir < 2; dir++) {
		double limit_ms = time_copy(b, P_COUNT, dir);
		const char *what = dir == KVT_COPY_GATHER ? "offload" : "prefetch";

		for (int p = 0; p < P_COUNT; p++) {
			double ms;
			int mine = p == P_BUDGET ? model == KVT_PATH_KERNEL
						 : p == P_ENGINE &&
							   model == KVT_PATH_BATCH;

			if (p == P_ENGINE && !b->batch_ok)
				continue;
			ms = time_copy(b, p, dir);
			printf("FIGURE bw %s %lluK %s %s %.2f GB/s %.3f of "
			       "cudaMemcpyAsync (%.2f GB/s)%s\n",
			       b->name,
			       (unsigned long long)(b->block_bytes >> 10), what,
			       path_name[p], b->total / (ms * 1e6),
			       limit_ms / ms, b->total / (limit_ms * 1e6),
			       mine ? " <- model" : "");
			if (dir == KVT_COPY_SCATTER && b->kind == K_FA_NHD &&
			    p == P_BUDGET && b->block_bytes >= (4u << 20))
				fit_cta = b->total / (ms * 1e6) /
					  KVT_CTA_BUDGET_DEFAULT;
			if (dir == KVT_COPY_SCATTER && b->kind == K_FA_NHD &&
			    p == P_ENGINE && b->block_bytes <= (64u << 10))
				fit_run = (ms - limit_ms) * 1e6 / runs;
		}
		if (dir == KVT_COPY_SCATTER && b->kind == K_FA_NHD)
			fit_link = b->total / (limit_ms * 1e6);
	}
}

/* ---- compute beside copies ---------------------------------------------- */

/* Stands in for attention and GEMMs: FMA work on every SM, so that its
 * time grows when copies take SMs from it. */
__global__ void burn(float *out, int iters)
{
	float a = threadIdx.x * 1e-3f, c = 1.0001f;

	for (int i = 0; i < iters; i++)
		a = fmaf(a, c, 1e-7f);
	if (a == 42.0f)
		out[0] = a;
}

static float *burn_out;

static void queue_burn(int iters, cudaStream_t s)
{
	/* 8 CTAs of 256 threads per SM fill an H100/H200 SM (2048 threads). */
	burn<<<n_sms * 8, 256, 0, s>>>(burn_out, iters);
	CUDA_OK(cudaGetLastError());
}

static float elapsed(cudaEvent_t a, cudaEvent_t b)
{
	float ms;

	CUDA_OK(cudaEventSynchronize(b));
	CUDA_OK(cudaEventElapsedTime(&ms, a, b));
	return ms;
}

/* A burn taking about ms milliseconds alone. */
static int calibrate(cudaStream_t s, double ms)
{
	cudaEvent_t e0, e1;
	int iters = 1 << 16;
	float t;

	CUDA_OK(cudaEventCreate(&e0));
	CUDA_OK(cudaEventCreate(&e1));
	queue_burn(iters, s);
	CUDA_OK(cudaEventRecord(e0, s));
	queue_burn(iters, s);
	CUDA_OK(cudaEventRecord(e1, s));
	t = elapsed(e0, e1);
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	return (int)(iters * ms / t) + 1;
}

/*
 * Layer-wise prefetch by path p: compute of layer l waits for layer l's
 * copy.  Alone: the copies, the compute.  Beside: the copies on s2 with
 * an event per layer, the compute on s waiting for each; every compute
 * kernel timed on its own.
 */
static void bench_overlap(struct bench *b, int p)
{
	uint32_t nl = b->lay.n_layers;
	cudaEvent_t e0, e1, ev[MAX_LAYERS], c0[MAX_LAYERS], c1[MAX_LAYERS];
	double xfer = 0, comp = 0, comp_beside = 0, total, hidden, slower;
	int iters;

	CUDA_OK(cudaEventCreate(&e0));
	CUDA_OK(cudaEventCreate(&e1));
	for (uint32_t l = 0; l < nl; l++) {
		CUDA_OK(cudaEventCreateWithFlags(&ev[l], cudaEventDisableTiming));
		CUDA_OK(cudaEventCreate(&c0[l]));
		CUDA_OK(cudaEventCreate(&c1[l]));
	}
	/* The copies alone, layer by layer as beside the compute. */
	for (int rep = 0; rep <= REPS; rep++) {
		double t;

		CUDA_OK(cudaEventRecord(e0, b->s2));
		for (uint32_t l = 0; l < nl; l++)
			queue(b, p, KVT_COPY_SCATTER, l, 1, b->s2);
		CUDA_OK(cudaEventRecord(e1, b->s2));
		t = elapsed(e0, e1);
		if (rep && (xfer == 0 || t < xfer))
			xfer = t;
	}
	iters = calibrate(b->s, 1.5 * xfer / nl);
	for (uint32_t l = 0; l < nl; l++) {
		CUDA_OK(cudaEventRecord(c0[l], b->s));
		queue_burn(iters, b->s);
		CUDA_OK(cudaEventRecord(c1[l], b->s));
	}
	for (uint32_t l = 0; l < nl; l++)
		comp += elapsed(c0[l], c1[l]);

	/* Beside: a first burn holds both streams until all is queued. */
	queue_burn(iters, b->s);
	CUDA_OK(cudaEventRecord(e0, b->s));
	CUDA_OK(cudaStreamWaitEvent(b->s2, e0, 0));
	for (uint32_t l = 0; l < nl; l++) {
		queue(b, p, KVT_COPY_SCATTER, l, 1, b->s2);
		CUDA_OK(cudaEventRecord(ev[l], b->s2));
	}
	for (uint32_t l = 0; l < nl; l++) {
		CUDA_OK(cudaStreamWaitEvent(b->s, ev[l], 0));
		CUDA_OK(cudaEventRecord(c0[l], b->s));
		queue_burn(iters, b->s);
		CUDA_OK(cudaEventRecord(c1[l], b->s));
	}
	CUDA_OK(cudaEventRecord(e1, b->s));
	total = elapsed(e0, e1);
	for (uint32_t l = 0; l < nl; l++)
		comp_beside += elapsed(c0[l], c1[l]);
	/* What the copies added to the compute's time, as a share of their
	 * own time; the first layer's copy can never be hidden. */
	hidden = 1.0 - (total - comp) / xfer;
	slower = comp_beside / comp - 1.0;
	printf("FIGURE overlap %s %s: copies %.2f ms, compute %.2f ms, together "
	       "%.2f ms; hidden %.0f%% of the copy time (at most %.0f%%), "
	       "compute %.1f%% slower\n",
	       b->name, path_name[p], xfer, comp, total, 100 * hidden,
	       100.0 * (nl - 1) / nl, 100 * slower);
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	for (uint32_t l = 0; l < nl; l++) {
		cudaEventDestroy(ev[l]);
		cudaEventDestroy(c0[l]);
		cudaEventDestroy(c1[l]);
	}
}

/*
 * The next step's prefetch, queued after this step's compute: after an
 * event recorded on the compute stream at submission (what every load
 * waited for before kvt_cuda_submit_opts), or after the caller's event of
 * when the pages became free (recorded before this step's compute).
 */
static void bench_start(struct bench *b)
{
	uint32_t nl = b->lay.n_layers;
	double xfer = time_copy(b, P_BUDGET, KVT_COPY_SCATTER), t[2];
	int iters = calibrate(b->s, xfer / nl);
	cudaEvent_t e0, e1, free_ev, after;

	CUDA_OK(cudaEventCreate(&e0));
	CUDA_OK(cudaEventCreate(&e1));
	CUDA_OK(cudaEventCreateWithFlags(&free_ev, cudaEventDisableTiming));
	CUDA_OK(cudaEventCreateWithFlags(&after, cudaEventDisableTiming));
	for (int mode = 0; mode < 2; mode++) {
		queue_burn(iters, b->s);
		CUDA_OK(cudaEventRecord(e0, b->s));
		CUDA_OK(cudaEventRecord(free_ev, b->s));
		for (uint32_t l = 0; l < nl; l++)
			queue_burn(iters, b->s);
		CUDA_OK(cudaEventRecord(after, b->s));
		CUDA_OK(cudaStreamWaitEvent(b->s2, mode ? free_ev : after, 0));
		queue(b, P_BUDGET, KVT_COPY_SCATTER, 0, nl, b->s2);
		CUDA_OK(cudaEventRecord(e1, b->s2));
		CUDA_OK(cudaStreamWaitEvent(b->s, e1, 0));
		CUDA_OK(cudaEventRecord(e1, b->s));
		t[mode] = elapsed(e0, e1);
	}
	printf("FIGURE start %s: step and next prefetch %.2f ms after the "
	       "compute stream, %.2f ms after the caller's event (%.2fx; "
	       "copies alone %.2f ms)\n",
	       b->name, t[0], t[1], t[0] / t[1], xfer);
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	cudaEventDestroy(free_ev);
	cudaEventDestroy(after);
}

int main(void)
{
	static const uint32_t nhd_tokens[] = {8, 32, 128, 512};
	static const uint32_t mla_tokens[] = {8, 32, 128, 448};
	struct cudaDeviceProp prop;
	int probe = kvt_gpu_probe(), driver = 0;
	struct bench b;

	if (probe)
		return probe;
	CUDA_OK(cudaSetDevice(0));
	CUDA_OK(cudaGetDeviceProperties(&prop, 0));
	CUDA_OK(cudaDriverGetVersion(&driver));
	CUDA_OK(cudaMalloc((void **)&burn_out, sizeof(float)));
	n_sms = prop.multiProcessorCount;
	printf("device: %s, %d SMs; runtime %d, driver %d; %llu MiB per copy\n",
	       prop.name, n_sms, CUDART_VERSION, driver,
	       (unsigned long long)(TOTAL >> 20));

	for (int k = 0; k < 2; k++)
		for (int i = 0; i < 4; i++) {
			bench_init(&b, k ? K_MLA : K_FA_NHD, 8,
				   k ? mla_tokens[i] : nhd_tokens[i]);
			bench_bandwidth(&b);
			bench_free(&b);
		}
	printf("FIGURE model measured: link %.1f GB/s, %.2f GB/s per CTA, "
	       "%.0f ns per run (defaults 50, 4, 1000)\n",
	       fit_link, fit_cta, fit_run);

	/* 32 layers of 1 MiB blocks: a 70B-like layer count. */
	bench_init(&b, K_FA_NHD, 32, 32);
	for (int p = 0; p < P_COUNT; p++)
		if (p != P_ENGINE || b.batch_ok)
			bench_overlap(&b, p);
	bench_start(&b);
	bench_free(&b);
	cudaFree(burn_out);
	printf("ratios: against cudaMemcpyAsync of the same bytes between the "
	       "same memories, same run\n");
	return 0;
}
