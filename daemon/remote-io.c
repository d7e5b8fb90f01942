/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The remote tier's operations: one object read or written with
 * librados's asynchronous calls, and completions handed from librados's
 * threads to the event loop through a queue and an eventfd.  Writes go
 * from the daemon's own buffer (copied out of the pool on the loop, under
 * the SIGBUS guard).  Reads land in the block's host slot where no extent
 * is hugetlb (rt->in_place): there a page a client punched is refilled by
 * the touch, never a fault, so a librados thread may write and check it;
 * with hugetlb they land in the daemon's buffer and the loop copies them.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "log.h"
#include "pool.h"
#include "remote-private.h"

/* On a librados thread: verify a read's object (its buffer and want are
 * the op's alone until it is queued), queue the op for the loop and wake
 * it.  The check runs here, beside the loop, not on it. */
static void on_complete(rados_completion_t comp, void *arg)
{
	struct rop *op = arg;
	struct remote *rt = op->c->rt;

	if (op->kind != ROP_CONNECT)
		op->result = rados_aio_get_return_value(comp);
	if (op->kind == ROP_READ && op->in_place && op->result >= 0) {
		/* Both parts read (a part past the object's end is short),
		 * and the slot checked where it lies; the loop publishes it
		 * only for a verdict of "intact". */
		if (op->head_rval < 0 || op->body_rval < 0)
			op->result = op->head_rval < 0 ? op->head_rval : op->body_rval;
		else
			op->verified = remote_object_verify_parts(
				&op->want, op->buf, op->head_read, op->slot, op->body_read);
	} else if (op->kind == ROP_READ && op->result >= 0) {
		op->verified = remote_object_verify(&op->want, op->buf, (size_t)op->result);
	}
	pthread_mutex_lock(&rt->lock);
	TAILQ_INSERT_TAIL(&rt->done, op, done_link);
	rt->callbacks_pending--;
	pthread_cond_broadcast(&rt->idle);
	pthread_mutex_unlock(&rt->lock);
	remote_io_kick(rt);
}

int remote_thread_create(pthread_t *ret, void *(*fn)(void *), void *arg)
{
	sigset_t all, old;

	/* Every signal blocked: the loop takes them through signalfd, and
	 * librados's own threads, started from this one, inherit the mask. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int r = -pthread_create(ret, NULL, fn, arg);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return r;
}

void remote_op_complete(struct rop *op)
{
	on_complete(NULL, op);
}

int remote_io_init(struct remote *rt)
{
	TAILQ_INIT(&rt->done);
	LIST_INIT(&rt->ops);
	pthread_mutex_init(&rt->lock, NULL);
	pthread_cond_init(&rt->idle, NULL);
	rt->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	return rt->efd < 0 ? -errno : 0;
}

void remote_io_done(struct remote *rt)
{
	while (rt->n_bufs)
		free(rt->bufs[--rt->n_bufs].p);
	rt->buf_bytes = 0;
	if (rt->efd >= 0)
		close(rt->efd);
	rt->efd = -1;
	pthread_cond_destroy(&rt->idle);
	pthread_mutex_destroy(&rt->lock);
}

/* A buffer of len bytes: one kept from an earlier operation, or new. */
static uint8_t *buf_get(struct remote *rt, size_t len)
{
	for (unsigned i = rt->n_bufs; i-- > 0;)
		if (rt->bufs[i].len == len) {
			uint8_t *p = rt->bufs[i].p;
			rt->bufs[i] = rt->bufs[--rt->n_bufs];
			rt->buf_bytes -= len;
			return p;
		}
	return malloc(len);
}

static void buf_put(struct remote *rt, uint8_t *p, size_t len)
{
	if (!p)
		return;
	if (rt->n_bufs == REMOTE_BUF_CACHE || rt->buf_bytes + len > REMOTE_BUF_CACHE_BYTES) {
		free(p);
		return;
	}
	rt->bufs[rt->n_bufs++] = (struct remote_buf){p, len};
	rt->buf_bytes += len;
}

struct rop *remote_op_new(struct remote_conn *c, enum rop_kind kind, size_t len)
{
	struct rop *op = calloc(1, sizeof(*op));

	if (!op)
		return NULL;
	op->c = c;
	op->kind = kind;
	op->len = len;
	op->buf_len = len;
	if (len && !(op->buf = buf_get(c->rt, len))) {
		free(op);
		return NULL;
	}
	/* Counted before submission: the callback may run at once. */
	pthread_mutex_lock(&c->rt->lock);
	c->rt->callbacks_pending++;
	pthread_mutex_unlock(&c->rt->lock);
	LIST_INSERT_HEAD(&c->rt->ops, op, link);
	c->in_flight++;
	op->started_usec = remote_now(c->rt);
	return op;
}

/* A submission that failed: its callback will never run. */
static int op_abandon(struct rop *op, int r)
{
	pthread_mutex_lock(&op->c->rt->lock);
	op->c->rt->callbacks_pending--;
	pthread_mutex_unlock(&op->c->rt->lock);
	remote_op_free(op);
	return r;
}

void remote_op_free(struct rop *op)
{
	if (!op)
		return;
	LIST_REMOVE(op, link);
	op->c->in_flight--;
	if (op->comp)
		rados_aio_release(op->comp);
	if (op->wop)
		rados_release_write_op(op->wop);
	if (op->rop)
		rados_release_read_op(op->rop);
	buf_put(op->c->rt, op->buf, op->buf_len);
	free(op);
}

int remote_read(struct remote_tenant *t, struct rop *op, const struct ns *ns, uint8_t *slot)
{
	char oid[REMOTE_OID_LEN + 1];
	int r;

	remote_oid(ns, op->key, oid);
	r = rados_aio_create_completion2(op, on_complete, &op->comp);
	if (r < 0)
		return op_abandon(op, r);
	if (!slot) {
		r = rados_aio_read(t->io, oid, op->comp, (char *)op->buf, op->len, 0);
		return r < 0 ? op_abandon(op, r) : 0;
	}
	/* One operation, two extents: the header into the op's buffer, the
	 * payload straight into the host slot (librados copies the reply
	 * there once, on its own thread). */
	op->in_place = true;
	op->slot = slot;
	op->rop = rados_create_read_op();
	if (!op->rop)
		return op_abandon(op, -ENOMEM);
	rados_read_op_read(op->rop, 0, SPILL_SLOT_HEADER_BYTES, (char *)op->buf, &op->head_read,
			   &op->head_rval);
	rados_read_op_read(op->rop, SPILL_SLOT_HEADER_BYTES, op->len - SPILL_SLOT_HEADER_BYTES,
			   (char *)slot, &op->body_read, &op->body_rval);
	r = rados_aio_read_op_operate(op->rop, t->io, op->comp, oid, 0);
	return r < 0 ? op_abandon(op, r) : 0;
}

int remote_write(struct remote_tenant *t, struct rop *op, const struct block *b)
{
	char oid[REMOTE_OID_LEN + 1];
	size_t payload = op->len - SPILL_SLOT_HEADER_BYTES;
	uint8_t *slot = b->extent->map + (uint64_t)b->slot * b->extent->slot_bytes;
	int r;

	/* The header from the daemon's copy, never from the shared slot:
	 * what is checksummed is what is sent. */
	r = pool_guarded_copy(op->buf + SPILL_SLOT_HEADER_BYTES, slot, payload);
	if (r == 0)
		r = remote_header_encode(b->ns, b->key, op->buf + SPILL_SLOT_HEADER_BYTES, payload,
					 op->buf);
	if (r < 0)
		return op_abandon(op, r);
	remote_oid(b->ns, b->key, oid);
	op->wop = rados_create_write_op();
	if (!op->wop)
		return op_abandon(op, -ENOMEM);
	rados_write_op_write_full(op->wop, (const char *)op->buf, op->len);
	r = rados_aio_create_completion2(op, on_complete, &op->comp);
	/* FULL_TRY: a full pool or cluster answers -ENOSPC or -EDQUOT at once
	 * instead of holding the write until the op timeout. */
	if (r == 0)
		r = rados_aio_write_op_operate(op->wop, t->io, op->comp, oid, NULL,
					       LIBRADOS_OPERATION_FULL_TRY);
	return r < 0 ? op_abandon(op, r) : 0;
}

int remote_probe(struct remote_tenant *t, struct rop *op)
{
	int r = rados_aio_create_completion2(op, on_complete, &op->comp);
	if (r == 0)
		r = rados_aio_stat(t->io, REMOTE_TRIM_OBJECT, op->comp, NULL, NULL);
	return r < 0 ? op_abandon(op, r) : 0;
}

void remote_io_drain(struct remote *rt)
{
	pthread_mutex_lock(&rt->lock);
	while (rt->callbacks_pending > 0)
		pthread_cond_wait(&rt->idle, &rt->lock);
	pthread_mutex_unlock(&rt->lock);
}

void remote_io_take(struct remote *rt, struct rop_queue *ret)
{
	uint64_t v;

	(void)!read(rt->efd, &v, sizeof(v));
	TAILQ_INIT(ret);
	pthread_mutex_lock(&rt->lock);
	TAILQ_CONCAT(ret, &rt->done, done_link);
	pthread_mutex_unlock(&rt->lock);
}

void remote_io_put_back(struct remote *rt, struct rop_queue *q)
{
	pthread_mutex_lock(&rt->lock);
	TAILQ_CONCAT(q, &rt->done, done_link);
	TAILQ_CONCAT(&rt->done, q, done_link);
	pthread_mutex_unlock(&rt->lock);
}

void remote_io_kick(struct remote *rt)
{
	uint64_t one = 1;

	/* Cannot fail short of a bad descriptor: the counter only adds. */
	(void)!write(rt->efd, &one, sizeof(one));
}
