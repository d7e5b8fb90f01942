/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What kvtierctl's commands share: the invocation (struct ctx), the
 * description each command gives of itself (struct ctl_command: main.c's
 * table of them drives both the dispatch and --help), the connection to
 * kvtierd, usage errors, and the views that more than one command prints.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "json.h"
#include "kvtier.h"
#include "records.h"
#include "size.h"
#include "table.h"
#include "text.h"

#define EXIT_DAEMON 1 /* kvtierd unreachable, or it refused or failed the request */
#define EXIT_USAGE 2

/* Records status shows; top and metrics read the same. */
#define STATS_STATUS (KVT_STATS_DAEMON | KVT_STATS_TENANTS | KVT_STATS_NAMESPACES)

struct ctx {
	const char *socket;
	bool json;
	int verbose;
	kvt_client *client;
	struct snapshot snap;
	char **args; /* the command's own arguments */
	int n_args;
};

/* ------------------------------------------------------------------ */
/* Commands                                                           */
/* ------------------------------------------------------------------ */

enum ctl_needs {
	CTL_NEEDS_NONE,   /* plan: the daemon is optional */
	CTL_NEEDS_STATS,  /* connect, fetch what, then run */
	CTL_NEEDS_CLIENT, /* connect, then run (it fetches itself) */
};

/* An option only one command takes; it may still come anywhere on the
 * command line, and main.c refuses it with any other command. */
struct ctl_option {
	const char *name; /* the long name, without "--" */
	bool has_arg;
	char short_name; /* 0: none */
	int id;          /* what the command's parse() is handed */
};

struct ctl_command {
	const char *name;
	const char *args; /* positional arguments, for help */
	int n_args;
	enum ctl_needs needs;
	uint32_t what;       /* only what the command shows crosses the socket */
	bool json;           /* has a --json form */
	const char *no_json; /* why --json is refused, or NULL for the usual words */
	const char *summary; /* its line in --help's list of commands */
	/* Its section of --help, or NULL (drop shares evict's). */
	void (*help)(FILE *f);
	const struct ctl_option *options; /* ends at a NULL name; or NULL */
	/* One of its options, as it is parsed.  \return 0, or -EINVAL
	 * after saying why on stderr */
	int (*parse)(int id, const char *arg);
	/* \return an exit code, or a negative errno for main to report */
	int (*run)(struct ctx *x);
};

extern const struct ctl_command ctl_cmd_status, ctl_cmd_clients, ctl_cmd_namespaces,
	ctl_cmd_top, ctl_cmd_metrics, ctl_cmd_evict, ctl_cmd_drop, ctl_cmd_plan;

/* ------------------------------------------------------------------ */
/* usage.c                                                            */
/* ------------------------------------------------------------------ */

/* "kvtierctl: <what>" and the pointer to --help, on stderr; prefix is
 * "kvtierctl" or "kvtierctl plan".  \return -EINVAL */
int ctl_usage_error(const char *prefix, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* A count option (131072, 128K): a whole number, at least min.
 * \return 0 or -EINVAL, having said why */
int ctl_opt_count(const char *name, const char *arg, uint64_t min, uint64_t *ret);
/* A size option (64G, 1.5T).  \return 0 or -EINVAL, having said why */
int ctl_opt_size(const char *name, const char *arg, uint64_t *ret);
/* A whole decimal number, nothing around it. \return 0 or -EINVAL/-ERANGE */
int ctl_parse_u64(const char *s, uint64_t *ret);

/* ------------------------------------------------------------------ */
/* connect.c                                                          */
/* ------------------------------------------------------------------ */

/* Route the library's messages to stderr, as -v asks. */
void ctl_log_setup(struct ctx *x);
/* Connect to x->socket as an observer, under the reply timeout; says why
 * on stderr when it fails.  \return 0 or a negative errno */
int ctl_connect(struct ctx *x);
/* The same without the timeout and without a word: for plan, to which
 * the daemon is optional.  \return 0 or a negative errno */
int ctl_client_connect(struct ctx *x);
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

/* ------------------------------------------------------------------ */
/* Views of a snapshot, to f.  \return 0 or a negative errno          */
/* ------------------------------------------------------------------ */

int print_tenants(FILE *f, const struct snapshot *s);  /* views.c */
int print_nodes(FILE *f, const struct snapshot *s);    /* views.c */
/* The NUMA summary line ("2 nodes, 0 fallbacks"), or nothing when the
 * daemon sent no NUMA fields. */
void print_numa_line(FILE *f, const struct rec *d);    /* views.c */
/* all: every counter the daemon keeps, else the main ones */
int print_namespaces(FILE *f, const struct snapshot *s, bool all); /* namespaces.c */
