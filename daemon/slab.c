/* SPDX-License-Identifier: Apache-2.0 */
#include <assert.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>

#include "slab.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
/* A freed object stays poisoned, but for the word linking it to the
 * next free one, so that AddressSanitizer still reports a use after free. */
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

struct slab_chunk {
	struct slab_chunk *prev, *next;   /* on s->chunks */
	struct slab_chunk *pprev, *pnext; /* on s->partial */
	void *free;      /* freed objects, each holding the next one's address */
	uint32_t used;   /* objects handed out */
	uint32_t bumped; /* objects ever handed out: the rest were never touched */
};

/* Objects start a cache line in, after the header. */
#define SLAB_HEADER_BYTES 64
_Static_assert(sizeof(struct slab_chunk) <= SLAB_HEADER_BYTES, "chunk header");

static char *chunk_objects(struct slab_chunk *c)
{
	return (char *)c + SLAB_HEADER_BYTES;
}

static struct slab_chunk *chunk_of(const void *p)
{
	return (struct slab_chunk *)((uintptr_t)p & ~(uintptr_t)(SLAB_CHUNK_BYTES - 1));
}

void slab_init(struct slab *s, size_t size)
{
	assert(size > 0 && size <= SLAB_CHUNK_BYTES / 4);
	memset(s, 0, sizeof(*s));
	s->size = (size + 7) & ~(size_t)7;
	s->per_chunk = (uint32_t)((SLAB_CHUNK_BYTES - SLAB_HEADER_BYTES) / s->size);
}

/* A slab of this many chunks offers its new ones huge pages (chunk_map):
 * a small one keeps growing a 4 KiB page at a time. */
#define SLAB_HUGE_CHUNKS 4

/* A chunk aligned to its size: twice the size mapped, the rest unmapped.
 * huge: one huge page for the whole chunk, where the system gives them. */
static struct slab_chunk *chunk_map(bool huge)
{
	size_t len = 2 * SLAB_CHUNK_BYTES;
	char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (m == MAP_FAILED)
		return NULL;
	uintptr_t start = ((uintptr_t)m + SLAB_CHUNK_BYTES - 1) & ~(uintptr_t)(SLAB_CHUNK_BYTES - 1);
	char *c = (char *)start;
	if (c > m)
		munmap(m, (size_t)(c - m));
	if (c + SLAB_CHUNK_BYTES < m + len)
		munmap(c + SLAB_CHUNK_BYTES, (size_t)(m + len - (c + SLAB_CHUNK_BYTES)));
	if (huge)
		(void)madvise(c, SLAB_CHUNK_BYTES, MADV_HUGEPAGE);
	return (struct slab_chunk *)c; /* zero, as fresh anonymous memory is */
}

static void partial_link(struct slab *s, struct slab_chunk *c)
{
	c->pprev = NULL;
	c->pnext = s->partial;
	if (s->partial)
		s->partial->pprev = c;
	s->partial = c;
}

static void partial_unlink(struct slab *s, struct slab_chunk *c)
{
	if (c->pprev)
		c->pprev->pnext = c->pnext;
	else
		s->partial = c->pnext;
	if (c->pnext)
		c->pnext->pprev = c->pprev;
	c->pprev = c->pnext = NULL;
}

static struct slab_chunk *chunk_add(struct slab *s)
{
	struct slab_chunk *c = s->spare;

	if (c) {
		s->spare = NULL;
	} else {
		c = chunk_map(s->n_chunks >= SLAB_HUGE_CHUNKS);
		if (!c)
			return NULL;
		s->n_chunks++;
	}
	c->prev = NULL;
	c->next = s->chunks;
	if (s->chunks)
		s->chunks->prev = c;
	s->chunks = c;
	partial_link(s, c);
	return c;
}

/* An empty chunk leaves the lists: it becomes the spare, or is unmapped. */
static void chunk_remove(struct slab *s, struct slab_chunk *c)
{
	partial_unlink(s, c);
	if (c->prev)
		c->prev->next = c->next;
	else
		s->chunks = c->next;
	if (c->next)
		c->next->prev = c->prev;
	if (!s->spare) {
		s->spare = c;
		return;
	}
	UNPOISON(c, SLAB_CHUNK_BYTES);
	munmap(c, SLAB_CHUNK_BYTES);
	s->n_chunks--;
}

void *slab_alloc(struct slab *s)
{
	struct slab_chunk *c = s->partial ? s->partial : chunk_add(s);
	char *p;

	if (!c)
		return NULL;
	if (c->free) {
		p = c->free;
		UNPOISON(p, s->size);
		c->free = *(void **)p;
	} else {
		p = chunk_objects(c) + (size_t)c->bumped++ * s->size;
	}
	if (++c->used == s->per_chunk)
		partial_unlink(s, c);
	s->objects++;
	memset(p, 0, s->size);
	return p;
}

void slab_free(struct slab *s, void *p)
{
	if (!p)
		return;
	struct slab_chunk *c = chunk_of(p);

	assert(c->used > 0);
	*(void **)p = c->free;
	POISON((char *)p + sizeof(void *), s->size - sizeof(void *));
	c->free = p;
	if (c->used-- == s->per_chunk)
		partial_link(s, c);
	s->objects--;
	if (c->used == 0)
		chunk_remove(s, c);
}

void slab_done(struct slab *s)
{
	struct slab_chunk *c = s->chunks;

	while (c) {
		struct slab_chunk *next = c->next;
		UNPOISON(c, SLAB_CHUNK_BYTES);
		munmap(c, SLAB_CHUNK_BYTES);
		c = next;
	}
	if (s->spare) {
		UNPOISON(s->spare, SLAB_CHUNK_BYTES);
		munmap(s->spare, SLAB_CHUNK_BYTES);
	}
	size_t size = s->size;
	slab_init(s, size);
}
