/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Hostile and broken clients, spoken to in raw protocol: each one loses its
 * own connection (or gets an error reply), and a well-behaved client in
 * another process keeps storing and loading byte-exact all along.  Clients
 * that vanish halfway through a message, in either direction, and one that
 * dies holding a reservation leave nothing behind.  At the end the daemon
 * holds no more descriptors than before, and its anonymous memory, sampled
 * all along, never exceeded what its per-connection limits allow.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "harness.h"
#include "kvt-proto.h"

static struct daemon d;
static uint64_t rid;

#define OUTPUT_BYTES (2 << 20) /* [limits] output_bytes below */
#define NEVER_READERS 4        /* at once */

/* The daemon's RssAnon, sampled every 5 ms while the hostile clients act. */
static struct {
	pthread_t thread;
	atomic_int stop;
	atomic_llong max;
	atomic_long samples;
} sampler;

static void *sample_rss(void *arg)
{
	(void)arg;
	while (!atomic_load(&sampler.stop)) {
		long long r = daemon_rss_anon(&d);
		if (r > atomic_load(&sampler.max))
			atomic_store(&sampler.max, r);
		atomic_fetch_add(&sampler.samples, 1);
		usleep(5000);
	}
	return NULL;
}

static int raw_connect(void)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	CHECK(strlen(d.socket) < sizeof(sa.sun_path), "socket path too long");
	memcpy(sa.sun_path, d.socket, strlen(d.socket) + 1);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0, "connect");
	return fd;
}

static void send_buf(int fd, const struct kvt_buf *b)
{
	CHECK(write(fd, b->data, b->len) == (ssize_t)b->len, "write");
}

/* Read one message; fds into *ret_fd (or closed).  0 at EOF. */
static int recv_msg(int fd, struct kvt_header *h, uint8_t *payload, size_t cap,
		    int *ret_fd)
{
	uint8_t hdr[KVT_HEADER_SIZE];
	int fds[4];
	unsigned n_fds = 0;
	size_t got = 0;

	while (got < KVT_HEADER_SIZE) {
		struct pollfd p = {fd, POLLIN, 0};
		CHECK(poll(&p, 1, 30000) == 1, "no answer from the daemon");
		ssize_t n = kvt_recvmsg(fd, hdr + got, KVT_HEADER_SIZE - got, fds, &n_fds, 4);
		if (n == -EAGAIN)
			continue;
		if (n <= 0)
			return 0;
		got += (size_t)n;
	}
	CHECK(kvt_header_parse(hdr, h) == 0, "daemon sent a bad header");
	CHECK(h->length <= cap, "reply too large");
	got = 0;
	while (got < h->length) {
		struct pollfd p = {fd, POLLIN, 0};
		CHECK(poll(&p, 1, 30000) == 1, "no answer from the daemon");
		ssize_t n = kvt_recvmsg(fd, payload + got, h->length - got, fds, &n_fds, 4);
		if (n == -EAGAIN)
			continue;
		CHECK(n > 0, "short message");
		got += (size_t)n;
	}
	for (unsigned i = 0; i < n_fds; i++) {
		if (ret_fd && i == 0)
			*ret_fd = fds[i];
		else
			close(fds[i]);
	}
	return 1;
}

/* True when the daemon closed this connection. */
static bool closed_by_daemon(int fd)
{
	uint8_t buf[65536];
	struct kvt_header h;
	for (;;) {
		int r = recv_msg(fd, &h, buf, sizeof(buf), NULL);
		if (r == 0)
			return true;
		if (h.flags & KVT_FLAG_ERROR)
			continue; /* a refusal before the close is fine */
	}
}

static int hello(int fd)
{
	struct kvt_buf b;
	struct kvt_hello_req req = {1, 1, KVT_FEATURES_ALL, "hostile"};
	uint8_t buf[4096];
	struct kvt_header h;

	kvt_buf_init(&b);
	kvt_enc_hello_req(&b, ++rid, &req);
	kvt_msg_finish(&b, 0);
	send_buf(fd, &b);
	kvt_buf_free(&b);
	/* The tenant's extents may come first, as notifications. */
	do
		CHECK(recv_msg(fd, &h, buf, sizeof(buf), NULL) == 1, "hello reply");
	while (h.flags & KVT_FLAG_NOTIFY);
	CHECK(h.opcode == KVT_OP_HELLO && !(h.flags & KVT_FLAG_ERROR), "hello reply");
	return fd;
}

static void ping_ok(int fd)
{
	struct kvt_buf b;
	uint8_t buf[4096];
	struct kvt_header h;
	kvt_buf_init(&b);
	kvt_msg_begin(&b, 1, KVT_OP_PING, 0, ++rid);
	kvt_msg_finish(&b, 0);
	send_buf(fd, &b);
	kvt_buf_free(&b);
	CHECK(recv_msg(fd, &h, buf, sizeof(buf), NULL) == 1 && h.opcode == KVT_OP_PING &&
		      h.request_id == rid,
	      "ping reply");
}

/* The well-behaved engine: store and load a fresh request, byte-exact. */
static void good_client_works(uint64_t seed)
{
	char out[4096], s[32];
	snprintf(s, sizeof(s), "%llu", (unsigned long long)seed);
	CHECK(engine_run(&d, out, sizeof(out), "--model", "tiny", "--prefix", "64",
			 "--prefix-seed", s, "--suffix", "0", "--expect-hits", "0", NULL) == 0,
	      "good client stores");
	CHECK(engine_run(&d, out, sizeof(out), "--model", "tiny", "--prefix", "64",
			 "--prefix-seed", s, "--suffix", "0", "--expect-hits", "4",
			 "--no-store", NULL) == 0,
	      "good client loads");
}

static uint32_t open_tiny_ns(int fd)
{
	struct kvt_identity id = {.key_scheme = 1, .model = "hostile", .layer_end = 1,
				  .tp_size = 1, .cp_size = 1, .block_tokens = 16, .n_groups = 1};
	id.groups[0] = (struct kvt_id_group){1, KVT_ATTN_MHA, 0, 2, 1, 128, 1, 0};
	struct kvt_buf ident, b;
	uint8_t buf[4096];
	struct kvt_header h;
	struct kvt_ns_open_rep rep;

	kvt_buf_init(&ident);
	kvt_buf_init(&b);
	CHECK(kvt_identity_encode(&id, &ident) == 0, "identity");
	struct kvt_ns_open_req req = {ident.data, (uint32_t)ident.len};
	kvt_enc_ns_open_req(&b, 1, ++rid, &req);
	kvt_msg_finish(&b, 0);
	send_buf(fd, &b);
	do
		CHECK(recv_msg(fd, &h, buf, sizeof(buf), NULL) == 1, "ns reply");
	while (h.flags & KVT_FLAG_NOTIFY);
	struct kvt_cursor c = {buf, h.length};
	CHECK(kvt_dec_ns_open_rep(&c, &rep) == 0, "ns reply decodes");
	kvt_buf_free(&ident);
	kvt_buf_free(&b);
	return rep.ns_id;
}

/* In a child process: what a process takes ends when the process exits. */
static void punch_holes(void)
{
	struct kvt_buf b;
	uint8_t buf[65536];
	struct kvt_header h;
	uint32_t ns;
	int fd;

	kvt_buf_init(&b);
	fd = hello(raw_connect());
	ns = open_tiny_ns(fd);
	uint8_t key[32];
	memset(key, 0x42, sizeof(key));
	struct kvt_keys_req kr = {ns, 0, 1, key};
	kvt_enc_keys_req(&b, 1, KVT_OP_RESERVE, ++rid, &kr);
	kvt_msg_finish(&b, 0);
	send_buf(fd, &b);
	int extent_fd = -1;
	for (;;) {
		CHECK(recv_msg(fd, &h, buf, sizeof(buf), &extent_fd) == 1, "reserve reply");
		if (!(h.flags & KVT_FLAG_NOTIFY))
			break;
	}
	CHECK(extent_fd >= 0, "the extent arrived with the reservation");
	struct stat st;
	CHECK(fstat(extent_fd, &st) == 0, "fstat");
	CHECK(ftruncate(extent_fd, 0) < 0 && errno == EPERM, "a sealed extent cannot shrink");
	CHECK(ftruncate(extent_fd, st.st_size * 2) < 0 && errno == EPERM,
	      "a sealed extent cannot grow");
	CHECK(fallocate(extent_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, st.st_size) == 0,
	      "punching holes is possible (seals do not stop it)");
	close(extent_fd);
	close(fd);
	_exit(0);
}

/* A client that sends requests and never reads its replies. */
static void never_read(void)
{
	struct kvt_buf b;
	int fd;

	kvt_buf_init(&b);
	fd = hello(raw_connect());
	int one = 4096;
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &one, sizeof(one));
	open_tiny_ns(fd);
	kvt_msg_begin(&b, 1, KVT_OP_STATS, 0, ++rid);
	kvt_put_u32(&b, KVT_STATS_ALL);
	kvt_msg_finish(&b, 0);
	int flags = fcntl(fd, F_GETFL);
	fcntl(fd, F_SETFL, flags | O_NONBLOCK);
	for (int i = 0; i < 20000; i++)
		if (write(fd, b.data, b.len) < 0)
			break; /* the daemon stopped reading us: good */
	/* ... while another client is served as usual. */
	good_client_works(200);
	close(fd);
	_exit(0);
}

/* Several never-readers at once: each keeps sending requests, and reads
 * nothing, until go closes; the daemon must stop reading it once its
 * queued replies pass the output limit. */
static void never_read_held(int go)
{
	struct kvt_buf b;
	size_t off = 0;
	int fd;

	kvt_buf_init(&b);
	fd = hello(raw_connect());
	int small = 4096;
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
	/* Requests in batches: one small write each would fill our socket
	 * with per-write overhead long before the daemon's queue. */
	for (int i = 0; i < 256; i++) {
		kvt_msg_begin(&b, 1, KVT_OP_STATS, 0, ++rid);
		kvt_put_u32(&b, KVT_STATS_ALL);
		kvt_msg_finish(&b, 0);
	}
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	for (;;) {
		struct pollfd p[2] = {{fd, POLLOUT, 0}, {go, POLLIN, 0}};
		CHECK(poll(p, 2, -1) > 0, "poll");
		if (p[1].revents)
			break;
		if (p[0].revents & (POLLERR | POLLHUP))
			break; /* closed by the daemon: the test will say */
		ssize_t n = write(fd, b.data + off, b.len - off);
		if (n > 0)
			off = (off + (size_t)n) % b.len;
	}
	close(fd);
	_exit(0);
}

struct queue_query {
	uint32_t over_limit;
};

static int queue_cb(const kvt_record *r, void *userdata)
{
	struct queue_query *q = userdata;
	uint64_t queued;
	const char *name = kvt_record_get_str(r, "name");
	if (strcmp(kvt_record_kind(r), "client") || !name || strcmp(name, "hostile"))
		return 0;
	if (kvt_record_get_u64(r, "queued_bytes", &queued) == 0 && queued > OUTPUT_BYTES)
		q->over_limit++;
	return 0;
}

/* Hostile connections whose queued replies are past the output limit. */
static uint32_t queues_over_limit(kvt_client *c)
{
	struct queue_query q = {0};
	CHECK(kvt_stats(c, KVT_STATS_ALL, queue_cb, &q) == 0, "stats");
	return q.over_limit;
}

/* Dies by SIGKILL after sending the first half of a request, holding a
 * reservation whose commit was that request. */
static void vanish_mid_request(int round)
{
	struct kvt_buf b;
	uint8_t buf[65536], key[32];
	struct kvt_header h;
	struct kvt_slot slot;
	uint32_t n = 0;

	kvt_buf_init(&b);
	int fd = hello(raw_connect());
	uint32_t ns = open_tiny_ns(fd);
	memset(key, 0x71, sizeof(key));
	key[0] = (uint8_t)round;
	struct kvt_keys_req kr = {ns, 0, 1, key};
	kvt_enc_keys_req(&b, 1, KVT_OP_RESERVE, ++rid, &kr);
	kvt_msg_finish(&b, 0);
	send_buf(fd, &b);
	do
		CHECK(recv_msg(fd, &h, buf, sizeof(buf), NULL) == 1, "reserve reply");
	while (h.flags & KVT_FLAG_NOTIFY);
	struct kvt_cursor cur = {buf, h.length};
	CHECK(kvt_dec_slots_rep(&cur, &slot, 1, &n) == 0 && n == 1 && slot.status == 0,
	      "reserved");
	kvt_buf_free(&b);
	kvt_buf_init(&b);
	struct kvt_handle_arg arg = {slot.handle, 1};
	kvt_enc_handles_req(&b, 1, KVT_OP_COMMIT, ++rid, &arg, 1);
	kvt_msg_finish(&b, 0);
	/* Alternately half the header and half the whole message. */
	size_t half = round % 2 ? KVT_HEADER_SIZE / 2 : b.len / 2;
	CHECK(write(fd, b.data, half) == (ssize_t)half, "write");
	kill(getpid(), SIGKILL);
	for (;;)
		pause();
}

/* Dies after asking for far more replies than fit in its socket and
 * reading the start of the first: the daemon is mid-write. */
static void vanish_mid_reply(void)
{
	struct kvt_buf b;
	uint8_t head[100];

	kvt_buf_init(&b);
	int fd = hello(raw_connect());
	open_tiny_ns(fd);
	for (int i = 0; i < 200; i++) {
		kvt_msg_begin(&b, 1, KVT_OP_STATS, 0, ++rid);
		kvt_put_u32(&b, KVT_STATS_ALL);
		kvt_msg_finish(&b, 0);
	}
	send_buf(fd, &b);
	CHECK(read(fd, head, sizeof(head)) > 0, "the first reply starts");
	kill(getpid(), SIGKILL);
	for (;;)
		pause();
}

/* The state of key in the hostile namespace, asked on a fresh connection. */
static uint8_t raw_lookup(const uint8_t *key)
{
	struct kvt_buf b;
	uint8_t buf[4096];
	struct kvt_header h;
	struct kvt_lookup_rep rep;

	kvt_buf_init(&b);
	int fd = hello(raw_connect());
	uint32_t ns = open_tiny_ns(fd);
	struct kvt_keys_req kr = {ns, 0, 1, key};
	kvt_enc_keys_req(&b, 1, KVT_OP_LOOKUP, ++rid, &kr);
	kvt_msg_finish(&b, 0);
	send_buf(fd, &b);
	do
		CHECK(recv_msg(fd, &h, buf, sizeof(buf), NULL) == 1, "lookup reply");
	while (h.flags & KVT_FLAG_NOTIFY);
	struct kvt_cursor cur = {buf, h.length};
	CHECK(kvt_dec_lookup_rep(&cur, &rep) == 0 && rep.n == 1, "lookup reply decodes");
	uint8_t state = rep.states[0];
	kvt_buf_free(&b);
	close(fd);
	return state;
}

/*
 * Memory: what one connection can make the daemon hold is bounded by its
 * limits: queued replies up to twice output_bytes (past that the
 * connection is closed) and one partial request of at most the largest
 * message.  At most NEVER_READERS + 1 hostile connections were open at
 * once.  The margin covers what the daemon allocates for the sessions and
 * the good clients' work besides, and malloc's slack.  Measured here: a
 * baseline of 0.9 MiB, 9.3 MiB with the four never-readers connected (each
 * had a little over 2 MiB queued, where the daemon stopped reading it),
 * against a bound of 30 MiB; a daemon that kept reading them would queue
 * without end.
 */
static void check_memory(int64_t rss_before, int64_t rss_readers)
{
	atomic_store(&sampler.stop, 1);
	pthread_join(sampler.thread, NULL);
	int64_t per_conn = 2 * (int64_t)OUTPUT_BYTES + KVT_HEADER_SIZE + KVT_MAX_PAYLOAD;
	int64_t bound = rss_before + (NEVER_READERS + 1) * per_conn + (4 << 20);
	int64_t rss_max = atomic_load(&sampler.max), rss_after = daemon_rss_anon(&d);
	fprintf(stderr,
		"test-hostile: RssAnon baseline %" PRId64 " KiB, %" PRId64
		" KiB with %d never-readers, max %" PRId64 " KiB over %ld samples, %" PRId64
		" KiB after; bound %" PRId64 " KiB\n",
		rss_before >> 10, rss_readers >> 10, NEVER_READERS, rss_max >> 10,
		atomic_load(&sampler.samples), rss_after >> 10, bound >> 10);
	CHECK(atomic_load(&sampler.samples) > 0, "RssAnon was sampled");
#if defined(__SANITIZE_ADDRESS__)
	/* ASan's quarantine of freed memory and its shadow pages are RssAnon
	 * too: the figure measures the sanitizer, not the daemon. */
	fprintf(stderr, "test-hostile: sanitizer build, RssAnon bound not applied\n");
#else
	CHECK(rss_max <= bound, "the daemon's RssAnon reached %" PRId64 " KiB, bound %" PRId64
	      " KiB", rss_max >> 10, bound >> 10);
#endif
}

int main(void)
{
	struct kvt_buf b;
	uint8_t buf[65536];
	struct kvt_header h;
	int fd;

	daemon_start(&d, "[limits]\nkeys_per_request = 64\noutput_bytes = 2M\n");
	kvt_buf_init(&b);
	good_client_works(100);
	kvt_client *c = client_connect(&d, "checker");
	int fds_before = daemon_fd_count(&d);
	int64_t rss_before = daemon_rss_anon(&d);
	atomic_store(&sampler.max, rss_before);
	if (rss_before > 0)
		CHECK(pthread_create(&sampler.thread, NULL, sample_rss, NULL) == 0,
		      "sampler thread");
	else
		fprintf(stderr, "test-hostile: no RssAnon in /proc (kernel before 4.5?): the "
				"memory bound is not checked\n");

	/* Garbage instead of a header. */
	fd = raw_connect();
	CHECK(write(fd, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27) == 27, "write");
	CHECK(closed_by_daemon(fd), "garbage closes the connection");
	close(fd);

	/* A request before HELLO. */
	fd = raw_connect();
	kvt_msg_begin(&b, 1, KVT_OP_PING, 0, ++rid);
	kvt_msg_finish(&b, 0);
	send_buf(fd, &b);
	CHECK(closed_by_daemon(fd), "a request before HELLO closes the connection");
	close(fd);

	/* A header announcing more than the maximum payload. */
	fd = hello(raw_connect());
	kvt_msg_begin(&b, 1, KVT_OP_LOOKUP, 0, ++rid);
	kvt_msg_finish(&b, 0);
	b.data[8] = 0xff, b.data[9] = 0xff, b.data[10] = 0xff, b.data[11] = 0x7f;
	send_buf(fd, &b);
	CHECK(closed_by_daemon(fd), "an oversized length closes the connection");
	close(fd);

	/* A count that promises more keys than the payload holds. */
	fd = hello(raw_connect());
	kvt_msg_begin(&b, 1, KVT_OP_LOOKUP, 0, ++rid);
	kvt_put_u32(&b, 1);
	kvt_put_u32(&b, 0);
	kvt_put_u32(&b, 3);
	kvt_put_bytes(&b, buf, 64); /* two keys, not three */
	kvt_msg_finish(&b, 0);
	send_buf(fd, &b);
	CHECK(closed_by_daemon(fd), "a lying count closes the connection");
	close(fd);

	/* File descriptors, which no request carries. */
	fd = hello(raw_connect());
	kvt_msg_begin(&b, 1, KVT_OP_PING, 0, ++rid);
	kvt_msg_finish(&b, 0);
	int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
	CHECK(kvt_sendmsg(fd, b.data, b.len, &devnull, 1) == (ssize_t)b.len, "sendmsg");
	close(devnull);
	CHECK(closed_by_daemon(fd), "unexpected fds close the connection");
	close(fd);

	/* An unknown opcode is an error reply, not a disconnection. */
	fd = hello(raw_connect());
	kvt_msg_begin(&b, 1, 999, 0, ++rid);
	kvt_msg_finish(&b, 0);
	send_buf(fd, &b);
	CHECK(recv_msg(fd, &h, buf, sizeof(buf), NULL) == 1 && (h.flags & KVT_FLAG_ERROR) &&
		      h.request_id == rid,
	      "unknown opcode gets an error reply");
	struct kvt_error_rep err;
	struct kvt_cursor cur = {buf, h.length};
	CHECK(kvt_dec_error(&cur, &err) == 0 && err.error == -EOPNOTSUPP &&
		      strstr(err.reason, "unknown opcode"),
	      "with a reason: %s", err.reason);
	ping_ok(fd);

	/* Too many keys: refused with the limit named, connection kept. */
	uint32_t ns = open_tiny_ns(fd);
	kvt_msg_begin(&b, 1, KVT_OP_LOOKUP, 0, ++rid);
	kvt_put_u32(&b, ns);
	kvt_put_u32(&b, 0);
	kvt_put_u32(&b, 65);
	for (int i = 0; i < 65; i++)
		kvt_put_bytes(&b, buf, 32);
	kvt_msg_finish(&b, 0);
	send_buf(fd, &b);
	CHECK(recv_msg(fd, &h, buf, sizeof(buf), NULL) == 1 && (h.flags & KVT_FLAG_ERROR),
	      "65 keys refused");
	cur = (struct kvt_cursor){buf, h.length};
	CHECK(kvt_dec_error(&cur, &err) == 0 && err.error == -E2BIG &&
		      strstr(err.reason, "keys_per_request"),
	      "reason names the limit: %s", err.reason);
	ping_ok(fd);

	/* A request trickled one byte at a time still works. */
	kvt_msg_begin(&b, 1, KVT_OP_PING, 0, ++rid);
	kvt_msg_finish(&b, 0);
	for (size_t i = 0; i < b.len; i++) {
		CHECK(write(fd, b.data + i, 1) == 1, "write");
		usleep(1000);
	}
	CHECK(recv_msg(fd, &h, buf, sizeof(buf), NULL) == 1 && h.request_id == rid,
	      "trickled ping answered");

	close(fd);

	int pool_fds_before = pool_descriptors(c);
	for (int i = 0; i < 2; i++) {
		pid_t pid = fork();
		if (pid == 0) {
			if (i == 0)
				punch_holes();
			never_read();
		}
		CHECK(wait_exit(pid) == 0, "hostile child %d", i);
		good_client_works(101 + (uint64_t)i);
	}

	/* Never-readers at once, each with the daemon's output limit queued
	 * to it, while a good client works. */
	int go[2];
	pid_t readers[NEVER_READERS];
	CHECK(pipe2(go, O_CLOEXEC) == 0, "pipe");
	for (int i = 0; i < NEVER_READERS; i++) {
		readers[i] = fork();
		CHECK(readers[i] >= 0, "fork");
		if (readers[i] == 0) {
			harness_in_child();
			close(go[1]);
			never_read_held(go[0]);
		}
	}
	close(go[0]);
	WAIT_FOR(queues_over_limit(c) == NEVER_READERS,
		 "every never-reader's queue to pass the output limit");
	good_client_works(110);
	int64_t rss_readers = daemon_rss_anon(&d);
	CHECK(queues_over_limit(c) == NEVER_READERS, "the never-readers stay connected");
	close(go[1]);
	for (int i = 0; i < NEVER_READERS; i++)
		CHECK(wait_exit(readers[i]) == 0, "never-reader %d", i);
	good_client_works(111);

	/* Vanishing mid-transfer: half a request (holding a reservation),
	 * half-read replies. */
	WAIT_FOR(stat_sum(c, "tenant", "handles") == 0, "the hole puncher's reservation to end");
	uint64_t quarantined_before = stat_get(c, "daemon", "quarantined");
	for (int i = 0; i < 8; i++) {
		pid_t pid = fork();
		CHECK(pid >= 0, "fork");
		if (pid == 0) {
			harness_in_child();
			if (i < 6)
				vanish_mid_request(i);
			vanish_mid_reply();
		}
		CHECK(wait_exit(pid) == 128 + SIGKILL, "vanisher %d died as planned", i);
	}
	good_client_works(112);
	WAIT_FOR(stat_get(c, "daemon", "quarantined") == quarantined_before + 6,
		 "the vanishers' reservations to be quarantined");
	for (int i = 0; i < 6; i++) {
		uint8_t key[32];
		memset(key, 0x71, sizeof(key));
		key[0] = (uint8_t)i;
		CHECK(raw_lookup(key) == KVT_MISS, "a half-committed block is a miss");
	}

	/* Everything from these clients is gone, and the checker still works. */
	WAIT_FOR(stat_get(c, "daemon", "clients") == 1, "hostile sessions to close");
	WAIT_FOR(stat_sum(c, "tenant", "handles") == 0, "the reservation to end");
	/* The daemon keeps one descriptor per extent it created (and one
	 * made ahead), no more. */
	int fds_want = fds_before + pool_descriptors(c) - pool_fds_before;
	for (int i = 0; i < 1500 && daemon_fd_count(&d) != fds_want; i++)
		usleep(20000);
	CHECK(daemon_fd_count(&d) == fds_want, "daemon has %d fds, had %d", daemon_fd_count(&d),
	      fds_want);
	CHECK(stat_get(c, "daemon", "malformed") >= 5, "malformed connections counted");

	if (rss_before > 0)
		check_memory(rss_before, rss_readers);

	kvt_buf_free(&b);
	kvt_client_free(c);
	daemon_stop(&d);
	daemon_cleanup(&d);
	return 0;
}
