/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A child that inherits a client's socket without exec and without the
 * library's fork handler (a raw clone, as a runtime that does not go through
 * libc's fork would make) keeps the connection, the pool mappings and the
 * handles after the process that made them dies.  The handles belong to
 * whoever holds the socket: while the child holds it they stay, past any
 * number of quarantines, so its leased blocks are not evicted under
 * pressure and its reservation commits; once the child is gone too (the
 * process exited and the connection closed), what it left ends by
 * quarantine.  Afterwards the daemon holds no more descriptors than before.
 *
 * Whether the daemon has seen the parent die is not a matter of waiting
 * long enough: a witness process leases a block and is killed after the
 * parent died.  The daemon handles exits in order and a quarantine started
 * earlier ends no later, so once the witness's lease has ended, the
 * parent's handles would have too, were they the parent's alone.
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
#define TAG_PRESSURE 0x0bad

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

/* C, once told to go on: its leases still read the blocks P leased, its
 * reservation (half written by P) is finished and committed, all leases
 * but the last are released.  It answers 0, or the step that failed. */
static void process_c(kvt_client *c, const kvt_slot_ref *leases, const kvt_slot_ref *resv,
		      size_t bytes, int go, int answer)
{
	uint8_t *want = malloc(bytes);
	int32_t failed = 0, st[N_LEASES];
	char cmd;

	CHECK(want && read(go, &cmd, 1) == 1, "C waits for its turn");
	for (int i = 0; i < N_LEASES && !failed; i++) {
		block_pattern(want, bytes, TAG, keys + i * 32);
		if (memcmp(leases[i].ptr, want, bytes))
			failed = 1 + i;
	}
	if (!failed) {
		block_pattern(want, bytes, TAG + 1, keys + N_BLOCKS * 32);
		memcpy(resv->ptr, want, bytes);
		uint8_t ok = 1;
		if (kvt_commit(c, &resv->handle, &ok, 1, st) != 0 || st[0] != 0)
			failed = 10;
	}
	if (!failed) {
		uint64_t h[N_LEASES - 1];
		for (int i = 0; i < N_LEASES - 1; i++)
			h[i] = leases[i].handle;
		if (kvt_release(c, h, N_LEASES - 1, st) != 0)
			failed = 20;
		for (int i = 0; i < N_LEASES - 1 && !failed; i++)
			if (st[i] != 0)
				failed = 21 + i;
	}
	CHECK(write(answer, &failed, sizeof(failed)) == sizeof(failed), "C answers");
	for (;;)
		pause();
}

/* Process P: store, lease, reserve, then leave a raw-cloned child C that
 * holds every descriptor, and wait to be killed. */
static void process_p(int report, int go, int answer)
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

	static kvt_slot_ref leases[N_LEASES], resv;
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

	/* No fork handler runs: C keeps the connection's descriptor, the
	 * pool mappings and the library's state, as they are. */
	pid_t child = (pid_t)syscall(SYS_clone, SIGCHLD, NULL, NULL, NULL, NULL);
	if (child == 0)
		process_c(c, leases, &resv, bytes, go, answer);
	CHECK(child > 0, "clone: %s", strerror(errno));
	uint64_t msg[2] = {(uint64_t)child, ino[0]};
	CHECK(write(report, msg, sizeof(msg)) == sizeof(msg), "report");
	for (;;)
		pause();
}

/* A process that leases one block, says so, and waits to be killed. */
static pid_t witness(int report)
{
	pid_t pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		harness_in_child();
		kvt_client *c = client_connect(&d, "witness");
		kvt_ns *ns = engine_ns(c, "tiny", 1);
		kvt_slot_ref lease;
		CHECK(kvt_acquire(ns, 0, keys + (N_BLOCKS - 1) * 32, 1, &lease) == 1,
		      "the witness leases a block");
		char x = 1;
		CHECK(write(report, &x, 1) == 1, "the witness reports");
		for (;;)
			pause();
	}
	return pid;
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

/* Store twice the tenant's quota in fresh blocks: everything that can be
 * evicted is, and its slots are written over. */
static void pressure(kvt_ns *ns, const kvt_ns_info *info, uint64_t quota)
{
	size_t bytes = info->shard_bytes;
	uint32_t n = (uint32_t)(2 * quota / info->block_bytes);
	uint8_t key[32], *blk = malloc(bytes);
	const void *src = blk;

	CHECK(blk, "malloc");
	for (uint32_t i = 0; i < n; i++) {
		engine_keys(0x9e55 + i, 16, 0, 0, key, 1);
		block_pattern(blk, bytes, TAG_PRESSURE, key);
		CHECK(kvt_store(ns, 0, key, 1, &src, NULL) >= 0, "pressure store %u", i);
	}
	free(blk);
}

int main(void)
{
	int report[2], go[2], answer[2], wpipe[2];
	uint8_t states[N_BLOCKS + 1];

	if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0) {
		printf("skipped: cannot become a child subreaper (%s)\n", strerror(errno));
		return KVT_TEST_SKIP;
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
	int pool_fds_before = pool_descriptors(c);
	uint64_t quarantined_before = stat_get(c, "daemon", "quarantined");

	CHECK(pipe2(report, O_CLOEXEC) == 0 && pipe2(go, O_CLOEXEC) == 0 &&
		      pipe2(answer, O_CLOEXEC) == 0 && pipe2(wpipe, O_CLOEXEC) == 0,
	      "pipes");
	pid_t p = fork();
	CHECK(p >= 0, "fork");
	if (p == 0) {
		close(report[0]);
		close(go[1]);
		close(answer[0]);
		process_p(report[1], go[0], answer[1]);
	}
	close(report[1]);
	close(go[0]);
	close(answer[1]);
	uint64_t msg[2];
	CHECK(read(report[0], msg, sizeof(msg)) == sizeof(msg), "P reports its child");
	close(report[0]);
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

	/* W dies after P: once W's lease has ended by quarantine, so would
	 * have P's handles, were they P's alone. */
	pid_t w = witness(wpipe[1]);
	close(wpipe[1]);
	char x;
	CHECK(read(wpipe[0], &x, 1) == 1, "the witness leased");
	close(wpipe[0]);
	CHECK(stat_get(c, "tenant", "handles") == N_LEASES + 2, "P's handles and W's lease");
	kill(w, SIGKILL);
	CHECK(wait_exit(w) == 128 + SIGKILL, "W killed");
	WAIT_FOR(stat_get(c, "daemon", "quarantined") > quarantined_before,
		 "the witness's lease to end by quarantine");
	CHECK(stat_get(c, "tenant", "handles") == N_LEASES + 1,
	      "P's leases and reservation stay while C holds the connection (%llu handles)",
	      (unsigned long long)stat_get(c, "tenant", "handles"));
	CHECK(stat_get(c, "daemon", "quarantined") == quarantined_before + 1,
	      "only the witness's lease ended by quarantine (%llu)",
	      (unsigned long long)(stat_get(c, "daemon", "quarantined") - quarantined_before));
	CHECK(sessions_of(c, p) == 1, "P's connection is still open (held by C)");

	/* Everything evictable goes; C's leased blocks and its slot do not. */
	uint64_t evictions = stat_get(c, "tenant", "evictions");
	pressure(ns, &info, stat_get(c, "tenant", "quota"));
	CHECK(stat_get(c, "tenant", "evictions") > evictions, "the pressure evicted blocks");
	CHECK(kvt_lookup(ns, keys, N_LEASES, 0, states) == N_LEASES, "the leased blocks stay");

	char go_on = 1;
	int32_t failed = -1;
	CHECK(write(go[1], &go_on, 1) == 1, "tell C to go on");
	CHECK(read(answer[0], &failed, sizeof(failed)) == sizeof(failed), "C answers");
	CHECK(failed == 0, "C: leases byte-exact, commit and releases accepted (failed step %d)",
	      failed);
	CHECK(stat_get(c, "tenant", "handles") == 1, "C keeps one lease");

	/* What C committed is there for everyone, byte-exact. */
	uint8_t *want = malloc(info.shard_bytes), *got = malloc(info.shard_bytes);
	void *dst = got;
	int32_t st;
	block_pattern(want, info.shard_bytes, TAG + 1, keys + N_BLOCKS * 32);
	CHECK(kvt_load(ns, 0, keys + N_BLOCKS * 32, 1, &dst, &st) == 1 &&
		      !memcmp(got, want, info.shard_bytes),
	      "C's committed block loads byte-exact (%d)", st);

	/* C goes: the process exited and the connection closed, so the lease
	 * it kept ends by quarantine. */
	kill(child, SIGKILL);
	CHECK(wait_exit(child) == 128 + SIGKILL, "C killed (reaped as subreaper)");
	WAIT_FOR(sessions_of(c, p) == 0, "P's connection to close with C");
	WAIT_FOR(stat_sum(c, "tenant", "handles") == 0, "C's last lease to end by quarantine");
	CHECK(stat_get(c, "daemon", "quarantined") == quarantined_before + 2,
	      "the witness's lease and C's last one ended by quarantine (%llu)",
	      (unsigned long long)(stat_get(c, "daemon", "quarantined") - quarantined_before));
	WAIT_FOR(stat_get(c, "daemon", "clients") == 1, "only the checker left");
	int fds_want = fds_before + pool_descriptors(c) - pool_fds_before;
	for (int i = 0; i < 1500 && daemon_fd_count(&d) != fds_want; i++)
		usleep(20000);
	CHECK(daemon_fd_count(&d) == fds_want, "daemon has %d fds, want %d", daemon_fd_count(&d),
	      fds_want);

	close(go[1]);
	close(answer[0]);
	free(want);
	free(got);
	kvt_ns_close(ns);
	kvt_client_free(c);
	daemon_stop(&d);
	daemon_cleanup(&d);
	return 0;
}
