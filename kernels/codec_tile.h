/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GPU path's codecs, tile by tile: the work of one CTA on one
 * (block, layer, plane, head) tile of proto/codec.h, written once as
 * __host__ __device__ steps so that the kernel (codec_cuda.cu) and the
 * host emulation of the tests run the same code.
 *
 * A tile is coded in steps, each over the CTA's threads with a barrier
 * after it (an executor runs a step: on the device every thread calls it
 * for its thread id and syncs; on the host a loop calls it for every id
 * in turn):
 *
 *   locate   each token's engine offset, -1 for padding, into eng[]
 *   reduce   fp8: each thread's largest |x| into red[]; int4: each
 *            thread's (scale, min) pairs, written to the tile and kept as
 *            (min, 1 / scale) in pa[], pb[] — a pair is one thread's work
 *            (K: a channel over the T tokens; V: G channels of a token)
 *   fold     fp8: a tree over red[], then the scale (thread 0)
 *   data     the codes, a 32-bit word of the tile per thread and turn
 *
 * and decoded in locate, params (the pairs or the scale into pa[], pb[]),
 * and data (an element per thread and turn, written where it is not
 * padding).  Max and min are exact whatever the order they are taken in
 * (NaNs left out, a zero min made +0: codec_elem.h), which is what makes
 * the bytes the CPU's (codec_cpu.c) however the threads split the work.
 *
 * Element (t, d) is read at layer_base[...] + eng[t] + d * elem_bytes,
 * eng[t] from layout.h as on the uncoded paths.  K by columns is not
 * here (the CUDA path refuses it).
 *
 * The C part (the geometry) is included by layout_plan.c and the client.
 */
#ifndef KVT_CODEC_TILE_H
#define KVT_CODEC_TILE_H

#include <stdint.h>

#include "layout.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Dynamic shared memory a coded copy's CTA may take, so that a launch
 * needs no opt-in (and leaves the SM's rest to the engine's kernels). */
#define KVT_CODEC_SMEM_MAX (48 * 1024)
/* Threads of a coded copy's CTA. */
#define KVT_CODEC_THREADS 256

/* A kvt_geom with a codec (kvt_codec_geom_init, codec_cpu.c). */
struct kvt_codec_geom {
	struct kvt_geom g;
	int64_t d;           /* elements of a head */
	int64_t elem_bytes;  /* of the cache's dtype */
	int64_t tile[2];     /* bytes of a tile of plane 0, of plane 1 */
	int64_t layer_bytes; /* one layer of a block: heads * (tile[0] + tile[1]) */
	int64_t max_pairs;   /* int4's pairs of the larger plane; 1 for fp8 */
	uint32_t codec;      /* KVT_CODEC_* other than none */
	uint32_t dtype;      /* KVT_DTYPE_FLOAT32, _FLOAT16 or _BFLOAT16 */
};

/*
 * g with a codec, for blocks of g->block_tokens tokens (codec_cpu.c: the
 * one place the tiles' sizes are taken from proto/codec.h).
 * \return 0, or -EINVAL for codec none or an unknown one, a dtype no
 *         codec reads, a head that is not a whole number of elements, or a
 *         block past int64
 */
int kvt_codec_geom_init(const struct kvt_geom *g, uint32_t codec, uint32_t dtype,
			struct kvt_codec_geom *ret);

/* kvt_codec_access(): how a kernel may reach the elements and the tiles. */
#define KVT_CODEC_ELEM_ALIGNED 0x1u /* every element at a multiple of its size */
#define KVT_CODEC_TILE_ALIGNED 0x2u /* every tile at a multiple of 4 */

/* The access flags of a copy whose engine bases and blocks are all
 * aligned to ptr_align (kvt_ptr_align(), layout_plan.c). */
uint32_t kvt_codec_access(const struct kvt_codec_geom *cg, uint32_t ptr_align);

/* Byte offset of tile (layer, plane, head) in a block: [layer][plane][head]. */
KVT_HD static inline int64_t kvt_codec_tile_offset(const struct kvt_codec_geom *cg,
						   int64_t layer, int64_t plane, int64_t head)
{
	return layer * cg->layer_bytes + (plane ? cg->g.heads * cg->tile[0] : 0) +
	       head * cg->tile[plane];
}

/* The shared memory of a coded copy's CTA of `threads` threads: T engine
 * offsets, two floats per pair, a float per thread. */
KVT_HD static inline int64_t kvt_codec_smem_bytes(const struct kvt_codec_geom *cg,
						  int64_t threads)
{
	return cg->g.block_tokens * 8 + cg->max_pairs * 8 + threads * 4;
}

#ifdef __cplusplus
}
#endif

#ifdef __CUDACC__

#include "codec_elem.h"
#include "codec.h"

/* The steps of a tile (above). */
enum kvt_codec_step {
	KVT_CODEC_LOCATE,
	KVT_CODEC_REDUCE,
	KVT_CODEC_FOLD,   /* with arg: the tree's stride; 0: the scale */
	KVT_CODEC_DATA,
	KVT_CODEC_PARAMS, /* decoding */
	KVT_CODEC_WRITE,  /* decoding: the elements into the cache */
};

/* One tile and the CTA's shared memory. */
struct kvt_codec_tile {
	const struct kvt_codec_geom *cg;
	uint8_t *base;          /* layer_base[] of the tile's (layer, plane) */
	const int64_t *indices; /* the copy's */
	uint8_t *tile;          /* [cg->tile[plane]] in the block */
	int64_t block;          /* its index in the copy */
	int64_t plane, head;
	int64_t n;              /* T * D */
	int64_t n_pairs;        /* int4: D (K) or T * D / G; fp8: 1 */
	int64_t group;          /* int4 V: G */
	int32_t per_channel;
	int32_t elem_aligned;   /* engine elements are aligned to their size */
	int32_t tile_aligned;   /* the tile is 4-byte aligned */
	int64_t *eng;           /* [T] shared */
	float *pa;              /* [n_pairs] shared: min (fp8: the scale) */
	float *pb;              /* [n_pairs] shared: 1 / scale encoding, the
				 * scale decoding (fp8: 1 / scale) */
	float *red;             /* [threads] shared */
};

/* Tile s (layer-major over [layer_first, ...)) of block b.  access:
 * kvt_codec_access()'s; smem: kvt_codec_smem_bytes() bytes, 8-aligned. */
__host__ __device__ inline void kvt_codec_tile_setup(struct kvt_codec_tile *c,
						    const struct kvt_codec_geom *cg,
						    int64_t layer_first, int64_t s,
						    uint8_t *const *layer_base,
						    const int64_t *indices, uint8_t *block,
						    int64_t b, int32_t access, void *smem)
{
	const struct kvt_geom *g = &cg->g;
	int64_t h = s % g->heads, p = (s / g->heads) % g->planes;
	int64_t l = layer_first + s / (g->heads * g->planes);
	int64_t T = g->block_tokens, D = cg->d;

	c->cg = cg;
	c->base = layer_base[kvt_geom_base_index(g, l, p)];
	c->indices = indices;
	c->tile = block + kvt_codec_tile_offset(cg, l, p, h);
	c->block = b;
	c->plane = p;
	c->head = h;
	c->n = T * D;
	c->per_channel = g->planes == 2 && p == 0;
	c->group = kvt_int4_group((uint32_t)D);
	c->n_pairs = cg->codec != KVT_CODEC_INT4 ? 1 : c->per_channel ? D : T * (D / c->group);
	c->elem_aligned = (access & KVT_CODEC_ELEM_ALIGNED) != 0;
	c->tile_aligned = (access & KVT_CODEC_TILE_ALIGNED) != 0;
	c->eng = (int64_t *)smem;
	c->pa = (float *)(c->eng + T);
	c->pb = c->pa + cg->max_pairs;
	c->red = c->pb + cg->max_pairs;
}

/* Element i (t * D + d) of the tile as f32; padding reads 0. */
__host__ __device__ __forceinline__ float kvt_codec_x(const struct kvt_codec_tile *c, int64_t i)
{
	int64_t D = c->cg->d, eb = c->cg->elem_bytes, off = c->eng[i / D];
	const uint8_t *p;
	uint32_t bits;

	if (off < 0)
		return 0.0f;
	p = c->base + off + (i % D) * eb;
	if (c->elem_aligned)
		bits = eb == 4 ? *(const uint32_t *)p : *(const uint16_t *)p;
	else if (eb == 4)
		bits = p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
	else
		bits = p[0] | (uint32_t)p[1] << 8;
	return kvt_codec_elem_to_f32(bits, c->cg->dtype);
}

__host__ __device__ __forceinline__ void kvt_codec_put_x(const struct kvt_codec_tile *c, int64_t i,
							 float x)
{
	int64_t D = c->cg->d, eb = c->cg->elem_bytes, off = c->eng[i / D];
	uint32_t bits = kvt_codec_f32_to_elem(x, c->cg->dtype);
	uint8_t *p;

	if (off < 0)
		return;
	p = c->base + off + (i % D) * eb;
	if (c->elem_aligned && eb == 4)
		*(uint32_t *)p = bits;
	else if (c->elem_aligned)
		*(uint16_t *)p = (uint16_t)bits;
	else
		for (int64_t k = 0; k < eb; k++)
			p[k] = (uint8_t)(bits >> 8 * k);
}

__host__ __device__ __forceinline__ uint32_t kvt_codec_ld32(const struct kvt_codec_tile *c,
							    int64_t off)
{
	const uint8_t *p = c->tile + off;

	if (c->tile_aligned)
		return *(const uint32_t *)p;
	return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

__host__ __device__ __forceinline__ void kvt_codec_st32(const struct kvt_codec_tile *c,
							int64_t off, uint32_t w)
{
	uint8_t *p = c->tile + off;

	if (c->tile_aligned) {
		*(uint32_t *)p = w;
		return;
	}
	for (int k = 0; k < 4; k++)
		p[k] = (uint8_t)(w >> 8 * k);
}

/* The pair element i codes against. */
__host__ __device__ __forceinline__ int64_t kvt_codec_pair_of(const struct kvt_codec_tile *c,
							      int64_t i)
{
	return c->per_channel ? i % c->cg->d : i / c->group;
}

/* Bytes of the tile before its codes. */
__host__ __device__ __forceinline__ int64_t kvt_codec_head(const struct kvt_codec_tile *c)
{
	return 4 * c->n_pairs;
}

/* One step of one thread (tid of nt). */
__host__ __device__ inline void kvt_codec_step(const struct kvt_codec_tile *c, int step,
					      int64_t arg, int64_t tid, int64_t nt)
{
	const struct kvt_codec_geom *cg = c->cg;
	int64_t T = cg->g.block_tokens, D = cg->d;
	int fp8 = cg->codec == KVT_CODEC_FP8_E4M3;

	switch (step) {
	case KVT_CODEC_LOCATE:
		for (int64_t t = tid; t < T; t += nt) {
			int64_t page = 0, token = 0;

			/* A bad index was refused on the host; should one
			 * slip through, it reads as padding and is not
			 * written. */
			c->eng[t] = kvt_geom_locate(&cg->g, c->indices, c->block, t, &page,
						    &token) == KVT_GEOM_TOKEN
					    ? kvt_geom_engine_offset(&cg->g, c->plane, page, token,
								     c->head)
					    : -1;
		}
		break;
	case KVT_CODEC_REDUCE:
		if (fp8) {
			float m = 0.0f;

			for (int64_t i = tid; i < c->n; i += nt) {
				float a = fabsf(kvt_codec_x(c, i));

				m = a > m ? a : m;
			}
			c->red[tid] = m;
			break;
		}
		for (int64_t k = tid; k < c->n_pairs; k += nt) {
			/* K: channel k over the tokens; V: G channels from k * G. */
			int64_t i0 = c->per_channel ? k : k * c->group;
			int64_t step_i = c->per_channel ? D : 1;
			int64_t cnt = c->per_channel ? T : c->group;
			float lo = INFINITY, hi = -INFINITY;

			for (int64_t j = 0; j < cnt; j++) {
				float v = kvt_codec_x(c, i0 + j * step_i);

				lo = v < lo ? v : lo;
				hi = v > hi ? v : hi;
			}
			kvt_codec_st32(c, 4 * k, kvt_int4_pair(lo, hi, &c->pa[k], &c->pb[k]));
		}
		break;
	case KVT_CODEC_FOLD:
		if (!fp8)
			break;
		if (arg) {
			if (tid < arg && tid + arg < nt) {
				float a = c->red[tid + arg];

				c->red[tid] = a > c->red[tid] ? a : c->red[tid];
			}
		} else if (tid == 0) {
			float scale = kvt_fp8_scale(c->red[0]);

			c->pa[0] = scale;
			c->pb[0] = KVT_FDIV(1.0f, scale);
			kvt_codec_st32(c, 0, kvt_f32_bits(scale));
		}
		break;
	case KVT_CODEC_DATA: {
		int64_t h = kvt_codec_head(c), words = (cg->tile[c->plane] - h) / 4;
		int64_t per = fp8 ? 4 : 8; /* elements a word codes */

		for (int64_t w = tid; w < words; w += nt) {
			uint32_t word = 0;

			for (int64_t j = 0; j < per; j++) {
				int64_t i = w * per + j;
				uint32_t q;

				if (i >= c->n)
					break;
				if (fp8) {
					q = c->pa[0] == 0.0f
						    ? 0
						    : kvt_fp8_code(kvt_codec_x(c, i), c->pa[0],
								   c->pb[0]);
					word |= q << 8 * j;
				} else {
					int64_t k = kvt_codec_pair_of(c, i);

					q = kvt_int4_code(kvt_codec_x(c, i), c->pa[k], c->pb[k]);
					word |= q << 4 * j;
				}
			}
			kvt_codec_st32(c, h + 4 * w, word);
		}
		break;
	}
	case KVT_CODEC_PARAMS:
		for (int64_t k = tid; k < c->n_pairs; k += nt) {
			uint32_t w = kvt_codec_ld32(c, 4 * k);

			if (fp8) {
				c->pa[0] = kvt_f32_from_bits(w);
			} else {
				c->pb[k] = kvt_f16_to_f32((uint16_t)w);
				c->pa[k] = kvt_f16_to_f32((uint16_t)(w >> 16));
			}
		}
		break;
	case KVT_CODEC_WRITE: {
		int64_t h = kvt_codec_head(c);

		for (int64_t i = tid; i < c->n; i += nt) {
			uint8_t byte = c->tile[h + (fp8 ? i : i / 2)];
			float x;

			if (c->eng[i / D] < 0)
				continue;
			if (fp8) {
				x = KVT_FMUL(kvt_e4m3_decode(byte), c->pa[0]);
			} else {
				int64_t k = kvt_codec_pair_of(c, i);

				x = kvt_int4_value((uint8_t)(i & 1 ? byte >> 4 : byte & 15), c->pa[k],
						   c->pb[k]);
			}
			kvt_codec_put_x(c, i, x);
		}
		break;
	}
	}
}

/*
 * A tile coded (to_block) or decoded by executor X, whose run(c, step,
 * arg) runs a step on every thread and then a barrier, and whose
 * threads() says how many.
 */
#pragma nv_exec_check_disable
template <typename X>
__host__ __device__ inline void kvt_codec_tile_run(X &x, const struct kvt_codec_tile *c,
						   int to_block)
{
	x.run(c, KVT_CODEC_LOCATE, 0);
	if (!to_block) {
		x.run(c, KVT_CODEC_PARAMS, 0);
		x.run(c, KVT_CODEC_WRITE, 0);
		return;
	}
	x.run(c, KVT_CODEC_REDUCE, 0);
	if (c->cg->codec == KVT_CODEC_FP8_E4M3) {
		int64_t s = 1;

		while (s < x.threads())
			s <<= 1;
		for (s >>= 1; s > 0; s >>= 1)
			x.run(c, KVT_CODEC_FOLD, s);
		x.run(c, KVT_CODEC_FOLD, 0);
	}
	x.run(c, KVT_CODEC_DATA, 0);
}

#endif /* __CUDACC__ */

#endif
