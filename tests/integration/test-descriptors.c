/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The daemon's own descriptors against clients that would exhaust them.
 *
 * Out of descriptors: the daemon runs under an RLIMIT_NOFILE that leaves
 * room for three connections, and 60 clients connect.  accept() fails and
 * the rest wait in the listen backlog; the daemon must stop trying until a
 * descriptor is freed, not retry (and log) on every turn of its loop: while
 * the checker makes 200 round trips no accept is attempted and no line is
 * logged.  Once accepted clients leave, waiting ones are taken in, and once
 * all have left a new client connects as usual.
 *
 * A connection that does not read: the EXTENT_ADDED notices queued to it
 * while its tenant gains 32 extents hold no descriptor of their own (the
 * daemon gains one per extent, not two), and when it finally reads, each
 * notice brings the descriptor of its extent.
 */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "raw.h"

#define N_WAITING 60
#define FREE_FDS 3
#define ROUND_TRIPS 200
#define N_PINGS 4000
#define NEW_EXTENTS 32

/* Open descriptors of pid and the highest of their numbers. */
static void fd_usage(pid_t pid, int *ret_n, int *ret_max)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	DIR *dir = opendir(path);
	CHECK(dir, "opendir %s", path);
	struct dirent *e;
	int n = 0, max = -1;
	while ((e = readdir(dir))) {
		if (e->d_name[0] == '.')
			continue;
		int fd = atoi(e->d_name);
		n++;
		if (fd > max)
			max = fd;
	}
	closedir(dir);
	*ret_n = n;
	*ret_max = max;
}

static int log_lines(const struct daemon *d, const char *needle)
{
	FILE *f = fopen(d->log, "re");
	char line[4096];
	int n = 0;
	CHECK(f, "open %s", d->log);
	while (fgets(line, sizeof(line), f))
		n += strstr(line, needle) != NULL;
	fclose(f);
	return n;
}

/* A client that connects and sends its HELLO, the reply unread. */
static int hello_client(const struct daemon *d, uint32_t i)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct kvt_hello_req req = {1, 1, KVT_FEATURES_ALL, "", ""};
	struct kvt_buf b;

	memcpy(sa.sun_path, d->socket, strlen(d->socket) + 1);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0,
	      "client %u connects (into the backlog at worst): %s", i, strerror(errno));
	snprintf(req.name, sizeof(req.name), "waiting-%u", i);
	kvt_buf_init(&b);
	kvt_enc_hello_req(&b, 1, &req);
	CHECK(kvt_msg_finish(&b, 0) == 0 && write(fd, b.data, b.len) == (ssize_t)b.len,
	      "client %u sends HELLO", i);
	kvt_buf_free(&b);
	return fd;
}

/* Whether the daemon answered: it has taken the connection in. */
static bool answered(int fd)
{
	struct pollfd p = {fd, POLLIN, 0};
	return fd >= 0 && poll(&p, 1, 0) == 1;
}

static int count_answered(const int *fds, int n)
{
	int k = 0;
	for (int i = 0; i < n; i++)
		k += answered(fds[i]);
	return k;
}

static void test_out_of_descriptors(void)
{
	struct daemon d;
	int fds[N_WAITING];

	/* A connection that never says HELLO must not be closed for it here. */
	daemon_start(&d, "[daemon]\nhandshake_timeout_ms = 600000\n");
	kvt_client *c = client_connect(&d, "checker");
	WAIT_FOR(stat_get(c, "daemon", "clients") == 1, "only the checker connected");

	/* Room for FREE_FDS more descriptors: the waiting clients are of
	 * this process, whose pidfd the daemon holds already, so each one
	 * it takes in costs its socket. */
	int n_open, max_fd;
	fd_usage(d.pid, &n_open, &max_fd);
	struct rlimit lim;
	CHECK(prlimit(d.pid, RLIMIT_NOFILE, NULL, &lim) == 0, "prlimit: %s", strerror(errno));
	rlim_t soft = (rlim_t)(n_open + FREE_FDS);
	if (soft < (rlim_t)max_fd + 1)
		soft = (rlim_t)max_fd + 1;
	CHECK(soft <= lim.rlim_max, "hard limit %llu", (unsigned long long)lim.rlim_max);
	lim.rlim_cur = soft;
	CHECK(prlimit(d.pid, RLIMIT_NOFILE, &lim, NULL) == 0, "prlimit: %s", strerror(errno));
	int room = (int)soft - n_open;

	/* Connections the daemon has taken in or refused. */
	uint64_t handled = stat_get(c, "daemon", "connections") + stat_get(c, "daemon", "refused");
	for (int i = 0; i < N_WAITING; i++)
		fds[i] = hello_client(&d, (uint32_t)i);
	WAIT_FOR(count_answered(fds, N_WAITING) >= 1, "a first client to be taken in");
	/* Settled: fewer descriptors free than a client needs (the daemon
	 * may pause early, while a lookup of its own holds one, and take more
	 * clients in once it is closed), and every client taken in answered. */
	uint64_t clients = 0;
	WAIT_FOR(daemon_fd_count(&d) >= (int)soft - 1 &&
			 (clients = stat_get(c, "daemon", "clients")) > 1 &&
			 count_answered(fds, N_WAITING) == (int)clients - 1,
		 "the daemon to run out of descriptors, its clients answered");
	CHECK(clients - 1 <= (uint64_t)room && clients - 1 < N_WAITING,
	      "%llu clients taken in with room for %d descriptors",
	      (unsigned long long)(clients - 1), room);

	/* The rest wait.  The loop goes round ROUND_TRIPS times at least,
	 * and no descriptor is freed meanwhile: no accept, no log line. */
	int lines = log_lines(&d, "Failed to accept");
	for (int i = 0; i < ROUND_TRIPS; i++)
		CHECK(kvt_client_ping(c) == 0, "ping %d", i);
	int lines_after = log_lines(&d, "Failed to accept");
	CHECK(lines_after == lines,
	      "%d lines logged about failed accepts during %d round trips (%d before them)",
	      lines_after - lines, ROUND_TRIPS, lines);
	CHECK(lines <= 1, "%d lines logged about failed accepts", lines);
	uint64_t accept_failures = stat_get(c, "daemon", "accept_failures");
	CHECK(accept_failures >= 1, "accept failed for want of descriptors");
	for (int i = 0; i < ROUND_TRIPS; i++)
		CHECK(kvt_client_ping(c) == 0, "ping %d", i);
	CHECK(stat_get(c, "daemon", "accept_failures") == accept_failures,
	      "accept attempted while no descriptor was freed (%llu failures, %llu before)",
	      (unsigned long long)stat_get(c, "daemon", "accept_failures"),
	      (unsigned long long)accept_failures);
	CHECK(stat_get(c, "daemon", "clients") == clients, "no client taken in meanwhile");

	/* The clients taken in leave (all found before any closes: the first
	 * to close makes room at once): waiting ones take their place. */
	bool leaving[N_WAITING];
	int left = 0;
	for (int i = 0; i < N_WAITING; i++)
		left += leaving[i] = answered(fds[i]);
	CHECK(left == (int)clients - 1, "%d clients leave", left);
	for (int i = 0; i < N_WAITING; i++)
		if (leaving[i]) {
			close(fds[i]);
			fds[i] = -1;
		}
	WAIT_FOR(count_answered(fds, N_WAITING) >= 1, "a waiting client to be taken in");

	/* All leave; a new client is served as usual. */
	for (int i = 0; i < N_WAITING; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	WAIT_FOR(stat_get(c, "daemon", "connections") + stat_get(c, "daemon", "refused") ==
				 handled + N_WAITING &&
			 stat_get(c, "daemon", "clients") == 1,
		 "every waiting client to be taken in, and gone");
	kvt_client *fresh = client_connect(&d, "fresh");
	CHECK(kvt_client_ping(fresh) == 0, "a new client is served");
	WAIT_FOR(stat_get(fresh, "daemon", "clients") == 2, "the checker and the new client only");
	kvt_client_free(fresh);
	kvt_client_free(c);
	daemon_stop(&d);
	daemon_cleanup(&d);
}

struct queued {
	const char *name;
	uint64_t bytes;
	bool found;
};

static int queued_cb(const kvt_record *r, void *userdata)
{
	struct queued *q = userdata;
	const char *name = kvt_record_get_str(r, "name");
	if (!strcmp(kvt_record_kind(r), "client") && name && !strcmp(name, q->name)) {
		q->found = kvt_record_get_u64(r, "queued_bytes", &q->bytes) == 0;
	}
	return 0;
}

static uint64_t queued_bytes(kvt_client *c, const char *name)
{
	struct queued q = {name, 0, false};
	CHECK(kvt_stats(c, KVT_STATS_CLIENTS, queued_cb, &q) == 0 && q.found,
	      "client %s in the statistics", name);
	return q.bytes;
}

static void test_queued_notices(void)
{
	struct daemon d;
	static struct raw r;
	struct kvt_buf b;

	daemon_start(&d, "[pool]\ncapacity = 128M\n[tenants]\ndefault_quota = 128M\n");
	kvt_client *w = client_connect(&d, "writer");
	kvt_ns *ns = engine_ns(w, "tiny", 1);
	kvt_ns_info info;
	CHECK(kvt_ns_get_info(ns, &info) == 0, "ns info");

	/* The sleeper joins the tenant, then asks for replies it never reads
	 * until the daemon's socket buffer is full and replies queue. */
	raw_connect(&r, &d);
	raw_hello(&r, "sleeper");
	kvt_buf_init(&b);
	uint64_t rid0 = r.rid;
	for (int i = 0; i < N_PINGS; i++) {
		kvt_msg_begin(&b, 1, KVT_OP_PING, 0, ++r.rid);
		CHECK(kvt_msg_finish(&b, 0) == 0, "encode");
		CHECK(write(r.fd, b.data, b.len) == (ssize_t)b.len, "ping %d", i);
		kvt_buf_reset(&b);
	}
	WAIT_FOR(queued_bytes(w, "sleeper") > 0, "replies to queue for the sleeper");
	uint64_t q0 = queued_bytes(w, "sleeper");

	/* The tenant gains extents; each is announced to the sleeper, after
	 * its queued replies. */
	uint64_t ext0 = stat_get(w, "daemon", "extents");
	int pool0 = pool_descriptors(w);
	int fds0 = daemon_fd_count(&d);
	enum { BATCH = 64 };
	uint8_t keys[BATCH * 32];
	uint8_t *blk = calloc(BATCH, info.shard_bytes);
	const void *srcs[BATCH];
	CHECK(blk, "calloc");
	for (int i = 0; i < BATCH; i++)
		srcs[i] = blk + (size_t)i * info.shard_bytes;
	for (uint64_t seed = 1; stat_get(w, "daemon", "extents") < ext0 + NEW_EXTENTS; seed++) {
		CHECK(seed < 100000, "the pool does not grow");
		engine_keys(seed, 16 * BATCH, 0, 0, keys, BATCH);
		CHECK(kvt_store(ns, 0, keys, BATCH, srcs, NULL) == BATCH, "store");
	}
	uint64_t ext1 = stat_get(w, "daemon", "extents");
	int pool1 = pool_descriptors(w);
	int fds1 = daemon_fd_count(&d);
	CHECK(queued_bytes(w, "sleeper") > q0, "the notices queued behind the replies");
	CHECK(fds1 - fds0 == pool1 - pool0,
	      "the daemon gained %d descriptors for %d of pool memory: %llu extents and one made ahead or not (queued notices hold none)",
	      fds1 - fds0, pool1 - pool0, (unsigned long long)(ext1 - ext0));
	CHECK(stat_get(w, "daemon", "extents_ahead") > 0,
	      "no extent of %llu was made ahead", (unsigned long long)(ext1 - ext0));

	/* The sleeper reads at last: every reply, and a notice per extent
	 * with the descriptor of that extent, all before the reply to one more
	 * PING sent now. */
	kvt_msg_begin(&b, 1, KVT_OP_PING, 0, ++r.rid);
	CHECK(kvt_msg_finish(&b, 0) == 0 && write(r.fd, b.data, b.len) == (ssize_t)b.len,
	      "the last ping");
	uint32_t pings = 0, notices = 0;
	r.keep_fds = true;
	while (pings < N_PINGS + 1) {
		CHECK(raw_recv(&r) == 1, "the daemon closed the sleeper's connection");
		if (r.h.opcode == KVT_OP_PING) {
			CHECK(r.h.request_id == rid0 + ++pings, "reply %llu in order",
			      (unsigned long long)r.h.request_id);
			CHECK(r.n_fds == 0, "a reply with descriptors");
			continue;
		}
		if (r.h.opcode != KVT_OP_EXTENT_ADDED) {
			raw_close_fds(&r);
			continue;
		}
		struct kvt_extent_note n;
		struct kvt_cursor cur = {r.payload, r.h.length};
		struct stat st;
		CHECK(kvt_dec_extent_note(&cur, &n) == 0, "notice decodes");
		CHECK(r.n_fds == 1 && fstat(r.fds[0], &st) == 0 && (uint64_t)st.st_size == n.size,
		      "extent %u comes with its descriptor (%u fds, size %llu, want %llu)",
		      n.extent_id, r.n_fds, (unsigned long long)st.st_size,
		      (unsigned long long)n.size);
		raw_close_fds(&r);
		notices++;
	}
	CHECK(notices == ext1 - ext0, "%u notices for %llu new extents", notices,
	      (unsigned long long)(ext1 - ext0));
	WAIT_FOR(daemon_fd_count(&d) == fds1, "nothing left behind by the sent notices");

	free(blk);
	kvt_buf_free(&b);
	raw_disconnect(&r);
	kvt_ns_close(ns);
	kvt_client_free(w);
	daemon_stop(&d);
	daemon_cleanup(&d);
}

int main(void)
{
	test_out_of_descriptors();
	test_queued_notices();
	return 0;
}
