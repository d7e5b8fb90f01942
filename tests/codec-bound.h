/* SPDX-License-Identifier: Apache-2.0 */
/*
 * How far a value of a bfloat16 cache may come back from a coded
 * namespace: the format's bound (tests/unit/test-codec.c derives them)
 * plus the rounding of the decoded value to bfloat16.  Shared by the
 * tests and benchmarks that check what kvt_load_paged restored; include
 * as "../codec-bound.h" (codec.h is proto/'s).
 */
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "codec.h"

/*
 * |x - x'| for x' as the codec decodes x and bfloat16 rounds it: the
 * format's bound plus half a bfloat16 ulp, 2^-8 |x'|.  amax: the largest
 * |value| of x's tile (a block's layer, plane and head); lo, hi: the least
 * and greatest value of x's int4 group (K: x's channel over the block's
 * tokens; V: KVT_INT4_GROUP channels of x's token).
 */
static inline double codec_bf16_bound(uint32_t codec, float x, float amax, float lo, float hi)
{
	double b;

	if (codec == KVT_CODEC_FP8_E4M3)
		b = fmax(ldexp(fabs(x), -4), ldexp(amax / 448.0, -10)) + ldexp(fabs(x), -20);
	else /* the range's step, within half's rounding of scale and min */
		b = (hi - lo) / 15.0 * (0.5 + 16 * 0x1p-11) + ldexp(fabs(lo), -11) +
		    ldexp(fabs(x), -20) + 0x1p-24;
	return b + ldexp(fabs(x) + b, -8);
}

/*
 * The bits of a bfloat16 test value: uniform in [-mag, mag) from the
 * xorshift64 state *x, eight times larger on one channel in 37 (the
 * outliers a codec's scales must carry).
 */
static inline uint16_t codec_test_bf16(uint64_t *x, float mag, unsigned channel)
{
	float v;
	uint32_t u;

	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	v = ((float)(*x >> 40) / (float)(1 << 24) * 2.0f - 1.0f) * mag *
	    (channel % 37 == 0 ? 8.0f : 1.0f);
	memcpy(&u, &v, 4);
	return (uint16_t)(u >> 16);
}

/* The bfloat16 at p, as a float. */
static inline float codec_test_bf16_at(const uint8_t *p)
{
	uint16_t h;
	uint32_t u;
	float f;

	memcpy(&h, p, 2);
	u = (uint32_t)h << 16;
	memcpy(&f, &u, 4);
	return f;
}
