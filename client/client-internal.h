/* SPDX-License-Identifier: Apache-2.0 */
/* libkvtier-client internals shared by its source files. */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "kvt-proto.h"
#include "kvtier.h"

struct kvt_record; /* the wire record is the public opaque record */

/*
 * One extent of the pool as this client maps it.  A daemon restart does
 * not unmap it while pointers into it are still out (see pool.c).
 */
struct mapped_extent {
	struct mapped_extent *next; /* on c->retired */
	uint32_t id;
	uint32_t flags;
	uint8_t *base;
	uint64_t size;
	uint64_t slot_bytes;
	dev_t dev; /* the memfd: a daemon that sends the same one again */
	ino_t ino; /* after a reconnect is the same daemon */
	uint32_t holds;  /* this client's handles whose pointer lies in it */
	bool handed_out; /* kvt_client_map returned a pointer into it */
	bool carried;    /* found again in the connection being set up */
	bool retired;    /* of a daemon that is gone */
	bool inert;      /* retired, and its pool memory let go */
};

/* A handle this client took (RESERVE, ACQUIRE) and has not given back. */
enum held_kind {
	HELD_LEASE = 1,
	HELD_RESERVATION = 2,
};

struct held {
	uint64_t key; /* 0: a free entry */
	uint64_t handle;
	struct mapped_extent *e;
	uint8_t kind; /* enum held_kind */
};

/* An open-addressed table of held handles. */
struct held_set {
	struct held *v;
	uint32_t cap; /* a power of two, or 0 */
	uint32_t n;
};

/* Where a handle came from, as far as this client can tell. */
enum held_where {
	HELD_FOREIGN = 0, /* not taken by this client (another process's) */
	HELD_CURRENT = 1, /* taken from the daemon this client talks to */
	HELD_OLD = 2,     /* taken from a daemon that has gone since */
};

/* A give-back (RELEASE, ABORT) that found the daemon away: sent when the
 * same daemon answers again, forgotten if a new one does. */
struct deferred {
	uint64_t handle;
	uint16_t op;
};

struct kvt_ns {
	kvt_client *c; /* holds a reference: valid until the ns is closed */
	uint8_t *identity; /* canonical encoding, kept for reconnects */
	uint32_t identity_len;
	uint64_t generation; /* connection the ns_id belongs to */
	kvt_ns_info info;
	/* The identity's dtype of each layer group: a codec reads elements
	 * of these (info.codec is the namespace's codec). */
	uint32_t n_groups;
	uint32_t group_dtype[KVT_MAX_GROUPS];
};

struct kvt_client {
	pthread_mutex_t lock;
	/* The application's reference and one per open namespace (and CUDA
	 * context): the memory of the client lives until the last is gone,
	 * so objects may be freed in any order. */
	_Atomic uint32_t refs;
	bool closed; /* kvt_client_free was called: every call -ENOTCONN */
	char path[108];
	char name[KVT_MAX_NAME + 1];
	/* The socket (conn.fd, -1 while disconnected), what has arrived on it
	 * and the descriptors that came with it. */
	struct kvt_conn conn;
	bool forked;
	uint32_t flags; /* KVT_CONNECT_* */
	char pci_bus_id[KVT_MAX_BUS_ID + 1];
	int numa_node;
	uint16_t version;
	uint64_t features;
	uint32_t tenant_id, session_id, max_keys, max_handles;
	uint64_t quota;
	uint64_t next_rid;
	/* Requests sent without waiting for their replies (a release after
	 * the copy is done); their replies are skipped as they arrive. */
	uint64_t async_rids[64];
	uint32_t n_async;
	uint64_t ready_events; /* BLOCK_READY and RUN_READY notifications seen */
	uint64_t ready_runs;   /* RUN_READY notifications seen (many keys each) */
	uint64_t settled_events; /* SETTLED notifications seen (a LOOKUP's keys each) */
	uint64_t generation; /* connections made */
	/* Daemon instances seen: a reconnect to a restarted daemon counts
	 * one more, a reconnect to the same daemon does not (pool.c). */
	uint64_t instance;
	/* Bumped whenever the extents below change, so that the CUDA path's
	 * registration thread knows to look at them again (pool.c). */
	uint64_t extents_gen;

	struct kvt_buf out; /* the request being sent */

	/* The pool: the extents of the daemon instance this client talks to,
	 * those of the previous connection while a new one is set up, and
	 * those of earlier instances that are still in use. */
	struct mapped_extent **extents;
	uint32_t n_extents;
	struct mapped_extent **prev;
	uint32_t n_prev;
	struct mapped_extent *retired;
	/* Handles taken and not given back: from this instance (keyed by
	 * their table index), from earlier ones (keyed by value). */
	struct held_set held, old;
	struct deferred *deferred;
	uint32_t n_deferred, cap_deferred;
	kvt_ns **nss;
	uint32_t n_nss;

	uint64_t retry_at_ns;
	uint32_t backoff_ms;
	kvt_log_fn log;
	void *log_ud;
	char error[KVT_MAX_REASON + 1];

	/* Per-call scratch, sized for the daemon's keys_per_request. */
	struct kvt_slot *slots;
	int32_t *status;
	struct kvt_handle_arg *hargs;
	size_t *hpos;     /* [KVT_MAX_KEYS] the caller's index of each harg */
	uint8_t *hown;    /* [KVT_MAX_KEYS] whether each harg is held here */
	uint64_t *bounce; /* [KVT_MAX_KEYS] handles refused at once */

	kvt_client *reg_next; /* registry for fork handling */
};

/* Reply handler: called for each reply to the current request. */
typedef int (*reply_fn)(kvt_client *c, const struct kvt_header *h,
			struct kvt_cursor *cur, void *userdata);

/* ---- log.c: the application's log handler ---- */

void client_log(kvt_client *c, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* ---- call.c: the connection to the daemon.  Every function is called
 * with c->lock held. ---- */

/* Connect and say HELLO; on a reconnect, reopen the namespaces and send
 * the give-backs deferred meanwhile.  \return 0 or a negative errno */
int client_connect(kvt_client *c);
/* Reconnect if the backoff allows; -ENOTCONN while the daemon is away. */
int client_ensure(kvt_client *c);
/* Send c->out (already encoded) and run fn on its replies. */
int client_call(kvt_client *c, reply_fn fn, void *userdata);
/* Read and handle one message that arrives unasked (a notification, or the
 * reply to an asynchronous request), waiting at most timeout_ms.
 * \return 0, -ETIMEDOUT, or -ENOTCONN */
int client_wait_event(kvt_client *c, int timeout_ms);
/* Send c->out and do not wait: for requests whose answer changes nothing
 * for the caller.  Falls back to client_call when too many are open. */
int client_send_async(kvt_client *c);
uint64_t client_next_rid(kvt_client *c);
/* Reopen one namespace on the current connection. */
int client_ns_reopen(kvt_client *c, kvt_ns *ns);
/* Give handles back (RELEASE or ABORT) without waiting for the answers:
 * handles this client may not keep, or gave back while the daemon was
 * away. */
void client_give_back_async(kvt_client *c, uint16_t op, const uint64_t *handles, size_t n);

/* ---- blocks.c ---- */

/* RELEASE without waiting for the answer: a lease ends once the bytes are
 * copied out, and nothing the caller needs depends on the reply. */
int client_release_async(kvt_client *c, const uint64_t *handles, size_t n);

/* ---- copy.c ---- */

/* Layer group k's layout (of n_groups) as a namespace with a codec copies
 * it: the namespace's codec and the group's dtype, whatever the engine's
 * layout says.  One layout for several groups needs them all of one
 * dtype.  \return 0 or -EINVAL */
int ns_coded_layout(const kvt_ns *ns, uint32_t n_groups, uint32_t k, const kvt_layout *layout,
		    kvt_layout *ret);

/* ---- client.c ---- */

/* References on the client (see kvt_client.refs). */
kvt_client *client_ref(kvt_client *c);
void client_unref(kvt_client *c);

/* ---- pool.c: the pool as this client maps it, and the handles that keep
 * it mapped.  Every function is called with c->lock held. ---- */

/* Map an extent the daemon sent (EXTENT_ADDED); takes fd. */
int pool_map_extent(kvt_client *c, const struct kvt_extent_note *n, int fd);
/* Pointer to [offset, offset + bytes) of an extent of the current
 * connection, or NULL; its extent in *ret_e if not NULL. */
void *pool_ptr(kvt_client *c, uint32_t id, uint64_t offset, uint64_t bytes,
	       struct mapped_extent **ret_e);
/* Whether an extent id is mapped at all in the current connection. */
bool pool_known(kvt_client *c, uint32_t id);
/* Around the handshake of a new connection: its extents are compared
 * with the previous connection's to tell a restarted daemon from the
 * same one.  end() returns true for the same daemon. */
void pool_reconnect_begin(kvt_client *c);
void pool_reconnect_fail(kvt_client *c);
bool pool_reconnect_end(kvt_client *c);
/* Unmap everything; forget every handle. */
void pool_free(kvt_client *c);

/* Room for n more held handles, so that pool_hold cannot fail. */
int pool_held_reserve(kvt_client *c, uint32_t n);
/* Whether a handle value is held from an earlier daemon instance. */
bool pool_held_old(kvt_client *c, uint64_t handle);
/* Record a handle just taken from the current daemon, its pointer in e. */
void pool_hold(kvt_client *c, uint64_t handle, struct mapped_extent *e,
	       enum held_kind kind);
/* Where a handle comes from (enum held_where); its kind in *ret_kind. */
int pool_held_find(kvt_client *c, uint64_t handle, enum held_kind *ret_kind);
/* Forget a held handle: it was given back. */
void pool_unhold(kvt_client *c, uint64_t handle);
/* Remember a give-back for when the daemon is back. */
int pool_defer(kvt_client *c, uint64_t handle, uint16_t op);
