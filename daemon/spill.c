/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "config.h"
#include "fault.h"
#include "log.h"
#include "size.h"
#include "spill.h"

/* Region header layout (docs/nvme.md). */
#define RH_MAGIC "KVTSPRG1"
#define RH_VERSION 8
#define RH_INDEX 12
#define RH_GENERATION 16
#define RH_SLOT_BYTES 24
#define RH_TENANT_LEN 32
#define RH_IDENTITY_LEN 36
#define RH_TENANT 40
#define RH_IDENTITY 72

/* Slot header layout. */
#define SH_MAGIC "KVTSPSL1"
#define SH_VERSION 8
#define SH_REGION 12
#define SH_SLOT 16
#define SH_RESERVED 20
#define SH_GENERATION 24
#define SH_TENANT_HASH 32
#define SH_NS_DIGEST 40
#define SH_KEY 56
#define SH_PAYLOAD_LEN 88
#define SH_SEQ 96
#define SH_PAYLOAD_SUM 104
#define SH_SUM 112
#define SH_END 120

_Static_assert(SPILL_TENANT_MAX == CONFIG_MAX_TENANT_NAME,
	       "a region header holds any configured tenant name");
_Static_assert(RH_IDENTITY + SPILL_IDENTITY_MAX + 8 <= SPILL_REGION_HEADER_BYTES,
	       "the longest identity fits the region header");
_Static_assert(SPILL_REGION_HEADER_BYTES % SPILL_ALIGN == 0 &&
	       SPILL_SLOT_HEADER_BYTES % SPILL_ALIGN == 0 &&
	       SPILL_REGION_BYTES % SPILL_ALIGN == 0, "O_DIRECT alignment");

/* Recovery reads whole regions in chunks of this size when slots are small:
 * one sequential read beats one 4 KiB read per slot below ~64 KiB strides. */
#define RECOVER_CHUNK (UINT64_C(4) << 20)
#define RECOVER_SEQUENTIAL_STRIDE (UINT64_C(64) << 10)
#define RECOVER_PROGRESS_NS (UINT64_C(5) * 1000000000)

#define BINDING_BUCKETS 1024u
#define OWNER_BUCKETS 256u
#define MAX_SLOTS_PER_REGION \
	((SPILL_REGION_BYTES - SPILL_REGION_HEADER_BYTES) / \
	 (SPILL_SLOT_HEADER_BYTES + SPILL_ALIGN))

static void put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_le32(const uint8_t *p)
{
	uint32_t v = 0;
	for (int i = 3; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static uint64_t get_le64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static bool all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void *spill_buf_alloc(size_t len)
{
	size_t n = (len + SPILL_ALIGN - 1) / SPILL_ALIGN * SPILL_ALIGN;
	void *p = aligned_alloc(SPILL_ALIGN, n ? n : SPILL_ALIGN);
	if (p)
		memset(p, 0, n ? n : SPILL_ALIGN);
	return p;
}

/*
 * Pure format functions.
 */

uint64_t spill_payload_sum(const void *payload, size_t len)
{
	return XXH3_64bits(payload, len);
}

uint64_t spill_tenant_hash(const char *tenant, size_t len)
{
	return XXH3_64bits(tenant, len);
}

void spill_ns_digest(const uint8_t *identity, size_t len, uint8_t ret[16])
{
	XXH128_hash_t h = XXH3_128bits(identity, len);
	put_le64(ret, h.low64);
	put_le64(ret + 8, h.high64);
}

uint64_t spill_stride_for(uint64_t slot_bytes)
{
	return SPILL_SLOT_HEADER_BYTES +
	       (slot_bytes + SPILL_ALIGN - 1) / SPILL_ALIGN * SPILL_ALIGN;
}

uint32_t spill_slots_per_region(uint64_t slot_bytes)
{
	if (slot_bytes == 0 || slot_bytes > SPILL_SLOT_BYTES_MAX)
		return 0;
	return (uint32_t)((SPILL_REGION_BYTES - SPILL_REGION_HEADER_BYTES) /
			  spill_stride_for(slot_bytes));
}

static bool tenant_valid(const char *tenant, uint32_t len)
{
	if (len == 0 || len > SPILL_TENANT_MAX)
		return false;
	return memchr(tenant, 0, len) == NULL;
}

int spill_region_header_encode(const struct spill_region_header *h,
			       uint8_t *buf, size_t len)
{
	if (len < SPILL_REGION_HEADER_BYTES || !tenant_valid(h->tenant, h->tenant_len) ||
	    h->identity_len == 0 || h->identity_len > SPILL_IDENTITY_MAX || !h->identity ||
	    h->generation == 0 || spill_slots_per_region(h->slot_bytes) == 0)
		return -EINVAL;
	memset(buf, 0, SPILL_REGION_HEADER_BYTES);
	memcpy(buf, RH_MAGIC, 8);
	put_le32(buf + RH_VERSION, SPILL_FORMAT_VERSION);
	put_le32(buf + RH_INDEX, h->index);
	put_le64(buf + RH_GENERATION, h->generation);
	put_le64(buf + RH_SLOT_BYTES, h->slot_bytes);
	put_le32(buf + RH_TENANT_LEN, h->tenant_len);
	put_le32(buf + RH_IDENTITY_LEN, h->identity_len);
	memcpy(buf + RH_TENANT, h->tenant, h->tenant_len);
	memcpy(buf + RH_IDENTITY, h->identity, h->identity_len);
	size_t end = RH_IDENTITY + h->identity_len;
	put_le64(buf + end, XXH3_64bits(buf, end));
	return 0;
}

int spill_region_header_decode(const uint8_t *buf, size_t len,
			       struct spill_region_header *ret)
{
	struct spill_region_header h = {0};

	if (len < SPILL_REGION_HEADER_BYTES)
		return -EINVAL;
	if (all_zero(buf, SPILL_REGION_HEADER_BYTES))
		return -ENODATA;
	if (memcmp(buf, RH_MAGIC, 8) != 0)
		return -EBADMSG;
	if (get_le32(buf + RH_VERSION) != SPILL_FORMAT_VERSION)
		return -EPROTONOSUPPORT;
	h.index = get_le32(buf + RH_INDEX);
	h.generation = get_le64(buf + RH_GENERATION);
	h.slot_bytes = get_le64(buf + RH_SLOT_BYTES);
	h.tenant_len = get_le32(buf + RH_TENANT_LEN);
	h.identity_len = get_le32(buf + RH_IDENTITY_LEN);
	if (h.identity_len == 0 || h.identity_len > SPILL_IDENTITY_MAX)
		return -EBADMSG;
	size_t end = RH_IDENTITY + h.identity_len;
	if (get_le64(buf + end) != XXH3_64bits(buf, end))
		return -EBADMSG;
	/* Past the checksum the header is zeros, so that no byte of it can
	 * change unnoticed. */
	if (!all_zero(buf + end + 8, SPILL_REGION_HEADER_BYTES - end - 8))
		return -EBADMSG;
	if (h.tenant_len == 0 || h.tenant_len > SPILL_TENANT_MAX ||
	    !tenant_valid((const char *)buf + RH_TENANT, h.tenant_len) ||
	    !all_zero(buf + RH_TENANT + h.tenant_len, 32 - h.tenant_len) ||
	    h.generation == 0 || spill_slots_per_region(h.slot_bytes) == 0)
		return -EBADMSG;
	memcpy(h.tenant, buf + RH_TENANT, h.tenant_len);
	h.tenant[h.tenant_len] = 0;
	h.identity = buf + RH_IDENTITY;
	*ret = h;
	return 0;
}

void spill_slot_header_init(struct spill_slot_header *h,
			    const struct spill_region *r, uint32_t slot,
			    const uint8_t key[KVT_KEY_SIZE], uint64_t payload_len,
			    uint64_t seq, uint64_t payload_sum)
{
	memset(h, 0, sizeof(*h));
	h->region = r->index;
	h->slot = slot;
	h->generation = r->generation;
	if (r->binding) {
		h->tenant_hash = r->binding->tenant_hash;
		memcpy(h->ns_digest, r->binding->ns_digest, 16);
	}
	memcpy(h->key, key, KVT_KEY_SIZE);
	h->payload_len = payload_len;
	h->seq = seq;
	h->payload_sum = payload_sum;
}

int spill_slot_header_encode(const struct spill_slot_header *h, uint8_t *buf,
			     size_t len)
{
	if (len < SPILL_SLOT_HEADER_BYTES)
		return -EINVAL;
	memset(buf, 0, SPILL_SLOT_HEADER_BYTES);
	memcpy(buf, SH_MAGIC, 8);
	put_le32(buf + SH_VERSION, SPILL_FORMAT_VERSION);
	put_le32(buf + SH_REGION, h->region);
	put_le32(buf + SH_SLOT, h->slot);
	put_le64(buf + SH_GENERATION, h->generation);
	put_le64(buf + SH_TENANT_HASH, h->tenant_hash);
	memcpy(buf + SH_NS_DIGEST, h->ns_digest, 16);
	memcpy(buf + SH_KEY, h->key, KVT_KEY_SIZE);
	put_le64(buf + SH_PAYLOAD_LEN, h->payload_len);
	put_le64(buf + SH_SEQ, h->seq);
	put_le64(buf + SH_PAYLOAD_SUM, h->payload_sum);
	put_le64(buf + SH_SUM, XXH3_64bits(buf, SH_SUM));
	return 0;
}

int spill_slot_header_decode(const uint8_t *buf, size_t len,
			     struct spill_slot_header *ret)
{
	struct spill_slot_header h;

	if (len < SPILL_SLOT_HEADER_BYTES)
		return -EINVAL;
	if (all_zero(buf, SPILL_SLOT_HEADER_BYTES))
		return -ENODATA;
	if (memcmp(buf, SH_MAGIC, 8) != 0)
		return -EBADMSG;
	if (get_le32(buf + SH_VERSION) != SPILL_FORMAT_VERSION)
		return -EPROTONOSUPPORT;
	if (get_le64(buf + SH_SUM) != XXH3_64bits(buf, SH_SUM) ||
	    get_le32(buf + SH_RESERVED) != 0 ||
	    !all_zero(buf + SH_END, SPILL_SLOT_HEADER_BYTES - SH_END))
		return -EBADMSG;
	h.region = get_le32(buf + SH_REGION);
	h.slot = get_le32(buf + SH_SLOT);
	h.generation = get_le64(buf + SH_GENERATION);
	h.tenant_hash = get_le64(buf + SH_TENANT_HASH);
	memcpy(h.ns_digest, buf + SH_NS_DIGEST, 16);
	memcpy(h.key, buf + SH_KEY, KVT_KEY_SIZE);
	h.payload_len = get_le64(buf + SH_PAYLOAD_LEN);
	h.seq = get_le64(buf + SH_SEQ);
	h.payload_sum = get_le64(buf + SH_PAYLOAD_SUM);
	if (h.generation == 0 || h.seq == 0 || h.payload_len == 0 ||
	    h.payload_len > SPILL_SLOT_BYTES_MAX)
		return -EBADMSG;
	*ret = h;
	return 0;
}

int spill_slot_header_match(const struct spill_slot_header *h,
			    const struct spill_region *r, uint32_t slot)
{
	const struct spill_binding *b = r->binding;

	if (!b || h->region != r->index || h->slot != slot || slot >= r->slots.n ||
	    h->generation != r->generation || h->tenant_hash != b->tenant_hash ||
	    memcmp(h->ns_digest, b->ns_digest, 16) != 0 ||
	    h->payload_len == 0 || h->payload_len > b->slot_bytes)
		return -ESTALE;
	return 0;
}

int spill_slot_header_verify(const struct spill_slot_header *h,
			     const struct spill_region *r, uint32_t slot,
			     const uint8_t key[KVT_KEY_SIZE], uint64_t payload_len,
			     uint64_t seq)
{
	if (spill_slot_header_match(h, r, slot) < 0 || h->payload_len != payload_len ||
	    h->seq != seq || memcmp(h->key, key, KVT_KEY_SIZE) != 0)
		return -ESTALE;
	return 0;
}

int spill_slot_check(const uint8_t *buf, size_t len,
		     const struct spill_region *r, uint32_t slot,
		     const uint8_t key[KVT_KEY_SIZE], uint64_t payload_len,
		     uint64_t seq, struct spill_slot_header *ret)
{
	struct spill_slot_header h;
	int r2 = spill_slot_header_decode(buf, len, &h);
	if (r2 < 0)
		return r2;
	r2 = spill_slot_header_verify(&h, r, slot, key, payload_len, seq);
	if (r2 < 0)
		return r2;
	if (ret)
		*ret = h;
	return 0;
}

int spill_payload_check(const struct spill_slot_header *h, const void *payload)
{
	return spill_payload_sum(payload, h->payload_len) == h->payload_sum ? 0 : -EBADMSG;
}

/*
 * Lists, bindings and regions.
 */

#define link_entry(l, type, member) \
	((type *)((char *)(l) - offsetof(type, member)))

static void list_init(struct spill_link *head)
{
	head->prev = head->next = head;
}

static bool list_is_empty(const struct spill_link *head)
{
	return head->next == head;
}

static void link_remove(struct spill_link *l)
{
	if (!l->prev)
		return;
	l->prev->next = l->next;
	l->next->prev = l->prev;
	l->prev = l->next = NULL;
}

static void link_add(struct spill_link *head, struct spill_link *l, bool tail)
{
	struct spill_link *prev = tail ? head->prev : head;
	l->prev = prev;
	l->next = prev->next;
	prev->next->prev = l;
	prev->next = l;
}

/* Put r on exactly the lists its state calls for, and count it for the
 * tenant that holds it. */
static void region_relink(struct spill_region *r)
{
	struct spill_file *f = r->file;
	struct spill_binding *b = r->binding;
	bool usable = f->error == 0;
	bool empty = b && r->slots.n_free == r->slots.n;
	bool kept = r->kept_for != NULL;

	/* Partly used regions first, so empty ones stay free for rebinding. */
	link_remove(&r->free_link);
	if (usable && b && r->slots.n_free > 0 && !kept)
		link_add(&b->free_regions, &r->free_link, empty);
	/* A region whose header write is still in flight is not rebound:
	 * two writes of one header in flight could land in either order. */
	link_remove(&r->empty_link);
	if (usable && empty && !r->header && !kept)
		link_add(&f->spill->empty, &r->empty_link, true);
	link_remove(&r->unbound_link);
	if (usable && !b && !kept)
		link_add(&f->unbound, &r->unbound_link, true);

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
	return (uint32_t)(tenant_hash ^ (tenant_hash >> 32)) & (OWNER_BUCKETS - 1);
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
	link_remove(&r->kept_link);
	region_relink(r);
	owner_put(r->file->spill, o);
}

static uint32_t binding_bucket(const struct spill *s, uint64_t tenant_hash,
			       const uint8_t digest[16], uint64_t slot_bytes)
{
	uint64_t h = tenant_hash ^ get_le64(digest) ^
		     (slot_bytes * UINT64_C(0x9e3779b97f4a7c15));
	return (uint32_t)(h ^ (h >> 32)) & (s->n_buckets - 1);
}

static struct spill_binding *binding_get(struct spill *s, const char *tenant,
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
	list_init(&b->free_regions);
	b->hash_next = s->buckets[bucket];
	s->buckets[bucket] = b;
	return b;
}

static void binding_drop(struct spill *s, struct spill_binding *b)
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
	region_relink(r);
	if (--b->n_regions == 0)
		binding_drop(s, b);
}

/* Bind r to b.  With write_header, r->header gets the encoded header. */
static int region_bind(struct spill_region *r, struct spill_binding *b,
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
	region_relink(r);
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
		uint64_t mix[3] = { now_ns(), ++counter, (uint64_t)getpid() };
		g = XXH3_64bits(mix, sizeof(mix));
	}
	return g ? g : 1;
}

int spill_region_find(struct spill *s, const char *tenant,
		      const uint8_t *identity, uint32_t identity_len,
		      uint64_t slot_bytes, struct spill_region **ret)
{
	if (!s || !s->recovered || !tenant || !identity || identity_len == 0 ||
	    identity_len > SPILL_IDENTITY_MAX || slot_bytes == 0)
		return -EINVAL;
	size_t tenant_len = strnlen(tenant, SPILL_TENANT_MAX + 1);
	if (!tenant_valid(tenant, (uint32_t)tenant_len))
		return -EINVAL;
	if (slot_bytes > SPILL_SLOT_BYTES_MAX)
		return -E2BIG;

	struct spill_binding *b = binding_get(s, tenant, (uint32_t)tenant_len, identity,
					      identity_len, slot_bytes, false);
	if (b && !list_is_empty(&b->free_regions)) {
		*ret = link_entry(b->free_regions.next, struct spill_region, free_link);
		return 0;
	}

	/* A region emptied for this tenant first: it was taken back from
	 * another for it, and no one else may bind it.  Then a never-bound
	 * region, from the files in turn (one device each, often); else an
	 * empty region of another binding, which costs a header write. */
	struct spill_region *r = NULL;
	bool usable = false, emptying = false;
	struct spill_owner *o = owner_get(s, tenant, (uint32_t)tenant_len, false);
	for (struct spill_link *l = s->kept.next; o && l != &s->kept && !r; l = l->next) {
		struct spill_region *k = link_entry(l, struct spill_region, kept_link);
		if (k->kept_for != o)
			continue;
		if (!k->binding || (k->slots.n_free == k->slots.n && !k->header))
			r = k;
		else
			emptying = true;
	}
	for (unsigned i = 0; i < s->n_files && !r; i++) {
		unsigned n = (s->next_file + i) % s->n_files;
		struct spill_file *f = &s->files[n];
		if (f->error)
			continue;
		usable = true;
		if (!list_is_empty(&f->unbound)) {
			r = link_entry(f->unbound.next, struct spill_region, unbound_link);
			s->next_file = (n + 1) % s->n_files;
		}
	}
	if (!r && !list_is_empty(&s->empty))
		r = link_entry(s->empty.next, struct spill_region, empty_link);
	if (!r)
		return emptying ? -EINPROGRESS : usable ? -ENOSPC : -ENODEV;
	/* Binding allocates the binding, the region header and the slot table
	 * (fault.h). */
	if (fault_hit(FAULT_SPILL_REGION))
		return -ENOMEM;

	bool created = !b;
	if (!b) {
		b = binding_get(s, tenant, (uint32_t)tenant_len, identity, identity_len,
				slot_bytes, true);
		if (!b)
			return -ENOMEM;
	}
	int k = region_bind(r, b, new_generation(), true);
	if (k < 0) {
		if (created)
			binding_drop(s, b);
		return k;
	}
	region_keep_end(r);
	*ret = r;
	return 1;
}

uint32_t spill_tenant_regions(const struct spill *s, const char *tenant)
{
	size_t len = strnlen(tenant, SPILL_TENANT_MAX + 1);
	if (!tenant_valid(tenant, (uint32_t)len))
		return 0;
	const struct spill_owner *o = owner_get((struct spill *)s, tenant, (uint32_t)len, false);
	return o ? o->regions : 0;
}

int spill_region_victim(const struct spill *s, const char *tenant, struct spill_region **ret)
{
	size_t len = strnlen(tenant, SPILL_TENANT_MAX + 1);
	if (!tenant_valid(tenant, (uint32_t)len))
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

	if (!r->binding || !tenant_valid(tenant, (uint32_t)len))
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
	link_add(&s->kept, &r->kept_link, true);
	region_relink(r);
	return 0;
}

void spill_region_header_written(struct spill_region *r)
{
	free(r->header);
	r->header = NULL;
	region_relink(r);
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
	region_relink(r);
	return 0;
}

static int region_slot_release(struct spill_region *r, uint32_t slot)
{
	if (!r->binding)
		return -EINVAL;
	int k = slots_release(&r->slots, slot);
	if (k < 0)
		return k;
	region_relink(r);
	return 0;
}

int spill_slot_free(struct spill_region *r, uint32_t slot)
{
	int k = region_slot_release(r, slot);
	/* During recovery only fn frees, and only slots it kept before. */
	if (k == 0 && !r->file->spill->recovered)
		r->file->spill->recovery_frees++;
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
		region_relink(r);
	}
	log_error_errno(f->error,
			"Spill file '%s' failed: %m. Its %" PRIu32 " regions take no more blocks and its %" PRIu64 " spilled blocks are dropped; the host tier keeps serving. Check the device (kernel log), then restart kvtierd to use the file again",
			f->path, f->n_regions, used);
}

/*
 * Opening files.
 */

static int open_error(const char *path, int r)
{
	char *copy = strdup(path);
	const char *dir = copy ? dirname(copy) : "its directory";

	switch (-r) {
	case ENOENT:
	case ENOTDIR:
		r = log_error_errno(r, "Directory '%s' of spill file '%s' does not exist: %m; create it (owned by kvtierd's user, mode 0700) or choose another path",
				    dir, path);
		break;
	case EROFS:
		r = log_error_errno(r, "Spill file '%s' is on a read-only file system: %m. Under systemd, ProtectSystem=strict leaves only listed paths writable: add a drop-in (systemctl edit kvtierd) with ReadWritePaths=%s, or keep spill files in the default CacheDirectory /var/cache/kvtierd",
				    path, dir);
		break;
	case EACCES:
	case EPERM:
		r = log_error_errno(r, "Cannot open spill file '%s': %m; kvtierd's user needs write access to '%s' and the file",
				    path, dir);
		break;
	case EISDIR:
		r = log_error_errno(r, "Spill file '%s' is a directory; give the path of a file (it is created)",
				    path);
		break;
	case EINVAL:
		r = log_error_errno(r, "The file system of spill file '%s' does not support O_DIRECT: %m. Spill I/O bypasses the page cache; put the file on a local file system that supports it, such as ext4 or XFS",
				    path);
		break;
	default:
		r = log_error_errno(r, "Failed to open spill file '%s': %m", path);
		break;
	}
	free(copy);
	return r;
}

static int open_direct(const char *path)
{
	const char *no_direct = getenv(SPILL_NO_DIRECT_ENV);
	int fd;

	if (no_direct && strcmp(no_direct, "1") == 0)
		return -EINVAL;
	fd = open(path, O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
	if (fd >= 0)
		return fd;
	int r = -errno;
	if (r == -EINVAL) {
		/* EINVAL from open() means O_DIRECT unless the plain open fails
		 * too, for its own reason. */
		fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (fd < 0)
			return errno == EINVAL ? -EIO : -errno;
		close(fd);
	}
	return r;
}

/* A killed predecessor's I/O can still be landing in the file and holds its
 * lock until it does: wait for it a little before calling it a conflict. */
static int lock_file(const char *path, int fd)
{
	uint64_t start = now_ns();
	bool said = false;

	for (;;) {
		if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
			if (said)
				log_info("Locked spill file '%s' after %" PRIu64 " ms", path,
					 (now_ns() - start) / 1000000);
			return 0;
		}
		if (errno == EINTR)
			continue;
		if (errno != EWOULDBLOCK)
			return log_error_errno(-errno, "Failed to lock spill file '%s': %m", path);
		if (now_ns() - start >= (uint64_t)SPILL_LOCK_WAIT_MS * 1000000)
			return log_error_errno(-EBUSY, "Another kvtierd holds spill file '%s' (flock): stop it first, or give this instance other spill paths",
					       path);
		if (!said) {
			log_info("Spill file '%s' is locked; waiting up to %d ms for a previous instance's I/O to finish",
				 path, SPILL_LOCK_WAIT_MS);
			said = true;
		}
		nanosleep(&(struct timespec){ .tv_nsec = 10 * 1000000 }, NULL);
	}
}

static int check_dio_alignment(const char *path, int fd)
{
#ifdef STATX_DIOALIGN
	struct statx stx;

	if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 &&
	    (stx.stx_mask & STATX_DIOALIGN) && stx.stx_dio_offset_align > SPILL_ALIGN)
		return log_error_errno(-EINVAL, "Spill file '%s' needs O_DIRECT I/O aligned to %" PRIu32 " bytes; kvtier aligns to %u. Use a device or file system with 4 KiB (or 512-byte) logical blocks",
				       path, stx.stx_dio_offset_align, SPILL_ALIGN);
#endif
	return 0;
}

static int preallocate(struct spill_file *f, const struct stat *st)
{
	char want[32], have[32];
	struct statvfs sv;
	uint64_t allocated = (uint64_t)st->st_blocks * 512;
	uint64_t need = f->capacity > allocated ? f->capacity - allocated : 0;

	/* Ask first: ext4 would fill the file system block by block before
	 * giving up with ENOSPC. */
	if (need > 0 && fstatvfs(f->fd, &sv) == 0 &&
	    (uint64_t)sv.f_bavail * sv.f_frsize < need)
		return log_error_errno(-ENOSPC, "Not enough space on the file system for spill file '%s': %s requested, %s free (statvfs); lower its capacity or free space",
				       f->path, kvt_size_format_exact(f->capacity, want, sizeof(want)),
				       kvt_size_format_exact((uint64_t)sv.f_bavail * sv.f_frsize, have, sizeof(have)));

	/* Mode 0 extends a shorter file and never shrinks a longer one; blocks
	 * already allocated, and their data, stay. */
	if (fallocate(f->fd, 0, 0, (off_t)f->capacity) == 0)
		return 0;
	int r = -errno;
	struct stat now;
	if (fstat(f->fd, &now) == 0 && now.st_size > st->st_size &&
	    ftruncate(f->fd, st->st_size) < 0)
		log_warning_errno(-errno, "Failed to give the space of spill file '%s' back after a failed preallocation, ignoring: %m",
				  f->path);
	switch (-r) {
	case ENOSPC:
	case EDQUOT:
		if (fstatvfs(f->fd, &sv) < 0)
			memset(&sv, 0, sizeof(sv));
		return log_error_errno(r, "Not enough space on the file system for spill file '%s': %s requested, %s free (statvfs); lower its capacity or free space",
				       f->path, kvt_size_format_exact(f->capacity, want, sizeof(want)),
				       kvt_size_format_exact((uint64_t)sv.f_bavail * sv.f_frsize, have, sizeof(have)));
	case EOPNOTSUPP:
		return log_error_errno(r, "The file system of spill file '%s' cannot preallocate (fallocate: %m); O_DIRECT writes into unallocated space are serialised, so use ext4 or XFS",
				       f->path);
	case EFBIG:
		return log_error_errno(r, "Capacity %s of spill file '%s' exceeds the largest file its file system allows: %m",
				       kvt_size_format_exact(f->capacity, want, sizeof(want)), f->path);
	default:
		return log_error_errno(r, "Failed to preallocate spill file '%s' to %s: %m",
				       f->path, kvt_size_format_exact(f->capacity, want, sizeof(want)));
	}
}

static int file_open(struct spill *s, struct spill_file *f, const struct spill_file_conf *c)
{
	char buf[32], buf2[32];
	struct stat st;
	int r;

	f->capacity = c->capacity;
	if (c->capacity < SPILL_REGION_BYTES)
		return log_error_errno(-EINVAL, "Spill file '%s': capacity %s is too small: at least 64M (one region)",
				       c->path, kvt_size_format_exact(c->capacity, buf, sizeof(buf)));
	if (c->capacity / SPILL_REGION_BYTES > UINT32_MAX)
		return log_error_errno(-EFBIG, "Spill file '%s': capacity %s is too large",
				       c->path, kvt_size_format_exact(c->capacity, buf, sizeof(buf)));
	f->path = strdup(c->path);
	if (!f->path)
		return -ENOMEM;

	f->fd = open_direct(c->path);
	if (f->fd < 0) {
		r = f->fd;
		f->fd = -1;
		return open_error(c->path, r);
	}
	if (fstat(f->fd, &st) < 0)
		return log_error_errno(-errno, "Failed to stat spill file '%s': %m", c->path);
	if (!S_ISREG(st.st_mode))
		return log_error_errno(-EINVAL, "Spill file '%s' is not a regular file", c->path);
	/* Before locking: our own lock on the first path would otherwise read
	 * as another daemon's. */
	for (struct spill_file *o = s->files; o < f; o++) {
		struct stat ost;
		if (fstat(o->fd, &ost) == 0 && ost.st_dev == st.st_dev && ost.st_ino == st.st_ino)
			return log_error_errno(-EINVAL, "Spill files '%s' and '%s' are the same file; list each file once",
					       o->path, c->path);
	}
	r = lock_file(c->path, f->fd);
	if (r < 0)
		return r;
	r = check_dio_alignment(c->path, f->fd);
	if (r < 0)
		return r;
	/* Again: it may have changed while we waited for the lock. */
	if (fstat(f->fd, &st) < 0)
		return log_error_errno(-errno, "Failed to stat spill file '%s': %m", c->path);
	r = preallocate(f, &st);
	if (r < 0)
		return r;
	if ((uint64_t)st.st_size > c->capacity)
		log_notice("Spill file '%s' is %s, larger than its capacity %s: only the first %s are used and the rest is left as it is (truncate the file to reclaim it)",
			   c->path, kvt_size_format_exact((uint64_t)st.st_size, buf, sizeof(buf)),
			   kvt_size_format_exact(c->capacity, buf2, sizeof(buf2)), buf2);
	else if ((uint64_t)st.st_size < c->capacity && st.st_size > 0)
		log_info("Spill file '%s' extended from %s to its capacity %s", c->path,
			 kvt_size_format_exact((uint64_t)st.st_size, buf, sizeof(buf)),
			 kvt_size_format_exact(c->capacity, buf2, sizeof(buf2)));

	f->n_regions = (uint32_t)(c->capacity / SPILL_REGION_BYTES);
	f->regions = calloc(f->n_regions, sizeof(*f->regions));
	if (!f->regions)
		return -ENOMEM;
	for (uint32_t i = 0; i < f->n_regions; i++) {
		f->regions[i].file = f;
		f->regions[i].index = i;
		f->regions[i].offset = (uint64_t)i * SPILL_REGION_BYTES;
	}
	if (c->capacity % SPILL_REGION_BYTES)
		log_info("Spill file '%s': the last %s of its capacity are less than a region (64M) and stay unused",
			 c->path, kvt_size_format_exact(c->capacity % SPILL_REGION_BYTES, buf, sizeof(buf)));
	return 0;
}

int spill_open(const struct spill_file_conf *conf, unsigned n, struct spill **ret)
{
	struct spill *s;
	int r;

	if (n == 0 || !conf)
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->next_seq = 1;
	list_init(&s->empty);
	list_init(&s->kept);
	s->n_buckets = BINDING_BUCKETS;
	s->buckets = calloc(s->n_buckets, sizeof(*s->buckets));
	s->owners = calloc(OWNER_BUCKETS, sizeof(*s->owners));
	s->files = calloc(n, sizeof(*s->files));
	if (!s->buckets || !s->owners || !s->files) {
		r = -ENOMEM;
		goto fail;
	}
	for (unsigned i = 0; i < n; i++) {
		s->files[i].fd = -1;
		s->files[i].spill = s;
		s->files[i].number = i;
		list_init(&s->files[i].unbound);
	}
	s->n_files = n;
	for (unsigned i = 0; i < n; i++) {
		if (!conf[i].path || !conf[i].path[0]) {
			r = log_error_errno(-EINVAL, "Spill file %u has no path", i + 1);
			goto fail;
		}
		r = file_open(s, &s->files[i], &conf[i]);
		if (r < 0)
			goto fail;
	}
	*ret = s;
	return 0;
fail:
	spill_free(s);
	return r;
}

void spill_free(struct spill *s)
{
	if (!s)
		return;
	for (unsigned i = 0; i < s->n_files; i++) {
		struct spill_file *f = &s->files[i];
		for (uint32_t j = 0; f->regions && j < f->n_regions; j++) {
			slots_free(&f->regions[j].slots);
			free(f->regions[j].header);
		}
		free(f->regions);
		if (f->fd >= 0)
			close(f->fd);
		free(f->path);
	}
	for (uint32_t i = 0; s->buckets && i < s->n_buckets; i++)
		while (s->buckets[i]) {
			struct spill_binding *b = s->buckets[i];
			s->buckets[i] = b->hash_next;
			free(b->identity);
			free(b);
		}
	for (uint32_t i = 0; s->owners && i < OWNER_BUCKETS; i++)
		while (s->owners[i]) {
			struct spill_owner *o = s->owners[i];
			s->owners[i] = o->hash_next;
			free(o);
		}
	free(s->buckets);
	free(s->owners);
	free(s->files);
	free(s);
}

/*
 * Recovery.
 */

struct recovery {
	struct spill *s;
	spill_found_fn fn;
	void *userdata;
	struct spill_recovery st;
	uint8_t *buf; /* RECOVER_CHUNK, aligned */
	uint32_t *to_free;
	uint64_t max_seq;
	uint64_t start, last_log;
};

static int pread_full(int fd, uint8_t *buf, size_t len, uint64_t offset)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = pread(fd, buf + done, len - done, (off_t)(offset + done));
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -EIO; /* preallocated: a short file was cut behind our back */
		done += (size_t)n;
	}
	return 0;
}

static void recovery_progress(struct recovery *rc, const struct spill_file *f, uint32_t region)
{
	uint64_t now = now_ns();

	if (now - rc->last_log < RECOVER_PROGRESS_NS)
		return;
	rc->last_log = now;
	log_info("Spill recovery: file %u of %u ('%s'), region %" PRIu32 " of %" PRIu32 ", %" PRIu64 " blocks so far, %.0f s",
		 f->number + 1, rc->s->n_files, f->path, region, f->n_regions,
		 rc->st.slots_recovered, (double)(now - rc->start) / 1e9);
}

/* One slot header as read from disk.  \return 0, or fn's error */
static int recover_slot(struct recovery *rc, struct spill_region *r, uint32_t slot,
			const uint8_t *p, uint32_t *n_free)
{
	struct spill_slot_header h;
	int k = spill_slot_header_decode(p, SPILL_SLOT_HEADER_BYTES, &h);

	if (k == -ENODATA) {
		rc->to_free[(*n_free)++] = slot;
		return 0;
	}
	if (k < 0) {
		/* Without the magic these are most likely payload bytes of an
		 * earlier binding with another stride, not a torn write: counting
		 * them as corrupt would cry wolf after every rebinding. */
		if (memcmp(p, SH_MAGIC, 8) == 0)
			rc->st.slots_dropped++;
		else
			rc->st.slots_stale++;
		rc->to_free[(*n_free)++] = slot;
		return 0;
	}
	if (spill_slot_header_match(&h, r, slot) < 0) {
		rc->st.slots_stale++;
		rc->to_free[(*n_free)++] = slot;
		return 0;
	}
	if (h.seq > rc->max_seq)
		rc->max_seq = h.seq;
	k = rc->fn ? rc->fn(r, slot, &h, rc->userdata) : 1;
	if (k < 0)
		return k;
	if (k > 0) {
		rc->st.slots_recovered++;
		rc->st.bytes += h.payload_len;
	} else {
		rc->st.slots_rejected++;
		rc->to_free[(*n_free)++] = slot;
	}
	return 0;
}

/* The slot headers of a bound region.  \return 0, fn's error, or a read
 * error (< 0 with *io set) */
static int recover_slots(struct recovery *rc, struct spill_region *r, bool *io)
{
	struct spill_file *f = r->file;
	uint32_t n = r->slots.n, n_free = 0, got;
	uint64_t area = r->offset + SPILL_REGION_HEADER_BYTES;
	int k = 0;

	/* Every slot starts allocated, so that fn may free one it kept
	 * before; the rest are freed once the region is read. */
	for (uint32_t i = 0; i < n; i++)
		if (slots_alloc(&r->slots, &got) < 0)
			return -EINVAL;
	region_relink(r);

	uint64_t per = r->stride <= RECOVER_SEQUENTIAL_STRIDE ? RECOVER_CHUNK / r->stride : 1;
	for (uint32_t first = 0; first < n && k == 0; first += (uint32_t)per) {
		uint32_t cnt = (uint32_t)(n - first < per ? n - first : per);
		size_t len = per > 1 ? (size_t)(cnt * r->stride) : SPILL_SLOT_HEADER_BYTES;
		k = pread_full(f->fd, rc->buf, len, area + first * r->stride);
		if (k < 0) {
			/* The file is failed next; what was not read is not in use. */
			for (uint32_t i = first; i < n; i++)
				rc->to_free[n_free++] = i;
			*io = true;
			break;
		}
		rc->st.bytes_read += len;
		for (uint32_t i = 0; i < cnt && k == 0; i++)
			k = recover_slot(rc, r, first + i, rc->buf + i * r->stride, &n_free);
		recovery_progress(rc, f, r->index);
	}
	/* Highest first: the stack then hands out the lowest free slot next. */
	while (n_free > 0)
		region_slot_release(r, rc->to_free[--n_free]);
	return k;
}

static int recover_file(struct recovery *rc, struct spill_file *f)
{
	uint64_t slots_before = rc->st.slots_recovered, dropped_before = rc->st.slots_dropped;
	uint64_t bound_before = rc->st.regions_bound, dropped_regions_before = rc->st.regions_dropped;
	uint64_t other_version = 0;
	int k = 0;

	for (uint32_t i = 0; i < f->n_regions; i++) {
		struct spill_region *r = &f->regions[i];
		struct spill_region_header h;
		bool io = false;

		rc->st.regions++;
		recovery_progress(rc, f, i);
		k = pread_full(f->fd, rc->buf, SPILL_REGION_HEADER_BYTES, r->offset);
		if (k < 0) {
			spill_file_fail(f, k);
			rc->st.files_failed++;
			return 0;
		}
		rc->st.bytes_read += SPILL_REGION_HEADER_BYTES;
		k = spill_region_header_decode(rc->buf, SPILL_REGION_HEADER_BYTES, &h);
		if (k == 0 && h.index != i)
			k = -EBADMSG; /* a header written somewhere else */
		if (k < 0) {
			if (k == -EPROTONOSUPPORT)
				other_version++;
			if (k != -ENODATA)
				rc->st.regions_dropped++;
			region_relink(r); /* unbound */
			continue;
		}
		struct spill_binding *b = binding_get(rc->s, h.tenant, h.tenant_len, h.identity,
						      h.identity_len, h.slot_bytes, true);
		if (!b)
			return -ENOMEM;
		k = region_bind(r, b, h.generation, false);
		if (k < 0) {
			if (b->n_regions == 0)
				binding_drop(rc->s, b);
			return k;
		}
		rc->st.regions_bound++;
		k = recover_slots(rc, r, &io);
		if (io) {
			spill_file_fail(f, k);
			rc->st.files_failed++;
			return 0;
		}
		if (k < 0)
			return k;
	}
	if (other_version)
		log_warning("Spill file '%s': %" PRIu64 " regions are of another format version; they are reused as empty",
			    f->path, other_version);
	log_info("Spill file '%s': %" PRIu64 " of %" PRIu32 " regions bound, %" PRIu64 " blocks recovered, %" PRIu64 " torn or corrupt dropped, %" PRIu64 " corrupt region headers",
		 f->path, rc->st.regions_bound - bound_before, f->n_regions,
		 rc->st.slots_recovered - slots_before, rc->st.slots_dropped - dropped_before,
		 rc->st.regions_dropped - dropped_regions_before);
	return 0;
}

int spill_recover(struct spill *s, spill_found_fn fn, void *userdata,
		  struct spill_recovery *ret_stats)
{
	struct recovery rc = {
		.s = s,
		.fn = fn,
		.userdata = userdata,
		.start = now_ns(),
	};
	int r = 0;

	if (!s || s->recovered)
		return -EINVAL;
	s->recovery_frees = 0;
	rc.last_log = rc.start;
	rc.buf = spill_buf_alloc(RECOVER_CHUNK);
	rc.to_free = malloc(sizeof(uint32_t) * MAX_SLOTS_PER_REGION);
	if (!rc.buf || !rc.to_free) {
		r = -ENOMEM;
		goto out;
	}
	for (unsigned i = 0; i < s->n_files; i++) {
		struct spill_file *f = &s->files[i];
		rc.st.files++;
		if (f->error)
			continue;
		r = recover_file(&rc, f);
		if (r < 0)
			goto out;
	}
	/* Sequence numbers stay increasing across restarts, so that of two
	 * copies of a key the newer one wins. */
	if (rc.max_seq >= s->next_seq)
		s->next_seq = rc.max_seq + 1;
	s->recovered = true;
	rc.st.slots_replaced = s->recovery_frees;
	rc.st.next_seq = s->next_seq;
	rc.st.elapsed_ns = now_ns() - rc.start;
	log_info("Spill recovery: %u file(s), %" PRIu64 " of %" PRIu64 " regions bound, %" PRIu64 " blocks recovered (%" PRIu64 " MiB, %" PRIu64 " older copies replaced), %" PRIu64 " torn or corrupt dropped, %" PRIu64 " stale, %" PRIu64 " declined, in %.3f s",
		 rc.st.files, rc.st.regions_bound, rc.st.regions, rc.st.slots_recovered,
		 rc.st.bytes >> 20, rc.st.slots_replaced, rc.st.slots_dropped, rc.st.slots_stale,
		 rc.st.slots_rejected, (double)rc.st.elapsed_ns / 1e9);
	if (rc.st.files_failed)
		log_warning("Spill recovery: %u file(s) failed while reading; see above",
			    rc.st.files_failed);
out:
	if (r < 0)
		log_error_errno(r, "Spill recovery stopped: %m");
	if (ret_stats)
		*ret_stats = rc.st;
	free(rc.buf);
	free(rc.to_free);
	return r;
}
