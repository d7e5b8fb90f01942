/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Clients in pid namespaces the daemon cannot see, as engine pods beside a
 * kvtierd pod without hostPID: kvtierd runs as pid 1 of a pid namespace of
 * its own, and every client (this test, kvt-engine in the test's pid
 * namespace, kvt-engine as pid 1 of yet another) arrives with pid 0 in
 * SO_PEERCRED.  Each must still be told apart from the others and cleaned
 * up when it dies:
 *
 *  1. this process's two connections are one client process, other
 *     processes are others (the pidfd's inode on pidfs): the handles a
 *     client record shows are its process's; two engines that are each
 *     pid 1 of a pid namespace of its own are two processes, and killing
 *     one ends its handles only;
 *  2. a writer SIGKILLed holding 16 reservations, and a scheduler in a pid
 *     namespace of its own SIGKILLed holding 16 leases, lose them after the
 *     quarantine, while this process, alive and connected, keeps its own
 *     lease: slots, handles and the daemon's descriptors back to where they
 *     were, and the blocks stored and loaded again, every byte checked;
 *  3. without SO_PEERPIDFD (kernels before 6.5, played by a fault), such a
 *     client is refused with the reason, not taken for a process it is not;
 *  4. where pidfds cannot be compared (6.5 to 6.8, played by a fault), each
 *     connection is a process of its own, and clean-up still holds;
 *  5. across a restart (kill -9, and SIGTERM, with the store as systemd
 *     keeps it) and an upgrade in place (SIGUSR2), the kept handles of a client in another
 *     pid namespace stay its own while it lives, found again by the pidfd
 *     kept in the store, and end after the quarantine once it is killed;
 *     the store keeps no pidfd of a process gone.
 */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "harness.h"

#define PIDFS_MAGIC 0x50494446

/* Whether this kernel's pidfds are on pidfs (Linux 6.9+). */
static bool have_pidfs(void)
{
	struct statfs sf;
	int fd = (int)syscall(SYS_pidfd_open, getpid(), 0);
	bool yes = fd >= 0 && fstatfs(fd, &sf) == 0 && sf.f_type == PIDFS_MAGIC;
	if (fd >= 0)
		close(fd);
	return yes;
}

/* A client dies with SIGKILL holding 16 handles; the checker's own lease
 * stays.  Returns after the quarantine has ended the dead one's.  A holder
 * connected shows its handles in its client record; one whose connection
 * a restart closed, only in the tenant's. */
static void kill_holder(kvt_client *c, pid_t holder, int in, FILE *out, bool connected)
{
	CHECK(stat_get(c, "tenant", "handles") == 17, "16 handles of the holder and the checker's");
	/* A client record shows its process's handles: 1 + 16 when the two
	 * are told apart, 17 twice if they were taken for one process. */
	uint64_t want = connected ? 17 : 1;
	CHECK(stat_sum(c, "client", "handles") == want, "the holder's handles are its own (%llu)",
	      (unsigned long long)stat_sum(c, "client", "handles"));
	kill(holder, SIGKILL);
	CHECK(wait_exit(holder) == 128 + SIGKILL, "holder killed");
	close(in);
	fclose(out);
	WAIT_FOR(stat_sum(c, "tenant", "handles") == 1, "the quarantine to end the holder's handles");
}

/* One round of the reservation holder and one of the lease holder. */
static void rounds(struct daemon *d, kvt_client *c, kvt_ns *ns, uint64_t used_before,
		   uint64_t quarantined_before)
{
	uint8_t keys[16 * 32], st[16];
	char line[256], pin[200], out[4096];
	int in;
	FILE *fout;

	engine_keys(7, 256, 0, 0, keys, 16);
	/* Reservations, from a process in the test's pid namespace. */
	pid_t holder = engine_spawn(d, &in, &fout, "--model", "tiny", "--prefix", "256",
				    "--prefix-seed", "7", "--suffix", "0", "--hold", "--name",
				    "holder", NULL);
	CHECK(fgets(line, sizeof(line), fout) && !strncmp(line, "HELD 16", 7),
	      "holder reserved 16 blocks: %s", line);
	CHECK(stat_get(c, "tenant", "used") > used_before, "the reservations hold slots");
	kill_holder(c, holder, in, fout, true);
	CHECK(kvt_lookup(ns, keys, 16, 0, st) == 0, "nothing visible after the crash");
	for (int i = 0; i < 16; i++)
		CHECK(st[i] == KVT_MISS, "key %d is a miss after the crash", i);
	CHECK(stat_get(c, "tenant", "used") == used_before, "every reserved slot returned");
	CHECK(stat_get(c, "daemon", "quarantined") == quarantined_before + 16,
	      "16 reservations ended by quarantine");

	/* Leases, from a scheduler that is pid 1 of a pid namespace of its
	 * own: the blocks stored (every byte checked) first. */
	CHECK(engine_run(d, out, sizeof(out), "--model", "tiny", "--prefix", "256",
			 "--prefix-seed", "7", "--suffix", "0", "--expect-hits", "0", NULL) == 0,
	      "store: %s", out);
	uint64_t used_stored = stat_get(c, "tenant", "used");
	snprintf(pin, sizeof(pin), "%s/pins", d->dir);
	pid_t sched = engine_spawn_pidns(d, &in, &fout, "--model", "tiny", "--prefix", "256",
					 "--prefix-seed", "7", "--suffix", "0", "--pin", pin,
					 "--name", "scheduler", NULL);
	CHECK(fgets(line, sizeof(line), fout) && !strncmp(line, "PINNED 16", 9),
	      "scheduler acquired 16 leases: %s", line);
	kill_holder(c, sched, in, fout, true);
	CHECK(stat_get(c, "daemon", "quarantined") == quarantined_before + 32,
	      "16 leases ended by quarantine");
	CHECK(stat_get(c, "tenant", "used") == used_stored, "the leased blocks stay stored");
	CHECK(engine_run(d, out, sizeof(out), "--model", "tiny", "--prefix", "256",
			 "--prefix-seed", "7", "--suffix", "0", "--expect-hits", "16", "--no-store",
			 NULL) == 0 && strstr(out, "every loaded byte verified"),
	      "load after the leases ended: %s", out);
	CHECK(kvt_delete(ns, keys, 16) >= 0, "delete");
	WAIT_FOR(stat_sum(c, "tenant", "used") == used_before, "the stored blocks to be deleted");
}

/* 1, on: two engines, each pid 1 of a pid namespace of its own, hold 16
 * reservations each: two client processes, each with its own handles, and
 * killing one ends its handles only. */
static void same_pid_twice(struct daemon *d, kvt_client *c)
{
	char line[256];
	int in[2];
	FILE *out[2];
	pid_t pid[2];

	for (int i = 0; i < 2; i++) {
		pid[i] = engine_spawn_pidns(d, &in[i], &out[i], "--model", "tiny", "--prefix", "256",
					    "--prefix-seed", i ? "8" : "9", "--suffix", "0", "--hold",
					    "--name", i ? "pid1-b" : "pid1-a", NULL);
		CHECK(fgets(line, sizeof(line), out[i]) && !strncmp(line, "HELD 16", 7),
		      "engine %d reserved 16 blocks: %s", i, line);
	}
	CHECK(stat_get(c, "tenant", "handles") == 33, "16 + 16 + the checker's lease");
	/* Taken for one process, each record would show 32. */
	CHECK(stat_sum(c, "client", "handles") == 33, "two processes of pid 1 told apart (%llu)",
	      (unsigned long long)stat_sum(c, "client", "handles"));
	kill(pid[0], SIGKILL);
	CHECK(wait_exit(pid[0]) == 128 + SIGKILL, "engine 0 killed");
	close(in[0]);
	fclose(out[0]);
	WAIT_FOR(stat_get(c, "tenant", "handles") == 17, "the killed engine's handles to end");
	CHECK(stat_sum(c, "client", "handles") == 17, "the other's stay its own");
	kill(pid[1], SIGKILL);
	CHECK(wait_exit(pid[1]) == 128 + SIGKILL, "engine 1 killed");
	close(in[1]);
	fclose(out[1]);
	WAIT_FOR(stat_get(c, "tenant", "handles") == 1, "the other's handles to end");
}

/* The bytes of the checker's block of that tag. */
static void own_block(uint8_t *block, size_t bytes, uint32_t tag)
{
	for (size_t i = 0; i < bytes; i++)
		block[i] = (uint8_t)(i * 7 + tag);
}

/* This process's lease on one block of its own (tag), held throughout: a
 * client alive in another pid namespace is never taken for a dead one. */
static kvt_slot_ref lease_own(kvt_ns *ns, uint32_t tag)
{
	uint8_t key[32];
	kvt_ns_info info;
	int32_t st = 1;

	CHECK(kvt_ns_get_info(ns, &info) == 0, "namespace info");
	uint8_t *block = malloc(info.shard_bytes);
	CHECK(block, "malloc");
	own_block(block, info.shard_bytes, tag);
	token_key(99, tag, key);
	const void *src = block;
	CHECK(kvt_store(ns, 0, key, 1, &src, &st) == 1 && st == 0, "store the checker's block");
	kvt_slot_ref ref;
	CHECK(kvt_acquire(ns, 0, key, 1, &ref) == 1 && ref.status == 0, "lease it");
	CHECK(ref.ptr && memcmp(ref.ptr, block, info.shard_bytes) == 0, "its bytes");
	free(block);
	return ref;
}

/* The lease lived: its bytes are the block's own, and it releases. */
static void release_own(kvt_client *c, kvt_ns *ns, kvt_slot_ref ref, uint32_t tag)
{
	kvt_ns_info info;

	CHECK(kvt_ns_get_info(ns, &info) == 0, "namespace info");
	uint8_t *block = malloc(info.shard_bytes);
	CHECK(block, "malloc");
	own_block(block, info.shard_bytes, tag);
	CHECK(memcmp(ref.ptr, block, info.shard_bytes) == 0, "the leased bytes are the block's own");
	free(block);
	CHECK(kvt_release(c, &ref.handle, 1, NULL) == 0, "the checker's own lease lived through it");
}

/* Descriptors of that prefix in the store. */
static int stored(struct fdstore *s, const char *prefix)
{
	int n = 0;

	fdstore_drain(s);
	pthread_mutex_lock(&s->lock);
	for (int i = 0; i < s->n; i++)
		n += !strncmp(s->names[i], prefix, strlen(prefix));
	pthread_mutex_unlock(&s->lock);
	return n;
}

/* 5: the checker's lease and a live holder's reservations kept across a
 * restart of the daemon (restart()); the holder then killed.  A kept
 * handle taken for one of a process gone would end after the quarantine
 * armed at adoption, before the holder's, armed later at its death. */
static void keep_round(struct daemon *d, struct fdstore *s, kvt_client *c, uint32_t tag,
		       void (*restart)(struct daemon *d, struct fdstore *s))
{
	char line[256];
	int in;
	FILE *fout;

	kvt_ns *ns = engine_ns(c, "tiny", 1);
	kvt_slot_ref ref = lease_own(ns, tag);
	pid_t holder = engine_spawn_pidns(d, &in, &fout, "--model", "tiny", "--prefix", "256",
					  "--prefix-seed", "7", "--suffix", "0", "--hold", "--name",
					  "holder", NULL);
	CHECK(fgets(line, sizeof(line), fout) && !strncmp(line, "HELD 16", 7),
	      "holder reserved 16 blocks: %s", line);
	CHECK(stored(s, "pidfd.") == 2, "the checker's and the holder's pidfds in the store");
	restart(d, s);
	WAIT_FOR(kvt_client_ping(c) == 0, "the checker to reconnect");
	CHECK(stat_get(c, "keep", "adopted_leases") == 1 &&
		      stat_get(c, "keep", "adopted_reservations") == 16,
	      "the lease and the reservations kept");
	/* The checker's new connection is the process that owns the lease. */
	CHECK(stat_sum(c, "client", "handles") == 1, "the kept lease is this process's");
	kill_holder(c, holder, in, fout, false);
	CHECK(stat_get(c, "tenant", "handles") == 1, "the checker's lease kept");
	CHECK(stored(s, "pidfd.") == 1, "the dead holder's pidfd let go");
	release_own(c, ns, ref, tag);
	CHECK(stat_get(c, "tenant", "handles") == 0, "no handle left");
	kvt_ns_close(ns);
}

static void restart_killed(struct daemon *d, struct fdstore *s)
{
	daemon_kill(d);
	daemon_restart_stored(d, NULL, s);
}

static void restart_stopped(struct daemon *d, struct fdstore *s)
{
	daemon_stop(d);
	daemon_restart_stored(d, NULL, s);
}

static void restart_in_place(struct daemon *d, struct fdstore *s)
{
	int before = daemon_log_count(d, "Adopted the host tier");

	(void)s;
	kill(d->pid, SIGUSR2);
	WAIT_FOR(daemon_log_count(d, "Adopted the host tier") == before + 1,
		 "the re-executed daemon to adopt");
}

int main(void)
{
	struct daemon d;
	struct fdstore s;
	const char *why = NULL;

	daemon_start_pidns(&d, NULL);
	kvt_client *c = client_connect(&d, "checker");
	kvt_ns *ns = engine_ns(c, "tiny", 1);
	CHECK(stat_get(c, "client", "pid") == 0, "the daemon sees pid 0 for this process");
	CHECK(stat_get(c, "daemon", "pid") == 1, "the daemon is pid 1 of its namespace");

	/* 1: one process, two connections: each client record shows the
	 * process's lease. */
	bool pidfs = have_pidfs();
	kvt_slot_ref ref = lease_own(ns, 1);
	kvt_client *c2 = client_connect(&d, "second");
	CHECK(stat_count(c, "client") == 2, "two connections");
	CHECK(stat_sum(c, "client", "handles") == (pidfs ? 2u : 1u),
	      "this process's connections are %s", pidfs ? "one process" : "a process each");
	kvt_client_free(c2);
	WAIT_FOR(stat_count(c, "client") == 1, "the second connection to close");
	if (pidfs)
		same_pid_twice(&d, c);

	/* 2: twice, the first round making what the daemon keeps for good. */
	uint64_t used_before = stat_get(c, "tenant", "used");
	uint64_t quarantined = stat_get(c, "daemon", "quarantined");
	rounds(&d, c, ns, used_before, quarantined);
	int fds_before = daemon_fd_count(&d);
	rounds(&d, c, ns, used_before, quarantined + 32);
	WAIT_FOR(daemon_fd_count(&d) == fds_before,
		 "the daemon's descriptors to come back to where they were");
	release_own(c, ns, ref, 1);
	CHECK(stat_get(c, "tenant", "handles") == 0, "no handle left");
	kvt_ns_close(ns);
	kvt_client_free(c);
	daemon_stop(&d);

	/* 3: no SO_PEERPIDFD. */
	setenv("KVTIERD_FAULTS", "peerpidfd=1+", 1);
	daemon_restart(&d, NULL);
	for (int i = 0; i < 2; i++) {
		kvt_client *r = NULL;
		CHECK(kvt_client_connect(d.socket, "refused", &r) < 0 && !r, "refused");
		why = kvt_connect_error();
		CHECK(strstr(why, "another pid namespace") && strstr(why, "SO_PEERPIDFD") &&
			      strstr(why, "Linux 6.5") && strstr(why, "hostPID"),
		      "the refusal says why: %s", why);
	}
	CHECK(daemon_log_count(&d, "Refusing clients in another pid namespace") == 1,
	      "the daemon says so once");
	daemon_stop(&d);

	/* 4: pidfds that cannot be compared. */
	setenv("KVTIERD_FAULTS", "pidfs=1+", 1);
	daemon_restart(&d, NULL);
	unsetenv("KVTIERD_FAULTS");
	c = client_connect(&d, "checker");
	ns = engine_ns(c, "tiny", 1);
	ref = lease_own(ns, 1);
	c2 = client_connect(&d, "second");
	CHECK(stat_sum(c, "client", "handles") == 1, "each connection a process of its own");
	kvt_client_free(c2);
	WAIT_FOR(stat_count(c, "client") == 1, "the second connection to close");
	used_before = stat_get(c, "tenant", "used");
	rounds(&d, c, ns, used_before, 0);
	release_own(c, ns, ref, 1);
	kvt_ns_close(ns);
	kvt_client_free(c);
	daemon_stop(&d);
	daemon_cleanup(&d);

	/* 5: restarts, with pidfds on pidfs only: without them, a client in
	 * another pid namespace has no identity to keep. */
	if (!pidfs) {
		printf("5 skipped: pidfds not on pidfs (Linux 6.9+)\n");
		return 0;
	}
	daemon_start_stored_pidns(&d, NULL, &s);
	c = client_connect(&d, "checker");
	keep_round(&d, &s, c, 2, restart_killed);
	keep_round(&d, &s, c, 3, restart_stopped);
	keep_round(&d, &s, c, 4, restart_in_place);
	kvt_client_free(c);
	daemon_stop(&d);
	fdstore_close(&s);
	daemon_cleanup(&d);
	return 0;
}
