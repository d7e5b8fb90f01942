/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fault.h"
#include "index.h"
#include "keyhash.h"

static inline size_t key_hash(const struct index *ix, const uint8_t *key)
{
	return (size_t)keyhash(ix->hash, key, 32);
}

static inline const uint8_t *entry_key(const void *e)
{
	return e;
}

int index_init(struct index *ix, size_t cap_hint, const struct keyhash *hash)
{
	size_t cap = 64;
	while (cap < cap_hint * 2)
		cap *= 2;
	ix->slots = calloc(cap, sizeof(void *));
	if (!ix->slots)
		return -ENOMEM;
	ix->cap = cap;
	ix->n = 0;
	ix->hash = hash;
	return 0;
}

void index_free(struct index *ix)
{
	free(ix->slots);
	ix->slots = NULL;
	ix->cap = ix->n = 0;
}

void *index_get(const struct index *ix, const uint8_t *key)
{
	size_t mask = ix->cap - 1;
	for (size_t i = key_hash(ix, key) & mask;; i = (i + 1) & mask) {
		void *e = ix->slots[i];
		if (!e)
			return NULL;
		if (memcmp(entry_key(e), key, 32) == 0)
			return e;
	}
}

static void insert_nocheck(const struct index *ix, void **slots, size_t cap, void *e)
{
	size_t mask = cap - 1;
	size_t i = key_hash(ix, entry_key(e)) & mask;
	while (slots[i])
		i = (i + 1) & mask;
	slots[i] = e;
}

static int grow(struct index *ix)
{
	size_t cap = ix->cap * 2;
	void **slots = calloc(cap, sizeof(void *));
	if (!slots)
		return -ENOMEM;
	for (size_t i = 0; i < ix->cap; i++)
		if (ix->slots[i])
			insert_nocheck(ix, slots, cap, ix->slots[i]);
	free(ix->slots);
	ix->slots = slots;
	ix->cap = cap;
	return 0;
}

int index_put(struct index *ix, void *entry)
{
	if (index_get(ix, entry_key(entry)))
		return -EEXIST;
	/* Any insert may be the one that has to grow the table (fault.h). */
	if (fault_hit(FAULT_INDEX))
		return -ENOMEM;
	/* Keep the load under 70 %: probes stay short. */
	if ((ix->n + 1) * 10 > ix->cap * 7) {
		int r = grow(ix);
		if (r < 0)
			return r;
	}
	insert_nocheck(ix, ix->slots, ix->cap, entry);
	ix->n++;
	return 0;
}

int index_remove(struct index *ix, const void *entry)
{
	size_t mask = ix->cap - 1;
	size_t i = key_hash(ix, entry_key(entry)) & mask;

	for (;; i = (i + 1) & mask) {
		if (!ix->slots[i])
			return -ENOENT;
		if (ix->slots[i] == entry)
			break;
	}
	/* Backward shift: pull later members of the probe run into the hole
	 * unless their home lies cyclically after the hole. */
	size_t hole = i;
	for (size_t j = (hole + 1) & mask; ix->slots[j]; j = (j + 1) & mask) {
		size_t home = key_hash(ix, entry_key(ix->slots[j])) & mask;
		if (((j - home) & mask) >= ((j - hole) & mask)) {
			ix->slots[hole] = ix->slots[j];
			hole = j;
		}
	}
	ix->slots[hole] = NULL;
	ix->n--;
	return 0;
}

size_t index_home(const struct index *ix, const uint8_t *key)
{
	return key_hash(ix, key) & (ix->cap - 1);
}
