/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A child that inherits a client's socket without exec and without the
 * library's fork handler (a raw clone, as a runtime that does not go through
 * libc's fork would make) keeps the connection open after the process that
 * made it dies.  The daemon must still end that process's leases and
 * reservations once its quarantine has passed: it watches the process, not
 * the socket.  The blocks stay byte-exact for a fresh client, and once the
 * child is gone too the daemon holds no more descriptors than before.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "harness.h"

#define N_BLOCKS 8
#define N_LEASES 4
#define TAG 0xf0f0

static struct daemon d;
static uint8_t keys[(N_BLOCKS + 2) * 32];

/* The inode of the only socket the process holds, or of the socket with
 * that inode: "socket:[N]" links under /proc/PID/fd. */
static int socket_inodes(pid_t pid, unsigned long *ret, int max)
{
	char path[64], link[320], target[64];
	int n = 0;
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	DIR *dir = opendir(path);
	if (!dir)
		return -errno;
	struct dirent *e;
	while ((e = readdir(dir))) {
		snprintf(link, sizeof(link), "%s/%s", path, e->d_name);
		ssize_t l = readlink(link, target, sizeof(target) - 1);
		if (l <= 0)
			continue;
		target[l] = 0;
		unsigned long ino;
		if (sscanf(target, "socket:[%lu]", &ino) == 1 && n < max)
			ret[n++] = ino;
	}
	closedir(dir);
	return n;
}

/* Process P: store, lease, reserve, then leave a raw-cloned child C that
 * holds every descriptor, and wait to be killed. */
static void process_p(int report)
{
	harness_in_child();
	kvt_client *c = client_connect(&d, "forker");
	kvt_ns *ns = engine_ns(c, "tiny", 1);
	kvt_ns_info info;
	CHECK(kvt_ns_get_info(ns, &info) == 0, "ns info");
	size_t bytes = info.shard_bytes;
	uint8_t *blk = malloc(bytes * N_BLOCKS);
	const void *srcs[N_BLOCKS];
	for (int i = 0; i < N_BLOCKS; i++) {
		block_pattern(blk + i * bytes, bytes, TAG, keys + i * 32);
		srcs[i] = blk + i * bytes;
	}
	CHECK(kvt_store(ns, 0, keys, N_BLOCKS, srcs, NULL) == N_BLOCKS, "P stores");

	kvt_slot_ref leases[N_LEASES], resv;
	CHECK(kvt_acquire(ns, 0, keys, N_LEASES, leases) == N_LEASES, "P leases");
	for (int i = 0; i < N_LEASES; i++)
		CHECK(leases[i].ptr && !memcmp(leases[i].ptr, blk + i * bytes, bytes),
		      "leased block %d reads back", i);
	CHECK(kvt_reserve(ns, 0, keys + N_BLOCKS * 32, 1, &resv) == 1 && resv.ptr,
	      "P reserves a new block");
	/* A copy in flight when P dies: half written. */
	memset(resv.ptr, 0xee, bytes / 2);

	unsigned long ino[4];
	CHECK(socket_inodes(getpid(), ino, 4) == 1, "P holds exactly one socket");

	/* No fork handler runs: C keeps the connection's descriptor, and the
	 * pool mappings, as they are. */
	pid_t child = (pid_t)syscall(SYS_clone, SIGCHLD, NULL, NULL, NULL, NULL);
	if (child == 0) {
		for (;;)
			pause();
	}
	CHECK(child > 0, "clone: %s", strerror(errno));
	uint64_t msg[2] = {(uint64_t)child, ino[0]};
	CHECK(write(report, msg, sizeof(msg)) == sizeof(msg), "report");
	for (;;)
		pause();
}

struct client_pids {
	pid_t pid;
	uint32_t n;
};

static int client_cb(const kvt_record *r, void *userdata)
{
	struct client_pids *q = userdata;
	uint64_t pid;
	if (!strcmp(kvt_record_kind(r), "client") && kvt_record_get_u64(r, "pid", &pid) == 0 &&
	    pid == (uint64_t)q->pid)
		q->n++;
	return 0;
}

static uint32_t sessions_of(kvt_client *c, pid_t pid)
{
	struct client_pids q = {pid, 0};
	CHECK(kvt_stats(c, KVT_STATS_CLIENTS, client_cb, &q) == 0, "stats");
	return q.n;
}

/* A fresh client in a process of its own loads every block byte-exact,
 * finds the reservation gone, and can store that key anew. */
static void fresh_client(void)
{
	pid_t pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		harness_in_child();
		kvt_client *c = client_connect(&d, "fresh");
		kvt_ns *ns = engine_ns(c, "tiny", 1);
		kvt_ns_info info;
		CHECK(kvt_ns_get_info(ns, &info) == 0, "ns info");
		size_t bytes = info.shard_bytes;
		uint8_t *want = malloc(bytes), *got = malloc(bytes * (N_BLOCKS + 1));
		void *dsts[N_BLOCKS + 1];
		int32_t st[N_BLOCKS + 1];
		for (int i = 0; i <= N_BLOCKS; i++)
			dsts[i] = got + i * bytes;
		memset(got, 0x11, bytes * (N_BLOCKS + 1));
		CHECK(kvt_load(ns, 0, keys, N_BLOCKS + 1, dsts, st) == N_BLOCKS,
		      "the %d stored blocks load, the reserved one does not", N_BLOCKS);
		for (int i = 0; i < N_BLOCKS; i++) {
			block_pattern(want, bytes, TAG, keys + i * 32);
			CHECK(st[i] == 0 && !memcmp(got + i * bytes, want, bytes),
			      "block %d byte-exact (%d)", i, st[i]);
		}
		CHECK(st[N_BLOCKS] == -ENOENT, "the aborted reservation is a miss (%d)",
		      st[N_BLOCKS]);
		/* Its key starts over in a slot of its own. */
		const void *src = want;
		block_pattern(want, bytes, TAG + 1, keys + N_BLOCKS * 32);
		CHECK(kvt_store(ns, 0, keys + N_BLOCKS * 32, 1, &src, NULL) == 1,
		      "the reserved key can be stored again");
		CHECK(kvt_load(ns, 0, keys + N_BLOCKS * 32, 1, dsts, st) == 1 &&
			      !memcmp(got, want, bytes),
		      "and loads back byte-exact");
		kvt_client_free(c);
		_exit(0);
	}
	CHECK(wait_exit(pid) == 0, "fresh client");
}

int main(void)
{
	int pipefd[2];
	uint8_t states[N_BLOCKS + 1];

	if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0) {
		printf("skipped: cannot become a child subreaper (%s)\n", strerror(errno));
		return 77;
	}
	daemon_start(&d, NULL);
	engine_keys(4242, 16 * (N_BLOCKS + 2), 0, 0, keys, N_BLOCKS + 2);
	kvt_client *c = client_connect(&d, "checker");
	kvt_ns *ns = engine_ns(c, "tiny", 1);
	kvt_ns_info info;
	CHECK(kvt_ns_get_info(ns, &info) == 0, "ns info");
	/* The start-up probe's connection is gone before the count. */
	WAIT_FOR(stat_get(c, "daemon", "clients") == 1, "only the checker connected");
	int fds_before = daemon_fd_count(&d);
	uint64_t extents_before = stat_get(c, "daemon", "extents");
	uint64_t quarantined_before = stat_get(c, "daemon", "quarantined");

	CHECK(pipe2(pipefd, O_CLOEXEC) == 0, "pipe");
	pid_t p = fork();
	CHECK(p >= 0, "fork");
	if (p == 0) {
		close(pipefd[0]);
		process_p(pipefd[1]);
	}
	close(pipefd[1]);
	uint64_t msg[2];
	CHECK(read(pipefd[0], msg, sizeof(msg)) == sizeof(msg), "P reports its child");
	close(pipefd[0]);
	pid_t child = (pid_t)msg[0];

	/* The precondition: C holds the very socket P connected with. */
	unsigned long ino[64];
	int n = socket_inodes(child, ino, 64);
	bool held = false;
	for (int i = 0; i < n; i++)
		held |= ino[i] == msg[1];
	CHECK(held, "C holds P's connection (socket inode %llu)", (unsigned long long)msg[1]);
	CHECK(stat_get(c, "tenant", "handles") == N_LEASES + 1, "P's leases and reservation");
	CHECK(kvt_lookup(ns, keys, N_BLOCKS + 1, 0, states) == N_BLOCKS, "P's blocks visible");
	CHECK(states[N_BLOCKS] == KVT_PENDING, "the reservation is pending");

	kill(p, SIGKILL);
	CHECK(wait_exit(p) == 128 + SIGKILL, "P killed");

	/* P's session lives on through C's descriptor, yet what P took ends. */
	WAIT_FOR(stat_get(c, "tenant", "handles") == 0, "P's handles to end by quarantine");
	CHECK(stat_get(c, "daemon", "quarantined") == quarantined_before + N_LEASES + 1,
	      "all %d ended by quarantine (%llu)", N_LEASES + 1,
	      (unsigned long long)(stat_get(c, "daemon", "quarantined") - quarantined_before));
	CHECK(sessions_of(c, p) == 1, "P's connection is still open (held by C)");
	CHECK(kvt_lookup(ns, keys, N_BLOCKS + 1, 0, states) == N_BLOCKS, "blocks still there");
	CHECK(states[N_BLOCKS] == KVT_MISS, "the aborted reservation is gone");
	CHECK(stat_get(c, "tenant", "used") == N_BLOCKS * info.block_bytes,
	      "the reserved slot went back (used %llu)",
	      (unsigned long long)stat_get(c, "tenant", "used"));
	fresh_client();
	CHECK(sessions_of(c, p) == 1, "still held by C");

	kill(child, SIGKILL);
	CHECK(wait_exit(child) == 128 + SIGKILL, "C killed (reaped as subreaper)");
	WAIT_FOR(sessions_of(c, p) == 0, "P's connection to close with C");
	WAIT_FOR(stat_get(c, "daemon", "clients") == 1, "only the checker left");
	int fds_want = fds_before + (int)(stat_get(c, "daemon", "extents") - extents_before);
	for (int i = 0; i < 1500 && daemon_fd_count(&d) != fds_want; i++)
		usleep(20000);
	CHECK(daemon_fd_count(&d) == fds_want, "daemon has %d fds, want %d", daemon_fd_count(&d),
	      fds_want);

	kvt_ns_close(ns);
	kvt_client_free(c);
	daemon_stop(&d);
	daemon_cleanup(&d);
	return 0;
}
