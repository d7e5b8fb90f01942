/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GPU path's codecs on the host: the steps the kernel runs on each
 * tile (kernels/codec_tile.h, codec_cuda.cu's CTA walk) run here for
 * every thread of a CTA in turn, and their bytes are compared with the
 * CPU path's (kvt_layout_gather with the codec, kernels/codec_cpu.c),
 * byte for byte; scatter likewise, compared over the whole engine cache
 * and guard bytes around it.  No GPU is needed: the tile code is
 * __host__ __device__ and this file is compiled for the host with
 * -ffp-contract=off, as codec_cpu.c is, while the device side rounds
 * every step with _rn intrinsics.
 *
 * Swept: codec (fp8-e4m3, int4), dtype (f32, f16, bf16), planes (K and
 * V, an MLA latent), block tokens, head elements (multiples of int4's
 * group and not, odd), engine layouts (NHD, HND, a base per plane with
 * padded heads), page and slot indices (with padding slots), CTA sizes
 * (the kernel's, and sizes that split the work otherwise), aligned and
 * misaligned engine bases and blocks, per-layer launches (a load's) and
 * whole-block ones (a store's); values of every size with zeros of both
 * signs, NaNs, infinities, subnormals and constant tiles.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec_tile.h"
#include "kvtier.h"
#include "layout_cuda.h"
#include "../check.h"
#include "rng.h"

#define N_LAYERS 3
#define GUARD 64
#define POISON 0x5a

/* Runs a step for every thread of a CTA of nt, one after the other: the
 * barrier after a step is the loop's end. */
struct host_exec {
	int64_t nt;
	int64_t threads() const
	{
		return nt;
	}
	void run(const struct kvt_codec_tile *c, int step, int64_t arg)
	{
		for (int64_t tid = 0; tid < nt; tid++)
			kvt_codec_step(c, step, arg, tid, nt);
	}
};

enum engine { NHD, HND, PLANE_BASES, N_ENGINES };

struct tcase {
	uint32_t codec, dtype, planes, heads, d, pt, bt, index_kind;
	enum engine eng;
	uint32_t n_pages, n_blocks;
	int misalign; /* engine bases and blocks off their alignment */
};

struct cache {
	kvt_layout lay;
	uint8_t *mem;       /* the engine's bytes, with guards */
	size_t bytes;       /* without guards */
	void *bases[N_LAYERS * 2];
	int64_t *idx;
};

static float rnd_value(int kind)
{
	double u = (double)(rnd() >> 11) / 9007199254740992.0;

	switch (kind) {
	case 0: /* special values, now and then */
		switch (rnd() % 16) {
		case 0:
			return 0.0f;
		case 1:
			return -0.0f;
		case 2:
			return NAN;
		case 3:
			return rnd() & 1 ? INFINITY : -INFINITY;
		case 4:
			return ldexpf((float)u, -130); /* subnormal */
		case 5:
			return 70000.0f;
		default:
			return (float)(u * 8 - 4);
		}
	case 1:
		return (float)(u * 2 - 1) * 1e-3f;
	case 2:
		return (float)(u * 200 - 100);
	default: /* skewed: a few outliers */
		return rnd() % 64 ? (float)(u - 0.5) : (float)(u * 1e4);
	}
}

static void cache_init(struct cache *c, const struct tcase *tc)
{
	uint32_t eb = kvt_codec_dtype_bytes(tc->dtype), hb = tc->d * eb;
	uint32_t pad = tc->eng == PLANE_BASES ? 3 * eb : 0, hs = hb + pad;
	int64_t tok = (int64_t)tc->heads * hs, page = (int64_t)tc->pt * tok * tc->planes;
	int64_t per_base, n_bases = tc->eng == PLANE_BASES ? N_LAYERS * tc->planes : N_LAYERS;
	kvt_layout *l = &c->lay;

	memset(c, 0, sizeof(*c));
	l->n_layers = N_LAYERS;
	l->planes = tc->planes;
	l->heads = tc->heads;
	l->head_bytes = hb;
	l->page_tokens = tc->pt;
	l->index_kind = tc->index_kind;
	l->n_pages = tc->n_pages;
	l->dtype = tc->dtype;
	l->codec = tc->codec;
	switch (tc->eng) {
	case NHD: /* [plane][page][token][head] per layer */
		l->stride_head = hb;
		l->stride_token = (int64_t)tc->heads * hb;
		l->stride_page = tc->pt * l->stride_token;
		l->stride_plane = tc->n_pages * l->stride_page;
		break;
	case HND: /* [page][plane][head][token] per layer */
		l->stride_token = hb;
		l->stride_head = (int64_t)tc->pt * hb;
		l->stride_plane = tc->heads * l->stride_head;
		l->stride_page = tc->planes * l->stride_plane;
		break;
	default: /* [page][token][head + pad] per layer and plane */
		l->flags = KVT_LAYOUT_PLANE_BASES;
		l->stride_head = hs;
		l->stride_token = tok;
		l->stride_page = tc->pt * tok;
		break;
	}
	per_base = tc->eng == PLANE_BASES ? (int64_t)tc->n_pages * tc->pt * tok
					  : (int64_t)tc->n_pages * page;
	c->bytes = (size_t)(per_base * n_bases);
	c->mem = (uint8_t *)malloc(c->bytes + 2 * GUARD + 1);
	memset(c->mem, POISON, c->bytes + 2 * GUARD + 1);
	for (int64_t i = 0; i < n_bases; i++)
		c->bases[i] = c->mem + GUARD + tc->misalign + i * per_base;
	l->layer_base = c->bases;
	(void)page;
}

/* Random values in every element the layout reaches (the padding of
 * padded heads keeps its poison). */
static void cache_fill(struct cache *c, const struct tcase *tc)
{
	const kvt_layout *l = &c->lay;
	uint32_t eb = kvt_codec_dtype_bytes(tc->dtype);

	for (uint32_t ly = 0; ly < N_LAYERS; ly++)
		for (uint32_t p = 0; p < tc->planes; p++)
			for (uint32_t g = 0; g < tc->n_pages; g++)
				for (uint32_t h = 0; h < tc->heads; h++) {
					/* One kind per (page, head): constant and
					 * zero heads too. */
					int kind = (int)(rnd() % 6);
					float cst = rnd_value(0);

					for (uint32_t t = 0; t < tc->pt; t++) {
						uint8_t *base = (uint8_t *)
							l->layer_base[l->flags ? ly * tc->planes + p : ly];
						int64_t off = (l->flags ? 0 : p * l->stride_plane) +
							      g * l->stride_page + t * l->stride_token +
							      h * l->stride_head;

						for (uint32_t e = 0; e < tc->d; e++) {
							float v = kind == 4 ? cst
								  : kind == 5 ? (rnd() & 1 ? 0.0f : -0.0f)
									      : rnd_value(kind);
							uint32_t bits = kvt_codec_f32_to_elem(v, tc->dtype);

							memcpy(base + off + e * eb, &bits, eb);
						}
					}
				}
}

/* The codec kernel's walk over layers [l0, l0 + nl) of every block, on
 * the host, with CTAs of nt threads. */
static void emulate(const struct kvt_codec_geom *cg, int to_block, int64_t l0, int64_t nl,
		    void *const *bases, const int64_t *idx, uint8_t *const *blocks,
		    int64_t n_blocks, int64_t nt)
{
	int64_t nb = kvt_geom_n_bases(&cg->g);
	uint32_t align = kvt_ptr_align((const void *const *)bases, nb);
	uint32_t ab = kvt_ptr_align((const void *const *)blocks, n_blocks);
	int64_t tiles = nl * cg->g.planes * cg->g.heads;
	int64_t *smem = (int64_t *)malloc((size_t)kvt_codec_smem_bytes(cg, nt) + 8);
	struct host_exec x = {nt};
	uint32_t access = kvt_codec_access(cg, ab < align ? ab : align);

	for (int64_t b = 0; b < n_blocks; b++)
		for (int64_t s = 0; s < tiles; s++) {
			struct kvt_codec_tile c;

			kvt_codec_tile_setup(&c, cg, l0, s, (uint8_t *const *)bases, idx, blocks[b], b,
					     (int32_t)access, smem);
			kvt_codec_tile_run(x, &c, to_block);
		}
	free(smem);
}

static int run_case(const struct tcase *tc)
{
	struct cache c, cpu, emu;
	struct kvt_codec_geom cg;
	uint64_t bb;
	uint8_t *blk_cpu, *blk_emu;
	uint8_t *pc[64], *pe[64];
	int64_t n_idx = tc->index_kind == KVT_INDEX_SLOT ? (int64_t)tc->n_blocks * tc->bt
						       : tc->n_blocks;
	static const int64_t nts[] = {KVT_CODEC_THREADS, 96, 32, 7, 1};
	int64_t nt = nts[rnd() % 5];
	int bad = failures;

	cache_init(&c, tc);
	cache_fill(&c, tc);
	c.idx = (int64_t *)malloc((size_t)n_idx * sizeof(int64_t));
	for (int64_t i = 0; i < n_idx; i++)
		c.idx[i] = tc->index_kind == KVT_INDEX_PAGE
				   ? (int64_t)(rnd() % tc->n_pages)
				   : (rnd() % 5 == 0 ? -1
						     : (int64_t)(rnd() % ((uint64_t)tc->n_pages * tc->pt)));

	bb = kvt_layout_block_bytes(&c.lay, tc->bt);
	CHECK(bb > 0);
	CHECK(kvt_codec_geom_from_layout(&c.lay, tc->bt, &cg) == 0);
	CHECK((uint64_t)(cg.layer_bytes * N_LAYERS) == bb);
	/* Blocks back to back, off 4-byte alignment when misaligned. */
	blk_cpu = (uint8_t *)malloc(bb * tc->n_blocks + 2);
	blk_emu = (uint8_t *)malloc(bb * tc->n_blocks + 2);
	memset(blk_emu, POISON, bb * tc->n_blocks + 2);
	for (uint32_t b = 0; b < tc->n_blocks; b++) {
		pc[b] = blk_cpu + b * bb;
		pe[b] = blk_emu + tc->misalign + b * bb;
	}
	CHECK(kvt_layout_gather(&c.lay, tc->bt, c.idx, tc->n_blocks, (void *const *)pc) == 0);

	/* A store: the whole block in one launch. */
	emulate(&cg, 1, 0, N_LAYERS, c.bases, c.idx, pe, tc->n_blocks, nt);
	for (uint32_t b = 0; b < tc->n_blocks; b++)
		if (memcmp(pc[b], pe[b], bb)) {
			uint64_t i = 0;

			while (pc[b][i] == pe[b][i])
				i++;
			CHECK(0, "gather: block %u byte %" PRIu64 " of %" PRIu64 ": cpu %02x emu %02x",
			      b, i, bb, pc[b][i], pe[b][i]);
			break;
		}

	/* A load: layer by layer, into two caches of poison. */
	cache_init(&cpu, tc);
	cache_init(&emu, tc);
	CHECK(kvt_layout_scatter(&cpu.lay, tc->bt, c.idx, tc->n_blocks,
				 (const void *const *)pc) == 0);
	for (int64_t l = 0; l < N_LAYERS; l++)
		emulate(&cg, 0, l, 1, emu.bases, c.idx, pe, tc->n_blocks, nt);
	if (memcmp(cpu.mem, emu.mem, cpu.bytes + 2 * GUARD + 1)) {
		size_t i = 0;

		while (cpu.mem[i] == emu.mem[i])
			i++;
		CHECK(0, "scatter: cache byte %zu of %zu: cpu %02x emu %02x", i,
		      cpu.bytes + 2 * GUARD + 1, cpu.mem[i], emu.mem[i]);
	}

	if (failures != bad)
		fprintf(stderr,
			"  case: codec %u dtype %u planes %u heads %u d %u pt %u bt %u index %u "
			"engine %d pages %u blocks %u misalign %d threads %" PRId64 "\n",
			tc->codec, tc->dtype, tc->planes, tc->heads, tc->d, tc->pt, tc->bt,
			tc->index_kind, (int)tc->eng, tc->n_pages, tc->n_blocks, tc->misalign, nt);
	free(c.mem);
	free(cpu.mem);
	free(emu.mem);
	free(c.idx);
	free(blk_cpu);
	free(blk_emu);
	return 1;
}

int main(void)
{
	static const uint32_t dtypes[] = {KVT_DTYPE_FLOAT32, KVT_DTYPE_FLOAT16, KVT_DTYPE_BFLOAT16};
	static const uint32_t ds[] = {1, 3, 8, 32, 64, 96, 128, 40, 576};
	static const uint32_t bts[] = {1, 3, 16, 17, 32};
	int n = 0;

	for (uint32_t codec = KVT_CODEC_FP8_E4M3; codec <= KVT_CODEC_INT4; codec++)
		for (uint32_t di = 0; di < 3; di++)
			for (uint32_t planes = 1; planes <= 2; planes++)
				for (uint32_t k = 0; k < sizeof(ds) / sizeof(ds[0]); k++)
					for (int e = 0; e < N_ENGINES; e++)
						for (uint32_t kind = 0; kind < 2; kind++) {
							struct tcase tc = {};
							uint32_t bt = bts[rnd() % 5];

							tc.codec = codec;
							tc.dtype = dtypes[di];
							tc.planes = planes;
							tc.heads = ds[k] >= 512 ? 1 : 1 + (uint32_t)(rnd() % 3);
							tc.d = ds[k];
							tc.index_kind = kind ? KVT_INDEX_SLOT : KVT_INDEX_PAGE;
							tc.bt = bt;
							tc.pt = kind ? 1 + (uint32_t)(rnd() % 16) : bt;
							tc.eng = (enum engine)e;
							tc.n_pages = 2 + (uint32_t)(rnd() % 6);
							tc.n_blocks = 1 + (uint32_t)(rnd() % 4);
							tc.misalign = rnd() % 4 == 0;
							n += run_case(&tc);
						}

	if (failures) {
		fprintf(stderr, "test-codec-tile: %d check(s) failed\n", failures);
		return 1;
	}
	printf("test-codec-tile: ok (%d cases)\n", n);
	return 0;
}
