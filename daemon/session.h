/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One client connection: its life, its socket's events and its output
 * limits; its requests are requests.c's.
 * A protocol violation closes this connection and nothing else; a request
 * the daemon refuses gets an error reply with a reason and the connection
 * stays.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>
#include <sys/types.h>
#include <systemd/sd-event.h>

#include "conn.h"
#include "kvt-proto.h"
#include "settle.h"
#include "tenancy.h"

struct manager;
struct ns;
struct process;
struct session;

/* What a session cannot do itself, reached through the manager
 * (m->session_ops) rather than by name: the manager and the request
 * handlers call sessions, never the other way round. */
struct session_ops {
	/* A session was marked dead: free it from the event loop. */
	void (*dead)(struct manager *m);
};
struct tenant;
struct extent;

/* What a session's next request waits for. */
enum session_wait {
	SESSION_RUNS,
	SESSION_WAITS_MEMORY,   /* host memory being made */
	SESSION_WAITS_ERASURES, /* the erasure of NVMe copies it deleted */
};

struct session {
	uint32_t id;
	struct kvt_conn conn; /* the socket, its input and its queued replies */
	uid_t uid;
	gid_t gid;
	pid_t pid;
	struct process *process;
	struct tenant *tenant; /* once the tenant exists */
	struct tenant_choice choice; /* which tenant, from HELLO on */
	char via_tenant[CONFIG_MAX_TENANT_NAME + 1]; /* tenant of the listening
						       * socket, "" for the main one */
	char name[KVT_MAX_NAME + 1];
	int numa_node; /* of the client's GPU, -1 unknown */
	char pci_bus_id[KVT_MAX_BUS_ID + 1];
	uint16_t version;
	uint64_t features;
	bool hello;  /* HELLO done */
	bool admin;  /* from HELLO on: sees every tenant, may evict */
	bool pool;   /* wants the pool extents (not an observer) */
	bool dead;
	bool paused; /* not reading: too many reply bytes queued */
	bool queued; /* waiting for its next turn (turns.h), not reading */
	uint8_t waiting; /* enum session_wait: its next request waits, and it
			  * reads nothing meanwhile (requests.c) */
	bool retried;     /* that request was counted when it first came */
	void *work;  /* a request under way across turns: requests.c's, one
		      * allocation, freed with the session */

	sd_event_source *io;
	sd_event_source *hello_timer; /* until HELLO */
	uint64_t requests;
	uint64_t ready_until; /* BLOCK_READY wanted until then (usec): set
			       * when it was told a block is on NVMe */
	struct settle_set settles; /* LOOKUPs waiting to be told SETTLED */
	uint64_t connected_usec;
	struct manager *m;
	LIST_ENTRY(session) link; /* on the manager's sessions */
	TAILQ_ENTRY(session) turn_link; /* on the turns' queue while queued */
};

int session_new(struct manager *m, int fd, struct session **ret);
void session_free(struct session *s);
/* Mark for closing; freed from the manager's reap callback
 * (session_ops.dead). */
void session_kill(struct session *s, const char *why);
/* Its socket's events, after it joined or left the turns' queue. */
void session_settled(struct session *s);
/* Queue a finished message.  fds are borrowed, not duplicated: until they
 * have been sent they must stay open and mean the same file, for as long
 * as the session lives.  Extent descriptors, the only ones sent, do: an
 * extent is freed only at shutdown, after every session. */
int session_send(struct session *s, const struct kvt_buf *msg, const int *fds,
		 unsigned n_fds);
void session_announce_extent(struct session *s, const struct extent *e);
/* Root, the daemon's own uid or a member of [daemon] admin_groups, on the
 * main socket: sees every tenant and may evict.  Through a tenant's own
 * socket nobody is, root in a container included. */
bool session_is_admin(const struct session *s);
/* The client was told a block is on NVMe: it hears of staged blocks for
 * a while. */
void session_want_ready(struct session *s);
/* Whether the client should hear of blocks staged from NVMe now. */
bool session_wants_ready(const struct session *s);
/* A LOOKUP with KVT_LOOKUP_SETTLED answered DISK for some of keys
 * (states): the client is told once, with SETTLED, when all of those have
 * settled; or, when it has too many such LOOKUPs waiting, of each block
 * (session_want_ready()). */
void session_watch_settle(struct session *s, struct ns *ns, uint32_t ns_id, uint64_t request_id,
			  const uint8_t *keys, const uint8_t *states, uint32_t n);
/* A block of ns staged or fetched has settled (in host memory, or gone). */
void session_block_settled(struct session *s, struct ns *ns);
