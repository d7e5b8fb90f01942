/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the benchmarks share: a sleep, statistics of pairwise ratios, data,
 * what they say on stderr, and a kvtierd of their own in a private
 * directory.
 */
#pragma once

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "kvtier.h"
#include "../helpers.h"
#include "../skip.h"

#define BENCH_MAX_PAIRS 1000

/* Each benchmark's own: its name, which starts every line it writes to
 * stderr and names its client to the daemon. */
extern const char bench_name[];

/* Each benchmark's own: clean up (its daemon, its files), say why, exit 1. */
_Noreturn void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* "<bench_name>: " and the message, a line on stderr. */
void bench_vsay(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));
/* Progress goes to stderr, so that stdout holds only the results. */
void progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

void sleep_ns(uint64_t ns);
/* Of n ≤ BENCH_MAX_PAIRS values. */
double median(const double *v, unsigned n);
double vmin(const double *v, unsigned n);
double vmax(const double *v, unsigned n);
/* "1.234x [1.100..1.400]": the median of n ratios and their range. */
const char *ratio_range(const double *v, unsigned n, char *buf, size_t size);
/* bytes per ns is GB/s. */
double gbs(uint64_t bytes, uint64_t ns);
const char *verdict(bool met);
/* Anonymous memory with every page written, so no copy pays a first
 * touch; dies when it cannot be had. */
uint8_t *alloc_populated(uint64_t bytes);
void fill_random(uint8_t *p, uint64_t bytes, uint64_t seed);
/* A JSON string literal of s on stdout. */
void json_string(const char *s);
/* 0 when something listens at path, else a negative errno. */
int try_connect(const char *path);

/* The results: the table on stdout, or with --json one JSON line there
 * and the table on stderr. */
void bench_print(bool json, void (*print_table)(FILE *out), void (*print_json)(void));

/* A whole number in lo..hi, or a message and exit 2 (a usage error). */
uint64_t parse_u64(const char *s, uint64_t lo, uint64_t hi, const char *what);
/* After an unknown option: where to look. \return 2, the exit status */
int bench_try_help(void);
/* The daemon to start: the argument after the options, else $KVTIERD,
 * else kvtierd from PATH.  More arguments are a usage error (exit 2); a
 * path that names nothing executable skips the benchmark (a line on
 * stdout, exit 77). */
const char *bench_kvtierd(int argc, char **argv);
/* handler for SIGINT, SIGTERM and SIGHUP; SIGPIPE ignored. */
void bench_catch_signals(void (*handler)(int));

/*
 * A kvtierd of the benchmark's own: a private directory that holds its
 * socket, config and log (and whatever files the benchmark puts there),
 * the daemon started and stopped by pid.
 */
struct bench_daemon {
	const char *kvtierd; /* what to execute */
	pid_t pid;           /* > 0 while it runs */
	char dir[128];       /* "" when there is none */
	char socket[108];    /* sun_path */
	char config[160];
	char log[160];
};

/* The directory, "<parent>/<prefix>-XXXXXX" (parent: at most 60 bytes,
 * for the socket's sake), and the paths in it.
 * \return 0 or a negative errno */
int bench_daemon_mkdir(struct bench_daemon *d, const char *parent, const char *prefix);
/* The path of a file of the benchmark's own in the directory. */
void bench_daemon_path(const struct bench_daemon *d, const char *name, char *out, size_t size);
/* The config: socket and runtime_dir, then what fmt says; dies when it
 * cannot be written. */
void bench_daemon_config(const struct bench_daemon *d, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Fork, execute, wait until it listens; dies with its log when it exits
 * first or does not listen within limit_ns.
 * \return nanoseconds from fork to a listening socket */
uint64_t bench_daemon_start(struct bench_daemon *d, uint64_t limit_ns);
/* Until something listens at path (a tenant's socket, which kvtierd opens
 * after its main one); dies when kvtierd exits first or limit_ns after t0
 * (CLOCK_MONOTONIC ns) has passed. */
void bench_daemon_wait_socket(struct bench_daemon *d, const char *path, uint64_t t0,
			      uint64_t limit_ns);
/* SIGTERM, and wait for it; an exit status other than 0 is said. */
void bench_daemon_stop(struct bench_daemon *d);
/* The rest of the first line of its log that contains marker (and also,
 * when not NULL: progress lines can share a summary's marker); "(not
 * reported)" when there is none. */
bool bench_daemon_log_find(const struct bench_daemon *d, const char *marker, const char *also,
			   char *out, size_t size);
/* A client of the daemon, named bench_name; dies when it cannot connect. */
kvt_client *bench_daemon_connect(const struct bench_daemon *d);
/* For die(): its log on stderr when it runs, SIGKILL, and the directory
 * removed with everything in it. */
void bench_daemon_abort(struct bench_daemon *d);
/* The directory and everything in it. */
void bench_daemon_remove(struct bench_daemon *d);
/* For a fatal signal, so async-signal-safe only: SIGKILL and reap. */
void bench_daemon_kill(struct bench_daemon *d);
/* For a fatal signal: its socket, config and log, then the directory,
 * which goes only when the benchmark has unlinked its own files first. */
void bench_daemon_unlink(const struct bench_daemon *d);

/*
 * A namespace of one tensor-parallel rank, K and V, 16 tokens per block,
 * so one shard is the whole block: n_layers * 2 * kv_heads * head_bytes *
 * 16 bytes, which must be want_bytes; dies otherwise.
 */
kvt_ns *bench_ns_open(kvt_client *c, const char *model, uint32_t n_layers, uint32_t kv_heads,
		      uint32_t head_bytes, uint64_t want_bytes);
/* iters kvt_client_ping round trips. \return nanoseconds */
uint64_t bench_pings(kvt_client *c, unsigned iters);
