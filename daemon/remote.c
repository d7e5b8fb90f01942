/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The remote tier's start and shutdown, its connections to the cluster
 * (made on a thread of their own, retried with backoff: an absent cluster
 * holds up neither the start nor the loop) and its statistics.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "remote-private.h"

const char *remote_state_name(enum remote_state s)
{
	static const char *names[] = {"connecting", "up", "degraded"};
	return names[s];
}

/* Options of our own client: the operation timeouts (without them a full
 * or absent cluster holds an operation forever), no admin socket (clients
 * sharing a path collide; the daemon's sandbox has no place for one) and
 * no log file of its own (errors go to stderr, the journal). */
static int client_configure(rados_t cl, const struct remote_conf *rc)
{
	char t[32];
	int r = rados_conf_read_file(cl, rc->ceph_conf);

	if (r < 0)
		return r;
	if (rc->keyring && (r = rados_conf_set(cl, "keyring", rc->keyring)) < 0)
		return r;
	/* librados takes whole seconds here. */
	snprintf(t, sizeof(t), "%u", (rc->timeout_ms + 999) / 1000);
	static const char *timeouts[] = {"rados_osd_op_timeout", "rados_mon_op_timeout",
					 "client_mount_timeout"};
	for (size_t i = 0; i < sizeof(timeouts) / sizeof(timeouts[0]); i++)
		if ((r = rados_conf_set(cl, timeouts[i], t)) < 0)
			return r;
	rados_conf_set(cl, "admin_socket", "");
	rados_conf_set(cl, "log_file", "");
	return 0;
}

static void *connect_main(void *arg)
{
	struct rop *op = arg;
	struct remote_conn *c = op->c;
	rados_t cl = NULL;
	int r = rados_create(&cl, c->conf->user);

	if (r == 0)
		r = client_configure(cl, c->conf);
	if (r == 0)
		r = rados_connect(cl);
	if (r == 0) {
		int64_t id = rados_pool_lookup(cl, c->conf->pool);
		if (id < 0)
			r = (int)id;
		c->pool_id = id;
	}
	if (r < 0 && cl) {
		rados_shutdown(cl);
		cl = NULL;
	}
	/* Read on the loop after the op comes back: the queue's mutex
	 * orders these writes before that. */
	c->cluster = cl;
	c->connect_result = r;
	remote_op_complete(op);
	return NULL;
}

static int connect_start(struct remote_conn *c)
{
	struct rop *op = remote_op_new(c, ROP_CONNECT, 0);

	if (!op)
		return -ENOMEM;
	c->connecting = true;
	int r = remote_thread_create(&c->connect_thread, connect_main, op);
	if (r < 0) {
		c->connecting = false;
		c->connect_result = r;
		remote_op_complete(op); /* comes back as a failed attempt */
	}
	return 0;
}

static int on_retry(sd_event_source *src, uint64_t usec, void *userdata)
{
	struct remote_conn *c = userdata;

	c->retry = sd_event_source_disable_unref(c->retry);
	if (connect_start(c) < 0)
		log_warning("Remote tier %s: out of memory reconnecting, ignoring", c->conf->name);
	return 0;
}

/* On the loop: the connect thread is done. */
static void on_connected(struct rop *op)
{
	struct remote_conn *c = op->c;

	if (c->connecting)
		pthread_join(c->connect_thread, NULL);
	c->connecting = false;
	if (c->connect_result < 0) {
		remote_conn_failed(c, c->connect_result, "connecting");
		log_warning("Remote tier %s: cannot reach pool %s as client.%s (%s); local tiers serve, retrying in %llu ms",
			    c->conf->name, c->conf->pool, c->conf->user, strerror(-c->connect_result),
			    (unsigned long long)(c->backoff_usec / 1000));
		if (sd_event_add_time_relative(c->rt->event, &c->retry, CLOCK_MONOTONIC,
					       c->backoff_usec, 0, on_retry, c) < 0)
			log_warning("Remote tier %s: cannot schedule a retry, ignoring", c->conf->name);
		return;
	}
	c->state = REMOTE_UP;
	c->backoff_usec = 0;
	c->reason[0] = 0;
	log_info("Remote tier %s: connected to pool %s as client.%s, %u tenant(s)", c->conf->name,
		 c->conf->pool, c->conf->user, c->n_tenants);
	if (remote_trim_start(c) < 0)
		log_warning("Remote tier %s: cannot start trimming; the pool quota is the only limit now",
			    c->conf->name);
}

/* On the loop, nothing in flight: the cluster handle goes, and a new one
 * is connected in the background. */
static void conn_reconnect(struct remote_conn *c)
{
	log_warning("Remote tier %s: pool %s has not answered for a while; connecting afresh",
		    c->conf->name, c->conf->pool);
	remote_trim_stop(c);
	for (uint32_t i = 0; i < c->n_tenants; i++)
		if (c->tenants[i].io) {
			rados_ioctx_destroy(c->tenants[i].io);
			c->tenants[i].io = NULL;
		}
	if (c->cluster)
		rados_shutdown(c->cluster);
	c->cluster = NULL;
	c->state = REMOTE_CONNECTING;
	snprintf(c->reason, sizeof(c->reason), "connecting afresh");
	if (connect_start(c) < 0)
		log_warning("Remote tier %s: out of memory reconnecting, ignoring", c->conf->name);
}

/* The configured tenants this section serves. */
static int conn_init(struct remote *rt, struct remote_conn *c, const struct remote_conf *rc)
{
	c->rt = rt;
	c->conf = rc;
	c->state = REMOTE_CONNECTING;
	snprintf(c->reason, sizeof(c->reason), "connecting");
	c->tenants = calloc(rt->config->n_tenants ? rt->config->n_tenants : 1, sizeof(*c->tenants));
	if (!c->tenants)
		return -ENOMEM;
	for (uint32_t i = 0; i < rt->config->n_tenants; i++) {
		const char *name = rt->config->tenants[i].name;
		if (config_remote_for(rt->config, name) == rc)
			snprintf(c->tenants[c->n_tenants++].name, sizeof(c->tenants[0].name), "%s", name);
	}
	pthread_mutex_init(&c->trim_lock, NULL);
	pthread_cond_init(&c->trim_wake, NULL);
	return 0;
}

int remote_start(struct store *s, const struct config *cfg, sd_event *event, struct remote **ret)
{
	struct remote *rt = calloc(1, sizeof(*rt));
	int r;

	if (!rt)
		return -ENOMEM;
	rt->store = s;
	rt->config = cfg;
	rt->event = event;
	rt->connected = on_connected;
	rt->reconnect = conn_reconnect;
	rt->efd = -1;
	rt->in_place = !s->pool->caps.hugetlb;
	rt->conns = calloc(cfg->n_remotes, sizeof(*rt->conns));
	rt->queue = calloc(REMOTE_QUEUE, sizeof(*rt->queue));
	rt->fetches = calloc(REMOTE_FETCHES, sizeof(*rt->fetches));
	rt->missed = calloc(REMOTE_MISS_SLOTS, sizeof(*rt->missed));
	if (!rt->conns || !rt->queue || !rt->fetches || !rt->missed) {
		r = -ENOMEM;
		goto fail;
	}
	r = remote_io_init(rt);
	if (r < 0)
		goto fail;
	r = sd_event_add_io(event, &rt->efd_src, rt->efd, EPOLLIN, remote_on_event, rt);
	if (r < 0)
		goto fail;
	for (uint32_t i = 0; i < cfg->n_remotes; i++) {
		r = conn_init(rt, &rt->conns[i], &cfg->remotes[i]);
		rt->n_conns = i + 1;
		if (r < 0 || (r = connect_start(&rt->conns[i])) < 0)
			goto fail;
	}
	store_set_remote(s, &remote_tier_ops, rt);
	*ret = rt;
	return 0;
fail:
	remote_free(rt);
	return r;
}

static void conn_free(struct remote_conn *c)
{
	remote_trim_stop(c);
	sd_event_source_disable_unref(c->retry);
	sd_event_source_disable_unref(c->probe);
	for (uint32_t i = 0; i < c->n_tenants; i++)
		if (c->tenants[i].io)
			rados_ioctx_destroy(c->tenants[i].io);
	if (c->cluster)
		rados_shutdown(c->cluster);
	free(c->tenants);
	pthread_cond_destroy(&c->trim_wake);
	pthread_mutex_destroy(&c->trim_lock);
}

void remote_free(struct remote *rt)
{
	struct rop_queue q;

	if (!rt)
		return;
	if (rt->store->remote == rt)
		store_set_remote(rt->store, NULL, NULL);
	/* Every operation ends within its timeout; wait for their callbacks,
	 * then let go of the blocks the reads held. */
	for (unsigned i = 0; i < rt->n_conns; i++)
		if (rt->conns[i].connecting)
			pthread_join(rt->conns[i].connect_thread, NULL);
	if (rt->efd >= 0) {
		remote_io_drain(rt);
		remote_io_take(rt, &q);
		while (!TAILQ_EMPTY(&q)) {
			struct rop *op = TAILQ_FIRST(&q);
			TAILQ_REMOVE(&q, op, done_link);
			if (op->kind == ROP_READ)
				remote_key_settled(rt, op->run, op->b, false);
			remote_op_free(op);
		}
	}
	if (rt->fetches)
		remote_fetches_end(rt);
	for (unsigned i = 0; i < rt->n_conns; i++)
		conn_free(&rt->conns[i]);
	sd_event_source_disable_unref(rt->efd_src);
	remote_io_done(rt);
	free(rt->conns);
	free(rt->queue);
	free(rt->fetches);
	free(rt->missed);
	free(rt->conn_of_tenant);
	free(rt);
}

unsigned remote_count(const struct remote *rt)
{
	return rt ? rt->n_conns : 0;
}

void remote_get_stats(const struct remote *rt, unsigned i, struct remote_stats *ret)
{
	const struct remote_conn *c = &rt->conns[i];

	*ret = c->st;
	ret->name = c->conf->name;
	ret->pool = c->conf->pool;
	ret->state = c->state;
	ret->state_reason = c->reason;
	ret->capacity = c->conf->capacity;
	ret->in_flight = c->in_flight - (c->connecting ? 1 : 0);
	ret->used = atomic_load(&((struct remote_conn *)c)->trim_used);
	ret->objects = atomic_load(&((struct remote_conn *)c)->trim_objects);
	ret->trim_passes = atomic_load(&((struct remote_conn *)c)->trim_passes);
	ret->trimmed = atomic_load(&((struct remote_conn *)c)->trimmed);
	ret->trimmed_bytes = atomic_load(&((struct remote_conn *)c)->trimmed_bytes);
}

int remote_tenant_stats(const struct remote *rt, const char *tenant,
			struct remote_tenant_stats *ret)
{
	for (unsigned i = 0; rt && i < rt->n_conns; i++)
		for (uint32_t j = 0; j < rt->conns[i].n_tenants; j++)
			if (!strcmp(rt->conns[i].tenants[j].name, tenant)) {
				*ret = rt->conns[i].tenants[j].st;
				ret->tier = rt->conns[i].conf->name;
				return 0;
			}
	return -ENOENT;
}
