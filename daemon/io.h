/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The asynchronous file I/O engine of the NVMe tier: reads and writes of
 * whole aligned ranges between files and memory, completed on the daemon's
 * event loop.  It knows nothing of spill files, slots or policy.
 *
 * Two engines behind one interface:
 *
 *   io_uring  One ring, created disabled and restricted before it is enabled
 *             to READ, WRITE, READ_FIXED and WRITE_FIXED on registered
 *             (fixed) files only, ASYNC_CANCEL (of its own requests, at
 *             shutdown), plus the two register operations that add files
 *             and buffers later.  Files sit in a sparse fixed-file
 *             table, memory regions in a sparse fixed-buffer table (each at
 *             most 1 GiB; larger regions are cut into 1 GiB buffers).  A
 *             request whose buffer lies inside one registered buffer uses
 *             READ_FIXED/WRITE_FIXED, any other a plain READ/WRITE.  The
 *             ring's completion eventfd is a source of the event loop.
 *   threads   pread/pwrite on worker threads, so a slow disk never blocks the
 *             event loop; the workers hand their results back through an
 *             eventfd that is a source of the event loop.
 *
 * IO_ENGINE_AUTO takes io_uring and falls back to threads where io_uring is
 * unavailable (kernel.io_uring_disabled, seccomp, an old kernel, a refused
 * restriction), saying so once in the log.
 *
 * Requests are queued and submitted in one batch per event-loop iteration,
 * or at once when queue_depth of them wait; at most queue_depth are in flight
 * and the rest wait in FIFO order.  A short transfer is resubmitted for its
 * remainder; any other error completes the request, except -EAGAIN and
 * -EINTR: those are resubmitted after a back-off (IO_RETRY_DELAY_USEC,
 * doubling), at most IO_RETRY_MAX times for one request, which then
 * completes with the error.  A submission that io_uring refuses is tried
 * again after the same back-off, at most IO_RETRY_MAX times in a row; then
 * the requests it held, which the kernel never saw, complete with its error.
 * So a device or kernel that keeps refusing never keeps the loop busy: every
 * request ends.  Every done() runs on the event-loop thread, never from
 * inside io_submit().  The engine is not thread-safe: call it from the
 * event-loop thread only.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <systemd/sd-event.h>

/* Alignment of offsets, buffers and lengths (O_DIRECT on any device). */
#define IO_ALIGN 4096u
/* queue_depth 0 in io_engine_new() means this. */
#define IO_QUEUE_DEPTH_DEFAULT 64u
#define IO_QUEUE_DEPTH_MAX 4096u
/* Capacity of the fixed-file table: io_file_add() beyond it fails. */
#define IO_MAX_FILES 256u
/* Capacity of the fixed-buffer table (1 GiB each): regions beyond it are
 * still usable, with plain READ/WRITE. */
#define IO_MAX_BUFFERS 4096u
/* Resubmissions of one request after -EAGAIN or -EINTR, and failed
 * io_uring submissions in a row, before the error is final. */
#define IO_RETRY_MAX 8u
/* The first back-off before such a retry; it doubles with each one, so a
 * request gives up after about 25 ms of them. */
#define IO_RETRY_DELAY_USEC 100u

enum io_engine_kind { IO_ENGINE_AUTO, IO_ENGINE_URING, IO_ENGINE_THREADS };

struct io_engine;
struct io_req;

/*
 * Called on the event-loop thread when a request is finished.
 * \param result  req->len when every byte was transferred, or a negative
 *                errno: the device's error (-EIO, -ENOSPC, ...), -EINVAL for
 *                a malformed request, -ENODATA for a read past the end of the
 *                file.  A failed write may have written part of the range.
 * The request belongs to the caller again and may be resubmitted or freed
 * from here.  done() may call io_submit(); it must not free the engine.
 */
typedef void (*io_done_fn)(struct io_req *req, int result, void *userdata);

struct io_req {                 /* owned by the caller until done() runs */
	int file;               /* from io_file_add */
	uint64_t offset;        /* IO_ALIGN aligned */
	void *buf;              /* IO_ALIGN aligned */
	uint32_t len;           /* a non-zero multiple of IO_ALIGN */
	bool write;
	io_done_fn done;
	void *userdata;

	/* private to the engine */
	uint32_t progress;      /* bytes transferred so far */
	int buf_index;          /* fixed buffer used, -1: none */
	int result;             /* a worker's result, on its way back */
	uint8_t retries;        /* resubmissions after -EAGAIN or -EINTR */
	bool held;              /* in io_uring's submission ring or the kernel */
	struct io_req *next;    /* FIFO and hand-over lists */
};

/*
 * After io_engine_free(): whether the kernel may still read or write req's
 * buffer, because the engine gave up waiting for it (see io_engine_free).
 * Such a buffer must never be freed or reused.  False for every request
 * whose done() ran and for every request the engine dropped unsubmitted.
 */
static inline bool io_req_held(const struct io_req *req)
{
	return req->held;
}

/*
 * Create an engine whose completions run on `event`.
 * \param kind         IO_ENGINE_AUTO, or one engine forced by the config
 * \param queue_depth  requests in flight at most (0: IO_QUEUE_DEPTH_DEFAULT,
 *                     at most IO_QUEUE_DEPTH_MAX)
 * \return 0 or a negative errno; with IO_ENGINE_URING the reason io_uring
 *         could not be set up (e.g. -EPERM when it is disabled)
 * Logs which engine it is and why, once (a warning for a fallback).
 */
int io_engine_new(sd_event *event, enum io_engine_kind kind, unsigned queue_depth,
		  struct io_engine **ret);

/*
 * Drop the requests still queued, cancel and wait for those in flight, and
 * free the engine.  done() is called for none of them: their memory may be
 * released once this returns, not before (an in-flight write keeps reading
 * its buffer, a read keeps writing into it).  With io_uring every request the
 * kernel holds is cancelled (IORING_OP_ASYNC_CANCEL; one the device is
 * already working on cannot be, and is waited for).  If waiting fails
 * IO_RETRY_MAX times in a row, the engine gives up and logs how many the
 * kernel still holds: those keep io_req_held() true, and the caller must
 * leave their memory allocated for good rather than free it.  The worker
 * threads always finish the pread/pwrite they are in.  Closes the engine's
 * own copies of the files.  Accepts NULL.
 */
void io_engine_free(struct io_engine *io);

/* Test faults (below) are not injected into this engine's I/O: the NVMe
 * tier's recovery reads through an engine of its own, and the fault tests
 * of write-back and staging count only theirs. */
void io_engine_unfaulted(struct io_engine *io);

/* "io_uring" or "threads". */
const char *io_engine_name(const struct io_engine *io);
/* Why this engine, for operators: "forced by configuration", "io_uring
 * disabled by kernel.io_uring_disabled=2", ... */
const char *io_engine_reason(const struct io_engine *io);

/*
 * Make fd usable by requests.  The engine keeps its own duplicate (closed by
 * io_engine_free), so the caller may close fd at any time.
 * \return the index for io_req.file (>= 0), or a negative errno: -EBADF,
 *         -EMFILE when IO_MAX_FILES files were added
 */
int io_file_add(struct io_engine *io, int fd);

/*
 * Announce a memory region requests may point into (a pool extent).  With
 * io_uring it is registered as fixed buffers of at most 1 GiB each, so a
 * request must not cross a 1 GiB boundary from base to use them (one that
 * does works, unregistered).  The region must stay mapped until
 * io_engine_free: its pages stay pinned by the ring until then.
 * \return 0, also when registration was refused (RLIMIT_MEMLOCK, a mapping
 *         io_uring cannot pin, a full table: logged once, and plain
 *         READ/WRITE are used for it); -EINVAL for an empty or unaligned
 *         region, -EEXIST when it overlaps one already added, -ENOMEM
 */
int io_buffer_add(struct io_engine *io, void *base, size_t len);

/*
 * Queue a request.  The engine owns it until req->done runs; a malformed
 * request (bad file index, unaligned, zero length) is completed with
 * -EINVAL from the event loop, like any other.  A request without done
 * cannot be completed: it is logged as an error and dropped, never queued,
 * and stays the caller's.  A NULL req is ignored.
 */
void io_submit(struct io_engine *io, struct io_req *req);

/* Requests submitted whose done() has not run yet: in flight and queued. */
unsigned io_in_flight(const struct io_engine *io);

struct io_stats {
	uint64_t reads, writes;            /* requests finished, either way */
	uint64_t read_bytes, write_bytes;  /* of requests finished successfully */
	uint64_t errors;                   /* requests finished with an error */
	uint64_t short_requeued;           /* short transfers resubmitted */
	uint64_t retried;                  /* resubmissions after -EAGAIN/-EINTR */
	uint64_t submit_errors;            /* io_uring submissions refused */
	uint64_t injected;                 /* faults injected (test-only) */
};

void io_get_stats(const struct io_engine *io, struct io_stats *ret);

/*
 * Test-only faults on completions (fault.h: read_eio, write_eio,
 * write_enospc, read_eagain, write_eagain, read_short, write_short): the Nth
 * completion the engine receives in that direction (resubmitted requests
 * included) gets -EIO, -ENOSPC or -EAGAIN, or a successful one of at least
 * 2 * IO_ALIGN bytes is cut to half its length, rounded down to IO_ALIGN,
 * before the engine looks at it.  The I/O itself happened in full.  And on
 * submissions (uring_submit): the Nth io_uring_enter() the engine makes,
 * to submit or to wait at shutdown, fails with -ENXIO without entering the
 * kernel.  Counted in io_stats.injected.
 */
