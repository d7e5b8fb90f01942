/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The GPU copy path's planning, on the CPU (kernels/layout_plan.c and the
 * checks of kernels/layout_cpu.c; no CUDA needed):
 *
 *   - the cost model picks the copy engines for long runs and the kernel
 *     for short ones, switches once as runs grow, never batches slots, and
 *     a larger CTA budget moves the switch to longer runs;
 *   - a kernel launch stays within its CTA budget, covers every work item
 *     of every block exactly once (70,000 blocks too, past the grid's
 *     65,535), and gives a 1152-byte MLA row 72 lanes, not 128;
 *   - page indices at or past n_pages are refused, by the CPU path
 *     (nothing written), by the GPU path's host check and by the device
 *     side's locate;
 *   - K and V in separate allocations (a base per plane) gather and
 *     scatter the same bytes as one allocation with a plane stride, on the
 *     CPU path and through the copy engines' run list;
 *   - a namespace whose layer groups differ in geometry: the groups'
 *     blocks one after the other make kvtierd's shard, layer-major, as
 *     the CUDA path's parts (kvt_cuda_submit_opts.layouts) copy them.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvt-proto.h"
#include "kvtier-layout.h"
#include "layout_cuda.h"
#include "../check.h"

static uint64_t seed = 0x9e3779b97f4a7c15ull;

static uint8_t rnd8(void)
{
	seed ^= seed << 13;
	seed ^= seed >> 7;
	seed ^= seed << 17;
	return (uint8_t)seed;
}

static void fill(uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = rnd8();
}

/* ---- the cost model ---------------------------------------------------- */

/* A geometry of one layer, one plane, one head of run bytes, by page: its
 * runs are whole blocks. */
static struct kvt_geom run_geom(int64_t run)
{
	return (struct kvt_geom){.n_layers = 1, .planes = 1, .heads = 1,
				 .head_bytes = run, .page_tokens = 1,
				 .block_tokens = 1, .stride_page = run,
				 .stride_token = run, .stride_head = run,
				 .index_kind = KVT_INDEX_PAGE};
}

static void test_cost_model(void)
{
	const int64_t total = INT64_C(64) << 20;
	struct kvt_copy_model m;
	int prev = KVT_PATH_KERNEL, switches = 0;
	int64_t cross_default = 0, cross_big = 0;
	void *base[1] = {(void *)0x1000};

	kvt_copy_model_default(&m);
	CHECK(m.max_ctas == KVT_CTA_BUDGET_DEFAULT);
	for (int64_t run = 256; run <= (INT64_C(16) << 20); run *= 2) {
		struct kvt_geom g = run_geom(run);
		int p = kvt_copy_path(&g, 0, 1, base, total / run, &m, 1);

		if (p != prev) {
			switches++;
			cross_default = run;
		}
		prev = p;
		/* Never without the engines, never for slots. */
		CHECK(kvt_copy_path(&g, 0, 1, base, total / run, &m, 0) ==
		      KVT_PATH_KERNEL);
		g.index_kind = KVT_INDEX_SLOT;
		CHECK(kvt_copy_path(&g, 0, 1, base, total / run, &m, 1) ==
		      KVT_PATH_KERNEL);
	}
	/* Short runs on the kernel, long ones on the engines, one switch. */
	CHECK(switches == 1, "%d switches", switches);
	CHECK(prev == KVT_PATH_BATCH);
	CHECK(cross_default >= 16 * 1024 && cross_default <= 1024 * 1024,
	      "switch at %lld bytes", (long long)cross_default);

	/* A budget that covers the link makes the kernel as fast as the
	 * engines: the budget is how much SM time a copy may take. */
	m.max_ctas = 64;
	{
		struct kvt_geom g = run_geom(INT64_C(16) << 20);

		CHECK(kvt_copy_path(&g, 0, 1, base, 4, &m, 1) ==
		      KVT_PATH_KERNEL);
	}
	/* More CTAs, still short of the link: the kernel keeps longer runs. */
	m.max_ctas = 12;
	prev = KVT_PATH_KERNEL;
	for (int64_t run = 256; run <= (INT64_C(16) << 20); run *= 2) {
		struct kvt_geom g = run_geom(run);
		int p = kvt_copy_path(&g, 0, 1, base, total / run, &m, 1);

		if (p != prev && !cross_big)
			cross_big = run;
		prev = p;
	}
	CHECK(cross_big > cross_default, "%lld vs %lld",
	      (long long)cross_big, (long long)cross_default);

	/* The times themselves: bytes at the link's speed plus per-run and
	 * per-call costs; the kernel's bandwidth capped by its budget. */
	{
		struct kvt_copy_cost c;

		kvt_copy_model_default(&m);
		kvt_copy_cost(&m, KVT_BATCH_MAX + 1, 50000000, &c);
		CHECK(c.batch_ns == 2 * m.call_ns +
					    (KVT_BATCH_MAX + 1) * m.run_ns +
					    50000000 / m.link_bpns);
		CHECK(c.kernel_ns ==
		      m.launch_ns + 50000000 / (m.max_ctas * m.cta_bpns));
		m.max_ctas = 0;
		kvt_copy_cost(&m, 1, 50000000, &c);
		CHECK(c.kernel_ns == m.launch_ns + 50000000 / m.link_bpns);
	}
}

/* ---- kernel launches --------------------------------------------------- */

/* Every (block, item) visited by the grid's loops, exactly once. */
static int launch_covers(const struct kvt_launch *ln, int64_t n_blocks)
{
	uint8_t *seen = calloc((size_t)(n_blocks * ln->items), 1);
	int ok = seen != NULL;

	for (uint32_t by = 0; ok && by < ln->grid_y; by++)
		for (uint32_t bx = 0; bx < ln->grid_x; bx++)
			for (int32_t sub = 0; sub < ln->per_cta; sub++)
				for (int64_t b = by; b < n_blocks;
				     b += ln->grid_y)
					for (int64_t it = bx * ln->per_cta + sub;
					     it < ln->items;
					     it += (int64_t)ln->grid_x *
						   ln->per_cta)
						seen[b * ln->items + it]++;
	for (int64_t i = 0; ok && i < n_blocks * ln->items; i++)
		ok = seen[i] == 1;
	free(seen);
	return ok;
}

static void test_launch_plan(void)
{
	static const uint32_t budgets[] = {0, 1, 3, 8, 100};
	struct kvt_launch ln;
	double worst = 1.0;

	/* An MLA latent row of 576 bf16 values, 16-byte accesses. */
	CHECK(kvt_launch_plan(1152 / 16, 61, 16, 8, &ln) == 0);
	CHECK(ln.lanes == 72);
	CHECK(ln.per_cta == 3);
	CHECK(ln.threads == 216);
	/* Lanes busy out of the warps the CTA occupies: 216 of 224, where
	 * rounding the lanes up to a power of two kept 72 of 128 busy. */
	CHECK((double)ln.vps * ln.per_cta / ((ln.threads + 31) / 32 * 32) >
	      0.95);

	for (int64_t vps = 1; vps <= 4 * KVT_CHUNK_VECS; vps++) {
		int64_t rounds;
		double use;

		CHECK(kvt_launch_plan(vps, 5, 7, 8, &ln) == 0);
		rounds = (ln.chunk_vecs + ln.lanes - 1) / ln.lanes;
		use = (double)ln.chunk_vecs / ((double)ln.lanes * rounds);
		worst = use < worst ? use : worst;
		CHECK(ln.threads <= KVT_CTA_THREADS);
		CHECK(ln.threads == (uint32_t)(ln.lanes * ln.per_cta));
		CHECK(ln.lanes * rounds >= ln.chunk_vecs);
		CHECK(ln.n_chunks * ln.chunk_vecs >= vps);
		CHECK(ln.items == 5 * ln.n_chunks);
	}
	/* A chunk's lanes are busy but for the last round's remainder. */
	CHECK(worst > 0.99, "worst lane use %.3f", worst);

	for (size_t i = 0; i < sizeof(budgets) / sizeof(budgets[0]); i++) {
		static const int64_t blocks[] = {1, 5, 65535, 70000};

		for (size_t j = 0; j < sizeof(blocks) / sizeof(blocks[0]); j++) {
			CHECK(kvt_launch_plan(4, 3, blocks[j], budgets[i],
					      &ln) == 0);
			if (budgets[i])
				CHECK((uint64_t)ln.grid_x * ln.grid_y <=
				      budgets[i]);
			else
				CHECK(ln.grid_y == (blocks[j] < 65535
							    ? blocks[j]
							    : 65535));
			CHECK(ln.grid_y <= 65535 && ln.grid_x >= 1);
			CHECK(launch_covers(&ln, blocks[j]),
			      "budget %u, %lld blocks", budgets[i],
			      (long long)blocks[j]);
		}
	}
	CHECK(kvt_launch_plan(0, 1, 1, 8, &ln) == -EINVAL);
	CHECK(kvt_launch_plan(1, 0, 1, 8, &ln) == -EINVAL);
	CHECK(kvt_launch_plan(INT64_MAX, INT64_MAX, 1, 8, &ln) == -EINVAL);
}

/* ---- bounds ------------------------------------------------------------ */

#define NP 6
#define PT 4
#define HB 8

/* One layer, one plane of one head: page g is bytes [g*PT*HB, ...). */
static kvt_layout small_layout(void **base, uint32_t kind)
{
	return (kvt_layout){.n_layers = 1, .planes = 1, .heads = 1,
			    .head_bytes = HB, .page_tokens = PT,
			    .index_kind = kind, .layer_base = base,
			    .stride_page = PT * HB, .stride_token = HB,
			    .stride_head = HB, .n_pages = NP};
}

static void test_bounds(void)
{
	static uint8_t cache[NP * PT * HB], blk[PT * HB], before[NP * PT * HB];
	void *base[1] = {cache}, *blks[1] = {blk};
	const void *cblks[1] = {blk};
	kvt_layout lay = small_layout(base, KVT_INDEX_PAGE);
	struct kvt_geom g;
	int64_t page, slots[PT], pg = 0, tk = 0;

	fill(cache, sizeof(cache));
	fill(blk, sizeof(blk));
	memcpy(before, cache, sizeof(cache));

	page = NP - 1;
	CHECK(kvt_layout_gather(&lay, PT, &page, 1, blks) == 0);
	CHECK(memcmp(blk, cache + (NP - 1) * PT * HB, sizeof(blk)) == 0);
	page = NP;
	CHECK(kvt_layout_scatter(&lay, PT, &page, 1, cblks) == -EINVAL);
	CHECK(memcmp(cache, before, sizeof(cache)) == 0);
	CHECK(kvt_geom_from_layout(&lay, PT, &g) == 0);
	CHECK(g.n_pages == NP);
	CHECK(kvt_geom_check_indices(&g, &page, 1) == -EINVAL);
	/* The device side refuses it too, should one slip through. */
	CHECK(kvt_geom_locate(&g, &page, 0, 0, &pg, &tk) == -EINVAL);
	page = NP - 1;
	CHECK(kvt_geom_locate(&g, &page, 0, 0, &pg, &tk) == KVT_GEOM_TOKEN);

	/* Slots: the last slot of the last page, then one past it. */
	lay = small_layout(base, KVT_INDEX_SLOT);
	CHECK(kvt_geom_from_layout(&lay, PT, &g) == 0);
	for (int i = 0; i < PT; i++)
		slots[i] = i == 1 ? -1 : NP * PT - 1 - i;
	CHECK(kvt_geom_check_indices(&g, slots, 1) == 0);
	slots[3] = NP * PT;
	CHECK(kvt_geom_check_indices(&g, slots, 1) == -EINVAL);
	CHECK(kvt_layout_scatter(&lay, PT, slots, 1, cblks) == -EINVAL);
	CHECK(memcmp(cache, before, sizeof(cache)) == 0);
	CHECK(kvt_geom_locate(&g, slots, 0, 3, &pg, &tk) == -EINVAL);

	/* Unknown: only the int64 bound. */
	lay = small_layout(base, KVT_INDEX_PAGE);
	lay.n_pages = 0;
	CHECK(kvt_geom_from_layout(&lay, PT, &g) == 0);
	page = NP;
	CHECK(kvt_geom_check_indices(&g, &page, 1) == 0);
	page = INT64_MAX / 2;
	CHECK(kvt_geom_check_indices(&g, &page, 1) == -EINVAL);

	/* Fields a caller cannot know yet are refused, not ignored. */
	lay.flags = 0x80;
	CHECK(kvt_geom_from_layout(&lay, PT, &g) == -EINVAL);
	lay.flags = 0;
	lay.elem_bytes = 2; /* an element size without K by columns */
	CHECK(kvt_geom_from_layout(&lay, PT, &g) == -EINVAL);
	lay.flags = KVT_LAYOUT_K_COLUMNS;
	lay.elem_bytes = 3;
	CHECK(kvt_geom_from_layout(&lay, PT, &g) == -EINVAL);
	lay.flags = 0;
	lay.elem_bytes = 0;
	lay.n_pages = (uint64_t)INT64_MAX + 1;
	CHECK(kvt_geom_from_layout(&lay, PT, &g) == -EINVAL);
	/* A codec is the CPU path's for now: a kvt_geom would drop it. */
	lay.n_pages = 0;
	lay.codec = KVT_CODEC_FP8_E4M3;
	lay.dtype = KVT_DTYPE_BFLOAT16;
	CHECK(kvt_geom_from_layout(&lay, PT, &g) == -EOPNOTSUPP);
}

/* ---- a base per plane -------------------------------------------------- */

#define PL_L 3
#define PL_H 2
#define PL_BT 4
#define PL_NP 5
#define PL_PLANE (PL_NP * PL_BT * PL_H * HB)

static void test_plane_bases(void)
{
	/* One allocation per layer, K then V (stride_plane = PL_PLANE), and the
	 * same bytes as separate K and V allocations. */
	static uint8_t joint[PL_L][2 * PL_PLANE], split[PL_L][2][PL_PLANE];
	void *jbase[PL_L], *sbase[2 * PL_L];
	static uint8_t bj[2][PL_L * 2 * PL_BT * PL_H * HB], bs[2][PL_L * 2 * PL_BT * PL_H * HB];
	void *bjp[2] = {bj[0], bj[1]}, *bsp[2] = {bs[0], bs[1]};
	const void *src[2] = {bj[0], bj[1]};
	int64_t pages[2] = {3, 1};
	kvt_layout lj = {.n_layers = PL_L, .planes = 2, .heads = PL_H,
			 .head_bytes = HB, .page_tokens = PL_BT,
			 .index_kind = KVT_INDEX_PAGE, .layer_base = jbase,
			 .stride_plane = PL_PLANE, .stride_page = PL_BT * PL_H * HB,
			 .stride_token = PL_H * HB, .stride_head = HB,
			 .n_pages = PL_NP};
	kvt_layout ls = lj;
	struct kvt_geom g;
	int64_t n;

	for (int l = 0; l < PL_L; l++) {
		fill(joint[l], sizeof(joint[l]));
		memcpy(split[l][0], joint[l], PL_PLANE);
		memcpy(split[l][1], joint[l] + PL_PLANE, PL_PLANE);
		jbase[l] = joint[l];
		sbase[2 * l] = split[l][0];
		sbase[2 * l + 1] = split[l][1];
	}
	ls.layer_base = sbase;
	ls.flags = KVT_LAYOUT_PLANE_BASES;
	ls.stride_plane = -77; /* not used */
	CHECK(kvt_layout_block_bytes(&ls, PL_BT) == kvt_layout_block_bytes(&lj, PL_BT));

	CHECK(kvt_layout_gather(&lj, PL_BT, pages, 2, bjp) == 0);
	memset(bs, 0xff, sizeof(bs));
	CHECK(kvt_layout_gather(&ls, PL_BT, pages, 2, bsp) == 0);
	CHECK(memcmp(bj, bs, sizeof(bj)) == 0);

	/* The copy engines' run list over the split layout, moved with
	 * memcpy, gives the CPU path's blocks, and scatters back into the
	 * right allocations. */
	CHECK(kvt_geom_from_layout(&ls, PL_BT, &g) == 0);
	CHECK(g.plane_bases && g.stride_plane == 0);
	CHECK(kvt_geom_n_bases(&g) == 2 * PL_L);
	n = kvt_batch_count(&g, 0, PL_L, sbase, 2);
	CHECK(n == 2 * PL_L * 2); /* a run per layer, plane and block */
	{
		void *d[2 * PL_L * 2];
		const void *s[2 * PL_L * 2];
		size_t z[2 * PL_L * 2];

		memset(bs, 0xff, sizeof(bs));
		CHECK(kvt_batch_build(&g, KVT_COPY_GATHER, 0, PL_L, sbase, pages,
				      bsp, 2, d, s, z) == n);
		for (int64_t i = 0; i < n; i++)
			memcpy(d[i], s[i], z[i]);
		CHECK(memcmp(bj, bs, sizeof(bj)) == 0);

		fill(bj[0], sizeof(bj));
		CHECK(kvt_layout_scatter(&lj, PL_BT, pages, 2, src) == 0);
		memcpy(bs, bj, sizeof(bj));
		CHECK(kvt_batch_build(&g, KVT_COPY_SCATTER, 0, PL_L, sbase, pages,
				      bsp, 2, d, s, z) == n);
		for (int64_t i = 0; i < n; i++)
			memcpy(d[i], s[i], z[i]);
		for (int l = 0; l < PL_L; l++) {
			CHECK(memcmp(split[l][0], joint[l], PL_PLANE) == 0);
			CHECK(memcmp(split[l][1], joint[l] + PL_PLANE, PL_PLANE) == 0);
		}
	}
	/* A missing plane base is refused. */
	sbase[3] = NULL;
	CHECK(kvt_layout_gather(&ls, PL_BT, pages, 2, bsp) == -EINVAL);
}

/* ---- layer groups of different geometry -------------------------------- */

/*
 * A namespace of two groups, 2 layers of K and V with 2 heads of 16 bytes,
 * then 3 layers of one 48-byte latent: its block is the first group's
 * block followed by the second's, which is the namespace's layer-major
 * block (every layer's slice contiguous, at the sum of the slices before
 * it), and its size is kvtierd's shard.
 */
static void test_groups(void)
{
	enum { G1L = 2, G2L = 3, GNP = 4, GBT = 4 };
	static uint8_t c1[G1L][2 * GNP * GBT * 2 * 16], c2[G2L][GNP * GBT * 48];
	static uint8_t blk[2][4096], one[4096];
	void *b1[G1L], *b2[G2L];
	kvt_layout l1 = {.n_layers = G1L, .planes = 2, .heads = 2,
			 .head_bytes = 16, .page_tokens = GBT,
			 .index_kind = KVT_INDEX_PAGE, .layer_base = b1,
			 .stride_plane = GNP * GBT * 2 * 16,
			 .stride_page = GBT * 2 * 16, .stride_token = 2 * 16,
			 .stride_head = 16, .n_pages = GNP};
	kvt_layout l2 = {.n_layers = G2L, .planes = 1, .heads = 1,
			 .head_bytes = 48, .page_tokens = GBT,
			 .index_kind = KVT_INDEX_PAGE, .layer_base = b2,
			 .stride_page = GBT * 48, .stride_token = 48,
			 .stride_head = 48, .n_pages = GNP};
	int64_t pages[2] = {2, 0}, pages2[2] = {1, 3};
	uint64_t s1 = kvt_layout_block_bytes(&l1, GBT);
	uint64_t s2 = kvt_layout_block_bytes(&l2, GBT), at;
	struct kvt_identity id;
	struct kvt_geometry geo;
	void *p1[2], *p2[2];

	for (int l = 0; l < G1L; l++) {
		fill(c1[l], sizeof(c1[l]));
		b1[l] = c1[l];
	}
	for (int l = 0; l < G2L; l++) {
		fill(c2[l], sizeof(c2[l]));
		b2[l] = c2[l];
	}
	memset(&id, 0, sizeof(id));
	id.key_scheme = 1;
	snprintf(id.model, sizeof(id.model), "groups");
	id.layer_end = G1L + G2L;
	id.tp_size = 1;
	id.cp_size = 1;
	id.block_tokens = GBT;
	id.n_groups = 2;
	id.groups[0] = (struct kvt_id_group){.n_layers = G1L,
					     .attn = KVT_ATTN_SWA,
					     .window = 64, .planes = 2,
					     .kv_heads = 2, .head_bytes = 16,
					     .dtype = 1};
	id.groups[1] = (struct kvt_id_group){.n_layers = G2L,
					     .attn = KVT_ATTN_MLA, .planes = 1,
					     .kv_heads = 1, .head_bytes = 48,
					     .dtype = 1};
	CHECK(kvt_identity_geometry(&id, &geo) == 0);
	CHECK(geo.shard_bytes == s1 + s2);

	/* Each group into its place in the blocks; group 2 with its own
	 * block table. */
	for (int b = 0; b < 2; b++) {
		p1[b] = blk[b];
		p2[b] = blk[b] + s1;
	}
	CHECK(kvt_layout_gather(&l1, GBT, pages, 2, p1) == 0);
	CHECK(kvt_layout_gather(&l2, GBT, pages2, 2, p2) == 0);

	/* Layer by layer, against a one-layer gather of that layer. */
	for (int b = 0; b < 2; b++) {
		at = 0;
		for (int ly = 0; ly < G1L + G2L; ly++) {
			kvt_layout one_l = ly < G1L ? l1 : l2;
			void *base1 = ly < G1L ? b1[ly] : b2[ly - G1L];
			void *dst[1] = {one};
			uint64_t n;

			one_l.n_layers = 1;
			one_l.layer_base = &base1;
			n = kvt_layout_block_bytes(&one_l, GBT);
			CHECK(kvt_layout_gather(&one_l, GBT,
						ly < G1L ? &pages[b] : &pages2[b],
						1, dst) == 0);
			CHECK(memcmp(blk[b] + at, one, n) == 0,
			      "block %d layer %d", b, ly);
			at += n;
		}
		CHECK(at == geo.shard_bytes);
	}
}

int main(void)
{
	test_cost_model();
	test_launch_plan();
	test_bounds();
	test_plane_bases();
	test_groups();
	if (failures) {
		fprintf(stderr, "%d check(s) failed\n", failures);
		return 1;
	}
	printf("GPU copy planning: all checks passed\n");
	return 0;
}
