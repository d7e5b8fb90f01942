/* SPDX-License-Identifier: Apache-2.0 */
/* The daemon's event loop: the listening socket, sessions and processes. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <systemd/sd-event.h>

#include "config.h"
#include "kvt-proto.h"
#include "pool.h"
#include "store.h"

struct session;
struct process;

struct manager_counters {
	uint64_t accepted;
	uint64_t refused;   /* connections over a limit or of refused uids */
	uint64_t malformed; /* connections closed for a protocol violation */
	uint64_t requests;
	uint64_t errors;    /* error replies */
	uint64_t quarantined_handles;
};

struct manager {
	sd_event *event;
	struct config *config;
	struct pool pool;
	struct store store;
	int listen_fd;
	bool socket_activated;
	bool socket_owned; /* we created the path and unlink it at exit */
	sd_event_source *listen_source;
	sd_event_source *reap_source; /* frees sessions marked dead */
	sd_event_source *status_source; /* periodic STATUS= for systemd */
	struct session *sessions;
	uint32_t n_sessions;
	uint32_t next_session_id;
	struct process *processes;
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
void manager_free(struct manager *m);
int manager_listen(struct manager *m);
int manager_run(struct manager *m);
void manager_schedule_reap(struct manager *m);
bool manager_is_admin(const struct manager *m, uid_t uid);
