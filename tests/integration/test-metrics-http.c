/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvtierd's scrape endpoint ([metrics] listen) over real TCP: after a
 * workload its counters say what the test stored and looked up; its
 * series are kvtierctl metrics' own, name for name; any other path is
 * 404 and any other method 405; malformed requests, a header past the
 * memory limit and connections dropped half way leave it serving, and
 * the daemon serving its clients.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define BLOCK 4096 /* small_ns's */
#define STORED 24
#define MISSED 5

static struct daemon D;
static unsigned short port;

struct resp {
	int status;
	char *head; /* status line and headers */
	char *body;
	size_t body_len;
};

static void resp_free(struct resp *r)
{
	free(r->head);
	free(r->body);
	memset(r, 0, sizeof(*r));
}

static int tcp_connect(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	CHECK(fd >= 0, "socket: %s", strerror(errno));
	CHECK(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0, "connect to 127.0.0.1:%u: %s",
	      port, strerror(errno));
	return fd;
}

static void send_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		/* The server may answer and close before a long request is
		 * all sent (a header past its limit): what it said is read
		 * next. */
		if (w < 0 && (errno == EPIPE || errno == ECONNRESET))
			return;
		CHECK(w > 0, "send: %s", strerror(errno));
		p += w;
		n -= (size_t)w;
	}
}

/* Whether buf holds a whole response: its headers, and the body its
 * Content-Length announces (none for HEAD). */
static bool response_complete(const char *buf, size_t len, bool head)
{
	const char *sep = strstr(buf, "\r\n\r\n"), *cl;

	if (!sep)
		return false;
	if (head)
		return true;
	cl = strcasestr(buf, "\r\nContent-Length:");
	if (!cl || cl > sep)
		return false; /* to the end of the connection */
	return len - (size_t)(sep + 4 - buf) >= strtoull(cl + 17, NULL, 10);
}

/* What the peer sends until it closes, or (http) until a whole response
 * is in: a server may keep a connection whose request it refused open
 * until its timeout.  *ret_len bytes. */
static char *read_until(int fd, size_t *ret_len, bool http, bool head)
{
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap);

	CHECK(buf, "out of memory");
	for (;;) {
		if (len + 1 >= cap) {
			cap *= 2;
			buf = realloc(buf, cap);
			CHECK(buf, "out of memory");
		}
		ssize_t n = read(fd, buf + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == ECONNRESET)
			break;
		CHECK(n >= 0, "read: %s", strerror(errno));
		if (n == 0)
			break;
		len += (size_t)n;
		buf[len] = 0;
		if (http && response_complete(buf, len, head))
			break;
	}
	buf[len] = 0;
	*ret_len = len;
	return buf;
}

static char *read_all(int fd, size_t *ret_len)
{
	return read_until(fd, ret_len, false, false);
}

/* Send raw bytes as a request and parse what comes back (status 0: the
 * server closed without a response). */
static void request_raw(const char *req, size_t len, struct resp *r)
{
	int fd = tcp_connect();
	size_t n;
	char *all, *sep;

	memset(r, 0, sizeof(*r));
	send_all(fd, req, len);
	shutdown(fd, SHUT_WR);
	all = read_until(fd, &n, true, len >= 5 && !memcmp(req, "HEAD ", 5));
	close(fd);
	if (n == 0) {
		free(all);
		r->head = strdup("");
		r->body = strdup("");
		return;
	}
	CHECK(sscanf(all, "HTTP/1.%*d %d", &r->status) == 1, "no status line in '%.80s'", all);
	sep = strstr(all, "\r\n\r\n");
	CHECK(sep, "no end of headers in '%.200s'", all);
	r->head = strndup(all, (size_t)(sep - all));
	r->body_len = n - (size_t)(sep + 4 - all);
	r->body = malloc(r->body_len + 1);
	CHECK(r->head && r->body, "out of memory");
	memcpy(r->body, sep + 4, r->body_len);
	r->body[r->body_len] = 0;
	free(all);
}

static void request(const char *method, const char *path, struct resp *r)
{
	char req[512];
	int n = snprintf(req, sizeof(req), "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
			 method, path);
	request_raw(req, (size_t)n, r);
}

static void scrape(struct resp *r)
{
	request("GET", "/metrics", r);
	CHECK(r->status == 200, "GET /metrics: %d", r->status);
	CHECK(strcasestr(r->head, "\r\nContent-Type: text/plain; version=0.0.4"),
	      "content type of the exposition format: %s", r->head);
	CHECK(r->body_len == strlen(r->body), "a text body");
}

/* The value of the first sample whose line starts with name and contains
 * label (NULL: any); -1 when there is none. */
static double sample(const char *text, const char *name, const char *label)
{
	size_t nl = strlen(name);

	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
		const char *end = strchr(p, '\n'), *sp;
		if (strncmp(p, name, nl) != 0 || (p[nl] != ' ' && p[nl] != '{'))
			continue;
		sp = end ? memrchr(p, ' ', (size_t)(end - p)) : strrchr(p, ' ');
		if (label) {
			const char *l = strstr(p, label);
			if (!l || (end && l > end))
				continue;
		}
		CHECK(sp, "a sample line");
		return strtod(sp + 1, NULL);
	}
	return -1;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The sorted, unique series names of an exposition and its # lines,
 * newline-separated: what must not differ between the two renderings. */
static char *names_of(const char *text)
{
	size_t cap = strlen(text) + 1, n = 0;
	char **v = calloc(cap, sizeof(*v)), *out = malloc(cap + 1), *o = out;

	CHECK(v && out, "out of memory");
	for (const char *p = text; *p;) {
		const char *end = strchrnul(p, '\n');
		size_t len = (size_t)(end - p);
		if (p[0] == '#')
			v[n++] = strndup(p, len); /* HELP and TYPE whole */
		else if (len)
			v[n++] = strndup(p, strcspn(p, "{ "));
		p = *end ? end + 1 : end;
	}
	qsort(v, n, sizeof(*v), cmp_str);
	*o = 0;
	for (size_t i = 0; i < n; i++)
		if (i == 0 || strcmp(v[i], v[i - 1]))
			o += sprintf(o, "%s\n", v[i]);
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
	return out;
}

/* kvtierctl metrics against the same daemon: its stdout. */
static char *ctl_metrics(void)
{
	const char *ctl = getenv("KVTIERCTL");
	int p[2];
	pid_t pid;
	size_t n;
	char *out;

	CHECK(ctl && *ctl, "KVTIERCTL is set by meson");
	CHECK(pipe2(p, O_CLOEXEC) == 0, "pipe");
	pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		dup2(p[1], 1);
		execl(ctl, "kvtierctl", "--socket", D.socket, "metrics", (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	out = read_all(p[0], &n);
	close(p[0]);
	CHECK(wait_exit(pid) == 0, "kvtierctl metrics exits 0");
	return out;
}

static void read_port(void)
{
	const char *needle = "Serving metrics on http://127.0.0.1:";
	char *log = NULL, *at;
	size_t n;
	int fd;

	/* Logged before "ready", which daemon_start waited for. */
	fd = open(D.log, O_RDONLY | O_CLOEXEC);
	CHECK(fd >= 0, "open %s", D.log);
	log = read_all(fd, &n);
	close(fd);
	at = strstr(log, needle);
	CHECK(at, "the log names the endpoint's address");
	port = (unsigned short)strtoul(at + strlen(needle), NULL, 10);
	CHECK(port > 0, "a port");
	free(log);
}

/* Store STORED blocks (again: already resident) and look them up with
 * MISSED keys never stored after them. */
static void workload(bool again)
{
	kvt_client *c = client_connect(&D, "metrics");
	kvt_ns *ns = small_ns(c, "metrics-test");
	uint8_t keys[(STORED + MISSED) * KVT_KEY_BYTES];
	const void *srcs[STORED];
	int32_t st[STORED];
	uint8_t *buf = malloc((size_t)STORED * BLOCK);

	CHECK(buf, "out of memory");
	for (uint32_t i = 0; i < STORED + MISSED; i++)
		token_key(0x3e7, i, keys + (size_t)i * KVT_KEY_BYTES);
	for (uint32_t i = 0; i < STORED; i++) {
		block_pattern(buf + (size_t)i * BLOCK, BLOCK, 1, keys + (size_t)i * KVT_KEY_BYTES);
		srcs[i] = buf + (size_t)i * BLOCK;
	}
	CHECK(kvt_store(ns, 0, keys, STORED, srcs, st) >= 0, "store %u blocks", STORED);
	for (uint32_t i = 0; i < STORED; i++)
		CHECK(st[i] == 0 || (again && st[i] == -EEXIST), "block %u stored: %d", i, st[i]);
	/* The stored run, then keys never stored. */
	CHECK(kvt_lookup(ns, keys, STORED + MISSED, 0, NULL) == STORED, "lookup: %u leading hits",
	      STORED);
	kvt_ns_close(ns);
	kvt_client_free(c);
	free(buf);
}

int main(void)
{
	struct resp r;
	char *ctl, *a, *b;

	daemon_start(&D, "[metrics]\nlisten = 127.0.0.1:0\n");
	read_port();

	/* Before any client: the daemon's series, no namespace yet. */
	scrape(&r);
	CHECK(sample(r.body, "kvtier_pool_capacity_bytes", NULL) > 0, "pool capacity");
	CHECK(sample(r.body, "kvtier_namespace_stores_total", NULL) < 0, "no namespace yet");
	resp_free(&r);

	workload(false);
	scrape(&r);
	CHECK(sample(r.body, "kvtier_namespace_stores_total", "model=\"metrics-test\"") == STORED,
	      "namespace stores %g, the test stored %u",
	      sample(r.body, "kvtier_namespace_stores_total", "model=\"metrics-test\""), STORED);
	CHECK(sample(r.body, "kvtier_namespace_stored_bytes_total", "model=\"metrics-test\"") ==
		      (double)STORED * BLOCK, "bytes stored");
	CHECK(sample(r.body, "kvtier_namespace_hits_total", "model=\"metrics-test\"") == STORED,
	      "hits %g", sample(r.body, "kvtier_namespace_hits_total", "model=\"metrics-test\""));
	CHECK(sample(r.body, "kvtier_namespace_misses_total", "model=\"metrics-test\"") == MISSED,
	      "misses %g", sample(r.body, "kvtier_namespace_misses_total", "model=\"metrics-test\""));
	CHECK(sample(r.body, "kvtier_tenant_stores_total", NULL) == STORED, "tenant stores");
	CHECK(sample(r.body, "kvtier_blocks", NULL) == STORED, "blocks resident");
	CHECK(sample(r.body, "kvtier_pool_used_bytes", NULL) >= (double)STORED * BLOCK, "pool used");
	CHECK(sample(r.body, "kvtier_loop_dispatches_total", NULL) > 0, "the loop's dispatches");

	/* The same series as kvtierctl metrics: every name, HELP and TYPE. */
	ctl = ctl_metrics();
	a = names_of(r.body);
	b = names_of(ctl);
	if (strcmp(a, b) != 0)
		fprintf(stderr, "endpoint:\n%s\nkvtierctl metrics:\n%s\n", a, b);
	CHECK(strcmp(a, b) == 0, "the endpoint and kvtierctl metrics name the same series");
	CHECK(strstr(a, "\nkvtier_namespace_stores_total\n"), "names parsed");
	free(a);
	free(b);
	free(ctl);
	resp_free(&r);

	/* HEAD: the headers alone. */
	request("HEAD", "/metrics", &r);
	CHECK(r.status == 200 && r.body_len == 0, "HEAD /metrics: %d, %zu bytes", r.status, r.body_len);
	resp_free(&r);

	/* Nothing else is served. */
	static const char *const other[] = {"/", "/metric", "/metricsx", "/metrics/", "/metrics/x",
					    "/../metrics", "/favicon.ico"};
	for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++) {
		request("GET", other[i], &r);
		CHECK(r.status == 404, "GET %s: %d", other[i], r.status);
		CHECK(!strstr(r.body, "kvtier_"), "no series at %s", other[i]);
		resp_free(&r);
	}
	request("POST", "/metrics", &r);
	CHECK(r.status == 405 && strcasestr(r.head, "\r\nAllow: GET, HEAD"), "POST: %d", r.status);
	resp_free(&r);
	request("DELETE", "/metrics", &r);
	CHECK(r.status == 405, "DELETE: %d", r.status);
	resp_free(&r);

	/* Malformed requests: an error status or a closed connection, and
	 * the endpoint serves the next scrape. */
	static const char *const bad[] = {
		"GARBAGE\r\n\r\n",
		"GET\r\n\r\n",
		"GET /metrics HTTP/9.9\r\n\r\n",
		"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
		"GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
		"GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n",
		"\x01\x02\x03\x00\xff\xfe\r\n\r\n",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		size_t len = i == 6 ? 10 : strlen(bad[i]);
		request_raw(bad[i], len, &r);
		CHECK(r.status == 0 || r.status >= 400 || (i == 4 && r.status == 200),
		      "malformed request %zu: %d", i, r.status);
		resp_free(&r);
		scrape(&r);
		resp_free(&r);
	}
	/* Clients that go away: before a byte, and half way through their
	 * headers (the server holds such a connection until its timeout, 10 s:
	 * the next scrape must not wait for it). */
	static const char *const gone[] = {"", "GET /metrics HTTP/1.1\r\nHost: x\r\n", "GET /met"};
	for (size_t i = 0; i < sizeof(gone) / sizeof(gone[0]); i++) {
		int fd = tcp_connect();
		send_all(fd, gone[i], strlen(gone[i]));
		close(fd);
		scrape(&r);
		resp_free(&r);
	}
	/* A header past the connection's memory (32 KiB), its client gone
	 * without waiting for the refusal: the endpoint holds no more than
	 * that memory for it. */
	{
		size_t n = 64 << 10;
		char *big = malloc(n + 64);
		CHECK(big, "out of memory");
		int k = sprintf(big, "GET /metrics HTTP/1.1\r\nX-Big: ");
		memset(big + k, 'a', n);
		memcpy(big + k + n, "\r\n\r\n", 5);
		int fd = tcp_connect();
		send_all(fd, big, (size_t)k + n + 4);
		close(fd);
		free(big);
	}
	scrape(&r);
	CHECK(sample(r.body, "kvtier_namespace_stores_total", "model=\"metrics-test\"") == STORED,
	      "the counters as they were");
	resp_free(&r);

	/* The daemon still serves its clients. */
	workload(true);
	scrape(&r);
	CHECK(sample(r.body, "kvtier_namespace_stores_total", "model=\"metrics-test\"") == STORED,
	      "stored again: the same blocks, already resident");
	CHECK(sample(r.body, "kvtier_namespace_hits_total", "model=\"metrics-test\"") == 2 * STORED,
	      "looked up again: hits %g",
	      sample(r.body, "kvtier_namespace_hits_total", "model=\"metrics-test\""));
	resp_free(&r);
	daemon_stop(&D);
	daemon_cleanup(&D);
	return 0;
}
