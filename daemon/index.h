/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The block index of one namespace: 32-byte key -> entry.  Keys come from
 * clients, which may choose them to collide, so the whole key is hashed with
 * the daemon's secret (keyhash.h).  Open addressing with linear probing and
 * backward-shift deletion: no tombstones, so a long-lived index never
 * degrades.  Every entry must start with its 32-byte key.
 *
 * Work per request: a lookup probes one run of occupied slots, which at a
 * load under 70 % and with keys clients cannot aim stays a few slots long
 * on average and a few tens at most; a request names at most
 * [limits] keys_per_request (8192 at most) keys.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

struct keyhash;

struct index {
	void **slots;
	size_t cap; /* power of two */
	size_t n;
	const struct keyhash *hash; /* the caller's; outlives the index */
};

int index_init(struct index *ix, size_t cap_hint, const struct keyhash *hash);
void index_free(struct index *ix);
void *index_get(const struct index *ix, const uint8_t *key);
/* -EEXIST if the key is present, -ENOMEM if the table cannot grow. */
int index_put(struct index *ix, void *entry);
/* Remove entry (by identity); -ENOENT if absent. */
int index_remove(struct index *ix, const void *entry);
/* The slot where the probe for key starts: for tests that place keys. */
size_t index_home(const struct index *ix, const uint8_t *key);
