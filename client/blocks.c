/* SPDX-License-Identifier: Apache-2.0 */
/* Block operations as batched requests: lookup, reserve and acquire, commit,
 * abort and release, touch, delete, prefetch, the engine's hints and
 * waiting for residency. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client-internal.h"
#include "macro.h"

#define MIN(a, b) ((a) < (b) ? (a) : (b))

/* A namespace is usable when its id belongs to the live connection. */
static int ns_ready(kvt_ns *ns)
{
	kvt_client *c = ns->c;
	int r = client_ensure(c);
	if (r < 0)
		return r;
	if (ns->generation != c->generation)
		return client_ns_reopen(c, ns);
	return 0;
}

struct lookup_ctx {
	uint8_t *states;
	uint32_t n;
	uint32_t leading;
};

static int lookup_reply(kvt_client *c, const struct kvt_header *h,
			struct kvt_cursor *cur, void *userdata)
{
	struct lookup_ctx *ctx = userdata;
	struct kvt_lookup_rep rep;
	int r = kvt_dec_lookup_rep(cur, &rep);
	if (r < 0)
		return r;
	if (rep.n != ctx->n)
		return -EBADMSG;
	if (ctx->states)
		memcpy(ctx->states, rep.states, rep.n);
	ctx->leading = rep.leading;
	return 0;
}

static int keys_call(kvt_ns *ns, uint16_t op, uint32_t arg, const uint8_t *keys,
		     uint32_t n, reply_fn fn, void *ud)
{
	kvt_client *c = ns->c;
	struct kvt_keys_req req = {ns->info.ns_id, arg, n, keys};
	kvt_enc_keys_req(&c->out, c->version, op, client_next_rid(c), &req);
	int r = kvt_msg_finish(&c->out, 0);
	if (r < 0)
		return r;
	return client_call(c, fn, ud);
}

/* LOOKUP in requests of at most max_keys keys.  With KVT_LOOKUP_SETTLED,
 * asked of a daemon that negotiated it (decided per request: a reconnect
 * may find another daemon), *ret_watched counts the requests that will
 * each be answered by one SETTLED: those with keys staging. */
static int lookup(kvt_ns *ns, const uint8_t *keys, size_t n, uint32_t flags,
		  uint8_t *ret_states, uint32_t *ret_watched)
{
	kvt_client *c = ns->c;
	size_t leading = 0;
	bool run = true;
	int r = 0;

	if (ret_states)
		memset(ret_states, KVT_MISS, n);
	if (ret_watched)
		*ret_watched = 0;
	pthread_mutex_lock(&c->lock);
	for (size_t off = 0; off < n; off += c->max_keys) {
		uint32_t k = (uint32_t)MIN(n - off, (size_t)c->max_keys);
		struct lookup_ctx ctx = {ret_states ? ret_states + off : NULL, k, 0};
		uint32_t wire = flags;
		r = ns_ready(ns);
		if (!(c->features & KVT_FEATURE_SETTLED))
			wire &= ~(uint32_t)KVT_LOOKUP_SETTLED;
		if (r == 0)
			r = keys_call(ns, KVT_OP_LOOKUP, wire, keys + off * KVT_KEY_SIZE,
				      k, lookup_reply, &ctx);
		if (r < 0)
			break;
		if (ret_watched && ret_states && (wire & KVT_LOOKUP_SETTLED) &&
		    memchr(ret_states + off, KVT_DISK, k))
			(*ret_watched)++;
		if (run)
			leading += ctx.leading;
		run = run && ctx.leading == k;
	}
	bool closed = c->closed;
	pthread_mutex_unlock(&c->lock);
	/* While the daemon is away every key is a miss. */
	if (r == -ENOTCONN && !closed)
		return 0;
	return r < 0 ? r : (int)leading;
}

KVT_EXPORT int kvt_lookup(kvt_ns *ns, const uint8_t *keys, size_t n,
			  uint32_t flags, uint8_t *ret_states)
{
	if (!ns || (n && !keys) || (flags & ~(uint32_t)KVT_LOOKUP_TOUCH))
		return -EINVAL;
	return lookup(ns, keys, n, flags, ret_states, NULL);
}

struct slots_ctx {
	kvt_ns *ns;
	enum held_kind kind;
	kvt_slot_ref *out;
	uint32_t n;
	uint32_t ok;
	uint32_t n_bounce; /* handles in c->bounce, to give straight back */
};

static int slots_reply(kvt_client *c, const struct kvt_header *h,
		       struct kvt_cursor *cur, void *userdata)
{
	struct slots_ctx *ctx = userdata;
	uint64_t bytes = ctx->ns->info.shard_bytes;
	uint32_t n;
	int r = kvt_dec_slots_rep(cur, c->slots, ctx->n, &n);
	if (r < 0)
		return r;
	if (n != ctx->n)
		return -EBADMSG;
	/* A slot we cannot address would be a daemon bug: refuse the whole
	 * reply, before any of its handles is recorded, rather than write
	 * somewhere else.  So would a handle with a table index 0
	 * (docs/protocol.md §9), which pool.c could not record. */
	for (uint32_t i = 0; i < n; i++)
		if (c->slots[i].status >= 0 &&
		    (!pool_ptr(c, c->slots[i].extent_id, c->slots[i].offset, bytes, NULL) ||
		     (uint32_t)c->slots[i].handle == 0))
			return -EBADMSG;
	for (uint32_t i = 0; i < n; i++) {
		kvt_slot_ref *o = &ctx->out[i];
		const struct kvt_slot *s = &c->slots[i];
		struct mapped_extent *e = NULL;
		memset(o, 0, sizeof(*o));
		o->status = s->status;
		if (s->status < 0)
			continue;
		if (pool_held_old(c, s->handle)) {
			/* A restarted daemon numbers its handles anew: this
			 * value still names a handle of the previous one
			 * here, so it goes straight back (pool.c). */
			c->bounce[ctx->n_bounce++] = s->handle;
			o->status = -ENOBUFS;
			continue;
		}
		o->handle = s->handle;
		o->extent_id = s->extent_id;
		o->offset = s->offset;
		o->bytes = bytes;
		o->ptr = pool_ptr(c, s->extent_id, s->offset, bytes, &e);
		pool_hold(c, s->handle, e, ctx->kind);
		ctx->ok++;
	}
	return 0;
}

static int slots_op(kvt_ns *ns, uint16_t op, uint32_t shard, const uint8_t *keys,
		    size_t n, kvt_slot_ref *ret)
{
	if (!ns || (n && (!keys || !ret)))
		return -EINVAL;
	if (shard >= ns->info.shards)
		return -EINVAL;
	kvt_client *c = ns->c;
	enum held_kind kind = op == KVT_OP_ACQUIRE ? HELD_LEASE : HELD_RESERVATION;
	int r = 0, done = 0;

	pthread_mutex_lock(&c->lock);
	for (size_t off = 0; off < n; off += c->max_keys) {
		uint32_t k = (uint32_t)MIN(n - off, (size_t)c->max_keys);
		struct slots_ctx ctx = {ns, kind, ret + off, k, 0, 0};
		r = ns_ready(ns);
		/* Room to record every handle of the reply, so that none is
		 * taken and then lost. */
		if (r == 0)
			r = pool_held_reserve(c, k);
		if (r == 0)
			r = keys_call(ns, op, shard, keys + off * KVT_KEY_SIZE, k,
				      slots_reply, &ctx);
		if (ctx.n_bounce)
			client_give_back_async(c, op == KVT_OP_ACQUIRE ? KVT_OP_RELEASE : KVT_OP_ABORT,
				      c->bounce, ctx.n_bounce);
		if (r < 0) {
			for (size_t i = off; i < n; i++) {
				memset(&ret[i], 0, sizeof(ret[i]));
				ret[i].status = r;
			}
			break;
		}
		done += (int)ctx.ok;
	}
	pthread_mutex_unlock(&c->lock);
	return done ? done : (r < 0 ? r : 0);
}

KVT_EXPORT int kvt_reserve(kvt_ns *ns, uint32_t shard, const uint8_t *keys,
			   size_t n, kvt_slot_ref *ret)
{
	return slots_op(ns, KVT_OP_RESERVE, shard, keys, n, ret);
}

KVT_EXPORT int kvt_acquire(kvt_ns *ns, uint32_t shard, const uint8_t *keys,
			   size_t n, kvt_slot_ref *ret)
{
	return slots_op(ns, KVT_OP_ACQUIRE, shard, keys, n, ret);
}
struct status_ctx {
	int32_t *out;
	uint32_t n;
};

static int status_reply(kvt_client *c, const struct kvt_header *h,
			struct kvt_cursor *cur, void *userdata)
{
	struct status_ctx *ctx = userdata;
	uint32_t n;
	int r = kvt_dec_status_rep(cur, c->status, ctx->n, &n);
	if (r < 0)
		return r;
	if (n != ctx->n)
		return -EBADMSG;
	if (ctx->out)
		memcpy(ctx->out, c->status, n * sizeof(int32_t));
	return 0;
}

/* The kind of handle an operation ends. */
static enum held_kind op_kind(uint16_t op)
{
	return op == KVT_OP_RELEASE ? HELD_LEASE : HELD_RESERVATION;
}

/*
 * What becomes of a handle without the daemon: a negative errno or 0 for
 * its status, or 1 when it must be sent (*ret_own: it is held here).
 */
static int handle_local(kvt_client *c, uint16_t op, uint64_t handle, bool *ret_own)
{
	enum held_kind kind;
	int where = pool_held_find(c, handle, &kind);

	*ret_own = where == HELD_CURRENT;
	if (where == HELD_FOREIGN)
		return c->conn.fd >= 0 ? 1 : -ENOTCONN;
	if (kind != op_kind(op))
		return -EINVAL; /* what the daemon answers too */
	if (where == HELD_OLD) {
		/* The daemon that issued it is gone, and the block with it:
		 * a commit stored nothing; a release or abort is done. */
		pool_unhold(c, handle);
		return op == KVT_OP_COMMIT ? -ESTALE : 0;
	}
	if (c->conn.fd >= 0)
		return 1;
	if (op == KVT_OP_COMMIT)
		return -ENOTCONN; /* still the caller's: commit again or abort */
	/* Given back while the daemon is away: sent if the same daemon
	 * comes back, moot if a new one does. */
	pool_defer(c, handle, op);
	pool_unhold(c, handle);
	return 0;
}

/*
 * COMMIT, ABORT, RELEASE with the client lock held; wait false sends
 * without waiting for the answers (ret_status is then NULL).  Handles of
 * an earlier daemon instance are answered here and never sent (pool.c).
 */
static int handles_op_locked(kvt_client *c, uint16_t op, const uint64_t *handles,
			     const uint8_t *flags, size_t n, int32_t *ret_status, bool wait)
{
	uint32_t per = c->max_keys ? c->max_keys : 1;
	int result = 0;

	/* A reconnect decides which handles are old: before looking. */
	if (c->conn.fd < 0 && wait)
		client_ensure(c);
	if (c->forked || c->closed) {
		/* Nothing of the connection is this process's any more. */
		result = c->forked ? -ECHILD : -ENOTCONN;
		for (size_t i = 0; ret_status && i < n; i++)
			ret_status[i] = result;
		return n ? result : 0;
	}
	for (size_t i = 0; i < n;) {
		uint32_t k = 0;
		for (; i < n && k < per; i++) {
			bool own;
			int st = handle_local(c, op, handles[i], &own);
			if (st <= 0) {
				if (ret_status)
					ret_status[i] = st;
				if (st == -ENOTCONN)
					result = st;
				continue;
			}
			c->hargs[k] = (struct kvt_handle_arg){
				handles[i], flags ? (flags[i] != 0) : 0};
			c->hpos[k] = i;
			c->hown[k] = own;
			k++;
		}
		if (!k)
			continue;
		int r;
		kvt_enc_handles_req(&c->out, c->version, op, client_next_rid(c), c->hargs, k);
		r = kvt_msg_finish(&c->out, 0);
		struct status_ctx ctx = {NULL, k};
		if (r == 0)
			r = wait ? client_call(c, status_reply, &ctx) : client_send_async(c);
		for (uint32_t j = 0; j < k; j++) {
			size_t at = c->hpos[j];
			uint64_t handle = c->hargs[j].handle;
			int32_t st = r == 0 ? (wait ? c->status[j] : 0) : r;
			if (r == -ENOTCONN && c->hown[j] && op != KVT_OP_COMMIT) {
				/* Lost on the way: as if the daemon were away. */
				pool_defer(c, handle, op);
				st = 0;
			}
			if (c->hown[j] && (r == 0 || st == 0))
				pool_unhold(c, handle);
			if (st < 0 && r < 0)
				result = r;
			if (ret_status)
				ret_status[at] = st;
		}
	}
	return result;
}

static int handles_op(kvt_client *c, uint16_t op, const uint64_t *handles,
		      const uint8_t *flags, size_t n, int32_t *ret_status)
{
	if (!c || (n && !handles))
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	int r = handles_op_locked(c, op, handles, flags, n, ret_status, true);
	pthread_mutex_unlock(&c->lock);
	return r;
}

KVT_EXPORT int kvt_commit(kvt_client *c, const uint64_t *handles,
			  const uint8_t *success, size_t n, int32_t *ret_status)
{
	if (n && !success)
		return -EINVAL;
	return handles_op(c, KVT_OP_COMMIT, handles, success, n, ret_status);
}

KVT_EXPORT int kvt_abort(kvt_client *c, const uint64_t *handles, size_t n,
			 int32_t *ret_status)
{
	return handles_op(c, KVT_OP_ABORT, handles, NULL, n, ret_status);
}

KVT_EXPORT int kvt_release(kvt_client *c, const uint64_t *handles, size_t n,
			   int32_t *ret_status)
{
	return handles_op(c, KVT_OP_RELEASE, handles, NULL, n, ret_status);
}

/* The lease ends only after the bytes are copied out; nothing the caller
 * needs depends on the answer, so do not wait for it. */
int client_release_async(kvt_client *c, const uint64_t *handles, size_t n)
{
	pthread_mutex_lock(&c->lock);
	int r = handles_op_locked(c, KVT_OP_RELEASE, handles, NULL, n, NULL, false);
	pthread_mutex_unlock(&c->lock);
	return r;
}

static int count_ok(const int32_t *st, size_t n)
{
	int k = 0;
	for (size_t i = 0; i < n; i++)
		k += st[i] == 0;
	return k;
}

static int keys_status_op(kvt_ns *ns, uint16_t op, uint32_t arg, const uint8_t *keys, size_t n)
{
	if (!ns || (n && !keys))
		return -EINVAL;
	kvt_client *c = ns->c;
	int r = 0, found = 0, again = 0;
	int32_t *st = malloc(sizeof(int32_t) * (n ? n : 1));
	if (!st)
		return -ENOMEM;
	pthread_mutex_lock(&c->lock);
	for (size_t off = 0; off < n; off += c->max_keys) {
		uint32_t k = (uint32_t)MIN(n - off, (size_t)c->max_keys);
		struct status_ctx ctx = {st + off, k};
		r = ns_ready(ns);
		if (r == 0)
			r = keys_call(ns, op, arg, keys + off * KVT_KEY_SIZE, k, status_reply, &ctx);
		if (r < 0)
			break;
		found += count_ok(st + off, k);
		for (uint32_t i = 0; i < k; i++)
			again |= st[off + i] == -EAGAIN;
	}
	pthread_mutex_unlock(&c->lock);
	free(st);
	/* A DELETE the daemon cannot do yet (its NVMe tier is recovering)
	 * must not read as "not there". */
	if (r == 0 && again && op == KVT_OP_DELETE)
		r = -EAGAIN;
	return r < 0 ? r : found;
}

KVT_EXPORT int kvt_touch(kvt_ns *ns, const uint8_t *keys, size_t n)
{
	return keys_status_op(ns, KVT_OP_TOUCH, 0, keys, n);
}

KVT_EXPORT int kvt_delete(kvt_ns *ns, const uint8_t *keys, size_t n)
{
	return keys_status_op(ns, KVT_OP_DELETE, 0, keys, n);
}

KVT_EXPORT int kvt_retain(kvt_ns *ns, const uint8_t *keys, size_t n, unsigned priority,
			  unsigned duration_s)
{
	if (priority > KVT_PRIORITY_MAX || duration_s > KVT_HINT_MAX_DURATION)
		return -EINVAL;
	return keys_status_op(ns, KVT_OP_HINT, KVT_HINT_ARG(KVT_HINT_RETAIN, priority, duration_s),
			      keys, n);
}

KVT_EXPORT int kvt_end(kvt_ns *ns, const uint8_t *keys, size_t n, unsigned flags)
{
	if (flags & ~(unsigned)KVT_END_SESSION)
		return -EINVAL;
	unsigned kind = flags & KVT_END_SESSION ? KVT_HINT_END_SESSION : KVT_HINT_END_REQUEST;
	return keys_status_op(ns, KVT_OP_HINT, KVT_HINT_ARG(kind, 0, 0), keys, n);
}

static uint64_t mono_ms(void)
{
	return kvt_now_ns() / 1000000;
}

/* kvt_wait_resident looks up again at least this often (ms). */
#define RELOOK_MS 10000

KVT_EXPORT int kvt_wait_resident(kvt_ns *ns, const uint8_t *keys, size_t n,
				 uint32_t timeout_ms)
{
	if (!ns || (n && !keys))
		return -EINVAL;
	uint8_t *st = malloc(n ? n : 1);
	if (!st)
		return -ENOMEM;
	kvt_client *c = ns->c;
	uint64_t deadline = mono_ms() + timeout_ms;
	int r;
	for (;;) {
		/* The lookup starts staging whatever of the run is on NVMe,
		 * and asks to be told once all of it has settled (SETTLED);
		 * a daemon without that announces each block as it lands. */
		uint32_t watched;
		pthread_mutex_lock(&c->lock);
		uint64_t settled = c->settled_events;
		pthread_mutex_unlock(&c->lock);
		r = lookup(ns, keys, n, KVT_LOOKUP_SETTLED, st, &watched);
		if (r < 0)
			break;
		uint64_t pending = 0;
		for (int i = 0; i < r; i++)
			pending += st[i] == KVT_DISK;
		if (!pending)
			break;
		uint64_t now = mono_ms();
		if (now >= deadline) {
			r = -ETIMEDOUT;
			break;
		}
		/* Ask again once every request of the lookup has been told
		 * SETTLED (any connection's notice counts, which only makes
		 * us ask sooner).  Else, or besides (a daemon with too many
		 * LOOKUPs of ours waiting tells of each block): once half of
		 * what is pending may have landed, not at every block, so a
		 * run of n blocks costs about log2(n) look-ups of it rather
		 * than n.  A notice names one block, any of the tenant's
		 * (others' count too); a run's notice settles many keys at
		 * once, so it always makes us ask.  So does RELOOK_MS without
		 * enough notices: the daemon tells a connection of landings for
		 * 30 s after a LOOKUP answered DISK, and asking renews that. */
		uint64_t need = (pending + 1) / 2;
		uint64_t until = now + RELOOK_MS < deadline ? now + RELOOK_MS : deadline;
		pthread_mutex_lock(&c->lock);
		uint64_t seen = c->ready_events, runs = c->ready_runs;
		int w = 0;
		while (w == 0 && c->ready_events - seen < need && c->ready_runs == runs &&
		       (!watched || c->settled_events - settled < watched) && mono_ms() < until)
			w = client_wait_event(c, (int)(until - mono_ms()));
		bool closed = c->closed;
		pthread_mutex_unlock(&c->lock);
		if (w == -ENOTCONN) {
			r = closed ? -ENOTCONN : 0; /* away: all misses */
			break;
		}
	}
	free(st);
	return r;
}

KVT_EXPORT int kvt_prefetch(kvt_ns *ns, const uint8_t *keys, size_t n)
{
	return keys_status_op(ns, KVT_OP_PREFETCH, 0, keys, n);
}
