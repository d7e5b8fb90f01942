/* SPDX-License-Identifier: Apache-2.0 */
/* The daemon's event loop: the listening socket, sessions and processes. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>
#include <sys/types.h>
#include <systemd/sd-event.h>

#include "config.h"
#include "keep.h"
#include "kvt-proto.h"
#include "pool.h"
#include "store.h"
#include "turns.h"

struct metrics_http;
struct nvme;
struct remote;
struct session;
struct process;

struct manager_counters {
	uint64_t accepted;
	uint64_t refused;   /* connections over a limit or of refused uids */
	uint64_t malformed; /* connections closed for a protocol violation */
	uint64_t handshake_timeouts; /* closed for not saying HELLO in time */
	uint64_t requests;
	uint64_t errors;    /* error replies */
	uint64_t quarantined_handles;
	uint64_t accept_failures; /* accept() out of descriptors or memory */
	/* The loop's dispatches (one event source each) and how long the
	 * longest held it: what a neighbour's request may have waited for. */
	uint64_t dispatches;
	uint64_t dispatch_max_ns;
	uint64_t dispatches_slow; /* of MANAGER_SLOW_DISPATCH_NS or more */
	uint64_t memory_waits;    /* requests that waited off the loop for an extent's memory */
	uint64_t erasure_waits;   /* DELETEs and drops answered after NVMe erasures */
};

/* A dispatch this long is a stall a one-key lookup beside it would feel. */
#define MANAGER_SLOW_DISPATCH_NS (5 * 1000 * 1000)

/* A listening socket: the main one, or a tenant's own. */
struct listener {
	int fd;
	bool owned; /* we created the path and unlink it at exit */
	char path[108];
	char tenant[CONFIG_MAX_TENANT_NAME + 1]; /* "" for the main socket */
	sd_event_source *source;
	struct manager *m;
};

#define MANAGER_MAX_LISTENERS (CONFIG_MAX_TENANTS + 1)

struct manager {
	sd_event *event;
	struct config *config;
	struct pool pool;
	struct store store;
	struct nvme *nvme; /* the NVMe tier under the store, NULL without one */
	struct keep keep;  /* what outlives the daemon (keep.h) */
	struct store_adopted adopted; /* of what an earlier daemon kept */
	char exe[256];     /* the binary's path, for an upgrade in place */
	char *const *argv;
	struct remote *remote; /* the remote tier, NULL without one */
	struct metrics_http *metrics; /* [metrics] listen, NULL without one */
	const char *config_path; /* for SIGHUP, NULL on built-in defaults */
	const char *socket_override; /* --socket, kept across reloads */
	struct listener *listeners[MANAGER_MAX_LISTENERS];
	uint32_t n_listeners;
	bool socket_activated;
	sd_event_source *reap_source; /* frees sessions marked dead */
	sd_event_source *status_source; /* periodic STATUS= for systemd */
	sd_event_source *hints_source;  /* retentions lapse (store_hints_lapse) */
	sd_event_source *ahead_source;  /* an extent made ahead is ready */
	/* Out of descriptors: the listeners are off until one is freed. */
	bool accept_paused;
	sd_event_source *accept_retry; /* checks for free descriptors */
	uint64_t accept_logged_usec;   /* when the last pause was logged */
	uint64_t accept_unlogged;      /* failures since, not logged */
	bool accept_pause_logged;      /* log the resume too */
	bool pidns_refusal_logged;     /* clients in another pid namespace, no SO_PEERPIDFD */
	bool accept_probe;             /* probe for descriptors before accepting */
	LIST_HEAD(session_list, session) sessions; /* newest first */
	uint32_t n_sessions;
	uint32_t erasure_waiters; /* sessions waiting for NVMe erasures (requests.c) */
	const struct session_ops *session_ops;
	struct turns turns; /* sessions with work left, in turn */
	uint32_t next_session_id;
	LIST_HEAD(, process) processes;
	uint32_t n_processes;
	uint64_t started_usec;
	struct manager_counters c;

	/* Scratch space for one request's decoded arrays and its reply. */
	struct kvt_buf reply;
	struct kvt_slot *slots;
	int32_t *status;
	uint8_t *states;
	struct kvt_handle_arg *handles;
};

int manager_new(struct config *c, struct manager **ret);
/* Before the NVMe tier and the first socket: what an earlier daemon kept
 * (keep.h) adopted into the store, and a ledger for the next one ([pool]
 * keep = yes).  \return 0, or a negative errno that stops the daemon */
int manager_keep(struct manager *m);
void manager_free(struct manager *m);
/* SIGTERM, SIGINT and SIGHUP wait, blocked, for manager_run()'s
 * handlers; SIGPIPE is ignored.  Before the first socket exists, so that a
 * supervisor's SIGTERM is a clean shutdown from then on. */
void manager_block_signals(void);
int manager_listen(struct manager *m);
int manager_run(struct manager *m);
/* Re-read the configuration file and apply what can change live. */
int manager_reload(struct manager *m);

