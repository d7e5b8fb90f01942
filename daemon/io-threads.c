/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The threads backend of the I/O engine (io-private.h): pread/pwrite on
 * worker threads, so a slow disk never blocks the event loop.  The workers
 * hand their results back through the completion eventfd; the results are
 * handed up from the event-loop thread only.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io-private.h"
#include "log.h"
#include "macro.h"

/* pread/pwrite workers: two keep an NVMe queue busy without taking both
 * cores of a small node from the event loop. */
#define IO_THREADS 2u

struct threads {
	struct io_backend base;
	int fds[IO_MAX_FILES]; /* the engine's copies, by file number */
	pthread_t threads[IO_THREADS];
	unsigned n_threads;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct io_req *start_head, *start_tail; /* taken by start(), not yet handed over */
	/* Under lock: */
	struct io_req *work_head, *work_tail;   /* to the workers */
	struct io_req *done_head, *done_tail;   /* back from them */
	bool stop;
};

static struct threads *threads_of(struct io_backend *b)
{
	return container_of(b, struct threads, base);
}

static const struct threads *threads_of_const(const struct io_backend *b)
{
	return container_of(b, const struct threads, base);
}

static int thread_io(struct threads *t, struct io_req *req)
{
	int fd = t->fds[req->file];
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
	struct threads *t = userdata;
	const uint64_t one = 1;

	pthread_mutex_lock(&t->lock);
	for (;;) {
		struct io_req *req;

		while (!t->stop && !t->work_head)
			pthread_cond_wait(&t->cond, &t->lock);
		if (t->stop)
			break;
		req = io_list_pop(&t->work_head, &t->work_tail);
		pthread_mutex_unlock(&t->lock);

		req->result = thread_io(t, req);

		pthread_mutex_lock(&t->lock);
		io_list_append(&t->done_head, &t->done_tail, req);
		pthread_mutex_unlock(&t->lock);
		/* Cannot fail short of a counter at 2^64-1. */
		(void)!write(t->base.efd, &one, sizeof(one));
		pthread_mutex_lock(&t->lock);
	}
	pthread_mutex_unlock(&t->lock);
	return NULL;
}

/* Let the workers finish what they hold, drop what they have not started. */
static void threads_stop(struct threads *t)
{
	pthread_mutex_lock(&t->lock);
	t->stop = true;
	t->work_head = t->work_tail = NULL;
	pthread_cond_broadcast(&t->cond);
	pthread_mutex_unlock(&t->lock);
	for (unsigned i = 0; i < t->n_threads; i++)
		pthread_join(t->threads[i], NULL);
	t->n_threads = 0;
	pthread_cond_destroy(&t->cond);
	pthread_mutex_destroy(&t->lock);
}

static int threads_new(const struct io_backend *base, char *why, size_t n, struct io_backend **ret)
{
	struct threads *t;
	sigset_t all, old;
	unsigned want;
	int r = 0;

	t = calloc(1, sizeof(*t));
	if (!t) {
		snprintf(why, n, "out of memory");
		return -ENOMEM;
	}
	t->base = *base;
	for (unsigned i = 0; i < IO_MAX_FILES; i++)
		t->fds[i] = -1;
	want = t->base.queue_depth < IO_THREADS ? t->base.queue_depth : IO_THREADS;
	if (pthread_mutex_init(&t->lock, NULL) != 0) {
		free(t);
		snprintf(why, n, "out of memory");
		return -ENOMEM;
	}
	if (pthread_cond_init(&t->cond, NULL) != 0) {
		pthread_mutex_destroy(&t->lock);
		free(t);
		snprintf(why, n, "out of memory");
		return -ENOMEM;
	}
	/* Workers take no signals: the event loop receives them through
	 * signalfd, which needs them blocked in every thread, and the
	 * engine may well be created before the loop blocks them. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	for (unsigned i = 0; i < want; i++) {
		int e = pthread_create(&t->threads[i], NULL, worker, t);
		if (e != 0) {
			r = -e;
			break;
		}
		t->n_threads++;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r < 0) {
		snprintf(why, n, "a worker thread could not be started: %s", strerror(-r));
		threads_stop(t);
		free(t);
		return r;
	}
	*ret = &t->base;
	return 0;
}

static void threads_free(struct io_backend *b)
{
	struct threads *t = threads_of(b);

	threads_stop(t);
	free(t);
}

static void threads_announce(const struct io_backend *b, const char *reason, bool forced)
{
	const struct threads *t = threads_of_const(b);

	if (forced)
		log_info("I/O engine: threads (%s), queue depth %u, %u workers", reason,
			 b->queue_depth, t->n_threads);
	else
		log_warning("I/O engine: threads, pread/pwrite on %u workers (%s), queue depth %u",
			    t->n_threads, reason, b->queue_depth);
}

static int threads_file_add(struct io_backend *b, unsigned slot, int fd)
{
	/* Before any request names it, and so before a worker reads it: the
	 * hand-over under the lock orders the two. */
	threads_of(b)->fds[slot] = fd;
	return 0;
}

static int threads_start(struct io_backend *b, struct io_req *req)
{
	struct threads *t = threads_of(b);

	/* Gathered without the lock, handed over under it at once in
	 * threads_submit(). */
	io_list_append(&t->start_head, &t->start_tail, req);
	return 0;
}

static void threads_submit(struct io_backend *b)
{
	struct threads *t = threads_of(b);

	if (!t->start_head)
		return;
	pthread_mutex_lock(&t->lock);
	if (t->work_tail)
		t->work_tail->next = t->start_head;
	else
		t->work_head = t->start_head;
	t->work_tail = t->start_tail;
	t->start_head = t->start_tail = NULL;
	pthread_cond_broadcast(&t->cond);
	pthread_mutex_unlock(&t->lock);
}

static void threads_reap(struct io_backend *b)
{
	struct threads *t = threads_of(b);
	struct io_req *list, *req;

	pthread_mutex_lock(&t->lock);
	list = t->done_head;
	t->done_head = t->done_tail = NULL;
	pthread_mutex_unlock(&t->lock);
	while ((req = list)) {
		list = req->next;
		req->next = NULL;
		b->up->completed(b->io, req, req->result);
	}
}

const struct io_backend_ops io_backend_threads_ops = {
	.name = "threads",
	.new = threads_new,
	.free = threads_free,
	.announce = threads_announce,
	.file_add = threads_file_add,
	.start = threads_start,
	.submit = threads_submit,
	.reap = threads_reap,
};
