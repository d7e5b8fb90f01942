/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Descriptors the daemon keeps across its own restarts (keep.h): systemd's
 * file descriptor store, the descriptors passed at start, and the hand-over
 * to a re-executed binary.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "keep.h"
#include "log.h"

static bool prefixed(const char *s, const char *prefix)
{
	return strncmp(s, prefix, strlen(prefix)) == 0;
}

static bool kept_name(const char *n)
{
	return !strcmp(n, "ledger") || prefixed(n, "pool.") || prefixed(n, "slots.") ||
	       prefixed(n, "handles.") || prefixed(n, "pidfd.");
}

/* One passed descriptor, sorted by its name. */
static int take_passed(struct keep *k, int fd, const char *name)
{
	(void)fcntl(fd, F_SETFD, FD_CLOEXEC);
	if (kept_name(name)) {
		struct keep_fd *p = realloc(k->passed, sizeof(*p) * (k->n_passed + 1));
		if (!p) {
			close(fd);
			return -ENOMEM;
		}
		k->passed = p;
		p[k->n_passed].fd = fd;
		snprintf(p[k->n_passed].name, sizeof(p->name), "%s", name);
		k->n_passed++;
	} else if (prefixed(name, "socket") && k->n_sockets < KEEP_MAX_SOCKETS) {
		k->sockets[k->n_sockets].fd = fd;
		snprintf(k->sockets[k->n_sockets].name, sizeof(k->sockets[0].name), "%s", name);
		k->n_sockets++;
	} else if (k->activation_fd < 0) {
		k->activation_fd = fd;
	} else {
		log_error("Socket activation passed more than one socket ('%s' too); kvtierd takes one",
			  name);
		close(fd);
		return -EINVAL;
	}
	return 0;
}

/* A re-execution's hand-over: KVTIERD_FDS=name=fd,name=fd,... */
static int take_handed_over(struct keep *k)
{
	const char *v = getenv(KEEP_ENV);
	int r = 0;

	if (!v)
		return 0;
	char *list = strdup(v), *save = NULL;
	unsetenv(KEEP_ENV);
	if (!list)
		return -ENOMEM;
	for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *eq = strrchr(tok, '=');
		int fd = eq ? atoi(eq + 1) : -1;
		if (!eq || fd < SD_LISTEN_FDS_START || fcntl(fd, F_GETFD) < 0) {
			log_warning("%s: '%s' names no open descriptor, ignoring", KEEP_ENV, tok);
			continue;
		}
		*eq = 0;
		int k2 = take_passed(k, fd, tok);
		if (k2 < 0 && !r)
			r = k2;
	}
	free(list);
	return r;
}

int keep_collect(struct keep *k)
{
	char **names = NULL;
	int n = sd_listen_fds_with_names(1, &names);

	*k = (struct keep){.activation_fd = -1, .fdstore = getenv("NOTIFY_SOCKET") != NULL};
	if (n < 0)
		return log_error_errno(n, "Failed to read the descriptors passed at start: %m");
	int r = take_handed_over(k);
	for (int i = 0; i < n; i++) {
		int fd = SD_LISTEN_FDS_START + i;
		const char *name = names && names[i] ? names[i] : "unknown";
		int k2 = take_passed(k, fd, name);
		if (k2 < 0 && !r)
			r = k2;
	}
	if (names) {
		for (int i = 0; i < n; i++)
			free(names[i]);
		free(names);
	}
	if (r == -ENOMEM)
		return log_error_errno(r, "Failed to take the descriptors passed at start: %m");
	if (k->n_passed)
		log_info("Kept from the previous daemon: %u descriptor(s) of the host tier",
			 k->n_passed);
	return r;
}

int keep_take(struct keep *k, const char *name)
{
	for (uint32_t i = 0; i < k->n_passed; i++)
		if (k->passed[i].fd >= 0 && !strcmp(k->passed[i].name, name)) {
			int fd = k->passed[i].fd;
			k->passed[i].fd = -1;
			return fd;
		}
	return -1;
}

void keep_close_untaken(struct keep *k)
{
	for (uint32_t i = 0; i < k->n_passed; i++)
		if (k->passed[i].fd >= 0) {
			log_info("Kept descriptor '%s' not adopted: let go", k->passed[i].name);
			close(k->passed[i].fd);
			k->passed[i].fd = -1;
			keep_let_go(k, k->passed[i].name);
		}
}

void keep_let_go(struct keep *k, const char *name)
{
	char msg[96];

	/* Off the list a re-execution hands on: the descriptor is closed,
	 * and its number may soon be another's. */
	for (uint32_t i = 0; i < k->n_kept; i++)
		if (!strcmp(k->kept[i].name, name)) {
			k->kept[i] = k->kept[--k->n_kept];
			break;
		}
	if (!k->fdstore)
		return;
	snprintf(msg, sizeof(msg), "FDSTOREREMOVE=1\nFDNAME=%s", name);
	(void)sd_pid_notify(0, false, msg);
}

void keep_fd(struct keep *k, const char *name, int fd, bool fresh)
{
	if (k->n_kept == k->cap_kept) {
		uint32_t cap = k->cap_kept ? k->cap_kept * 2 : 64;
		struct keep_fd *p = realloc(k->kept, sizeof(*p) * cap);
		if (!p) {
			log_warning("Out of memory: descriptor '%s' is not kept across a re-execution",
				    name);
			return;
		}
		k->kept = p;
		k->cap_kept = cap;
	}
	k->kept[k->n_kept].fd = fd;
	snprintf(k->kept[k->n_kept].name, sizeof(k->kept[0].name), "%s", name);
	k->n_kept++;
	if (!k->fdstore || !fresh)
		return;
	char msg[96];
	snprintf(msg, sizeof(msg), "FDSTORE=1\nFDNAME=%s", name);
	int r = sd_pid_notify_with_fds(0, false, msg, &fd, 1);
	if (r > 0) {
		k->stored++;
	} else {
		k->store_failures++;
		log_warning_errno(r, "Failed to hand descriptor '%s' to systemd's store, ignoring: %m",
				  name);
	}
}

void keep_done(struct keep *k)
{
	keep_close_untaken(k);
	free(k->passed);
	free(k->kept);
	*k = (struct keep){.activation_fd = -1};
}

int keep_reexec(struct keep *k, const char *path, char *const *argv,
		const struct keep_fd *sockets, uint32_t n_sockets)
{
	uint32_t n = k->n_kept + n_sockets;
	size_t len = 0;
	char *list = NULL;
	int r = 0;

	/* The descriptors stay where they are, close-on-exec cleared, and
	 * KVTIERD_FDS names them: should the exec fail, nothing moved. */
	for (uint32_t i = 0; i < n; i++) {
		const struct keep_fd *f = i < k->n_kept ? &k->kept[i] : &sockets[i - k->n_kept];
		char *p = realloc(list, len + strlen(f->name) + 16);
		if (!p) {
			r = -ENOMEM;
			goto out;
		}
		list = p;
		len += (size_t)sprintf(list + len, "%s%s=%d", len ? "," : "", f->name, f->fd);
	}
	for (uint32_t i = 0; i < n; i++) {
		int fd = i < k->n_kept ? k->kept[i].fd : sockets[i - k->n_kept].fd;
		if (fcntl(fd, F_SETFD, 0) < 0) {
			r = -errno;
			goto out;
		}
	}
	setenv(KEEP_ENV, list ? list : "", 1);
	log_info("Re-executing %s with %u kept descriptor(s) and %u socket(s)", path, k->n_kept,
		 n_sockets);
	execv(path, argv);
	r = -errno;
	unsetenv(KEEP_ENV);
out:
	for (uint32_t i = 0; i < n; i++)
		(void)fcntl(i < k->n_kept ? k->kept[i].fd : sockets[i - k->n_kept].fd, F_SETFD,
			    FD_CLOEXEC);
	free(list);
	return log_error_errno(r, "Failed to re-execute %s: %m; this daemon goes on", path);
}
