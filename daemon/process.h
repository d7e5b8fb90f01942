/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Client processes, watched through pidfds.  A closed socket does not mean a
 * client's copies into the pool have finished (its GPU or io_uring work can
 * still land), and an exited process does not mean its socket is closed (a
 * child it forked, or a process it passed the socket to, may hold it and
 * keep using the mappings and handles).  So the handles a process took end
 * only when both have happened, the process exited and every connection it
 * made closed, and then a grace period ([daemon] quarantine_ms) has passed.
 *
 * A client in a pid namespace the daemon cannot see (kvtierd in a pod of
 * its own, without hostPID) has pid 0 in SO_PEERCRED.  It is watched by
 * the pidfd SO_PEERPIDFD gives (Linux 6.5+; without it such a client is
 * refused at accept) and known by that pidfd's inode on pidfs (6.9+), one
 * per process: its connections are one process, as a pid's are.  Where
 * pidfds are anonymous inodes (6.5 to 6.8), each connection is a process
 * of its own, which still ends the handles it took once it is gone.  Its
 * owner id across a restart is (0, inode), and its pidfd goes to keep.h's
 * store as pidfd.INODE, since nothing else can open it again.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>
#include <sys/types.h>
#include <systemd/sd-event.h>

struct handle;
struct manager;

struct process {
	pid_t pid; /* 0: in a pid namespace this daemon cannot see */
	uint64_t start_time; /* clock ticks after boot (/proc/PID/stat): with
			      * the pid, which process it is across a restart
			      * of the daemon; for pid 0, the pidfs inode */
	uint64_t pidfs_ino;  /* pid 0: the pidfd's inode on pidfs, 0 unknown */
	int pidfd;
	bool exited;
	bool kept; /* pidfd in keep.h's store, as pidfd.INODE */
	uint32_t n_sessions; /* its connections still open, whoever holds them */
	LIST_HEAD(, handle) handles; /* taken through its connections, still open */
	uint32_t n_handles;
	uint32_t ended_leases, ended_reservations; /* by the quarantine, so far */
	sd_event_source *exit_source;
	sd_event_source *grace_source;
	struct manager *m;
	LIST_ENTRY(process) link; /* manager.processes */
};

/* The live process record for a peer; pidfd is consumed (-1: open one,
 * which pid 0 cannot: -ESRCH). */
int process_get(struct manager *m, pid_t pid, int pidfd, struct process **ret);
/* For handles an earlier daemon kept (the store's owner_adopt): the record
 * of the process of that pid and start time, with no session: a live one,
 * watched as every other, or one already gone, whose handles end after the
 * quarantine once process_adopt_end() has run.  Pid 0 is live only if its
 * pidfd was kept (keep_take(), pidfd.INODE) and is on that inode.  NULL:
 * no memory. */
struct process *process_adopt(struct manager *m, pid_t pid, uint64_t start_time);
/* Adoption is over: processes gone with handles start their quarantine,
 * those left without any go. */
void process_adopt_end(struct manager *m);
/* The store's owner_id: pid and start time. */
uint64_t process_owner_id(const struct process *p, int32_t *ret_pid);
/* Drop a session's reference; the record goes when nothing needs it. */
void process_session_closed(struct process *p);
/* The store's handle_taken and handle_ended (store.h): a handle the
 * process took, and one that ended. */
void process_handle_link(struct process *p, struct handle *h);
void process_handle_unlink(struct process *p, struct handle *h);
void process_free_all(struct manager *m);
