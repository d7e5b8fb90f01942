/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the daemon keeps across its own restarts, and how: the pool's
 * extents and the ledger's memfds (ledger.h), and its listening sockets.
 *
 * - Under systemd, every such memfd goes to the service's file descriptor
 *   store as it is made (FDSTORE=1, FDNAME=pool.N, slots.N, handles.T,
 *   ledger): after a crash or a Restart=, systemd hands them back to the
 *   next daemon with LISTEN_FDS and LISTEN_FDNAMES.  So does the pidfd of
 *   each client process in a pid namespace the daemon cannot see
 *   (pidfd.INODE, process.h): the one way to find it again.
 * - An upgrade in place (SIGUSR2) re-executes the binary on disk in the
 *   same process, handing it the same memfds and the listening sockets,
 *   left where they are and named in KVTIERD_FDS, so that clients
 *   reconnect to the new code and find their blocks.
 *
 * At start keep_collect() sorts what was passed: the kept memfds (for the
 * store to adopt), the sockets kept across a re-execution, and at most one
 * socket from systemd's socket activation.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#define KEEP_MAX_SOCKETS 72
/* A re-execution's hand-over: name=fd,name=fd,... (left where they were). */
#define KEEP_ENV "KVTIERD_FDS"

struct keep_fd {
	char name[64];
	int fd;
};

struct keep {
	/* Passed at start: memfds to adopt (taken by the store: fd -1). */
	struct keep_fd *passed;
	uint32_t n_passed;
	/* Sockets passed at start: name "socket" (the main one, not ours to
	 * unlink), "socket.owned" (ours), "socket.T" (tenant T's). */
	struct keep_fd sockets[KEEP_MAX_SOCKETS];
	uint32_t n_sockets;
	int activation_fd; /* systemd's socket activation, or -1 */
	/* What this daemon keeps, for a re-execution: the memfds it made or
	 * adopted (not owned here). */
	struct keep_fd *kept;
	uint32_t n_kept, cap_kept;
	bool fdstore;      /* NOTIFY_SOCKET is set: systemd may keep them */
	uint64_t stored;   /* descriptors sent to the store */
	uint64_t store_failures;
};

/* Sort the descriptors passed at start (and clear LISTEN_*).  \return 0 or
 * a negative errno (logged) */
int keep_collect(struct keep *k);
/* The passed memfd of that name, taken (-1: none). */
int keep_take(struct keep *k, const char *name);
/* Close what was passed and not taken, and let it go (keep_let_go()). */
void keep_close_untaken(struct keep *k);
/* A descriptor to keep: on the list a re-execution hands on, and when made now
 * (fresh), to systemd's store. */
void keep_fd(struct keep *k, const char *name, int fd, bool fresh);
/* What was kept under name is not any more: off the list a re-execution
 * hands on, and out of systemd's store, so that its memory goes. */
void keep_let_go(struct keep *k, const char *name);
void keep_done(struct keep *k);

/* Re-execute path (the binary on disk) in this process with argv, handing
 * on the kept memfds and the sockets (name, fd) given.  Returns only on
 * failure: a negative errno, nothing changed. */
int keep_reexec(struct keep *k, const char *path, char *const *argv,
		const struct keep_fd *sockets, uint32_t n_sockets);
