/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Integration test harness: a real kvtierd in a private directory, real
 * engine processes, and checks through the daemon's own statistics.
 */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "kvtier.h"

/* A failed check stops the test, and its daemon (whose log it shows). */
void harness_fail(void) __attribute__((noreturn));
#define CHECK_FAILED() harness_fail()
#include "../check.h"
#include "../helpers.h"

struct daemon {
	pid_t pid;
	char dir[128];
	char socket[160];
	char config[160];
	char log[160];
	bool own_pidns; /* started by daemon_start_pidns() */
};

/* Start kvtierd with a small test configuration plus extra lines. */
void daemon_start(struct daemon *d, const char *extra_config);
/* Start kvtierd as pid 1 of a pid namespace of its own, as in a pod
 * without hostPID: it sees no process of the test's, so every client has
 * pid 0 in SO_PEERCRED.  Skips the test (77) where the namespace cannot
 * be made (not root, or no CLONE_NEWPID). */
void daemon_start_pidns(struct daemon *d, const char *extra_config);
/* Restart on the same directory and socket. */
void daemon_restart(struct daemon *d, const char *extra_config);
/* SIGTERM, and check it exits 0. */
void daemon_stop(struct daemon *d);

/*
 * systemd's file descriptor store and notification socket, played by the
 * test: a daemon started with it gets NOTIFY_SOCKET, and the descriptors
 * it hands over (FDSTORE=1, FDNAME=; FDSTOREREMOVE=1 takes them back)
 * are kept here, to be passed to the next daemon as systemd passes them
 * (LISTEN_FDS, LISTEN_FDNAMES, LISTEN_PID).
 */
#define FDSTORE_MAX 256
struct fdstore {
	int sock;
	char path[200];
	int fds[FDSTORE_MAX];
	char names[FDSTORE_MAX][64];
	int n;
	/* Drained all the while, as systemd does: a daemon blocks on a full
	 * notification socket.  lock guards fds, names and n. */
	pthread_t thread;
	pthread_mutex_t lock;
	bool stop;
};
/* Start kvtierd as daemon_start() does, with s as its systemd. */
void daemon_start_stored(struct daemon *d, const char *extra_config, struct fdstore *s);
/* The same, as pid 1 of a pid namespace of its own (daemon_start_pidns()). */
void daemon_start_stored_pidns(struct daemon *d, const char *extra_config, struct fdstore *s);
/* Restart it with what s holds (after taking in what was sent). */
void daemon_restart_stored(struct daemon *d, const char *extra_config, struct fdstore *s);
/* Take in the notifications sent so far. */
void fdstore_drain(struct fdstore *s);
void fdstore_open(struct fdstore *s, const struct daemon *d);
void fdstore_close(struct fdstore *s);
void daemon_kill(struct daemon *d);
/* Replace the configuration file (for SIGHUP); "@DIR@" = the daemon's dir. */
void daemon_rewrite_config(struct daemon *d, const char *extra);
bool daemon_log_contains(const struct daemon *d, const char *needle);
/* Lines of the daemon's log that contain needle. */
int daemon_log_count(const struct daemon *d, const char *needle);
int daemon_fd_count(const struct daemon *d);
void daemon_cleanup(struct daemon *d);

/* Run kvt-engine --socket ... args...; stdout into out.  Returns exit code. */
int engine_run(const struct daemon *d, char *out, size_t out_size, ...);
/* Start kvt-engine with pipes on stdin and stdout. */
pid_t engine_spawn(const struct daemon *d, int *ret_stdin, FILE **ret_stdout, ...);
/* The same, as pid 1 of a pid namespace of its own (a pod's engine): from
 * the test's pid namespace, not from the engine's. */
pid_t engine_spawn_pidns(const struct daemon *d, int *ret_stdin, FILE **ret_stdout, ...);
int wait_exit(pid_t pid);

kvt_client *client_connect(const struct daemon *d, const char *name);
/* Open the namespace kvt-engine uses for a model ("tiny", "llama3-8b"). */
kvt_ns *engine_ns(kvt_client *c, const char *model, uint32_t tp_size);
/* A namespace of one layer and 4 KiB blocks, named (model and weights)
 * model. */
kvt_ns *small_ns(kvt_client *c, const char *model);
/* Load keys[n] (shard 0) into dsts, a status per key in st.  A load takes
 * only what is in host memory: each leading run is waited for (staged from
 * NVMe) first, and a miss is loaded alone. */
void load_staged(kvt_ns *ns, const uint8_t *keys, uint32_t n, void **dsts, int32_t *st);
/* The key an engine hashes for a block of the two tokens tag and n. */
void token_key(uint32_t tag, uint32_t n, uint8_t *ret_key);
/* Keys of kvt-engine's request for a prefix seed, prefix and suffix. */
uint32_t engine_keys(uint64_t prefix_seed, uint32_t prefix, uint64_t suffix_seed,
		     uint32_t suffix, uint8_t *ret_keys, uint32_t max);

/* A numeric field of the first record of kind (and, if name_field is not
 * NULL, whose name_field equals name_value).  Fails the test if absent. */
uint64_t stat_get(kvt_client *c, const char *kind, const char *field);
/* The descriptors the daemon holds for pool memory: one an extent, one
 * for the extent being made ahead, if any, and the ledger's memfds (one
 * the root, one an extent, one a tenant with handles). */
int pool_descriptors(kvt_client *c);
/* The field summed over every record of kind; 0 when there is none (a
 * daemon that has just restarted has no tenant until a client opens a
 * namespace): for wait conditions, which must not fail on a state that
 * only has not arrived yet. */
uint64_t stat_sum(kvt_client *c, const char *kind, const char *field);
uint32_t stat_count(kvt_client *c, const char *kind);

/* Poll cond every 20 ms; fail after a generous deadline, 60 s (never a
 * performance threshold: it only stops a hung test, and leaves room for
 * a sanitizer build on a loaded machine). */
/* cond must not CHECK what may be absent for a moment (a record that
 * has not been made yet): the test would fail instead of waiting.
 * cond is evaluated once per try and the verdict is that evaluation's: a
 * second one could see a state that has moved on since (write-back that a
 * retry timer restarts, say) and fail a wait that succeeded. */
#define WAIT_FOR(cond, what)                                                 \
	do {                                                                 \
		bool _met = false;                                           \
		for (int _i = 0; _i < 3000; _i++) {                           \
			if ((cond)) {                                        \
				_met = true;                                 \
				break;                                       \
			}                                                    \
			usleep(20000);                                       \
		}                                                            \
		CHECK(_met, "timed out waiting for %s", what);               \
	} while (0)

/* In a forked child: a failed check must not stop the parent's daemon. */
void harness_in_child(void);
/* Mappings of the daemon's pool in this process (its memfds are named
 * "kvtier-pool"). */
int pool_mappings(void);

/* The bytes of a block as its writer made them: a function of who wrote it
 * (tag, e.g. the tenant) and of its key, so that a block served under the
 * wrong key or to the wrong tenant never compares equal. */
void block_pattern(uint8_t *buf, size_t len, uint32_t tag, const uint8_t *key);

/* Writes text to root/rel, making its directories (a fake sysfs tree). */
void put_file(const char *root, const char *rel, const char *text);

/* The daemon's anonymous resident memory in bytes (RssAnon: its heap and
 * stacks, not the pool, whose shmem pages count in RssShmem), -1 if
 * unreadable. */
int64_t daemon_rss_anon(const struct daemon *d);
