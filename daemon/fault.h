/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test-only fault injection: the Nth call at one of a fixed list of sites
 * fails the way the real operation fails there (an allocation returns NULL,
 * a system call ENOMEM, an I/O completion -EIO or a short count), so that
 * the daemon's own error paths run in a live process.  SQLite's method: for
 * every site, fail call N for N = 1, 2, ... and check that the daemon keeps
 * running and never serves an uncertain block (tests/integration/
 * test-faults.c).  Not a configuration setting.
 *
 *     KVTIERD_FAULTS="site=N[,site=N...]"
 *
 *     site=N    the Nth call at site fails, no other
 *     site=N+   the Nth and every later call fail (persistent)
 *     site=%N   every Nth call fails (N, 2N, 3N, ...)
 *
 * It is read once, by fault_init() at start; a value that does not parse
 * stops the daemon (a test whose fault is silently not armed cannot fail).
 * When armed, a warning says so at start, every injected fault is logged
 * ("Fault injected: SITE call N") so a test can tell it really happened,
 * and fault_report() logs how often each site was reached.  Unarmed, a
 * site costs one predictable branch on a global.  The event loop and the NVMe
 * workers (nvme-worker.c: the I/O sites) count calls atomically; fault_init()
 * runs before any worker starts.
 *
 * The sites, what fails there, and where the error goes.  The bound is how
 * far test-faults sweeps N with its workload (every N up to it is reached
 * there; the test checks that each injected fault fired):
 *
 * site          fails                               error path                               bound
 * session_in    growth of a connection's input      the connection is closed ("out of        6
 *               buffer (realloc)                    memory")
 * session_out   a message that cannot be queued     the connection is closed; its handles    8
 *               (the queue's malloc)                end when its process exits
 * process       the record of a new client process  the connection is refused, with a reason 6
 * tenant        a new tenant (calloc)               NS_OPEN refused (-ENOMEM); during NVMe   1
 *                                                   recovery at start: kvtierd exits 1
 * ns            a new namespace (calloc)            NS_OPEN refused (-ENOMEM); at start: as  2
 *                                                   tenant
 * extent        a new pool extent (mmap: ENOMEM)    a free slot elsewhere, an eviction, or   2
 *                                                   -ENOSPC for that key of RESERVE
 * block         a block record (calloc)             -ENOMEM for that key of RESERVE; at      8
 *                                                   start: as tenant
 * index         an index insert that has to grow    -ENOMEM for that key of RESERVE (its     8
 *               the table (calloc)                  slot freed); at start: as tenant
 * handle        a lease or reservation (calloc)     -ENOMEM for that key of RESERVE or       8
 *                                                   ACQUIRE
 * partial       the record of a block of several    the block is dropped (counted in         -
 *               shards, at its first commit         aborts): that COMMIT and its other
 *               (malloc)                            shards' are -ECANCELED
 * stats         a statistics record (its buffer)    STATS answered with -ENOMEM              4
 * spill_region  binding a spill region (header,     the block stays dirty; write-back tries  2
 *               slot table)                         again after a back-off (10 ms, doubling
 *                                                   to 1 s)
 * writeback     a write-back operation (calloc)     as spill_region                          8
 * restore       a staging operation (calloc)        a miss for that key of LOOKUP (ACQUIRE:  8
 *                                                   -EAGAIN); the copy stays on NVMe
 * write_eio     a write completion: -EIO            the spill file is failed: its blocks     8
 *                                                   become misses, the host tier serves on
 * write_enospc  a write completion: -ENOSPC         that write-back fails; as spill_region   4
 * write_short   a write completion cut to half      the rest is resubmitted                  8
 * read_eio      a read completion: -EIO             the block being staged is dropped (a     8
 *                                                   miss, announced); the file is failed
 * read_short    a read completion cut to half       the rest is resubmitted                  8
 * write_eagain  a write completion: -EAGAIN         resubmitted after a back-off; the 9th    8
 *                                                   for one request fails it with -EAGAIN
 *                                                   (io.h): then as write_enospc
 * read_eagain   a read completion: -EAGAIN          as write_eagain; a read that fails       8
 *                                                   drops the block being staged (a miss)
 * peerpidfd     SO_PEERPIDFD at accept: ENOPROTOOPT, a client in another pid namespace is  -
 *               as on kernels before 6.5            refused with the reason (process.h); one
 *                                                   the daemon sees is watched by pid
 * pidfs         a client's pidfd is taken for one   each connection of a client in another  -
 *               not on pidfs (kernels 6.5 to 6.8,   pid namespace is a process of its own
 *               whose pidfds cannot be compared)    (process.h)
 * uring_submit  an io_uring_enter() of the io_uring tried again after a back-off; the 9th   4
 *               engine, to submit or to wait at     failure in a row fails the requests
 *               shutdown: -ENXIO                    never submitted with -ENXIO (then as
 *                                                   write_enospc, read_eagain); at shutdown
 *                                                   see io_engine_free()
 *
 * Short cuts apply to completions of at least 2 * 4 KiB and only those are
 * counted at the *_short sites.  A completion that gets -EIO is not counted
 * at write_enospc, the *_eagain or the short sites, one that gets -ENOSPC
 * not at write_eagain or write_short, one that gets -EAGAIN not at the
 * short sites.  uring_submit is reached only with the io_uring engine.
 * partial only with blocks of several shards, which test-faults's workload
 * does not store (no bound): test-partial-attempts fails it instead;
 * peerpidfd and pidfs only for clients in another pid namespace
 * (test-pidns).
 * test-faults also arms every site from its first call on (site=1+), and
 * fails tenant, ns, block and index at their first call during NVMe
 * recovery at start.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#define FAULT_ENV "KVTIERD_FAULTS"

enum fault_site {
	FAULT_SESSION_IN,
	FAULT_SESSION_OUT,
	FAULT_PROCESS,
	FAULT_TENANT,
	FAULT_NS,
	FAULT_EXTENT,
	FAULT_BLOCK,
	FAULT_INDEX,
	FAULT_HANDLE,
	FAULT_PARTIAL,
	FAULT_STATS,
	FAULT_SPILL_REGION,
	FAULT_WRITEBACK,
	FAULT_RESTORE,
	FAULT_WRITE_EIO,
	FAULT_WRITE_ENOSPC,
	FAULT_WRITE_SHORT,
	FAULT_READ_EIO,
	FAULT_READ_SHORT,
	FAULT_WRITE_EAGAIN,
	FAULT_READ_EAGAIN,
	FAULT_URING_SUBMIT,
	FAULT_PEERPIDFD,
	FAULT_PIDFS,
	_FAULT_SITE_MAX,
};

/* Whether any site is armed; set by fault_init() only. */
extern bool fault_armed;

bool fault_check(enum fault_site site);

/* Count a call at site; true when this call must fail. */
static inline bool fault_hit(enum fault_site site)
{
	return __builtin_expect(fault_armed, 0) && fault_check(site);
}

/*
 * Read KVTIERD_FAULTS, replacing what was armed before and starting every
 * count from zero (a test process may call it again after changing it).
 * \return 0, or -EINVAL for a value that does not parse (logged)
 */
int fault_init(void);

/* Log how often each site was reached, if armed. */
void fault_report(void);

/* Faults injected at site since fault_init(). */
uint64_t fault_injected(enum fault_site site);
