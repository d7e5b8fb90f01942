/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "fault.h"
#include "index.h"
#include "keyhash.h"

/* Tables from this size on are mapped on their own, aligned to it, and
 * offered huge pages: below it a table is in a few pages anyway. */
#define HUGE_BYTES (UINT64_C(2) << 20)

/* How far index_get_batch asks ahead of its use, in keys: each key has up
 * to three lines in flight (its slot, its entry's one or two), and a core
 * tracks a few tens of misses at a time. */
#define AHEAD 8
#define RING 32 /* a power of two above 2 * AHEAD */

static inline uint64_t key_hash(const struct index *ix, const uint8_t *key)
{
	return keyhash(ix->hash, key, 32);
}

static inline const uint8_t *entry_key(const void *e)
{
	return e;
}

/* The home slot takes the hash's low bits, the tag its top ones: they are
 * independent for any table of up to 2^48 slots. */
static inline uint64_t tag_of(uint64_t h)
{
	return h >> INDEX_TAG_SHIFT;
}

static inline void *slot_entry(uint64_t s)
{
	return (void *)(uintptr_t)(s & INDEX_ADDR_MASK);
}

static uint64_t *table_alloc(size_t cap)
{
	size_t bytes = cap * sizeof(uint64_t);

	if (bytes < HUGE_BYTES)
		return calloc(cap, sizeof(uint64_t));
	/* Mapped twice the size and trimmed to an aligned table, so that
	 * every 2 MiB of it can be one huge page. */
	size_t len = bytes + HUGE_BYTES;
	char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		return NULL;
	char *t = (char *)(((uintptr_t)m + HUGE_BYTES - 1) & ~(uintptr_t)(HUGE_BYTES - 1));
	if (t > m)
		munmap(m, (size_t)(t - m));
	if (t + bytes < m + len)
		munmap(t + bytes, (size_t)(m + len - (t + bytes)));
	/* A hint: without huge pages (THP "never") the table works the same,
	 * with a page walk more per random slot. */
	(void)madvise(t, bytes, MADV_HUGEPAGE);
	return (uint64_t *)t; /* zero, as fresh anonymous memory is */
}

static void table_free(uint64_t *slots, size_t cap)
{
	if (!slots)
		return;
	if (cap * sizeof(uint64_t) < HUGE_BYTES)
		free(slots);
	else
		munmap(slots, cap * sizeof(uint64_t));
}

int index_init(struct index *ix, size_t cap_hint, const struct keyhash *hash)
{
	size_t cap = 64;
	while (cap < cap_hint * 2)
		cap *= 2;
	ix->slots = table_alloc(cap);
	if (!ix->slots)
		return -ENOMEM;
	ix->cap = cap;
	ix->n = 0;
	ix->version = 0;
	ix->entry_bytes = 32;
	ix->hash = hash;
	return 0;
}

void index_free(struct index *ix)
{
	table_free(ix->slots, ix->cap);
	ix->slots = NULL;
	ix->cap = ix->n = 0;
}

/* From slot i on, the first slot that is empty or carries tag: only there
 * can the key be, or its run end. */
static inline size_t scan(const struct index *ix, size_t i, uint64_t tag)
{
	size_t mask = ix->cap - 1;

	for (;; i = (i + 1) & mask) {
		uint64_t s = ix->slots[i];
		if (!s || tag_of(s) == tag)
			return i;
	}
}

/* The entry of key (hash h) at or after slot i, where its probe has got to. */
static void *probe(const struct index *ix, const uint8_t *key, uint64_t h, size_t i)
{
	size_t mask = ix->cap - 1;

	for (;; i = (i + 1) & mask) {
		i = scan(ix, i, tag_of(h));
		uint64_t s = ix->slots[i];
		if (!s)
			return NULL;
		if (memcmp(entry_key(slot_entry(s)), key, 32) == 0)
			return slot_entry(s);
	}
}

void *index_get(const struct index *ix, const uint8_t *key)
{
	uint64_t h = key_hash(ix, key);
	return probe(ix, key, h, h & (ix->cap - 1));
}

/* The entry's first entry_bytes, which may straddle one line more than
 * they fill. */
static inline void prefetch_entry(const struct index *ix, const void *e)
{
	const char *p = e;

	for (size_t off = 0; off < ix->entry_bytes; off += 64)
		__builtin_prefetch(p + off);
	__builtin_prefetch(p + ix->entry_bytes - 1);
}

void index_get_batch(const struct index *ix, const uint8_t *keys, size_t n, void **ret)
{
	size_t mask = ix->cap - 1;
	uint64_t h[RING];
	size_t at[RING];

	/* A pipeline: key i is hashed and its home asked for, AHEAD keys
	 * later its slots are scanned and the matching entry asked for, and
	 * AHEAD keys later still its key is compared and its probe finishes
	 * where the scan got to (a tag that another key carries too moves on
	 * to the next match).  Each line has had AHEAD keys' work to arrive. */
	for (size_t i = 0; i < n + 2 * AHEAD; i++) {
		if (i < n) {
			h[i % RING] = key_hash(ix, keys + 32 * i);
			__builtin_prefetch(&ix->slots[h[i % RING] & mask]);
		}
		if (i >= AHEAD && i - AHEAD < n) {
			size_t j = (i - AHEAD) % RING;
			at[j] = scan(ix, h[j] & mask, tag_of(h[j]));
			if (ix->slots[at[j]])
				prefetch_entry(ix, slot_entry(ix->slots[at[j]]));
		}
		if (i >= 2 * AHEAD && i - 2 * AHEAD < n) {
			size_t k = i - 2 * AHEAD;
			ret[k] = probe(ix, keys + 32 * k, h[k % RING], at[k % RING]);
		}
	}
}

/* An empty slot for a key of hash h, which is not in the table. */
static size_t free_slot(const uint64_t *slots, size_t cap, uint64_t h)
{
	size_t mask = cap - 1;
	size_t i = h & mask;

	while (slots[i])
		i = (i + 1) & mask;
	return i;
}

static inline uint64_t slot_of(const void *e, uint64_t h)
{
	return (uint64_t)(uintptr_t)e | tag_of(h) << INDEX_TAG_SHIFT;
}

static int grow(struct index *ix)
{
	size_t cap = ix->cap * 2;
	uint64_t *slots = table_alloc(cap);
	if (!slots)
		return -ENOMEM;
	for (size_t i = 0; i < ix->cap; i++) {
		/* The entries are read in table order, that is at random:
		 * ask for one a few slots ahead of the one hashed. */
		if (i + 8 < ix->cap && ix->slots[i + 8])
			__builtin_prefetch(slot_entry(ix->slots[i + 8]));
		if (!ix->slots[i])
			continue;
		uint64_t h = key_hash(ix, entry_key(slot_entry(ix->slots[i])));
		slots[free_slot(slots, cap, h)] = ix->slots[i];
	}
	table_free(ix->slots, ix->cap);
	ix->slots = slots;
	ix->cap = cap;
	return 0;
}

int index_put(struct index *ix, void *entry)
{
	if ((uintptr_t)entry & ~(uintptr_t)INDEX_ADDR_MASK)
		return -EINVAL;
	uint64_t h = key_hash(ix, entry_key(entry));
	if (probe(ix, entry_key(entry), h, h & (ix->cap - 1)))
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
	ix->slots[free_slot(ix->slots, ix->cap, h)] = slot_of(entry, h);
	ix->n++;
	ix->version++;
	return 0;
}

int index_remove(struct index *ix, const void *entry)
{
	size_t mask = ix->cap - 1;
	size_t i = key_hash(ix, entry_key(entry)) & mask;

	for (;; i = (i + 1) & mask) {
		if (!ix->slots[i])
			return -ENOENT;
		if (slot_entry(ix->slots[i]) == entry)
			break;
	}
	/* Backward shift: pull later members of the probe run into the hole
	 * unless their home lies cyclically after the hole.  A slot moves
	 * whole, its tag with it. */
	size_t hole = i;
	for (size_t j = (hole + 1) & mask; ix->slots[j]; j = (j + 1) & mask) {
		size_t home = key_hash(ix, entry_key(slot_entry(ix->slots[j]))) & mask;
		if (((j - home) & mask) >= ((j - hole) & mask)) {
			ix->slots[hole] = ix->slots[j];
			hole = j;
		}
	}
	ix->slots[hole] = 0;
	ix->n--;
	ix->version++;
	return 0;
}

size_t index_home(const struct index *ix, const uint8_t *key)
{
	return key_hash(ix, key) & (ix->cap - 1);
}

uint16_t index_tag(const struct index *ix, const uint8_t *key)
{
	return (uint16_t)tag_of(key_hash(ix, key));
}

void index_keys_init(struct index_keys *k, const struct index *ix, const uint8_t *keys, size_t n)
{
	k->ix = ix;
	k->keys = keys;
	k->n = n;
	k->from = k->to = 0;
	k->version = 0;
}

void *index_keys_get(struct index_keys *k, size_t i)
{
	if (i < k->from || i >= k->to) {
		/* Windows at multiples of their size: the same ones whichever
		 * way the caller walks. */
		k->from = i / INDEX_WINDOW * INDEX_WINDOW;
		k->to = k->n - k->from < INDEX_WINDOW ? k->n : k->from + INDEX_WINDOW;
		k->version = k->ix->version;
		index_get_batch(k->ix, k->keys + k->from * 32, k->to - k->from, k->got);
	}
	if (k->ix->version != k->version)
		return index_get(k->ix, k->keys + i * 32);
	return k->got[i - k->from];
}
