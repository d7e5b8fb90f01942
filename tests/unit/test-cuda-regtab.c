/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CUDA path's registration bookkeeping (client/cuda-regtab.c), on the
 * CPU with a recording pin operation in place of cudaHostRegister:
 *
 *   - the sorted range table answers as a linear scan does, over 16,384
 *     ranges inserted in random order, and refuses overlaps;
 *   - two contexts of one process that map the same memory share one pin:
 *     the first to go does not unpin what the second still uses, the last
 *     one does, and a range the engine registered is never unpinned;
 *   - a failed pin is retried after 1 s, then 2 s, and serves copies once
 *     it succeeds; the device's pageable access serves meanwhile when it
 *     has it;
 *   - a new extent mapped where an unfinished job still has the old pages
 *     pinned waits (-EAGAIN) until that job is done, in one context and
 *     across two clients of one process;
 *   - extents are registered in chunks of at most the chunk size.
 *
 * It also prints what one submission's lookups cost at 4,096 and 16,384
 * ranges against the linear scans the table replaced (not pass/fail).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda-regtab.h"
#include "../check.h"
#include "../helpers.h"

#define MIB (UINT64_C(1) << 20)

/* ---- a recording pin -------------------------------------------------- */

struct rec {
	int pins, unpins;
	int fail_next;       /* pins to fail with -ENOMEM */
	bool foreign;        /* pins find the range registered already */
	uint8_t *last_unpin;
	int order;           /* a counter, for which came first */
	int pin_at, unpin_at;
};

static int rec_pin(void *ud, uint8_t *host, uint64_t size, uint8_t **ret_dev,
		   bool *ret_owned)
{
	struct rec *r = ud;

	(void)size;
	if (r->fail_next > 0) {
		r->fail_next--;
		return -ENOMEM;
	}
	r->pins++;
	r->pin_at = ++r->order;
	/* A device address that differs from the host one. */
	*ret_dev = host + (UINT64_C(1) << 40);
	*ret_owned = !r->foreign;
	return 0;
}

static void rec_unpin(void *ud, uint8_t *host)
{
	struct rec *r = ud;

	r->unpins++;
	r->last_unpin = host;
	r->unpin_at = ++r->order;
}

static const struct pin_ops rec_ops = {rec_pin, rec_unpin};

static void pins_init(struct pins *ps, struct rec *r)
{
	memset(r, 0, sizeof(*r));
	*ps = (struct pins){.ops = &rec_ops, .ud = r};
	pthread_mutex_init(&ps->lock, NULL);
}

/* Runs every due pin, as the registration thread does. */
static void work(struct regs *rs, struct pins *ps, uint64_t now)
{
	struct reg *g;

	while ((g = regs_next_work(rs, now, NULL))) {
		struct pin *p = NULL;
		int r = regs_pin(rs, ps, g, &p);

		regs_pin_done(rs, ps, g, r, p, now, 1000);
	}
}

/* Fake mapping addresses: nothing is dereferenced. */
static uint8_t *addr(uint64_t mib)
{
	return (uint8_t *)(uintptr_t)(UINT64_C(1) << 32) + mib * MIB;
}

static struct reg *lookup(struct regs *rs, uint64_t mib, uint32_t id,
			  uint64_t inst, int *err)
{
	return regs_lookup(rs, addr(mib), 4096, id, inst, err);
}

/* ---- the range table -------------------------------------------------- */

static uint64_t lcg = 12345;

static uint64_t rnd(void)
{
	lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
	return lcg >> 33;
}

static struct range *linear_find(struct range *v, size_t n, uintptr_t p,
				 uint64_t bytes)
{
	for (size_t i = 0; i < n; i++)
		if (p >= (uintptr_t)v[i].host &&
		    p + bytes <= (uintptr_t)v[i].host + v[i].size)
			return &v[i];
	return NULL;
}

/* One submission of 4,096 keys: the table against a scan per key. */
static void figure(struct rangetab *t, struct range *v, size_t n)
{
	const int keys = 4096;
	volatile uintptr_t sink = 0;
	double t0, t1, t2;

	t0 = now_s();
	for (int k = 0; k < keys; k++)
		sink += (uintptr_t)rangetab_find(
			t, v[(size_t)k * 7919 % n].host + 100, 64);
	t1 = now_s();
	for (int k = 0; k < keys; k++)
		sink += (uintptr_t)linear_find(
			v, n, (uintptr_t)v[(size_t)k * 7919 % n].host + 100, 64);
	t2 = now_s();
	printf("%zu ranges, 4096 lookups: table %.1f us, linear scan %.1f us "
	       "(%.0fx)\n", n, (t1 - t0) * 1e6, (t2 - t1) * 1e6,
	       (t2 - t1) / (t1 - t0 > 1e-9 ? t1 - t0 : 1e-9));
	(void)sink;
}

static void test_rangetab(size_t n)
{
	struct rangetab t = {0};
	struct range *v = calloc(n, sizeof(*v));
	size_t *order = calloc(n, sizeof(*order));

	/* Ranges of 1-3 units with gaps, inserted in random order. */
	for (size_t i = 0, at = 0; i < n; i++) {
		v[i] = (struct range){addr(0) + at * 4096,
				      (1 + rnd() % 3) * 4096};
		at += v[i].size / 4096 + rnd() % 2;
		order[i] = i;
	}
	for (size_t i = n - 1; i > 0; i--) {
		size_t j = rnd() % (i + 1), x = order[i];

		order[i] = order[j];
		order[j] = x;
	}
	for (size_t i = 0; i < n; i++)
		CHECK(rangetab_insert(&t, &v[order[i]]) == 0);
	CHECK(t.n == n);
	for (size_t i = 1; i < t.n; i++)
		CHECK(t.v[i - 1]->host + t.v[i - 1]->size <= t.v[i]->host);

	for (int k = 0; k < 20000; k++) {
		uintptr_t p = (uintptr_t)addr(0) + rnd() % (n * 3 * 4096);
		uint64_t bytes = 1 + rnd() % 6000;

		CHECK(rangetab_find(&t, (void *)p, bytes) ==
		      linear_find(v, n, p, bytes));
	}
	/* Overlaps refused, at either end and inside. */
	{
		struct range a = {v[5].host + 4095, 2}, b = {v[5].host - 2, 2},
			     c = {v[5].host, v[5].size};

		CHECK(rangetab_insert(&t, &a) == -EEXIST);
		CHECK(rangetab_insert(&t, &c) == -EEXIST);
		if (v[5].host > v[4].host + v[4].size)
			CHECK(rangetab_insert(&t, &b) == 0);
		else
			CHECK(rangetab_insert(&t, &b) == -EEXIST);
		rangetab_remove(&t, &b);
	}
	figure(&t, v, n);
	rangetab_remove(&t, &v[7]);
	CHECK(t.n == n - 1);
	CHECK(rangetab_find(&t, v[7].host, 1) == NULL);
	rangetab_free(&t);
	free(v);
	free(order);
}

/* ---- two contexts, one pin --------------------------------------------- */

static void test_shared_pins(void)
{
	struct rec rec;
	struct pins ps;
	int client;
	struct regs a = {.owner = &client, .chunk = 64 * MIB};
	struct regs b = {.owner = &client, .chunk = 64 * MIB};
	struct ext_snap ext[2] = {{1, addr(0), 160 * MIB},
				  {2, addr(512), 64 * MIB}};
	struct reg *g;
	int err;

	pins_init(&ps, &rec);
	CHECK(regs_sync(&a, &ps, ext, 2, 1) == 0);
	/* 160 MiB in chunks of at most 64: 64, 64, 32; and one more. */
	CHECK(a.t.n == 4);
	CHECK(a.t.v[2]->size == 32 * MIB);
	work(&a, &ps, 0);
	CHECK(rec.pins == 4);
	CHECK(regs_sync(&b, &ps, ext, 2, 1) == 0);
	work(&b, &ps, 0);
	CHECK(rec.pins == 4, "second context pinned again: %d", rec.pins);

	g = lookup(&b, 100, 1, 1, &err);
	CHECK(g && err == 0 && g->dev == g->r.host + (UINT64_C(1) << 40));
	CHECK(!lookup(&b, 100, 2, 1, &err) && err == -EAGAIN); /* other id */
	CHECK(!lookup(&b, 100, 1, 2, &err) && err == -EAGAIN); /* other instance */

	regs_free(&a, &ps);
	CHECK(rec.unpins == 0, "the first context's end unpinned %d",
	      rec.unpins);
	CHECK(lookup(&b, 520, 2, 1, &err) != NULL);
	regs_free(&b, &ps);
	CHECK(rec.unpins == 4);
	CHECK(ps.t.n == 0);

	/* A range the engine registered is used, never unregistered. */
	rangetab_free(&ps.t);
	pins_init(&ps, &rec);
	rec.foreign = true;
	a = (struct regs){.owner = &client, .chunk = 64 * MIB};
	CHECK(regs_sync(&a, &ps, ext + 1, 1, 1) == 0);
	work(&a, &ps, 0);
	CHECK(lookup(&a, 520, 2, 1, &err) != NULL);
	regs_free(&a, &ps);
	CHECK(rec.pins == 1 && rec.unpins == 0);
	rangetab_free(&ps.t);
}

/* ---- retries ----------------------------------------------------------- */

static void test_retry(void)
{
	const uint64_t s = 1000000000u;
	struct rec rec;
	struct pins ps;
	int client;
	struct regs a = {.owner = &client, .chunk = 64 * MIB};
	struct ext_snap ext = {1, addr(0), 64 * MIB};
	uint64_t next = 0;
	struct reg *g;
	int err;

	CHECK(reg_retry_delay_ns(0) == s && reg_retry_delay_ns(1) == s);
	CHECK(reg_retry_delay_ns(2) == 2 * s && reg_retry_delay_ns(3) == 4 * s);
	CHECK(reg_retry_delay_ns(40) == 64 * s);

	pins_init(&ps, &rec);
	rec.fail_next = 2;
	CHECK(regs_sync(&a, &ps, &ext, 1, 1) == 0);
	work(&a, &ps, 10 * s);
	g = (struct reg *)a.t.v[0];
	CHECK(g->state == REG_FAILED && g->error == -ENOMEM);
	CHECK(!lookup(&a, 1, 1, 1, &err) && err == -EFAULT);
	CHECK(regs_next_work(&a, 10 * s, &next) == NULL && next == 11 * s);
	work(&a, &ps, 11 * s - 1); /* not due yet */
	CHECK(g->state == REG_FAILED && g->attempts == 1);
	work(&a, &ps, 11 * s); /* the second failure */
	CHECK(g->attempts == 2 && g->retry_at_ns == 13 * s);
	work(&a, &ps, 13 * s);
	CHECK(g->state == REG_PINNED && rec.pins == 1);
	CHECK(lookup(&a, 1, 1, 1, &err) == g && err == 0);
	CHECK(a.pin_calls == 3 && a.pin_failures == 2);
	regs_free(&a, &ps);

	/* Pageable access serves while pinning fails. */
	rec.fail_next = 1;
	a = (struct regs){.owner = &client, .chunk = 64 * MIB, .pageable = true};
	CHECK(regs_sync(&a, &ps, &ext, 1, 1) == 0);
	work(&a, &ps, 0);
	g = lookup(&a, 1, 1, 1, &err);
	CHECK(g && g->state == REG_FAILED && g->dev == g->r.host && !g->pin);
	regs_free(&a, &ps);
	rangetab_free(&ps.t);
}

/* ---- old pages still pinned at a new extent's address ------------------ */

static void test_stale(void)
{
	struct rec rec;
	struct pins ps;
	int client, other;
	struct regs a = {.owner = &client, .chunk = 64 * MIB};
	struct regs b = {.owner = &other, .chunk = 64 * MIB};
	struct ext_snap old = {7, addr(0), 64 * MIB};
	struct ext_snap neu = {1, addr(0), 64 * MIB}; /* same address */
	struct reg *g;
	int err;

	pins_init(&ps, &rec);
	CHECK(regs_sync(&a, &ps, &old, 1, 1) == 0);
	work(&a, &ps, 0);
	g = lookup(&a, 3, 7, 1, &err);
	CHECK(g != NULL);
	g->users = 1; /* an unfinished job copies from it */

	/* The daemon restarted; its new extent got the old address. */
	CHECK(regs_sync(&a, &ps, &neu, 1, 2) == 0);
	CHECK(g->state == REG_STALE && a.t.n == 1);
	work(&a, &ps, 0);
	CHECK(!lookup(&a, 3, 1, 2, &err) && err == -EAGAIN);
	CHECK(rec.unpins == 0);

	/* Another client of the process maps memory at that address while
	 * the old pages are pinned: it waits too, without counting a
	 * failure of the driver. */
	CHECK(regs_sync(&b, &ps, &neu, 1, 1) == 0);
	work(&b, &ps, 0);
	CHECK(!lookup(&b, 3, 1, 1, &err) && err == -EAGAIN);
	CHECK(b.pin_failures == 0);

	/* The job is done: the old pin goes first, then the new one. */
	g->users = 0;
	CHECK(regs_sync(&a, &ps, &neu, 1, 2) == 0);
	CHECK(rec.unpins == 1 && rec.last_unpin == addr(0));
	work(&a, &ps, 0);
	CHECK(lookup(&a, 3, 1, 2, &err) != NULL);
	CHECK(rec.pin_at > rec.unpin_at);
	regs_free(&a, &ps);
	regs_free(&b, &ps);
	rangetab_free(&ps.t);
}

int main(void)
{
	test_rangetab(4096);
	test_rangetab(16384);
	test_shared_pins();
	test_retry();
	test_stale();
	if (failures) {
		fprintf(stderr, "%d check(s) failed\n", failures);
		return 1;
	}
	printf("CUDA registration bookkeeping: all checks passed\n");
	return 0;
}
