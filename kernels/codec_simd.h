/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Explicit vector code for the CPU path's hottest codec loops (the fused
 * row paths of codec_cpu.c), one table of functions per instruction set
 * (codec_x86.c), picked at run time.  Each function codes the same bytes
 * as codec_cpu.c's portable loops for every input, or returns 0 to leave
 * a tile to them (a NaN or an infinity where the vector loop assumes
 * numbers); tests/unit/test-codec-isa.c holds them to that, level by
 * level.
 *
 * rows: [T] where token t's head lies (D elements of the cache's dtype);
 * encoding, a padding token's row is a row of zeros; decoding, it is NULL.
 * tile: the tile's bytes (proto/codec.h).
 */
#ifndef KVT_CODEC_SIMD_H
#define KVT_CODEC_SIMD_H

#include <stdint.h>

/* Instruction sets the codecs have vector code for, lowest first.  A
 * CPU with none of them (AVX2 alone, or not x86) runs the portable loops,
 * which the compiler vectorises (codec_cpu.c). */
#define KVT_CODEC_ISA_PORTABLE 0 /* codec_cpu.c's loops alone */
#define KVT_CODEC_ISA_AVX512 1   /* AVX-512 F, BW, VL and DQ */
#define KVT_CODEC_ISA_N 2

struct kvt_codec_simd {
	/* The largest |x|'s bits (NaNs' too) of each of H bfloat16 tiles
	 * into top[H]: rows [T][H] of D elements, token by token, read in
	 * the cache's order where a token's heads lie side by side. */
	void (*bf16_tops)(const uint8_t *const *rows, int64_t T, int64_t H, int64_t D,
			  uint16_t *top);
	/* fp8-e4m3 of a bfloat16 tile whose bf16_tops() is top; 0: left to
	 * the portable loop. */
	int (*fp8_gather_bf16)(const uint8_t *const *rows, int64_t T, int64_t D, uint8_t *tile,
			       uint16_t top);
	/* fp8-e4m3 decoding into a bfloat16 or float16 cache (dtype); always
	 * done. */
	void (*fp8_scatter_16)(uint8_t *const *rows, int64_t T, int64_t D, const uint8_t *tile,
			       uint32_t dtype);
	/* int4 of a bfloat16 tile whose D is even; per_channel: K's pairs.
	 * Returns the tile's bytes up to its padding (always done).  pa, pb:
	 * [T * D] floats; scratch: [8 * D] floats. */
	uint64_t (*int4_gather_bf16)(const uint8_t *const *rows, int64_t T, int64_t D,
				     int per_channel, uint8_t *tile, float *pa, float *pb,
				     float *scratch);
	/* Its decoding; 0: left to the portable loop (a pair that is not a
	 * number), before anything is written. */
	int (*int4_scatter_bf16)(uint8_t *const *rows, int64_t T, int64_t D, int per_channel,
				 const uint8_t *tile, float *pa, float *pb, float *scratch);
};

/* The table of isa (KVT_CODEC_ISA_*), or NULL where this CPU or build
 * lacks it (KVT_CODEC_ISA_PORTABLE: NULL, no vector code). */
const struct kvt_codec_simd *kvt_codec_simd_table(int isa);

/*
 * The level the copies use (codec_cpu.c): at first use, the best this
 * CPU has, or at most KVTIER_CODEC_ISA=portable|avx512 from the
 * environment.  _set() picks one (the tests): -ENOTSUP where the CPU
 * lacks it, -EINVAL for no such level.
 */
int kvt_codec_cpu_isa(void);
int kvt_codec_cpu_isa_set(int isa);

#endif
