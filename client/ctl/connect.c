/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvtierctl's side of the socket: connecting as an observer, reading
 * statistics under a reply timeout, and saying in words why either failed.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ctl.h"

/* The alarm is a last resort against a daemon that accepts and never
 * answers: nothing can be resumed after it, so it ends the program. */
#define REPLY_TIMEOUT_S 10

static char timeout_msg[256];
static void (*timeout_hook)(void);

static void log_stderr(int level, const char *message, void *userdata)
{
	const struct ctx *x = userdata;
	const char *what;

	if (level > KVT_LOG_WARNING && x->verbose < 2)
		return;
	what = level <= KVT_LOG_ERR ? "error" : level <= KVT_LOG_WARNING ? "warning" : "info";
	fprintf(stderr, "kvtierctl: libkvtier-client %s: %s\n", what, message);
}

void ctl_log_setup(struct ctx *x)
{
	if (!x->verbose)
		return;
	if (x->client)
		kvt_client_set_log(x->client, log_stderr, x);
	else
		kvt_set_default_log(log_stderr, x);
}

static void connect_failed(const struct ctx *x, int r)
{
	fprintf(stderr, "kvtierctl: cannot connect to kvtierd at %s: %s\n", x->socket,
		strerror(-r));
	switch (-r) {
	case ENOENT:
	case ECONNREFUSED:
	case ENOTSOCK:
		fprintf(stderr, "kvtierctl: is kvtierd running? start it with 'kvtierd --socket %s' or 'systemctl start kvtierd', or point KVTIER_SOCKET at its socket\n",
			x->socket);
		break;
	case EACCES:
	case EPERM:
		fprintf(stderr, "kvtierctl: the socket or its directory is not open to you; run as root or as a user kvtierd accepts (for kvtierd.socket: a member of the group kvtier)\n");
		break;
	default:
		/* The daemon's own reason reaches only the log handler. */
		if (!x->verbose)
			fprintf(stderr, "kvtierctl: run with -v for the reason\n");
		break;
	}
}

static void on_alarm(int sig)
{
	ssize_t n;

	(void)sig;
	if (timeout_hook)
		timeout_hook();
	n = write(STDERR_FILENO, timeout_msg, strlen(timeout_msg));
	(void)n;
	_exit(EXIT_DAEMON);
}

static void timeout_setup(const char *path)
{
	struct sigaction sa = {.sa_handler = on_alarm};

	snprintf(timeout_msg, sizeof(timeout_msg),
		 "kvtierctl: kvtierd at %s did not answer within %d s\n", path,
		 REPLY_TIMEOUT_S);
	sigaction(SIGALRM, &sa, NULL);
}

void timeout_arm(void)
{
	alarm(REPLY_TIMEOUT_S);
}

void timeout_disarm(void)
{
	alarm(0);
}

void timeout_on_expire(void (*fn)(void))
{
	timeout_hook = fn;
}

int ctl_client_connect(struct ctx *x)
{
	kvt_connect_opts copts = {.size = sizeof(copts), .flags = KVT_CONNECT_OBSERVER,
				  .socket_path = x->socket, .name = "kvtierctl"};

	return kvt_client_connect_opts(&copts, &x->client);
}

int ctl_connect(struct ctx *x)
{
	int r;

	timeout_setup(x->socket);
	timeout_arm();
	r = ctl_client_connect(x);
	timeout_disarm();
	if (r < 0) {
		connect_failed(x, r);
		return r;
	}
	ctl_log_setup(x);
	return 0;
}

int ctx_fetch(struct ctx *x, uint32_t what, bool quiet)
{
	struct snapshot s = {0};
	int r;

	timeout_arm();
	r = kvt_stats(x->client, what, snapshot_add, &s);
	timeout_disarm();
	if (r >= 0 && s.error < 0)
		r = s.error;
	if (r < 0) {
		if (!quiet) {
			const char *why = kvt_client_error(x->client);
			fprintf(stderr, "kvtierctl: cannot read statistics from kvtierd at %s: %s%s%s\n",
				x->socket, strerror(-r), why[0] ? ": " : "", why);
		}
		snapshot_clear(&s);
		return r;
	}
	snapshot_clear(&x->snap);
	x->snap = s;
	return 0;
}
