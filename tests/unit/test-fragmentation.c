/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The fragmentation arithmetic (daemon/fragmentation.c) on hand-computed
 * pools: a full one, one with padded shards, one fragmented on purpose
 * (most blocks of one size deleted, another size without room), the same
 * with room left, one class stuck of two; starvation; the ratio in parts
 * per million; and [pool] fragmentation_alert parsed and reloaded live.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <string.h>

#include "../check.h"
#include "config-values.h"
#include "config.h"
#include "fragmentation.h"

#define KiB (UINT64_C(1) << 10)
#define MiB (UINT64_C(1) << 20)

static void test_ratio(void)
{
	CHECK(frag_ratio_ppm(1, 3) == 333333);
	CHECK(frag_ratio_ppm(0, 7) == 0);
	CHECK(frag_ratio_ppm(0, 0) == FRAG_PPM);
	CHECK(frag_ratio_ppm(5, 5) == FRAG_PPM);
	CHECK(frag_ratio_ppm(6, 5) == FRAG_PPM);
	/* No overflow where part × 10^6 passes 64 bits. */
	CHECK(frag_ratio_ppm(UINT64_C(1) << 62, UINT64_C(1) << 63) == 500000);
}

/* Nothing held: nothing wasted, nothing to warn about. */
static void test_empty(void)
{
	struct frag_tenant f;
	frag_tenant_compute(NULL, 0, 0, 300000, NULL, &f);
	CHECK(f.fill_ppm == FRAG_PPM && f.stranded_bytes == 0 && !f.fragmented);
}

/* 8 MiB of 2 MiB extents, every 32 KiB slot holding a 32 KiB block: the
 * tenant is at its limit and evicts, but it is not fragmented. */
static void test_full(void)
{
	struct frag_class c = {.slot_bytes = 32 * KiB, .extent_bytes = 8 * MiB, .slots = 256,
			       .used_slots = 256, .data_bytes = 256 * 32 * KiB,
			       .next_extent_bytes = 2 * MiB};
	struct frag_class_ratios r;
	struct frag_tenant f;

	frag_tenant_compute(&c, 1, 0, 300000, &r, &f);
	CHECK(r.fill_ppm == FRAG_PPM && r.free_bytes == 0 && r.padding_bytes == 0 &&
	      r.tail_bytes == 0 && !r.can_grow);
	CHECK(f.fill_ppm == FRAG_PPM && f.stranded_bytes == 0 && !f.fragmented);
	CHECK(!frag_starved(&c, 1, 0));
}

/* Shards of 25,600 bytes in 28 KiB slots (rounded up to 4 KiB): 73 slots
 * in a 2 MiB extent and a 4 KiB tail; 3,072 bytes of padding a slot. */
static void test_padding(void)
{
	struct frag_class c = {.slot_bytes = 28 * KiB, .extent_bytes = 2 * MiB, .slots = 73,
			       .used_slots = 73, .data_bytes = 73 * 25600,
			       .next_extent_bytes = 2 * MiB};
	struct frag_class_ratios r;

	frag_class_compute(&c, 2 * MiB, &r);
	CHECK(r.padding_bytes == 73 * 3072);
	CHECK(r.tail_bytes == 4096);
	CHECK(r.free_bytes == 0);
	/* 1,868,800 / 2,097,152 = 0.89111328125 */
	CHECK(r.fill_ppm == 891113, "fill %u", r.fill_ppm);
	CHECK(r.can_grow);
	frag_class_compute(&c, 2 * MiB - 1, &r);
	CHECK(!r.can_grow);
}

/* The pool of test_full after 240 of its 256 blocks were deleted, and a
 * second block size (96 KiB) that finds no room for an extent. */
static void fragmented_pool(struct frag_class c[2])
{
	c[0] = (struct frag_class){.slot_bytes = 32 * KiB, .extent_bytes = 8 * MiB, .slots = 256,
				   .used_slots = 16, .data_bytes = 16 * 32 * KiB,
				   .next_extent_bytes = 2 * MiB};
	c[1] = (struct frag_class){.slot_bytes = 96 * KiB, .next_extent_bytes = 2 * MiB};
}

static void test_fragmented(void)
{
	struct frag_class c[2];
	struct frag_class_ratios r[2];
	struct frag_tenant f;

	fragmented_pool(c);
	frag_tenant_compute(c, 2, 0, 300000, r, &f);
	CHECK(r[0].free_bytes == 240 * 32 * KiB);
	CHECK(r[0].fill_ppm == 62500); /* 512 KiB of 8 MiB */
	CHECK(r[1].fill_ppm == FRAG_PPM && r[1].free_bytes == 0 && !r[1].can_grow);
	CHECK(f.extent_bytes == 8 * MiB && f.data_bytes == 512 * KiB);
	CHECK(f.stranded_bytes == 240 * 32 * KiB, "stranded %" PRIu64, f.stranded_bytes);
	CHECK(f.fill_ppm == 62500);
	CHECK(f.fragmented);
	CHECK(frag_starved(c, 2, 1));  /* the 96 KiB class: 32 KiB slots are free */
	CHECK(!frag_starved(c, 2, 0)); /* the other has none free */

	/* The level decides: off, and below the fill. */
	frag_tenant_compute(c, 2, 0, 0, NULL, &f);
	CHECK(!f.fragmented && f.stranded_bytes == 240 * 32 * KiB);
	frag_tenant_compute(c, 2, 0, 62500, NULL, &f);
	CHECK(!f.fragmented);
	frag_tenant_compute(c, 2, 0, 62501, NULL, &f);
	CHECK(f.fragmented);

	/* With room for another extent nothing is stranded: the 96 KiB class
	 * grows, and low fill alone is a young pool, not a fragmented one. */
	frag_tenant_compute(c, 2, 2 * MiB, 300000, r, &f);
	CHECK(r[0].can_grow && r[1].can_grow);
	CHECK(f.stranded_bytes == 0 && f.fill_ppm == 62500 && !f.fragmented);
}

/* Only the class of the larger extents is stuck: the free slots of the
 * other are stranded, its own free slots are not (it can use them). */
static void test_one_stuck(void)
{
	struct frag_class c[2];
	struct frag_class_ratios r[2];
	struct frag_tenant f;

	fragmented_pool(c);
	/* One 4 MiB extent of a single 3 MiB slot, free: a 1 MiB tail. */
	c[1] = (struct frag_class){.slot_bytes = 3 * MiB, .extent_bytes = 4 * MiB, .slots = 1,
				   .next_extent_bytes = 4 * MiB};
	frag_tenant_compute(c, 2, 2 * MiB, 300000, r, &f);
	CHECK(r[0].can_grow && !r[1].can_grow);
	CHECK(r[1].free_bytes == 3 * MiB && r[1].tail_bytes == 1 * MiB && r[1].fill_ppm == 0);
	CHECK(f.stranded_bytes == 240 * 32 * KiB, "stranded %" PRIu64, f.stranded_bytes);
	CHECK(f.free_bytes == 240 * 32 * KiB + 3 * MiB);
	/* 512 KiB of 12 MiB */
	CHECK(f.fill_ppm == 41666 && f.fragmented);
	CHECK(frag_starved(c, 2, 0) && frag_starved(c, 2, 1));
}

static void test_alert_key(void)
{
	static const struct {
		const char *v;
		int r;
		uint32_t ppm;
	} cases[] = {
		{"0", 0, 0},         {"0.3", 0, 300000},  {"30%", 0, 300000},
		{"1", 0, 1000000},   {"100%", 0, 1000000}, {"0.25%", 0, 2500},
		{"0.0000001", 0, 0}, {"1.0", 0, 1000000}, {"1.1", -EINVAL, 0},
		{"-0.1", -EINVAL, 0}, {"", -EINVAL, 0},   {"0.3x", -EINVAL, 0},
		{"101%", -EINVAL, 0}, {"2", -EINVAL, 0},  {".3", -EINVAL, 0},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint32_t ppm = 7;
		const char *expect = NULL;
		int r = conf_ratio(cases[i].v, &ppm, &expect);
		CHECK(r == cases[i].r && (r < 0 ? ppm == 7 : ppm == cases[i].ppm),
		      "'%s': %d, %u", cases[i].v, r, ppm);
		CHECK(expect && *expect);
	}

	/* The default is the operators' 0.3, and a reload takes a new level
	 * at once. */
	struct config cur, fresh;
	char changed[256], restart[256];
	CHECK(config_defaults(&cur) == 0 && config_defaults(&fresh) == 0);
	CHECK(cur.fragmentation_alert_ppm == 300000);
	fresh.fragmentation_alert_ppm = 0;
	config_reload(&cur, &fresh, changed, sizeof(changed), restart, sizeof(restart));
	CHECK(cur.fragmentation_alert_ppm == 0);
	CHECK(strstr(changed, "[pool] fragmentation_alert") && !restart[0], "changed '%s', restart '%s'",
	      changed, restart);
	config_free(&cur);
	config_free(&fresh);
}

int main(void)
{
	test_ratio();
	test_empty();
	test_full();
	test_padding();
	test_fragmented();
	test_one_stuck();
	test_alert_key();
	return failures ? 1 : 0;
}
