/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fault.h"
#include "keep.h"
#include "log.h"
#include "macro.h"
#include "manager.h"
#include "process.h"
#include "store.h"
#include "turns.h"

/* The name its pidfd is kept under (keep.h). */
static void kept_name(uint64_t pidfs_ino, char *buf, size_t size)
{
	snprintf(buf, size, "pidfd.%llu", (unsigned long long)pidfs_ino);
}

static void process_maybe_free(struct process *p)
{
	struct manager *m = p->m;

	if (p->n_sessions || p->n_handles)
		return;
	LIST_REMOVE(p, link);
	m->n_processes--;
	sd_event_source_disable_unref(p->exit_source);
	sd_event_source_disable_unref(p->grace_source);
	if (p->kept) {
		char name[32];
		kept_name(p->pidfs_ino, name, sizeof(name));
		keep_let_go(&m->keep, name);
	}
	if (p->pidfd >= 0)
		close(p->pidfd);
	free(p);
}

/* Handles ended a dispatch, at most: a turn's worth (turns.h), checked
 * every GRACE_PART of them, so that an exited process's 10^5 leases do not
 * hold the loop. */
#define GRACE_PART 64

static int on_grace(sd_event_source *src, uint64_t usec, void *userdata)
{
	struct process *p = userdata;
	struct manager *m = p->m;
	struct turn turn = turn_begin(&m->turns);
	uint32_t n = 0;

	/* The process is gone, so is every connection it made, and the last
	 * copies have had time to land: its slots can be reused. */
	p->n_sessions++; /* hold the record while draining */
	while (!LIST_EMPTY(&p->handles)) {
		struct handle *h = LIST_FIRST(&p->handles);
		if (h->kind == HANDLE_LEASE)
			p->ended_leases++;
		else
			p->ended_reservations++;
		store_handle_drop(&m->store, h->tenant, h);
		if (src && ++n % GRACE_PART == 0 && turn_over(&turn) && !LIST_EMPTY(&p->handles)) {
			/* The rest at the next dispatch, after the sockets
			 * that are ready. */
			p->n_sessions--;
			sd_event_source_set_time(src, 1);
			sd_event_source_set_enabled(src, SD_EVENT_ONESHOT);
			return 0;
		}
	}
	p->n_sessions--;
	p->grace_source = sd_event_source_disable_unref(p->grace_source);
	m->c.quarantined_handles += p->ended_leases + p->ended_reservations;
	if (p->pid)
		log_info("Process %d exited: released %u lease(s) and aborted %u reservation(s) after %u ms of quarantine",
			 (int)p->pid, p->ended_leases, p->ended_reservations, m->config->quarantine_ms);
	else
		log_info("Process in another pid namespace (pidfs inode %llu) exited: released %u lease(s) and aborted %u reservation(s) after %u ms of quarantine",
			 (unsigned long long)p->pidfs_ino, p->ended_leases, p->ended_reservations,
			 m->config->quarantine_ms);
	process_maybe_free(p);
	return 0;
}

static void arm_quarantine(struct process *p)
{
	struct manager *m = p->m;

	if (p->grace_source)
		return;
	int r = sd_event_add_time_relative(m->event, &p->grace_source, CLOCK_MONOTONIC,
					   (uint64_t)m->config->quarantine_ms * 1000, 0,
					   on_grace, p);
	if (r < 0) {
		log_warning_errno(r, "Failed to arm quarantine timer, releasing at once: %m");
		on_grace(NULL, 0, p);
	}
}

/* The handles' owner is gone: the process has exited and no connection it
 * made is open any more.  While one is (its socket passed to a child that
 * outlived it, or by SCM_RIGHTS to another process), whoever holds that
 * socket holds the handles too, and may still be copying into them. */
static void maybe_orphaned(struct process *p)
{
	if (!p->exited || p->n_sessions)
		return;
	if (p->n_handles)
		arm_quarantine(p);
	else
		process_maybe_free(p);
}

static int on_process_exit(sd_event_source *src, int fd, uint32_t revents, void *userdata)
{
	struct process *p = userdata;

	p->exited = true;
	sd_event_source_set_enabled(src, SD_EVENT_OFF);
	maybe_orphaned(p);
	return 0;
}

/* Field 22 of /proc/PID/stat, or 0 when it cannot be read. */
static uint64_t start_time_of(pid_t pid)
{
	char path[32], buf[1024];
	unsigned long long v = 0;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return 0;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	/* The command name may hold spaces and parentheses: fields are
	 * counted from the last ')', which ends it (field 2). */
	char *p = strrchr(buf, ')');
	for (int field = 2; p && field < 22; field++)
		p = strchr(p + 1, ' ');
	if (p && sscanf(p + 1, "%llu", &v) != 1)
		v = 0;
	return v;
}

#ifndef PID_FS_MAGIC
#define PID_FS_MAGIC 0x50494446
#endif

/* The inode of a pidfd on pidfs (Linux 6.9+): one per process, never
 * reused while the kernel runs.  0 where pidfds are anonymous inodes, all
 * the same one (6.5 to 6.8). */
static uint64_t pidfs_ino_of(int pidfd)
{
	struct statfs sf;
	struct stat st;

	if (fault_hit(FAULT_PIDFS))
		return 0;
	if (fstatfs(pidfd, &sf) < 0 || sf.f_type != PID_FS_MAGIC || fstat(pidfd, &st) < 0)
		return 0;
	return (uint64_t)st.st_ino;
}

uint64_t process_owner_id(const struct process *p, int32_t *ret_pid)
{
	*ret_pid = p->pid;
	return p->start_time;
}

int process_get(struct manager *m, pid_t pid, int pidfd, struct process **ret)
{
	uint64_t ino = 0;
	int r;

	if (pid <= 0 && pidfd < 0)
		return -ESRCH;
	if (pid <= 0)
		ino = pidfs_ino_of(pidfd);
	/* A live record for the pid is the same process: its pidfd has not
	 * fired, so the pid cannot have been reused.  Without a pid, the same
	 * pidfs inode is the same process; without either, no record is
	 * anyone else's. */
	struct process *p;
	LIST_FOREACH(p, &m->processes, link)
		if (!p->exited && ((pid > 0 && p->pid == pid) ||
				   (pid <= 0 && ino && !p->pid && p->pidfs_ino == ino))) {
			if (pidfd >= 0)
				close(pidfd);
			p->n_sessions++;
			*ret = p;
			return 0;
		}
	if (pidfd < 0) {
		pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
		if (pidfd < 0)
			return -errno;
	}
	p = fault_hit(FAULT_PROCESS) ? NULL : calloc(1, sizeof(*p));
	if (!p) {
		close(pidfd);
		return -ENOMEM;
	}
	LIST_INIT(&p->handles);
	p->pid = pid > 0 ? pid : 0;
	p->pidfs_ino = ino;
	p->start_time = pid > 0 ? start_time_of(pid) : ino;
	p->pidfd = pidfd;
	p->m = m;
	r = sd_event_add_io(m->event, &p->exit_source, pidfd, EPOLLIN, on_process_exit, p);
	if (r < 0) {
		close(pidfd);
		free(p);
		return r;
	}
	p->n_sessions = 1;
	LIST_INSERT_HEAD(&m->processes, p, link);
	m->n_processes++;
	/* Where handles outlive the daemon, so does the one way to find this
	 * process again and tell whether it lives. */
	if (!p->pid && ino && m->store.ledger) {
		char name[32];
		kept_name(ino, name, sizeof(name));
		keep_fd(&m->keep, name, pidfd, true);
		p->kept = true;
	}
	*ret = p;
	return 0;
}

struct process *process_adopt(struct manager *m, pid_t pid, uint64_t start_time)
{
	struct process *p;

	LIST_FOREACH(p, &m->processes, link)
		if (p->pid == pid && p->start_time == start_time)
			return p;
	p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	LIST_INIT(&p->handles);
	p->pid = pid;
	p->start_time = start_time;
	p->pidfd = -1;
	p->m = m;
	/* The same process unless the pid's start time says otherwise (a pid
	 * reused since): where it cannot be read (ProtectProc=invisible hides
	 * other users' processes), any process of that pid is taken for the
	 * owner, which can only keep its handles longer, never end them while
	 * the owner may still be copying.  An owner in a pid namespace this
	 * daemon cannot see (pid 0) is found only by the pidfd the earlier
	 * daemon kept, and only if it is on the same pidfs inode. */
	char name[32];
	int fd;
	uint64_t now;
	bool same;
	kept_name(start_time, name, sizeof(name));
	if (pid > 0) {
		fd = (int)syscall(SYS_pidfd_open, pid, 0);
		now = fd >= 0 ? start_time_of(pid) : 0;
		same = !start_time || !now || now == start_time;
	} else {
		fd = start_time ? keep_take(&m->keep, name) : -1;
		now = fd >= 0 ? pidfs_ino_of(fd) : 0;
		same = now && now == start_time;
	}
	if (fd >= 0 && same &&
	    sd_event_add_io(m->event, &p->exit_source, fd, EPOLLIN, on_process_exit, p) >= 0) {
		p->pidfd = fd;
		if (pid <= 0) {
			p->pidfs_ino = start_time;
			keep_fd(&m->keep, name, fd, false);
			p->kept = true;
		}
	} else {
		if (fd >= 0)
			close(fd);
		if (pid <= 0) {
			keep_let_go(&m->keep, name);
			log_warning("Handles kept for a process in another pid namespace (pidfs inode %llu) whose pidfd was not kept: they end after the quarantine, since kvtierd cannot see whether it lives",
				    (unsigned long long)start_time);
		}
		p->exited = true;
	}
	LIST_INSERT_HEAD(&m->processes, p, link);
	m->n_processes++;
	return p;
}

void process_adopt_end(struct manager *m)
{
	struct process *p, *next;

	for (p = LIST_FIRST(&m->processes); p; p = next) {
		next = LIST_NEXT(p, link);
		if (p->exited)
			maybe_orphaned(p);
		else
			process_maybe_free(p);
	}
}

void process_session_closed(struct process *p)
{
	p->n_sessions--;
	if (p->exited)
		maybe_orphaned(p);
	else
		process_maybe_free(p);
}

void process_handle_link(struct process *p, struct handle *h)
{
	LIST_INSERT_HEAD(&p->handles, h, owner_link);
	p->n_handles++;
}

void process_handle_unlink(struct process *p, struct handle *h)
{
	LIST_REMOVE(h, owner_link);
	h->owner = NULL;
	p->n_handles--;
	process_maybe_free(p);
}

void process_free_all(struct manager *m)
{
	while (!LIST_EMPTY(&m->processes)) {
		struct process *p = LIST_FIRST(&m->processes);
		/* Its pidfd stays in systemd's store, as the ledger does. */
		p->kept = false;
		p->n_sessions = 0;
		p->n_handles = 0;
		LIST_INIT(&p->handles);
		process_maybe_free(p);
	}
}
