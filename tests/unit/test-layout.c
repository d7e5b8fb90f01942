/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Gather and scatter between engine KV caches and kvtier blocks, for every
 * engine layout kvt_layout is meant to describe, over sweeps of head sizes,
 * page and block sizes and head counts.
 *
 * The expected bytes come from a reference written here from the shapes
 * alone: one explicit loop nest per engine layout walks the engine tensor in
 * its own order and says where each head of each token belongs in a block.
 * It shares nothing with the library's index math.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvtier.h"
#include "../check.h"
#include "../engine-layouts.h"
#include "rng.h"

#define N_LAYERS 3
#define POISON 0xa5
#define BLOCK_FILL 0x5a
/* Bytes after each token of K_ROW_PAD, as in caches with aligned rows. */
#define TOKEN_PAD 32

/* The layouts this test builds, in the order it sweeps them. */
static const enum layout_kind kinds[] = {
	K_FA_NHD, K_FA_HND, K_FLASHINFER, K_MLA, K_CROSS, K_DENSE, K_ROW_PAD,
	K_TRTLLM, K_VLLM_LBNHC, K_VLLM_LBHNC, K_VLLM_LHBNC, K_VLLM_BLNHC,
	K_VLLM_BHLNC, K_VLLM_CPU, K_VLLM_CPU_COLUMNS,
};

static void fill_random(uint8_t *p, size_t n)
{
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		uint64_t v = rnd();

		memcpy(p + i, &v, 8);
	}
	for (; i < n; i++)
		p[i] = (uint8_t)rnd();
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p) {
		fprintf(stderr, "out of memory (%zu bytes)\n", n);
		exit(1);
	}
	return p;
}

/* One engine cache of a given shape. */
struct cache {
	enum layout_kind kind;
	uint32_t planes;
	uint32_t heads;
	uint32_t hb;   /* bytes per head */
	uint32_t elem; /* bytes per element of a head */
	uint32_t bs;   /* tokens per page (S for the dense cache) */
	uint32_t nb;   /* pages (B for the dense cache) */
	size_t bytes;  /* bytes of buf[l], or of the one buffer */
};

/* The three copies of an engine cache a case needs. */
struct engine {
	uint8_t *buf[N_LAYERS]; /* all equal when is_one_buffer() */
	void *base[N_LAYERS];   /* layer_base handed to the library */
};

static int is_one_buffer(enum layout_kind k)
{
	return layout_kind_buffers(k) == LAYOUT_ONE_BUFFER;
}

static size_t cache_bytes(const struct cache *c)
{
	size_t elem = (size_t)c->nb * c->bs * c->heads * c->hb;

	switch (c->kind) {
	case K_MLA:
		return elem;
	case K_CROSS:
	case K_TRTLLM:
	case K_VLLM_BLNHC:
	case K_VLLM_BHLNC:
		return elem * 2 * N_LAYERS;
	case K_ROW_PAD:
		return (size_t)2 * c->nb * c->bs *
		       ((size_t)c->heads * c->hb + TOKEN_PAD);
	default:
		return elem * 2;
	}
}

static void engine_alloc(const struct cache *c, struct engine *e)
{
	if (is_one_buffer(c->kind)) {
		uint8_t *p = xmalloc(c->bytes);
		/* Where layer l starts: the dimensions inside L. */
		size_t layer = (size_t)2 * c->bs * c->hb *
			       (c->kind == K_VLLM_BHLNC ? 1 : c->heads);

		for (int l = 0; l < N_LAYERS; l++) {
			e->buf[l] = p;
			e->base[l] = p + l * layer;
		}
		return;
	}
	/* Separate allocations, so that a layer reached by any route other
	 * than its base pointer shows up (under ASan, as an overflow). */
	for (int l = 0; l < N_LAYERS; l++) {
		e->buf[l] = xmalloc(c->bytes);
		e->base[l] = e->buf[l];
	}
}

static void engine_free(const struct cache *c, struct engine *e)
{
	if (is_one_buffer(c->kind)) {
		free(e->buf[0]);
		return;
	}
	for (int l = 0; l < N_LAYERS; l++)
		free(e->buf[l]);
}

static int engine_n_bufs(const struct cache *c)
{
	return is_one_buffer(c->kind) ? 1 : N_LAYERS;
}

/* The descriptor an engine adapter would write for this cache. */
static void cache_layout(const struct cache *c, const struct engine *e,
			 uint32_t index_kind, kvt_layout *ret)
{
	int64_t H = c->heads, hb = c->hb, bs = c->bs, nb = c->nb;

	memset(ret, 0, sizeof(*ret));
	ret->n_layers = N_LAYERS;
	ret->planes = c->planes;
	ret->heads = c->heads;
	ret->head_bytes = c->hb;
	ret->page_tokens = c->bs;
	ret->index_kind = index_kind;
	ret->layer_base = e->base;

	switch (c->kind) {
	case K_FA_NHD:
		ret->stride_plane = nb * bs * H * hb;
		ret->stride_page = bs * H * hb;
		ret->stride_token = H * hb;
		ret->stride_head = hb;
		break;
	case K_FA_HND:
		ret->stride_plane = nb * H * bs * hb;
		ret->stride_page = H * bs * hb;
		ret->stride_token = hb;
		ret->stride_head = bs * hb;
		break;
	case K_FLASHINFER:
		ret->stride_page = 2 * bs * H * hb;
		ret->stride_plane = bs * H * hb;
		ret->stride_token = H * hb;
		ret->stride_head = hb;
		break;
	case K_MLA:
		ret->stride_plane = 0;
		ret->stride_page = bs * hb;
		ret->stride_token = hb;
		ret->stride_head = 0;
		break;
	case K_CROSS:
		ret->stride_page = (int64_t)N_LAYERS * 2 * bs * H * hb;
		ret->stride_plane = bs * H * hb;
		ret->stride_token = H * hb;
		ret->stride_head = hb;
		break;
	case K_DENSE:
		ret->stride_plane = nb * H * bs * hb;
		ret->stride_page = H * bs * hb;
		ret->stride_token = hb;
		ret->stride_head = bs * hb;
		break;
	case K_TRTLLM:
		ret->stride_page = (int64_t)N_LAYERS * 2 * H * bs * hb;
		ret->stride_plane = H * bs * hb;
		ret->stride_token = hb;
		ret->stride_head = bs * hb;
		break;
	case K_ROW_PAD:
		ret->stride_plane = nb * bs * (H * hb + TOKEN_PAD);
		ret->stride_page = bs * (H * hb + TOKEN_PAD);
		ret->stride_token = H * hb + TOKEN_PAD;
		ret->stride_head = hb;
		break;
	case K_VLLM_LBNHC:
		ret->stride_plane = hb;
		ret->stride_page = bs * H * 2 * hb;
		ret->stride_token = H * 2 * hb;
		ret->stride_head = 2 * hb;
		break;
	case K_VLLM_LBHNC:
		ret->stride_plane = hb;
		ret->stride_page = H * bs * 2 * hb;
		ret->stride_token = 2 * hb;
		ret->stride_head = bs * 2 * hb;
		break;
	case K_VLLM_LHBNC:
		ret->stride_plane = hb;
		ret->stride_page = bs * 2 * hb;
		ret->stride_token = 2 * hb;
		ret->stride_head = nb * bs * 2 * hb;
		break;
	case K_VLLM_BLNHC:
		ret->stride_plane = hb;
		ret->stride_page = (int64_t)N_LAYERS * bs * H * 2 * hb;
		ret->stride_token = H * 2 * hb;
		ret->stride_head = 2 * hb;
		break;
	case K_VLLM_BHLNC:
		ret->stride_plane = hb;
		ret->stride_page = H * (int64_t)N_LAYERS * bs * 2 * hb;
		ret->stride_token = 2 * hb;
		ret->stride_head = (int64_t)N_LAYERS * bs * 2 * hb;
		break;
	case K_VLLM_CPU:
	case K_VLLM_CPU_COLUMNS:
		ret->stride_plane = bs * hb;
		ret->stride_page = H * 2 * bs * hb;
		ret->stride_token = hb;
		ret->stride_head = 2 * bs * hb;
		if (c->kind == K_VLLM_CPU_COLUMNS) {
			ret->flags = KVT_LAYOUT_K_COLUMNS;
			ret->elem_bytes = c->elem;
		}
		break;
	default:
		abort();
	}
}

/*
 * The reference.  inv[page * bs + token] is the block position
 * (block * block_tokens + t) that engine token belongs to, or -1.
 * For every head that belongs to a block, it copies the head from orig into
 * its place in the expected blocks and into the expected engine cache.
 */
struct ref {
	const struct cache *c;
	const int64_t *inv;
	uint32_t bt;
	const struct engine *orig;
	const struct engine *want_engine;
	uint8_t *const *want_blocks;
};

/*
 * Copies n bytes at engine byte off, which belong at byte `at` of head h of
 * plane kv of the slot's block token, into the expected block and engine.
 */
static void ref_bytes(const struct ref *r, uint32_t l, size_t off, int64_t slot,
		      uint32_t kv, uint32_t h, size_t at, size_t n)
{
	const struct cache *c = r->c;
	int64_t j = r->inv[slot];
	size_t blk, t, boff;

	if (j < 0)
		return;
	blk = (size_t)j / r->bt;
	t = (size_t)j % r->bt;
	boff = ((((size_t)l * c->planes + kv) * r->bt + t) * c->heads + h) *
	       c->hb + at;
	memcpy(r->want_blocks[blk] + boff, r->orig->buf[l] + off, n);
	memcpy(r->want_engine->buf[l] + off, r->orig->buf[l] + off, n);
}

/* A whole head at engine byte off. */
static void ref_elem(const struct ref *r, uint32_t l, size_t off,
		     int64_t slot, uint32_t kv, uint32_t h)
{
	ref_bytes(r, l, off, slot, kv, h, 0, r->c->hb);
}

/* Heads (of hb bytes) before element (l, g, h, t, kv) of a vLLM 0.32
 * cache: its physical order written out. */
static size_t vllm_offset(enum layout_kind k, size_t l, size_t g, size_t h, size_t t, size_t kv,
			  size_t NB, size_t H, size_t BS)
{
	switch (k) {
	case K_VLLM_LBNHC:
		return ((g * BS + t) * H + h) * 2 + kv;
	case K_VLLM_LBHNC:
		return ((g * H + h) * BS + t) * 2 + kv;
	case K_VLLM_LHBNC:
		return ((h * NB + g) * BS + t) * 2 + kv;
	case K_VLLM_BLNHC:
		return (((g * N_LAYERS + l) * BS + t) * H + h) * 2 + kv;
	case K_VLLM_BHLNC:
		return (((g * H + h) * N_LAYERS + l) * BS + t) * 2 + kv;
	case K_VLLM_CPU:
		return ((g * H + h) * 2 + kv) * BS + t;
	default:
		abort();
	}
}

static void ref_run(const struct ref *r)
{
	const struct cache *c = r->c;
	size_t H = c->heads, hb = c->hb, BS = c->bs, NB = c->nb;

	switch (c->kind) {
	case K_FA_NHD:
		for (uint32_t l = 0; l < N_LAYERS; l++)
			for (size_t kv = 0; kv < 2; kv++)
				for (size_t g = 0; g < NB; g++)
					for (size_t t = 0; t < BS; t++)
						for (size_t h = 0; h < H; h++)
							ref_elem(r, l,
								 (((kv * NB + g) * BS + t) * H + h) * hb,
								 g * BS + t, kv, h);
		break;
	case K_FA_HND:
		for (uint32_t l = 0; l < N_LAYERS; l++)
			for (size_t kv = 0; kv < 2; kv++)
				for (size_t g = 0; g < NB; g++)
					for (size_t h = 0; h < H; h++)
						for (size_t t = 0; t < BS; t++)
							ref_elem(r, l,
								 (((kv * NB + g) * H + h) * BS + t) * hb,
								 g * BS + t, kv, h);
		break;
	case K_FLASHINFER:
		for (uint32_t l = 0; l < N_LAYERS; l++)
			for (size_t g = 0; g < NB; g++)
				for (size_t kv = 0; kv < 2; kv++)
					for (size_t t = 0; t < BS; t++)
						for (size_t h = 0; h < H; h++)
							ref_elem(r, l,
								 (((g * 2 + kv) * BS + t) * H + h) * hb,
								 g * BS + t, kv, h);
		break;
	case K_MLA:
		for (uint32_t l = 0; l < N_LAYERS; l++)
			for (size_t g = 0; g < NB; g++)
				for (size_t t = 0; t < BS; t++)
					ref_elem(r, l, (g * BS + t) * hb,
						 g * BS + t, 0, 0);
		break;
	case K_CROSS:
		for (size_t g = 0; g < NB; g++)
			for (uint32_t l = 0; l < N_LAYERS; l++)
				for (size_t kv = 0; kv < 2; kv++)
					for (size_t t = 0; t < BS; t++)
						for (size_t h = 0; h < H; h++)
							ref_elem(r, l,
								 ((((g * N_LAYERS + l) * 2 + kv) * BS + t) * H + h) * hb,
								 g * BS + t, kv, h);
		break;
	case K_DENSE:
		/* b = batch row, s = position; the engine's slot is b*S + s. */
		for (uint32_t l = 0; l < N_LAYERS; l++)
			for (size_t kv = 0; kv < 2; kv++)
				for (size_t b = 0; b < NB; b++)
					for (size_t h = 0; h < H; h++)
						for (size_t s = 0; s < BS; s++)
							ref_elem(r, l,
								 (((kv * NB + b) * H + h) * BS + s) * hb,
								 b * BS + s, kv, h);
		break;
	case K_TRTLLM:
		for (size_t g = 0; g < NB; g++)
			for (uint32_t l = 0; l < N_LAYERS; l++)
				for (size_t kv = 0; kv < 2; kv++)
					for (size_t h = 0; h < H; h++)
						for (size_t t = 0; t < BS; t++)
							ref_elem(r, l,
								 ((((g * N_LAYERS + l) * 2 + kv) * H + h) * BS + t) * hb,
								 g * BS + t, kv, h);
		break;
	case K_ROW_PAD:
		for (uint32_t l = 0; l < N_LAYERS; l++)
			for (size_t kv = 0; kv < 2; kv++)
				for (size_t g = 0; g < NB; g++)
					for (size_t t = 0; t < BS; t++)
						for (size_t h = 0; h < H; h++)
							ref_elem(r, l,
								 ((kv * NB + g) * BS + t) * (H * hb + TOKEN_PAD) + h * hb,
								 g * BS + t, kv, h);
		break;
	case K_VLLM_LBNHC:
	case K_VLLM_LBHNC:
	case K_VLLM_LHBNC:
	case K_VLLM_BLNHC:
	case K_VLLM_BHLNC:
	case K_VLLM_CPU:
		for (uint32_t l = 0; l < N_LAYERS; l++)
			for (size_t g = 0; g < NB; g++)
				for (size_t h = 0; h < H; h++)
					for (size_t t = 0; t < BS; t++)
						for (size_t kv = 0; kv < 2; kv++)
							ref_elem(r, l, vllm_offset(c->kind, l, g, h, t, kv, NB, H, BS) * hb,
								 g * BS + t, kv, h);
		break;
	case K_VLLM_CPU_COLUMNS:
		/* V row by row, as K_VLLM_CPU; K: element x of token t after
		 * x whole columns of BS elements. */
		for (uint32_t l = 0; l < N_LAYERS; l++)
			for (size_t g = 0; g < NB; g++)
				for (size_t h = 0; h < H; h++)
					for (size_t t = 0; t < BS; t++) {
						size_t head = (g * H + h) * 2 * BS * hb;

						ref_elem(r, l, head + (BS + t) * hb, g * BS + t, 1, h);
						for (size_t x = 0; x < hb / c->elem; x++)
							ref_bytes(r, l, head + (x * BS + t) * c->elem,
								  g * BS + t, 0, h, x * c->elem, c->elem);
					}
		break;
	default:
		abort();
	}
}

struct tcase {
	enum layout_kind kind;
	uint32_t index_kind;
	uint32_t hb;
	uint32_t elem; /* bytes per element of a head */
	uint32_t bs; /* engine page tokens */
	uint32_t bt; /* block tokens */
	uint32_t heads;
};

static void describe(const struct tcase *tc, char *buf, size_t n)
{
	snprintf(buf, n, "%s %s head_bytes=%u page_tokens=%u "
		 "block_tokens=%u heads=%u",
		 layout_kind_name(tc->kind),
		 tc->index_kind == KVT_INDEX_PAGE ? "page" : "slot", tc->hb,
		 tc->bs, tc->bt, tc->heads);
}

static int first_diff(const uint8_t *a, const uint8_t *b, size_t n,
		      size_t *ret_off)
{
	if (memcmp(a, b, n) == 0)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (a[i] != b[i]) {
			*ret_off = i;
			return 1;
		}
	return 0;
}

/*
 * Picks the indices of a case and fills inv.  Pages: distinct random pages.
 * Slots: distinct slots, mostly in runs of consecutive slots (which cross
 * page boundaries when the page is smaller than the block), with some
 * random jumps and some padding.
 */
static void pick_indices(const struct cache *c, const struct tcase *tc,
			 size_t n_blocks, int64_t *indices, int64_t *inv)
{
	size_t n_slots = (size_t)c->nb * c->bs;
	int64_t prev = -1;

	for (size_t i = 0; i < n_slots; i++)
		inv[i] = -1;

	if (tc->index_kind == KVT_INDEX_PAGE) {
		for (size_t b = 0; b < n_blocks; b++) {
			int64_t g;

			do
				g = (int64_t)(rnd() % c->nb);
			while (inv[g * c->bs] >= 0);
			indices[b] = g;
			for (uint32_t t = 0; t < c->bs; t++)
				inv[g * c->bs + t] = (int64_t)(b * tc->bt + t);
		}
		return;
	}

	for (size_t j = 0; j < n_blocks * tc->bt; j++) {
		uint64_t dice = rnd() % 16;
		int64_t s;

		if (dice < 2) {
			indices[j] = -1;
			continue;
		}
		if (dice < 13 && prev >= 0 && (size_t)prev + 1 < n_slots &&
		    inv[prev + 1] < 0) {
			s = prev + 1;
		} else {
			do
				s = (int64_t)(rnd() % n_slots);
			while (inv[s] >= 0);
		}
		indices[j] = s;
		inv[s] = (int64_t)j;
		prev = s;
	}
}

static void run_case(const struct tcase *tc)
{
	struct cache c = {
		.kind = tc->kind,
		.planes = tc->kind == K_MLA ? 1 : 2,
		.heads = tc->heads,
		.hb = tc->hb,
		.elem = tc->elem,
		.bs = tc->bs,
	};
	struct engine orig, poisoned, want_engine;
	size_t n_blocks, block_bytes, n_idx;
	void **blocks;
	const void **cblocks;
	uint8_t **want_blocks;
	int64_t *indices, *inv;
	kvt_layout lay;
	char what[160];
	int r;

	describe(tc, what, sizeof(what));

	if (tc->index_kind == KVT_INDEX_PAGE) {
		n_blocks = 3;
		c.nb = 6;
	} else {
		/* Room for every block token plus spare slots that stay
		 * untouched. */
		n_blocks = 2;
		c.nb = (uint32_t)((3 * n_blocks * tc->bt + c.bs - 1) / c.bs);
		c.nb = c.nb < 4 ? 4 : c.nb;
	}
	c.bytes = cache_bytes(&c);

	engine_alloc(&c, &orig);
	engine_alloc(&c, &poisoned);
	engine_alloc(&c, &want_engine);
	for (int i = 0; i < engine_n_bufs(&c); i++) {
		fill_random(orig.buf[i], c.bytes);
		memset(poisoned.buf[i], POISON, c.bytes);
		memset(want_engine.buf[i], POISON, c.bytes);
	}

	n_idx = tc->index_kind == KVT_INDEX_PAGE ? n_blocks : n_blocks * tc->bt;
	indices = xmalloc(n_idx * sizeof(*indices));
	inv = xmalloc((size_t)c.nb * c.bs * sizeof(*inv));
	pick_indices(&c, tc, n_blocks, indices, inv);

	block_bytes = (size_t)N_LAYERS * c.planes * tc->bt * c.heads * c.hb;
	blocks = xmalloc(n_blocks * sizeof(*blocks));
	cblocks = xmalloc(n_blocks * sizeof(*cblocks));
	want_blocks = xmalloc(n_blocks * sizeof(*want_blocks));
	for (size_t b = 0; b < n_blocks; b++) {
		blocks[b] = xmalloc(block_bytes);
		want_blocks[b] = xmalloc(block_bytes);
		memset(blocks[b], BLOCK_FILL, block_bytes);
		/* Padding tokens are gathered as zeros. */
		memset(want_blocks[b], 0, block_bytes);
	}

	ref_run(&(struct ref){
		.c = &c,
		.inv = inv,
		.bt = tc->bt,
		.orig = &orig,
		.want_engine = &want_engine,
		.want_blocks = want_blocks,
	});

	cache_layout(&c, &orig, tc->index_kind, &lay);
	if (kvt_layout_block_bytes(&lay, tc->bt) != block_bytes) {
		fprintf(stderr, "%s: block_bytes %" PRIu64 " != %zu\n", what,
			kvt_layout_block_bytes(&lay, tc->bt), block_bytes);
		failures++;
	}

	r = kvt_layout_gather(&lay, tc->bt, indices, n_blocks,
			      blocks);
	if (r != 0) {
		fprintf(stderr, "%s: gather returned %d\n", what, r);
		failures++;
		goto out;
	}
	for (size_t b = 0; b < n_blocks; b++) {
		const uint8_t *got = blocks[b];
		size_t off;

		if (first_diff(got, want_blocks[b], block_bytes, &off)) {
			fprintf(stderr,
				"%s: gathered block %zu differs at byte %zu "
				"(0x%02x, want 0x%02x)\n",
				what, b, off, got[off],
				want_blocks[b][off]);
			failures++;
			goto out;
		}
	}

	cache_layout(&c, &poisoned, tc->index_kind, &lay);
	/* C has no implicit void ** to const void *const *; copy the
	 * pointers rather than cast the array. */
	for (size_t b = 0; b < n_blocks; b++)
		cblocks[b] = blocks[b];
	r = kvt_layout_scatter(&lay, tc->bt, indices, n_blocks, cblocks);
	if (r != 0) {
		fprintf(stderr, "%s: scatter returned %d\n", what, r);
		failures++;
		goto out;
	}
	for (int i = 0; i < engine_n_bufs(&c); i++) {
		size_t off;

		if (first_diff(poisoned.buf[i], want_engine.buf[i], c.bytes,
			       &off)) {
			fprintf(stderr,
				"%s: scattered buffer %d differs at byte %zu "
				"(0x%02x, want 0x%02x)\n",
				what, i, off, poisoned.buf[i][off],
				want_engine.buf[i][off]);
			failures++;
			goto out;
		}
	}

out:
	for (size_t b = 0; b < n_blocks; b++) {
		free(blocks[b]);
		free(want_blocks[b]);
	}
	free(blocks);
	free(cblocks);
	free(want_blocks);
	free(indices);
	free(inv);
	engine_free(&c, &orig);
	engine_free(&c, &poisoned);
	engine_free(&c, &want_engine);
}

static uint32_t other_block_size(uint32_t bs)
{
	/* Blocks spanning many one-token pages, two pages, half a page. */
	switch (bs) {
	case 1:
		return 16;
	case 16:
		return 32;
	default:
		return 16;
	}
}

/* Runs the cases of one point of the sweep; returns how many. */
static int sweep_point(enum layout_kind k, uint32_t dim, uint32_t elem,
		       uint32_t size, uint32_t heads)
{
	struct tcase tc = {
		.kind = k,
		.hb = dim * elem,
		.elem = elem,
		.heads = heads,
	};

	/* An MLA latent is one head per token.  576 is the latent's width;
	 * many heads of it only make a case slower, not different. */
	if ((k == K_MLA || dim == 576) && heads != 1)
		return 0;

	if (k == K_DENSE) {
		/* Sequences of 40 positions, blocks of the swept size,
		 * addressed by slot. */
		tc.index_kind = KVT_INDEX_SLOT;
		tc.bs = 40;
		tc.bt = size;
		run_case(&tc);
		return 1;
	}

	tc.bs = size;
	tc.index_kind = KVT_INDEX_PAGE;
	tc.bt = size;
	run_case(&tc);
	tc.index_kind = KVT_INDEX_SLOT;
	run_case(&tc);
	tc.bt = other_block_size(size);
	run_case(&tc);
	return 3;
}

static int test_sweep(void)
{
	static const uint32_t head_dims[] = { 64, 128, 576 };
	/* fp8, fp16 and bf16, fp32 */
	static const uint32_t elem_bytes[] = { 1, 2, 4 };
	static const uint32_t sizes[] = { 1, 16, 32 };
	static const uint32_t head_counts[] = { 1, 8 };
	int n = 0;

	for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++)
		for (size_t d = 0; d < 3; d++)
			for (size_t e = 0; e < 3; e++)
				for (size_t s = 0; s < 3; s++)
					for (size_t h = 0; h < 2; h++)
						n += sweep_point(
							kinds[k],
							head_dims[d],
							elem_bytes[e], sizes[s],
							head_counts[h]);
	return n;
}

/* A small valid FlashAttention NHD cache for the argument checks. */
struct small {
	uint8_t *buf[N_LAYERS];
	void *base[N_LAYERS];
	kvt_layout lay;
	uint8_t *block;
	void *blocks[1];
	size_t bytes;
};

static void small_init(struct small *s)
{
	/* 2 planes, 4 pages, 4 tokens, 2 heads, 8 bytes */
	s->bytes = 2 * 4 * 4 * 2 * 8;
	for (int l = 0; l < N_LAYERS; l++) {
		s->buf[l] = xmalloc(s->bytes);
		memset(s->buf[l], POISON, s->bytes);
		s->base[l] = s->buf[l];
	}
	s->lay = (kvt_layout){
		.n_layers = N_LAYERS,
		.planes = 2,
		.heads = 2,
		.head_bytes = 8,
		.page_tokens = 4,
		.index_kind = KVT_INDEX_PAGE,
		.layer_base = s->base,
		.stride_plane = 4 * 4 * 2 * 8,
		.stride_page = 4 * 2 * 8,
		.stride_token = 2 * 8,
		.stride_head = 8,
	};
	/* Large enough for blocks of up to 8 tokens. */
	s->block = xmalloc(N_LAYERS * 2 * 8 * 2 * 8);
	memset(s->block, 0x33, N_LAYERS * 2 * 8 * 2 * 8);
	s->blocks[0] = s->block;
}

static void small_free(struct small *s)
{
	for (int l = 0; l < N_LAYERS; l++)
		free(s->buf[l]);
	free(s->block);
}

static int untouched(const struct small *s)
{
	for (int l = 0; l < N_LAYERS; l++)
		for (size_t i = 0; i < s->bytes; i++)
			if (s->buf[l][i] != POISON)
				return 0;
	return 1;
}

/* Expects -EINVAL from gather and scatter, and no write to the engine. */
static void expect_einval(int line, struct small *s, const kvt_layout *lay,
			  uint32_t bt, const int64_t *indices, size_t n_blocks,
			  void *const *blocks)
{
	const void *cblocks[2];
	int r;

	r = kvt_layout_gather(lay, bt, indices, n_blocks, blocks);
	if (r != -EINVAL) {
		fprintf(stderr, "%s:%d: gather returned %d, want -EINVAL\n",
			__FILE__, line, r);
		failures++;
	}
	if (blocks)
		for (size_t i = 0; i < n_blocks && i < 2; i++)
			cblocks[i] = blocks[i];
	r = kvt_layout_scatter(lay, bt, indices, n_blocks,
			       blocks ? cblocks : NULL);
	if (r != -EINVAL) {
		fprintf(stderr, "%s:%d: scatter returned %d, want -EINVAL\n",
			__FILE__, line, r);
		failures++;
	}
	if (!untouched(s)) {
		fprintf(stderr, "%s:%d: refused scatter wrote to the cache\n",
			__FILE__, line);
		failures++;
		for (int l = 0; l < N_LAYERS; l++)
			memset(s->buf[l], POISON, s->bytes);
	}
}

#define EXPECT_EINVAL(lay, bt, idx, n, blocks) \
	expect_einval(__LINE__, &s, lay, bt, idx, n, blocks)

static void test_arguments(void)
{
	struct small s;
	kvt_layout bad;
	int64_t page[2] = { 1, 0 };
	int64_t slots[8] = { 0, 1, 2, 3, -1, 5, 6, 7 };
	void *null_blocks[1] = { NULL };
	void *two_blocks[2];

	small_init(&s);

	/* The valid baseline works. */
	CHECK(kvt_layout_block_bytes(&s.lay, 4) == N_LAYERS * 2 * 4 * 2 * 8);
	CHECK(kvt_layout_gather(&s.lay, 4, page, 1, s.blocks) == 0);
	CHECK(kvt_layout_gather(&s.lay, 4, NULL, 0, NULL) == 0);
	CHECK(kvt_layout_scatter(&s.lay, 4, NULL, 0, NULL) == 0);

	EXPECT_EINVAL(NULL, 4, page, 1, s.blocks);
	EXPECT_EINVAL(&s.lay, 0, page, 1, s.blocks);
	EXPECT_EINVAL(&s.lay, 4, NULL, 1, s.blocks);
	EXPECT_EINVAL(&s.lay, 4, page, 1, NULL);
	EXPECT_EINVAL(&s.lay, 4, page, 1, null_blocks);
	/* A page is one block: other block sizes need slots. */
	EXPECT_EINVAL(&s.lay, 8, page, 1, s.blocks);
	EXPECT_EINVAL(&s.lay, 2, page, 1, s.blocks);

	/* Indices: -1 is padding only for slots; the bad one is the last,
	 * so nothing may have been copied before it was seen. */
	two_blocks[0] = s.block;
	two_blocks[1] = s.block;
	page[1] = -1;
	EXPECT_EINVAL(&s.lay, 4, page, 2, two_blocks);
	page[1] = -7;
	EXPECT_EINVAL(&s.lay, 4, page, 2, two_blocks);
	page[1] = INT64_MAX; /* offset overflows int64 */
	EXPECT_EINVAL(&s.lay, 4, page, 2, two_blocks);
	page[1] = 0;

	bad = s.lay;
	bad.index_kind = KVT_INDEX_SLOT;
	CHECK(kvt_layout_gather(&bad, 8, slots, 1, s.blocks) == 0);
	CHECK(kvt_layout_block_bytes(&bad, 8) == N_LAYERS * 2 * 8 * 2 * 8);
	slots[7] = -2;
	EXPECT_EINVAL(&bad, 8, slots, 1, s.blocks);
	slots[7] = INT64_MIN;
	EXPECT_EINVAL(&bad, 8, slots, 1, s.blocks);
	slots[7] = INT64_MAX;
	EXPECT_EINVAL(&bad, 8, slots, 1, s.blocks);
	slots[7] = 7;

	/* Descriptor fields. */
#define BAD_FIELD(field, value)                                          \
	do {                                                             \
		bad = s.lay;                                             \
		bad.field = value;                                       \
		EXPECT_EINVAL(&bad, 4, page, 1, s.blocks);               \
		CHECK(kvt_layout_block_bytes(&bad, 4) == 0);             \
	} while (0)

	BAD_FIELD(n_layers, 0);
	BAD_FIELD(planes, 0);
	BAD_FIELD(planes, 3);
	BAD_FIELD(heads, 0);
	BAD_FIELD(head_bytes, 0);
	BAD_FIELD(page_tokens, 0);
	BAD_FIELD(index_kind, 2);
	BAD_FIELD(stride_token, INT64_MAX / 2);
	BAD_FIELD(stride_plane, INT64_MIN);
#undef BAD_FIELD

	/* Pointers are not needed to size a block, only to copy. */
	bad = s.lay;
	bad.layer_base = NULL;
	EXPECT_EINVAL(&bad, 4, page, 1, s.blocks);
	CHECK(kvt_layout_block_bytes(&bad, 4) == N_LAYERS * 2 * 4 * 2 * 8);
	{
		void *holes[N_LAYERS] = { s.base[0], NULL, s.base[2] };

		bad = s.lay;
		bad.layer_base = holes;
		EXPECT_EINVAL(&bad, 4, page, 1, s.blocks);
	}

	CHECK(kvt_layout_block_bytes(NULL, 4) == 0);
	CHECK(kvt_layout_block_bytes(&s.lay, 0) == 0);

	/* A codec sizes a block by its tiles (test-codec.c checks their
	 * bytes): heads of 4 bfloat16 elements, 4 tokens.  fp8: a scale and
	 * 16 codes a tile; int4: 4 pairs and 8 bytes, K per channel and V
	 * per token alike.  It needs a dtype it reads. */
	bad = s.lay;
	bad.codec = KVT_CODEC_FP8_E4M3;
	EXPECT_EINVAL(&bad, 4, page, 1, s.blocks);
	CHECK(kvt_layout_block_bytes(&bad, 4) == 0);
	bad.dtype = KVT_DTYPE_BFLOAT16;
	CHECK(kvt_layout_block_bytes(&bad, 4) == N_LAYERS * 2 * 2 * (4 + 16));
	bad.codec = KVT_CODEC_INT4;
	CHECK(kvt_layout_block_bytes(&bad, 4) == N_LAYERS * 2 * 2 * (16 + 8));
	bad.codec = KVT_CODEC_INT4 + 1;
	EXPECT_EINVAL(&bad, 4, page, 1, s.blocks);
	CHECK(kvt_layout_block_bytes(&bad, 4) == 0);

	/* A block too large to address. */
	bad = s.lay;
	bad.index_kind = KVT_INDEX_SLOT;
	bad.n_layers = UINT32_MAX;
	bad.heads = UINT32_MAX;
	bad.head_bytes = UINT32_MAX;
	CHECK(kvt_layout_block_bytes(&bad, UINT32_MAX) == 0);

	small_free(&s);
}

int main(void)
{
	int n;

	test_arguments();
	n = test_sweep();

	if (failures) {
		fprintf(stderr, "test-layout: %d check(s) failed\n", failures);
		return 1;
	}
	printf("test-layout: ok (%d layout cases)\n", n);
	return 0;
}
