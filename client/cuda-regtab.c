/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The registration bookkeeping of the CUDA path (cuda-regtab.h): sorted
 * ranges, the process's counted pins, a context's registrations and their
 * retries.  Plain C without CUDA.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda-regtab.h"

/* ---- ranges ------------------------------------------------------------ */

/* The index of the first range that ends after p. */
static size_t first_after(const struct rangetab *t, const uint8_t *p)
{
	size_t lo = 0, hi = t->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct range *r = t->v[mid];

		if ((uintptr_t)r->host + r->size <= (uintptr_t)p)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

struct range *rangetab_overlap(const struct rangetab *t, const void *p,
			       uint64_t bytes)
{
	size_t i = first_after(t, p);

	/* Ranges are disjoint and sorted: the first one ending after p is
	 * the only candidate that can start before p + bytes first. */
	if (i < t->n && (uintptr_t)t->v[i]->host < (uintptr_t)p + bytes)
		return t->v[i];
	return NULL;
}

struct range *rangetab_find(const struct rangetab *t, const void *p,
			    uint64_t bytes)
{
	struct range *r = rangetab_overlap(t, p, bytes ? bytes : 1);

	if (!r || (uintptr_t)p < (uintptr_t)r->host ||
	    bytes > r->size ||
	    (uintptr_t)p - (uintptr_t)r->host > r->size - bytes)
		return NULL;
	return r;
}

int rangetab_insert(struct rangetab *t, struct range *r)
{
	size_t i;

	if (!r->size || rangetab_overlap(t, r->host, r->size))
		return -EEXIST;
	if (t->n == t->cap) {
		size_t cap = t->cap ? 2 * t->cap : 16;
		struct range **v = realloc(t->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		t->v = v;
		t->cap = cap;
	}
	i = first_after(t, r->host);
	memmove(t->v + i + 1, t->v + i, (t->n - i) * sizeof(*t->v));
	t->v[i] = r;
	t->n++;
	return 0;
}

void rangetab_remove(struct rangetab *t, const struct range *r)
{
	size_t i = first_after(t, r->host);

	if (i < t->n && t->v[i] == r) {
		memmove(t->v + i, t->v + i + 1, (t->n - i - 1) * sizeof(*t->v));
		t->n--;
	}
}

void rangetab_free(struct rangetab *t)
{
	free(t->v);
	*t = (struct rangetab){0};
}

/* ---- pins -------------------------------------------------------------- */

static bool key_eq(const struct pin_key *a, const struct pin_key *b)
{
	return a->owner == b->owner && a->instance == b->instance &&
	       a->extent_id == b->extent_id;
}

int pins_acquire(struct pins *ps, uint8_t *host, uint64_t size,
		 const struct pin_key *key, struct pin **ret)
{
	struct pin *p;
	int r;

	pthread_mutex_lock(&ps->lock);
	p = (struct pin *)rangetab_overlap(&ps->t, host, size);
	if (p) {
		r = -EAGAIN;
		if (!p->busy && p->r.host == host && p->r.size == size &&
		    key_eq(&p->key, key)) {
			p->refs++;
			*ret = p;
			r = 0;
		}
		pthread_mutex_unlock(&ps->lock);
		return r;
	}
	p = calloc(1, sizeof(*p));
	if (!p) {
		pthread_mutex_unlock(&ps->lock);
		return -ENOMEM;
	}
	*p = (struct pin){.r = {host, size}, .key = *key, .busy = true,
			  .refs = 1};
	r = rangetab_insert(&ps->t, &p->r);
	pthread_mutex_unlock(&ps->lock);
	if (r < 0) {
		free(p);
		return r;
	}

	/* Pinning takes long (the driver walks every page): others may use
	 * the table meanwhile, and wait (-EAGAIN) for this range only. */
	r = ps->ops->pin(ps->ud, host, size, &p->dev, &p->owned);

	pthread_mutex_lock(&ps->lock);
	if (r < 0) {
		rangetab_remove(&ps->t, &p->r);
		free(p);
	} else {
		p->busy = false;
		*ret = p;
	}
	pthread_mutex_unlock(&ps->lock);
	return r;
}

void pins_release(struct pins *ps, struct pin *p)
{
	bool last;

	if (!p)
		return;
	pthread_mutex_lock(&ps->lock);
	last = --p->refs == 0;
	if (last)
		rangetab_remove(&ps->t, &p->r);
	pthread_mutex_unlock(&ps->lock);
	if (!last)
		return;
	if (p->owned)
		ps->ops->unpin(ps->ud, p->r.host);
	free(p);
}

/* ---- a context's registrations ----------------------------------------- */

uint64_t reg_retry_delay_ns(uint32_t attempts)
{
	uint32_t shift = attempts ? attempts - 1 : 0;

	return UINT64_C(1000000000) << (shift < 6 ? shift : 6);
}

static void reg_drop(struct regs *rs, struct pins *ps, struct reg *g)
{
	rangetab_remove(&rs->t, &g->r);
	pins_release(ps, g->pin);
	free(g);
}

void regs_collect(struct regs *rs, struct pins *ps)
{
	for (size_t i = rs->t.n; i-- > 0;) {
		struct reg *g = (struct reg *)rs->t.v[i];

		if (g->state == REG_STALE && g->users == 0 && !g->busy)
			reg_drop(rs, ps, g);
	}
}

/* Whether g is chunk [base, base + size) of live extent e. */
static bool reg_live(const struct reg *g, const struct ext_snap *ext,
		     uint32_t n, uint64_t instance)
{
	if (g->instance != instance)
		return false;
	for (uint32_t i = 0; i < n; i++)
		if (ext[i].id == g->extent_id)
			return g->r.host >= ext[i].base &&
			       g->r.host + g->r.size <=
				       ext[i].base + ext[i].size;
	return false;
}

static int ext_cmp(const void *a, const void *b)
{
	uint32_t x = ((const struct ext_snap *)a)->id;
	uint32_t y = ((const struct ext_snap *)b)->id;

	return x < y ? -1 : x > y;
}

/* Pending registrations of every chunk of e not registered yet. */
static int regs_add_extent(struct regs *rs, const struct ext_snap *e,
			   uint64_t instance)
{
	for (uint64_t off = 0; off < e->size; off += rs->chunk) {
		uint8_t *p = e->base + off;
		uint64_t len = e->size - off < rs->chunk ? e->size - off
							 : rs->chunk;
		struct reg *g;

		/* Registered already, or stale pages still pinned at this
		 * address: nothing now (a later sync adds it). */
		if (rangetab_overlap(&rs->t, p, len))
			continue;
		g = calloc(1, sizeof(*g));
		if (!g)
			return -ENOMEM;
		*g = (struct reg){.r = {p, len}, .extent_id = e->id,
				  .instance = instance, .state = REG_PENDING};
		if (rangetab_insert(&rs->t, &g->r) < 0) {
			free(g);
			return -ENOMEM;
		}
	}
	return 0;
}

int regs_sync(struct regs *rs, struct pins *ps, const struct ext_snap *ext,
	      uint32_t n, uint64_t instance)
{
	struct ext_snap *sorted = malloc((n ? n : 1) * sizeof(*sorted));
	int r = 0;

	if (!sorted)
		return -ENOMEM;
	memcpy(sorted, ext, n * sizeof(*ext));
	qsort(sorted, n, sizeof(*sorted), ext_cmp);

	for (size_t i = 0; i < rs->t.n; i++) {
		struct reg *g = (struct reg *)rs->t.v[i];
		struct ext_snap key = {.id = g->extent_id}, *e;

		if (g->state == REG_STALE)
			continue;
		e = bsearch(&key, sorted, n, sizeof(*sorted), ext_cmp);
		if (!e || !reg_live(g, e, 1, instance))
			g->state = REG_STALE;
	}
	regs_collect(rs, ps);
	for (uint32_t i = 0; i < n && r == 0; i++)
		r = regs_add_extent(rs, &sorted[i], instance);
	free(sorted);
	return r;
}

struct reg *regs_next_work(struct regs *rs, uint64_t now,
			   uint64_t *ret_next_ns)
{
	uint64_t next = UINT64_MAX;

	for (size_t i = 0; i < rs->t.n; i++) {
		struct reg *g = (struct reg *)rs->t.v[i];

		if (g->state == REG_PENDING ||
		    (g->state == REG_FAILED && g->retry_at_ns <= now)) {
			g->state = REG_PINNING;
			g->busy = true;
			return g;
		}
		if (g->state == REG_FAILED && g->retry_at_ns < next)
			next = g->retry_at_ns;
	}
	if (ret_next_ns)
		*ret_next_ns = next;
	return NULL;
}

int regs_pin(const struct regs *rs, struct pins *ps, struct reg *g,
	     struct pin **ret_pin)
{
	struct pin_key key = {rs->owner, g->instance, g->extent_id};

	return pins_acquire(ps, g->r.host, g->r.size, &key, ret_pin);
}

void regs_pin_done(struct regs *rs, struct pins *ps, struct reg *g, int r,
		   struct pin *pin, uint64_t now, uint64_t took_ns)
{
	g->busy = false;
	rs->pin_calls++;
	rs->pin_ns += took_ns;
	if (took_ns > rs->pin_max_ns)
		rs->pin_max_ns = took_ns;
	if (r == 0 && g->state == REG_STALE) {
		/* Its extent went while it was being pinned. */
		pins_release(ps, pin);
		return;
	}
	if (r == 0) {
		g->pin = pin;
		g->dev = pin->dev ? pin->dev : rs->pageable ? g->r.host : NULL;
		g->state = REG_PINNED;
		g->error = 0;
		rs->bytes_pinned_total += g->r.size;
		return;
	}
	if (g->state == REG_STALE)
		return;
	/* -EAGAIN: another mapping's pages are still pinned at this
	 * address, or another context is pinning it; not a failure of the
	 * driver, so no backoff beyond the first step. */
	if (r != -EAGAIN) {
		rs->pin_failures++;
		g->attempts++;
	}
	g->error = r;
	g->state = REG_FAILED;
	g->dev = rs->pageable ? g->r.host : NULL;
	g->retry_at_ns = now + reg_retry_delay_ns(g->attempts);
}

struct reg *regs_lookup(const struct regs *rs, const void *p, uint64_t bytes,
			uint32_t extent_id, uint64_t instance, int *ret_err)
{
	struct reg *g = (struct reg *)rangetab_find(&rs->t, p, bytes);

	*ret_err = -EAGAIN;
	if (!g || g->state == REG_STALE || g->extent_id != extent_id ||
	    g->instance != instance)
		return NULL;
	if (!g->dev) {
		if (g->state == REG_FAILED && g->error != -EAGAIN)
			*ret_err = -EFAULT;
		return NULL;
	}
	*ret_err = 0;
	return g;
}

void regs_free(struct regs *rs, struct pins *ps)
{
	for (size_t i = 0; i < rs->t.n; i++) {
		struct reg *g = (struct reg *)rs->t.v[i];

		pins_release(ps, g->pin);
		free(g);
	}
	rangetab_free(&rs->t);
}
