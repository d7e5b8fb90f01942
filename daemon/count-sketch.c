/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "count-sketch.h"

void count_sketch_init(struct count_sketch *s)
{
	memset(s, 0, sizeof(*s));
	s->max_width = COUNT_SKETCH_DEFAULT_MAX_WIDTH;
}

void count_sketch_done(struct count_sketch *s)
{
	free(s->c);
	s->c = NULL;
	s->width = 0;
}

/* Row r's column for h, at any width: the rows take different 16-bit
 * rotations of a multiple of h, so the four are independent enough for a
 * keyed h, and the index at width w is the one at 2w masked. */
static uint64_t column(uint64_t h, unsigned r, uint64_t width)
{
	uint64_t x = h * (UINT64_C(0x9e3779b97f4a7c15) + 2 * r);
	x ^= x >> 29;
	return ((x << (16 * r)) | (x >> ((64 - 16 * r) & 63))) & (width - 1);
}

static unsigned cell_get(const uint8_t *row, uint64_t i)
{
	return (row[i >> 1] >> ((i & 1) * 4)) & 0xf;
}

static void cell_set(uint8_t *row, uint64_t i, unsigned v)
{
	unsigned sh = (i & 1) * 4;
	row[i >> 1] = (uint8_t)((row[i >> 1] & ~(0xf << sh)) | (v << sh));
}

int count_sketch_reserve(struct count_sketch *s, uint64_t n)
{
	uint64_t w = s->width ? s->width : COUNT_SKETCH_MIN_WIDTH;

	while (w < n && w < s->max_width)
		w *= 2;
	if (w <= s->width)
		return 0;
	uint8_t *c = calloc(COUNT_SKETCH_ROWS, w / 2);
	if (!c)
		return -ENOMEM;
	for (unsigned r = 0; s->c && r < COUNT_SKETCH_ROWS; r++) {
		const uint8_t *old = s->c + r * (s->width / 2);
		uint8_t *row = c + r * (w / 2);
		/* Column j of the wider row is column j mod width of the old
		 * one: the counts it stood for, an upper bound still. */
		for (uint64_t j = 0; j < w / 2; j++)
			row[j] = old[j % (s->width / 2)];
	}
	free(s->c);
	s->c = c;
	s->width = w;
	/* At most w/2 keys between halvings: about 4 in 10 counters of a
	 * row stay zero, so a key never seen finds all four rows nonzero
	 * (and passes for seen) about 2.5 % of the time. */
	s->period = w / 2;
	return 0;
}

unsigned count_sketch_get(const struct count_sketch *s, uint64_t h)
{
	unsigned m = COUNT_SKETCH_MAX;

	if (!s->width)
		return 0;
	for (unsigned r = 0; r < COUNT_SKETCH_ROWS; r++) {
		unsigned v = cell_get(s->c + r * (s->width / 2), column(h, r, s->width));
		if (v < m)
			m = v;
	}
	return m;
}

unsigned count_sketch_add(struct count_sketch *s, uint64_t h)
{
	if (!s->width && count_sketch_reserve(s, 0) < 0)
		return 0;
	unsigned m = count_sketch_get(s, h);
	if (m < COUNT_SKETCH_MAX) {
		for (unsigned r = 0; r < COUNT_SKETCH_ROWS; r++) {
			uint8_t *row = s->c + r * (s->width / 2);
			uint64_t i = column(h, r, s->width);
			if (cell_get(row, i) == m)
				cell_set(row, i, m + 1);
		}
		m++;
	}
	if (++s->adds >= s->period) {
		count_sketch_halve(s);
		m /= 2;
	}
	return m;
}

void count_sketch_halve(struct count_sketch *s)
{
	uint64_t bytes = COUNT_SKETCH_ROWS * (s->width / 2);

	for (uint64_t i = 0; i < bytes; i++)
		s->c[i] = (uint8_t)((s->c[i] >> 1) & 0x77);
	s->adds = 0;
	s->halvings++;
}

uint64_t count_sketch_bytes(const struct count_sketch *s)
{
	return COUNT_SKETCH_ROWS * (s->width / 2);
}
