/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <sys/random.h>
#include <xxhash.h>

#include "keyhash.h"

_Static_assert(KEYHASH_SECRET_BYTES >= XXH3_SECRET_SIZE_MIN, "XXH3 needs a longer secret");

int keyhash_init_random(struct keyhash *k)
{
	size_t got = 0;

	while (got < sizeof(k->secret)) {
		/* Blocks only until the generator is first seeded, which
		 * kernels since 5.18 do early in boot. */
		ssize_t n = getrandom(k->secret + got, sizeof(k->secret) - got, 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		got += (size_t)n;
	}
	return 0;
}

void keyhash_init_seed(struct keyhash *k, uint64_t seed)
{
	/* splitmix64: every byte of the secret looks random, as XXH3 wants. */
	for (size_t i = 0; i < sizeof(k->secret); i += 8) {
		uint64_t z = (seed += UINT64_C(0x9e3779b97f4a7c15));
		z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
		z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
		z ^= z >> 31;
		for (size_t j = 0; j < 8 && i + j < sizeof(k->secret); j++)
			k->secret[i + j] = (uint8_t)(z >> (8 * j));
	}
}

uint64_t keyhash(const struct keyhash *k, const void *data, size_t len)
{
	return XXH3_64bits_withSecret(data, len, k->secret, sizeof(k->secret));
}
