/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Free-slot allocator of one extent or spill region: a bitmap of used
 * slots and, above it, one bit per 64 slots that says the word is full.
 * The lowest free slot is taken, so that use gathers at the start of an
 * extent and its end stays free to be returned.  A little over 1/8 byte
 * per slot; allocation scans the summary from the first word that may
 * have room (a few words for an extent of 10^6 slots), release is O(1).
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

struct slots {
	uint32_t n;
	uint32_t n_free;
	uint64_t *used; /* [n/64 rounded up]: bit set, slot in use */
	uint64_t *full; /* [used words/64 rounded up]: bit set, used word full */
	uint32_t first; /* the summary words before it are all full */
};

int slots_init(struct slots *s, uint32_t n);
void slots_free(struct slots *s);
/* The lowest free slot; -ENOSPC when full. */
int slots_alloc(struct slots *s, uint32_t *ret);
/* That slot, if free: -EBUSY when it is not, -EINVAL out of range. */
int slots_take(struct slots *s, uint32_t slot);
/* -EINVAL for an out-of-range or already free slot. */
int slots_release(struct slots *s, uint32_t slot);
bool slots_is_used(const struct slots *s, uint32_t slot);
