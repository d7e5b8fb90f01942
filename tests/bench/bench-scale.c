/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench-scale: what grows with the number of blocks.
 *
 *   1. The index.  One namespace of 4 KiB blocks, the smallest slot the
 *      daemon has (a shard is padded to 4 KiB), so that the pool stays
 *      small, grown from 10^3 to --max blocks, all in host memory.  At
 *      every power of ten:
 *        - a one-key lookup of a random stored key, against
 *          kvt_client_ping (the same round trip without the index);
 *        - 1024-key lookups of random stored keys, in ns per key beyond
 *          the round trip, against the same keys looked up in a plain
 *          open-addressing table in this process with as many keys and
 *          slots as the daemon's index (the memory system's cost: one
 *          cache line a key);
 *        - the daemon's RssAnon per block.  The pool is shared memory
 *          (RssShmem), so anonymous memory is the daemon's bookkeeping:
 *          index, block entries, free-slot stacks.
 *   2. Recovery.  A spill file holding N blocks, for N from 10^3 to
 *      --recovery-max, and the daemon restarted on it --pairs times: the
 *      recovery time the daemon logs, against reading the same bytes of the
 *      file, at the same offsets and in reads of the same size, with
 *      O_DIRECT at the depth recovery reads at (region headers 32 ahead,
 *      eight 4 MiB reads in flight, through io_uring): the limit.  Also
 *      reported against the same reads at depth 1.  Blocks reach the file
 *      through the daemon's own write-back.
 *   3. Write-back.  N dirty blocks, for N from 10^3 to --writeback-max,
 *      stored with write-back held off and then let go all at once, a
 *      fresh daemon and spill file --pairs times: while the middle 80 % of
 *      them are written, blocks/s against the same writes issued bare with
 *      O_DIRECT at write-back's depth (the limit), and the daemon's CPU
 *      time per block against the smallest point's: the cost of a block
 *      should not grow with the number of dirty ones.  Also the daemon's
 *      RssAnon per dirty block.
 *
 * Sizes that do not fit this machine (memory for the pool, disk for the
 * spill file) are reported as skipped, with the reason.
 *
 * A measurement, not a test: it fails only when something does not work,
 * never because of a figure.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <liburing.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <unistd.h>
#include <xxhash.h>

#include "bench-util.h"
#include "kvtier.h"

#define KIB 1024ull
#define MIB (1024ull * 1024ull)
#define GIB (1024ull * MIB)
#define MAX_PAIRS 100
#define MAX_POINTS 12

#define BLOCK_BYTES 4096ull /* 1 layer, K and V, 1 head of 128 bytes, 16 tokens */
#define STORE_BATCH 8192    /* keys per kvt_store: the daemon's largest request */
#define LOOKUP_KEYS 1024
#define RING_KEYS (1u << 20) /* random stored keys to look up, 32 MiB */
#define CHUNKS 10            /* alternations within one pair */

/* The spill file's format (docs/nvme.md §2). */
#define REGION_BYTES (64 * MIB)
#define REGION_HEADER_BYTES 8192ull
#define SLOT_HEADER_BYTES 4096ull
#define RECOVER_CHUNK (4 * MIB)
#define RECOVER_SEQUENTIAL_STRIDE (64 * KIB)
/* Recovery's reads in flight (daemon/spill-recover.c): region headers read
 * ahead, 4 MiB slot-area reads, one-header reads for large strides. */
#define RECOVER_HEADERS_AHEAD 32
#define RECOVER_CHUNKS 8
#define RECOVER_SLOT_READS 64
#define SLOT_STRIDE (SLOT_HEADER_BYTES + BLOCK_BYTES)
#define SLOTS_PER_REGION ((REGION_BYTES - REGION_HEADER_BYTES) / SLOT_STRIDE)

#define POLL_NS 2000000ull
#define WAIT_LIMIT_NS 600000000000ull

static struct {
	uint64_t max;          /* index: largest number of blocks */
	uint64_t recovery_max; /* recovery: largest number of blocks on disk */
	uint64_t writeback_max; /* write-back: largest number of dirty blocks */
	unsigned pairs;
	unsigned iters;   /* one-key lookups (and pings) per sample */
	unsigned batches; /* 1024-key lookups per sample */
	const char *dir;
	const char *eviction; /* [pool] eviction of the index and write-back parts, or the default */
	bool index, recovery, writeback;
	bool json;
} opt = {
	.max = 1000000,
	.recovery_max = 100000,
	.writeback_max = 100000,
	.pairs = 7,
	.iters = 4000,
	.batches = 400,
	.dir = "/var/tmp",
	.index = true,
	.recovery = true,
	.writeback = true,
};

/* ---- failing and cleaning up ---------------------------------------- */

const char bench_name[] = "bench-scale";

static struct bench_daemon daemon_state;
static char spill_path[160];
static char bare_path[160]; /* write-back's limit writes here */

_Noreturn void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	bench_vsay(fmt, ap);
	va_end(ap);
	bench_daemon_abort(&daemon_state);
	exit(1);
}

static void on_signal(int sig)
{
	/* Only async-signal-safe calls: the daemon goes, and the private
	 * directory's known files with it. */
	bench_daemon_kill(&daemon_state);
	if (daemon_state.dir[0]) {
		unlink(spill_path);
		unlink(bare_path);
	}
	bench_daemon_unlink(&daemon_state);
	_exit(128 + sig);
}

/* ---- the machine ----------------------------------------------------- */

/* A "Key:   N kB" line of a /proc file, in KiB; 0 when absent. */
static uint64_t proc_kib(const char *path, const char *key)
{
	char line[256];
	uint64_t v = 0;
	size_t len = strlen(key);
	FILE *f = fopen(path, "re");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, len) && line[len] == ':') {
			sscanf(line + len + 1, " %llu", (unsigned long long *)&v);
			break;
		}
	fclose(f);
	return v;
}

static uint64_t daemon_kib(const char *key)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)daemon_state.pid);
	uint64_t v = proc_kib(path, key);
	if (!v && strcmp(key, "RssShmem"))
		die("cannot read %s from %s", key, path);
	return v;
}

static cpu_set_t initial_cpus;
static int cpu_a = -1;

static void cpus_probe(void)
{
	if (sched_getaffinity(0, sizeof(initial_cpus), &initial_cpus) < 0)
		die("sched_getaffinity: %s", strerror(errno));
	for (int i = 0; i < CPU_SETSIZE && cpu_a < 0; i++)
		if (CPU_ISSET(i, &initial_cpus))
			cpu_a = i;
}

/*
 * A round trip across two vCPUs costs several times one on the same CPU,
 * and an unpinned pair moves between the two while it is measured (see
 * bench-host), so lookups are measured with the daemon and this process
 * on one CPU.
 */
static void place(bool together)
{
	cpu_set_t one;
	const cpu_set_t *set = &initial_cpus;

	if (together) {
		CPU_ZERO(&one);
		CPU_SET(cpu_a, &one);
		set = &one;
	}
	if (sched_setaffinity(0, sizeof(*set), set) < 0 ||
	    sched_setaffinity(daemon_state.pid, sizeof(*set), set) < 0)
		die("sched_setaffinity: %s", strerror(errno));
}

/* ---- the daemon ------------------------------------------------------ */

struct stats_query {
	const char *const *names;
	uint64_t *values;
	unsigned n, found;
};

static int stats_record(const kvt_record *r, void *userdata)
{
	struct stats_query *q = userdata;
	if (strcmp(kvt_record_kind(r), "daemon"))
		return 0;
	for (unsigned i = 0; i < q->n; i++)
		if (kvt_record_get_u64(r, q->names[i], &q->values[i]) == 0)
			q->found |= 1u << i;
	return 0;
}

/* Fields of the daemon's "daemon" stats record (kvtierctl status), in one
 * query. */
static void daemon_stats(kvt_client *c, const char *const *names, uint64_t *ret_values,
			 unsigned n)
{
	struct stats_query q = {.names = names, .values = ret_values, .n = n};
	int r = kvt_stats(c, KVT_STATS_DAEMON, stats_record, &q);
	if (r < 0)
		die("kvt_stats: %s (%s)", strerror(-r), kvt_client_error(c));
	for (unsigned i = 0; i < n; i++)
		if (!(q.found & (1u << i)))
			die("the daemon's stats have no field %s", names[i]);
}

static uint64_t daemon_stat(kvt_client *c, const char *name)
{
	uint64_t v;
	daemon_stats(c, &name, &v, 1);
	return v;
}

/* 1 layer, K and V, one KV head of 128 bytes, 16 tokens: 4 KiB. */
static kvt_ns *open_ns(kvt_client *c)
{
	return bench_ns_open(c, "bench-scale-4k", 1, 1, 128, BLOCK_BYTES);
}

/* ---- blocks ---------------------------------------------------------- */

/* Block i. */
static void make_key(uint8_t *key, uint64_t i)
{
	make_keys(key, 1, i * 4 + 0x5ca1e);
}

struct storer {
	uint8_t *keys;
	const void **srcs;
	int32_t *status;
	uint8_t *block;
};

static void storer_init(struct storer *s)
{
	s->keys = calloc(STORE_BATCH, KVT_KEY_BYTES);
	s->srcs = calloc(STORE_BATCH, sizeof(*s->srcs));
	s->status = calloc(STORE_BATCH, sizeof(*s->status));
	s->block = alloc_populated(BLOCK_BYTES);
	if (!s->keys || !s->srcs || !s->status)
		die("out of memory");
	fill_random(s->block, BLOCK_BYTES, 4096);
	for (unsigned i = 0; i < STORE_BATCH; i++)
		s->srcs[i] = s->block;
}

static void storer_free(struct storer *s)
{
	free(s->keys);
	free(s->srcs);
	free(s->status);
	munmap(s->block, BLOCK_BYTES);
}

/* Blocks [from, to). */
static void store_range(struct storer *s, kvt_client *c, kvt_ns *ns, uint64_t from, uint64_t to)
{
	for (uint64_t i = from; i < to;) {
		size_t n = to - i < STORE_BATCH ? (size_t)(to - i) : STORE_BATCH;
		for (size_t k = 0; k < n; k++)
			make_key(s->keys + k * KVT_KEY_BYTES, i + k);
		int r = kvt_store(ns, 0, s->keys, n, s->srcs, s->status);
		if (r != (int)n)
			die("kvt_store of %zu blocks (from block %llu) stored %d (%s)", n,
			    (unsigned long long)i, r, r < 0 ? strerror(-r) : kvt_client_error(c));
		for (size_t k = 0; k < n; k++)
			if (s->status[k] != 0)
				die("kvt_store: block %llu status %d", (unsigned long long)(i + k),
				    s->status[k]);
		i += n;
	}
}

/* "10^6", or the number when it is not a power of ten. */
static const char *count_name(uint64_t n, char *buf, size_t size)
{
	unsigned e = 0;
	uint64_t v = n;
	while (v >= 10 && v % 10 == 0) {
		v /= 10;
		e++;
	}
	if (v == 1 && e > 0)
		snprintf(buf, size, "10^%u", e);
	else
		snprintf(buf, size, "%llu", (unsigned long long)n);
	return buf;
}

/* 10^3, 10^4, ... up to max, and max itself when it is no power of ten. */
static unsigned points(uint64_t max, uint64_t *ret)
{
	unsigned n = 0;
	uint64_t p = 1000;
	for (; p <= max && n < MAX_POINTS; p *= 10)
		ret[n++] = p;
	if ((n == 0 || ret[n - 1] != max) && n < MAX_POINTS)
		ret[n++] = max;
	return n;
}

/* ---- 1. the index ---------------------------------------------------- */

struct index_point {
	uint64_t n;
	char skipped[160]; /* why, when not measured */
	uint64_t rss_anon_kib, rss_shmem_kib;
	double bytes_per_block, marginal_bytes_per_block;
	double store_blocks_s; /* growing to n from the point before */
	double one_us[MAX_PAIRS], ping_us[MAX_PAIRS], one_ratio[MAX_PAIRS];
	double batch_us[MAX_PAIRS], keys_s[MAX_PAIRS], ns_per_key[MAX_PAIRS];
	double plain_ns[MAX_PAIRS], key_ratio[MAX_PAIRS]; /* the limit of ns_per_key */
};

static struct {
	struct index_point p[MAX_POINTS];
	unsigned n;
	uint64_t base_rss_anon_kib;
	uint64_t pool_bytes;
	char pool[512];
} IX;

/* Whole extents of 1 GiB (the largest the daemon takes), or one smaller
 * extent of whole 64 MiB for a small index. */
static uint64_t pool_for(uint64_t blocks)
{
	uint64_t bytes = blocks * BLOCK_BYTES;
	if (bytes < GIB)
		return (bytes + 64 * MIB - 1) / (64 * MIB) * (64 * MIB);
	return (bytes + GIB - 1) / GIB * GIB;
}

static uint64_t ring_pos;

static uint64_t one_lookups(kvt_ns *ns, const uint8_t *ring, unsigned iters)
{
	uint8_t state;
	uint64_t t0 = kvt_now_ns();
	for (unsigned i = 0; i < iters; i++) {
		int r = kvt_lookup(ns, ring + ring_pos * KVT_KEY_BYTES, 1, 0, &state);
		if (r != 1)
			die("kvt_lookup of a stored key: %d", r);
		ring_pos = (ring_pos + 1) % RING_KEYS;
	}
	return kvt_now_ns() - t0;
}

static uint64_t batch_lookups(kvt_ns *ns, const uint8_t *ring, uint8_t *states, unsigned iters)
{
	uint64_t t0 = kvt_now_ns();
	for (unsigned i = 0; i < iters; i++) {
		if (ring_pos + LOOKUP_KEYS > RING_KEYS)
			ring_pos = 0;
		int r = kvt_lookup(ns, ring + ring_pos * KVT_KEY_BYTES, LOOKUP_KEYS, 0, states);
		if (r != LOOKUP_KEYS)
			die("kvt_lookup of %d stored keys: %d leading hits", LOOKUP_KEYS, r);
		ring_pos += LOOKUP_KEYS;
	}
	return kvt_now_ns() - t0;
}

/* ---- the limit of a batched lookup: a plain table here ------------- */

/*
 * The keys themselves in 32-byte slots, open addressing with linear
 * probing, as many slots as the daemon's index has at that size and mapped
 * as its table is (aligned, huge pages offered), looked up BATCH keys at a
 * time as the index does: all hashed (XXH3, as the daemon) and their
 * homes asked for, then compared.  A key costs one cache line and no
 * indirection: what the memory system asks of any lookup at that size.
 */
#define PLAIN_BATCH 32

struct plain {
	uint8_t *map, *slots; /* slots: cap keys; all zero is empty */
	uint64_t cap, map_bytes;
};

/* The daemon's index holding n keys: 2048 slots for a namespace's first
 * 1024 keys, doubled whenever a key more would pass 70 %. */
static uint64_t index_cap(uint64_t n)
{
	uint64_t cap = 2048;
	while (n * 10 > cap * 7)
		cap *= 2;
	return cap;
}

static uint64_t plain_bytes(uint64_t n)
{
	return index_cap(n) * KVT_KEY_BYTES + 2 * MIB;
}

/* No stored key is all zero (make_keys). */
static const uint8_t plain_empty[KVT_KEY_BYTES];

static void plain_init(struct plain *p, uint64_t n)
{
	p->cap = index_cap(n);
	p->map_bytes = plain_bytes(n);
	p->map = mmap(NULL, p->map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p->map == MAP_FAILED)
		die("cannot map %llu MiB: %s", (unsigned long long)(p->map_bytes / MIB), strerror(errno));
	p->slots = (uint8_t *)(((uintptr_t)p->map + 2 * MIB - 1) & ~(uintptr_t)(2 * MIB - 1));
	(void)madvise(p->slots, p->cap * KVT_KEY_BYTES, MADV_HUGEPAGE);
	for (uint64_t i = 0; i < n; i++) {
		uint8_t key[KVT_KEY_BYTES];
		make_key(key, i);
		uint64_t at = XXH3_64bits(key, KVT_KEY_BYTES) & (p->cap - 1);
		while (memcmp(p->slots + at * KVT_KEY_BYTES, plain_empty, KVT_KEY_BYTES))
			at = (at + 1) & (p->cap - 1);
		memcpy(p->slots + at * KVT_KEY_BYTES, key, KVT_KEY_BYTES);
	}
}

static void plain_free(struct plain *p)
{
	munmap(p->map, p->map_bytes);
}

static bool plain_find(const struct plain *p, const uint8_t *key, uint64_t at)
{
	for (;; at = (at + 1) & (p->cap - 1)) {
		const uint8_t *s = p->slots + at * KVT_KEY_BYTES;
		if (!memcmp(s, key, KVT_KEY_BYTES))
			return true;
		if (!memcmp(s, plain_empty, KVT_KEY_BYTES))
			return false;
	}
}

static uint64_t plain_pos;

/* As batch_lookups, the same keys in the same order. */
static uint64_t plain_lookups(const struct plain *p, const uint8_t *ring, unsigned iters)
{
	uint64_t found = 0, at[PLAIN_BATCH];
	uint64_t t0 = kvt_now_ns();

	for (unsigned it = 0; it < iters; it++) {
		if (plain_pos + LOOKUP_KEYS > RING_KEYS)
			plain_pos = 0;
		const uint8_t *keys = ring + plain_pos * KVT_KEY_BYTES;
		for (unsigned b = 0; b < LOOKUP_KEYS; b += PLAIN_BATCH) {
			const uint8_t *k = keys + (size_t)b * KVT_KEY_BYTES;
			for (unsigned i = 0; i < PLAIN_BATCH; i++) {
				at[i] = XXH3_64bits(k + i * KVT_KEY_BYTES, KVT_KEY_BYTES) & (p->cap - 1);
				__builtin_prefetch(p->slots + at[i] * KVT_KEY_BYTES);
			}
			for (unsigned i = 0; i < PLAIN_BATCH; i++)
				found += plain_find(p, k + i * KVT_KEY_BYTES, at[i]);
		}
		plain_pos += LOOKUP_KEYS;
	}
	uint64_t t = kvt_now_ns() - t0;
	if (found != (uint64_t)iters * LOOKUP_KEYS)
		die("the plain table found %llu of %llu stored keys", (unsigned long long)found,
		    (unsigned long long)iters * LOOKUP_KEYS);
	return t;
}

/* Random stored keys, so that a large index is looked up all over, not in
 * a part that stays in the caches. */
static void ring_fill(uint8_t *ring, uint64_t n, uint64_t seed)
{
	for (uint64_t j = 0; j < RING_KEYS; j++)
		make_key(ring + j * KVT_KEY_BYTES, mix(seed * RING_KEYS + j) % n);
	ring_pos = plain_pos = 0;
}

static void index_measure(kvt_client *c, kvt_ns *ns, uint8_t *ring, struct index_point *pt)
{
	static uint8_t states[LOOKUP_KEYS];
	unsigned one = opt.iters / CHUNKS ? opt.iters / CHUNKS : 1;
	unsigned batch = opt.batches / CHUNKS ? opt.batches / CHUNKS : 1;

	struct plain plain;

	plain_init(&plain, pt->n);
	ring_fill(ring, pt->n, pt->n);
	place(true);
	one_lookups(ns, ring, one);
	batch_lookups(ns, ring, states, batch);
	plain_lookups(&plain, ring, batch);
	bench_pings(c, one);
	for (unsigned p = 0; p < opt.pairs; p++) {
		uint64_t o = 0, g = 0, b = 0, l = 0;
		for (unsigned k = 0; k < CHUNKS; k++) {
			o += one_lookups(ns, ring, one);
			g += bench_pings(c, one);
			b += batch_lookups(ns, ring, states, batch);
			l += plain_lookups(&plain, ring, batch);
		}
		pt->one_us[p] = (double)o / (one * CHUNKS) / 1000.0;
		pt->ping_us[p] = (double)g / (one * CHUNKS) / 1000.0;
		pt->batch_us[p] = (double)b / (batch * CHUNKS) / 1000.0;
		pt->one_ratio[p] = pt->one_us[p] / pt->ping_us[p];
		pt->keys_s[p] = LOOKUP_KEYS / (pt->batch_us[p] * 1e-6);
		pt->ns_per_key[p] = (pt->batch_us[p] - pt->ping_us[p]) * 1000.0 / LOOKUP_KEYS;
		pt->plain_ns[p] = (double)l / ((double)batch * CHUNKS * LOOKUP_KEYS);
		pt->key_ratio[p] = pt->ns_per_key[p] / pt->plain_ns[p];
		progress("  %llu blocks, pair %u/%u: lookup %.2f us, ping %.2f us, ratio %.3f; 1024 keys %.1f us (%.2f M keys/s), %.1f ns/key, plain table %.1f ns/key, ratio %.3f",
			 (unsigned long long)pt->n, p + 1, opt.pairs, pt->one_us[p], pt->ping_us[p],
			 pt->one_ratio[p], pt->batch_us[p], pt->keys_s[p] / 1e6, pt->ns_per_key[p],
			 pt->plain_ns[p], pt->key_ratio[p]);
	}
	place(false);
	plain_free(&plain);
}

static void index_run(void)
{
	uint64_t want[MAX_POINTS];
	uint64_t avail = proc_kib("/proc/meminfo", "MemAvailable") * KIB;
	uint64_t fit = 0; /* blocks this run can hold */

	IX.n = points(opt.max, want);
	for (unsigned i = 0; i < IX.n; i++) {
		struct index_point *pt = &IX.p[i];
		pt->n = want[i];
		/* The pool (the daemon populates it), plus a generous 1 KiB
		 * of bookkeeping per block, the plain table and 1 GiB for
		 * everything else running here. */
		uint64_t need = pool_for(pt->n) + pt->n * KIB + plain_bytes(pt->n) + GIB;
		if (need > avail)
			snprintf(pt->skipped, sizeof(pt->skipped),
				 "needs about %.1f GiB of memory (a %.1f GiB pool of 4 KiB slots), %.1f GiB available",
				 (double)need / GIB, (double)pool_for(pt->n) / GIB, (double)avail / GIB);
		else
			fit = pt->n;
	}
	if (!fit) {
		progress("1/3 index: no size fits this machine's memory");
		return;
	}
	IX.pool_bytes = pool_for(fit);

	bench_daemon_config(&daemon_state,
			    "[pool]\ncapacity = %lluM\nextent_size = %lluM\n%s%s%s"
			    "[limits]\nkeys_per_request = %d\n",
			    (unsigned long long)(IX.pool_bytes / MIB),
			    (unsigned long long)((IX.pool_bytes < GIB ? IX.pool_bytes : GIB) / MIB),
			    opt.eviction ? "eviction = " : "", opt.eviction ? opt.eviction : "",
			    opt.eviction ? "\n" : "", STORE_BATCH);
	bench_daemon_start(&daemon_state, WAIT_LIMIT_NS);
	bench_daemon_log_find(&daemon_state, "Host pool: ", NULL, IX.pool, sizeof(IX.pool));
	kvt_client *c = bench_daemon_connect(&daemon_state);
	kvt_ns *ns = open_ns(c);
	IX.base_rss_anon_kib = daemon_kib("RssAnon");
	progress("1/3 index: kvtierd pid %d, pool %llu MiB of 4 KiB slots, RssAnon %llu KiB before any block",
		 (int)daemon_state.pid, (unsigned long long)(IX.pool_bytes / MIB),
		 (unsigned long long)IX.base_rss_anon_kib);

	uint8_t *ring = alloc_populated((uint64_t)RING_KEYS * KVT_KEY_BYTES);
	struct storer st;
	storer_init(&st);
	uint64_t stored = 0, prev_rss = IX.base_rss_anon_kib;
	for (unsigned i = 0; i < IX.n; i++) {
		struct index_point *pt = &IX.p[i];
		char name[32];
		if (pt->skipped[0]) {
			progress("  %s blocks: skipped: %s", count_name(pt->n, name, sizeof(name)),
				 pt->skipped);
			continue;
		}
		uint64_t t0 = kvt_now_ns();
		store_range(&st, c, ns, stored, pt->n);
		pt->store_blocks_s = (double)(pt->n - stored) / ((double)(kvt_now_ns() - t0) / 1e9);
		pt->rss_anon_kib = daemon_kib("RssAnon");
		pt->rss_shmem_kib = daemon_kib("RssShmem");
		pt->bytes_per_block =
			(double)(pt->rss_anon_kib - IX.base_rss_anon_kib) * KIB / (double)pt->n;
		pt->marginal_bytes_per_block =
			((double)pt->rss_anon_kib - (double)prev_rss) * KIB / (double)(pt->n - stored);
		progress("  %s blocks stored (%.0f blocks/s): RssAnon %llu KiB, %.0f bytes per block",
			 count_name(pt->n, name, sizeof(name)), pt->store_blocks_s,
			 (unsigned long long)pt->rss_anon_kib, pt->bytes_per_block);
		stored = pt->n;
		prev_rss = pt->rss_anon_kib;
		index_measure(c, ns, ring, pt);
	}
	storer_free(&st);
	munmap(ring, (uint64_t)RING_KEYS * KVT_KEY_BYTES);
	kvt_ns_close(ns);
	kvt_client_free(c);
	bench_daemon_stop(&daemon_state);
}

/* ---- 2. recovery ----------------------------------------------------- */

struct recovery_point {
	uint64_t n;
	char skipped[160];
	double rec_ms[MAX_PAIRS], raw_ms[MAX_PAIRS], ratio[MAX_PAIRS], start_ms[MAX_PAIRS];
	double raw1_ms[MAX_PAIRS], ratio1[MAX_PAIRS]; /* bare reads at depth 1 */
	uint64_t stats_recovery_ms; /* nvme_recovery_ms of the last restart */
	uint64_t rss_anon_kib;      /* after the last restart */
	double bytes_per_block;
	uint64_t read_bytes, regions_bound;
	double spill_blocks_s; /* getting to n blocks on disk from the point before */
};

static struct {
	struct recovery_point p[MAX_POINTS];
	unsigned n;
	uint64_t spill_bytes;
	uint64_t pool_bytes;
	uint64_t base_rss_anon_kib;
	char nvme[512];
	char fs_line[64];
} RC;

static uint64_t spill_regions(uint64_t blocks)
{
	return (blocks + SLOTS_PER_REGION - 1) / SLOTS_PER_REGION + 1;
}

/*
 * What recovery reads (daemon/spill-recover.c, docs/nvme.md §5), without the daemon:
 * region by region, the 8 KiB header, and for a bound region its whole slot
 * area, in reads of as many slots as fit in 4 MiB (one 4 KiB slot header
 * each when the stride is above 64 KiB).  O_DIRECT, one read at a time.
 * \return nanoseconds
 */
static uint64_t raw_recovery_read(uint64_t *ret_bytes, uint64_t *ret_bound)
{
	uint8_t *buf = NULL;
	uint64_t bytes = 0, bound = 0;
	int fd = open(spill_path, O_RDONLY | O_DIRECT | O_CLOEXEC);
	if (fd < 0)
		die("cannot open %s with O_DIRECT: %s", spill_path, strerror(errno));
	if (posix_memalign((void **)&buf, 4096, RECOVER_CHUNK))
		die("out of memory");

	uint64_t t0 = kvt_now_ns();
	for (uint64_t r = 0; r < RC.spill_bytes / REGION_BYTES; r++) {
		uint64_t off = r * REGION_BYTES;
		if (pread(fd, buf, REGION_HEADER_BYTES, (off_t)off) != (ssize_t)REGION_HEADER_BYTES)
			die("reading %s: %s", spill_path, strerror(errno));
		bytes += REGION_HEADER_BYTES;
		if (memcmp(buf, "KVTSPRG1", 8))
			continue;
		uint64_t slot_bytes;
		memcpy(&slot_bytes, buf + 24, 8); /* little-endian, as is this machine */
		uint64_t stride = SLOT_HEADER_BYTES + (slot_bytes + 4095) / 4096 * 4096;
		uint64_t slots = (REGION_BYTES - REGION_HEADER_BYTES) / stride;
		uint64_t per = stride <= RECOVER_SEQUENTIAL_STRIDE ? RECOVER_CHUNK / stride : 1;
		bound++;
		for (uint64_t first = 0; first < slots; first += per) {
			uint64_t cnt = slots - first < per ? slots - first : per;
			size_t len = per > 1 ? (size_t)(cnt * stride) : SLOT_HEADER_BYTES;
			off_t at = (off_t)(off + REGION_HEADER_BYTES + first * stride);
			if (pread(fd, buf, len, at) != (ssize_t)len)
				die("reading %s: %s", spill_path, strerror(errno));
			bytes += len;
		}
	}
	uint64_t ns = kvt_now_ns() - t0;
	free(buf);
	close(fd);
	*ret_bytes = bytes;
	*ret_bound = bound;
	return ns;
}

struct rd {
	uint64_t off;
	uint32_t len;
};

/* The reads (or writes) of rds, at most depth in flight through one
 * io_uring, each into (from) its own buffer of buf_len; path names fd. */
static void ring_io(int fd, const char *path, bool write, const struct rd *rds, size_t n,
		    unsigned depth, size_t buf_len, uint8_t *bufs)
{
	struct io_uring ring;
	size_t next = 0, done = 0;
	unsigned free_n = depth, free_ids[256];

	if (depth > 256 || io_uring_queue_init(depth, &ring, 0) < 0)
		die("io_uring_queue_init: cannot set up a ring of %u", depth);
	for (unsigned i = 0; i < depth; i++)
		free_ids[i] = i;
	while (done < n) {
		while (next < n && free_n > 0) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
			unsigned id = free_ids[--free_n];
			if (write)
				io_uring_prep_write(sqe, fd, bufs + (size_t)id * buf_len, rds[next].len,
						    rds[next].off);
			else
				io_uring_prep_read(sqe, fd, bufs + (size_t)id * buf_len, rds[next].len,
						   rds[next].off);
			io_uring_sqe_set_data64(sqe, ((uint64_t)next << 16) | id);
			next++;
		}
		struct io_uring_cqe *cqe;
		if (io_uring_submit_and_wait(&ring, 1) < 0 || io_uring_wait_cqe(&ring, &cqe) < 0)
			die("io_uring: %s", strerror(errno));
		do {
			uint64_t d = io_uring_cqe_get_data64(cqe);
			if (cqe->res != (int)rds[d >> 16].len)
				die("%s %s: %d", write ? "writing" : "reading", path, cqe->res);
			free_ids[free_n++] = (unsigned)(d & 0xffff);
			done++;
			io_uring_cqe_seen(&ring, cqe);
		} while (io_uring_peek_cqe(&ring, &cqe) == 0);
	}
	io_uring_queue_exit(&ring);
}

/*
 * The same bytes at recovery's depth: every region header, RECOVER_HEADERS_AHEAD
 * in flight, then the slot areas of bound regions in the same reads as
 * raw_recovery_read(), RECOVER_CHUNKS of 4 MiB (or RECOVER_SLOT_READS of one
 * header) in flight.  Recovery overlaps the two and parses meanwhile; this
 * only reads.  \return nanoseconds
 */
static uint64_t raw_recovery_read_deep(uint64_t *ret_bytes)
{
	uint64_t regions = RC.spill_bytes / REGION_BYTES, bytes = 0;
	struct rd *rds = calloc(regions, sizeof(*rds));
	uint8_t *hdrs = NULL, *bufs = NULL;
	int fd = open(spill_path, O_RDONLY | O_DIRECT | O_CLOEXEC);
	if (fd < 0)
		die("cannot open %s with O_DIRECT: %s", spill_path, strerror(errno));
	if (!rds || posix_memalign((void **)&hdrs, 4096, regions * REGION_HEADER_BYTES) ||
	    posix_memalign((void **)&bufs, 4096, RECOVER_CHUNKS * RECOVER_CHUNK))
		die("out of memory");

	uint64_t t0 = kvt_now_ns();
	for (uint64_t r = 0; r < regions; r++)
		rds[r] = (struct rd){r * REGION_BYTES, REGION_HEADER_BYTES};
	/* Each header into its own place: ids are buffers, so one buffer per
	 * read here (depth = regions at most, in rounds of the ahead). */
	for (uint64_t r = 0; r < regions; r += RECOVER_HEADERS_AHEAD) {
		uint64_t k = regions - r < RECOVER_HEADERS_AHEAD ? regions - r : RECOVER_HEADERS_AHEAD;
		ring_io(fd, spill_path, false, rds + r, k, (unsigned)k, REGION_HEADER_BYTES,
			hdrs + r * REGION_HEADER_BYTES);
	}
	bytes += regions * REGION_HEADER_BYTES;
	size_t n = 0, cap = 0;
	struct rd *slots = NULL;
	bool big = false;
	for (uint64_t r = 0; r < regions; r++) {
		const uint8_t *h = hdrs + r * REGION_HEADER_BYTES;
		if (memcmp(h, "KVTSPRG1", 8))
			continue;
		uint64_t slot_bytes;
		memcpy(&slot_bytes, h + 24, 8);
		uint64_t stride = SLOT_HEADER_BYTES + (slot_bytes + 4095) / 4096 * 4096;
		uint64_t nslots = (REGION_BYTES - REGION_HEADER_BYTES) / stride;
		uint64_t per = stride <= RECOVER_SEQUENTIAL_STRIDE ? RECOVER_CHUNK / stride : 1;
		big |= per == 1;
		for (uint64_t first = 0; first < nslots; first += per) {
			uint64_t cnt = nslots - first < per ? nslots - first : per;
			if (n == cap && !(slots = realloc(slots, (cap = cap ? cap * 2 : 1024) * sizeof(*slots))))
				die("out of memory");
			slots[n] = (struct rd){r * REGION_BYTES + REGION_HEADER_BYTES + first * stride,
					       per > 1 ? (uint32_t)(cnt * stride) : SLOT_HEADER_BYTES};
			bytes += slots[n++].len;
		}
	}
	/* 4 MiB buffers serve the one-header reads too, when there are any. */
	if (big)
		ring_io(fd, spill_path, false, slots, n, RECOVER_SLOT_READS, SLOT_HEADER_BYTES, bufs);
	else
		ring_io(fd, spill_path, false, slots, n, RECOVER_CHUNKS, RECOVER_CHUNK, bufs);
	uint64_t ns = kvt_now_ns() - t0;
	free(slots);
	free(rds);
	free(hdrs);
	free(bufs);
	close(fd);
	*ret_bytes = bytes;
	return ns;
}

/* "in 0.123 s" at the end of the daemon's recovery summary, in ms. */
static double logged_recovery_ms(uint64_t *ret_blocks)
{
	char rest[1024];
	double s;
	if (!bench_daemon_log_find(&daemon_state, "Spill recovery: ", " blocks recovered (", rest,
				   sizeof(rest)))
		die("the daemon logged no \"Spill recovery:\" summary");
	const char *b = strstr(rest, " blocks recovered");
	const char *p = NULL;
	for (const char *q = strstr(rest, " in "); q; q = strstr(q + 1, " in "))
		p = q;
	if (!b || !p || sscanf(p, " in %lf s", &s) != 1)
		die("cannot read the recovery summary: %s", rest);
	while (b > rest && b[-1] >= '0' && b[-1] <= '9')
		b--;
	*ret_blocks = strtoull(b, NULL, 10);
	return s * 1000.0;
}

/*
 * Write-back runs at once (watermarks of 0 %), and the host pool holds
 * every block (see recovery_run()), so each block stored reaches the file;
 * one dropped on the way would never arrive, so that is checked as well.
 */
static void wait_on_disk(kvt_client *c, uint64_t n)
{
	static const char *const names[] = {"nvme_blocks", "nvme_in_flight", "nvme_dirty_drops",
					    "nvme_io_errors"};
	uint64_t t0 = kvt_now_ns(), v[4];
	for (;;) {
		daemon_stats(c, names, v, 4);
		uint64_t on_disk = v[0], in_flight = v[1], drops = v[2], errors = v[3];
		if (drops || errors)
			die("%llu blocks dropped before they reached the disk, %llu I/O errors",
			    (unsigned long long)drops, (unsigned long long)errors);
		if (on_disk >= n && in_flight == 0)
			return;
		if (kvt_now_ns() - t0 > WAIT_LIMIT_NS)
			die("%llu of %llu blocks on disk after %llu s", (unsigned long long)on_disk,
			    (unsigned long long)n, WAIT_LIMIT_NS / 1000000000ull);
		sleep_ns(POLL_NS);
	}
}

static void describe_fs(void)
{
	struct stat st;
	char path[128], line[128];
	snprintf(RC.fs_line, sizeof(RC.fs_line), "?");
	if (stat(opt.dir, &st) < 0)
		return;
	snprintf(path, sizeof(path), "/sys/dev/block/%u:%u/uevent", major(st.st_dev),
		 minor(st.st_dev));
	FILE *f = fopen(path, "re");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "DEVNAME=", 8)) {
			line[strcspn(line, "\n")] = 0;
			snprintf(RC.fs_line, sizeof(RC.fs_line), "%.40s", line + 8);
		}
	fclose(f);
}

static void recovery_run(void)
{
	uint64_t want[MAX_POINTS];
	struct statvfs sv;
	uint64_t fit = 0;

	if (statvfs(opt.dir, &sv) < 0)
		die("statvfs %s: %s", opt.dir, strerror(errno));
	uint64_t free_bytes = (uint64_t)sv.f_bavail * sv.f_frsize;
	uint64_t avail = proc_kib("/proc/meminfo", "MemAvailable") * KIB;
	RC.n = points(opt.recovery_max, want);
	for (unsigned i = 0; i < RC.n; i++) {
		struct recovery_point *pt = &RC.p[i];
		pt->n = want[i];
		uint64_t need = spill_regions(pt->n) * REGION_BYTES + GIB;
		uint64_t mem = pool_for(pt->n) + pt->n * KIB + GIB;
		if (need > free_bytes)
			snprintf(pt->skipped, sizeof(pt->skipped),
				 "needs a %.1f GiB spill file (8 KiB per block on disk), %.1f GiB free under %s",
				 (double)(need - GIB) / GIB, (double)free_bytes / GIB, opt.dir);
		else if (mem > avail)
			snprintf(pt->skipped, sizeof(pt->skipped),
				 "needs about %.1f GiB of memory (a %.1f GiB pool to write them from), %.1f GiB available",
				 (double)mem / GIB, (double)pool_for(pt->n) / GIB, (double)avail / GIB);
		else
			fit = pt->n;
	}
	if (!fit) {
		progress("2/3 recovery: no size fits the disk under %s", opt.dir);
		return;
	}
	RC.spill_bytes = spill_regions(fit) * REGION_BYTES;
	describe_fs();

	/*
	 * A host pool that holds every block: when the pool is full, host
	 * eviction takes a clean block only within a short distance of the
	 * least recently used end, and a block that write-back has finished
	 * goes back to the other end, so a stream of stores larger than the
	 * pool loses blocks that were never written (dirty drops) however
	 * far ahead write-back is.
	 */
	uint64_t pool = RC.pool_bytes = pool_for(fit);
	bench_daemon_config(&daemon_state,
			    "[pool]\ncapacity = %lluM\nextent_size = %lluM\n"
			    "[nvme]\nqueue_depth = 64\n"
			    "writeback_high = 0%%\nwriteback_low = 0%%\n"
			    "[spill.bench]\npath = %s\ncapacity = %lluM\n"
			    "[limits]\nkeys_per_request = %d\n",
			    (unsigned long long)(pool / MIB),
			    (unsigned long long)((pool < GIB ? pool : GIB) / MIB), spill_path,
			    (unsigned long long)(RC.spill_bytes / MIB), STORE_BATCH);
	bench_daemon_start(&daemon_state, WAIT_LIMIT_NS);
	bench_daemon_log_find(&daemon_state, "NVMe tier: ", NULL, RC.nvme, sizeof(RC.nvme));
	RC.base_rss_anon_kib = daemon_kib("RssAnon");
	progress("2/3 recovery: kvtierd pid %d, spill file %llu MiB under %s; %s",
		 (int)daemon_state.pid, (unsigned long long)(RC.spill_bytes / MIB), opt.dir, RC.nvme);

	struct storer st;
	storer_init(&st);
	uint64_t stored = 0;
	for (unsigned i = 0; i < RC.n; i++) {
		struct recovery_point *pt = &RC.p[i];
		char name[32];
		if (pt->skipped[0]) {
			progress("  %s blocks on disk: skipped: %s",
				 count_name(pt->n, name, sizeof(name)), pt->skipped);
			continue;
		}
		kvt_client *c = bench_daemon_connect(&daemon_state);
		kvt_ns *ns = open_ns(c);
		uint64_t t0 = kvt_now_ns();
		store_range(&st, c, ns, stored, pt->n);
		wait_on_disk(c, pt->n);
		pt->spill_blocks_s = (double)(pt->n - stored) / ((double)(kvt_now_ns() - t0) / 1e9);
		stored = pt->n;
		kvt_ns_close(ns);
		kvt_client_free(c);
		progress("  %s blocks on disk (%.0f blocks/s through write-back)",
			 count_name(pt->n, name, sizeof(name)), pt->spill_blocks_s);

		for (unsigned p = 0; p < opt.pairs; p++) {
			uint64_t recovered;
			bench_daemon_stop(&daemon_state);
			uint64_t deep_bytes;
			pt->raw1_ms[p] = (double)raw_recovery_read(&pt->read_bytes, &pt->regions_bound) / 1e6;
			pt->raw_ms[p] = (double)raw_recovery_read_deep(&deep_bytes) / 1e6;
			if (deep_bytes != pt->read_bytes)
				die("the two bare reads read %llu and %llu bytes",
				    (unsigned long long)pt->read_bytes, (unsigned long long)deep_bytes);
			pt->start_ms[p] =
				(double)bench_daemon_start(&daemon_state, WAIT_LIMIT_NS) / 1e6;
			pt->rec_ms[p] = logged_recovery_ms(&recovered);
			pt->ratio[p] = pt->rec_ms[p] / pt->raw_ms[p];
			pt->ratio1[p] = pt->rec_ms[p] / pt->raw1_ms[p];
			if (recovered != pt->n)
				die("recovery found %llu blocks, %llu were written",
				    (unsigned long long)recovered, (unsigned long long)pt->n);
			pt->rss_anon_kib = daemon_kib("RssAnon");
			c = bench_daemon_connect(&daemon_state);
			pt->stats_recovery_ms = daemon_stat(c, "nvme_recovery_ms");
			if (daemon_stat(c, "nvme_recovered") != pt->n)
				die("nvme_recovered is not %llu", (unsigned long long)pt->n);
			kvt_client_free(c);
			progress("  %llu blocks, pair %u/%u: bare reads at recovery's depth %.1f ms (depth 1 %.1f ms), recovery %.1f ms (ratio %.3f, to depth 1 %.3f), listening after %.1f ms",
				 (unsigned long long)pt->n, p + 1, opt.pairs, pt->raw_ms[p], pt->raw1_ms[p],
				 pt->rec_ms[p], pt->ratio[p], pt->ratio1[p], pt->start_ms[p]);
		}
		pt->bytes_per_block = ((double)pt->rss_anon_kib - (double)RC.base_rss_anon_kib) * KIB /
				      (double)pt->n;
	}
	storer_free(&st);
	bench_daemon_stop(&daemon_state);
}

/* ---- 3. write-back --------------------------------------------------- */

/*
 * Write-back of N dirty blocks at once: a daemon whose pool holds them and
 * whose spill file has room for them, write-back held off (writeback_high
 * = 100 %) while they are stored, then let go by a reload to watermarks of
 * 0 %.  Measured while the middle 80 % of the blocks are written (a
 * window), so that what a drain costs once (the reload, its first and
 * last turns) is left out: blocks/s, against the same writes issued bare
 * (bare_writeback(), the same window of its own), and the daemon's CPU
 * time per block, against the smallest point's: what would grow with the
 * number of dirty blocks if anything did.
 */
#define WB_QUEUE_DEPTH 64 /* [nvme] queue_depth */
/* Write-back keeps queue_depth / 2 blocks in flight, two writes each. */
#define WB_BLOCKS_IN_FLIGHT (WB_QUEUE_DEPTH / 2)

struct writeback_point {
	uint64_t n;
	char skipped[160];
	double blocks_s[MAX_PAIRS], bare_blocks_s[MAX_PAIRS]; /* in the window */
	double ratio[MAX_PAIRS];     /* bare_blocks_s / blocks_s: time a block, to the limit's */
	double wb_ms[MAX_PAIRS], bare_ms[MAX_PAIRS]; /* whole drains */
	double cpu_us[MAX_PAIRS];    /* the daemon's CPU time per block, in the window */
	double cpu_ratio[MAX_PAIRS]; /* to the median of the smallest point's */
	double rss_per_block;        /* RssAnon with n blocks dirty, over a daemon with none */
};

/* The middle of a drain of n blocks: from when a tenth of them were done
 * to when nine tenths were. */
struct window {
	uint64_t n;
	uint64_t t_lo, t_hi;     /* CLOCK_MONOTONIC ns */
	uint64_t done_lo, done_hi;
	uint64_t cpu_lo, cpu_hi; /* the daemon's CPU time then, ns */
};

static void window_note(struct window *w, uint64_t done, uint64_t now, uint64_t cpu)
{
	if (!w->done_lo && done >= w->n / 10) {
		w->t_lo = now;
		w->done_lo = done;
		w->cpu_lo = cpu;
	}
	if (!w->done_hi && done >= w->n - w->n / 10) {
		w->t_hi = now;
		w->done_hi = done;
		w->cpu_hi = cpu;
	}
}

static double window_blocks_s(const struct window *w)
{
	if (w->done_hi <= w->done_lo || w->t_hi <= w->t_lo)
		die("the writes of %llu blocks went by between two looks: too few to measure",
		    (unsigned long long)w->n);
	return (double)(w->done_hi - w->done_lo) / ((double)(w->t_hi - w->t_lo) / 1e9);
}

static struct {
	struct writeback_point p[MAX_POINTS];
	unsigned n;
	uint64_t spill_bytes; /* the largest point's spill file */
	char nvme[512];
} WB;

/* The daemon's CPU time so far, all its threads (schedstat: ns on a CPU). */
static uint64_t daemon_cpu_ns(void)
{
	char path[96];
	uint64_t sum = 0;
	snprintf(path, sizeof(path), "/proc/%d/task", (int)daemon_state.pid);
	DIR *d = opendir(path);
	if (!d)
		die("cannot open %s: %s", path, strerror(errno));
	for (struct dirent *de; (de = readdir(d));) {
		unsigned long long ns;
		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%.16s/schedstat", (int)daemon_state.pid,
			 de->d_name);
		FILE *f = fopen(path, "re");
		if (!f)
			continue; /* a thread that just ended */
		if (fscanf(f, "%llu", &ns) == 1)
			sum += ns;
		fclose(f);
	}
	closedir(d);
	if (!sum)
		die("cannot read the daemon's CPU time from /proc/%d/task/*/schedstat",
		    (int)daemon_state.pid);
	return sum;
}

/*
 * What write-back writes for n blocks of one namespace into a fresh spill
 * file, without the daemon: the 8 KiB header of each region as its first
 * slot is taken, and for each block its 4 KiB slot header and its 4 KiB,
 * two writes submitted together, slot after slot, WB_BLOCKS_IN_FLIGHT
 * blocks in flight; O_DIRECT through io_uring from a registered buffer to
 * a registered file, as the daemon's engine writes, into a file of the
 * spill file's size allocated as the daemon allocates it.
 * \return nanoseconds, all of it; w: its middle
 */
struct bare_write {
	uint64_t off;  /* in the file */
	size_t from;   /* in the buffer */
	uint32_t len;
};

static uint64_t bare_writeback(uint64_t n, uint64_t file_bytes, struct window *win)
{
	struct io_uring ring;
	struct iovec iov;
	uint8_t *buf = NULL;
	unsigned free_ids[WB_BLOCKS_IN_FLIGHT], free_n = WB_BLOCKS_IN_FLIGHT;
	unsigned pending[WB_BLOCKS_IN_FLIGHT];
	uint64_t next = 0, done = 0;
	/* One slot's two writes per block in flight, then a region header. */
	size_t hdr_at = WB_BLOCKS_IN_FLIGHT * SLOT_STRIDE;

	if (posix_memalign((void **)&buf, 4096, hdr_at + REGION_HEADER_BYTES))
		die("out of memory");
	fill_random(buf, hdr_at + REGION_HEADER_BYTES, 7);
	int fd = open(bare_path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0600);
	if (fd < 0)
		die("cannot open %s with O_DIRECT: %s", bare_path, strerror(errno));
	/* Allocated and on disk before the clock starts, as the daemon's
	 * file is long before its first write-back. */
	if (fallocate(fd, 0, 0, (off_t)file_bytes) < 0 || fsync(fd) < 0)
		die("fallocate %s: %s", bare_path, strerror(errno));
	iov = (struct iovec){buf, hdr_at + REGION_HEADER_BYTES};
	if (io_uring_queue_init(4 * WB_BLOCKS_IN_FLIGHT, &ring, 0) < 0 ||
	    io_uring_register_buffers(&ring, &iov, 1) < 0 || io_uring_register_files(&ring, &fd, 1) < 0)
		die("io_uring: cannot set up a ring with a registered buffer and file");
	for (unsigned i = 0; i < WB_BLOCKS_IN_FLIGHT; i++)
		free_ids[i] = i;

	uint64_t t0 = kvt_now_ns();
	while (done < n) {
		while (next < n && free_n > 0) {
			unsigned id = free_ids[--free_n];
			uint64_t r = next / SLOTS_PER_REGION;
			uint64_t at = r * REGION_BYTES + REGION_HEADER_BYTES +
				      (next % SLOTS_PER_REGION) * SLOT_STRIDE;
			struct bare_write w[3];
			unsigned k = 0;
			if (next % SLOTS_PER_REGION == 0)
				w[k++] = (struct bare_write){r * REGION_BYTES, hdr_at, REGION_HEADER_BYTES};
			w[k++] = (struct bare_write){at, id * SLOT_STRIDE, SLOT_HEADER_BYTES};
			w[k++] = (struct bare_write){at + SLOT_HEADER_BYTES,
						     id * SLOT_STRIDE + SLOT_HEADER_BYTES, BLOCK_BYTES};
			for (unsigned j = 0; j < k; j++) {
				struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
				io_uring_prep_write_fixed(sqe, 0, buf + w[j].from, w[j].len, w[j].off, 0);
				sqe->flags |= IOSQE_FIXED_FILE;
				io_uring_sqe_set_data64(sqe, (uint64_t)w[j].len << 32 | id);
			}
			pending[id] = k;
			next++;
		}
		struct io_uring_cqe *cqe;
		if (io_uring_submit_and_wait(&ring, 1) < 0 || io_uring_wait_cqe(&ring, &cqe) < 0)
			die("io_uring: %s", strerror(errno));
		do {
			uint64_t d = io_uring_cqe_get_data64(cqe);
			unsigned id = (unsigned)(d & 0xffffffffu);
			if (cqe->res != (int)(d >> 32))
				die("writing %s: %d", bare_path, cqe->res);
			if (--pending[id] == 0) {
				free_ids[free_n++] = id;
				window_note(win, ++done, kvt_now_ns(), 0);
			}
			io_uring_cqe_seen(&ring, cqe);
		} while (io_uring_peek_cqe(&ring, &cqe) == 0);
	}
	uint64_t ns = kvt_now_ns() - t0;
	io_uring_queue_exit(&ring);
	close(fd);
	unlink(bare_path);
	free(buf);
	return ns;
}

/* The write-back part's daemon: a pool for n blocks, a spill file for
 * them, write-back above high percent. */
static void writeback_config(uint64_t n, unsigned high)
{
	uint64_t pool = pool_for(n);
	bench_daemon_config(&daemon_state,
			    "[pool]\ncapacity = %lluM\nextent_size = %lluM\n%s%s%s"
			    "[nvme]\nqueue_depth = %d\nwriteback_high = %u%%\nwriteback_low = 0%%\n"
			    "[spill.bench]\npath = %s\ncapacity = %lluM\n"
			    "[limits]\nkeys_per_request = %d\n",
			    (unsigned long long)(pool / MIB),
			    (unsigned long long)((pool < GIB ? pool : GIB) / MIB),
			    opt.eviction ? "eviction = " : "", opt.eviction ? opt.eviction : "",
			    opt.eviction ? "\n" : "", WB_QUEUE_DEPTH, high, spill_path,
			    (unsigned long long)(spill_regions(n) * REGION_BYTES / MIB), STORE_BATCH);
}

/*
 * Until n blocks are on disk, as wait_on_disk(), noting the window.  When
 * it went by between two polls (a small n on a busy machine, where this
 * process did not run for a while), the window is the whole drain, from
 * t0 and cpu0 (taken as write-back was let go) on.
 */
static void writeback_wait(kvt_client *c, uint64_t n, struct window *w, uint64_t t0,
			   uint64_t cpu0)
{
	static const char *const names[] = {"nvme_blocks", "nvme_in_flight", "nvme_dirty_drops",
					    "nvme_io_errors"};
	uint64_t v[4];
	for (;;) {
		daemon_stats(c, names, v, 4);
		uint64_t now = kvt_now_ns(), cpu = daemon_cpu_ns();
		window_note(w, v[0], now, cpu);
		if (v[2] || v[3])
			die("%llu blocks dropped before they reached the disk, %llu I/O errors",
			    (unsigned long long)v[2], (unsigned long long)v[3]);
		if (v[0] >= n && v[1] == 0) {
			if (w->done_hi > w->done_lo)
				return;
			progress("  %llu blocks: their middle went by between two polls; measured over the whole drain",
				 (unsigned long long)n);
			*w = (struct window){.n = n, .t_lo = t0, .t_hi = now, .done_lo = 0,
					     .done_hi = v[0], .cpu_lo = cpu0, .cpu_hi = cpu};
			return;
		}
		if (kvt_now_ns() - t0 > WAIT_LIMIT_NS)
			die("%llu of %llu blocks on disk after %llu s", (unsigned long long)v[0],
			    (unsigned long long)n, WAIT_LIMIT_NS / 1000000000ull);
		sleep_ns(POLL_NS);
	}
}

static void writeback_pair(struct writeback_point *pt, unsigned p, struct storer *st)
{
	struct window bare = {.n = pt->n}, wb = {.n = pt->n};

	pt->bare_ms[p] =
		(double)bare_writeback(pt->n, spill_regions(pt->n) * REGION_BYTES, &bare) / 1e6;

	unlink(spill_path);
	writeback_config(pt->n, 100);
	bench_daemon_start(&daemon_state, WAIT_LIMIT_NS);
	if (!WB.nvme[0])
		bench_daemon_log_find(&daemon_state, "NVMe tier: ", NULL, WB.nvme, sizeof(WB.nvme));
	kvt_client *c = bench_daemon_connect(&daemon_state);
	kvt_ns *ns = open_ns(c);
	uint64_t rss0 = daemon_kib("RssAnon");
	store_range(st, c, ns, 0, pt->n);
	if (daemon_stat(c, "nvme_writes") != 0)
		die("write-back ran while it was held off (writeback_high = 100%%)");
	pt->rss_per_block = ((double)daemon_kib("RssAnon") - (double)rss0) * KIB / (double)pt->n;

	/* Let go: the reload's watermarks take effect at once. */
	writeback_config(pt->n, 0);
	uint64_t cpu0 = daemon_cpu_ns(), t0 = kvt_now_ns();
	if (kill(daemon_state.pid, SIGHUP) < 0)
		die("kill SIGHUP: %s", strerror(errno));
	writeback_wait(c, pt->n, &wb, t0, cpu0);
	pt->wb_ms[p] = (double)(kvt_now_ns() - t0) / 1e6;
	uint64_t writes = daemon_stat(c, "nvme_writes");
	if (writes != pt->n)
		die("%llu write-backs for %llu blocks", (unsigned long long)writes,
		    (unsigned long long)pt->n);
	kvt_ns_close(ns);
	kvt_client_free(c);
	bench_daemon_stop(&daemon_state);
	unlink(spill_path);

	pt->blocks_s[p] = window_blocks_s(&wb);
	pt->bare_blocks_s[p] = window_blocks_s(&bare);
	pt->ratio[p] = pt->bare_blocks_s[p] / pt->blocks_s[p];
	pt->cpu_us[p] = (double)(wb.cpu_hi - wb.cpu_lo) / 1e3 / (double)(wb.done_hi - wb.done_lo);
	progress("  %llu blocks, pair %u/%u: bare writes %.0f blocks/s (%.1f ms in all), write-back %.0f blocks/s (%.1f ms in all), ratio %.3f; daemon CPU %.2f us a block; RssAnon %.0f B a dirty block",
		 (unsigned long long)pt->n, p + 1, opt.pairs, pt->bare_blocks_s[p], pt->bare_ms[p],
		 pt->blocks_s[p], pt->wb_ms[p], pt->ratio[p], pt->cpu_us[p], pt->rss_per_block);
}

static void writeback_run(void)
{
	uint64_t want[MAX_POINTS];
	struct statvfs sv;
	bool any = false;

	if (statvfs(opt.dir, &sv) < 0)
		die("statvfs %s: %s", opt.dir, strerror(errno));
	uint64_t free_bytes = (uint64_t)sv.f_bavail * sv.f_frsize;
	uint64_t avail = proc_kib("/proc/meminfo", "MemAvailable") * KIB;
	WB.n = points(opt.writeback_max, want);
	for (unsigned i = 0; i < WB.n; i++) {
		struct writeback_point *pt = &WB.p[i];
		pt->n = want[i];
		/* One file at a time: the bare one goes before the daemon starts. */
		uint64_t need = spill_regions(pt->n) * REGION_BYTES + GIB;
		uint64_t mem = pool_for(pt->n) + pt->n * KIB + GIB;
		if (need > free_bytes)
			snprintf(pt->skipped, sizeof(pt->skipped),
				 "needs a %.1f GiB spill file (8 KiB per block on disk), %.1f GiB free under %s",
				 (double)(need - GIB) / GIB, (double)free_bytes / GIB, opt.dir);
		else if (mem > avail)
			snprintf(pt->skipped, sizeof(pt->skipped),
				 "needs about %.1f GiB of memory (a %.1f GiB pool to write them from), %.1f GiB available",
				 (double)mem / GIB, (double)pool_for(pt->n) / GIB, (double)avail / GIB);
		else {
			any = true;
			WB.spill_bytes = spill_regions(pt->n) * REGION_BYTES;
		}
	}
	if (!any) {
		progress("3/3 write-back: no size fits this machine");
		return;
	}
	describe_fs();
	progress("3/3 write-back: N blocks stored with write-back held off, then let go; the same writes bare as the limit");

	struct storer st;
	storer_init(&st);
	double ref = 0; /* the smallest point's CPU time per block */
	for (unsigned i = 0; i < WB.n; i++) {
		struct writeback_point *pt = &WB.p[i];
		char name[32];
		if (pt->skipped[0]) {
			progress("  %s dirty blocks: skipped: %s", count_name(pt->n, name, sizeof(name)),
				 pt->skipped);
			continue;
		}
		for (unsigned p = 0; p < opt.pairs; p++)
			writeback_pair(pt, p, &st);
		if (!ref)
			ref = median(pt->cpu_us, opt.pairs);
		for (unsigned p = 0; p < opt.pairs; p++)
			pt->cpu_ratio[p] = pt->cpu_us[p] / ref;
	}
	storer_free(&st);
}

/* ---- output ---------------------------------------------------------- */

#define ROW "%-24s %-22s %-22s %-24s %s\n"

/* A point's row starts with its name; false when it was skipped, and
 * the row says why. */
static bool row_begin(FILE *out, uint64_t blocks, const char *skipped, char *name, size_t size)
{
	count_name(blocks, name, size);
	if (!skipped[0])
		return true;
	fprintf(out, "%-24s skipped: %s\n", name, skipped);
	return false;
}

static void print_table(FILE *out)
{
	unsigned n = opt.pairs;
	struct utsname u;
	char name[32], a[64], l[64], r[64], x[96];
	uname(&u);

	fprintf(out, "\nkvtier at scale: %u pairs, contenders alternating; ratio = median of the pairwise ratios [min..max]; absolute figures are medians\n",
		n);
	fprintf(out, "machine: %s %s, %ld CPUs; 4 KiB blocks (the smallest slot)\n", u.sysname,
		u.release, sysconf(_SC_NPROCESSORS_ONLN));
	if (IX.pool_bytes) {
		fprintf(out, "\nindex: pool %s; lookups with the daemon and the client on one CPU; RssAnon before any block %llu KiB\n\n",
			IX.pool, (unsigned long long)IX.base_rss_anon_kib);
		fprintf(out, ROW, "blocks", "lookup, 1 key", "limit: ping", "ratio",
			"1024 keys, beyond the round trip");
		fprintf(out, ROW, "", "", "limit: plain table", "ratio", "M keys/s; RssAnon per block");
		for (unsigned i = 0; i < IX.n; i++) {
			const struct index_point *pt = &IX.p[i];
			if (!row_begin(out, pt->n, pt->skipped, name, sizeof(name)))
				continue;
			snprintf(a, sizeof(a), "%.2f us", median(pt->one_us, n));
			snprintf(l, sizeof(l), "%.2f us", median(pt->ping_us, n));
			ratio_range(pt->one_ratio, n, r, sizeof(r));
			snprintf(x, sizeof(x), "%.1f ns/key", median(pt->ns_per_key, n));
			fprintf(out, ROW, name, a, l, r, x);
			snprintf(l, sizeof(l), "%.1f ns/key", median(pt->plain_ns, n));
			ratio_range(pt->key_ratio, n, r, sizeof(r));
			snprintf(x, sizeof(x), "%.2f M keys/s; %.0f B (marginal %.0f B)",
				 median(pt->keys_s, n) / 1e6, pt->bytes_per_block,
				 pt->marginal_bytes_per_block);
			fprintf(out, ROW, "", "", l, r, x);
		}
	}
	if (RC.spill_bytes) {
		fprintf(out, "\nrecovery: spill file %llu MiB under %s (%s), written from a %llu MiB pool; %s\n\n",
			(unsigned long long)(RC.spill_bytes / MIB), opt.dir, RC.fs_line,
			(unsigned long long)(RC.pool_bytes / MIB), RC.nvme);
		fprintf(out, "limit: the same bytes read bare with O_DIRECT at recovery's depth (region headers %d ahead, %d reads of 4 MiB in flight, io_uring); also against depth 1\n\n",
			RECOVER_HEADERS_AHEAD, RECOVER_CHUNKS);
		fprintf(out, ROW, "blocks on disk", "recovery (logged)", "limit: bare reads", "ratio",
			"read; ratio to depth 1; daemon listening after; RssAnon per block");
		for (unsigned i = 0; i < RC.n; i++) {
			const struct recovery_point *pt = &RC.p[i];
			if (!row_begin(out, pt->n, pt->skipped, name, sizeof(name)))
				continue;
			snprintf(a, sizeof(a), "%.1f ms", median(pt->rec_ms, n));
			snprintf(l, sizeof(l), "%.1f ms", median(pt->raw_ms, n));
			ratio_range(pt->ratio, n, r, sizeof(r));
			snprintf(x, sizeof(x), "%.0f MiB in %llu regions; %.3f (%.1f ms); %.1f ms; %.0f B",
				 (double)pt->read_bytes / MIB, (unsigned long long)pt->regions_bound,
				 median(pt->ratio1, n), median(pt->raw1_ms, n),
				 median(pt->start_ms, n), pt->bytes_per_block);
			fprintf(out, ROW, name, a, l, r, x);
		}
	}
	if (WB.spill_bytes) {
		char ref[32];
		const struct writeback_point *first = NULL;
		for (unsigned i = 0; i < WB.n && !first; i++)
			if (!WB.p[i].skipped[0])
				first = &WB.p[i];
		fprintf(out, "\nwrite-back: N dirty blocks stored with write-back held off (writeback_high = 100%%), then let go by a reload to 0%%; queue_depth %d; spill files under %s (%s); %s\n\n",
			WB_QUEUE_DEPTH, opt.dir, RC.fs_line, WB.nvme);
		fprintf(out, "measured while the middle 80%% of the blocks were written; limit: the same writes (each region's header; each block's 4 KiB slot header and 4 KiB, submitted together) issued bare with O_DIRECT through io_uring from a registered buffer, %d blocks in flight; and the daemon's CPU time per block (all threads) against the smallest point's\n\n",
			WB_BLOCKS_IN_FLIGHT);
		snprintf(ref, sizeof(ref), "limit: CPU at %s", count_name(first->n, name, sizeof(name)));
		fprintf(out, ROW, "dirty blocks", "write-back", "limit: bare writes", "ratio",
			"whole drain (bare); RssAnon per dirty block");
		fprintf(out, ROW, "", "daemon CPU per block", ref, "ratio", "");
		for (unsigned i = 0; i < WB.n; i++) {
			const struct writeback_point *pt = &WB.p[i];
			if (!row_begin(out, pt->n, pt->skipped, name, sizeof(name)))
				continue;
			snprintf(a, sizeof(a), "%.0f blocks/s", median(pt->blocks_s, n));
			snprintf(l, sizeof(l), "%.0f blocks/s", median(pt->bare_blocks_s, n));
			ratio_range(pt->ratio, n, r, sizeof(r));
			snprintf(x, sizeof(x), "%.1f ms (%.1f ms); %.0f B", median(pt->wb_ms, n),
				 median(pt->bare_ms, n), pt->rss_per_block);
			fprintf(out, ROW, name, a, l, r, x);
			snprintf(a, sizeof(a), "%.2f us", median(pt->cpu_us, n));
			snprintf(l, sizeof(l), "%.2f us", median(first->cpu_us, n));
			ratio_range(pt->cpu_ratio, n, r, sizeof(r));
			fprintf(out, ROW, "", a, l, r, "");
		}
	}
}

static void json_stat(const char *key, const double *v, bool last)
{
	unsigned n = opt.pairs;
	printf("\"%s\":%.4f,\"%s_min\":%.4f,\"%s_max\":%.4f%s", key, median(v, n), key, vmin(v, n),
	       key, vmax(v, n), last ? "" : ",");
}

/* The same for a point's object in the JSON line. */
static bool json_point_begin(unsigned i, uint64_t blocks, const char *skipped)
{
	printf("%s{\"blocks\":%llu,", i ? "," : "", (unsigned long long)blocks);
	if (!skipped[0])
		return true;
	printf("\"skipped\":");
	json_string(skipped);
	printf("}");
	return false;
}

static void print_json(void)
{
	struct utsname u;
	uname(&u);

	printf("{\"bench\":\"bench-scale\",\"kernel\":");
	json_string(u.release);
	printf(",\"cpus\":%ld,\"pairs\":%u,\"block_bytes\":%llu,\"index\":{\"pool_bytes\":%llu,"
	       "\"pool\":",
	       sysconf(_SC_NPROCESSORS_ONLN), opt.pairs, BLOCK_BYTES,
	       (unsigned long long)IX.pool_bytes);
	json_string(IX.pool);
	printf(",\"base_rss_anon_kib\":%llu,\"points\":[", (unsigned long long)IX.base_rss_anon_kib);
	for (unsigned i = 0; i < IX.n; i++) {
		const struct index_point *pt = &IX.p[i];
		if (!json_point_begin(i, pt->n, pt->skipped))
			continue;
		printf("\"rss_anon_kib\":%llu,\"rss_shmem_kib\":%llu,\"bytes_per_block\":%.1f,"
		       "\"marginal_bytes_per_block\":%.1f,\"store_blocks_s\":%.0f,",
		       (unsigned long long)pt->rss_anon_kib, (unsigned long long)pt->rss_shmem_kib,
		       pt->bytes_per_block, pt->marginal_bytes_per_block, pt->store_blocks_s);
		json_stat("lookup1_us", pt->one_us, false);
		json_stat("ping_us", pt->ping_us, false);
		json_stat("lookup1_ratio", pt->one_ratio, false);
		json_stat("batch_us", pt->batch_us, false);
		json_stat("batch_keys_s", pt->keys_s, false);
		json_stat("ns_per_key_beyond_rtt", pt->ns_per_key, false);
		json_stat("plain_ns_per_key", pt->plain_ns, false);
		json_stat("ns_per_key_ratio", pt->key_ratio, true);
		printf("}");
	}
	printf("]},\"recovery\":{\"spill_bytes\":%llu,\"pool_bytes\":%llu,\"dir\":",
	       (unsigned long long)RC.spill_bytes, (unsigned long long)RC.pool_bytes);
	json_string(opt.dir);
	printf(",\"device\":");
	json_string(RC.fs_line);
	printf(",\"nvme\":");
	json_string(RC.nvme);
	printf(",\"base_rss_anon_kib\":%llu,\"points\":[", (unsigned long long)RC.base_rss_anon_kib);
	for (unsigned i = 0; i < RC.n; i++) {
		const struct recovery_point *pt = &RC.p[i];
		if (!json_point_begin(i, pt->n, pt->skipped))
			continue;
		printf("\"read_bytes\":%llu,\"regions_bound\":%llu,\"stats_recovery_ms\":%llu,"
		       "\"rss_anon_kib\":%llu,\"bytes_per_block\":%.1f,\"spill_blocks_s\":%.0f,",
		       (unsigned long long)pt->read_bytes, (unsigned long long)pt->regions_bound,
		       (unsigned long long)pt->stats_recovery_ms, (unsigned long long)pt->rss_anon_kib,
		       pt->bytes_per_block, pt->spill_blocks_s);
		json_stat("recovery_ms", pt->rec_ms, false);
		json_stat("bare_read_ms", pt->raw_ms, false);
		json_stat("ratio", pt->ratio, false);
		json_stat("bare_read_depth1_ms", pt->raw1_ms, false);
		json_stat("ratio_depth1", pt->ratio1, false);
		json_stat("listening_ms", pt->start_ms, true);
		printf("}");
	}
	printf("]},\"writeback\":{\"spill_bytes\":%llu,\"queue_depth\":%d,\"blocks_in_flight\":%d,\"dir\":",
	       (unsigned long long)WB.spill_bytes, WB_QUEUE_DEPTH, WB_BLOCKS_IN_FLIGHT);
	json_string(opt.dir);
	printf(",\"device\":");
	json_string(RC.fs_line);
	printf(",\"nvme\":");
	json_string(WB.nvme);
	printf(",\"eviction\":");
	json_string(opt.eviction ? opt.eviction : "");
	printf(",\"points\":[");
	for (unsigned i = 0; i < WB.n; i++) {
		const struct writeback_point *pt = &WB.p[i];
		if (!json_point_begin(i, pt->n, pt->skipped))
			continue;
		printf("\"rss_anon_per_dirty_block\":%.1f,", pt->rss_per_block);
		json_stat("blocks_s", pt->blocks_s, false);
		json_stat("bare_blocks_s", pt->bare_blocks_s, false);
		json_stat("ratio", pt->ratio, false);
		json_stat("writeback_ms", pt->wb_ms, false);
		json_stat("bare_ms", pt->bare_ms, false);
		json_stat("cpu_us_per_block", pt->cpu_us, false);
		json_stat("cpu_ratio", pt->cpu_ratio, true);
		printf("}");
	}
	printf("]}}\n");
}

/* ---- main ------------------------------------------------------------ */

static void help(void)
{
	printf("Usage: bench-scale [OPTIONS] [KVTIERD]\n"
	       "\n"
	       "Measure what grows with the number of blocks, against a kvtierd it\n"
	       "starts itself (KVTIERD, else $KVTIERD, else kvtierd from PATH): lookup\n"
	       "latency (batched lookups against a plain table in this process) and the\n"
	       "daemon's memory per block as the index grows, the recovery time of a\n"
	       "spill file holding N blocks, and the write-back of N dirty blocks\n"
	       "(against the same writes issued bare).  4 KiB blocks, the smallest slot.\n"
	       "Progress goes to stderr.\n"
	       "\n"
	       "Options:\n"
	       "  -n, --max N           largest index, blocks (default %llu); points at\n"
	       "                        10^3, 10^4, ... up to N\n"
	       "  -R, --recovery-max N  most blocks on disk (default %llu)\n"
	       "  -W, --writeback-max N most dirty blocks written back (default %llu)\n"
	       "  -p, --pairs N         samples per point (1..%d, default %u)\n"
	       "      --iters N         one-key lookups per sample (default %u)\n"
	       "      --batches N       1024-key lookups per sample (default %u)\n"
	       "  -d, --dir DIR         where the spill file goes (default %s)\n"
	       "      --eviction POLICY the index and write-back parts' [pool] eviction\n"
	       "                        (default: the daemon's), to measure a policy's\n"
	       "                        memory per block, or its write-back\n"
	       "      --no-index        skip the index part\n"
	       "      --no-recovery     skip the recovery part\n"
	       "      --no-writeback    skip the write-back part\n"
	       "  -j, --json            print one JSON line on stdout (the table goes to\n"
	       "                        stderr)\n"
	       "  -h, --help            show this help\n",
	       (unsigned long long)opt.max, (unsigned long long)opt.recovery_max,
	       (unsigned long long)opt.writeback_max, MAX_PAIRS,
	       opt.pairs, opt.iters, opt.batches, opt.dir);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"max", required_argument, NULL, 'n'},
		{"recovery-max", required_argument, NULL, 'R'},
		{"writeback-max", required_argument, NULL, 'W'},
		{"pairs", required_argument, NULL, 'p'},
		{"iters", required_argument, NULL, 'I'},
		{"batches", required_argument, NULL, 'B'},
		{"dir", required_argument, NULL, 'd'},
		{"eviction", required_argument, NULL, 'E'},
		{"no-index", no_argument, NULL, 'X'},
		{"no-recovery", no_argument, NULL, 'Y'},
		{"no-writeback", no_argument, NULL, 'Z'},
		{"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{},
	};
	int ch;

	while ((ch = getopt_long(argc, argv, "n:R:W:p:d:jh", opts, NULL)) >= 0) {
		switch (ch) {
		case 'n': opt.max = parse_u64(optarg, 1000, 1000000000, "--max"); break;
		case 'R': opt.recovery_max = parse_u64(optarg, 1000, 1000000000, "--recovery-max"); break;
		case 'W': opt.writeback_max = parse_u64(optarg, 1000, 1000000000, "--writeback-max"); break;
		case 'p': opt.pairs = (unsigned)parse_u64(optarg, 1, MAX_PAIRS, "--pairs"); break;
		case 'I': opt.iters = (unsigned)parse_u64(optarg, CHUNKS, 100000000, "--iters"); break;
		case 'B': opt.batches = (unsigned)parse_u64(optarg, CHUNKS, 100000000, "--batches"); break;
		case 'd': opt.dir = optarg; break;
		case 'E': opt.eviction = optarg; break;
		case 'X': opt.index = false; break;
		case 'Y': opt.recovery = false; break;
		case 'Z': opt.writeback = false; break;
		case 'j': opt.json = true; break;
		case 'h': help(); return 0;
		default: return bench_try_help();
		}
	}
	if (strlen(opt.dir) > 60) {
		fprintf(stderr, "bench-scale: --dir: at most 60 characters (the socket goes there)\n");
		return 2;
	}
	daemon_state.kvtierd = bench_kvtierd(argc, argv);

	bench_catch_signals(on_signal);
	cpus_probe();

	int r = bench_daemon_mkdir(&daemon_state, opt.dir, "kvt-bench-scale");
	if (r < 0)
		die("mkdtemp under %s: %s", opt.dir, strerror(-r));
	bench_daemon_path(&daemon_state, "spill", spill_path, sizeof(spill_path));
	bench_daemon_path(&daemon_state, "bare", bare_path, sizeof(bare_path));

	uint64_t t0 = kvt_now_ns();
	if (opt.index)
		index_run();
	if (opt.recovery)
		recovery_run();
	if (opt.writeback)
		writeback_run();
	progress("measured in %.1f s", (double)(kvt_now_ns() - t0) / 1e9);
	bench_daemon_remove(&daemon_state);

	bench_print(opt.json, print_table, print_json);
	return 0;
}
