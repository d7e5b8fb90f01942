/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What keeps an older NVMe copy of a key from coming back.
 *
 * A load returns the newest bytes committed under a key, or a miss, across
 * any restart (docs/nvme.md §9).  Host memory does not outlive the daemon;
 * an NVMe copy does, until its slot header is erased.  So the store
 * remembers, by key, the copies being erased (an erasure is one write of a
 * zeroed header, nvme_slot_drop()), and while one is under way, or failed:
 *
 *   - no new block is accepted under that key (RESERVE -EAGAIN): were it
 *     committed and the daemon killed before the erasure landed, the older
 *     copy would be found at the restart and served;
 *   - a DELETE of it is answered once it has landed (requests.c waits).
 *
 * While recovery runs with clients connected, every key may still have a
 * copy the scan has not reached: nothing new is accepted and nothing is
 * deleted until it ends, and the keys that leave the index meanwhile are
 * remembered, so that a copy found later is erased rather than kept.
 *
 * Keys are remembered by a fingerprint of the key and its namespace's scope
 * (tenant name and identity, the same for a namespace opened again or one
 * recovery declined), in tables of 64-bit fingerprints: a collision makes
 * a key wait needlessly, never the reverse.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "store-private.h"
#include "store.h"

struct erase_entry {
	uint64_t fp;      /* 0: empty */
	uint32_t pending; /* erasures under way */
	uint32_t failed;  /* erasures that failed: the copy may come back */
};

uint64_t store_scope(const struct store *s, const char *tenant, const uint8_t *identity,
		     uint32_t len)
{
	uint64_t t = keyhash(&s->keyhash, tenant, strlen(tenant));
	return keyhash(&s->keyhash, identity, len) ^ (t * UINT64_C(0x9e3779b97f4a7c15));
}

uint64_t store_scoped_fp(uint64_t scope, uint64_t key_fp)
{
	uint64_t h = key_fp ^ (scope + UINT64_C(0x632be59bd9b4e019)) * UINT64_C(0xff51afd7ed558ccd);
	return h ? h : 1; /* 0 is an empty place */
}

static uint64_t key_fp(const struct store *s, uint64_t scope, const uint8_t *key)
{
	return store_scoped_fp(scope, store_key_fingerprint(s, key));
}

/* ---- copies being erased ------------------------------------------ */

static struct erase_entry *erase_find(const struct store *s, uint64_t fp)
{
	if (!s->erasures)
		return NULL;
	for (uint32_t i = (uint32_t)fp & (s->erasures_cap - 1); s->erasures[i].fp;
	     i = (i + 1) & (s->erasures_cap - 1))
		if (s->erasures[i].fp == fp)
			return &s->erasures[i];
	return NULL;
}

static struct erase_entry *erase_slot(struct erase_entry *t, uint32_t cap, uint64_t fp)
{
	uint32_t i = (uint32_t)fp & (cap - 1);
	while (t[i].fp && t[i].fp != fp)
		i = (i + 1) & (cap - 1);
	return &t[i];
}

static int erase_grow(struct store *s)
{
	uint32_t cap = s->erasures_cap ? s->erasures_cap * 2 : 256;
	struct erase_entry *t = cap > s->erasures_cap ? calloc(cap, sizeof(*t)) : NULL;

	if (!t)
		return -ENOMEM;
	for (uint32_t i = 0; i < s->erasures_cap; i++)
		if (s->erasures[i].fp)
			*erase_slot(t, cap, s->erasures[i].fp) = s->erasures[i];
	free(s->erasures);
	s->erasures = t;
	s->erasures_cap = cap;
	return 0;
}

/* Out of the table, the probe run behind it shifted back (no tombstones:
 * entries come and go with every erasure). */
static void erase_remove(struct store *s, struct erase_entry *e)
{
	uint32_t mask = s->erasures_cap - 1, i = (uint32_t)(e - s->erasures), j = i;

	for (;;) {
		s->erasures[i].fp = 0;
		for (;;) {
			j = (j + 1) & mask;
			if (!s->erasures[j].fp)
				goto out;
			uint32_t home = (uint32_t)s->erasures[j].fp & mask;
			/* j may move to i when its home is not in (i, j]. */
			if (i <= j ? (home <= i || home > j) : (home <= i && home > j))
				break;
		}
		s->erasures[i] = s->erasures[j];
		i = j;
	}
out:
	s->erasures_n--;
}

uint64_t store_erase_begin(struct store *s, struct ns *ns, uint64_t fp)
{
	struct erase_entry *e = erase_find(s, fp);

	s->erasing++;
	if (ns)
		ns->erasing++;
	if (!e) {
		if ((s->erasures_n + 1) * 4 > s->erasures_cap * 3 && erase_grow(s) < 0) {
			/* Unrecorded: until it ends, every key counts as being
			 * erased, which errs on the side of a miss. */
			s->erase_untracked++;
			return 0;
		}
		e = erase_slot(s->erasures, s->erasures_cap, fp);
		*e = (struct erase_entry){.fp = fp};
		s->erasures_n++;
	}
	e->pending++;
	return fp;
}

static void erase_end(struct store *s, struct ns *ns, uint64_t token, bool ok)
{
	struct erase_entry *e = token ? erase_find(s, token) : NULL;

	s->erasing--;
	if (ns)
		ns->erasing--;
	if (!token) {
		s->erase_untracked--;
	} else if (e) {
		e->pending--;
		/* A copy that may still be on disk keeps its key from being
		 * stored again until the daemon restarts. */
		e->failed += !ok;
		if (!e->pending && !e->failed)
			erase_remove(s, e);
	}
	if (s->erasure_ended)
		s->erasure_ended(s->userdata);
}

void store_nvme_erased(struct store *s, struct ns *ns, uint64_t token, bool ok)
{
	s->erased++;
	if (!ok) {
		s->erase_failures++;
		if (ns)
			ns->erase_failures++;
	}
	erase_end(s, ns, token, ok);
}

void store_erase_release(struct store *s, struct ns *ns, uint64_t token)
{
	erase_end(s, ns, token, true);
}

bool store_erase_pending(const struct store *s, const struct ns *ns, const uint8_t *key)
{
	if (s->erase_untracked)
		return true;
	return s->erasures_n && erase_find(s, key_fp(s, ns->scope, key)) != NULL;
}

int store_erase_state(const struct store *s, const struct ns *ns, const uint8_t *key)
{
	const struct erase_entry *e =
		s->erasures_n ? erase_find(s, key_fp(s, ns->scope, key)) : NULL;

	if ((e && e->pending) || s->erase_untracked)
		return 1;
	return e && e->failed ? -EIO : 0;
}

void store_copy_erase(struct store *s, struct ns *ns, uint64_t fp, struct spill_region *r,
		      uint32_t slot)
{
	uint64_t token = store_erase_begin(s, ns, fp);

	s->nvme_ops->slot_drop(s->nvme, r, slot, ns, token);
}

void store_erasures_done(struct store *s)
{
	free(s->erasures);
	s->erasures = NULL;
	s->erasures_n = s->erasures_cap = 0;
	store_recovering(s, false);
}

/* ---- keys gone during recovery ------------------------------------- */

static bool gone_has(const struct store *s, uint64_t h)
{
	if (!s->gone)
		return false;
	for (uint32_t i = (uint32_t)h & (s->gone_cap - 1); s->gone[i];
	     i = (i + 1) & (s->gone_cap - 1))
		if (s->gone[i] == h)
			return true;
	return false;
}

static void gone_put(uint64_t *table, uint32_t cap, uint64_t h)
{
	uint32_t i = (uint32_t)h & (cap - 1);
	while (table[i] && table[i] != h)
		i = (i + 1) & (cap - 1);
	table[i] = h;
}

int store_recovering(struct store *s, bool on)
{
	free(s->gone);
	s->gone = NULL;
	s->gone_n = 0;
	s->gone_full = false;
	s->recovering = on;
	if (!on)
		return 0;
	s->gone_cap = 4096;
	s->gone = calloc(s->gone_cap, sizeof(uint64_t));
	if (!s->gone) {
		s->recovering = false;
		return -ENOMEM;
	}
	return 0;
}

void store_gone_add(struct store *s, const struct block *b)
{
	uint64_t h = store_scoped_fp(b->ns->scope, b->evict.fp);

	if (s->gone_full || gone_has(s, h))
		return;
	if ((s->gone_n + 1) * 4 > s->gone_cap * 3) {
		/* Growing, up to the limit; past it recovery keeps no more
		 * copies: misses, never an older block. */
		uint32_t cap = s->gone_cap * 2;
		uint64_t *t = cap <= STORE_GONE_MAX ? calloc(cap, sizeof(uint64_t)) : NULL;
		if (!t) {
			s->gone_full = true;
			return;
		}
		for (uint32_t i = 0; i < s->gone_cap; i++)
			if (s->gone[i])
				gone_put(t, cap, s->gone[i]);
		free(s->gone);
		s->gone = t;
		s->gone_cap = cap;
	}
	gone_put(s->gone, s->gone_cap, h);
	s->gone_n++;
}

bool store_gone_has(const struct store *s, uint64_t scope, const uint8_t *key)
{
	return s->gone_full || gone_has(s, key_fp(s, scope, key));
}
