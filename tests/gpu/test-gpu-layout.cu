/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GPU copy path against the CPU path, which tests/unit/test-layout.c
 * checks against an independent reference.
 *
 * Every engine layout (vLLM FlashAttention NHD and HND, FlashInfer, MLA,
 * cross-layer, dense [B, H, S, D] by token slot, and two with padded
 * rows and heads) × element size (1, 2, 4
 * bytes) × head dim (64, 128, 576) × block size (1, 16, 32) × pointer
 * offset (0, one element, 8 bytes: every access width from 16 down to 1),
 * by page and by slot, on fresh random data.  Outputs are poisoned with
 * 0xff first, which is a NaN in every float format, and compared with
 * memcmp, so a byte left unwritten never passes as a value.
 *
 * Two phases:
 *   1. on the host, without a GPU: the kernel's walk over segments
 *      (kvt_seg_split in both index types, kvt_seg_locate) and the batched
 *      path's run list, executed with memcpy, must match the CPU path, and
 *      every access must be aligned to the width the kernel would use;
 *   2. on the GPU: the kernel (all layers, and layer by layer) and
 *      cudaMemcpyBatchAsync (where available), with blocks in device
 *      memory and in pinned host memory.
 * Plus a case of 70,000 blocks (past the grid's 65,535 along y), and
 * K and V in allocations of their own (a base per plane).  Blocks are in
 * device memory, cudaHostAlloc memory, or a shared memfd registered with
 * cudaHostRegister as the client registers kvtierd's pool.  The kernel
 * runs with its whole grid and within a budget of 3 CTAs; phase 1 walks
 * both grids and checks every vector is moved exactly once.
 *
 * KVT_GPU_SWEEP=reduced runs a subset, without the 70,000 blocks (for
 * compute-sanitizer).  Without a device the test reports phase 1 and
 * exits 77 (1 when the driver is too old or CUDA fails otherwise:
 * tests/gpu/gpu-probe.h).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "layout-case.h"
#include "gpu-probe.h"

#define CUDA_OK(call)                                                     \
	do {                                                              \
		cudaError_t e_ = (call);                                  \
		if (e_ != cudaSuccess) {                                  \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__,      \
				__LINE__, #call, cudaGetErrorString(e_)); \
			exit(1);                                          \
		}                                                         \
	} while (0)

/* ---- phase 2: the GPU -------------------------------------------------- */

struct gpu {
	cudaStream_t stream;
	int batch_ok;
};

/* Where the GPU side's blocks are: device memory, cudaHostAlloc, or a
 * shared memfd mapping registered with cudaHostRegister, as kvtierd's
 * pool is in a client. */
enum mem { MEM_DEVICE, MEM_HOSTALLOC, MEM_MEMFD, MEM_COUNT };

static const char *const mem_name[MEM_COUNT] = {
	"device", "cudaHostAlloc", "registered memfd",
};

struct dblocks {
	int pinned;     /* enum mem */
	size_t total;
	uint8_t *alloc;      /* one allocation for all blocks */
	uint8_t **dev;       /* [n_blocks] device addresses */
	uint8_t **host;      /* [n_blocks] as cudaMemcpy sees them */
	void **d_dev;        /* [n_blocks] dev, in device memory */
};

static void dblocks_init(const struct tcase *tc, int pinned,
			 struct dblocks *d)
{
	size_t stride = (size_t)tc->block_bytes + SLACK;
	size_t total = stride * (size_t)tc->n_blocks;
	uint8_t *dev_base;

	d->pinned = pinned;
	d->total = total;
	if (pinned == MEM_HOSTALLOC) {
		CUDA_OK(cudaHostAlloc((void **)&d->alloc, total,
				      cudaHostAllocMapped |
					      cudaHostAllocPortable));
		CUDA_OK(cudaHostGetDevicePointer((void **)&dev_base, d->alloc,
						 0));
	} else if (pinned == MEM_MEMFD) {
		int fd = memfd_create("kvtier-test-pool", MFD_CLOEXEC);

		if (fd < 0 || ftruncate(fd, (off_t)total) < 0) {
			perror("memfd");
			exit(1);
		}
		d->alloc = (uint8_t *)mmap(NULL, total, PROT_READ | PROT_WRITE,
					   MAP_SHARED, fd, 0);
		close(fd);
		if (d->alloc == MAP_FAILED) {
			perror("mmap");
			exit(1);
		}
		memset(d->alloc, 0, total);
		CUDA_OK(cudaHostRegister(d->alloc, total,
					 cudaHostRegisterPortable |
						 cudaHostRegisterMapped));
		CUDA_OK(cudaHostGetDevicePointer((void **)&dev_base, d->alloc,
						 0));
	} else {
		CUDA_OK(cudaMalloc((void **)&d->alloc, total));
		dev_base = d->alloc;
	}
	d->dev = (uint8_t **)xmalloc(tc->n_blocks * sizeof(uint8_t *));
	d->host = (uint8_t **)xmalloc(tc->n_blocks * sizeof(uint8_t *));
	for (int64_t b = 0; b < tc->n_blocks; b++) {
		d->dev[b] = dev_base + b * stride + tc->shift;
		d->host[b] = d->alloc + b * stride + tc->shift;
	}
	CUDA_OK(cudaMalloc((void **)&d->d_dev,
			   tc->n_blocks * sizeof(void *)));
	CUDA_OK(cudaMemcpy(d->d_dev, d->dev, tc->n_blocks * sizeof(void *),
			   cudaMemcpyHostToDevice));
}

static void dblocks_free(struct dblocks *d)
{
	if (d->pinned == MEM_HOSTALLOC) {
		cudaFreeHost(d->alloc);
	} else if (d->pinned == MEM_MEMFD) {
		CUDA_OK(cudaHostUnregister(d->alloc));
		munmap(d->alloc, d->total);
	} else {
		cudaFree(d->alloc);
	}
	cudaFree(d->d_dev);
	free(d->dev);
	free(d->host);
}

/* The blocks' memory goes through one host image, in one copy each way
 * (a case has up to MANY_BLOCKS blocks). */
static void dblocks_fill(const struct tcase *tc, struct dblocks *d,
			 uint8_t *const *src, int poison)
{
	uint8_t *img = (uint8_t *)xmalloc(d->total);

	memset(img, POISON, d->total);
	for (int64_t b = 0; b < tc->n_blocks && !poison; b++)
		memcpy(img + (d->host[b] - d->alloc), src[b], tc->block_bytes);
	CUDA_OK(cudaMemcpy(d->alloc, img, d->total, cudaMemcpyDefault));
	free(img);
}

static void dblocks_check(const struct tcase *tc, struct dblocks *d,
			  uint8_t *const *want, const char *what,
			  const char *step)
{
	uint8_t *img = (uint8_t *)xmalloc(d->total);

	CUDA_OK(cudaMemcpy(img, d->alloc, d->total, cudaMemcpyDefault));
	for (int64_t b = 0; b < tc->n_blocks; b++) {
		char where[32];

		snprintf(where, sizeof(where), "block %" PRId64, b);
		if (report_diff(what, step, where, img + (d->host[b] - d->alloc),
				want[b], tc->block_bytes))
			break;
	}
	free(img);
}

/* The engine cache on the device and its kernel-readable arrays. */
struct dengine {
	struct engine e;
	void **d_base;  /* [n_bases] in device memory */
	int64_t *d_idx; /* indices in device memory */
};

static void dengine_init(const struct tcase *tc, const int64_t *idx,
			 int64_t n_idx, struct dengine *d)
{
	for (int i = 0; i < tc->n_bufs; i++)
		CUDA_OK(cudaMalloc((void **)&d->e.alloc[i],
				   tc->buf_bytes + SLACK));
	engine_bases(tc, &d->e);
	CUDA_OK(cudaMalloc((void **)&d->d_base, MAX_BUFS * sizeof(void *)));
	CUDA_OK(cudaMemcpy(d->d_base, d->e.base, MAX_BUFS * sizeof(void *),
			   cudaMemcpyHostToDevice));
	CUDA_OK(cudaMalloc((void **)&d->d_idx, n_idx * sizeof(int64_t)));
	CUDA_OK(cudaMemcpy(d->d_idx, idx, n_idx * sizeof(int64_t),
			   cudaMemcpyHostToDevice));
}

static void dengine_free(const struct tcase *tc, struct dengine *d)
{
	for (int i = 0; i < tc->n_bufs; i++)
		cudaFree(d->e.alloc[i]);
	cudaFree(d->d_base);
	cudaFree(d->d_idx);
}

static void dengine_load(const struct tcase *tc, struct dengine *d,
			 const struct engine *src, int poison)
{
	for (int i = 0; i < tc->n_bufs; i++) {
		if (poison)
			CUDA_OK(cudaMemset(engine_buf(tc, &d->e, i), POISON,
					   tc->buf_bytes));
		else
			CUDA_OK(cudaMemcpy(engine_buf(tc, &d->e, i),
					   engine_buf(tc, src, i),
					   tc->buf_bytes,
					   cudaMemcpyHostToDevice));
	}
}

static void dengine_check(const struct tcase *tc, struct dengine *d,
			  const struct engine *want, uint8_t *tmp,
			  const char *what, const char *step)
{
	for (int i = 0; i < tc->n_bufs; i++) {
		char where[32];

		CUDA_OK(cudaMemcpy(tmp, engine_buf(tc, &d->e, i),
				   tc->buf_bytes, cudaMemcpyDeviceToHost));
		snprintf(where, sizeof(where), "engine buffer %d", i);
		if (report_diff(what, step, where, tmp,
				engine_buf(tc, want, i), tc->buf_bytes))
			return;
	}
}

/* Which way one step copies: the kernel over all layers, the kernel layer
 * by layer, or the batched memcpy. */
enum how {
	HOW_KERNEL,
	HOW_KERNEL_LAYERS,
	HOW_BATCH,
	HOW_COUNT,
};

static const char *const how_name[HOW_COUNT] = {
	"kernel", "kernel per layer, 3 CTAs", "batch memcpy",
};

static int gpu_copy(const struct tcase *tc, const struct kvt_geom *g,
		    const struct gpu *gp, enum how how, int dir,
		    struct dengine *de, const int64_t *idx, struct dblocks *db)
{
	uint32_t align = kvt_ptr_align((const void *const *)de->e.base,
				       n_bases(tc));
	int r = 0;

	if (kvt_ptr_align((const void *const *)db->dev, tc->n_blocks) < align)
		align = kvt_ptr_align((const void *const *)db->dev,
				      tc->n_blocks);
	/* The fills ran on the legacy stream, which a non-blocking stream
	 * does not wait for; cudaMemset and a pageable cudaMemcpy may still
	 * be in flight when they return. */
	CUDA_OK(cudaDeviceSynchronize());
	switch (how) {
	case HOW_KERNEL:
		r = dir == KVT_COPY_GATHER
			    ? kvt_cuda_gather(g, 0, N_LAYERS, de->d_base,
					      de->d_idx, db->d_dev,
					      tc->n_blocks, align, 0,
					      gp->stream)
			    : kvt_cuda_scatter(g, 0, N_LAYERS, de->d_base,
					       de->d_idx, db->d_dev,
					       tc->n_blocks, align, 0,
					       gp->stream);
		break;
	case HOW_KERNEL_LAYERS:
		for (int64_t l = 0; l < N_LAYERS && r == 0; l++)
			r = dir == KVT_COPY_GATHER
				    ? kvt_cuda_gather(g, l, 1, de->d_base,
						      de->d_idx, db->d_dev,
						      tc->n_blocks, align,
						      SMALL_BUDGET, gp->stream)
				    : kvt_cuda_scatter(g, l, 1, de->d_base,
						       de->d_idx, db->d_dev,
						       tc->n_blocks, align,
						       SMALL_BUDGET,
						       gp->stream);
		break;
	case HOW_BATCH:
		r = dir == KVT_COPY_GATHER
			    ? kvt_cuda_gather_batch(g, 0, N_LAYERS, de->e.base,
						    idx, (void *const *)db->host,
						    tc->n_blocks, gp->stream)
			    : kvt_cuda_scatter_batch(g, 0, N_LAYERS,
						     de->e.base, idx,
						     (void *const *)db->host,
						     tc->n_blocks, gp->stream);
		break;
	default:
		abort();
	}
	if (r == 0)
		CUDA_OK(cudaStreamSynchronize(gp->stream));
	return r;
}

/* ---- one case ---------------------------------------------------------- */

/* Phase 2 of a case: every copy path into and out of every memory, on the
 * GPU, against the CPU path's results in d. */
static void gpu_case(struct tcase *tc, struct case_data *d,
		     const struct gpu *gp)
{
	struct engine &orig = d->orig, &want_eng = d->want_eng;
	uint8_t **want_blk = d->want_blk, **src_blk = d->src_blk, *tmp = d->tmp;
	const struct kvt_geom &g = d->g;
	const int64_t *idx = d->idx;
	int64_t n_idx = d->n_idx;
	const char *what = d->what;

	{
		struct dengine de = {};

		dengine_init(tc, idx, n_idx, &de);
		for (int pinned = 0; pinned < MEM_COUNT; pinned++) {
			struct dblocks db;

			dblocks_init(tc, pinned, &db);
			for (int h = 0; h < HOW_COUNT; h++) {
				char step[96];
				int r;

				if (h == HOW_BATCH &&
				    (!gp->batch_ok ||
				     tc->index_kind != KVT_INDEX_PAGE))
					continue;
				snprintf(step, sizeof(step), "%s gather to %s",
					 how_name[h], mem_name[pinned]);
				dengine_load(tc, &de, &orig, 0);
				dblocks_fill(tc, &db, NULL, 1);
				r = gpu_copy(tc, &g, gp, (enum how)h,
					     KVT_COPY_GATHER, &de, idx, &db);
				if (r < 0) {
					fprintf(stderr, "%s: %s: %d\n", what,
						step, r);
					failures++;
				} else {
					dblocks_check(tc, &db, want_blk, what,
						      step);
				}

				snprintf(step, sizeof(step),
					 "%s scatter from %s", how_name[h],
					 mem_name[pinned]);
				dengine_load(tc, &de, NULL, 1);
				dblocks_fill(tc, &db, src_blk, 0);
				r = gpu_copy(tc, &g, gp, (enum how)h,
					     KVT_COPY_SCATTER, &de, idx, &db);
				if (r < 0) {
					fprintf(stderr, "%s: %s: %d\n", what,
						step, r);
					failures++;
				} else {
					dengine_check(tc, &de, &want_eng, tmp,
						      what, step);
				}
			}
			dblocks_free(&db);
		}
		dengine_free(tc, &de);
	}
}

/* The expected results of a case, from the CPU path; 0 or -1. */
static int cpu_case(struct tcase *tc, struct case_data *d)
{
	kvt_layout lay;
	int64_t layer_off;

	case_layout(tc, d->orig.base, &lay, &layer_off);
	if (kvt_layout_gather(&lay, tc->bt, d->idx, (size_t)tc->n_blocks,
			      (void *const *)d->want_blk) < 0) {
		fprintf(stderr, "%s: CPU gather refused the case\n", d->what);
		failures++;
		return -1;
	}
	for (int i = 0; i < tc->n_bufs; i++)
		memset(engine_buf(tc, &d->want_eng, i), POISON, tc->buf_bytes);
	lay.layer_base = d->want_eng.base;
	if (kvt_layout_scatter(&lay, tc->bt, d->idx, (size_t)tc->n_blocks,
			       (const void *const *)d->src_blk) < 0) {
		fprintf(stderr, "%s: CPU scatter refused the case\n", d->what);
		failures++;
		return -1;
	}
	return 0;
}

static void run_case(struct tcase *tc, const struct gpu *gp)
{
	struct case_data d = {};
	kvt_layout lay;
	int64_t layer_off;

	describe(tc, d.what, sizeof(d.what));
	d.n_idx = tc->index_kind == KVT_INDEX_PAGE ? tc->n_blocks
						   : tc->n_blocks * tc->bt;
	d.idx = (int64_t *)xmalloc((size_t)d.n_idx * sizeof(int64_t));
	pick_indices(tc, d.idx);
	engine_host(tc, &d.orig);
	engine_host(tc, &d.want_eng);
	engine_host(tc, &d.emu_eng);
	for (int i = 0; i < tc->n_bufs; i++)
		fill_random(engine_buf(tc, &d.orig, i), tc->buf_bytes);

	case_layout(tc, d.orig.base, &lay, &layer_off);
	if (kvt_geom_from_layout(&lay, tc->bt, &d.g) < 0 ||
	    kvt_geom_check_indices(&d.g, d.idx, tc->n_blocks) < 0) {
		fprintf(stderr, "%s: descriptor refused\n", d.what);
		failures++;
		goto out_idx;
	}
	tc->block_bytes = (uint64_t)kvt_geom_block_bytes(&d.g);
	d.want_blk = (uint8_t **)xmalloc(tc->n_blocks * sizeof(uint8_t *));
	d.emu_blk = (uint8_t **)xmalloc(tc->n_blocks * sizeof(uint8_t *));
	d.src_blk = (uint8_t **)xmalloc(tc->n_blocks * sizeof(uint8_t *));
	for (int64_t b = 0; b < tc->n_blocks; b++) {
		d.want_blk[b] = (uint8_t *)xmalloc(tc->block_bytes);
		d.emu_blk[b] = (uint8_t *)xmalloc(tc->block_bytes + SLACK) +
			       tc->shift;
		d.src_blk[b] = (uint8_t *)xmalloc(tc->block_bytes);
		fill_random(d.src_blk[b], tc->block_bytes);
	}
	d.tmp = (uint8_t *)xmalloc(tc->buf_bytes > tc->block_bytes
					   ? tc->buf_bytes
					   : tc->block_bytes);
	if (cpu_case(tc, &d) == 0) {
		emulate_case(tc, &d);
		if (gp)
			gpu_case(tc, &d, gp);
	}
	for (int64_t b = 0; b < tc->n_blocks; b++) {
		free(d.want_blk[b]);
		free(d.emu_blk[b] - tc->shift);
		free(d.src_blk[b]);
	}
	free(d.want_blk);
	free(d.emu_blk);
	free(d.src_blk);
	free(d.tmp);
out_idx:
	engine_host_free(tc, &d.orig);
	engine_host_free(tc, &d.want_eng);
	engine_host_free(tc, &d.emu_eng);
	free(d.idx);
}

/* One point of the sweep; returns 0 when the point does not exist. */
static int sweep_point(enum layout_kind k, int slots, uint32_t elem, uint32_t dim,
		       uint32_t bt, uint32_t shift, const struct gpu *gp)
{
	struct tcase tc = {};

	/* Dense caches are addressed by token slot only. */
	if (k == K_DENSE && !slots)
		return 0;
	tc.kind = k;
	tc.index_kind = slots ? KVT_INDEX_SLOT : KVT_INDEX_PAGE;
	tc.elem = elem;
	tc.dim = dim;
	tc.heads = k == K_MLA ? 1 : 2;
	tc.planes = k == K_MLA ? 1 : 2;
	tc.bt = bt;
	tc.shift = shift;
	tc.n_bufs = layout_kind_buffers(k) == LAYOUT_ONE_BUFFER  ? 1
		    : layout_kind_buffers(k) == LAYOUT_PER_PLANE ? 2 * N_LAYERS
								 : N_LAYERS;
	if (k == K_DENSE) {
		/* Sequences of 40 positions. */
		tc.pt = 40;
		tc.n_blocks = 2;
		tc.np = (uint32_t)((3 * tc.n_blocks * bt + 39) / 40);
		tc.np = tc.np < 2 ? 2 : tc.np;
	} else if (!slots) {
		tc.pt = bt;
		tc.n_blocks = 3;
		tc.np = 6;
	} else {
		/* Room for every block token plus slots left untouched. */
		tc.pt = other_size(bt);
		tc.n_blocks = 2;
		tc.np = (uint32_t)((3 * tc.n_blocks * bt + tc.pt - 1) / tc.pt);
		tc.np = tc.np < 4 ? 4 : tc.np;
	}
	tc.buf_bytes = buf_bytes(&tc);
	run_case(&tc, gp);
	return 1;
}

/* The layouts this test builds, in the order it sweeps them. */
static const enum layout_kind kinds[] = {
	K_FA_NHD, K_FA_HND, K_FLASHINFER, K_MLA, K_CROSS, K_DENSE, K_ROW_PAD,
	K_HEAD_PAD, K_KV_SPLIT, K_VLLM_LBNHC, K_VLLM_LBHNC, K_VLLM_BLNHC,
};
#define N_KINDS ((int)(sizeof(kinds) / sizeof(kinds[0])))

/* KVT_GPU_SWEEP=reduced */
static int reduced;

static int sweep(const struct gpu *gp)
{
	static const uint32_t elems[] = { 1, 2, 4 };
	static const uint32_t dims[] = { 64, 128, 576 };
	static const uint32_t sizes[] = { 1, 16, 32 };
	int n = 0;

	/* kind x (pages, slots) x element x head dim x block size x offset */
	for (int i = 0; i < N_KINDS * 2 * 3 * 3 * 3 * 3; i++) {
		int v = i, sh, s, d, e, slots;
		uint32_t shift;

		sh = v % 3, v /= 3;
		s = v % 3, v /= 3;
		d = v % 3, v /= 3;
		e = v % 3, v /= 3;
		slots = v % 2, v /= 2;
		/* Aligned, one element off, 8 bytes off. */
		shift = sh == 0 ? 0 : sh == 1 ? elems[e] : 8;
		/* The reduced sweep (for compute-sanitizer, which runs each
		 * kernel some hundred times slower): 2-byte elements, heads
		 * of 64 and 576, blocks of 1 and 16 tokens, every kind,
		 * aligned and one element off. */
		if (reduced && (e != 1 || d == 1 || s == 2 || sh == 2))
			continue;
		n += sweep_point(kinds[v], slots, elems[e], dims[d],
				 sizes[s], shift, gp);
	}
	return n;
}

/* More blocks than a grid has CTAs along y (65,535): small MLA-like
 * blocks of one token, by page, in every memory. */
static int many_blocks(const struct gpu *gp)
{
	struct tcase tc = {};

	/* Not under compute-sanitizer: its some million small copies would
	 * take most of the run's time there. */
	if (reduced)
		return 0;
	tc.kind = K_MLA;
	tc.index_kind = KVT_INDEX_PAGE;
	tc.elem = 2;
	tc.dim = 32;
	tc.heads = 1;
	tc.planes = 1;
	tc.pt = 1;
	tc.bt = 1;
	tc.n_blocks = MANY_BLOCKS;
	tc.np = MANY_BLOCKS + 7;
	tc.n_bufs = N_LAYERS;
	tc.buf_bytes = buf_bytes(&tc);
	run_case(&tc, gp);
	return 1;
}

int main(void)
{
	struct gpu g = {};
	int probe, n;

	reduced = getenv("KVT_GPU_SWEEP") &&
		  strcmp(getenv("KVT_GPU_SWEEP"), "reduced") == 0;
	probe = kvt_gpu_probe();
	if (probe != 0) {
		n = sweep(NULL) + many_blocks(NULL);
		printf("host emulation: %d cases, %ld comparisons, %d failures\n",
		       n, n_checks, failures);
		return failures ? 1 : probe;
	}

	CUDA_OK(cudaSetDevice(0));
	/* A stream of our own: the batched path refuses the legacy one. */
	CUDA_OK(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking));
	g.batch_ok = kvt_cuda_batch_ok(g.stream);
	if (!g.batch_ok)
		printf("cudaMemcpyBatchAsync unavailable (runtime %d); "
		       "testing the kernel only\n", CUDART_VERSION);
	n = sweep(&g) + many_blocks(&g);
	CUDA_OK(cudaStreamDestroy(g.stream));
	printf("%d cases, %ld comparisons, %d failures\n", n, n_checks,
	       failures);
	return failures ? 1 : 0;
}
