/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What kvtierctl's commands share: the connection, the exit codes and the
 * views that more than one command prints.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ctl-output.h"
#include "kvtier.h"

#define EXIT_DAEMON 1 /* kvtierd unreachable, or it refused or failed the request */
#define EXIT_USAGE 2

/* Records status shows; top and metrics read the same. */
#define STATS_STATUS (KVT_STATS_DAEMON | KVT_STATS_TENANTS | KVT_STATS_NAMESPACES)

struct top_opts {
	double interval_s; /* > 0 */
	uint64_t iterations; /* 0: until interrupted */
};

struct ctx {
	const char *socket;
	bool socket_given;
	bool json;
	kvt_client *client;
	struct snapshot snap;
	struct top_opts top;
	char **args; /* the command's own arguments */
	int n_args;
};

/* Replace x->snap with fresh records of what (KVT_STATS_*), waiting at
 * most the reply timeout.  \return 0 or a negative errno, after saying
 * why on stderr unless quiet. */
int ctx_fetch(struct ctx *x, uint32_t what, bool quiet);

/* The reply timeout: a wedged daemon must not hang the tool meant to
 * diagnose it.  on_expire runs in the signal handler before the exit and
 * must be async-signal-safe (top restores the terminal there). */
void timeout_arm(void);
void timeout_disarm(void);
void timeout_on_expire(void (*fn)(void));

/* Views of a snapshot, to f. \return 0 or a negative errno */
int print_tenants(FILE *f, const struct snapshot *s);
int print_nodes(FILE *f, const struct snapshot *s);
/* The NUMA summary line ("2 nodes, 0 fallbacks"), or nothing when the
 * daemon sent no NUMA fields. */
void print_numa_line(FILE *f, const struct rec *d);

/* The commands that live in their own files. \return an exit code */
int cmd_top(struct ctx *x);
int cmd_metrics(struct ctx *x);
/* Prometheus text exposition of a snapshot.  \return 0 or -errno */
int metrics_write(FILE *f, const struct snapshot *s);
