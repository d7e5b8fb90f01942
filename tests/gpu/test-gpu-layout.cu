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
 * KVT_GPU_SWEEP=reduced runs a subset (for compute-sanitizer).  Without a
 * device the test reports phase 1 and exits 77 (1 when the driver is too
 * old or CUDA fails otherwise: tests/gpu/gpu-probe.h).
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

#include "kvtier.h"
#include "layout_cuda.h"
#include "gpu-probe.h"

#define N_LAYERS 3
/* Engine buffers at most: one per layer and plane (K_KV_SPLIT). */
#define MAX_BUFS (2 * N_LAYERS)
/* CTA budgets the kernel is run and emulated with: unbounded, and so
 * small that every CTA walks many blocks and items. */
#define SMALL_BUDGET 3
/* Blocks of the case past the grid's 65,535 along y. */
#define MANY_BLOCKS 70000
#define POISON 0xff
/* Room for the largest pointer offset. */
#define SLACK 16
/* Padding after each token row and after each head: strides that are not
 * multiples of the head size limit the access width by themselves. */
#define ROW_PAD 4
#define HEAD_PAD 2

enum kind {
	K_FA_NHD,     /* per layer (2, NP, BS, H, D) */
	K_FA_HND,     /* per layer (2, NP, H, BS, D) */
	K_FLASHINFER, /* per layer (NP, 2, BS, H, D) */
	K_MLA,        /* per layer (NP, BS, D_latent) */
	K_CROSS,      /* one buffer (NP, NL, 2, BS, H, D) */
	K_DENSE,      /* per layer K and V, [B, H, S, D] each */
	K_ROW_PAD,    /* per layer (2, NP, BS, H*D + ROW_PAD) */
	K_HEAD_PAD,   /* per layer (2, NP, BS, H, D + HEAD_PAD) */
	K_KV_SPLIT,   /* per layer and plane (NP, BS, H, D): SGLang's
		       * k_buffer / v_buffer, a base per plane */
	K_COUNT,
};

static const char *const kind_name[K_COUNT] = {
	"fa-nhd", "fa-hnd", "flashinfer", "mla", "cross-layer", "dense",
	"row-padded", "head-padded", "kv-split",
};

static int failures;
static long n_checks;

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

static uint64_t rng(void)
{
	/* splitmix64: fixed seed, so a failure reproduces. */
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void fill_random(uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i += 8) {
		uint64_t v = rng();

		memcpy(p + i, &v, n - i < 8 ? n - i : 8);
	}
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p) {
		fprintf(stderr, "out of memory (%zu bytes)\n", n);
		exit(1);
	}
	return p;
}

#define CUDA_OK(call)                                                     \
	do {                                                              \
		cudaError_t e_ = (call);                                  \
		if (e_ != cudaSuccess) {                                  \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__,      \
				__LINE__, #call, cudaGetErrorString(e_)); \
			exit(1);                                          \
		}                                                         \
	} while (0)

/* One case of the sweep. */
struct tcase {
	enum kind kind;
	uint32_t index_kind;
	uint32_t elem;    /* bytes per element */
	uint32_t dim;     /* head dim */
	uint32_t heads;
	uint32_t planes;
	uint32_t pt;      /* engine page tokens (S for dense) */
	uint32_t np;      /* pages (B for dense) */
	uint32_t bt;      /* block tokens */
	uint32_t shift;   /* bytes every pointer is offset by */
	int64_t n_blocks;
	size_t buf_bytes; /* bytes of each engine buffer */
	int n_bufs;       /* 1 for cross-layer, 2 per layer for kv-split,
			   * else one per layer */
	uint64_t block_bytes;
};

static void describe(const struct tcase *tc, char *buf, size_t n)
{
	snprintf(buf, n,
		 "%s %s elem=%u dim=%u heads=%u page_tokens=%u block_tokens=%u shift=%u",
		 kind_name[tc->kind],
		 tc->index_kind == KVT_INDEX_PAGE ? "page" : "slot", tc->elem,
		 tc->dim, tc->heads, tc->pt, tc->bt, tc->shift);
}

/* Strides of the engine layout, and where layer l starts in its buffer. */
static void case_layout(const struct tcase *tc, void *const *base,
			kvt_layout *ret, int64_t *ret_layer_off)
{
	int64_t hb = (int64_t)tc->elem * tc->dim, H = tc->heads;
	int64_t bs = tc->pt, np = tc->np;

	memset(ret, 0, sizeof(*ret));
	ret->n_layers = N_LAYERS;
	ret->planes = tc->planes;
	ret->heads = tc->heads;
	ret->head_bytes = (uint32_t)hb;
	ret->page_tokens = tc->pt;
	ret->index_kind = tc->index_kind;
	ret->layer_base = base;
	ret->n_pages = tc->np;
	*ret_layer_off = 0;

	switch (tc->kind) {
	case K_FA_NHD:
		ret->stride_plane = np * bs * H * hb;
		ret->stride_page = bs * H * hb;
		ret->stride_token = H * hb;
		ret->stride_head = hb;
		break;
	case K_FA_HND:
		ret->stride_plane = np * H * bs * hb;
		ret->stride_page = H * bs * hb;
		ret->stride_token = hb;
		ret->stride_head = bs * hb;
		break;
	case K_FLASHINFER:
		ret->stride_page = 2 * bs * H * hb;
		ret->stride_plane = bs * H * hb;
		ret->stride_token = H * hb;
		ret->stride_head = hb;
		break;
	case K_MLA:
		ret->stride_page = bs * hb;
		ret->stride_token = hb;
		break;
	case K_CROSS:
		ret->stride_page = (int64_t)N_LAYERS * 2 * bs * H * hb;
		ret->stride_plane = bs * H * hb;
		ret->stride_token = H * hb;
		ret->stride_head = hb;
		*ret_layer_off = 2 * bs * H * hb;
		break;
	case K_DENSE:
		ret->stride_plane = np * H * bs * hb;
		ret->stride_page = H * bs * hb;
		ret->stride_token = hb;
		ret->stride_head = bs * hb;
		break;
	case K_ROW_PAD:
		ret->stride_token = H * hb + ROW_PAD;
		ret->stride_page = bs * ret->stride_token;
		ret->stride_plane = np * ret->stride_page;
		ret->stride_head = hb;
		break;
	case K_HEAD_PAD:
		ret->stride_head = hb + HEAD_PAD;
		ret->stride_token = H * ret->stride_head;
		ret->stride_page = bs * ret->stride_token;
		ret->stride_plane = np * ret->stride_page;
		break;
	case K_KV_SPLIT:
		ret->flags = KVT_LAYOUT_PLANE_BASES;
		/* Must be ignored: the planes are apart by their bases. */
		ret->stride_plane = 12345;
		ret->stride_page = bs * H * hb;
		ret->stride_token = H * hb;
		ret->stride_head = hb;
		break;
	default:
		abort();
	}
}

/* An engine cache in one memory: buffers (with slack for the offset) and
 * the layer bases the library sees. */
struct engine {
	uint8_t *alloc[MAX_BUFS];
	void *base[MAX_BUFS];
};

/* Entries of layer_base: one per layer, or per layer and plane. */
static int n_bases(const struct tcase *tc)
{
	return tc->kind == K_KV_SPLIT ? 2 * N_LAYERS : N_LAYERS;
}

static void engine_bases(const struct tcase *tc, struct engine *e)
{
	kvt_layout lay;
	int64_t layer_off;

	case_layout(tc, e->base, &lay, &layer_off);
	for (int l = 0; l < n_bases(tc); l++) {
		if (tc->n_bufs == 1)
			e->base[l] = e->alloc[0] + tc->shift + l * layer_off;
		else
			e->base[l] = e->alloc[l] + tc->shift;
	}
}

static void engine_host(const struct tcase *tc, struct engine *e)
{
	for (int i = 0; i < tc->n_bufs; i++)
		e->alloc[i] = (uint8_t *)xmalloc(tc->buf_bytes + SLACK);
	engine_bases(tc, e);
}

static void engine_host_free(const struct tcase *tc, struct engine *e)
{
	for (int i = 0; i < tc->n_bufs; i++)
		free(e->alloc[i]);
}

/* Buffer i of an engine, at the offset the case uses. */
static uint8_t *engine_buf(const struct tcase *tc, const struct engine *e,
			   int i)
{
	return e->alloc[i] + tc->shift;
}

/* Distinct pages, or distinct slots in runs with jumps and padding. */
static void pick_indices(const struct tcase *tc, int64_t *idx)
{
	int64_t n_slots = (int64_t)tc->np * tc->pt, prev = -2;
	uint8_t *used;

	if (tc->index_kind == KVT_INDEX_PAGE) {
		used = (uint8_t *)calloc(tc->np, 1);
		for (int64_t b = 0; b < tc->n_blocks; b++) {
			int64_t p;

			do
				p = (int64_t)(rng() % tc->np);
			while (used[p]);
			used[p] = 1;
			idx[b] = p;
		}
		free(used);
		return;
	}
	used = (uint8_t *)calloc((size_t)n_slots, 1);
	for (int64_t j = 0; j < tc->n_blocks * tc->bt; j++) {
		uint64_t dice = rng() % 8;
		int64_t s;

		if (dice == 0) {
			idx[j] = -1;
			continue;
		}
		if (dice < 6 && prev + 1 >= 0 && prev + 1 < n_slots &&
		    !used[prev + 1]) {
			s = prev + 1;
		} else {
			do
				s = (int64_t)(rng() % (uint64_t)n_slots);
			while (used[s]);
		}
		used[s] = 1;
		idx[j] = s;
		prev = s;
	}
	free(used);
}

static int report_diff(const char *what, const char *step, const char *where,
		       const uint8_t *got, const uint8_t *want, size_t n)
{
	n_checks++;
	if (memcmp(got, want, n) == 0)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (got[i] != want[i]) {
			fprintf(stderr,
				"%s: %s: %s differs at byte %zu (0x%02x, want 0x%02x)\n",
				what, step, where, i, got[i], want[i]);
			break;
		}
	failures++;
	return 1;
}

/* ---- phase 1: the walk of the kernel and the run list, on the host ---- */

/*
 * Moves layers [l0, l0 + nl) segment by segment as the kernel does, and
 * checks each access is aligned to the width the kernel would use.
 */
static int emulate_kernel(const struct tcase *tc, const struct kvt_geom *g,
			  int dir, int64_t l0, int64_t nl, void *const *base,
			  const int64_t *idx, uint8_t *const *blocks,
			  const char *what)
{
	struct kvt_seg sg;
	uint32_t w, align;

	kvt_seg_plan(g, l0, nl, &sg);
	align = kvt_ptr_align((const void *const *)base, n_bases(tc));
	if (kvt_ptr_align((const void *const *)blocks, tc->n_blocks) < align)
		align = kvt_ptr_align((const void *const *)blocks,
				      tc->n_blocks);
	w = kvt_seg_vec_bytes(g, &sg, align);
	if (sg.bytes % w) {
		fprintf(stderr, "%s: segment of %" PRId64 " bytes, width %u\n",
			what, sg.bytes, w);
		failures++;
		return -1;
	}
	for (int64_t b = 0; b < tc->n_blocks; b++) {
		for (int64_t s = 0; s < sg.per_block; s++) {
			int64_t l, p, t, h, l2, p2, t2, h2, eng = 0, blk = 0;
			uint8_t *e, *k;
			int r;

			/* Both index types the kernel may split in. */
			kvt_seg_split<int64_t>(&sg, s, &l, &p, &t, &h);
			kvt_seg_split<uint32_t>(&sg, (uint32_t)s, &l2, &p2, &t2,
						&h2);
			if (l != l2 || p != p2 || t != t2 || h != h2) {
				fprintf(stderr, "%s: split of %" PRId64
					" differs by index type\n", what, s);
				failures++;
				return -1;
			}
			r = kvt_seg_locate(g, idx, b, l, p, t, h, &eng, &blk);
			if (r < 0) {
				fprintf(stderr, "%s: locate: %d\n", what, r);
				failures++;
				return -1;
			}
			k = blocks[b] + blk;
			if ((uintptr_t)k % w) {
				fprintf(stderr, "%s: block access misaligned for width %u\n",
					what, w);
				failures++;
				return -1;
			}
			if (r == KVT_GEOM_PAD) {
				if (dir == KVT_COPY_GATHER)
					memset(k, 0, (size_t)sg.bytes);
				continue;
			}
			e = (uint8_t *)base[kvt_geom_base_index(g, l, p)] + eng;
			if ((uintptr_t)e % w) {
				fprintf(stderr, "%s: engine access misaligned for width %u\n",
					what, w);
				failures++;
				return -1;
			}
			if (dir == KVT_COPY_GATHER)
				memcpy(k, e, (size_t)sg.bytes);
			else
				memcpy(e, k, (size_t)sg.bytes);
		}
	}
	return 0;
}

/*
 * Walks the grid of a launch as the kernel does (kvt_launch_plan within
 * budget): every CTA, every thread, every vector of width bytes.  Each
 * vector of each block must be moved exactly once, within the budget.
 */
static int emulate_launch(const struct tcase *tc, const struct kvt_geom *g,
			  int dir, uint32_t budget, void *const *base,
			  const int64_t *idx, uint8_t *const *blocks,
			  const char *what)
{
	struct kvt_seg sg;
	struct kvt_launch ln;
	uint32_t w, align;
	uint8_t *seen;
	int64_t n_vec;
	int bad = 0;

	kvt_seg_plan(g, 0, N_LAYERS, &sg);
	align = kvt_ptr_align((const void *const *)base, n_bases(tc));
	if (kvt_ptr_align((const void *const *)blocks, tc->n_blocks) < align)
		align = kvt_ptr_align((const void *const *)blocks,
				      tc->n_blocks);
	w = kvt_seg_vec_bytes(g, &sg, align);
	if (kvt_launch_plan(sg.bytes / w, sg.per_block, tc->n_blocks, budget,
			    &ln) < 0 ||
	    (budget && (uint64_t)ln.grid_x * ln.grid_y > budget) ||
	    ln.threads != (uint32_t)(ln.lanes * ln.per_cta) ||
	    ln.threads > KVT_CTA_THREADS) {
		fprintf(stderr, "%s: bad launch plan for budget %u\n", what,
			budget);
		failures++;
		return -1;
	}
	n_vec = tc->n_blocks * sg.per_block * ln.vps;
	seen = (uint8_t *)calloc((size_t)n_vec, 1);
	for (uint32_t by = 0; by < ln.grid_y; by++)
	for (uint32_t bx = 0; bx < ln.grid_x; bx++)
	for (uint32_t tid = 0; tid < ln.threads; tid++) {
		int64_t lane = tid % ln.lanes, sub = tid / ln.lanes;

		for (int64_t b = by; b < tc->n_blocks; b += ln.grid_y)
		for (int64_t it = bx * ln.per_cta + sub; it < ln.items;
		     it += (int64_t)ln.grid_x * ln.per_cta) {
			int64_t s = it / ln.n_chunks, chunk = it % ln.n_chunks;
			int64_t l, p, t, h, eng = 0, blk = 0, v0, v1;
			int r;

			kvt_seg_split<int64_t>(&sg, s, &l, &p, &t, &h);
			r = kvt_seg_locate(g, idx, b, l, p, t, h, &eng, &blk);
			if (r < 0) {
				bad = 1;
				continue;
			}
			v0 = chunk * ln.chunk_vecs;
			v1 = v0 + ln.chunk_vecs < ln.vps ? v0 + ln.chunk_vecs
							 : ln.vps;
			for (int64_t v = v0 + lane; v < v1; v += ln.lanes) {
				uint8_t *k = blocks[b] + blk + v * w;
				uint8_t *e = (uint8_t *)base[kvt_geom_base_index(
						     g, l, p)] +
					     eng + v * w;

				seen[(b * sg.per_block + s) * ln.vps + v]++;
				if (r == KVT_GEOM_PAD) {
					if (dir == KVT_COPY_GATHER)
						memset(k, 0, w);
				} else if (dir == KVT_COPY_GATHER) {
					memcpy(k, e, w);
				} else {
					memcpy(e, k, w);
				}
			}
		}
	}
	for (int64_t i = 0; i < n_vec && !bad; i++)
		bad = seen[i] != 1;
	free(seen);
	if (bad) {
		fprintf(stderr, "%s: launch of budget %u does not move every "
			"vector exactly once\n", what, budget);
		failures++;
		return -1;
	}
	n_checks++;
	return 0;
}

static int emulate_batch(const struct tcase *tc, const struct kvt_geom *g,
			 int dir, int64_t l0, int64_t nl, void *const *base,
			 const int64_t *idx, uint8_t *const *blocks,
			 const char *what)
{
	int64_t n = kvt_batch_count(g, l0, nl, base, tc->n_blocks), k;
	void **dsts = (void **)xmalloc((size_t)n * sizeof(void *));
	const void **srcs = (const void **)xmalloc((size_t)n * sizeof(void *));
	size_t *sizes = (size_t *)xmalloc((size_t)n * sizeof(size_t));

	k = kvt_batch_build(g, dir, l0, nl, base, idx,
			    (void *const *)blocks, tc->n_blocks, dsts, srcs,
			    sizes);
	if (k != n) {
		fprintf(stderr, "%s: %" PRId64 " runs built, %" PRId64
			" counted\n", what, k, n);
		failures++;
	} else {
		for (int64_t i = 0; i < n; i++)
			memcpy(dsts[i], srcs[i], sizes[i]);
	}
	free(dsts);
	free(srcs);
	free(sizes);
	return k == n ? 0 : -1;
}

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

static void run_case(struct tcase *tc, const struct gpu *gp)
{
	struct engine orig, want_eng, emu_eng;
	uint8_t **want_blk, **emu_blk, **src_blk, *tmp;
	int64_t n_idx, *idx;
	struct kvt_geom g;
	kvt_layout lay;
	int64_t layer_off;
	char what[200];

	describe(tc, what, sizeof(what));
	n_idx = tc->index_kind == KVT_INDEX_PAGE ? tc->n_blocks
						 : tc->n_blocks * tc->bt;
	idx = (int64_t *)xmalloc((size_t)n_idx * sizeof(int64_t));
	pick_indices(tc, idx);

	engine_host(tc, &orig);
	engine_host(tc, &want_eng);
	engine_host(tc, &emu_eng);
	for (int i = 0; i < tc->n_bufs; i++)
		fill_random(engine_buf(tc, &orig, i), tc->buf_bytes);

	case_layout(tc, orig.base, &lay, &layer_off);
	if (kvt_geom_from_layout(&lay, tc->bt, &g) < 0 ||
	    kvt_geom_check_indices(&g, idx, tc->n_blocks) < 0) {
		fprintf(stderr, "%s: descriptor refused\n", what);
		failures++;
		goto out_idx;
	}
	tc->block_bytes = (uint64_t)kvt_geom_block_bytes(&g);

	want_blk = (uint8_t **)xmalloc(tc->n_blocks * sizeof(uint8_t *));
	emu_blk = (uint8_t **)xmalloc(tc->n_blocks * sizeof(uint8_t *));
	src_blk = (uint8_t **)xmalloc(tc->n_blocks * sizeof(uint8_t *));
	for (int64_t b = 0; b < tc->n_blocks; b++) {
		want_blk[b] = (uint8_t *)xmalloc(tc->block_bytes);
		emu_blk[b] = (uint8_t *)xmalloc(tc->block_bytes + SLACK) +
			     tc->shift;
		src_blk[b] = (uint8_t *)xmalloc(tc->block_bytes);
		fill_random(src_blk[b], tc->block_bytes);
	}
	tmp = (uint8_t *)xmalloc(tc->buf_bytes > tc->block_bytes
					 ? tc->buf_bytes
					 : tc->block_bytes);

	/* The expected results, from the CPU path. */
	if (kvt_layout_gather(&lay, tc->bt, idx, (size_t)tc->n_blocks,
			      (void *const *)want_blk) < 0) {
		fprintf(stderr, "%s: CPU gather refused the case\n", what);
		failures++;
		goto out;
	}
	for (int i = 0; i < tc->n_bufs; i++)
		memset(engine_buf(tc, &want_eng, i), POISON, tc->buf_bytes);
	lay.layer_base = want_eng.base;
	if (kvt_layout_scatter(&lay, tc->bt, idx, (size_t)tc->n_blocks,
			       (const void *const *)src_blk) < 0) {
		fprintf(stderr, "%s: CPU scatter refused the case\n", what);
		failures++;
		goto out;
	}

	/* Phase 1. */
	for (int step = 0; step < 4; step++) {
		int batch = step >= 2;
		int64_t l0 = 0, nl = N_LAYERS;
		const char *name = batch ? "emulated batch" : "emulated kernel";

		if (batch && tc->index_kind != KVT_INDEX_PAGE)
			break;
		/* Gather: all layers at once, then one layer per call. */
		for (int64_t b = 0; b < tc->n_blocks; b++)
			memset(emu_blk[b], POISON, tc->block_bytes);
		for (int64_t l = 0; l < N_LAYERS; l++) {
			if (step % 2 == 1) {
				l0 = l;
				nl = 1;
			} else if (l) {
				break;
			}
			if (batch)
				emulate_batch(tc, &g, KVT_COPY_GATHER, l0, nl,
					      orig.base, idx, emu_blk, what);
			else
				emulate_kernel(tc, &g, KVT_COPY_GATHER, l0, nl,
					       orig.base, idx, emu_blk, what);
		}
		for (int64_t b = 0; b < tc->n_blocks; b++) {
			char where[32];

			snprintf(where, sizeof(where), "block %" PRId64, b);
			if (report_diff(what, name, where, emu_blk[b],
					want_blk[b], tc->block_bytes))
				break;
		}

		for (int i = 0; i < tc->n_bufs; i++)
			memset(engine_buf(tc, &emu_eng, i), POISON,
			       tc->buf_bytes);
		for (int64_t b = 0; b < tc->n_blocks; b++)
			memcpy(emu_blk[b], src_blk[b], tc->block_bytes);
		for (int64_t l = 0; l < N_LAYERS; l++) {
			if (step % 2 == 1) {
				l0 = l;
				nl = 1;
			} else if (l) {
				break;
			}
			if (batch)
				emulate_batch(tc, &g, KVT_COPY_SCATTER, l0, nl,
					      emu_eng.base, idx, emu_blk, what);
			else
				emulate_kernel(tc, &g, KVT_COPY_SCATTER, l0,
					       nl, emu_eng.base, idx, emu_blk,
					       what);
		}
		for (int i = 0; i < tc->n_bufs; i++) {
			char where[32];

			snprintf(where, sizeof(where), "engine buffer %d", i);
			if (report_diff(what, name, where,
					engine_buf(tc, &emu_eng, i),
					engine_buf(tc, &want_eng, i),
					tc->buf_bytes))
				break;
		}
	}

	/* Phase 1, the grid: every budget covers every vector once. */
	for (int bi = 0; bi < 2; bi++) {
		uint32_t budget = bi ? SMALL_BUDGET : 0;

		for (int64_t b = 0; b < tc->n_blocks; b++)
			memset(emu_blk[b], POISON, tc->block_bytes);
		if (emulate_launch(tc, &g, KVT_COPY_GATHER, budget, orig.base,
				   idx, emu_blk, what) == 0)
			for (int64_t b = 0; b < tc->n_blocks; b++)
				if (report_diff(what, "emulated launch", "block",
						emu_blk[b], want_blk[b],
						tc->block_bytes))
					break;
		for (int i = 0; i < tc->n_bufs; i++)
			memset(engine_buf(tc, &emu_eng, i), POISON,
			       tc->buf_bytes);
		for (int64_t b = 0; b < tc->n_blocks; b++)
			memcpy(emu_blk[b], src_blk[b], tc->block_bytes);
		if (emulate_launch(tc, &g, KVT_COPY_SCATTER, budget,
				   emu_eng.base, idx, emu_blk, what) == 0)
			for (int i = 0; i < tc->n_bufs; i++)
				if (report_diff(what, "emulated launch",
						"engine buffer",
						engine_buf(tc, &emu_eng, i),
						engine_buf(tc, &want_eng, i),
						tc->buf_bytes))
					break;
	}

	/* Phase 2. */
	if (gp) {
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

out:
	for (int64_t b = 0; b < tc->n_blocks; b++) {
		free(want_blk[b]);
		free(emu_blk[b] - tc->shift);
		free(src_blk[b]);
	}
	free(want_blk);
	free(emu_blk);
	free(src_blk);
	free(tmp);
out_idx:
	engine_host_free(tc, &orig);
	engine_host_free(tc, &want_eng);
	engine_host_free(tc, &emu_eng);
	free(idx);
}

static uint32_t other_size(uint32_t bs)
{
	/* Pages of another size than the block (larger for blocks of 1 and
	 * 16 tokens, smaller for 32), so that slot runs cross page ends. */
	return bs == 16 ? 32 : 16;
}

static size_t buf_bytes(const struct tcase *tc)
{
	size_t row = (size_t)tc->pt * tc->heads * tc->elem * tc->dim;

	switch (tc->kind) {
	case K_MLA:
		return (size_t)tc->np * row;
	case K_CROSS:
		return (size_t)tc->np * N_LAYERS * 2 * row;
	case K_ROW_PAD:
		return (size_t)2 * tc->np * tc->pt *
		       ((size_t)tc->heads * tc->elem * tc->dim + ROW_PAD);
	case K_HEAD_PAD:
		return (size_t)2 * tc->np * tc->pt * tc->heads *
		       ((size_t)tc->elem * tc->dim + HEAD_PAD);
	case K_KV_SPLIT:
		return (size_t)tc->np * row;
	default:
		return (size_t)2 * tc->np * row;
	}
}

/* One point of the sweep; returns 0 when the point does not exist. */
static int sweep_point(enum kind k, int slots, uint32_t elem, uint32_t dim,
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
	tc.n_bufs = k == K_CROSS ? 1 : k == K_KV_SPLIT ? 2 * N_LAYERS
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

/* KVT_GPU_SWEEP=reduced */
static int reduced;

static int sweep(const struct gpu *gp)
{
	static const uint32_t elems[] = { 1, 2, 4 };
	static const uint32_t dims[] = { 64, 128, 576 };
	static const uint32_t sizes[] = { 1, 16, 32 };
	int n = 0;

	/* kind x (pages, slots) x element x head dim x block size x offset */
	for (int i = 0; i < K_COUNT * 2 * 3 * 3 * 3 * 3; i++) {
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
		n += sweep_point((enum kind)v, slots, elems[e], dims[d],
				 sizes[s], shift, gp);
	}
	return n;
}

/* More blocks than a grid has CTAs along y (65,535): small MLA-like
 * blocks of one token, by page, in every memory. */
static int many_blocks(const struct gpu *gp)
{
	struct tcase tc = {};

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
