/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The NVMe tier's on-disk format and space: spill files, their regions and
 * slots, the self-describing headers, and recovery at start.  No I/O engine
 * and no policy lives here: the caller writes headers and payloads (io_uring
 * or pwrite) and decides what to index.  docs/nvme.md is the prose
 * description of the format.  One file each: spill-format.c (headers),
 * spill-regions.c (space), spill-files.c (opening), spill-recover.c.
 *
 * A spill file is a whole number of SPILL_REGION_BYTES regions.  A region is
 * bound to one (tenant, namespace identity, slot_bytes) triple and holds only
 * that namespace's blocks: its first SPILL_REGION_HEADER_BYTES say so, then
 * come slots of one 4 KiB header and the payload rounded up to 4 KiB.
 *
 * Every header is encoded little-endian field by field, never as a raw
 * struct.  Offsets, buffers and lengths handed to the I/O engine are
 * multiples of SPILL_ALIGN, as O_DIRECT needs.  Not thread-safe: one event
 * loop calls all of it.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "kvt-proto.h"
#include "slots.h"

#define SPILL_FORMAT_VERSION 1
#define SPILL_ALIGN 4096u
#define SPILL_REGION_BYTES (UINT64_C(64) << 20)
#define SPILL_REGION_HEADER_BYTES 8192u
#define SPILL_SLOT_HEADER_BYTES 4096u
#define SPILL_TENANT_MAX 31 /* = CONFIG_MAX_TENANT_NAME */
#define SPILL_IDENTITY_MAX KVT_MAX_IDENTITY
/* The largest payload that still leaves room for one slot in a region. */
#define SPILL_SLOT_BYTES_MAX \
	(SPILL_REGION_BYTES - SPILL_REGION_HEADER_BYTES - SPILL_SLOT_HEADER_BYTES)
/* How long spill_open() waits for a predecessor's flock: a SIGKILLed
 * daemon's in-flight io_uring writes keep landing (and its lock stays held)
 * for ~110-170 ms after it dies. */
#define SPILL_LOCK_WAIT_MS 2000
/* Test hook: "1" makes spill_open() act as if the file system refused
 * O_DIRECT (tmpfs accepts it on current kernels, so no path can stand in). */
#define SPILL_NO_DIRECT_ENV "KVTIERD_SPILL_NO_DIRECT"

/* One configured spill file: a path and its size in bytes ("64G"). */
struct spill_file_conf {
	const char *path;
	uint64_t capacity;
};

/* A decoded region header.  identity points into the decoded buffer. */
struct spill_region_header {
	uint32_t index;      /* the region's number in its file */
	uint64_t generation; /* random per binding, never 0 */
	uint64_t slot_bytes; /* payload bytes per slot, 1..SPILL_SLOT_BYTES_MAX */
	uint32_t tenant_len;
	char tenant[SPILL_TENANT_MAX + 1]; /* NUL-terminated */
	uint32_t identity_len;             /* 1..SPILL_IDENTITY_MAX */
	const uint8_t *identity;
};

/* A decoded slot header. */
struct spill_slot_header {
	uint32_t region;     /* region number in its file */
	uint32_t slot;       /* slot number in its region */
	uint64_t generation; /* the region binding's */
	uint64_t tenant_hash;
	uint8_t ns_digest[16];
	uint8_t key[KVT_KEY_SIZE];
	uint64_t payload_len; /* 1..the region's slot_bytes */
	uint64_t seq;         /* never 0 */
	uint64_t payload_sum;
};

struct spill_region;
TAILQ_HEAD(spill_region_list, spill_region);

/* A tenant's hold on the spill space, shared by its bindings: the policy
 * weighs its regions against the tenant's NVMe quota, because a region
 * holding one block of a namespace is closed to every other namespace. */
struct spill_owner {
	char tenant[SPILL_TENANT_MAX + 1];
	uint32_t tenant_len;
	uint64_t tenant_hash;
	uint32_t regions; /* held, as spill_tenant_regions() counts them */
	uint32_t refs;    /* bindings and kept regions naming it */
	struct spill_owner *hash_next;
};

/* What a bound region holds: shared by every region of that triple. */
struct spill_binding {
	char tenant[SPILL_TENANT_MAX + 1];
	uint32_t tenant_len;
	uint8_t *identity;
	uint32_t identity_len;
	uint64_t slot_bytes;
	uint64_t tenant_hash;  /* XXH3-64 of the tenant name */
	uint8_t ns_digest[16]; /* XXH3-128 of the identity */
	struct spill_owner *owner;
	uint32_t n_regions;
	struct spill_region_list free_regions; /* usable, with a free slot; empty last */
	struct spill_binding *hash_next;
};

struct spill_file;

struct spill_region {
	struct spill_file *file;
	uint32_t index;  /* in its file */
	uint64_t offset; /* of the region header in its file */
	/* NULL while unbound; otherwise binding, generation, stride and slots
	 * are set.  A region stays bound when its last slot is freed: binding
	 * it anew costs a header write, so that happens only when no unbound
	 * region is left. */
	struct spill_binding *binding;
	uint64_t generation;
	uint64_t stride; /* header + payload rounded up to SPILL_ALIGN */
	struct slots slots;
	/* Set when spill_region_find() bound the region: the caller writes
	 * these SPILL_REGION_HEADER_BYTES (aligned to SPILL_ALIGN) at `offset`
	 * and then calls spill_region_header_written().  Slot writes need not
	 * wait for it: until the header is on disk a restart just does not
	 * find the region's slots. */
	uint8_t *header;
	/* The tenant this region counts for (NULL: none): its binding's while
	 * it holds a slot or its header is being written, else kept_for's. */
	struct spill_owner *held_by;
	/* Set by spill_region_reclaim(): emptied for this tenant.  Its binding
	 * takes no new slot in it, and once empty only this tenant binds it. */
	struct spill_owner *kept_for;
	/* I/O in flight on its slots, counted by the caller (nvme.c): a region
	 * with I/O in flight is not reclaimed, so that no copy lands in or is
	 * read from a region being emptied. */
	uint32_t ios;
	struct spill_binding *free_of; /* whose free_regions it is on, or NULL */
	TAILQ_ENTRY(spill_region) free_link;    /* free_of->free_regions */
	TAILQ_ENTRY(spill_region) empty_link;   /* spill's bound-but-empty regions */
	TAILQ_ENTRY(spill_region) unbound_link; /* its file's unbound regions */
	TAILQ_ENTRY(spill_region) kept_link;    /* spill's kept regions */
};

struct spill_file {
	struct spill *spill;
	unsigned number; /* in the configuration's order */
	char *path;
	int fd; /* O_RDWR|O_DIRECT, flock(LOCK_EX) held */
	uint64_t capacity;
	uint32_t n_regions;
	struct spill_region *regions;
	struct spill_region_list unbound;
	/* 0, or the negative errno spill_file_fail() was given: its regions
	 * take no new slots and the caller should drop the blocks in them. */
	int error;
};

struct spill {
	struct spill_file *files;
	unsigned n_files;
	uint64_t next_seq;
	bool recovered;
	uint64_t slot_frees; /* spill_slot_free() calls: recovery counts fn's */
	unsigned next_file; /* where the next unbound region comes from */
	struct spill_region_list empty;
	struct spill_region_list kept; /* regions being emptied for a tenant */
	struct spill_binding **buckets;
	uint32_t n_buckets;
	struct spill_owner **owners; /* hashed by tenant name */
};

/* Recovery's account, also logged. */
struct spill_recovery {
	unsigned files;
	unsigned files_failed; /* read errors: the file was failed */
	uint64_t regions;
	uint64_t regions_bound;
	uint64_t regions_dropped; /* header written but corrupt, misplaced,
				   * or of another format version */
	uint64_t slots_recovered; /* fn kept them */
	uint64_t slots_replaced;  /* of those, freed by fn later (an older
				   * copy of a key); in use at the end:
				   * slots_recovered - slots_replaced */
	uint64_t slots_rejected;  /* intact, but fn declined them */
	uint64_t slots_dropped;   /* a slot header, torn or corrupt */
	uint64_t slots_stale;     /* an intact header of an earlier binding or
				   * another place, or no header at all (bytes
				   * left by an earlier binding) */
	uint64_t bytes;           /* payload bytes fn kept, replaced ones too */
	uint64_t bytes_read;      /* metadata read from the files */
	uint64_t elapsed_ns;
	uint64_t next_seq;
};

/*
 * Called by spill_recover() for every intact slot of a bound region, in file
 * and region order (slots of one region may come in any order).  Returns
 * what it did with the slot (SPILL_FOUND_*), or a negative errno to stop
 * recovery with that error.
 * Duplicates are passed on, not resolved here: the same key can be on disk
 * more than once in one namespace (a crash before an older copy's erasure
 * landed, or files written by an older kvtierd), also across regions.  Keep
 * the higher h->seq; fn may spill_slot_free() a slot it kept earlier, or
 * take it (SPILL_FOUND_REPLACED).
 */
enum {
	SPILL_FOUND_FREE = 0,     /* declined: recovery frees the slot */
	SPILL_FOUND_KEEP = 1,     /* kept: it stays allocated */
	SPILL_FOUND_TAKEN = 2,    /* declined, and taken: fn erases its header
				   * and frees it once that has landed */
	SPILL_FOUND_REPLACED = 3, /* kept, in place of an older copy fn kept
				   * before and has taken as above */
};
typedef int (*spill_found_fn)(struct spill_region *r, uint32_t slot,
			      const struct spill_slot_header *h, void *userdata);

/*
 * Pure format functions: no files, no global state.
 */

/* XXH3-64 of a payload, as stored in its slot header. */
uint64_t spill_payload_sum(const void *payload, size_t len);
/* XXH3-64 of a tenant name; XXH3-128 of a namespace identity, little-endian
 * low half first. */
uint64_t spill_tenant_hash(const char *tenant, size_t len);
void spill_ns_digest(const uint8_t *identity, size_t len, uint8_t ret[16]);
/* Bytes from one slot header to the next for that payload size. */
uint64_t spill_stride_for(uint64_t slot_bytes);
/* Slots of that size in one region; 0 when too large. */
uint32_t spill_slots_per_region(uint64_t slot_bytes);

/* Write h into buf[0..SPILL_REGION_HEADER_BYTES), zero-padded.
 * \return 0, or -EINVAL for a field out of range or a short buffer */
int spill_region_header_encode(const struct spill_region_header *h,
			       uint8_t *buf, size_t len);
/* \return 0; -ENODATA for an all-zero (never written) header; -EBADMSG for
 * a bad magic, checksum, field or non-zero padding; -EPROTONOSUPPORT for
 * another format version */
int spill_region_header_decode(const uint8_t *buf, size_t len,
			       struct spill_region_header *ret);

/* Fill h for a block about to be written to slot of r. */
void spill_slot_header_init(struct spill_slot_header *h,
			    const struct spill_region *r, uint32_t slot,
			    const uint8_t key[KVT_KEY_SIZE], uint64_t payload_len,
			    uint64_t seq, uint64_t payload_sum);
/* Write h into buf[0..SPILL_SLOT_HEADER_BYTES), zero-padded.
 * \return 0, or -EINVAL for a short buffer */
int spill_slot_header_encode(const struct spill_slot_header *h, uint8_t *buf,
			     size_t len);
/* \return 0; -ENODATA for all zeros; -EBADMSG; -EPROTONOSUPPORT */
int spill_slot_header_decode(const uint8_t *buf, size_t len,
			     struct spill_slot_header *ret);
/* Whether h belongs where it was read: r's number, generation, tenant and
 * namespace, this slot number, and a length that fits r's slots.
 * \return 0 or -ESTALE */
int spill_slot_header_match(const struct spill_slot_header *h,
			    const struct spill_region *r, uint32_t slot);
/* On every restore: spill_slot_header_match() and exactly this key, length
 * and sequence number (what the index recorded).  \return 0 or -ESTALE */
int spill_slot_header_verify(const struct spill_slot_header *h,
			     const struct spill_region *r, uint32_t slot,
			     const uint8_t key[KVT_KEY_SIZE], uint64_t payload_len,
			     uint64_t seq);
/* Decode and verify a slot header read back before its payload is used.
 * \return 0, or any error of the two */
int spill_slot_check(const uint8_t *buf, size_t len,
		     const struct spill_region *r, uint32_t slot,
		     const uint8_t key[KVT_KEY_SIZE], uint64_t payload_len,
		     uint64_t seq, struct spill_slot_header *ret);
/* The payload against its header's checksum.  \return 0 or -EBADMSG */
int spill_payload_check(const struct spill_slot_header *h, const void *payload);

/*
 * Files and space.
 */

/* Open, lock and preallocate every configured file.  Errors are logged with
 * what to do about them; nothing is kept open on failure.
 * \return 0 or a negative errno */
int spill_open(const struct spill_file_conf *conf, unsigned n,
	       struct spill **ret);
/* Closes the files (dropping their locks).  Accepts NULL. */
void spill_free(struct spill *s);

/* Read every region header and the slot headers of bound regions, hand the
 * intact slots to fn, free the rest, and set the next sequence number.
 * Payloads are not read: they are checked on every restore.  Must run once
 * before spill_region_find().  ret_stats may be NULL.  One pread at a time:
 * the daemon drives the same steps below through its I/O engine.
 * \return 0, fn's negative errno, or -ENOMEM */
int spill_recover(struct spill *s, spill_found_fn fn, void *userdata,
		  struct spill_recovery *ret_stats);

/*
 * The same recovery, with the reads done by the caller, several at a time:
 * spill_recover_next() says what to read (into recovery's own aligned
 * buffers), spill_recover_done() takes each result, in any order, and
 * parses it.  At most SPILL_RECOVER_READS_MAX reads are out at once.  fn is
 * called from spill_recover_done().  Until it ends, no slot is handed out
 * (spill_region_find() refuses), but slots fn kept may be freed.
 */
#define SPILL_RECOVER_CHUNKS 8u /* 4 MiB slot-area reads in flight */
#define SPILL_RECOVER_READS_MAX 128u

/* One read recovery asks for: len bytes of files[file] at offset into buf. */
struct spill_read {
	unsigned file;
	uint64_t offset;
	uint32_t len;
	uint8_t *buf;
	/* recovery's */
	struct spill_region *region;
	uint32_t first, count; /* the slots it holds */
	int open, small;
};

struct spill_recover;

/* \return 0; -EINVAL when s was recovered already; -ENOMEM */
int spill_recover_begin(struct spill *s, spill_found_fn fn, void *userdata,
			struct spill_recover **ret);
/* The next read to make.  \return 1 with *ret filled; 0 when none can be
 * made before some of those out are back (or none is left) */
int spill_recover_next(struct spill_recover *rc, struct spill_read *ret);
/* A read is back: result is its length, or a negative errno (which fails
 * that file; recovery goes on with the others).
 * \return 0, or the error that stops recovery (fn's, -ENOMEM): make no
 * more reads, let those out come back, then spill_recover_end() */
int spill_recover_done(struct spill_recover *rc, const struct spill_read *rd, int result);
/* Nothing out, and nothing more to read: finished or stopped. */
bool spill_recover_idle(const struct spill_recover *rc);
/* The figures so far (all of them once finished). */
void spill_recover_get(const struct spill_recover *rc, struct spill_recovery *ret);
/* Regions parsed, of all the files' regions. */
void spill_recover_position(const struct spill_recover *rc, uint64_t *ret_done,
			    uint64_t *ret_total);
/* Once idle.  \return 0 when finished (the spill space is the caller's from
 * now on), the error that stopped it, or -EBUSY before */
int spill_recover_end(struct spill_recover *rc, struct spill_recovery *ret_stats);
/* Accepts NULL.  Reads still out must have come back or been cancelled:
 * their buffers are freed here. */
void spill_recover_free(struct spill_recover *rc);

/* A region of (tenant, identity, slot_bytes) with a free slot: one of that
 * triple's, else an empty region kept for the tenant, a never-bound one or
 * an empty one of another triple.
 * \return 0 for a region already bound; 1 when a region was bound for this
 * call (write r->header, then spill_region_header_written()); -EINPROGRESS
 * when none is free but a region kept for the tenant is still being
 * emptied; -ENOSPC when every usable region is taken (free slots first);
 * -ENODEV when every file has failed; -EINVAL for bad arguments or before
 * spill_recover(); -E2BIG when slot_bytes exceeds SPILL_SLOT_BYTES_MAX;
 * -ENOMEM */
int spill_region_find(struct spill *s, const char *tenant,
		      const uint8_t *identity, uint32_t identity_len,
		      uint64_t slot_bytes, struct spill_region **ret);
/* The header write of a newly bound region has finished (or failed). */
void spill_region_header_written(struct spill_region *r);

/* Regions the tenant holds: bound to one of its namespaces and holding a
 * slot (or having their header written), or kept for it.  An empty bound
 * region is no one's: anyone may bind it anew. */
uint32_t spill_tenant_regions(const struct spill *s, const char *tenant);
/* The region of the tenant's that is cheapest to take back: the fewest
 * slots in use, no I/O in flight (ios), not kept, in a usable file.
 * \return 0; -EBUSY when every region it holds has I/O in flight or is
 * kept; -ENOENT when it holds none */
int spill_region_victim(const struct spill *s, const char *tenant,
			struct spill_region **ret);
/* Take r back for tenant: its binding takes no new slot in it, and once
 * the caller has freed its slots (dropping the copies in them) only tenant
 * binds it (spill_region_find()).  It counts for tenant from now on.
 * \return 0; -EBUSY for a region with I/O in flight, its header being
 * written or already kept; -EINVAL for an unbound region or bad tenant;
 * -EIO when its file failed; -ENOMEM */
int spill_region_reclaim(struct spill_region *r, const char *tenant);

/* \return 0; -ENOSPC when full; -EIO when its file failed; -EINVAL unbound */
int spill_slot_alloc(struct spill_region *r, uint32_t *ret);
/* \return 0, or -EINVAL for a slot that is not allocated */
int spill_slot_free(struct spill_region *r, uint32_t slot);
/* Byte offset of the slot's header in its file; the payload follows at
 * + SPILL_SLOT_HEADER_BYTES. */
uint64_t spill_slot_offset(const struct spill_region *r, uint32_t slot);
uint64_t spill_slot_stride(const struct spill_region *r);
/* A sequence number for the next slot header: unique and increasing across
 * restarts of this daemon on these files. */
uint64_t spill_next_seq(struct spill *s);

/* An I/O error on f: its regions take no more slots, and it is logged
 * loudly once.  Its fd stays open for I/O still in flight. */
void spill_file_fail(struct spill_file *f, int error);

/* Whether the file holding r has failed (its copies cannot be read). */
static inline bool spill_region_failed(const struct spill_region *r)
{
	return r->file->error != 0;
}

/* A zeroed buffer of at least len bytes, aligned for O_DIRECT; free(). */
void *spill_buf_alloc(size_t len);
