/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libkvtier-client: the engine-side library of kvtier.
 *
 * An engine connects to kvtierd, opens a namespace that describes its model
 * and KV geometry, and then stores and loads blocks.  Block payloads move
 * through shared memory that the library maps; only control messages cross
 * the socket.
 *
 * Conventions: every function that can fail returns 0 (or a count) on
 * success and a negative errno on failure.  Handles are opaque.  The header
 * is usable from C89 compilers that provide <stdint.h> and from FFI binders
 * (no bool, no off_t, no bit fields).
 */
#ifndef KVTIER_H
#define KVTIER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "kvtier-layout.h" /* defines KVT_EXPORT */

#define KVT_KEY_BYTES 32

/* ------------------------------------------------------------------ */
/* Version                                                            */
/* ------------------------------------------------------------------ */

/** \return the library version as "MAJOR.MINOR.PATCH"; never NULL. */
KVT_EXPORT const char *kvt_version(void);

/** \return the newest wire protocol version this library speaks. */
KVT_EXPORT uint32_t kvt_protocol_version(void);

/* ------------------------------------------------------------------ */
/* Block keys                                                         */
/* ------------------------------------------------------------------ */

/* The block keys kvt_hash_block makes, announced in every namespace's
 * identity (docs/protocol.md §3): blocks stored under another scheme are
 * in other namespaces, and miss. */
#define KVT_KEY_SCHEME 2

/**
 * Key of one block: SHA-256(parent ‖ tokens as u32 little-endian ‖ extra),
 * the same as SGLang's page hash where there is no extra.
 *
 * \param parent     key of the previous block, or NULL for the first block
 *                   of a sequence (nothing is hashed before its tokens)
 * \param tokens     [n_tokens] token ids of this block
 * \param extra      optional bytes mixed into this block (LoRA id,
 *                   multimodal hashes, a salt); may be NULL when extra_len 0
 * \param ret_key    [32] receives the key
 * \return 0 or a negative errno
 */
KVT_EXPORT int kvt_hash_block(const uint8_t *parent, const uint32_t *tokens,
			      size_t n_tokens, const void *extra,
			      size_t extra_len, uint8_t *ret_key);

/**
 * Keys of every full block of a token sequence, chained from parent.
 * A trailing partial block gets no key.
 *
 * \param parent       key before tokens[0], or NULL at the start of a sequence
 * \param tokens       [n_tokens]
 * \param block_tokens tokens per block (> 0)
 * \param extra        mixed into the first block only (salt, LoRA id)
 * \param ret_keys     [max_keys * 32] receives the keys, back to back
 * \return the number of keys written (n_tokens / block_tokens, at most
 *         max_keys) or a negative errno
 */
KVT_EXPORT int kvt_hash_chain(const uint8_t *parent, const uint32_t *tokens,
			      size_t n_tokens, uint32_t block_tokens,
			      const void *extra, size_t extra_len,
			      uint8_t *ret_keys, size_t max_keys);

/* Engine-side paged layouts: kvt_layout, kvt_layout_gather/scatter
 * (kvtier-layout.h, the kernels' own header). */

/* ------------------------------------------------------------------ */
/* Connection                                                         */
/* ------------------------------------------------------------------ */

typedef struct kvt_client kvt_client;
typedef struct kvt_ns kvt_ns;

/** Log levels handed to a kvt_log_fn (syslog numbering). */
#define KVT_LOG_ERR 3
#define KVT_LOG_WARNING 4
#define KVT_LOG_INFO 6
#define KVT_LOG_DEBUG 7

typedef void (*kvt_log_fn)(int level, const char *message, void *userdata);

/**
 * The socket a client uses when none is given: $KVTIER_SOCKET, else
 * /run/kvtierd/kvtierd.sock for root and $XDG_RUNTIME_DIR/kvtierd/kvtierd.sock
 * (or /tmp/kvtierd-UID/kvtierd.sock) for others, as kvtierd's own default;
 * for others, /run/kvtierd/kvtierd.sock when that socket exists and theirs
 * does not (the node's daemon under systemd, for the group kvtier).
 * \return a static string; never NULL.
 */
KVT_EXPORT const char *kvt_default_socket(void);

/**
 * Connect to kvtierd, negotiate the protocol and map the tenant's pool.
 *
 * The connection is close-on-exec and is dropped in a forked child (the
 * child must connect anew).  When the daemon goes away, calls report misses
 * (lookups) or -ENOTCONN (stores) and the library reconnects with backoff,
 * reopening its namespaces; see "Reconnecting" below for what becomes of
 * handles and pointers.  A client may be shared by threads: every call
 * takes the client's lock.
 *
 * \param socket_path  NULL for kvt_default_socket()
 * \param name         a label for kvtierctl clients (at most 64 bytes)
 * Every call waits at most $KVTIER_TIMEOUT_MS (default 30000) for the
 * daemon; a daemon that does not answer in time counts as gone.
 *
 * \return 0 or a negative errno; kvt_connect_error() says why.
 */
KVT_EXPORT int kvt_client_connect(const char *socket_path, const char *name,
				  kvt_client **ret);

/** Look, don't store: the daemon sends no pool extents (nothing is mapped)
 * and refuses namespaces, so no tenant is created for the caller.  For
 * monitoring tools such as kvtierctl. */
#define KVT_CONNECT_OBSERVER 0x1

/**
 * Options of kvt_client_connect_opts.  Zero-initialise it and set size to
 * sizeof(kvt_connect_opts): fields are only ever appended.
 */
typedef struct kvt_connect_opts {
	uint32_t size;
	uint32_t flags;          /* KVT_CONNECT_* */
	const char *socket_path; /* NULL: kvt_default_socket() */
	const char *name;        /* label in kvtierctl clients, <= 64 bytes */
	const char *pci_bus_id;  /* the GPU this process copies to, e.g.
				  * "0000:3b:00.0": its pool slots come from
				  * that GPU's NUMA node first; NULL if none */
} kvt_connect_opts;

/** kvt_client_connect with options.  \return 0 or a negative errno */
KVT_EXPORT int kvt_client_connect_opts(const kvt_connect_opts *opts, kvt_client **ret);

/** \return the NUMA node the daemon places this client's slots on, or -1. */
KVT_EXPORT int kvt_client_numa_node(kvt_client *c);

/**
 * Why the last kvt_client_connect() on this thread failed, e.g. the
 * daemon's refusal ("uid 1000 already has 256 connections ...").
 * \return a thread-local string; "" after a successful connect.
 */
KVT_EXPORT const char *kvt_connect_error(void);

/**
 * Close the connection and unmap the pool (every pointer the client handed
 * out is invalid from here).  c must not be used afterwards.  Namespaces
 * still open on c stay valid objects, and each must still be closed with
 * kvt_ns_close, before or after this call, from any thread: until then
 * every call on them returns -ENOTCONN (kvt_ns_get_info still answers).
 * NULL is ignored.
 */
KVT_EXPORT void kvt_client_free(kvt_client *c);

/** Install a log handler for this client (NULL: silent, the default). */
KVT_EXPORT void kvt_client_set_log(kvt_client *c, kvt_log_fn fn, void *userdata);

/** Log handler for calls without a client (kvt_client_connect). */
KVT_EXPORT void kvt_set_default_log(kvt_log_fn fn, void *userdata);

/**
 * The daemon's reason for the last refused call on this thread's view of
 * c, e.g. "3 keys in one request; the limit is 2 ...".
 * \return a string owned by c, valid until the next call; "" if none.
 */
KVT_EXPORT const char *kvt_client_error(kvt_client *c);

/** \return 1 when connected now, 0 while the daemon is away. */
KVT_EXPORT int kvt_client_connected(kvt_client *c);

/*
 * Reconnecting.  A call that finds the daemon gone returns a miss or
 * -ENOTCONN; a later call reconnects, on whichever thread makes it, while
 * other threads may be using pointers the client handed out.  The library
 * tells two cases apart by the pool memory the new connection receives:
 *
 * - The same daemon (the connection was lost, e.g. to a reply timeout):
 *   nothing changes.  Handles stay valid, pointers keep pointing at the
 *   same memory, and a release or abort made while the daemon was away is
 *   sent to it once it answers.
 * - A restarted daemon: blocks, handles and pool of the old one are gone.
 *   Every pointer from kvt_reserve or kvt_acquire stays mapped, to the old
 *   memory, until its handle is given back: a lease keeps its bytes, a
 *   reservation may still be written (into memory no daemon reads).  Giving
 *   back such a handle never reaches the new daemon, where the same value
 *   may name another block: kvt_release and kvt_abort end it with status 0,
 *   kvt_commit with -ESTALE ("the daemon restarted; the block was not
 *   stored").  The memory of the old daemon is unmapped once its last
 *   handle is back.  A pointer from kvt_client_map stays readable until
 *   kvt_client_free, but reads zeros once nothing holds the old memory.
 *
 * These hold for handles taken by this client.  A handle taken by another
 * process (the scheduler/worker split) is passed to the daemon as it is:
 * this library cannot tell whether it came from the daemon it talks to.
 * Handles and (extent_id, offset) pairs are valid only on the daemon that
 * issued them; processes that pass them to each other must not use those
 * taken before a restart, and only the process that took a handle can tell
 * (there a commit of it says -ESTALE).  A process whose handles another process gives back may keep,
 * after a restart, old memory those handles point into mapped until
 * kvt_client_free (the library cannot see that they were given back).
 */

/** One empty request and its reply.  \return 0 or a negative errno. */
KVT_EXPORT int kvt_client_ping(kvt_client *c);

/* ------------------------------------------------------------------ */
/* Namespaces                                                         */
/* ------------------------------------------------------------------ */

#define KVT_ATTN_MHA 0 /* MHA and GQA */
#define KVT_ATTN_MLA 1 /* one latent per token, stored once for all ranks */
#define KVT_ATTN_SWA 2 /* sliding window */

/** One group of layers with the same attention geometry. */
typedef struct kvt_layer_group {
	uint32_t n_layers;
	uint32_t attn;         /* KVT_ATTN_* */
	uint32_t window;       /* KVT_ATTN_SWA: tokens; else 0 */
	uint32_t planes;       /* 2 (K and V) or 1 (MLA) */
	uint32_t kv_heads;     /* total over all tensor-parallel ranks */
	uint32_t head_bytes;   /* head_dim * bytes per element */
	uint32_t dtype;        /* engine's dtype code (part of the identity) */
	uint32_t scale_layout; /* quantisation scales, 0 = none */
} kvt_layer_group;

/**
 * Everything that makes two caches interchangeable.  Every field is part of
 * the namespace identity: change any one and no block is shared.
 */
typedef struct kvt_ns_desc {
	const char *model;            /* model name, 1..256 bytes */
	const uint8_t *weights;       /* weights fingerprint, 0..64 bytes */
	uint32_t weights_len;
	uint32_t layer_first;         /* pipeline stage: layers [first, end) */
	uint32_t layer_end;
	uint32_t tp_size;             /* tensor-parallel ranks (shards) */
	uint32_t cp_size;             /* context-parallel size, 1 if none */
	uint32_t block_tokens;        /* tokens per block */
	uint32_t n_groups;
	const kvt_layer_group *groups; /* [n_groups], in layer order */
	const uint8_t *salt;          /* narrows sharing; 0..64 bytes */
	uint32_t salt_len;
	uint32_t codec;               /* KVT_CODEC_*: blocks stored quantised
				       * (kvtier-layout.h); 0 = as the cache
				       * holds them */
} kvt_ns_desc;

/** Geometry the daemon derived from a namespace. */
typedef struct kvt_ns_info {
	uint32_t ns_id;
	uint32_t shards;       /* tensor-parallel shards per block */
	uint32_t block_tokens;
	uint32_t codec;        /* KVT_CODEC_* the blocks are stored in */
	uint64_t shard_bytes;  /* bytes one rank stores per block */
	uint64_t shard_stride;
	uint64_t block_bytes;  /* slot size: all shards */
	uint64_t bytes_per_token; /* all shards */
} kvt_ns_info;

/**
 * Open (or join) a namespace.  It refers to c until it is closed, and must
 * be closed with kvt_ns_close, before or after kvt_client_free(c).
 * \return 0 or a negative errno.
 */
KVT_EXPORT int kvt_ns_open(kvt_client *c, const kvt_ns_desc *desc, kvt_ns **ret);
/** Forget a namespace handle (blocks stay in the daemon); also after its
 * client was freed.  NULL ignored. */
KVT_EXPORT void kvt_ns_close(kvt_ns *ns);
/** The namespace's geometry (also after its client was freed).
 * \return 0 or -EINVAL */
KVT_EXPORT int kvt_ns_get_info(const kvt_ns *ns, kvt_ns_info *ret);

/* ------------------------------------------------------------------ */
/* Blocks                                                             */
/* ------------------------------------------------------------------ */

/** Per-key states from kvt_lookup. */
#define KVT_MISS 0
#define KVT_HOST 1    /* resident in host memory */
#define KVT_DISK 2    /* on NVMe or the remote tier; staging has begun */
#define KVT_PENDING 3 /* being written; not yet visible */

#define KVT_LOOKUP_TOUCH 1 /* count the hits as uses for eviction */

/**
 * Look up keys[n] (32 bytes each, back to back).
 * \param ret_states  [n] KVT_MISS/HOST/DISK/PENDING, or NULL
 * \return the number of leading hits (what prefix caching can reuse), or a
 *         negative errno.  While the daemon is away: 0 and all misses.
 *         After kvt_client_free of the namespace's client: -ENOTCONN, as
 *         every call on the namespace.
 */
KVT_EXPORT int kvt_lookup(kvt_ns *ns, const uint8_t *keys, size_t n,
			  uint32_t flags, uint8_t *ret_states);

/**
 * A reserved or acquired shard of a block.  handle, extent_id and offset
 * can be passed to another process of the same tenant (the scheduler pins,
 * a worker copies), which finds the memory with kvt_client_map(); they
 * are valid only on the daemon that issued them (see "Reconnecting").
 */
typedef struct kvt_slot_ref {
	int32_t status;     /* 0 or a negative errno for this key */
	uint32_t extent_id;
	uint64_t handle;
	uint64_t offset;    /* of the shard in its extent */
	uint64_t bytes;     /* shard bytes */
	void *ptr;          /* the shard in this process, or NULL */
} kvt_slot_ref;

/**
 * Reserve this rank's shard of each key for writing.  Status per key:
 * 0, -EEXIST (already stored), -EBUSY (this shard is being written by
 * someone else), -ENOSPC (no room even after eviction), -ENOBUFS (too many
 * open handles, or, after a daemon restart, the new daemon's handle has
 * the value of one this client still holds from the old daemon: give the
 * old ones back), -ENOMEM (the daemon is out of memory).  Until committed
 * the block is invisible; ptr stays valid until the commit or abort, on
 * any thread, across reconnects (see "Reconnecting": after a restart the
 * commit says -ESTALE).
 * \return the number reserved or a negative errno (-ENOTCONN while the
 * daemon is away).
 */
KVT_EXPORT int kvt_reserve(kvt_ns *ns, uint32_t shard, const uint8_t *keys,
			   size_t n, kvt_slot_ref *ret);

/**
 * Commit reservations: success[i] non-zero when handle i's bytes are all
 * written, zero when the copy failed (the block is dropped).  A block is
 * visible once every shard is committed.  ret_status[i]: 0, -ENOENT (no
 * such handle), -EINVAL (a lease, not a reservation), -ECANCELED (the
 * block was dropped meanwhile), -ESTALE (taken from a daemon that has
 * restarted since: the block was not stored, the handle is ended),
 * -ENOTCONN (the daemon is away: the reservation is still the caller's, to
 * commit again or abort).  Commit only after the bytes are written: a
 * committed block is served to every process of the tenant.  Pass
 * ret_status: the return value does not say which blocks were stored.
 * \return 0, or a negative errno for the whole call (-ENOTCONN when some
 *         handle could not reach the daemon)
 */
KVT_EXPORT int kvt_commit(kvt_client *c, const uint64_t *handles,
			  const uint8_t *success, size_t n, int32_t *ret_status);
/**
 * Give reservations back unwritten (their blocks are dropped).
 * ret_status[i]: 0, -ENOENT, -EINVAL (a lease), -ECANCELED (the block was
 * dropped already).  A reservation of a daemon
 * that has restarted since ends here with 0; one given back while the
 * daemon is away also gets 0 and reaches the daemon when it answers again.
 * ret_status may be NULL.
 * \return 0 or a negative errno for the whole call
 */
KVT_EXPORT int kvt_abort(kvt_client *c, const uint64_t *handles, size_t n,
			 int32_t *ret_status);

/**
 * Lease resident blocks for reading; they are not evicted until released.
 * Status per key: 0, -ENOENT (miss), -EAGAIN (not yet resident), -ENOBUFS
 * (too many open handles; also as for kvt_reserve after a restart), -ENOMEM.
 * ptr keeps the block's bytes until the release, on any thread, across
 * reconnects (see "Reconnecting").  Release only after the copy out has
 * completed: the slot may be reused the moment it is released.
 * \return the number acquired or a negative errno
 */
KVT_EXPORT int kvt_acquire(kvt_ns *ns, uint32_t shard, const uint8_t *keys,
			   size_t n, kvt_slot_ref *ret);
/**
 * End leases.  ret_status[i]: 0, -ENOENT (no such handle), -EINVAL (a
 * reservation).  A lease of a daemon that has restarted since ends here
 * with 0; one released while the daemon is away also gets 0 and reaches
 * the daemon when it answers again.  Another process's lease while the
 * daemon is away: -ENOTCONN.  ret_status may be NULL.
 * \return 0 or a negative errno for the whole call (-ENOTCONN when some
 *         handle could not reach the daemon)
 */
KVT_EXPORT int kvt_release(kvt_client *c, const uint64_t *handles, size_t n,
			   int32_t *ret_status);

/** Mark blocks used.  \return how many were resident, or a negative errno */
KVT_EXPORT int kvt_touch(kvt_ns *ns, const uint8_t *keys, size_t n);
/**
 * Delete blocks.  The reply comes once their NVMe copies are erased, so
 * that no restart brings a deleted block back; a block whose copy could
 * not be erased (an I/O error: it may come back) is not counted.
 * \return how many existed and are deleted, -EAGAIN when the daemon is
 *         still recovering its NVMe tier (the keys it refused for that
 *         reason are not deleted: delete them again once it has
 *         finished), or another negative errno
 */
KVT_EXPORT int kvt_delete(kvt_ns *ns, const uint8_t *keys, size_t n);

/*
 * Lifecycle hints: what the engine knows that block history cannot.  When
 * host memory is full the daemon evicts blocks of a lower priority first:
 * those whose request or session ended, then the ones nobody said
 * anything about (its eviction policy decides among them), then retained
 * ones.  Hints only order evictions: no hint makes a block outlive its
 * tenant's quota, and a lookup finds a block whatever its priority.
 * docs/engines.md has the figures that say which hints pay.
 */
#define KVT_PRIORITY_DEFAULT 35 /* a block nobody said anything about */
#define KVT_PRIORITY_MAX 100
#define KVT_HINT_MAX_DURATION ((1u << 21) - 1) /* seconds: 24 days */
#define KVT_END_SESSION 1 /* kvt_end: the session is over, not only the request */

/**
 * Retain stored blocks at a priority (0 to 100, as TensorRT-LLM's
 * retention configuration): a system prompt every request shares, say, at
 * 90; a conversation waiting for its next turn at 60.  After duration_s
 * seconds (0: until changed) raised blocks return to KVT_PRIORITY_DEFAULT.
 * A priority below the default makes blocks go first, until a hit or
 * another hint (a duration does not apply to it).
 * \return how many keys were stored (the others are not hinted), or a
 *         negative errno (-EINVAL: priority or duration out of range)
 */
KVT_EXPORT int kvt_retain(kvt_ns *ns, const uint8_t *keys, size_t n, unsigned priority,
			  unsigned duration_s);
/**
 * The request (flags 0) or the session (KVT_END_SESSION) that used these
 * blocks has ended.  End of a request: the blocks nobody has hit since
 * they were stored and nobody retained are its own, and go first.  End of
 * a session: every block named goes first, so name only the session's own
 * (what it shares with others, retain instead).  A later hit on a block
 * that went first undoes it.  In conversations whose next turn comes, an
 * end of request without a retention sends that turn's blocks first: on
 * the traces of docs/workload.md it costs hits; end the session instead.
 * \return how many keys were stored, or a negative errno
 */
KVT_EXPORT int kvt_end(kvt_ns *ns, const uint8_t *keys, size_t n, unsigned flags);

/**
 * Stage blocks that are on NVMe (KVT_DISK) into host memory ahead of use;
 * kvt_lookup reports them KVT_HOST once there.
 * \return how many are in host memory already, or a negative errno
 */
KVT_EXPORT int kvt_prefetch(kvt_ns *ns, const uint8_t *keys, size_t n);

/**
 * Wait until the leading hits of keys are all in host memory: those on
 * NVMe are staged, and the daemon says once when all of them have landed
 * (or failed), so the caller sleeps on the socket instead of polling, and
 * the keys are looked up once more.  A daemon without that notice
 * announces each block as it lands; the keys are then looked up again once
 * as many notices have come as half of those still on NVMe, so a batch of
 * n blocks costs about log2(n) look-ups rather than n.  Wait for a
 * request's whole prefix at once, then load it with one call.
 * \return the number of leading hits (all KVT_HOST, ready to acquire), 0
 *         while the daemon is away, or a negative errno (-ETIMEDOUT after
 *         timeout_ms with some still on NVMe)
 */
KVT_EXPORT int kvt_wait_resident(kvt_ns *ns, const uint8_t *keys, size_t n,
				 uint32_t timeout_ms);

/**
 * Memory of a shard named by another process: extent_id and offset as
 * returned by kvt_reserve/kvt_acquire there, on the daemon this client
 * talks to now.  The pointer never faults until kvt_client_free; after a
 * daemon restart it reads the old daemon's memory while this client holds
 * handles in it, zeros after (see "Reconnecting").
 * An extent announced since this client last heard from the daemon is
 * found (one round trip).
 * \return 0 or -ENOENT (no such extent) / -EINVAL (out of range)
 */
KVT_EXPORT int kvt_client_map(kvt_client *c, uint32_t extent_id,
			      uint64_t offset, uint64_t bytes, void **ret_ptr);

/**
 * Store whole shards from caller memory: reserve, copy, commit.
 * \param srcs        [n] shard_bytes each
 * \param ret_status  [n] per key (see kvt_reserve; -EEXIST counts as
 *                    stored), or NULL
 * \return the number of keys now stored, or a negative errno
 */
KVT_EXPORT int kvt_store(kvt_ns *ns, uint32_t shard, const uint8_t *keys,
			 size_t n, const void *const *srcs, int32_t *ret_status);

/**
 * Load whole shards into caller memory: acquire, copy, release.
 * \param dsts        [n] shard_bytes each; untouched for a miss
 * \return the number loaded, or a negative errno
 */
KVT_EXPORT int kvt_load(kvt_ns *ns, uint32_t shard, const uint8_t *keys,
			size_t n, void *const *dsts, int32_t *ret_status);

/** kvt_store from an engine's paged cache (see kvt_layout_gather). */
KVT_EXPORT int kvt_store_paged(kvt_ns *ns, uint32_t shard,
			       const kvt_layout *layout, const uint8_t *keys,
			       size_t n, const int64_t *indices,
			       int32_t *ret_status);
/** kvt_load into an engine's paged cache (see kvt_layout_scatter). */
KVT_EXPORT int kvt_load_paged(kvt_ns *ns, uint32_t shard,
			      const kvt_layout *layout, const uint8_t *keys,
			      size_t n, const int64_t *indices,
			      int32_t *ret_status);

/**
 * kvt_store_paged for a namespace whose layer groups differ in geometry
 * (sliding-window beside full attention, MLA beside MHA), or whose engine
 * keeps a block table per group: one layout and one set of indices per
 * group, in the namespace's group order.  A block is each group's block
 * (kvt_layout_block_bytes of its layout) after the other's, which must add
 * up to the namespace's shard.  With KVT_INDEX_SLOT a group's block may be
 * all padding (-1): a store gathers zeros there, so store only blocks
 * whose every group holds its pages; a load leaves that group's pages
 * alone (a sliding-window group's pages that left the window).
 * \return as kvt_store_paged; -EINVAL for n_groups 0 or above 16, or
 *         layouts whose blocks do not add up to the shard
 */
KVT_EXPORT int kvt_store_paged_groups(kvt_ns *ns, uint32_t shard, uint32_t n_groups,
				      const kvt_layout *const *layouts, const uint8_t *keys,
				      size_t n, const int64_t *const *group_indices,
				      int32_t *ret_status);
/** kvt_load_paged for layer groups (see kvt_store_paged_groups). */
KVT_EXPORT int kvt_load_paged_groups(kvt_ns *ns, uint32_t shard, uint32_t n_groups,
				     const kvt_layout *const *layouts, const uint8_t *keys,
				     size_t n, const int64_t *const *group_indices,
				     int32_t *ret_status);

/**
 * Evict namespace ns_id of tenant tenant_id (ids as in the
 * "tenant" and "namespace" records).  Needs root or kvtierd's uid.
 * \param drop  non-zero: from every tier; zero: from host memory, where
 *              blocks also on NVMe stay there (the next lookup stages
 *              them) and the rest is dropped (with one tier the two are
 *              the same)
 * \return the number of blocks affected, or a negative errno (-EPERM,
 *         -ENOENT)
 */
KVT_EXPORT int64_t kvt_admin_evict(kvt_client *c, uint32_t tenant_id, uint32_t ns_id,
				   int drop);

/* ------------------------------------------------------------------ */
/* Statistics                                                         */
/* ------------------------------------------------------------------ */

#define KVT_STATS_DAEMON 0x1
#define KVT_STATS_TENANTS 0x2
#define KVT_STATS_NAMESPACES 0x4
#define KVT_STATS_CLIENTS 0x8
#define KVT_STATS_ALL 0xf

#define KVT_FIELD_U64 1
#define KVT_FIELD_I64 2
#define KVT_FIELD_STR 3

typedef struct kvt_record kvt_record;

/** Called once per record; a non-zero return stops the iteration.  r is
 * valid only during the call: copy what you keep. */
typedef int (*kvt_record_fn)(const kvt_record *r, void *userdata);

/**
 * Fetch records ("daemon", "tenant", "namespace", "client") from the daemon.
 * Root and the daemon's own uid see every tenant; others see their own.
 * \return 0 or a negative errno
 */
KVT_EXPORT int kvt_stats(kvt_client *c, uint32_t what, kvt_record_fn fn,
			 void *userdata);
KVT_EXPORT const char *kvt_record_kind(const kvt_record *r);
KVT_EXPORT uint32_t kvt_record_n_fields(const kvt_record *r);
KVT_EXPORT const char *kvt_record_field_name(const kvt_record *r, uint32_t i);
KVT_EXPORT int kvt_record_field_type(const kvt_record *r, uint32_t i);
KVT_EXPORT uint64_t kvt_record_field_u64(const kvt_record *r, uint32_t i);
KVT_EXPORT const char *kvt_record_field_str(const kvt_record *r, uint32_t i);
/** \return 0 and the value, or -ENOENT if r has no such numeric field */
KVT_EXPORT int kvt_record_get_u64(const kvt_record *r, const char *name,
				  uint64_t *ret);
/** \return the string field, or NULL */
KVT_EXPORT const char *kvt_record_get_str(const kvt_record *r, const char *name);

#ifdef __cplusplus
}
#endif

#endif
