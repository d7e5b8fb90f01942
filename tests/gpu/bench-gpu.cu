/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GPU copy path benchmark.  Every figure is a ratio against a limit
 * measured in the same run on the same buffers:
 *
 *   offload   engine cache -> pool (gather), against one cudaMemcpyAsync
 *             device -> pinned host of the same bytes;
 *   prefetch  pool -> engine cache (scatter), against one cudaMemcpyAsync
 *             pinned host -> device;
 *   d2d       gather/scatter with blocks in device memory, against one
 *             cudaMemcpyAsync device -> device;
 *   overlap   layer-wise prefetch: a synthetic per-layer compute kernel
 *             whose time is fixed at 1.5x the measured per-layer transfer,
 *             run after each layer's copy on one stream, then with the
 *             copies on a load stream and one event per layer; the saving
 *             as a fraction of the transfer time is the transfer hidden.
 *
 * The pool is what kvtierd hands a client: a shared memfd mapping,
 * pre-faulted and registered with cudaHostRegister in 1 GiB chunks.  Each
 * copy path is measured (kernel; cudaMemcpyBatchAsync where the toolkit,
 * driver and layout allow), and "rule" marks the one kvt_copy_path()
 * picks, so a measured table says whether KVT_BATCH_MIN_RUN is right.
 *
 * Exits 77 without a device.  Not a pass/fail test.
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
#include "../skip.h"

#define N_BLOCKS 256
#define REPS 5
#define REG_CHUNK (1ull << 30)
#define MAX_LAYERS 64
#define MAX_ROWS 64

#define CUDA_OK(call)                                                     \
	do {                                                              \
		cudaError_t e_ = (call);                                  \
		if (e_ != cudaSuccess) {                                  \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__,      \
				__LINE__, #call, cudaGetErrorString(e_)); \
			exit(1);                                          \
		}                                                         \
	} while (0)

enum kind { K_FA_NHD, K_FA_HND, K_FLASHINFER, K_MLA, K_CROSS };

/* Shapes of one tensor-parallel rank of common models. */
struct shape {
	const char *name;
	enum kind kind;
	uint32_t n_layers, planes, heads, head_bytes, page_tokens;
};

static const struct shape shapes[] = {
	/* Llama-3-8B-like: 32 layers, 8 KV heads of 128 bf16, pages of 16 */
	{ "fa-nhd", K_FA_NHD, 32, 2, 8, 256, 16 },
	{ "fa-hnd", K_FA_HND, 32, 2, 8, 256, 16 },
	{ "flashinfer", K_FLASHINFER, 32, 2, 8, 256, 16 },
	{ "cross-layer", K_CROSS, 32, 2, 8, 256, 16 },
	/* DeepSeek-like MLA: one 576-wide bf16 latent, pages of 64 */
	{ "mla", K_MLA, 32, 1, 1, 1152, 64 },
};

struct row {
	char layout[16], what[24], path[24];
	double gbs, ratio;
	int rule;
};

static struct row rows[MAX_ROWS];
static int n_rows;

struct olap {
	char layout[16], path[16];
	double xfer_ms, comp_ms, serial_ms, overlap_ms, hidden;
};

static struct olap olaps[8];
static int n_olaps;

/* One layout under test, with its engine cache, pool and arrays. */
struct bench {
	const struct shape *sh;
	kvt_layout lay;
	struct kvt_geom g;
	uint64_t block_bytes, total;
	int64_t n_pages;
	uint8_t *engine;             /* device */
	size_t engine_bytes;
	void *base[MAX_LAYERS];      /* engine layer bases */
	int64_t idx[N_BLOCKS];       /* pages */
	uint8_t *pool;               /* registered memfd mapping */
	size_t pool_bytes;
	void *pool_blk[N_BLOCKS];    /* host addresses */
	void *pool_dev[N_BLOCKS];    /* device addresses */
	uint8_t *dblk;               /* device blocks */
	void *dblk_ptr[N_BLOCKS];
	uint8_t *flat;               /* device buffer for the memcpy limits */
	void **d_base;               /* kernel-readable arrays */
	int64_t *d_idx;
	void **d_pool;
	void **d_dblk;
	uint32_t align_pool, align_dev;
	cudaStream_t s, s2;
	int batch_ok;
};

static void add_row(const struct bench *b, const char *what, const char *path,
		    double gbs, double limit, int rule)
{
	struct row *r;

	if (n_rows == MAX_ROWS)
		return;
	r = &rows[n_rows++];
	snprintf(r->layout, sizeof(r->layout), "%s", b->sh->name);
	snprintf(r->what, sizeof(r->what), "%s", what);
	snprintf(r->path, sizeof(r->path), "%s", path);
	r->gbs = gbs;
	r->ratio = limit > 0 ? gbs / limit : 0;
	r->rule = rule;
	printf("%-12s %-10s %-14s %8.2f GB/s  %5.2fx of %s%s\n", r->layout,
	       r->what, r->path, gbs, r->ratio,
	       strcmp(what, "d2d") == 0 ? "cudaMemcpy D2D"
					: "cudaMemcpyAsync pinned",
	       rule ? "  (rule)" : "");
}

static void setup_layout(struct bench *b)
{
	const struct shape *sh = b->sh;
	int64_t hb = sh->head_bytes, H = sh->heads, bs = sh->page_tokens;
	int64_t np = b->n_pages, layer_bytes, layer_step;

	memset(&b->lay, 0, sizeof(b->lay));
	b->lay.n_layers = sh->n_layers;
	b->lay.planes = sh->planes;
	b->lay.heads = sh->heads;
	b->lay.head_bytes = sh->head_bytes;
	b->lay.page_tokens = sh->page_tokens;
	b->lay.index_kind = KVT_INDEX_PAGE;
	b->lay.layer_base = b->base;
	layer_bytes = np * sh->planes * bs * H * hb;
	layer_step = layer_bytes;
	switch (sh->kind) {
	case K_FA_NHD:
		b->lay.stride_plane = np * bs * H * hb;
		b->lay.stride_page = bs * H * hb;
		b->lay.stride_token = H * hb;
		b->lay.stride_head = hb;
		break;
	case K_FA_HND:
		b->lay.stride_plane = np * H * bs * hb;
		b->lay.stride_page = H * bs * hb;
		b->lay.stride_token = hb;
		b->lay.stride_head = bs * hb;
		break;
	case K_FLASHINFER:
		b->lay.stride_page = 2 * bs * H * hb;
		b->lay.stride_plane = bs * H * hb;
		b->lay.stride_token = H * hb;
		b->lay.stride_head = hb;
		break;
	case K_MLA:
		b->lay.stride_page = bs * hb;
		b->lay.stride_token = hb;
		break;
	case K_CROSS:
		b->lay.stride_page = (int64_t)sh->n_layers * 2 * bs * H * hb;
		b->lay.stride_plane = bs * H * hb;
		b->lay.stride_token = H * hb;
		b->lay.stride_head = hb;
		layer_step = 2 * bs * H * hb;
		break;
	}
	b->engine_bytes = (size_t)layer_bytes * sh->n_layers;
	CUDA_OK(cudaMalloc((void **)&b->engine, b->engine_bytes));
	CUDA_OK(cudaMemset(b->engine, 0x3c, b->engine_bytes));
	for (uint32_t l = 0; l < sh->n_layers; l++)
		b->base[l] = b->engine + l * layer_step;
}

/* The pool as a client maps it: a shared memfd, touched once, pinned in
 * chunks no larger than a pool buffer. */
static void setup_pool(struct bench *b)
{
	int fd = memfd_create("kvtier-bench-pool", MFD_CLOEXEC);
	uint8_t *dev;

	b->pool_bytes = ((size_t)b->total + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
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
	for (size_t off = 0; off < b->pool_bytes; off += REG_CHUNK) {
		size_t len = b->pool_bytes - off < REG_CHUNK ? b->pool_bytes - off
							     : REG_CHUNK;

		CUDA_OK(cudaHostRegister(b->pool + off, len,
					 cudaHostRegisterPortable |
						 cudaHostRegisterMapped));
	}
	for (int i = 0; i < N_BLOCKS; i++) {
		uint8_t *h = b->pool + (size_t)i * b->block_bytes;
		size_t chunk = (size_t)(h - b->pool) / REG_CHUNK * REG_CHUNK;

		CUDA_OK(cudaHostGetDevicePointer((void **)&dev,
						 b->pool + chunk, 0));
		b->pool_blk[i] = h;
		b->pool_dev[i] = dev + ((h - b->pool) - chunk);
	}
}

static void bench_init(struct bench *b, const struct shape *sh)
{
	uint8_t used[4 * N_BLOCKS] = {0};

	memset(b, 0, sizeof(*b));
	b->sh = sh;
	b->n_pages = 4 * N_BLOCKS;
	setup_layout(b);
	if (kvt_geom_from_layout(&b->lay, sh->page_tokens, &b->g) < 0) {
		fprintf(stderr, "%s: descriptor refused\n", sh->name);
		exit(1);
	}
	b->block_bytes = (uint64_t)kvt_geom_block_bytes(&b->g);
	b->total = b->block_bytes * N_BLOCKS;
	srand(42);
	for (int i = 0; i < N_BLOCKS; i++) {
		int64_t p;

		do
			p = rand() % b->n_pages;
		while (used[p]);
		used[p] = 1;
		b->idx[i] = p;
	}
	setup_pool(b);
	CUDA_OK(cudaMalloc((void **)&b->dblk, b->total));
	CUDA_OK(cudaMalloc((void **)&b->flat, b->total));
	for (int i = 0; i < N_BLOCKS; i++)
		b->dblk_ptr[i] = b->dblk + (size_t)i * b->block_bytes;

	CUDA_OK(cudaMalloc((void **)&b->d_base, sh->n_layers * sizeof(void *)));
	CUDA_OK(cudaMalloc((void **)&b->d_idx, sizeof(b->idx)));
	CUDA_OK(cudaMalloc((void **)&b->d_pool, sizeof(b->pool_dev)));
	CUDA_OK(cudaMalloc((void **)&b->d_dblk, sizeof(b->dblk_ptr)));
	CUDA_OK(cudaMemcpy(b->d_base, b->base, sh->n_layers * sizeof(void *),
			   cudaMemcpyHostToDevice));
	CUDA_OK(cudaMemcpy(b->d_idx, b->idx, sizeof(b->idx),
			   cudaMemcpyHostToDevice));
	CUDA_OK(cudaMemcpy(b->d_pool, b->pool_dev, sizeof(b->pool_dev),
			   cudaMemcpyHostToDevice));
	CUDA_OK(cudaMemcpy(b->d_dblk, b->dblk_ptr, sizeof(b->dblk_ptr),
			   cudaMemcpyHostToDevice));
	b->align_pool = kvt_ptr_align((const void *const *)b->pool_dev,
				      N_BLOCKS);
	b->align_dev = kvt_ptr_align((const void *const *)b->dblk_ptr,
				     N_BLOCKS);
	{
		uint32_t a = kvt_ptr_align((const void *const *)b->base,
					   sh->n_layers);

		b->align_pool = a < b->align_pool ? a : b->align_pool;
		b->align_dev = a < b->align_dev ? a : b->align_dev;
	}
	CUDA_OK(cudaStreamCreateWithFlags(&b->s, cudaStreamNonBlocking));
	CUDA_OK(cudaStreamCreateWithFlags(&b->s2, cudaStreamNonBlocking));
	b->batch_ok = kvt_cuda_batch_ok(b->s);
	/* The set-up ran on the legacy stream; none of it may overlap a
	 * measurement on the non-blocking ones. */
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
	cudaFree(b->dblk);
	cudaFree(b->flat);
	cudaFree(b->d_base);
	cudaFree(b->d_idx);
	cudaFree(b->d_pool);
	cudaFree(b->d_dblk);
}

enum op {
	OP_GATHER,       /* kernel */
	OP_SCATTER,
	OP_GATHER_BATCH, /* cudaMemcpyBatchAsync */
	OP_SCATTER_BATCH,
	OP_D2H,          /* the limits */
	OP_H2D,
	OP_D2D,
};

/* Queues one op over layers [l0, l0 + nl) on stream s; dev: blocks in
 * device memory instead of the pool. */
static void queue_op(struct bench *b, enum op op, int dev, int64_t l0,
		     int64_t nl, cudaStream_t s)
{
	void **d_blk = dev ? b->d_dblk : b->d_pool;
	void *const *h_blk = dev ? b->dblk_ptr : b->pool_blk;
	uint32_t align = dev ? b->align_dev : b->align_pool;
	int r = 0;

	switch (op) {
	case OP_GATHER:
		r = kvt_cuda_gather(&b->g, l0, nl, b->d_base, b->d_idx, d_blk,
				    N_BLOCKS, align, s);
		break;
	case OP_SCATTER:
		r = kvt_cuda_scatter(&b->g, l0, nl, b->d_base, b->d_idx, d_blk,
				     N_BLOCKS, align, s);
		break;
	case OP_GATHER_BATCH:
		r = kvt_cuda_gather_batch(&b->g, l0, nl, b->base, b->idx, h_blk,
					  N_BLOCKS, s);
		break;
	case OP_SCATTER_BATCH:
		r = kvt_cuda_scatter_batch(&b->g, l0, nl, b->base, b->idx,
					   h_blk, N_BLOCKS, s);
		break;
	case OP_D2H:
		CUDA_OK(cudaMemcpyAsync(b->pool, b->flat, b->total * nl /
						  b->sh->n_layers,
					cudaMemcpyDeviceToHost, s));
		break;
	case OP_H2D:
		CUDA_OK(cudaMemcpyAsync(b->flat, b->pool, b->total * nl /
						  b->sh->n_layers,
					cudaMemcpyHostToDevice, s));
		break;
	case OP_D2D:
		CUDA_OK(cudaMemcpyAsync(b->flat, b->dblk, b->total * nl /
						  b->sh->n_layers,
					cudaMemcpyDeviceToDevice, s));
		break;
	}
	if (r < 0) {
		fprintf(stderr, "%s: op %d: %s\n", b->sh->name, (int)op,
			strerror(-r));
		exit(1);
	}
}

/* Milliseconds of one op over all layers: the best of REPS after a warm
 * up, so that a stray delay does not count. */
static double time_op(struct bench *b, enum op op, int dev)
{
	cudaEvent_t e0, e1;
	double best = 1e30;

	CUDA_OK(cudaEventCreate(&e0));
	CUDA_OK(cudaEventCreate(&e1));
	queue_op(b, op, dev, 0, b->sh->n_layers, b->s);
	for (int i = 0; i < REPS; i++) {
		float ms;

		CUDA_OK(cudaEventRecord(e0, b->s));
		queue_op(b, op, dev, 0, b->sh->n_layers, b->s);
		CUDA_OK(cudaEventRecord(e1, b->s));
		CUDA_OK(cudaEventSynchronize(e1));
		CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
		best = ms < best ? ms : best;
	}
	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	return best;
}

static double gbs(const struct bench *b, double ms)
{
	return (double)b->total / (ms * 1e6);
}

static void bench_bandwidth(struct bench *b)
{
	int rule_batch = kvt_copy_path(&b->g, 0, b->sh->n_layers, b->base,
				       b->batch_ok) == KVT_PATH_BATCH;
	double d2h = gbs(b, time_op(b, OP_D2H, 0));
	double h2d = gbs(b, time_op(b, OP_H2D, 0));
	double d2d = gbs(b, time_op(b, OP_D2D, 1));

	printf("%-12s block %.2f MiB, run %lld bytes; limits: D2H %.2f, H2D %.2f, D2D %.2f GB/s\n",
	       b->sh->name, (double)b->block_bytes / (1 << 20),
	       (long long)kvt_copy_run_bytes(&b->g, 0, b->sh->n_layers,
					     b->base),
	       d2h, h2d, d2d);
	add_row(b, "offload", "kernel", gbs(b, time_op(b, OP_GATHER, 0)), d2h,
		!rule_batch);
	add_row(b, "prefetch", "kernel", gbs(b, time_op(b, OP_SCATTER, 0)),
		h2d, !rule_batch);
	if (b->batch_ok) {
		add_row(b, "offload", "batch memcpy",
			gbs(b, time_op(b, OP_GATHER_BATCH, 0)), d2h,
			rule_batch);
		add_row(b, "prefetch", "batch memcpy",
			gbs(b, time_op(b, OP_SCATTER_BATCH, 0)), h2d,
			rule_batch);
	}
	add_row(b, "d2d", "kernel gather", gbs(b, time_op(b, OP_GATHER, 1)),
		d2d, 0);
	add_row(b, "d2d", "kernel scatter",
		gbs(b, time_op(b, OP_SCATTER, 1)), d2d, 0);
}

/* ---- layer-wise overlap ----------------------------------------------- */

__device__ __forceinline__ uint64_t global_ns(void)
{
	uint64_t t;

	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/* Stands in for a layer's attention and MLP: busy for a fixed time
 * whatever else runs, one small CTA per SM so that the copy kernel can
 * still be resident next to it. */
__global__ void compute_layer(uint64_t ns)
{
	uint64_t t0 = global_ns();

	while (global_ns() - t0 < ns)
		;
}

static int n_sms;

static void queue_compute(uint64_t ns, cudaStream_t s)
{
	compute_layer<<<n_sms, 64, 0, s>>>(ns);
	CUDA_OK(cudaGetLastError());
}

static void overlap_run(struct bench *b, int batch, const char *path)
{
	uint32_t nl = b->sh->n_layers;
	enum op op = batch ? OP_SCATTER_BATCH : OP_SCATTER;
	cudaEvent_t e0, e1, start, ev[MAX_LAYERS];
	float xfer_ms, comp_ms, serial_ms, overlap_ms;
	uint64_t comp_ns;
	struct olap *o;

	CUDA_OK(cudaEventCreate(&e0));
	CUDA_OK(cudaEventCreate(&e1));
	CUDA_OK(cudaEventCreateWithFlags(&start, cudaEventDisableTiming));
	for (uint32_t l = 0; l < nl; l++)
		CUDA_OK(cudaEventCreateWithFlags(&ev[l],
						 cudaEventDisableTiming));

	/* Calibrate: the per-layer transfer alone. */
	for (uint32_t l = 0; l < nl; l++)
		queue_op(b, op, 0, l, 1, b->s);
	CUDA_OK(cudaEventRecord(e0, b->s));
	for (uint32_t l = 0; l < nl; l++)
		queue_op(b, op, 0, l, 1, b->s);
	CUDA_OK(cudaEventRecord(e1, b->s));
	CUDA_OK(cudaEventSynchronize(e1));
	CUDA_OK(cudaEventElapsedTime(&xfer_ms, e0, e1));
	xfer_ms /= nl;
	comp_ns = (uint64_t)(xfer_ms * 1.5 * 1e6);

	CUDA_OK(cudaEventRecord(e0, b->s));
	for (uint32_t l = 0; l < nl; l++)
		queue_compute(comp_ns, b->s);
	CUDA_OK(cudaEventRecord(e1, b->s));
	CUDA_OK(cudaEventSynchronize(e1));
	CUDA_OK(cudaEventElapsedTime(&comp_ms, e0, e1));
	comp_ms /= nl;

	/* Without prefetch: each layer's copy, then its compute.  A gate
	 * first holds the stream until everything is queued, so the CPU's
	 * queueing is not what is measured. */
	queue_compute(2000000, b->s);
	CUDA_OK(cudaEventRecord(e0, b->s));
	for (uint32_t l = 0; l < nl; l++) {
		queue_op(b, op, 0, l, 1, b->s);
		queue_compute(comp_ns, b->s);
	}
	CUDA_OK(cudaEventRecord(e1, b->s));
	CUDA_OK(cudaEventSynchronize(e1));
	CUDA_OK(cudaEventElapsedTime(&serial_ms, e0, e1));

	/* With prefetch: copies on the load stream, one event per layer,
	 * the compute stream waits for each layer on the GPU. */
	queue_compute(2000000, b->s);
	CUDA_OK(cudaEventRecord(e0, b->s));
	CUDA_OK(cudaEventRecord(start, b->s));
	CUDA_OK(cudaStreamWaitEvent(b->s2, start, 0));
	for (uint32_t l = 0; l < nl; l++) {
		queue_op(b, op, 0, l, 1, b->s2);
		CUDA_OK(cudaEventRecord(ev[l], b->s2));
	}
	for (uint32_t l = 0; l < nl; l++) {
		CUDA_OK(cudaStreamWaitEvent(b->s, ev[l], 0));
		queue_compute(comp_ns, b->s);
	}
	CUDA_OK(cudaEventRecord(e1, b->s));
	CUDA_OK(cudaEventSynchronize(e1));
	CUDA_OK(cudaEventElapsedTime(&overlap_ms, e0, e1));

	if (n_olaps < (int)(sizeof(olaps) / sizeof(olaps[0]))) {
		o = &olaps[n_olaps++];
		snprintf(o->layout, sizeof(o->layout), "%s", b->sh->name);
		snprintf(o->path, sizeof(o->path), "%s", path);
		o->xfer_ms = xfer_ms;
		o->comp_ms = comp_ms;
		o->serial_ms = serial_ms;
		o->overlap_ms = overlap_ms;
		o->hidden = (serial_ms - overlap_ms) / (xfer_ms * nl);
		printf("%-12s overlap %-6s: transfer %.3f ms/layer, compute %.3f ms/layer, "
		       "serial %.2f ms, prefetched %.2f ms, hidden %.0f%% of the transfer "
		       "(at most %.0f%%: the first layer cannot overlap)\n",
		       o->layout, path, xfer_ms, comp_ms, serial_ms,
		       overlap_ms, 100 * o->hidden, 100.0 * (nl - 1) / nl);
	}

	cudaEventDestroy(e0);
	cudaEventDestroy(e1);
	cudaEventDestroy(start);
	for (uint32_t l = 0; l < nl; l++)
		cudaEventDestroy(ev[l]);
}

int main(void)
{
	struct cudaDeviceProp prop;
	cudaError_t e;
	int n_dev = 0, driver = 0;

	e = cudaGetDeviceCount(&n_dev);
	if (e != cudaSuccess || n_dev == 0) {
		printf("no CUDA device: %s\n",
		       cudaGetErrorString(e != cudaSuccess ? e
							   : cudaErrorNoDevice));
		return KVT_TEST_SKIP;
	}
	CUDA_OK(cudaSetDevice(0));
	CUDA_OK(cudaGetDeviceProperties(&prop, 0));
	CUDA_OK(cudaDriverGetVersion(&driver));
	n_sms = prop.multiProcessorCount;
	printf("device: %s, %d SMs; runtime %d, driver %d; %d blocks per copy\n",
	       prop.name, n_sms, CUDART_VERSION, driver, N_BLOCKS);

	for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
		struct bench b;

		bench_init(&b, &shapes[i]);
		if (i == 0)
			printf("cudaMemcpyBatchAsync: %s; the rule batches runs of %d bytes or more\n",
			       b.batch_ok ? "available" : "unavailable",
			       KVT_BATCH_MIN_RUN);
		bench_bandwidth(&b);
		/* Overlap: the NHD cache (kernel under the rule) and
		 * FlashInfer (whole 64 KiB layers per block) both ways. */
		if (shapes[i].kind == K_FA_NHD)
			overlap_run(&b, 0, "kernel");
		if (shapes[i].kind == K_FLASHINFER) {
			overlap_run(&b, 0, "kernel");
			if (b.batch_ok)
				overlap_run(&b, 1, "batch");
		}
		bench_free(&b);
	}

	printf("\n%-12s %-10s %-14s %10s %8s\n", "layout", "copy", "path",
	       "GB/s", "ratio");
	for (int i = 0; i < n_rows; i++)
		printf("%-12s %-10s %-14s %10.2f %7.2fx%s\n", rows[i].layout,
		       rows[i].what, rows[i].path, rows[i].gbs, rows[i].ratio,
		       rows[i].rule ? "  <- rule" : "");
	printf("\n%-12s %-7s %9s %9s %9s %9s %7s\n", "overlap", "path",
	       "xfer/lyr", "comp/lyr", "serial", "prefetch", "hidden");
	for (int i = 0; i < n_olaps; i++)
		printf("%-12s %-7s %7.3fms %7.3fms %7.2fms %7.2fms %6.0f%%\n",
		       olaps[i].layout, olaps[i].path, olaps[i].xfer_ms,
		       olaps[i].comp_ms, olaps[i].serial_ms,
		       olaps[i].overlap_ms, 100 * olaps[i].hidden);
	printf("ratios: offload and prefetch against cudaMemcpyAsync of pinned memory, "
	       "d2d against cudaMemcpy D2D, same bytes, same run\n");
	return 0;
}
