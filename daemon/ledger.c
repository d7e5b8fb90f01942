/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The ledger's memfds and their records (ledger.h).  Everything is
 * little-endian and encoded field by field; a record is built in a buffer
 * and copied into place in one memcpy, so that a daemon killed between two
 * records leaves each whole, and one killed inside a record leaves that
 * one failing its check.
 *
 * Root ("ledger"):   two header copies at 0 and 64, the newer valid one
 *                    counts; namespace records from LEDGER_HEADER_BYTES on,
 *                    up to the header's `used`.
 *   header:          magic "KVTLEDG1" | u32 version | u32 next_no |
 *                    u64 seq | u64 used | u64 check of the 32 bytes before
 *   namespace:       u32 bytes (a multiple of 8) | u32 no | tenant[32] |
 *                    u32 identity length | u32 0 | identity, zeros to 8 |
 *                    u64 check of the record's other bytes
 * Extent ("slots.N"): header: magic "KVTLEDX1" | u32 version | u32 no |
 *                    tenant[32] | u32 id | u32 n_slots | u64 slot_bytes |
 *                    u64 size | u32 flags | i32 node | i32 for_node |
 *                    u32 0 | u64 check of the bytes before;
 *                    then one record per slot from LEDGER_HEADER_BYTES:
 *   slot:            u64 check of bytes 8..64 | u32 ns | u32 1 | key[32] |
 *                    zeros; all zeros: no block
 * Handles ("handles.T"): header: magic "KVTLEDH1" | u32 version | u32 0 |
 *                    tenant[32] | u64 check of the bytes before; records
 *                    from LEDGER_HEADER_BYTES, one per handle index:
 *   handle:          u64 check of bytes 8..64 | u64 id | u32 kind |
 *                    u32 shard | u32 extent no | u32 slot | i32 pid |
 *                    u32 0 | u64 start time | zeros; all zeros: never used
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "byteorder.h"
#include "ledger.h"

#define ROOT_MAGIC "KVTLEDG1"
#define EXTENT_MAGIC "KVTLEDX1"
#define HANDLES_MAGIC "KVTLEDH1"
#define ROOT_COPY_BYTES 40u
#define ROOT_INITIAL (UINT64_C(1) << 20)
#define TENANT_BYTES 32u
#define HANDLES_INITIAL 256u

static uint64_t sum(const uint8_t *p, size_t len)
{
	return XXH3_64bits(p, len);
}

static bool all_zero(const uint8_t *p, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (p[i])
			return false;
	return true;
}

/* ---- memfds -------------------------------------------------------- */

static int map_new(const char *name, uint64_t size, struct ledger_map *ret)
{
	int fd = memfd_create(name, MFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)size) < 0) {
		int r = -errno;
		close(fd);
		return r;
	}
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		int r = -errno;
		close(fd);
		return r;
	}
	*ret = (struct ledger_map){.fd = fd, .map = p, .size = size};
	return 0;
}

/* An inherited memfd: mapped whole, at least min bytes. */
static int map_adopt(int fd, uint64_t min, struct ledger_map *ret)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size < min)
		return -EBADMSG;
	void *p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return -errno;
	*ret = (struct ledger_map){.fd = fd, .map = p, .size = (uint64_t)st.st_size};
	return 0;
}

static int map_grow(struct ledger_map *m, uint64_t size)
{
	if (size <= m->size)
		return 0;
	if (ftruncate(m->fd, (off_t)size) < 0)
		return -errno;
	void *p = mremap(m->map, m->size, size, MREMAP_MAYMOVE);
	if (p == MAP_FAILED)
		return -errno;
	m->map = p;
	m->size = size;
	return 0;
}

static void map_free(struct ledger_map *m)
{
	if (m->map)
		munmap(m->map, m->size);
	if (m->fd >= 0)
		close(m->fd);
	*m = (struct ledger_map){.fd = -1};
}

/* ---- root ---------------------------------------------------------- */

struct root_header {
	uint32_t next_no;
	uint64_t seq, used;
};

static bool root_copy_get(const uint8_t *p, struct root_header *ret)
{
	if (memcmp(p, ROOT_MAGIC, 8) || kvt_get_le32(p + 8) != LEDGER_VERSION ||
	    kvt_get_le64(p + 32) != sum(p, 32))
		return false;
	*ret = (struct root_header){.next_no = kvt_get_le32(p + 12),
				    .seq = kvt_get_le64(p + 16),
				    .used = kvt_get_le64(p + 24)};
	return true;
}

/* The header again, into the copy not holding the newer one: a write
 * torn by a crash leaves the other whole. */
static void root_header_write(struct ledger *l)
{
	struct root_header a, b;
	bool va = root_copy_get(l->root.map, &a), vb = root_copy_get(l->root.map + 64, &b);
	uint64_t seq = va && (!vb || a.seq >= b.seq) ? a.seq : vb ? b.seq : 0;
	uint8_t *dst = va && (!vb || a.seq >= b.seq) ? l->root.map + 64 : l->root.map;
	uint8_t buf[ROOT_COPY_BYTES];

	memcpy(buf, ROOT_MAGIC, 8);
	kvt_put_le32(buf + 8, LEDGER_VERSION);
	kvt_put_le32(buf + 12, l->next_no);
	kvt_put_le64(buf + 16, seq + 1);
	kvt_put_le64(buf + 24, l->root_used);
	kvt_put_le64(buf + 32, sum(buf, 32));
	memcpy(dst, buf, sizeof(buf));
	l->writes++;
}

int ledger_new(ledger_keep_fn keep, void *userdata, struct ledger **ret)
{
	struct ledger *l = calloc(1, sizeof(*l));

	if (!l)
		return -ENOMEM;
	int r = map_new("kvtier-ledger", ROOT_INITIAL, &l->root);
	if (r < 0) {
		free(l);
		return r;
	}
	l->root_used = LEDGER_HEADER_BYTES;
	l->keep = keep;
	l->userdata = userdata;
	root_header_write(l);
	if (keep)
		keep(userdata, "ledger", l->root.fd, true);
	*ret = l;
	return 0;
}

/* The namespace record at off, if it is whole and within used: its size. */
static uint32_t ns_record_at(const struct ledger *l, uint64_t off, uint32_t *ret_no,
			     const char **ret_tenant, const uint8_t **ret_id, uint32_t *ret_len)
{
	const uint8_t *p = l->root.map + off;

	if (off + 48 > l->root_used)
		return 0;
	uint32_t bytes = kvt_get_le32(p), len = kvt_get_le32(p + 40);
	if (bytes % 8 || bytes < 56 || off + bytes > l->root_used || len == 0 ||
	    48 + (uint64_t)len + 8 > bytes || p[8 + TENANT_BYTES - 1] != 0 ||
	    kvt_get_le64(p + bytes - 8) != sum(p, bytes - 8))
		return 0;
	*ret_no = kvt_get_le32(p + 4);
	*ret_tenant = (const char *)p + 8;
	*ret_id = p + 48;
	*ret_len = len;
	return bytes;
}

int ledger_adopt(int fd, ledger_keep_fn keep, void *userdata, struct ledger **ret)
{
	struct ledger *l = calloc(1, sizeof(*l));
	struct root_header a, b, h;

	if (!l)
		return -ENOMEM;
	int r = map_adopt(fd, LEDGER_HEADER_BYTES, &l->root);
	if (r < 0) {
		free(l);
		return r;
	}
	bool va = root_copy_get(l->root.map, &a), vb = root_copy_get(l->root.map + 64, &b);
	if (!va && !vb) {
		l->root.fd = -1; /* still the caller's */
		map_free(&l->root);
		free(l);
		return -EBADMSG;
	}
	h = va && (!vb || a.seq >= b.seq) ? a : b;
	l->next_no = h.next_no;
	l->root_used = h.used < LEDGER_HEADER_BYTES || h.used > l->root.size ? LEDGER_HEADER_BYTES
									    : h.used;
	/* Records past the last whole one are dropped. */
	uint64_t off = LEDGER_HEADER_BYTES;
	uint32_t no, len, bytes;
	const char *t;
	const uint8_t *id;
	while ((bytes = ns_record_at(l, off, &no, &t, &id, &len)) > 0) {
		if (no >= l->n_ns)
			l->n_ns = no + 1;
		off += bytes;
	}
	l->root_used = off;
	l->keep = keep;
	l->userdata = userdata;
	if (keep)
		keep(userdata, "ledger", l->root.fd, false);
	*ret = l;
	return 0;
}

void ledger_free(struct ledger *l)
{
	if (!l)
		return;
	map_free(&l->root);
	free(l);
}

int ledger_ns_add(struct ledger *l, const char *tenant, const uint8_t *identity, uint32_t len,
		  uint32_t *ret_no)
{
	uint32_t bytes = (uint32_t)((48 + (uint64_t)len + 7) / 8 * 8 + 8);
	size_t tl = strlen(tenant);

	if (tl >= TENANT_BYTES || len == 0 || len > UINT32_MAX - 64)
		return -EINVAL;
	if (l->root_used + bytes > l->root.size) {
		uint64_t size = l->root.size;
		while (l->root_used + bytes > size)
			size *= 2;
		int r = map_grow(&l->root, size);
		if (r < 0)
			return r;
	}
	uint8_t *p = l->root.map + l->root_used;
	memset(p, 0, bytes);
	kvt_put_le32(p, bytes);
	kvt_put_le32(p + 4, l->n_ns);
	memcpy(p + 8, tenant, tl);
	kvt_put_le32(p + 40, len);
	memcpy(p + 48, identity, len);
	kvt_put_le64(p + bytes - 8, sum(p, bytes - 8));
	/* Counted once whole. */
	l->root_used += bytes;
	root_header_write(l);
	*ret_no = l->n_ns++;
	return 0;
}

int ledger_ns_each(const struct ledger *l,
		   int (*fn)(void *userdata, uint32_t no, const char *tenant,
			     const uint8_t *identity, uint32_t len),
		   void *userdata)
{
	uint64_t off = LEDGER_HEADER_BYTES;
	uint32_t no, len, bytes;
	const char *t;
	const uint8_t *id;

	while ((bytes = ns_record_at(l, off, &no, &t, &id, &len)) > 0) {
		int r = fn(userdata, no, t, id, len);
		if (r < 0)
			return r;
		off += bytes;
	}
	return 0;
}

uint32_t ledger_next_no(const struct ledger *l)
{
	return l->next_no;
}

/* ---- extents ------------------------------------------------------- */

static void desc_encode(const struct ledger_extent_desc *d, uint32_t no, uint8_t *p)
{
	memset(p, 0, 112);
	memcpy(p, EXTENT_MAGIC, 8);
	kvt_put_le32(p + 8, LEDGER_VERSION);
	kvt_put_le32(p + 12, no);
	memcpy(p + 16, d->tenant, strnlen(d->tenant, TENANT_BYTES - 1));
	kvt_put_le32(p + 48, d->id);
	kvt_put_le32(p + 52, d->n_slots);
	kvt_put_le64(p + 56, d->slot_bytes);
	kvt_put_le64(p + 64, d->size);
	kvt_put_le32(p + 72, d->flags);
	kvt_put_le32(p + 76, (uint32_t)d->node);
	kvt_put_le32(p + 80, (uint32_t)d->for_node);
	kvt_put_le64(p + 88, sum(p, 88));
}

int ledger_extent_new(struct ledger *l, int pool_fd, const struct ledger_extent_desc *d,
		      struct ledger_extent **ret)
{
	struct ledger_extent *x = calloc(1, sizeof(*x));
	char name[32];

	if (!x)
		return -ENOMEM;
	uint64_t size = LEDGER_HEADER_BYTES + (uint64_t)d->n_slots * LEDGER_RECORD_BYTES;
	size = (size + 4095) / 4096 * 4096;
	int r = map_new("kvtier-ledger-slots", size, &x->m);
	if (r < 0) {
		free(x);
		return r;
	}
	x->no = l->next_no++;
	x->n_slots = d->n_slots;
	desc_encode(d, x->no, x->m.map);
	root_header_write(l);
	if (l->keep) {
		snprintf(name, sizeof(name), "pool.%u", x->no);
		l->keep(l->userdata, name, pool_fd, true);
		snprintf(name, sizeof(name), "slots.%u", x->no);
		l->keep(l->userdata, name, x->m.fd, true);
	}
	*ret = x;
	return 0;
}

int ledger_extent_adopt(int fd, struct ledger_extent_desc *ret_desc, struct ledger_extent **ret)
{
	struct ledger_extent *x = calloc(1, sizeof(*x));

	if (!x)
		return -ENOMEM;
	int r = map_adopt(fd, LEDGER_HEADER_BYTES, &x->m);
	if (r < 0) {
		free(x);
		return r;
	}
	const uint8_t *p = x->m.map;
	struct ledger_extent_desc d = {0};
	if (memcmp(p, EXTENT_MAGIC, 8) || kvt_get_le32(p + 8) != LEDGER_VERSION ||
	    kvt_get_le64(p + 88) != sum(p, 88) || p[16 + TENANT_BYTES - 1] != 0)
		goto bad;
	memcpy(d.tenant, p + 16, TENANT_BYTES);
	d.id = kvt_get_le32(p + 48);
	d.n_slots = kvt_get_le32(p + 52);
	d.slot_bytes = kvt_get_le64(p + 56);
	d.size = kvt_get_le64(p + 64);
	d.flags = kvt_get_le32(p + 72);
	d.node = (int32_t)kvt_get_le32(p + 76);
	d.for_node = (int32_t)kvt_get_le32(p + 80);
	if (!d.tenant[0] || d.n_slots == 0 || d.slot_bytes == 0 ||
	    LEDGER_HEADER_BYTES + (uint64_t)d.n_slots * LEDGER_RECORD_BYTES > x->m.size ||
	    d.size / d.slot_bytes < d.n_slots)
		goto bad;
	x->no = kvt_get_le32(p + 12);
	x->n_slots = d.n_slots;
	*ret_desc = d;
	*ret = x;
	return 0;
bad:
	x->m.fd = -1; /* still the caller's */
	map_free(&x->m);
	free(x);
	return -EBADMSG;
}

void ledger_extent_free(struct ledger_extent *x)
{
	if (!x)
		return;
	map_free(&x->m);
	free(x);
}

static uint8_t *slot_record(const struct ledger_extent *x, uint32_t slot)
{
	return x->m.map + LEDGER_HEADER_BYTES + (uint64_t)slot * LEDGER_RECORD_BYTES;
}

void ledger_slot_set(struct ledger *l, struct ledger_extent *x, uint32_t slot, uint32_t ns,
		     const uint8_t *key)
{
	uint8_t buf[LEDGER_RECORD_BYTES] = {0};

	if (!x || slot >= x->n_slots || ns == LEDGER_NO_NS)
		return;
	kvt_put_le32(buf + 8, ns);
	kvt_put_le32(buf + 12, 1);
	memcpy(buf + 16, key, 32);
	kvt_put_le64(buf, sum(buf + 8, LEDGER_RECORD_BYTES - 8));
	memcpy(slot_record(x, slot), buf, sizeof(buf));
	l->writes++;
}

void ledger_slot_clear(struct ledger *l, struct ledger_extent *x, uint32_t slot)
{
	if (!x || slot >= x->n_slots)
		return;
	memset(slot_record(x, slot), 0, LEDGER_RECORD_BYTES);
	l->writes++;
}

int ledger_slot_get(const struct ledger_extent *x, uint32_t slot, struct ledger_slot *ret)
{
	const uint8_t *p = slot_record(x, slot);

	if (all_zero(p, LEDGER_RECORD_BYTES))
		return 0;
	if (kvt_get_le64(p) != sum(p + 8, LEDGER_RECORD_BYTES - 8) || kvt_get_le32(p + 12) != 1)
		return -EBADMSG;
	ret->ns = kvt_get_le32(p + 8);
	memcpy(ret->key, p + 16, 32);
	return 1;
}

/* ---- handles ------------------------------------------------------- */

void ledger_handles_name(const char *tenant, char *buf, size_t size)
{
	/* A descriptor's name may not hold ':' (sd_pid_notify_with_fds(3));
	 * a uid tenant's does ("uid:1000"), a configured one's never holds '.'. */
	snprintf(buf, size, "handles.%s", tenant);
	for (char *p = buf; *p; p++)
		if (*p == ':')
			*p = '.';
}

int ledger_handles_new(struct ledger *l, const char *tenant, struct ledger_handles **ret)
{
	struct ledger_handles *h = calloc(1, sizeof(*h));
	char name[48];

	if (!h)
		return -ENOMEM;
	int r = map_new("kvtier-ledger-handles",
			LEDGER_HEADER_BYTES + (uint64_t)HANDLES_INITIAL * LEDGER_RECORD_BYTES, &h->m);
	if (r < 0) {
		free(h);
		return r;
	}
	h->cap = HANDLES_INITIAL;
	uint8_t *p = h->m.map;
	memcpy(p, HANDLES_MAGIC, 8);
	kvt_put_le32(p + 8, LEDGER_VERSION);
	memcpy(p + 16, tenant, strnlen(tenant, TENANT_BYTES - 1));
	kvt_put_le64(p + 48, sum(p, 48));
	if (l->keep) {
		ledger_handles_name(tenant, name, sizeof(name));
		l->keep(l->userdata, name, h->m.fd, true);
	}
	*ret = h;
	return 0;
}

int ledger_handles_adopt(int fd, struct ledger_handles **ret)
{
	struct ledger_handles *h = calloc(1, sizeof(*h));

	if (!h)
		return -ENOMEM;
	int r = map_adopt(fd, LEDGER_HEADER_BYTES, &h->m);
	if (r < 0) {
		free(h);
		return r;
	}
	const uint8_t *p = h->m.map;
	if (memcmp(p, HANDLES_MAGIC, 8) || kvt_get_le32(p + 8) != LEDGER_VERSION ||
	    kvt_get_le64(p + 48) != sum(p, 48)) {
		h->m.fd = -1;
		map_free(&h->m);
		free(h);
		return -EBADMSG;
	}
	h->cap = (uint32_t)((h->m.size - LEDGER_HEADER_BYTES) / LEDGER_RECORD_BYTES);
	*ret = h;
	return 0;
}

void ledger_handles_free(struct ledger_handles *h)
{
	if (!h)
		return;
	map_free(&h->m);
	free(h);
}

int ledger_handle_set(struct ledger *l, struct ledger_handles *hs, uint32_t idx,
		      const struct ledger_handle *h)
{
	uint8_t buf[LEDGER_RECORD_BYTES] = {0};

	if (idx >= hs->cap) {
		uint32_t cap = hs->cap;
		while (idx >= cap)
			cap *= 2;
		int r = map_grow(&hs->m, LEDGER_HEADER_BYTES + (uint64_t)cap * LEDGER_RECORD_BYTES);
		if (r < 0)
			return r;
		hs->cap = cap;
	}
	kvt_put_le64(buf + 8, h->id);
	kvt_put_le32(buf + 16, h->kind);
	kvt_put_le32(buf + 20, h->shard);
	kvt_put_le32(buf + 24, h->extent_no);
	kvt_put_le32(buf + 28, h->slot);
	kvt_put_le32(buf + 32, (uint32_t)h->pid);
	kvt_put_le64(buf + 40, h->start_time);
	kvt_put_le64(buf, sum(buf + 8, LEDGER_RECORD_BYTES - 8));
	memcpy(hs->m.map + LEDGER_HEADER_BYTES + (uint64_t)idx * LEDGER_RECORD_BYTES, buf,
	       sizeof(buf));
	l->writes++;
	return 0;
}

int ledger_handle_get(const struct ledger_handles *hs, uint32_t idx, struct ledger_handle *ret)
{
	if (idx >= hs->cap)
		return 0;
	const uint8_t *p = hs->m.map + LEDGER_HEADER_BYTES + (uint64_t)idx * LEDGER_RECORD_BYTES;
	if (all_zero(p, LEDGER_RECORD_BYTES))
		return 0;
	if (kvt_get_le64(p) != sum(p + 8, LEDGER_RECORD_BYTES - 8))
		return -EBADMSG;
	*ret = (struct ledger_handle){.id = kvt_get_le64(p + 8),
				      .kind = kvt_get_le32(p + 16),
				      .shard = kvt_get_le32(p + 20),
				      .extent_no = kvt_get_le32(p + 24),
				      .slot = kvt_get_le32(p + 28),
				      .pid = (int32_t)kvt_get_le32(p + 32),
				      .start_time = kvt_get_le64(p + 40)};
	return 1;
}
