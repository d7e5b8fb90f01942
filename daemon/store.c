/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fault.h"
#include "keyhash.h"
#include "log.h"
#include "nvme.h"
#include "process.h"
#include "spill.h"
#include "store.h"

#define ARRAY_GROW(arr, n, type)                                          \
	({                                                                \
		type *_a = realloc((arr), sizeof(type) * ((n) + 1));      \
		if (_a)                                                   \
			(arr) = _a;                                       \
		_a != NULL;                                               \
	})

/* ---- tenants ------------------------------------------------------ */

int store_init(struct store *s, struct pool *p, const struct config *c,
	       store_extent_added_fn fn, void *userdata)
{
	memset(s, 0, sizeof(*s));
	s->pool = p;
	s->config = c;
	s->extent_added = fn;
	s->userdata = userdata;
	s->next_tenant_id = 1;
	return keyhash_init_random(&s->keyhash);
}

/* What the eviction ghost lists remember of a block: keys sharing their
 * first bytes must not share it. */
static uint64_t key_fingerprint(const struct store *s, const uint8_t *key)
{
	return keyhash(&s->keyhash, key, KVT_KEY_SIZE);
}

static void ns_free(struct store *s, struct ns *ns)
{
	for (size_t i = 0; i < ns->index.cap; i++) {
		struct block *b = ns->index.slots[i];
		if (b)
			free(b);
	}
	index_free(&ns->index);
	free(ns->identity);
	free(ns);
}

static void tenant_free(struct store *s, struct tenant *t)
{
	/* Shutdown: blocks that only handles still hold go with the last. */
	for (uint32_t i = 0; i < t->handles_cap; i++) {
		struct handle *h = t->handles[i];
		if (!h)
			continue;
		if (--h->block->handles == 0 && !h->block->indexed)
			free(h->block);
		free(h);
	}
	for (uint32_t i = 0; i < t->n_ns; i++)
		ns_free(s, t->nss[i]);
	for (uint32_t i = 0; i < t->n_classes; i++) {
		struct slot_class *c = t->classes[i];
		for (uint32_t j = 0; j < c->n_extents; j++)
			pool_extent_free(s->pool, c->extents[j]);
		free(c->extents);
		evict_done(&c->lru);
		free(c);
	}
	free(t->classes);
	free(t->nss);
	free(t->handles);
	free(t->handle_gen);
	free(t->handle_free);
	free(t);
}

void store_done(struct store *s)
{
	for (uint32_t i = 0; i < s->n_tenants; i++)
		tenant_free(s, s->tenants[i]);
	free(s->tenants);
	s->tenants = NULL;
	s->n_tenants = 0;
}

struct tenant *store_tenant_find(struct store *s, const char *name)
{
	for (uint32_t i = 0; i < s->n_tenants; i++)
		if (!strcmp(s->tenants[i]->name, name))
			return s->tenants[i];
	return NULL;
}

int store_tenant_get(struct store *s, const struct tenant_choice *ch, struct tenant **ret)
{
	struct tenant *t = store_tenant_find(s, ch->name);
	if (t) {
		*ret = t;
		return 0;
	}
	t = fault_hit(FAULT_TENANT) ? NULL : calloc(1, sizeof(*t));
	if (!t || !ARRAY_GROW(s->tenants, s->n_tenants, struct tenant *)) {
		free(t);
		return -ENOMEM;
	}
	t->id = s->next_tenant_id++;
	t->next_extent_id = 1;
	t->store = s;
	t->choice = *ch;
	t->uid = ch->configured ? (uid_t)-1 : ch->uid;
	snprintf(t->name, sizeof(t->name), "%s", ch->name);
	t->quota = tenancy_quota(s->config, ch);
	t->nvme_quota = tenancy_nvme_quota(s->config, ch);
	s->tenants[s->n_tenants++] = t;
	if (s->config->n_spills)
		log_info("Tenant %s: quota %llu MiB, NVMe quota %llu MiB", t->name,
			 (unsigned long long)(t->quota >> 20), (unsigned long long)(t->nvme_quota >> 20));
	else
		log_info("Tenant %s: quota %llu MiB", t->name, (unsigned long long)(t->quota >> 20));
	*ret = t;
	return 0;
}

void store_reload(struct store *s)
{
	for (uint32_t i = 0; i < s->n_tenants; i++) {
		struct tenant *t = s->tenants[i];
		uint64_t q = tenancy_quota(s->config, &t->choice);
		if (q != t->quota)
			log_info("Tenant %s: quota %llu -> %llu MiB%s", t->name,
				 (unsigned long long)(t->quota >> 20), (unsigned long long)(q >> 20),
				 q < t->allocated ? " (below what it holds: it shrinks by eviction as it stores)" : "");
		t->quota = q;
		q = tenancy_nvme_quota(s->config, &t->choice);
		if (q != t->nvme_quota)
			log_info("Tenant %s: NVMe quota %llu -> %llu MiB%s", t->name,
				 (unsigned long long)(t->nvme_quota >> 20), (unsigned long long)(q >> 20),
				 q < t->disk_bytes ? " (below what it holds: it shrinks as it spills)" : "");
		t->nvme_quota = q;
	}
}

uint64_t store_tenant_used(const struct tenant *t)
{
	uint64_t used = 0;
	for (uint32_t i = 0; i < t->n_classes; i++)
		used += t->classes[i]->used_slots * t->classes[i]->slot_bytes;
	return used;
}

/* ---- namespaces --------------------------------------------------- */

struct ns *store_ns_get(struct tenant *t, uint32_t ns_id)
{
	if (ns_id == 0 || ns_id > t->n_ns)
		return NULL;
	return t->nss[ns_id - 1];
}

static struct slot_class *class_get(struct store *s, struct tenant *t, uint64_t slot_bytes)
{
	for (uint32_t i = 0; i < t->n_classes; i++)
		if (t->classes[i]->slot_bytes == slot_bytes)
			return t->classes[i];
	struct slot_class *c = calloc(1, sizeof(*c));
	if (!c || !ARRAY_GROW(t->classes, t->n_classes, struct slot_class *)) {
		free(c);
		return NULL;
	}
	c->slot_bytes = slot_bytes;
	evict_init(&c->lru, s->config->eviction, &s->keyhash);
	t->classes[t->n_classes++] = c;
	return c;
}

int store_ns_open(struct store *s, struct tenant *t, const uint8_t *identity,
		  uint32_t len, struct ns **ret, char *reason, size_t reason_size)
{
	struct kvt_identity id;
	struct kvt_geometry geo;
	int r;

	r = kvt_identity_decode(identity, len, &id);
	if (r < 0) {
		snprintf(reason, reason_size,
			 "namespace identity is not in canonical form (fields out of order, missing or out of range)");
		return -EINVAL;
	}
	r = kvt_identity_geometry(&id, &geo);
	if (r < 0) {
		snprintf(reason, reason_size,
			 r == -EFBIG ? "a block of this geometry exceeds 1 GiB; use fewer tokens per block"
				     : "KV heads must divide evenly among tensor-parallel ranks");
		return r;
	}

	/* The same identity in the same tenant is the same namespace: that is
	 * how separate engine processes share blocks.  The decoder accepts
	 * only the canonical encoding, so equal identities are equal bytes. */
	for (uint32_t i = 0; i < t->n_ns; i++) {
		struct ns *o = t->nss[i];
		if (o->identity_len == len && !memcmp(o->identity, identity, len)) {
			o->opens++;
			*ret = o;
			return 0;
		}
	}

	if (t->n_ns >= s->config->max_namespaces) {
		snprintf(reason, reason_size,
			 "tenant %s already has %u namespaces ([limits] namespaces_per_tenant)",
			 t->name, t->n_ns);
		return -EMFILE;
	}
	uint64_t ext = pool_extent_bytes(s->pool, geo.slot_bytes);
	if (ext > t->quota || ext > s->pool->capacity) {
		snprintf(reason, reason_size,
			 "one block of %llu KiB needs an extent of %llu MiB, more than the tenant quota (%llu MiB) or pool capacity allows",
			 (unsigned long long)(geo.slot_bytes >> 10),
			 (unsigned long long)(ext >> 20),
			 (unsigned long long)(t->quota >> 20));
		return -EFBIG;
	}

	struct ns *ns = fault_hit(FAULT_NS) ? NULL : calloc(1, sizeof(*ns));
	if (!ns || index_init(&ns->index, 1024, &s->keyhash) < 0 ||
	    !ARRAY_GROW(t->nss, t->n_ns, struct ns *)) {
		if (ns)
			index_free(&ns->index);
		free(ns);
		return -ENOMEM;
	}
	evict_lru_init(&ns->disk_lru);
	ns->cls = class_get(s, t, geo.slot_bytes);
	if (!ns->cls) {
		index_free(&ns->index);
		free(ns);
		return -ENOMEM;
	}
	ns->identity = malloc(len);
	if (!ns->identity) {
		index_free(&ns->index);
		free(ns);
		return -ENOMEM;
	}
	memcpy(ns->identity, identity, len);
	ns->identity_len = len;
	ns->tenant = t;
	ns->ident = id;
	ns->geo = geo;
	ns->opens = 1;
	t->nss[t->n_ns++] = ns;
	ns->id = t->n_ns;
	log_info("Namespace %s/%u: model '%s', layers %u-%u, tp %u, %u tokens per block, %llu KiB per block",
		 t->name, ns->id, id.model, id.layer_first, id.layer_end, id.tp_size,
		 id.block_tokens, (unsigned long long)(geo.slot_bytes >> 10));
	*ret = ns;
	return 0;
}

/* ---- slots and blocks --------------------------------------------- */

static void block_unindex(struct block *b)
{
	struct ns *ns = b->ns;

	if (!b->indexed)
		return;
	index_remove(&ns->index, b);
	b->indexed = false;
	evict_remove(&ns->cls->lru, &b->lru);
	if (b->state != BLOCK_RESIDENT)
		ns->blocks_reserved--;
	else if (b->extent && b->io != BLOCK_IO_READ)
		ns->blocks_resident--;
	else
		ns->blocks_spilled--;
}

static void host_slot_release(struct block *b)
{
	if (!b->extent)
		return;
	if (b->state == BLOCK_RESIDENT && !b->clean && b->io != BLOCK_IO_READ)
		b->ns->tenant->dirty -= b->extent->slot_bytes;
	if (slots_release(&b->extent->slots, b->slot) == 0)
		b->extent->cls->used_slots--;
	b->extent = NULL;
}

/* The NVMe copies of a namespace, coldest first, and what they cost its
 * tenant against its NVMe quota. */
void store_disk_linked(struct block *b)
{
	if (!evict_node_linked(&b->disk_lru)) {
		evict_lru_insert(&b->ns->disk_lru, &b->disk_lru);
		b->ns->tenant->disk_bytes += spill_slot_stride(b->disk);
	}
}

static void disk_unlink(struct block *b)
{
	if (evict_node_linked(&b->disk_lru)) {
		evict_lru_remove(&b->ns->disk_lru, &b->disk_lru);
		b->ns->tenant->disk_bytes -= spill_slot_stride(b->disk);
	}
}

/* The slots go back only when nothing can still write to or read them:
 * no handle, and no NVMe I/O in flight. */
static void block_maybe_free(struct block *b)
{
	if (b->indexed || b->handles || b->io)
		return;
	host_slot_release(b);
	if (b->disk) {
		disk_unlink(b);
		nvme_slot_drop(b->ns->tenant->store->nvme, b->disk, b->disk_slot);
	}
	free(b);
}

/* Give up b's NVMe copy; b has no I/O in flight.  A block still in host
 * memory keeps serving from there (and is dirty again); one only on NVMe
 * is gone. */
static void disk_copy_drop(struct store *s, struct ns *ns, struct block *b)
{
	disk_unlink(b);
	if (b->extent) {
		nvme_slot_drop(s->nvme, b->disk, b->disk_slot);
		b->disk = NULL;
		if (b->clean) {
			b->clean = false;
			ns->tenant->dirty += b->extent->slot_bytes;
		}
	} else {
		ns->c.evictions++;
		block_unindex(b);
		block_maybe_free(b);
	}
}

static int nvme_evict(struct store *s, struct ns *ns, bool disk_only)
{
	struct evict_node *v = evict_lru_victim(&ns->disk_lru);
	/* Write-back asks on every turn while a tenant is at its quota: look
	 * a little way up the list, not through all of it. */
	for (int i = 0; v && (!disk_only || i < 256); i++) {
		struct block *b = (struct block *)((char *)v - offsetof(struct block, disk_lru));
		struct evict_node *prev = v->prev == &ns->disk_lru.head ? NULL : v->prev;
		if (b->io != BLOCK_IO_NONE || (disk_only && b->extent)) {
			v = prev; /* its copy is being read, or it is wanted */
			continue;
		}
		disk_copy_drop(s, ns, b);
		return 0;
	}
	return -ENOSPC;
}

uint64_t store_nvme_evict_region(struct store *s, struct spill_region *r)
{
	const struct spill_binding *bd = r->binding;
	struct tenant *t = bd ? store_tenant_find(s, bd->tenant) : NULL;
	uint64_t dropped = 0;

	for (uint32_t i = 0; t && i < t->n_ns; i++) {
		struct ns *ns = t->nss[i];
		if (ns->identity_len != bd->identity_len ||
		    memcmp(ns->identity, bd->identity, bd->identity_len) != 0)
			continue;
		/* The region's copies are among its namespace's, in no useful
		 * order: one walk over all of them, once per region taken. */
		struct evict_node *v = ns->disk_lru.head.next;
		while (v && v != &ns->disk_lru.head) {
			struct evict_node *next = v->next;
			struct block *b = (struct block *)((char *)v - offsetof(struct block, disk_lru));
			if (b->disk == r && b->io == BLOCK_IO_NONE) {
				disk_copy_drop(s, ns, b);
				dropped++;
			}
			v = next;
		}
		break;
	}
	return dropped;
}

int store_nvme_evict(struct store *s, struct ns *ns)
{
	return nvme_evict(s, ns, false);
}

int store_nvme_evict_tenant(struct store *s, struct ns *ns)
{
	/* Only copies whose block has left host memory: dropping the copy of
	 * a resident block would only make it dirty again, and writing it
	 * back would take the next one's. */
	if (nvme_evict(s, ns, true) == 0)
		return 0;
	for (uint32_t i = 0; i < ns->tenant->n_ns; i++)
		if (ns->tenant->nss[i] != ns && nvme_evict(s, ns->tenant->nss[i], true) == 0)
			return 0;
	return -EDQUOT;
}

void store_block_maybe_free(struct block *b)
{
	block_maybe_free(b);
}

/* On the eviction list: resident in host memory, unpinned, no I/O. */
static void lru_maybe_insert(struct block *b)
{
	if (b->indexed && b->state == BLOCK_RESIDENT && b->extent && !b->handles &&
	    b->io == BLOCK_IO_NONE && !evict_entry_linked(&b->lru)) {
		evict_insert(&b->ns->cls->lru, &b->lru);
		/* Write-back only finds dirty blocks on this list: one that
		 * comes back to it (committed, released) may be waited for. */
		if (!b->clean && b->ns->tenant->store && b->ns->tenant->store->nvme)
			nvme_kick(b->ns->tenant->store->nvme);
	}
}

/* A free slot in an extent on node (-1: on any node). */
static struct extent *class_free_slot(struct slot_class *c, int node, uint32_t *ret_slot)
{
	for (uint32_t i = 0; i < c->n_extents; i++)
		if ((node < 0 || c->extents[i]->for_node == node) &&
		    slots_alloc(&c->extents[i]->slots, ret_slot) == 0)
			return c->extents[i];
	return NULL;
}

/*
 * Placement: a free slot in an extent made for the client's node first,
 * then a new extent for that node while the quota lasts (the kernel may
 * put it elsewhere when the node is short: counted), then a free slot in
 * any extent, and only then an eviction.  A client with no known node
 * takes any free slot before a new extent.
 */
/*
 * A slot of class c: a free one, a new extent's, or an evicted block's.
 * Staging (restore) takes the slot of a block staged for a lookup that has
 * not leased it yet only when nothing else can go: restores for one
 * request would otherwise evict each other in turn.
 */
static int class_alloc(struct store *s, struct tenant *t, struct slot_class *c, int node,
		       bool stage, struct extent **ret_e, uint32_t *ret_slot)
{
	if (node >= 0 && (*ret_e = class_free_slot(c, node, ret_slot)))
		goto got;
	if (node < 0 && (*ret_e = class_free_slot(c, -1, ret_slot)))
		goto got;

	uint64_t bytes = pool_extent_bytes(s->pool, c->slot_bytes);
	if (t->allocated + bytes <= t->quota &&
	    ARRAY_GROW(c->extents, c->n_extents, struct extent *)) {
		struct extent *e;
		if (pool_extent_new(s->pool, t->next_extent_id, c->slot_bytes, node, &e) == 0) {
			t->next_extent_id++;
			e->cls = c;
			c->extents[c->n_extents++] = e;
			t->allocated += e->size;
			if (s->extent_added)
				s->extent_added(s->userdata, t, e);
			if (slots_alloc(&e->slots, ret_slot) == 0) {
				*ret_e = e;
				goto got;
			}
		}
	}
	if (node >= 0 && (*ret_e = class_free_slot(c, -1, ret_slot)))
		goto got;

	/* The least recently used block that can go now: not being written
	 * back, and for staging not a staged one if another will do.  With an
	 * NVMe tier a clean block (its copy is on NVMe) is worth looking a
	 * little way up the list for: write-back keeps enough of them ahead
	 * of this. */
	struct block *b = NULL, *clean = NULL, *staged = NULL;
	struct evict_entry *n = evict_victim(&c->lru);
	for (int i = 0; i < 256 && n && !clean; i++, n = evict_walk_next(&c->lru, n)) {
		struct block *cb = (struct block *)((char *)n - offsetof(struct block, lru));
		if (cb->io != BLOCK_IO_NONE)
			continue;
		if (stage && cb->staged) {
			if (!staged)
				staged = cb;
			continue;
		}
		if (!b)
			b = cb;
		if (!s->nvme)
			break;
		if (cb->clean && cb->disk && !spill_region_failed(cb->disk))
			clean = cb;
	}
	if (clean)
		b = clean;
	if (!b)
		b = staged;
	if (!b)
		return -ENOSPC;
	struct extent *e = b->extent;
	uint32_t slot = b->slot;
	if (s->nvme && b->clean && b->disk && !spill_region_failed(b->disk)) {
		store_block_spilled(s, b);
	} else {
		b->ns->c.evictions++;
		if (s->nvme)
			b->ns->c.dirty_drops++;
		evict_evicted(&c->lru, &b->lru); /* a policy may remember it */
		block_unindex(b);
		block_maybe_free(b);
	}
	/* Take the victim's own slot: the one it just gave back. */
	if (slots_is_used(&e->slots, slot) || slots_alloc(&e->slots, ret_slot) < 0)
		return -ENOSPC;
	*ret_e = e;
got:
	c->used_slots++;
	return 0;
}

/* ---- handles ------------------------------------------------------ */

static int handle_new(struct store *s, struct tenant *t, uint8_t kind,
		      struct block *b, uint32_t shard, struct process *owner,
		      struct handle **ret)
{
	uint32_t idx;

	if (t->n_handles_free == 0) {
		uint32_t max = s->config->max_handles;
		if (t->handles_cap >= max)
			return -ENOBUFS;
		uint32_t cap = t->handles_cap ? t->handles_cap * 2 : 64;
		if (cap > max)
			cap = max;
		struct handle **hs = realloc(t->handles, sizeof(*hs) * cap);
		if (hs)
			t->handles = hs;
		uint32_t *gen = realloc(t->handle_gen, sizeof(*gen) * cap);
		if (gen)
			t->handle_gen = gen;
		uint32_t *fr = realloc(t->handle_free, sizeof(*fr) * cap);
		if (fr)
			t->handle_free = fr;
		if (!hs || !gen || !fr)
			return -ENOMEM;
		for (uint32_t i = t->handles_cap; i < cap; i++) {
			t->handles[i] = NULL;
			t->handle_gen[i] = 1;
		}
		for (uint32_t i = cap; i > t->handles_cap; i--)
			t->handle_free[t->n_handles_free++] = i - 1;
		t->handles_cap = cap;
	}
	struct handle *h = fault_hit(FAULT_HANDLE) ? NULL : calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	idx = t->handle_free[--t->n_handles_free];
	h->id = ((uint64_t)t->handle_gen[idx] << 32) | (idx + 1);
	h->kind = kind;
	h->shard = shard;
	h->block = b;
	b->staged = false;
	h->tenant = t;
	h->owner = owner;
	t->handles[idx] = h;
	t->n_handles++;
	b->handles++;
	if (owner)
		process_handle_link(owner, h);
	*ret = h;
	return 0;
}

static struct handle *handle_find(struct tenant *t, uint64_t id)
{
	uint32_t idx = (uint32_t)id;
	if (idx == 0 || idx > t->handles_cap)
		return NULL;
	struct handle *h = t->handles[idx - 1];
	if (!h || h->id != id)
		return NULL;
	return h;
}

/* Forget a handle; the block's own bookkeeping is the caller's. */
static void handle_free(struct tenant *t, struct handle *h)
{
	uint32_t idx = (uint32_t)h->id - 1;

	if (h->owner)
		process_handle_unlink(h->owner, h);
	h->block->handles--;
	t->handles[idx] = NULL;
	t->handle_gen[idx]++;
	if (t->handle_gen[idx] == 0)
		t->handle_gen[idx] = 1;
	t->handle_free[t->n_handles_free++] = idx;
	t->n_handles--;
	free(h);
}

static uint64_t shard_offset(const struct block *b, uint32_t shard)
{
	return (uint64_t)b->slot * b->extent->slot_bytes +
	       (uint64_t)shard * b->ns->geo.shard_stride;
}

static uint64_t all_shards(const struct ns *ns)
{
	return ns->geo.shards >= 64 ? ~UINT64_C(0)
				    : (UINT64_C(1) << ns->geo.shards) - 1;
}

/* ---- operations --------------------------------------------------- */

uint32_t store_lookup(struct store *s, struct ns *ns, const uint8_t *keys,
		      uint32_t n, uint32_t flags, uint8_t *ret_states)
{
	uint32_t leading = 0;

	ns->c.lookups++;
	ns->c.lookup_keys += n;
	/* Backwards, so that a touched chain's head ends up most recently
	 * used: a prefix is worthless without its first block, so its tail
	 * should go first. */
	for (uint32_t i = n; i-- > 0;) {
		struct block *b = index_get(&ns->index, keys + (size_t)i * KVT_KEY_SIZE);
		uint8_t st = KVT_STATE_MISS;
		if (b && b->state == BLOCK_RESIDENT && !b->extent && spill_region_failed(b->disk)) {
			/* Its only copy is on a failed spill file: gone. */
			store_block_drop(s, b);
			b = NULL;
		}
		if (b && b->state == BLOCK_RESIDENT && (!b->extent || b->io == BLOCK_IO_READ)) {
			/* On NVMe: a hit all the same, and staging starts now so
			 * the acquire that follows finds it in host memory. */
			st = KVT_STATE_DISK;
			ns->c.hits++;
			ns->c.disk_hits++;
		} else if (b && b->state == BLOCK_RESIDENT) {
			st = KVT_STATE_HOST;
			ns->c.hits++;
			if (flags & KVT_LOOKUP_TOUCH)
				evict_touch(&ns->cls->lru, &b->lru);
		} else if (b) {
			st = KVT_STATE_PENDING;
			ns->c.pending++;
		} else {
			ns->c.misses++;
		}
		ret_states[i] = st;
	}
	/* Staging in chain order: the head of a prefix is needed first.  One
	 * that cannot start now (no memory for it) or whose copy is gone is a
	 * miss for this lookup: the client computes it rather than wait for a
	 * notification that would never come. */
	for (uint32_t i = 0; s->nvme && i < n; i++) {
		if (ret_states[i] != KVT_STATE_DISK)
			continue;
		struct block *b = index_get(&ns->index, keys + (size_t)i * KVT_KEY_SIZE);
		if (!b || (!b->extent && nvme_stage(s->nvme, b) < 0)) {
			ret_states[i] = KVT_STATE_MISS;
			ns->c.hits--;
			ns->c.disk_hits--;
			ns->c.misses++;
		}
	}
	for (uint32_t i = 0; i < n; i++) {
		if (ret_states[i] != KVT_STATE_HOST && ret_states[i] != KVT_STATE_DISK)
			break;
		leading++;
	}
	return leading;
}

void store_reserve(struct store *s, struct ns *ns, uint32_t shard,
		   const uint8_t *keys, uint32_t n, struct process *owner, int node,
		   struct kvt_slot *ret)
{
	struct tenant *t = ns->tenant;

	for (uint32_t i = 0; i < n; i++) {
		const uint8_t *key = keys + (size_t)i * KVT_KEY_SIZE;
		struct kvt_slot *out = &ret[i];
		struct block *b = index_get(&ns->index, key);
		bool fresh = false;
		struct handle *h;
		int r;

		memset(out, 0, sizeof(*out));
		if (b && b->state == BLOCK_RESIDENT) {
			out->status = -EEXIST;
			continue;
		}
		if (b && ((b->shards_reserved | b->shards_committed) >> shard) & 1) {
			out->status = -EBUSY;
			continue;
		}
		if (!b) {
			struct extent *e;
			uint32_t slot;
			r = class_alloc(s, t, ns->cls, node, false, &e, &slot);
			if (r < 0) {
				ns->c.rejected++;
				out->status = r;
				continue;
			}
			b = fault_hit(FAULT_BLOCK) ? NULL : calloc(1, sizeof(*b));
			if (!b) {
				slots_release(&e->slots, slot);
				ns->cls->used_slots--;
				out->status = -ENOMEM;
				continue;
			}
			memcpy(b->key, key, KVT_KEY_SIZE);
			b->lru.fp = key_fingerprint(s, key);
			b->ns = ns;
			b->extent = e;
			b->slot = slot;
			b->state = BLOCK_RESERVED;
			if (index_put(&ns->index, b) < 0) {
				b->indexed = false;
				block_maybe_free(b);
				out->status = -ENOMEM;
				continue;
			}
			b->indexed = true;
			ns->blocks_reserved++;
			fresh = true;
		}
		r = handle_new(s, t, HANDLE_RESERVATION, b, shard, owner, &h);
		if (r < 0) {
			if (fresh) {
				block_unindex(b);
				block_maybe_free(b);
			}
			ns->c.rejected++;
			out->status = r;
			continue;
		}
		b->shards_reserved |= UINT64_C(1) << shard;
		out->handle = h->id;
		out->extent_id = b->extent->id;
		out->offset = shard_offset(b, shard);
	}
}

void store_acquire(struct store *s, struct ns *ns, uint32_t shard,
		   const uint8_t *keys, uint32_t n, struct process *owner,
		   struct kvt_slot *ret)
{
	for (uint32_t i = 0; i < n; i++) {
		struct block *b = index_get(&ns->index, keys + (size_t)i * KVT_KEY_SIZE);
		struct kvt_slot *out = &ret[i];
		struct handle *h;

		memset(out, 0, sizeof(*out));
		if (!b) {
			out->status = -ENOENT;
			continue;
		}
		if (b->state != BLOCK_RESIDENT) {
			out->status = -EAGAIN;
			continue;
		}
		if (!b->extent || b->io == BLOCK_IO_READ) {
			/* On NVMe: pending; it will be in host memory shortly. */
			if (!b->extent && s->nvme)
				nvme_stage(s->nvme, b);
			out->status = -EAGAIN;
			continue;
		}
		int r = handle_new(s, ns->tenant, HANDLE_LEASE, b, shard, owner, &h);
		if (r < 0) {
			ns->c.rejected++;
			out->status = r;
			continue;
		}
		/* Pinned: off the eviction list until the last lease goes. */
		evict_remove(&ns->cls->lru, &b->lru);
		ns->c.loads++;
		ns->c.load_bytes += ns->geo.shard_bytes;
		out->handle = h->id;
		out->extent_id = b->extent->id;
		out->offset = shard_offset(b, shard);
	}
}

/* End a reservation.  success: the shard's bytes are complete. */
static int reservation_end(struct handle *h, bool success)
{
	struct tenant *t = h->tenant;
	struct block *b = h->block;
	struct ns *ns = b->ns;
	uint64_t bit = UINT64_C(1) << h->shard;
	int r = 0;

	b->shards_reserved &= ~bit;
	handle_free(t, h);
	if (!b->indexed) {
		r = -ECANCELED; /* another shard failed, or the key was deleted */
	} else if (!success) {
		/* One failed shard makes the whole block useless: no rank
		 * may be served a block with a hole in it. */
		ns->c.aborts++;
		block_unindex(b);
	} else {
		b->shards_committed |= bit;
		if (b->shards_committed == all_shards(ns)) {
			b->state = BLOCK_RESIDENT;
			ns->blocks_reserved--;
			ns->blocks_resident++;
			ns->c.stores++;
			ns->c.store_bytes += ns->geo.shard_bytes * ns->geo.shards;
			ns->tenant->dirty += b->extent->slot_bytes;
			lru_maybe_insert(b);
		}
	}
	block_maybe_free(b);
	return r;
}

static void lease_end(struct handle *h)
{
	struct block *b = h->block;

	handle_free(h->tenant, h);
	lru_maybe_insert(b);
	block_maybe_free(b);
}

void store_commit(struct store *s, struct tenant *t,
		  const struct kvt_handle_arg *h, uint32_t n, int32_t *ret)
{
	/* Backwards for the same reason as lookups: a batch is usually a
	 * chain, and its head should be the last to be evicted. */
	for (uint32_t i = n; i-- > 0;) {
		struct handle *hd = handle_find(t, h[i].handle);
		if (!hd)
			ret[i] = -ENOENT;
		else if (hd->kind != HANDLE_RESERVATION)
			ret[i] = -EINVAL;
		else
			ret[i] = reservation_end(hd, h[i].flag != 0);
	}
}

void store_abort(struct store *s, struct tenant *t,
		 const struct kvt_handle_arg *h, uint32_t n, int32_t *ret)
{
	for (uint32_t i = 0; i < n; i++) {
		struct handle *hd = handle_find(t, h[i].handle);
		if (!hd)
			ret[i] = -ENOENT;
		else if (hd->kind != HANDLE_RESERVATION)
			ret[i] = -EINVAL;
		else
			ret[i] = reservation_end(hd, false);
	}
}

void store_release(struct store *s, struct tenant *t,
		   const struct kvt_handle_arg *h, uint32_t n, int32_t *ret)
{
	for (uint32_t i = 0; i < n; i++) {
		struct handle *hd = handle_find(t, h[i].handle);
		if (!hd)
			ret[i] = -ENOENT;
		else if (hd->kind != HANDLE_LEASE)
			ret[i] = -EINVAL;
		else {
			lease_end(hd);
			ret[i] = 0;
		}
	}
}

void store_handle_drop(struct store *s, struct tenant *t, struct handle *h)
{
	if (h->kind == HANDLE_RESERVATION)
		reservation_end(h, false);
	else
		lease_end(h);
}

void store_touch(struct store *s, struct ns *ns, const uint8_t *keys,
		 uint32_t n, int32_t *ret)
{
	for (uint32_t i = 0; i < n; i++) {
		struct block *b = index_get(&ns->index, keys + (size_t)i * KVT_KEY_SIZE);
		if (b && b->state == BLOCK_RESIDENT) {
			evict_touch(&ns->cls->lru, &b->lru); /* a no-op off the list */
			ret[i] = 0;
		} else {
			ret[i] = -ENOENT;
		}
	}
}

struct tenant *store_tenant_by_id(struct store *s, uint32_t id)
{
	for (uint32_t i = 0; i < s->n_tenants; i++)
		if (s->tenants[i]->id == id)
			return s->tenants[i];
	return NULL;
}

/* A block whose host copy can go while its NVMe copy stays the block. */
static bool host_copy_evictable(const struct block *b)
{
	return b->state == BLOCK_RESIDENT && b->extent && b->clean && b->io == BLOCK_IO_NONE &&
	       !b->handles;
}

/* What an eviction from host memory alone leaves: blocks on NVMe only,
 * or being staged from there. */
static bool on_nvme_only(const struct block *b)
{
	return b->state == BLOCK_RESIDENT && b->disk && (!b->extent || b->io == BLOCK_IO_READ);
}

uint64_t store_ns_evict(struct store *s, struct ns *ns, bool drop)
{
	uint64_t n = 0;
	if (!drop) {
		for (size_t i = 0; i < ns->index.cap; i++) {
			struct block *b = ns->index.slots[i];
			if (b && host_copy_evictable(b)) {
				store_block_spilled(s, b);
				n++;
			}
		}
	}
	/* Removal shifts entries back into visited slots: rescan until only
	 * what stays is left. */
	for (bool again = true; again;) {
		again = false;
		for (size_t i = 0; i < ns->index.cap; i++) {
			struct block *b = ns->index.slots[i];
			if (!b || (!drop && on_nvme_only(b)))
				continue;
			ns->c.evictions++;
			block_unindex(b);
			block_maybe_free(b);
			n++;
			again = true;
		}
	}
	return n;
}

void store_prefetch(struct store *s, struct ns *ns, const uint8_t *keys,
		    uint32_t n, int32_t *ret)
{
	for (uint32_t i = 0; i < n; i++) {
		struct block *b = index_get(&ns->index, keys + (size_t)i * KVT_KEY_SIZE);
		if (!b || b->state != BLOCK_RESIDENT) {
			ret[i] = b ? -EINPROGRESS : -ENOENT;
			continue;
		}
		if (b->extent && b->io != BLOCK_IO_READ) {
			ret[i] = 0;
			continue;
		}
		if (!b->extent && s->nvme)
			nvme_stage(s->nvme, b);
		ret[i] = -EINPROGRESS;
	}
}

void store_delete(struct store *s, struct ns *ns, const uint8_t *keys,
		  uint32_t n, int32_t *ret)
{
	for (uint32_t i = 0; i < n; i++) {
		struct block *b = index_get(&ns->index, keys + (size_t)i * KVT_KEY_SIZE);
		if (!b) {
			ret[i] = -ENOENT;
			continue;
		}
		ns->c.deletes++;
		block_unindex(b);
		block_maybe_free(b);
		ret[i] = 0;
	}
}

/* ---- the NVMe tier's transitions (nvme.c does the I/O) ------------- */

int store_host_slot(struct store *s, struct ns *ns, struct block *b)
{
	struct extent *e;
	uint32_t slot;
	int r = class_alloc(s, ns->tenant, ns->cls, -1, true, &e, &slot);
	if (r < 0)
		return r;
	b->extent = e;
	b->slot = slot;
	return 0;
}

/* A clean block leaves host memory: its NVMe copy is the block now. */
void store_block_spilled(struct store *s, struct block *b)
{
	struct ns *ns = b->ns;

	evict_remove(&ns->cls->lru, &b->lru);
	host_slot_release(b);
	b->clean = false;
	ns->blocks_resident--;
	ns->blocks_spilled++;
	ns->c.spills++;
}

/* Staged back and verified: in host memory again, and clean. */
void store_block_restored(struct store *s, struct block *b)
{
	struct ns *ns = b->ns;

	b->io = BLOCK_IO_NONE;
	b->clean = true;
	b->staged = true;
	if (!b->indexed) {
		block_maybe_free(b);
		return;
	}
	ns->blocks_spilled--;
	ns->blocks_resident++;
	ns->c.restores++;
	evict_lru_touch(&ns->disk_lru, &b->disk_lru);
	lru_maybe_insert(b);
	if (s->block_ready)
		s->block_ready(s->userdata, ns, b->key);
}

/* A write-back ended; ok: the host copy is also on NVMe now. */
void store_block_cleaned(struct store *s, struct block *b, bool ok)
{
	b->io = BLOCK_IO_NONE;
	if (ok && b->extent && !b->clean) {
		b->clean = true;
		b->ns->tenant->dirty -= b->extent->slot_bytes;
	}
	if (!b->indexed) {
		block_maybe_free(b);
		return;
	}
	lru_maybe_insert(b);
}

/* A block whose bytes can no longer be trusted: a miss from now on. */
void store_block_drop(struct store *s, struct block *b)
{
	struct ns *ns = b->ns;
	bool staging = b->io == BLOCK_IO_READ;
	uint8_t key[KVT_KEY_SIZE];

	memcpy(key, b->key, KVT_KEY_SIZE);
	block_unindex(b);
	if (staging)
		host_slot_release(b); /* the staging slot, never visible */
	b->io = BLOCK_IO_NONE;
	block_maybe_free(b);
	/* Clients waiting for it to be staged hear that it is settled: their
	 * next LOOKUP says miss, now rather than at their deadline. */
	if (staging && s->block_ready)
		s->block_ready(s->userdata, ns, key);
}

int store_recover_block(struct store *s, const char *tenant, const uint8_t *identity,
			uint32_t identity_len, const uint8_t *key, struct spill_region *r,
			uint32_t slot, uint64_t seq)
{
	struct tenant_choice ch;
	struct tenant *t;
	struct ns *ns;
	char reason[KVT_MAX_REASON];
	unsigned uid;
	int rr;

	/* The tenant as the configuration sees it now. */
	memset(&ch, 0, sizeof(ch));
	snprintf(ch.name, sizeof(ch.name), "%s", tenant);
	if (config_tenant(s->config, tenant))
		ch.configured = true;
	else if (sscanf(tenant, "uid:%u", &uid) == 1)
		ch.uid = (uid_t)uid;
	else
		return 0; /* a tenant the configuration no longer has */
	rr = store_tenant_get(s, &ch, &t);
	if (rr < 0)
		return rr;
	rr = store_ns_open(s, t, identity, identity_len, &ns, reason, sizeof(reason));
	if (rr == -ENOMEM)
		return rr; /* like every other allocation here: recovery stops */
	if (rr < 0)
		return 0; /* a namespace this configuration refuses */
	if (ns->opens)
		ns->opens--; /* recovery is not a client */

	struct block *old = index_get(&ns->index, key);
	if (old) {
		/* The same key twice on disk: the newer copy wins. */
		if (!old->disk || old->disk_seq >= seq)
			return 0;
		spill_slot_free(old->disk, old->disk_slot);
		store_disk_linked(old);
		old->disk = r;
		old->disk_slot = slot;
		old->disk_seq = seq;
		return 1;
	}
	struct block *b = fault_hit(FAULT_BLOCK) ? NULL : calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	memcpy(b->key, key, KVT_KEY_SIZE);
	b->lru.fp = key_fingerprint(s, key);
	b->ns = ns;
	b->state = BLOCK_RESIDENT;
	b->shards_committed = all_shards(ns);
	b->disk = r;
	b->disk_slot = slot;
	b->disk_seq = seq;
	if (index_put(&ns->index, b) < 0) {
		free(b);
		return -ENOMEM;
	}
	b->indexed = true;
	ns->blocks_spilled++;
	store_disk_linked(b);
	return 1;
}
