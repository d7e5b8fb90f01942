/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The bookkeeping of the CUDA path's registrations, without CUDA (so that
 * tests/unit/test-cuda-regtab.c runs it anywhere):
 *
 *   - a table of disjoint host ranges sorted by address, with O(log n)
 *     lookup (struct rangetab);
 *   - the process's pins: one cudaHostRegister per range, shared by
 *     every context of the process that maps that memory, counted, and
 *     undone only when the last one lets go (struct pins).  The driver's
 *     registrations are per process, so without this the first context
 *     to go would unregister memory a second one still copies from;
 *   - a context's registrations (struct regs): which chunks of which
 *     extents, in which state, with a retry after a failure, kept while
 *     an unfinished job uses them.
 *
 * The pin itself is an operation of struct pin_ops: cuda-registry.c
 * passes cudaHostRegister, the unit test a recorder.  Nothing here
 * locks except struct pins, which is shared between threads.
 */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- a sorted table of disjoint ranges -------------------------------- */

struct range {
	uint8_t *host;
	uint64_t size;
};

struct rangetab {
	struct range **v; /* [n] sorted by host, disjoint */
	size_t n, cap;
};

/* \return 0, -EEXIST (overlaps a range of the table) or -ENOMEM */
int rangetab_insert(struct rangetab *t, struct range *r);
void rangetab_remove(struct rangetab *t, const struct range *r);
/* The range that contains [p, p + bytes), or NULL.  O(log n). */
struct range *rangetab_find(const struct rangetab *t, const void *p,
			    uint64_t bytes);
/* A range that overlaps [p, p + bytes), or NULL.  O(log n). */
struct range *rangetab_overlap(const struct rangetab *t, const void *p,
			       uint64_t bytes);
/* Frees the table's array, not the ranges. */
void rangetab_free(struct rangetab *t);

/* ---- the process's pins --------------------------------------------- */

/* Which mapping a range belongs to: two mappings may take the same
 * address one after the other, and a pin of the first must never serve
 * the second. */
struct pin_key {
	const void *owner; /* the client that maps it */
	uint64_t instance; /* the daemon instance its extent came from */
	uint32_t extent_id;
};

struct pin {
	struct range r;
	struct pin_key key;
	uint8_t *dev;   /* its device address; NULL if it has none */
	bool owned;     /* we registered it (not the engine): we unregister */
	bool busy;      /* being pinned, outside the lock */
	uint32_t refs;
};

struct pin_ops {
	/* Pins [host, host + size): 0 with *ret_dev (NULL when the device
	 * has no address for it) and *ret_owned (false when it was
	 * registered already, by someone else), or a negative errno. */
	int (*pin)(void *ud, uint8_t *host, uint64_t size, uint8_t **ret_dev,
		   bool *ret_owned);
	void (*unpin)(void *ud, uint8_t *host);
};

struct pins {
	pthread_mutex_t lock;
	struct rangetab t; /* of struct pin */
	const struct pin_ops *ops;
	void *ud;
};

/*
 * A reference to the pin of [host, host + size) of mapping key: the
 * existing one of the same range and mapping, or a new one (ops->pin,
 * called without the lock held).
 * \return 0, -EAGAIN (another mapping's pin, or one being made, covers
 *         part of the range: try later), -ENOMEM, or ops->pin's error
 */
int pins_acquire(struct pins *ps, uint8_t *host, uint64_t size,
		 const struct pin_key *key, struct pin **ret);
/* Drops a reference; the last one unpins (when owned) and frees. */
void pins_release(struct pins *ps, struct pin *p);

/* ---- a context's registrations ---------------------------------------- */

enum reg_state {
	REG_PENDING, /* to be pinned */
	REG_PINNING, /* being pinned, outside the context's lock */
	REG_PINNED,
	REG_FAILED,  /* pinning failed; retried at retry_at_ns */
	REG_STALE,   /* its extent is gone; dropped once no job uses it */
};

struct reg {
	struct range r;
	uint32_t extent_id;
	uint64_t instance;
	enum reg_state state;
	uint8_t *dev;     /* the address copies use; NULL: none */
	struct pin *pin;  /* our reference, while pinned */
	uint32_t users;   /* unfinished jobs whose copies use it */
	bool busy;        /* between regs_next_work() and regs_pin_done() */
	uint32_t attempts;
	int error;        /* of the last failed attempt */
	uint64_t retry_at_ns;
};

/* An extent of the client as it is now. */
struct ext_snap {
	uint32_t id;
	uint8_t *base;
	uint64_t size;
};

struct regs {
	struct rangetab t;  /* of struct reg */
	const void *owner;  /* the client */
	uint64_t chunk;     /* bytes per registration at most */
	bool pageable;      /* the device reads pageable memory itself */
	/* Counters for kvt_cuda_ctx_stats(). */
	uint64_t pin_calls, pin_failures, pin_ns, pin_max_ns;
	uint64_t bytes_pinned_total;
};

/* The delay before attempt n + 1 after n failed ones: 1 s doubling up to
 * 64 s. */
uint64_t reg_retry_delay_ns(uint32_t attempts);

/*
 * Brings the table in line with the client's extents (ext, of daemon
 * instance `instance`): every chunk of at most rs->chunk bytes of an
 * extent gets a pending registration, unless a stale one still covers
 * part of it (then later: the old pages are still pinned under that
 * address); registrations of extents that are gone, or of an earlier
 * instance, become stale.  Stale registrations no job uses are dropped
 * (their pin released).
 * \return 0 or -ENOMEM (the table is then partly updated; call again)
 */
int regs_sync(struct regs *rs, struct pins *ps, const struct ext_snap *ext,
	      uint32_t n, uint64_t instance);

/* Drops stale registrations no job uses; their pins are released. */
void regs_collect(struct regs *rs, struct pins *ps);

/*
 * The next registration to pin at time now: a pending one, or a failed
 * one whose retry is due.  It becomes REG_PINNING.  NULL when none;
 * *ret_next_ns (if not NULL) then gets the earliest retry due, or
 * UINT64_MAX.
 */
struct reg *regs_next_work(struct regs *rs, uint64_t now,
			   uint64_t *ret_next_ns);
/* Pins g (REG_PINNING) through ps; call without the context's lock. */
int regs_pin(const struct regs *rs, struct pins *ps, struct reg *g,
	     struct pin **ret_pin);
/* Records the result of regs_pin() (r, pin) made at now, taking took_ns. */
void regs_pin_done(struct regs *rs, struct pins *ps, struct reg *g, int r,
		   struct pin *pin, uint64_t now, uint64_t took_ns);

/*
 * The registration that serves [p, p + bytes) of extent extent_id of
 * instance `instance`, for a copy.  O(log n).
 * \return it, with *ret_err 0; or NULL with *ret_err -EAGAIN (not pinned
 *         yet, or memory still pinned for an earlier mapping at that
 *         address) or -EFAULT (pinning failed and the device cannot read
 *         the pageable mapping)
 */
struct reg *regs_lookup(const struct regs *rs, const void *p, uint64_t bytes,
			uint32_t extent_id, uint64_t instance, int *ret_err);

/* Releases every pin and frees the table; no job is left. */
void regs_free(struct regs *rs, struct pins *ps);
