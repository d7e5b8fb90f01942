/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Objects of one size, by the million: the store's blocks and their NVMe
 * copies.  malloc would add 16 bytes to each and scatter them; a slab
 * packs them into chunks of SLAB_CHUNK_BYTES, mapped on demand, each
 * aligned to its size so that an object's chunk is found from its address.
 * Objects are handed out from the chunk that has free ones first; a chunk
 * whose objects are all free again is unmapped (one is kept spare), so a
 * daemon that once held many blocks does not keep their memory.
 *
 * Pages of a chunk are touched only as its objects are first handed out:
 * memory grows with the objects, not with the chunks.  From a slab's fifth
 * chunk on, chunks are offered huge pages (2 MiB, the chunk's size and
 * alignment; madvise, where the system gives them): a lookup of one block
 * among millions then costs a cache miss, not a page walk as well, at the
 * price of at most one chunk touched ahead of its objects.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define SLAB_CHUNK_BYTES (UINT64_C(2) << 20)

struct slab_chunk;

struct slab {
	size_t size;       /* of an object, rounded up to 8 bytes */
	uint32_t per_chunk;
	struct slab_chunk *chunks;  /* every chunk */
	struct slab_chunk *partial; /* the chunks with a free object */
	struct slab_chunk *spare;   /* an empty chunk, kept mapped */
	uint64_t objects;           /* handed out */
	uint64_t n_chunks;          /* mapped, the spare included */
};

/* size: at most a quarter of a chunk. */
void slab_init(struct slab *s, size_t size);
/* Unmap every chunk; objects not freed are gone with them. */
void slab_done(struct slab *s);
/* A zeroed object, or NULL when out of memory. */
void *slab_alloc(struct slab *s);
/* p from slab_alloc of s; NULL is ignored. */
void slab_free(struct slab *s, void *p);
