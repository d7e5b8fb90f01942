/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One file, past the length the project aims at, because it is one
 * concept: the I/O engine of io.h.  Its two mechanisms (io_uring and the
 * pread/pwrite threads) are not separate parts: both hand every completion
 * to the one path that requeues short transfers, retries -EAGAIN with a
 * back-off and injects test faults, and the event-loop side dispatches to
 * whichever is running.  In files of their own the mechanisms and that
 * common part would call each other; keeping them here keeps the engine's
 * state (struct io_engine) private to one file.  Sections: completion,
 * io_uring, threads, the event-loop side, the public calls.
 */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fault.h"
#include "io.h"
#include "log.h"

/* The kernel refuses a fixed buffer above 1 GiB (EFAULT). */
#define IO_BUFFER_MAX (UINT64_C(1) << 30)
/* pread/pwrite workers: two keep an NVMe queue busy without taking both
 * cores of a small node from the event loop. */
#define IO_THREADS 2u

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
	enum io_engine_kind kind;      /* URING or THREADS, once chosen */
	unsigned queue_depth;
	char reason[192];

	int fds[IO_MAX_FILES];
	unsigned n_files;

	struct io_region *regions;     /* sorted by base, not overlapping */
	size_t n_regions, regions_cap;
	unsigned n_buffers;            /* fixed-buffer slots used */
	bool warned_buffers;

	/* Requests waiting for a slot, in order; resubmitted remainders go
	 * first, since they already had their turn. */
	struct io_req *queue_head, *queue_tail;
	unsigned n_queued;
	/* Requests failed before they reached the kernel (malformed, or
	 * refused by io_uring_enter() too often), completed with req->result
	 * from the defer source so that done() never runs inside io_submit(). */
	struct io_req *bad_head, *bad_tail;
	unsigned n_bad;
	/* Requests waiting out a back-off after -EAGAIN or -EINTR; the retry
	 * timer puts them back at the head of the queue. */
	struct io_req *retry_head, *retry_tail;
	unsigned n_retry;
	/* With the kernel or a worker; at most queue_depth. */
	unsigned n_active;

	struct io_stats stats;

	/* io_uring */
	struct io_uring ring;
	bool ring_ready;
	bool warned_submit;
	unsigned submit_failures;      /* io_uring_enter() refusals in a row */
	bool submit_backoff;           /* the retry timer submits next, not the loop */

	/* threads */
	pthread_t threads[IO_THREADS];
	unsigned n_threads;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool lock_ready;
	struct io_req *work_head, *work_tail; /* to the workers */
	struct io_req *done_head, *done_tail; /* back from them */
	bool stop;
};

static void list_append(struct io_req **head, struct io_req **tail, struct io_req *req)
{
	req->next = NULL;
	if (*tail)
		(*tail)->next = req;
	else
		*head = req;
	*tail = req;
}

static struct io_req *list_pop(struct io_req **head, struct io_req **tail)
{
	struct io_req *req = *head;

	if (req) {
		*head = req->next;
		if (!*head)
			*tail = NULL;
		req->next = NULL;
	}
	return req;
}

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
	list_append(&io->bad_head, &io->bad_tail, req);
	io->n_bad++;
	arm_defer(io);
}

/* ---- fault injection (test-only, fault.h) ------------------------------- */

static int faults_apply(struct io_engine *io, const struct io_req *req, int res)
{
	if (!fault_armed)
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
		list_append(&io->retry_head, &io->retry_tail, req);
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

/* ---- io_uring ----------------------------------------------------------- */

/* liburing 2.3 declares io_uring_register_restrictions() and
 * io_uring_enable_rings() but its shared library does not export them, so
 * every registration goes through the system call itself. */
static int uring_register(struct io_engine *io, unsigned op, const void *arg, unsigned nr)
{
	long r = syscall(__NR_io_uring_register, io->ring.ring_fd, op, arg, nr);
	return r < 0 ? -errno : (int)r;
}

static int uring_register_sparse(struct io_engine *io, unsigned op, unsigned nr)
{
	struct io_uring_rsrc_register reg = {
		.nr = nr,
		.flags = IORING_RSRC_REGISTER_SPARSE,
	};
	return uring_register(io, op, &reg, sizeof(reg));
}

static int uring_update(struct io_engine *io, unsigned op, unsigned slot, const void *data)
{
	struct io_uring_rsrc_update2 up = {
		.offset = slot,
		.data = (uint64_t)(uintptr_t)data,
		.nr = 1,
	};
	return uring_register(io, op, &up, sizeof(up));
}

static const char *setup_refused_reason(int r, char *buf, size_t n)
{
	FILE *f;
	int disabled = -1;

	if (r == -ENOSYS) {
		snprintf(buf, n, "io_uring_setup() is not available (kernel without io_uring, or a seccomp filter)");
		return buf;
	}
	if (r != -EPERM && r != -EACCES) {
		snprintf(buf, n, "io_uring_setup() failed: %s", strerror(-r));
		return buf;
	}
	f = fopen("/proc/sys/kernel/io_uring_disabled", "re");
	if (f) {
		if (fscanf(f, "%d", &disabled) != 1)
			disabled = -1;
		fclose(f);
	}
	if (disabled == 2)
		snprintf(buf, n, "io_uring disabled by kernel.io_uring_disabled=2");
	else if (disabled == 1)
		snprintf(buf, n, "io_uring limited to kernel.io_uring_group by kernel.io_uring_disabled=1");
	else
		snprintf(buf, n, "io_uring_setup() refused (%s): a seccomp filter or a security module",
			 strerror(-r));
	return buf;
}

static int uring_setup(struct io_engine *io, char *why, size_t n)
{
	struct io_uring_params p = {
		/* Disabled until restricted; SUBMIT_ALL so that one bad SQE
		 * fails alone instead of stalling the rest of its batch. */
		.flags = IORING_SETUP_R_DISABLED | IORING_SETUP_SUBMIT_ALL | IORING_SETUP_CLAMP,
	};
	/* Only what the engine issues: reads and writes, on registered files
	 * only (a ring that cannot name an fd cannot touch anything the
	 * daemon did not hand it), the cancellation of its own requests at
	 * shutdown, and the two updates that add files and pool extents
	 * later.  Every other SQE fails with -EACCES, every other register
	 * operation with EACCES. */
	const struct io_uring_restriction res[] = {
		{ .opcode = IORING_RESTRICTION_SQE_OP, .sqe_op = IORING_OP_READ },
		{ .opcode = IORING_RESTRICTION_SQE_OP, .sqe_op = IORING_OP_WRITE },
		{ .opcode = IORING_RESTRICTION_SQE_OP, .sqe_op = IORING_OP_READ_FIXED },
		{ .opcode = IORING_RESTRICTION_SQE_OP, .sqe_op = IORING_OP_WRITE_FIXED },
		{ .opcode = IORING_RESTRICTION_SQE_OP, .sqe_op = IORING_OP_ASYNC_CANCEL },
		{ .opcode = IORING_RESTRICTION_SQE_FLAGS_REQUIRED, .sqe_flags = IOSQE_FIXED_FILE },
		{ .opcode = IORING_RESTRICTION_REGISTER_OP, .register_op = IORING_REGISTER_FILES_UPDATE2 },
		{ .opcode = IORING_RESTRICTION_REGISTER_OP, .register_op = IORING_REGISTER_BUFFERS_UPDATE },
	};
	int r;

	r = io_uring_queue_init_params(io->queue_depth, &io->ring, &p);
	if (r == -EINVAL) {
		/* SUBMIT_ALL came with 5.18. */
		memset(&p, 0, sizeof(p));
		p.flags = IORING_SETUP_R_DISABLED | IORING_SETUP_CLAMP;
		r = io_uring_queue_init_params(io->queue_depth, &io->ring, &p);
	}
	if (r < 0) {
		setup_refused_reason(r, why, n);
		return r;
	}

	r = uring_register_sparse(io, IORING_REGISTER_FILES2, IO_MAX_FILES);
	if (r < 0) {
		snprintf(why, n, "a sparse fixed-file table was refused: %s%s", strerror(-r),
			 r == -EINVAL ? " (kernel older than 5.19?)" : "");
		goto fail;
	}
	r = uring_register_sparse(io, IORING_REGISTER_BUFFERS2, IO_MAX_BUFFERS);
	if (r < 0) {
		snprintf(why, n, "a sparse fixed-buffer table was refused: %s", strerror(-r));
		goto fail;
	}
	/* Now, while the ring is disabled: after the restrictions it would
	 * need its own place on the allow-list. */
	r = uring_register(io, IORING_REGISTER_EVENTFD, &io->efd, 1);
	if (r < 0) {
		snprintf(why, n, "the completion eventfd was refused: %s", strerror(-r));
		goto fail;
	}
	r = uring_register(io, IORING_REGISTER_RESTRICTIONS, res, sizeof(res) / sizeof(res[0]));
	if (r < 0) {
		snprintf(why, n, "the ring could not be restricted: %s", strerror(-r));
		goto fail;
	}
	r = uring_register(io, IORING_REGISTER_ENABLE_RINGS, NULL, 0);
	if (r < 0) {
		snprintf(why, n, "the restricted ring could not be enabled: %s", strerror(-r));
		goto fail;
	}
	io->ring_ready = true;
	return 0;
fail:
	io_uring_queue_exit(&io->ring);
	return r;
}

/* io_uring_enter(): submit what the SQ ring holds and, with wait_nr, wait
 * for that many completions.  uring_submit is its fault site (fault.h). */
static int uring_enter(struct io_engine *io, unsigned wait_nr)
{
	if (fault_hit(FAULT_URING_SUBMIT)) {
		io->stats.injected++;
		return -ENXIO;
	}
	return wait_nr ? io_uring_submit_and_wait(&io->ring, wait_nr) : io_uring_submit(&io->ring);
}

/*
 * Take the SQEs the kernel has not consumed back out of the SQ ring: their
 * requests never reached it, so they are the engine's again.  Returns them
 * as a list through next, oldest first.  Without SQPOLL the kernel reads the
 * SQ ring only inside io_uring_enter() on this thread, so moving its tail
 * back cannot race it.  An SQE sits at its position in sqes[] (liburing's
 * own io_uring_get_sqe() puts it there), whatever the index array says.
 */
static struct io_req *uring_unsubmit(struct io_engine *io, unsigned *ret_n)
{
	struct io_uring_sq *sq = &io->ring.sq;
	unsigned head = __atomic_load_n(sq->khead, __ATOMIC_ACQUIRE);
	struct io_req *list = NULL, *tail = NULL;
	unsigned n = 0;

	for (unsigned i = head; i != sq->sqe_tail; i++) {
		struct io_uring_sqe *sqe = &sq->sqes[i & *sq->kring_mask];
		struct io_req *req = (struct io_req *)(uintptr_t)sqe->user_data;

		if (!req)
			continue; /* the cancellation at shutdown */
		req->held = false;
		io->n_active--;
		list_append(&list, &tail, req);
		n++;
	}
	sq->sqe_head = sq->sqe_tail = head;
	__atomic_store_n(sq->ktail, head, __ATOMIC_RELEASE);
	*ret_n = n;
	return list;
}

/* Submit what the SQ ring holds, unless a back-off is running. */
static void uring_submit(struct io_engine *io)
{
	struct io_req *list, *req;
	unsigned n;
	int r;

	if (io->submit_backoff || io_uring_sq_ready(&io->ring) == 0)
		return;
	r = uring_enter(io, 0);
	if (r > 0) {
		io->submit_failures = 0;
		/* What the kernel did not take stays in the SQ ring for the
		 * next try; it counts as in flight already. */
		if (io_uring_sq_ready(&io->ring) > 0)
			arm_defer(io);
		return;
	}
	if (r == 0)
		r = -EAGAIN; /* took nothing and said nothing */
	io->stats.submit_errors++;
	/* -EAGAIN and -EBUSY pass (memory, a full completion ring), others
	 * (-ENXIO: a ring being torn down, -EFAULT, -EBADF) may not: both
	 * get the same few tries, spaced out, so that neither spins. */
	if (++io->submit_failures <= IO_RETRY_MAX) {
		if (io->submit_failures == 1 && !io->warned_submit)
			log_warning_errno(r, "io_uring refused a submission, retrying: %m");
		io->submit_backoff = true;
		arm_retry(io, io->submit_failures);
		return;
	}
	list = uring_unsubmit(io, &n);
	if (!io->warned_submit)
		log_error_errno(r, "io_uring refused %u submissions in a row, failing the %u I/O requests they held: %m",
				io->submit_failures, n);
	else
		log_debug_errno(r, "io_uring refused %u submissions in a row, failing the %u I/O requests they held: %m",
				io->submit_failures, n);
	io->warned_submit = true;
	io->submit_failures = 0;
	while ((req = list)) {
		list = req->next;
		fail_later(io, req, r);
	}
}

static void uring_flush(struct io_engine *io)
{
	struct io_req *req;

	while (io->queue_head && io->n_active < io->queue_depth) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&io->ring);
		if (!sqe)
			break;
		req = list_pop(&io->queue_head, &io->queue_tail);
		io->n_queued--;

		uint8_t *p = (uint8_t *)req->buf + req->progress;
		uint32_t len = req->len - req->progress;
		uint64_t off = req->offset + req->progress;
		if (req->buf_index >= 0) {
			if (req->write)
				io_uring_prep_write_fixed(sqe, req->file, p, len, off, req->buf_index);
			else
				io_uring_prep_read_fixed(sqe, req->file, p, len, off, req->buf_index);
		} else {
			if (req->write)
				io_uring_prep_write(sqe, req->file, p, len, off);
			else
				io_uring_prep_read(sqe, req->file, p, len, off);
		}
		sqe->flags |= IOSQE_FIXED_FILE;
		io_uring_sqe_set_data(sqe, req);
		req->held = true;
		io->n_active++;
	}
	uring_submit(io);
}

static void uring_reap(struct io_engine *io)
{
	struct io_uring_cqe *cqe;

	/* One CQE at a time and marked seen before done() runs: done() may
	 * submit, and the kernel may post new CQEs while this loop runs. */
	while (io_uring_peek_cqe(&io->ring, &cqe) == 0) {
		struct io_req *req = io_uring_cqe_get_data(cqe);
		int res = cqe->res;

		io_uring_cqe_seen(&io->ring, cqe);
		req->held = false;
		io->n_active--;
		completed(io, req, res);
	}
}

/*
 * Cancel every request the kernel holds, and wait for all of them: pages
 * pinned or written by an in-flight request must not be reused before it
 * ends, and closing the ring does not wait for them.  A read from a file
 * that never answers would otherwise hold shutdown for good; one the
 * device is already working on cannot be cancelled and ends by itself.  If
 * the wait keeps failing, the requests the kernel still holds keep their
 * held mark, and their owners must leave their memory alone.
 */
static void uring_drain(struct io_engine *io)
{
	struct io_uring_cqe *cqe;
	unsigned failures = 0, cancelled = 0, n_unsubmitted = 0;
	bool cancel_queued = false;
	int r = 0;

	if (io->n_active > 0)
		log_debug("Cancelling %u io_uring requests in flight at shutdown", io->n_active);
	while (io->n_active > 0) {
		if (!cancel_queued) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&io->ring);
			if (sqe) {
				io_uring_prep_cancel64(sqe, 0, IORING_ASYNC_CANCEL_ANY);
				/* NULL: no request of ours.  Set, since the
				 * prep helpers leave the slot's last one. */
				io_uring_sqe_set_data(sqe, NULL);
				/* The restrictions want it on every SQE. */
				sqe->flags |= IOSQE_FIXED_FILE;
				cancel_queued = true;
			}
		}
		/* Without an SQE for the cancellation (the SQ ring full of
		 * requests not yet submitted), submit those first. */
		r = uring_enter(io, cancel_queued ? 1 : 0);
		while (io_uring_peek_cqe(&io->ring, &cqe) == 0) {
			struct io_req *req = io_uring_cqe_get_data(cqe);

			if (!req) {
				if (cqe->res > 0)
					cancelled += (unsigned)cqe->res;
			} else {
				req->held = false;
				io->n_active--;
			}
			io_uring_cqe_seen(&io->ring, cqe);
		}
		if (r >= 0 || r == -EINTR) {
			/* A signal is no failure: one is needed for each. */
			failures = 0;
			continue;
		}
		if (++failures > IO_RETRY_MAX)
			break;
	}
	if (cancelled > 0)
		log_debug("Cancelled %u io_uring requests at shutdown", cancelled);
	if (io->n_active == 0)
		return;
	/* What the kernel never consumed is not its. */
	(void)uring_unsubmit(io, &n_unsubmitted);
	if (io->n_active > 0)
		log_error_errno(r, "Failed to wait for %u io_uring requests at shutdown; their buffers are left allocated, not freed: %m",
				io->n_active);
}

/* ---- threads ------------------------------------------------------------ */

static int thread_io(struct io_engine *io, struct io_req *req)
{
	int fd = io->fds[req->file];
	uint8_t *p = (uint8_t *)req->buf + req->progress;
	size_t len = req->len - req->progress;
	off_t off = (off_t)(req->offset + req->progress);
	ssize_t n;

	n = req->write ? pwrite(fd, p, len, off) : pread(fd, p, len, off);
	if (n < 0)
		return -errno;
	return (int)n; /* at most 0x7ffff000 by the kernel's rule */
}

static void *worker(void *userdata)
{
	struct io_engine *io = userdata;
	const uint64_t one = 1;

	pthread_mutex_lock(&io->lock);
	for (;;) {
		struct io_req *req;

		while (!io->stop && !io->work_head)
			pthread_cond_wait(&io->cond, &io->lock);
		if (io->stop)
			break;
		req = list_pop(&io->work_head, &io->work_tail);
		pthread_mutex_unlock(&io->lock);

		req->result = thread_io(io, req);

		pthread_mutex_lock(&io->lock);
		list_append(&io->done_head, &io->done_tail, req);
		pthread_mutex_unlock(&io->lock);
		/* Cannot fail short of a counter at 2^64-1. */
		(void)!write(io->efd, &one, sizeof(one));
		pthread_mutex_lock(&io->lock);
	}
	pthread_mutex_unlock(&io->lock);
	return NULL;
}

static int threads_setup(struct io_engine *io)
{
	sigset_t all, old;
	unsigned n = io->queue_depth < IO_THREADS ? io->queue_depth : IO_THREADS;
	int r = 0;

	if (pthread_mutex_init(&io->lock, NULL) != 0)
		return -ENOMEM;
	if (pthread_cond_init(&io->cond, NULL) != 0) {
		pthread_mutex_destroy(&io->lock);
		return -ENOMEM;
	}
	io->lock_ready = true;
	/* Workers take no signals: the event loop receives them through
	 * signalfd, which needs them blocked in every thread, and the
	 * engine may well be created before the loop blocks them. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	for (unsigned i = 0; i < n; i++) {
		int e = pthread_create(&io->threads[i], NULL, worker, io);
		if (e != 0) {
			r = -e;
			break;
		}
		io->n_threads++;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return r;
}

static void threads_flush(struct io_engine *io)
{
	bool any = false;

	if (!io->queue_head || io->n_active >= io->queue_depth)
		return;
	pthread_mutex_lock(&io->lock);
	while (io->queue_head && io->n_active < io->queue_depth) {
		struct io_req *req = list_pop(&io->queue_head, &io->queue_tail);
		io->n_queued--;
		list_append(&io->work_head, &io->work_tail, req);
		io->n_active++;
		any = true;
	}
	if (any)
		pthread_cond_broadcast(&io->cond);
	pthread_mutex_unlock(&io->lock);
}

static void threads_reap(struct io_engine *io)
{
	struct io_req *list, *req;

	pthread_mutex_lock(&io->lock);
	list = io->done_head;
	io->done_head = io->done_tail = NULL;
	pthread_mutex_unlock(&io->lock);
	while ((req = list)) {
		list = req->next;
		req->next = NULL;
		io->n_active--;
		completed(io, req, req->result);
	}
}

/* Let the workers finish what they hold, drop what they have not started. */
static void threads_stop(struct io_engine *io)
{
	if (!io->lock_ready)
		return;
	pthread_mutex_lock(&io->lock);
	io->stop = true;
	io->work_head = io->work_tail = NULL;
	pthread_cond_broadcast(&io->cond);
	pthread_mutex_unlock(&io->lock);
	for (unsigned i = 0; i < io->n_threads; i++)
		pthread_join(io->threads[i], NULL);
	io->n_threads = 0;
	pthread_cond_destroy(&io->cond);
	pthread_mutex_destroy(&io->lock);
	io->lock_ready = false;
}

/* ---- the event-loop side ------------------------------------------------ */

static void flush(struct io_engine *io)
{
	if (io->kind == IO_ENGINE_URING)
		uring_flush(io);
	else
		threads_flush(io);
}

static int on_completions(sd_event_source *s, int fd, uint32_t revents, void *userdata)
{
	struct io_engine *io = userdata;
	uint64_t v;

	/* Reset the counter first: a completion posted after it wakes the
	 * loop again, one posted before it is reaped below. */
	(void)!read(io->efd, &v, sizeof(v));
	if (io->kind == IO_ENGINE_URING)
		uring_reap(io);
	else
		threads_reap(io);
	flush(io);
	return 0;
}

static int on_defer(sd_event_source *s, void *userdata)
{
	struct io_engine *io = userdata;
	struct io_req *req;

	while ((req = list_pop(&io->bad_head, &io->bad_tail))) {
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

int io_engine_new(sd_event *event, enum io_engine_kind kind, unsigned queue_depth,
		  struct io_engine **ret)
{
	struct io_engine *io;
	char why[160] = "";
	int r;

	if (!event || !ret || queue_depth > IO_QUEUE_DEPTH_MAX ||
	    (kind != IO_ENGINE_AUTO && kind != IO_ENGINE_URING && kind != IO_ENGINE_THREADS))
		return -EINVAL;
	io = calloc(1, sizeof(*io));
	if (!io)
		return -ENOMEM;
	io->event = sd_event_ref(event);
	io->queue_depth = queue_depth ? queue_depth : IO_QUEUE_DEPTH_DEFAULT;
	io->ring.ring_fd = -1;
	for (unsigned i = 0; i < IO_MAX_FILES; i++)
		io->fds[i] = -1;

	io->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (io->efd < 0) {
		r = log_error_errno(-errno, "Failed to create the I/O completion eventfd: %m");
		goto fail;
	}

	if (kind != IO_ENGINE_THREADS) {
		r = uring_setup(io, why, sizeof(why));
		if (r >= 0) {
			io->kind = IO_ENGINE_URING;
			snprintf(io->reason, sizeof(io->reason), "%s",
				 kind == IO_ENGINE_URING ? "forced by configuration" :
							   "restricted io_uring available");
		} else if (kind == IO_ENGINE_URING) {
			log_error_errno(r, "io_uring is forced by the configuration but unavailable: %s", why);
			goto fail;
		}
	}
	if (!io->ring_ready) {
		r = threads_setup(io);
		if (r < 0) {
			log_error_errno(r, "Failed to start the I/O worker threads: %m");
			goto fail;
		}
		io->kind = IO_ENGINE_THREADS;
		if (kind == IO_ENGINE_THREADS)
			snprintf(io->reason, sizeof(io->reason), "forced by configuration");
		else
			snprintf(io->reason, sizeof(io->reason), "io_uring unavailable: %s", why);
	}

	r = event_sources_add(io, event);
	if (r < 0)
		goto fail;

	if (io->kind == IO_ENGINE_URING)
		log_info("I/O engine: io_uring (%s), queue depth %u", io->reason, io->queue_depth);
	else if (kind == IO_ENGINE_THREADS)
		log_info("I/O engine: threads (%s), queue depth %u, %u workers", io->reason,
			 io->queue_depth, io->n_threads);
	else
		log_warning("I/O engine: threads, pread/pwrite on %u workers (%s), queue depth %u",
			    io->n_threads, io->reason, io->queue_depth);
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
	if (io->ring_ready) {
		uring_drain(io);
		io_uring_queue_exit(&io->ring);
	}
	threads_stop(io);
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
	return io->kind == IO_ENGINE_URING ? "io_uring" : "threads";
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
	if (io->kind == IO_ENGINE_URING) {
		r = uring_update(io, IORING_REGISTER_FILES_UPDATE2, i, &copy);
		if (r < 0) {
			close(copy);
			return log_error_errno(r, "Failed to add fd %d to the io_uring file table: %m", fd);
		}
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
	struct iovec iov = { .iov_base = base, .iov_len = len };
	int r;

	if (io->kind != IO_ENGINE_URING)
		return -1;
	if (io->n_buffers >= IO_MAX_BUFFERS) {
		if (!io->warned_buffers)
			log_warning("The io_uring fixed-buffer table is full (%u buffers); later pool memory uses unregistered reads and writes",
				    IO_MAX_BUFFERS);
		io->warned_buffers = true;
		return -1;
	}
	r = uring_update(io, IORING_REGISTER_BUFFERS_UPDATE, io->n_buffers, &iov);
	if (r == 1)
		return (int)io->n_buffers++;
	if (r >= 0)
		r = -EIO;
	if (!io->warned_buffers)
		log_warning_errno(r, "Failed to register %llu MiB of pool memory as an io_uring fixed buffer%s, using unregistered reads and writes for it: %m",
				  (unsigned long long)(len >> 20),
				  r == -ENOMEM ? " (RLIMIT_MEMLOCK: raise LimitMEMLOCK=)" : "");
	else
		log_debug_errno(r, "Failed to register %llu MiB as an io_uring fixed buffer, ignoring: %m",
				(unsigned long long)(len >> 20));
	io->warned_buffers = true;
	return -1;
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
	/* A remainder after a short transfer stays inside the same buffer. */
	if (io->kind == IO_ENGINE_URING)
		req->buf_index = buffer_find(io, req->buf, req->len);
	list_append(&io->queue_head, &io->queue_tail, req);
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
}
