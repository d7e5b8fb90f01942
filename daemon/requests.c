/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The requests of a session: one table of opcodes (ops[] below: the name
 * logs use, what a request needs, its largest payload, its decoder and its
 * handler), dispatch through it, and the replies.  docs/protocol.md §2.2
 * points here for what each request needs; §5 describes what it does.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "log.h"
#include "macro.h"
#include "manager.h"
#include "requests.h"
#include "session.h"
#include "stats.h"
#include "store.h"
#include "turns.h"

/* ---- replies ------------------------------------------------------ */

static const char *op_name(uint16_t opcode);

static void reply(struct session *s)
{
	if (kvt_msg_finish(&s->m->reply, 0) < 0) {
		session_kill(s, "reply too large");
		return;
	}
	session_send(s, &s->m->reply, NULL, 0);
}

static void reply_error(struct session *s, const struct kvt_header *h, int error,
			const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void reply_error(struct session *s, const struct kvt_header *h, int error,
			const char *fmt, ...)
{
	char reason[KVT_MAX_REASON + 1];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(reason, sizeof(reason), fmt, ap);
	va_end(ap);
	s->m->c.errors++;
	log_debug("Client %u: %s refused: %s", s->id, op_name(h->opcode), reason);
	kvt_enc_error(&s->m->reply, s->version, h->opcode, h->request_id, error, reason);
	reply(s);
}

/* ---- requests: decoded, then handled -------------------------------- */

/* A request's payload as its decoder left it; arrays point into the
 * message or into the manager's scratch space. */
union request {
	struct kvt_hello_req hello;
	struct kvt_ns_open_req ns_open;
	struct kvt_keys_req keys;
	uint32_t n_handles; /* in m->handles */
	uint32_t stats_what;
	struct kvt_evict_req evict;
};

/*
 * Decoders return a negative errno for a malformed payload (the connection
 * closes), 0, or 1 when they refused the request with a reply themselves
 * (a batch over [limits] keys_per_request is well-formed).
 */
typedef int (*decode_fn)(struct session *s, const struct kvt_header *h, struct kvt_cursor *c,
			 union request *ret);
/* Handlers return 0 (replied, or refused with a reason), 1 when the
 * request is under way at the end of the turn t (its message stays in
 * the input, and the session's next turn decodes it again and goes on
 * from s->work), WAIT_MEMORY when it has done nothing yet and needs host
 * memory that is still being made (its message stays, and the session
 * reads and is served nothing until requests_memory_ready()), or a
 * negative errno for a violation that closes the connection; or
 * WAIT_ERASURES.  ns: the namespace of an OP_NAMESPACE request, else
 * NULL. */
#define WAIT_MEMORY 2
#define WAIT_ERASURES 3 /* done, but answered only once NVMe copies it gave
			 * up are erased: its message stays, its state is in
			 * s->work, and the session is served nothing until
			 * requests_erasures_ended() */
typedef int (*handle_fn)(struct session *s, const struct kvt_header *h, union request *req,
			 struct ns *ns, const struct turn *turn);

/*
 * A request taken in parts, across turns (s->work): LOOKUP, a part of
 * LOOKUP_PART keys at a time, and ADMIN_EVICT, EVICT_PART index slots at a
 * time.  Every other request is one part: its keys and handles are
 * bounded by [limits] keys_per_request, and the turn ends after it.
 */
#define LOOKUP_PART 64
#define EVICT_PART 256

struct work {
	uint32_t done;           /* LOOKUP: keys with a state, from the end */
	struct store_evict evict; /* ADMIN_EVICT */
	uint8_t states[];        /* LOOKUP: one per key; DELETE: its statuses
				  * (int32_t each) while it waits */
};

/* The request goes on at the next turn; NULL when there is no memory for
 * it, and it then goes on now. */
static struct work *work_begin(struct session *s, size_t n_states)
{
	if (!s->work)
		s->work = calloc(1, sizeof(struct work) + n_states);
	return s->work;
}

static void work_end(struct session *s)
{
	free(s->work);
	s->work = NULL;
}

static int dec_hello(struct session *s, const struct kvt_header *h, struct kvt_cursor *c,
		     union request *ret)
{
	return kvt_dec_hello_req(c, &ret->hello);
}

static int dec_ns_open(struct session *s, const struct kvt_header *h, struct kvt_cursor *c,
		       union request *ret)
{
	return kvt_dec_ns_open_req(c, &ret->ns_open);
}

static int dec_keys(struct session *s, const struct kvt_header *h, struct kvt_cursor *c,
		    union request *ret)
{
	uint32_t max = s->m->config->max_keys;
	int r = kvt_dec_keys_req(c, max, &ret->keys);

	if (r == -E2BIG) {
		reply_error(s, h, r,
			    "%u keys in one request; the limit is %u ([limits] keys_per_request): split the batch",
			    ret->keys.n, max);
		return 1;
	}
	return r;
}

static int dec_handles(struct session *s, const struct kvt_header *h, struct kvt_cursor *c,
		       union request *ret)
{
	uint32_t max = s->m->config->max_keys;
	int r = kvt_dec_handles_req(c, max, s->m->handles, &ret->n_handles);

	if (r == -E2BIG) {
		reply_error(s, h, r,
			    "too many handles in one request; the limit is %u ([limits] keys_per_request)",
			    max);
		return 1;
	}
	return r;
}

static int dec_stats(struct session *s, const struct kvt_header *h, struct kvt_cursor *c,
		     union request *ret)
{
	return kvt_dec_stats_req(c, &ret->stats_what);
}

static int dec_evict(struct session *s, const struct kvt_header *h, struct kvt_cursor *c,
		     union request *ret)
{
	return kvt_dec_evict_req(c, &ret->evict);
}

static int dec_empty(struct session *s, const struct kvt_header *h, struct kvt_cursor *c,
		     union request *ret)
{
	return kvt_cursor_end(c) < 0 ? -EBADMSG : 0;
}

static void session_join_tenant(struct session *s, struct tenant *t)
{
	s->tenant = t;
	t->n_sessions++;
	/* Every extent of the tenant first, so no reply ever names an extent
	 * this connection has not been given. */
	if (!s->pool)
		return;
	for (uint32_t i = 0; i < t->n_classes; i++)
		for (uint32_t j = 0; j < t->classes[i]->n_extents; j++)
			session_announce_extent(s, t->classes[i]->extents[j]);
}

/* The kernel's word on the peer's groups, for tenancy and admin rights;
 * *ret_groups is to be freed when it is not small. */
static void peer_groups(struct session *s, gid_t *small, socklen_t small_len, struct peer *peer)
{
	gid_t *groups = small;
	socklen_t glen = small_len;
	int r = getsockopt(s->conn.fd, SOL_SOCKET, SO_PEERGROUPS, groups, &glen);

	if (r < 0 && errno == ERANGE && glen <= 65536 * sizeof(gid_t)) {
		/* More groups than fit: glen says how many. */
		groups = malloc(glen);
		if (groups)
			r = getsockopt(s->conn.fd, SOL_SOCKET, SO_PEERGROUPS, groups, &glen);
	}
	if (r == 0 && groups) {
		peer->groups = groups;
		peer->n_groups = glen / sizeof(gid_t);
		return;
	}
	if (groups != small)
		free(groups);
	log_warning("Client %u: cannot read its supplementary groups; matching uid and primary gid only",
		    s->id);
}

static int do_hello(struct session *s, const struct kvt_header *h, union request *rq,
		    struct ns *unused, const struct turn *turn)
{
	struct manager *m = s->m;
	const struct kvt_hello_req *req = &rq->hello;
	int r;

	memcpy(s->name, req->name, sizeof(s->name));
	memcpy(s->pci_bus_id, req->pci_bus_id, sizeof(s->pci_bus_id));
	s->numa_node = -1;
	if (s->pci_bus_id[0] && m->config->numa != NUMA_OFF) {
		s->numa_node = numa_node_of_device(&m->pool.topo, s->pci_bus_id);
		if (s->numa_node < 0)
			log_info("Client %u: no NUMA node known for GPU %s; its slots come from any node",
				 s->id, s->pci_bus_id);
	}

	uint32_t lo = req->min_version > KVT_PROTO_VERSION_MIN ? req->min_version
							       : KVT_PROTO_VERSION_MIN;
	uint32_t hi = req->max_version < KVT_PROTO_VERSION_MAX ? req->max_version
							       : KVT_PROTO_VERSION_MAX;
	if (lo > hi) {
		reply_error(s, h, -EPROTONOSUPPORT,
			    "client speaks protocol versions %u..%u, this daemon %u..%u: upgrade the older side",
			    req->min_version, req->max_version, KVT_PROTO_VERSION_MIN,
			    KVT_PROTO_VERSION_MAX);
		return 0;
	}

	/* The tenant is created when a namespace is opened, not here: a
	 * client that only looks (kvtierctl) leaves nothing behind. */
	gid_t small[64];
	struct peer peer = {
		.uid = s->uid,
		.gid = s->gid,
		.via_tenant = s->via_tenant[0] ? s->via_tenant : NULL,
	};
	peer_groups(s, small, sizeof(small), &peer);
	r = tenancy_resolve(m->config, &peer, &s->choice);
	s->admin = tenancy_peer_is_admin(m->config, &peer);
	if (peer.groups != small)
		free((void *)peer.groups);
	if (r == -EACCES) {
		m->c.refused++;
		reply_error(s, h, r,
			    "uid %u belongs to no [tenant.NAME] and this daemon refuses unknown uids ([tenants] unknown = refuse)",
			    (unsigned)s->uid);
		return 0;
	}
	struct tenant *t = store_tenant_find(&m->store, s->choice.name);
	s->hello = true;
	s->hello_timer = sd_event_source_disable_unref(s->hello_timer);
	s->version = (uint16_t)hi;
	s->features = req->features & KVT_FEATURES_ALL;
	s->pool = (s->features & KVT_FEATURE_POOL) != 0;
	if (t)
		session_join_tenant(s, t);

	struct kvt_hello_rep rep = {
		.version = s->version,
		.features = s->features,
		.tenant_id = t ? t->id : 0,
		.session_id = s->id,
		.max_keys = m->config->max_keys,
		.max_handles = m->config->max_handles,
		.quota_bytes = t ? t->quota : s->choice.quota,
		.numa_node = s->numa_node,
	};
	kvt_enc_hello_rep(&m->reply, s->version, h->request_id, &rep);
	reply(s);
	log_debug("Client %u: pid %d uid %u '%s', protocol %u, tenant %s%s", s->id, (int)s->pid,
		  (unsigned)s->uid, s->name, s->version, s->choice.name,
		  s->pool ? "" : ", observer");
	return 0;
}

static int do_ns_open(struct session *s, const struct kvt_header *h, union request *rq,
		      struct ns *unused, const struct turn *turn)
{
	const struct kvt_ns_open_req *req = &rq->ns_open;
	char reason[KVT_MAX_REASON];
	struct ns *ns;
	struct session *o;
	int r;

	if (!s->tenant) {
		struct tenant *t;
		r = store_tenant_get(&s->m->store, &s->choice, &t);
		if (r < 0) {
			reply_error(s, h, r, "out of memory creating tenant %s", s->choice.name);
			return 0;
		}
		/* Every connection of this tenant joins: handles cross them. */
		LIST_FOREACH(o, &s->m->sessions, link)
			if (o->hello && !o->tenant && !o->dead &&
			    !strcmp(o->choice.name, t->name))
				session_join_tenant(o, t);
	}
	reason[0] = 0;
	r = store_ns_open(&s->m->store, s->tenant, req->identity, req->identity_len,
			  &ns, reason, sizeof(reason));
	if (r < 0) {
		reply_error(s, h, r, "%s", reason[0] ? reason : "cannot open namespace");
		return 0;
	}
	struct kvt_ns_open_rep rep = {
		.ns_id = ns->id,
		.shards = ns->geo.shards,
		.block_tokens = ns->geo.block_tokens,
		.shard_bytes = ns->geo.shard_bytes,
		.shard_stride = ns->geo.shard_stride,
		.slot_bytes = ns->geo.slot_bytes,
	};
	kvt_enc_ns_open_rep(&s->m->reply, s->version, h->request_id, &rep);
	reply(s);
	return 0;
}

static bool any_state(const uint8_t *states, uint32_t n, uint8_t state)
{
	for (uint32_t i = 0; i < n; i++)
		if (states[i] == state)
			return true;
	return false;
}

/* In parts of LOOKUP_PART keys, from the last to the first, with other
 * sessions' turns between them: each key's state is the one it had at
 * some moment between the request's arrival and its reply. */
static int do_lookup(struct session *s, const struct kvt_header *h, union request *rq,
		     struct ns *ns, const struct turn *turn)
{
	struct manager *m = s->m;
	const struct kvt_keys_req *req = &rq->keys;
	struct work *w = s->work;
	uint8_t *states = w ? w->states : m->states;
	uint32_t done = w ? w->done : 0;

	uint32_t flags = KVT_LOOKUP_TOUCH;
	if (s->features & KVT_FEATURE_SETTLED)
		flags |= KVT_LOOKUP_SETTLED;
	if (req->arg & ~flags)
		return -EBADMSG;
	while (done < req->n) {
		uint32_t k = req->n - done < LOOKUP_PART ? req->n - done : LOOKUP_PART;
		store_lookup_keys(&m->store, ns, req->keys, req->n - done - k, k, req->arg, states);
		done += k;
		if (done < req->n && turn_over(turn) && (w = work_begin(s, req->n))) {
			if (states != w->states)
				memcpy(w->states + req->n - done, states + req->n - done, done);
			w->done = done;
			return 1;
		}
	}
	struct kvt_lookup_rep rep = {.n = req->n, .states = states};
	rep.leading = store_lookup_end(&m->store, ns, req->keys, req->n, states);
	kvt_enc_lookup_rep(&m->reply, s->version, h->request_id, &rep);
	reply(s);
	/* After the reply: a SETTLED may go out at once. */
	if (s->dead || !any_state(states, req->n, KVT_STATE_DISK))
		return 0;
	if (req->arg & KVT_LOOKUP_SETTLED)
		session_watch_settle(s, ns, ns->id, h->request_id, req->keys, states, req->n);
	else
		session_want_ready(s);
	return 0;
}

/* RESERVE and ACQUIRE: a shard of each key's slot. */
static int do_slots(struct session *s, const struct kvt_header *h, union request *rq,
		    struct ns *ns, const struct turn *turn)
{
	struct manager *m = s->m;
	const struct kvt_keys_req *req = &rq->keys;

	if (req->arg >= ns->geo.shards) {
		reply_error(s, h, -EINVAL, "shard %u out of range: namespace %u has %u shard(s)",
			    req->arg, ns->id, ns->geo.shards);
		return 0;
	}
	if (h->opcode == KVT_OP_RESERVE) {
		/* New extents for its blocks first, or a wait off the loop
		 * for their memory: not inside the request, with everyone else
		 * waiting behind it. */
		if (store_reserve_room(&m->store, ns, req->keys, req->n, s->numa_node) == -EAGAIN)
			return WAIT_MEMORY;
		store_reserve(&m->store, ns, req->arg, req->keys, req->n, s->process, s->numa_node,
			      m->slots);
	} else {
		store_acquire(&m->store, ns, req->arg, req->keys, req->n, s->process, m->slots);
		for (uint32_t i = 0; i < req->n; i++)
			if (m->slots[i].status == -EAGAIN) {
				session_want_ready(s);
				break;
			}
	}
	if (s->dead)
		return 0;
	kvt_enc_slots_rep(&m->reply, s->version, h->opcode, h->request_id, m->slots, req->n);
	reply(s);
	return 0;
}

/* TOUCH, PREFETCH: a status per key. */
static int do_keys_status(struct session *s, const struct kvt_header *h, union request *rq,
			  struct ns *ns, const struct turn *turn)
{
	struct manager *m = s->m;
	const struct kvt_keys_req *req = &rq->keys;

	if (req->arg != 0)
		return -EBADMSG;
	if (h->opcode == KVT_OP_TOUCH) {
		store_touch(&m->store, ns, req->keys, req->n, m->status);
	} else {
		store_prefetch(&m->store, ns, req->keys, req->n, m->status);
		session_want_ready(s);
	}
	kvt_enc_status_rep(&m->reply, s->version, h->opcode, h->request_id, m->status, req->n);
	reply(s);
	return 0;
}

/* DELETE: a status per key, answered once the NVMe copies of its keys
 * are erased (and of keys not stored, whose older copies may be on their
 * way out), so that a crash after the reply brings none of them back
 * (store-erasures.c).  A key whose erasure failed is -EIO. */
static int do_delete(struct session *s, const struct kvt_header *h, union request *rq,
		     struct ns *ns, const struct turn *turn)
{
	struct manager *m = s->m;
	const struct kvt_keys_req *req = &rq->keys;
	struct work *w = s->work;

	if (req->arg != 0)
		return -EBADMSG;
	if (w)
		memcpy(m->status, w->states, sizeof(int32_t) * req->n);
	else
		store_delete(&m->store, ns, req->keys, req->n, m->status);
	for (uint32_t i = 0; i < req->n; i++) {
		if (m->status[i] != 0 && m->status[i] != -ENOENT)
			continue;
		int e = store_erase_state(&m->store, ns, req->keys + (size_t)i * KVT_KEY_SIZE);
		if (e > 0) {
			/* Without memory to keep the statuses, the next look
			 * deletes again: what was deleted then says -ENOENT. */
			if (!w)
				w = work_begin(s, sizeof(int32_t) * req->n);
			if (w)
				memcpy(w->states, m->status, sizeof(int32_t) * req->n);
			return WAIT_ERASURES;
		}
		if (e < 0)
			m->status[i] = e;
	}
	kvt_enc_status_rep(&m->reply, s->version, h->opcode, h->request_id, m->status, req->n);
	reply(s);
	return 0;
}

/* HINT: a status per key; a hint this daemon does not know is refused
 * with a reply, so that a newer library learns it is talking to an older
 * daemon. */
static int do_hint(struct session *s, const struct kvt_header *h, union request *rq,
		   struct ns *ns, const struct turn *turn)
{
	struct manager *m = s->m;
	const struct kvt_keys_req *req = &rq->keys;
	const char *why;

	if (!store_hint_valid(req->arg, &why)) {
		reply_error(s, h, -EINVAL, "%s", why);
		return 0;
	}
	store_hint(&m->store, ns, req->arg, req->keys, req->n, m->status);
	kvt_enc_status_rep(&m->reply, s->version, h->opcode, h->request_id, m->status, req->n);
	reply(s);
	return 0;
}

/* COMMIT, ABORT, RELEASE: handles, which cross the tenant's connections. */
static int do_handles(struct session *s, const struct kvt_header *h, union request *rq,
		      struct ns *unused, const struct turn *turn)
{
	struct manager *m = s->m;
	uint32_t n = rq->n_handles;

	if (!s->tenant) {
		for (uint32_t i = 0; i < n; i++)
			m->status[i] = -ENOENT;
	} else if (h->opcode == KVT_OP_COMMIT) {
		store_commit(&m->store, s->tenant, m->handles, n, m->status);
	} else if (h->opcode == KVT_OP_ABORT) {
		store_abort(&m->store, s->tenant, m->handles, n, m->status);
	} else {
		store_release(&m->store, s->tenant, m->handles, n, m->status);
	}
	kvt_enc_status_rep(&m->reply, s->version, h->opcode, h->request_id, m->status, n);
	reply(s);
	return 0;
}

static int do_evict(struct session *s, const struct kvt_header *h, union request *rq,
		    struct ns *unused, const struct turn *turn)
{
	struct manager *m = s->m;
	const struct kvt_evict_req *req = &rq->evict;
	struct tenant *tn = store_tenant_by_id(&m->store, req->tenant_id);
	struct ns *ns = tn ? store_ns_get(tn, req->ns_id) : NULL;
	struct store_evict first, *e = s->work ? &((struct work *)s->work)->evict : &first;

	if (!ns) {
		reply_error(s, h, -ENOENT, "no namespace %u in tenant %u", req->ns_id, req->tenant_id);
		return 0;
	}
	if (!s->work && (req->flags & KVT_EVICT_DROP) && m->store.recovering) {
		/* The scan may still find copies of it: like DELETE. */
		reply_error(s, h, -EAGAIN, "the NVMe tier is still being recovered and may still find blocks of namespace %s/%u; drop it once recovery has finished (kvtierctl status shows its progress)",
			    tn->name, ns->id);
		return 0;
	}
	if (!s->work)
		store_ns_evict_begin(e, req->flags & KVT_EVICT_DROP);
	/* In parts, with other sessions' turns between them. */
	while (!store_ns_evict_some(&m->store, ns, e, EVICT_PART)) {
		if (!turn_over(turn))
			continue;
		if (e == &first) {
			struct work *w = work_begin(s, 0);
			if (!w)
				continue; /* no memory to wait: on at once */
			w->evict = first;
		}
		return 1;
	}
	if (e->drop && ns->erasing > 0) {
		/* Answered once its NVMe copies are erased, as DELETE is. */
		if (e == &first) {
			struct work *w = work_begin(s, 0);
			if (w)
				w->evict = first; /* else: walked again, nothing to take */
		}
		return WAIT_ERASURES;
	}
	if (e->drop && ns->erase_failures > 0)
		log_warning("Namespace %s/%u: %llu NVMe copies of its blocks could not be erased (I/O errors); they may come back after a restart",
			    tn->name, ns->id, (unsigned long long)ns->erase_failures);
	log_info("Client %u (uid %u) %s namespace %s/%u: %llu block(s)", s->id, (unsigned)s->uid,
		 e->drop ? "dropped" : "evicted", tn->name, ns->id, (unsigned long long)e->n);
	kvt_enc_count_rep(&m->reply, s->version, KVT_OP_ADMIN_EVICT, h->request_id, e->n);
	reply(s);
	return 0;
}

static int do_ping(struct session *s, const struct kvt_header *h, union request *rq,
		   struct ns *unused, const struct turn *turn)
{
	kvt_msg_begin(&s->m->reply, s->version, KVT_OP_PING, KVT_FLAG_REPLY, h->request_id);
	reply(s);
	return 0;
}

/* STATS: stats.c builds the replies from what the daemon holds now; the
 * session only sends them. */
static int do_stats(struct session *s, const struct kvt_header *h, union request *rq,
		    struct ns *unused, const struct turn *turn)
{
	struct stats_query q = {
		.what = rq->stats_what,
		.admin = session_is_admin(s),
		.asker = s,
		.version = s->version,
		.request_id = h->request_id,
	};
	struct stats_replies rep;
	int r = stats_build(s->m, &q, &rep);

	if (rep.failed)
		s->m->c.errors++;
	for (size_t i = 0; i < rep.n; i++)
		session_send(s, &rep.v[i], NULL, 0);
	stats_replies_free(&rep);
	/* Not even the error could be built: the client would wait for a
	 * last reply that never comes. */
	if (r < 0)
		session_kill(s, "out of memory");
	return 0;
}

/* ---- the table of requests ------------------------------------------ */

enum {
	OP_HANDSHAKE = 1 << 0, /* the first request, and only then (HELLO) */
	OP_POOL = 1 << 1,      /* not on an observer connection: -EPERM */
	OP_ADMIN = 1 << 2,     /* admins only (session_is_admin): -EPERM */
	OP_NAMESPACE = 1 << 3, /* keys of a namespace open in the tenant: -ENOENT */
};

struct op {
	const char *name; /* for logs */
	uint32_t flags;   /* OP_* */
	/* A longer payload is malformed.  Batches are bounded by their count
	 * instead: one over [limits] keys_per_request is refused with a reply. */
	uint32_t max_payload;
	const char *what; /* the request, in an -EPERM reason */
	decode_fn decode;
	handle_fn handle;
};

/* HELLO: versions, features, then the name and the bus id as strings. */
#define HELLO_MAX_PAYLOAD (4 + 4 + 8 + 2 + KVT_MAX_NAME + 2 + KVT_MAX_BUS_ID)

#define OP(op_, ...) [KVT_OP_##op_] = {.name = #op_, __VA_ARGS__}
static const struct op ops[] = {
	OP(HELLO, .flags = OP_HANDSHAKE, .max_payload = HELLO_MAX_PAYLOAD,
	   .decode = dec_hello, .handle = do_hello),
	OP(NS_OPEN, .flags = OP_POOL, .max_payload = 4 + KVT_MAX_IDENTITY,
	   .what = "open namespaces", .decode = dec_ns_open, .handle = do_ns_open),
	OP(LOOKUP, .flags = OP_NAMESPACE, .max_payload = KVT_MAX_PAYLOAD,
	   .decode = dec_keys, .handle = do_lookup),
	OP(RESERVE, .flags = OP_NAMESPACE, .max_payload = KVT_MAX_PAYLOAD,
	   .decode = dec_keys, .handle = do_slots),
	OP(COMMIT, .max_payload = KVT_MAX_PAYLOAD, .decode = dec_handles, .handle = do_handles),
	OP(ABORT, .max_payload = KVT_MAX_PAYLOAD, .decode = dec_handles, .handle = do_handles),
	OP(ACQUIRE, .flags = OP_NAMESPACE, .max_payload = KVT_MAX_PAYLOAD,
	   .decode = dec_keys, .handle = do_slots),
	OP(RELEASE, .max_payload = KVT_MAX_PAYLOAD, .decode = dec_handles, .handle = do_handles),
	OP(TOUCH, .flags = OP_NAMESPACE, .max_payload = KVT_MAX_PAYLOAD,
	   .decode = dec_keys, .handle = do_keys_status),
	OP(DELETE, .flags = OP_NAMESPACE, .max_payload = KVT_MAX_PAYLOAD,
	   .decode = dec_keys, .handle = do_delete),
	OP(STATS, .max_payload = 4, .decode = dec_stats, .handle = do_stats),
	OP(PING, .max_payload = 0, .decode = dec_empty, .handle = do_ping),
	OP(ADMIN_EVICT, .flags = OP_ADMIN, .max_payload = 12, .what = "evicting a namespace",
	   .decode = dec_evict, .handle = do_evict),
	OP(PREFETCH, .flags = OP_NAMESPACE, .max_payload = KVT_MAX_PAYLOAD,
	   .decode = dec_keys, .handle = do_keys_status),
	OP(HINT, .flags = OP_NAMESPACE, .max_payload = KVT_MAX_PAYLOAD,
	   .decode = dec_keys, .handle = do_hint),
};
#undef OP

static const struct op *op_find(uint16_t opcode)
{
	return opcode < ARRAY_SIZE(ops) && ops[opcode].handle ? &ops[opcode] : NULL;
}

/* Notifications are not requests: their names are the wire's. */
static const char *op_name(uint16_t opcode)
{
	const struct op *op = op_find(opcode);
	return op ? op->name : kvt_opcode_name(opcode);
}

/* What the table says a request needs, once it has decoded: 0 to handle
 * it, 1 when it was refused with a reply.  *ret_ns for OP_NAMESPACE. */
static int check_needs(struct session *s, const struct op *op, const struct kvt_header *h,
		       const union request *req, struct ns **ret_ns)
{
	*ret_ns = NULL;
	if ((op->flags & OP_POOL) && !s->pool) {
		reply_error(s, h, -EPERM, "an observer connection cannot %s; connect without KVT_CONNECT_OBSERVER",
			    op->what);
		return 1;
	}
	if ((op->flags & OP_ADMIN) && !session_is_admin(s)) {
		if (s->via_tenant[0])
			reply_error(s, h, -EPERM,
				    "this connection came through tenant %s's socket, which never carries admin rights; use the daemon's main socket",
				    s->via_tenant);
		else
			reply_error(s, h, -EPERM,
				    "%s needs an admin: root, kvtierd's own uid or a member of [daemon] admin_groups",
				    op->what);
		return 1;
	}
	if (op->flags & OP_NAMESPACE) {
		*ret_ns = s->tenant ? store_ns_get(s->tenant, req->keys.ns_id) : NULL;
		if (!*ret_ns) {
			reply_error(s, h, -ENOENT, "namespace %u is not open in this tenant",
				    req->keys.ns_id);
			return 1;
		}
	}
	return 0;
}

static int dispatch(struct session *s, const struct kvt_header *h, struct kvt_cursor *c,
		    const struct turn *turn)
{
	const struct op *op = op_find(h->opcode);
	union request req;
	struct ns *ns;
	int r;

	/* Clients send requests only: no flags, no descriptors. */
	if (h->flags != 0 || h->n_fds != 0)
		return -EBADMSG;
	/* A request under way was counted at its first part, one that
	 * waited for memory when it first came. */
	if (!s->work && !s->retried) {
		s->requests++;
		s->m->c.requests++;
	}
	if (!s->hello) {
		if (!op || !(op->flags & OP_HANDSHAKE))
			return -EBADMSG;
	} else {
		if (h->version != s->version)
			return -EBADMSG;
		if (!op) {
			reply_error(s, h, -EOPNOTSUPP, "unknown opcode %u in protocol version %u",
				    h->opcode, s->version);
			return 0;
		}
		if (op->flags & OP_HANDSHAKE)
			return -EBADMSG; /* a second HELLO */
	}
	if (h->length > op->max_payload)
		return -EBADMSG;
	r = op->decode(s, h, c, &req);
	if (r != 0)
		return r < 0 ? r : 0;
	if (check_needs(s, op, h, &req, &ns))
		return 0;
	return op->handle(s, h, &req, ns, turn);
}

/* ---- input -------------------------------------------------------- */

static void wake(struct manager *m, enum session_wait what)
{
	struct session *s;

	LIST_FOREACH(s, &m->sessions, link) {
		if (s->waiting != what)
			continue;
		s->waiting = SESSION_RUNS;
		turns_request(&m->turns, s);
	}
}

void requests_memory_ready(struct manager *m)
{
	wake(m, SESSION_WAITS_MEMORY);
}

void requests_erasures_ended(struct manager *m)
{
	/* Each erasure ends here, thousands a second when a region is taken
	 * back: the sessions are walked only when one waits. */
	if (m->erasure_waiters == 0)
		return;
	m->erasure_waiters = 0;
	wake(m, SESSION_WAITS_ERASURES);
}

bool requests_process(struct session *s, const struct turn *turn)
{
	struct kvt_header h;
	struct kvt_cursor c;
	int r;

	while (!s->dead && !s->paused && !s->waiting &&
	       (r = kvt_conn_next(&s->conn, &h, &c)) != 0) {
		if (r < 0) {
			s->m->c.malformed++;
			session_kill(s, r == -EPROTONOSUPPORT
						? "message in an unsupported protocol version"
						: "malformed message header");
			return false;
		}
		r = dispatch(s, &h, &c, turn);
		if (r == 1)
			return true; /* under way: the message stays */
		s->retried = r == WAIT_MEMORY || r == WAIT_ERASURES;
		if (r == WAIT_MEMORY) {
			s->waiting = SESSION_WAITS_MEMORY; /* the message stays */
			s->m->c.memory_waits++;
			return false;
		}
		if (r == WAIT_ERASURES) {
			s->waiting = SESSION_WAITS_ERASURES; /* as it */
			s->m->erasure_waiters++;
			s->m->c.erasure_waits++;
			return false;
		}
		work_end(s); /* done, or refused on a later part */
		kvt_conn_consume(&s->conn);
		if (r < 0) {
			char why[96];
			s->m->c.malformed++;
			snprintf(why, sizeof(why), "malformed %s message", op_name(h.opcode));
			session_kill(s, why);
			return false;
		}
		if (turn_over(turn))
			break;
	}
	/* Work is left when another whole message waits. */
	return !s->dead && !s->paused && !s->waiting && kvt_conn_next(&s->conn, &h, &c) != 0;
}
