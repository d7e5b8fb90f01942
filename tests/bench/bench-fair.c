/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench-fair: what a tenant's heavy requests cost a neighbour.
 *
 * Tenant B asks for one key at a time (a one-key lookup of a stored
 * block, what an engine's scheduler does for every new request) while
 * tenant A, through a socket of its own and in a process of its own,
 * does one of:
 *
 *   lookup   8192-key lookups of its stored blocks, back to back;
 *   stats    full STATS (every record), back to back;
 *   evict    ADMIN_EVICT of its namespace of --blocks blocks (then stores
 *            them again, unmeasured, for the next pair);
 *   store    RESERVE, COMMIT and DELETE of 8192 new blocks, back to back;
 *   exit     leases on all its --blocks blocks, then its process exits
 *            holding them: kvtierd ends them all after the quarantine.
 *
 * The limit is B's own latency with A idle, measured in the same run and
 * alternated with the loaded one (--pairs pairs): each pair's ratio is B's
 * median under load over B's median alone.  For evict, whose request is a
 * single long one, and for exit, B's worst latency while it runs is the figure, against
 * B's worst alone over as many lookups.  A's own rate (keys/s of its
 * lookups, evictions/s) is reported alone and beside B, so that fairness
 * is not bought with A's throughput.
 *
 * A measurement, not a test: it fails only when something does not work,
 * never because of a figure.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench-util.h"
#include "kvtier.h"

#define BLOCK_BYTES 4096ull /* 1 layer, K and V, 1 head of 128 bytes */
#define BIG 8192u           /* keys of A's lookups: the protocol's most */
#define MAX_PAIRS 50

const char bench_name[] = "bench-fair";

static struct bench_daemon dmn;
static unsigned n_pairs = 7, n_iters = 2000;
static uint64_t n_blocks = 100000;

/* What A's process shares with B's: its orders and its progress. */
struct shared {
	atomic_int stop;
	atomic_uint_fast64_t done; /* requests finished */
	atomic_uint_fast64_t units; /* keys looked up, blocks evicted */
	atomic_uint_fast64_t ns;   /* time they took */
};
static struct shared *sh;
/* A's keys in the random order of its lookups, the first BIG again at the
 * end: any BIG in a row from the first n_blocks are a request. */
static uint8_t *ring_keys;


enum load { LOAD_LOOKUP, LOAD_STATS, LOAD_EVICT, LOAD_STORE, LOAD_EXIT, N_LOADS };
static const char *const load_name[] = {"lookup", "stats", "evict", "store", "exit"};
/* Units of A's rate, and their scale. */
static const char *const load_unit[] = {"M keys/s", "k/s", "M blocks/s", "M blocks/s",
					"M leases/s"};
static const double load_scale[] = {1e6, 1e3, 1e6, 1e6, 1e6};
#define QUARANTINE_MS 100

struct result {
	double alone_us[MAX_PAIRS], during_us[MAX_PAIRS], ratio[MAX_PAIRS];
	double worst_alone_us[MAX_PAIRS], worst_during_us[MAX_PAIRS];
	double p90_alone_us[MAX_PAIRS], p90_during_us[MAX_PAIRS];
	double a_rate_alone, a_rate_during; /* A's units per second */
	unsigned n;
};
static struct result res[N_LOADS];

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

/* Block i of who. */
static void make_key(uint8_t *key, uint64_t i, uint64_t who)
{
	make_keys(key, 1, i * 4 + who * 0x9e3779b97f4a7c15ull);
}

static kvt_client *connect_to(const char *sock)
{
	kvt_client *c = NULL;
	int r = kvt_client_connect(sock, bench_name, &c);
	if (r < 0)
		die("cannot connect to %s: %s", sock, strerror(-r));
	return c;
}

static kvt_ns *open_ns(kvt_client *c)
{
	return bench_ns_open(c, "bench-fair-4k", 1, 1, 128, BLOCK_BYTES);
}

/* Blocks [0, n) of who, from one source block. */
static void store_all(kvt_ns *ns, uint64_t n, uint64_t who)
{
	uint8_t *keys = calloc(BIG, KVT_KEY_BYTES);
	const void **srcs = calloc(BIG, sizeof(*srcs));
	int32_t *st = calloc(BIG, sizeof(*st));
	uint8_t *block = alloc_populated(BLOCK_BYTES);
	if (!keys || !srcs || !st)
		die("out of memory");
	fill_random(block, BLOCK_BYTES, who);
	for (unsigned i = 0; i < BIG; i++)
		srcs[i] = block;
	for (uint64_t i = 0; i < n;) {
		size_t k = n - i < BIG ? (size_t)(n - i) : BIG;
		for (size_t j = 0; j < k; j++)
			make_key(keys + j * KVT_KEY_BYTES, i + j, who);
		int r = kvt_store(ns, 0, keys, k, srcs, st);
		if (r != (int)k)
			die("kvt_store of %zu blocks stored %d", k, r);
		i += k;
	}
	free(keys);
	free(srcs);
	free(st);
	munmap(block, BLOCK_BYTES);
}

static int tenant_id_cb(const kvt_record *r, void *userdata)
{
	uint64_t *id = userdata;
	const char *name = kvt_record_get_str(r, "name");
	if (!strcmp(kvt_record_kind(r), "tenant") && name && !strcmp(name, "a"))
		kvt_record_get_u64(r, "id", id);
	return 0;
}

static int count_cb(const kvt_record *r, void *userdata)
{
	(*(uint64_t *)userdata)++;
	return 0;
}

/* ---- A: the heavy neighbour, in a process of its own ----------------- */

/* BIG new blocks reserved and committed (their bytes are not written: a
 * benchmark's), then deleted.  \return blocks */
static uint64_t store_delete(kvt_client *c, kvt_ns *ns, uint8_t *keys, uint64_t round)
{
	static kvt_slot_ref refs[BIG];
	static uint64_t handles[BIG];
	static uint8_t ok[BIG];
	static int32_t st[BIG];

	for (unsigned j = 0; j < BIG; j++)
		make_key(keys + j * KVT_KEY_BYTES, round * BIG + j, 3);
	int n = kvt_reserve(ns, 0, keys, BIG, refs);
	if (n != (int)BIG)
		die("A's reserve of %u blocks reserved %d", BIG, n);
	for (unsigned j = 0; j < BIG; j++) {
		handles[j] = refs[j].handle;
		ok[j] = 1;
	}
	if (kvt_commit(c, handles, ok, BIG, st) < 0)
		die("A's commit failed");
	n = kvt_delete(ns, keys, BIG);
	if (n != (int)BIG)
		die("A's delete of %u blocks deleted %d", BIG, n);
	return BIG;
}

/* A lease on each of A's blocks, never released.  \return leases */
static uint64_t lease_all(kvt_ns *ns, uint8_t *keys)
{
	static kvt_slot_ref refs[BIG];

	for (uint64_t i = 0; i < n_blocks;) {
		unsigned k = n_blocks - i < BIG ? (unsigned)(n_blocks - i) : BIG;
		for (unsigned j = 0; j < k; j++)
			make_key(keys + j * KVT_KEY_BYTES, i + j, 1);
		int n = kvt_acquire(ns, 0, keys, k, refs);
		if (n != (int)k)
			die("A's acquire of %u blocks acquired %d", k, n);
		i += k;
	}
	return n_blocks;
}

static void a_loop(enum load load, char sock_a[])
{
	kvt_client *c = connect_to(load == LOAD_EVICT ? dmn.socket : sock_a);
	kvt_client *ca = load == LOAD_EVICT ? connect_to(sock_a) : NULL;
	kvt_ns *ns = open_ns(ca ? ca : c);
	uint8_t *keys = calloc(BIG, KVT_KEY_BYTES), *states = calloc(BIG, 1);
	uint64_t tenant = 0, pos = 0;
	kvt_ns_info info;

	if (!keys || !states)
		die("out of memory");
	kvt_ns_get_info(ns, &info);
	if (load == LOAD_EVICT && kvt_stats(c, KVT_STATS_TENANTS, tenant_id_cb, &tenant) < 0)
		die("stats: %s", kvt_client_error(c));
	while (!atomic_load(&sh->stop)) {
		uint64_t t0 = kvt_now_ns(), units = 0;
		if (load == LOAD_LOOKUP) {
			/* Keys made before, so that A's process spends its
			 * time waiting for the daemon, not beside B on a CPU. */
			const uint8_t *k = ring_keys + (pos % n_blocks) * KVT_KEY_BYTES;
			pos += BIG;
			t0 = kvt_now_ns();
			int r = kvt_lookup(ns, k, BIG, 0, states);
			if (r < 0)
				die("A's lookup: %s", strerror(-r));
			units = BIG;
		} else if (load == LOAD_STORE) {
			units = store_delete(ca ? ca : c, ns, keys, pos++);
		} else if (load == LOAD_EXIT) {
			units = lease_all(ns, keys);
		} else if (load == LOAD_STATS) {
			uint64_t n = 0;
			if (kvt_stats(c, KVT_STATS_ALL, count_cb, &n) < 0)
				die("A's stats: %s", kvt_client_error(c));
			units = 1;
		} else {
			int64_t n = kvt_admin_evict(c, (uint32_t)tenant, info.ns_id, 1);
			if (n < 0)
				die("A's eviction: %s (%s)", strerror((int)-n), kvt_client_error(c));
			units = (uint64_t)n;
		}
		atomic_fetch_add(&sh->ns, kvt_now_ns() - t0);
		atomic_fetch_add(&sh->units, units);
		atomic_fetch_add(&sh->done, 1);
		if (load == LOAD_EXIT)
			_exit(0); /* holding every lease */
		if (load == LOAD_EVICT) {
			/* One eviction a pair: B watches it, then the blocks come
			 * back for the next. */
			while (!atomic_load(&sh->stop))
				usleep(1000);
			store_all(ns, n_blocks, 1);
		}
	}
	_exit(0);
}

static pid_t a_start(enum load load, char *sock_a)
{
	atomic_store(&sh->stop, 0);
	atomic_store(&sh->done, 0);
	atomic_store(&sh->units, 0);
	atomic_store(&sh->ns, 0);
	pid_t pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		a_loop(load, sock_a);
	}
	return pid;
}

static void a_stop(pid_t pid)
{
	int status;
	atomic_store(&sh->stop, 1);
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status))
		die("the neighbour's process failed (status %d)", status);
}

/* ---- B: one key at a time -------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static kvt_client *admin; /* B's view of the daemon record */

static int quarantined_cb(const kvt_record *r, void *userdata)
{
	if (!strcmp(kvt_record_kind(r), "daemon"))
		kvt_record_get_u64(r, "quarantined", userdata);
	return 0;
}

static uint64_t quarantined(void)
{
	uint64_t q = 0;
	if (kvt_stats(admin, KVT_STATS_DAEMON, quarantined_cb, &q) < 0)
		die("stats: %s", kvt_client_error(admin));
	return q;
}

/* What B waits for beyond its iters, so that A's long request is inside
 * the sample: A's next request done, or the daemon's quarantine over. */
enum until { UNTIL_ITERS, UNTIL_A_DONE, UNTIL_QUARANTINED };

static bool waiting(enum until until, uint64_t done0, uint64_t q_want, unsigned n)
{
	if (until == UNTIL_A_DONE)
		return atomic_load(&sh->done) == done0;
	/* Asked between lookups, every 32 of them, untimed. */
	return until == UNTIL_QUARANTINED && (n % 32 || quarantined() < q_want);
}

/* B's one-key lookups until it has iters of them and until the wait is
 * over.  Its median, 90th percentile and worst in microseconds. */
static void b_sample(kvt_ns *ns, const uint8_t *key, enum until until, double *ret_p50,
		     double *ret_p90, double *ret_worst)
{
	static double v[1u << 20];
	unsigned n = 0;
	uint64_t done0 = atomic_load(&sh->done);
	uint64_t q_want = until == UNTIL_QUARANTINED ? quarantined() + n_blocks : 0;
	uint8_t st;
	while (n < n_iters || (waiting(until, done0, q_want, n) && n < sizeof(v) / sizeof(v[0]))) {
		uint64_t t0 = kvt_now_ns();
		if (kvt_lookup(ns, key, 1, 0, &st) != 1)
			die("B's lookup of its stored block missed");
		v[n++] = (double)(kvt_now_ns() - t0) / 1000.0;
	}
	qsort(v, n, sizeof(double), cmp_double);
	*ret_p50 = v[n / 2];
	*ret_p90 = v[n * 9 / 10];
	*ret_worst = v[n - 1];
}

static double a_rate(void)
{
	uint64_t ns = atomic_load(&sh->ns);
	return ns ? (double)atomic_load(&sh->units) * 1e9 / (double)ns : 0;
}

static void run_load(enum load load, char *sock_a, kvt_ns *nb, const uint8_t *kb)
{
	struct result *r = &res[load];
	double p50, p90, worst;

	enum until until = load == LOAD_EVICT  ? UNTIL_A_DONE
			   : load == LOAD_EXIT ? UNTIL_QUARANTINED
					       : UNTIL_ITERS;

	/* A alone, for its own rate. */
	if (until == UNTIL_ITERS) {
		pid_t a = a_start(load, sock_a);
		while (atomic_load(&sh->done) < 20)
			usleep(1000);
		a_stop(a);
		r->a_rate_alone = a_rate();
	}
	double rates = 0;
	for (unsigned p = 0; p < n_pairs; p++) {
		progress("%s: pair %u of %u", load_name[load], p + 1, n_pairs);
		b_sample(nb, kb, UNTIL_ITERS, &r->alone_us[p], &r->p90_alone_us[p],
			 &r->worst_alone_us[p]);
		pid_t a = a_start(load, sock_a);
		if (until == UNTIL_ITERS)
			while (atomic_load(&sh->done) == 0)
				usleep(100);
		b_sample(nb, kb, until, &p50, &p90, &worst);
		a_stop(a);
		rates += a_rate();
		r->during_us[p] = p50;
		r->p90_during_us[p] = p90;
		r->worst_during_us[p] = worst;
		r->ratio[p] = p50 / r->alone_us[p];
	}
	r->n = n_pairs;
	r->a_rate_during = rates / n_pairs;
}

/* ---- output ------------------------------------------------------------ */

static void print_table(FILE *out)
{
	char buf[96];
	fprintf(out, "\nB's one-key lookups beside tenant A (%llu blocks of A, %u pairs of %u lookups)\n\n",
		(unsigned long long)n_blocks, n_pairs, n_iters);
	fprintf(out, "| A does | B p50 alone (us) | B p50 beside A (us) | beside / alone | B p90 alone / beside A (us) | B worst alone (us) | B worst beside A (us) | A's rate alone | A's rate beside B |\n");
	fprintf(out, "|---|---|---|---|---|---|---|---|---|\n");
	for (int l = 0; l < N_LOADS; l++) {
		struct result *r = &res[l];
		if (!r->n)
			continue;
		fprintf(out, "| %s | %.1f | %.1f | %s | %.1f / %.1f | %.0f | %.0f | ", load_name[l],
			median(r->alone_us, r->n), median(r->during_us, r->n),
			ratio_range(r->ratio, r->n, buf, sizeof(buf)), median(r->p90_alone_us, r->n),
			median(r->p90_during_us, r->n), median(r->worst_alone_us, r->n),
			median(r->worst_during_us, r->n));
		const char *unit = load_unit[l];
		double scale = load_scale[l];
		if (r->a_rate_alone > 0)
			fprintf(out, "%.2f %s | ", r->a_rate_alone / scale, unit);
		else
			fprintf(out, "- | ");
		fprintf(out, "%.2f %s |\n", r->a_rate_during / scale, unit);
	}
}

static void print_json(void)
{
	printf("{\"blocks\":%llu,\"pairs\":%u,\"iters\":%u,\"loads\":{", (unsigned long long)n_blocks,
	       n_pairs, n_iters);
	bool first = true;
	for (int l = 0; l < N_LOADS; l++) {
		struct result *r = &res[l];
		if (!r->n)
			continue;
		printf("%s\"%s\":{\"alone_p50_us\":%.2f,\"beside_p50_us\":%.2f,\"ratio\":%.3f,"
		       "\"ratio_min\":%.3f,\"ratio_max\":%.3f,\"alone_p90_us\":%.2f,"
		       "\"beside_p90_us\":%.2f,\"alone_worst_us\":%.1f,"
		       "\"beside_worst_us\":%.1f,\"a_rate_alone\":%.1f,\"a_rate_beside\":%.1f}",
		       first ? "" : ",", load_name[l], median(r->alone_us, r->n),
		       median(r->during_us, r->n), median(r->ratio, r->n), vmin(r->ratio, r->n),
		       vmax(r->ratio, r->n), median(r->p90_alone_us, r->n),
		       median(r->p90_during_us, r->n), median(r->worst_alone_us, r->n),
		       median(r->worst_during_us, r->n), r->a_rate_alone, r->a_rate_during);
		first = false;
	}
	printf("}}\n");
}

static void help(void)
{
	printf("Usage: bench-fair [OPTIONS] [KVTIERD]\n"
	       "B's one-key lookups, alone and beside a tenant A that floods the daemon with\n"
	       "8192-key lookups, full STATS, or 8192-block stores and deletes, evicts a\n"
	       "namespace of --blocks blocks, or exits holding a lease on each of them.\n\n"
	       "  --blocks N   A's blocks of 4 KiB (default 100000)\n"
	       "  --pairs N    alone/beside pairs per load (default 7, at most %d)\n"
	       "  --iters N    B's lookups per sample (default 2000)\n"
	       "  --load LIST  lookup,stats,evict,store,exit (default all)\n"
	       "  --json       one JSON line on stdout, the table on stderr\n"
	       "  --help       this text\n\n"
	       "KVTIERD: the daemon to run (default $KVTIERD, else kvtierd on PATH); an older\n"
	       "build's gives the figures before a change.\n",
	       MAX_PAIRS);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"blocks", required_argument, NULL, 'b'}, {"pairs", required_argument, NULL, 'p'},
		{"iters", required_argument, NULL, 'i'},  {"load", required_argument, NULL, 'l'},
		{"json", no_argument, NULL, 'j'},         {"help", no_argument, NULL, 'h'},
		{0},
	};
	bool json = false, want[N_LOADS] = {true, true, true, true, true};
	int o;

	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'b':
			n_blocks = parse_u64(optarg, BIG, 2000000, "--blocks");
			break;
		case 'p':
			n_pairs = (unsigned)parse_u64(optarg, 1, MAX_PAIRS, "--pairs");
			break;
		case 'i':
			n_iters = (unsigned)parse_u64(optarg, 10, 100000, "--iters");
			break;
		case 'l':
			for (int l = 0; l < N_LOADS; l++)
				want[l] = strstr(optarg, load_name[l]) != NULL;
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
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (sh == MAP_FAILED)
		die("mmap: %s", strerror(errno));

	int r = bench_daemon_mkdir(&dmn, "/tmp", "kvt-bench-fair");
	if (r < 0)
		die("cannot make a directory in /tmp: %s", strerror(-r));
	char sock_a[160], sock_b[160];
	bench_daemon_path(&dmn, "a.sock", sock_a, sizeof(sock_a));
	bench_daemon_path(&dmn, "b.sock", sock_b, sizeof(sock_b));
	uint64_t pool = (n_blocks * BLOCK_BYTES + (64ull << 20)) / (64ull << 20) * (64ull << 20) +
			(64ull << 20);
	bench_daemon_config(&dmn,
			    "[pool]\ncapacity = %llu\nextent_size = 64M\n"
			    "[daemon]\nquarantine_ms = %u\n"
			    "[limits]\nkeys_per_request = %u\nhandles_per_tenant = %llu\n"
			    "[tenant.a]\nsocket = %s\nquota = %llu\n"
			    "[tenant.b]\nsocket = %s\nquota = 64M\n",
			    (unsigned long long)pool, QUARANTINE_MS, BIG,
			    (unsigned long long)(n_blocks + 2 * BIG), sock_a,
			    (unsigned long long)(pool - (64ull << 20)), sock_b);
	bench_daemon_start(&dmn, 120ull * 1000000000ull);
	/* kvtierd binds the tenants' sockets before its main one; an older
	 * one, run for the figures before a change, after it. */
	bench_daemon_wait_socket(&dmn, sock_a, kvt_now_ns(), 120ull * 1000000000ull);
	bench_daemon_wait_socket(&dmn, sock_b, kvt_now_ns(), 120ull * 1000000000ull);

	progress("storing A's %llu blocks", (unsigned long long)n_blocks);
	kvt_client *ca = connect_to(sock_a);
	kvt_ns *na = open_ns(ca);
	store_all(na, n_blocks, 1);
	admin = connect_to(dmn.socket);
	kvt_client *cb = connect_to(sock_b);
	kvt_ns *nb = open_ns(cb);
	uint8_t kb[KVT_KEY_BYTES];
	store_all(nb, 1, 2);
	make_key(kb, 0, 2);

	/* A looks its blocks up in a random order, all over the index. */
	uint64_t *ring = malloc(n_blocks * sizeof(*ring));
	if (!ring)
		die("out of memory");
	for (uint64_t i = 0; i < n_blocks; i++)
		ring[i] = i;
	for (uint64_t i = n_blocks; i-- > 1;) {
		uint64_t j = mix(i) % (i + 1), t = ring[i];
		ring[i] = ring[j];
		ring[j] = t;
	}
	ring_keys = malloc((n_blocks + BIG) * KVT_KEY_BYTES);
	if (!ring_keys)
		die("out of memory");
	for (uint64_t i = 0; i < n_blocks + BIG; i++)
		make_key(ring_keys + i * KVT_KEY_BYTES, ring[i % n_blocks], 1);
	free(ring);
	for (int l = 0; l < N_LOADS; l++)
		if (want[l])
			run_load((enum load)l, sock_a, nb, kb);

	free(ring_keys);
	kvt_ns_close(nb);
	kvt_ns_close(na);
	kvt_client_free(cb);
	kvt_client_free(ca);
	kvt_client_free(admin);
	bench_daemon_stop(&dmn);
	bench_daemon_remove(&dmn);
	bench_print(json, print_table, print_json);
	return 0;
}
