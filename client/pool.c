/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The pool as this client maps it, across reconnects, and the handles that
 * keep it mapped.
 *
 * kvt_reserve and kvt_acquire hand out pointers into the pool, and the
 * application may use them on any thread until it gives the handle back,
 * while another thread's call finds the daemon gone and reconnects.  So a
 * reconnect never unmaps anything by itself:
 *
 * - The new connection's extents are compared with the previous ones.  The
 *   same daemon sends the same memfds again (same device and inode): then
 *   nothing changes, the mappings and the handles stay as they are.  A
 *   restarted daemon sends new memfds, or none yet: the previous extents are
 *   retired, and the handles taken from them become old.
 * - A retired extent stays mapped while this client holds a handle whose
 *   pointer lies in it; with the last one given back it is unmapped, so
 *   memory of a dead daemon is let go as soon as nothing uses it.  Until
 *   then no new mapping can take its addresses.
 * - kvt_client_map hands out pointers that no handle accounts for: a
 *   retired extent that it pointed into is not unmapped but replaced by
 *   anonymous memory at the same addresses (reading zeros), kept until the
 *   client is freed: such a pointer can never fault, and the dead daemon's
 *   memory is still let go.
 * - Handles are kept by value and by daemon instance.  One of an earlier
 *   instance is never sent to the daemon, where the same value may name
 *   another block: a release or abort of it ends locally, a commit fails
 *   with -ESTALE (blocks.c).  A new daemon numbers its handles from the
 *   start again, so it may hand out a value this client still holds from an
 *   earlier instance; that handle is given straight back and its key
 *   reported -ENOBUFS (blocks.c), so that a value always names one handle.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14; older headers lack it */
#endif
#include <sys/stat.h>
#include <unistd.h>

#include "client-internal.h"

/* ---- held handles -------------------------------------------------- */

/*
 * Handles of the current instance are keyed by their index in the
 * tenant's table (the low 32 bits, docs/protocol.md §9): the daemon reuses
 * an index only once its handle has ended, so a new handle with the index
 * of one still recorded here means that one was given back by another
 * process of the tenant (the scheduler/worker split), and its record goes.
 * This keeps the table as small as the tenant's own.  Handles of earlier
 * instances are keyed by value.
 */
static uint64_t current_key(uint64_t handle)
{
	return (uint32_t)handle;
}

static uint32_t slot_of(const struct held_set *s, uint64_t key)
{
	return (uint32_t)((key * 0x9e3779b97f4a7c15ull) >> 32) & (s->cap - 1);
}

static struct held *set_find(struct held_set *s, uint64_t key)
{
	if (!s->cap || !key)
		return NULL;
	for (uint32_t i = slot_of(s, key);; i = (i + 1) & (s->cap - 1)) {
		if (s->v[i].key == key)
			return &s->v[i];
		if (!s->v[i].key)
			return NULL;
	}
}

/* Needs room (set_reserve). */
static void set_put(struct held_set *s, const struct held *h)
{
	uint32_t i = slot_of(s, h->key);
	while (s->v[i].key)
		i = (i + 1) & (s->cap - 1);
	s->v[i] = *h;
	s->n++;
}

/* Removal by backward shift: no tombstones, so lookups stay short. */
static void set_del(struct held_set *s, struct held *h)
{
	uint32_t i = (uint32_t)(h - s->v), j = i;

	for (;;) {
		j = (j + 1) & (s->cap - 1);
		if (!s->v[j].key)
			break;
		uint32_t home = slot_of(s, s->v[j].key);
		/* Entry j may move to i if its home is not in (i, j]. */
		if ((j > i && (home <= i || home > j)) ||
		    (j < i && (home <= i && home > j))) {
			s->v[i] = s->v[j];
			i = j;
		}
	}
	s->v[i] = (struct held){0};
	s->n--;
}

/* Room for n more, at most three quarters full. */
static int set_reserve(struct held_set *s, uint32_t n)
{
	uint64_t need = (uint64_t)s->n + n;
	uint32_t cap = s->cap ? s->cap : 64;

	if (need <= (uint64_t)s->cap * 3 / 4)
		return 0;
	while ((uint64_t)cap * 3 / 4 < need) {
		if (cap >= (1u << 30))
			return -ENOMEM;
		cap *= 2;
	}
	if (cap == s->cap)
		return 0;
	struct held *v = calloc(cap, sizeof(*v));
	if (!v)
		return -ENOMEM;
	struct held_set grown = {v, cap, 0};
	for (uint32_t i = 0; i < s->cap; i++)
		if (s->v[i].key)
			set_put(&grown, &s->v[i]);
	free(s->v);
	*s = grown;
	return 0;
}

/* ---- extents -------------------------------------------------------- */

static void extent_unmap(struct mapped_extent *e)
{
	munmap(e->base, e->size);
	free(e);
}

static void retired_remove(kvt_client *c, struct mapped_extent *e)
{
	for (struct mapped_extent **p = &c->retired; *p; p = &(*p)->next)
		if (*p == e) {
			*p = e->next;
			return;
		}
}

/* A retired extent that no handle uses any more. */
static void extent_let_go(kvt_client *c, struct mapped_extent *e)
{
	if (!e->handed_out) {
		retired_remove(c, e);
		extent_unmap(e);
		return;
	}
	if (e->inert)
		return;
	/* A kvt_client_map pointer may still be read: keep the addresses,
	 * drop the daemon's memory. */
	void *p = mmap(e->base, e->size, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED) {
		client_log(c, KVT_LOG_DEBUG,
			   "keeping extent %u of an earlier daemon mapped: %s", e->id,
			   strerror(errno));
		return;
	}
	e->inert = true;
}

static void extent_unhold(kvt_client *c, struct mapped_extent *e)
{
	if (!e || !e->holds)
		return;
	if (--e->holds == 0 && e->retired)
		extent_let_go(c, e);
}

static void extent_retire(kvt_client *c, struct mapped_extent *e)
{
	e->retired = true;
	e->next = c->retired;
	c->retired = e;
	if (!e->holds)
		extent_let_go(c, e);
}

static int extents_add(struct mapped_extent ***arr, uint32_t *n,
		       struct mapped_extent *e)
{
	struct mapped_extent **a = realloc(*arr, sizeof(*a) * (*n + 1));
	if (!a)
		return -ENOMEM;
	a[(*n)++] = e;
	*arr = a;
	return 0;
}

static struct mapped_extent *extent_find(struct mapped_extent **arr, uint32_t n,
					 uint32_t id, uint32_t *ret_i)
{
	for (uint32_t i = 0; i < n; i++)
		if (arr[i]->id == id) {
			if (ret_i)
				*ret_i = i;
			return arr[i];
		}
	return NULL;
}

int pool_map_extent(kvt_client *c, const struct kvt_extent_note *n, int fd)
{
	struct mapped_extent *e;
	struct stat st;
	uint32_t i;
	int r;

	if (extent_find(c->extents, c->n_extents, n->extent_id, NULL)) {
		close(fd);
		return 0;
	}
	/* Only a sealed extent is safe to build on: the daemon promised
	 * it can never shrink under us. */
	int seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || !(seals & F_SEAL_SHRINK) || fstat(fd, &st) < 0) {
		close(fd);
		client_log(c, KVT_LOG_ERR, "extent %u is not sealed against shrinking; refusing it",
			   n->extent_id);
		return -EBADMSG;
	}
	/* The same daemon sends the same memfd again after a reconnect: the
	 * mapping, and every pointer into it, stays. */
	e = extent_find(c->prev, c->n_prev, n->extent_id, &i);
	if (e && e->dev == st.st_dev && e->ino == st.st_ino && e->size == n->size) {
		close(fd);
		r = extents_add(&c->extents, &c->n_extents, e);
		if (r < 0)
			return r;
		c->prev[i] = c->prev[--c->n_prev];
		e->carried = true;
		c->extents_gen++;
		return 0;
	}

	e = calloc(1, sizeof(*e));
	if (!e) {
		close(fd);
		return -ENOMEM;
	}
	void *p = mmap(NULL, n->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	r = -errno;
	close(fd);
	if (p == MAP_FAILED) {
		free(e);
		client_log(c, KVT_LOG_ERR, "failed to map extent %u (%llu MiB): %s",
			   n->extent_id, (unsigned long long)(n->size >> 20), strerror(-r));
		return r;
	}
	*e = (struct mapped_extent){
		.id = n->extent_id,
		.flags = n->flags,
		.base = p,
		.size = n->size,
		.slot_bytes = n->slot_bytes,
		.dev = st.st_dev,
		.ino = st.st_ino,
	};
	r = extents_add(&c->extents, &c->n_extents, e);
	if (r < 0) {
		extent_unmap(e);
		return r;
	}
	c->extents_gen++;
	/* First touch of a mapping is paid per mapping, not per page: pay it
	 * here, once, rather than in the first copy.  MADV_POPULATE_READ
	 * (Linux 5.14) maps every page in one call, about twice as fast as
	 * faulting them in one by one on the machines of docs/benchmarks.md;
	 * before it, a read per page maps the page without changing its
	 * bytes. */
	if (madvise(p, n->size, MADV_POPULATE_READ) < 0) {
		size_t step = (n->flags & KVT_EXTENT_HUGETLB) ? (2u << 20) : 4096;
		volatile const uint8_t *vp = p;
		for (uint64_t off = 0; off < n->size; off += step)
			(void)vp[off];
	}
	client_log(c, KVT_LOG_DEBUG, "mapped extent %u: %llu MiB", n->extent_id,
		   (unsigned long long)(n->size >> 20));
	return 0;
}

void *pool_ptr(kvt_client *c, uint32_t id, uint64_t offset, uint64_t bytes,
	       struct mapped_extent **ret_e)
{
	struct mapped_extent *e = extent_find(c->extents, c->n_extents, id, NULL);

	if (!e || offset > e->size || bytes > e->size - offset)
		return NULL;
	if (ret_e)
		*ret_e = e;
	return e->base + offset;
}

bool pool_known(kvt_client *c, uint32_t id)
{
	return extent_find(c->extents, c->n_extents, id, NULL) != NULL;
}

void pool_reconnect_begin(kvt_client *c)
{
	/* A connection that failed half way left nothing behind: its
	 * extents were put back by pool_reconnect_fail. */
	c->prev = c->extents;
	c->n_prev = c->n_extents;
	c->extents = NULL;
	c->n_extents = 0;
	c->extents_gen++;
}

void pool_reconnect_fail(kvt_client *c)
{
	/* Nobody has a pointer into what this connection mapped anew. */
	for (uint32_t i = 0; i < c->n_extents; i++) {
		struct mapped_extent *e = c->extents[i];
		if (e->carried) {
			e->carried = false;
			c->prev[c->n_prev++] = e; /* it came from there */
		} else {
			extent_unmap(e);
		}
	}
	free(c->extents);
	c->extents = c->prev;
	c->n_extents = c->n_prev;
	c->prev = NULL;
	c->n_prev = 0;
	c->extents_gen++;
}

bool pool_reconnect_end(kvt_client *c)
{
	bool same = false;

	for (uint32_t i = 0; i < c->n_extents; i++) {
		same |= c->extents[i]->carried;
		c->extents[i]->carried = false;
	}
	if (same) {
		/* The same daemon: whatever it did not send again is still
		 * its memory, and handles may still point into it. */
		for (uint32_t i = 0; i < c->n_prev; i++) {
			struct mapped_extent *e = c->prev[i];
			if (extent_find(c->extents, c->n_extents, e->id, NULL) ||
			    extents_add(&c->extents, &c->n_extents, e) < 0)
				extent_retire(c, e);
		}
	} else {
		/* A restarted daemon: its handles and extents are new.  The
		 * held handles become old before the extents are retired, so
		 * that an extent still in use is kept. */
		if (set_reserve(&c->old, c->held.n) == 0) {
			for (uint32_t i = 0; i < c->held.cap; i++) {
				struct held h = c->held.v[i];
				if (!h.key)
					continue;
				h.key = h.handle;
				set_put(&c->old, &h);
			}
		}
		/* Else, without memory to remember them, the handles are
		 * forgotten (a release of one is then sent on, as another
		 * process's would be) and their extents, whose holds are
		 * never dropped, stay mapped until the client is freed. */
		free(c->held.v);
		c->held = (struct held_set){0};
		c->n_deferred = 0;
		for (uint32_t i = 0; i < c->n_prev; i++)
			extent_retire(c, c->prev[i]);
		c->instance++;
	}
	free(c->prev);
	c->prev = NULL;
	c->n_prev = 0;
	c->extents_gen++;
	return same;
}

void pool_free(kvt_client *c)
{
	for (uint32_t i = 0; i < c->n_extents; i++)
		extent_unmap(c->extents[i]);
	for (uint32_t i = 0; i < c->n_prev; i++)
		extent_unmap(c->prev[i]);
	while (c->retired) {
		struct mapped_extent *e = c->retired;
		c->retired = e->next;
		extent_unmap(e);
	}
	free(c->extents);
	free(c->prev);
	c->extents = c->prev = NULL;
	c->n_extents = c->n_prev = 0;
	free(c->held.v);
	free(c->old.v);
	c->held = c->old = (struct held_set){0};
	free(c->deferred);
	c->deferred = NULL;
	c->n_deferred = c->cap_deferred = 0;
}

/* ---- the handles that keep extents mapped ----------------------------- */

int pool_held_reserve(kvt_client *c, uint32_t n)
{
	return set_reserve(&c->held, n);
}

bool pool_held_old(kvt_client *c, uint64_t handle)
{
	return set_find(&c->old, handle) != NULL;
}

void pool_hold(kvt_client *c, uint64_t handle, struct mapped_extent *e,
	       enum held_kind kind)
{
	struct held *h = set_find(&c->held, current_key(handle));

	if (h) {
		/* Its index was reused: the handle recorded there ended
		 * elsewhere (see current_key). */
		extent_unhold(c, h->e);
		set_del(&c->held, h);
	}
	set_put(&c->held, &(struct held){current_key(handle), handle, e, (uint8_t)kind});
	if (e)
		e->holds++;
}

int pool_held_find(kvt_client *c, uint64_t handle, enum held_kind *ret_kind)
{
	struct held *h = set_find(&c->held, current_key(handle));

	if (h && h->handle == handle) {
		*ret_kind = h->kind;
		return HELD_CURRENT;
	}
	h = set_find(&c->old, handle);
	if (h) {
		*ret_kind = h->kind;
		return HELD_OLD;
	}
	return HELD_FOREIGN;
}

void pool_unhold(kvt_client *c, uint64_t handle)
{
	struct held *h = set_find(&c->held, current_key(handle));
	struct held_set *s = &c->held;

	if (!h || h->handle != handle) {
		h = set_find(&c->old, handle);
		s = &c->old;
	}
	if (!h)
		return;
	struct mapped_extent *e = h->e;
	set_del(s, h);
	extent_unhold(c, e);
}

int pool_defer(kvt_client *c, uint64_t handle, uint16_t op)
{
	if (c->n_deferred == c->cap_deferred) {
		uint32_t cap = c->cap_deferred ? 2 * c->cap_deferred : 64;
		struct deferred *d = realloc(c->deferred, sizeof(*d) * cap);
		if (!d)
			return -ENOMEM;
		c->deferred = d;
		c->cap_deferred = cap;
	}
	c->deferred[c->n_deferred++] = (struct deferred){handle, op};
	return 0;
}
