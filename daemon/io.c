/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The I/O engine of io.h, the part common to its backends: the request
 * queue, the back-off and retry of -EAGAIN/-EINTR, the resubmission of
 * short transfers, completion, fault injection on completions, statistics,
 * the pool regions and the event-loop side.  The mechanism that moves the
 * bytes is a backend behind struct io_backend_ops (io-private.h): io_uring
 * (io-uring.c) or pread/pwrite threads (io-threads.c), chosen once in
 * io_engine_new().  Every completion of either comes back through
 * io_upcalls to the one path here, so both behave alike.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "fault.h"
#include "io-private.h"
#include "log.h"

/* The kernel refuses a fixed buffer above 1 GiB (EFAULT). */
#define IO_BUFFER_MAX (UINT64_C(1) << 30)

/* A piece of a region added with io_buffer_add: at most one fixed buffer. */
struct io_region {
	uint8_t *base;
	uint64_t len;
	int buf_index; /* -1: not registered, plain READ/WRITE */
};

struct io_engine {
	sd_event *event;
	sd_event_source *done_source;  /* the completion eventfd */
	sd_event_source *defer_source; /* the batch submission */
	sd_event_source *retry_source; /* the back-off before a retry */
	int efd;
	const struct io_backend_ops *ops; /* chosen once, in io_engine_new() */
	struct io_backend *backend;
	unsigned queue_depth;
	char reason[384];

	int fds[IO_MAX_FILES];
	unsigned n_files;

	struct io_region *regions;     /* sorted by base, not overlapping */
	size_t n_regions, regions_cap;

	/* Requests waiting for a slot, in order; resubmitted remainders go
	 * first, since they already had their turn. */
	struct io_req *queue_head, *queue_tail;
	unsigned n_queued;
	/* Requests failed before they reached the kernel (malformed, or
	 * refused by the backend too often), completed with req->result
	 * from the defer source so that done() never runs inside io_submit(). */
	struct io_req *bad_head, *bad_tail;
	unsigned n_bad;
	/* Requests waiting out a back-off after -EAGAIN or -EINTR; the retry
	 * timer puts them back at the head of the queue. */
	struct io_req *retry_head, *retry_tail;
	unsigned n_retry;
	/* Started by the backend and not completed; at most queue_depth. */
	unsigned n_active;
	/* The backend asked for a back-off (io_upcalls.backoff): the retry
	 * timer submits next, not the loop. */
	bool submit_backoff;

	struct io_stats stats;
};

static void arm_defer(struct io_engine *io)
{
	sd_event_source_set_enabled(io->defer_source, SD_EVENT_ONESHOT);
}

/* The retry timer, for the back-off of the nth retry in a row; one that is
 * armed already is left as it is (whatever waits goes when it fires). */
static void arm_retry(struct io_engine *io, unsigned nth)
{
	uint64_t now = 0;
	int enabled = SD_EVENT_OFF;

	(void)sd_event_source_get_enabled(io->retry_source, &enabled);
	if (enabled != SD_EVENT_OFF)
		return;
	sd_event_now(io->event, CLOCK_MONOTONIC, &now);
	(void)sd_event_source_set_time(io->retry_source,
				       now + ((uint64_t)IO_RETRY_DELAY_USEC << (nth - 1)));
	sd_event_source_set_enabled(io->retry_source, SD_EVENT_ONESHOT);
}

/* Complete req with error from the defer source. */
static void fail_later(struct io_engine *io, struct io_req *req, int error)
{
	req->result = error;
	io_list_append(&io->bad_head, &io->bad_tail, req);
	io->n_bad++;
	arm_defer(io);
}

/* ---- fault injection (test-only, fault.h) ------------------------------- */

void io_engine_unfaulted(struct io_engine *io)
{
	io->backend->unfaulted = true;
}

static int faults_apply(struct io_engine *io, const struct io_req *req, int res)
{
	if (!fault_armed || io->backend->unfaulted)
		return res;
	if (fault_hit(req->write ? FAULT_WRITE_EIO : FAULT_READ_EIO)) {
		io->stats.injected++;
		return -EIO;
	}
	if (req->write && fault_hit(FAULT_WRITE_ENOSPC)) {
		io->stats.injected++;
		return -ENOSPC;
	}
	if (fault_hit(req->write ? FAULT_WRITE_EAGAIN : FAULT_READ_EAGAIN)) {
		io->stats.injected++;
		return -EAGAIN;
	}
	/* Cut to whole blocks: an O_DIRECT remainder must stay aligned.  Only
	 * what can be cut is counted, so the Nth cut is always a real one. */
	if (res >= (int)(2 * IO_ALIGN) &&
	    fault_hit(req->write ? FAULT_WRITE_SHORT : FAULT_READ_SHORT)) {
		io->stats.injected++;
		return (int)(((unsigned)res / 2) & ~(IO_ALIGN - 1));
	}
	return res;
}

/* ---- completion, common to both engines --------------------------------- */

static void finish(struct io_engine *io, struct io_req *req, int res)
{
	if (req->write)
		io->stats.writes++;
	else
		io->stats.reads++;
	if (res < 0)
		io->stats.errors++;
	else if (req->write)
		io->stats.write_bytes += req->len;
	else
		io->stats.read_bytes += req->len;
	req->next = NULL;
	req->done(req, res, req->userdata);
}

static void requeue(struct io_engine *io, struct io_req *req)
{
	req->next = io->queue_head;
	io->queue_head = req;
	if (!io->queue_tail)
		io->queue_tail = req;
	io->n_queued++;
}

/* One completion of req's current transfer; n_active already counts it out. */
static void completed(struct io_engine *io, struct io_req *req, int res)
{
	uint32_t remaining = req->len - req->progress;

	res = faults_apply(io, req, res);
	/* Worth another try, but not at once and not forever: a device that
	 * keeps answering -EAGAIN would otherwise keep the loop spinning and
	 * the request's owner waiting for good. */
	if ((res == -EAGAIN || res == -EINTR) && req->retries < IO_RETRY_MAX) {
		req->retries++;
		io->stats.retried++;
		io_list_append(&io->retry_head, &io->retry_tail, req);
		io->n_retry++;
		arm_retry(io, req->retries);
		return;
	}
	if (res < 0) {
		finish(io, req, res);
		return;
	}
	/* Nothing moved and nothing failed: a read past the end of the file
	 * (a write never does this); resubmitting would spin. */
	if (res == 0) {
		finish(io, req, req->write ? -EIO : -ENODATA);
		return;
	}
	if ((uint32_t)res > remaining)
		res = (int)remaining;
	req->progress += (uint32_t)res;
	if (req->progress < req->len) {
		io->stats.short_requeued++;
		requeue(io, req);
		return;
	}
	finish(io, req, (int)req->len);
}

/* ---- what the backends report (struct io_upcalls) ---------------------- */

static void up_completed(struct io_engine *io, struct io_req *req, int res)
{
	io->n_active--;
	completed(io, req, res);
}

static void up_refused(struct io_engine *io, struct io_req *req, int error)
{
	io->n_active--;
	fail_later(io, req, error);
}

static void up_submit_later(struct io_engine *io)
{
	arm_defer(io);
}

/* One timer for both kinds of back-off: a refused submission and requests
 * after -EAGAIN wait out the same one, and go together when it fires. */
static void up_backoff(struct io_engine *io, unsigned nth)
{
	io->submit_backoff = true;
	arm_retry(io, nth);
}

static const struct io_upcalls upcalls = {
	.completed = up_completed,
	.refused = up_refused,
	.submit_later = up_submit_later,
	.backoff = up_backoff,
};

/* ---- the event-loop side ------------------------------------------------ */

/* Start queued requests while fewer than queue_depth are in flight and the
 * backend has room, then submit them, unless a back-off is running. */
static void flush(struct io_engine *io)
{
	while (io->queue_head && io->n_active < io->queue_depth) {
		struct io_req *req = io_list_pop(&io->queue_head, &io->queue_tail);

		io->n_queued--;
		if (io->ops->start(io->backend, req) < 0) {
			requeue(io, req);
			break;
		}
		io->n_active++;
	}
	if (!io->submit_backoff)
		io->ops->submit(io->backend);
}

static int on_completions(sd_event_source *s, int fd, uint32_t revents, void *userdata)
{
	struct io_engine *io = userdata;
	uint64_t v;

	/* Reset the counter first: a completion posted after it wakes the
	 * loop again, one posted before it is reaped below. */
	(void)!read(io->efd, &v, sizeof(v));
	io->ops->reap(io->backend);
	flush(io);
	return 0;
}

static int on_defer(sd_event_source *s, void *userdata)
{
	struct io_engine *io = userdata;
	struct io_req *req;

	while ((req = io_list_pop(&io->bad_head, &io->bad_tail))) {
		io->n_bad--;
		finish(io, req, req->result);
	}
	flush(io);
	return 0;
}

static int on_retry(sd_event_source *s, uint64_t usec, void *userdata)
{
	struct io_engine *io = userdata;

	/* In front of the queue, in their order: they already had their
	 * turn. */
	if (io->retry_head) {
		io->retry_tail->next = io->queue_head;
		if (!io->queue_head)
			io->queue_tail = io->retry_tail;
		io->queue_head = io->retry_head;
		io->n_queued += io->n_retry;
		io->retry_head = io->retry_tail = NULL;
		io->n_retry = 0;
	}
	io->submit_backoff = false;
	flush(io);
	return 0;
}

/* The completions' eventfd, the deferred submission and the retry timer
 * on the daemon's event loop. */
static int event_sources_add(struct io_engine *io, sd_event *event)
{
	int r;

	r = sd_event_add_io(event, &io->done_source, io->efd, EPOLLIN, on_completions, io);
	if (r < 0)
		return log_error_errno(r, "Failed to watch the I/O completion eventfd: %m");
	(void)sd_event_source_set_description(io->done_source, "io-completions");
	r = sd_event_add_defer(event, &io->defer_source, on_defer, io);
	if (r < 0)
		return log_error_errno(r, "Failed to add the I/O submission source: %m");
	(void)sd_event_source_set_description(io->defer_source, "io-submit");
	sd_event_source_set_enabled(io->defer_source, SD_EVENT_OFF);
	/* Accurate to the microsecond: the back-offs are that short. */
	r = sd_event_add_time(event, &io->retry_source, CLOCK_MONOTONIC, 0, 1, on_retry, io);
	if (r < 0)
		return log_error_errno(r, "Failed to add the I/O retry timer: %m");
	(void)sd_event_source_set_description(io->retry_source, "io-retry");
	sd_event_source_set_enabled(io->retry_source, SD_EVENT_OFF);
	return 0;
}

/* Set up the backend of ops; 0, or a negative errno with *why saying why. */
static int backend_new(struct io_engine *io, const struct io_backend_ops *ops, char *why, size_t n)
{
	const struct io_backend base = {
		.io = io,
		.up = &upcalls,
		.queue_depth = io->queue_depth,
		.efd = io->efd,
	};
	int r;

	r = ops->new(&base, why, n, &io->backend);
	if (r < 0)
		return r;
	io->ops = ops;
	return 0;
}

int io_engine_new(sd_event *event, enum io_engine_kind kind, unsigned queue_depth,
		  struct io_engine **ret)
{
	struct io_engine *io;
	/* threads_why: a worker that did not start says no more than the
	 * errno logged below. */
	char why[320] = "", threads_why[160] = "";
	int r;

	if (!event || !ret || queue_depth > IO_QUEUE_DEPTH_MAX ||
	    (kind != IO_ENGINE_AUTO && kind != IO_ENGINE_URING && kind != IO_ENGINE_THREADS))
		return -EINVAL;
	io = calloc(1, sizeof(*io));
	if (!io)
		return -ENOMEM;
	io->event = sd_event_ref(event);
	io->queue_depth = queue_depth ? queue_depth : IO_QUEUE_DEPTH_DEFAULT;
	for (unsigned i = 0; i < IO_MAX_FILES; i++)
		io->fds[i] = -1;

	io->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (io->efd < 0) {
		r = log_error_errno(-errno, "Failed to create the I/O completion eventfd: %m");
		goto fail;
	}

	/* The one place that looks at the kind: from here on the engine
	 * knows its backend only by io->ops. */
	if (kind != IO_ENGINE_THREADS) {
		r = backend_new(io, &io_backend_uring_ops, why, sizeof(why));
		if (r >= 0) {
			snprintf(io->reason, sizeof(io->reason), "%s",
				 kind == IO_ENGINE_URING ? "forced by configuration" :
							   "restricted io_uring available");
		} else if (kind == IO_ENGINE_URING) {
			log_error_errno(r, "io_uring is forced by the configuration but unavailable: %s", why);
			goto fail;
		}
	}
	if (!io->backend) {
		r = backend_new(io, &io_backend_threads_ops, threads_why, sizeof(threads_why));
		if (r < 0) {
			log_error_errno(r, "Failed to start the I/O worker threads: %m");
			goto fail;
		}
		if (kind == IO_ENGINE_THREADS)
			snprintf(io->reason, sizeof(io->reason), "forced by configuration");
		else
			snprintf(io->reason, sizeof(io->reason), "io_uring unavailable: %s", why);
	}

	r = event_sources_add(io, event);
	if (r < 0)
		goto fail;

	io->ops->announce(io->backend, io->reason, kind != IO_ENGINE_AUTO);
	*ret = io;
	return 0;
fail:
	io_engine_free(io);
	return r;
}

void io_engine_free(struct io_engine *io)
{
	if (!io)
		return;
	sd_event_source_disable_unref(io->done_source);
	sd_event_source_disable_unref(io->defer_source);
	sd_event_source_disable_unref(io->retry_source);
	/* Queued, waiting out a back-off or failed: none reached the kernel,
	 * and their done() is not called. */
	if (io->n_queued + io->n_retry + io->n_bad > 0)
		log_debug("Dropping %u I/O requests not submitted at shutdown",
			  io->n_queued + io->n_retry + io->n_bad);
	/* Before the eventfd and the files go: the backend may still be
	 * waiting for the kernel or a worker to finish with them. */
	if (io->backend)
		io->ops->free(io->backend);
	if (io->efd >= 0)
		close(io->efd);
	for (unsigned i = 0; i < io->n_files; i++)
		if (io->fds[i] >= 0)
			close(io->fds[i]);
	free(io->regions);
	sd_event_unref(io->event);
	free(io);
}

const char *io_engine_name(const struct io_engine *io)
{
	return io->ops->name;
}

const char *io_engine_reason(const struct io_engine *io)
{
	return io->reason;
}

int io_file_add(struct io_engine *io, int fd)
{
	unsigned i = io->n_files;
	int copy, r;

	if (i >= IO_MAX_FILES)
		return -EMFILE;
	/* Our own reference: the fixed-file table keeps the file alive for
	 * the ring regardless, and the workers need an fd that the caller
	 * cannot close or reuse under them. */
	copy = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (copy < 0)
		return -errno;
	r = io->ops->file_add(io->backend, i, copy);
	if (r < 0) {
		close(copy);
		return log_error_errno(r, "Failed to add fd %d to the %s file table: %m", fd,
				       io->ops->name);
	}
	io->fds[i] = copy;
	io->n_files++;
	return (int)i;
}

/* The index of the first region whose base is above p. */
static size_t region_upper(const struct io_engine *io, uintptr_t p)
{
	size_t lo = 0, hi = io->n_regions;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if ((uintptr_t)io->regions[mid].base <= p)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static int region_insert(struct io_engine *io, uint8_t *base, uint64_t len, int buf_index)
{
	size_t at = region_upper(io, (uintptr_t)base);

	if (io->n_regions == io->regions_cap) {
		size_t cap = io->regions_cap ? io->regions_cap * 2 : 16;
		struct io_region *n = realloc(io->regions, cap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		io->regions = n;
		io->regions_cap = cap;
	}
	memmove(&io->regions[at + 1], &io->regions[at], (io->n_regions - at) * sizeof(*io->regions));
	io->regions[at] = (struct io_region){ .base = base, .len = len, .buf_index = buf_index };
	io->n_regions++;
	return 0;
}

/* Register one piece of at most IO_BUFFER_MAX; -1 when it stays plain. */
static int buffer_register(struct io_engine *io, uint8_t *base, uint64_t len)
{
	if (!io->ops->buffer_register)
		return -1;
	return io->ops->buffer_register(io->backend, base, len);
}

int io_buffer_add(struct io_engine *io, void *base, size_t len)
{
	uint8_t *b = base;
	size_t at;
	int r;

	if (!base || len == 0 || (uintptr_t)base % IO_ALIGN || len % IO_ALIGN ||
	    (uintptr_t)base + len < (uintptr_t)base)
		return -EINVAL;
	at = region_upper(io, (uintptr_t)b);
	if (at > 0 && io->regions[at - 1].base + io->regions[at - 1].len > b)
		return -EEXIST;
	if (at < io->n_regions && io->regions[at].base < b + len)
		return -EEXIST;

	for (uint64_t done = 0; done < len;) {
		uint64_t n = len - done < IO_BUFFER_MAX ? len - done : IO_BUFFER_MAX;
		int idx = buffer_register(io, b + done, n);

		r = region_insert(io, b + done, n, idx);
		if (r < 0)
			/* The registered slot stays pinned until the ring
			 * goes: rare enough not to undo. */
			return r;
		done += n;
	}
	return 0;
}

/* The fixed buffer that holds all of [p, p + len), or -1. */
static int buffer_find(const struct io_engine *io, const void *p, uint32_t len)
{
	size_t at = region_upper(io, (uintptr_t)p);
	const struct io_region *reg;

	if (at == 0)
		return -1;
	reg = &io->regions[at - 1];
	if ((uintptr_t)p + len > (uintptr_t)reg->base + reg->len)
		return -1;
	return reg->buf_index;
}

void io_submit(struct io_engine *io, struct io_req *req)
{
	if (!req)
		return;
	if (!req->done) {
		log_error("An I/O request without a completion callback, dropping it");
		return;
	}
	req->progress = 0;
	req->buf_index = -1;
	req->result = 0;
	req->retries = 0;
	req->held = false;
	if (req->file < 0 || (unsigned)req->file >= io->n_files || req->len == 0 ||
	    req->len % IO_ALIGN || req->offset % IO_ALIGN || (uintptr_t)req->buf % IO_ALIGN ||
	    req->offset > (uint64_t)INT64_MAX - req->len) {
		fail_later(io, req, -EINVAL);
		return;
	}
	/* A remainder after a short transfer stays inside the same buffer.
	 * Only a backend with fixed buffers has any to find. */
	if (io->ops->buffer_register)
		req->buf_index = buffer_find(io, req->buf, req->len);
	io_list_append(&io->queue_head, &io->queue_tail, req);
	io->n_queued++;
	if (io->n_queued >= io->queue_depth)
		flush(io);
	arm_defer(io);
}

unsigned io_in_flight(const struct io_engine *io)
{
	return io->n_active + io->n_queued + io->n_bad + io->n_retry;
}

void io_get_stats(const struct io_engine *io, struct io_stats *ret)
{
	*ret = io->stats;
	if (io->ops->add_stats)
		io->ops->add_stats(io->backend, ret);
}
