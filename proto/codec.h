/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A namespace's codec: how its blocks are stored, and so how large a block
 * is.  The engine's cache keeps its own dtype; with a codec other than
 * none, the client's copy path quantises while it gathers a block and
 * dequantises while it scatters it back, and the daemon stores the smaller,
 * opaque slots.  Both sides derive the slot size from these formulas
 * (proto/identity.c), the kernels (kernels/codec_cpu.c) write and read
 * exactly these bytes.
 *
 * A block of a codec other than none is, per shard and per layer group,
 * [layer][plane][head] tiles, each self-describing (its scales inside it):
 *
 *   fp8-e4m3  f32 scale (amax / 448 of the tile, 0 for an all-zero tile),
 *             then T*D bytes of E4M3 (OCP FP8, saturating, round to
 *             nearest even), element (t, d) at t*D + d.
 *   int4      asymmetric 4-bit, q = round((x - min) / scale) in 0..15,
 *             x = min + q * scale; scales and mins are IEEE half.
 *             K (plane 0 of a 2-plane group): per channel over the
 *             block's T tokens (KIVI's K): D pairs (scale, min), then
 *             T*D/2 bytes.  V and an MLA latent: per token, in groups of
 *             G = KVT_INT4_GROUP channels (D itself where D is not a
 *             multiple of G): T*(D/G) pairs (scale, min), then the data.
 *             Element (t, d) is nibble t*D + d, the low nibble first.
 *
 * Every tile is padded to a multiple of 4 bytes; all numbers are little
 * endian.  T is the block's tokens, D the head's elements
 * (head_bytes / dtype bytes).  Only float32, float16 and bfloat16 caches
 * take a codec: an fp8 or int8 cache is stored as it is.
 */
#pragma once

#include <stdint.h>

#include "kvtier-layout.h" /* KVT_CODEC_*, KVT_DTYPE_* */

/* The size arithmetic below is also the GPU kernels' (kernels/codec_tile.h). */
#ifdef __CUDACC__
#define KVT_CODEC_SIZE_FN __host__ __device__ static inline
#else
#define KVT_CODEC_SIZE_FN static inline
#endif

#define KVT_CODEC_COUNT 3

#define KVT_INT4_GROUP 32

/* The dtype codes of the namespace identity beyond kvtier-layout.h's
 * (the numbering client/python/kvtier/identity.py shares with every
 * adapter). */
#define KVT_DTYPE_FLOAT8_E4M3 4
#define KVT_DTYPE_FLOAT8_E5M2 5
#define KVT_DTYPE_INT8 6
#define KVT_DTYPE_UINT8 7

/* Bytes of one element of a dtype a codec can read: 4, 2, 2; else 0. */
KVT_CODEC_SIZE_FN uint32_t kvt_codec_dtype_bytes(uint32_t dtype)
{
	switch (dtype) {
	case KVT_DTYPE_FLOAT32:
		return 4;
	case KVT_DTYPE_FLOAT16:
	case KVT_DTYPE_BFLOAT16:
		return 2;
	default:
		return 0;
	}
}

/* "none", "fp8-e4m3", "int4"; NULL for an unknown code. */
static inline const char *kvt_codec_name(uint32_t codec)
{
	static const char *const names[KVT_CODEC_COUNT] = {"none", "fp8-e4m3", "int4"};
	return codec < KVT_CODEC_COUNT ? names[codec] : 0;
}

/* int4's channels per (scale, min) pair of a per-token plane of d. */
KVT_CODEC_SIZE_FN uint32_t kvt_int4_group(uint32_t d)
{
	return d % KVT_INT4_GROUP == 0 ? KVT_INT4_GROUP : d;
}

/*
 * Bytes of one tile: one layer, plane and head of one block of t tokens
 * and d elements a head.  per_channel: the plane is K of a 2-plane group.
 * 0 for codec none (a block is then the engine's bytes) or an unknown one.
 */
KVT_CODEC_SIZE_FN uint64_t kvt_codec_tile_bytes(uint32_t codec, int per_channel, uint32_t t,
					    uint32_t d)
{
	uint64_t n = (uint64_t)t * d, bytes;

	switch (codec) {
	case KVT_CODEC_FP8_E4M3:
		bytes = 4 + n;
		break;
	case KVT_CODEC_INT4:
		bytes = (per_channel ? 4ull * d : 4ull * t * (d / kvt_int4_group(d))) + (n + 1) / 2;
		break;
	default:
		return 0;
	}
	return (bytes + 3) & ~3ull;
}
