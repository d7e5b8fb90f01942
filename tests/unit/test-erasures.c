/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The store's record of NVMe copies being erased (store-erasures.c),
 * against a plain model: random erasures of copies of random keys begin,
 * end (landed or failed) and are held and released, in any order, many at
 * once and few; after every step each key is "being erased" exactly while
 * the model has one under way, and "failed" from its first failed erasure
 * on, whatever the table has grown to and removed meanwhile.  Keys of two
 * namespaces with the same key bytes are told apart; the same namespace
 * opened again (same tenant and identity) names the same keys.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"
#include "../helpers.h"
#include "store-private.h"
#include "store.h"

#define KEYS 3000u
#define STEPS 200000u

struct model {
	uint32_t pending, failed; /* pending: erasures and holds */
	uint32_t erasures;        /* of those, erasures */
};

static struct store s;
static struct ns a, b, a_again;
static uint8_t keys[KEYS][KVT_KEY_SIZE];
static struct model ma[KEYS], mb[KEYS];
static uint64_t ended;

static void on_ended(void *userdata)
{
	ended++;
}

static uint64_t fp(const struct ns *ns, uint32_t k)
{
	return store_scoped_fp(ns->scope, store_key_fingerprint(&s, keys[k]));
}

static void check_key(const struct ns *ns, const struct model *m, uint32_t k)
{
	int want = m[k].pending ? 1 : m[k].failed ? -EIO : 0;
	int got = store_erase_state(&s, ns, keys[k]);
	CHECK(got == want, "key %u: state %d, the model says %d (pending %u, failed %u)", k, got,
	      want, m[k].pending, m[k].failed);
	CHECK(store_erase_pending(&s, ns, keys[k]) == (want != 0), "key %u: pending disagrees", k);
}

int main(void)
{
	uint64_t rng = 0x5eed;
	static uint32_t held[64];
	uint32_t n_held = 0;

	keyhash_init_seed(&s.keyhash, 7);
	s.erasure_ended = on_ended;
	static const uint8_t id_a[] = "identity a", id_b[] = "identity b";
	a.scope = store_scope(&s, "tenant", id_a, sizeof(id_a));
	b.scope = store_scope(&s, "tenant", id_b, sizeof(id_b));
	a_again.scope = store_scope(&s, "tenant", id_a, sizeof(id_a));
	CHECK(a.scope == a_again.scope && a.scope != b.scope, "scopes");
	CHECK(store_scope(&s, "other", id_a, sizeof(id_a)) != a.scope, "the tenant is in the scope");
	for (uint32_t k = 0; k < KEYS; k++)
		for (int i = 0; i < KVT_KEY_SIZE; i++)
			keys[k][i] = (uint8_t)((rng = mix(rng)) >> 24);

	/* Phases: few keys in flight (entries come and go, backward shifts),
	 * then many (the table grows), then back to few. */
	for (uint32_t step = 0; step < STEPS; step++) {
		uint32_t span = step < STEPS / 3 ? 40 : step < 2 * STEPS / 3 ? KEYS : 40;
		uint32_t k = (uint32_t)((rng = mix(rng)) % span);
		bool on_b = (rng >> 40) & 1;
		struct ns *ns = on_b ? &b : &a;
		struct model *m = on_b ? mb : ma;
		uint32_t what = (uint32_t)((rng >> 8) % 100);

		if (what < 45) {
			CHECK(store_erase_begin(&s, ns, fp(ns, k)) == fp(ns, k), "recorded");
			m[k].pending++;
			m[k].erasures++;
		} else if (what < 90 && m[k].erasures) {
			bool ok = (rng >> 20) % 50 != 0;
			store_nvme_erased(&s, ns, fp(ns, k), ok);
			m[k].pending--;
			m[k].erasures--;
			m[k].failed += !ok;
		} else if (what < 95 && n_held < 64) {
			/* A hold, as an unindexed block's, on a key of a */
			store_erase_begin(&s, &a, fp(&a, k));
			ma[k].pending++;
			held[n_held++] = k;
		} else if (n_held) {
			uint32_t i = (uint32_t)((rng >> 30) % n_held);
			uint32_t hk = held[i];
			store_erase_release(&s, &a, fp(&a, hk));
			ma[hk].pending--;
			held[i] = held[--n_held];
		}
		check_key(ns, m, k);
		if (step % 5000 == 0)
			for (uint32_t j = 0; j < KEYS; j++) {
				check_key(&a, ma, j);
				check_key(&b, mb, j);
				check_key(&a_again, ma, j);
			}
	}
	/* Everything ends. */
	while (n_held) {
		uint32_t hk = held[--n_held];
		store_erase_release(&s, &a, fp(&a, hk));
		ma[hk].pending--;
	}
	for (uint32_t k = 0; k < KEYS; k++) {
		for (; ma[k].erasures; ma[k].erasures--, ma[k].pending--)
			store_nvme_erased(&s, &a, fp(&a, k), true);
		for (; mb[k].erasures; mb[k].erasures--, mb[k].pending--)
			store_nvme_erased(&s, &b, fp(&b, k), true);
	}
	uint64_t failed = 0;
	for (uint32_t k = 0; k < KEYS; k++) {
		check_key(&a, ma, k);
		check_key(&b, mb, k);
		failed += (ma[k].failed != 0) + (mb[k].failed != 0);
	}
	CHECK(s.erasing == 0 && a.erasing == 0 && b.erasing == 0, "nothing under way: %llu",
	      (unsigned long long)s.erasing);
	CHECK(s.erasures_n == failed, "the table keeps only the %llu failed keys, not %u",
	      (unsigned long long)failed, s.erasures_n);
	CHECK(ended > 0, "every end is told");
	printf("%u steps over %u keys: table of %u, %llu keys with a failed erasure, %llu erasures\n",
	       STEPS, KEYS, s.erasures_cap, (unsigned long long)failed, (unsigned long long)s.erased);
	store_erasures_done(&s);
	return 0;
}
