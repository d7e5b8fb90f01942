/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The client object and the requests that are not about blocks: creating
 * and freeing it (in any order with its namespaces), fork safety, PING,
 * STATS and its records, ADMIN_EVICT, and pointers into the mapped pool.
 * The connection under it is call.c's.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client-internal.h"
#include "kvt-config.h"

static _Thread_local char connect_error[KVT_MAX_REASON + 256];

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
		if (c->conn.fd >= 0)
			close(c->conn.fd);
		c->conn.fd = -1;
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

KVT_EXPORT const char *kvt_default_socket(void)
{
	static char path[108];
	const char *env = getenv("KVTIER_SOCKET");

	if (env && *env && strlen(env) < sizeof(path))
		return env;
	static const char system_socket[] = "/run/kvtierd/kvtierd.sock";
	if (geteuid() == 0)
		return system_socket;
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	if (xdg && xdg[0] == '/' && strlen(xdg) < 80)
		snprintf(path, sizeof(path), "%s/kvtierd/kvtierd.sock", xdg);
	else
		snprintf(path, sizeof(path), "/tmp/kvtierd-%u/kvtierd.sock",
			 (unsigned)geteuid());
	/* A user with no daemon of their own reaches the node's, where the
	 * socket's group decides who may connect (kvtierd.socket). */
	struct stat st;
	if (stat(path, &st) < 0 && stat(system_socket, &st) == 0 && S_ISSOCK(st.st_mode))
		return system_socket;
	return path;
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

static void client_free_buffers(kvt_client *c)
{
	kvt_buf_free(&c->out);
	kvt_conn_free(&c->conn);
	free(c->slots);
	free(c->status);
	free(c->hargs);
	free(c->hpos);
	free(c->hown);
	free(c->bounce);
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
	kvt_conn_init(&c->conn, -1, KVT_CONN_MAX_IN_FDS);
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
	r = client_connect(c);
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
	client_destroy(c); /* closes the socket */
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
	kvt_conn_close(&c->conn);
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
	int r = c->conn.fd >= 0 && !c->forked;
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
