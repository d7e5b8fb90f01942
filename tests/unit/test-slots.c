/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The free-slot allocator of one extent: fill order, -ENOSPC, release and
 * reuse order (the lowest free slot first), double and out-of-range frees,
 * around the 64-bit word edges of the used bitmap and the 4096-slot edges
 * of its summary, and a random walk against a reference set.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "slots.h"
#include "../check.h"
#define RNG_SEED UINT64_C(0x243f6a8885a308d3)
#include "rng.h"

/* Fill, overflow, free everything, refill: for one size n. */
static void test_size(uint32_t n)
{
	struct slots s;
	uint32_t slot = 0xdeadbeef;
	uint32_t bad = 0;

	CHECK_N(slots_init(&s, n) == 0, n);
	CHECK_N(s.n == n && s.n_free == n, n);
	for (uint32_t i = 0; i < n; i++)
		CHECK_N(!slots_is_used(&s, i), n);

	/* An extent fills from its start. */
	for (uint32_t i = 0; i < n; i++) {
		int r = slots_alloc(&s, &slot);
		if (r != 0 || slot != i || !slots_is_used(&s, i)) {
			if (bad++ < 3)
				fprintf(stderr, "n = %u: alloc #%u gave %d, slot %u\n",
					n, i, r, slot);
			failures++;
		}
	}
	CHECK_N(s.n_free == 0, n);
	slot = 0xdeadbeef;
	CHECK_N(slots_alloc(&s, &slot) == -ENOSPC, n);
	CHECK_N(slot == 0xdeadbeef, n);
	CHECK_N(slots_alloc(&s, &slot) == -ENOSPC, n);

	/* Out of range, used or not. */
	const uint32_t out[] = { n, n + 1, n + 63, n + 64, UINT32_MAX };
	for (size_t i = 0; i < sizeof(out) / sizeof(out[0]); i++) {
		if (out[i] < n)
			continue; /* wrapped */
		CHECK_N(slots_release(&s, out[i]) == -EINVAL, n);
		CHECK_N(!slots_is_used(&s, out[i]), n);
	}
	CHECK_N(s.n_free == 0, n);

	/* Release every other slot, then the rest; each exactly once. */
	for (uint32_t i = 0; i < n; i += 2)
		CHECK_N(slots_release(&s, i) == 0 && !slots_is_used(&s, i), n);
	for (uint32_t i = 0; i < n; i += 2)
		CHECK_N(slots_release(&s, i) == -EINVAL, n);
	for (uint32_t i = 1; i < n; i += 2)
		CHECK_N(slots_is_used(&s, i), n);
	for (uint32_t i = 1; i < n; i += 2)
		CHECK_N(slots_release(&s, i) == 0, n);
	CHECK_N(s.n_free == n, n);
	for (uint32_t i = 0; i < n; i++)
		CHECK_N(!slots_is_used(&s, i) && slots_release(&s, i) == -EINVAL, n);

	/* Refill: every slot exactly once, in order. */
	for (uint32_t i = 0; i < n; i++) {
		int r = slots_alloc(&s, &slot);
		if (r != 0 || slot != i) {
			if (bad++ < 3)
				fprintf(stderr, "n = %u: refill #%u gave %d, slot %u\n",
					n, i, r, slot);
			failures++;
		}
	}
	CHECK_N(slots_alloc(&s, &slot) == -ENOSPC, n);
	slots_free(&s);
	CHECK(s.full == NULL && s.used == NULL && s.n == 0 && s.n_free == 0);
	slots_free(&s);
}

static void test_reuse_order(void)
{
	struct slots s;
	uint32_t slot;

	CHECK(slots_init(&s, 200) == 0);
	for (int i = 0; i < 100; i++)
		CHECK(slots_alloc(&s, &slot) == 0 && slot == (uint32_t)i);
	/* The lowest free slot comes back first, whatever the order of the
	 * frees, across words and summary words. */
	CHECK(slots_release(&s, 64) == 0);
	CHECK(slots_release(&s, 17) == 0);
	CHECK(slots_release(&s, 63) == 0);
	CHECK(slots_release(&s, 5) == 0);
	CHECK(slots_alloc(&s, &slot) == 0 && slot == 5);
	CHECK(slots_alloc(&s, &slot) == 0 && slot == 17);
	CHECK(slots_alloc(&s, &slot) == 0 && slot == 63);
	CHECK(slots_alloc(&s, &slot) == 0 && slot == 64);
	/* Then the never-used ones, in order. */
	CHECK(slots_alloc(&s, &slot) == 0 && slot == 100);
	CHECK(slots_alloc(&s, &slot) == 0 && slot == 101);
	/* A freed slot is reused before the untouched tail. */
	CHECK(slots_release(&s, 0) == 0);
	CHECK(slots_alloc(&s, &slot) == 0 && slot == 0);
	CHECK(slots_alloc(&s, &slot) == 0 && slot == 102);
	slots_free(&s);

	/* Past the first summary word (4096 slots): one freed far up is
	 * found once everything below it is taken, and one freed below is
	 * taken before it. */
	CHECK(slots_init(&s, 3 * 4096 + 5) == 0);
	for (uint32_t i = 0; i < 3 * 4096 + 5; i++)
		CHECK(slots_alloc(&s, &slot) == 0 && slot == i);
	CHECK(slots_alloc(&s, &slot) == -ENOSPC);
	CHECK(slots_release(&s, 3 * 4096 + 4) == 0);
	CHECK(slots_release(&s, 4096 + 70) == 0);
	CHECK(slots_alloc(&s, &slot) == 0 && slot == 4096 + 70);
	CHECK(slots_alloc(&s, &slot) == 0 && slot == 3 * 4096 + 4);
	CHECK(slots_alloc(&s, &slot) == -ENOSPC);
	CHECK(slots_release(&s, 2 * 4096) == 0);
	CHECK(slots_release(&s, 7) == 0);
	CHECK(slots_alloc(&s, &slot) == 0 && slot == 7);
	CHECK(slots_alloc(&s, &slot) == 0 && slot == 2 * 4096);
	slots_free(&s);
}

static void test_empty(void)
{
	struct slots s;
	uint32_t slot = 7;

	CHECK(slots_init(&s, 0) == 0);
	CHECK(slots_alloc(&s, &slot) == -ENOSPC && slot == 7);
	CHECK(slots_release(&s, 0) == -EINVAL);
	CHECK(!slots_is_used(&s, 0));
	slots_free(&s);
}

/* Random alloc/release against a reference "used" array. */
static void test_random(uint32_t n, unsigned ops)
{
	struct slots s;
	bool *used = calloc(n, sizeof(bool));
	uint32_t n_used = 0, slot;

	CHECK(used != NULL && slots_init(&s, n) == 0);
	if (!used)
		return;
	for (unsigned op = 0; op < ops; op++) {
		uint32_t x = (uint32_t)(rnd() % (n + 2)); /* a few out of range */
		if (rnd() % 2) {
			int r = slots_alloc(&s, &slot);
			if (n_used == n) {
				CHECK_N(r == -ENOSPC, n);
				continue;
			}
			if (r != 0 || slot >= n || used[slot]) {
				fprintf(stderr, "n = %u op %u: alloc %d slot %u\n",
					n, op, r, slot);
				failures++;
				break;
			}
			for (uint32_t i = 0; i < slot; i++)
				CHECK_N(used[i], n); /* nothing lower was free */
			used[slot] = true;
			n_used++;
		} else {
			bool was = x < n && used[x];
			int r = slots_release(&s, x);
			if (r != (was ? 0 : -EINVAL)) {
				fprintf(stderr, "n = %u op %u: release %u gave %d\n",
					n, op, x, r);
				failures++;
				break;
			}
			if (was) {
				used[x] = false;
				n_used--;
			}
		}
		if (s.n_free != n - n_used) {
			fprintf(stderr, "n = %u op %u: n_free %u, expected %u\n",
				n, op, s.n_free, n - n_used);
			failures++;
			break;
		}
		if (op % 1000 == 0)
			for (uint32_t i = 0; i < n; i++)
				CHECK_N(slots_is_used(&s, i) == used[i], n);
	}
	slots_free(&s);
	free(used);
}

int main(void)
{
	static const uint32_t sizes[] = { 1, 2, 63, 64, 65, 127, 128, 129,
					  1000, 4096, 1u << 20, 3000001 };

	test_empty();
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		test_size(sizes[i]);
	test_reuse_order();
	test_random(1, 2000);
	test_random(63, 20000);
	test_random(64, 20000);
	test_random(65, 20000);
	test_random(200, 50000);
	test_random(4096 + 3, 50000);

	if (failures) {
		fprintf(stderr, "test-slots: %d check(s) failed\n", failures);
		return 1;
	}
	printf("test-slots: ok\n");
	return 0;
}
