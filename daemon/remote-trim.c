/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Keeping the remote tier within its capacity, with the cluster's own
 * tools and no coordinator of ours.  RADOS keeps whatever it is given, and
 * every node writes to the same namespaces, so once per trim interval each
 * node tries to take an exclusive RADOS lock (cls_lock, with a lease of
 * three intervals, renewed by its holder) on one object of the tier; the
 * node that holds it lists the tier's namespaces, adds up the objects'
 * sizes (stat, in parallel batches) and removes the oldest-written ones
 * until the tier is back under 90% of its capacity.  A holder that dies
 * loses the lock when its lease ends and another node takes over.  The
 * pool quota (docs/remote.md) is the hard stop behind this.
 *
 * This runs on a thread of its own with its own I/O contexts: it reads
 * only the tier's configuration and writes only its atomic counters.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "remote-private.h"

#define TRIM_LOW_PERCENT 90

struct obj {
	char name[REMOTE_OID_LEN + 1];
	uint32_t tenant;
	uint64_t size;
	time_t mtime;
};

struct listing {
	struct obj *v;
	size_t n, cap;
};

static int list_add(struct listing *l, const char *name, uint32_t tenant)
{
	if (strlen(name) != REMOTE_OID_LEN)
		return 0; /* not one of ours (the lock object, say) */
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 256;
		struct obj *v = realloc(l->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	struct obj *o = &l->v[l->n++];
	memcpy(o->name, name, REMOTE_OID_LEN + 1);
	o->tenant = tenant;
	o->size = 0;
	o->mtime = 0;
	return 0;
}

/* Size and mtime of v[0..n), queue_depth at a time. */
static void stat_batch(rados_ioctx_t *io, struct obj *v, size_t n)
{
	rados_completion_t comp[1024]; /* queue_depth at most */

	for (size_t i = 0; i < n; i++)
		if (rados_aio_create_completion2(NULL, NULL, &comp[i]) < 0 ||
		    rados_aio_stat(io[v[i].tenant], v[i].name, comp[i], &v[i].size, &v[i].mtime) < 0)
			comp[i] = NULL;
	for (size_t i = 0; i < n; i++) {
		if (!comp[i])
			continue;
		rados_aio_wait_for_complete(comp[i]);
		if (rados_aio_get_return_value(comp[i]) < 0)
			v[i].size = 0; /* gone meanwhile, or unreadable: not counted */
		rados_aio_release(comp[i]);
	}
}

static int by_age(const void *a, const void *b)
{
	const struct obj *x = a, *y = b;
	if (x->mtime != y->mtime)
		return x->mtime < y->mtime ? -1 : 1;
	return strcmp(x->name, y->name);
}

static int list_tier(struct remote_conn *c, rados_ioctx_t *io, struct listing *l)
{
	for (uint32_t t = 0; t < c->n_tenants; t++) {
		rados_list_ctx_t ctx;
		const char *entry;
		int r = rados_nobjects_list_open(io[t], &ctx);
		if (r < 0)
			return r;
		while ((r = rados_nobjects_list_next(ctx, &entry, NULL, NULL)) == 0)
			if ((r = list_add(l, entry, t)) < 0)
				break;
		rados_nobjects_list_close(ctx);
		if (r != -ENOENT && r < 0)
			return r;
	}
	size_t depth = c->conf->queue_depth;
	for (size_t i = 0; i < l->n; i += depth)
		stat_batch(io, l->v + i, l->n - i < depth ? l->n - i : depth);
	return 0;
}

/* One pass by the lock's holder. */
static void trim_pass(struct remote_conn *c, rados_ioctx_t *io)
{
	struct listing l = {0};
	uint64_t used = 0, objects = 0;

	if (list_tier(c, io, &l) < 0)
		goto out;
	for (size_t i = 0; i < l.n; i++) {
		used += l.v[i].size;
		objects += l.v[i].size > 0;
	}
	if (used > c->conf->capacity) {
		uint64_t low = c->conf->capacity / 100 * TRIM_LOW_PERCENT;
		qsort(l.v, l.n, sizeof(*l.v), by_age);
		for (size_t i = 0; i < l.n && used > low; i++) {
			if (!l.v[i].size)
				continue;
			rados_write_op_t op = rados_create_write_op();
			if (!op)
				break;
			rados_write_op_remove(op);
			/* FULL_TRY: removing is what a full pool needs. */
			int r = rados_write_op_operate(op, io[l.v[i].tenant], l.v[i].name, NULL,
						       LIBRADOS_OPERATION_FULL_TRY);
			rados_release_write_op(op);
			if (r < 0 && r != -ENOENT)
				break;
			used -= l.v[i].size;
			objects--;
			atomic_fetch_add(&c->trimmed, 1);
			atomic_fetch_add(&c->trimmed_bytes, l.v[i].size);
		}
	}
	atomic_store(&c->trim_used, used);
	atomic_store(&c->trim_objects, objects);
	atomic_fetch_add(&c->trim_passes, 1);
out:
	free(l.v);
}

/* Sleep one interval; false when told to stop. */
static bool trim_sleep(struct remote_conn *c)
{
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	uint64_t ns = until.tv_nsec + (uint64_t)c->conf->trim_interval_ms * 1000000;
	until.tv_sec += ns / 1000000000;
	until.tv_nsec = ns % 1000000000;
	pthread_mutex_lock(&c->trim_lock);
	while (!c->trim_stop && pthread_cond_timedwait(&c->trim_wake, &c->trim_lock, &until) == 0)
		;
	bool go = !c->trim_stop;
	pthread_mutex_unlock(&c->trim_lock);
	return go;
}

static void *trim_main(void *arg)
{
	struct remote_conn *c = arg;
	rados_ioctx_t io[CONFIG_MAX_TENANTS];
	char cookie[96], host[64] = "";
	uint32_t opened = 0;

	gethostname(host, sizeof(host) - 1);
	snprintf(cookie, sizeof(cookie), "%s.%d", host, (int)getpid());
	for (; opened < c->n_tenants; opened++) {
		if (rados_ioctx_create2(c->cluster, c->pool_id, &io[opened]) < 0)
			goto out;
		rados_ioctx_set_namespace(io[opened], c->tenants[opened].name);
	}
	uint64_t lease_ms = 3 * (uint64_t)c->conf->trim_interval_ms;
	struct timeval lease = {.tv_sec = lease_ms / 1000, .tv_usec = lease_ms % 1000 * 1000};
	while (c->n_tenants && trim_sleep(c)) {
		/* The lock lives in the namespace of the tier's first tenant,
		 * the same one on every node that has this configuration. */
		int r = rados_lock_exclusive(io[0], REMOTE_TRIM_OBJECT, REMOTE_TRIM_LOCK, cookie,
					     "kvtierd trims this tier", &lease,
					     LIBRADOS_LOCK_FLAG_MAY_RENEW);
		if (r == 0 || r == -EEXIST)
			trim_pass(c, io);
	}
	if (opened)
		rados_unlock(io[0], REMOTE_TRIM_OBJECT, REMOTE_TRIM_LOCK, cookie);
out:
	for (uint32_t i = 0; i < opened; i++)
		rados_ioctx_destroy(io[i]);
	return NULL;
}

int remote_trim_start(struct remote_conn *c)
{
	if (c->trim_running)
		return 0;
	c->trim_stop = false;
	int r = remote_thread_create(&c->trim_thread, trim_main, c);
	c->trim_running = r == 0;
	return r;
}

void remote_trim_stop(struct remote_conn *c)
{
	if (!c->trim_running)
		return;
	pthread_mutex_lock(&c->trim_lock);
	c->trim_stop = true;
	pthread_cond_broadcast(&c->trim_wake);
	pthread_mutex_unlock(&c->trim_lock);
	pthread_join(c->trim_thread, NULL);
	c->trim_running = false;
}
