/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Host memory pool: memfd extents, each cut into fixed-size slots.
 *
 * An extent is created, sized, populated (first touch on these machines is
 * slow, so it is never left to a client's copy), locked where the limits
 * allow and sealed against shrink and grow before its fd can leave the
 * daemon.  Extents are never shrunk once sent: a client could be mapping
 * them.  After sealing, the daemon's only CPU access to an extent is the
 * payload checksum of the NVMe tier (write-back and every restore), made
 * through pool_guarded_sum(): a client that punches holes into its own
 * extents faults that read (-EFAULT instead of SIGBUS), which drops the
 * block, so it harms only its own blocks.
 */
#pragma once

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "numa.h"
#include "slots.h"

struct ledger_extent;
struct slot_class;
struct tenant;

struct extent {
	uint32_t id;
	int fd;
	uint8_t *map;
	uint64_t size;
	uint64_t slot_bytes;
	struct slots slots;
	uint32_t flags; /* KVT_EXTENT_* */
	int node;      /* where its memory is (-1: unknown) */
	int for_node;  /* the node it was made for: clients there use it first */
	struct slot_class *cls;
	struct ledger_extent *ledger; /* its slots' records, NULL: not kept */
};

/* What the pool got from the system, and why not more. */
struct pool_caps {
	bool hugetlb;
	bool thp;
	bool lockable;
	char page_reason[256];
	char lock_reason[160];
};

/* An extent's memory before it is an extent. */
struct backing {
	int fd;
	uint8_t *map;
	uint64_t size;
	int node;      /* asked for (-1: any) */
	bool placed;   /* the node's policy could be set */
	int place_error; /* errno of mbind() when it could not */
	uint32_t flags; /* KVT_EXTENT_* */
	uint64_t populate_ns;
};

/*
 * The next extent, made ahead on a thread of its own: population takes
 * about a millisecond a MiB on 4 KiB pages, and in the loop every other
 * session's request would wait behind it.  One at a time, within the
 * capacity; taken by the growth it was made for (same size and node), or
 * given back when another growth needs its room.
 */
struct pool_ahead {
	struct pool *pool;
	pthread_t thread;
	bool running; /* started and not yet joined */
	atomic_bool done; /* the thread has finished */
	int r;
	uint32_t warned; /* the thread's copy of pool.warned */
	struct backing b;
};

struct pool {
	const struct config *config;
	uint64_t capacity;
	uint64_t allocated;
	uint32_t n_extents;
	uint32_t n_hugetlb, n_thp; /* extents by backing, the rest 4 KiB */
	uint32_t n_locked;
	uint64_t populate_ns; /* time spent populating, all extents */
	uint64_t extents_ahead; /* extents whose memory was made ahead */
	struct pool_ahead ahead;
	int ahead_efd; /* readable when the one made ahead is finished */
	struct pool_caps caps;
	uint32_t warned;
	struct numa_topology topo;
	uint64_t numa_fallbacks; /* extents that could not go where asked */
	char numa_reason[256];   /* why the first that could not, "" none */
	int numa_reason_node;    /* the node it was for */
	bool watchdog;           /* systemd expects WATCHDOG=1 pings */
};

void pool_init(struct pool *p, const struct config *c);
/* Probe hugetlb, shmem THP and mlock limits; logs what the pool will use. */
void pool_probe(struct pool *p);
/* Bytes an extent for this slot size takes (a whole number of slots). */
uint64_t pool_extent_bytes(const struct pool *p, uint64_t slot_bytes);
/* An extent whose memory is on NUMA node `node` if it can be (-1: any);
 * -ENOSPC when the node-wide capacity is spent.  Its id is the caller's:
 * unique within the tenant it is for, so that one tenant's ids say nothing
 * of how many extents the others have.  Without wait, -EAGAIN where its
 * memory would have to be made in the loop: a thread makes it, and
 * pool_ahead_fd() says when to ask again. */
int pool_extent_new(struct pool *p, uint32_t id, uint64_t slot_bytes, int node, bool wait,
		    struct extent **ret);
/* The extent in fd, kept by an earlier daemon with this description:
 * checked (sealed, of that size), mapped and counted.  -EBADMSG for one
 * that is not what it says, -ENOSPC past the capacity.  fd is the
 * extent's on success, the caller's otherwise. */
int pool_extent_adopt(struct pool *p, int fd, uint32_t id, uint64_t slot_bytes, uint64_t size,
		      uint32_t flags, int for_node, struct extent **ret);
/* A new [pool] capacity (a reload): an extent made ahead that no longer
 * fits is given back. */
void pool_set_capacity(struct pool *p, uint64_t capacity);
/* Start making the memory of the next extent for this slot size and node
 * on a thread, unless one is being made already or the capacity has no
 * room for it: the growth that asks for it next takes it ready. */
void pool_make_ahead(struct pool *p, uint64_t slot_bytes, int node);
/* Readable when an extent made ahead is finished (-1: none can be):
 * pool_ahead_clear() reads it. */
int pool_ahead_fd(const struct pool *p);
void pool_ahead_clear(struct pool *p);
/* Waits for and gives back the extent being made ahead. */
void pool_done(struct pool *p);
/* Only at shutdown, after every session: a notice queued to a connection
 * borrows the extent's descriptor until it is sent (session_send). */
void pool_extent_free(struct pool *p, struct extent *e);
const char *pool_page_mode(const struct extent *e);

/*
 * Checksum pool memory under a SIGBUS guard.  A client can punch holes in
 * the extents it was sent (seals do not stop that), and with hugetlb the
 * daemon's next touch of such a hole raises SIGBUS: here it becomes
 * -EFAULT, and the caller drops the block.
 */
int pool_guarded_sum(const void *p, size_t len, uint64_t (*sum)(const void *, size_t),
		     uint64_t *ret);
/* memcpy under the same guard, to or from pool memory (the remote tier
 * copies blocks through its own buffers).  \return 0 or -EFAULT */
int pool_guarded_copy(void *dst, const void *src, size_t len);
