/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CPU path's vector codec code (kernels/codec_x86.c) against its
 * portable loops (kernels/codec_cpu.c), byte for byte, at every level
 * this CPU has (kvt_codec_cpu_isa_set()): each case is gathered, and
 * scattered into a poisoned cache, once at the level and once portable,
 * and the blocks and the caches must be the same bytes.
 *
 *   fp8-e4m3 encoding: every one of the 65536 bfloat16 values, in tiles
 *     whose largest |x| is one of a set of scales (1, 448, 224, bfloat16's
 *     largest, small ones down to where 1 / scale overflows or the scale
 *     is 0) and 40 random ones, so that every value is coded against
 *     each, ties and subnormal codes included; and in the values' own
 *     order (tiles of NaNs, infinities, subnormals).
 *   fp8-e4m3 decoding into bfloat16 and float16: every code against
 *     scales that are NaN, infinite, negative, 0, subnormal and ordinary.
 *   int4: random and edge tiles (NaN, infinities, zeros of both signs,
 *     subnormals, values past half's range, constant groups) of K (a pair
 *     per channel) and V (per token and group), heads of 2 to 128
 *     elements, blocks of 1 to 16 tokens with padding; decoding also of
 *     random tiles, pairs that are not numbers among them.
 * Heads of odd lengths and odd numbers of int4 words, and padding slots,
 * exercise the vector loops' partial vectors.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "codec_simd.h"
#include "kvtier-layout.h"
#include "../check.h"
#include "rng.h"

#define POISON 0x5a

static const char *const isa_names[KVT_CODEC_ISA_N] = {"portable", "avx512"};

/* One layer's cache of n_pages pages of T tokens, [page][plane][token][head]. */
struct cache {
	uint32_t T, D, H, eb, dtype;
	size_t pages, bytes;
	uint8_t *mem;
};

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p) {
		perror("malloc");
		exit(1);
	}
	return p;
}

static void cache_init(struct cache *c, uint32_t dtype, uint32_t T, uint32_t D, uint32_t H,
		       size_t pages)
{
	c->T = T;
	c->D = D;
	c->H = H;
	c->dtype = dtype;
	c->eb = dtype == KVT_DTYPE_FLOAT32 ? 4 : 2;
	c->pages = pages;
	c->bytes = pages * 2 * T * H * D * c->eb;
	c->mem = xmalloc(c->bytes);
	memset(c->mem, POISON, c->bytes);
}

static uint8_t *elem_at(const struct cache *c, size_t page, uint32_t plane, uint32_t t, uint32_t h,
			uint32_t e)
{
	return c->mem + ((((page * 2 + plane) * c->T + t) * c->H + h) * c->D + e) * c->eb;
}

static void layout_of(const struct cache *c, uint32_t codec, kvt_layout *l, void **base)
{
	uint32_t hb = c->D * c->eb;

	memset(l, 0, sizeof(*l));
	*base = c->mem;
	l->n_layers = 1;
	l->planes = 2;
	l->heads = c->H;
	l->head_bytes = hb;
	l->page_tokens = c->T;
	l->index_kind = KVT_INDEX_SLOT;
	l->layer_base = base;
	l->stride_head = hb;
	l->stride_token = (int64_t)c->H * hb;
	l->stride_plane = (int64_t)c->T * c->H * hb;
	l->stride_page = 2 * l->stride_plane;
	l->n_pages = c->pages;
	l->dtype = c->dtype;
	l->codec = codec;
}

/* Slots of n_blocks blocks, block b on page b; every `pad`th slot is
 * padding (0: none). */
static int64_t *slots_of(const struct cache *c, size_t n_blocks, uint32_t pad)
{
	int64_t *s = xmalloc(n_blocks * c->T * sizeof(*s));

	for (size_t i = 0; i < n_blocks * c->T; i++)
		s[i] = pad && i % pad == pad - 1 ? -1 : (int64_t)i;
	return s;
}

static int set_isa(int isa)
{
	int r = kvt_codec_cpu_isa_set(isa);

	CHECK(r == 0, "%s: %d", isa_names[isa], r);
	return r;
}

/*
 * Gathers the cache's blocks with codec at isa and portable, compares
 * them, then scatters the portable blocks into two poisoned caches, once
 * each way, and compares those; returns the portable blocks' bytes (for
 * decoding cases).
 */
static void compare(const char *what, int isa, const struct cache *c, uint32_t codec,
		    size_t n_blocks, uint32_t pad)
{
	kvt_layout l;
	void *base;
	int64_t *slots = slots_of(c, n_blocks, pad);
	uint64_t bb;
	uint8_t *blk[2];
	void *ptr[2][64];
	struct cache out[2];

	layout_of(c, codec, &l, &base);
	bb = kvt_layout_block_bytes(&l, c->T);
	CHECK(bb > 0 && n_blocks <= 64);
	for (int k = 0; k < 2; k++) {
		blk[k] = xmalloc(n_blocks * bb);
		memset(blk[k], 0xee, n_blocks * bb);
		for (size_t b = 0; b < n_blocks; b++)
			ptr[k][b] = blk[k] + b * bb;
		set_isa(k ? KVT_CODEC_ISA_PORTABLE : isa);
		CHECK(kvt_layout_gather(&l, c->T, slots, n_blocks, ptr[k]) == 0, "%s", what);
	}
	if (memcmp(blk[0], blk[1], n_blocks * bb)) {
		size_t i = 0;

		while (blk[0][i] == blk[1][i])
			i++;
		CHECK(0, "%s at %s: gather differs at byte %zu of %zu (block %zu, %#x, portable %#x)",
		      what, isa_names[isa], i, n_blocks * bb, i / bb, blk[0][i], blk[1][i]);
	}
	for (int k = 0; k < 2; k++) {
		cache_init(&out[k], c->dtype, c->T, c->D, c->H, c->pages);
		layout_of(&out[k], codec, &l, &base);
		set_isa(k ? KVT_CODEC_ISA_PORTABLE : isa);
		CHECK(kvt_layout_scatter(&l, c->T, slots, n_blocks, (const void *const *)ptr[1]) == 0,
		      "%s", what);
	}
	if (memcmp(out[0].mem, out[1].mem, c->bytes)) {
		size_t i = 0;

		while (out[0].mem[i] == out[1].mem[i])
			i++;
		CHECK(0, "%s at %s: scatter differs at byte %zu of %zu (%#x, portable %#x)", what,
		      isa_names[isa], i, c->bytes, out[0].mem[i], out[1].mem[i]);
	}
	for (int k = 0; k < 2; k++) {
		free(blk[k]);
		free(out[k].mem);
	}
	free(slots);
}

/* Scatters blocks of the given bytes at isa and portable into poisoned
 * caches and compares them. */
static void compare_scatter(const char *what, int isa, const struct cache *shape, uint32_t codec,
			    size_t n_blocks, uint32_t pad, uint8_t *blocks, uint64_t bb)
{
	kvt_layout l;
	void *base;
	int64_t *slots = slots_of(shape, n_blocks, pad);
	void *ptr[64];
	struct cache out[2];

	for (size_t b = 0; b < n_blocks; b++)
		ptr[b] = blocks + b * bb;
	for (int k = 0; k < 2; k++) {
		cache_init(&out[k], shape->dtype, shape->T, shape->D, shape->H, shape->pages);
		layout_of(&out[k], codec, &l, &base);
		CHECK(kvt_layout_block_bytes(&l, shape->T) == bb);
		set_isa(k ? KVT_CODEC_ISA_PORTABLE : isa);
		CHECK(kvt_layout_scatter(&l, shape->T, slots, n_blocks, (const void *const *)ptr) == 0,
		      "%s", what);
	}
	if (memcmp(out[0].mem, out[1].mem, out[0].bytes)) {
		size_t i = 0;

		while (out[0].mem[i] == out[1].mem[i])
			i++;
		CHECK(0, "%s at %s: scatter differs at byte %zu of %zu (%#x, portable %#x)", what,
		      isa_names[isa], i, out[0].bytes, out[0].mem[i], out[1].mem[i]);
	}
	for (int k = 0; k < 2; k++)
		free(out[k].mem);
	free(slots);
}

static void put16(uint8_t *p, uint16_t v)
{
	memcpy(p, &v, 2);
}

/* ---- fp8-e4m3 -------------------------------------------------------- */

#define FP8_T 16
#define FP8_D 128
#define FP8_H 2
#define FP8_TILE (FP8_T * FP8_D)
#define FP8_BLOCKS 40 /* 160 tiles: room for 65536 values, 2047 a tile */
#define FP8_RANDOM_SCALES 40

/*
 * Every bfloat16 value v with |v| <= amax (amax's bits; all of them for
 * amax 0xffff, in their own order) into tiles led by amax, tile by tile.
 */
static void fp8_fill(struct cache *c, uint16_t amax)
{
	uint32_t v = 0;

	memset(c->mem, 0, c->bytes);
	for (size_t b = 0; b < c->pages; b++)
		for (uint32_t p = 0; p < 2; p++)
			for (uint32_t h = 0; h < c->H; h++)
				for (uint32_t i = 0; i < FP8_TILE; i++) {
					uint8_t *e = elem_at(c, b, p, i / FP8_D, h, i % FP8_D);

					if (amax != 0xffff && i == 0) {
						put16(e, amax);
						continue;
					}
					while (v < 65536 && amax != 0xffff &&
					       (v & 0x7fff) > (amax & 0x7fff))
						v++;
					put16(e, v < 65536 ? (uint16_t)v : 0);
					v++;
				}
	CHECK(v >= 65536, "amax %#x: %u values placed", amax, v);
}

static void test_fp8_encode(int isa)
{
	/* 1, 448 (scale 1), 224 (scale 1/2), 3.0, bfloat16's largest, a
	 * subnormal product range (2^-95), 2^-120 (1 / scale near f32's
	 * top), the smallest normal (1 / scale overflows), a subnormal
	 * (scale 0), every value's own order. */
	static const uint16_t amax[] = {0x3f80, 0x43e0, 0x4360, 0x4040, 0x7f7f, 0x1000,
					0x0380, 0x0080, 0x0005, 0xffff};
	const struct kvt_codec_simd *simd = kvt_codec_simd_table(isa);
	struct cache c;
	char what[64];

	cache_init(&c, KVT_DTYPE_BFLOAT16, FP8_T, FP8_D, FP8_H, FP8_BLOCKS);
	for (size_t k = 0; k < sizeof(amax) / sizeof(amax[0]) + FP8_RANDOM_SCALES; k++) {
		/* Then scales of random bits: every mantissa of 1 / scale
		 * the coder's tables see is its own case. */
		uint16_t a = k < sizeof(amax) / sizeof(amax[0])
				     ? amax[k]
				     : (uint16_t)(0x0080 + rnd() % (0x7f7f - 0x0080));

		fp8_fill(&c, a);
		snprintf(what, sizeof(what), "fp8 bf16 amax %#x", a);
		compare(what, isa, &c, KVT_CODEC_FP8_E4M3, FP8_BLOCKS, 0);
	}
	/* The vector loop codes such tiles itself, rather than leaving them
	 * to the portable one. */
	if (simd && simd->fp8_gather_bf16) {
		const uint8_t *rows[FP8_T];
		uint8_t tile[4 + FP8_TILE];

		fp8_fill(&c, 0x43e0);
		for (int t = 0; t < FP8_T; t++)
			rows[t] = elem_at(&c, 0, 0, (uint32_t)t, 0, 0);
		uint16_t top;

		simd->bf16_tops(rows, FP8_T, 1, FP8_D, &top);
		CHECK(top == 0x43e0, "%#x", top);
		CHECK(simd->fp8_gather_bf16(rows, FP8_T, FP8_D, tile, top) == 1, "%s",
		      isa_names[isa]);
	}
	free(c.mem);
}

static void test_fp8_decode(int isa)
{
	static const uint32_t scales[] = {0x3f800000, 0x3e000000, 0x00000000, 0x80000000,
					  0x00000001, 0x00400000, 0x7f800000, 0xff800000,
					  0x7fc00000, 0xffc01234, 0x7f7fffff, 0xbf800000,
					  0x3c23d70a, 0x01000000};
	static const uint32_t dtypes[] = {KVT_DTYPE_BFLOAT16, KVT_DTYPE_FLOAT16,
					  KVT_DTYPE_FLOAT32};
	uint32_t T = 16, D = 40, H = 1;
	size_t n_blocks = 4;

	for (size_t k = 0; k < sizeof(dtypes) / sizeof(dtypes[0]); k++) {
		struct cache c;
		kvt_layout l;
		void *base;
		uint64_t bb, tb;
		uint8_t *blocks;
		char what[64];

		cache_init(&c, dtypes[k], T, D, H, n_blocks);
		layout_of(&c, KVT_CODEC_FP8_E4M3, &l, &base);
		bb = kvt_layout_block_bytes(&l, T);
		tb = kvt_codec_tile_bytes(KVT_CODEC_FP8_E4M3, 0, T, D);
		blocks = xmalloc(n_blocks * bb);
		for (size_t s = 0; s < sizeof(scales) / sizeof(scales[0]); s++) {
			/* Each tile: a scale, then every code (T * D = 640, 2.5
			 * times over) from a different start. */
			for (size_t b = 0; b < n_blocks; b++)
				for (uint32_t p = 0; p < 2; p++) {
					uint8_t *tile = blocks + b * bb + p * tb;

					memcpy(tile, &scales[(s + b + p) % (sizeof(scales) / 4)], 4);
					for (uint32_t i = 0; i < T * D; i++)
						tile[4 + i] = (uint8_t)(i + 37 * (b * 2 + p));
				}
			snprintf(what, sizeof(what), "fp8 decode dtype %u scale %#x", dtypes[k],
				 scales[s]);
			compare_scatter(what, isa, &c, KVT_CODEC_FP8_E4M3, n_blocks, 7, blocks, bb);
		}
		free(blocks);
		free(c.mem);
	}
}

/* Odd head lengths and blocks: partial vectors, padding rows. */
static void test_fp8_shapes(int isa)
{
	static const uint32_t Ds[] = {1, 3, 17, 33, 64, 100};
	static const uint32_t Ts[] = {1, 5, 16};

	for (size_t i = 0; i < sizeof(Ds) / sizeof(Ds[0]); i++)
		for (size_t j = 0; j < sizeof(Ts) / sizeof(Ts[0]); j++) {
			struct cache c;
			char what[64];

			cache_init(&c, KVT_DTYPE_BFLOAT16, Ts[j], Ds[i], 3, 6);
			for (size_t e = 0; e < c.bytes / 2; e++) {
				uint64_t r = rnd();
				/* Mostly numbers of a few magnitudes. */
				uint16_t v = (uint16_t)((0x3800 + (r >> 20) % 0x0c00) |
							(r & 0x8000));

				put16(c.mem + 2 * e, (r >> 40) % 3001 ? v : (uint16_t)(r >> 48));
			}
			snprintf(what, sizeof(what), "fp8 bf16 T %u D %u", Ts[j], Ds[i]);
			compare(what, isa, &c, KVT_CODEC_FP8_E4M3, 6, 3);
			free(c.mem);
		}
}

/* ---- int4 ------------------------------------------------------------ */

/* A bfloat16 value for int4 cases: mostly ordinary, sometimes an edge. */
static uint16_t int4_value(uint64_t r, uint32_t edges)
{
	static const uint16_t edge[] = {0x7fc0, 0xffc1, 0x7f80, 0xff80, 0x0000, 0x8000,
					0x0001, 0x8003, 0x7149, 0xf149, 0x7f7f, 0x0080};
	uint16_t v = (uint16_t)((0x3c00 + (r >> 20) % 0x0600) | (r & 0x8000));

	if (edges && (r >> 36) % edges == 0)
		return edge[(r >> 44) % (sizeof(edge) / sizeof(edge[0]))];
	return v;
}

static void test_int4(int isa)
{
	static const uint32_t Ds[] = {2, 6, 30, 34, 64, 96, 128};
	static const uint32_t Ts[] = {1, 5, 16};
	/* No edge values, a few, many; then constant runs of 32 elements
	 * (V's groups) and constant channels (K's), a third of them edges
	 * (groups of nothing but NaNs or infinities). */
	static const uint32_t edges[] = {0, 61, 5, 1, 2};

	for (size_t i = 0; i < sizeof(Ds) / sizeof(Ds[0]); i++)
		for (size_t j = 0; j < sizeof(Ts) / sizeof(Ts[0]); j++)
			for (size_t k = 0; k < sizeof(edges) / sizeof(edges[0]); k++) {
				struct cache c;
				char what[80];

				cache_init(&c, KVT_DTYPE_BFLOAT16, Ts[j], Ds[i], 2, 5);
				for (size_t e = 0; e < c.bytes / 2; e++) {
					uint64_t r = rnd();

					if (edges[k] == 1)
						r = (e / 32 + 1) * UINT64_C(0x9e3779b97f4a7c15);
					else if (edges[k] == 2)
						r = (e % Ds[i] + 1) * UINT64_C(0x9e3779b97f4a7c15);
					put16(c.mem + 2 * e, int4_value(r, edges[k] > 2 ? edges[k] : edges[k] ? 3 : 0));
				}
				snprintf(what, sizeof(what), "int4 bf16 T %u D %u edges %u", Ts[j],
					 Ds[i], edges[k]);
				compare(what, isa, &c, KVT_CODEC_INT4, 5, k == 2 ? 4 : 0);
				free(c.mem);
			}
}

/* Decoding random tiles: the pairs' halves numbers, save in a few tiles. */
static void test_int4_decode(int isa)
{
	static const uint32_t Ds[] = {2, 30, 64, 128};

	for (size_t i = 0; i < sizeof(Ds) / sizeof(Ds[0]); i++) {
		uint32_t T = 16, D = Ds[i], H = 2;
		size_t n_blocks = 4;
		struct cache c;
		kvt_layout l;
		void *base;
		uint64_t bb, tk, tv;
		uint8_t *blocks;
		char what[64];

		cache_init(&c, KVT_DTYPE_BFLOAT16, T, D, H, n_blocks);
		layout_of(&c, KVT_CODEC_INT4, &l, &base);
		bb = kvt_layout_block_bytes(&l, T);
		tk = kvt_codec_tile_bytes(KVT_CODEC_INT4, 1, T, D);
		tv = kvt_codec_tile_bytes(KVT_CODEC_INT4, 0, T, D);
		blocks = xmalloc(n_blocks * bb);
		for (size_t e = 0; e < n_blocks * bb; e++)
			blocks[e] = (uint8_t)rnd();
		for (size_t b = 0; b < n_blocks; b++)
			for (uint32_t h = 0; h < 2 * H; h++) {
				int k = h < H;
				uint8_t *tile = blocks + b * bb + (k ? h * tk : H * tk + (h - H) * tv);
				uint64_t pairs = k ? D : T * (D / kvt_int4_group(D));

				if ((b + h) % 5 == 4)
					continue; /* leaves its NaNs and infinities */
				for (uint64_t w = 0; w < 2 * pairs; w++) {
					uint16_t x;

					memcpy(&x, tile + 2 * w, 2);
					if ((x & 0x7c00) == 0x7c00)
						x ^= 0x4000;
					memcpy(tile + 2 * w, &x, 2);
				}
			}
		snprintf(what, sizeof(what), "int4 decode D %u", D);
		compare_scatter(what, isa, &c, KVT_CODEC_INT4, n_blocks, 6, blocks, bb);
		free(blocks);
		free(c.mem);
	}
}

int main(void)
{
	int levels = 0;

	for (int isa = KVT_CODEC_ISA_PORTABLE + 1; isa < KVT_CODEC_ISA_N; isa++) {
		int r = kvt_codec_cpu_isa_set(isa);

		if (r == -ENOTSUP) {
			printf("test-codec-isa: %s: not on this CPU, skipped\n", isa_names[isa]);
			continue;
		}
		CHECK(r == 0, "%s: %d", isa_names[isa], r);
		test_fp8_encode(isa);
		test_fp8_decode(isa);
		test_fp8_shapes(isa);
		test_int4(isa);
		test_int4_decode(isa);
		printf("test-codec-isa: %s against portable: %s\n", isa_names[isa],
		       failures ? "FAILED" : "same bytes");
		levels++;
	}
	if (!levels) {
		printf("SKIP: no vector code for this CPU\n");
		return 77;
	}
	return failures ? 1 : 0;
}
