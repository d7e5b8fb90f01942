/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CPU path's codecs (kernels/codec_cpu.c) against proto/codec.h's
 * format, through kvt_layout_gather and kvt_layout_scatter.
 *
 * Everything expected is computed here from the format's definition: the
 * E4M3 values from the OCP rule, halves through the compiler's _Float16,
 * bfloat16 rounding by comparing the two neighbours, and where each
 * element of an engine cache lives from the cache's shape.  The checks:
 *
 *   - every E4M3 code decodes to its OCP value, every finite value
 *     encodes back to its code, and midpoints round to the even code;
 *   - over sweeps of dtypes, block tokens, head sizes, planes, index kinds
 *     and engine layouts: each tile is where kvt_codec_tile_bytes puts
 *     it, its scales are the ones the format defines, every element
 *     decodes within the bound the format allows (below), padding bytes
 *     are zero, and the block is the same bytes whatever engine layout
 *     held the values;
 *   - scatter writes the decoded values, rounded to the cache's dtype, to
 *     exactly the block's elements: every other byte of the cache, and
 *     guard bytes around it, keep their poison;
 *   - all-zero, constant and one-outlier tiles.
 *
 * The bounds, for an element x of a tile and its decoded value x' (f32):
 *   fp8-e4m3: y = x * (1 / s) with s = amax / 448 lies in E4M3's range; its
 *     nearest E4M3 value is within 2^-4 |y| of it where |y| >= 2^-6 (3
 *     mantissa bits, half an ulp) and within 2^-10 below (subnormal steps
 *     of 2^-9).  With the f32 roundings of 1 / s, x * (1 / s) and e4m3 * s:
 *       |x - x'| <= max(2^-4 |x|, 2^-10 s) + 2^-21 |x| + 2^-30 s.
 *   int4: with the range [lo, hi] of x's group, the stored (rounded to
 *     half) scale S and min M, x' = M + q S covers [M, M + 15 S], which
 *     misses [lo, hi] by at most |lo - M| + |hi - lo - 15 S|; inside, q is
 *     the nearest step (S / 2), up to the f32 roundings of (x - M) / S
 *     and M + q S:
 *       |x - x'| <= max(S / 2, |lo - M| + |hi - lo - 15 S|)
 *                   + 2^-18 S + 2^-22 (|x| + |M| + 15 S).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvtier.h"
#include "codec.h"
#include "../check.h"
#include "rng.h"

#define N_LAYERS 2
#define HEADS 2
#define POISON 0xa5
#define GUARD 64
#define HEAD_PAD 3 /* elements after each head of a head-padded cache */

/* ---- the format, from its definition --------------------------------- */

static float e4m3_value(unsigned c)
{
	unsigned e = (c >> 3) & 15, m = c & 7;
	float v;

	if ((c & 0x7f) == 0x7f)
		return NAN;
	v = e == 0 ? ldexpf((float)m, -9) : ldexpf(1.0f + (float)m / 8.0f, (int)e - 7);
	return c & 0x80 ? -v : v;
}

static float half_value(uint16_t h)
{
	_Float16 f;

	memcpy(&f, &h, 2);
	return (float)f;
}

static uint16_t half_bits(float v)
{
	_Float16 f = (_Float16)v;
	uint16_t h;

	memcpy(&h, &f, 2);
	return h;
}

static uint32_t bits_of(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return u;
}

static float float_of(uint32_t u)
{
	float f;

	memcpy(&f, &u, 4);
	return f;
}

/* bfloat16 nearest to finite v, ties to the even one. */
static uint16_t bf16_bits(float v)
{
	uint32_t down = bits_of(v) & 0xffff0000u, up = down + 0x10000u;
	double dd = fabs((double)v - float_of(down)), du = fabs((double)v - float_of(up));

	if (dd < du || (dd == du && !((down >> 16) & 1)))
		return (uint16_t)(down >> 16);
	return (uint16_t)(up >> 16);
}

static uint32_t dtype_bytes(uint32_t dtype)
{
	return dtype == KVT_DTYPE_FLOAT32 ? 4 : 2;
}

static const char *dtype_name(uint32_t dtype)
{
	return dtype == KVT_DTYPE_FLOAT32 ? "f32" : dtype == KVT_DTYPE_FLOAT16 ? "f16" : "bf16";
}

static float elem_get(const uint8_t *p, uint32_t dtype)
{
	uint16_t h;
	float f;

	if (dtype == KVT_DTYPE_FLOAT32) {
		memcpy(&f, p, 4);
		return f;
	}
	memcpy(&h, p, 2);
	return dtype == KVT_DTYPE_FLOAT16 ? half_value(h) : float_of((uint32_t)h << 16);
}

static void elem_put(uint8_t *p, uint32_t dtype, float v)
{
	uint16_t h;

	if (dtype == KVT_DTYPE_FLOAT32) {
		memcpy(p, &v, 4);
		return;
	}
	h = dtype == KVT_DTYPE_FLOAT16 ? half_bits(v) : bf16_bits(v);
	memcpy(p, &h, 2);
}

/* v as the cache's dtype holds it. */
static float in_dtype(float v, uint32_t dtype)
{
	uint8_t b[4];

	elem_put(b, dtype, v);
	return elem_get(b, dtype);
}

/* ---- engine caches ---------------------------------------------------- */

enum kind {
	NHD,         /* (2, NP, BS, H, D) */
	HND,         /* (2, NP, H, BS, D) */
	HEAD_PADDED, /* (2, NP, BS, H, D + HEAD_PAD) */
	KV_SPLIT,    /* K and V apart, each (NP, BS, H, D) */
	CPU_COLUMNS, /* (NP, H, 2, BS, D), K as [D][BS] */
	MLA,         /* (NP, BS, D): one plane, one head */
	N_KINDS,
};

static const char *const kind_names[N_KINDS] = {"nhd", "hnd", "head-padded", "kv-split",
						 "cpu-columns", "mla"};

struct cache {
	enum kind kind;
	uint32_t dtype, eb, planes, heads, d, bs, np;
	size_t bytes;               /* of one buffer */
	uint8_t *mem[N_LAYERS * 2]; /* GUARD + bytes + GUARD each */
	void *base[N_LAYERS * 2];
	int n_bufs;
	kvt_layout lay;
};

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p) {
		fprintf(stderr, "out of memory (%zu bytes)\n", n);
		exit(1);
	}
	return p;
}

/* Element (layer, plane, page, token, head, i) of the cache, from its shape. */
static uint8_t *elem_at(const struct cache *c, uint32_t l, uint32_t p, uint64_t page,
			uint32_t t, uint32_t h, uint32_t i)
{
	uint64_t H = c->heads, D = c->d, bs = c->bs, np = c->np, at;
	uint8_t *base = c->base[c->kind == KV_SPLIT ? l * 2 + p : l];

	switch (c->kind) {
	case NHD:
		at = (((p * np + page) * bs + t) * H + h) * D + i;
		break;
	case HND:
		at = (((p * np + page) * H + h) * bs + t) * D + i;
		break;
	case HEAD_PADDED:
		at = (((p * np + page) * bs + t) * H + h) * (D + HEAD_PAD) + i;
		break;
	case KV_SPLIT:
		at = ((page * bs + t) * H + h) * D + i;
		break;
	case CPU_COLUMNS:
		at = ((page * H + h) * 2 + p) * bs * D + (p == 0 ? (uint64_t)i * bs + t : t * D + i);
		break;
	default: /* MLA */
		at = (page * bs + t) * D + i;
		break;
	}
	return base + at * c->eb;
}

/* The descriptor an engine would write for the cache (strides in bytes). */
static void cache_layout(struct cache *c)
{
	int64_t e = c->eb, H = c->heads, D = c->d, bs = c->bs, np = c->np;
	kvt_layout *lay = &c->lay;

	*lay = (kvt_layout){.n_layers = N_LAYERS, .planes = c->planes, .heads = c->heads,
			    .head_bytes = c->d * c->eb, .page_tokens = c->bs,
			    .layer_base = c->base, .n_pages = c->np, .dtype = c->dtype};
	switch (c->kind) {
	case NHD:
		lay->stride_plane = np * bs * H * D * e;
		lay->stride_page = bs * H * D * e;
		lay->stride_token = H * D * e;
		lay->stride_head = D * e;
		break;
	case HND:
		lay->stride_plane = np * H * bs * D * e;
		lay->stride_page = H * bs * D * e;
		lay->stride_token = D * e;
		lay->stride_head = bs * D * e;
		break;
	case HEAD_PADDED:
		lay->stride_plane = np * bs * H * (D + HEAD_PAD) * e;
		lay->stride_page = bs * H * (D + HEAD_PAD) * e;
		lay->stride_token = H * (D + HEAD_PAD) * e;
		lay->stride_head = (D + HEAD_PAD) * e;
		break;
	case KV_SPLIT:
		lay->flags = KVT_LAYOUT_PLANE_BASES;
		lay->stride_page = bs * H * D * e;
		lay->stride_token = H * D * e;
		lay->stride_head = D * e;
		break;
	case CPU_COLUMNS:
		lay->flags = KVT_LAYOUT_K_COLUMNS;
		lay->elem_bytes = c->eb;
		lay->stride_plane = bs * D * e;
		lay->stride_page = H * 2 * bs * D * e;
		lay->stride_token = D * e;
		lay->stride_head = 2 * bs * D * e;
		break;
	default:
		lay->stride_page = bs * D * e;
		lay->stride_token = D * e;
		break;
	}
}

static void cache_init(struct cache *c, enum kind kind, uint32_t dtype, uint32_t d,
		       uint32_t bs, uint32_t np)
{
	uint64_t row;

	*c = (struct cache){.kind = kind, .dtype = dtype, .eb = dtype_bytes(dtype),
			    .planes = kind == MLA ? 1 : 2, .heads = kind == MLA ? 1 : HEADS,
			    .d = d, .bs = bs, .np = np};
	row = (uint64_t)c->heads * (kind == HEAD_PADDED ? d + HEAD_PAD : d);
	c->bytes = (size_t)c->planes * np * bs * row * c->eb;
	c->n_bufs = kind == KV_SPLIT ? N_LAYERS * 2 : N_LAYERS;
	for (int i = 0; i < c->n_bufs; i++) {
		c->mem[i] = xmalloc(c->bytes + 2 * GUARD);
		memset(c->mem[i], POISON, c->bytes + 2 * GUARD);
		c->base[i] = c->mem[i] + GUARD;
	}
	cache_layout(c);
}

static void cache_free(struct cache *c)
{
	for (int i = 0; i < c->n_bufs; i++)
		free(c->mem[i]);
}

/*
 * The value of (layer, plane, slot, head, i): the same for every layout,
 * so that their blocks can be compared.  Magnitudes vary from tile to
 * tile (2^-8 .. 2^7) and, for one element in eight, inside a tile too,
 * down into E4M3's subnormals.
 */
static uint64_t mix(uint64_t x)
{
	x ^= x >> 31;
	x *= UINT64_C(0x7fb5d329728ea185);
	x ^= x >> 27;
	x *= UINT64_C(0x81dadef4bc2dd44d);
	return x ^ (x >> 33);
}

static uint64_t value_seed;

/* The values of note: every tile all zero, constant, or with one outlier
 * (1000, at the first element of the first token of each page) among
 * values near 0.01. */
static enum { FILL_RANDOM, FILL_ZERO, FILL_CONSTANT, FILL_OUTLIER } fill_mode;

static float value_of(uint32_t l, uint32_t p, uint64_t slot, uint32_t h, uint32_t i,
		      uint32_t dtype, uint32_t bs)
{
	uint64_t tile = mix(value_seed ^ (l * 16 + p * 4 + h)), r;
	double u;
	int k = (int)(tile % 16) - 8;

	switch (fill_mode) {
	case FILL_ZERO:
		return 0.0f;
	case FILL_CONSTANT:
		return in_dtype(0.7f, dtype);
	case FILL_OUTLIER:
		return in_dtype(slot % bs == 0 && i == 0 ? 1000.0f : 0.01f + (float)(i % 7) * 1e-3f,
				dtype);
	default:
		break;
	}

	r = mix(tile ^ mix(slot * 4096 + i));
	u = (double)(r >> 11) / (double)(UINT64_C(1) << 53) * 2.0 - 1.0;
	if ((r & 7) == 0)
		k -= (int)((r >> 3) % 12);
	return in_dtype((float)ldexp(u, k), dtype);
}

static void cache_fill(struct cache *c)
{
	for (uint32_t l = 0; l < N_LAYERS; l++)
		for (uint32_t p = 0; p < c->planes; p++)
			for (uint64_t g = 0; g < c->np; g++)
				for (uint32_t t = 0; t < c->bs; t++)
					for (uint32_t h = 0; h < c->heads; h++)
						for (uint32_t i = 0; i < c->d; i++)
							elem_put(elem_at(c, l, p, g, t, h, i),
								 c->dtype,
								 value_of(l, p, g * c->bs + t, h,
									  i, c->dtype, c->bs));
}

/* ---- tiles, checked against the format -------------------------------- */

struct tcase {
	uint32_t codec, dtype, bt, d, index_kind;
	enum kind kind;
};

static void describe(const struct tcase *tc, char *buf, size_t n)
{
	snprintf(buf, n, "%s %s %s T=%u D=%u %s", kvt_codec_name(tc->codec),
		 dtype_name(tc->dtype), kind_names[tc->kind], tc->bt, tc->d,
		 tc->index_kind == KVT_INDEX_PAGE ? "pages" : "slots");
}

/* Where block b's token t lives: 0 with *ret_page and *ret_token, or -1
 * for padding. */
static int token_at(const struct cache *c, const struct tcase *tc, const int64_t *idx,
		    size_t b, uint32_t t, uint64_t *ret_page, uint32_t *ret_token)
{
	int64_t s;

	if (tc->index_kind == KVT_INDEX_PAGE) {
		*ret_page = (uint64_t)idx[b];
		*ret_token = t;
		return 0;
	}
	s = idx[b * tc->bt + t];
	if (s < 0)
		return -1;
	*ret_page = (uint64_t)s / c->bs;
	*ret_token = (uint32_t)((uint64_t)s % c->bs);
	return 0;
}

/* The E4M3 code nearest to y, ties to the even code, +-448 past it; the
 * sign stays (-0 is 0x80). */
static uint8_t e4m3_nearest(float y)
{
	unsigned best = 0;
	double best_d = INFINITY;

	if (isnan(y))
		return 0x7f;
	for (unsigned c = 0; c < 0x7f; c++) {
		double dist = fabs(fabs((double)y) - e4m3_value(c));

		if (dist < best_d || (dist == best_d && !(c & 1))) {
			best = c;
			best_d = dist;
		}
	}
	return (uint8_t)(best | (signbit(y) ? 0x80 : 0));
}

/*
 * Checks one tile of n = T*D values x (the original elements, [T][D]),
 * decodes it into out [T][D] and returns its bytes.
 */
static uint64_t check_tile(const char *what, uint32_t codec, int per_channel, uint32_t T,
			   uint32_t D, const float *x, const uint8_t *tile, float *out)
{
	uint64_t n = (uint64_t)T * D, bytes = kvt_codec_tile_bytes(codec, per_channel, T, D);
	uint64_t used;

	if (codec == KVT_CODEC_FP8_E4M3) {
		float amax = 0, s;

		for (uint64_t i = 0; i < n; i++)
			amax = fmaxf(amax, fabsf(x[i]));
		memcpy(&s, tile, 4);
		CHECK(bits_of(s) == bits_of(amax / 448.0f), "%s: scale %g, amax %g", what, s,
		      amax);
		for (uint64_t i = 0; i < n; i++) {
			uint8_t c = tile[4 + i], want = s == 0 ? 0 : e4m3_nearest(x[i] * (1.0f / s));
			double bound = fmax(ldexp(fabs(x[i]), -4), ldexp(s, -10)) +
				       ldexp(fabs(x[i]), -21) + ldexp(s, -30);

			out[i] = e4m3_value(c) * s;
			CHECK(c == want, "%s: element %" PRIu64 " = %a coded 0x%02x, want 0x%02x",
			      what, i, x[i], c, want);
			CHECK(fabs((double)out[i] - x[i]) <= bound,
			      "%s: element %" PRIu64 " %a decodes to %a", what, i, x[i], out[i]);
		}
		used = 4 + n;
	} else {
		uint32_t G = per_channel ? 1 : kvt_int4_group(D);
		uint64_t n_pairs = per_channel ? D : (uint64_t)T * (D / G);
		const uint8_t *data = tile + 4 * n_pairs;

		/* Pair k covers, per channel, channel k over the tokens; per
		 * token, G channels of one token. */
		for (uint64_t k = 0; k < n_pairs; k++) {
			float lo = INFINITY, hi = -INFINITY, S, M;
			uint16_t sb, mb;
			uint64_t cnt = per_channel ? T : G;

			for (uint64_t j = 0; j < cnt; j++) {
				uint64_t i = per_channel ? j * D + k : k * G + j;

				lo = fminf(lo, x[i]);
				hi = fmaxf(hi, x[i]);
			}
			memcpy(&sb, tile + 4 * k, 2);
			memcpy(&mb, tile + 4 * k + 2, 2);
			S = half_value(sb);
			M = half_value(mb);
			CHECK(sb == half_bits((hi - lo) / 15.0f) && mb == half_bits(lo),
			      "%s: pair %" PRIu64 " (%a, %a) of [%a, %a]", what, k, S, M, lo, hi);
			for (uint64_t j = 0; j < cnt; j++) {
				uint64_t i = per_channel ? j * D + k : k * G + j;
				unsigned q = (data[i / 2] >> (i & 1 ? 4 : 0)) & 15;
				double bound = fmax(S / 2.0, fabs((double)lo - M) +
								     fabs((double)hi - lo - 15.0 * S)) +
					       ldexp(S, -18) +
					       ldexp(fabs(x[i]) + fabs(M) + 15.0 * S, -22);

				out[i] = M + (float)q * S;
				CHECK(fabs((double)out[i] - x[i]) <= bound,
				      "%s: element %" PRIu64 " %a decodes to %a (q %u, S %a, M %a)",
				      what, i, x[i], out[i], q, S, M);
			}
		}
		used = 4 * n_pairs + (n + 1) / 2;
		if (n & 1)
			CHECK((data[n / 2] >> 4) == 0, "%s: the nibble after the last is set",
			      what);
	}
	for (uint64_t i = used; i < bytes; i++)
		CHECK(tile[i] == 0, "%s: padding byte %" PRIu64 " is 0x%02x", what, i, tile[i]);
	return bytes;
}

/* ---- the sweep -------------------------------------------------------- */

static void pick_indices(const struct tcase *tc, uint32_t bs, uint32_t np, size_t n_blocks,
			 int64_t *idx)
{
	size_t n_slots = (size_t)bs * np;
	uint8_t *used = calloc(n_slots > np ? n_slots : np, 1);

	if (tc->index_kind == KVT_INDEX_PAGE) {
		for (size_t b = 0; b < n_blocks; b++) {
			uint64_t g;

			do
				g = rnd() % np;
			while (used[g]);
			used[g] = 1;
			idx[b] = (int64_t)g;
		}
	} else {
		int64_t prev = -1;

		for (size_t j = 0; j < n_blocks * tc->bt; j++) {
			uint64_t s, dice = rnd() % 8;

			if (dice == 0 || j == 1) { /* padding, always some */
				idx[j] = -1;
				continue;
			}
			if (dice < 6 && prev >= 0 && (size_t)prev + 1 < n_slots && !used[prev + 1])
				s = (uint64_t)prev + 1;
			else
				do
					s = rnd() % n_slots;
				while (used[s]);
			used[s] = 1;
			idx[j] = prev = (int64_t)s;
		}
	}
	free(used);
}

#define N_BLOCKS 3

/*
 * One case: gather N_BLOCKS blocks from a cache of tc's kind, check every
 * tile, scatter them into a poisoned cache and compare it byte for byte
 * with the one expected.  Returns the gathered blocks, [N_BLOCKS] of
 * *ret_bytes, for the caller to compare across layouts.
 */
static uint8_t **run_case(const struct tcase *tc, uint32_t bs, uint32_t np, const int64_t *idx,
			  uint64_t *ret_bytes)
{
	struct cache c, back, want;
	uint64_t block_bytes, at;
	uint8_t **blocks = xmalloc(N_BLOCKS * sizeof(*blocks));
	float *x, *dec;
	char what[200];
	int r;

	describe(tc, what, sizeof(what));
	cache_init(&c, tc->kind, tc->dtype, tc->d, bs, np);
	cache_init(&back, tc->kind, tc->dtype, tc->d, bs, np);
	cache_init(&want, tc->kind, tc->dtype, tc->d, bs, np);
	cache_fill(&c);
	c.lay.index_kind = back.lay.index_kind = tc->index_kind;
	c.lay.codec = back.lay.codec = tc->codec;

	block_bytes = 0;
	for (uint32_t p = 0; p < c.planes; p++)
		block_bytes += (uint64_t)N_LAYERS * c.heads *
			       kvt_codec_tile_bytes(tc->codec, c.planes == 2 && p == 0, tc->bt,
						    tc->d);
	CHECK(kvt_layout_block_bytes(&c.lay, tc->bt) == block_bytes, "%s: %" PRIu64 " != %" PRIu64,
	      what, kvt_layout_block_bytes(&c.lay, tc->bt), block_bytes);
	for (int b = 0; b < N_BLOCKS; b++) {
		blocks[b] = xmalloc(block_bytes);
		memset(blocks[b], 0x77, block_bytes);
	}
	r = kvt_layout_gather(&c.lay, tc->bt, idx, N_BLOCKS, (void *const *)blocks);
	CHECK(r == 0, "%s: gather: %d", what, r);

	x = xmalloc((size_t)tc->bt * tc->d * sizeof(float));
	dec = xmalloc((size_t)tc->bt * tc->d * sizeof(float));
	for (int b = 0; b < N_BLOCKS && r == 0; b++) {
		at = 0;
		for (uint32_t l = 0; l < N_LAYERS; l++)
			for (uint32_t p = 0; p < c.planes; p++)
				for (uint32_t h = 0; h < c.heads; h++) {
					char tw[260];

					snprintf(tw, sizeof(tw), "%s block %d tile (%u, %u, %u)", what,
						 b, l, p, h);
					for (uint32_t t = 0; t < tc->bt; t++) {
						uint64_t page;
						uint32_t tk;
						int pad = token_at(&c, tc, idx, (size_t)b, t, &page, &tk);

						for (uint32_t i = 0; i < tc->d; i++)
							x[t * tc->d + i] =
								pad ? 0.0f
								    : elem_get(elem_at(&c, l, p, page, tk, h, i),
									       tc->dtype);
					}
					at += check_tile(tw, tc->codec, c.planes == 2 && p == 0, tc->bt,
							 tc->d, x, blocks[b] + at, dec);
					/* What scatter must write: the decoded values in the
					 * cache's dtype, for tokens that are not padding. */
					for (uint32_t t = 0; t < tc->bt; t++) {
						uint64_t page;
						uint32_t tk;

						if (token_at(&c, tc, idx, (size_t)b, t, &page, &tk) < 0)
							continue;
						for (uint32_t i = 0; i < tc->d; i++)
							elem_put(elem_at(&want, l, p, page, tk, h, i),
								 tc->dtype, dec[t * tc->d + i]);
					}
				}
		CHECK(at == block_bytes, "%s: tiles %" PRIu64 " of %" PRIu64, what, at, block_bytes);
	}

	r = kvt_layout_scatter(&back.lay, tc->bt, idx, N_BLOCKS, (const void *const *)blocks);
	CHECK(r == 0, "%s: scatter: %d", what, r);
	for (int i = 0; i < back.n_bufs; i++) {
		size_t n = back.bytes + 2 * GUARD;

		if (memcmp(back.mem[i], want.mem[i], n) != 0) {
			size_t off = 0;

			while (back.mem[i][off] == want.mem[i][off])
				off++;
			CHECK(0, "%s: scatter: buffer %d differs at byte %zd (guard %d): 0x%02x, want 0x%02x",
			      what, i, (ssize_t)off - GUARD, GUARD, back.mem[i][off], want.mem[i][off]);
		}
	}

	free(x);
	free(dec);
	cache_free(&c);
	cache_free(&back);
	cache_free(&want);
	*ret_bytes = block_bytes;
	return blocks;
}

static void free_blocks(uint8_t **blocks)
{
	for (int b = 0; b < N_BLOCKS; b++)
		free(blocks[b]);
	free(blocks);
}

/*
 * One point of a sweep over every layout: the blocks of the two-plane
 * layouts must be the same bytes.  Returns the cases run.
 */
static int sweep_point(struct tcase tc)
{
	/* Pages of the block's tokens, or of 4 with room for spare slots. */
	uint32_t bs = tc.index_kind == KVT_INDEX_PAGE ? tc.bt : 4;
	uint32_t np = tc.index_kind == KVT_INDEX_PAGE ? 5 : (2 * N_BLOCKS * tc.bt + bs - 1) / bs + 1;
	int64_t idx[N_BLOCKS * 16];
	uint8_t **first = NULL;
	uint64_t first_bytes = 0;
	char what[200];

	value_seed = rnd();
	pick_indices(&tc, bs, np, N_BLOCKS, idx);
	for (int k = 0; k < N_KINDS; k++) {
		uint8_t **blocks;
		uint64_t bytes;

		tc.kind = (enum kind)k;
		describe(&tc, what, sizeof(what));
		blocks = run_case(&tc, bs, np, idx, &bytes);
		if (fill_mode == FILL_ZERO)
			for (int b = 0; b < N_BLOCKS; b++)
				for (uint64_t i = 0; i < bytes; i++)
					CHECK(blocks[b][i] == 0, "%s: zeros: byte %" PRIu64 " is 0x%02x",
					      what, i, blocks[b][i]);
		if (k == MLA) {
			free_blocks(blocks);
			continue;
		}
		if (!first) {
			first = blocks;
			first_bytes = bytes;
			continue;
		}
		CHECK(bytes == first_bytes, "%s", what);
		for (int b = 0; b < N_BLOCKS && bytes == first_bytes; b++)
			CHECK(memcmp(blocks[b], first[b], bytes) == 0, "%s: block %d differs from %s's",
			      what, b, kind_names[0]);
		free_blocks(blocks);
	}
	free_blocks(first);
	return N_KINDS;
}

static int test_sweep(void)
{
	static const uint32_t dtypes[] = {KVT_DTYPE_FLOAT32, KVT_DTYPE_FLOAT16, KVT_DTYPE_BFLOAT16};
	static const uint32_t tokens[] = {1, 3, 16};
	static const uint32_t dims[] = {1, 24, 64, 128};
	int n = 0;

	fill_mode = FILL_RANDOM;
	for (uint32_t codec = KVT_CODEC_FP8_E4M3; codec <= KVT_CODEC_INT4; codec++)
		for (size_t di = 0; di < 3; di++)
			for (size_t ti = 0; ti < 3; ti++)
				for (size_t ii = 0; ii < 4; ii++)
					for (uint32_t ik = KVT_INDEX_PAGE; ik <= KVT_INDEX_SLOT; ik++)
						n += sweep_point((struct tcase){
							.codec = codec, .dtype = dtypes[di],
							.bt = tokens[ti], .d = dims[ii],
							.index_kind = ik});
	return n;
}

/* All-zero, constant and one-outlier tiles: the general checks (zeros:
 * a scale of 0, zero data, exact zeros back; constant int4: a scale of 0,
 * every element back as the min), and all-zero blocks. */
static int test_special_tiles(void)
{
	int n = 0;

	for (uint32_t codec = KVT_CODEC_FP8_E4M3; codec <= KVT_CODEC_INT4; codec++)
		for (int mode = FILL_ZERO; mode <= FILL_OUTLIER; mode++)
			for (uint32_t ik = KVT_INDEX_PAGE; ik <= KVT_INDEX_SLOT; ik++) {
				fill_mode = mode;
				n += sweep_point((struct tcase){.codec = codec,
								.dtype = KVT_DTYPE_BFLOAT16,
								.bt = 16, .d = 64, .index_kind = ik});
			}
	fill_mode = FILL_RANDOM;
	return n;
}

/* ---- E4M3, code by code ----------------------------------------------- */

/* One f32 tile of 16 tokens of 16 elements: 256 values, one per code. */
struct tile256 {
	float cache[256];
	void *base[1];
	kvt_layout lay;
	uint8_t block[4 + 256];
	int64_t page;
};

static void tile256_init(struct tile256 *s)
{
	s->base[0] = s->cache;
	s->page = 0;
	s->lay = (kvt_layout){.n_layers = 1, .planes = 1, .heads = 1, .head_bytes = 16 * 4,
			      .page_tokens = 16, .index_kind = KVT_INDEX_PAGE,
			      .layer_base = s->base, .stride_page = 256 * 4, .stride_token = 16 * 4,
			      .n_pages = 1, .dtype = KVT_DTYPE_FLOAT32,
			      .codec = KVT_CODEC_FP8_E4M3};
	CHECK(kvt_layout_block_bytes(&s->lay, 16) == sizeof(s->block));
}

static void test_e4m3_codes(void)
{
	struct tile256 s;
	void *blocks[1];
	const void *cblocks[1];
	float one = 1.0f;
	int k;

	tile256_init(&s);
	blocks[0] = s.block;
	cblocks[0] = s.block;

	/* Decoding: a tile of scale 1 holding every code. */
	memcpy(s.block, &one, 4);
	for (unsigned c = 0; c < 256; c++)
		s.block[4 + c] = (uint8_t)c;
	CHECK(kvt_layout_scatter(&s.lay, 16, &s.page, 1, cblocks) == 0);
	for (unsigned c = 0; c < 256; c++) {
		float want = e4m3_value(c);

		if ((c & 0x7f) == 0x7f)
			CHECK(isnan(s.cache[c]), "code 0x%02x decodes to %a, not NaN", c, s.cache[c]);
		else
			CHECK(bits_of(s.cache[c]) == bits_of(want), "code 0x%02x decodes to %a, want %a",
			      c, s.cache[c], want);
	}

	/* Encoding: with 448 in the tile the scale is 1, and each value is
	 * its own code; a NaN is 0x7f whatever its sign. */
	for (unsigned c = 0; c < 256; c++)
		s.cache[c] = e4m3_value(c);
	s.cache[0xff] = -NAN;
	CHECK(kvt_layout_gather(&s.lay, 16, &s.page, 1, blocks) == 0);
	CHECK(bits_of(*(float *)(void *)s.block) == bits_of(1.0f));
	for (unsigned c = 0; c < 256; c++) {
		unsigned want = c == 0xff ? 0x7f : c;

		CHECK(s.block[4 + c] == want, "%a encodes to 0x%02x, want 0x%02x", e4m3_value(c),
		      s.block[4 + c], want);
	}

	/* Midpoints between neighbouring codes go to the even one. */
	memset(s.cache, 0, sizeof(s.cache));
	s.cache[0] = 448.0f;
	k = 1;
	for (unsigned c = 0; c < 0x7e; c++)
		for (int neg = 0; neg < 2; neg++) {
			float mid = (e4m3_value(c) + e4m3_value(c + 1)) / 2.0f;

			s.cache[k++] = neg ? -mid : mid;
		}
	CHECK(kvt_layout_gather(&s.lay, 16, &s.page, 1, blocks) == 0);
	k = 1;
	for (unsigned c = 0; c < 0x7e; c++)
		for (int neg = 0; neg < 2; neg++, k++) {
			unsigned want = (c & 1 ? c + 1 : c) | (neg ? 0x80 : 0);

			CHECK(s.block[4 + k] == want, "midpoint %a encodes to 0x%02x, want 0x%02x",
			      s.cache[k], s.block[4 + k], want);
		}
}

/* Layouts no codec can read, and sizes. */
static void test_refusals(void)
{
	struct cache c;
	uint8_t block[4096];
	void *blocks[1] = {block};
	const void *cblocks[1] = {block};
	int64_t page = 0;
	kvt_layout bad;

	cache_init(&c, NHD, KVT_DTYPE_FLOAT16, 4, 4, 1);
	c.lay.codec = KVT_CODEC_INT4;
	/* K: 4 pairs + 8 bytes; V (groups of 4): 4 pairs + 8 bytes. */
	CHECK(kvt_layout_block_bytes(&c.lay, 4) == N_LAYERS * HEADS * (24 + 24));
	c.lay.codec = KVT_CODEC_FP8_E4M3;
	CHECK(kvt_layout_block_bytes(&c.lay, 4) == N_LAYERS * HEADS * 2 * (4 + 16));

#define REFUSED(field, value)                                                          \
	do {                                                                           \
		bad = c.lay;                                                           \
		bad.field = value;                                                     \
		CHECK(kvt_layout_block_bytes(&bad, 4) == 0, #field " = " #value);      \
		CHECK(kvt_layout_gather(&bad, 4, &page, 1, blocks) == -EINVAL, #field); \
		CHECK(kvt_layout_scatter(&bad, 4, &page, 1, cblocks) == -EINVAL, #field); \
	} while (0)

	REFUSED(codec, KVT_CODEC_COUNT);
	REFUSED(dtype, 0);
	REFUSED(dtype, KVT_DTYPE_FLOAT8_E4M3);
	REFUSED(dtype, KVT_DTYPE_INT8);
	REFUSED(head_bytes, 7); /* not whole halves */
	c.lay.dtype = KVT_DTYPE_FLOAT32;
	REFUSED(head_bytes, 6); /* not whole floats */
	cache_free(&c);

	/* K by columns: of elements of the dtype. */
	cache_init(&c, CPU_COLUMNS, KVT_DTYPE_FLOAT16, 4, 4, 1);
	c.lay.codec = KVT_CODEC_FP8_E4M3;
	CHECK(kvt_layout_block_bytes(&c.lay, 4) == N_LAYERS * HEADS * 2 * (4 + 16));
	REFUSED(elem_bytes, 4);
#undef REFUSED
	cache_free(&c);
}

int main(void)
{
	int n;

	test_e4m3_codes();
	test_refusals();
	n = test_special_tiles();
	n += test_sweep();

	if (failures) {
		fprintf(stderr, "test-codec: %d check(s) failed\n", failures);
		return 1;
	}
	printf("test-codec: ok (%d cases)\n", n);
	return 0;
}
