/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A client that speaks the wire protocol itself, for what libkvtier-client
 * never does: identities it cannot express, descriptors it keeps to itself
 * (the extent fds it receives, which the library closes after mapping).
 */
#pragma once

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "harness.h"
#include "kvt-proto.h"

#define RAW_MAX_FDS 16
#define RAW_MAX_EXTENTS 64

/* A client's view of its tenant's pool, for a raw client that stores and
 * loads: the extents announced to it, mapped, and the RUN_READY notices
 * it was sent (how a client learns that a remote run has settled). */
struct raw_pool {
	unsigned n;
	uint32_t id[RAW_MAX_EXTENTS];
	uint8_t *map[RAW_MAX_EXTENTS];
	size_t size[RAW_MAX_EXTENTS];
	unsigned runs_ready;
};

struct raw {
	int fd;
	uint64_t rid;
	struct kvt_header h;
	uint8_t payload[1 << 20];
	/* With keep_fds, the descriptors received (extents announced), in
	 * order, until raw_close_fds(); without, each message's are closed. */
	bool keep_fds;
	int fds[RAW_MAX_FDS];
	unsigned n_fds;
	/* Set after raw_connect() and before the HELLO: the notices are
	 * taken in here as they come. */
	struct raw_pool *pool;
};

static inline void raw_close_fds(struct raw *r)
{
	for (unsigned i = 0; i < r->n_fds; i++)
		close(r->fds[i]);
	r->n_fds = 0;
}

static inline void raw_connect(struct raw *r, const struct daemon *d)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	CHECK(strlen(d->socket) < sizeof(sa.sun_path), "socket path too long");
	memcpy(sa.sun_path, d->socket, strlen(d->socket) + 1);
	r->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	r->rid = 0;
	r->n_fds = 0;
	r->keep_fds = false;
	r->pool = NULL;
	CHECK(r->fd >= 0 && connect(r->fd, (struct sockaddr *)&sa, sizeof(sa)) == 0, "connect");
}

static inline void raw_disconnect(struct raw *r)
{
	raw_close_fds(r);
	close(r->fd);
	r->fd = -1;
}

/* A notice into r->pool: an extent is mapped, its descriptor closed. */
static inline void raw_pool_note(struct raw *r)
{
	struct raw_pool *p = r->pool;
	struct kvt_cursor c = {r->payload, r->h.length};

	if (r->h.opcode == KVT_OP_RUN_READY) {
		p->runs_ready++;
	} else if (r->h.opcode == KVT_OP_EXTENT_ADDED) {
		struct kvt_extent_note note;
		CHECK(kvt_dec_extent_note(&c, &note) == 0, "EXTENT_ADDED decodes");
		CHECK(r->n_fds >= 1 && p->n < RAW_MAX_EXTENTS, "an extent's descriptor");
		int fd = r->fds[--r->n_fds];
		void *map = mmap(NULL, note.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		CHECK(map != MAP_FAILED, "map extent %u", note.extent_id);
		close(fd);
		p->id[p->n] = note.extent_id;
		p->map[p->n] = map;
		p->size[p->n++] = note.size;
	}
}

/* The memory of a slot the daemon named: size bytes at offset of an
 * extent announced to r. */
static inline uint8_t *raw_pool_at(const struct raw *r, uint32_t extent_id, uint64_t offset,
				   uint64_t size)
{
	const struct raw_pool *p = r->pool;
	for (unsigned i = 0; i < p->n; i++)
		if (p->id[i] == extent_id) {
			CHECK(offset + size <= p->size[i], "slot inside extent %u", extent_id);
			return p->map[i] + offset;
		}
	CHECK(false, "extent %u was never announced", extent_id);
	return NULL;
}

static inline void raw_pool_unmap(struct raw_pool *p)
{
	for (unsigned i = 0; i < p->n; i++)
		munmap(p->map[i], p->size[i]);
	p->n = 0;
}

/* One message into r->h and r->payload.  0 at end of stream. */
static inline int raw_recv(struct raw *r)
{
	uint8_t hdr[KVT_HEADER_SIZE];
	size_t got = 0;

	while (got < KVT_HEADER_SIZE) {
		struct pollfd p = {r->fd, POLLIN, 0};
		CHECK(poll(&p, 1, 30000) == 1, "no answer from the daemon");
		ssize_t n = kvt_recvmsg(r->fd, hdr + got, KVT_HEADER_SIZE - got, r->fds, &r->n_fds,
					RAW_MAX_FDS);
		if (n == -EAGAIN)
			continue;
		if (n <= 0)
			return 0;
		got += (size_t)n;
	}
	CHECK(kvt_header_parse(hdr, &r->h) == 0, "daemon sent a bad header");
	CHECK(r->h.length <= sizeof(r->payload), "reply too large");
	got = 0;
	while (got < r->h.length) {
		struct pollfd p = {r->fd, POLLIN, 0};
		CHECK(poll(&p, 1, 30000) == 1, "no answer from the daemon");
		ssize_t n = kvt_recvmsg(r->fd, r->payload + got, r->h.length - got, r->fds,
					&r->n_fds, RAW_MAX_FDS);
		if (n == -EAGAIN)
			continue;
		CHECK(n > 0, "short message");
		got += (size_t)n;
	}
	if (r->pool && (r->h.flags & KVT_FLAG_NOTIFY))
		raw_pool_note(r);
	if (!r->keep_fds)
		raw_close_fds(r);
	return 1;
}

/* Send b and read up to its reply, keeping the descriptors notifications
 * bring.  \return 0, or the negative errno of an error reply */
static inline int raw_call(struct raw *r, struct kvt_buf *b)
{
	CHECK(kvt_msg_finish(b, 0) == 0, "encode");
	CHECK(write(r->fd, b->data, b->len) == (ssize_t)b->len, "write");
	do
		CHECK(raw_recv(r) == 1, "the daemon closed the connection");
	while (r->h.flags & KVT_FLAG_NOTIFY);
	CHECK(r->h.request_id == r->rid, "reply to request %llu, want %llu",
	      (unsigned long long)r->h.request_id, (unsigned long long)r->rid);
	if (r->h.flags & KVT_FLAG_ERROR) {
		struct kvt_error_rep err;
		struct kvt_cursor c = {r->payload, r->h.length};
		CHECK(kvt_dec_error(&c, &err) == 0, "error reply decodes");
		return err.error < 0 ? err.error : -EPROTO;
	}
	return 0;
}

static inline void raw_hello(struct raw *r, const char *name)
{
	struct kvt_buf b;
	struct kvt_hello_req req = {1, 1, KVT_FEATURES_ALL, "", ""};
	snprintf(req.name, sizeof(req.name), "%s", name);
	kvt_buf_init(&b);
	kvt_enc_hello_req(&b, ++r->rid, &req);
	CHECK(raw_call(r, &b) == 0 && r->h.opcode == KVT_OP_HELLO, "hello");
	kvt_buf_free(&b);
}

/* \return the namespace id, or the negative errno the daemon answered */
static inline int64_t raw_ns_open(struct raw *r, const struct kvt_identity *id)
{
	struct kvt_buf ident, b;
	struct kvt_ns_open_rep rep;

	kvt_buf_init(&ident);
	kvt_buf_init(&b);
	CHECK(kvt_identity_encode(id, &ident) == 0, "identity encodes");
	struct kvt_ns_open_req req = {ident.data, (uint32_t)ident.len};
	kvt_enc_ns_open_req(&b, 1, ++r->rid, &req);
	int e = raw_call(r, &b);
	kvt_buf_free(&ident);
	kvt_buf_free(&b);
	if (e < 0)
		return e;
	struct kvt_cursor c = {r->payload, r->h.length};
	CHECK(kvt_dec_ns_open_rep(&c, &rep) == 0, "ns reply decodes");
	return rep.ns_id;
}

/* LOOKUP, RESERVE or ACQUIRE of n keys; the reply stays in r->payload. */
static inline int raw_keys(struct raw *r, uint16_t op, uint32_t ns, uint32_t arg,
			   const uint8_t *keys, uint32_t n)
{
	struct kvt_buf b;
	struct kvt_keys_req req = {ns, arg, n, keys};
	kvt_buf_init(&b);
	kvt_enc_keys_req(&b, 1, op, ++r->rid, &req);
	int e = raw_call(r, &b);
	kvt_buf_free(&b);
	return e;
}
