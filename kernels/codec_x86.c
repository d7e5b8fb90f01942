/* SPDX-License-Identifier: Apache-2.0 */
/*
 * codec_simd.h's vector code for x86: AVX-512 (F, BW, VL, DQ), each
 * function compiled for it alone (a target attribute), so that the rest
 * of the library runs on any x86-64.
 *
 * Every step is codec_elem.h's, on vectors: the same integer arithmetic
 * on the same bits, and the same float operations (one rounding each; the
 * library is built with -ffp-contract=off, so that no multiplication and
 * addition fuse).  Where codec_elem.h selects, a compare and a blend
 * select here; float minima and maxima are written as codec_elem.h's
 * selects are (minps(a, b) is a < b ? a : b, NaNs included).
 *
 * Two things are done differently, to the same bytes:
 *   - fp8-e4m3 decoding into a half dtype looks each code up in a table
 *     of its 256 values, made per tile by the vector conversions: a
 *     tile's 16-bit result depends on its code and the tile's scale
 *     alone.
 *   - Ranges are taken on codec_cpu.c's order-preserving 16-bit keys,
 *     as there.
 * A tile where a value is not a number (a NaN or an infinity in the data,
 * or in a tile's stored scale or pairs) is left to the portable loops,
 * which also read it only once the vector code has written nothing.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "codec.h"
#include "codec_elem.h"
#include "codec_simd.h"
#include "kvtier-layout.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"), unused))
#define AVX512_INLINE static inline __attribute__((always_inline)) AVX512

/* ---- AVX-512: codec_elem.h's conversions on 16 lanes --------------- */

/* The lanes below n of 16 and of 32. */
AVX512_INLINE __mmask16 mask16(int64_t n)
{
	return n >= 16 ? (__mmask16)0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1);
}

AVX512_INLINE __mmask32 mask32(int64_t n)
{
	return n >= 32 ? (__mmask32)0xffffffffu : n <= 0 ? 0 : (__mmask32)((1u << n) - 1);
}

/*
 * Loads and stores of the lanes of a mask: a whole vector's without the
 * mask (a branch the loops predict), since masked stores, and narrowing
 * moves to memory, are slow on some CPUs (AMD's Zen 4).
 */
#define FULL16 ((__mmask16)0xffff)
#define FULL32 ((__mmask32)0xffffffffu)

AVX512_INLINE __m512i ld_w32(__mmask32 k, const void *p)
{
	return k == FULL32 ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi16(k, p);
}

AVX512_INLINE __m256i ld_w16(__mmask16 k, const void *p)
{
	return k == FULL16 ? _mm256_loadu_si256((const __m256i *)p) : _mm256_maskz_loadu_epi16(k, p);
}

AVX512_INLINE __m256i ld_b32(__mmask32 k, const void *p)
{
	return k == FULL32 ? _mm256_loadu_si256((const __m256i *)p) : _mm256_maskz_loadu_epi8(k, p);
}

AVX512_INLINE __m128i ld_b16(__mmask16 k, const void *p)
{
	return k == FULL16 ? _mm_loadu_si128((const __m128i *)p) : _mm_maskz_loadu_epi8(k, p);
}

AVX512_INLINE __m512i ld_d16(__mmask16 k, const void *p)
{
	return k == FULL16 ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi32(k, p);
}

AVX512_INLINE __m512 ld_ps(__mmask16 k, const float *p)
{
	return k == FULL16 ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(k, p);
}

AVX512_INLINE void st_w32(void *p, __mmask32 k, __m512i v)
{
	if (k == FULL32)
		_mm512_storeu_si512(p, v);
	else
		_mm512_mask_storeu_epi16(p, k, v);
}

AVX512_INLINE void st_d16(void *p, __mmask16 k, __m512i v)
{
	if (k == FULL16)
		_mm512_storeu_si512(p, v);
	else
		_mm512_mask_storeu_epi32(p, k, v);
}

AVX512_INLINE void st_ps(float *p, __mmask16 k, __m512 v)
{
	if (k == FULL16)
		_mm512_storeu_ps(p, v);
	else
		_mm512_mask_storeu_ps(p, k, v);
}

/* The low byte of each lane. */
AVX512_INLINE void st_bytes(void *p, __mmask16 k, __m512i v)
{
	__m128i b = _mm512_cvtepi32_epi8(v);

	if (k == FULL16)
		_mm_storeu_si128((__m128i *)p, b);
	else
		_mm_mask_storeu_epi8(p, k, b);
}

#define I32(x) _mm512_set1_epi32((int32_t)(x))
#define I16(x) _mm512_set1_epi16((int16_t)(x))
#define F32(x) _mm512_set1_ps(x)

/* kvt_f16_to_f32() */
AVX512_INLINE __m512 v_f16_to_f32(__m512i h)
{
	__m512i sign = _mm512_slli_epi32(_mm512_and_si512(h, I32(0x8000)), 16);
	__m512i e = _mm512_and_si512(_mm512_srli_epi32(h, 10), I32(0x1f));
	__m512i m = _mm512_and_si512(h, I32(0x3ff));
	__m512i normal = _mm512_or_si512(_mm512_slli_epi32(_mm512_add_epi32(e, I32(112)), 23),
					 _mm512_slli_epi32(m, 13));
	__m512i special = _mm512_or_si512(I32(0x7f800000), _mm512_slli_epi32(m, 13));
	__m512i sub = _mm512_castps_si512(_mm512_mul_ps(_mm512_cvtepi32_ps(m), F32(0x1p-24f)));
	__m512i bits = _mm512_mask_blend_epi32(_mm512_cmpeq_epi32_mask(e, I32(31)), normal, special);

	bits = _mm512_mask_blend_epi32(_mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512()), bits, sub);
	return _mm512_castsi512_ps(_mm512_or_si512(bits, sign));
}

/* kvt_f32_to_f16(), in the low 16 bits of each lane */
AVX512_INLINE __m512i v_f32_to_f16(__m512 f)
{
	__m512i u = _mm512_castps_si512(f);
	__m512i sign = _mm512_and_si512(_mm512_srli_epi32(u, 16), I32(0x8000));
	__m512i a = _mm512_and_si512(u, I32(0x7fffffff));
	__m512i odd = _mm512_and_si512(_mm512_srli_epi32(a, 13), I32(1));
	__m512i normal = _mm512_sub_epi32(
		_mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(a, I32(0xfff)), odd), 13),
		I32(112 << 10));
	__m512i sub = _mm512_sub_epi32(
		_mm512_castps_si512(_mm512_add_ps(_mm512_castsi512_ps(a), F32(0.5f))),
		_mm512_castps_si512(F32(0.5f)));
	__m512i h = _mm512_mask_blend_epi32(_mm512_cmplt_epi32_mask(a, I32(0x38800000)), normal, sub);

	h = _mm512_min_epi32(h, I32(0x7c00));
	h = _mm512_or_si512(h, sign);
	return _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q), h, I32(0x7e00));
}

/* kvt_f32_to_f16_sat() */
AVX512_INLINE __m512i v_f32_to_f16_sat(__m512 f)
{
	f = _mm512_min_ps(f, F32(65504.0f));
	f = _mm512_max_ps(f, F32(-65504.0f));
	return v_f32_to_f16(f);
}

/* kvt_f32_to_bf16(), in the low 16 bits of each lane */
AVX512_INLINE __m512i v_f32_to_bf16(__m512 f)
{
	__m512i u = _mm512_castps_si512(f), hi = _mm512_srli_epi32(u, 16);
	__m512i r = _mm512_srli_epi32(
		_mm512_add_epi32(_mm512_add_epi32(u, I32(0x7fff)), _mm512_and_si512(hi, I32(1))), 16);

	return _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q), r,
				       _mm512_or_si512(hi, I32(0x40)));
}

/* The same of a value that is not a NaN. */
AVX512_INLINE __m512i v_bf16_of_number(__m512 f)
{
	__m512i u = _mm512_castps_si512(f);

	return _mm512_srli_epi32(
		_mm512_add_epi32(_mm512_add_epi32(u, I32(0x7fff)),
				 _mm512_and_si512(_mm512_srli_epi32(u, 16), I32(1))),
		16);
}

/* kvt_e4m3_decode() of the low byte of each lane */
AVX512_INLINE __m512 v_e4m3_decode(__m512i c)
{
	__m512i v = _mm512_and_si512(c, I32(0x7f));
	__m512i normal = _mm512_add_epi32(_mm512_slli_epi32(v, 20), I32(120u << 23));
	__m512i sub = _mm512_castps_si512(_mm512_mul_ps(_mm512_cvtepi32_ps(v), F32(0x1p-9f)));
	__m512i bits = _mm512_mask_blend_epi32(_mm512_cmplt_epi32_mask(v, I32(8)), normal, sub);

	bits = _mm512_or_si512(bits, _mm512_slli_epi32(_mm512_and_si512(c, I32(0x80)), 24));
	bits = _mm512_mask_blend_epi32(_mm512_cmpeq_epi32_mask(v, I32(0x7f)), bits, I32(0x7fc00000));
	return _mm512_castsi512_ps(bits);
}

/*
 * codec_cpu.c's e4m3_encode_magnitude() with the sign of the bfloat16 h
 * (the low 16 bits of each lane), for y = |h| * inv >= 0, not a NaN.
 */
AVX512_INLINE __m512i v_e4m3_encode_mag(__m512 y)
{
	__m512i m = _mm512_min_epi32(_mm512_castps_si512(y), I32(0x43e00000));
	__m512i odd = _mm512_and_si512(_mm512_srli_epi32(m, 20), I32(1));
	__m512i normal = _mm512_srli_epi32(
		_mm512_add_epi32(_mm512_add_epi32(m, I32(0x7ffffu - (120u << 23))), odd), 20);
	__m512i sub = _mm512_sub_epi32(
		_mm512_castps_si512(_mm512_add_ps(_mm512_castsi512_ps(m), F32(16384.0f))),
		_mm512_castps_si512(F32(16384.0f)));

	return _mm512_mask_blend_epi32(_mm512_cmplt_epi32_mask(m, I32(0x3c800000)), normal, sub);
}

AVX512_INLINE __m512i v_e4m3_encode_signed(__m512 y, __m512i h)
{
	__m512i m = _mm512_min_epi32(_mm512_castps_si512(y), I32(0x43e00000));
	__m512i odd = _mm512_and_si512(_mm512_srli_epi32(m, 20), I32(1));
	__m512i normal = _mm512_srli_epi32(
		_mm512_add_epi32(_mm512_add_epi32(m, I32(0x7ffffu - (120u << 23))), odd), 20);
	__m512i sub = _mm512_sub_epi32(
		_mm512_castps_si512(_mm512_add_ps(_mm512_castsi512_ps(m), F32(16384.0f))),
		_mm512_castps_si512(F32(16384.0f)));
	__m512i c = _mm512_mask_blend_epi32(_mm512_cmplt_epi32_mask(m, I32(0x3c800000)), normal, sub);

	/* c | (h >> 8) & 0x80 */
	return _mm512_ternarylogic_epi32(c, _mm512_srli_epi32(h, 8), I32(0x80), 0xf8);
}

/* kvt_int4_code() of 16 values against their (min, 1 / scale) */
AVX512_INLINE __m512i v_int4_code(__m512 x, __m512 min, __m512 inv)
{
	__m512 y = _mm512_mul_ps(_mm512_sub_ps(x, min), inv);

	y = _mm512_max_ps(y, _mm512_setzero_ps()); /* y > 0 ? y : 0 */
	y = _mm512_min_ps(y, F32(15.0f));           /* y < 15 ? y : 15 */
	return _mm512_cvttps_epi32(_mm512_add_ps(y, F32(0.5f)));
}

/* codec_cpu.c's half_key() of 32 bfloat16s, its own inverse */
AVX512_INLINE __m512i v_half_key(__m512i h)
{
	/* h ^ ((h >> 15, arithmetic) & 0x7fff) */
	return _mm512_ternarylogic_epi32(h, _mm512_srai_epi16(h, 15), I16(0x7fff), 0x78);
}

/* The smallest and the largest of 8 signed 16-bit lanes. */
AVX512_INLINE int16_t hmin_epi16(__m128i x)
{
	__m128i flip = _mm_set1_epi16((int16_t)0x8000);

	return (int16_t)((_mm_cvtsi128_si32(_mm_minpos_epu16(_mm_xor_si128(x, flip))) & 0xffff) ^
			 0x8000);
}

AVX512_INLINE int16_t hmax_epi16(__m128i x)
{
	return (int16_t)~hmin_epi16(_mm_xor_si128(x, _mm_set1_epi16(-1)));
}

/*
 * (scale, min) pairs of n ranges (kvt_int4_pair()): the words to
 * words[k], and lo[k], hi[k] become the min and 1 / scale.
 */
AVX512_INLINE void v_int4_pairs(float *lo, float *hi, int64_t n, uint8_t *words)
{
	for (int64_t k = 0; k < n; k += 16) {
		__mmask16 km = mask16(n - k);
		__m512 l = ld_ps(km, lo + k), h = ld_ps(km, hi + k);
		__mmask16 ok = _mm512_cmp_ps_mask(l, h, _CMP_LE_OQ);
		__m512 l0 = _mm512_maskz_add_ps(ok, l, _mm512_setzero_ps());
		__m512 h0 = _mm512_maskz_add_ps(ok, h, _mm512_setzero_ps());
		__m512i s = v_f32_to_f16_sat(_mm512_div_ps(_mm512_sub_ps(h0, l0), F32(15.0f)));
		__m512i m = v_f32_to_f16_sat(l0);
		__m512 scale = v_f16_to_f32(s), min = v_f16_to_f32(m);
		__mmask16 pos = _mm512_cmp_ps_mask(scale, _mm512_setzero_ps(), _CMP_GT_OQ);
		__m512 inv = _mm512_maskz_div_ps(pos, F32(1.0f), scale);

		st_d16(words + 4 * k, km,
					 _mm512_or_si512(s, _mm512_slli_epi32(m, 16)));
		st_ps(lo + k, km, min);
		st_ps(hi + k, km, inv);
	}
}

/* n pairs (words) into min[k] and scale[k]; 0 where one of them is not a
 * number (a half of exponent 31). */
AVX512_INLINE int v_int4_unpairs(const uint8_t *words, int64_t n, float *min, float *scale)
{
	for (int64_t k = 0; k < n; k += 16) {
		__mmask16 km = mask16(n - k);
		__m512i w = ld_d16(km, words + 4 * k);

		if (_mm512_cmpeq_epi16_mask(_mm512_and_si512(w, I16(0x7c00)), I16(0x7c00)))
			return 0;
		st_ps(scale + k, km, v_f16_to_f32(_mm512_and_si512(w, I32(0xffff))));
		st_ps(min + k, km, v_f16_to_f32(_mm512_srli_epi32(w, 16)));
	}
	return 1;
}

/* a[0..2n) into its even elements (ev[n]) and its odd ones (od[n]) */
AVX512_INLINE void v_deinterleave(const float *a, int64_t n, float *ev, float *od)
{
	const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
					     28, 30);
	const __m512i io = _mm512_add_epi32(ie, I32(1));

	for (int64_t i = 0; i < n; i += 16) {
		__mmask16 k0 = mask16(2 * (n - i)), k1 = mask16(2 * (n - i) - 16);
		__m512 x0 = ld_ps(k0, a + 2 * i);
		__m512 x1 = 2 * (n - i) > 16 ? ld_ps(k1, a + 2 * i + 16)
					     : _mm512_setzero_ps();
		__mmask16 km = mask16(n - i);

		st_ps(ev + i, km, _mm512_permutex2var_ps(x0, ie, x1));
		st_ps(od + i, km, _mm512_permutex2var_ps(x0, io, x1));
	}
}

/* ---- AVX-512: fp8-e4m3 ---------------------------------------------- */

/* The encoder's code of a bfloat16 magnitude a (bits) against inv. */
static uint8_t e4m3_code_of(uint16_t a, float inv)
{
	uint32_t m = kvt_f32_bits(kvt_bf16_to_f32(a) * inv), normal, sub;

	m = m < 0x43e00000 ? m : 0x43e00000;
	normal = (m + (0x7ffffu - (120u << 23)) + ((m >> 20) & 1)) >> 20;
	sub = kvt_f32_bits(kvt_f32_from_bits(m) + 16384.0f) - kvt_f32_bits(16384.0f);
	return (uint8_t)(m < 0x3c800000 ? sub : normal);
}

/* The smallest bfloat16 magnitude a <= 0x7f80 for which ge(a) holds, ge
 * false below it and true from it on. */
#define FIRST_BF16(ret, ge)                                                                \
	do {                                                                               \
		uint32_t lo_ = 0, hi_ = 0x7f80;                                            \
		while (lo_ < hi_) {                                                        \
			uint16_t a = (uint16_t)((lo_ + hi_) / 2);                          \
			if (ge)                                                            \
				hi_ = a;                                                   \
			else                                                               \
				lo_ = (uint32_t)a + 1;                                     \
		}                                                                          \
		(ret) = (uint16_t)lo_;                                                     \
	} while (0)

/*
 * The codes of a tile's bfloat16 numbers on 16-bit lanes, by a table of
 * the mantissa's 128 values: where y = |x| * inv is a normal E4M3 number
 * (y >= 2^-6) and |x| a normal bfloat16, y's bits are those of
 * (1.m * inv') plus the exponents of |x| and of inv (1.m * inv' in
 * [1, 4) rounds alike at any scale), so that its rounded code is
 * table[m] + 8 * exponent, and codes only go up with |x|: saturating at
 * 448 is a minimum of the codes.  Below y's 2^-6 (|x| under a threshold
 * found once per tile), codes of 0 (under a second one) and E4M3's
 * subnormals, taken with the 32-bit steps where a vector has any.
 * Returns 0 where |x| that are not normal reach 2^-6 (a tile of tiny
 * numbers): the 32-bit steps then do the whole tile.
 */
static AVX512 int fp8_codes_bf16_table(const uint8_t *const *rows, int64_t T, int64_t D,
				       uint8_t *q, float inv)
{
	_Alignas(64) int16_t tab[128];
	uint32_t ib = kvt_f32_bits(inv), ie = (ib >> 23) & 0xff;
	float inv1 = kvt_f32_from_bits((ib & 0x007fffff) | (127u << 23));
	uint16_t h_sub, h_zero;
	__m512i t0, t1, t2, t3, vz, vs;

	FIRST_BF16(h_sub, kvt_bf16_to_f32(a) * inv >= 0x1p-6f);
	if (h_sub < 0x80 || ie == 0)
		return 0;
	FIRST_BF16(h_zero, e4m3_code_of(a, inv) >= 1);
	for (int m = 0; m < 128; m++) {
		uint32_t p = kvt_f32_bits(kvt_f32_from_bits(0x3f800000u | (uint32_t)m << 16) * inv1);

		tab[m] = (int16_t)((int32_t)((p + 0x7ffff + ((p >> 20) & 1)) >> 20) +
				   8 * ((int32_t)ie - 374));
	}
	t0 = _mm512_load_si512(tab);
	t1 = _mm512_load_si512(tab + 32);
	t2 = _mm512_load_si512(tab + 64);
	t3 = _mm512_load_si512(tab + 96);
	vz = I16(h_zero);
	vs = I16(h_sub);
	for (int64_t t = 0; t < T; t++) {
		const uint8_t *r = rows[t];
		uint8_t *o = q + t * D;

		for (int64_t d = 0; d < D; d += 32) {
			__mmask32 k = mask32(D - d);
			__m512i h = ld_w32(k, r + 2 * d), a = _mm512_and_si512(h, I16(0x7fff));
			__mmask32 hi6 = _mm512_test_epi16_mask(a, I16(0x40));
			__m512i c = _mm512_mask_blend_epi16(hi6, _mm512_permutex2var_epi16(t0, a, t1),
							    _mm512_permutex2var_epi16(t2, a, t3));
			__mmask32 num = _mm512_cmpge_epu16_mask(a, vz);
			__mmask32 sub = _mm512_mask_cmplt_epu16_mask(num, a, vs);

			c = _mm512_add_epi16(c, _mm512_and_si512(_mm512_srli_epi16(a, 4), I16(0x7f8)));
			c = _mm512_maskz_min_epi16(num, c, I16(0x7e));
			if (sub) {
				/* E4M3's subnormals, on 32-bit lanes. */
				__m512i a0 = _mm512_cvtepu16_epi32(_mm512_castsi512_si256(a));
				__m512i a1 = _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(a, 1));
				__m512i c0 = v_e4m3_encode_mag(_mm512_mul_ps(
					_mm512_castsi512_ps(_mm512_slli_epi32(a0, 16)), F32(inv)));
				__m512i c1 = v_e4m3_encode_mag(_mm512_mul_ps(
					_mm512_castsi512_ps(_mm512_slli_epi32(a1, 16)), F32(inv)));
				__m512i cs = _mm512_inserti64x4(_mm512_castsi256_si512(
									_mm512_cvtepi32_epi16(c0)),
								_mm512_cvtepi32_epi16(c1), 1);

				c = _mm512_mask_mov_epi16(c, sub, cs);
			}
			/* c | (h >> 8) & 0x80 */
			c = _mm512_ternarylogic_epi32(c, _mm512_srli_epi16(h, 8), I16(0x80), 0xf8);
			if (k == FULL32)
				_mm256_storeu_si256((__m256i *)(o + d), _mm512_cvtepi16_epi8(c));
			else
				_mm256_mask_storeu_epi8(o + d, k, _mm512_cvtepi16_epi8(c));
		}
	}
	return 1;
}

/* codec_cpu.c's rows_abs_bits_bf16() of H tiles at once. */
static AVX512 void bf16_tops_avx512(const uint8_t *const *rows, int64_t T, int64_t H, int64_t D,
				    uint16_t *top)
{
	for (int64_t h = 0; h < H; h++)
		top[h] = 0;
	for (int64_t t = 0; t < T; t++)
		for (int64_t h = 0; h < H; h++) {
			const uint8_t *r = rows[t * H + h];
			__m512i m = _mm512_setzero_si512();
			__m256i m2;
			__m128i m1;
			uint16_t v;

			for (int64_t d = 0; d < D; d += 32) {
				__m512i x = ld_w32(mask32(D - d), r + 2 * d);

				m = _mm512_max_epu16(m, _mm512_and_si512(x, I16(0x7fff)));
			}
			m2 = _mm256_max_epu16(_mm512_castsi512_si256(m),
					      _mm512_extracti64x4_epi64(m, 1));
			m1 = _mm_max_epu16(_mm256_castsi256_si128(m2),
					   _mm256_extracti128_si256(m2, 1));
			/* |x|'s bits are below 0x8000: their largest is the
			 * smallest of 0x7fff - bits. */
			v = (uint16_t)(0x7fff - (_mm_cvtsi128_si32(_mm_minpos_epu16(_mm_sub_epi16(
							 _mm_set1_epi16(0x7fff), m1))) &
						 0xffff));
			top[h] = v > top[h] ? v : top[h];
		}
}

/* codec_cpu.c's fp8_gather_numbers_bf16() */
static AVX512 int fp8_gather_bf16_avx512(const uint8_t *const *rows, int64_t T, int64_t D,
					 uint8_t *tile, uint16_t top)
{
	float scale, inv;
	uint8_t *q = tile + 4;

	scale = kvt_fp8_scale(kvt_bf16_to_f32(top));
	inv = 1.0f / scale;
	if (top >= 0x7f80 || scale == 0.0f || isinf(inv))
		return 0;
	memcpy(tile, &scale, 4);
	if (fp8_codes_bf16_table(rows, T, D, q, inv))
		return 1;
	for (int64_t t = 0; t < T; t++) {
		const uint8_t *r = rows[t];
		uint8_t *o = q + t * D;

		for (int64_t d = 0; d < D; d += 16) {
			__mmask16 k = mask16(D - d);
			__m512i h = _mm512_cvtepu16_epi32(ld_w16(k, r + 2 * d));
			__m512 x = _mm512_castsi512_ps(
				_mm512_slli_epi32(_mm512_and_si512(h, I32(0x7fff)), 16));

			st_bytes(
				o + d, k, v_e4m3_encode_signed(_mm512_mul_ps(x, F32(inv)), h));
		}
	}
	return 1;
}

/* fp8_scatter_rows() of a half dtype: each code's 16 bits from a table
 * of the 256, which kvt_e4m3_decode(c) * scale in the dtype fills. */
static AVX512 void fp8_scatter_16_avx512(uint8_t *const *rows, int64_t T, int64_t D,
					 const uint8_t *tile, uint32_t dtype)
{
	_Alignas(64) uint16_t tab[256];
	__m512i t[8];
	const uint8_t *q = tile + 4;
	float scale;

	memcpy(&scale, tile, 4);
	for (int c = 0; c < 256; c += 16) {
		__m512i code = _mm512_add_epi32(
			_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), I32(c));
		__m512 x = _mm512_mul_ps(v_e4m3_decode(code), F32(scale));
		__m512i h = dtype == KVT_DTYPE_BFLOAT16 ? v_f32_to_bf16(x) : v_f32_to_f16(x);

		_mm256_store_si256((__m256i *)(tab + c), _mm512_cvtepi32_epi16(h));
	}
	for (int j = 0; j < 8; j++)
		t[j] = _mm512_load_si512(tab + 32 * j);
	for (int64_t tk = 0; tk < T; tk++) {
		uint8_t *r = rows[tk];
		const uint8_t *c = q + tk * D;

		if (!r)
			continue;
		for (int64_t d = 0; d < D; d += 32) {
			__mmask32 k = mask32(D - d);
			__m512i idx = _mm512_cvtepu8_epi16(ld_b32(k, c + d));
			__mmask32 b6 = _mm512_test_epi16_mask(idx, I16(0x40));
			__mmask32 b7 = _mm512_test_epi16_mask(idx, I16(0x80));
			__m512i lo = _mm512_mask_blend_epi16(b6, _mm512_permutex2var_epi16(t[0], idx, t[1]),
							     _mm512_permutex2var_epi16(t[2], idx, t[3]));
			__m512i hi = _mm512_mask_blend_epi16(b6, _mm512_permutex2var_epi16(t[4], idx, t[5]),
							     _mm512_permutex2var_epi16(t[6], idx, t[7]));

			st_w32(r + 2 * d, k, _mm512_mask_blend_epi16(b7, lo, hi));
		}
	}
}

/* ---- AVX-512: int4 --------------------------------------------------- */

/* The keys' range of elements e0 .. e0 + n - 1 of a bfloat16 row, into
 * *lo and *hi (codec_cpu.c's row_half_range() before its conversion). */
AVX512_INLINE void bf16_key_range(const uint8_t *row, int64_t e0, int64_t n, int16_t *ret_lo,
				  int16_t *ret_hi)
{
	__m512i lo = I16(0x7f80), hi = I16(0x807f); /* half_key(0xff80) */
	__m256i l2, h2;

	for (int64_t i = 0; i < n; i += 32) {
		__mmask32 k = mask32(n - i);
		__m512i h = ld_w32(k, row + 2 * (e0 + i));
		__mmask32 num = _mm512_mask_cmple_epu16_mask(
			k, _mm512_and_si512(h, I16(0x7fff)), I16(0x7f80));
		__m512i key = v_half_key(h);

		lo = _mm512_mask_min_epi16(lo, num, lo, key);
		hi = _mm512_mask_max_epi16(hi, num, hi, key);
	}
	l2 = _mm256_min_epi16(_mm512_castsi512_si256(lo), _mm512_extracti64x4_epi64(lo, 1));
	h2 = _mm256_max_epi16(_mm512_castsi512_si256(hi), _mm512_extracti64x4_epi64(hi, 1));
	*ret_lo = hmin_epi16(_mm_min_epi16(_mm256_castsi256_si128(l2), _mm256_extracti128_si256(l2, 1)));
	*ret_hi = hmax_epi16(_mm_max_epi16(_mm256_castsi256_si128(h2), _mm256_extracti128_si256(h2, 1)));
}

static inline float key_bf16(int16_t k)
{
	uint16_t h = (uint16_t)k;

	h ^= (uint16_t)((uint16_t)((int16_t)h >> 15) >> 1);
	return kvt_bf16_to_f32(h);
}

/* A row's P bytes of codes, element 2i against (min0[i], inv0[i]) and
 * 2i + 1 against (min1[i], inv1[i]). */
AVX512_INLINE void bf16_codes(const uint8_t *r, int64_t P, uint8_t *o, const float *min0,
			      const float *inv0, const float *min1, const float *inv1)
{
	for (int64_t i = 0; i < P; i += 16) {
		__mmask16 k = mask16(P - i);
		__m512i u = ld_d16(k, r + 4 * i);
		__m512 x0 = _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
		__m512 x1 = _mm512_castsi512_ps(_mm512_and_si512(u, I32(0xffff0000u)));
		__m512i c0 = v_int4_code(x0, ld_ps(k, min0 + i),
					 ld_ps(k, inv0 + i));
		__m512i c1 = v_int4_code(x1, ld_ps(k, min1 + i),
					 ld_ps(k, inv1 + i));

		st_bytes(o + i, k,
						 _mm512_or_si512(c0, _mm512_slli_epi32(c1, 4)));
	}
}

/* The same against one (min, inv) for words i0 .. i0 + n - 1. */
AVX512_INLINE void bf16_codes_one(const uint8_t *r, int64_t i0, int64_t n, uint8_t *o, float min,
				  float inv)
{
	__m512 vm = F32(min), vi = F32(inv);

	for (int64_t i = i0; i < i0 + n; i += 16) {
		__mmask16 k = mask16(i0 + n - i);
		__m512i u = ld_d16(k, r + 4 * i);
		__m512i c0 = v_int4_code(_mm512_castsi512_ps(_mm512_slli_epi32(u, 16)), vm, vi);
		__m512i c1 = v_int4_code(
			_mm512_castsi512_ps(_mm512_and_si512(u, I32(0xffff0000u))), vm, vi);

		st_bytes(o + i, k,
						 _mm512_or_si512(c0, _mm512_slli_epi32(c1, 4)));
	}
}

/* P words of a bfloat16 row from P bytes of codes, as bf16_codes() reads
 * them. */
AVX512_INLINE void bf16_values(uint8_t *r, int64_t P, const uint8_t *c, const float *min0,
			       const float *sc0, const float *min1, const float *sc1)
{
	for (int64_t i = 0; i < P; i += 16) {
		__mmask16 k = mask16(P - i);
		__m512i b = _mm512_cvtepu8_epi32(ld_b16(k, c + i));
		__m512 q0 = _mm512_cvtepi32_ps(_mm512_and_si512(b, I32(15)));
		__m512 q1 = _mm512_cvtepi32_ps(_mm512_srli_epi32(b, 4));
		__m512 v0 = _mm512_add_ps(ld_ps(k, min0 + i),
					  _mm512_mul_ps(q0, ld_ps(k, sc0 + i)));
		__m512 v1 = _mm512_add_ps(ld_ps(k, min1 + i),
					  _mm512_mul_ps(q1, ld_ps(k, sc1 + i)));

		st_d16(r + 4 * i, k,
					 _mm512_or_si512(v_bf16_of_number(v0),
							 _mm512_slli_epi32(v_bf16_of_number(v1), 16)));
	}
}

AVX512_INLINE void bf16_values_one(uint8_t *r, int64_t i0, int64_t n, const uint8_t *c, float min,
				   float scale)
{
	__m512 vm = F32(min), vs = F32(scale);

	for (int64_t i = i0; i < i0 + n; i += 16) {
		__mmask16 k = mask16(i0 + n - i);
		__m512i b = _mm512_cvtepu8_epi32(ld_b16(k, c + i));
		__m512 v0 = _mm512_add_ps(
			vm, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(b, I32(15))), vs));
		__m512 v1 = _mm512_add_ps(
			vm, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(b, 4)), vs));

		st_d16(r + 4 * i, k,
					 _mm512_or_si512(v_bf16_of_number(v0),
							 _mm512_slli_epi32(v_bf16_of_number(v1), 16)));
	}
}

/* codec_cpu.c's int4_gather_channels() and int4_gather_tokens() of a
 * bfloat16 tile. */
static AVX512 uint64_t int4_gather_bf16_avx512(const uint8_t *const *rows, int64_t T, int64_t D,
					       int per_channel, uint8_t *tile, float *pa,
					       float *pb, float *scratch)
{
	int64_t P = D / 2;

	if (per_channel) {
		int16_t *kl = (int16_t *)scratch, *kh = kl + D;
		float *min0 = scratch + D, *min1 = min0 + P, *inv0 = min1 + P, *inv1 = inv0 + P;
		float *lo = inv1 + P, *hi = lo + D;
		uint8_t *q = tile + 4 * D;

		for (int64_t d = 0; d < D; d += 32) {
			__mmask32 k = mask32(D - d);
			__m512i l = I16(0x7f80), h = I16(0x807f);

			for (int64_t t = 0; t < T; t++) {
				__m512i x = ld_w32(k, rows[t] + 2 * d);
				__mmask32 num = _mm512_cmple_epu16_mask(
					_mm512_and_si512(x, I16(0x7fff)), I16(0x7f80));
				__m512i key = v_half_key(x);

				l = _mm512_mask_min_epi16(l, num, l, key);
				h = _mm512_mask_max_epi16(h, num, h, key);
			}
			st_w32(kl + d, k, v_half_key(l));
			st_w32(kh + d, k, v_half_key(h));
		}
		for (int64_t d = 0; d < D; d += 16) {
			__mmask16 k = mask16(D - d);

			st_d16(
				lo + d, k,
				_mm512_slli_epi32(_mm512_cvtepu16_epi32(ld_w16(k, kl + d)),
						  16));
			st_d16(
				hi + d, k,
				_mm512_slli_epi32(_mm512_cvtepu16_epi32(ld_w16(k, kh + d)),
						  16));
		}
		v_int4_pairs(lo, hi, D, tile);
		v_deinterleave(lo, P, min0, min1);
		v_deinterleave(hi, P, inv0, inv1);
		for (int64_t t = 0; t < T; t++)
			bf16_codes(rows[t], P, q + t * P, min0, inv0, min1, inv1);
		return 4 * (uint64_t)D + (uint64_t)(T * P);
	}

	int64_t G = kvt_int4_group((uint32_t)D), NG = D / G, GP = G / 2, n_pairs = T * NG;
	uint8_t *q = tile + 4 * n_pairs;

	for (int64_t t = 0; t < T; t++)
		for (int64_t g = 0; g < NG; g++) {
			int16_t l, h;

			bf16_key_range(rows[t], g * G, G, &l, &h);
			pa[t * NG + g] = key_bf16(l);
			pb[t * NG + g] = key_bf16(h);
		}
	v_int4_pairs(pa, pb, n_pairs, tile);
	for (int64_t t = 0; t < T; t++)
		for (int64_t g = 0; g < NG; g++)
			bf16_codes_one(rows[t], g * GP, GP, q + t * P, pa[t * NG + g],
				       pb[t * NG + g]);
	return 4 * (uint64_t)n_pairs + (uint64_t)(T * P);
}

static AVX512 int int4_scatter_bf16_avx512(uint8_t *const *rows, int64_t T, int64_t D,
					   int per_channel, const uint8_t *tile, float *pa,
					   float *pb, float *scratch)
{
	int64_t P = D / 2;

	if (per_channel) {
		float *min0 = scratch, *min1 = min0 + P, *sc0 = min1 + P, *sc1 = sc0 + P;
		float *min = sc1 + P, *scale = min + D;
		const uint8_t *q = tile + 4 * D;

		if (!v_int4_unpairs(tile, D, min, scale))
			return 0;
		v_deinterleave(min, P, min0, min1);
		v_deinterleave(scale, P, sc0, sc1);
		for (int64_t t = 0; t < T; t++)
			if (rows[t])
				bf16_values(rows[t], P, q + t * P, min0, sc0, min1, sc1);
		return 1;
	}

	int64_t G = kvt_int4_group((uint32_t)D), NG = D / G, GP = G / 2, n_pairs = T * NG;
	const uint8_t *q = tile + 4 * n_pairs;

	if (!v_int4_unpairs(tile, n_pairs, pa, pb))
		return 0;
	for (int64_t t = 0; t < T; t++)
		if (rows[t])
			for (int64_t g = 0; g < NG; g++)
				bf16_values_one(rows[t], g * GP, GP, q + t * P, pa[t * NG + g],
						pb[t * NG + g]);
	return 1;
}

static const struct kvt_codec_simd simd_avx512 = {
	.bf16_tops = bf16_tops_avx512,
	.fp8_gather_bf16 = fp8_gather_bf16_avx512,
	.fp8_scatter_16 = fp8_scatter_16_avx512,
	.int4_gather_bf16 = int4_gather_bf16_avx512,
	.int4_scatter_bf16 = int4_scatter_bf16_avx512,
};

static int have_avx512(void)
{
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
	       __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}

const struct kvt_codec_simd *kvt_codec_simd_table(int isa)
{
	switch (isa) {
	case KVT_CODEC_ISA_AVX512:
		return have_avx512() ? &simd_avx512 : NULL;
	default:
		return NULL;
	}
}

#else /* not x86-64 */

const struct kvt_codec_simd *kvt_codec_simd_table(int isa)
{
	(void)isa;
	return NULL;
}

#endif
