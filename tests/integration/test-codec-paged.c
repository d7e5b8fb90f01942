/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A coded namespace end to end through a real kvtierd: one process stores
 * blocks of a bfloat16 paged cache with kvt_store_paged in a namespace of
 * codec fp8-e4m3 (then int4), another loads them into other pages of a
 * fresh cache with kvt_load_paged and finds every value within the
 * codec's bound (tests/unit/test-codec.c derives them) and every other
 * byte untouched.  The slots are the coded size, and a namespace of the
 * same model without a codec (or with the other one) misses those keys.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "codec.h"
#include "harness.h"

#define LAYERS 4
#define HEADS 2
#define D 64 /* bfloat16 elements a head */
#define BT 16
#define PAGES 8
#define N 4
#define POISON 0xa5

static struct daemon d;

static const int64_t store_pages[N] = {5, 2, 7, 0};
static const int64_t load_pages[N] = {1, 3, 4, 6};

static int open_ns(kvt_client *c, uint32_t codec, kvt_ns **ret)
{
	static const uint8_t weights[] = "codec-paged-weights";
	const kvt_layer_group g = {
		.n_layers = LAYERS, .attn = KVT_ATTN_MHA, .planes = 2, .kv_heads = HEADS,
		.head_bytes = D * 2, .dtype = KVT_DTYPE_BFLOAT16,
	};
	const kvt_ns_desc desc = {
		.model = "codec-paged-model", .weights = weights, .weights_len = sizeof(weights),
		.layer_end = LAYERS, .tp_size = 1, .cp_size = 1, .block_tokens = BT,
		.n_groups = 1, .groups = &g, .codec = codec,
	};
	*ret = NULL;
	return kvt_ns_open(c, &desc, ret);
}

/* One layer: [page][plane][token][head][D] bfloat16 (FlashInfer's). */
struct cache {
	uint16_t *mem;
	void *base[LAYERS];
	kvt_layout lay;
};

#define LAYER_ELEMS ((size_t)PAGES * 2 * BT * HEADS * D)

static uint16_t *elem(struct cache *c, uint32_t l, int64_t page, uint32_t p, uint32_t t,
		      uint32_t h, uint32_t i)
{
	return (uint16_t *)c->base[l] + (((page * 2 + p) * BT + t) * HEADS + h) * D + i;
}

static void cache_init(struct cache *c)
{
	c->mem = malloc(LAYER_ELEMS * LAYERS * 2);
	CHECK(c->mem, "out of memory");
	memset(c->mem, POISON, LAYER_ELEMS * LAYERS * 2);
	for (int l = 0; l < LAYERS; l++)
		c->base[l] = c->mem + l * LAYER_ELEMS;
	c->lay = (kvt_layout){.n_layers = LAYERS, .planes = 2, .heads = HEADS,
			      .head_bytes = D * 2, .page_tokens = BT, .index_kind = KVT_INDEX_PAGE,
			      .layer_base = c->base, .stride_plane = BT * HEADS * D * 2,
			      .stride_page = 2 * BT * HEADS * D * 2, .stride_token = HEADS * D * 2,
			      .stride_head = D * 2, .n_pages = PAGES};
}

static float bf16(uint16_t h)
{
	uint32_t u = (uint32_t)h << 16;
	float f;

	memcpy(&f, &u, 4);
	return f;
}

/* Value of element (l, p, t, h, i) of block b, as a bfloat16 (truncated):
 * magnitudes from 2^-6 to 2^3, each tile its own. */
static uint16_t value(uint32_t b, uint32_t l, uint32_t p, uint32_t t, uint32_t h, uint32_t i)
{
	uint32_t x = ((((b * LAYERS + l) * 2 + p) * BT + t) * HEADS + h) * D + i;
	float v;
	uint32_t u;

	x = (x ^ 61) ^ (x >> 16);
	x *= 9;
	x ^= x >> 4;
	x *= 0x27d4eb2d;
	x ^= x >> 15;
	v = ((float)(x & 0xffff) / 32768.0f - 1.0f) * ldexpf(1.0f, (int)((b + l + p + h) % 10) - 6);
	memcpy(&u, &v, 4);
	return (uint16_t)(u >> 16);
}

static void writer(uint32_t codec)
{
	kvt_client *c = client_connect(&d, "codec-writer");
	struct cache src;
	kvt_ns *ns;
	kvt_ns_info info;
	uint8_t keys[N * KVT_KEY_BYTES];
	uint64_t coded;
	int32_t st[N];

	CHECK(open_ns(c, codec, &ns) == 0, "open %s: %s", kvt_codec_name(codec),
	      kvt_client_error(c));
	kvt_ns_get_info(ns, &info);
	cache_init(&src);
	for (uint32_t b = 0; b < N; b++)
		for (uint32_t l = 0; l < LAYERS; l++)
			for (uint32_t p = 0; p < 2; p++)
				for (uint32_t t = 0; t < BT; t++)
					for (uint32_t h = 0; h < HEADS; h++)
						for (uint32_t i = 0; i < D; i++)
							*elem(&src, l, store_pages[b], p, t, h, i) =
								value(b, l, p, t, h, i);
	/* The slot is the coded block: tiles of K and V, per layer and head. */
	coded = (uint64_t)LAYERS * HEADS *
		(kvt_codec_tile_bytes(codec, 1, BT, D) + kvt_codec_tile_bytes(codec, 0, BT, D));
	CHECK(info.codec == codec && info.shard_bytes == coded &&
		      info.block_bytes == ((coded + 4095) & ~4095ull),
	      "%s: shard %llu, slot %llu, want %llu", kvt_codec_name(codec),
	      (unsigned long long)info.shard_bytes, (unsigned long long)info.block_bytes,
	      (unsigned long long)coded);
	for (uint32_t b = 0; b < N; b++)
		token_key(28 + codec, b, keys + b * KVT_KEY_BYTES);
	CHECK(kvt_store_paged(ns, 0, &src.lay, keys, N, store_pages, st) == N, "store: %s",
	      kvt_client_error(c));
	free(src.mem);
	kvt_ns_close(ns);
	kvt_client_free(c);
}

/* |x - x'| for x' as the codec decodes x and bfloat16 rounds it: the
 * format's bound (test-codec.c) plus half a bfloat16 ulp, 2^-8 |x'|. */
static double bound(uint32_t codec, float x, float amax, float lo, float hi)
{
	double b;

	if (codec == KVT_CODEC_FP8_E4M3)
		b = fmax(ldexp(fabs(x), -4), ldexp(amax / 448.0, -10)) + ldexp(fabs(x), -20);
	else /* the range's step, within half's rounding of scale and min */
		b = (hi - lo) / 15.0 * (0.5 + 16 * 0x1p-11) + ldexp(fabs(lo), -11) +
		    ldexp(fabs(x), -20) + 0x1p-24;
	return b + ldexp(fabs(x) + b, -8);
}

static void reader(uint32_t codec)
{
	kvt_client *c = client_connect(&d, "codec-reader");
	struct cache dst;
	kvt_ns *ns, *other;
	uint8_t keys[N * KVT_KEY_BYTES];
	int32_t st[N];

	for (uint32_t b = 0; b < N; b++)
		token_key(28 + codec, b, keys + b * KVT_KEY_BYTES);
	/* Codecs never mix: the same model's other namespaces miss. */
	for (uint32_t o = KVT_CODEC_NONE; o <= KVT_CODEC_INT4; o++) {
		if (o == codec)
			continue;
		CHECK(open_ns(c, o, &other) == 0, "open %s", kvt_codec_name(o));
		CHECK(kvt_lookup(other, keys, N, 0, NULL) == 0, "%s blocks are a miss for %s",
		      kvt_codec_name(codec), kvt_codec_name(o));
		kvt_ns_close(other);
	}

	CHECK(open_ns(c, codec, &ns) == 0, "open %s: %s", kvt_codec_name(codec),
	      kvt_client_error(c));
	cache_init(&dst);
	CHECK(kvt_load_paged(ns, 0, &dst.lay, keys, N, load_pages, st) == N, "load: %s",
	      kvt_client_error(c));
	for (uint32_t b = 0; b < N; b++)
		for (uint32_t l = 0; l < LAYERS; l++)
			for (uint32_t p = 0; p < 2; p++)
				for (uint32_t h = 0; h < HEADS; h++) {
					float amax = 0, x, lo, hi;

					for (uint32_t t = 0; t < BT; t++)
						for (uint32_t i = 0; i < D; i++)
							amax = fmaxf(amax, fabsf(bf16(value(b, l, p, t, h, i))));
					for (uint32_t t = 0; t < BT; t++)
						for (uint32_t i = 0; i < D; i++) {
							/* int4's group: K, channel i over the
							 * tokens; V, 32 channels of token t. */
							lo = INFINITY;
							hi = -INFINITY;
							for (uint32_t j = 0; j < (p == 0 ? BT : 32); j++) {
								x = bf16(p == 0 ? value(b, l, p, j, h, i)
										: value(b, l, p, t, h,
											i / 32 * 32 + j));
								lo = fminf(lo, x);
								hi = fmaxf(hi, x);
							}
							x = bf16(value(b, l, p, t, h, i));
							float got = bf16(*elem(&dst, l, load_pages[b], p, t, h, i));

							CHECK(fabs((double)got - x) <= bound(codec, x, amax, lo, hi),
							      "%s: block %u (%u, %u, %u, %u, %u): %a, stored %a",
							      kvt_codec_name(codec), b, l, p, t, h, i, got, x);
						}
				}
	/* Pages the load did not name keep their poison. */
	for (int64_t g = 0; g < PAGES; g++) {
		int named = 0;

		for (int b = 0; b < N; b++)
			named |= load_pages[b] == g;
		if (named)
			continue;
		for (uint32_t l = 0; l < LAYERS; l++) {
			const uint8_t *pg = (const uint8_t *)elem(&dst, l, g, 0, 0, 0, 0);

			for (size_t k = 0; k < (size_t)2 * BT * HEADS * D * 2; k++)
				CHECK(pg[k] == POISON, "page %lld of layer %u written",
				      (long long)g, l);
		}
	}
	free(dst.mem);
	kvt_ns_close(ns);
	kvt_client_free(c);
}

static void in_child(void (*fn)(uint32_t), uint32_t codec)
{
	pid_t pid = fork();

	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		harness_in_child();
		fn(codec);
		_exit(0);
	}
	CHECK(wait_exit(pid) == 0, "%s of %s failed", fn == writer ? "the writer" : "the reader",
	      kvt_codec_name(codec));
}

int main(void)
{
	daemon_start(&d, "");
	for (uint32_t codec = KVT_CODEC_FP8_E4M3; codec <= KVT_CODEC_INT4; codec++) {
		in_child(writer, codec);
		in_child(reader, codec);
	}
	daemon_stop(&d);
	daemon_cleanup(&d);
	return 0;
}
