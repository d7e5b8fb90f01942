/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the remote tier's files share and no one else uses.  remote.c
 * (start, connections, statistics) calls remote-tier.c (the store's view
 * of the tier: fetch rounds, write-back, completions, backoff), remote-io.c
 * and remote-trim.c (the capacity thread); remote-tier.c calls remote-io.c
 * and reports connections back through rt->connected; remote-io.c calls
 * remote-format.c (object names and headers, pure).
 *
 * librados calls back on its own threads.  Those callbacks verify what a
 * read brought (where it landed: the op's own buffer, or the host slot it
 * was read into; against what the loop expected at submission), queue the
 * operation and write the eventfd: the loop alone touches the daemon's
 * state.  The trim thread uses its own cluster calls
 * and atomic counters.
 */
#pragma once

#include <pthread.h>
#include <rados/librados.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>
#include <systemd/sd-event.h>

#include "remote.h"
#include "spill.h"
#include "store.h"

/* Operation buffers kept for the next operation of the same size, up to
 * this many bytes: a fresh one costs a page fault per 4 KiB, as much as
 * the read itself for a 2 MiB block on a slow machine. */
#define REMOTE_BUF_CACHE_BYTES (64ULL << 20)
#define REMOTE_BUF_CACHE 32

/* A key the pool did not have is not asked for again for this long: the
 * lookup that follows a fetch round must see a miss, not start another. */
#define REMOTE_MISS_TTL_USEC (2 * 1000000ULL)
#define REMOTE_MISS_SLOTS 4096
#define REMOTE_QUEUE 4096 /* write-backs waiting for a free operation */
/* Keys of leading runs being fetched, in flight or waiting for a free
 * operation: each is a block without a host slot. */
#define REMOTE_FETCHES 4096
#define REMOTE_BACKOFF_MIN_USEC (500 * 1000ULL)
#define REMOTE_BACKOFF_MAX_USEC (10 * 1000000ULL)
/* Probes failed this many times in a row: the cluster handle is made
 * afresh (its sessions can outlive what the cluster accepts: tickets an
 * OSD started again cannot read). */
#define REMOTE_RECONNECT_PROBES 4
/* The object every node of a tier tries to lock; the holder trims. */
#define REMOTE_TRIM_OBJECT "kvtier.trim"
#define REMOTE_TRIM_LOCK "trim"
/* Object names: 32 hex digits of namespace digest, '.', 64 of key. */
#define REMOTE_OID_LEN (32 + 1 + 64)

struct remote;

/* A leading run a lookup asked the tier for: its keys settle one by one
 * (served or a miss), and the clients told of runs hear once, when the
 * last one has. */
struct remote_run {
	struct ns *ns;
	uint32_t n;       /* keys in the run */
	uint32_t pending; /* of them not settled yet (+1 while run_end() runs) */
	uint32_t served;
	bool confirmed;   /* one of its objects checked: the pool has this
			   * prefix, and a read may evict for its slot */
	uint8_t key[KVT_KEY_SIZE]; /* its first */
};

/* A tenant as one connection serves it: its RADOS namespace. */
struct remote_tenant {
	char name[CONFIG_MAX_TENANT_NAME + 1];
	rados_ioctx_t io; /* namespace = name; NULL until first used */
	struct remote_tenant_stats st;
};

/* One [remote.NAME]: a cluster handle for its user, and its pool. */
struct remote_conn {
	struct remote *rt;
	const struct remote_conf *conf;
	rados_t cluster;     /* set once connected */
	int64_t pool_id;
	enum remote_state state;
	char reason[160];    /* why not up, for STATS and the log */
	bool connecting;     /* the connect thread runs */
	pthread_t connect_thread;
	int connect_result;  /* its result, read when its op comes back */
	uint64_t backoff_usec, retry_at; /* CLOCK_MONOTONIC */
	sd_event_source *retry;
	sd_event_source *probe; /* when degraded: asks the cluster at retry_at */
	unsigned in_flight;
	unsigned probes_failed; /* in a row */
	struct remote_tenant *tenants;
	uint32_t n_tenants;
	struct remote_stats st;
	/* The trim thread (remote-trim.c) */
	pthread_t trim_thread;
	bool trim_running;
	pthread_mutex_t trim_lock;
	pthread_cond_t trim_wake;
	bool trim_stop;
	_Atomic uint64_t trim_passes, trimmed, trimmed_bytes, trim_used, trim_objects;
};

enum rop_kind {
	ROP_READ,
	ROP_WRITE,
	ROP_CONNECT, /* the connect thread finished */
	ROP_PROBE,   /* is a degraded tier's cluster back? */
};

/* One operation on the cluster, from submission to its completion on the
 * loop. */
struct rop {
	struct remote_conn *c;
	enum rop_kind kind;
	rados_completion_t comp;
	rados_write_op_t wop;
	struct remote_tenant *tenant;
	uint32_t tenant_id, ns_id;
	uint8_t key[KVT_KEY_SIZE];
	struct block *b; /* a read's block (kept by BLOCK_IO_FETCH) */
	struct remote_run *run; /* a read's leading run */
	/* A read into b's host slot: the header into buf, the payload into
	 * the slot, one RADOS operation of two extents. */
	bool in_place;
	uint8_t *slot;
	rados_read_op_t rop;
	size_t head_read, body_read;
	int head_rval, body_rval;
	uint8_t tries;   /* a write's earlier failed tries */
	uint8_t *buf;    /* header + payload, the daemon's own memory (a read
			  * in place: the header only) */
	size_t buf_len;
	size_t len;      /* the object: header + payload */
	uint64_t started_usec;
	int result;
	/* A read's object: what its header must say (set on the loop), and
	 * the verdict on it (remote_object_verify() on librados's thread). */
	struct spill_slot_header want;
	int verified;
	TAILQ_ENTRY(rop) done_link;
	LIST_ENTRY(rop) link;
};

TAILQ_HEAD(rop_queue, rop);

struct remote_wb {
	uint32_t tenant_id, ns_id;
	uint8_t key[KVT_KEY_SIZE];
	uint8_t tries; /* writes of it that failed */
};
#define REMOTE_WRITE_TRIES 3

/* A key of a leading run waiting for its read.  A run's keys go out in
 * order as operations free up; one that is not served ends its run. */
struct remote_fetch {
	struct block *b; /* NULL: its run ended */
	struct remote_conn *c;
	struct remote_tenant *t;
	struct remote_run *run;
};

struct remote_miss {
	uint64_t fp;
	uint64_t until_usec;
};

struct remote {
	struct store *store;
	const struct config *config;
	sd_event *event;
	struct remote_conn *conns;
	unsigned n_conns;
	int efd;
	sd_event_source *efd_src;
	bool memory_wait; /* a read done waits for a host slot (remote_memory_ready) */
	pthread_mutex_t lock; /* done and callbacks_pending */
	pthread_cond_t idle;
	struct rop_queue done;
	unsigned callbacks_pending; /* submitted, callback not yet run */
	LIST_HEAD(, rop) ops;        /* submitted, not yet handled on the loop */
	int16_t *conn_of_tenant;     /* by store tenant id: conns index, -1 */
	uint32_t conn_of_cap;
	struct remote_wb *queue;     /* ring of REMOTE_QUEUE */
	uint32_t q_head, q_len;
	struct remote_fetch *fetches; /* ring of REMOTE_FETCHES */
	uint32_t f_head, f_len;
	/* Reads go straight into host slots: no extent can be hugetlb, the
	 * only backing where a librados thread's touch of a page a client
	 * punched would fault (shmem refills it); otherwise they go through
	 * buffers and the guarded copy on the loop. */
	bool in_place;
	struct remote_miss *missed;  /* REMOTE_MISS_SLOTS */
	struct remote_buf {
		uint8_t *p;
		size_t len;
	} bufs[REMOTE_BUF_CACHE];    /* remote-io.c's, on the loop */
	unsigned n_bufs;
	uint64_t buf_bytes;
	/* remote.c's: the connect thread's op came back to the loop; and
	 * a connection that has stopped answering, to be made afresh. */
	void (*connected)(struct rop *op);
	void (*reconnect)(struct remote_conn *c);
};

static inline uint64_t remote_now(const struct remote *rt)
{
	uint64_t now = 0;
	sd_event_now(rt->event, CLOCK_MONOTONIC, &now);
	return now;
}

/* remote-tier.c: the store's view of the tier, completions, backoff */
extern const struct store_remote_ops remote_tier_ops;
/* The eventfd's handler: completions from librados's threads. */
int remote_on_event(sd_event_source *src, int fd, uint32_t revents, void *userdata);
/* Every key still waiting for its read is a miss (shutdown). */
void remote_fetches_end(struct remote *rt);
/* A key of run settled (store_remote_fetched()); the run's last sends
 * the run's notice and frees it. */
void remote_key_settled(struct remote *rt, struct remote_run *run, struct block *b, bool ok);
/* An operation failed (or connecting did): degraded, backing off. */
void remote_conn_failed(struct remote_conn *c, int error, const char *what);

/* remote-format.c (pure) */
void remote_oid(const struct ns *ns, const uint8_t *key, char ret[REMOTE_OID_LEN + 1]);
/* The header of a block's object, into buf[SPILL_SLOT_HEADER_BYTES]. */
int remote_header_encode(const struct ns *ns, const uint8_t *key, const uint8_t *payload,
			 size_t len, uint8_t *buf);
/* The header an object of ns's key with that payload length must have
 * (on the loop: it reads the namespace). */
void remote_object_expect(const struct ns *ns, const uint8_t *key, size_t payload_len,
			  struct spill_slot_header *ret);
/* An object read back: its header is want's (tenant, namespace, key,
 * length), the payload has its checksum.  Touches only its arguments, so
 * any thread may call it.  \return 0; -EBADMSG (a checksum, a foreign
 * header); -ESTALE (another tenant, namespace or key); -ENODATA (short) */
int remote_object_verify(const struct spill_slot_header *want, const uint8_t *obj,
			 size_t obj_len);
/* The same for an object read in two parts: head_len bytes of header at
 * head, body_len of payload at body. */
int remote_object_verify_parts(const struct spill_slot_header *want, const uint8_t *head,
			       size_t head_len, const uint8_t *body, size_t body_len);
/* Both of the above. */
int remote_object_check(const struct ns *ns, const uint8_t *key, const uint8_t *obj,
			size_t obj_len, size_t payload_len);

/* remote-io.c */
int remote_io_init(struct remote *rt);
void remote_io_done(struct remote *rt);
/* An op for c; NULL without memory. */
struct rop *remote_op_new(struct remote_conn *c, enum rop_kind kind, size_t len);
void remote_op_free(struct rop *op);
/* Submit a read of b's object (into slot when not NULL: op->buf takes the
 * header) / a write of b's bytes.  \return 0 or a negative errno (the op
 * is freed) */
int remote_read(struct remote_tenant *t, struct rop *op, const struct ns *ns, uint8_t *slot);
int remote_write(struct remote_tenant *t, struct rop *op, const struct block *b);
/* Stat the trim lock's object: any answer (it may not exist) means the
 * cluster serves again. */
int remote_probe(struct remote_tenant *t, struct rop *op);
/* A thread with every signal blocked (librados's threads inherit it).
 * \return 0 or a negative errno */
int remote_thread_create(pthread_t *ret, void *(*fn)(void *), void *arg);
/* The connect thread is done: hand op to the loop. */
void remote_op_complete(struct rop *op);
/* Wait until every submitted op's callback has run (shutdown). */
void remote_io_drain(struct remote *rt);
/* Take the ops that completed; the caller handles and frees them. */
void remote_io_take(struct remote *rt, struct rop_queue *ret);
/* Put back ops taken and not handled, ahead of the ones completed since
 * (remote_io_kick() has the loop take them again). */
void remote_io_put_back(struct remote *rt, struct rop_queue *q);
/* Have the loop call remote_on_event: there is work that waited. */
void remote_io_kick(struct remote *rt);

/* remote-trim.c */
int remote_trim_start(struct remote_conn *c);
void remote_trim_stop(struct remote_conn *c);
