/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The codecs' scalar conversions (proto/codec.h's bytes), one definition
 * for the CPU path (codec_cpu.c) and the GPU's (codec_tile.h, compiled by
 * nvcc for the device and, in the tests, for the host).
 *
 * Conversions are bit arithmetic and selects, so that codec_cpu.c's loops
 * vectorise.  Every float operation that rounds goes through KVT_FMUL and
 * friends: on the device they are the _rn intrinsics, which nvcc never
 * contracts into an FMA; on the host, plain operators in files compiled
 * with -ffp-contract=off.  Both sides then round every step alike and
 * code the same bytes.
 */
#ifndef KVT_CODEC_ELEM_H
#define KVT_CODEC_ELEM_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kvtier-layout.h" /* KVT_DTYPE_* */

#ifdef __CUDACC__
#define KVT_CODEC_FN __host__ __device__ __forceinline__
#else
#define KVT_CODEC_FN static inline __attribute__((always_inline))
#endif

#ifdef __CUDA_ARCH__
#define KVT_FMUL(a, b) __fmul_rn((a), (b))
#define KVT_FADD(a, b) __fadd_rn((a), (b))
#define KVT_FSUB(a, b) __fsub_rn((a), (b))
#define KVT_FDIV(a, b) __fdiv_rn((a), (b))
#else
#define KVT_FMUL(a, b) ((a) * (b))
#define KVT_FADD(a, b) ((a) + (b))
#define KVT_FSUB(a, b) ((a) - (b))
#define KVT_FDIV(a, b) ((a) / (b))
#endif

KVT_CODEC_FN uint32_t kvt_f32_bits(float f)
{
#ifdef __CUDA_ARCH__
	return __float_as_uint(f);
#else
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
#endif
}

KVT_CODEC_FN float kvt_f32_from_bits(uint32_t u)
{
#ifdef __CUDA_ARCH__
	return __uint_as_float(u);
#else
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
#endif
}

KVT_CODEC_FN float kvt_bf16_to_f32(uint16_t h)
{
	return kvt_f32_from_bits((uint32_t)h << 16);
}

KVT_CODEC_FN uint16_t kvt_f32_to_bf16(float f)
{
	uint32_t u = kvt_f32_bits(f), r = (u + 0x7fff + ((u >> 16) & 1)) >> 16;

	/* A NaN stays a (quiet) NaN rather than rounding into infinity. */
	return (uint16_t)(f != f ? (u >> 16) | 0x40 : r);
}

KVT_CODEC_FN float kvt_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
	uint32_t normal = ((e + 112) << 23) | (m << 13);
	uint32_t special = 0x7f800000 | (m << 13);
	uint32_t sub = kvt_f32_bits(KVT_FMUL((float)m, 0x1p-24f)); /* exact: m < 2^10 */
	uint32_t bits = e == 0 ? sub : e == 31 ? special : normal;

	return kvt_f32_from_bits(bits | sign);
}

KVT_CODEC_FN uint16_t kvt_f32_to_f16(float f)
{
	/* Signed arithmetic on |f|'s bits, which fit: SSE2 compares signed
	 * integers only. */
	uint32_t u = kvt_f32_bits(f), sign = (u >> 16) & 0x8000;
	int32_t a = (int32_t)(u & 0x7fffffff);
	/* Normal halves: drop 13 mantissa bits, to nearest even; a carry
	 * moves into the exponent, as it should. */
	int32_t normal = (int32_t)(((uint32_t)a + 0xfff + (((uint32_t)a >> 13) & 1)) >> 13) -
			 (112 << 10);
	/* Below 2^-14: adding 0.5 leaves ulps of 2^-24, half's subnormal
	 * step, and the FPU rounds to nearest even. */
	int32_t sub = (int32_t)(kvt_f32_bits(KVT_FADD(fabsf(f), 0.5f)) - kvt_f32_bits(0.5f));
	int32_t h = a < 0x38800000 ? sub : normal;

	h = h > 0x7c00 ? 0x7c00 : h;
	return (uint16_t)(f != f ? 0x7e00 : (uint32_t)h | sign);
}

/* int4's scales and mins: half, saturating rather than infinite. */
KVT_CODEC_FN uint16_t kvt_f32_to_f16_sat(float f)
{
	f = f < 65504.0f ? f : 65504.0f;
	f = f > -65504.0f ? f : -65504.0f;
	return kvt_f32_to_f16(f);
}

/* OCP E4M3FN: bias 7, no infinities, S.1111.111 is NaN, 448 the largest. */
KVT_CODEC_FN uint8_t kvt_e4m3_encode(float y)
{
	/* On |y|'s bits, as signed integers: they order as |y| does, and
	 * saturating there first (a NaN too, which is tested for last) leaves
	 * nothing that rounds past 448. */
	uint32_t u = kvt_f32_bits(y);
	int32_t a = (int32_t)(u & 0x7fffffff);
	int32_t m = a < 0x43e00000 ? a : 0x43e00000;
	/* Normals (from 2^-6): 3 mantissa bits, to nearest even, and the
	 * exponent's bias moved from 127 to 7 in the same addition. */
	int32_t normal =
		(int32_t)(((uint32_t)m + (0x7ffffu - (120u << 23)) + (((uint32_t)m >> 20) & 1)) >> 20);
	/* Below 2^-6: steps of 2^-9, the ulp of 2^14 in f32. */
	int32_t sub = (int32_t)(kvt_f32_bits(KVT_FADD(kvt_f32_from_bits((uint32_t)m), 16384.0f)) -
				kvt_f32_bits(16384.0f));
	int32_t c = m < 0x3c800000 ? sub : normal;

	return (uint8_t)(a > 0x7f800000 ? 0x7f : (uint32_t)c | ((u >> 24) & 0x80));
}

KVT_CODEC_FN float kvt_e4m3_decode(uint8_t c)
{
	/* |c|'s exponent and mantissa fields land in f32's with one shift;
	 * the exponent's bias moves from 7 to 127 in an addition.
	 * Subnormals (exponent 0): m * 2^-9. */
	uint32_t v = c & 0x7f;
	uint32_t normal = (v << 20) + (120u << 23);
	uint32_t sub = kvt_f32_bits(KVT_FMUL((float)v, 0x1p-9f));
	uint32_t bits = v < 8 ? sub : normal;

	bits = v == 0x7f ? 0x7fc00000 : bits | (uint32_t)(c & 0x80) << 24;
	return kvt_f32_from_bits(bits);
}

/* Element conversions of the dtypes a codec reads (codec.h). */
KVT_CODEC_FN float kvt_codec_elem_to_f32(uint32_t bits, uint32_t dtype)
{
	return dtype == KVT_DTYPE_FLOAT32    ? kvt_f32_from_bits(bits)
	       : dtype == KVT_DTYPE_BFLOAT16 ? kvt_bf16_to_f32((uint16_t)bits)
					     : kvt_f16_to_f32((uint16_t)bits);
}

KVT_CODEC_FN uint32_t kvt_codec_f32_to_elem(float x, uint32_t dtype)
{
	return dtype == KVT_DTYPE_FLOAT32    ? kvt_f32_bits(x)
	       : dtype == KVT_DTYPE_BFLOAT16 ? kvt_f32_to_bf16(x)
					     : kvt_f32_to_f16(x);
}

/* ---- int4 ---------------------------------------------------------- */

/*
 * The (scale, min) pair of a range lo..hi (lo > hi: nothing but NaNs),
 * as codec.h stores it: scale in the low half of the word, min in the
 * high.  *ret_min and *ret_inv get what the encoder codes against: the
 * min as stored, and 1 / scale (0 for a scale of 0).  A min that is a
 * zero is +0 whichever sign the reduction came upon first, so that the
 * pair does not depend on the order of the reduction.
 */
KVT_CODEC_FN uint32_t kvt_int4_pair(float lo, float hi, float *ret_min, float *ret_inv)
{
	float l = lo <= hi ? KVT_FADD(lo, 0.0f) : 0.0f, h = lo <= hi ? KVT_FADD(hi, 0.0f) : 0.0f;
	uint16_t s = kvt_f32_to_f16_sat(KVT_FDIV(KVT_FSUB(h, l), 15.0f)), m = kvt_f32_to_f16_sat(l);
	float scale = kvt_f16_to_f32(s);

	*ret_min = kvt_f16_to_f32(m);
	*ret_inv = scale > 0.0f ? KVT_FDIV(1.0f, scale) : 0.0f;
	return (uint32_t)s | (uint32_t)m << 16;
}

KVT_CODEC_FN uint8_t kvt_int4_code(float v, float min, float inv)
{
	float y = KVT_FMUL(KVT_FSUB(v, min), inv);

	/* Written so that a NaN ends up 0. */
	y = y > 0.0f ? y : 0.0f;
	y = y < 15.0f ? y : 15.0f;
	return (uint8_t)(int32_t)KVT_FADD(y, 0.5f);
}

KVT_CODEC_FN float kvt_int4_value(uint8_t q, float min, float scale)
{
	return KVT_FADD(min, KVT_FMUL((float)q, scale));
}

/* fp8-e4m3: a tile's scale from its largest |x|, and the factor x is
 * multiplied by (0 where 1 / scale overflows: x is divided then). */
KVT_CODEC_FN float kvt_fp8_scale(float amax)
{
	return KVT_FDIV(amax, 448.0f);
}

KVT_CODEC_FN uint8_t kvt_fp8_code(float x, float scale, float inv)
{
	return kvt_e4m3_encode(isinf(inv) ? KVT_FDIV(x, scale) : KVT_FMUL(x, inv));
}

#endif
