/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The spill space: which tenant's namespace each region is bound to, the
 * free slots in it, the lists a region is on for its state (free slots of
 * its binding, empty, never bound, kept for a tenant), and what each tenant
 * holds, by which regions are taken back.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>
#include <xxhash.h>

#include "fault.h"
#include "log.h"
#include "spill-private.h"
#include "spill.h"

/* sys/queue.h keeps no membership of its own: off one of the lists, a
 * region's entry for it has tqe_prev NULL (regions start zeroed). */
#define UNLINK(head, r, field)                                  \
	do {                                                    \
		if ((r)->field.tqe_prev) {                      \
			TAILQ_REMOVE(head, r, field);           \
			(r)->field.tqe_prev = NULL;             \
		}                                               \
	} while (0)

/* Put r on exactly the lists its state calls for, and count it for the
 * tenant that holds it. */
void spill_region_relink(struct spill_region *r)
{
	struct spill_file *f = r->file;
	struct spill_binding *b = r->binding;
	bool usable = f->error == 0;
	bool empty = b && r->slots.n_free == r->slots.n;
	bool kept = r->kept_for != NULL;

	/* Partly used regions first, so empty ones stay free for rebinding. */
	if (r->free_of) {
		TAILQ_REMOVE(&r->free_of->free_regions, r, free_link);
		r->free_of = NULL;
	}
	if (usable && b && r->slots.n_free > 0 && !kept) {
		if (empty)
			TAILQ_INSERT_TAIL(&b->free_regions, r, free_link);
		else
			TAILQ_INSERT_HEAD(&b->free_regions, r, free_link);
		r->free_of = b;
	}
	/* A region whose header write is still in flight is not rebound:
	 * two writes of one header in flight could land in either order. */
	UNLINK(&f->spill->empty, r, empty_link);
	if (usable && empty && !r->header && !kept)
		TAILQ_INSERT_TAIL(&f->spill->empty, r, empty_link);
	UNLINK(&f->unbound, r, unbound_link);
	if (usable && !b && !kept)
		TAILQ_INSERT_TAIL(&f->unbound, r, unbound_link);

	struct spill_owner *held = NULL;
	if (usable && kept)
		held = r->kept_for;
	else if (usable && b && (!empty || r->header))
		held = b->owner;
	if (held != r->held_by) {
		if (r->held_by)
			r->held_by->regions--;
		if (held)
			held->regions++;
		r->held_by = held;
	}
}

static uint32_t owner_bucket(uint64_t tenant_hash)
{
	return (uint32_t)(tenant_hash ^ (tenant_hash >> 32)) & (SPILL_OWNER_BUCKETS - 1);
}

/* The tenant's owner record, made with no reference when create is set. */
static struct spill_owner *owner_get(struct spill *s, const char *tenant, uint32_t len,
				     bool create)
{
	uint64_t th = spill_tenant_hash(tenant, len);
	uint32_t bucket = owner_bucket(th);

	for (struct spill_owner *o = s->owners[bucket]; o; o = o->hash_next)
		if (o->tenant_hash == th && o->tenant_len == len && memcmp(o->tenant, tenant, len) == 0)
			return o;
	if (!create)
		return NULL;
	struct spill_owner *o = calloc(1, sizeof(*o));
	if (!o)
		return NULL;
	memcpy(o->tenant, tenant, len);
	o->tenant_len = len;
	o->tenant_hash = th;
	o->hash_next = s->owners[bucket];
	s->owners[bucket] = o;
	return o;
}

/* Drop a reference; the last one frees the record (it holds no region by
 * then: a held region has a binding or a keeper naming it). */
static void owner_put(struct spill *s, struct spill_owner *o)
{
	if (!o || --o->refs > 0)
		return;
	for (struct spill_owner **p = &s->owners[owner_bucket(o->tenant_hash)]; *p;
	     p = &(*p)->hash_next)
		if (*p == o) {
			*p = o->hash_next;
			break;
		}
	free(o);
}

/* r is no longer kept for a tenant: bound by it, or its file failed. */
static void region_keep_end(struct spill_region *r)
{
	struct spill_owner *o = r->kept_for;

	if (!o)
		return;
	r->kept_for = NULL;
	UNLINK(&r->file->spill->kept, r, kept_link);
	spill_region_relink(r);
	owner_put(r->file->spill, o);
}

static uint32_t binding_bucket(const struct spill *s, uint64_t tenant_hash,
			       const uint8_t digest[16], uint64_t slot_bytes)
{
	uint64_t h = tenant_hash ^ kvt_get_le64(digest) ^
		     (slot_bytes * UINT64_C(0x9e3779b97f4a7c15));
	return (uint32_t)(h ^ (h >> 32)) & (s->n_buckets - 1);
}

struct spill_binding *spill_binding_get(struct spill *s, const char *tenant,
					uint32_t tenant_len, const uint8_t *identity,
					uint32_t identity_len, uint64_t slot_bytes,
					bool create)
{
	uint64_t th = spill_tenant_hash(tenant, tenant_len);
	uint8_t digest[16];

	spill_ns_digest(identity, identity_len, digest);
	uint32_t bucket = binding_bucket(s, th, digest, slot_bytes);
	for (struct spill_binding *b = s->buckets[bucket]; b; b = b->hash_next)
		if (b->slot_bytes == slot_bytes && b->tenant_hash == th &&
		    b->tenant_len == tenant_len && b->identity_len == identity_len &&
		    memcmp(b->ns_digest, digest, 16) == 0 &&
		    memcmp(b->tenant, tenant, tenant_len) == 0 &&
		    memcmp(b->identity, identity, identity_len) == 0)
			return b;
	if (!create)
		return NULL;

	struct spill_binding *b = calloc(1, sizeof(*b));
	if (!b)
		return NULL;
	b->identity = malloc(identity_len);
	b->owner = b->identity ? owner_get(s, tenant, tenant_len, true) : NULL;
	if (!b->owner) {
		free(b->identity);
		free(b);
		return NULL;
	}
	b->owner->refs++;
	memcpy(b->tenant, tenant, tenant_len);
	b->tenant_len = tenant_len;
	memcpy(b->identity, identity, identity_len);
	b->identity_len = identity_len;
	b->slot_bytes = slot_bytes;
	b->tenant_hash = th;
	memcpy(b->ns_digest, digest, 16);
	TAILQ_INIT(&b->free_regions);
	b->hash_next = s->buckets[bucket];
	s->buckets[bucket] = b;
	return b;
}

void spill_binding_drop(struct spill *s, struct spill_binding *b)
{
	uint32_t bucket = binding_bucket(s, b->tenant_hash, b->ns_digest, b->slot_bytes);
	for (struct spill_binding **p = &s->buckets[bucket]; *p; p = &(*p)->hash_next)
		if (*p == b) {
			*p = b->hash_next;
			break;
		}
	owner_put(s, b->owner);
	free(b->identity);
	free(b);
}

static void region_unbind(struct spill_region *r)
{
	struct spill_binding *b = r->binding;
	struct spill *s = r->file->spill;

	if (!b)
		return;
	r->binding = NULL;
	slots_free(&r->slots);
	free(r->header);
	r->header = NULL;
	r->generation = 0;
	r->stride = 0;
	spill_region_relink(r);
	if (--b->n_regions == 0)
		spill_binding_drop(s, b);
}

/* Bind r to b.  With write_header, r->header gets the encoded header. */
int spill_region_bind(struct spill_region *r, struct spill_binding *b,
		      uint64_t generation, bool write_header)
{
	struct slots sl;
	uint8_t *hdr = NULL;

	if (write_header) {
		hdr = spill_buf_alloc(SPILL_REGION_HEADER_BYTES);
		if (!hdr)
			return -ENOMEM;
		struct spill_region_header h = {
			.index = r->index,
			.generation = generation,
			.slot_bytes = b->slot_bytes,
			.tenant_len = b->tenant_len,
			.identity_len = b->identity_len,
			.identity = b->identity,
		};
		memcpy(h.tenant, b->tenant, b->tenant_len);
		int k = spill_region_header_encode(&h, hdr, SPILL_REGION_HEADER_BYTES);
		if (k < 0) {
			free(hdr);
			return k;
		}
	}
	if (slots_init(&sl, spill_slots_per_region(b->slot_bytes)) < 0) {
		free(hdr);
		return -ENOMEM;
	}
	/* Count b first: unbinding r from b itself must not drop b. */
	b->n_regions++;
	region_unbind(r);
	r->binding = b;
	r->generation = generation;
	r->stride = spill_stride_for(b->slot_bytes);
	r->slots = sl;
	r->header = hdr;
	spill_region_relink(r);
	return 0;
}

/* Random, so that bytes a tenant once wrote into a region's payloads cannot
 * pass for a slot header of a later binding of that region: the forger
 * would have to guess this number. */
static uint64_t new_generation(void)
{
	static uint64_t counter;
	uint64_t g = 0;

	/* Fails only before the kernel's generator is seeded (early boot). */
	if (getrandom(&g, sizeof(g), GRND_NONBLOCK) != sizeof(g)) {
		uint64_t mix[3] = { kvt_now_ns(), ++counter, (uint64_t)getpid() };
		g = XXH3_64bits(mix, sizeof(mix));
	}
	return g ? g : 1;
}

/* A region a binding of the tenant (owner o, NULL if it has none yet) may
 * take: one emptied for this tenant first (it was taken back from another
 * for it, and no one else may bind it), then a never-bound region, from the
 * files in turn (one device each, often); else an empty region of another
 * binding, which costs a header write.  NULL, with *ret_error, when there
 * is none. */
static struct spill_region *region_to_bind(struct spill *s, const struct spill_owner *o,
					   int *ret_error)
{
	struct spill_region *r = NULL, *k;
	bool usable = false, emptying = false;

	if (o)
		TAILQ_FOREACH(k, &s->kept, kept_link) {
			if (k->kept_for != o)
				continue;
			if (!k->binding || (k->slots.n_free == k->slots.n && !k->header)) {
				r = k;
				break;
			}
			emptying = true;
		}
	for (unsigned i = 0; i < s->n_files && !r; i++) {
		unsigned n = (s->next_file + i) % s->n_files;
		struct spill_file *f = &s->files[n];
		if (f->error)
			continue;
		usable = true;
		if (!TAILQ_EMPTY(&f->unbound)) {
			r = TAILQ_FIRST(&f->unbound);
			s->next_file = (n + 1) % s->n_files;
		}
	}
	if (!r && !TAILQ_EMPTY(&s->empty))
		r = TAILQ_FIRST(&s->empty);
	if (!r)
		*ret_error = emptying ? -EINPROGRESS : usable ? -ENOSPC : -ENODEV;
	return r;
}

int spill_region_find(struct spill *s, const char *tenant,
		      const uint8_t *identity, uint32_t identity_len,
		      uint64_t slot_bytes, struct spill_region **ret)
{
	if (!s || !s->recovered || !tenant || !identity || identity_len == 0 ||
	    identity_len > SPILL_IDENTITY_MAX || slot_bytes == 0)
		return -EINVAL;
	size_t tenant_len = strnlen(tenant, SPILL_TENANT_MAX + 1);
	if (!spill_tenant_valid(tenant, (uint32_t)tenant_len))
		return -EINVAL;
	if (slot_bytes > SPILL_SLOT_BYTES_MAX)
		return -E2BIG;

	struct spill_binding *b = spill_binding_get(s, tenant, (uint32_t)tenant_len, identity,
						    identity_len, slot_bytes, false);
	if (b && !TAILQ_EMPTY(&b->free_regions)) {
		*ret = TAILQ_FIRST(&b->free_regions);
		return 0;
	}

	int k;
	struct spill_owner *o = owner_get(s, tenant, (uint32_t)tenant_len, false);
	struct spill_region *r = region_to_bind(s, o, &k);
	if (!r)
		return k;
	/* Binding allocates the binding, the region header and the slot table
	 * (fault.h). */
	if (fault_hit(FAULT_SPILL_REGION))
		return -ENOMEM;

	bool created = !b;
	if (!b) {
		b = spill_binding_get(s, tenant, (uint32_t)tenant_len, identity, identity_len,
				      slot_bytes, true);
		if (!b)
			return -ENOMEM;
	}
	k = spill_region_bind(r, b, new_generation(), true);
	if (k < 0) {
		if (created)
			spill_binding_drop(s, b);
		return k;
	}
	region_keep_end(r);
	*ret = r;
	return 1;
}

uint32_t spill_tenant_regions(const struct spill *s, const char *tenant)
{
	size_t len = strnlen(tenant, SPILL_TENANT_MAX + 1);
	if (!spill_tenant_valid(tenant, (uint32_t)len))
		return 0;
	const struct spill_owner *o = owner_get((struct spill *)s, tenant, (uint32_t)len, false);
	return o ? o->regions : 0;
}

int spill_region_victim(const struct spill *s, const char *tenant, struct spill_region **ret)
{
	size_t len = strnlen(tenant, SPILL_TENANT_MAX + 1);
	if (!spill_tenant_valid(tenant, (uint32_t)len))
		return -ENOENT;
	const struct spill_owner *o = owner_get((struct spill *)s, tenant, (uint32_t)len, false);
	struct spill_region *best = NULL;
	bool held = false;

	/* A scan of every region: this runs once per region taken back, and
	 * a region holds many slots' worth of write-backs. */
	for (unsigned i = 0; o && o->regions && i < s->n_files; i++) {
		struct spill_file *f = &s->files[i];
		for (uint32_t j = 0; j < f->n_regions; j++) {
			struct spill_region *r = &f->regions[j];
			if (r->held_by != o || !r->binding || r->binding->owner != o)
				continue;
			held = true;
			if (r->kept_for || r->ios || r->header)
				continue;
			if (!best || r->slots.n_free > best->slots.n_free)
				best = r;
		}
	}
	if (!best)
		return held ? -EBUSY : -ENOENT;
	*ret = best;
	return 0;
}

int spill_region_reclaim(struct spill_region *r, const char *tenant)
{
	struct spill *s = r->file->spill;
	size_t len = strnlen(tenant, SPILL_TENANT_MAX + 1);

	if (!r->binding || !spill_tenant_valid(tenant, (uint32_t)len))
		return -EINVAL;
	if (r->file->error)
		return -EIO;
	if (r->kept_for || r->ios || r->header)
		return -EBUSY;
	struct spill_owner *o = owner_get(s, tenant, (uint32_t)len, true);
	if (!o)
		return -ENOMEM;
	o->refs++;
	r->kept_for = o;
	TAILQ_INSERT_TAIL(&s->kept, r, kept_link);
	spill_region_relink(r);
	return 0;
}

void spill_region_header_written(struct spill_region *r)
{
	free(r->header);
	r->header = NULL;
	spill_region_relink(r);
}

int spill_slot_alloc(struct spill_region *r, uint32_t *ret)
{
	if (!r->binding)
		return -EINVAL;
	if (r->file->error)
		return -EIO;
	int k = slots_alloc(&r->slots, ret);
	if (k < 0)
		return k;
	spill_region_relink(r);
	return 0;
}

int spill_region_slot_release(struct spill_region *r, uint32_t slot)
{
	if (!r->binding)
		return -EINVAL;
	int k = slots_release(&r->slots, slot);
	if (k < 0)
		return k;
	spill_region_relink(r);
	return 0;
}

int spill_slot_free(struct spill_region *r, uint32_t slot)
{
	int k = spill_region_slot_release(r, slot);
	if (k == 0)
		r->file->spill->slot_frees++;
	return k;
}

uint64_t spill_slot_offset(const struct spill_region *r, uint32_t slot)
{
	return r->offset + SPILL_REGION_HEADER_BYTES + (uint64_t)slot * r->stride;
}

uint64_t spill_slot_stride(const struct spill_region *r)
{
	return r->stride;
}

uint64_t spill_next_seq(struct spill *s)
{
	return s->next_seq++;
}

void spill_file_fail(struct spill_file *f, int error)
{
	uint64_t used = 0;

	if (f->error)
		return;
	f->error = error < 0 ? error : error > 0 ? -error : -EIO;
	for (uint32_t i = 0; i < f->n_regions; i++) {
		struct spill_region *r = &f->regions[i];
		if (r->binding)
			used += r->slots.n - r->slots.n_free;
		/* Its tenant waits for a region that will never be free. */
		region_keep_end(r);
		spill_region_relink(r);
	}
	log_error_errno(f->error,
			"Spill file '%s' failed: %m. Its %" PRIu32 " regions take no more blocks and its %" PRIu64 " spilled blocks are dropped; the host tier keeps serving. Check the device (kernel log), then restart kvtierd to use the file again",
			f->path, f->n_regions, used);
}
