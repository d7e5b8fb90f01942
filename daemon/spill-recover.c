/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Recovery at start: every region header and the slot headers of bound
 * regions are read, intact slots handed to the caller (who indexes them),
 * the rest freed, and the sequence numbers carried on.  Payloads are not
 * read here: they are checked on every restore.
 *
 * Recovery says which reads it wants (spill_recover_next()) and takes their
 * results in any order (spill_recover_done()), so that the caller keeps
 * several in flight through its own I/O engine and parses one while the
 * next ones are read.  Region headers are read ahead of the region being
 * parsed; a region's slot area is read in chunks into buffers of its own,
 * and a file is finished (every read of it back) before the next is begun.
 * spill_recover() drives the same steps with pread, one read at a time.
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
/* Region headers read ahead of the region being parsed (8 KiB each). */
#define RECOVER_HEADERS_AHEAD 32u
/* Chunk reads in flight: 32 MiB of buffers, enough to keep a disk busy
 * while the event loop parses the chunk before. */
#define RECOVER_CHUNKS SPILL_RECOVER_CHUNKS
/* One-header reads in flight, for regions of large slots. */
#define RECOVER_SLOT_READS 64u
/* Regions whose slots are being read; each keeps a list of slots to free. */
#define RECOVER_OPEN 4u
#define HEADER_IN_FLIGHT 1

_Static_assert(RECOVER_HEADERS_AHEAD + RECOVER_CHUNKS + RECOVER_SLOT_READS <= SPILL_RECOVER_READS_MAX,
	       "more reads in flight than callers provide for");

struct open_region {
	struct spill_region *r; /* NULL: free */
	uint32_t pending;       /* reads in flight */
	bool issued_all;
	uint32_t n_free;
	uint32_t *to_free;
};

struct spill_recover {
	struct spill *s;
	spill_found_fn fn;
	void *userdata;
	struct spill_recovery st;
	uint64_t max_seq;
	uint64_t start, last_log;
	int error; /* fn's or -ENOMEM: no more reads, then the end */
	bool finished;

	/* The file being read: region cur is the next to parse; headers up
	 * to hdr_next are read or being read. */
	unsigned file;
	bool file_begun, file_failed;
	uint32_t cur, hdr_next;
	int cur_open;       /* region cur's slots are being read: its open index */
	uint32_t slot_next; /* of region cur */
	uint8_t *hdr_bufs;  /* RECOVER_HEADERS_AHEAD x SPILL_REGION_HEADER_BYTES */
	int hdr_result[RECOVER_HEADERS_AHEAD];
	uint64_t other_version;
	uint64_t slots_before, dropped_before, bound_before, dropped_regions_before;

	uint8_t *chunk_bufs[RECOVER_CHUNKS]; /* each buffer, once */
	uint8_t *chunks[RECOVER_CHUNKS];     /* those free: a stack */
	unsigned n_chunks_free;
	uint8_t *small;     /* RECOVER_SLOT_READS x SPILL_SLOT_HEADER_BYTES */
	uint32_t small_free[RECOVER_SLOT_READS];
	unsigned n_small_free;
	struct open_region open[RECOVER_OPEN];
	unsigned in_flight;
};

static void recovery_progress(struct spill_recover *rc)
{
	uint64_t now = kvt_now_ns();

	if (now - rc->last_log < RECOVER_PROGRESS_NS || rc->file >= rc->s->n_files)
		return;
	rc->last_log = now;
	const struct spill_file *f = &rc->s->files[rc->file];
	log_info("Spill recovery: file %u of %u ('%s'), region %" PRIu32 " of %" PRIu32 ", %" PRIu64 " blocks so far, %.0f s",
		 f->number + 1, rc->s->n_files, f->path, rc->cur, f->n_regions,
		 rc->st.slots_recovered, (double)(now - rc->start) / 1e9);
}

/* One slot header as read from disk.  \return 0, or fn's error */
static int recover_slot(struct spill_recover *rc, struct spill_region *r, uint32_t slot,
			const uint8_t *p, struct open_region *o)
{
	struct spill_slot_header h;
	int k = spill_slot_header_decode(p, SPILL_SLOT_HEADER_BYTES, &h);

	if (k == -ENODATA) {
		o->to_free[o->n_free++] = slot;
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
		o->to_free[o->n_free++] = slot;
		return 0;
	}
	if (spill_slot_header_match(&h, r, slot) < 0) {
		rc->st.slots_stale++;
		o->to_free[o->n_free++] = slot;
		return 0;
	}
	if (h.seq > rc->max_seq)
		rc->max_seq = h.seq;
	uint64_t frees = rc->s->slot_frees;
	k = rc->fn ? rc->fn(r, slot, &h, rc->userdata) : SPILL_FOUND_KEEP;
	/* What fn freed is an older copy it kept before. */
	rc->st.slots_replaced += rc->s->slot_frees - frees;
	if (k < 0)
		return k;
	switch (k) {
	case SPILL_FOUND_REPLACED:
		rc->st.slots_replaced++;
		/* fallthrough */
	case SPILL_FOUND_KEEP:
		rc->st.slots_recovered++;
		rc->st.bytes += h.payload_len;
		break;
	case SPILL_FOUND_TAKEN:
		rc->st.slots_rejected++; /* fn frees it once erased */
		break;
	default:
		rc->st.slots_rejected++;
		o->to_free[o->n_free++] = slot;
	}
	return 0;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

/* Every read of an open region is back: free what is not in use. */
static void open_close(struct open_region *o)
{
	bool sorted = true;

	for (uint32_t i = 1; i < o->n_free && sorted; i++)
		sorted = o->to_free[i - 1] < o->to_free[i];
	if (!sorted)
		qsort(o->to_free, o->n_free, sizeof(uint32_t), cmp_u32);
	/* Highest first: the stack then hands out the lowest free slot next. */
	while (o->n_free > 0)
		spill_region_slot_release(o->r, o->to_free[--o->n_free]);
	o->r = NULL;
}

static void open_maybe_close(struct open_region *o)
{
	if (o->r && o->issued_all && o->pending == 0)
		open_close(o);
}

/* The slots of the open region not read yet are not in use. */
static void open_stop(struct spill_recover *rc)
{
	if (rc->cur_open < 0)
		return;
	struct open_region *o = &rc->open[rc->cur_open];
	for (uint32_t i = rc->slot_next; i < o->r->slots.n; i++)
		o->to_free[o->n_free++] = i;
	o->issued_all = true;
	rc->cur_open = -1;
	rc->cur++;
	open_maybe_close(o);
}

static void file_fail(struct spill_recover *rc, struct spill_file *f, int error)
{
	if (rc->file_failed)
		return;
	rc->file_failed = true;
	spill_file_fail(f, error);
	rc->st.files_failed++;
}

static void file_end(struct spill_recover *rc, struct spill_file *f)
{
	if (!rc->file_failed) {
		if (rc->other_version)
			log_warning("Spill file '%s': %" PRIu64 " regions are of another format version; they are reused as empty",
				    f->path, rc->other_version);
		log_info("Spill file '%s': %" PRIu64 " of %" PRIu32 " regions bound, %" PRIu64 " blocks recovered, %" PRIu64 " torn or corrupt dropped, %" PRIu64 " corrupt region headers",
			 f->path, rc->st.regions_bound - rc->bound_before, f->n_regions,
			 rc->st.slots_recovered - rc->slots_before,
			 rc->st.slots_dropped - rc->dropped_before,
			 rc->st.regions_dropped - rc->dropped_regions_before);
	}
	rc->file++;
	rc->file_begun = false;
}

/* Region cur's header is read: bind it and open it for its slots, or pass
 * it as unbound.  \return 0, or a negative errno that stops recovery */
static int region_begin(struct spill_recover *rc, struct spill_file *f)
{
	struct spill_region *r = &f->regions[rc->cur];
	struct spill_region_header h;
	const uint8_t *buf = rc->hdr_bufs + (size_t)(rc->cur % RECOVER_HEADERS_AHEAD) *
						    SPILL_REGION_HEADER_BYTES;
	int o = -1;

	for (unsigned i = 0; i < RECOVER_OPEN && o < 0; i++)
		if (!rc->open[i].r)
			o = (int)i;
	if (o < 0)
		return -EAGAIN; /* after the open regions' reads */

	rc->st.regions++;
	int k = spill_region_header_decode(buf, SPILL_REGION_HEADER_BYTES, &h);
	if (k == 0 && h.index != rc->cur)
		k = -EBADMSG; /* a header written somewhere else */
	if (k < 0) {
		if (k == -EPROTONOSUPPORT)
			rc->other_version++;
		if (k != -ENODATA)
			rc->st.regions_dropped++;
		spill_region_relink(r); /* unbound */
		rc->cur++;
		return 0;
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
	/* Every slot starts allocated, so that fn may free one it kept
	 * before; the rest are freed once the region is read. */
	for (uint32_t i = 0, got; i < r->slots.n; i++)
		if (slots_alloc(&r->slots, &got) < 0)
			return -EINVAL;
	spill_region_relink(r);
	rc->open[o] = (struct open_region){.r = r, .to_free = rc->open[o].to_free};
	rc->cur_open = o;
	rc->slot_next = 0;
	return 0;
}

/* The next read of region cur's slots.  \return 1, or 0 without a buffer */
static int slot_read(struct spill_recover *rc, struct spill_read *ret)
{
	struct open_region *o = &rc->open[rc->cur_open];
	struct spill_region *r = o->r;
	uint32_t n = r->slots.n;
	uint64_t per = r->stride <= RECOVER_SEQUENTIAL_STRIDE ? RECOVER_CHUNK / r->stride : 1;
	uint32_t cnt = (uint32_t)(n - rc->slot_next < per ? n - rc->slot_next : per);
	uint8_t *buf;
	int small = -1;

	if (per > 1) {
		if (rc->n_chunks_free == 0)
			return 0;
		buf = rc->chunks[--rc->n_chunks_free];
	} else {
		if (rc->n_small_free == 0)
			return 0;
		small = (int)rc->small_free[--rc->n_small_free];
		buf = rc->small + (size_t)small * SPILL_SLOT_HEADER_BYTES;
	}
	*ret = (struct spill_read){
		.file = rc->file,
		.offset = r->offset + SPILL_REGION_HEADER_BYTES + rc->slot_next * r->stride,
		.len = per > 1 ? (uint32_t)(cnt * r->stride) : SPILL_SLOT_HEADER_BYTES,
		.buf = buf,
		.region = r,
		.first = rc->slot_next,
		.count = cnt,
		.open = rc->cur_open,
		.small = small,
	};
	o->pending++;
	rc->in_flight++;
	rc->slot_next += cnt;
	if (rc->slot_next == n) {
		o->issued_all = true;
		rc->cur_open = -1;
		rc->cur++;
	}
	return 1;
}

static void finish(struct spill_recover *rc)
{
	struct spill *s = rc->s;

	/* Sequence numbers stay increasing across restarts, so that of two
	 * copies of a key the newer one wins. */
	if (rc->max_seq >= s->next_seq)
		s->next_seq = rc->max_seq + 1;
	s->recovered = true;
	rc->finished = true;
	rc->st.next_seq = s->next_seq;
	rc->st.elapsed_ns = kvt_now_ns() - rc->start;
	log_info("Spill recovery: %u file(s), %" PRIu64 " of %" PRIu64 " regions bound, %" PRIu64 " blocks recovered (%" PRIu64 " MiB, %" PRIu64 " older copies replaced), %" PRIu64 " torn or corrupt dropped, %" PRIu64 " stale, %" PRIu64 " declined, in %.3f s",
		 rc->st.files, rc->st.regions_bound, rc->st.regions, rc->st.slots_recovered,
		 rc->st.bytes >> 20, rc->st.slots_replaced, rc->st.slots_dropped, rc->st.slots_stale,
		 rc->st.slots_rejected, (double)rc->st.elapsed_ns / 1e9);
	if (rc->st.files_failed)
		log_warning("Spill recovery: %u file(s) failed while reading; see above",
			    rc->st.files_failed);
}

int spill_recover_next(struct spill_recover *rc, struct spill_read *ret)
{
	struct spill *s = rc->s;

	while (!rc->finished && !rc->error) {
		if (rc->file >= s->n_files) {
			if (rc->in_flight == 0)
				finish(rc);
			return 0;
		}
		struct spill_file *f = &s->files[rc->file];
		if (!rc->file_begun) {
			rc->st.files++;
			if (f->error) {
				rc->file++;
				continue;
			}
			rc->file_begun = true;
			rc->file_failed = false;
			rc->cur = rc->hdr_next = 0;
			rc->cur_open = -1;
			rc->other_version = 0;
			rc->slots_before = rc->st.slots_recovered;
			rc->dropped_before = rc->st.slots_dropped;
			rc->bound_before = rc->st.regions_bound;
			rc->dropped_regions_before = rc->st.regions_dropped;
		}
		if (rc->file_failed)
			open_stop(rc);
		if (rc->file_failed || (rc->cur >= f->n_regions && rc->cur_open < 0)) {
			if (rc->in_flight > 0)
				return 0; /* the file's last reads */
			file_end(rc, f);
			continue;
		}
		if (rc->cur_open >= 0) {
			if (slot_read(rc, ret))
				return 1;
		} else if (rc->cur < rc->hdr_next &&
			   rc->hdr_result[rc->cur % RECOVER_HEADERS_AHEAD] != HEADER_IN_FLIGHT) {
			int k = region_begin(rc, f);
			if (k == 0)
				continue;
			if (k != -EAGAIN) {
				rc->error = k;
				return 0;
			}
		}
		/* Region headers ahead, while slot reads wait for a buffer or
		 * region cur's header is on its way. */
		if (rc->hdr_next < f->n_regions && rc->hdr_next < rc->cur + RECOVER_HEADERS_AHEAD) {
			uint32_t i = rc->hdr_next++;
			rc->hdr_result[i % RECOVER_HEADERS_AHEAD] = HEADER_IN_FLIGHT;
			*ret = (struct spill_read){
				.file = rc->file,
				.offset = f->regions[i].offset,
				.len = SPILL_REGION_HEADER_BYTES,
				.buf = rc->hdr_bufs + (size_t)(i % RECOVER_HEADERS_AHEAD) *
							      SPILL_REGION_HEADER_BYTES,
				.region = &f->regions[i],
				.open = -1,
				.small = -1,
			};
			rc->in_flight++;
			return 1;
		}
		return 0;
	}
	return 0;
}

int spill_recover_done(struct spill_recover *rc, const struct spill_read *rd, int result)
{
	struct spill_file *f = &rc->s->files[rd->file];

	rc->in_flight--;
	if (result >= 0 && (uint32_t)result != rd->len)
		result = -EIO;
	if (rd->open < 0) {
		uint32_t i = rd->region->index;
		rc->hdr_result[i % RECOVER_HEADERS_AHEAD] = result < 0 ? result : 0;
		if (result < 0)
			file_fail(rc, f, result);
		else
			rc->st.bytes_read += rd->len;
		return rc->error;
	}

	struct open_region *o = &rc->open[rd->open];
	uint32_t i = 0;
	if (result < 0) {
		/* The file is failed; what was not read is not in use. */
		file_fail(rc, f, result);
	} else if (!rc->error) {
		rc->st.bytes_read += rd->len;
		uint64_t step = rd->count > 1 ? o->r->stride : 0;
		for (; i < rd->count; i++) {
			int k = recover_slot(rc, o->r, rd->first + i, rd->buf + i * step, o);
			if (k < 0) {
				rc->error = k;
				i++;
				break;
			}
		}
	}
	for (; i < rd->count; i++)
		o->to_free[o->n_free++] = rd->first + i;
	if (rd->small >= 0)
		rc->small_free[rc->n_small_free++] = (uint32_t)rd->small;
	else
		rc->chunks[rc->n_chunks_free++] = rd->buf;
	o->pending--;
	open_maybe_close(o);
	recovery_progress(rc);
	return rc->error;
}

int spill_recover_begin(struct spill *s, spill_found_fn fn, void *userdata,
			struct spill_recover **ret)
{
	struct spill_recover *rc;

	if (!s || s->recovered)
		return -EINVAL;
	rc = calloc(1, sizeof(*rc));
	if (!rc)
		return -ENOMEM;
	rc->s = s;
	rc->fn = fn;
	rc->userdata = userdata;
	rc->start = rc->last_log = kvt_now_ns();
	rc->cur_open = -1;
	rc->hdr_bufs = spill_buf_alloc((size_t)RECOVER_HEADERS_AHEAD * SPILL_REGION_HEADER_BYTES);
	rc->small = spill_buf_alloc((size_t)RECOVER_SLOT_READS * SPILL_SLOT_HEADER_BYTES);
	if (!rc->hdr_bufs || !rc->small)
		goto nomem;
	for (unsigned i = 0; i < RECOVER_SLOT_READS; i++)
		rc->small_free[rc->n_small_free++] = RECOVER_SLOT_READS - 1 - i;
	for (unsigned i = 0; i < RECOVER_OPEN; i++)
		if (!(rc->open[i].to_free = malloc(sizeof(uint32_t) * MAX_SLOTS_PER_REGION)))
			goto nomem;
	for (unsigned i = 0; i < RECOVER_CHUNKS; i++) {
		if (!(rc->chunk_bufs[i] = spill_buf_alloc(RECOVER_CHUNK)))
			goto nomem;
		rc->chunks[rc->n_chunks_free++] = rc->chunk_bufs[i];
	}
	*ret = rc;
	return 0;
nomem:
	spill_recover_free(rc);
	return -ENOMEM;
}

bool spill_recover_idle(const struct spill_recover *rc)
{
	return rc->in_flight == 0 && (rc->finished || rc->error);
}

void spill_recover_get(const struct spill_recover *rc, struct spill_recovery *ret)
{
	*ret = rc->st;
	if (!rc->finished)
		ret->elapsed_ns = kvt_now_ns() - rc->start;
}

void spill_recover_position(const struct spill_recover *rc, uint64_t *ret_done,
			    uint64_t *ret_total)
{
	uint64_t done = 0, total = 0;

	for (unsigned i = 0; i < rc->s->n_files; i++) {
		total += rc->s->files[i].n_regions;
		if (i < rc->file || rc->finished)
			done += rc->s->files[i].n_regions;
		else if (i == rc->file && rc->file_begun)
			done += rc->cur;
	}
	*ret_done = done;
	*ret_total = total;
}

int spill_recover_end(struct spill_recover *rc, struct spill_recovery *ret_stats)
{
	int r = rc->error;

	if (!r && !rc->finished)
		r = -EBUSY;
	if (r < 0 && r != -EBUSY)
		log_error_errno(r, "Spill recovery stopped: %m");
	if (ret_stats)
		spill_recover_get(rc, ret_stats);
	return r;
}

void spill_recover_free(struct spill_recover *rc)
{
	if (!rc)
		return;
	free(rc->hdr_bufs);
	free(rc->small);
	for (unsigned i = 0; i < RECOVER_OPEN; i++)
		free(rc->open[i].to_free);
	for (unsigned i = 0; i < RECOVER_CHUNKS; i++)
		free(rc->chunk_bufs[i]); /* not the stack: reads stopped at
					  * shutdown never gave theirs back */
	free(rc);
}

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
	return (int)len;
}

int spill_recover(struct spill *s, spill_found_fn fn, void *userdata,
		  struct spill_recovery *ret_stats)
{
	struct spill_recover *rc = NULL;
	struct spill_read rd;
	int r = spill_recover_begin(s, fn, userdata, &rc);

	if (r < 0)
		return r;
	/* One read at a time, each parsed as soon as it is back. */
	while (spill_recover_next(rc, &rd) > 0)
		spill_recover_done(rc, &rd, pread_full(s->files[rd.file].fd, rd.buf, rd.len, rd.offset));
	r = spill_recover_end(rc, ret_stats);
	spill_recover_free(rc);
	return r;
}
