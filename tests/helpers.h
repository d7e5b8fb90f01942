/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What every kind of test program may need: the clock, descriptors
 * counted for leaks, a mix of bits, and keys made from a number.  Header only, so that a
 * test builds from its own files (tests/gpu/run.sh builds some with a bare
 * compiler).  Tests include it as "../helpers.h"; tests/integration/
 * harness.h includes it.
 */
#pragma once

#include <dirent.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

/* kvt_now_ns(): CLOCK_MONOTONIC in nanoseconds, as the daemon and the
 * client library read it. */
#include "../proto/macro.h"

static inline uint64_t now_ms(void)
{
	return kvt_now_ns() / 1000000;
}

static inline double now_s(void)
{
	return (double)kvt_now_ns() / 1e9;
}

/* Descriptors process pid has open (when pid is this process, the one
 * that reads its directory counts too): compared before and after, a leak
 * shows as a difference.  -1 when /proc/PID/fd cannot be read. */
static inline int count_fds(pid_t pid)
{
	char path[64];
	DIR *d;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	d = opendir(path);
	if (!d)
		return -1;
	while (readdir(d))
		n++;
	closedir(d);
	return n - 2;
}

/* A well-mixed 64-bit function of x (splitmix64's finaliser), one-to-one. */
static inline uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* n keys of 32 bytes (KVT_KEY_BYTES) from seed: the 8-byte word w of key
 * i is mix(seed + 4 * i + w).  mix() is one-to-one, so two sets whose
 * seeds are 4 * n or more apart have no word in common. */
static inline void make_keys(uint8_t *ret_keys, size_t n, uint64_t seed)
{
	for (size_t i = 0; i < n; i++)
		for (unsigned w = 0; w < 4; w++) {
			uint64_t v = mix(seed + 4 * i + w);

			memcpy(ret_keys + i * 32 + w * 8, &v, 8);
		}
}
