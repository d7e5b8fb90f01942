/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The ledger: what the host tier holds, written where it outlives the
 * daemon process, so that a daemon started anew on the same pool extents
 * adopts their blocks instead of recomputing them (store-adopt.c).
 *
 * Three kinds of daemon-private memfds, never sent to a client:
 *
 *   "ledger"      the root: a header, then one record per namespace
 *                 (tenant name and canonical identity), appended as they
 *                 are opened; a namespace is named by its record's number
 *   "slots.N"     beside pool extent N ("pool.N"): the extent's own
 *                 description (tenant, id, slot size, ...), then one
 *                 64-byte record per slot: the committed block there
 *                 (namespace number and key), or none
 *   "handles.T"   of tenant T: one 64-byte record per handle index: the
 *                 handle's id (so its generation survives), a lease or a
 *                 reservation of which extent and slot, and its owner
 *                 process (pid and start time)
 *
 * Every record carries an XXH3-64 of its other bytes and is written in one
 * piece by the event loop, the only place that changes the store: a daemon
 * killed in the middle of a write leaves a record that fails its check,
 * and adoption takes it as absent (a miss, never a block it cannot vouch
 * for).  Writing a record is a store to memory, nothing here waits.
 *
 * The memfds are handed to keep.c as they are made (ledger_keep_fn), which
 * gives them, with the extents, to systemd's file descriptor store, and
 * passes them across a re-execution.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LEDGER_RECORD_BYTES 64u
#define LEDGER_HEADER_BYTES 4096u
#define LEDGER_VERSION 1u
/* What a namespace of no record is numbered. */
#define LEDGER_NO_NS UINT32_MAX

/* A memfd of the ledger, mapped into the daemon. */
struct ledger_map {
	int fd;
	uint8_t *map;
	uint64_t size;
};

/* A memfd to keep under that name (keep.c): made now (fresh), or taken
 * over from an earlier daemon; fd stays the ledger's. */
typedef void (*ledger_keep_fn)(void *userdata, const char *name, int fd, bool fresh);

struct ledger {
	struct ledger_map root;
	uint64_t root_used;   /* header and records */
	uint32_t next_no;     /* the next extent's number */
	uint32_t n_ns;
	uint64_t writes;      /* records written since start */
	ledger_keep_fn keep;
	void *userdata;
};

/* What an extent was: enough to adopt it from its memfd alone. */
struct ledger_extent_desc {
	char tenant[32];
	uint32_t id;          /* the tenant's extent id (EXTENT notes) */
	uint64_t slot_bytes;
	uint64_t size;
	uint32_t n_slots;
	uint32_t flags;       /* KVT_EXTENT_* */
	int32_t node, for_node;
};

struct ledger_extent {
	struct ledger_map m;
	uint32_t no;
	uint32_t n_slots;
};

/* A slot's record, as adoption reads it. */
struct ledger_slot {
	uint32_t ns;                /* namespace number */
	uint8_t key[32];
};

enum ledger_handle_kind {
	LEDGER_HANDLE_NONE = 0, /* ended: only its id (generation) counts */
	LEDGER_HANDLE_RESERVATION = 1,
	LEDGER_HANDLE_LEASE = 2,
};

struct ledger_handle {
	uint64_t id;
	uint32_t kind;        /* enum ledger_handle_kind */
	uint32_t shard;
	uint32_t extent_no;   /* of the slot it holds */
	uint32_t slot;
	int32_t pid;          /* owner; 0: none */
	uint64_t start_time;  /* the owner's, in clock ticks since boot */
};

struct ledger_handles {
	struct ledger_map m;
	uint32_t cap;         /* records the memfd has room for */
};

/* The root memfd, new.  \return 0 or a negative errno */
int ledger_new(ledger_keep_fn keep, void *userdata, struct ledger **ret);
/* The root memfd of an earlier daemon: validated, taken over (fd is the
 * ledger's from then on).  -EBADMSG: not a ledger of this version. */
int ledger_adopt(int fd, ledger_keep_fn keep, void *userdata, struct ledger **ret);
void ledger_free(struct ledger *l);

/* A namespace's record.  \return 0 and its number, or a negative errno */
int ledger_ns_add(struct ledger *l, const char *tenant, const uint8_t *identity, uint32_t len,
		  uint32_t *ret_no);
/* The namespaces of an adopted root, in number order: fn's negative return
 * stops the walk with it. */
int ledger_ns_each(const struct ledger *l,
		   int (*fn)(void *userdata, uint32_t no, const char *tenant,
			     const uint8_t *identity, uint32_t len),
		   void *userdata);

/* An extent's memfd, new (pool_fd: the extent's, kept under "pool.N"
 * beside it). */
int ledger_extent_new(struct ledger *l, int pool_fd, const struct ledger_extent_desc *d,
		      struct ledger_extent **ret);
/* That of an earlier daemon, validated and taken over: its description. */
int ledger_extent_adopt(int fd, struct ledger_extent_desc *ret_desc, struct ledger_extent **ret);
void ledger_extent_free(struct ledger_extent *x);
/* The block committed in slot, or none. */
void ledger_slot_set(struct ledger *l, struct ledger_extent *x, uint32_t slot, uint32_t ns,
		     const uint8_t *key);
void ledger_slot_clear(struct ledger *l, struct ledger_extent *x, uint32_t slot);
/* 1 and *ret for a slot whose record holds a block, 0 for none, -EBADMSG
 * for one that fails its check. */
int ledger_slot_get(const struct ledger_extent *x, uint32_t slot, struct ledger_slot *ret);

/* The name tenant's handle memfd is kept under ("handles.T"). */
void ledger_handles_name(const char *tenant, char *buf, size_t size);
/* A tenant's handle memfd, new, or an earlier daemon's taken over. */
int ledger_handles_new(struct ledger *l, const char *tenant, struct ledger_handles **ret);
int ledger_handles_adopt(int fd, struct ledger_handles **ret);
void ledger_handles_free(struct ledger_handles *h);
/* Handle index idx now holds h (a kind of NONE: it ended).  -ENOMEM: the
 * memfd could not grow; the handle is then not kept. */
int ledger_handle_set(struct ledger *l, struct ledger_handles *hs, uint32_t idx,
		      const struct ledger_handle *h);
/* As ledger_slot_get(). */
int ledger_handle_get(const struct ledger_handles *hs, uint32_t idx, struct ledger_handle *ret);

/* Extents numbered so far: the next one's number. */
uint32_t ledger_next_no(const struct ledger *l);
