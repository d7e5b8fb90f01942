/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A daemon in the fuzzer's process: a fresh manager per input (as a fresh
 * kvtierd would be), sessions over socketpairs, the event loop run until
 * it has nothing left to do, and the messages of one block's whole life
 * for the seeds.  Shared by the session targets.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "config.h"
#include "manager.h"

struct fuzz_daemon {
	struct config c;
	struct manager *m;
};

/* A small pool (8 MiB in 2 MiB extents) and a 2 MiB output bound, so that
 * every limit is within reach of an input. */
void fuzz_daemon_new(struct fuzz_daemon *d);
void fuzz_daemon_free(struct fuzz_daemon *d);
/* A new session of process pid; returns the client's end of the socket. */
int fuzz_daemon_connect(struct fuzz_daemon *d, pid_t pid);
/* Run the loop until it is idle, reading (and dropping) what the daemon
 * sends to the n peers (-1 for one that is closed). */
void fuzz_daemon_run(struct fuzz_daemon *d, const int *peers, unsigned n);

/* The messages of a tenant's whole life, one call of emit each: HELLO,
 * NS_OPEN, then both shards of four blocks reserved and committed, looked
 * up, acquired, released, touched, listed, pinged, deleted, evicted and
 * aborted.  FUZZ_FIRST_OP is the index of the first message after NS_OPEN. */
typedef void (*fuzz_msg_fn)(const uint8_t *msg, size_t len, void *userdata);
enum { FUZZ_FIRST_OP = 2 };
void fuzz_life_messages(fuzz_msg_fn emit, void *userdata);
