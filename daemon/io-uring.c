/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The io_uring backend of the I/O engine (io-private.h): one restricted
 * ring with sparse fixed-file and fixed-buffer tables, its SQEs, its
 * submissions and their refusals, its completions handed up, and the
 * cancellation and wait at shutdown.
 */
#include <errno.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fault.h"
#include "io-private.h"
#include "log.h"
#include "macro.h"

struct uring {
	struct io_backend base;
	struct io_uring ring;
	/* Requests whose SQE was prepared and that have not come back: in the
	 * SQ ring or with the kernel. */
	unsigned n_held;
	unsigned n_buffers; /* fixed-buffer slots used */
	bool warned_buffers;
	bool warned_submit;
	unsigned submit_failures; /* io_uring_enter() refusals in a row */
	uint64_t submit_errors;   /* io_stats.submit_errors */
	uint64_t injected;        /* uring_submit faults, io_stats.injected */
};

static struct uring *uring_of(struct io_backend *b)
{
	return container_of(b, struct uring, base);
}

static const struct uring *uring_of_const(const struct io_backend *b)
{
	return container_of(b, const struct uring, base);
}

/* liburing 2.3 declares io_uring_register_restrictions() and
 * io_uring_enable_rings() but its shared library does not export them, so
 * every registration goes through the system call itself. */
static int uring_register(struct uring *u, unsigned op, const void *arg, unsigned nr)
{
	long r = syscall(__NR_io_uring_register, u->ring.ring_fd, op, arg, nr);
	return r < 0 ? -errno : (int)r;
}

static int uring_register_sparse(struct uring *u, unsigned op, unsigned nr)
{
	struct io_uring_rsrc_register reg = {
		.nr = nr,
		.flags = IORING_RSRC_REGISTER_SPARSE,
	};
	return uring_register(u, op, &reg, sizeof(reg));
}

static int uring_update(struct uring *u, unsigned op, unsigned slot, const void *data)
{
	struct io_uring_rsrc_update2 up = {
		.offset = slot,
		.data = (uint64_t)(uintptr_t)data,
		.nr = 1,
	};
	return uring_register(u, op, &up, sizeof(up));
}

/* What an operator does about it. */
#define URING_FIX                                                                          \
	"allow io_uring_setup, io_uring_enter and io_uring_register (in a pod: the seccomp " \
	"profile deploy/kubernetes/seccomp-kvtierd.json)"

static const char *setup_refused_reason(int r, char *buf, size_t n)
{
	FILE *f;
	int disabled = -1;

	if (r == -ENOSYS) {
		snprintf(buf, n, "io_uring_setup() is not available: a kernel without io_uring, or a seccomp filter; " URING_FIX);
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
		snprintf(buf, n, "io_uring_setup() refused (%s): a seccomp filter (container runtimes' default profiles refuse io_uring) or a security module; " URING_FIX,
			 strerror(-r));
	return buf;
}

static int uring_setup(struct uring *u, char *why, size_t n)
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

	r = io_uring_queue_init_params(u->base.queue_depth, &u->ring, &p);
	if (r == -EINVAL) {
		/* SUBMIT_ALL came with 5.18. */
		memset(&p, 0, sizeof(p));
		p.flags = IORING_SETUP_R_DISABLED | IORING_SETUP_CLAMP;
		r = io_uring_queue_init_params(u->base.queue_depth, &u->ring, &p);
	}
	if (r < 0) {
		setup_refused_reason(r, why, n);
		return r;
	}

	r = uring_register_sparse(u, IORING_REGISTER_FILES2, IO_MAX_FILES);
	if (r < 0) {
		snprintf(why, n, "a sparse fixed-file table was refused: %s%s", strerror(-r),
			 r == -EINVAL ? " (kernel older than 5.19?)" : "");
		goto fail;
	}
	r = uring_register_sparse(u, IORING_REGISTER_BUFFERS2, IO_MAX_BUFFERS);
	if (r < 0) {
		snprintf(why, n, "a sparse fixed-buffer table was refused: %s", strerror(-r));
		goto fail;
	}
	/* Now, while the ring is disabled: after the restrictions it would
	 * need its own place on the allow-list. */
	r = uring_register(u, IORING_REGISTER_EVENTFD, &u->base.efd, 1);
	if (r < 0) {
		snprintf(why, n, "the completion eventfd was refused: %s", strerror(-r));
		goto fail;
	}
	r = uring_register(u, IORING_REGISTER_RESTRICTIONS, res, sizeof(res) / sizeof(res[0]));
	if (r < 0) {
		snprintf(why, n, "the ring could not be restricted: %s", strerror(-r));
		goto fail;
	}
	r = uring_register(u, IORING_REGISTER_ENABLE_RINGS, NULL, 0);
	if (r < 0) {
		snprintf(why, n, "the restricted ring could not be enabled: %s", strerror(-r));
		goto fail;
	}
	return 0;
fail:
	io_uring_queue_exit(&u->ring);
	return r;
}

/* io_uring_enter(): submit what the SQ ring holds and, with wait_nr, wait
 * for that many completions.  uring_submit is its fault site (fault.h). */
static int uring_enter(struct uring *u, unsigned wait_nr)
{
	if (!u->base.unfaulted && fault_hit(FAULT_URING_SUBMIT)) {
		u->injected++;
		return -ENXIO;
	}
	return wait_nr ? io_uring_submit_and_wait(&u->ring, wait_nr) : io_uring_submit(&u->ring);
}

/*
 * Take the SQEs the kernel has not consumed back out of the SQ ring: their
 * requests never reached it, so they are the engine's again.  Returns them
 * as a list through next, oldest first.  Without SQPOLL the kernel reads the
 * SQ ring only inside io_uring_enter() on this thread, so moving its tail
 * back cannot race it.  An SQE sits at its position in sqes[] (liburing's
 * own io_uring_get_sqe() puts it there), whatever the index array says.
 */
static struct io_req *uring_unsubmit(struct uring *u, unsigned *ret_n)
{
	struct io_uring_sq *sq = &u->ring.sq;
	unsigned head = __atomic_load_n(sq->khead, __ATOMIC_ACQUIRE);
	struct io_req *list = NULL, *tail = NULL;
	unsigned n = 0;

	for (unsigned i = head; i != sq->sqe_tail; i++) {
		struct io_uring_sqe *sqe = &sq->sqes[i & *sq->kring_mask];
		struct io_req *req = (struct io_req *)(uintptr_t)sqe->user_data;

		if (!req)
			continue; /* the cancellation at shutdown */
		req->held = false;
		u->n_held--;
		io_list_append(&list, &tail, req);
		n++;
	}
	sq->sqe_head = sq->sqe_tail = head;
	__atomic_store_n(sq->ktail, head, __ATOMIC_RELEASE);
	*ret_n = n;
	return list;
}

/* Submit what the SQ ring holds.  The common part does not call this while
 * a back-off asked for below is running. */
static void uring_submit(struct io_backend *b)
{
	struct uring *u = uring_of(b);
	struct io_req *list, *req;
	unsigned n;
	int r;

	if (io_uring_sq_ready(&u->ring) == 0)
		return;
	r = uring_enter(u, 0);
	if (r > 0) {
		u->submit_failures = 0;
		/* What the kernel did not take stays in the SQ ring for the
		 * next try; it counts as in flight already. */
		if (io_uring_sq_ready(&u->ring) > 0)
			b->up->submit_later(b->io);
		return;
	}
	if (r == 0)
		r = -EAGAIN; /* took nothing and said nothing */
	u->submit_errors++;
	/* -EAGAIN and -EBUSY pass (memory, a full completion ring), others
	 * (-ENXIO: a ring being torn down, -EFAULT, -EBADF) may not: both
	 * get the same few tries, spaced out, so that neither spins. */
	if (++u->submit_failures <= IO_RETRY_MAX) {
		if (u->submit_failures == 1 && !u->warned_submit)
			log_warning_errno(r, "io_uring refused a submission, retrying: %m");
		b->up->backoff(b->io, u->submit_failures);
		return;
	}
	list = uring_unsubmit(u, &n);
	if (!u->warned_submit)
		log_error_errno(r, "io_uring refused %u submissions in a row, failing the %u I/O requests they held: %m",
				u->submit_failures, n);
	else
		log_debug_errno(r, "io_uring refused %u submissions in a row, failing the %u I/O requests they held: %m",
				u->submit_failures, n);
	u->warned_submit = true;
	u->submit_failures = 0;
	while ((req = list)) {
		list = req->next;
		b->up->refused(b->io, req, r);
	}
}

static int uring_start(struct io_backend *b, struct io_req *req)
{
	struct uring *u = uring_of(b);
	struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
	uint8_t *p = (uint8_t *)req->buf + req->progress;
	uint32_t len = req->len - req->progress;
	uint64_t off = req->offset + req->progress;

	if (!sqe)
		return -EBUSY;
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
	u->n_held++;
	return 0;
}

static void uring_reap(struct io_backend *b)
{
	struct uring *u = uring_of(b);
	struct io_uring_cqe *cqe;

	/* One CQE at a time and marked seen before done() runs: done() may
	 * submit, and the kernel may post new CQEs while this loop runs. */
	while (io_uring_peek_cqe(&u->ring, &cqe) == 0) {
		struct io_req *req = io_uring_cqe_get_data(cqe);
		int res = cqe->res;

		io_uring_cqe_seen(&u->ring, cqe);
		req->held = false;
		u->n_held--;
		b->up->completed(b->io, req, res);
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
static void uring_drain(struct uring *u)
{
	struct io_uring_cqe *cqe;
	unsigned failures = 0, cancelled = 0, n_unsubmitted = 0;
	bool cancel_queued = false;
	int r = 0;

	if (u->n_held > 0)
		log_debug("Cancelling %u io_uring requests in flight at shutdown", u->n_held);
	while (u->n_held > 0) {
		if (!cancel_queued) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
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
		r = uring_enter(u, cancel_queued ? 1 : 0);
		while (io_uring_peek_cqe(&u->ring, &cqe) == 0) {
			struct io_req *req = io_uring_cqe_get_data(cqe);

			if (!req) {
				if (cqe->res > 0)
					cancelled += (unsigned)cqe->res;
			} else {
				req->held = false;
				u->n_held--;
			}
			io_uring_cqe_seen(&u->ring, cqe);
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
	if (u->n_held == 0)
		return;
	/* What the kernel never consumed is not its. */
	(void)uring_unsubmit(u, &n_unsubmitted);
	if (u->n_held > 0)
		log_error_errno(r, "Failed to wait for %u io_uring requests at shutdown; their buffers are left allocated, not freed: %m",
				u->n_held);
}

static int uring_new(const struct io_backend *base, char *why, size_t n, struct io_backend **ret)
{
	struct uring *u;
	int r;

	u = calloc(1, sizeof(*u));
	if (!u) {
		snprintf(why, n, "out of memory");
		return -ENOMEM;
	}
	u->base = *base;
	u->ring.ring_fd = -1;
	r = uring_setup(u, why, n);
	if (r < 0) {
		free(u);
		return r;
	}
	*ret = &u->base;
	return 0;
}

static void uring_free(struct io_backend *b)
{
	struct uring *u = uring_of(b);

	uring_drain(u);
	io_uring_queue_exit(&u->ring);
	free(u);
}

static void uring_announce(const struct io_backend *b, const char *reason, bool forced)
{
	log_info("I/O engine: io_uring (%s), queue depth %u", reason, b->queue_depth);
}

static int uring_file_add(struct io_backend *b, unsigned slot, int fd)
{
	return uring_update(uring_of(b), IORING_REGISTER_FILES_UPDATE2, slot, &fd);
}

static int uring_buffer_register(struct io_backend *b, uint8_t *base, uint64_t len)
{
	struct uring *u = uring_of(b);
	struct iovec iov = { .iov_base = base, .iov_len = len };
	int r;

	if (u->n_buffers >= IO_MAX_BUFFERS) {
		if (!u->warned_buffers)
			log_warning("The io_uring fixed-buffer table is full (%u buffers); later pool memory uses unregistered reads and writes",
				    IO_MAX_BUFFERS);
		u->warned_buffers = true;
		return -1;
	}
	r = uring_update(u, IORING_REGISTER_BUFFERS_UPDATE, u->n_buffers, &iov);
	if (r == 1)
		return (int)u->n_buffers++;
	if (r >= 0)
		r = -EIO;
	if (!u->warned_buffers)
		log_warning_errno(r, "Failed to register %llu MiB of pool memory as an io_uring fixed buffer%s, using unregistered reads and writes for it: %m",
				  (unsigned long long)(len >> 20),
				  r == -ENOMEM ? " (RLIMIT_MEMLOCK: raise LimitMEMLOCK=)" : "");
	else
		log_debug_errno(r, "Failed to register %llu MiB as an io_uring fixed buffer, ignoring: %m",
				(unsigned long long)(len >> 20));
	u->warned_buffers = true;
	return -1;
}

static void uring_add_stats(const struct io_backend *b, struct io_stats *st)
{
	const struct uring *u = uring_of_const(b);

	st->submit_errors += u->submit_errors;
	st->injected += u->injected;
}

const struct io_backend_ops io_backend_uring_ops = {
	.name = "io_uring",
	.new = uring_new,
	.free = uring_free,
	.announce = uring_announce,
	.file_add = uring_file_add,
	.buffer_register = uring_buffer_register,
	.start = uring_start,
	.submit = uring_submit,
	.reap = uring_reap,
	.add_stats = uring_add_stats,
};
