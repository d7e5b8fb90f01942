/* SPDX-License-Identifier: Apache-2.0 */
/* libkvtier-client internals shared by its source files. */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <sys/types.h>

#include "kvt-proto.h"
#include "kvtier.h"

struct kvt_record; /* the wire record is the public opaque record */

struct mapped_extent {
	uint32_t id;
	uint8_t *base;
	uint64_t size;
	uint64_t slot_bytes;
	uint32_t flags;
};

struct kvt_ns {
	kvt_client *c;
	uint8_t *identity; /* canonical encoding, kept for reconnects */
	uint32_t identity_len;
	uint64_t generation; /* connection the ns_id belongs to */
	kvt_ns_info info;
};

struct kvt_client {
	pthread_mutex_t lock;
	char path[108];
	char name[KVT_MAX_NAME + 1];
	int fd; /* -1 while disconnected */
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
	uint64_t ready_events; /* BLOCK_READY notifications seen */
	uint64_t generation;

	struct kvt_buf out;
	uint8_t *in;
	size_t in_len, in_cap;
	int in_fds[KVT_MAX_FDS * 2];
	unsigned n_in_fds;

	struct mapped_extent *extents;
	uint32_t n_extents;
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

	kvt_client *reg_next; /* registry for fork handling */
};

/* Reply handler: called for each reply to the current request. */
typedef int (*reply_fn)(kvt_client *c, const struct kvt_header *h,
			struct kvt_cursor *cur, void *userdata);

void client_log(kvt_client *c, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
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
/* Pointer to [offset, offset + bytes) of an extent, or NULL. */
void *client_extent_ptr(kvt_client *c, uint32_t id, uint64_t offset,
			uint64_t bytes);
/* Reopen one namespace on the current connection. */
int client_ns_reopen(kvt_client *c, kvt_ns *ns);
