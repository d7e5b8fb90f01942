/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The block store: tenants, their namespaces, blocks and handles.
 *
 * A block is reserved (invisible) until every tensor-parallel shard of it has
 * been committed; then it is resident and visible to lookups.  Leases pin a
 * resident block; reservations and leases are handles owned by the tenant
 * (any of its connections may use them) and by the process that took them.
 * A block's slot returns to its extent only when no handle refers to it, so a
 * dead client's copies, which can still land, never hit a reused slot.
 *
 * The store decides; it does no socket I/O.  New extents are announced
 * through the extent_added callback before any reply refers to them.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>
#include <sys/types.h>

#include "evict.h"
#include "fragmentation.h"
#include "index.h"
#include "keyhash.h"
#include "kvt-proto.h"
#include "pool.h"
#include "slab.h"
#include "tenancy.h"

struct ledger;
struct ledger_handles;
struct process;
struct spill_region;

enum block_io {
	BLOCK_IO_NONE,
	BLOCK_IO_WRITE, /* being written back to NVMe */
	BLOCK_IO_READ,  /* being staged from NVMe into host memory */
	BLOCK_IO_FETCH, /* being fetched from the remote tier: reserved, and
			 * no client's (store_remote_block()) */
};

/* Where the remote tier stands with a block's key. */
enum block_remote {
	BLOCK_REMOTE_NONE,
	BLOCK_REMOTE_WRITING, /* being written back */
	BLOCK_REMOTE_STORED,  /* written back, or fetched from there */
};

/* How an unindexed block holds its key as being erased (store-erasures.c). */
enum erase_hold {
	ERASE_HOLD_NONE,
	ERASE_HOLD_KEY, /* its key's entry */
	ERASE_HOLD_ALL, /* not recorded (no memory): every key */
};

enum block_state {
	BLOCK_RESERVED,
	BLOCK_RESIDENT,
};

/*
 * A block's copy on NVMe, apart from the block: most blocks of a host tier
 * have none, and every byte of struct block counts a million times.
 */
struct block_disk {
	struct spill_region *region;
	uint32_t slot;
	uint32_t stride;       /* bytes of its slot: what it costs its tenant */
	uint64_t seq;          /* of its write: recovery keeps the newest copy */
	struct evict_node lru; /* on its namespace's disk_lru, coldest last */
	struct block *block;
};

/*
 * A block's place in write-back's queue, apart from the block as its NVMe
 * copy is: only a block write-back may take now has one (store-blocks.c),
 * and it has no NVMe copy.
 */
struct block_dirty {
	struct evict_node link; /* on its class's dirty[band], coldest last */
	struct block *block;
};

/*
 * 104 bytes on LP64, from the store's slab (slab.h): with the index and
 * the free-slot bitmaps, the daemon's memory per block (docs/benchmarks.md,
 * Scale) stays under 128 bytes.
 */
struct block {
	uint8_t key[KVT_KEY_SIZE]; /* first: the index reads it */
	struct ns *ns;
	struct extent *extent;    /* host copy; NULL when only on NVMe */
	/* Reserved, it has shards and no NVMe copy; resident, the reverse,
	 * or while it waits for write-back (dirty_queued) its place in the
	 * queue instead (block_disk(), block_dirty(), block_shards_taken()
	 * and store-ops.c read it by the state).  A reserved block with a
	 * shard committed (shards_committed > 0, in a namespace of several
	 * shards) is a partial block: its record holds its shard bits
	 * meanwhile (store-partial.c). */
	union {
		uint64_t shards_taken; /* reserved or committed, one bit each */
		struct partial *partial;
		struct block_disk *disk_copy;
		struct block_dirty *dirty_entry;
	};
	uint32_t slot;
	uint32_t handles;         /* leases + reservations on this block */
	uint32_t hint_until;      /* when its retention lapses (store-hints.c); 0: never */
	uint8_t uses;             /* leases taken, up to 255: write-back policy */
	uint8_t shards_committed; /* while reserved: how many, up to 64 */
	unsigned io : 2;          /* enum block_io */
	unsigned state : 1;       /* enum block_state */
	unsigned remote : 2;      /* enum block_remote */
	bool clean : 1;           /* the host copy is also on NVMe */
	bool staged : 1;          /* restored for a lookup, not leased since */
	bool indexed : 1;         /* false once deleted or aborted */
	unsigned erase_hold : 2;  /* ERASE_HOLD_*: left the index while I/O on
				   * its NVMe slot was in flight, its key
				   * counts as being erased until that I/O
				   * ends (store-erasures.c) */
	bool dirty_queued : 1;    /* in write-back's queue: dirty_entry is set */
	unsigned dirty_band : 2;  /* the band whose queue it is in */
	struct evict_entry evict; /* in its class's policy while resident and unpinned */
};

/* Its NVMe copy, or NULL. */
static inline struct block_disk *block_disk(const struct block *b)
{
	return b->state == BLOCK_RESIDENT && !b->dirty_queued ? b->disk_copy : NULL;
}

/* Its place in write-back's queue, or NULL. */
static inline struct block_dirty *block_dirty(const struct block *b)
{
	return b->state == BLOCK_RESIDENT && b->dirty_queued ? b->dirty_entry : NULL;
}

enum handle_kind {
	HANDLE_RESERVATION = 1,
	HANDLE_LEASE = 2,
};

struct handle {
	uint64_t id;
	uint8_t kind;
	uint32_t shard;
	struct block *block;
	struct tenant *tenant;
	struct process *owner;
	LIST_ENTRY(handle) owner_link; /* on its owner's list (process.c) */
};

struct ns_counters {
	uint64_t lookups, lookup_keys, hits, misses, pending;
	uint64_t stores, store_bytes, loads, load_bytes;
	uint64_t evictions, aborts, deletes, rejected;
	uint64_t spills, restores, disk_hits, dirty_drops;
	/* HINT (store-hints.c): keys hinted, blocks demoted by a hint and
	 * evicted while demoted, retentions that ran out */
	uint64_t hints, demotions, demoted_evictions, lapsed;
	/* blocks dropped for shards never committed (store-partial.c) */
	uint64_t partial_drops;
	/* keys of RESERVE and DELETE answered -EAGAIN: an older copy may
	 * still be on NVMe (recovery runs, or an erasure is under way) */
	uint64_t deferred;
};

struct slot_class {
	uint64_t slot_bytes;
	struct extent **extents;
	uint32_t n_extents;
	struct evict policy; /* [pool] eviction (lrfu-admit by default), over its resident blocks */
	/* Write-back's queue (store-blocks.c): the blocks it may take now, a
	 * list for each band but the demoted one, which it never takes;
	 * coldest last. */
	struct evict_lru dirty[_EVICT_BANDS];
	uint64_t used_slots;
	uint64_t slots, extent_bytes; /* of its extents, kept as they are added */
	uint64_t starved; /* allocations starved (fragmentation.h) */
};

struct ns {
	uint32_t id; /* within its tenant */
	struct tenant *tenant;
	struct kvt_identity ident;
	uint8_t *identity; /* canonical bytes: what NVMe regions are bound to */
	uint32_t identity_len;
	struct kvt_geometry geo;
	uint64_t logical_slot_bytes; /* geo.slot_bytes were it without its codec */
	struct slot_class *cls;
	struct index index;
	uint64_t blocks_resident, blocks_reserved; /* resident: in host memory */
	uint64_t blocks_spilled;                   /* on NVMe only */
	struct evict_lru disk_lru; /* blocks with an NVMe copy, for NVMe eviction */
	struct ns_counters c;
	uint32_t opens;
	/* store-erasures.c: what its keys are mixed with (tenant name and
	 * identity, so that a namespace opened again, or declined by
	 * recovery, names the same keys); NVMe copies of its blocks being
	 * erased; those whose erasure failed. */
	uint64_t scope;
	uint64_t erasing, erase_failures;
	uint32_t ledger_no; /* its record in the ledger; LEDGER_NO_NS: none */
};

struct tenant {
	struct store *store;
	uint32_t id;
	uid_t uid; /* of a uid tenant; (uid_t)-1 for a configured one */
	char name[CONFIG_MAX_TENANT_NAME + 1];
	struct tenant_choice choice;
	uint64_t quota;
	uint64_t allocated; /* bytes of extents */
	uint32_t next_extent_id; /* from 1 */
	uint64_t dirty;     /* host bytes not yet on NVMe */
	uint64_t nvme_quota;
	uint64_t disk_bytes;   /* of spill slots holding its blocks */
	uint64_t disk_writing; /* of spill slots being written */
	uint64_t nvme_refused; /* write-backs refused for want of space */
	uint64_t nvme_refused_unlogged, nvme_refused_logged_usec; /* nvme.c */
	struct slot_class **classes;
	uint32_t n_classes;
	struct ns **nss;
	uint32_t n_ns;
	/* Handle table: slot index + generation, so a stale or forged handle
	 * never names another live one. */
	struct handle **handles;
	uint32_t *handle_gen;
	uint32_t *handle_free;
	uint32_t handles_cap, n_handles_free, n_handles;
	uint32_t n_sessions;
	uint64_t refused;
	uint64_t frag_warned_usec; /* last fragmentation warning (CLOCK_MONOTONIC) */
	uint64_t frag_unwarned;    /* starved allocations since, not logged */
	struct ledger_handles *handle_ledger; /* NULL until its first handle */
};

typedef void (*store_extent_added_fn)(void *userdata, struct tenant *t,
				      struct extent *e);

typedef void (*store_block_ready_fn)(void *userdata, struct ns *ns, const uint8_t *key);
/* Every key of a run the remote tier fetched settled: n keys from key,
 * served of them in host memory, the rest misses. */
typedef void (*store_run_ready_fn)(void *userdata, struct ns *ns, const uint8_t *key, uint32_t n,
				   uint32_t served);

/* A handle was taken by, or ended for, the process that owns it. */
typedef void (*store_handle_owner_fn)(struct process *owner, struct handle *h);
/* Who owner is, for the ledger: its pid, and its start time (clock ticks
 * since boot) that tells it from a later process of the same pid. */
typedef uint64_t (*store_owner_id_fn)(const struct process *owner, int32_t *ret_pid);
/* The process of that pid and start time for a handle an earlier daemon
 * kept (live, or gone: its handles then end after the quarantine), or
 * NULL for want of memory. */
typedef struct process *(*store_owner_adopt_fn)(void *userdata, int32_t pid,
						 uint64_t start_time);

/*
 * The NVMe tier (nvme.c) as the store sees it.  It holds copies of blocks
 * the store knows: it writes dirty blocks back, and stages a block whose
 * only copy it holds back into host memory.  The tier calls the store's
 * functions (store-nvme.c); the store reaches the tier only through this
 * table, so the two never call each other.  The tier sets every method;
 * nvme is its own pointer, passed back to each.
 */
struct store_nvme_ops {
	/* A new pool extent: I/O may go to and from it. */
	void (*extent_added)(void *nvme, struct extent *e);
	/* A dirty block came (back) to an eviction list, or a reload may
	 * have lowered the watermarks: write back if above the high one. */
	void (*kick)(void *nvme);
	/* Bring a block that is only on the tier back into host memory.
	 * \return 0 when staging runs (or ran already), or a negative errno
	 *         when it cannot start now (-ENOMEM; -ENOSPC: no host slot;
	 *         the block stays on the tier) or the copy is gone (-EIO: its
	 *         file failed; dropped) */
	int (*stage)(void *nvme, struct block *b);
	/* Give up a slot on the tier durably: a restart must not recover what
	 * was dropped.  The slot held a copy of a block of ns (NULL: of a
	 * namespace recovery declined); token is store_erase_begin()'s, handed
	 * back to store_nvme_erased() once the erasure has ended. */
	void (*slot_drop)(void *nvme, struct spill_region *r, uint32_t slot, struct ns *ns,
			  uint64_t token);
};

/*
 * The remote tier (remote-tier.c) as the store sees it.  It is asked for
 * keys the store does not know, and told of blocks used, which its policy
 * may write back.  As with the NVMe tier, the tier calls the store's
 * functions (store-remote.c) and the store reaches it only through this
 * table.  The tier sets every method; remote is its own pointer.
 */
struct store_remote_ops {
	/* A block was committed, or leased (b->uses counts leases): its
	 * policy decides whether to write it back. */
	void (*used)(void *remote, struct block *b);
	/* A lookup found keys[0..n) nowhere locally, right after its leading
	 * hits.  \return how many of them, from the first, it fetches: each
	 * is a block of store_remote_block() until store_remote_fetched(). */
	uint32_t (*fetch)(void *remote, struct ns *ns, const uint8_t *keys, uint32_t n);
};

struct store {
	struct pool *pool;
	const struct config *config;
	struct tenant **tenants;
	uint32_t n_tenants;
	uint32_t next_tenant_id;
	store_extent_added_fn extent_added;
	void *userdata;
	const struct store_nvme_ops *nvme_ops; /* NULL without an NVMe tier */
	void *nvme; /* the tier's own pointer: nvme.c's struct nvme */
	const struct store_remote_ops *remote_ops; /* NULL without a remote tier */
	void *remote; /* remote.c's struct remote */
	store_block_ready_fn block_ready; /* a staged block is in host memory,
					   * or its staging failed (a miss) */
	/* The same for one key of a remote run (clients told of each
	 * block), and for the whole run once it settled (clients told of
	 * runs: one look-up instead of one per block). */
	store_block_ready_fn run_block_ready;
	store_run_ready_fn run_ready;
	/* Places client-chosen keys in the indexes and ghost lists; drawn
	 * at start, never shown to clients. */
	struct keyhash keyhash;
	/* of struct block, struct block_disk, struct block_dirty */
	struct slab blocks, disk_copies, dirty_entries;
	/* Set by the manager: process.c keeps each process's handles. */
	store_handle_owner_fn handle_taken, handle_ended;
	store_owner_id_fn owner_id;
	store_owner_adopt_fn owner_adopt;
	/* What the host tier holds, kept for the next daemon (ledger.h);
	 * NULL: [pool] keep = no, or no memory for it. */
	struct ledger *ledger;
	uint64_t frag_warnings; /* fragmentation warnings logged */
	uint64_t timed_hints;   /* blocks whose retention has a duration (store-hints.c) */
	/* The partial blocks' records, by the time of their first commit
	 * (store-partial.c). */
	TAILQ_HEAD(, partial) partials;
	/* store-erasures.c.  The keys with NVMe copies being erased (or
	 * whose erasure failed), by fingerprint of scope and key: no new
	 * block is accepted under such a key and a DELETE of it is answered
	 * once its copies are erased, so that no older copy can come back
	 * after a crash.  erase_untracked: erasures under way that could not
	 * be recorded (no memory), during which every key counts as being
	 * erased. */
	struct erase_entry *erasures;
	uint32_t erasures_n, erasures_cap;
	uint64_t erasing, erase_untracked, erased, erase_failures;
	/* An erasure ended (clients may be waiting for it). */
	void (*erasure_ended)(void *userdata);
	/* While the NVMe tier recovers with clients connected
	 * (store_recovering()): the keys that left the index, by the same
	 * fingerprints, so that recovery does not bring back an older copy
	 * of a block dropped meanwhile.  gone_full: the table reached
	 * STORE_GONE_MAX and recovery keeps nothing more. */
	bool recovering, gone_full;
	uint64_t *gone;
	uint32_t gone_n, gone_cap;
};

/* store.c: the store's life. */
int store_init(struct store *s, struct pool *p, const struct config *c,
	       store_extent_added_fn fn, void *userdata);
void store_done(struct store *s);
/* Hand the store its NVMe tier at start-up, or take it back (ops NULL)
 * before the tier goes. */
void store_set_nvme(struct store *s, const struct store_nvme_ops *ops, void *nvme);
/* The same for the remote tier, below the NVMe tier. */
void store_set_remote(struct store *s, const struct store_remote_ops *ops, void *remote);

/* The tenant a connection resolved to, created on first use. */
int store_tenant_get(struct store *s, const struct tenant_choice *ch, struct tenant **ret);
/* The tenant of that name if it exists, else NULL. */
struct tenant *store_tenant_find(struct store *s, const char *name);
/* Apply a reloaded configuration: quotas. */
void store_reload(struct store *s);
struct ns *store_ns_get(struct tenant *t, uint32_t ns_id);

/* reason receives a sentence for the client when the call is refused. */
int store_ns_open(struct store *s, struct tenant *t, const uint8_t *identity,
		  uint32_t len, struct ns **ret, char *reason, size_t reason_size);

/* LOOKUP, in parts that other requests may come between: the state of
 * each of keys[from, from + n) in ret_states (a request's keys from its
 * last part to its first: a touched chain's head ends most recent), then,
 * once every key has one, store_lookup_end for the whole request: staging
 * in chain order, the remote tier's fetch.  \return the leading hits */
void store_lookup_keys(struct store *s, struct ns *ns, const uint8_t *keys, uint32_t from,
		       uint32_t n, uint32_t flags, uint8_t *ret_states);
uint32_t store_lookup_end(struct store *s, struct ns *ns, const uint8_t *keys, uint32_t n,
			  uint8_t *ret_states);
/* Where a key a LOOKUP answered DISK stands now, without a LOOKUP's
 * effects: KVT_STATE_DISK while it is still on its way into host memory
 * (staging from NVMe, or fetched from the remote tier), KVT_STATE_HOST once
 * there, KVT_STATE_MISS when it is neither (gone, or left on NVMe). */
uint8_t store_key_arrival(struct ns *ns, const uint8_t *key);
/* Before store_reserve(): room for the keys' new blocks, so that the
 * RESERVE does not wait in the loop for an extent's memory.  \return 0,
 * or -EAGAIN: the memory is still being made (ask again once
 * pool_ahead_fd() is readable). */
int store_reserve_room(struct store *s, struct ns *ns, const uint8_t *keys, uint32_t n, int node);
/* node: the NUMA node the client's GPU is on, -1 if unknown. */
void store_reserve(struct store *s, struct ns *ns, uint32_t shard,
		   const uint8_t *keys, uint32_t n, struct process *owner, int node,
		   struct kvt_slot *ret);
void store_acquire(struct store *s, struct ns *ns, uint32_t shard,
		   const uint8_t *keys, uint32_t n, struct process *owner,
		   struct kvt_slot *ret);
/* COMMIT (flag 1 = success, 0 = failed copy), ABORT, RELEASE. */
void store_commit(struct store *s, struct tenant *t,
		  const struct kvt_handle_arg *h, uint32_t n, int32_t *ret);
void store_abort(struct store *s, struct tenant *t,
		 const struct kvt_handle_arg *h, uint32_t n, int32_t *ret);
void store_release(struct store *s, struct tenant *t,
		   const struct kvt_handle_arg *h, uint32_t n, int32_t *ret);
void store_touch(struct store *s, struct ns *ns, const uint8_t *keys,
		 uint32_t n, int32_t *ret);
/* Stage NVMe blocks into host memory ahead of use: per key 0 (in host
 * memory), -EINPROGRESS (staging), -ENOENT (miss). */
void store_prefetch(struct store *s, struct ns *ns, const uint8_t *keys,
		    uint32_t n, int32_t *ret);
void store_delete(struct store *s, struct ns *ns, const uint8_t *keys,
		  uint32_t n, int32_t *ret);

/* HINT: arg as KVT_HINT_ARG, valid by store_hint_valid (ret_reason: why
 * not, a sentence for the client); per key 0, or -ENOENT (not stored). */
bool store_hint_valid(uint32_t arg, const char **ret_reason);
void store_hint(struct store *s, struct ns *ns, uint32_t arg, const uint8_t *keys,
		uint32_t n, int32_t *ret);
/* Retentions whose duration has passed return to the default priority;
 * once a second.  \return how many */
uint64_t store_hints_lapse(struct store *s);

/* store-partial.c: the partial blocks whose first commit is [limits]
 * partial_block_ms ago or more, by the limit in force now, dropped (their
 * number): once a second, and on reload.  And at shutdown, their records
 * freed. */
uint64_t store_partial_expire(struct store *s);
void store_partial_done(struct store *s);

/* Evict a namespace from host memory, in parts that other requests may
 * come between: blocks also on NVMe (and idle) stay there, every other
 * block is dropped (pinned ones when their last handle goes); drop: from
 * every tier.  Blocks stored while it runs may stay. */
struct store_evict {
	bool drop;
	uint8_t pass;   /* 0: host copies of blocks on NVMe; 1: out of the index */
	size_t pos;     /* index slot */
	size_t cap;     /* of the index the position is in */
	uint64_t n;     /* blocks evicted so far */
};
void store_ns_evict_begin(struct store_evict *e, bool drop);
/* At most slots index slots.  \return true when it is done (e->n). */
bool store_ns_evict_some(struct store *s, struct ns *ns, struct store_evict *e, size_t slots);
struct tenant *store_tenant_by_id(struct store *s, uint32_t id);

/* Drop a handle as if its owner released it (reservations abort). */
void store_handle_drop(struct store *s, struct tenant *t, struct handle *h);

/* For both tiers (store-place.c): a host slot for b, to stage or fetch
 * its bytes into.  Without wait, a slot whose extent is still being made
 * is -EAGAIN: ask again once pool_ahead_fd() is readable. */
int store_host_slot(struct store *s, struct ns *ns, struct block *b, bool wait);
/* The same without waiting, and without evicting: -ENOSPC when only an
 * eviction would free a slot. */
int store_host_slot_spare(struct store *s, struct ns *ns, struct block *b);

/* For the NVMe tier (store-nvme.c): block transitions. */
/* A clean block leaves host memory: its NVMe copy is the block now. */
void store_block_spilled(struct store *s, struct block *b);
/* A write-back of b to a slot of r starts: the slot counts against its
 * tenant's NVMe quota, and eviction passes b by, until
 * store_nvme_written(). */
void store_nvme_writing(struct store *s, struct block *b, struct spill_region *r);
/* That write-back ended; ok: its bytes landed in slot of r, as seq.
 * \return 0: the host copy is also on NVMe now (clean), and the slot is
 *         its NVMe copy; -EIO (not ok) or -ENOMEM (no memory to record it):
 *         the slot holds nothing of the store's, the tier gives it up */
int store_nvme_written(struct store *s, struct block *b, struct spill_region *r, uint32_t slot,
		       uint64_t seq, bool ok);
/* b's NVMe copy is being read into the host slot it was given
 * (store_host_slot()): lookups answer staging until
 * store_block_restored() or store_block_drop(). */
void store_nvme_staging(struct store *s, struct block *b);
/* Staged back and verified: in host memory again, and clean. */
void store_block_restored(struct store *s, struct block *b);
/* A block whose bytes can no longer be trusted: a miss from now on. */
void store_block_drop(struct store *s, struct block *b);
/* Shutdown: the tier's I/O on b was cancelled, and b is held by none. */
void store_nvme_abandoned(struct store *s, struct block *b);
/* Write-back's walk over tenant t's blocks that it may take now (dirty,
 * in host memory, no I/O, no NVMe copy, not demoted): its queue, coldest
 * first, the default band before the raised ones, one slot class after
 * another.  Each step costs the same however many blocks are dirty.  A
 * block returned may be dropped before the next call. */
struct store_dirty {
	struct tenant *t;
	uint32_t cls;              /* the class being walked */
	uint8_t band;              /* the position in the walk's order of bands */
	bool begun;                /* next is set (this class and band) */
	struct block_dirty *next;  /* where the walk goes on */
};
void store_dirty_begin(struct store_dirty *w, struct tenant *t);
/* \return the next such block, or NULL when there is none */
struct block *store_dirty_next(struct store_dirty *w);
/* Go on with the next class. */
void store_dirty_skip_class(struct store_dirty *w);
/* Fingerprints recovery remembers at most (32 MiB). */
#define STORE_GONE_MAX (UINT32_C(1) << 22)
/* store-erasures.c: the NVMe tier recovers (on) while clients are served,
 * or has finished (off).  While it recovers, no new block is accepted and
 * nothing is deleted (-EAGAIN): the scan may still find an older copy of
 * any key.  \return 0, or -ENOMEM */
int store_recovering(struct store *s, bool on);
/* The erasure of a slot given to nvme_ops->slot_drop ended; ok: its
 * zeroed header landed. */
void store_nvme_erased(struct store *s, struct ns *ns, uint64_t token, bool ok);
/* Whether a copy of that key of ns may still be on NVMe though no block
 * holds it: 1 while one is being erased, -EIO when an erasure failed (it
 * may come back after a restart), else 0. */
int store_erase_state(const struct store *s, const struct ns *ns, const uint8_t *key);
/* A recovered NVMe block, in two steps, so that recovery looks a region's
 * namespace up once per read rather than once per slot.  First the
 * namespace, tenant and namespace made as needed: 1 with *ret, 0 for one
 * the configuration no longer has or refuses (*ret NULL), or -ENOMEM; *ret
 * stays valid until control returns to the event loop, and *ret_scope
 * names its keys either way.  Then each block in it, called while the
 * spill files are recovered, with the tier handed over already.  Of the
 * copies of one key the newest (highest sequence number) is kept, every
 * other one erased; so is every copy of a namespace declined, and of a key
 * that left the index since recovery began.
 * \return a SPILL_FOUND_* code (spill.h), or -ENOMEM */
int store_recover_ns(struct store *s, const char *tenant, const uint8_t *identity,
		     uint32_t identity_len, struct ns **ret, uint64_t *ret_scope);
int store_recover_block_in(struct store *s, struct ns *ns, uint64_t scope, const uint8_t *key,
			   struct spill_region *r, uint32_t slot, uint64_t seq);
/* The NVMe tier is full for ns: give up its least recently used NVMe copy
 * (a block only on NVMe is dropped).  \return 0, or -ENOSPC if it has none. */
int store_nvme_evict(struct store *s, struct ns *ns);
/* For a tenant at its NVMe quota: the least recently used copy of a block
 * no longer in host memory, from the namespace first, then from its
 * tenant's others; -EDQUOT when there is none. */
int store_nvme_evict_tenant(struct store *s, struct ns *ns);
/* The region is taken back from its tenant (nvme.c): give up every NVMe
 * copy in it, as store_nvme_evict() gives up one.  Its I/O has finished
 * (spill_region_victim()), so none is skipped.  \return the copies given
 * up */
uint64_t store_nvme_evict_region(struct store *s, struct spill_region *r);
/* For the remote tier (store-remote.c). */
/* A block for key, to be fetched: reserved, so no client writes it and
 * lookups answer "staging" (KVT_STATE_DISK); no host slot until the tier
 * takes one (store_host_slot()), to read into or for verified bytes.
 * \return 0; -EEXIST when the key is in the index already; -ENOMEM */
int store_remote_block(struct store *s, struct ns *ns, const uint8_t *key, struct block **ret);
/* Its fetch ended; ok: it has a host slot holding verified bytes, and the
 * block is resident (and dirty for the NVMe tier).  Otherwise it is gone
 * (its slot, if any, freed): a miss. */
void store_remote_fetched(struct store *s, struct block *b, bool ok);
/* Every key of a run the tier fetched has had its store_remote_fetched():
 * n keys from key, served of them in host memory. */
void store_remote_run_settled(struct store *s, struct ns *ns, const uint8_t *key, uint32_t n,
			      uint32_t served);
/* The block of key in that tenant's namespace if its bytes are in host
 * memory and final (resident, no I/O reading into it), else NULL. */
struct block *store_remote_find(struct store *s, uint32_t tenant_id, uint32_t ns_id,
				const uint8_t *key);
/* Where the remote tier stands with b's key: the tier decides, the block
 * keeps it (a fetched block is STORED). */
void store_remote_state(struct store *s, struct block *b, enum block_remote st);

/* store-adopt.c: the host tier an earlier daemon kept (keep.c): the
 * ledger in ledger_fd (the store's from then on, also on failure), the
 * extents and handle ledgers that take(userdata, name) gives (-1: none),
 * adopted before the NVMe tier starts and before the first client.  keep
 * hands on the memfds made from then on.  What fails a check is left out
 * (a miss, never a block the ledger cannot vouch for).  \return 0 and the
 * figures, -EBADMSG when ledger_fd holds no ledger of this version, or
 * another negative errno */
struct store_keep_ops {
	/* A memfd kept from now on: made now (fresh), or adopted. */
	void (*keep)(void *userdata, const char *name, int fd, bool fresh);
	/* The passed memfd of that name, or -1. */
	int (*take)(void *userdata, const char *name);
	/* A passed memfd not adopted after all: closed, and let go. */
	void (*let_go)(void *userdata, const char *name);
};
struct store_adopted {
	uint32_t namespaces, extents, extents_bad;
	uint64_t bytes;          /* of the extents adopted */
	uint64_t blocks, records_bad;
	uint64_t leases, reservations, handles_bad, slots_lost;
	uint64_t elapsed_ns;
};
int store_adopt(struct store *s, int ledger_fd, const struct store_keep_ops *ops, void *userdata,
		struct store_adopted *ret);
/* A ledger of its own, for a store that adopted nothing.  \return 0 or a
 * negative errno (then nothing is kept) */
int store_keep_begin(struct store *s, const struct store_keep_ops *ops, void *userdata);

/* Totals for stats. */
uint64_t store_tenant_used(const struct tenant *t);

/* store-fragmentation.c: a tenant's classes as fragmentation.h counts them
 * (ret [t->n_classes]), and the room it has for extents. */
void store_frag_classes(const struct store *s, const struct tenant *t, struct frag_class *ret,
			uint64_t *ret_room);
