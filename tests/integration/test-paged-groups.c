/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CPU copy path of a namespace of two layer groups (full attention
 * beside sliding window, each with its own layout and block table, as
 * vLLM's hybrid allocator keeps them) against a real kvtierd:
 *
 * - a block's slot is the first group's block and then the second's, each
 *   as kvt_layout_gather makes it;
 * - a load puts every byte back into other pages of fresh caches;
 * - a group whose block is padding (slots of -1: pages that left the
 *   window) is left alone by a load, while the other group is filled;
 * - layouts that do not add up to the shard, and no groups, are refused.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define BT 16        /* tokens per block and per page */
#define PAGES 6
#define N 3          /* blocks stored */
#define HEADS 2
#define HB 64        /* bytes per head */
#define POISON 0xa5

static struct daemon d;

/* One group's cache: n_layers layers of PAGES pages.  Group 0 keeps K
 * and V side by side in each (page, head, token) cell (vLLM's
 * FlashAttention views), named by page; group 1 keeps a plane per
 * (layer, K/V), page-major, named by token slot. */
struct cache {
	uint32_t n_layers;
	size_t layer_bytes;
	uint8_t *mem;
	void *base[8];
	kvt_layout lay;
};

static void cache_init(struct cache *c, int group, uint32_t n_layers, uint8_t fill)
{
	c->n_layers = n_layers;
	c->layer_bytes = (size_t)PAGES * HEADS * BT * 2 * HB;
	c->mem = malloc(c->layer_bytes * n_layers);
	CHECK(c->mem, "out of memory");
	memset(c->mem, fill, c->layer_bytes * n_layers);
	for (uint32_t l = 0; l < n_layers; l++)
		c->base[l] = c->mem + l * c->layer_bytes;
	if (group == 0) /* [page][head][token][K|V] */
		c->lay = (kvt_layout){.n_layers = n_layers, .planes = 2, .heads = HEADS,
				      .head_bytes = HB, .page_tokens = BT,
				      .index_kind = KVT_INDEX_PAGE, .layer_base = c->base,
				      .stride_plane = HB, .stride_page = HEADS * BT * 2 * HB,
				      .stride_token = 2 * HB, .stride_head = BT * 2 * HB,
				      .n_pages = PAGES};
	else /* [plane][page][token][head] */
		c->lay = (kvt_layout){.n_layers = n_layers, .planes = 2, .heads = HEADS,
				      .head_bytes = HB, .page_tokens = BT,
				      .index_kind = KVT_INDEX_SLOT, .layer_base = c->base,
				      .stride_plane = PAGES * BT * HEADS * HB,
				      .stride_page = BT * HEADS * HB, .stride_token = HEADS * HB,
				      .stride_head = HB, .n_pages = PAGES};
}

static void slots_of(const int64_t *pages, int64_t *ret)
{
	for (int i = 0; i < N; i++)
		for (int t = 0; t < BT; t++)
			ret[i * BT + t] = pages[i] < 0 ? -1 : pages[i] * BT + t;
}

/* Whether page p of every layer of a and b holds the same bytes. */
static bool page_equal(const struct cache *a, int64_t pa, const struct cache *b, int64_t pb)
{
	for (uint32_t l = 0; l < a->n_layers; l++)
		for (uint32_t pl = 0; pl < 2; pl++)
			for (uint32_t h = 0; h < HEADS; h++)
				for (uint32_t t = 0; t < BT; t++) {
					const kvt_layout *x = &a->lay, *y = &b->lay;
					const uint8_t *u = (const uint8_t *)x->layer_base[l] +
							   pl * x->stride_plane + pa * x->stride_page +
							   t * x->stride_token + h * x->stride_head;
					const uint8_t *v = (const uint8_t *)y->layer_base[l] +
							   pl * y->stride_plane + pb * y->stride_page +
							   t * y->stride_token + h * y->stride_head;
					if (memcmp(u, v, HB))
						return false;
				}
	return true;
}

static bool page_is(const struct cache *c, int64_t p, uint8_t v)
{
	for (uint32_t l = 0; l < c->n_layers; l++)
		for (size_t o = 0; o < c->layer_bytes; o++) {
			size_t in_page = c->lay.index_kind == KVT_INDEX_PAGE
						 ? o / c->lay.stride_page
						 : (o % c->lay.stride_plane) / c->lay.stride_page;
			if ((int64_t)in_page == p && c->mem[l * c->layer_bytes + o] != v)
				return false;
		}
	return true;
}

int main(void)
{
	struct cache src[2], dst[2];
	const kvt_layer_group groups[2] = {
		{.n_layers = 2, .attn = KVT_ATTN_MHA, .planes = 2, .kv_heads = HEADS,
		 .head_bytes = HB, .dtype = 3},
		{.n_layers = 3, .attn = KVT_ATTN_SWA, .window = 32, .planes = 2,
		 .kv_heads = HEADS, .head_bytes = HB, .dtype = 3},
	};
	kvt_ns_desc desc = {.model = "paged-groups", .layer_end = 5, .tp_size = 1, .cp_size = 1,
			    .block_tokens = BT, .n_groups = 2, .groups = groups};
	uint8_t keys[N * 32];
	uint32_t tok[BT];
	int32_t st[N];
	kvt_ns_info info;
	kvt_ns *ns;

	daemon_start(&d, NULL);
	kvt_client *c = client_connect(&d, "groups");
	CHECK(kvt_ns_open(c, &desc, &ns) == 0, "open: %s", kvt_client_error(c));
	CHECK(kvt_ns_get_info(ns, &info) == 0, "info");
	CHECK(info.shard_bytes == (uint64_t)5 * 2 * HEADS * HB * BT, "shard of both groups: %llu",
	      (unsigned long long)info.shard_bytes);

	srand(7);
	for (int k = 0; k < 2; k++) {
		cache_init(&src[k], k, groups[k].n_layers, 0);
		for (size_t o = 0; o < src[k].layer_bytes * src[k].n_layers; o++)
			src[k].mem[o] = (uint8_t)rand();
		cache_init(&dst[k], k, groups[k].n_layers, POISON);
	}
	for (int i = 0; i < N; i++) {
		for (int t = 0; t < BT; t++)
			tok[t] = (uint32_t)(i * BT + t);
		CHECK(kvt_hash_block(i ? keys + (i - 1) * 32 : NULL, tok, BT, NULL, 0,
				     keys + i * 32) == 0, "hash");
	}

	/* Store pages 3, 5, 1 of each group. */
	const int64_t from[N] = {3, 5, 1}, into[N] = {2, 0, 4};
	int64_t from_slots[N * BT], into_slots[N * BT];
	slots_of(from, from_slots);
	slots_of(into, into_slots);
	const kvt_layout *lays_src[2] = {&src[0].lay, &src[1].lay};
	const kvt_layout *lays_dst[2] = {&dst[0].lay, &dst[1].lay};
	const int64_t *idx_from[2] = {from, from_slots}, *idx_into[2] = {into, into_slots};
	CHECK(kvt_store_paged_groups(ns, 0, 2, lays_src, keys, N, idx_from, st) == N,
	      "store: %d %d %d", st[0], st[1], st[2]);

	/* The slot is group 0's block, then group 1's. */
	uint64_t b0 = kvt_layout_block_bytes(&src[0].lay, BT);
	uint8_t *want = malloc(info.shard_bytes);
	CHECK(want && b0 + kvt_layout_block_bytes(&src[1].lay, BT) == info.shard_bytes,
	      "block sizes");
	void *parts[2] = {want, want + b0};
	for (int i = 0; i < N; i++) {
		kvt_slot_ref ref;
		CHECK(kvt_layout_gather(&src[0].lay, BT, &from[i], 1, &parts[0]) == 0 &&
		      kvt_layout_gather(&src[1].lay, BT, from_slots + i * BT, 1, &parts[1]) == 0,
		      "gather");
		CHECK(kvt_acquire(ns, 0, keys + i * 32, 1, &ref) == 1 && ref.ptr, "acquire %d", i);
		CHECK(memcmp(ref.ptr, want, info.shard_bytes) == 0,
		      "block %d is each group's block, one after the other", i);
		CHECK(kvt_release(c, &ref.handle, 1, NULL) == 0, "release");
	}

	/* A load puts every byte back, into other pages. */
	CHECK(kvt_load_paged_groups(ns, 0, 2, lays_dst, keys, N, idx_into, st) == N,
	      "load: %d %d %d", st[0], st[1], st[2]);
	for (int k = 0; k < 2; k++)
		for (int i = 0; i < N; i++)
			CHECK(page_equal(&src[k], from[i], &dst[k], into[i]),
			      "group %d, block %d loaded byte for byte", k, i);

	/* Group 1's first block is padding: its pages stay as they were. */
	for (int k = 0; k < 2; k++)
		memset(dst[k].mem, POISON, dst[k].layer_bytes * dst[k].n_layers);
	const int64_t part[N] = {-1, 0, 4};
	int64_t part_slots[N * BT];
	slots_of(part, part_slots);
	const int64_t *idx_part[2] = {into, part_slots};
	CHECK(kvt_load_paged_groups(ns, 0, 2, lays_dst, keys, N, idx_part, st) == N, "load");
	CHECK(page_equal(&src[0], from[0], &dst[0], into[0]), "group 0 filled");
	CHECK(page_is(&dst[1], 2, POISON), "group 1's padding left alone");
	CHECK(page_equal(&src[1], from[1], &dst[1], 0), "group 1's other blocks filled");

	/* Refused: one group's layout for a two-group shard, and no group. */
	CHECK(kvt_load_paged_groups(ns, 0, 1, lays_dst, keys, N, idx_into, st) == -EINVAL,
	      "layouts short of the shard");
	CHECK(strstr(kvt_client_error(c), "per block but the namespace's shard"), "says why: %s",
	      kvt_client_error(c));
	CHECK(kvt_store_paged_groups(ns, 0, 0, lays_src, keys, N, idx_from, st) == -EINVAL,
	      "no groups");
	CHECK(kvt_load_paged(ns, 0, &dst[0].lay, keys, N, into, st) == -EINVAL,
	      "the one-layout call on a namespace of two groups");

	free(want);
	for (int k = 0; k < 2; k++) {
		free(src[k].mem);
		free(dst[k].mem);
	}
	kvt_ns_close(ns);
	kvt_client_free(c);
	daemon_stop(&d);
	daemon_cleanup(&d);
	return 0;
}
