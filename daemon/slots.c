/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdlib.h>

#include "slots.h"

static uint32_t words(uint32_t bits)
{
	return (uint32_t)(((uint64_t)bits + 63) / 64);
}

int slots_init(struct slots *s, uint32_t n)
{
	uint32_t nw = words(n), ns = words(nw);

	s->n = n;
	s->n_free = n;
	s->first = 0;
	s->used = calloc(nw ? nw : 1, sizeof(uint64_t));
	s->full = calloc(ns ? ns : 1, sizeof(uint64_t));
	if (!s->used || !s->full) {
		slots_free(s);
		return -ENOMEM;
	}
	/* Past the last slot, every bit reads as used, and every word past
	 * the last as full: the search never finds them. */
	if (n % 64)
		s->used[nw - 1] = ~UINT64_C(0) << (n % 64);
	if (nw % 64)
		s->full[ns - 1] = ~UINT64_C(0) << (nw % 64);
	return 0;
}

void slots_free(struct slots *s)
{
	free(s->used);
	free(s->full);
	s->used = s->full = NULL;
	s->n = s->n_free = s->first = 0;
}

bool slots_is_used(const struct slots *s, uint32_t slot)
{
	return slot < s->n && (s->used[slot / 64] >> (slot % 64)) & 1;
}

int slots_alloc(struct slots *s, uint32_t *ret)
{
	if (s->n_free == 0)
		return -ENOSPC;
	/* A free slot exists, so a word of the summary has a clear bit. */
	uint32_t sw = s->first;
	while (s->full[sw] == ~UINT64_C(0))
		sw++;
	s->first = sw;
	uint32_t w = sw * 64 + (uint32_t)__builtin_ctzll(~s->full[sw]);
	uint32_t bit = (uint32_t)__builtin_ctzll(~s->used[w]);
	s->used[w] |= UINT64_C(1) << bit;
	if (s->used[w] == ~UINT64_C(0))
		s->full[sw] |= UINT64_C(1) << (w % 64);
	s->n_free--;
	*ret = w * 64 + bit;
	return 0;
}

int slots_take(struct slots *s, uint32_t slot)
{
	if (slot >= s->n)
		return -EINVAL;
	if (slots_is_used(s, slot))
		return -EBUSY;
	uint32_t w = slot / 64;
	s->used[w] |= UINT64_C(1) << (slot % 64);
	if (s->used[w] == ~UINT64_C(0))
		s->full[w / 64] |= UINT64_C(1) << (w % 64);
	s->n_free--;
	return 0;
}

int slots_release(struct slots *s, uint32_t slot)
{
	if (!slots_is_used(s, slot))
		return -EINVAL;
	uint32_t w = slot / 64;
	s->used[w] &= ~(UINT64_C(1) << (slot % 64));
	s->full[w / 64] &= ~(UINT64_C(1) << (w % 64));
	if (w / 64 < s->first)
		s->first = w / 64;
	s->n_free++;
	return 0;
}
