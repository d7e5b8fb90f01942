/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Recovery of a damaged spill file, as a restarted kvtierd meets it: a real
 * file with two bound regions of two tenants and their slots, damaged by
 * the input, then spill_open() and spill_recover() on it.  No crash, no
 * read out of bounds, and every slot recovery hands on is intact and
 * belongs where it was found: its header decodes and matches its region's
 * number, generation, tenant and namespace and its own slot number.  The
 * counts add up, and a second recovery of the same file finds the same.
 *
 * The file is made once through the spill API (as the daemon writes it);
 * each input rewrites its headers from that template and applies damage.
 * Input: records of 5 bytes and a payload, until the input ends:
 *   byte 0     which header (region headers first, then slot headers, mod
 *              their number);
 *   byte 1..2  offset in that header (little-endian, mod its size);
 *   byte 3     bit 7: rewrite the header's checksum after the damage (so
 *              that damage gets past it to the fields); bits 0..6: length
 *              of the payload, 1..64 bytes written at that offset;
 *   byte 4..   the payload.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "fuzz.h"
#include "log.h"
#include "spill.h"

static void check(int cond)
{
	if (!cond)
		abort();
}

/* One header of the template: where it is and its bytes. */
struct piece {
	uint64_t offset;
	uint32_t len;
	bool region; /* a region header, else a slot header */
	uint8_t bytes[SPILL_REGION_HEADER_BYTES > SPILL_SLOT_HEADER_BYTES ? SPILL_REGION_HEADER_BYTES
									      : SPILL_SLOT_HEADER_BYTES];
};

#define MAX_PIECES 64
static struct piece pieces[MAX_PIECES];
static unsigned n_pieces, n_regions;
static char path[256];
static const uint64_t capacity = 2 * SPILL_REGION_BYTES;

static const uint8_t ident_a[] = "namespace a", ident_b[] = "namespace b";

static void write_at(int fd, const void *buf, size_t len, uint64_t off)
{
	check(pwrite(fd, buf, len, (off_t)off) == (ssize_t)len);
}

static void add_piece(bool region, uint64_t off, const uint8_t *bytes, uint32_t len)
{
	check(n_pieces < MAX_PIECES && len <= sizeof(pieces[0].bytes));
	struct piece *p = &pieces[n_pieces++];
	p->region = region;
	p->offset = off;
	p->len = len;
	memcpy(p->bytes, bytes, len);
}

/* Bind a region of (tenant, identity, slot_bytes) and write n slots. */
static void bind(struct spill *s, const char *tenant, const uint8_t *ident, uint32_t ident_len,
		 uint64_t slot_bytes, unsigned n)
{
	struct spill_region *r;
	check(spill_region_find(s, tenant, ident, ident_len, slot_bytes, &r) == 1);
	add_piece(true, r->offset, r->header, SPILL_REGION_HEADER_BYTES);
	spill_region_header_written(r);
	n_regions++;
	for (unsigned i = 0; i < n; i++) {
		uint8_t key[KVT_KEY_SIZE], hdr[SPILL_SLOT_HEADER_BYTES];
		struct spill_slot_header h;
		uint32_t slot;
		check(spill_slot_alloc(r, &slot) == 0);
		for (unsigned k = 0; k < KVT_KEY_SIZE; k++)
			key[k] = (uint8_t)(i * 31 + k + n_regions);
		spill_slot_header_init(&h, r, slot, key, slot_bytes - i, spill_next_seq(s),
				       0x5eed0000u + i);
		check(spill_slot_header_encode(&h, hdr, sizeof(hdr)) == 0);
		add_piece(false, spill_slot_offset(r, slot), hdr, SPILL_SLOT_HEADER_BYTES);
	}
}

static int keep_all(struct spill_region *r, uint32_t slot, const struct spill_slot_header *h,
		    void *userdata)
{
	return 1;
}

/* The template: two tenants' regions, slot headers only (payloads are
 * checked on restore, not by recovery). */
static void remove_file(void)
{
	unlink(path);
}

static void setup(void)
{
	log_set_max_level(getenv("KVT_FUZZ_VERBOSE") ? LOG_DEBUG : LOG_CRIT);
	const char *dir = getenv("TMPDIR");
	snprintf(path, sizeof(path), "%s/kvt-fuzz-recovery-%d.spill", dir && *dir ? dir : "/tmp",
		 (int)getpid());
	struct spill_file_conf c = {path, capacity};
	struct spill *s = NULL;
	check(spill_open(&c, 1, &s) == 0);
	atexit(remove_file);
	check(spill_recover(s, keep_all, NULL, NULL) == 0);
	n_pieces = n_regions = 0;
	bind(s, "uid:1000", ident_a, sizeof(ident_a) - 1, 4 << 20, 12);
	bind(s, "uid:1001", ident_b, sizeof(ident_b) - 1, 16 << 20, 3);
	spill_free(s);
	/* Region headers first, as the input numbers them. */
	struct piece tmp[MAX_PIECES];
	unsigned k = 0;
	for (int pass = 0; pass < 2; pass++)
		for (unsigned i = 0; i < n_pieces; i++)
			if (pieces[i].region == (pass == 0))
				tmp[k++] = pieces[i];
	memcpy(pieces, tmp, sizeof(tmp[0]) * n_pieces);
}

/* Where a header's checksum goes and what it covers (docs/nvme.md §2). */
static void fix_checksum(struct piece *p, uint8_t *b)
{
	if (!p->region) {
		uint64_t sum = XXH3_64bits(b, 112);
		memcpy(b + 112, &sum, 8);
		return;
	}
	uint32_t id_len;
	memcpy(&id_len, b + 36, 4);
	if (id_len >= 1 && id_len <= SPILL_IDENTITY_MAX && 72 + id_len + 8 <= p->len) {
		uint64_t sum = XXH3_64bits(b, 72 + id_len);
		memcpy(b + 72 + id_len, &sum, 8);
	}
}

struct seen {
	unsigned n;
	uint64_t seq[MAX_PIECES];
	uint32_t slot[MAX_PIECES], region[MAX_PIECES];
};

static int on_found(struct spill_region *r, uint32_t slot, const struct spill_slot_header *h,
		    void *userdata)
{
	struct seen *s = userdata;
	check(r->binding != NULL);
	check(spill_slot_header_match(h, r, slot) == 0);
	check(h->region == r->index && h->slot == slot);
	check(h->tenant_hash == spill_tenant_hash(r->binding->tenant, strlen(r->binding->tenant)));
	check(h->payload_len >= 1 && h->payload_len <= r->binding->slot_bytes);
	check(s->n < MAX_PIECES);
	s->seq[s->n] = h->seq;
	s->slot[s->n] = slot;
	s->region[s->n++] = r->index;
	return 1;
}

static void recover(struct seen *seen, struct spill_recovery *st)
{
	struct spill_file_conf c = {path, capacity};
	struct spill *s = NULL;
	memset(seen, 0, sizeof(*seen));
	check(spill_open(&c, 1, &s) == 0);
	check(spill_recover(s, on_found, seen, st) == 0);
	spill_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool ready;
	if (!ready) {
		setup();
		ready = true;
	}
	static uint8_t work[MAX_PIECES][sizeof(pieces[0].bytes)];
	for (unsigned i = 0; i < n_pieces; i++)
		memcpy(work[i], pieces[i].bytes, pieces[i].len);
	for (size_t at = 0; at + 4 < size;) {
		unsigned which = data[at] % n_pieces;
		struct piece *p = &pieces[which];
		uint32_t off = (uint32_t)(data[at + 1] | data[at + 2] << 8) % p->len;
		bool fix = data[at + 3] & 0x80;
		size_t len = 1 + (data[at + 3] & 0x3f);
		at += 4;
		if (len > size - at)
			len = size - at;
		if (len > p->len - off)
			len = p->len - off;
		memcpy(work[which] + off, data + at, len);
		at += len;
		if (fix)
			fix_checksum(p, work[which]);
	}
	/* The file anew: sparse, then the damaged headers. */
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	check(fd >= 0);
	check(ftruncate(fd, (off_t)capacity) == 0);
	for (unsigned i = 0; i < n_pieces; i++)
		write_at(fd, work[i], pieces[i].len, pieces[i].offset);
	close(fd);

	struct seen a, b;
	struct spill_recovery sa, sb;
	recover(&a, &sa);
	check(sa.regions == 2 && sa.regions_bound <= n_regions);
	check(sa.slots_recovered == a.n && a.n <= n_pieces - n_regions);
	/* Nothing on disk was changed by the first recovery that a second one
	 * would read differently. */
	recover(&b, &sb);
	check(a.n == b.n && sa.regions_bound == sb.regions_bound);
	for (unsigned i = 0; i < a.n; i++)
		check(a.seq[i] == b.seq[i] && a.slot[i] == b.slot[i] && a.region[i] == b.region[i]);
	return 0;
}

void fuzz_seeds(fuzz_seed_fn emit, void *userdata)
{
	static const uint8_t none[1] = {0};
	emit(none, 0, userdata); /* the intact file */
	uint8_t rec[5];
	/* One byte of each header flipped, with and without a new checksum. */
	for (unsigned which = 0; which < 17; which++) {
		rec[0] = (uint8_t)which;
		rec[1] = (uint8_t)(which * 7);
		rec[2] = 0;
		rec[3] = which & 1 ? 0x80 : 0;
		rec[4] = 0xff;
		emit(rec, 5, userdata);
	}
	/* Region 1's tenant name (offset 40) rewritten to the other tenant's,
	 * checksum fixed: its slots, of uid:1001, are not uid:1000's. */
	const uint8_t forge[5] = {1, 47, 0, 0x80, '0'};
	emit(forge, sizeof(forge), userdata);
}
