/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The keyed hash of every daemon table indexed by bytes a client chooses:
 * the block index and the eviction ghost lists.  Block keys are meant to be
 * SHA-256 outputs, but nothing can check that a client made them so; a
 * table that hashed their first 8 bytes as they are let one batch of keys
 * sharing those bytes fill a single probe run, which every lookup of the
 * batch then walked, on the event loop every tenant shares.  With a secret
 * drawn when the daemon starts, where a key lands is unknown to clients, so
 * no batch can be built to collide and probe runs stay as short as with
 * random keys.  XXH3 with a custom secret is the protection xxhash offers
 * against such flooding; it is not a cryptographic PRF, which a hash table
 * does not need.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* XXH3's default secret size; any size from 136 bytes works. */
#define KEYHASH_SECRET_BYTES 192

struct keyhash {
	uint8_t secret[KEYHASH_SECRET_BYTES];
};

/* A secret from the kernel's generator.  \return 0 or a negative errno */
int keyhash_init_random(struct keyhash *k);
/* A secret that is a function of seed: for tests and the offline policy
 * simulator, whose runs must repeat. */
void keyhash_init_seed(struct keyhash *k, uint64_t seed);
uint64_t keyhash(const struct keyhash *k, const void *data, size_t len);
