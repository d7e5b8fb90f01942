/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A spill file's worker: one thread with an event loop and an I/O engine
 * (io.h: its own restricted ring, or its own pread/pwrite threads) of its
 * own, for that file alone.  The daemon's event loop hands it whole ops
 * (a write-back, a staging, an erasure); the worker checksums the payload
 * where the op touches its bytes anyway, moves them, and hands the op back
 * once every I/O of it has ended.  It changes no state of the tier or the
 * store: what it writes is the op's own (its header buffer, its result
 * fields), and the op's outcome is decided on the event loop.
 *
 *   write-back  the payload's checksum (under the SIGBUS guard), the slot
 *               header encoded with it, then the region header (if the op
 *               bound the region), the slot header and the payload written;
 *   staging     the slot header and the payload read, then the payload's
 *               checksum, for the event loop to compare with the header;
 *   erasure     the zeroed slot header written.
 *
 * Hand-over both ways is a mutex-protected list and an eventfd: the loop's
 * to the worker is a source of the worker's event loop, written once at the
 * end of a loop iteration that handed it ops; the worker's to the loop one
 * of the daemon's, written when the list was empty and watched
 * edge-triggered, so that the loop, which wakes for every write, takes the
 * list without a read(2) to reset the counter (it would take 2^64 - 2
 * writes to fill).  The worker hands ended ops back in lists: while other
 * ops of its are still under way it holds those that ended, up to
 * HANDOVER_OPS of them or for HANDOVER_HOLD_USEC, so that a batch of
 * stagings costs the loop a wake-up for every few blocks rather than one
 * for each; the last op under way goes back at once with those held.  The
 * engine's retries,
 * fault injection and shutdown are io.c's, unchanged, on the worker's
 * thread.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "log.h"
#include "nvme-private.h"
#include "pool.h"

/* Ended ops held back while others are under way, at most this many ... */
#define HANDOVER_OPS 16
/* ... and for at most this long (usec): a block one client waits for
 * alone, among another's batch or write-back, waits this much more. */
#define HANDOVER_HOLD_USEC 2000

/* A pool extent to register with the worker's engine. */
struct worker_buffer {
	void *base;
	size_t len;
	struct worker_buffer *next;
};

struct nvme_worker {
	nvme_op_ended_fn ended;
	void *userdata;
	unsigned file; /* its spill file's number */
	pthread_t thread;
	bool started;

	/* The worker thread's alone once it runs. */
	sd_event *event;
	struct io_engine *io;
	int file_io; /* the file's index in io */
	sd_event_source *in_source;
	sd_event_source *hold_source; /* hands over what is held */
	unsigned busy;                /* ops started and not ended */
	unsigned n_held;
	struct op *held_head, *held_tail; /* ended, not handed over yet */

	/* The daemon's event loop's. */
	sd_event_source *out_source;
	sd_event_source *wake_source; /* wakes the worker once an iteration */
	unsigned reqs; /* I/O requests of the ops handed over and not back */

	int in_efd, out_efd;
	pthread_mutex_t lock;
	/* Under lock: ops to start, ops ended, buffers to register, stop. */
	struct op *in_head, *in_tail;
	struct op *out_head, *out_tail;
	struct worker_buffer *buffers;
	bool stop;
};

static void op_list_append(struct op **head, struct op **tail, struct op *op)
{
	op->next_w = NULL;
	if (*tail)
		(*tail)->next_w = op;
	else
		*head = op;
	*tail = op;
}

static void wake(int efd)
{
	uint64_t one = 1;
	(void)!write(efd, &one, sizeof(one));
}

/* Append the list first..last to a hand-over list, and wake its reader
 * only when the list was empty: the reader resets its eventfd (the
 * worker) or is woken by every write (the loop, edge-triggered) before it
 * takes the whole list, so a list that is not empty has a wake-up on its
 * way. */
static void hand_over(struct nvme_worker *w, struct op **head, struct op **tail,
		      struct op *first, struct op *last, int efd)
{
	pthread_mutex_lock(&w->lock);
	bool was_empty = !*head;
	if (*tail)
		(*tail)->next_w = first;
	else
		*head = first;
	*tail = last;
	pthread_mutex_unlock(&w->lock);
	if (was_empty)
		wake(efd);
}

/* ---- the worker's thread ----------------------------------------------- */

/* The ended ops held, back to the loop in one list. */
static void held_hand_over(struct nvme_worker *w)
{
	if (!w->held_head)
		return;
	hand_over(w, &w->out_head, &w->out_tail, w->held_head, w->held_tail, w->out_efd);
	w->held_head = w->held_tail = NULL;
	w->n_held = 0;
	sd_event_source_set_enabled(w->hold_source, SD_EVENT_OFF);
}

static int on_hold(sd_event_source *s, uint64_t usec, void *userdata)
{
	held_hand_over(userdata);
	return 0;
}

/* Every I/O of op has ended: checksum what staging read, and hand it back
 * now or with the next ops that end (HANDOVER_OPS). */
static void op_ended(struct nvme_worker *w, struct op *op)
{
	if (op->kind == OP_STAGE && !op->error)
		op->sum_error = pool_guarded_sum(op->data.buf, op->data.len, spill_payload_sum,
						 &op->sum);
	w->busy--;
	op_list_append(&w->held_head, &w->held_tail, op);
	if (w->busy == 0 || ++w->n_held >= HANDOVER_OPS) {
		held_hand_over(w);
	} else if (w->n_held == 1 &&
		   (sd_event_source_set_time_relative(w->hold_source, HANDOVER_HOLD_USEC) < 0 ||
		    sd_event_source_set_enabled(w->hold_source, SD_EVENT_ONESHOT) < 0)) {
		held_hand_over(w); /* no timer: no holding */
	}
}

static void req_done(struct io_req *req, int result, void *userdata)
{
	struct op *op = userdata;

	if (result < 0 && !op->error)
		op->error = result;
	if (req == &op->region_hdr)
		op->region_result = result;
	if (--op->pending == 0)
		op_ended(op->w, op);
}

static void submit_req(struct nvme_worker *w, struct op *op, struct io_req *req)
{
	req->file = w->file_io;
	req->done = req_done;
	req->userdata = op;
	op->pending++;
	io_submit(w->io, req);
}

static void op_start(struct nvme_worker *w, struct op *op)
{
	w->busy++;
	op->pending = 1; /* until every request is submitted */
	if (op->kind == OP_WRITEBACK) {
		/* The checksum comes from the daemon's own mapping, under the
		 * SIGBUS guard: a client that punched a hole loses this block,
		 * nothing else.  The region header is written either way. */
		op->sum_error = pool_guarded_sum(op->data.buf, op->data.len, spill_payload_sum,
						 &op->sum);
		if (op->region_hdr.len)
			submit_req(w, op, &op->region_hdr);
		if (op->sum_error == 0) {
			op->h.payload_sum = op->sum;
			spill_slot_header_encode(&op->h, op->hbuf, SPILL_SLOT_HEADER_BYTES);
			submit_req(w, op, &op->hdr);
			submit_req(w, op, &op->data);
		}
	} else {
		submit_req(w, op, &op->hdr);
		if (op->kind == OP_STAGE)
			submit_req(w, op, &op->data);
	}
	if (--op->pending == 0)
		op_ended(w, op);
}

static int on_in(sd_event_source *s, int fd, uint32_t revents, void *userdata)
{
	struct nvme_worker *w = userdata;
	struct worker_buffer *bufs;
	struct op *ops;
	bool stop;
	uint64_t v;

	(void)!read(w->in_efd, &v, sizeof(v));
	pthread_mutex_lock(&w->lock);
	bufs = w->buffers;
	w->buffers = NULL;
	ops = w->in_head;
	w->in_head = w->in_tail = NULL;
	stop = w->stop;
	pthread_mutex_unlock(&w->lock);
	/* Buffers first: an op handed over after its extent was announced
	 * finds it registered. */
	while (bufs) {
		struct worker_buffer *next = bufs->next;
		io_buffer_add(w->io, bufs->base, bufs->len);
		free(bufs);
		bufs = next;
	}
	/* Stopping, ops not started stay unstarted: the tier frees them
	 * from its list of ops. */
	while (ops && !stop) {
		struct op *next = ops->next_w;
		op_start(w, ops);
		ops = next;
	}
	if (stop)
		sd_event_exit(w->event, 0);
	return 0;
}

static void *worker_main(void *arg)
{
	struct nvme_worker *w = arg;
	int r = sd_event_loop(w->event);

	if (r < 0)
		log_error_errno(r, "The I/O worker of spill file %u stopped: %m", w->file);
	return NULL;
}

/* ---- the daemon's event loop ------------------------------------------- */

static int on_wake(sd_event_source *s, void *userdata)
{
	struct nvme_worker *w = userdata;

	wake(w->in_efd);
	return 0;
}

static int on_out(sd_event_source *s, int fd, uint32_t revents, void *userdata)
{
	struct nvme_worker *w = userdata;
	struct op *ops;

	pthread_mutex_lock(&w->lock);
	ops = w->out_head;
	w->out_head = w->out_tail = NULL;
	pthread_mutex_unlock(&w->lock);
	while (ops) {
		struct op *next = ops->next_w;
		w->reqs -= ops->reqs;
		w->ended(ops, w->userdata);
		ops = next;
	}
	return 0;
}

int nvme_worker_new(sd_event *event, unsigned file, int fd, enum io_engine_kind kind,
		    unsigned queue_depth, nvme_op_ended_fn ended, void *userdata,
		    struct nvme_worker **ret)
{
	struct nvme_worker *w = calloc(1, sizeof(*w));
	sigset_t all, old;
	int r;

	if (!w)
		return -ENOMEM;
	w->ended = ended;
	w->userdata = userdata;
	w->file = file;
	w->in_efd = w->out_efd = -1;
	pthread_mutex_init(&w->lock, NULL);
	*ret = w; /* nvme_worker_free() undoes whatever was done */
	w->in_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	w->out_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (w->in_efd < 0 || w->out_efd < 0)
		return log_error_errno(-errno, "Failed to create an I/O worker's eventfd: %m");
	r = sd_event_new(&w->event);
	if (r < 0)
		return log_error_errno(r, "Failed to create an I/O worker's event loop: %m");
	r = io_engine_new(w->event, kind, queue_depth, &w->io);
	if (r < 0)
		return log_error_errno(r, "Failed to start the I/O engine of spill file %u: %m", file);
	r = io_file_add(w->io, fd);
	if (r < 0)
		return r;
	w->file_io = r;
	r = sd_event_add_io(w->event, &w->in_source, w->in_efd, EPOLLIN, on_in, w);
	if (r < 0)
		return r;
	r = sd_event_add_time_relative(w->event, &w->hold_source, CLOCK_MONOTONIC,
				       HANDOVER_HOLD_USEC, 1, on_hold, w);
	if (r < 0)
		return r;
	sd_event_source_set_enabled(w->hold_source, SD_EVENT_OFF);
	r = sd_event_add_io(event, &w->out_source, w->out_efd, EPOLLIN | EPOLLET, on_out, w);
	if (r < 0)
		return r;
	(void)sd_event_source_set_description(w->out_source, "nvme-worker");
	r = sd_event_add_defer(event, &w->wake_source, on_wake, w);
	if (r < 0)
		return r;
	sd_event_source_set_enabled(w->wake_source, SD_EVENT_OFF);
	/* It takes no signals: the event loop receives them through
	 * signalfd, which needs them blocked in every thread.  SIGBUS, from
	 * a guarded checksum, is synchronous and delivered regardless. */
	sigfillset(&all);
	sigdelset(&all, SIGBUS);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	r = -pthread_create(&w->thread, NULL, worker_main, w);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r < 0)
		return log_error_errno(r, "Failed to start the I/O worker of spill file %u: %m", file);
	w->started = true;
	return 0;
}

void nvme_worker_free(struct nvme_worker *w)
{
	if (!w)
		return;
	if (w->started) {
		pthread_mutex_lock(&w->lock);
		w->stop = true;
		pthread_mutex_unlock(&w->lock);
		wake(w->in_efd);
		pthread_join(w->thread, NULL);
	}
	/* The thread is gone: its engine cancels and waits for what it holds
	 * (io_engine_free), and the ops it had are the caller's to free. */
	sd_event_source_disable_unref(w->out_source);
	sd_event_source_disable_unref(w->wake_source);
	sd_event_source_disable_unref(w->in_source);
	sd_event_source_disable_unref(w->hold_source);
	io_engine_free(w->io);
	sd_event_unref(w->event);
	while (w->buffers) {
		struct worker_buffer *next = w->buffers->next;
		free(w->buffers);
		w->buffers = next;
	}
	if (w->in_efd >= 0)
		close(w->in_efd);
	if (w->out_efd >= 0)
		close(w->out_efd);
	pthread_mutex_destroy(&w->lock);
	free(w);
}

void nvme_worker_buffer_add(struct nvme_worker *w, void *base, size_t len)
{
	struct worker_buffer *b = malloc(sizeof(*b));

	if (!b)
		return; /* plain READ/WRITE for it, as for any unregistered memory */
	*b = (struct worker_buffer){.base = base, .len = len};
	pthread_mutex_lock(&w->lock);
	b->next = w->buffers;
	w->buffers = b;
	pthread_mutex_unlock(&w->lock);
	wake(w->in_efd);
}

void nvme_worker_submit(struct nvme_worker *w, struct op *op)
{
	op->w = w;
	op->reqs = op->kind == OP_ERASE ? 1 : 2 + (op->region_hdr.len != 0);
	w->reqs += op->reqs;
	pthread_mutex_lock(&w->lock);
	bool was_empty = !w->in_head;
	op_list_append(&w->in_head, &w->in_tail, op);
	pthread_mutex_unlock(&w->lock);
	/* One wake-up for every op handed over in this iteration of the
	 * loop, at its end. */
	if (was_empty)
		sd_event_source_set_enabled(w->wake_source, SD_EVENT_ONESHOT);
}

unsigned nvme_worker_in_flight(const struct nvme_worker *w)
{
	return w->reqs;
}

const char *nvme_worker_engine(const struct nvme_worker *w, const char **reason)
{
	/* Set once in io_engine_new(), before the thread started. */
	if (reason)
		*reason = io_engine_reason(w->io);
	return io_engine_name(w->io);
}
