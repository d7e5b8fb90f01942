/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The block index of one namespace: 32-byte key -> entry.  Keys come from
 * clients, which may choose them to collide, so the whole key is hashed with
 * the daemon's secret (keyhash.h).  Open addressing with linear probing and
 * backward-shift deletion: no tombstones, so a long-lived index never
 * degrades.  Every entry must start with its 32-byte key.
 *
 * A slot is 8 bytes: the entry's address in the low 48 bits and a 16-bit
 * tag, the top bits of the key's hash, above them.  A probe compares tags
 * and reads an entry only where its tag matches (a key of another entry
 * matches 1 time in 65,536), so a lookup costs the slot's cache line and,
 * for a key that is there, its entry's: at 10^6 blocks neither is in any
 * cache.  A batch of keys (index_get_batch) is a pipeline: each key's home
 * slot is asked for some keys before it is scanned, and the entry its tag
 * matched (its first entry_bytes) some keys before the key is compared, so
 * the misses of a batch overlap instead of following one another.  A table
 * of 2 MiB or more is mapped with transparent huge pages where the system
 * allows them (madvise): a random slot then costs no page walk.
 *
 * Entries must lie below 2^48, where every 64-bit Linux ABI puts a
 * process's heap and mappings unless one is asked for above it; index_put
 * refuses (-EINVAL) one that does not.
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

#define INDEX_TAG_SHIFT 48
#define INDEX_ADDR_MASK ((UINT64_C(1) << INDEX_TAG_SHIFT) - 1)

struct index {
	uint64_t *slots; /* entry address | tag << INDEX_TAG_SHIFT; 0: empty */
	size_t cap;      /* power of two */
	size_t n;
	uint64_t version; /* changes with every put and remove */
	/* How much of a found entry a batch asks the memory for: its key
	 * (the default), or the caller's more, which it reads next. */
	size_t entry_bytes;
	const struct keyhash *hash; /* the caller's; outlives the index */
};

int index_init(struct index *ix, size_t cap_hint, const struct keyhash *hash);
void index_free(struct index *ix);
void *index_get(const struct index *ix, const uint8_t *key);
/* ret[i] = index_get(ix, keys + 32 * i) for i < n, with the misses of
 * the keys overlapped. */
void index_get_batch(const struct index *ix, const uint8_t *keys, size_t n, void **ret);
/* -EEXIST if the key is present, -ENOMEM if the table cannot grow, -EINVAL
 * if entry lies above 2^48. */
int index_put(struct index *ix, void *entry);
/* Remove entry (by identity); -ENOENT if absent. */
int index_remove(struct index *ix, const void *entry);
/* The slot where the probe for key starts: for tests that place keys. */
size_t index_home(const struct index *ix, const uint8_t *key);
/* The tag a slot holding key carries: for tests. */
uint16_t index_tag(const struct index *ix, const uint8_t *key);

/* The entry in slot i (< cap), or NULL: for walks over the whole table. */
static inline void *index_slot(const struct index *ix, size_t i)
{
	return (void *)(uintptr_t)(ix->slots[i] & INDEX_ADDR_MASK);
}

/*
 * The entries of a request's keys, looked up INDEX_WINDOW at a time with
 * index_get_batch as the caller reaches them, in either direction.  The
 * caller may change the index between two gets: a put can make a key
 * found absent present, a remove can free an entry found, so once the
 * index's version moves the window's remaining keys are looked up one by
 * one, and the next window is looked up in a batch again.
 */
#define INDEX_WINDOW 32

struct index_keys {
	const struct index *ix;
	const uint8_t *keys; /* 32 bytes each */
	size_t n;
	size_t from, to;  /* the window: keys [from, to) */
	uint64_t version; /* ix->version when it was looked up */
	void *got[INDEX_WINDOW];
};

void index_keys_init(struct index_keys *k, const struct index *ix, const uint8_t *keys, size_t n);
/* The entry of keys[i] (i < n) now, or NULL. */
void *index_keys_get(struct index_keys *k, size_t i);
