/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The block index against a reference that is only a "present" flag per
 * key: random insert/get/remove over many operations, with keys aimed (under
 * the test's fixed secret) to share the low bits of their hash, and to sit
 * at the end of the table so probe runs wrap.  After every batch the table
 * itself is checked: no entry is separated from its home slot by an empty
 * slot, which is what backward-shift deletion must preserve.
 *
 * And the flood a client could send: keys that share their first 8 bytes,
 * which the index once took for the hash.  Under any secret they must
 * spread as random keys do; the probe lengths are counted from the table.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "index.h"
#include "keyhash.h"
#include "../check.h"
#include "rng.h"

struct entry {
	uint8_t key[32];
	uint32_t id;
	bool in; /* the reference: is it in the index */
};

/* The secret of every table here but the flood's. */
static struct keyhash test_hash;

/* Change the first 8 bytes of e's key until its home in ix is home (ix
 * only gives the table size: any index of that size agrees). */
static void aim(const struct index *ix, struct entry *e, size_t home)
{
	for (uint64_t c = rnd();; c++) {
		memcpy(e->key, &c, sizeof(c));
		if (index_home(ix, e->key) == home)
			return;
	}
}

static size_t home_of(const struct index *ix, const void *e)
{
	return index_home(ix, e);
}

/* The table's own invariants, independent of any reference. */
static bool check_table(int line, const struct index *ix)
{
	size_t used = 0, mask = ix->cap - 1;

	if (ix->cap < 64 || (ix->cap & mask) || ix->n * 10 > ix->cap * 7) {
		fprintf(stderr, "%s:%d: cap %zu n %zu\n", __FILE__, line,
			ix->cap, ix->n);
		failures++;
		return false;
	}
	for (size_t i = 0; i < ix->cap; i++) {
		if (!index_slot(ix, i))
			continue;
		used++;
		/* Its tag came with it through every grow and shift. */
		uint16_t tag = (uint16_t)(ix->slots[i] >> INDEX_TAG_SHIFT);
		if (tag != index_tag(ix, index_slot(ix, i))) {
			fprintf(stderr, "%s:%d: slot %zu has tag %04x, its key's is %04x\n",
				__FILE__, line, i, tag, index_tag(ix, index_slot(ix, i)));
			failures++;
			return false;
		}
		for (size_t j = home_of(ix, index_slot(ix, i)); j != i; j = (j + 1) & mask)
			if (!index_slot(ix, j)) {
				fprintf(stderr,
					"%s:%d: slot %zu (home %zu) is cut off by empty slot %zu\n",
					__FILE__, line, i,
					home_of(ix, index_slot(ix, i)), j);
				failures++;
				return false;
			}
	}
	if (used != ix->n) {
		fprintf(stderr, "%s:%d: %zu slots used, n = %zu\n", __FILE__,
			line, used, ix->n);
		failures++;
		return false;
	}
	return true;
}

#define CHECK_TABLE(ix) check_table(__LINE__, ix)

static bool check_against(int line, const struct index *ix,
			  const struct entry *e, size_t n_keys)
{
	size_t present = 0;

	for (size_t i = 0; i < n_keys; i++) {
		void *got = index_get(ix, e[i].key);
		if (got != (e[i].in ? (const void *)&e[i] : NULL)) {
			fprintf(stderr, "%s:%d: key %zu: get %p, expected %s\n",
				__FILE__, line, i, got,
				e[i].in ? "its entry" : "NULL");
			failures++;
			return false;
		}
		present += e[i].in;
	}
	if (present != ix->n) {
		fprintf(stderr, "%s:%d: n %zu, reference %zu\n", __FILE__, line,
			ix->n, present);
		failures++;
		return false;
	}
	return true;
}

#define CHECK_AGAINST(ix, e, n) check_against(__LINE__, ix, e, n)

/*
 * Keys: a quarter in clusters of 16 that share the low 10 bits of their
 * hash (one home until the table passes 1024 slots) and all of their bytes
 * from the ninth but the last; an eighth in clusters of 8 that share the
 * low 12 bits; 64 keys whose homes are the last 8 slots of a table of up to
 * 4096, so runs wrap to slot 0; the rest uniform.
 */
#define N_KEYS 20000

static void clustered_entries(struct entry *e, size_t n)
{
	struct index ix10, ix12;
	uint64_t low10 = 0, low12 = 0;
	uint8_t cluster_body[23];
	unsigned wrap = 0;

	/* Empty tables of 1024 and 4096 slots, to aim with. */
	if (index_init(&ix10, 512, &test_hash) < 0 || index_init(&ix12, 2048, &test_hash) < 0)
		abort();
	for (size_t i = 0; i < n; i++) {
		memset(&e[i], 0, sizeof(e[i]));
		e[i].id = (uint32_t)i;
		for (int k = 8; k < 32; k++)
			e[i].key[k] = (uint8_t)rnd();
		switch (i % 8) {
		case 0:
		case 1:
			if (i % 64 == 0) {
				low10 = rnd() & 1023;
				for (int k = 0; k < 23; k++)
					cluster_body[k] = (uint8_t)rnd();
			}
			memcpy(e[i].key + 8, cluster_body, 23);
			e[i].key[31] = (uint8_t)(i / 8 % 8 * 2 + i % 8);
			aim(&ix10, &e[i], low10);
			break;
		case 2:
			if (i % 64 == 2)
				low12 = rnd() & 4095;
			aim(&ix12, &e[i], low12);
			break;
		case 3:
			if (wrap < 64) {
				aim(&ix12, &e[i], 4095 - wrap % 8);
				wrap++;
				break;
			}
			/* fall through */
		default: {
			uint64_t h = rnd();
			memcpy(e[i].key, &h, sizeof(h));
			break;
		}
		}
	}
	index_free(&ix10);
	index_free(&ix12);
	/* Any accidental duplicates would make the reference ambiguous. */
	for (size_t i = 0; i < n; i++)
		for (size_t j = i + 1; j < n && j < i + 64; j++)
			if (!memcmp(e[i].key, e[j].key, 32))
				e[j].key[20] ^= 0x55;
}

static void test_random(void)
{
	static struct entry e[N_KEYS];
	struct entry decoy;
	struct index ix;
	unsigned long ops = 0;
	const unsigned long n_ops = 200000;

	clustered_entries(e, N_KEYS);
	CHECK(index_init(&ix, 0, &test_hash) == 0);
	for (; ops < n_ops; ops++) {
		/* Alternate phases that fill and drain, so the table both
		 * grows and lives long with deletions. */
		unsigned phase = (unsigned)(ops / 25000) % 2;
		unsigned op = (unsigned)(rnd() % 100);
		size_t i = (size_t)(rnd() % N_KEYS);
		struct entry *x = &e[i];
		int r;

		if (op < (phase ? 25u : 55u)) {
			r = index_put(&ix, x);
			if (r != (x->in ? -EEXIST : 0)) {
				fprintf(stderr, "op %lu: put key %zu returned %d\n",
					ops, i, r);
				failures++;
				break;
			}
			x->in = true;
		} else if (op < 85) {
			r = index_remove(&ix, x);
			if (r != (x->in ? 0 : -ENOENT)) {
				fprintf(stderr, "op %lu: remove key %zu returned %d\n",
					ops, i, r);
				failures++;
				break;
			}
			x->in = false;
		} else if (op < 95) {
			void *got = index_get(&ix, x->key);
			if (got != (x->in ? (void *)x : NULL)) {
				fprintf(stderr, "op %lu: get key %zu wrong\n", ops, i);
				failures++;
				break;
			}
		} else {
			/* Same key, other object: removal is by identity, a
			 * second put is a duplicate key. */
			decoy = *x;
			r = index_remove(&ix, &decoy);
			if (r != -ENOENT) {
				fprintf(stderr, "op %lu: remove of a copy of key %zu returned %d\n",
					ops, i, r);
				failures++;
				break;
			}
			r = index_put(&ix, &decoy);
			if (r != (x->in ? -EEXIST : 0)) {
				fprintf(stderr, "op %lu: put of a copy of key %zu returned %d\n",
					ops, i, r);
				failures++;
				break;
			}
			if (r == 0) {
				CHECK(index_get(&ix, x->key) == &decoy);
				CHECK(index_remove(&ix, &decoy) == 0);
			}
		}
		if (ops % 5000 == 4999 &&
		    (!CHECK_TABLE(&ix) || !CHECK_AGAINST(&ix, e, N_KEYS)))
			break;
	}
	CHECK(ops == n_ops);
	CHECK(ix.cap >= 8192);

	/* Drain: every removal keeps the rest findable. */
	for (size_t i = 0; i < N_KEYS; i++) {
		size_t k = (i * 7919) % N_KEYS;
		CHECK(index_remove(&ix, &e[k]) == (e[k].in ? 0 : -ENOENT));
		e[k].in = false;
		if (i % 2000 == 0 &&
		    (!CHECK_TABLE(&ix) || !CHECK_AGAINST(&ix, e, N_KEYS)))
			break;
	}
	CHECK(ix.n == 0);
	for (size_t i = 0; i < ix.cap; i++)
		CHECK(index_slot(&ix, i) == NULL);
	index_free(&ix);
	CHECK(ix.slots == NULL && ix.cap == 0 && ix.n == 0);
}

static void test_growth(void)
{
	const size_t n = 100000;
	struct entry *e = calloc(n, sizeof(*e));
	struct index ix;
	size_t last_cap;

	CHECK(e != NULL);
	if (!e)
		return;
	clustered_entries(e, n);
	CHECK(index_init(&ix, 0, &test_hash) == 0);
	CHECK(ix.cap == 64 && ix.n == 0);
	last_cap = ix.cap;
	for (size_t i = 0; i < n; i++) {
		CHECK(index_put(&ix, &e[i]) == 0);
		e[i].in = true;
		if (ix.cap != last_cap) {
			/* Grown by doubling, exactly when the load would pass
			 * 70 %, and everything is still there. */
			CHECK(ix.cap == last_cap * 2);
			CHECK(i * 10 <= last_cap * 7 && (i + 1) * 10 > last_cap * 7);
			CHECK_TABLE(&ix);
			CHECK(index_get(&ix, e[0].key) == &e[0]);
			CHECK(index_get(&ix, e[i / 2].key) == &e[i / 2]);
			last_cap = ix.cap;
		}
	}
	CHECK(ix.n == n);
	CHECK(ix.cap == 262144);
	/* 2 MiB of slots: a table of its own, aligned for a huge page. */
	CHECK(((uintptr_t)ix.slots & ((UINT64_C(2) << 20) - 1)) == 0);
	CHECK_TABLE(&ix);
	CHECK_AGAINST(&ix, e, n);
	for (size_t i = 0; i < n; i++)
		CHECK(index_put(&ix, &e[i]) == -EEXIST);
	CHECK(ix.n == n);
	for (size_t i = 0; i < n; i += 2) {
		CHECK(index_remove(&ix, &e[i]) == 0);
		e[i].in = false;
	}
	CHECK_TABLE(&ix);
	CHECK_AGAINST(&ix, e, n);
	for (size_t i = 0; i < n; i += 2)
		CHECK(index_remove(&ix, &e[i]) == -ENOENT);
	index_free(&ix);
	free(e);

	/* Sizing hints: at least twice the hint, a power of two, 64 minimum. */
	static const struct {
		size_t hint, cap;
	} hints[] = { { 0, 64 }, { 1, 64 }, { 32, 64 }, { 33, 128 },
		      { 1000, 2048 }, { 1024, 2048 }, { 1025, 4096 } };
	for (size_t i = 0; i < sizeof(hints) / sizeof(hints[0]); i++) {
		CHECK(index_init(&ix, hints[i].hint, &test_hash) == 0);
		CHECK(ix.cap == hints[i].cap && ix.n == 0);
		index_free(&ix);
	}
}

/* Hand-placed runs in a 64-slot table, including runs across its end. */
static void test_backward_shift(void)
{
	struct entry a, b, c, d, x, y, extra[40];
	struct index ix;

	memset(&a, 0, sizeof(a));
	b = c = d = x = y = a;
	CHECK(index_init(&ix, 0, &test_hash) == 0 && ix.cap == 64);
	a.key[31] = 1;
	aim(&ix, &a, 63);
	b.key[31] = 2;
	aim(&ix, &b, 63);
	c.key[31] = 3;
	aim(&ix, &c, 0);
	d.key[31] = 4;
	aim(&ix, &d, 63);

	CHECK(index_put(&ix, &a) == 0);
	CHECK(index_put(&ix, &b) == 0);
	CHECK(index_put(&ix, &c) == 0);
	CHECK(index_slot(&ix, 63) == &a && index_slot(&ix, 0) == &b && index_slot(&ix, 1) == &c);
	/* Removing the head of a wrapped run pulls both back. */
	CHECK(index_remove(&ix, &a) == 0);
	CHECK(index_slot(&ix, 63) == &b && index_slot(&ix, 0) == &c && index_slot(&ix, 1) == NULL);
	CHECK(index_get(&ix, b.key) == &b && index_get(&ix, c.key) == &c);
	CHECK(index_get(&ix, a.key) == NULL);
	CHECK(index_remove(&ix, &a) == -ENOENT);

	/* c sits at its home: removing b must not move it before it. */
	CHECK(index_put(&ix, &d) == 0);
	CHECK(index_slot(&ix, 63) == &b && index_slot(&ix, 0) == &c && index_slot(&ix, 1) == &d);
	CHECK(index_remove(&ix, &b) == 0);
	CHECK(index_slot(&ix, 63) == &d && index_slot(&ix, 0) == &c && index_slot(&ix, 1) == NULL);
	CHECK(index_get(&ix, d.key) == &d && index_get(&ix, c.key) == &c);
	CHECK_TABLE(&ix);
	CHECK(index_remove(&ix, &c) == 0);
	CHECK(index_remove(&ix, &d) == 0);
	CHECK(ix.n == 0);

	/* An entry at its home right after the hole stays. */
	aim(&ix, &x, 5);
	aim(&ix, &y, 6);
	CHECK(index_put(&ix, &x) == 0 && index_put(&ix, &y) == 0);
	CHECK(index_remove(&ix, &x) == 0);
	CHECK(index_slot(&ix, 5) == NULL && index_slot(&ix, 6) == &y);
	CHECK(index_remove(&ix, &y) == 0);

	/* A long run of one hash across the end; remove from the middle. */
	for (unsigned i = 0; i < 40; i++) {
		memset(&extra[i], 0, sizeof(extra[i]));
		extra[i].key[30] = (uint8_t)i;
		aim(&ix, &extra[i], i % 2 ? 62 : 63);
	}
	for (unsigned i = 0; i < 40; i++)
		CHECK(index_put(&ix, &extra[i]) == 0);
	CHECK(ix.cap == 64 && ix.n == 40);
	for (unsigned i = 0; i < 40; i += 3) {
		CHECK(index_remove(&ix, &extra[i]) == 0);
		CHECK_TABLE(&ix);
		for (unsigned k = 0; k < 40; k++)
			CHECK(index_get(&ix, extra[k].key) ==
			      (k % 3 == 0 && k <= i ? NULL : &extra[k]));
	}
	index_free(&ix);
}

/* The longest run of occupied slots: a lookup of an absent key that starts
 * in it walks to its end, whatever the hash. */
static size_t longest_run(const struct index *ix)
{
	size_t run = 0, best = 0;

	/* Twice round, for the run that wraps past the end. */
	for (size_t i = 0; i < 2 * ix->cap && best < ix->cap; i++) {
		run = index_slot(ix, i & (ix->cap - 1)) ? run + 1 : 0;
		if (run > best)
			best = run;
	}
	return best;
}

/*
 * 16,384 keys that share their first 8 bytes and differ in the rest: a
 * batch any client may send (LOOKUP, RESERVE), since nothing checks that
 * keys are SHA-256 outputs.  Hashing those 8 bytes put them all in one run,
 * and one lookup of the batch then probed 8192 slots on average.  With the
 * keyed hash the table must look as it does for random keys (load 50 %
 * after growth: 1.5 probes per key on average, 26 at most, runs of at most
 * 36 slots under these secrets), under every secret tried.  The bounds
 * allow several times that and are far below the flood's: 8192 probes on
 * average, 16,384 at most, one run of 16,384 slots.
 */
static void test_flood(void)
{
	enum { N = 16384 };
	static struct entry e[N];
	static const uint64_t seeds[] = {0, 1, UINT64_C(0x5eed), UINT64_C(0xdeadbeefcafe)};

	for (size_t si = 0; si < sizeof(seeds) / sizeof(seeds[0]); si++) {
		struct keyhash kh;
		struct index ix;
		uint64_t probes = 0, max_probe = 0;

		keyhash_init_seed(&kh, seeds[si]);
		CHECK(index_init(&ix, 0, &kh) == 0);
		for (uint32_t i = 0; i < N; i++) {
			memset(&e[i], 0, sizeof(e[i]));
			memset(e[i].key, 0xab, 8);
			memcpy(e[i].key + 8, &i, sizeof(i));
			CHECK(index_put(&ix, &e[i]) == 0);
		}
		CHECK(ix.n == N && ix.cap == 32768);
		/* Probes a lookup of each key makes: its distance from home. */
		for (size_t i = 0; i < ix.cap; i++) {
			if (!index_slot(&ix, i))
				continue;
			uint64_t p = ((i - home_of(&ix, index_slot(&ix, i))) & (ix.cap - 1)) + 1;
			probes += p;
			if (p > max_probe)
				max_probe = p;
		}
		size_t run = longest_run(&ix);
		CHECK(probes <= 4 * (uint64_t)N && max_probe <= 128 && run <= 256,
		      "secret %zu: %.2f probes per key on average, %" PRIu64
		      " at most, longest run %zu slots",
		      si, (double)probes / N, max_probe, run);
		for (uint32_t i = 0; i < N; i += 97)
			CHECK(index_get(&ix, e[i].key) == &e[i]);
		index_free(&ix);
	}
}

/* The keys of entries picked, one after another, as a request carries them. */
static void keys_of(uint8_t *keys, struct entry *const *picked, size_t n)
{
	for (size_t i = 0; i < n; i++)
		memcpy(keys + 32 * i, picked[i]->key, 32);
}

/* keys[0..n) looked up in one batch: each finds what the reference says,
 * which is what index_get finds one by one. */
static bool check_batch(int line, const struct index *ix, struct entry *const *picked, size_t n)
{
	static uint8_t keys[1024 * 32];
	static void *got[1024 + 1];

	keys_of(keys, picked, n);
	got[n] = (void *)keys; /* a batch writes n results, no more */
	index_get_batch(ix, keys, n, got);
	for (size_t i = 0; i < n; i++) {
		const void *want = picked[i]->in ? picked[i] : NULL;
		if (got[i] != want || index_get(ix, keys + 32 * i) != want) {
			fprintf(stderr, "%s:%d: batch of %zu, key %zu (entry %u): got %p, %s expected\n",
				__FILE__, line, n, i, picked[i]->id, got[i],
				want ? "its entry" : "NULL");
			failures++;
			return false;
		}
	}
	if (got[n] != (void *)keys) {
		fprintf(stderr, "%s:%d: a batch of %zu wrote past its end\n", __FILE__, line, n);
		failures++;
		return false;
	}
	return true;
}

#define CHECK_BATCH(ix, picked, n) check_batch(__LINE__, ix, picked, n)

/*
 * Batches against the reference while the table fills, drains and grows:
 * batches shorter and longer than the internal batch of 32, keys present
 * and absent, the same key several times in one batch (side by side and
 * far apart), and runs of keys that share a home (the clusters of
 * clustered_entries, picked together).
 */
static void test_batch(void)
{
	static struct entry e[N_KEYS];
	static struct entry *picked[1024];
	static const size_t sizes[] = {1, 2, 31, 32, 33, 64, 65, 257, 1024};
	struct index ix;

	clustered_entries(e, N_KEYS);
	CHECK(index_init(&ix, 0, &test_hash) == 0);
	index_get_batch(&ix, NULL, 0, NULL); /* nothing to do */
	for (unsigned long ops = 0; ops < 120000; ops++) {
		unsigned phase = (unsigned)(ops / 20000) % 2;
		struct entry *x = &e[rnd() % N_KEYS];

		if (rnd() % 100 < (phase ? 30u : 65u)) {
			CHECK(index_put(&ix, x) == (x->in ? -EEXIST : 0));
			x->in = true;
		} else {
			CHECK(index_remove(&ix, x) == (x->in ? 0 : -ENOENT));
			x->in = false;
		}
		if (ops % 3000 != 2999)
			continue;
		for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
			size_t n = sizes[si];
			size_t c = (size_t)(rnd() % (N_KEYS / 64)) * 64;
			for (size_t i = 0; i < n; i++) {
				switch (rnd() % 4) {
				case 0: /* a cluster: 16 keys of one home in order */
					picked[i] = &e[c + i % 16 / 2 * 8 + i % 2];
					break;
				case 1: /* a key this batch already has */
					picked[i] = i ? picked[rnd() % i] : &e[0];
					break;
				default:
					picked[i] = &e[rnd() % N_KEYS];
				}
			}
			if (!CHECK_BATCH(&ix, picked, n))
				goto out;
		}
		if (!CHECK_TABLE(&ix))
			break;
	}
out:
	CHECK(ix.cap >= 8192);
	index_free(&ix);
}

/* Change the first 8 bytes of e's key until both its home and its tag in
 * ix are the ones asked for. */
static void aim_tag(const struct index *ix, struct entry *e, size_t home, uint16_t tag)
{
	for (uint64_t c = rnd();; c++) {
		memcpy(e->key, &c, sizeof(c));
		if (index_home(ix, e->key) == home && index_tag(ix, e->key) == tag)
			return;
	}
}

/*
 * Tags.  Keys that share both home and tag (what 1 probe in 65,536 meets
 * by chance) must still be told apart by their bytes, one by one and in a
 * batch, before and after a removal shifts them; and a key whose tag does
 * not match is passed over without reading its entry, which a slot with
 * another tag put in by hand shows.
 */
static void test_tags(void)
{
	struct entry a, b, c, d, o, *picked[8];
	struct index ix;
	const size_t home = 40;

	CHECK(index_init(&ix, 0, &test_hash) == 0 && ix.cap == 64);
	memset(&a, 0, sizeof(a));
	a.key[31] = 1;
	aim(&ix, &a, home);
	uint16_t tag = index_tag(&ix, a.key);
	b = c = d = o = a;
	b.key[31] = 2;
	c.key[31] = 3;
	d.key[31] = 4;
	o.key[31] = 5;
	aim_tag(&ix, &b, home, tag);
	aim_tag(&ix, &c, home, tag);
	aim_tag(&ix, &d, home, tag); /* never put */
	aim(&ix, &o, home);
	CHECK(index_tag(&ix, o.key) != tag);
	CHECK(memcmp(a.key, b.key, 32) && memcmp(b.key, c.key, 32) && memcmp(c.key, d.key, 32));

	CHECK(index_put(&ix, &a) == 0 && index_put(&ix, &o) == 0);
	CHECK(index_put(&ix, &b) == 0 && index_put(&ix, &c) == 0);
	a.in = b.in = c.in = o.in = true;
	CHECK(index_slot(&ix, home) == &a && index_slot(&ix, home + 1) == &o &&
	      index_slot(&ix, home + 2) == &b && index_slot(&ix, home + 3) == &c);
	CHECK_TABLE(&ix);
	CHECK(index_get(&ix, c.key) == &c && index_get(&ix, d.key) == NULL);
	/* A copy of b's key under another object is a duplicate. */
	struct entry b2 = b;
	CHECK(index_put(&ix, &b2) == -EEXIST);
	picked[0] = &d, picked[1] = &c, picked[2] = &b, picked[3] = &a;
	picked[4] = &c, picked[5] = &d, picked[6] = &o, picked[7] = &a;
	CHECK_BATCH(&ix, picked, 8);

	/* Removing a pulls o, b and c back one slot each, tags and all. */
	CHECK(index_remove(&ix, &a) == 0);
	a.in = false;
	CHECK(index_slot(&ix, home) == &o && index_slot(&ix, home + 1) == &b &&
	      index_slot(&ix, home + 2) == &c && index_slot(&ix, home + 3) == NULL);
	CHECK_TABLE(&ix);
	CHECK_BATCH(&ix, picked, 8);
	CHECK(index_remove(&ix, &b) == 0);
	b.in = false;
	CHECK_TABLE(&ix);
	CHECK_BATCH(&ix, picked, 8);

	/* c's slot given o's tag: a lookup of c compares tags only and finds
	 * nothing there, one by one and in a batch. */
	uint64_t saved = ix.slots[home + 1];
	CHECK(index_slot(&ix, home + 1) == &c);
	ix.slots[home + 1] = (saved & INDEX_ADDR_MASK) |
			     (uint64_t)index_tag(&ix, o.key) << INDEX_TAG_SHIFT;
	void *got[2];
	CHECK(index_get(&ix, c.key) == NULL);
	index_get_batch(&ix, c.key, 1, got);
	CHECK(got[0] == NULL);
	ix.slots[home + 1] = saved;
	CHECK(index_get(&ix, c.key) == &c);

	/* An entry the slot cannot hold. */
	if (sizeof(void *) == 8)
		CHECK(index_put(&ix, (void *)(uintptr_t)(UINT64_C(1) << 52)) == -EINVAL);
	CHECK(ix.n == 2);
	index_free(&ix);
}

/*
 * A request's keys through index_keys, forwards and backwards, while the
 * walk itself removes the entries it finds and puts those it does not
 * (as DELETE and RESERVE do): every get must say what index_get says at
 * that moment, so a key met again after its entry went is absent, and one
 * put by an earlier get of the same key is present.
 */
static void test_keys(void)
{
	enum { N = 300, REQ = 200 };
	static struct entry e[N];
	static struct entry *picked[REQ];
	static uint8_t keys[REQ * 32];
	struct index ix;

	clustered_entries(e, N);
	CHECK(index_init(&ix, 0, &test_hash) == 0);
	for (size_t i = 0; i < N; i += 2) {
		CHECK(index_put(&ix, &e[i]) == 0);
		e[i].in = true;
	}
	for (unsigned round = 0; round < 6; round++) {
		struct index_keys k;
		unsigned mutate = round % 3; /* none, remove found, put missing */
		bool backwards = round >= 3;

		for (size_t i = 0; i < REQ; i++)
			picked[i] = rnd() % 4 == 0 && i ? picked[rnd() % i] : &e[rnd() % N];
		keys_of(keys, picked, REQ);
		index_keys_init(&k, &ix, keys, REQ);
		for (size_t j = 0; j < REQ; j++) {
			size_t i = backwards ? REQ - 1 - j : j;
			struct entry *x = picked[i];
			void *got = index_keys_get(&k, i);
			CHECK(got == index_get(&ix, keys + 32 * i) && got == (x->in ? x : NULL),
			      "round %u, key %zu", round, i);
			if (mutate == 1 && x->in && rnd() % 2) {
				CHECK(index_remove(&ix, x) == 0);
				x->in = false;
			} else if (mutate == 2 && !x->in && rnd() % 2) {
				CHECK(index_put(&ix, x) == 0);
				x->in = true;
			}
		}
		CHECK_TABLE(&ix);
	}
	index_free(&ix);
}

int main(void)
{
	keyhash_init_seed(&test_hash, UINT64_C(0x7e57));
	test_flood();
	test_backward_shift();
	test_growth();
	test_random();
	test_batch();
	test_tags();
	test_keys();

	if (failures) {
		fprintf(stderr, "test-index: %d check(s) failed\n", failures);
		return 1;
	}
	printf("test-index: ok\n");
	return 0;
}
