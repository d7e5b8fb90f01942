/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdlib.h>

#include "slots.h"

int slots_init(struct slots *s, uint32_t n)
{
	s->n = n;
	s->n_free = n;
	s->stack = malloc(sizeof(uint32_t) * (n ? n : 1));
	s->used = calloc((n + 63) / 64 + 1, sizeof(uint64_t));
	if (!s->stack || !s->used) {
		slots_free(s);
		return -ENOMEM;
	}
	/* Pop order 0, 1, 2, ...: fill an extent from its start. */
	for (uint32_t i = 0; i < n; i++)
		s->stack[i] = n - 1 - i;
	return 0;
}

void slots_free(struct slots *s)
{
	free(s->stack);
	free(s->used);
	s->stack = NULL;
	s->used = NULL;
	s->n = s->n_free = 0;
}

bool slots_is_used(const struct slots *s, uint32_t slot)
{
	return slot < s->n && (s->used[slot / 64] >> (slot % 64)) & 1;
}

int slots_alloc(struct slots *s, uint32_t *ret)
{
	if (s->n_free == 0)
		return -ENOSPC;
	uint32_t slot = s->stack[--s->n_free];
	s->used[slot / 64] |= UINT64_C(1) << (slot % 64);
	*ret = slot;
	return 0;
}

int slots_release(struct slots *s, uint32_t slot)
{
	if (!slots_is_used(s, slot))
		return -EINVAL;
	s->used[slot / 64] &= ~(UINT64_C(1) << (slot % 64));
	s->stack[s->n_free++] = slot;
	return 0;
}
