/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The cases of tests/gpu/test-gpu-layout.cu: the engine layouts, their
 * buffers and indices, and phase 1, the host emulation of the kernel's
 * and the copy engines' walks against the CPU path (layout-case.h).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layout-case.h"

int failures;
long n_checks;

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

uint64_t rng(void)
{
	/* splitmix64: fixed seed, so a failure reproduces. */
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void fill_random(uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i += 8) {
		uint64_t v = rng();

		memcpy(p + i, &v, n - i < 8 ? n - i : 8);
	}
}

void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p) {
		fprintf(stderr, "out of memory (%zu bytes)\n", n);
		exit(1);
	}
	return p;
}

void describe(const struct tcase *tc, char *buf, size_t n)
{
	snprintf(buf, n,
		 "%s %s elem=%u dim=%u heads=%u page_tokens=%u block_tokens=%u shift=%u",
		 layout_kind_name(tc->kind),
		 tc->index_kind == KVT_INDEX_PAGE ? "page" : "slot", tc->elem,
		 tc->dim, tc->heads, tc->pt, tc->bt, tc->shift);
}

/* Strides of the engine layout, and where layer l starts in its buffer. */
void case_layout(const struct tcase *tc, void *const *base,
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
	case K_VLLM_LBNHC:
		ret->stride_plane = hb;
		ret->stride_page = bs * H * 2 * hb;
		ret->stride_token = H * 2 * hb;
		ret->stride_head = 2 * hb;
		break;
	case K_VLLM_LBHNC:
		ret->stride_plane = hb;
		ret->stride_page = H * bs * 2 * hb;
		ret->stride_token = 2 * hb;
		ret->stride_head = bs * 2 * hb;
		break;
	case K_VLLM_BLNHC:
		ret->stride_plane = hb;
		ret->stride_page = (int64_t)N_LAYERS * bs * H * 2 * hb;
		ret->stride_token = H * 2 * hb;
		ret->stride_head = 2 * hb;
		*ret_layer_off = bs * H * 2 * hb;
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

/* Entries of layer_base: one per layer, or per layer and plane. */
int n_bases(const struct tcase *tc)
{
	return layout_kind_buffers(tc->kind) == LAYOUT_PER_PLANE ? 2 * N_LAYERS : N_LAYERS;
}

void engine_bases(const struct tcase *tc, struct engine *e)
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

void engine_host(const struct tcase *tc, struct engine *e)
{
	for (int i = 0; i < tc->n_bufs; i++)
		e->alloc[i] = (uint8_t *)xmalloc(tc->buf_bytes + SLACK);
	engine_bases(tc, e);
}

void engine_host_free(const struct tcase *tc, struct engine *e)
{
	for (int i = 0; i < tc->n_bufs; i++)
		free(e->alloc[i]);
}

/* Buffer i of an engine, at the offset the case uses. */
uint8_t *engine_buf(const struct tcase *tc, const struct engine *e,
			   int i)
{
	return e->alloc[i] + tc->shift;
}

/* Distinct pages, or distinct slots in runs with jumps and padding. */
void pick_indices(const struct tcase *tc, int64_t *idx)
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

int report_diff(const char *what, const char *step, const char *where,
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

uint32_t other_size(uint32_t bs)
{
	/* Pages of another size than the block (larger for blocks of 1 and
	 * 16 tokens, smaller for 32), so that slot runs cross page ends. */
	return bs == 16 ? 32 : 16;
}

size_t buf_bytes(const struct tcase *tc)
{
	size_t row = (size_t)tc->pt * tc->heads * tc->elem * tc->dim;

	switch (tc->kind) {
	case K_MLA:
		return (size_t)tc->np * row;
	case K_CROSS:
	case K_VLLM_BLNHC:
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

/* Phase 1 of a case: the kernel's walk over segments, the grid walk
 * with and without a budget, and the run list, executed with memcpy on
 * the host, against the CPU path's results in d. */
void emulate_case(const struct tcase *tc, struct case_data *d)
{
	struct engine &orig = d->orig, &want_eng = d->want_eng,
		      &emu_eng = d->emu_eng;
	uint8_t **want_blk = d->want_blk, **emu_blk = d->emu_blk,
		**src_blk = d->src_blk;
	const struct kvt_geom &g = d->g;
	const int64_t *idx = d->idx;
	const char *what = d->what;

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
}
