/* SPDX-License-Identifier: Apache-2.0 */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "config-values.h"
#include "log.h"
#include "manager.h"
#include "metrics-http.h"
#include "prom.h"
#include "stats.h"

struct metrics_http {
	struct manager *m;
	struct MHD_Daemon *d;
	sd_event_source *io;    /* MHD's epoll descriptor */
	sd_event_source *timer; /* MHD's next timeout */
	struct kvt_record *scratch;
};

/* The daemon's records, rendered.  \return 0 and a malloc'd text, or a
 * negative errno */
static int render(struct metrics_http *h, char **ret, size_t *ret_len)
{
	struct stats_query q = {
		.what = KVT_PROM_STATS,
		.admin = true,
		.version = KVT_PROTO_VERSION_MAX,
	};
	struct stats_replies rep;
	struct snapshot snap = {0};
	char *text = NULL;
	size_t len = 0;
	FILE *f;
	int r = stats_build(h->m, &q, &rep);

	if (r == 0 && rep.failed)
		r = -ENOMEM;
	for (size_t i = 0; r == 0 && i < rep.n; i++) {
		struct kvt_cursor cur = {
			.p = rep.v[i].data + KVT_HEADER_SIZE,
			.left = rep.v[i].len - KVT_HEADER_SIZE,
		};
		while (r == 0 && cur.left > 0) {
			r = kvt_dec_record(&cur, h->scratch);
			if (r == 0)
				r = snapshot_add_record(&snap, h->scratch);
		}
	}
	stats_replies_free(&rep);
	if (r == 0) {
		f = open_memstream(&text, &len);
		if (!f)
			r = -errno;
		else {
			r = kvt_prom_write(f, &snap);
			if (fclose(f) != 0 && r == 0)
				r = -EIO;
			if (r < 0)
				free(text);
		}
	}
	snapshot_clear(&snap);
	if (r < 0)
		return r;
	*ret = text;
	*ret_len = len;
	return 0;
}

static enum MHD_Result reply_static(struct MHD_Connection *c, unsigned status, const char *body,
				    const char *allow)
{
	struct MHD_Response *resp =
		MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_PERSISTENT);
	enum MHD_Result r;

	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
	if (allow)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
	r = MHD_queue_response(c, status, resp);
	MHD_destroy_response(resp);
	return r;
}

/* Answered at the first call, body or not: no request here has one to
 * read, and MHD closes a connection whose body was left unread. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version,
				  const char *upload_data, size_t *upload_data_size, void **con_cls)
{
	struct metrics_http *h = cls;
	struct MHD_Response *resp;
	enum MHD_Result res;
	char *text;
	size_t len;
	int r;

	if (strcmp(url, "/metrics") != 0)
		return reply_static(c, MHD_HTTP_NOT_FOUND, "kvtierd serves /metrics only\n", NULL);
	if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
		return reply_static(c, MHD_HTTP_METHOD_NOT_ALLOWED, "GET or HEAD\n", "GET, HEAD");
	r = render(h, &text, &len);
	if (r < 0) {
		log_warning_errno(r, "Failed to render the metrics for a scrape: %m");
		return reply_static(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n", NULL);
	}
	resp = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(text);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
				"text/plain; version=0.0.4; charset=utf-8");
	res = MHD_queue_response(c, MHD_HTTP_OK, resp);
	MHD_destroy_response(resp);
	return res;
}

/* MHD's complaints are about its peers (a malformed request, a reset
 * connection): the daemon's debug level. */
static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
	char buf[512];
	size_t n;

	vsnprintf(buf, sizeof(buf), fmt, ap);
	n = strlen(buf);
	while (n > 0 && buf[n - 1] == '\n')
		buf[--n] = 0;
	log_debug("metrics endpoint: %s", buf);
}

/* MHD's next deadline (a connection's timeout, or work it has left
 * after a run: 0) as the timer. */
static void rearm(struct metrics_http *h)
{
	MHD_UNSIGNED_LONG_LONG ms;
	uint64_t now = 0;

	if (MHD_get_timeout(h->d, &ms) != MHD_YES) {
		sd_event_source_set_enabled(h->timer, SD_EVENT_OFF);
		return;
	}
	sd_event_now(h->m->event, CLOCK_MONOTONIC, &now);
	sd_event_source_set_time(h->timer, now + (uint64_t)ms * 1000);
	sd_event_source_set_enabled(h->timer, SD_EVENT_ONESHOT);
}

static void run(struct metrics_http *h)
{
	if (MHD_run(h->d) != MHD_YES)
		log_debug("metrics endpoint: MHD_run failed, ignoring");
	rearm(h);
}

static int on_io(sd_event_source *src, int fd, uint32_t revents, void *userdata)
{
	run(userdata);
	return 0;
}

static int on_timer(sd_event_source *src, uint64_t usec, void *userdata)
{
	run(userdata);
	return 0;
}

static int listen_socket(const char *addr, char *ret_name, size_t name_size)
{
	struct sockaddr_storage sa;
	socklen_t len;
	unsigned alen;
	char host[INET6_ADDRSTRLEN];
	int fd, one = 1, r;

	if (conf_listen_parse(addr, &sa, &alen) < 0)
		return log_error_errno(-EINVAL, "[metrics] listen = '%s' is not ADDRESS:PORT", addr);
	fd = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return log_error_errno(-errno, "Failed to create the metrics socket: %m");
	/* A restarted daemon rebinds while the last one's connections are
	 * in TIME_WAIT. */
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (sa.ss_family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sa, alen) < 0 ||
	    listen(fd, METRICS_HTTP_CONNECTIONS) < 0) {
		r = -errno;
		close(fd);
		return log_error_errno(r, "Failed to listen on [metrics] listen = %s: %m", addr);
	}
	len = sizeof(sa);
	getsockname(fd, (struct sockaddr *)&sa, &len);
	if (sa.ss_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&sa;
		inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
		snprintf(ret_name, name_size, "[%s]:%u", host, ntohs(a->sin6_port));
	} else {
		const struct sockaddr_in *a = (const struct sockaddr_in *)&sa;
		inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
		snprintf(ret_name, name_size, "%s:%u", host, ntohs(a->sin_port));
	}
	return fd;
}

int metrics_http_start(struct manager *m, struct metrics_http **ret)
{
	struct metrics_http *h = calloc(1, sizeof(*h));
	const union MHD_DaemonInfo *info;
	char name[INET6_ADDRSTRLEN + 16];
	int fd, r;

	if (!h)
		return log_error_errno(-ENOMEM, "Failed to start the metrics endpoint: %m");
	h->m = m;
	h->scratch = malloc(sizeof(*h->scratch));
	if (!h->scratch) {
		metrics_http_free(h);
		return log_error_errno(-ENOMEM, "Failed to start the metrics endpoint: %m");
	}
	fd = listen_socket(m->config->metrics_listen, name, sizeof(name));
	if (fd < 0) {
		metrics_http_free(h);
		return fd;
	}
	/* MHD_USE_EPOLL without a thread of its own: MHD_run, called from
	 * the loop, does the work its epoll descriptor reports.  MHD owns
	 * the socket from here and closes it at MHD_stop_daemon. */
	h->d = MHD_start_daemon(MHD_USE_EPOLL | MHD_USE_ERROR_LOG, 0, NULL, NULL, on_request, h,
				MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, h,
				MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
				MHD_OPTION_CONNECTION_LIMIT, (unsigned)METRICS_HTTP_CONNECTIONS,
				MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)METRICS_HTTP_TIMEOUT_S,
				MHD_OPTION_END);
	if (!h->d) {
		close(fd);
		metrics_http_free(h);
		return log_error_errno(-EINVAL, "Failed to start the metrics endpoint on %s (libmicrohttpd refused)",
				       name);
	}
	info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_EPOLL_FD);
	r = info ? sd_event_add_io(m->event, &h->io, info->epoll_fd, EPOLLIN, on_io, h) : -EINVAL;
	if (r >= 0)
		r = sd_event_add_time(m->event, &h->timer, CLOCK_MONOTONIC, 0, 0, on_timer, h);
	if (r < 0) {
		metrics_http_free(h);
		return log_error_errno(r, "Failed to watch the metrics endpoint: %m");
	}
	sd_event_source_set_enabled(h->timer, SD_EVENT_OFF);
	rearm(h);
	log_info("Serving metrics on http://%s/metrics", name);
	*ret = h;
	return 0;
}

void metrics_http_free(struct metrics_http *h)
{
	if (!h)
		return;
	sd_event_source_disable_unref(h->io);
	sd_event_source_disable_unref(h->timer);
	if (h->d)
		MHD_stop_daemon(h->d);
	free(h->scratch);
	free(h);
}
