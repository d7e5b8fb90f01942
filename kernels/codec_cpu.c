/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CPU path's codecs: quantise while gathering a block out of an
 * engine's cache, dequantise while scattering it back, in the format of
 * proto/codec.h.
 *
 * Tile by tile ((layer, plane, head) of a block), gather reads the block's
 * T tokens of that head into a float buffer [T][D] (padding tokens read
 * as zeros), takes its scale(s) and writes the tile; scatter decodes a
 * tile into the buffer and writes back the tokens that are not padding.
 * fp8, and int4 where a head has an even number of elements, skip the
 * buffer where a head's elements are contiguous: they code straight from
 * and into the engine's rows (the fused paths below), and the rows of the
 * next tile are asked of the memory while a tile is coded.
 * Where an element lives comes from layout.h, as for the uncoded copies.
 * The loops over the buffer are plain loops over contiguous arrays, with
 * conversions done by bit arithmetic and selects rather than branches, so
 * that the compiler vectorises them.
 * On a CPU with AVX-512, the fused paths of bfloat16 tiles, and fp8's
 * decoding into float16, run explicit vector code instead (codec_x86.c,
 * through codec_simd.h's table; KVTIER_CODEC_ISA=portable keeps these
 * loops), which codes the same bytes: fp8's first pass then takes a
 * whole (layer, plane)'s largest values at once, in the cache's order.
 *
 * What codec.h leaves to the encoder, and this one does:
 *   fp8-e4m3  y = x * (1 / scale) (a multiplication, cheaper than a
 *             division; x / scale where 1 / scale overflows), to E4M3
 *             rounding to nearest even; |y| past 448 saturates to +-448;
 *             NaN is 0x7f.  A scale that is 0 (every element 0, or too
 *             small for f32) makes zero data.
 *   int4      scale and min are rounded to half (nearest even) first and
 *             q = round((x - min) / scale) is taken against those, so that
 *             the encoder and the decoder agree; a scale of 0 (max == min,
 *             or a range below half's resolution) gives q = 0, which
 *             decodes to min.  NaNs are left out of a group's range, and
 *             a min or max that is a zero counts as +0 (whatever order
 *             the range was taken in: the GPU's takes another).  A
 *             scale or min past half's range saturates to +-65504: values
 *             beyond it have no int4 form.
 * Decoding computes min + q * scale or e4m3(c) * scale in f32 and rounds
 * that to the cache's dtype, to nearest even.  A tile's padding bytes, and
 * the high nibble after an odd number of int4 codes, are zero.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "codec_cpu.h"
#include "codec_elem.h"
#include "codec_simd.h"
#include "codec_tile.h"
#include "kvtier-layout.h"
#include "layout.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "codec_cpu.c writes codec.h's little-endian scales with the host's byte order"
#endif

/* The copy loops again for AVX-512 and AVX2 where the compiler can make
 * them and the CPU has them (an ifunc picks one at load time): two and
 * four times the lanes, and the selects, unsigned compares and narrowing
 * moves SSE2 lacks. */
/* Not under ThreadSanitizer: the ifunc's resolver is instrumented too and
 * runs during relocation, before the sanitizer's runtime is up. */
#if defined(__x86_64__) && defined(__has_attribute) && !defined(__SANITIZE_THREAD__)
#if __has_attribute(target_clones)
#define CODEC_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#endif
#endif
#ifndef CODEC_CLONES
#define CODEC_CLONES
#endif

/* The helpers of the copy loops, inlined into each clone of them. */
#define INLINE static inline __attribute__((always_inline))

/* Partial results a reduction keeps, so that it vectorises without
 * reassociating float operations. */
#define LANES 8

struct codec_ctx {
	const struct kvt_geom *g;
	void *const *base;
	uint32_t codec;
	uint32_t dtype;
	int64_t t;        /* tokens of a block */
	int64_t d;        /* elements of a head */
	uint64_t tile[2]; /* bytes of a tile of plane 0, of plane 1 */
	int64_t *page;    /* [t] where the block's tokens live; page -1: padding */
	int64_t *token;   /* [t] */
	float *x;         /* [t * d] one tile's values, element (t, d) at t*d + d */
	uint8_t *q;       /* [t * d] int4 codes, before packing */
	float *pa;        /* [pairs] int4: a pair's min, then the decoded min */
	float *pb;        /* [pairs] its max, then 1 / scale (the scale, decoding) */
	uint8_t **rows;   /* [t] the fused paths: where token t's head lies */
	uint8_t *zero;    /* [d] elements of zeros: a padding token's row */
	int32_t *keys;    /* [2 * d] the fused int4 K's ranges: f32_key()s, or
			   * twice as many 16-bit half_key()s */
	const struct kvt_codec_simd *simd; /* NULL: the portable loops alone */
	const uint8_t **region; /* [t * heads] the vector fp8 path: rows of a
				 * (layer, plane), token by token */
	uint16_t *tops;   /* [heads] their tiles' bf16_tops() */
	float *scratch;   /* [8 * d] the vector code's (codec_simd.h) */
};

/* ---- the vector code's level (codec_simd.h) --------------------------- */

static int codec_isa = -1;

static int isa_of_env(void)
{
	const char *e = getenv("KVTIER_CODEC_ISA");

	if (!e)
		return KVT_CODEC_ISA_N - 1;
	if (strcmp(e, "portable") == 0)
		return KVT_CODEC_ISA_PORTABLE;
	return KVT_CODEC_ISA_N - 1;
}

int kvt_codec_cpu_isa(void)
{
	int isa = __atomic_load_n(&codec_isa, __ATOMIC_RELAXED);

	if (isa >= 0)
		return isa;
	/* The best this CPU has, at most the environment's; racing callers
	 * pick the same. */
	for (isa = isa_of_env(); isa > KVT_CODEC_ISA_PORTABLE; isa--)
		if (kvt_codec_simd_table(isa))
			break;
	__atomic_store_n(&codec_isa, isa, __ATOMIC_RELAXED);
	return isa;
}

int kvt_codec_cpu_isa_set(int isa)
{
	if (isa < 0 || isa >= KVT_CODEC_ISA_N)
		return -EINVAL;
	if (isa != KVT_CODEC_ISA_PORTABLE && !kvt_codec_simd_table(isa))
		return -ENOTSUP;
	__atomic_store_n(&codec_isa, isa, __ATOMIC_RELAXED);
	return 0;
}

/* ---- element loops (conversions: codec_elem.h) --------------------- */

/* n elements of dtype at src into x. */
INLINE void load_elems(float *restrict x, const uint8_t *restrict src, int64_t n,
			      uint32_t dtype)
{
	uint16_t h;

	switch (dtype) {
	case KVT_DTYPE_FLOAT32:
		memcpy(x, src, (size_t)n * sizeof(float));
		break;
	case KVT_DTYPE_BFLOAT16:
		for (int64_t i = 0; i < n; i++) {
			memcpy(&h, src + 2 * i, 2);
			x[i] = kvt_bf16_to_f32(h);
		}
		break;
	default: /* KVT_DTYPE_FLOAT16 */
		for (int64_t i = 0; i < n; i++) {
			memcpy(&h, src + 2 * i, 2);
			x[i] = kvt_f16_to_f32(h);
		}
		break;
	}
}

INLINE void store_elems(uint8_t *restrict dst, const float *restrict x, int64_t n,
			       uint32_t dtype)
{
	uint16_t h;

	switch (dtype) {
	case KVT_DTYPE_FLOAT32:
		memcpy(dst, x, (size_t)n * sizeof(float));
		break;
	case KVT_DTYPE_BFLOAT16:
		for (int64_t i = 0; i < n; i++) {
			h = kvt_f32_to_bf16(x[i]);
			memcpy(dst + 2 * i, &h, 2);
		}
		break;
	default:
		for (int64_t i = 0; i < n; i++) {
			h = kvt_f32_to_f16(x[i]);
			memcpy(dst + 2 * i, &h, 2);
		}
		break;
	}
}

/* ---- tiles ---------------------------------------------------------- */

/* The largest |x| of n values; NaNs are left out. */
INLINE float abs_max(const float *x, int64_t n)
{
	float m[LANES] = {0};
	int64_t i = 0;

	for (; i + LANES <= n; i += LANES)
		for (int j = 0; j < LANES; j++) {
			float a = fabsf(x[i + j]);

			m[j] = a > m[j] ? a : m[j];
		}
	for (; i < n; i++) {
		float a = fabsf(x[i]);

		m[0] = a > m[0] ? a : m[0];
	}
	for (int j = 1; j < LANES; j++)
		m[0] = m[j] > m[0] ? m[j] : m[0];
	return m[0];
}

/* The smallest and largest of n values; NaNs are left out, and *ret_lo
 * > *ret_hi when nothing else is there. */
INLINE void value_range(const float *x, int64_t n, float *ret_lo, float *ret_hi)
{
	float lo[LANES], hi[LANES];
	int64_t i = 0;

	for (int j = 0; j < LANES; j++) {
		lo[j] = INFINITY;
		hi[j] = -INFINITY;
	}
	for (; i + LANES <= n; i += LANES)
		for (int j = 0; j < LANES; j++) {
			float v = x[i + j];

			lo[j] = v < lo[j] ? v : lo[j];
			hi[j] = v > hi[j] ? v : hi[j];
		}
	for (; i < n; i++) {
		lo[0] = x[i] < lo[0] ? x[i] : lo[0];
		hi[0] = x[i] > hi[0] ? x[i] : hi[0];
	}
	for (int j = 1; j < LANES; j++) {
		lo[0] = lo[j] < lo[0] ? lo[j] : lo[0];
		hi[0] = hi[j] > hi[0] ? hi[j] : hi[0];
	}
	*ret_lo = lo[0];
	*ret_hi = hi[0];
}

CODEC_CLONES static uint64_t fp8_encode(const float *restrict x, int64_t n, uint8_t *restrict tile)
{
	float scale = kvt_fp8_scale(abs_max(x, n)), inv = 1.0f / scale;
	uint8_t *q = tile + 4;

	memcpy(tile, &scale, 4);
	if (scale == 0.0f)
		memset(q, 0, (size_t)n);
	else if (isinf(inv)) /* a scale below 2^-128: 0 * inf would be a NaN */
		for (int64_t i = 0; i < n; i++)
			q[i] = kvt_e4m3_encode(x[i] / scale);
	else
		for (int64_t i = 0; i < n; i++)
			q[i] = kvt_e4m3_encode(x[i] * inv);
	return 4 + (uint64_t)n;
}

CODEC_CLONES static void fp8_decode(float *restrict x, int64_t n, const uint8_t *restrict tile)
{
	const uint8_t *q = tile + 4;
	float scale;

	memcpy(&scale, tile, 4);
	for (int64_t i = 0; i < n; i++)
		x[i] = kvt_e4m3_decode(q[i]) * scale;
}

/*
 * The (scale, min) pairs of n ranges lo[k]..hi[k], written to pairs; lo
 * and hi become what the decoder will read back: the min, and 1 / scale
 * (0 for a scale of 0).
 */
INLINE void int4_pairs(float *restrict lo, float *restrict hi, int64_t n, uint8_t *restrict pairs)
{
	for (int64_t k = 0; k < n; k++) {
		uint32_t w = kvt_int4_pair(lo[k], hi[k], &lo[k], &hi[k]);

		memcpy(pairs + 4 * k, &w, 4);
	}
}

/* n pairs into min[k] and scale[k]. */
INLINE void int4_unpairs(const uint8_t *restrict pairs, int64_t n, float *restrict min,
			 float *restrict scale)
{
	for (int64_t k = 0; k < n; k++) {
		uint16_t s, m;

		memcpy(&s, pairs + 4 * k, 2);
		memcpy(&m, pairs + 4 * k + 2, 2);
		scale[k] = kvt_f16_to_f32(s);
		min[k] = kvt_f16_to_f32(m);
	}
}

/* Element i is nibble i, the low nibble first. */
INLINE void pack_nibbles(const uint8_t *restrict q, int64_t n, uint8_t *restrict out)
{
	for (int64_t i = 0; i < n / 2; i++)
		out[i] = (uint8_t)(q[2 * i] | q[2 * i + 1] << 4);
	if (n & 1)
		out[n / 2] = q[n - 1];
}

INLINE void unpack_nibbles(const uint8_t *restrict in, int64_t n, uint8_t *restrict q)
{
	for (int64_t i = 0; i < n / 2; i++) {
		q[2 * i] = in[i] & 15;
		q[2 * i + 1] = in[i] >> 4;
	}
	if (n & 1)
		q[n - 1] = in[n / 2] & 15;
}

/* K: a (scale, min) pair per channel, over the block's tokens. */
CODEC_CLONES static uint64_t int4_encode_channels(struct codec_ctx *c, uint8_t *tile)
{
	int64_t T = c->t, D = c->d;
	float *restrict lo = c->pa, *restrict hi = c->pb;
	const float *restrict x = c->x;
	uint8_t *restrict q = c->q;

	for (int64_t d = 0; d < D; d++) {
		lo[d] = INFINITY;
		hi[d] = -INFINITY;
	}
	for (int64_t t = 0; t < T; t++)
		for (int64_t d = 0; d < D; d++) {
			float v = x[t * D + d];

			lo[d] = v < lo[d] ? v : lo[d];
			hi[d] = v > hi[d] ? v : hi[d];
		}
	int4_pairs(lo, hi, D, tile);
	for (int64_t t = 0; t < T; t++)
		for (int64_t d = 0; d < D; d++)
			q[t * D + d] = kvt_int4_code(x[t * D + d], lo[d], hi[d]);
	pack_nibbles(q, T * D, tile + 4 * D);
	return 4 * (uint64_t)D + (uint64_t)(T * D + 1) / 2;
}

CODEC_CLONES static void int4_decode_channels(struct codec_ctx *c, const uint8_t *tile)
{
	int64_t T = c->t, D = c->d;
	float *restrict min = c->pa, *restrict scale = c->pb, *restrict x = c->x;
	uint8_t *restrict q = c->q;

	int4_unpairs(tile, D, min, scale);
	unpack_nibbles(tile + 4 * D, T * D, q);
	for (int64_t t = 0; t < T; t++)
		for (int64_t d = 0; d < D; d++)
			x[t * D + d] = kvt_int4_value(q[t * D + d], min[d], scale[d]);
}

/* V and MLA latents: a pair per token and group of channels. */
CODEC_CLONES static uint64_t int4_encode_tokens(struct codec_ctx *c, uint8_t *tile)
{
	int64_t T = c->t, D = c->d, G = kvt_int4_group((uint32_t)D), n_pairs = T * (D / G);
	float *restrict lo = c->pa, *restrict hi = c->pb;
	const float *restrict x = c->x;
	uint8_t *restrict q = c->q;

	for (int64_t k = 0; k < n_pairs; k++)
		value_range(x + k * G, G, &lo[k], &hi[k]);
	int4_pairs(lo, hi, n_pairs, tile);
	for (int64_t k = 0; k < n_pairs; k++)
		for (int64_t i = 0; i < G; i++)
			q[k * G + i] = kvt_int4_code(x[k * G + i], lo[k], hi[k]);
	pack_nibbles(q, T * D, tile + 4 * n_pairs);
	return 4 * (uint64_t)n_pairs + (uint64_t)(T * D + 1) / 2;
}

CODEC_CLONES static void int4_decode_tokens(struct codec_ctx *c, const uint8_t *tile)
{
	int64_t T = c->t, D = c->d, G = kvt_int4_group((uint32_t)D), n_pairs = T * (D / G);
	float *restrict min = c->pa, *restrict scale = c->pb, *restrict x = c->x;
	uint8_t *restrict q = c->q;

	int4_unpairs(tile, n_pairs, min, scale);
	unpack_nibbles(tile + 4 * n_pairs, T * D, q);
	for (int64_t k = 0; k < n_pairs; k++)
		for (int64_t i = 0; i < G; i++)
			x[k * G + i] = kvt_int4_value(q[k * G + i], min[k], scale[k]);
}

static void encode_tile(struct codec_ctx *c, int per_channel, uint8_t *tile, uint64_t bytes)
{
	uint64_t used;

	if (c->codec == KVT_CODEC_FP8_E4M3)
		used = fp8_encode(c->x, c->t * c->d, tile);
	else if (per_channel)
		used = int4_encode_channels(c, tile);
	else
		used = int4_encode_tokens(c, tile);
	memset(tile + used, 0, bytes - used);
}

static void decode_tile(struct codec_ctx *c, int per_channel, const uint8_t *tile)
{
	if (c->codec == KVT_CODEC_FP8_E4M3)
		fp8_decode(c->x, c->t * c->d, tile);
	else if (per_channel)
		int4_decode_channels(c, tile);
	else
		int4_decode_tokens(c, tile);
}

/* ---- fused paths: a tile straight from and to the engine's rows ------ */

/*
 * Where a head's elements are contiguous (every layout but K kept column
 * by column), a tile is coded in passes over the engine's rows themselves,
 * with no float buffer between them: the conversions are inlined per
 * dtype, and each pass reads 4 KiB (bfloat16) that stay in L1.  The bytes
 * are those of the buffered path above, operation for operation.
 */

/* Element i of a row of dtype (a constant where this is inlined). */
INLINE float row_elem(const uint8_t *row, int64_t i, uint32_t dtype)
{
	uint32_t u;
	uint16_t h;

	if (dtype == KVT_DTYPE_FLOAT32) {
		memcpy(&u, row + 4 * i, 4);
		return kvt_f32_from_bits(u);
	}
	memcpy(&h, row + 2 * i, 2);
	return dtype == KVT_DTYPE_BFLOAT16 ? kvt_bf16_to_f32(h) : kvt_f16_to_f32(h);
}

INLINE void row_store(uint8_t *row, int64_t i, float x, uint32_t dtype)
{
	uint32_t u;
	uint16_t h;

	if (dtype == KVT_DTYPE_FLOAT32) {
		u = kvt_f32_bits(x);
		memcpy(row + 4 * i, &u, 4);
		return;
	}
	h = dtype == KVT_DTYPE_BFLOAT16 ? kvt_f32_to_bf16(x) : kvt_f32_to_f16(x);
	memcpy(row + 2 * i, &h, 2);
}

/* Partial maxima of the fused reductions: enough independent chains to
 * hide a max's latency, in a few vector registers. */
#define AMAX_LANES 64

/*
 * The largest |x| of T rows of D elements, NaNs left out, as abs_max()
 * finds it.  On the bits: |x|'s bits order as |x| does, so halves are
 * compared as 16-bit integers (bfloat16 NaNs above 0x7f80, half's above
 * 0x7c00) and float32 as 32-bit ones, in twice or as many lanes as
 * floats would take.
 */
INLINE float rows_abs_max(const uint8_t *const *rows, int64_t T, int64_t D, uint32_t dtype)
{
	if (dtype == KVT_DTYPE_FLOAT32) {
		int32_t m[AMAX_LANES] = {0}, top = 0;

		for (int64_t t = 0; t < T; t++) {
			const uint8_t *r = rows[t];
			int64_t i = 0;

			for (; i + AMAX_LANES <= D; i += AMAX_LANES)
				for (int j = 0; j < AMAX_LANES; j++) {
					uint32_t u;
					int32_t a;

					memcpy(&u, r + 4 * (i + j), 4);
					a = (int32_t)(u & 0x7fffffff);
					a = a > 0x7f800000 ? 0 : a;
					m[j] = a > m[j] ? a : m[j];
				}
			for (; i < D; i++) {
				uint32_t u;
				int32_t a;

				memcpy(&u, r + 4 * i, 4);
				a = (int32_t)(u & 0x7fffffff);
				a = a > 0x7f800000 ? 0 : a;
				m[0] = a > m[0] ? a : m[0];
			}
		}
		for (int j = 0; j < AMAX_LANES; j++)
			top = m[j] > top ? m[j] : top;
		return kvt_f32_from_bits((uint32_t)top);
	} else {
		int16_t m[AMAX_LANES] = {0}, top = 0;
		int16_t nan = dtype == KVT_DTYPE_BFLOAT16 ? 0x7f80 : 0x7c00;

		for (int64_t t = 0; t < T; t++) {
			const uint8_t *r = rows[t];
			int64_t i = 0;

			for (; i + AMAX_LANES <= D; i += AMAX_LANES)
				for (int j = 0; j < AMAX_LANES; j++) {
					uint16_t h;
					int16_t a;

					memcpy(&h, r + 2 * (i + j), 2);
					a = (int16_t)(h & 0x7fff);
					a = a > nan ? 0 : a;
					m[j] = a > m[j] ? a : m[j];
				}
			for (; i < D; i++) {
				uint16_t h;
				int16_t a;

				memcpy(&h, r + 2 * i, 2);
				a = (int16_t)(h & 0x7fff);
				a = a > nan ? 0 : a;
				m[0] = a > m[0] ? a : m[0];
			}
		}
		for (int j = 0; j < AMAX_LANES; j++)
			top = m[j] > top ? m[j] : top;
		return dtype == KVT_DTYPE_BFLOAT16 ? kvt_bf16_to_f32((uint16_t)top)
						   : kvt_f16_to_f32((uint16_t)top);
	}
}

/* The largest of |x|'s bits over T rows of bfloat16, NaNs included: at
 * most 0x7f7f where every element is finite, and then the bits of
 * rows_abs_max()'s answer. */
INLINE uint16_t rows_abs_bits_bf16(const uint8_t *const *rows, int64_t T, int64_t D)
{
	uint16_t m[AMAX_LANES] = {0}, top = 0;

	for (int64_t t = 0; t < T; t++) {
		const uint8_t *r = rows[t];
		int64_t i = 0;

		for (; i + AMAX_LANES <= D; i += AMAX_LANES)
			for (int j = 0; j < AMAX_LANES; j++) {
				uint16_t h;

				memcpy(&h, r + 2 * (i + j), 2);
				h &= 0x7fff;
				m[j] = h > m[j] ? h : m[j];
			}
		for (; i < D; i++) {
			uint16_t h;

			memcpy(&h, r + 2 * i, 2);
			h &= 0x7fff;
			m[0] = h > m[0] ? h : m[0];
		}
	}
	for (int j = 0; j < AMAX_LANES; j++)
		top = m[j] > top ? m[j] : top;
	return top;
}

/* kvt_e4m3_encode() of a y >= 0 that is not a NaN, without its sign:
 * with x * inv for an inv > 0, |x| * inv is |x * inv|, and the sign is
 * x's. */
INLINE uint8_t e4m3_encode_magnitude(float y)
{
	int32_t a = (int32_t)kvt_f32_bits(y);
	int32_t m = a < 0x43e00000 ? a : 0x43e00000;
	int32_t normal =
		(int32_t)(((uint32_t)m + (0x7ffffu - (120u << 23)) + (((uint32_t)m >> 20) & 1)) >> 20);
	int32_t sub = (int32_t)(kvt_f32_bits(kvt_f32_from_bits((uint32_t)m) + 16384.0f) -
				kvt_f32_bits(16384.0f));

	return (uint8_t)(m < 0x3c800000 ? sub : normal);
}

/*
 * A bfloat16 tile whose elements are all finite, with a scale that is
 * neither 0 nor so small that 1 / scale overflows: no product x * inv is
 * a NaN, so the encoding drops its NaN case (the same bytes).
 */
INLINE int fp8_gather_numbers_bf16(const uint8_t *const *rows, int64_t T, int64_t D,
				   uint8_t *tile)
{
	uint16_t top = rows_abs_bits_bf16(rows, T, D);
	float scale = kvt_fp8_scale(kvt_bf16_to_f32(top)), inv = 1.0f / scale;
	uint8_t *q = tile + 4;

	if (top >= 0x7f80 || scale == 0.0f || isinf(inv))
		return 0;
	memcpy(tile, &scale, 4);
	for (int64_t t = 0; t < T; t++) {
		const uint8_t *restrict r = rows[t];
		uint8_t *restrict o = q + t * D;

		for (int64_t d = 0; d < D; d++) {
			uint16_t h;

			memcpy(&h, r + 2 * d, 2);
			o[d] = (uint8_t)(e4m3_encode_magnitude(kvt_bf16_to_f32(h & 0x7fff) * inv) |
					 ((h >> 8) & 0x80));
		}
	}
	return 1;
}

/* fp8_encode() of a tile whose rows (padding: a row of zeros) are read in
 * place. */
INLINE void fp8_gather_rows(const uint8_t *const *rows, int64_t T, int64_t D, uint8_t *tile,
			    uint32_t dtype)
{
	float scale, inv;
	uint8_t *q = tile + 4;

	if (dtype == KVT_DTYPE_BFLOAT16 && fp8_gather_numbers_bf16(rows, T, D, tile))
		return;
	scale = kvt_fp8_scale(rows_abs_max(rows, T, D, dtype));
	inv = 1.0f / scale;
	memcpy(tile, &scale, 4);
	if (scale == 0.0f) {
		memset(q, 0, (size_t)(T * D));
	} else if (isinf(inv)) {
		for (int64_t t = 0; t < T; t++)
			for (int64_t d = 0; d < D; d++)
				q[t * D + d] = kvt_e4m3_encode(row_elem(rows[t], d, dtype) / scale);
	} else {
		for (int64_t t = 0; t < T; t++) {
			const uint8_t *restrict r = rows[t];
			uint8_t *restrict o = q + t * D;

			for (int64_t d = 0; d < D; d++)
				o[d] = kvt_e4m3_encode(row_elem(r, d, dtype) * inv);
		}
	}
}

/*
 * Where no element of a tile can decode to a NaN (no NaN code, and a
 * finite scale, so no 0 * inf either), kvt_e4m3_decode() and
 * kvt_f32_to_bf16() without their NaN cases: the same bits, two selects
 * fewer an element.
 */
INLINE float e4m3_decode_number(uint8_t c)
{
	uint32_t v = c & 0x7f;
	uint32_t normal = (v << 20) + (120u << 23);
	uint32_t sub = kvt_f32_bits((float)v * 0x1p-9f);

	return kvt_f32_from_bits((v < 8 ? sub : normal) | (uint32_t)(c & 0x80) << 24);
}

INLINE uint16_t bf16_of_number(float f)
{
	uint32_t u = kvt_f32_bits(f);

	return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

/* Whether n codes hold a NaN (S.1111.111). */
INLINE int e4m3_any_nan(const uint8_t *q, int64_t n)
{
	uint8_t any = 0;

	for (int64_t i = 0; i < n; i++)
		any |= (q[i] & 0x7f) == 0x7f;
	return any;
}

/* fp8_decode() and write_tile() in one pass; rows[t] NULL: padding. */
INLINE void fp8_scatter_rows(uint8_t *const *rows, int64_t T, int64_t D, const uint8_t *tile,
			     uint32_t dtype)
{
	const uint8_t *q = tile + 4;
	float scale;
	int numbers;

	memcpy(&scale, tile, 4);
	/* A scale that is +0 or positive and finite: the sign of a value is
	 * its code's. */
	numbers = dtype == KVT_DTYPE_BFLOAT16 && kvt_f32_bits(scale) < 0x7f800000 &&
		  !e4m3_any_nan(q, T * D);
	for (int64_t t = 0; t < T; t++) {
		uint8_t *restrict r = rows[t];
		const uint8_t *restrict c = q + t * D;

		if (!r)
			continue;
		if (numbers)
			for (int64_t d = 0; d < D; d++) {
				uint16_t h = (uint16_t)(bf16_of_number(e4m3_decode_number(c[d] & 0x7f) *
								       scale) |
							(c[d] & 0x80) << 8);

				memcpy(r + 2 * d, &h, 2);
			}
		else
			for (int64_t d = 0; d < D; d++)
				row_store(r, d, kvt_e4m3_decode(c[d]) * scale, dtype);
	}
}

CODEC_CLONES static void fp8_gather_tile(const uint8_t *const *rows, int64_t T, int64_t D,
					 uint8_t *tile, uint32_t dtype)
{
	switch (dtype) {
	case KVT_DTYPE_BFLOAT16:
		fp8_gather_rows(rows, T, D, tile, KVT_DTYPE_BFLOAT16);
		break;
	case KVT_DTYPE_FLOAT16:
		fp8_gather_rows(rows, T, D, tile, KVT_DTYPE_FLOAT16);
		break;
	default:
		fp8_gather_rows(rows, T, D, tile, KVT_DTYPE_FLOAT32);
		break;
	}
}

CODEC_CLONES static void fp8_scatter_tile(uint8_t *const *rows, int64_t T, int64_t D,
					  const uint8_t *tile, uint32_t dtype)
{
	switch (dtype) {
	case KVT_DTYPE_BFLOAT16:
		fp8_scatter_rows(rows, T, D, tile, KVT_DTYPE_BFLOAT16);
		break;
	case KVT_DTYPE_FLOAT16:
		fp8_scatter_rows(rows, T, D, tile, KVT_DTYPE_FLOAT16);
		break;
	default:
		fp8_scatter_rows(rows, T, D, tile, KVT_DTYPE_FLOAT32);
		break;
	}
}

/*
 * int4, where a head's D elements are an even number (every row then
 * starts on a whole byte of codes): a tile in two passes over the
 * engine's rows, the ranges from memory and the codes from L1, and one
 * over its pairs, with no float buffer between them.  The rows are read two elements at a time,
 * a 32-bit word of a half dtype (bfloat16: each element a shift or a
 * mask), which are the low and the high nibble of one byte of codes; a K
 * tile keeps its D channels' pairs as the even channels' then the odd
 * ones', so that every pass runs over contiguous arrays.  The bytes are
 * those of the buffered path, operation for operation: ranges are exact
 * in any order, and the codes and values go through the same
 * codec_elem.h steps.
 */

/* Elements 2i and 2i + 1 of a row of dtype. */
INLINE void row_pair(const uint8_t *row, int64_t i, uint32_t dtype, float *x0, float *x1)
{
	uint32_t u;

	if (dtype == KVT_DTYPE_FLOAT32) {
		memcpy(x0, row + 8 * i, 4);
		memcpy(x1, row + 8 * i + 4, 4);
		return;
	}
	memcpy(&u, row + 4 * i, 4);
	if (dtype == KVT_DTYPE_BFLOAT16) {
		*x0 = kvt_f32_from_bits(u << 16);
		*x1 = kvt_f32_from_bits(u & 0xffff0000u);
	} else {
		*x0 = kvt_f16_to_f32((uint16_t)u);
		*x1 = kvt_f16_to_f32((uint16_t)(u >> 16));
	}
}

INLINE void row_put_pair(uint8_t *row, int64_t i, float x0, float x1, uint32_t dtype)
{
	uint32_t u;

	if (dtype == KVT_DTYPE_FLOAT32) {
		memcpy(row + 8 * i, &x0, 4);
		memcpy(row + 8 * i + 4, &x1, 4);
		return;
	}
	if (dtype == KVT_DTYPE_BFLOAT16)
		u = kvt_f32_to_bf16(x0) | (uint32_t)kvt_f32_to_bf16(x1) << 16;
	else
		u = kvt_f32_to_f16(x0) | (uint32_t)kvt_f32_to_f16(x1) << 16;
	memcpy(row + 4 * i, &u, 4);
}

/* A byte of two codes. */
INLINE uint8_t int4_code2(float x0, float x1, float min0, float inv0, float min1, float inv1)
{
	return (uint8_t)(kvt_int4_code(x0, min0, inv0) | kvt_int4_code(x1, min1, inv1) << 4);
}

/*
 * Ranges on integers: f32 bits with the magnitude of a negative number
 * flipped order as the numbers do (-0 just below +0, which the pair
 * makes +0 either way), and integer minima and maxima vectorise as
 * reductions where float ones, whose order of evaluation would change,
 * do not.  A NaN counts as +inf for a minimum and -inf for a maximum, so
 * that a range of nothing but NaNs is inf..-inf, value_range()'s empty
 * one.
 */
#define KEY_INF 0x7f800000
#define KEY_NINF ((int32_t)0x807fffff)

INLINE int32_t f32_key(uint32_t u)
{
	return (int32_t)(u ^ ((uint32_t)((int32_t)u >> 31) >> 1));
}

INLINE int32_t low_key(float x)
{
	uint32_t u = kvt_f32_bits(x);

	return (u & 0x7fffffff) > 0x7f800000 ? KEY_INF : f32_key(u);
}

INLINE int32_t high_key(float x)
{
	uint32_t u = kvt_f32_bits(x);

	return (u & 0x7fffffff) > 0x7f800000 ? KEY_NINF : f32_key(u);
}

INLINE float key_value(int32_t k)
{
	return kvt_f32_from_bits((uint32_t)f32_key((uint32_t)k));
}

/* Partial results of a group's range: a vector register's keys. */
#define RANGE_LANES 8

/* The range of elements 2 * i0 .. 2 * (i0 + n) - 1 of a row, as
 * value_range() takes it. */
INLINE void row_keys_range(const uint8_t *row, int64_t i0, int64_t n, uint32_t dtype,
			   float *ret_lo, float *ret_hi)
{
	int32_t lo[RANGE_LANES], hi[RANGE_LANES], kl = KEY_INF, kh = KEY_NINF, k;
	float a, b;
	int64_t i = 0;

	for (int j = 0; j < RANGE_LANES; j++) {
		lo[j] = KEY_INF;
		hi[j] = KEY_NINF;
	}
	for (; i + RANGE_LANES <= n; i += RANGE_LANES)
		for (int j = 0; j < RANGE_LANES; j++) {
			row_pair(row, i0 + i + j, dtype, &a, &b);
			k = low_key(a);
			lo[j] = k < lo[j] ? k : lo[j];
			k = low_key(b);
			lo[j] = k < lo[j] ? k : lo[j];
			k = high_key(a);
			hi[j] = k > hi[j] ? k : hi[j];
			k = high_key(b);
			hi[j] = k > hi[j] ? k : hi[j];
		}
	for (; i < n; i++) {
		row_pair(row, i0 + i, dtype, &a, &b);
		k = low_key(a);
		kl = k < kl ? k : kl;
		k = low_key(b);
		kl = k < kl ? k : kl;
		k = high_key(a);
		kh = k > kh ? k : kh;
		k = high_key(b);
		kh = k > kh ? k : kh;
	}
	for (int j = 0; j < RANGE_LANES; j++) {
		kl = lo[j] < kl ? lo[j] : kl;
		kh = hi[j] > kh ? hi[j] : kh;
	}
	*ret_lo = key_value(kl);
	*ret_hi = key_value(kh);
}

/*
 * The same on the bits of a half dtype (bfloat16, float16), twice the
 * lanes: inf is the dtype's +inf, below which every number's magnitude
 * lies and above which every NaN's.
 */
INLINE int16_t half_key(uint16_t h)
{
	return (int16_t)(h ^ (uint16_t)((uint16_t)((int16_t)h >> 15) >> 1));
}

INLINE int16_t half_low_key(uint16_t h, uint16_t inf)
{
	return (h & 0x7fff) > inf ? (int16_t)inf : half_key(h);
}

INLINE int16_t half_high_key(uint16_t h, uint16_t inf)
{
	return (h & 0x7fff) > inf ? half_key(inf | 0x8000) : half_key(h);
}

INLINE float half_key_value(int16_t k, uint32_t dtype)
{
	uint16_t h = (uint16_t)half_key((uint16_t)k);

	return dtype == KVT_DTYPE_BFLOAT16 ? kvt_bf16_to_f32(h) : kvt_f16_to_f32(h);
}

INLINE uint16_t half_inf(uint32_t dtype)
{
	return dtype == KVT_DTYPE_BFLOAT16 ? 0x7f80 : 0x7c00;
}

/* row_keys_range() of elements e0 .. e0 + n - 1 of a row of a half dtype. */
INLINE void row_half_range(const uint8_t *row, int64_t e0, int64_t n, uint32_t dtype,
			   float *ret_lo, float *ret_hi)
{
	uint16_t inf = half_inf(dtype), h;
	int16_t lo[2 * RANGE_LANES], hi[2 * RANGE_LANES], k;
	int16_t kl = (int16_t)inf, kh = half_key(inf | 0x8000);
	int64_t i = 0;

	for (int j = 0; j < 2 * RANGE_LANES; j++) {
		lo[j] = kl;
		hi[j] = kh;
	}
	for (; i + 2 * RANGE_LANES <= n; i += 2 * RANGE_LANES)
		for (int j = 0; j < 2 * RANGE_LANES; j++) {
			memcpy(&h, row + 2 * (e0 + i + j), 2);
			k = half_low_key(h, inf);
			lo[j] = k < lo[j] ? k : lo[j];
			k = half_high_key(h, inf);
			hi[j] = k > hi[j] ? k : hi[j];
		}
	for (; i < n; i++) {
		memcpy(&h, row + 2 * (e0 + i), 2);
		k = half_low_key(h, inf);
		kl = k < kl ? k : kl;
		k = half_high_key(h, inf);
		kh = k > kh ? k : kh;
	}
	for (int j = 0; j < 2 * RANGE_LANES; j++) {
		kl = lo[j] < kl ? lo[j] : kl;
		kh = hi[j] > kh ? hi[j] : kh;
	}
	*ret_lo = half_key_value(kl, dtype);
	*ret_hi = half_key_value(kh, dtype);
}

/* int4_pairs() of n ranges, the pairs written to tile at 4 * (k * step +
 * first): the two halves of a K tile's channels. */
INLINE void int4_pairs_at(float *restrict lo, float *restrict hi, int64_t n, uint8_t *restrict tile,
			  int64_t step, int64_t first)
{
	for (int64_t k = 0; k < n; k++) {
		float min, inv;
		uint32_t w = kvt_int4_pair(lo[k], hi[k], &min, &inv);

		lo[k] = min;
		hi[k] = inv;
		memcpy(tile + 4 * (k * step + first), &w, 4);
	}
}

/* n pairs at 4 * (k * step + first) of tile into min[k] and scale[k]. */
INLINE void int4_unpairs_at(const uint8_t *restrict tile, int64_t n, int64_t step, int64_t first,
			    float *restrict min, float *restrict scale)
{
	for (int64_t k = 0; k < n; k++) {
		uint32_t w;

		memcpy(&w, tile + 4 * (k * step + first), 4);
		scale[k] = kvt_f16_to_f32((uint16_t)w);
		min[k] = kvt_f16_to_f32((uint16_t)(w >> 16));
	}
}

/* int4_encode_channels() of a tile whose rows are read in place: pa and
 * pb take 2 * (D / 2) floats each. */
INLINE uint64_t int4_gather_channels(const uint8_t *const *rows, int64_t T, int64_t D,
				     uint8_t *tile, float *pa, float *pb, int32_t *keys,
				     uint32_t dtype)
{
	int64_t P = D / 2;
	float *restrict lo0 = pa, *restrict lo1 = pa + P, *restrict hi0 = pb, *restrict hi1 = pb + P;
	int32_t *restrict kl0 = keys, *restrict kl1 = keys + P, *restrict kh0 = keys + 2 * P,
			  *restrict kh1 = keys + 3 * P;
	uint8_t *restrict q = tile + 4 * D;
	float a, b;

	if (dtype != KVT_DTYPE_FLOAT32) {
		uint16_t inf = half_inf(dtype), h;
		int16_t *restrict hl = (int16_t *)keys, *restrict hh = hl + D, k;

		for (int64_t d = 0; d < D; d++) {
			hl[d] = (int16_t)inf;
			hh[d] = half_key(inf | 0x8000);
		}
		for (int64_t t = 0; t < T; t++) {
			const uint8_t *restrict r = rows[t];

			for (int64_t d = 0; d < D; d++) {
				memcpy(&h, r + 2 * d, 2);
				k = half_low_key(h, inf);
				hl[d] = k < hl[d] ? k : hl[d];
				k = half_high_key(h, inf);
				hh[d] = k > hh[d] ? k : hh[d];
			}
		}
		for (int64_t i = 0; i < P; i++) {
			lo0[i] = half_key_value(hl[2 * i], dtype);
			lo1[i] = half_key_value(hl[2 * i + 1], dtype);
			hi0[i] = half_key_value(hh[2 * i], dtype);
			hi1[i] = half_key_value(hh[2 * i + 1], dtype);
		}
		goto code;
	}
	for (int64_t i = 0; i < P; i++) {
		kl0[i] = kl1[i] = KEY_INF;
		kh0[i] = kh1[i] = KEY_NINF;
	}
	for (int64_t t = 0; t < T; t++) {
		const uint8_t *restrict r = rows[t];

		for (int64_t i = 0; i < P; i++) {
			int32_t k;

			row_pair(r, i, dtype, &a, &b);
			k = low_key(a);
			kl0[i] = k < kl0[i] ? k : kl0[i];
			k = high_key(a);
			kh0[i] = k > kh0[i] ? k : kh0[i];
			k = low_key(b);
			kl1[i] = k < kl1[i] ? k : kl1[i];
			k = high_key(b);
			kh1[i] = k > kh1[i] ? k : kh1[i];
		}
	}
	for (int64_t i = 0; i < P; i++) {
		lo0[i] = key_value(kl0[i]);
		lo1[i] = key_value(kl1[i]);
		hi0[i] = key_value(kh0[i]);
		hi1[i] = key_value(kh1[i]);
	}
code:
	int4_pairs_at(lo0, hi0, P, tile, 2, 0);
	int4_pairs_at(lo1, hi1, P, tile, 2, 1);
	for (int64_t t = 0; t < T; t++) {
		const uint8_t *restrict r = rows[t];
		uint8_t *restrict o = q + t * P;

		for (int64_t i = 0; i < P; i++) {
			row_pair(r, i, dtype, &a, &b);
			o[i] = int4_code2(a, b, lo0[i], hi0[i], lo1[i], hi1[i]);
		}
	}
	return 4 * (uint64_t)D + (uint64_t)(T * P);
}

/*
 * int4_encode_tokens() of a tile whose rows are read in place, for
 * groups of G (even) elements; pa and pb take T * D / G + D / 2 floats.
 * A row's passes run over all its D / 2 words, its groups' numbers
 * spread over them in wa[] and wb[]: a loop over one group's few words
 * would be shorter than the vectors that bytes of codes ask for.
 */
INLINE uint64_t int4_gather_tokens(const uint8_t *const *rows, int64_t T, int64_t D, int64_t G,
				   uint8_t *tile, float *restrict pa, float *restrict pb,
				   int32_t *restrict keys, uint32_t dtype)
{
	int64_t P = D / 2, NG = D / G, GP = G / 2, n_pairs = T * NG;
	float *restrict wa = pa + n_pairs, *restrict wb = pb + n_pairs;
	uint8_t *restrict q = tile + 4 * n_pairs;
	float a, b;

	for (int64_t t = 0; t < T; t++)
		for (int64_t g = 0; g < NG; g++)
			if (dtype == KVT_DTYPE_FLOAT32)
				row_keys_range(rows[t], g * GP, GP, dtype, &pa[t * NG + g],
					       &pb[t * NG + g]);
			else
				row_half_range(rows[t], g * G, G, dtype, &pa[t * NG + g],
					       &pb[t * NG + g]);
	int4_pairs_at(pa, pb, n_pairs, tile, 1, 0);
	for (int64_t t = 0; t < T; t++) {
		const uint8_t *restrict r = rows[t];
		uint8_t *restrict o = q + t * P;

		for (int64_t g = 0; g < NG; g++)
			for (int64_t j = g * GP; j < (g + 1) * GP; j++) {
				wa[j] = pa[t * NG + g];
				wb[j] = pb[t * NG + g];
			}
		for (int64_t i = 0; i < P; i++) {
			row_pair(r, i, dtype, &a, &b);
			o[i] = int4_code2(a, b, wa[i], wb[i], wa[i], wb[i]);
		}
	}
	return 4 * (uint64_t)n_pairs + (uint64_t)(T * P);
}

/* int4_decode_channels() and write_tile() in one pass; rows[t] NULL:
 * padding. */
INLINE void int4_scatter_channels(uint8_t *const *rows, int64_t T, int64_t D,
				  const uint8_t *tile, float *pa, float *pb, uint32_t dtype)
{
	int64_t P = D / 2;
	float *restrict min0 = pa, *restrict min1 = pa + P, *restrict sc0 = pb, *restrict sc1 = pb + P;
	const uint8_t *restrict q = tile + 4 * D;

	int4_unpairs_at(tile, P, 2, 0, min0, sc0);
	int4_unpairs_at(tile, P, 2, 1, min1, sc1);
	for (int64_t t = 0; t < T; t++) {
		uint8_t *restrict r = rows[t];
		const uint8_t *restrict c = q + t * P;

		if (!r)
			continue;
		for (int64_t i = 0; i < P; i++)
			row_put_pair(r, i, kvt_int4_value(c[i] & 15, min0[i], sc0[i]),
				     kvt_int4_value(c[i] >> 4, min1[i], sc1[i]), dtype);
	}
}

/* int4_decode_tokens() and write_tile() in one pass, with
 * int4_gather_tokens()'s spread numbers. */
INLINE void int4_scatter_tokens(uint8_t *const *rows, int64_t T, int64_t D, int64_t G,
				const uint8_t *tile, float *restrict pa, float *restrict pb,
				uint32_t dtype)
{
	int64_t P = D / 2, NG = D / G, GP = G / 2, n_pairs = T * NG;
	float *restrict wa = pa + n_pairs, *restrict wb = pb + n_pairs;
	const uint8_t *restrict q = tile + 4 * n_pairs;

	int4_unpairs_at(tile, n_pairs, 1, 0, pa, pb);
	for (int64_t t = 0; t < T; t++) {
		uint8_t *restrict r = rows[t];
		const uint8_t *restrict c = q + t * P;

		if (!r)
			continue;
		for (int64_t g = 0; g < NG; g++)
			for (int64_t j = g * GP; j < (g + 1) * GP; j++) {
				wa[j] = pa[t * NG + g];
				wb[j] = pb[t * NG + g];
			}
		for (int64_t i = 0; i < P; i++)
			row_put_pair(r, i, kvt_int4_value(c[i] & 15, wa[i], wb[i]),
				     kvt_int4_value(c[i] >> 4, wa[i], wb[i]), dtype);
	}
}

/* The int4 tiles for each dtype, and for V's common group of 32 with the
 * group a constant. */
#define INT4_DTYPES(call)                                                                  \
	switch (dtype) {                                                                   \
	case KVT_DTYPE_BFLOAT16:                                                           \
		call(KVT_DTYPE_BFLOAT16);                                                  \
		break;                                                                     \
	case KVT_DTYPE_FLOAT16:                                                            \
		call(KVT_DTYPE_FLOAT16);                                                   \
		break;                                                                     \
	default:                                                                           \
		call(KVT_DTYPE_FLOAT32);                                                   \
		break;                                                                     \
	}

CODEC_CLONES static uint64_t int4_gather_tile(const uint8_t *const *rows, int64_t T, int64_t D,
					      int per_channel, uint8_t *tile, float *pa, float *pb,
					      int32_t *keys, uint32_t dtype)
{
	int64_t G = kvt_int4_group((uint32_t)D);
	uint64_t used = 0;

#define GATHER(dt)                                                                         \
	used = per_channel ? int4_gather_channels(rows, T, D, tile, pa, pb, keys, dt)       \
	       : G == KVT_INT4_GROUP                                                       \
		       ? int4_gather_tokens(rows, T, D, KVT_INT4_GROUP, tile, pa, pb, keys, dt)  \
		       : int4_gather_tokens(rows, T, D, G, tile, pa, pb, keys, dt)
	INT4_DTYPES(GATHER)
#undef GATHER
	return used;
}

CODEC_CLONES static void int4_scatter_tile(uint8_t *const *rows, int64_t T, int64_t D,
					   int per_channel, const uint8_t *tile, float *pa,
					   float *pb, uint32_t dtype)
{
	int64_t G = kvt_int4_group((uint32_t)D);

#define SCATTER(dt)                                                                        \
	if (per_channel)                                                                   \
		int4_scatter_channels(rows, T, D, tile, pa, pb, dt);                       \
	else if (G == KVT_INT4_GROUP)                                                      \
		int4_scatter_tokens(rows, T, D, KVT_INT4_GROUP, tile, pa, pb, dt);         \
	else                                                                               \
		int4_scatter_tokens(rows, T, D, G, tile, pa, pb, dt)
	INT4_DTYPES(SCATTER)
#undef SCATTER
}

/* ---- the engine's side ---------------------------------------------- */

/* Head h of the block's tokens in (layer, plane) into c->x. */
CODEC_CLONES static void read_tile(struct codec_ctx *c, int64_t layer, int64_t plane, int64_t h)
{
	const struct kvt_geom *g = c->g;
	const uint8_t *base = c->base[kvt_geom_base_index(g, layer, plane)];
	int64_t D = c->d;

	for (int64_t t = 0; t < c->t; t++) {
		float *x = c->x + t * D;
		int64_t page = c->page[t], token = c->token[t];

		if (page < 0) {
			memset(x, 0, (size_t)D * sizeof(float));
		} else if (plane == 0 && g->k_column_elem) {
			for (int64_t d = 0; d < D; d++)
				load_elems(x + d, base + kvt_geom_column_offset(g, page, token, h, d),
					   1, c->dtype);
		} else {
			load_elems(x, base + kvt_geom_engine_offset(g, plane, page, token, h), D,
				   c->dtype);
		}
	}
}

/* The inverse of read_tile(), leaving padding tokens out. */
CODEC_CLONES static void write_tile(struct codec_ctx *c, int64_t layer, int64_t plane, int64_t h)
{
	const struct kvt_geom *g = c->g;
	uint8_t *base = c->base[kvt_geom_base_index(g, layer, plane)];
	int64_t D = c->d;

	for (int64_t t = 0; t < c->t; t++) {
		const float *x = c->x + t * D;
		int64_t page = c->page[t], token = c->token[t];

		if (page < 0)
			continue;
		if (plane == 0 && g->k_column_elem)
			for (int64_t d = 0; d < D; d++)
				store_elems(base + kvt_geom_column_offset(g, page, token, h, d),
					    x + d, 1, c->dtype);
		else
			store_elems(base + kvt_geom_engine_offset(g, plane, page, token, h), x, D,
				    c->dtype);
	}
}

/* Whether (plane) of a tile takes the fused paths: its heads are rows,
 * and for int4 rows of an even number of elements. */
static int tile_fused(const struct codec_ctx *c, int64_t plane)
{
	if (plane == 0 && c->g->k_column_elem)
		return 0;
	return c->codec == KVT_CODEC_FP8_E4M3 || c->d % 2 == 0;
}

/* c->rows of head h of the block's tokens in (layer, plane); a padding
 * token's is pad. */
static void locate_rows(struct codec_ctx *c, int64_t layer, int64_t plane, int64_t h,
			uint8_t *pad)
{
	const struct kvt_geom *g = c->g;
	uint8_t *base = c->base[kvt_geom_base_index(g, layer, plane)];

	for (int64_t t = 0; t < c->t; t++)
		c->rows[t] = c->page[t] < 0 ? pad
					    : base + kvt_geom_engine_offset(g, plane, c->page[t],
									    c->token[t], h);
}

static void gather_fused(struct codec_ctx *c, int64_t layer, int64_t plane, int64_t h,
			 uint8_t *tile, uint64_t bytes)
{
	const uint8_t *const *rows = (const uint8_t *const *)c->rows;
	int per_channel = c->g->planes == 2 && plane == 0;
	uint64_t used = 4 + (uint64_t)(c->t * c->d);

	locate_rows(c, layer, plane, h, c->zero);
	if (c->codec == KVT_CODEC_FP8_E4M3) {
		if (!c->simd || c->dtype != KVT_DTYPE_BFLOAT16 ||
		    !c->simd->fp8_gather_bf16(rows, c->t, c->d, tile, c->tops[h]))
			fp8_gather_tile(rows, c->t, c->d, tile, c->dtype);
	} else if (c->simd && c->dtype == KVT_DTYPE_BFLOAT16) {
		used = c->simd->int4_gather_bf16(rows, c->t, c->d, per_channel, tile, c->pa, c->pb,
						 c->scratch);
	} else {
		used = int4_gather_tile(rows, c->t, c->d, per_channel, tile, c->pa, c->pb,
					c->keys, c->dtype);
	}
	memset(tile + used, 0, bytes - used);
}

static void scatter_fused(struct codec_ctx *c, int64_t layer, int64_t plane, int64_t h,
			  const uint8_t *tile)
{
	int per_channel = c->g->planes == 2 && plane == 0;

	locate_rows(c, layer, plane, h, NULL);
	if (c->codec == KVT_CODEC_FP8_E4M3) {
		if (c->simd && c->dtype != KVT_DTYPE_FLOAT32)
			c->simd->fp8_scatter_16(c->rows, c->t, c->d, tile, c->dtype);
		else
			fp8_scatter_tile(c->rows, c->t, c->d, tile, c->dtype);
	} else if (!c->simd || c->dtype != KVT_DTYPE_BFLOAT16 ||
		   !c->simd->int4_scatter_bf16(c->rows, c->t, c->d, per_channel, tile, c->pa,
					       c->pb, c->scratch)) {
		int4_scatter_tile(c->rows, c->t, c->d, per_channel, tile, c->pa, c->pb, c->dtype);
	}
}

/*
 * The vector fp8 path's first pass, over a whole (layer, plane) at its
 * first tile: every head's largest |x|, the rows read token by token,
 * which in a layout whose heads lie side by side is the order of the
 * addresses, and the memory streams them; each tile's second pass then
 * reads its rows from the caches.
 */
static void region_tops(struct codec_ctx *c, int64_t layer, int64_t plane)
{
	const struct kvt_geom *g = c->g;
	const uint8_t *base = c->base[kvt_geom_base_index(g, layer, plane)];

	for (int64_t t = 0; t < c->t; t++)
		for (int64_t h = 0; h < g->heads; h++)
			c->region[t * g->heads + h] =
				c->page[t] < 0 ? c->zero
					       : base + kvt_geom_engine_offset(g, plane, c->page[t],
									       c->token[t], h);
	c->simd->bf16_tops(c->region, c->t, g->heads, c->d, c->tops);
}

/* Where block b's tokens live. */
static void locate_block(struct codec_ctx *c, const int64_t *indices, int64_t b)
{
	for (int64_t t = 0; t < c->t; t++)
		if (kvt_geom_locate(c->g, indices, b, t, &c->page[t], &c->token[t]) !=
		    KVT_GEOM_TOKEN)
			c->page[t] = -1;
}

int kvt_codec_geom_init(const struct kvt_geom *g, uint32_t codec, uint32_t dtype,
			struct kvt_codec_geom *ret)
{
	uint32_t eb = kvt_codec_dtype_bytes(dtype);
	struct kvt_codec_geom cg = {.g = *g, .codec = codec, .dtype = dtype, .max_pairs = 1};
	uint64_t bytes;

	if (codec == KVT_CODEC_NONE || !kvt_codec_name(codec) || eb == 0 ||
	    g->head_bytes % eb || g->block_tokens > UINT32_MAX)
		return -EINVAL;
	cg.elem_bytes = eb;
	cg.d = g->head_bytes / eb;
	for (int64_t p = 0; p < g->planes; p++)
		cg.tile[p] = (int64_t)kvt_codec_tile_bytes(codec, g->planes == 2 && p == 0,
							   (uint32_t)g->block_tokens, (uint32_t)cg.d);
	if (__builtin_mul_overflow((uint64_t)g->heads, (uint64_t)(cg.tile[0] + cg.tile[1]),
				   &bytes) ||
	    __builtin_mul_overflow(bytes, (uint64_t)g->n_layers, &bytes) || bytes > INT64_MAX)
		return -EINVAL;
	cg.layer_bytes = g->heads * (cg.tile[0] + cg.tile[1]);
	if (codec == KVT_CODEC_INT4) {
		int64_t v = g->block_tokens * (cg.d / kvt_int4_group((uint32_t)cg.d));

		cg.max_pairs = g->planes == 2 && cg.d > v ? cg.d : v;
	}
	*ret = cg;
	return 0;
}

uint64_t kvt_codec_block_bytes(const struct kvt_geom *g, uint32_t codec, uint32_t dtype)
{
	struct kvt_codec_geom cg;

	if (kvt_codec_geom_init(g, codec, dtype, &cg) < 0)
		return 0;
	return (uint64_t)(cg.layer_bytes * g->n_layers);
}

int kvt_codec_copy(const struct kvt_geom *g, void *const *base, uint32_t codec,
		   uint32_t dtype, const int64_t *indices, size_t n_blocks, int to_block,
		   void *const *dst, const void *const *src)
{
	struct codec_ctx c = {.g = g, .base = base, .codec = codec, .dtype = dtype,
			      .t = g->block_tokens};
	struct kvt_codec_geom cg;
	int r = 0;

	if (kvt_codec_geom_init(g, codec, dtype, &cg) < 0)
		return -EINVAL;
	c.d = cg.d;
	c.tile[0] = (uint64_t)cg.tile[0];
	c.tile[1] = (uint64_t)cg.tile[1];
	/* T * D floats are fewer bytes than a block of the cache's own. */
	c.page = malloc((size_t)c.t * sizeof(int64_t));
	c.token = malloc((size_t)c.t * sizeof(int64_t));
	c.x = malloc((size_t)(c.t * c.d) * sizeof(float));
	c.q = malloc((size_t)(c.t * c.d));
	/* int4's pairs: D (K), or T * D / G (V), fewer than T * D. */
	c.pa = malloc((size_t)(c.t * c.d) * sizeof(float));
	c.pb = malloc((size_t)(c.t * c.d) * sizeof(float));
	c.rows = malloc((size_t)c.t * sizeof(*c.rows));
	c.zero = calloc((size_t)c.d, cg.elem_bytes);
	c.keys = malloc((size_t)(2 * c.d) * sizeof(int32_t));
	c.simd = kvt_codec_simd_table(kvt_codec_cpu_isa());
	c.scratch = malloc((size_t)(8 * c.d) * sizeof(float));
	if (c.simd && codec == KVT_CODEC_FP8_E4M3 && dtype == KVT_DTYPE_BFLOAT16 && to_block) {
		c.region = malloc((size_t)(c.t * g->heads) * sizeof(*c.region));
		c.tops = malloc((size_t)g->heads * sizeof(*c.tops));
		if (!c.region || !c.tops) {
			r = -ENOMEM;
			goto finish;
		}
	}
	if (!c.page || !c.token || !c.x || !c.q || !c.pa || !c.pb || !c.rows || !c.zero ||
	    !c.keys || !c.scratch) {
		r = -ENOMEM;
		goto finish;
	}

	for (size_t b = 0; b < n_blocks; b++) {
		uint8_t *block = to_block ? (uint8_t *)dst[b] : (uint8_t *)src[b];

		locate_block(&c, indices, (int64_t)b);
		/* Tiles in [layer][plane][head] order, back to back. */
		for (int64_t l = 0; l < g->n_layers; l++)
			for (int64_t p = 0; p < g->planes; p++)
				for (int64_t h = 0; h < g->heads; h++) {
					int per_channel = g->planes == 2 && p == 0;

					if (h == 0 && c.region && tile_fused(&c, p) && to_block)
						region_tops(&c, l, p);
					if (tile_fused(&c, p) && to_block) {
						gather_fused(&c, l, p, h, block, c.tile[p]);
					} else if (tile_fused(&c, p)) {
						scatter_fused(&c, l, p, h, block);
					} else if (to_block) {
						read_tile(&c, l, p, h);
						encode_tile(&c, per_channel, block, c.tile[p]);
					} else {
						decode_tile(&c, per_channel, block);
						write_tile(&c, l, p, h);
					}
					block += c.tile[p];
				}
	}

finish:
	free(c.page);
	free(c.token);
	free(c.x);
	free(c.q);
	free(c.pa);
	free(c.pb);
	free(c.rows);
	free(c.zero);
	free(c.keys);
	free(c.scratch);
	free(c.region);
	free(c.tops);
	return r;
}
