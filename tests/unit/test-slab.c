/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The object allocator behind blocks: objects come zeroed, never overlap,
 * keep their bytes while others come and go, are reused once freed, and a
 * chunk whose objects are all free is given back (one kept spare); over
 * several chunks, in a random walk checked against a reference.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"
#include "slab.h"
#include "rng.h"

/* Object i holds i's pattern in every word. */
static void fill(uint64_t *p, size_t size, uint64_t i)
{
	for (size_t w = 0; w < size / 8; w++)
		p[w] = i * UINT64_C(0x100000001b3) + w;
}

static bool holds(const uint64_t *p, size_t size, uint64_t i)
{
	for (size_t w = 0; w < size / 8; w++)
		if (p[w] != i * UINT64_C(0x100000001b3) + w)
			return false;
	return true;
}

static bool zeroed(const unsigned char *p, size_t size)
{
	for (size_t i = 0; i < size; i++)
		if (p[i])
			return false;
	return true;
}

static void test_rounding(void)
{
	struct slab s;

	slab_init(&s, 20);
	CHECK(s.size == 24);
	slab_init(&s, 104);
	CHECK(s.size == 104);
	CHECK(s.per_chunk == (SLAB_CHUNK_BYTES - 64) / 104);
	slab_done(&s);
}

/* Three chunks' worth: distinct, aligned, zeroed; then every other freed,
 * the rest intact, the freed ones reused before a new chunk is mapped. */
static void test_fill_and_reuse(void)
{
	struct slab s;
	slab_init(&s, 104);
	uint32_t n = 3 * s.per_chunk;
	uint64_t **obj = calloc(n, sizeof(*obj));

	for (uint32_t i = 0; i < n; i++) {
		obj[i] = slab_alloc(&s);
		CHECK(obj[i] && ((uintptr_t)obj[i] & 7) == 0);
		if (!obj[i])
			return;
		CHECK(zeroed((unsigned char *)obj[i], s.size));
		fill(obj[i], s.size, i);
	}
	CHECK(s.objects == n);
	CHECK(s.n_chunks == 3);
	for (uint32_t i = 0; i < n; i++)
		CHECK(holds(obj[i], s.size, i), "object %u", i);
	for (uint32_t i = 0; i < n; i += 2) {
		slab_free(&s, obj[i]);
		obj[i] = NULL;
	}
	for (uint32_t i = 1; i < n; i += 2)
		CHECK(holds(obj[i], s.size, i), "object %u after frees", i);
	for (uint32_t i = 0; i < n; i += 2) {
		obj[i] = slab_alloc(&s);
		CHECK(obj[i] && zeroed((unsigned char *)obj[i], s.size));
		fill(obj[i], s.size, i);
	}
	CHECK(s.n_chunks == 3); /* reused, nothing new mapped */
	for (uint32_t i = 0; i < n; i++)
		CHECK(holds(obj[i], s.size, i), "object %u after reuse", i);
	/* Everything freed: one chunk stays as the spare. */
	for (uint32_t i = 0; i < n; i++)
		slab_free(&s, obj[i]);
	CHECK(s.objects == 0);
	CHECK(s.n_chunks == 1);
	CHECK(s.chunks == NULL && s.partial == NULL && s.spare != NULL);
	/* The spare serves the next allocation. */
	void *p = slab_alloc(&s);
	CHECK(p && s.n_chunks == 1);
	slab_free(&s, p);
	slab_free(&s, NULL);
	slab_done(&s);
	CHECK(s.n_chunks == 0 && s.objects == 0);
	free(obj);
}

/* Random allocations and frees over about five chunks: every live object
 * keeps its bytes, and the chunks mapped never exceed what the live ones
 * need, plus the one being filled and the spare. */
static void test_random_walk(void)
{
	struct slab s;
	slab_init(&s, 40);
	uint32_t cap = 5 * s.per_chunk;
	uint64_t **obj = calloc(cap, sizeof(*obj));
	uint64_t *tag = calloc(cap, sizeof(*tag));
	uint64_t live = 0, next_tag = 1;

	for (int step = 0; step < 400000; step++) {
		uint32_t i = (uint32_t)(rnd() % cap);
		if (obj[i]) {
			CHECK(holds(obj[i], s.size, tag[i]), "step %d, object %u", step, i);
			slab_free(&s, obj[i]);
			obj[i] = NULL;
			live--;
		} else {
			obj[i] = slab_alloc(&s);
			CHECK(obj[i] != NULL);
			if (!obj[i])
				break;
			tag[i] = next_tag++;
			fill(obj[i], s.size, tag[i]);
			live++;
		}
		CHECK(s.objects == live);
	}
	for (uint32_t i = 0; i < cap; i++) {
		if (obj[i]) {
			CHECK(holds(obj[i], s.size, tag[i]), "object %u at the end", i);
			slab_free(&s, obj[i]);
		}
	}
	CHECK(s.objects == 0 && s.n_chunks == 1);
	slab_done(&s);
	free(obj);
	free(tag);
}

int main(void)
{
	test_rounding();
	test_fill_and_reuse();
	test_random_walk();
	return failures ? 1 : 0;
}
