/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Recovery at start: every region header and the slot headers of bound
 * regions are read, intact slots handed to the caller (who indexes them),
 * the rest freed, and the sequence numbers carried on.  Payloads are not
 * read here: they are checked on every restore.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "spill-private.h"
#include "spill.h"

/* Recovery reads whole regions in chunks of this size when slots are small:
 * one sequential read beats one 4 KiB read per slot below ~64 KiB strides. */
#define RECOVER_CHUNK (UINT64_C(4) << 20)
#define RECOVER_SEQUENTIAL_STRIDE (UINT64_C(64) << 10)
#define RECOVER_PROGRESS_NS (UINT64_C(5) * 1000000000)
#define MAX_SLOTS_PER_REGION \
	((SPILL_REGION_BYTES - SPILL_REGION_HEADER_BYTES) / \
	 (SPILL_SLOT_HEADER_BYTES + SPILL_ALIGN))

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
	uint64_t now = kvt_now_ns();

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
		if (memcmp(p, SPILL_SLOT_MAGIC, 8) == 0)
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
	spill_region_relink(r);

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
		spill_region_slot_release(r, rc->to_free[--n_free]);
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
			spill_region_relink(r); /* unbound */
			continue;
		}
		struct spill_binding *b = spill_binding_get(rc->s, h.tenant, h.tenant_len, h.identity,
							    h.identity_len, h.slot_bytes, true);
		if (!b)
			return -ENOMEM;
		k = spill_region_bind(r, b, h.generation, false);
		if (k < 0) {
			if (b->n_regions == 0)
				spill_binding_drop(rc->s, b);
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
		.start = kvt_now_ns(),
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
	rc.st.elapsed_ns = kvt_now_ns() - rc.start;
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
