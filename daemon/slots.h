/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Free-slot allocator of one extent: a stack of free slot numbers plus a
 * used bitmap that catches double frees.  O(1) both ways; the most recently
 * freed slot is reused first, so its pages are the warmest.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

struct slots {
	uint32_t n;
	uint32_t n_free;
	uint32_t *stack;
	uint64_t *used;
};

int slots_init(struct slots *s, uint32_t n);
void slots_free(struct slots *s);
/* -ENOSPC when full. */
int slots_alloc(struct slots *s, uint32_t *ret);
/* -EINVAL for an out-of-range or already free slot. */
int slots_release(struct slots *s, uint32_t slot);
bool slots_is_used(const struct slots *s, uint32_t slot);
