/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A count-min sketch of 4-bit saturating counters: how often each key was
 * requested lately, resident or not, in a few bytes per key.  Four rows;
 * an estimate is the smallest of the key's four counters, so it is never
 * below the true count (up to 15), only above it when every one of the
 * four is shared with other keys.  Increments are conservative (only the
 * smallest counters grow), which keeps shared counters low.
 *
 * Every `period` increments all counters are halved: popularity decays,
 * and a key that stopped being requested loses a level of its log-scaled
 * count per period (TinyLFU's reset).
 *
 * The caller passes a 64-bit keyed hash of the key (keyhash.h), so keys a
 * client picks cannot be aimed at shared counters.  The width grows with
 * what the caller says it must cover, up to max_width; a column of width
 * w is the column of width 2w with the top bit of its index dropped, so
 * growing copies counters and every estimate stays an upper bound.  Pure:
 * no I/O, and a failed allocation keeps the old width.
 */
#pragma once

#include <stdint.h>

#define COUNT_SKETCH_ROWS 4
#define COUNT_SKETCH_MAX 15
#define COUNT_SKETCH_MIN_WIDTH 256
/* Counters per row at most unless the caller sets max_width: 2^22, 8 MiB
 * in all, whatever the tier's size (reached at 262 144 blocks by LRFU's
 * sizing).  A key counted once is forgotten at the next halving, every
 * width/2 requests, so the bound is how long the sketch can remember: at
 * 2^20 (2 MiB) that was 2^19 requests, 0.4 to 1.6 turnovers of a tier of
 * 25 % of the Mooncake and API-traffic traces, and cost lrfu-admit 0.04 of
 * Belady on the synthetic Mooncake trace there (docs/workload.md). */
#define COUNT_SKETCH_DEFAULT_MAX_WIDTH (UINT64_C(1) << 22)

struct count_sketch {
	uint8_t *c;         /* ROWS rows of width/2 bytes, two counters a byte */
	uint64_t width;     /* counters per row, a power of two, or 0 */
	uint64_t max_width; /* a power of two */
	uint64_t adds;      /* increments since the last halving */
	uint64_t period;    /* increments between halvings: width / 2 */
	uint64_t halvings;
};

void count_sketch_init(struct count_sketch *s);
void count_sketch_done(struct count_sketch *s);
/* At least n counters per row (up to max_width); never shrinks.
 * \return 0 or -ENOMEM (the old width stays) */
int count_sketch_reserve(struct count_sketch *s, uint64_t n);
/* The estimate for hash h, 0 to COUNT_SKETCH_MAX. */
unsigned count_sketch_get(const struct count_sketch *s, uint64_t h);
/* Count one request of h, halving everything when the period is up.
 * \return the new estimate (0 only when the sketch has no room at all) */
unsigned count_sketch_add(struct count_sketch *s, uint64_t h);
/* Halve every counter now. */
void count_sketch_halve(struct count_sketch *s);
/* Bytes the counters take. */
uint64_t count_sketch_bytes(const struct count_sketch *s);
