/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench-restart: how soon a restarted daemon serves the blocks it held.
 *
 * For each size from 1 GiB up to --max-gib (doubling), blocks of 2 MiB are
 * stored and written back to a spill file; then the daemon restarts twice:
 *
 *   kept   an upgrade in place (SIGUSR2): the same process re-executes the
 *          binary and adopts the host tier it kept (docs/reliability.md,
 *          Restarts); a crash under systemd adopts it the same way;
 *   NVMe   a stop and a start with [pool] keep = no: the blocks come back
 *          from the spill file only (foreground recovery, then staging).
 *
 * For each: the time from the restart to the first lookup answered, the
 * share of the blocks that lookup finds in host memory, and the time until
 * every block is loaded back into the client's memory (every byte
 * checked), against memcpy of the same bytes (the limit of a load from
 * host memory, measured in the same run).  Recompute is not measured: it
 * needs the model (Llama-3-8B's shape here) on a GPU.
 *
 * Then the ledger's cost on the store path: 4 KiB blocks stored (RESERVE,
 * copy, COMMIT) with [pool] keep = yes against keep = no, alternated over
 * --pairs pairs, as a ratio of stores per second.
 *
 * A measurement, not a test: it fails only when something does not work.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bench-util.h"
#include "kvtier.h"

#define BLOCK (2ull << 20) /* Llama-3-8B's 16 tokens in fp16 */
#define BATCH 64u
#define SMALL_BLOCKS 32768u
#define MAX_SIZES 8
#define MAX_PAIRS 21

const char bench_name[] = "bench-restart";

static struct bench_daemon dmn;
static unsigned max_gib = 4, n_pairs = 5;

struct restart {
	double serve_ms, hit_share, load_s;
};
struct size_result {
	uint64_t gib;
	double memcpy_s;
	struct restart kept, nvme;
	double adopt_ms;
};
static struct size_result sizes[MAX_SIZES];
static unsigned n_sizes;
static double store_ratio[MAX_PAIRS], stores_kept[MAX_PAIRS], stores_plain[MAX_PAIRS];

_Noreturn void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	bench_vsay(fmt, ap);
	va_end(ap);
	bench_daemon_abort(&dmn);
	exit(1);
}

static void on_signal(int sig)
{
	bench_daemon_kill(&dmn);
	bench_daemon_unlink(&dmn);
	_exit(128 + sig);
}

/* A namespace whose blocks are 2 MiB (1 layer, K and V, 16 tokens of one
 * head of 64 KiB), or 4 KiB (--small). */
static kvt_ns *open_ns(kvt_client *c, bool small)
{
	kvt_layer_group g = {.n_layers = 1, .attn = KVT_ATTN_MHA, .planes = 2, .kv_heads = 1,
			     .head_bytes = small ? 128 : 65536, .dtype = 1};
	static const uint8_t weights[16] = "bench-restart";
	kvt_ns_desc desc = {.model = small ? "small" : "restart", .weights = weights,
			    .weights_len = sizeof(weights), .layer_end = 1, .tp_size = 1,
			    .cp_size = 1, .block_tokens = 16, .n_groups = 1, .groups = &g};
	kvt_ns *ns = NULL;
	int r = kvt_ns_open(c, &desc, &ns);
	if (r < 0)
		die("ns open: %s %s", strerror(-r), kvt_client_error(c));
	return ns;
}

static void key_of(uint64_t i, uint8_t *key)
{
	uint32_t tok[2] = {(uint32_t)(i >> 32) ^ 0x7e57, (uint32_t)i};
	kvt_hash_block(NULL, tok, 2, NULL, 0, key);
}

/* The bytes of block i: a function of i. */
static void pattern(uint8_t *p, uint64_t i)
{
	uint64_t s = mix(i + 1);
	for (uint64_t o = 0; o < BLOCK; o += 8) {
		s = mix(s);
		memcpy(p + o, &s, 8);
	}
}

struct stat_query {
	const char *kind, *field;
	uint64_t v;
};

static int stat_cb(const kvt_record *r, void *userdata)
{
	struct stat_query *q = userdata;
	if (!strcmp(kvt_record_kind(r), q->kind))
		kvt_record_get_u64(r, q->field, &q->v);
	return 0;
}

static uint64_t stat_of(kvt_client *c, const char *kind, const char *field)
{
	struct stat_query q = {kind, field, 0};
	if (kvt_stats(c, KVT_STATS_ALL, stat_cb, &q) < 0)
		die("stats: %s", kvt_client_error(c));
	return q.v;
}

static void store_blocks(kvt_ns *ns, uint64_t n, uint8_t *buf)
{
	uint8_t keys[BATCH][KVT_KEY_BYTES];
	const void *srcs[BATCH];
	int32_t st[BATCH];

	for (uint64_t i = 0; i < n; i += BATCH) {
		uint32_t k = (uint32_t)(n - i < BATCH ? n - i : BATCH);
		for (uint32_t j = 0; j < k; j++) {
			key_of(i + j, keys[j]);
			pattern(buf + (uint64_t)j * BLOCK, i + j);
			srcs[j] = buf + (uint64_t)j * BLOCK;
		}
		int r = kvt_store(ns, 0, keys[0], k, srcs, st);
		if (r != (int)k)
			die("store of blocks %llu..: %d of %u", (unsigned long long)i, r, k);
	}
}

/* Every block loaded into buf (waiting for those on NVMe to be staged),
 * each checked.  \return the time it took, less the checks */
static uint64_t load_all(kvt_ns *ns, uint64_t n, uint8_t *buf, uint8_t *want)
{
	uint64_t t0 = kvt_now_ns(), checks = 0;

	uint8_t keys[BATCH][KVT_KEY_BYTES];
	void *dsts[BATCH];
	int32_t st[BATCH];

	for (uint64_t i = 0; i < n; i += BATCH) {
		uint32_t k = (uint32_t)(n - i < BATCH ? n - i : BATCH);
		for (uint32_t j = 0; j < k; j++) {
			key_of(i + j, keys[j]);
			dsts[j] = buf + (uint64_t)j * BLOCK;
		}
		for (uint32_t p = 0; p < k;) {
			int w = kvt_wait_resident(ns, keys[p], k - p, 600000);
			if (w <= 0)
				die("block %llu is not there after the restart (%d)",
				    (unsigned long long)(i + p), w);
			if (kvt_load(ns, 0, keys[p], (uint32_t)w, dsts + p, st + p) != w)
				die("load of blocks %llu..", (unsigned long long)(i + p));
			p += (uint32_t)w;
		}
		uint64_t c0 = kvt_now_ns();
		for (uint32_t j = 0; j < k; j++) {
			pattern(want, i + j);
			if (memcmp(buf + (uint64_t)j * BLOCK, want, BLOCK))
				die("block %llu: other bytes after the restart",
				    (unsigned long long)(i + j));
		}
		checks += kvt_now_ns() - c0;
	}
	return kvt_now_ns() - t0 - checks;
}

/* From t0: the first lookup of every key that is answered; its blocks in
 * host memory as a share; every block loaded. */
static void measure(struct restart *m, uint64_t t0, uint64_t n, uint8_t *buf, uint8_t *want)
{
	uint8_t *keys = malloc(n * KVT_KEY_BYTES), *states = malloc(n);
	kvt_client *c = NULL;

	if (!keys || !states)
		die("out of memory");
	for (uint64_t i = 0; i < n; i++)
		key_of(i, keys + i * KVT_KEY_BYTES);
	/* The first connection answered: a re-executing daemon's listening
	 * socket queues it meanwhile. */
	while (kvt_client_connect(dmn.socket, bench_name, &c) < 0)
		sleep_ns(1000000);
	kvt_ns *ns = open_ns(c, false);
	if (kvt_lookup(ns, keys, n, 0, states) < 0)
		die("lookup after the restart");
	m->serve_ms = (double)(kvt_now_ns() - t0) / 1e6;
	uint64_t host = 0;
	for (uint64_t i = 0; i < n; i++)
		host += states[i] == KVT_HOST;
	m->hit_share = (double)host / (double)n;
	/* From the restart: to the lookup, then the loads (the byte checks,
	 * the benchmark's own, left out). */
	m->load_s = (double)(kvt_now_ns() - t0) / 1e9;
	m->load_s += (double)load_all(ns, n, buf, want) / 1e9;
	kvt_ns_close(ns);
	kvt_client_free(c);
	free(keys);
	free(states);
}

static void config(uint64_t gib, bool keep)
{
	bench_daemon_config(&dmn,
			    "[pool]\ncapacity = %lluG\nextent_size = 256M\nkeep = %s\n"
			    "[nvme]\nwriteback_high = 0%%\nwriteback_low = 0%%\n"
			    "[spill.a]\npath = %s/spill\ncapacity = %lluG\n",
			    (unsigned long long)gib + 1, keep ? "yes" : "no", dmn.dir,
			    (unsigned long long)gib + 1);
}

static void run_size(struct size_result *sr, uint8_t *buf, uint8_t *want)
{
	uint64_t n = sr->gib * (1ull << 30) / BLOCK;

	config(sr->gib, true);
	bench_daemon_start(&dmn, 300ull * 1000000000ull);
	kvt_client *c = bench_daemon_connect(&dmn);
	kvt_ns *ns = open_ns(c, false);
	progress("%llu GiB: storing %llu blocks and writing them back",
		 (unsigned long long)sr->gib, (unsigned long long)n);
	store_blocks(ns, n, buf);
	while (stat_of(c, "daemon", "nvme_writes") < n || stat_of(c, "daemon", "nvme_in_flight"))
		sleep_ns(20000000);
	kvt_ns_close(ns);
	kvt_client_free(c);

	/* The limit: the same bytes copied from memory already populated. */
	uint8_t *src = alloc_populated(BATCH * BLOCK);
	uint64_t t = kvt_now_ns();
	for (uint64_t i = 0; i < n; i += BATCH)
		memcpy(buf, src, (n - i < BATCH ? n - i : BATCH) * BLOCK);
	sr->memcpy_s = (double)(kvt_now_ns() - t) / 1e9;
	munmap(src, BATCH * BLOCK);

	progress("%llu GiB: an upgrade in place", (unsigned long long)sr->gib);
	t = kvt_now_ns();
	kill(dmn.pid, SIGUSR2);
	measure(&sr->kept, t, n, buf, want);
	c = bench_daemon_connect(&dmn);
	sr->adopt_ms = (double)stat_of(c, "keep", "adopt_ms");
	kvt_client_free(c);

	progress("%llu GiB: a restart that keeps nothing (NVMe recovery)",
		 (unsigned long long)sr->gib);
	bench_daemon_stop(&dmn);
	config(sr->gib, false);
	t = kvt_now_ns();
	bench_daemon_start(&dmn, 600ull * 1000000000ull);
	measure(&sr->nvme, t, n, buf, want);
	bench_daemon_stop(&dmn);
	char spill[200];
	bench_daemon_path(&dmn, "spill", spill, sizeof(spill));
	unlink(spill);
}

/* Stores per second of SMALL_BLOCKS 4 KiB blocks, with keep or not. */
static double store_rate(bool keep)
{
	bench_daemon_config(&dmn, "[pool]\ncapacity = 512M\nextent_size = 256M\nkeep = %s\n"
				  "[limits]\nkeys_per_request = 8192\n",
			    keep ? "yes" : "no");
	bench_daemon_start(&dmn, 60ull * 1000000000ull);
	kvt_client *c = bench_daemon_connect(&dmn);
	kvt_ns *ns = open_ns(c, true);
	static uint8_t keys[SMALL_BLOCKS][KVT_KEY_BYTES];
	static const void *srcs[SMALL_BLOCKS];
	static int32_t st[SMALL_BLOCKS];
	static uint8_t data[4096];
	for (uint32_t i = 0; i < SMALL_BLOCKS; i++) {
		key_of(((uint64_t)1 << 40) + i, keys[i]);
		srcs[i] = data;
	}
	uint64_t t = kvt_now_ns();
	for (uint32_t i = 0; i < SMALL_BLOCKS; i += 8192)
		if (kvt_store(ns, 0, keys[i], 8192, srcs + i, st + i) != 8192)
			die("small stores");
	double rate = SMALL_BLOCKS / ((double)(kvt_now_ns() - t) / 1e9);
	kvt_ns_close(ns);
	kvt_client_free(c);
	bench_daemon_stop(&dmn);
	return rate;
}

static void print_table(FILE *out)
{
	fprintf(out, "%-6s %-9s | %-28s | %-28s | %s\n", "size", "memcpy", "kept: serve, host, all loaded",
		"NVMe: serve, host, all loaded", "kept adoption");
	for (unsigned i = 0; i < n_sizes; i++) {
		const struct size_result *s = &sizes[i];
		fprintf(out, "%2llu GiB %7.3f s | %7.1f ms %5.1f%% %7.3f s | %7.1f ms %5.1f%% %7.3f s | %.0f ms\n",
			(unsigned long long)s->gib, s->memcpy_s, s->kept.serve_ms,
			100 * s->kept.hit_share, s->kept.load_s, s->nvme.serve_ms,
			100 * s->nvme.hit_share, s->nvme.load_s, s->adopt_ms);
	}
	char r[64];
	fprintf(out, "store path, 4 KiB blocks: keep = yes %.0f k stores/s, keep = no %.0f k stores/s: %s (yes / no, %u pairs)\n",
		median(stores_kept, n_pairs) / 1e3, median(stores_plain, n_pairs) / 1e3,
		ratio_range(store_ratio, n_pairs, r, sizeof(r)), n_pairs);
}

static void print_json(void)
{
	printf("{\"sizes\":[");
	for (unsigned i = 0; i < n_sizes; i++) {
		const struct size_result *s = &sizes[i];
		printf("%s{\"gib\":%llu,\"memcpy_s\":%.4f,\"kept\":{\"serve_ms\":%.2f,\"host_share\":%.4f,\"loaded_s\":%.4f,\"adopt_ms\":%.0f},"
		       "\"nvme\":{\"serve_ms\":%.2f,\"host_share\":%.4f,\"loaded_s\":%.4f}}",
		       i ? "," : "", (unsigned long long)s->gib, s->memcpy_s, s->kept.serve_ms,
		       s->kept.hit_share, s->kept.load_s, s->adopt_ms, s->nvme.serve_ms,
		       s->nvme.hit_share, s->nvme.load_s);
	}
	printf("],\"pairs\":%u,\"store_ratio\":%.4f,\"store_ratio_min\":%.4f,\"store_ratio_max\":%.4f,"
	       "\"stores_kept\":%.0f,\"stores_plain\":%.0f}\n",
	       n_pairs, median(store_ratio, n_pairs), vmin(store_ratio, n_pairs),
	       vmax(store_ratio, n_pairs), median(stores_kept, n_pairs), median(stores_plain, n_pairs));
}

static void help(void)
{
	printf("Usage: bench-restart [OPTIONS] [KVTIERD]\n\n"
	       "How soon a restarted kvtierd serves its blocks: an upgrade in place that\n"
	       "keeps the host tier, against a restart that finds them on NVMe only; and\n"
	       "the ledger's cost on the store path.\n\n"
	       "  --max-gib N   the largest size, from 1 GiB doubling (default 4)\n"
	       "  --pairs N     pairs of the store-path comparison (default 5)\n"
	       "  --json        one JSON line on stdout, the table on stderr\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"max-gib", required_argument, NULL, 'm'}, {"pairs", required_argument, NULL, 'p'},
		{"json", no_argument, NULL, 'j'},          {"help", no_argument, NULL, 'h'},
		{0},
	};
	bool json = false;
	int o;

	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'm':
			max_gib = (unsigned)parse_u64(optarg, 1, 64, "--max-gib");
			break;
		case 'p':
			n_pairs = (unsigned)parse_u64(optarg, 1, MAX_PAIRS, "--pairs");
			break;
		case 'j':
			json = true;
			break;
		case 'h':
			help();
			return 0;
		default:
			return bench_try_help();
		}
	}
	dmn.kvtierd = bench_kvtierd(argc, argv);
	bench_catch_signals(on_signal);
	int r = bench_daemon_mkdir(&dmn, "/var/tmp", "kvt-bench-restart");
	if (r < 0)
		die("cannot make a directory in /var/tmp: %s", strerror(-r));
	uint8_t *buf = alloc_populated(BATCH * BLOCK), *want = alloc_populated(BLOCK);
	for (uint64_t g = 1; g <= max_gib && n_sizes < MAX_SIZES; g *= 2) {
		sizes[n_sizes].gib = g;
		run_size(&sizes[n_sizes++], buf, want);
	}
	for (unsigned p = 0; p < n_pairs; p++) {
		progress("store path: pair %u of %u", p + 1, n_pairs);
		/* Which goes first alternates: a warm cache favours neither. */
		if (p % 2) {
			stores_plain[p] = store_rate(false);
			stores_kept[p] = store_rate(true);
		} else {
			stores_kept[p] = store_rate(true);
			stores_plain[p] = store_rate(false);
		}
		store_ratio[p] = stores_kept[p] / stores_plain[p];
	}
	bench_print(json, print_table, print_json);
	bench_daemon_remove(&dmn);
	return 0;
}
