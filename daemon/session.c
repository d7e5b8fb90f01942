/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fault.h"
#include "log.h"
#include "manager.h"
#include "process.h"
#include "session.h"
#include "stats.h"
#include "store.h"

#define IN_CHUNK (64 * 1024)
#define READS_PER_WAKEUP 16

static int session_io(sd_event_source *src, int fd, uint32_t revents, void *userdata);

static int on_hello_timeout(sd_event_source *src, uint64_t usec, void *userdata)
{
	struct session *s = userdata;

	if (!s->hello && !s->dead) {
		s->m->c.handshake_timeouts++;
		session_kill(s, "no HELLO within [daemon] handshake_timeout_ms");
	}
	return 0;
}

int session_new(struct manager *m, int fd, struct session **ret)
{
	struct session *s = calloc(1, sizeof(*s));
	struct ucred cred;
	socklen_t len = sizeof(cred);
	int r;

	if (!s)
		return -ENOMEM;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
		r = -errno;
		free(s);
		return r;
	}
	s->fd = fd;
	s->uid = cred.uid;
	s->gid = cred.gid;
	s->pid = cred.pid;
	s->m = m;
	s->id = ++m->next_session_id;
	s->version = KVT_PROTO_VERSION_MIN;
	s->numa_node = -1;
	sd_event_now(m->event, CLOCK_MONOTONIC, &s->connected_usec);
	r = sd_event_add_io(m->event, &s->io, fd, EPOLLIN, session_io, s);
	if (r < 0) {
		free(s);
		return r;
	}
	/* A connection that never says HELLO holds a slot of the connection
	 * limits for nothing: it gets a deadline. */
	r = sd_event_add_time_relative(m->event, &s->hello_timer, CLOCK_MONOTONIC,
				       (uint64_t)m->config->handshake_timeout_ms * 1000, 0,
				       on_hello_timeout, s);
	if (r < 0) {
		sd_event_source_disable_unref(s->io);
		free(s);
		return r;
	}
	s->next = m->sessions;
	if (m->sessions)
		m->sessions->prev = s;
	m->sessions = s;
	m->n_sessions++;
	*ret = s;
	return 0;
}

static void out_free_all(struct session *s)
{
	while (s->out_head) {
		struct outmsg *o = s->out_head;
		s->out_head = o->next;
		free(o);
	}
	s->out_tail = NULL;
	s->out_bytes = 0;
}

void session_free(struct session *s)
{
	if (!s)
		return;
	struct manager *m = s->m;
	if (s->prev)
		s->prev->next = s->next;
	else
		m->sessions = s->next;
	if (s->next)
		s->next->prev = s->prev;
	m->n_sessions--;
	sd_event_source_disable_unref(s->io);
	sd_event_source_disable_unref(s->hello_timer);
	out_free_all(s);
	if (s->tenant)
		s->tenant->n_sessions--;
	if (s->process)
		process_session_closed(s->process);
	close(s->fd);
	free(s->in);
	free(s);
}

void session_kill(struct session *s, const char *why)
{
	if (s->dead)
		return;
	s->dead = true;
	sd_event_source_set_enabled(s->io, SD_EVENT_OFF);
	if (why)
		log_info("Client %u (pid %d, uid %u, '%s'): closing connection: %s",
			 s->id, (int)s->pid, (unsigned)s->uid, s->name, why);
	manager_schedule_reap(s->m);
}

static void update_events(struct session *s)
{
	uint32_t ev = 0;
	if (s->dead)
		return;
	if (!s->paused)
		ev |= EPOLLIN;
	if (s->out_head)
		ev |= EPOLLOUT;
	sd_event_source_set_io_events(s->io, ev);
	sd_event_source_set_enabled(s->io, ev ? SD_EVENT_ON : SD_EVENT_OFF);
}

/* Write queued messages until the socket is full; -errno on a dead peer. */
static int flush(struct session *s)
{
	while (s->out_head) {
		struct outmsg *o = s->out_head;
		ssize_t n = kvt_sendmsg(s->fd, o->data + o->sent, o->len - o->sent,
					o->sent ? NULL : o->fds,
					o->sent ? 0 : o->n_fds);
		if (n == -EAGAIN)
			break;
		if (n < 0)
			return (int)n;
		o->n_fds = 0; /* they travelled with the first byte */
		o->sent += (size_t)n;
		s->out_bytes -= (uint64_t)n;
		if (o->sent < o->len)
			break;
		s->out_head = o->next;
		if (!s->out_head)
			s->out_tail = NULL;
		free(o);
	}
	return 0;
}

int session_send(struct session *s, const struct kvt_buf *msg, const int *fds,
		 unsigned n_fds)
{
	uint64_t limit = s->m->config->max_output_bytes;

	if (s->dead)
		return -ECONNRESET;
	if (msg->error)
		return msg->error;
	/* A client that does not read its replies must not grow our memory:
	 * past twice the limit it is disconnected.  The config keeps the limit
	 * at most 1G; the comparison does not rely on it to stay unwrapped. */
	uint64_t cap = limit > UINT64_MAX / 2 ? UINT64_MAX : 2 * limit;
	if (s->out_bytes > cap || msg->len > cap - s->out_bytes) {
		session_kill(s, "client does not read its replies ([limits] output_bytes)");
		return -ENOBUFS;
	}

	/* As if the socket took none of it and the queue's allocation below
	 * failed (fault.h). */
	if (fault_hit(FAULT_SESSION_OUT)) {
		session_kill(s, "out of memory");
		return -ENOMEM;
	}

	/* Nothing queued: straight to the socket, and only what it does not
	 * take is copied into the queue. */
	size_t done = 0;
	if (!s->out_head) {
		ssize_t n = kvt_sendmsg(s->fd, msg->data, msg->len, fds, n_fds);
		if (n < 0 && n != -EAGAIN) {
			session_kill(s, NULL);
			return (int)n;
		}
		if (n > 0) {
			done = (size_t)n;
			n_fds = 0; /* they travelled with the first byte */
		}
		if (done == msg->len)
			return 0;
	}

	size_t left = msg->len - done;
	struct outmsg *o = malloc(sizeof(*o) + left);
	if (!o) {
		session_kill(s, "out of memory");
		return -ENOMEM;
	}
	o->next = NULL;
	o->len = left;
	o->sent = 0;
	o->n_fds = 0;
	memcpy(o->data, msg->data + done, left);
	/* Borrowed, not duplicated: a connection that does not read would
	 * otherwise hold a descriptor per queued notice (one per extent the
	 * tenant gains), and a few such connections exhaust the daemon's. */
	for (unsigned i = 0; i < n_fds; i++)
		o->fds[o->n_fds++] = fds[i];
	if (s->out_tail)
		s->out_tail->next = o;
	else
		s->out_head = o;
	s->out_tail = o;
	s->out_bytes += left;

	int r = flush(s);
	if (r < 0) {
		session_kill(s, NULL);
		return r;
	}
	if (s->out_bytes > limit)
		s->paused = true;
	update_events(s);
	return 0;
}

void session_announce_extent(struct session *s, const struct extent *e)
{
	struct kvt_buf b;
	struct kvt_extent_note n = {
		.extent_id = e->id,
		.flags = e->flags,
		.size = e->size,
		.slot_bytes = e->slot_bytes,
		.numa_node = e->node,
	};

	kvt_buf_init(&b);
	kvt_enc_extent_note(&b, s->version, &n);
	if (kvt_msg_finish(&b, 1) == 0)
		session_send(s, &b, &e->fd, 1);
	kvt_buf_free(&b);
}

bool session_is_admin(const struct session *s)
{
	return s->admin;
}

/* The client was told a block is on NVMe: for a while, tell it when staged
 * blocks land (a client that stops asking stops getting them, so an idle
 * connection's queue does not grow). */
#define READY_INTEREST_USEC (30 * 1000000ULL)

static void session_want_ready(struct session *s)
{
	uint64_t now = 0;
	sd_event_now(s->m->event, CLOCK_MONOTONIC, &now);
	s->ready_until = now + READY_INTEREST_USEC;
}

bool session_wants_ready(const struct session *s)
{
	uint64_t now = 0;
	if (!(s->features & KVT_FEATURE_READY) || !s->ready_until)
		return false;
	sd_event_now(s->m->event, CLOCK_MONOTONIC, &now);
	return now < s->ready_until;
}

/* ---- replies ------------------------------------------------------ */

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
	log_debug("Client %u: %s refused: %s", s->id, kvt_opcode_name(h->opcode), reason);
	kvt_enc_error(&s->m->reply, s->version, h->opcode, h->request_id, error, reason);
	reply(s);
}

/* ---- handlers ----------------------------------------------------- */

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

static int do_hello(struct session *s, const struct kvt_header *h,
		    struct kvt_cursor *c)
{
	struct manager *m = s->m;
	struct kvt_hello_req req;
	int r;

	if (s->hello)
		return -EBADMSG; /* a second HELLO */
	r = kvt_dec_hello_req(c, &req);
	if (r < 0)
		return r;
	memcpy(s->name, req.name, sizeof(s->name));
	memcpy(s->pci_bus_id, req.pci_bus_id, sizeof(s->pci_bus_id));
	s->numa_node = -1;
	if (s->pci_bus_id[0] && m->config->numa != NUMA_OFF) {
		s->numa_node = numa_node_of_device(&m->pool.topo, s->pci_bus_id);
		if (s->numa_node < 0)
			log_info("Client %u: no NUMA node known for GPU %s; its slots come from any node",
				 s->id, s->pci_bus_id);
	}

	uint32_t lo = req.min_version > KVT_PROTO_VERSION_MIN ? req.min_version
							      : KVT_PROTO_VERSION_MIN;
	uint32_t hi = req.max_version < KVT_PROTO_VERSION_MAX ? req.max_version
							      : KVT_PROTO_VERSION_MAX;
	if (lo > hi) {
		reply_error(s, h, -EPROTONOSUPPORT,
			    "client speaks protocol versions %u..%u, this daemon %u..%u: upgrade the older side",
			    req.min_version, req.max_version, KVT_PROTO_VERSION_MIN,
			    KVT_PROTO_VERSION_MAX);
		return 0;
	}

	/* The tenant is created when a namespace is opened, not here: a
	 * client that only looks (kvtierctl) leaves nothing behind. */
	gid_t small[64], *groups = small;
	socklen_t glen = sizeof(small);
	struct peer peer = {
		.uid = s->uid,
		.gid = s->gid,
		.via_tenant = s->via_tenant[0] ? s->via_tenant : NULL,
	};
	r = getsockopt(s->fd, SOL_SOCKET, SO_PEERGROUPS, groups, &glen);
	if (r < 0 && errno == ERANGE && glen <= 65536 * sizeof(gid_t)) {
		/* More groups than fit: glen says how many. */
		groups = malloc(glen);
		if (groups)
			r = getsockopt(s->fd, SOL_SOCKET, SO_PEERGROUPS, groups, &glen);
	}
	if (r == 0 && groups) {
		peer.groups = groups;
		peer.n_groups = glen / sizeof(gid_t);
	} else {
		log_warning("Client %u: cannot read its supplementary groups; matching uid and primary gid only",
			    s->id);
	}
	r = tenancy_resolve(m->config, &peer, &s->choice);
	s->admin = tenancy_peer_is_admin(m->config, &peer);
	if (groups != small)
		free(groups);
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
	s->features = req.features & KVT_FEATURES_ALL;
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

static int do_ns_open(struct session *s, const struct kvt_header *h,
		      struct kvt_cursor *c)
{
	struct kvt_ns_open_req req;
	char reason[KVT_MAX_REASON];
	struct ns *ns;
	int r;

	r = kvt_dec_ns_open_req(c, &req);
	if (r < 0)
		return r;
	if (!s->pool) {
		reply_error(s, h, -EPERM,
			    "an observer connection cannot open namespaces; connect without KVT_CONNECT_OBSERVER");
		return 0;
	}
	if (!s->tenant) {
		struct tenant *t;
		r = store_tenant_get(&s->m->store, &s->choice, &t);
		if (r < 0) {
			reply_error(s, h, r, "out of memory creating tenant %s", s->choice.name);
			return 0;
		}
		/* Every connection of this tenant joins: handles cross them. */
		for (struct session *o = s->m->sessions; o; o = o->next)
			if (o->hello && !o->tenant && !o->dead &&
			    !strcmp(o->choice.name, t->name))
				session_join_tenant(o, t);
	}
	reason[0] = 0;
	r = store_ns_open(&s->m->store, s->tenant, req.identity, req.identity_len,
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

static int do_keys(struct session *s, const struct kvt_header *h,
		   struct kvt_cursor *c)
{
	struct manager *m = s->m;
	struct kvt_keys_req req;
	int r;

	r = kvt_dec_keys_req(c, m->config->max_keys, &req);
	if (r == -E2BIG) {
		reply_error(s, h, r,
			    "%u keys in one request; the limit is %u ([limits] keys_per_request): split the batch",
			    req.n, m->config->max_keys);
		return 0;
	}
	if (r < 0)
		return r;
	struct ns *ns = s->tenant ? store_ns_get(s->tenant, req.ns_id) : NULL;
	if (!ns) {
		reply_error(s, h, -ENOENT, "namespace %u is not open in this tenant", req.ns_id);
		return 0;
	}
	switch (h->opcode) {
	case KVT_OP_LOOKUP: {
		struct kvt_lookup_rep rep = {.n = req.n, .states = m->states};
		if (req.arg & ~(uint32_t)KVT_LOOKUP_TOUCH)
			return -EBADMSG;
		rep.leading = store_lookup(&m->store, ns, req.keys, req.n, req.arg, m->states);
		for (uint32_t i = 0; i < req.n; i++)
			if (m->states[i] == KVT_STATE_DISK) {
				session_want_ready(s);
				break;
			}
		kvt_enc_lookup_rep(&m->reply, s->version, h->request_id, &rep);
		break;
	}
	case KVT_OP_RESERVE:
	case KVT_OP_ACQUIRE:
		if (req.arg >= ns->geo.shards) {
			reply_error(s, h, -EINVAL,
				    "shard %u out of range: namespace %u has %u shard(s)",
				    req.arg, ns->id, ns->geo.shards);
			return 0;
		}
		if (h->opcode == KVT_OP_RESERVE)
			store_reserve(&m->store, ns, req.arg, req.keys, req.n,
				      s->process, s->numa_node, m->slots);
		else {
			store_acquire(&m->store, ns, req.arg, req.keys, req.n,
				      s->process, m->slots);
			for (uint32_t i = 0; i < req.n; i++)
				if (m->slots[i].status == -EAGAIN) {
					session_want_ready(s);
					break;
				}
		}
		if (s->dead)
			return 0;
		kvt_enc_slots_rep(&m->reply, s->version, h->opcode, h->request_id,
				  m->slots, req.n);
		break;
	case KVT_OP_TOUCH:
	case KVT_OP_DELETE:
	case KVT_OP_PREFETCH:
		if (req.arg != 0)
			return -EBADMSG;
		if (h->opcode == KVT_OP_TOUCH)
			store_touch(&m->store, ns, req.keys, req.n, m->status);
		else if (h->opcode == KVT_OP_DELETE)
			store_delete(&m->store, ns, req.keys, req.n, m->status);
		else {
			store_prefetch(&m->store, ns, req.keys, req.n, m->status);
			session_want_ready(s);
		}
		kvt_enc_status_rep(&m->reply, s->version, h->opcode, h->request_id,
				   m->status, req.n);
		break;
	}
	reply(s);
	return 0;
}

static int do_handles(struct session *s, const struct kvt_header *h,
		      struct kvt_cursor *c)
{
	struct manager *m = s->m;
	uint32_t n;
	int r;

	r = kvt_dec_handles_req(c, m->config->max_keys, m->handles, &n);
	if (r == -E2BIG) {
		reply_error(s, h, r,
			    "too many handles in one request; the limit is %u ([limits] keys_per_request)",
			    m->config->max_keys);
		return 0;
	}
	if (r < 0)
		return r;
	if (!s->tenant) {
		for (uint32_t i = 0; i < n; i++)
			m->status[i] = -ENOENT;
	} else if (h->opcode == KVT_OP_COMMIT)
		store_commit(&m->store, s->tenant, m->handles, n, m->status);
	else if (h->opcode == KVT_OP_ABORT)
		store_abort(&m->store, s->tenant, m->handles, n, m->status);
	else
		store_release(&m->store, s->tenant, m->handles, n, m->status);
	kvt_enc_status_rep(&m->reply, s->version, h->opcode, h->request_id, m->status, n);
	reply(s);
	return 0;
}

static int do_stats(struct session *s, const struct kvt_header *h,
		    struct kvt_cursor *c)
{
	uint32_t what;
	int r = kvt_dec_stats_req(c, &what);
	if (r < 0)
		return r;
	stats_reply(s, h->request_id, what);
	return 0;
}

static int do_evict(struct session *s, const struct kvt_header *h,
		    struct kvt_cursor *c)
{
	struct manager *m = s->m;
	struct kvt_evict_req req;
	int r = kvt_dec_evict_req(c, &req);
	if (r < 0)
		return r;
	if (!session_is_admin(s)) {
		if (s->via_tenant[0])
			reply_error(s, h, -EPERM,
				    "this connection came through tenant %s's socket, which never carries admin rights; use the daemon's main socket",
				    s->via_tenant);
		else
			reply_error(s, h, -EPERM,
				    "evicting a namespace needs an admin: root, kvtierd's own uid or a member of [daemon] admin_groups");
		return 0;
	}
	struct tenant *t = store_tenant_by_id(&m->store, req.tenant_id);
	struct ns *ns = t ? store_ns_get(t, req.ns_id) : NULL;
	if (!ns) {
		reply_error(s, h, -ENOENT, "no namespace %u in tenant %u", req.ns_id, req.tenant_id);
		return 0;
	}
	uint64_t n = store_ns_evict(&m->store, ns, req.flags & KVT_EVICT_DROP);
	log_info("Client %u (uid %u) %s namespace %s/%u: %llu block(s)", s->id, (unsigned)s->uid,
		 (req.flags & KVT_EVICT_DROP) ? "dropped" : "evicted", t->name, ns->id,
		 (unsigned long long)n);
	kvt_enc_count_rep(&m->reply, s->version, KVT_OP_ADMIN_EVICT, h->request_id, n);
	reply(s);
	return 0;
}

static int do_ping(struct session *s, const struct kvt_header *h,
		   struct kvt_cursor *c)
{
	if (kvt_cursor_end(c) < 0)
		return -EBADMSG;
	kvt_msg_begin(&s->m->reply, s->version, KVT_OP_PING, KVT_FLAG_REPLY, h->request_id);
	reply(s);
	return 0;
}

static int dispatch(struct session *s, const struct kvt_header *h,
		    const uint8_t *payload)
{
	struct kvt_cursor c = {payload, h->length};

	/* Clients send requests only: no flags, no descriptors. */
	if (h->flags != 0 || h->n_fds != 0)
		return -EBADMSG;
	s->requests++;
	s->m->c.requests++;
	if (!s->hello) {
		if (h->opcode != KVT_OP_HELLO)
			return -EBADMSG;
		return do_hello(s, h, &c);
	}
	if (h->version != s->version)
		return -EBADMSG;

	switch (h->opcode) {
	case KVT_OP_HELLO:
		return -EBADMSG;
	case KVT_OP_NS_OPEN:
		return do_ns_open(s, h, &c);
	case KVT_OP_LOOKUP:
	case KVT_OP_RESERVE:
	case KVT_OP_ACQUIRE:
	case KVT_OP_TOUCH:
	case KVT_OP_DELETE:
	case KVT_OP_PREFETCH:
		return do_keys(s, h, &c);
	case KVT_OP_COMMIT:
	case KVT_OP_ABORT:
	case KVT_OP_RELEASE:
		return do_handles(s, h, &c);
	case KVT_OP_STATS:
		return do_stats(s, h, &c);
	case KVT_OP_PING:
		return do_ping(s, h, &c);
	case KVT_OP_ADMIN_EVICT:
		return do_evict(s, h, &c);
	default:
		reply_error(s, h, -EOPNOTSUPP,
			    "unknown opcode %u in protocol version %u", h->opcode,
			    s->version);
		return 0;
	}
}

/* ---- input -------------------------------------------------------- */

static void process_input(struct session *s)
{
	while (!s->dead && !s->paused && s->in_len - s->in_off >= KVT_HEADER_SIZE) {
		struct kvt_header h;
		int r = kvt_header_parse(s->in + s->in_off, &h);
		if (r < 0) {
			s->m->c.malformed++;
			session_kill(s, r == -EPROTONOSUPPORT
						? "message in an unsupported protocol version"
						: "malformed message header");
			return;
		}
		size_t total = KVT_HEADER_SIZE + (size_t)h.length;
		if (s->in_len - s->in_off < total)
			break;
		r = dispatch(s, &h, s->in + s->in_off + KVT_HEADER_SIZE);
		s->in_off += total;
		if (r < 0) {
			char why[96];
			s->m->c.malformed++;
			snprintf(why, sizeof(why), "malformed %s message",
				 kvt_opcode_name(h.opcode));
			session_kill(s, why);
			return;
		}
	}
	/* Keep the unread tail at the front of the buffer. */
	if (s->in_off) {
		memmove(s->in, s->in + s->in_off, s->in_len - s->in_off);
		s->in_len -= s->in_off;
		s->in_off = 0;
	}
}

static int ensure_room(struct session *s)
{
	size_t want = IN_CHUNK;

	if (s->in_len >= KVT_HEADER_SIZE) {
		struct kvt_header h;
		if (kvt_header_parse(s->in, &h) == 0 &&
		    KVT_HEADER_SIZE + (size_t)h.length > s->in_len)
			want = KVT_HEADER_SIZE + (size_t)h.length - s->in_len;
	}
	if (s->in_cap - s->in_len >= want && s->in_cap - s->in_len > 0)
		return 0;
	size_t cap = s->in_len + (want > IN_CHUNK ? want : IN_CHUNK);
	uint8_t *p = fault_hit(FAULT_SESSION_IN) ? NULL : realloc(s->in, cap);
	if (!p)
		return -ENOMEM;
	s->in = p;
	s->in_cap = cap;
	return 0;
}

static int session_io(sd_event_source *src, int fd, uint32_t revents, void *userdata)
{
	struct session *s = userdata;

	if (revents & EPOLLOUT) {
		if (flush(s) < 0) {
			session_kill(s, NULL);
			return 0;
		}
		if (s->paused && s->out_bytes <= s->m->config->max_output_bytes / 2) {
			s->paused = false;
			process_input(s);
		}
		update_events(s);
	}
	if (!(revents & (EPOLLIN | EPOLLHUP | EPOLLERR)) || s->paused || s->dead)
		return 0;

	for (int i = 0; i < READS_PER_WAKEUP && !s->dead && !s->paused; i++) {
		int fds[1];
		unsigned n_fds = 0;
		if (ensure_room(s) < 0) {
			session_kill(s, "out of memory");
			return 0;
		}
		ssize_t n = kvt_recvmsg(fd, s->in + s->in_len, s->in_cap - s->in_len,
					fds, &n_fds, 0);
		if (n == -EAGAIN)
			break;
		if (n == -EPROTO) {
			s->m->c.malformed++;
			session_kill(s, "client sent file descriptors, which this protocol never accepts");
			return 0;
		}
		if (n <= 0) {
			/* A client that exits with replies unread resets the
			 * connection: an ordinary close. */
			session_kill(s, n == 0 || n == -ECONNRESET ? NULL : "read error");
			return 0;
		}
		s->in_len += (size_t)n;
		process_input(s);
	}
	return 0;
}
