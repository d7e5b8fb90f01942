/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The unit tests' random numbers: xorshift64*, from a fixed seed, so that
 * a failing run replays.  A test may define RNG_SEED before including it.
 */
#pragma once

#include <stdint.h>

#ifndef RNG_SEED
#define RNG_SEED UINT64_C(0x9e3779b97f4a7c15)
#endif

static uint64_t rng_state = RNG_SEED;

static inline uint64_t rnd(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * UINT64_C(0x2545f4914f6cdd1d);
}
