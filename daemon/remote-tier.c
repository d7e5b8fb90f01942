/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The remote tier as the store sees it: write-back of the blocks its
 * policy picks, fetch rounds for the keys a lookup missed locally, the
 * completions of both on the loop, and the state of each connection
 * (up, or degraded and backing off) that decides whether the tier is
 * asked at all.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "log.h"
#include "macro.h"
#include "pool.h"
#include "remote-private.h"
#include "turns.h"

#define UNKNOWN (-2)

/* The connection serving tenant t and its entry there, or NULL. */
static struct remote_conn *conn_for(struct remote *rt, const struct tenant *t,
				    struct remote_tenant **ret)
{
	if (t->id >= rt->conn_of_cap) {
		uint32_t cap = t->id + 16;
		int16_t *v = realloc(rt->conn_of_tenant, cap * sizeof(*v));
		if (!v)
			return NULL;
		for (uint32_t i = rt->conn_of_cap; i < cap; i++)
			v[i] = UNKNOWN;
		rt->conn_of_tenant = v;
		rt->conn_of_cap = cap;
	}
	if (rt->conn_of_tenant[t->id] == UNKNOWN) {
		const struct remote_conf *rc = config_remote_for(rt->config, t->name);
		rt->conn_of_tenant[t->id] = -1;
		for (unsigned i = 0; rc && i < rt->n_conns; i++)
			if (rt->conns[i].conf == rc)
				rt->conn_of_tenant[t->id] = (int16_t)i;
	}
	if (rt->conn_of_tenant[t->id] < 0)
		return NULL;
	struct remote_conn *c = &rt->conns[rt->conn_of_tenant[t->id]];
	for (uint32_t i = 0; i < c->n_tenants; i++)
		if (!strcmp(c->tenants[i].name, t->name)) {
			*ret = &c->tenants[i];
			return c;
		}
	return NULL; /* configured after the start: served after a restart */
}

/* Up, or degraded with its backoff over: the next operation is the probe. */
static bool usable(struct remote_conn *c, struct remote_tenant *t)
{
	if (c->state == REMOTE_CONNECTING)
		return false;
	if (c->state == REMOTE_DEGRADED && remote_now(c->rt) < c->retry_at)
		return false;
	if (!t->io) {
		int r = rados_ioctx_create2(c->cluster, c->pool_id, &t->io);
		if (r < 0) {
			t->io = NULL;
			remote_conn_failed(c, r, "opening the pool");
			return false;
		}
		rados_ioctx_set_namespace(t->io, t->name);
	}
	return true;
}

static void conn_ok(struct remote_conn *c)
{
	if (c->state != REMOTE_DEGRADED)
		return;
	log_info("Remote tier %s: pool %s answers again", c->conf->name, c->conf->pool);
	c->state = REMOTE_UP;
	c->probes_failed = 0;
	c->backoff_usec = 0;
	c->reason[0] = 0;
}

static int on_probe(sd_event_source *src, uint64_t usec, void *userdata)
{
	struct remote_conn *c = userdata;

	c->probe = sd_event_source_disable_unref(c->probe);
	if (c->state != REMOTE_DEGRADED || !c->n_tenants)
		return 0;
	if (c->probes_failed >= REMOTE_RECONNECT_PROBES && c->in_flight == 0) {
		c->probes_failed = 0;
		c->rt->reconnect(c);
		return 0;
	}
	if (!usable(c, &c->tenants[0]))
		return 0;
	struct rop *op = remote_op_new(c, ROP_PROBE, 0);
	if (op && remote_probe(&c->tenants[0], op) < 0)
		remote_conn_failed(c, -EIO, "probing");
	return 0;
}

/* A degraded tier comes back by itself, engines asking or not. */
static void probe_schedule(struct remote_conn *c)
{
	if (c->state != REMOTE_DEGRADED || c->probe)
		return;
	if (sd_event_add_time(c->rt->event, &c->probe, CLOCK_MONOTONIC, c->retry_at, 0, on_probe,
			      c) < 0)
		log_warning("Remote tier %s: cannot schedule a probe, ignoring", c->conf->name);
}

void remote_conn_failed(struct remote_conn *c, int error, const char *what)
{
	uint64_t now = remote_now(c->rt);

	c->st.errors++;
	c->st.timeouts += error == -ETIMEDOUT;
	/* Ops that were in flight together fail together: the backoff grows
	 * once per failed probe, not once per op. */
	if (c->state == REMOTE_DEGRADED && now < c->retry_at)
		return;
	c->backoff_usec = c->backoff_usec ? c->backoff_usec * 2 : REMOTE_BACKOFF_MIN_USEC;
	if (c->backoff_usec > REMOTE_BACKOFF_MAX_USEC)
		c->backoff_usec = REMOTE_BACKOFF_MAX_USEC;
	c->retry_at = now + c->backoff_usec;
	snprintf(c->reason, sizeof(c->reason), "%s: %s", what, strerror(-error));
	if (c->state == REMOTE_UP) {
		c->st.degraded++;
		log_warning("Remote tier %s degraded (%s); local tiers keep serving, retrying in %llu ms",
			    c->conf->name, c->reason, (unsigned long long)(c->backoff_usec / 1000));
	}
	if (c->state != REMOTE_CONNECTING)
		c->state = REMOTE_DEGRADED;
	probe_schedule(c);
}

/* Keys the pool did not have, remembered briefly (REMOTE_MISS_TTL_USEC). */
static struct remote_miss *miss_slot(struct remote *rt, const struct ns *ns, const uint8_t *key,
				     uint64_t *ret_fp)
{
	uint64_t seed = ((uint64_t)ns->tenant->id << 32) | ns->id;
	*ret_fp = XXH3_64bits_withSeed(key, KVT_KEY_SIZE, seed) | 1;
	return &rt->missed[*ret_fp % REMOTE_MISS_SLOTS];
}

static void miss_note(struct remote *rt, const struct ns *ns, const uint8_t *key)
{
	uint64_t fp;
	struct remote_miss *m = miss_slot(rt, ns, key, &fp);
	m->fp = fp;
	m->until_usec = remote_now(rt) + REMOTE_MISS_TTL_USEC;
}

static bool missed_recently(struct remote *rt, const struct ns *ns, const uint8_t *key)
{
	uint64_t fp;
	struct remote_miss *m = miss_slot(rt, ns, key, &fp);
	return m->fp == fp && remote_now(rt) < m->until_usec;
}

/* Queue a write-back of b; false when the queue is full. */
static bool queue_push(struct remote *rt, const struct block *b, uint8_t tries)
{
	if (rt->q_len == REMOTE_QUEUE)
		return false;
	struct remote_wb *w = &rt->queue[(rt->q_head + rt->q_len++) % REMOTE_QUEUE];
	w->tenant_id = b->ns->tenant->id;
	w->ns_id = b->ns->id;
	memcpy(w->key, b->key, KVT_KEY_SIZE);
	w->tries = tries;
	return true;
}

/* Write-backs waiting for an operation, oldest first, until the turn is
 * over (each copies its block out of the pool here): the rest at the
 * next dispatch.  While the head's tier is degraded they wait: they go
 * out once it answers again. */
static void pump(struct remote *rt, const struct turn *turn)
{
	while (rt->q_len) {
		if (turn_over(turn)) {
			remote_io_kick(rt);
			return;
		}
		struct remote_wb *w = &rt->queue[rt->q_head];
		struct block *b = store_remote_find(rt->store, w->tenant_id, w->ns_id, w->key);
		struct remote_tenant *t = NULL;
		struct remote_conn *c = b ? conn_for(rt, b->ns->tenant, &t) : NULL;
		if (c && (c->in_flight >= c->conf->queue_depth || !usable(c, t)))
			return;
		rt->q_head = (rt->q_head + 1) % REMOTE_QUEUE;
		rt->q_len--;
		if (!b || b->remote != BLOCK_REMOTE_WRITING)
			continue; /* gone, or settled meanwhile */
		store_remote_state(rt->store, b, BLOCK_REMOTE_NONE); /* unless the write starts */
		/* Demoted by the engine's hints while it waited: its
		 * session is over, not worth the cluster's space. */
		if (!c || b->evict.band == EVICT_BAND_LOW)
			continue;
		struct rop *op = remote_op_new(c, ROP_WRITE, SPILL_SLOT_HEADER_BYTES + b->extent->slot_bytes);
		if (!op)
			return;
		op->tenant = t;
		op->tenant_id = w->tenant_id;
		op->ns_id = w->ns_id;
		op->tries = w->tries;
		memcpy(op->key, w->key, KVT_KEY_SIZE);
		if (remote_write(t, op, b) < 0) {
			c->st.errors++;
			continue;
		}
		store_remote_state(rt->store, b, BLOCK_REMOTE_WRITING);
	}
}

static void tier_used(void *remote, struct block *b)
{
	struct remote *rt = remote;
	struct remote_tenant *t;

	if (b->remote != BLOCK_REMOTE_NONE || b->state != BLOCK_RESIDENT || !b->extent ||
	    b->evict.band == EVICT_BAND_LOW)
		return;
	struct remote_conn *c = conn_for(rt, b->ns->tenant, &t);
	if (!c || b->uses < c->conf->min_reuse)
		return;
	/* Never connected: nothing to wait for.  Degraded: queued, for when
	 * it answers again. */
	if (c->state == REMOTE_CONNECTING || !queue_push(rt, b, 0)) {
		c->st.skipped++;
		return;
	}
	store_remote_state(rt->store, b, BLOCK_REMOTE_WRITING);
	/* Copied out at the tier's next dispatch, not in the request that
	 * used the block. */
	remote_io_kick(rt);
}

static void run_put(struct remote *rt, struct remote_run *run)
{
	if (--run->pending)
		return;
	store_remote_run_settled(rt->store, run->ns, run->key, run->n, run->served);
	free(run);
}

void remote_key_settled(struct remote *rt, struct remote_run *run, struct block *b, bool ok)
{
	store_remote_fetched(rt->store, b, ok);
	run->served += ok;
	run_put(rt, run);
}

/* The keys of run still waiting are not served: misses. */
static void run_end(struct remote *rt, struct remote_run *run)
{
	run->pending++; /* its notice after the loop, not in it */
	for (uint32_t i = 0; i < rt->f_len; i++) {
		struct remote_fetch *e = &rt->fetches[(rt->f_head + i) % REMOTE_FETCHES];
		if (e->b && e->run == run) {
			struct block *b = e->b;
			e->b = NULL;
			remote_key_settled(rt, run, b, false);
		}
	}
	run_put(rt, run);
}

void remote_fetches_end(struct remote *rt)
{
	for (uint32_t i = 0; i < rt->f_len; i++) {
		struct remote_fetch *e = &rt->fetches[(rt->f_head + i) % REMOTE_FETCHES];
		if (e->b)
			run_end(rt, e->run);
	}
	rt->f_len = 0;
}

/* A read of e's key.  In place (rt->in_place) when a host slot is free,
 * or when the run already has an object that checked: a run's first reads
 * may all find nothing (a cold prompt), and a slot taken by eviction for
 * each would evict blocks for nothing, so those read into the daemon's
 * buffer and take their slot once the bytes have checked.  So does a read
 * whose slot would be in an extent still being made: it goes out now, and
 * its copy waits for the memory (read_done()), not the read.
 * \return 0 or a negative errno: not sent */
static int fetch_submit(struct remote *rt, const struct remote_fetch *e)
{
	struct block *b = e->b;
	struct ns *ns = b->ns;
	size_t payload = ns->cls->slot_bytes;
	uint8_t *slot = NULL;

	if (rt->in_place && (e->run->confirmed ? store_host_slot(rt->store, ns, b, false)
					       : store_host_slot_spare(rt->store, ns, b)) == 0)
		slot = b->extent->map + (uint64_t)b->slot * b->extent->slot_bytes;
	struct rop *op = remote_op_new(e->c, ROP_READ, SPILL_SLOT_HEADER_BYTES + (slot ? 0 : payload));
	if (!op)
		return -ENOMEM;
	op->len = SPILL_SLOT_HEADER_BYTES + payload;
	op->b = b;
	op->run = e->run;
	op->tenant = e->t;
	op->tenant_id = ns->tenant->id;
	op->ns_id = ns->id;
	memcpy(op->key, b->key, KVT_KEY_SIZE);
	remote_object_expect(ns, op->key, payload, &op->want);
	return remote_read(e->t, op, ns, slot);
}

/* Reads for the waiting keys, in order, as far as each connection's queue
 * depth goes: run as reads complete, so a run longer than the depth
 * streams in without the client asking again.  A key that cannot go out
 * (the tier degraded, no memory) ends its run; one a client took over to
 * compute is only dropped. */
static void fetch_pump(struct remote *rt)
{
	while (rt->f_len) {
		struct remote_fetch e = rt->fetches[rt->f_head];
		if (e.b && e.c->in_flight >= e.c->conf->queue_depth)
			return;
		rt->f_head = (rt->f_head + 1) % REMOTE_FETCHES;
		rt->f_len--;
		if (!e.b)
			continue;
		bool taken = !e.b->indexed;
		if (!taken && usable(e.c, e.t) && fetch_submit(rt, &e) == 0)
			continue;
		if (!taken)
			run_end(rt, e.run);
		remote_key_settled(rt, e.run, e.b, false);
	}
}

static uint32_t tier_fetch(void *remote, struct ns *ns, const uint8_t *keys, uint32_t n)
{
	struct remote *rt = remote;
	struct remote_tenant *t;
	struct remote_conn *c = conn_for(rt, ns->tenant, &t);
	struct remote_run *run;
	uint32_t f = 0;

	if (!c || !usable(c, t) || !(run = calloc(1, sizeof(*run))))
		return 0;
	run->ns = ns;
	memcpy(run->key, keys, KVT_KEY_SIZE);
	/* The whole run is staging from here on, as far as the tier keeps
	 * keys for; a key known to be absent ends it. */
	for (; f < n && rt->f_len < REMOTE_FETCHES; f++) {
		const uint8_t *key = keys + (size_t)f * KVT_KEY_SIZE;
		struct block *b;
		if (missed_recently(rt, ns, key) || store_remote_block(rt->store, ns, key, &b) < 0)
			break;
		rt->fetches[(rt->f_head + rt->f_len++) % REMOTE_FETCHES] =
			(struct remote_fetch){.b = b, .c = c, .t = t, .run = run};
	}
	c->st.lookup_rounds += f > 0;
	if (!f) {
		free(run);
		return 0;
	}
	run->n = run->pending = f;
	fetch_pump(rt);
	return f;
}

const struct store_remote_ops remote_tier_ops = {
	.used = tier_used,
	.fetch = tier_fetch,
};

/* \return false when the block's host slot is in an extent still being
 * made: the read is done again once the memory is ready
 * (remote_memory_ready()), and the loop does not wait for it. */
static bool read_done(struct remote *rt, struct rop *op)
{
	struct remote_conn *c = op->c;
	struct block *b = op->b;
	size_t payload = op->len - SPILL_SLOT_HEADER_BYTES;
	bool ok = false;
	int have_slot = op->in_place ? 0 : -1;

	if (!op->in_place && op->result >= 0 && op->verified >= 0 && b->indexed) {
		have_slot = store_host_slot(rt->store, b->ns, b, false);
		if (have_slot == -EAGAIN)
			return false;
	}
	if (op->result == -ENOENT) {
		conn_ok(c);
		c->st.misses++;
		op->tenant->st.misses++;
		miss_note(rt, b->ns, op->key);
	} else if (op->result < 0) {
		remote_conn_failed(c, op->result, "reading");
	} else {
		conn_ok(c);
		if (op->verified < 0) {
			c->st.rejected++;
			miss_note(rt, b->ns, op->key);
			log_warning("Remote tier %s: object of tenant %s failed verification (%s): a miss",
				    c->conf->name, op->tenant->name, strerror(-op->verified));
		} else if (op->in_place) {
			/* Read and verified in its slot (on librados's
			 * thread): published as it lies, unless a client took
			 * the key over meanwhile. */
			ok = b->indexed;
			c->st.reads_in_place += ok;
		} else if (have_slot == 0) {
			/* Verified bytes (on librados's thread), copied here:
			 * with hugetlb pool memory is touched only under the
			 * loop's guard. */
			uint8_t *slot = b->extent->map + (uint64_t)b->slot * b->extent->slot_bytes;
			ok = pool_guarded_copy(slot, op->buf + SPILL_SLOT_HEADER_BYTES, payload) == 0;
		}
	}
	if (ok) {
		c->st.reads++;
		c->st.read_bytes += payload;
		c->st.lookup_usec += remote_now(rt) - op->started_usec;
		op->tenant->st.reads++;
		op->tenant->st.read_bytes += payload;
	}
	bool taken = !b->indexed;
	/* Served: the pool has the run's prefix, its reads may evict for a
	 * slot.  Not served: the rest of its run is worth nothing to the
	 * prefix (and a slot it was read into is freed with the block). */
	op->run->confirmed |= ok;
	if (!ok && !taken)
		run_end(rt, op->run);
	remote_key_settled(rt, op->run, b, ok);
	return true;
}

static void write_done(struct remote *rt, struct rop *op)
{
	struct remote_conn *c = op->c;
	struct block *b = store_remote_find(rt->store, op->tenant_id, op->ns_id, op->key);
	size_t payload = op->len - SPILL_SLOT_HEADER_BYTES;

	if (op->result < 0) {
		remote_conn_failed(c, op->result, "writing");
		/* Again once the tier answers, a few times; then its next use
		 * tries again. */
		if (b && b->remote == BLOCK_REMOTE_WRITING &&
		    (op->tries + 1 >= REMOTE_WRITE_TRIES || !queue_push(rt, b, op->tries + 1))) {
			store_remote_state(rt->store, b, BLOCK_REMOTE_NONE);
			c->st.skipped++;
		}
		return;
	}
	conn_ok(c);
	c->st.writes++;
	c->st.write_bytes += payload;
	op->tenant->st.writes++;
	op->tenant->st.write_bytes += payload;
	if (b)
		store_remote_state(rt->store, b, BLOCK_REMOTE_STORED);
}

/* Completions, then the reads and writes waiting, for a turn's worth of
 * work (turns.h): a read done copies its block into the pool, a write
 * started copies one out, so a long run does not hold the loop. */
int remote_on_event(sd_event_source *src, int fd, uint32_t revents, void *userdata)
{
	struct remote *rt = userdata;
	struct turn turn = {.deadline = kvt_now_ns() + TURN_NSEC};
	struct rop_queue q;

	remote_io_take(rt, &q);
	while (!TAILQ_EMPTY(&q)) {
		if (turn_over(&turn)) {
			remote_io_put_back(rt, &q);
			remote_io_kick(rt);
			break;
		}
		struct rop *op = TAILQ_FIRST(&q);
		TAILQ_REMOVE(&q, op, done_link);
		if (op->kind == ROP_READ) {
			if (!read_done(rt, op)) {
				/* It and the rest wait for the pool's memory. */
				TAILQ_INSERT_HEAD(&q, op, done_link);
				rt->memory_wait = true;
				remote_io_put_back(rt, &q);
				break;
			}
		} else if (op->kind == ROP_WRITE) {
			write_done(rt, op);
		} else if (op->kind == ROP_PROBE && (op->result >= 0 || op->result == -ENOENT)) {
			conn_ok(op->c);
		} else if (op->kind == ROP_PROBE) {
			op->c->probes_failed++;
			remote_conn_failed(op->c, op->result, "probing");
		} else {
			rt->connected(op);
		}
		remote_op_free(op);
	}
	/* Reads first: an engine waits for them. */
	fetch_pump(rt);
	pump(rt, &turn);
	return 0;
}

void remote_memory_ready(struct remote *rt)
{
	if (rt->memory_wait) {
		rt->memory_wait = false;
		remote_io_kick(rt);
	}
}
