/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The connection: handshake, framed requests and replies, the mapped pool,
 * reconnection with backoff and fork safety.
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "client-internal.h"
#include "kvt-config.h"

#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 5000

#define DEFAULT_TIMEOUT_MS 30000

static kvt_log_fn default_log;
static _Thread_local char connect_error[KVT_MAX_REASON + 256];
static void *default_log_ud;

/* Every live client, so a forked child can drop their connections. */
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static kvt_client *registry;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void atfork_child(void)
{
	/* The child shares the parent's socket: one stray byte from it would
	 * corrupt the parent's stream, so it closes its copy and never
	 * talks on it.  Only this thread exists in the child. */
	for (kvt_client *c = registry; c; c = c->reg_next) {
		if (c->fd >= 0)
			close(c->fd);
		c->fd = -1;
		c->forked = true;
		pthread_mutex_init(&c->lock, NULL);
	}
	pthread_mutex_init(&registry_lock, NULL);
}

static void atfork_register(void)
{
	pthread_atfork(NULL, NULL, atfork_child);
}

KVT_EXPORT const char *kvt_version(void)
{
	return KVT_VERSION;
}

KVT_EXPORT uint32_t kvt_protocol_version(void)
{
	return KVT_PROTO_VERSION_MAX;
}

KVT_EXPORT void kvt_set_default_log(kvt_log_fn fn, void *userdata)
{
	default_log = fn;
	default_log_ud = userdata;
}

KVT_EXPORT void kvt_client_set_log(kvt_client *c, kvt_log_fn fn, void *userdata)
{
	if (!c)
		return;
	c->log = fn;
	c->log_ud = userdata;
}

void client_log(kvt_client *c, int level, const char *fmt, ...)
{
	kvt_log_fn fn = c && c->log ? c->log : default_log;
	void *ud = c && c->log ? c->log_ud : default_log_ud;
	char msg[600];
	va_list ap;

	if (!fn)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fn(level, msg, ud);
}

KVT_EXPORT const char *kvt_default_socket(void)
{
	static char path[108];
	const char *env = getenv("KVTIER_SOCKET");

	if (env && *env && strlen(env) < sizeof(path))
		return env;
	if (geteuid() == 0)
		return "/run/kvtierd/kvtierd.sock";
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	if (xdg && xdg[0] == '/' && strlen(xdg) < 80)
		snprintf(path, sizeof(path), "%s/kvtierd/kvtierd.sock", xdg);
	else
		snprintf(path, sizeof(path), "/tmp/kvtierd-%u/kvtierd.sock",
			 (unsigned)geteuid());
	return path;
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t client_next_rid(kvt_client *c)
{
	return ++c->next_rid;
}

/* ---- the mapped pool (pool.c) -------------------------------------- */

KVT_EXPORT int kvt_client_map(kvt_client *c, uint32_t extent_id, uint64_t offset,
			      uint64_t bytes, void **ret_ptr)
{
	struct mapped_extent *e = NULL;

	if (!c || !ret_ptr)
		return -EINVAL;
	void *p = NULL;
	int known = 0;
	/* An extent another process's handle lies in may have been announced
	 * after this client last read from the daemon: one round trip reads
	 * the announcements (EXTENT_ADDED) before the answer is -ENOENT. */
	for (int pass = 0; pass < 2 && !p; pass++) {
		if (pass == 1 && (known || kvt_client_ping(c) < 0))
			break;
		pthread_mutex_lock(&c->lock);
		p = pool_ptr(c, extent_id, offset, bytes, &e);
		known = pool_known(c, extent_id);
		/* No handle accounts for this pointer: its extent is never
		 * unmapped under it (pool.c). */
		if (e)
			e->handed_out = true;
		pthread_mutex_unlock(&c->lock);
	}
	if (!p)
		return known ? -EINVAL : -ENOENT;
	*ret_ptr = p;
	return 0;
}

/* ---- framing ------------------------------------------------------ */

static void disconnect(kvt_client *c, const char *why)
{
	if (c->fd >= 0) {
		close(c->fd);
		client_log(c, KVT_LOG_WARNING, "lost kvtierd at %s: %s; will reconnect",
			   c->path, why);
	}
	c->fd = -1;
	for (unsigned i = 0; i < c->n_in_fds; i++)
		close(c->in_fds[i]);
	c->n_in_fds = 0;
	c->in_len = 0;
	c->n_async = 0;
	c->backoff_ms = c->backoff_ms ? c->backoff_ms * 2 : BACKOFF_MIN_MS;
	if (c->backoff_ms > BACKOFF_MAX_MS)
		c->backoff_ms = BACKOFF_MAX_MS;
	c->retry_at_ns = now_ns() + (uint64_t)c->backoff_ms * 1000000ull;
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

static int send_all(kvt_client *c, const uint8_t *p, size_t len)
{
	while (len > 0) {
		ssize_t n = kvt_sendmsg(c->fd, p, len, NULL, 0);
		if (n == -EAGAIN) {
			int r = wait_fd(c->fd, POLLOUT);
			if (r < 0)
				return r;
			continue;
		}
		if (n < 0)
			return (int)n;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Read until one whole message is buffered; fds queue in c->in_fds. */
static int read_message(kvt_client *c, struct kvt_header *ret)
{
	for (;;) {
		if (c->in_len >= KVT_HEADER_SIZE) {
			int r = kvt_header_parse(c->in, ret);
			if (r < 0)
				return r;
			size_t total = KVT_HEADER_SIZE + (size_t)ret->length;
			if (c->in_len >= total)
				return 0;
			if (c->in_cap < total) {
				uint8_t *p = realloc(c->in, total);
				if (!p)
					return -ENOMEM;
				c->in = p;
				c->in_cap = total;
			}
		}
		if (c->in_cap - c->in_len < 4096) {
			size_t cap = c->in_cap ? c->in_cap * 2 : 65536;
			uint8_t *p = realloc(c->in, cap);
			if (!p)
				return -ENOMEM;
			c->in = p;
			c->in_cap = cap;
		}
		ssize_t n = kvt_recvmsg_wait(c->fd, c->in + c->in_len, c->in_cap - c->in_len,
					     c->in_fds, &c->n_in_fds, KVT_MAX_FDS * 2);
		if (n == -EAGAIN)
			return -ETIMEDOUT; /* SO_RCVTIMEO expired */
		if (n == 0)
			return -ECONNRESET;
		if (n < 0)
			return (int)n;
		c->in_len += (size_t)n;
	}
}

static void consume_message(kvt_client *c, const struct kvt_header *h)
{
	size_t total = KVT_HEADER_SIZE + (size_t)h->length;
	memmove(c->in, c->in + total, c->in_len - total);
	c->in_len -= total;
}

static int take_fds(kvt_client *c, unsigned n, int *ret)
{
	if (n > c->n_in_fds)
		return -EBADMSG;
	memcpy(ret, c->in_fds, n * sizeof(int));
	memmove(c->in_fds, c->in_fds + n, (c->n_in_fds - n) * sizeof(int));
	c->n_in_fds -= n;
	return 0;
}

static int handle_notification(kvt_client *c, const struct kvt_header *h,
			       struct kvt_cursor *cur)
{
	int fds[KVT_MAX_FDS];
	int r = take_fds(c, h->n_fds, fds);
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

/* The send/receive half of a call on a live connection. */
static int exchange(kvt_client *c, uint64_t rid, uint16_t opcode, reply_fn fn,
		    void *userdata, int *ret_refused)
{
	int r = send_all(c, c->out.data, c->out.len);
	if (r < 0) {
		/* A daemon that refuses a connection says why and closes it,
		 * possibly before our request arrived: read the reason. */
		struct kvt_header h;
		if (read_message(c, &h) == 0 && (h.flags & KVT_FLAG_ERROR)) {
			struct kvt_cursor cur = {c->in + KVT_HEADER_SIZE, h.length};
			struct kvt_error_rep e;
			if (kvt_dec_error(&cur, &e) == 0) {
				snprintf(c->error, sizeof(c->error), "%s", e.reason);
				*ret_refused = e.error;
				consume_message(c, &h);
				return 0;
			}
		}
		return r;
	}
	for (;;) {
		struct kvt_header h;
		r = read_message(c, &h);
		if (r < 0)
			return r;
		struct kvt_cursor cur = {c->in + KVT_HEADER_SIZE, h.length};
		if (h.flags & KVT_FLAG_NOTIFY) {
			r = handle_notification(c, &h, &cur);
			consume_message(c, &h);
			if (r < 0)
				return r;
			continue;
		}
		if (h.n_fds) {
			return -EBADMSG;
		}
		if (h.request_id != rid && skip_async(c, &h, &cur)) {
			consume_message(c, &h);
			continue;
		}
		if (!(h.flags & KVT_FLAG_REPLY) ||
		    (h.request_id != rid && !(h.request_id == 0 && (h.flags & KVT_FLAG_ERROR))) ||
		    h.opcode != opcode)
			return -EBADMSG;
		if (h.flags & KVT_FLAG_ERROR) {
			struct kvt_error_rep e;
			r = kvt_dec_error(&cur, &e);
			consume_message(c, &h);
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
		consume_message(c, &h);
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
	if (c->fd < 0)
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
	if (c->fd < 0)
		return -ENOTCONN;
	if (c->in_len < KVT_HEADER_SIZE) {
		struct pollfd pfd = {c->fd, POLLIN, 0};
		int r = poll(&pfd, 1, timeout_ms);
		if (r < 0)
			return errno == EINTR ? 0 : -errno;
		if (r == 0)
			return -ETIMEDOUT;
	}
	struct kvt_header h;
	int r = read_message(c, &h);
	if (r == 0) {
		struct kvt_cursor cur = {c->in + KVT_HEADER_SIZE, h.length};
		if (h.flags & KVT_FLAG_NOTIFY)
			r = handle_notification(c, &h, &cur);
		else if (!skip_async(c, &h, &cur))
			r = -EBADMSG; /* a reply nobody asked for */
		consume_message(c, &h);
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
	if (c->fd < 0)
		return -ENOTCONN;
	if (c->n_async >= sizeof(c->async_rids) / sizeof(c->async_rids[0]))
		return client_call(c, ignore_reply, NULL);
	r = kvt_header_parse(c->out.data, &h);
	if (r < 0)
		return r;
	r = send_all(c, c->out.data, c->out.len);
	if (r < 0) {
		disconnect(c, strerror(-r));
		return -ENOTCONN;
	}
	c->async_rids[c->n_async++] = h.request_id;
	return 0;
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

static int connect_locked(kvt_client *c)
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
	c->fd = fd;
	c->in_len = 0;
	c->n_async = 0;
	/* The extents come again before the HELLO reply; whether they are
	 * the ones mapped now tells the same daemon from a restarted one. */
	pool_reconnect_begin(c);

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
	r = kvt_msg_finish(&c->out, 0);
	if (r == 0)
		r = client_call(c, hello_reply, NULL);
	if (r < 0) {
		if (c->fd >= 0) {
			close(c->fd);
			c->fd = -1;
		}
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
		client_flush_deferred(c);
	return 0;
}

int client_ensure(kvt_client *c)
{
	if (c->closed)
		return -ENOTCONN;
	if (c->forked)
		return -ECHILD;
	if (c->fd >= 0)
		return 0;
	if (now_ns() < c->retry_at_ns)
		return -ENOTCONN;
	int r = connect_locked(c);
	if (r < 0) {
		c->fd = -1;
		c->backoff_ms = c->backoff_ms ? c->backoff_ms * 2 : BACKOFF_MIN_MS;
		if (c->backoff_ms > BACKOFF_MAX_MS)
			c->backoff_ms = BACKOFF_MAX_MS;
		c->retry_at_ns = now_ns() + (uint64_t)c->backoff_ms * 1000000ull;
		return -ENOTCONN;
	}
	client_log(c, KVT_LOG_INFO, "connected to kvtierd at %s", c->path);
	return 0;
}

static void client_free_buffers(kvt_client *c)
{
	kvt_buf_free(&c->out);
	free(c->in);
	free(c->slots);
	free(c->status);
	free(c->hargs);
	free(c->hpos);
	free(c->hown);
	free(c->bounce);
	c->in = NULL;
	c->in_len = c->in_cap = 0;
	c->slots = NULL;
	c->status = NULL;
	c->hargs = NULL;
	c->hpos = NULL;
	c->hown = NULL;
	c->bounce = NULL;
}

/* The memory of a client nobody refers to any more. */
static void client_destroy(kvt_client *c)
{
	for (unsigned i = 0; i < c->n_in_fds; i++)
		close(c->in_fds[i]);
	free(c->nss);
	pool_free(c);
	client_free_buffers(c);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

KVT_EXPORT int kvt_client_connect(const char *socket_path, const char *name,
				  kvt_client **ret)
{
	kvt_connect_opts o = {.size = sizeof(o), .socket_path = socket_path, .name = name};
	return kvt_client_connect_opts(&o, ret);
}

KVT_EXPORT int kvt_client_numa_node(kvt_client *c)
{
	return c ? c->numa_node : -1;
}

KVT_EXPORT int kvt_client_connect_opts(const kvt_connect_opts *opts, kvt_client **ret)
{
	kvt_connect_opts o = {0};
	kvt_client *c;
	int r;

	if (!opts || !ret || opts->size < offsetof(kvt_connect_opts, pci_bus_id))
		return -EINVAL;
	memcpy(&o, opts, opts->size < sizeof(o) ? opts->size : sizeof(o));
	const char *socket_path = o.socket_path, *name = o.name;
	uint32_t flags = o.flags;
	if (flags & ~(uint32_t)KVT_CONNECT_OBSERVER)
		return -EINVAL;
	if (o.pci_bus_id && strlen(o.pci_bus_id) > KVT_MAX_BUS_ID)
		return -ENAMETOOLONG;
	for (const char *p = o.pci_bus_id; p && *p; p++)
		if (!strchr("0123456789abcdefABCDEF:.", *p))
			return -EINVAL; /* the daemon would refuse it */
	if (!socket_path)
		socket_path = kvt_default_socket();
	if (strlen(socket_path) >= sizeof(c->path) ||
	    (name && strlen(name) > KVT_MAX_NAME))
		return -ENAMETOOLONG;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	pthread_mutex_init(&c->lock, NULL);
	atomic_init(&c->refs, 1);
	strcpy(c->path, socket_path);
	snprintf(c->name, sizeof(c->name), "%s", name ? name : "");
	c->fd = -1;
	c->flags = flags;
	c->numa_node = -1;
	if (o.pci_bus_id)
		snprintf(c->pci_bus_id, sizeof(c->pci_bus_id), "%s", o.pci_bus_id);
	kvt_buf_init(&c->out);
	c->slots = calloc(KVT_MAX_KEYS, sizeof(*c->slots));
	c->status = calloc(KVT_MAX_KEYS, sizeof(*c->status));
	c->hargs = calloc(KVT_MAX_KEYS, sizeof(*c->hargs));
	c->hpos = calloc(KVT_MAX_KEYS, sizeof(*c->hpos));
	c->hown = calloc(KVT_MAX_KEYS, sizeof(*c->hown));
	c->bounce = calloc(KVT_MAX_KEYS, sizeof(*c->bounce));
	if (!c->slots || !c->status || !c->hargs || !c->hpos || !c->hown || !c->bounce) {
		r = -ENOMEM;
		goto fail;
	}
	r = connect_locked(c);
	if (r < 0) {
		if (c->error[0])
			snprintf(connect_error, sizeof(connect_error),
				 "kvtierd at %s refused the connection: %s", c->path, c->error);
		else
			snprintf(connect_error, sizeof(connect_error),
				 "cannot connect to kvtierd at %s: %s (is it running? set KVTIER_SOCKET or pass the path)",
				 c->path, strerror(-r == ENOTCONN ? ECONNRESET : -r));
		client_log(c, KVT_LOG_ERR, "%s", connect_error);
		goto fail;
	}
	connect_error[0] = 0;
	pthread_once(&atfork_once, atfork_register);
	pthread_mutex_lock(&registry_lock);
	c->reg_next = registry;
	registry = c;
	pthread_mutex_unlock(&registry_lock);
	*ret = c;
	return 0;
fail:
	if (c->fd >= 0)
		close(c->fd);
	client_destroy(c);
	return r;
}

kvt_client *client_ref(kvt_client *c)
{
	atomic_fetch_add(&c->refs, 1);
	return c;
}

void client_unref(kvt_client *c)
{
	if (c && atomic_fetch_sub(&c->refs, 1) == 1)
		client_destroy(c);
}

/*
 * The application is done with the client: the connection closes and the
 * pool is unmapped now, whatever still refers to the client.  Namespaces
 * still open keep its memory (a reference each) and answer -ENOTCONN, so a
 * binding may free its objects in any order.
 */
KVT_EXPORT void kvt_client_free(kvt_client *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&registry_lock);
	for (kvt_client **p = &registry; *p; p = &(*p)->reg_next)
		if (*p == c) {
			*p = c->reg_next;
			break;
		}
	pthread_mutex_unlock(&registry_lock);
	pthread_mutex_lock(&c->lock);
	c->closed = true;
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	for (unsigned i = 0; i < c->n_in_fds; i++)
		close(c->in_fds[i]);
	c->n_in_fds = 0;
	/* The namespaces stay the application's to close; what they keep
	 * alive until then is small: no call on them gets past the check of
	 * c->closed to these buffers. */
	free(c->nss);
	c->nss = NULL;
	c->n_nss = 0;
	pool_free(c);
	client_free_buffers(c);
	pthread_mutex_unlock(&c->lock);
	client_unref(c);
}

KVT_EXPORT const char *kvt_connect_error(void)
{
	return connect_error;
}

KVT_EXPORT const char *kvt_client_error(kvt_client *c)
{
	return c ? c->error : "";
}

KVT_EXPORT int kvt_client_connected(kvt_client *c)
{
	if (!c)
		return 0;
	pthread_mutex_lock(&c->lock);
	int r = c->fd >= 0 && !c->forked;
	pthread_mutex_unlock(&c->lock);
	return r;
}

KVT_EXPORT int kvt_client_ping(kvt_client *c)
{
	if (!c)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	int r = client_ensure(c);
	if (r == 0) {
		kvt_msg_begin(&c->out, c->version, KVT_OP_PING, 0, client_next_rid(c));
		r = kvt_msg_finish(&c->out, 0);
		if (r == 0)
			r = client_call(c, NULL, NULL);
	}
	pthread_mutex_unlock(&c->lock);
	return r;
}

static int count_reply(kvt_client *c, const struct kvt_header *h,
		       struct kvt_cursor *cur, void *userdata)
{
	return kvt_dec_count_rep(cur, userdata);
}

KVT_EXPORT int64_t kvt_admin_evict(kvt_client *c, uint32_t tenant_id, uint32_t ns_id, int drop)
{
	if (!c)
		return -EINVAL;
	struct kvt_evict_req req = {tenant_id, ns_id, drop ? KVT_EVICT_DROP : 0};
	uint64_t n = 0;
	pthread_mutex_lock(&c->lock);
	int r = client_ensure(c);
	if (r == 0) {
		kvt_enc_evict_req(&c->out, c->version, client_next_rid(c), &req);
		r = kvt_msg_finish(&c->out, 0);
		if (r == 0)
			r = client_call(c, count_reply, &n);
	}
	pthread_mutex_unlock(&c->lock);
	return r < 0 ? r : (int64_t)n;
}

/* ---- statistics --------------------------------------------------- */

struct stats_ctx {
	kvt_record_fn fn;
	void *userdata;
	bool stopped;
	struct kvt_record rec;
};

static int stats_reply(kvt_client *c, const struct kvt_header *h,
		       struct kvt_cursor *cur, void *userdata)
{
	struct stats_ctx *ctx = userdata;
	while (cur->left > 0) {
		int r = kvt_dec_record(cur, &ctx->rec);
		if (r < 0)
			return r;
		/* Keep reading the remaining replies even after the caller
		 * stopped, so the stream stays in step. */
		if (!ctx->stopped && ctx->fn((const kvt_record *)&ctx->rec, ctx->userdata))
			ctx->stopped = true;
	}
	return 0;
}

KVT_EXPORT int kvt_stats(kvt_client *c, uint32_t what, kvt_record_fn fn, void *userdata)
{
	if (!c || !fn || (what & ~(uint32_t)KVT_STATS_ALL))
		return -EINVAL;
	struct stats_ctx *ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return -ENOMEM;
	ctx->fn = fn;
	ctx->userdata = userdata;
	pthread_mutex_lock(&c->lock);
	int r = client_ensure(c);
	if (r == 0) {
		kvt_enc_stats_req(&c->out, c->version, client_next_rid(c), what);
		r = kvt_msg_finish(&c->out, 0);
		if (r == 0)
			r = client_call(c, stats_reply, ctx);
	}
	pthread_mutex_unlock(&c->lock);
	free(ctx);
	return r;
}

KVT_EXPORT const char *kvt_record_kind(const kvt_record *r)
{
	return r ? ((const struct kvt_record *)r)->kind : "";
}

KVT_EXPORT uint32_t kvt_record_n_fields(const kvt_record *r)
{
	return r ? ((const struct kvt_record *)r)->n_fields : 0;
}

static const struct kvt_field *field_at(const kvt_record *r, uint32_t i)
{
	const struct kvt_record *rec = (const struct kvt_record *)r;
	return rec && i < rec->n_fields ? &rec->fields[i] : NULL;
}

KVT_EXPORT const char *kvt_record_field_name(const kvt_record *r, uint32_t i)
{
	const struct kvt_field *f = field_at(r, i);
	return f ? f->name : NULL;
}

KVT_EXPORT int kvt_record_field_type(const kvt_record *r, uint32_t i)
{
	const struct kvt_field *f = field_at(r, i);
	return f ? f->type : -EINVAL;
}

KVT_EXPORT uint64_t kvt_record_field_u64(const kvt_record *r, uint32_t i)
{
	const struct kvt_field *f = field_at(r, i);
	return f ? f->u : 0;
}

KVT_EXPORT const char *kvt_record_field_str(const kvt_record *r, uint32_t i)
{
	const struct kvt_field *f = field_at(r, i);
	return f && f->type == KVT_FIELD_STR ? f->s : NULL;
}

KVT_EXPORT int kvt_record_get_u64(const kvt_record *r, const char *name, uint64_t *ret)
{
	if (!r || !name || !ret)
		return -EINVAL;
	const struct kvt_field *f = kvt_record_get((const struct kvt_record *)r, name);
	if (!f || f->type == KVT_FIELD_STR)
		return -ENOENT;
	*ret = f->u;
	return 0;
}

KVT_EXPORT const char *kvt_record_get_str(const kvt_record *r, const char *name)
{
	if (!r || !name)
		return NULL;
	const struct kvt_field *f = kvt_record_get((const struct kvt_record *)r, name);
	return f && f->type == KVT_FIELD_STR ? f->s : NULL;
}
