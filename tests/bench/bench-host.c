/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench-host: the host tier end to end, against limits measured in the same
 * run.
 *
 * It starts its own kvtierd (a private directory, a private socket) and
 * measures three things, each as pairs of contenders run one after the other
 * (A B A B ...) so that drift on a shared machine hits both alike:
 *
 *   1. kvt_store + kvt_load of 64 KiB to 4 MiB blocks against plain memcpy
 *      of the same bytes twice (caller -> middle, middle -> caller), and,
 *      with --redis, against a Redis server on a Unix socket through
 *      hiredis (SET and GET of the same blocks, pipelined);
 *   2. kvt_client_ping against a bare AF_UNIX stream ping-pong of one
 *      header (24 bytes) with a forked echo process;
 *   3. kvt_lookup of 1024-key batches, all hits and all misses, with the
 *      bare round trip measured in the same pair.
 *
 * 2 and 3 run twice: with the daemon and the echo process on this
 * process's CPU, and on another CPU (see "placement").
 *
 * What it reports is the median of the pairwise ratios, with the medians of
 * the absolute figures for context.  It is a measurement, not a test: it
 * fails only when something does not work (or moves wrong bytes), never
 * because a figure misses its target.
 */
#include <errno.h>
#include <getopt.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef BENCH_HAVE_HIREDIS
#include <hiredis/hiredis.h>
#define STR_(x) #x
#define STR(x) STR_(x)
#define HIREDIS_VERSION STR(HIREDIS_MAJOR) "." STR(HIREDIS_MINOR) "." STR(HIREDIS_PATCH)
#else
#define HIREDIS_VERSION "none"
#endif

#include "kvt-proto.h"
#include "bench-util.h"
#include "kvtier.h"

#define MIB (1024ull * 1024ull)
#define MAX_PAIRS 1000

/* Targets from the issue; printed next to the figures, never asserted. */
#define TARGET_COPY_2M 0.9   /* >= x memcpy for 2 MiB blocks */
#define TARGET_RTT 2.0       /* <= x the bare socket round trip */
#define TARGET_KEYS_S 5e6    /* >= keys/s for 1024-key lookups */

#define LOOKUP_KEYS 1024
#define CHUNKS 20 /* alternations within one pair of timing samples */
#define MAX_SIZES 8
#define START_LIMIT_NS 10000000000ull /* kvtierd listening */

static struct {
	unsigned pairs;
	unsigned rounds;       /* store+load rounds per sample */
	uint64_t round_bytes;  /* bytes stored (and loaded) per round */
	unsigned ping_iters;   /* round trips per ping sample */
	unsigned lookup_iters; /* batches per lookup sample */
	uint64_t sizes[MAX_SIZES]; /* block sizes of section 1, bytes */
	unsigned n_sizes;
	const char *redis;     /* a Redis server's Unix socket, or NULL */
	bool json;
} opt = {
	.pairs = 7,
	.rounds = 4,
	.round_bytes = 64 * MIB,
	.ping_iters = 20000,
	.lookup_iters = 2000,
	.sizes = {64 * 1024, 256 * 1024, MIB, 2 * MIB, 4 * MIB},
	.n_sizes = 5,
};

/* ---- failing and cleaning up ---------------------------------------- */

const char bench_name[] = "bench-host";

static struct bench_daemon daemon_state;
static pid_t echo_pid = -1;

_Noreturn void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	bench_vsay(fmt, ap);
	va_end(ap);
	if (echo_pid > 0) {
		kill(echo_pid, SIGKILL);
		waitpid(echo_pid, NULL, 0);
		echo_pid = -1;
	}
	bench_daemon_abort(&daemon_state);
	exit(1);
}

static void on_signal(int sig)
{
	/* Only async-signal-safe calls: the daemon and the echo process go,
	 * the private directory's known files go with them. */
	if (echo_pid > 0)
		kill(echo_pid, SIGKILL);
	bench_daemon_kill(&daemon_state);
	bench_daemon_unlink(&daemon_state);
	_exit(128 + sig);
}

/* ---- small helpers --------------------------------------------------- */

/* n keys never made before: the next n numbers of counter. */
static void next_keys(uint8_t *keys, size_t n, uint64_t *counter)
{
	make_keys(keys, n, (*counter + 1) * 4);
	*counter += n;
}

/* ---- the daemon ------------------------------------------------------ */

static void daemon_start(void)
{
	int r = bench_daemon_mkdir(&daemon_state, "/tmp", "kvt-bench");
	if (r < 0)
		die("mkdtemp: %s", strerror(-r));
	/* One slot class per block size and one of 32 KiB for lookups, one
	 * 256 MiB extent each: nothing is ever evicted. */
	bench_daemon_config(&daemon_state,
			    "[pool]\ncapacity = %uM\nextent_size = 256M\n"
			    "[limits]\nkeys_per_request = 4096\n",
			    256 * (opt.n_sizes + 1));
	bench_daemon_start(&daemon_state, START_LIMIT_NS);
}

/* ---- the bare socket ------------------------------------------------- */

static int read_full(int fd, void *buf, size_t len)
{
	uint8_t *p = buf;
	while (len) {
		ssize_t n = read(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n == 0 ? -ECONNRESET : -errno;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int write_full(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	while (len) {
		ssize_t n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/*
 * Forked before any large buffer exists: a child that shares the parent's
 * anonymous pages would turn every later write of the parent into a
 * copy-on-write fault.
 */
static int echo_start(void)
{
	int sv[2];

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		die("socketpair: %s", strerror(errno));
	echo_pid = fork();
	if (echo_pid < 0)
		die("fork: %s", strerror(errno));
	if (echo_pid == 0) {
		uint8_t msg[KVT_HEADER_SIZE];
		/* Ctrl-C reaches the whole group: the parent cleans up. */
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		signal(SIGHUP, SIG_DFL);
		close(sv[0]);
		while (read_full(sv[1], msg, sizeof(msg)) == 0)
			if (write_full(sv[1], msg, sizeof(msg)) < 0)
				break;
		_exit(0);
	}
	close(sv[1]);
	return sv[0];
}

static void echo_stop(int fd)
{
	close(fd);
	if (echo_pid > 0) {
		waitpid(echo_pid, NULL, 0);
		echo_pid = -1;
	}
}

/* \return nanoseconds for iters bare round trips. */
static uint64_t bare_rtts(int fd, unsigned iters)
{
	uint8_t msg[KVT_HEADER_SIZE] = {0};
	uint64_t t0 = kvt_now_ns();
	for (unsigned i = 0; i < iters; i++) {
		msg[0] = (uint8_t)i;
		if (write_full(fd, msg, sizeof(msg)) < 0 || read_full(fd, msg, sizeof(msg)) < 0)
			die("bare ping-pong failed: %s", strerror(errno));
	}
	return kvt_now_ns() - t0;
}

/* ---- namespaces ------------------------------------------------------ */

/*
 * A namespace whose block is `block` bytes: K and V of 256-byte heads
 * (head_dim 128, 16 bit) for 16 tokens, 8 KiB per layer and head.  Up to
 * 256 KiB the layers vary (one KV head); from there on 32 layers and the
 * KV heads vary: 1 head is llama3-8b's shard at tensor-parallel 8, 8 heads
 * its whole 2 MiB block.
 */
static kvt_ns *open_ns_for_block(kvt_client *c, uint64_t block)
{
	uint64_t units = block / (8 * 1024);
	uint32_t layers = units < 32 ? (uint32_t)units : 32;
	char model[32];

	snprintf(model, sizeof(model), "bench-%lluk", (unsigned long long)(block >> 10));
	return bench_ns_open(c, model, layers, (uint32_t)(units / layers), 256, block);
}

/* "64 KiB", "2 MiB": a block size for people. */
static const char *size_name(uint64_t bytes, char *buf, size_t size)
{
	if (bytes >= MIB && bytes % MIB == 0)
		snprintf(buf, size, "%llu MiB", (unsigned long long)(bytes / MIB));
	else
		snprintf(buf, size, "%llu KiB", (unsigned long long)(bytes >> 10));
	return buf;
}

/* "64k", "2m": a block size in JSON keys ("copy_2m"). */
static const char *size_key(uint64_t bytes, char *buf, size_t size)
{
	if (bytes >= MIB && bytes % MIB == 0)
		snprintf(buf, size, "%llum", (unsigned long long)(bytes / MIB));
	else
		snprintf(buf, size, "%lluk", (unsigned long long)(bytes >> 10));
	return buf;
}

/* ---- 1. store + load against memcpy (and Redis) ----------------------- */

struct copy_bench {
	kvt_ns *ns;
	uint64_t block;  /* bytes */
	size_t n;        /* blocks per round */
	uint8_t *src, *mid, *dst; /* round_bytes each */
	const void **srcs;
	void **dsts;
	uint8_t *keys;
	int32_t *status;
	uint64_t key_counter;
	uint64_t round;
};

/*
 * The same preparation before every round of either contender, outside
 * the timed region: a stamp (round, block) in each source block, so bytes
 * of an earlier round cannot pass, and a poisoned destination, so a block
 * that was not copied cannot pass either.
 */
static void copy_prepare(struct copy_bench *b)
{
	b->round++;
	for (size_t i = 0; i < b->n; i++) {
		uint64_t stamp[2] = {b->round, i};
		memcpy(b->src + i * b->block, stamp, sizeof(stamp));
		memcpy(b->src + (i + 1) * b->block - sizeof(stamp), stamp, sizeof(stamp));
	}
	memset(b->dst, 0xa5, b->n * b->block);
}

static void copy_verify(const struct copy_bench *b, const char *who)
{
	for (size_t i = 0; i < b->n; i++)
		if (memcmp(b->src + i * b->block, b->dst + i * b->block, b->block))
			die("%s, %llu KiB blocks, round %llu: block %zu came back with different bytes",
			    who, (unsigned long long)(b->block >> 10),
			    (unsigned long long)b->round, i);
}

/* One round through the library; ret_ns[0] store, ret_ns[1] load. */
static void api_round(struct copy_bench *b, uint64_t *ret_ns)
{
	copy_prepare(b);
	next_keys(b->keys, b->n, &b->key_counter);

	uint64_t t0 = kvt_now_ns();
	int r = kvt_store(b->ns, 0, b->keys, b->n, b->srcs, b->status);
	uint64_t t1 = kvt_now_ns();
	if (r != (int)b->n)
		die("kvt_store of %zu blocks stored %d", b->n, r);
	for (size_t i = 0; i < b->n; i++)
		if (b->status[i] != 0) /* -EEXIST would mean no copy happened */
			die("kvt_store: block %zu status %d", i, b->status[i]);
	int r2 = kvt_load(b->ns, 0, b->keys, b->n, b->dsts, b->status);
	uint64_t t2 = kvt_now_ns();
	if (r2 != (int)b->n)
		die("kvt_load of %zu blocks loaded %d", b->n, r2);

	copy_verify(b, "kvt_store/kvt_load");
	/* Free the slots, so the next round's stores are real stores into
	 * the same, already mapped, memory. */
	r = kvt_delete(b->ns, b->keys, b->n);
	if (r != (int)b->n)
		die("kvt_delete of %zu blocks found %d", b->n, r);
	ret_ns[0] += t1 - t0;
	ret_ns[1] += t2 - t1;
}

static void memcpy_round(struct copy_bench *b, uint64_t *ret_ns)
{
	copy_prepare(b);

	uint64_t t0 = kvt_now_ns();
	for (size_t i = 0; i < b->n; i++)
		memcpy(b->mid + i * b->block, b->src + i * b->block, b->block);
	uint64_t t1 = kvt_now_ns();
	for (size_t i = 0; i < b->n; i++)
		memcpy(b->dst + i * b->block, b->mid + i * b->block, b->block);
	uint64_t t2 = kvt_now_ns();

	copy_verify(b, "memcpy");
	ret_ns[0] += t1 - t0;
	ret_ns[1] += t2 - t1;
}

/* ---- the peer: Redis through hiredis --------------------------------- */

#ifdef BENCH_HAVE_HIREDIS
static redisContext *redis;

static void redis_connect(const char *path)
{
	redis = redisConnectUnix(path);
	if (!redis || redis->err)
		die("cannot connect to Redis at %s: %s", path, redis ? redis->errstr : "out of memory");
}

static void redis_disconnect(void)
{
	if (redis)
		redisFree(redis);
	redis = NULL;
}

static redisReply *redis_reply(const char *what)
{
	void *reply = NULL;
	if (redisGetReply(redis, &reply) != REDIS_OK || !reply)
		die("Redis %s: %s", what, redis->errstr[0] ? redis->errstr : "no reply");
	return reply;
}

static void redis_delete(struct copy_bench *b)
{
	const char **argv = calloc(b->n + 1, sizeof(*argv));
	size_t *argvlen = calloc(b->n + 1, sizeof(*argvlen));
	if (!argv || !argvlen)
		die("out of memory");
	argv[0] = "DEL";
	argvlen[0] = 3;
	for (size_t i = 0; i < b->n; i++) {
		argv[i + 1] = (const char *)b->keys + i * KVT_KEY_BYTES;
		argvlen[i + 1] = KVT_KEY_BYTES;
	}
	redisReply *reply = redisCommandArgv(redis, (int)b->n + 1, argv, argvlen);
	if (!reply)
		die("Redis DEL: %s", redis->errstr);
	if (reply->type != REDIS_REPLY_INTEGER || reply->integer != (long long)b->n)
		die("Redis DEL of %zu keys: reply type %d, %lld deleted", b->n, reply->type,
		    reply->integer);
	freeReplyObject(reply);
	free(argv);
	free(argvlen);
}

/*
 * The same round as api_round(), through Redis: SET every block, then GET
 * every block into the caller's buffer.  Each direction is one pipeline
 * (every command written before the first reply is read), as kvt_store
 * and kvt_load each make one request for the whole round; a client that
 * waited for each reply would only be slower.  The copy out of hiredis's
 * reply into the destination is part of a load: kvt_load delivers into
 * caller memory too.
 */
static void redis_round(struct copy_bench *b, uint64_t *ret_ns)
{
	copy_prepare(b);
	next_keys(b->keys, b->n, &b->key_counter);

	uint64_t t0 = kvt_now_ns();
	for (size_t i = 0; i < b->n; i++)
		if (redisAppendCommand(redis, "SET %b %b", b->keys + i * KVT_KEY_BYTES,
				       (size_t)KVT_KEY_BYTES, b->srcs[i], (size_t)b->block) != REDIS_OK)
			die("Redis SET: %s", redis->errstr);
	for (size_t i = 0; i < b->n; i++) {
		redisReply *reply = redis_reply("SET");
		if (reply->type != REDIS_REPLY_STATUS)
			die("Redis SET of block %zu: reply type %d (%.*s)", i, reply->type,
			    (int)reply->len, reply->str ? reply->str : "");
		freeReplyObject(reply);
	}
	uint64_t t1 = kvt_now_ns();
	for (size_t i = 0; i < b->n; i++)
		if (redisAppendCommand(redis, "GET %b", b->keys + i * KVT_KEY_BYTES,
				       (size_t)KVT_KEY_BYTES) != REDIS_OK)
			die("Redis GET: %s", redis->errstr);
	for (size_t i = 0; i < b->n; i++) {
		redisReply *reply = redis_reply("GET");
		if (reply->type != REDIS_REPLY_STRING || (uint64_t)reply->len != b->block)
			die("Redis GET of block %zu: reply type %d, %zu bytes", i, reply->type,
			    (size_t)reply->len);
		memcpy(b->dsts[i], reply->str, b->block);
		freeReplyObject(reply);
	}
	uint64_t t2 = kvt_now_ns();

	copy_verify(b, "Redis SET/GET");
	redis_delete(b);
	ret_ns[0] += t1 - t0;
	ret_ns[1] += t2 - t1;
}

/* "7.0.15": from INFO, for the report. */
static void redis_version(char *out, size_t size)
{
	snprintf(out, size, "?");
	redisReply *reply = redisCommand(redis, "INFO server");
	if (!reply)
		die("Redis INFO: %s", redis->errstr);
	if (reply->type == REDIS_REPLY_STRING) {
		const char *p = strstr(reply->str, "redis_version:");
		if (p) {
			p += strlen("redis_version:");
			snprintf(out, size, "%.*s", (int)strcspn(p, "\r\n"), p);
		}
	}
	freeReplyObject(reply);
}
#else
static void redis_round(struct copy_bench *b, uint64_t *ret_ns)
{
	die("built without hiredis");
}
#endif

struct copy_result {
	double api_gbs[MAX_PAIRS], cpy_gbs[MAX_PAIRS], ratio[MAX_PAIRS];
	double api_store[MAX_PAIRS], api_load[MAX_PAIRS];
	double cpy_store[MAX_PAIRS], cpy_load[MAX_PAIRS];
	/* With --redis: Redis against memcpy, and kvtier against Redis. */
	double rds_gbs[MAX_PAIRS], rds_ratio[MAX_PAIRS], api_rds_ratio[MAX_PAIRS];
	double rds_store[MAX_PAIRS], rds_load[MAX_PAIRS];
};

static void copy_run(struct copy_bench *b, struct copy_result *res)
{
	uint64_t bytes = (uint64_t)b->n * b->block * opt.rounds;
	uint64_t warm[2] = {0, 0};
	char name[24];

	/* Untimed: the first store makes the daemon create the extent, and
	 * the library maps and pre-faults it; measure after that. */
	api_round(b, warm);
	if (opt.redis)
		redis_round(b, warm);
	memcpy_round(b, warm);

	for (unsigned p = 0; p < opt.pairs; p++) {
		uint64_t a[2] = {0, 0}, m[2] = {0, 0}, rd[2] = {0, 0};
		/* Round by round, so all see the same phases of the host. */
		for (unsigned k = 0; k < opt.rounds; k++) {
			api_round(b, a);
			if (opt.redis)
				redis_round(b, rd);
			memcpy_round(b, m);
		}
		res->api_gbs[p] = gbs(2 * bytes, a[0] + a[1]);
		res->cpy_gbs[p] = gbs(2 * bytes, m[0] + m[1]);
		res->api_store[p] = gbs(bytes, a[0]);
		res->api_load[p] = gbs(bytes, a[1]);
		res->cpy_store[p] = gbs(bytes, m[0]);
		res->cpy_load[p] = gbs(bytes, m[1]);
		res->ratio[p] = res->api_gbs[p] / res->cpy_gbs[p];
		if (opt.redis) {
			res->rds_gbs[p] = gbs(2 * bytes, rd[0] + rd[1]);
			res->rds_store[p] = gbs(bytes, rd[0]);
			res->rds_load[p] = gbs(bytes, rd[1]);
			res->rds_ratio[p] = res->rds_gbs[p] / res->cpy_gbs[p];
			res->api_rds_ratio[p] = res->api_gbs[p] / res->rds_gbs[p];
			progress("  %7s pair %u/%u: kvtier %.2f GB/s, Redis %.2f GB/s, memcpy %.2f GB/s, ratio %.3f, Redis %.3f",
				 size_name(b->block, name, sizeof(name)), p + 1, opt.pairs,
				 res->api_gbs[p], res->rds_gbs[p], res->cpy_gbs[p], res->ratio[p],
				 res->rds_ratio[p]);
		} else {
			progress("  %7s pair %u/%u: kvtier %.2f GB/s, memcpy %.2f GB/s, ratio %.3f",
				 size_name(b->block, name, sizeof(name)), p + 1, opt.pairs,
				 res->api_gbs[p], res->cpy_gbs[p], res->ratio[p]);
		}
	}
}

static void copy_setup(struct copy_bench *b, kvt_ns *ns, uint64_t block, uint8_t *src,
		       uint8_t *mid, uint8_t *dst)
{
	memset(b, 0, sizeof(*b));
	b->ns = ns;
	b->block = block;
	b->n = opt.round_bytes / block;
	b->src = src;
	b->mid = mid;
	b->dst = dst;
	b->srcs = calloc(b->n, sizeof(*b->srcs));
	b->dsts = calloc(b->n, sizeof(*b->dsts));
	b->keys = calloc(b->n, KVT_KEY_BYTES);
	b->status = calloc(b->n, sizeof(*b->status));
	if (!b->srcs || !b->dsts || !b->keys || !b->status)
		die("out of memory");
	for (size_t i = 0; i < b->n; i++) {
		b->srcs[i] = src + i * block;
		b->dsts[i] = dst + i * block;
	}
	/* Different contents per block size, so nothing can pass by luck. */
	fill_random(src, b->n * block, block);
}

static void copy_free(struct copy_bench *b)
{
	free(b->srcs);
	free(b->dsts);
	free(b->keys);
	free(b->status);
}

/* ---- placement ------------------------------------------------------- */

/*
 * A round trip costs several times more when the peer runs on the other
 * CPU (a wakeup across vCPUs) than on the same one, and an unpinned pair
 * moves between the two while it is measured.  So sections 2 and 3 pin
 * this process, the daemon and the echo process: everything on one CPU,
 * then this process on one CPU and both peers on another.
 */
enum { SAME_CPU, ACROSS_CPUS, N_PLACEMENTS };

static const char *placement_name[N_PLACEMENTS] = {"same CPU", "across CPUs"};
static const char *placement_key[N_PLACEMENTS] = {"same_cpu", "across_cpus"};

static cpu_set_t initial_cpus;
static int cpu_a = -1, cpu_b = -1;

static void cpus_probe(void)
{
	if (sched_getaffinity(0, sizeof(initial_cpus), &initial_cpus) < 0)
		die("sched_getaffinity: %s", strerror(errno));
	for (int i = 0; i < CPU_SETSIZE; i++)
		if (CPU_ISSET(i, &initial_cpus)) {
			if (cpu_a < 0)
				cpu_a = i;
			else if (cpu_b < 0)
				cpu_b = i;
		}
}

static void pin(pid_t pid, const cpu_set_t *set)
{
	if (sched_setaffinity(pid, sizeof(*set), set) < 0)
		die("sched_setaffinity(%d): %s", (int)pid, strerror(errno));
}

static void place(int placement)
{
	cpu_set_t self, peer;
	CPU_ZERO(&self);
	CPU_ZERO(&peer);
	CPU_SET(cpu_a, &self);
	CPU_SET(placement == SAME_CPU ? cpu_a : cpu_b, &peer);
	pin(0, &self);
	pin(daemon_state.pid, &peer);
	pin(echo_pid, &peer);
}

static void unplace(void)
{
	pin(0, &initial_cpus);
	pin(daemon_state.pid, &initial_cpus);
	pin(echo_pid, &initial_cpus);
}

/* ---- 2. round trip --------------------------------------------------- */

struct rtt_result {
	double api_us[MAX_PAIRS], bare_us[MAX_PAIRS], ratio[MAX_PAIRS];
};

static void rtt_run(kvt_client *c, int echo_fd, int placement, struct rtt_result *res)
{
	unsigned chunk = opt.ping_iters / CHUNKS ? opt.ping_iters / CHUNKS : 1;

	bench_pings(c, 1000);
	bare_rtts(echo_fd, 1000);
	for (unsigned p = 0; p < opt.pairs; p++) {
		uint64_t a = 0, b = 0;
		for (unsigned k = 0; k < CHUNKS; k++) {
			a += bench_pings(c, chunk);
			b += bare_rtts(echo_fd, chunk);
		}
		res->api_us[p] = (double)a / (chunk * CHUNKS) / 1000.0;
		res->bare_us[p] = (double)b / (chunk * CHUNKS) / 1000.0;
		res->ratio[p] = res->api_us[p] / res->bare_us[p];
		progress("  ping, %s, pair %u/%u: kvt_client_ping %.2f us, bare %.2f us, ratio %.3f",
			 placement_name[placement], p + 1, opt.pairs, res->api_us[p],
			 res->bare_us[p], res->ratio[p]);
	}
}

/* ---- 3. lookups ------------------------------------------------------ */

struct lookup_result {
	double hit_us[MAX_PAIRS], miss_us[MAX_PAIRS], bare_us[MAX_PAIRS];
	double hit_keys_s[MAX_PAIRS], miss_keys_s[MAX_PAIRS];
	double hit_frac[MAX_PAIRS], miss_frac[MAX_PAIRS];
};

struct lookup_keys {
	uint8_t *hit, *miss, *states;
};

static uint64_t lookups(kvt_ns *ns, const uint8_t *keys, uint8_t *states, unsigned iters,
			int want)
{
	uint64_t t0 = kvt_now_ns();
	for (unsigned i = 0; i < iters; i++) {
		int r = kvt_lookup(ns, keys, LOOKUP_KEYS, 0, states);
		if (r != want)
			die("kvt_lookup: %d leading hits, expected %d", r, want);
	}
	return kvt_now_ns() - t0;
}

/* Store LOOKUP_KEYS blocks, and check every state once. */
static void lookup_setup(kvt_ns *ns, struct lookup_keys *k)
{
	uint64_t block = 32 * 1024;
	uint8_t *data = alloc_populated(block);
	const void **srcs = calloc(LOOKUP_KEYS, sizeof(*srcs));
	uint64_t counter = 1ull << 40;

	k->hit = calloc(LOOKUP_KEYS, KVT_KEY_BYTES);
	k->miss = calloc(LOOKUP_KEYS, KVT_KEY_BYTES);
	k->states = calloc(LOOKUP_KEYS, 1);
	if (!srcs || !k->hit || !k->miss || !k->states)
		die("out of memory");
	for (unsigned i = 0; i < LOOKUP_KEYS; i++)
		srcs[i] = data;
	next_keys(k->hit, LOOKUP_KEYS, &counter);
	next_keys(k->miss, LOOKUP_KEYS, &counter);
	int r = kvt_store(ns, 0, k->hit, LOOKUP_KEYS, srcs, NULL);
	if (r != LOOKUP_KEYS)
		die("kvt_store of the lookup keys stored %d of %d", r, LOOKUP_KEYS);
	r = kvt_lookup(ns, k->hit, LOOKUP_KEYS, 0, k->states);
	if (r != LOOKUP_KEYS)
		die("kvt_lookup of %d stored keys: %d leading hits", LOOKUP_KEYS, r);
	for (unsigned i = 0; i < LOOKUP_KEYS; i++)
		if (k->states[i] != KVT_HOST)
			die("lookup of a stored key %u: state %u", i, k->states[i]);
	r = kvt_lookup(ns, k->miss, LOOKUP_KEYS, 0, k->states);
	if (r != 0)
		die("kvt_lookup of %d unknown keys: %d leading hits", LOOKUP_KEYS, r);
	for (unsigned i = 0; i < LOOKUP_KEYS; i++)
		if (k->states[i] != KVT_MISS)
			die("lookup of an unknown key %u: state %u", i, k->states[i]);
	free(srcs);
	munmap(data, block);
}

static void lookup_run(kvt_ns *ns, const struct lookup_keys *keys, int echo_fd,
		       int placement, struct lookup_result *res)
{
	unsigned batches = opt.lookup_iters / CHUNKS ? opt.lookup_iters / CHUNKS : 1;
	unsigned bare = batches; /* the same number of round trips */

	lookups(ns, keys->hit, keys->states, batches, LOOKUP_KEYS);
	lookups(ns, keys->miss, keys->states, batches, 0);
	for (unsigned p = 0; p < opt.pairs; p++) {
		uint64_t h = 0, m = 0, b = 0;
		for (unsigned k = 0; k < CHUNKS; k++) {
			h += lookups(ns, keys->hit, keys->states, batches, LOOKUP_KEYS);
			m += lookups(ns, keys->miss, keys->states, batches, 0);
			b += bare_rtts(echo_fd, bare);
		}
		res->hit_us[p] = (double)h / (batches * CHUNKS) / 1000.0;
		res->miss_us[p] = (double)m / (batches * CHUNKS) / 1000.0;
		res->bare_us[p] = (double)b / (bare * CHUNKS) / 1000.0;
		res->hit_keys_s[p] = LOOKUP_KEYS / (res->hit_us[p] * 1e-6);
		res->miss_keys_s[p] = LOOKUP_KEYS / (res->miss_us[p] * 1e-6);
		res->hit_frac[p] = res->bare_us[p] / res->hit_us[p];
		res->miss_frac[p] = res->bare_us[p] / res->miss_us[p];
		progress("  lookup, %s, pair %u/%u: hits %.1f us/batch (%.2f M keys/s), misses %.1f us/batch, bare %.2f us",
			 placement_name[placement], p + 1, opt.pairs, res->hit_us[p],
			 res->hit_keys_s[p] / 1e6, res->miss_us[p], res->bare_us[p]);
	}
}

/* ---- 2b. one key: lookup, acquire + release --------------------------- */

/*
 * What an engine pays per request when it asks about one block: a lookup
 * of one key (one round trip), and an acquire and release of one block
 * (two round trips, so against two bare ones), both of a stored key.
 */
struct op_result {
	double lookup_us[MAX_PAIRS], lookup_ratio[MAX_PAIRS];
	double acquire_us[MAX_PAIRS], acquire_ratio[MAX_PAIRS];
	double bare_us[MAX_PAIRS];
};

static uint64_t lookups_one(kvt_ns *ns, const uint8_t *key, unsigned iters)
{
	uint8_t state;
	uint64_t t0 = kvt_now_ns();
	for (unsigned i = 0; i < iters; i++) {
		int r = kvt_lookup(ns, key, 1, 0, &state);
		if (r != 1)
			die("kvt_lookup of one stored key: %d", r);
	}
	return kvt_now_ns() - t0;
}

static uint64_t acquires_one(kvt_client *c, kvt_ns *ns, const uint8_t *key, unsigned iters)
{
	kvt_slot_ref ref;
	int32_t st;
	uint64_t t0 = kvt_now_ns();
	for (unsigned i = 0; i < iters; i++) {
		int r = kvt_acquire(ns, 0, key, 1, &ref);
		if (r != 1 || ref.status != 0)
			die("kvt_acquire of one stored block: %d (status %d)", r, ref.status);
		r = kvt_release(c, &ref.handle, 1, &st);
		if (r < 0 || st != 0)
			die("kvt_release: %d (status %d)", r, st);
	}
	return kvt_now_ns() - t0;
}

static void op_run(kvt_client *c, kvt_ns *ns, const uint8_t *key, int echo_fd, int placement,
		   struct op_result *res)
{
	unsigned chunk = opt.ping_iters / CHUNKS / 2 ? opt.ping_iters / CHUNKS / 2 : 1;

	lookups_one(ns, key, 500);
	acquires_one(c, ns, key, 500);
	for (unsigned p = 0; p < opt.pairs; p++) {
		uint64_t l = 0, a = 0, b = 0;
		for (unsigned k = 0; k < CHUNKS; k++) {
			l += lookups_one(ns, key, chunk);
			a += acquires_one(c, ns, key, chunk);
			b += bare_rtts(echo_fd, chunk);
		}
		res->lookup_us[p] = (double)l / (chunk * CHUNKS) / 1000.0;
		res->acquire_us[p] = (double)a / (chunk * CHUNKS) / 1000.0;
		res->bare_us[p] = (double)b / (chunk * CHUNKS) / 1000.0;
		res->lookup_ratio[p] = res->lookup_us[p] / res->bare_us[p];
		res->acquire_ratio[p] = res->acquire_us[p] / (2 * res->bare_us[p]);
		progress("  one key, %s, pair %u/%u: lookup %.2f us, acquire+release %.2f us, bare %.2f us",
			 placement_name[placement], p + 1, opt.pairs, res->lookup_us[p],
			 res->acquire_us[p], res->bare_us[p]);
	}
}

/* ---- output ---------------------------------------------------------- */

struct results {
	struct copy_result copy[MAX_SIZES]; /* as opt.sizes */
	struct rtt_result rtt[N_PLACEMENTS];
	struct op_result op[N_PLACEMENTS];
	struct lookup_result lookup[N_PLACEMENTS];
	bool placed[N_PLACEMENTS];
	char pool[512];
	char redis_version[32];
};

static struct results R;

#define ROW "%-34s %-20s %-26s %-22s %s\n"

/* A row of a round trip (or two) against the bare socket's in limit. */
static void rtt_row(FILE *out, const char *name, const double *us, const char *limit,
		    const double *ratio)
{
	unsigned n = opt.pairs;
	char a[40], r[48], t[40];
	snprintf(a, sizeof(a), "%.2f us", median(us, n));
	ratio_range(ratio, n, r, sizeof(r));
	snprintf(t, sizeof(t), "<= %.2fx: %s", TARGET_RTT, verdict(median(ratio, n) <= TARGET_RTT));
	fprintf(out, ROW, name, a, limit, r, t);
}

static void print_table(FILE *out)
{
	unsigned n = opt.pairs;
	struct utsname u;
	uname(&u);

	fprintf(out, "\nkvtier host tier: %u pairs, contenders alternating; ratio = median of the pairwise ratios [min..max]; absolute figures are medians\n",
		n);
	fprintf(out, "machine: %s %s, %ld CPUs; pool: %s\n\n", u.sysname, u.release,
		sysconf(_SC_NPROCESSORS_ONLN), R.pool);
	if (opt.redis)
		fprintf(out, "peer: Redis %s on a Unix socket (%s), hiredis %s, pipelined SET/GET\n\n",
			R.redis_version, opt.redis, HIREDIS_VERSION);
	fprintf(out, ROW, "", "kvtier", "limit (same run)", "ratio", "target");
	for (unsigned i = 0; i < opt.n_sizes; i++) {
		const struct copy_result *cs = &R.copy[i];
		char name[64], sz[24], a[40], l[40], r[48], t[40];
		double ratio = median(cs->ratio, n);
		snprintf(name, sizeof(name), "store+load, %s blocks",
			 size_name(opt.sizes[i], sz, sizeof(sz)));
		snprintf(a, sizeof(a), "%.2f GB/s", median(cs->api_gbs, n));
		snprintf(l, sizeof(l), "%.2f GB/s memcpy", median(cs->cpy_gbs, n));
		ratio_range(cs->ratio, n, r, sizeof(r));
		if (opt.sizes[i] == 2 * MIB)
			snprintf(t, sizeof(t), ">= %.2fx: %s", TARGET_COPY_2M,
				 verdict(ratio >= TARGET_COPY_2M));
		else
			snprintf(t, sizeof(t), "-");
		fprintf(out, ROW, name, a, l, r, t);
		snprintf(a, sizeof(a), "st %.2f / ld %.2f", median(cs->api_store, n),
			 median(cs->api_load, n));
		snprintf(l, sizeof(l), "st %.2f / ld %.2f", median(cs->cpy_store, n),
			 median(cs->cpy_load, n));
		fprintf(out, ROW, "", a, l, "", "");
		if (!opt.redis)
			continue;
		snprintf(a, sizeof(a), "%.2f GB/s", median(cs->rds_gbs, n));
		ratio_range(cs->rds_ratio, n, r, sizeof(r));
		snprintf(t, sizeof(t), "kvtier %.2fx Redis", median(cs->api_rds_ratio, n));
		fprintf(out, ROW, "  Redis SET+GET", a, "memcpy, as above", r, t);
		snprintf(a, sizeof(a), "st %.2f / ld %.2f", median(cs->rds_store, n),
			 median(cs->rds_load, n));
		snprintf(r, sizeof(r), "[%.2f..%.2f]x", vmin(cs->api_rds_ratio, n),
			 vmax(cs->api_rds_ratio, n));
		fprintf(out, ROW, "", a, "", "", r);
	}
	for (int pl = 0; pl < N_PLACEMENTS; pl++) {
		const struct rtt_result *rt = &R.rtt[pl];
		char name[48], l[40];
		snprintf(name, sizeof(name), "round trip (ping), %s", placement_name[pl]);
		if (!R.placed[pl]) {
			fprintf(out, ROW, name, "n/a", "(one CPU only)", "", "");
			continue;
		}
		snprintf(l, sizeof(l), "%.2f us bare socket", median(rt->bare_us, n));
		rtt_row(out, name, rt->api_us, l, rt->ratio);
	}
	for (int pl = 0; pl < N_PLACEMENTS; pl++) {
		const struct op_result *o = &R.op[pl];
		char name[64], l[40];
		if (!R.placed[pl])
			continue;
		snprintf(name, sizeof(name), "lookup 1 key, %s", placement_name[pl]);
		snprintf(l, sizeof(l), "%.2f us bare socket", median(o->bare_us, n));
		rtt_row(out, name, o->lookup_us, l, o->lookup_ratio);
		snprintf(name, sizeof(name), "acquire+release, %s", placement_name[pl]);
		snprintf(l, sizeof(l), "2 x %.2f us bare", median(o->bare_us, n));
		rtt_row(out, name, o->acquire_us, l, o->acquire_ratio);
	}
	for (int pl = 0; pl < N_PLACEMENTS; pl++) {
		const struct lookup_result *lk = &R.lookup[pl];
		if (!R.placed[pl])
			continue;
		for (int miss = 0; miss < 2; miss++) {
			const double *ks = miss ? lk->miss_keys_s : lk->hit_keys_s;
			const double *us = miss ? lk->miss_us : lk->hit_us;
			const double *fr = miss ? lk->miss_frac : lk->hit_frac;
			char name[64], a[40], l[40], r[48], t[40];
			double k = median(ks, n);
			snprintf(name, sizeof(name), "lookup 1024 %s, %s", miss ? "misses" : "hits",
				 placement_name[pl]);
			snprintf(a, sizeof(a), "%.2f M keys/s", k / 1e6);
			snprintf(l, sizeof(l), "%.1f us per batch", median(us, n));
			snprintf(r, sizeof(r), "bare RTT = %.0f%% of it", 100 * median(fr, n));
			snprintf(t, sizeof(t), ">= %.0f M keys/s: %s", TARGET_KEYS_S / 1e6,
				 verdict(k >= TARGET_KEYS_S));
			fprintf(out, ROW, name, a, l, r, t);
		}
	}
}

static void print_json(void)
{
	unsigned n = opt.pairs;
	struct utsname u;
	uname(&u);

	printf("{\"bench\":\"bench-host\",\"kernel\":");
	json_string(u.release);
	printf(",\"cpus\":%ld,\"pairs\":%u,\"rounds\":%u,\"round_bytes\":%llu,\"pool\":",
	       sysconf(_SC_NPROCESSORS_ONLN), n, opt.rounds, (unsigned long long)opt.round_bytes);
	json_string(R.pool);
	printf(",\"block_sizes\":[");
	for (unsigned i = 0; i < opt.n_sizes; i++)
		printf("%s%llu", i ? "," : "", (unsigned long long)opt.sizes[i]);
	printf("]");
	if (opt.redis) {
		printf(",\"redis_version\":");
		json_string(R.redis_version);
		printf(",\"hiredis_version\":\"%s\"", HIREDIS_VERSION);
	}
	for (unsigned i = 0; i < opt.n_sizes; i++) {
		const struct copy_result *cs = &R.copy[i];
		char key[24];
		printf(",\"copy_%s\":{\"block_bytes\":%llu,\"ratio\":%.4f,\"ratio_min\":%.4f,"
		       "\"ratio_max\":%.4f,\"kvtier_gbs\":%.3f,\"memcpy_gbs\":%.3f,"
		       "\"kvtier_store_gbs\":%.3f,\"kvtier_load_gbs\":%.3f,\"memcpy_store_gbs\":%.3f,"
		       "\"memcpy_load_gbs\":%.3f",
		       size_key(opt.sizes[i], key, sizeof(key)), (unsigned long long)opt.sizes[i],
		       median(cs->ratio, n), vmin(cs->ratio, n), vmax(cs->ratio, n),
		       median(cs->api_gbs, n), median(cs->cpy_gbs, n), median(cs->api_store, n),
		       median(cs->api_load, n), median(cs->cpy_store, n), median(cs->cpy_load, n));
		if (opt.sizes[i] == 2 * MIB)
			printf(",\"target_min_ratio\":%.2f", TARGET_COPY_2M);
		if (opt.redis)
			printf(",\"redis_gbs\":%.3f,\"redis_store_gbs\":%.3f,\"redis_load_gbs\":%.3f,"
			       "\"redis_ratio\":%.4f,\"redis_ratio_min\":%.4f,\"redis_ratio_max\":%.4f,"
			       "\"kvtier_vs_redis\":%.4f,\"kvtier_vs_redis_min\":%.4f,"
			       "\"kvtier_vs_redis_max\":%.4f",
			       median(cs->rds_gbs, n), median(cs->rds_store, n),
			       median(cs->rds_load, n), median(cs->rds_ratio, n),
			       vmin(cs->rds_ratio, n), vmax(cs->rds_ratio, n),
			       median(cs->api_rds_ratio, n), vmin(cs->api_rds_ratio, n),
			       vmax(cs->api_rds_ratio, n));
		printf("}");
	}
	for (int pl = 0; pl < N_PLACEMENTS; pl++) {
		const struct rtt_result *rt = &R.rtt[pl];
		const struct lookup_result *lk = &R.lookup[pl];
		if (!R.placed[pl])
			continue;
		printf(",\"rtt_%s\":{\"ratio\":%.4f,\"ratio_min\":%.4f,\"ratio_max\":%.4f,"
		       "\"kvtier_us\":%.3f,\"bare_us\":%.3f,\"target_max_ratio\":%.1f}",
		       placement_key[pl], median(rt->ratio, n), vmin(rt->ratio, n),
		       vmax(rt->ratio, n), median(rt->api_us, n), median(rt->bare_us, n),
		       TARGET_RTT);
		const struct op_result *o = &R.op[pl];
		printf(",\"lookup1_%s\":{\"ratio\":%.4f,\"ratio_min\":%.4f,\"ratio_max\":%.4f,"
		       "\"kvtier_us\":%.3f,\"bare_us\":%.3f,\"target_max_ratio\":%.1f}",
		       placement_key[pl], median(o->lookup_ratio, n), vmin(o->lookup_ratio, n),
		       vmax(o->lookup_ratio, n), median(o->lookup_us, n), median(o->bare_us, n),
		       TARGET_RTT);
		printf(",\"acquire_release_%s\":{\"ratio\":%.4f,\"ratio_min\":%.4f,"
		       "\"ratio_max\":%.4f,\"kvtier_us\":%.3f,\"bare_us\":%.3f,"
		       "\"bare_round_trips\":2,\"target_max_ratio\":%.1f}",
		       placement_key[pl], median(o->acquire_ratio, n), vmin(o->acquire_ratio, n),
		       vmax(o->acquire_ratio, n), median(o->acquire_us, n), median(o->bare_us, n),
		       TARGET_RTT);
		printf(",\"lookup_%s\":{\"keys\":%d,\"hit_keys_s\":%.0f,\"hit_us\":%.2f,"
		       "\"miss_keys_s\":%.0f,\"miss_us\":%.2f,\"bare_us\":%.3f,"
		       "\"hit_bare_fraction\":%.4f,\"miss_bare_fraction\":%.4f,"
		       "\"target_min_keys_s\":%.0f}",
		       placement_key[pl], LOOKUP_KEYS, median(lk->hit_keys_s, n),
		       median(lk->hit_us, n), median(lk->miss_keys_s, n), median(lk->miss_us, n),
		       median(lk->bare_us, n), median(lk->hit_frac, n), median(lk->miss_frac, n),
		       TARGET_KEYS_S);
	}
	printf("}\n");
}

/* ---- main ------------------------------------------------------------ */

static void help(void)
{
	printf("Usage: bench-host [OPTIONS] [KVTIERD]\n"
	       "\n"
	       "Measure kvtier's host tier end to end against a kvtierd it starts\n"
	       "itself (KVTIERD, else $KVTIERD, else kvtierd from PATH): store+load\n"
	       "against memcpy (and Redis), the control round trip against a bare\n"
	       "Unix socket, and 1024-key lookups (the last two with the peer on the\n"
	       "same CPU and on another).  Contenders alternate; the medians of the\n"
	       "pairwise ratios are reported.  Progress goes to stderr.\n"
	       "\n"
	       "Options:\n"
	       "  -p, --pairs N    pairs of samples per comparison (>= 5, default %u)\n"
	       "  -m, --mib N      MiB stored and loaded per round, a multiple of every\n"
	       "                   block size (default %llu)\n"
	       "  -r, --rounds N   rounds per store+load sample (default %u)\n"
	       "  -s, --sizes LIST block sizes of store+load in KiB, comma-separated\n"
	       "                   (default 64,256,1024,2048,4096)\n"
	       "      --redis PATH also store and load the same blocks through the\n"
	       "                   Redis server listening on the Unix socket PATH\n"
	       "                   (%s)\n"
	       "      --pings N    round trips per ping sample (default %u)\n"
	       "      --batches N  1024-key lookups per lookup sample (default %u)\n"
	       "  -j, --json       print one JSON line on stdout (the table goes to\n"
	       "                   stderr)\n"
	       "  -h, --help       show this help\n",
	       opt.pairs, (unsigned long long)(opt.round_bytes / MIB), opt.rounds,
#ifdef BENCH_HAVE_HIREDIS
	       "hiredis " HIREDIS_VERSION,
#else
	       "not built: hiredis was not found",
#endif
	       opt.ping_iters, opt.lookup_iters);
}

/* "64,256,2048" (KiB): sizes that open_ns_for_block() can give a shape. */
static void parse_sizes(const char *list)
{
	char buf[256], *save = NULL;

	snprintf(buf, sizeof(buf), "%s", list);
	opt.n_sizes = 0;
	for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		if (opt.n_sizes == MAX_SIZES) {
			fprintf(stderr, "bench-host: --sizes: at most %d sizes\n", MAX_SIZES);
			exit(2);
		}
		uint64_t kib = (unsigned)parse_u64(t, 8, 65536, "a block size (KiB)");
		uint64_t units = kib / 8;
		if (kib % 8 || (units > 32 && units % 32)) {
			fprintf(stderr, "bench-host: --sizes: %llu KiB is not 8 KiB times 1..32, or 256 KiB times a whole number\n",
				(unsigned long long)kib);
			exit(2);
		}
		opt.sizes[opt.n_sizes++] = kib * 1024;
	}
	if (!opt.n_sizes) {
		fprintf(stderr, "bench-host: --sizes: no size given\n");
		exit(2);
	}
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"pairs", required_argument, NULL, 'p'},
		{"mib", required_argument, NULL, 'm'},
		{"rounds", required_argument, NULL, 'r'},
		{"sizes", required_argument, NULL, 's'},
		{"redis", required_argument, NULL, 'R'},
		{"pings", required_argument, NULL, 'P'},
		{"batches", required_argument, NULL, 'B'},
		{"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{},
	};
	int ch;

	while ((ch = getopt_long(argc, argv, "p:m:r:s:jh", opts, NULL)) >= 0) {
		switch (ch) {
		case 'p': opt.pairs = (unsigned)parse_u64(optarg, 5, MAX_PAIRS, "--pairs"); break;
		case 'm': opt.round_bytes = (unsigned)parse_u64(optarg, 2, 256, "--mib") * MIB; break;
		case 'r': opt.rounds = (unsigned)parse_u64(optarg, 1, 100, "--rounds"); break;
		case 's': parse_sizes(optarg); break;
		case 'R':
#ifndef BENCH_HAVE_HIREDIS
			fprintf(stderr, "bench-host: --redis: built without hiredis (install libhiredis-dev and reconfigure)\n");
			return 2;
#endif
			opt.redis = optarg;
			break;
		case 'P': opt.ping_iters = (unsigned)parse_u64(optarg, CHUNKS, 100000000, "--pings"); break;
		case 'B': opt.lookup_iters = (unsigned)parse_u64(optarg, CHUNKS, 100000000, "--batches"); break;
		case 'j': opt.json = true; break;
		case 'h': help(); return 0;
		default: return bench_try_help();
		}
	}
	for (unsigned i = 0; i < opt.n_sizes; i++)
		if (opt.round_bytes % opt.sizes[i]) {
			fprintf(stderr, "bench-host: --mib must be a multiple of every block size\n");
			return 2;
		}
	daemon_state.kvtierd = bench_kvtierd(argc, argv);

	bench_catch_signals(on_signal);
	cpus_probe();

	/* Both children before any large buffer (see echo_start). */
	daemon_start();
	int echo_fd = echo_start();
	bench_daemon_log_find(&daemon_state, "Host pool: ", NULL, R.pool, sizeof(R.pool));
	progress("kvtierd pid %d in %s; pool: %s", (int)daemon_state.pid, daemon_state.dir,
		 R.pool);

	kvt_client *c = bench_daemon_connect(&daemon_state);
	kvt_ns *nss[MAX_SIZES];
	for (unsigned i = 0; i < opt.n_sizes; i++)
		nss[i] = open_ns_for_block(c, opt.sizes[i]);
	kvt_ns *nslk = bench_ns_open(c, "bench-lookup", 4, 2, 128, 32 * 1024);
#ifdef BENCH_HAVE_HIREDIS
	if (opt.redis) {
		redis_connect(opt.redis);
		redis_version(R.redis_version, sizeof(R.redis_version));
		progress("Redis %s at %s", R.redis_version, opt.redis);
	}
#endif

	uint8_t *src = alloc_populated(opt.round_bytes);
	uint8_t *mid = alloc_populated(opt.round_bytes);
	uint8_t *dst = alloc_populated(opt.round_bytes);
	struct copy_bench b;
	uint64_t t0 = kvt_now_ns();

	for (unsigned i = 0; i < opt.n_sizes; i++) {
		char sz[24];
		progress("1/3 store+load vs memcpy%s, %s blocks: %u pairs x %u rounds x %llu MiB",
			 opt.redis ? " and Redis" : "", size_name(opt.sizes[i], sz, sizeof(sz)),
			 opt.pairs, opt.rounds, (unsigned long long)(opt.round_bytes / MIB));
		copy_setup(&b, nss[i], opt.sizes[i], src, mid, dst);
		copy_run(&b, &R.copy[i]);
		copy_free(&b);
	}

	struct lookup_keys lkeys;
	lookup_setup(nslk, &lkeys);
	for (int pl = 0; pl < N_PLACEMENTS; pl++) {
		if (pl == ACROSS_CPUS && cpu_b < 0) {
			progress("one CPU only: no measurement across CPUs");
			continue;
		}
		place(pl);
		progress("2/3 round trip, %s: kvt_client_ping vs bare socket, %u pairs x %u round trips",
			 placement_name[pl], opt.pairs, opt.ping_iters);
		rtt_run(c, echo_fd, pl, &R.rtt[pl]);
		progress("2/3 one key, %s: lookup, and acquire + release, vs bare socket", placement_name[pl]);
		op_run(c, nslk, lkeys.hit, echo_fd, pl, &R.op[pl]);
		progress("3/3 lookups of %d keys, %s: %u pairs x %u batches", LOOKUP_KEYS,
			 placement_name[pl], opt.pairs, opt.lookup_iters);
		lookup_run(nslk, &lkeys, echo_fd, pl, &R.lookup[pl]);
		R.placed[pl] = true;
	}
	unplace();
	progress("measured in %.1f s", (double)(kvt_now_ns() - t0) / 1e9);

	free(lkeys.hit);
	free(lkeys.miss);
	free(lkeys.states);
	for (unsigned i = 0; i < opt.n_sizes; i++)
		kvt_ns_close(nss[i]);
	kvt_ns_close(nslk);
#ifdef BENCH_HAVE_HIREDIS
	redis_disconnect();
#endif
	kvt_client_free(c);
	echo_stop(echo_fd);
	bench_daemon_stop(&daemon_state);
	bench_daemon_remove(&daemon_state);
	munmap(src, opt.round_bytes);
	munmap(mid, opt.round_bytes);
	munmap(dst, opt.round_bytes);

	bench_print(opt.json, print_table, print_json);
	return 0;
}
