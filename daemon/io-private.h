/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the I/O engine's files share and no one else uses.  io.c holds the
 * part common to both mechanisms: the request queue, the retries of short
 * transfers and of -EAGAIN/-EINTR, completion, fault injection on
 * completions, statistics and the event-loop side.  It calls a backend only
 * through its struct io_backend_ops, chosen once in io_engine_new():
 *
 *   io.c -> io-uring.c   (io_backend_uring_ops)
 *        -> io-threads.c (io_backend_threads_ops)
 *
 * A backend calls neither io.c nor the other backend: it reports up through
 * the struct io_upcalls it is handed, so the common part stays the only one
 * that touches the queue, the counts and done().
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io.h"

/* What a backend tells the common part.  Each takes the io it was handed
 * in struct io_backend. */
struct io_upcalls {
	/* One transfer of req ended with res (bytes or a negative errno);
	 * req is the engine's again, and its done() may run from here. */
	void (*completed)(struct io_engine *io, struct io_req *req, int res);
	/* req was started but never reached the kernel: it ends with error,
	 * from the event loop, not from inside this call. */
	void (*refused)(struct io_engine *io, struct io_req *req, int error);
	/* Call submit() again at the next event-loop iteration. */
	void (*submit_later)(struct io_engine *io);
	/* Call submit() again only after the nth back-off in a row
	 * (IO_RETRY_DELAY_USEC, doubling); start() is still called. */
	void (*backoff)(struct io_engine *io, unsigned nth);
};

/* The head of every backend's state, filled by the common part before the
 * backend's new() copies it. */
struct io_backend {
	struct io_engine *io;
	const struct io_upcalls *up;
	unsigned queue_depth; /* requests started and not yet completed, at most */
	int efd;              /* the completion eventfd the loop watches; not the backend's to close */
	bool unfaulted;       /* io_engine_unfaulted(): no test faults here */
};

struct io_backend_ops {
	const char *name; /* io_engine_name() */

	/*
	 * Set the mechanism up from base.  On failure *why (n bytes) says why,
	 * for the operator, and nothing is left behind.
	 * \return 0 or a negative errno
	 */
	int (*new)(const struct io_backend *base, char *why, size_t n, struct io_backend **ret);
	/* Stop: wait for or cancel what it holds (io.h, io_engine_free), and
	 * free it.  No upcall runs from here. */
	void (*free)(struct io_backend *b);
	/* Log, once, which engine this is and why (reason); forced: the
	 * configuration named it, so that a fallback can say it is one. */
	void (*announce)(const struct io_backend *b, const char *reason, bool forced);

	/* fd (the engine's own copy) is file number slot from now on. */
	int (*file_add)(struct io_backend *b, unsigned slot, int fd);
	/* Register [base, base + len), at most 1 GiB, as a fixed buffer: its
	 * index, or -1 when it stays unregistered.  NULL: the backend has no
	 * fixed buffers, and requests keep buf_index -1. */
	int (*buffer_register)(struct io_backend *b, uint8_t *base, uint64_t len);

	/* Take req (off the queue, req->next free for the backend's use) for
	 * its remaining bytes.  A negative errno when there is no room for it
	 * now: it goes back to the head of the queue. */
	int (*start)(struct io_backend *b, struct io_req *req);
	/* Hand what start() took to the kernel or the workers. */
	void (*submit)(struct io_backend *b);
	/* The completion eventfd fired: report what has ended, through
	 * up->completed(). */
	void (*reap)(struct io_backend *b);
	/* Add the backend's own counts to *st; NULL when it has none. */
	void (*add_stats)(const struct io_backend *b, struct io_stats *st);
};

extern const struct io_backend_ops io_backend_uring_ops;
extern const struct io_backend_ops io_backend_threads_ops;

/* The requests' FIFO and hand-over lists, linked through req->next. */
static inline void io_list_append(struct io_req **head, struct io_req **tail, struct io_req *req)
{
	req->next = NULL;
	if (*tail)
		(*tail)->next = req;
	else
		*head = req;
	*tail = req;
}

static inline struct io_req *io_list_pop(struct io_req **head, struct io_req **tail)
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
