/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The connection to the daemon as the library uses it: connecting and the
 * handshake, reconnecting with backoff (and what a reconnect restores:
 * namespaces, deferred give-backs), requests and their replies, and the
 * notifications that arrive in between.  Framing and the descriptor queue
 * are the connection's (proto/conn.h).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "client-internal.h"
#include "macro.h"

#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 5000

#define DEFAULT_TIMEOUT_MS 30000

uint64_t client_next_rid(kvt_client *c)
{
	return ++c->next_rid;
}

static void backoff(kvt_client *c)
{
	c->backoff_ms = c->backoff_ms ? c->backoff_ms * 2 : BACKOFF_MIN_MS;
	if (c->backoff_ms > BACKOFF_MAX_MS)
		c->backoff_ms = BACKOFF_MAX_MS;
	c->retry_at_ns = kvt_now_ns() + (uint64_t)c->backoff_ms * 1000000ull;
}

static void disconnect(kvt_client *c, const char *why)
{
	if (c->conn.fd >= 0)
		client_log(c, KVT_LOG_WARNING, "lost kvtierd at %s: %s; will reconnect",
			   c->path, why);
	/* The socket, what arrived on it and any descriptors with it. */
	kvt_conn_close(&c->conn);
	c->n_async = 0;
	backoff(c);
}

static int timeout_ms(void)
{
	static int ms = -1;
	if (ms < 0) {
		const char *e = getenv("KVTIER_TIMEOUT_MS");
		long v = e ? strtol(e, NULL, 10) : 0;
		ms = v > 0 && v < 3600000 ? (int)v : DEFAULT_TIMEOUT_MS;
	}
	return ms;
}

/* Wait for the socket; a daemon that stays silent past the timeout is
 * treated as gone rather than hanging the engine. */
static int wait_fd(int fd, short events)
{
	struct pollfd pfd = {fd, events, 0};
	int r = poll(&pfd, 1, timeout_ms());
	if (r < 0)
		return errno == EINTR ? 0 : -errno;
	return r == 0 ? -ETIMEDOUT : 0;
}

/* The request in c->out, all of it, before the caller reads a reply. */
static int send_all(kvt_client *c)
{
	int r = kvt_conn_send(&c->conn, &c->out, NULL, 0);

	while (r == 0 && kvt_conn_out_pending(&c->conn)) {
		r = wait_fd(c->conn.fd, POLLOUT);
		if (r == 0)
			r = kvt_conn_flush(&c->conn);
	}
	return r;
}

/* Read until one whole message is buffered; descriptors queue in c->conn. */
static int read_message(kvt_client *c, struct kvt_header *ret, struct kvt_cursor *ret_payload)
{
	for (;;) {
		int r = kvt_conn_next(&c->conn, ret, ret_payload);
		if (r < 0)
			return r;
		if (r > 0)
			return 0;
		ssize_t n = kvt_conn_recv(&c->conn, true);
		if (n == -EAGAIN)
			return -ETIMEDOUT; /* SO_RCVTIMEO expired */
		if (n == 0)
			return -ECONNRESET;
		if (n < 0)
			return (int)n;
	}
}

static int handle_notification(kvt_client *c, const struct kvt_header *h,
			       struct kvt_cursor *cur)
{
	int fds[KVT_MAX_FDS];
	int r = kvt_conn_take_fds(&c->conn, h->n_fds, fds);
	if (r < 0)
		return r;
	switch (h->opcode) {
	case KVT_OP_EXTENT_ADDED: {
		struct kvt_extent_note n;
		if (h->n_fds != 1) {
			r = -EBADMSG;
			break;
		}
		r = kvt_dec_extent_note(cur, &n);
		if (r < 0) {
			close(fds[0]);
			return r;
		}
		return pool_map_extent(c, &n, fds[0]);
	}
	case KVT_OP_BLOCK_READY: {
		uint32_t ns_id;
		const uint8_t *key;
		r = kvt_dec_block_ready(cur, &ns_id, &key);
		if (r == 0)
			c->ready_events++;
		break;
	}
	case KVT_OP_RUN_READY: {
		/* Every key of a remote run settled at once: one look-up
		 * finds them all, served or missed. */
		struct kvt_run_ready m;
		r = kvt_dec_run_ready(cur, &m);
		if (r == 0) {
			c->ready_events++;
			c->ready_runs++;
		}
		break;
	}
	case KVT_OP_SETTLED: {
		/* Every key a LOOKUP of ours answered DISK has settled. */
		struct kvt_settled m;
		r = kvt_dec_settled(cur, &m);
		if (r == 0)
			c->settled_events++;
		break;
	}
	case KVT_OP_EXTENT_RETIRED: {
		uint32_t id;
		r = kvt_dec_extent_retired(cur, &id);
		break;
	}
	default:
		/* A notification this version does not know: ignore it, so a
		 * newer daemon can add some without breaking us. */
		r = 0;
		break;
	}
	for (unsigned i = 0; i < h->n_fds; i++)
		close(fds[i]);
	return r;
}

/* A reply to a request sent with client_send_async: note errors, drop it. */
static bool skip_async(kvt_client *c, const struct kvt_header *h, struct kvt_cursor *cur)
{
	for (uint32_t i = 0; i < c->n_async; i++) {
		if (c->async_rids[i] != h->request_id)
			continue;
		if (!(h->flags & KVT_FLAG_MORE))
			c->async_rids[i] = c->async_rids[--c->n_async];
		if (h->flags & KVT_FLAG_ERROR) {
			struct kvt_error_rep e;
			if (kvt_dec_error(cur, &e) == 0)
				client_log(c, KVT_LOG_WARNING, "%s refused: %s",
					   kvt_opcode_name(h->opcode), e.reason);
		}
		return true;
	}
	return false;
}

/* A daemon that refuses a connection says why and closes it, possibly
 * before our request arrived: the reason, if it is there to read. */
static bool read_refusal(kvt_client *c, int *ret_refused)
{
	struct kvt_header h;
	struct kvt_cursor cur;
	struct kvt_error_rep e;

	if (read_message(c, &h, &cur) < 0 || !(h.flags & KVT_FLAG_ERROR) ||
	    kvt_dec_error(&cur, &e) < 0)
		return false;
	snprintf(c->error, sizeof(c->error), "%s", e.reason);
	*ret_refused = e.error;
	kvt_conn_consume(&c->conn);
	return true;
}

/* The send/receive half of a call on a live connection. */
static int exchange(kvt_client *c, uint64_t rid, uint16_t opcode, reply_fn fn,
		    void *userdata, int *ret_refused)
{
	int r = send_all(c);
	if (r < 0)
		return read_refusal(c, ret_refused) ? 0 : r;
	for (;;) {
		struct kvt_header h;
		struct kvt_cursor cur;
		r = read_message(c, &h, &cur);
		if (r < 0)
			return r;
		if (h.flags & KVT_FLAG_NOTIFY) {
			r = handle_notification(c, &h, &cur);
			kvt_conn_consume(&c->conn);
			if (r < 0)
				return r;
			continue;
		}
		if (h.n_fds)
			return -EBADMSG;
		if (h.request_id != rid && skip_async(c, &h, &cur)) {
			kvt_conn_consume(&c->conn);
			continue;
		}
		if (!(h.flags & KVT_FLAG_REPLY) ||
		    (h.request_id != rid && !(h.request_id == 0 && (h.flags & KVT_FLAG_ERROR))) ||
		    h.opcode != opcode)
			return -EBADMSG;
		if (h.flags & KVT_FLAG_ERROR) {
			struct kvt_error_rep e;
			r = kvt_dec_error(&cur, &e);
			kvt_conn_consume(&c->conn);
			if (r < 0)
				return r;
			snprintf(c->error, sizeof(c->error), "%s", e.reason);
			client_log(c, KVT_LOG_DEBUG, "%s refused: %s", kvt_opcode_name(opcode),
				   e.reason);
			/* A refusal is an answer, not a broken connection. */
			*ret_refused = e.error;
			return 0;
		}
		r = fn ? fn(c, &h, &cur, userdata) : kvt_cursor_end(&cur);
		kvt_conn_consume(&c->conn);
		if (r < 0)
			return r;
		if (!(h.flags & KVT_FLAG_MORE))
			return 0;
	}
}

int client_call(kvt_client *c, reply_fn fn, void *userdata)
{
	if (c->out.error)
		return c->out.error;
	if (c->conn.fd < 0)
		return -ENOTCONN;
	/* The request id and opcode sit in the header we just encoded. */
	struct kvt_header h;
	int r = kvt_header_parse(c->out.data, &h);
	if (r < 0)
		return r;
	c->error[0] = 0;
	int refused = 0;
	r = exchange(c, h.request_id, h.opcode, fn, userdata, &refused);
	if (r == 0 && refused)
		return refused;
	if (r < 0) {
		disconnect(c, r == -ECONNRESET ? "connection closed"
			      : r == -EBADMSG ? "protocol error"
					      : strerror(-r));
		return -ENOTCONN;
	}
	return 0;
}

int client_wait_event(kvt_client *c, int timeout_ms)
{
	if (c->conn.fd < 0)
		return -ENOTCONN;
	if (kvt_conn_buffered(&c->conn) < KVT_HEADER_SIZE) {
		struct pollfd pfd = {c->conn.fd, POLLIN, 0};
		int r = poll(&pfd, 1, timeout_ms);
		if (r < 0)
			return errno == EINTR ? 0 : -errno;
		if (r == 0)
			return -ETIMEDOUT;
	}
	struct kvt_header h;
	struct kvt_cursor cur;
	int r = read_message(c, &h, &cur);
	if (r == 0) {
		if (h.flags & KVT_FLAG_NOTIFY)
			r = handle_notification(c, &h, &cur);
		else if (!skip_async(c, &h, &cur))
			r = -EBADMSG; /* a reply nobody asked for */
		kvt_conn_consume(&c->conn);
	}
	if (r < 0 && r != -ETIMEDOUT) {
		disconnect(c, r == -ECONNRESET ? "connection closed" : strerror(-r));
		return -ENOTCONN;
	}
	return r;
}

/* The answer to a request sent as asynchronous but waited for. */
static int ignore_reply(kvt_client *c, const struct kvt_header *h,
			struct kvt_cursor *cur, void *userdata)
{
	return 0;
}

int client_send_async(kvt_client *c)
{
	struct kvt_header h;
	int r;

	if (c->out.error)
		return c->out.error;
	if (c->conn.fd < 0)
		return -ENOTCONN;
	if (c->n_async >= sizeof(c->async_rids) / sizeof(c->async_rids[0]))
		return client_call(c, ignore_reply, NULL);
	r = kvt_header_parse(c->out.data, &h);
	if (r < 0)
		return r;
	r = send_all(c);
	if (r < 0) {
		disconnect(c, strerror(-r));
		return -ENOTCONN;
	}
	c->async_rids[c->n_async++] = h.request_id;
	return 0;
}

/* ---- what a reconnect restores ------------------------------------- */

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

void client_give_back_async(kvt_client *c, uint16_t op, const uint64_t *handles, size_t n)
{
	uint32_t per = c->max_keys ? c->max_keys : 1;

	for (size_t off = 0; off < n && c->conn.fd >= 0; off += per) {
		uint32_t k = (uint32_t)(n - off < per ? n - off : per);
		for (uint32_t i = 0; i < k; i++)
			c->hargs[i] = (struct kvt_handle_arg){handles[off + i], 0};
		kvt_enc_handles_req(&c->out, c->version, op, client_next_rid(c), c->hargs, k);
		if (kvt_msg_finish(&c->out, 0) == 0)
			client_send_async(c);
	}
}

/* Send the give-backs deferred while the daemon was away (it is back, and
 * the same one). */
static void flush_deferred(kvt_client *c)
{
	static const uint16_t ops[] = {KVT_OP_RELEASE, KVT_OP_ABORT};
	uint64_t *h = c->n_deferred ? malloc(sizeof(*h) * c->n_deferred) : NULL;

	if (!h) {
		c->n_deferred = 0;
		return;
	}
	for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++) {
		size_t k = 0;
		for (uint32_t i = 0; i < c->n_deferred; i++)
			if (c->deferred[i].op == ops[o])
				h[k++] = c->deferred[i].handle;
		client_give_back_async(c, ops[o], h, k);
	}
	c->n_deferred = 0;
	free(h);
}

/* ---- connecting --------------------------------------------------- */

static int hello_reply(kvt_client *c, const struct kvt_header *h,
		       struct kvt_cursor *cur, void *userdata)
{
	struct kvt_hello_rep rep;
	int r = kvt_dec_hello_rep(cur, &rep);
	if (r < 0)
		return r;
	if (rep.version < KVT_PROTO_VERSION_MIN || rep.version > KVT_PROTO_VERSION_MAX)
		return -EBADMSG;
	c->version = (uint16_t)rep.version;
	c->features = rep.features;
	c->tenant_id = rep.tenant_id;
	c->session_id = rep.session_id;
	c->max_keys = rep.max_keys;
	c->max_handles = rep.max_handles;
	c->quota = rep.quota_bytes;
	c->numa_node = rep.numa_node;
	return 0;
}

static int hello(kvt_client *c)
{
	struct kvt_hello_req req = {
		.min_version = KVT_PROTO_VERSION_MIN,
		.max_version = KVT_PROTO_VERSION_MAX,
		.features = (c->flags & KVT_CONNECT_OBSERVER)
				    ? KVT_FEATURES_ALL & ~KVT_FEATURE_POOL
				    : KVT_FEATURES_ALL,
	};
	memcpy(req.name, c->name, sizeof(req.name));
	memcpy(req.pci_bus_id, c->pci_bus_id, sizeof(req.pci_bus_id));
	kvt_enc_hello_req(&c->out, client_next_rid(c), &req);
	int r = kvt_msg_finish(&c->out, 0);
	return r < 0 ? r : client_call(c, hello_reply, NULL);
}

int client_connect(kvt_client *c)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd, r;

	strcpy(sa.sun_path, c->path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		r = -errno;
		close(fd);
		return r;
	}
	/* The reply deadline, enforced by the kernel on the blocking read. */
	struct timeval tv = {timeout_ms() / 1000, (timeout_ms() % 1000) * 1000};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	kvt_conn_open(&c->conn, fd);
	c->n_async = 0;
	/* The extents come again before the HELLO reply; whether they are
	 * the ones mapped now tells the same daemon from a restarted one. */
	pool_reconnect_begin(c);

	r = hello(c);
	if (r < 0) {
		kvt_conn_close(&c->conn);
		pool_reconnect_fail(c);
		return r;
	}
	bool same = pool_reconnect_end(c);
	c->generation++;
	c->backoff_ms = 0;
	if (c->generation > 1)
		client_log(c, KVT_LOG_INFO, "reconnected to %s kvtierd", same ? "the same" : "a restarted");
	for (uint32_t i = 0; i < c->n_nss; i++) {
		r = client_ns_reopen(c, c->nss[i]);
		if (r < 0)
			client_log(c, KVT_LOG_WARNING, "failed to reopen a namespace after reconnecting: %s",
				   c->error[0] ? c->error : strerror(-r));
	}
	if (same)
		flush_deferred(c);
	return 0;
}

int client_ensure(kvt_client *c)
{
	if (c->closed)
		return -ENOTCONN;
	if (c->forked)
		return -ECHILD;
	if (c->conn.fd >= 0)
		return 0;
	if (kvt_now_ns() < c->retry_at_ns)
		return -ENOTCONN;
	int r = client_connect(c);
	if (r < 0) {
		backoff(c);
		return -ENOTCONN;
	}
	client_log(c, KVT_LOG_INFO, "connected to kvtierd at %s", c->path);
	return 0;
}
