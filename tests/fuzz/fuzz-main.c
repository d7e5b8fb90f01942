/* SPDX-License-Identifier: Apache-2.0 */
/* Deterministic replay driver for a fuzz target (see fuzz.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

#define MAX_SEEDS 64
#define MAX_INPUT 65536

static struct {
	uint8_t *data;
	size_t size;
} seeds[MAX_SEEDS];
static unsigned n_seeds;

static void add_seed(const uint8_t *data, size_t size, void *userdata)
{
	if (n_seeds >= MAX_SEEDS || size > MAX_INPUT)
		return;
	seeds[n_seeds].data = malloc(size ? size : 1);
	memcpy(seeds[n_seeds].data, data, size);
	seeds[n_seeds++].size = size;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* One mutation of the kinds that find framing bugs: flipped bits, bytes
 * set to edge values, truncation, duplication and splices of two seeds. */
static size_t mutate(uint8_t *buf, size_t size)
{
	static const uint8_t edges[] = {0x00, 0x01, 0x7f, 0x80, 0xff, 0xfe};
	int rounds = 1 + (int)(next() % 4);
	for (int r = 0; r < rounds && size; r++) {
		size_t at = next() % size;
		switch (next() % 6) {
		case 0: buf[at] ^= (uint8_t)(1u << (next() % 8)); break;
		case 1: buf[at] = edges[next() % sizeof(edges)]; break;
		case 2: size = at; break;
		case 3:
			if (size * 2 <= MAX_INPUT) {
				memcpy(buf + size, buf, size);
				size *= 2;
			}
			break;
		case 4: {
			unsigned o = (unsigned)(next() % n_seeds);
			size_t take = seeds[o].size - (seeds[o].size ? next() % seeds[o].size : 0);
			if (at + take <= MAX_INPUT) {
				memcpy(buf + at, seeds[o].data + (seeds[o].size - take), take);
				size = at + take;
			}
			break;
		}
		default:
			for (size_t i = at; i < size && i < at + 8; i++)
				buf[i] = (uint8_t)next();
			break;
		}
	}
	return size;
}

/* "--seeds DIR": write the seeds as a libFuzzer corpus and stop. */
static int write_seeds(const char *dir)
{
	for (unsigned i = 0; i < n_seeds; i++) {
		char path[4096];
		snprintf(path, sizeof(path), "%s/seed-%02u", dir, i);
		FILE *f = fopen(path, "we");
		if (!f || fwrite(seeds[i].data, 1, seeds[i].size, f) != seeds[i].size) {
			perror(path);
			return 1;
		}
		fclose(f);
	}
	return 0;
}

int main(int argc, char **argv)
{
	static uint8_t buf[MAX_INPUT * 2];

	fuzz_seeds(add_seed, NULL);
	if (argc > 2 && !strcmp(argv[1], "--seeds"))
		return write_seeds(argv[2]);
	long iterations = argc > 1 ? atol(argv[1]) : 2000;
	for (unsigned i = 0; i < n_seeds; i++)
		LLVMFuzzerTestOneInput(seeds[i].data, seeds[i].size);
	for (long i = 0; i < iterations && n_seeds; i++) {
		unsigned s = (unsigned)(next() % n_seeds);
		memcpy(buf, seeds[s].data, seeds[s].size);
		size_t size = mutate(buf, seeds[s].size);
		LLVMFuzzerTestOneInput(buf, size);
	}
	printf("%u seeds and %ld mutations ran clean\n", n_seeds, iterations);
	for (unsigned i = 0; i < n_seeds; i++)
		free(seeds[i].data);
	return 0;
}
