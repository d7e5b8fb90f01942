/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The block index of one namespace: 32-byte key -> entry.  Keys are SHA-256
 * outputs, so their first 8 bytes are already a uniform hash.  Open
 * addressing with linear probing and backward-shift deletion: no tombstones,
 * so a long-lived index never degrades.  Every entry must start with its
 * 32-byte key.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

struct index {
	void **slots;
	size_t cap; /* power of two */
	size_t n;
};

int index_init(struct index *ix, size_t cap_hint);
void index_free(struct index *ix);
void *index_get(const struct index *ix, const uint8_t *key);
/* -EEXIST if the key is present, -ENOMEM if the table cannot grow. */
int index_put(struct index *ix, void *entry);
/* Remove entry (by identity); -ENOENT if absent. */
int index_remove(struct index *ix, const void *entry);
