/* SPDX-License-Identifier: Apache-2.0 */
/* Namespaces and block operations: batched requests and the CPU copy path. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client-internal.h"

#define MIN(a, b) ((a) < (b) ? (a) : (b))

/* ---- namespaces --------------------------------------------------- */

static int ns_open_reply(kvt_client *c, const struct kvt_header *h,
			 struct kvt_cursor *cur, void *userdata)
{
	kvt_ns *ns = userdata;
	struct kvt_ns_open_rep rep;
	int r = kvt_dec_ns_open_rep(cur, &rep);
	if (r < 0)
		return r;
	ns->info.ns_id = rep.ns_id;
	ns->info.shards = rep.shards;
	ns->info.block_tokens = rep.block_tokens;
	ns->info.shard_bytes = rep.shard_bytes;
	ns->info.shard_stride = rep.shard_stride;
	ns->info.block_bytes = rep.slot_bytes;
	ns->info.bytes_per_token = rep.shard_bytes * rep.shards /
				   (rep.block_tokens ? rep.block_tokens : 1);
	return 0;
}

int client_ns_reopen(kvt_client *c, kvt_ns *ns)
{
	struct kvt_ns_open_req req = {ns->identity, ns->identity_len};
	kvt_enc_ns_open_req(&c->out, c->version, client_next_rid(c), &req);
	int r = kvt_msg_finish(&c->out, 0);
	if (r < 0)
		return r;
	r = client_call(c, ns_open_reply, ns);
	if (r == 0)
		ns->generation = c->generation;
	return r;
}

KVT_EXPORT int kvt_ns_open(kvt_client *c, const kvt_ns_desc *d, kvt_ns **ret)
{
	struct kvt_identity id;
	struct kvt_buf b;
	int r;

	if (!c || !d || !ret || !d->model || (d->n_groups && !d->groups) ||
	    d->n_groups > KVT_MAX_GROUPS || d->weights_len > KVT_MAX_FINGERPRINT ||
	    d->salt_len > KVT_MAX_FINGERPRINT || (d->weights_len && !d->weights) ||
	    (d->salt_len && !d->salt) || strlen(d->model) > KVT_MAX_MODEL)
		return -EINVAL;

	memset(&id, 0, sizeof(id));
	id.key_scheme = 1;
	strcpy(id.model, d->model);
	if (d->weights_len)
		memcpy(id.weights, d->weights, d->weights_len);
	id.weights_len = d->weights_len;
	id.layer_first = d->layer_first;
	id.layer_end = d->layer_end;
	id.tp_size = d->tp_size;
	id.cp_size = d->cp_size ? d->cp_size : 1;
	id.block_tokens = d->block_tokens;
	id.n_groups = d->n_groups;
	for (uint32_t i = 0; i < d->n_groups; i++) {
		const kvt_layer_group *g = &d->groups[i];
		id.groups[i] = (struct kvt_id_group){
			g->n_layers, g->attn,     g->window, g->planes,
			g->kv_heads, g->head_bytes, g->dtype, g->scale_layout,
		};
	}
	if (d->salt_len)
		memcpy(id.salt, d->salt, d->salt_len);
	id.salt_len = d->salt_len;

	kvt_buf_init(&b);
	r = kvt_identity_encode(&id, &b);
	if (r < 0) {
		kvt_buf_free(&b);
		return r;
	}
	kvt_ns *ns = calloc(1, sizeof(*ns));
	if (!ns) {
		kvt_buf_free(&b);
		return -ENOMEM;
	}
	ns->identity = b.data; /* keep the encoding for reconnects */
	ns->identity_len = (uint32_t)b.len;
	ns->c = c;

	pthread_mutex_lock(&c->lock);
	r = client_ensure(c);
	if (r == 0)
		r = client_ns_reopen(c, ns);
	if (r == 0) {
		kvt_ns **nss = realloc(c->nss, sizeof(*nss) * (c->n_nss + 1));
		if (!nss)
			r = -ENOMEM;
		else {
			c->nss = nss;
			c->nss[c->n_nss++] = ns;
		}
	}
	pthread_mutex_unlock(&c->lock);
	if (r < 0) {
		free(ns->identity);
		free(ns);
		return r;
	}
	*ret = ns;
	return 0;
}

KVT_EXPORT void kvt_ns_close(kvt_ns *ns)
{
	if (!ns)
		return;
	kvt_client *c = ns->c;
	if (c) {
		pthread_mutex_lock(&c->lock);
		for (uint32_t i = 0; i < c->n_nss; i++)
			if (c->nss[i] == ns) {
				c->nss[i] = c->nss[--c->n_nss];
				break;
			}
		pthread_mutex_unlock(&c->lock);
	}
	free(ns->identity);
	free(ns);
}

KVT_EXPORT int kvt_ns_get_info(const kvt_ns *ns, kvt_ns_info *ret)
{
	if (!ns || !ret)
		return -EINVAL;
	*ret = ns->info;
	return 0;
}

/* ---- requests ----------------------------------------------------- */

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

KVT_EXPORT int kvt_lookup(kvt_ns *ns, const uint8_t *keys, size_t n,
			  uint32_t flags, uint8_t *ret_states)
{
	if (!ns || (n && !keys) || (flags & ~(uint32_t)KVT_LOOKUP_TOUCH))
		return -EINVAL;
	if (!ns->c)
		return -ENOTCONN;
	kvt_client *c = ns->c;
	size_t leading = 0;
	bool run = true;
	int r = 0;

	if (ret_states)
		memset(ret_states, KVT_MISS, n);
	pthread_mutex_lock(&c->lock);
	for (size_t off = 0; off < n; off += c->max_keys) {
		uint32_t k = (uint32_t)MIN(n - off, (size_t)c->max_keys);
		struct lookup_ctx ctx = {ret_states ? ret_states + off : NULL, k, 0};
		r = ns_ready(ns);
		if (r == 0)
			r = keys_call(ns, KVT_OP_LOOKUP, flags, keys + off * KVT_KEY_SIZE,
				      k, lookup_reply, &ctx);
		if (r < 0)
			break;
		if (run)
			leading += ctx.leading;
		run = run && ctx.leading == k;
	}
	pthread_mutex_unlock(&c->lock);
	/* While the daemon is away every key is a miss. */
	if (r == -ENOTCONN)
		return 0;
	return r < 0 ? r : (int)leading;
}

struct slots_ctx {
	kvt_ns *ns;
	kvt_slot_ref *out;
	uint32_t n;
	uint32_t ok;
};

static int slots_reply(kvt_client *c, const struct kvt_header *h,
		       struct kvt_cursor *cur, void *userdata)
{
	struct slots_ctx *ctx = userdata;
	uint32_t n;
	int r = kvt_dec_slots_rep(cur, c->slots, ctx->n, &n);
	if (r < 0)
		return r;
	if (n != ctx->n)
		return -EBADMSG;
	for (uint32_t i = 0; i < n; i++) {
		kvt_slot_ref *o = &ctx->out[i];
		const struct kvt_slot *s = &c->slots[i];
		memset(o, 0, sizeof(*o));
		o->status = s->status;
		if (s->status < 0)
			continue;
		o->handle = s->handle;
		o->extent_id = s->extent_id;
		o->offset = s->offset;
		o->bytes = ctx->ns->info.shard_bytes;
		o->ptr = client_extent_ptr(c, s->extent_id, s->offset, o->bytes);
		/* A slot we cannot address would be a daemon bug: refuse it
		 * rather than write somewhere else. */
		if (!o->ptr)
			return -EBADMSG;
		ctx->ok++;
	}
	return 0;
}

static int slots_op(kvt_ns *ns, uint16_t op, uint32_t shard, const uint8_t *keys,
		    size_t n, kvt_slot_ref *ret)
{
	if (!ns || (n && (!keys || !ret)))
		return -EINVAL;
	if (!ns->c)
		return -ENOTCONN;
	if (shard >= ns->info.shards)
		return -EINVAL;
	kvt_client *c = ns->c;
	int r = 0, done = 0;

	pthread_mutex_lock(&c->lock);
	for (size_t off = 0; off < n; off += c->max_keys) {
		uint32_t k = (uint32_t)MIN(n - off, (size_t)c->max_keys);
		struct slots_ctx ctx = {ns, ret + off, k, 0};
		r = ns_ready(ns);
		if (r == 0)
			r = keys_call(ns, op, shard, keys + off * KVT_KEY_SIZE, k,
				      slots_reply, &ctx);
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

/* COMMIT, ABORT, RELEASE with the client lock held; wait false sends
 * without waiting for the answers (ret_status is then NULL). */
static int handles_op_locked(kvt_client *c, uint16_t op, const uint64_t *handles,
			     const uint8_t *flags, size_t n, int32_t *ret_status, bool wait)
{
	int r = 0;
	if (c->fd < 0)
		r = wait ? client_ensure(c) : -ENOTCONN;
	for (size_t off = 0; r == 0 && off < n; off += c->max_keys) {
		uint32_t k = (uint32_t)MIN(n - off, (size_t)c->max_keys);
		for (uint32_t i = 0; i < k; i++) {
			c->hargs[i].handle = handles[off + i];
			c->hargs[i].flag = flags ? (flags[off + i] != 0) : 0;
		}
		kvt_enc_handles_req(&c->out, c->version, op, client_next_rid(c), c->hargs, k);
		r = kvt_msg_finish(&c->out, 0);
		struct status_ctx ctx = {ret_status ? ret_status + off : NULL, k};
		if (r == 0)
			r = wait ? client_call(c, status_reply, &ctx) : client_send_async(c);
		if (r < 0 && ret_status)
			for (size_t i = off; i < n; i++)
				ret_status[i] = r;
	}
	return r;
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
static int release_async(kvt_client *c, const uint64_t *handles, size_t n)
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

static int keys_status_op(kvt_ns *ns, uint16_t op, const uint8_t *keys, size_t n)
{
	if (!ns || (n && !keys))
		return -EINVAL;
	if (!ns->c)
		return -ENOTCONN;
	kvt_client *c = ns->c;
	int r = 0, found = 0;
	int32_t *st = malloc(sizeof(int32_t) * (n ? n : 1));
	if (!st)
		return -ENOMEM;
	pthread_mutex_lock(&c->lock);
	for (size_t off = 0; off < n; off += c->max_keys) {
		uint32_t k = (uint32_t)MIN(n - off, (size_t)c->max_keys);
		struct status_ctx ctx = {st + off, k};
		r = ns_ready(ns);
		if (r == 0)
			r = keys_call(ns, op, 0, keys + off * KVT_KEY_SIZE, k, status_reply, &ctx);
		if (r < 0)
			break;
		found += count_ok(st + off, k);
	}
	pthread_mutex_unlock(&c->lock);
	free(st);
	return r < 0 ? r : found;
}

KVT_EXPORT int kvt_touch(kvt_ns *ns, const uint8_t *keys, size_t n)
{
	return keys_status_op(ns, KVT_OP_TOUCH, keys, n);
}

KVT_EXPORT int kvt_delete(kvt_ns *ns, const uint8_t *keys, size_t n)
{
	return keys_status_op(ns, KVT_OP_DELETE, keys, n);
}

static uint64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

KVT_EXPORT int kvt_wait_resident(kvt_ns *ns, const uint8_t *keys, size_t n,
				 uint32_t timeout_ms)
{
	if (!ns || (n && !keys))
		return -EINVAL;
	if (!ns->c)
		return -ENOTCONN;
	uint8_t *st = malloc(n ? n : 1);
	if (!st)
		return -ENOMEM;
	uint64_t deadline = mono_ms() + timeout_ms;
	int r;
	for (;;) {
		/* The lookup starts staging whatever of the run is on NVMe;
		 * each block that lands is announced, and we ask again. */
		r = kvt_lookup(ns, keys, n, 0, st);
		if (r < 0)
			break;
		bool pending = false;
		for (int i = 0; i < r; i++)
			pending |= st[i] == KVT_DISK;
		if (!pending)
			break;
		uint64_t now = mono_ms();
		if (now >= deadline) {
			r = -ETIMEDOUT;
			break;
		}
		kvt_client *c = ns->c;
		pthread_mutex_lock(&c->lock);
		uint64_t seen = c->ready_events;
		int w = 0;
		while (w == 0 && c->ready_events == seen && mono_ms() < deadline)
			w = client_wait_event(c, (int)(deadline - mono_ms()));
		pthread_mutex_unlock(&c->lock);
		if (w == -ENOTCONN) {
			r = 0; /* the daemon is away: all misses */
			break;
		}
	}
	free(st);
	return r;
}

KVT_EXPORT int kvt_prefetch(kvt_ns *ns, const uint8_t *keys, size_t n)
{
	return keys_status_op(ns, KVT_OP_PREFETCH, keys, n);
}

/* ---- the CPU copy path -------------------------------------------- */

/*
 * How one block's bytes move between the caller and its slot: a plain
 * buffer, or an engine's paged cache through the layout descriptor.
 */
struct copier {
	const void *const *srcs; /* kvt_store */
	void *const *dsts;       /* kvt_load */
	const kvt_layout *layout; /* *_paged */
	const int64_t *indices;
	uint32_t block_tokens;
};

static int copy_in(const struct copier *cp, size_t i, void *slot, uint64_t bytes)
{
	if (cp->layout) {
		size_t per = cp->layout->index_kind == KVT_INDEX_SLOT ? cp->block_tokens : 1;
		void *blocks[1] = {slot};
		return kvt_layout_gather(cp->layout, cp->block_tokens,
					 cp->indices + i * per, 1, blocks);
	}
	memcpy(slot, cp->srcs[i], bytes);
	return 0;
}

static int copy_out(const struct copier *cp, size_t i, const void *slot, uint64_t bytes)
{
	if (cp->layout) {
		size_t per = cp->layout->index_kind == KVT_INDEX_SLOT ? cp->block_tokens : 1;
		const void *blocks[1] = {slot};
		return kvt_layout_scatter(cp->layout, cp->block_tokens,
					  cp->indices + i * per, 1, blocks);
	}
	memcpy(cp->dsts[i], slot, bytes);
	return 0;
}

static int store_batch(kvt_ns *ns, uint32_t shard, const uint8_t *keys, size_t n,
		       const struct copier *cp, int32_t *ret_status)
{
	kvt_slot_ref *refs = calloc(n ? n : 1, sizeof(*refs));
	uint64_t *handles = calloc(n ? n : 1, sizeof(*handles));
	uint8_t *success = calloc(n ? n : 1, 1);
	int32_t *cst = calloc(n ? n : 1, sizeof(*cst));
	size_t *which = calloc(n ? n : 1, sizeof(*which));
	int stored = 0, r;

	if (!refs || !handles || !success || !cst || !which) {
		r = -ENOMEM;
		goto out;
	}
	r = kvt_reserve(ns, shard, keys, n, refs);
	if (r < 0) {
		for (size_t i = 0; ret_status && i < n; i++)
			ret_status[i] = refs[i].status;
		goto out;
	}
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		if (ret_status)
			ret_status[i] = refs[i].status;
		if (refs[i].status == -EEXIST)
			stored++;
		if (refs[i].status < 0)
			continue;
		/* A copy that fails is committed as failed, never as done. */
		success[k] = copy_in(cp, i, refs[i].ptr, refs[i].bytes) == 0;
		handles[k] = refs[i].handle;
		which[k++] = i;
	}
	r = 0;
	if (k) {
		r = kvt_commit(ns->c, handles, success, k, cst);
		for (size_t j = 0; j < k; j++) {
			int32_t st = r < 0 ? r : (success[j] ? cst[j] : -EIO);
			if (ret_status)
				ret_status[which[j]] = st;
			stored += st == 0;
		}
	}
out:
	free(refs);
	free(handles);
	free(success);
	free(cst);
	free(which);
	return r < 0 && !stored ? r : stored;
}

static int load_batch(kvt_ns *ns, uint32_t shard, const uint8_t *keys, size_t n,
		      const struct copier *cp, int32_t *ret_status)
{
	kvt_slot_ref *refs = calloc(n ? n : 1, sizeof(*refs));
	uint64_t *handles = calloc(n ? n : 1, sizeof(*handles));
	int loaded = 0, r;

	if (!refs || !handles) {
		r = -ENOMEM;
		goto out;
	}
	r = kvt_acquire(ns, shard, keys, n, refs);
	if (r < 0) {
		for (size_t i = 0; ret_status && i < n; i++)
			ret_status[i] = refs[i].status;
		goto out;
	}
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		int32_t st = refs[i].status;
		if (st == 0) {
			st = copy_out(cp, i, refs[i].ptr, refs[i].bytes);
			handles[k++] = refs[i].handle;
			loaded += st == 0;
		}
		if (ret_status)
			ret_status[i] = st;
	}
	r = k ? release_async(ns->c, handles, k) : 0;
	if (r == -ENOTCONN)
		r = 0;
out:
	free(refs);
	free(handles);
	return r < 0 && !loaded ? r : loaded;
}

KVT_EXPORT int kvt_store(kvt_ns *ns, uint32_t shard, const uint8_t *keys, size_t n,
			 const void *const *srcs, int32_t *ret_status)
{
	if (!ns || (n && (!keys || !srcs)))
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if (!srcs[i])
			return -EINVAL;
	struct copier cp = {.srcs = srcs};
	return store_batch(ns, shard, keys, n, &cp, ret_status);
}

KVT_EXPORT int kvt_load(kvt_ns *ns, uint32_t shard, const uint8_t *keys, size_t n,
			void *const *dsts, int32_t *ret_status)
{
	if (!ns || (n && (!keys || !dsts)))
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		if (!dsts[i])
			return -EINVAL;
	struct copier cp = {.dsts = dsts};
	return load_batch(ns, shard, keys, n, &cp, ret_status);
}

static int check_layout(kvt_ns *ns, const kvt_layout *layout, const int64_t *indices,
			size_t n)
{
	if (!ns || !layout || (n && !indices))
		return -EINVAL;
	uint64_t bytes = kvt_layout_block_bytes(layout, ns->info.block_tokens);
	if (bytes == 0 || bytes != ns->info.shard_bytes) {
		if (ns->c)
			snprintf(ns->c->error, sizeof(ns->c->error),
				 "the layout holds %llu bytes per block but the namespace's shard is %llu bytes",
				 (unsigned long long)bytes,
				 (unsigned long long)ns->info.shard_bytes);
		return -EINVAL;
	}
	return 0;
}

KVT_EXPORT int kvt_store_paged(kvt_ns *ns, uint32_t shard, const kvt_layout *layout,
			       const uint8_t *keys, size_t n, const int64_t *indices,
			       int32_t *ret_status)
{
	int r = check_layout(ns, layout, indices, n);
	if (r < 0)
		return r;
	struct copier cp = {.layout = layout, .indices = indices,
			    .block_tokens = ns->info.block_tokens};
	return store_batch(ns, shard, keys, n, &cp, ret_status);
}

KVT_EXPORT int kvt_load_paged(kvt_ns *ns, uint32_t shard, const kvt_layout *layout,
			      const uint8_t *keys, size_t n, const int64_t *indices,
			      int32_t *ret_status)
{
	int r = check_layout(ns, layout, indices, n);
	if (r < 0)
		return r;
	struct copier cp = {.layout = layout, .indices = indices,
			    .block_tokens = ns->info.block_tokens};
	return load_batch(ns, shard, keys, n, &cp, ret_status);
}
