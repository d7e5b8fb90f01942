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
 * median under load over B's median alone.  For lookup, stats and store,
 * A's process runs through the whole load and is paused and resumed, and
 * a pair is --rounds rounds of B alone, A alone and both, in turn forwards
 * and backwards, so that what the machine does over seconds falls on both
 * sides of each ratio; A's rate beside B over its rate alone is a pair's
 * second ratio, so that fairness is not bought with A's throughput.  For
 * evict, whose request is a single long one, and for exit, B's worst
 * latency while it runs is the figure, against B's worst alone over as
 * many lookups, and A runs in a process of its own each pair.
 *
 * B's latency alone depends on where the scheduler puts B and the daemon:
 * on one CPU a round trip is a switch, across CPUs a wakeup of an idle
 * CPU.  Every 16th lookup B notes whether the daemon's thread last ran
 * on B's CPU, and --pin places them: split (the daemon on one CPU, B and
 * A on the other) or same (the daemon and B on one CPU, A on the other).
 *
 * A measurement, not a test: it fails only when something does not work,
 * never because of a figure.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench-util.h"
#include "kvtier.h"

#define BLOCK_BYTES 4096ull /* 1 layer, K and V, 1 head of 128 bytes */
#define BIG 8192u           /* keys of A's lookups: the protocol's most */
#define MAX_PAIRS 50

const char bench_name[] = "bench-fair";

static struct bench_daemon dmn;
static unsigned n_pairs = 7, n_iters = 2000, n_rounds = 4;
enum pin { PIN_NONE, PIN_SPLIT, PIN_SAME, N_PINS };
static const char *const pin_name[] = {"none", "split", "same"};
static enum pin pin_mode = PIN_NONE;
static int cpu_0 = -1, cpu_1 = -1; /* the first two CPUs allowed */
static cpu_set_t initial_cpus;
static uint64_t n_blocks = 100000;

/* What A's process shares with B's: its orders and its progress. */
enum phase { PHASE_ALONE, PHASE_BESIDE, N_PHASES };
struct shared {
	atomic_int stop;
	atomic_int run;   /* 0: A waits (between requests) */
	atomic_int busy;  /* A's request under way */
	atomic_int phase; /* what A's requests count towards */
	atomic_int ready; /* A connected, its namespace open */
	atomic_uint_fast64_t done; /* requests finished */
	atomic_uint_fast64_t units; /* keys looked up, blocks evicted */
	atomic_uint_fast64_t ns;   /* time they took */
	/* By phase, requests that began and ended in it. */
	atomic_uint_fast64_t ph_done[N_PHASES], ph_units[N_PHASES], ph_ns[N_PHASES];
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
	/* A's units per second, alone and beside B, by pair */
	double a_alone[MAX_PAIRS], a_during[MAX_PAIRS], a_ratio[MAX_PAIRS];
	/* Of B's noted lookups, the share on the daemon's CPU */
	double same_alone[MAX_PAIRS], same_during[MAX_PAIRS];
	/* Turns cut a request of A's beside B, and a cut turn's work (us, -1
	 * when the daemon does not say) */
	double cuts_per_req[MAX_PAIRS], cut_turn_us[MAX_PAIRS];
	/* B's lookups a second, alone and beside A (back to back) */
	double b_rate_alone[MAX_PAIRS], b_rate_during[MAX_PAIRS];
	double a_rate_alone, a_rate_during; /* medians */
	bool paired_rate; /* a_* by pair */
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

/* ---- where the processes run ------------------------------------------ */

static void pin(pid_t pid, int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(pid, sizeof(set), &set) < 0)
		die("sched_setaffinity(%d): %s", (int)pid, strerror(errno));
}

static void cpus_probe(void)
{
	if (sched_getaffinity(0, sizeof(initial_cpus), &initial_cpus) < 0)
		die("sched_getaffinity: %s", strerror(errno));
	for (int i = 0; i < CPU_SETSIZE; i++)
		if (CPU_ISSET(i, &initial_cpus)) {
			if (cpu_0 < 0)
				cpu_0 = i;
			else if (cpu_1 < 0)
				cpu_1 = i;
		}
	if (pin_mode != PIN_NONE && cpu_1 < 0)
		die("--pin %s needs two CPUs", pin_name[pin_mode]);
}

/* The daemon's loop (its first thread) on the first CPU; B (and A, which
 * it forks, unless it moves itself) on the second (split) or the first
 * (same). */
static void place(void)
{
	if (pin_mode == PIN_NONE)
		return;
	pin(dmn.pid, cpu_0);
	pin(0, pin_mode == PIN_SPLIT ? cpu_1 : cpu_0);
}

/* Where the daemon's loop last ran, from /proc/PID/stat (field 39), or
 * -1. */
static int daemon_stat_fd = -1;

static int daemon_cpu(void)
{
	char buf[1024];
	ssize_t n = pread(daemon_stat_fd, buf, sizeof(buf) - 1, 0);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	char *p = strrchr(buf, ')');
	/* Field 3 (the state) follows the name; 39 is 36 fields on. */
	for (int f = 2; p && f < 39; f++)
		p = strchr(p + 1, ' ');
	return p ? atoi(p + 1) : -1;
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
	if (pin_mode == PIN_SAME)
		pin(0, cpu_1);
	atomic_store(&sh->ready, 1);
	while (!atomic_load(&sh->stop)) {
		/* Paused: asleep, not polling, so that B alone is alone.  Busy
		 * before run is read again: B sets run, then waits for busy. */
		atomic_store(&sh->busy, 1);
		if (!atomic_load(&sh->run)) {
			atomic_store(&sh->busy, 0);
			syscall(SYS_futex, &sh->run, FUTEX_WAIT, 0, NULL, NULL, 0);
			continue;
		}
		int phase = atomic_load(&sh->phase);
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
		uint64_t t1 = kvt_now_ns();
		atomic_fetch_add(&sh->ns, t1 - t0);
		atomic_fetch_add(&sh->units, units);
		atomic_fetch_add(&sh->done, 1);
		if (atomic_load(&sh->phase) == phase) {
			atomic_fetch_add(&sh->ph_ns[phase], t1 - t0);
			atomic_fetch_add(&sh->ph_units[phase], units);
			atomic_fetch_add(&sh->ph_done[phase], 1);
		}
		atomic_store(&sh->busy, 0);
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

/* A runs (run) or waits between requests (paused). */
static pid_t a_start(enum load load, char *sock_a, bool run)
{
	atomic_store(&sh->stop, 0);
	atomic_store(&sh->run, run);
	atomic_store(&sh->busy, 0);
	atomic_store(&sh->phase, PHASE_BESIDE);
	atomic_store(&sh->ready, 0);
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

static void futex_wake_all(atomic_int *w)
{
	syscall(SYS_futex, w, FUTEX_WAKE, 1 << 30, NULL, NULL, 0);
}

static void a_stop(pid_t pid)
{
	int status;
	atomic_store(&sh->stop, 1);
	atomic_store(&sh->run, 1);
	futex_wake_all(&sh->run);
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

struct loop_cuts {
	uint64_t cut, work_us;
	bool has_work; /* a kvtierd before turns_cut_work_us has not */
};

static int loop_cb(const kvt_record *r, void *userdata)
{
	struct loop_cuts *c = userdata;
	if (strcmp(kvt_record_kind(r), "loop"))
		return 0;
	kvt_record_get_u64(r, "turns_cut", &c->cut);
	c->has_work = kvt_record_get_u64(r, "turns_cut_work_us", &c->work_us) == 0;
	return 0;
}

/* The loop record's cuts so far (zeros from a kvtierd without it). */
static struct loop_cuts loop_cuts(void)
{
	struct loop_cuts c = {0};
	if (kvt_stats(admin, KVT_STATS_DAEMON, loop_cb, &c) < 0)
		die("stats: %s", kvt_client_error(admin));
	return c;
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

/* B's lookups of one sample, pooled over a pair's rounds. */
#define MAX_SAMPLE (1u << 20)
struct sample {
	double *v; /* microseconds */
	unsigned n;
	unsigned noted, same; /* lookups noted, of them on the daemon's CPU */
	double sum_us; /* their time in all */
};

/* B's one-key lookups until it has iters more of them and until the wait
 * is over, each appended to sm.  Every 16th, after its time is taken,
 * whether the daemon's loop last ran where B runs. */
static void b_collect(kvt_ns *ns, const uint8_t *key, enum until until, unsigned iters,
		      struct sample *sm)
{
	unsigned n = 0;
	uint64_t done0 = atomic_load(&sh->done);
	uint64_t q_want = until == UNTIL_QUARANTINED ? quarantined() + n_blocks : 0;
	uint8_t st;
	while ((n < iters || waiting(until, done0, q_want, n)) && sm->n < MAX_SAMPLE) {
		uint64_t t0 = kvt_now_ns();
		if (kvt_lookup(ns, key, 1, 0, &st) != 1)
			die("B's lookup of its stored block missed");
		sm->v[sm->n] = (double)(kvt_now_ns() - t0) / 1000.0;
		sm->sum_us += sm->v[sm->n++];
		if (++n % 16 == 0 && daemon_stat_fd >= 0) {
			int d = daemon_cpu();
			if (d >= 0) {
				sm->noted++;
				sm->same += d == sched_getcpu();
			}
		}
	}
}

/* Its median, 90th percentile and worst in microseconds. */
static void sample_stats(struct sample *sm, double *ret_p50, double *ret_p90, double *ret_worst)
{
	qsort(sm->v, sm->n, sizeof(double), cmp_double);
	*ret_p50 = sm->v[sm->n / 2];
	*ret_p90 = sm->v[sm->n * 9 / 10];
	*ret_worst = sm->v[sm->n - 1];
}

static double sample_same(const struct sample *sm)
{
	return sm->noted ? (double)sm->same / sm->noted : -1;
}

static double a_rate(void)
{
	uint64_t ns = atomic_load(&sh->ns);
	return ns ? (double)atomic_load(&sh->units) * 1e9 / (double)ns : 0;
}

static double a_phase_rate(enum phase ph)
{
	uint64_t ns = atomic_load(&sh->ph_ns[ph]);
	return ns ? (double)atomic_load(&sh->ph_units[ph]) * 1e9 / (double)ns : 0;
}

/* A stops after the request under way. */
static void a_pause(void)
{
	atomic_store(&sh->run, 0);
	while (atomic_load(&sh->busy))
		usleep(100);
}

static void a_resume(enum phase ph)
{
	atomic_store(&sh->phase, ph);
	atomic_store(&sh->run, 1);
	futex_wake_all(&sh->run);
}

/* Until A has finished `more` requests in phase ph (each begun in it). */
static void a_wait(enum phase ph, uint64_t from, uint64_t more)
{
	while (atomic_load(&sh->ph_done[ph]) < from + more)
		usleep(200);
}

/* One round of a pair: B alone, A alone, both; backwards every other
 * round.  A's requests are counted in the phase in which they began and
 * ended; B, beside A, asks until A has finished one there. */
static void round_trip(kvt_ns *nb, const uint8_t *kb, bool forward, unsigned iters,
		       struct sample *alone, struct sample *beside)
{
	uint64_t a0 = atomic_load(&sh->ph_done[PHASE_ALONE]);
	uint64_t b0 = atomic_load(&sh->ph_done[PHASE_BESIDE]);

	if (forward) {
		b_collect(nb, kb, UNTIL_ITERS, iters, alone);
		a_resume(PHASE_ALONE);
		a_wait(PHASE_ALONE, a0, 2);
		atomic_store(&sh->phase, PHASE_BESIDE);
		b_collect(nb, kb, UNTIL_ITERS, iters, beside);
		a_wait(PHASE_BESIDE, b0, 1);
		a_pause();
	} else {
		a_resume(PHASE_BESIDE);
		/* Under way before B asks. */
		while (!atomic_load(&sh->busy))
			;
		b_collect(nb, kb, UNTIL_ITERS, iters, beside);
		a_wait(PHASE_BESIDE, b0, 1);
		atomic_store(&sh->phase, PHASE_ALONE);
		a_wait(PHASE_ALONE, a0, 2);
		a_pause();
		b_collect(nb, kb, UNTIL_ITERS, iters, alone);
	}
}

static void run_load(enum load load, char *sock_a, kvt_ns *nb, const uint8_t *kb)
{
	struct result *r = &res[load];
	struct sample alone = {0}, beside = {0};
	double p50;

	enum until until = load == LOAD_EVICT  ? UNTIL_A_DONE
			   : load == LOAD_EXIT ? UNTIL_QUARANTINED
					       : UNTIL_ITERS;
	alone.v = malloc(MAX_SAMPLE * sizeof(double));
	beside.v = malloc(MAX_SAMPLE * sizeof(double));
	if (!alone.v || !beside.v)
		die("out of memory");

	if (until == UNTIL_ITERS) {
		/* A's process throughout, paused and resumed. */
		unsigned iters = n_iters / n_rounds ? n_iters / n_rounds : 1;
		pid_t a = a_start(load, sock_a, false);
		/* Connected before B's first sample alone. */
		while (!atomic_load(&sh->ready))
			usleep(1000);
		for (unsigned p = 0; p < n_pairs; p++) {
			progress("%s: pair %u of %u", load_name[load], p + 1, n_pairs);
			alone.n = alone.noted = alone.same = 0;
			beside.n = beside.noted = beside.same = 0;
			alone.sum_us = beside.sum_us = 0;
			for (int ph = 0; ph < N_PHASES; ph++) {
				atomic_store(&sh->ph_done[ph], 0);
				atomic_store(&sh->ph_units[ph], 0);
				atomic_store(&sh->ph_ns[ph], 0);
			}
			struct loop_cuts c0 = loop_cuts();
			for (unsigned k = 0; k < n_rounds; k++)
				round_trip(nb, kb, (p + k) % 2 == 0, iters, &alone, &beside);
			struct loop_cuts c1 = loop_cuts();
			uint64_t reqs = atomic_load(&sh->ph_done[PHASE_BESIDE]), cuts = c1.cut - c0.cut;
			r->cuts_per_req[p] = reqs ? (double)cuts / reqs : 0;
			r->cut_turn_us[p] = c1.has_work && cuts ? (double)(c1.work_us - c0.work_us) / cuts
								  : -1;
			r->b_rate_alone[p] = alone.n * 1e6 / alone.sum_us;
			r->b_rate_during[p] = beside.n * 1e6 / beside.sum_us;
			sample_stats(&alone, &r->alone_us[p], &r->p90_alone_us[p],
				     &r->worst_alone_us[p]);
			sample_stats(&beside, &r->during_us[p], &r->p90_during_us[p],
				     &r->worst_during_us[p]);
			r->ratio[p] = r->during_us[p] / r->alone_us[p];
			r->same_alone[p] = sample_same(&alone);
			r->same_during[p] = sample_same(&beside);
			r->a_alone[p] = a_phase_rate(PHASE_ALONE);
			r->a_during[p] = a_phase_rate(PHASE_BESIDE);
			r->a_ratio[p] = r->a_alone[p] > 0 ? r->a_during[p] / r->a_alone[p] : 0;
			progress("%s: pair %u: B p50 %.1f -> %.1f us (%.2fx), on the daemon's CPU "
				 "%.0f%% / %.0f%%; A %.2f -> %.2f (%.2fx), %.1f cuts a request, %.1f us "
				 "a cut turn",
				 load_name[load], p + 1, r->alone_us[p], r->during_us[p], r->ratio[p],
				 100 * r->same_alone[p], 100 * r->same_during[p],
				 r->a_alone[p] / load_scale[load], r->a_during[p] / load_scale[load],
				 r->a_ratio[p], r->cuts_per_req[p], r->cut_turn_us[p]);
		}
		a_stop(a);
		r->n = n_pairs;
		r->paired_rate = true;
		r->a_rate_alone = median(r->a_alone, n_pairs);
		r->a_rate_during = median(r->a_during, n_pairs);
		free(alone.v);
		free(beside.v);
		return;
	}
	double rates = 0;
	for (unsigned p = 0; p < n_pairs; p++) {
		progress("%s: pair %u of %u", load_name[load], p + 1, n_pairs);
		alone.n = alone.noted = alone.same = 0;
		beside.n = beside.noted = beside.same = 0;
		b_collect(nb, kb, UNTIL_ITERS, n_iters, &alone);
		sample_stats(&alone, &r->alone_us[p], &r->p90_alone_us[p], &r->worst_alone_us[p]);
		pid_t a = a_start(load, sock_a, true);
		b_collect(nb, kb, until, n_iters, &beside);
		a_stop(a);
		sample_stats(&beside, &p50, &r->p90_during_us[p], &r->worst_during_us[p]);
		rates += a_rate();
		r->during_us[p] = p50;
		r->ratio[p] = p50 / r->alone_us[p];
		r->same_alone[p] = sample_same(&alone);
		r->same_during[p] = sample_same(&beside);
	}
	r->n = n_pairs;
	r->a_rate_during = rates / n_pairs;
	free(alone.v);
	free(beside.v);
}

/* ---- output ------------------------------------------------------------ */

/* The q-quantile of n values (nearest rank). */
static double quantile(const double *v, unsigned n, double q)
{
	double w[MAX_PAIRS];
	memcpy(w, v, n * sizeof(double));
	qsort(w, n, sizeof(double), cmp_double);
	return w[(unsigned)(q * (n - 1) + 0.5)];
}

static unsigned count_above(const double *v, unsigned n, double limit)
{
	unsigned k = 0;
	for (unsigned i = 0; i < n; i++)
		k += v[i] > limit;
	return k;
}

static void print_table(FILE *out)
{
	char buf[96];
	fprintf(out, "\nB's one-key lookups beside tenant A (%llu blocks of A, %u pairs of %u lookups "
		"each side, %u rounds a pair, pinned: %s)\n\n",
		(unsigned long long)n_blocks, n_pairs, n_iters, n_rounds, pin_name[pin_mode]);
	fprintf(out, "| A does | B p50 alone (us) | B p50 beside A (us) | beside / alone | quartiles | pairs > 2x | B p90 alone / beside A (us) | B worst alone (us) | B worst beside A (us) | B on the daemon's CPU alone / beside | A's rate alone | A's rate beside B | A beside / alone | turns cut an A request | A's work a cut turn (us) | B's lookups/s alone / beside A |\n");
	fprintf(out, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
	for (int l = 0; l < N_LOADS; l++) {
		struct result *r = &res[l];
		if (!r->n)
			continue;
		fprintf(out, "| %s | %.1f | %.1f | %s | %.3f..%.3f | %u of %u | %.1f / %.1f | %.0f | %.0f | ",
			load_name[l], median(r->alone_us, r->n), median(r->during_us, r->n),
			ratio_range(r->ratio, r->n, buf, sizeof(buf)), quantile(r->ratio, r->n, 0.25),
			quantile(r->ratio, r->n, 0.75), count_above(r->ratio, r->n, 2.0), r->n,
			median(r->p90_alone_us, r->n), median(r->p90_during_us, r->n),
			median(r->worst_alone_us, r->n), median(r->worst_during_us, r->n));
		if (r->same_alone[0] >= 0)
			fprintf(out, "%.0f%% / %.0f%% | ", 100 * median(r->same_alone, r->n),
				100 * median(r->same_during, r->n));
		else
			fprintf(out, "- | ");
		const char *unit = load_unit[l];
		double scale = load_scale[l];
		if (r->a_rate_alone > 0)
			fprintf(out, "%.2f %s | ", r->a_rate_alone / scale, unit);
		else
			fprintf(out, "- | ");
		fprintf(out, "%.2f %s | ", r->a_rate_during / scale, unit);
		if (!r->paired_rate) {
			fprintf(out, "- | - | - | - |\n");
			continue;
		}
		fprintf(out, "%s | %.1f | ", ratio_range(r->a_ratio, r->n, buf, sizeof(buf)),
			median(r->cuts_per_req, r->n));
		if (vmin(r->cut_turn_us, r->n) >= 0)
			fprintf(out, "%.1f | ", median(r->cut_turn_us, r->n));
		else
			fprintf(out, "- | ");
		fprintf(out, "%.0f k / %.0f k |\n", median(r->b_rate_alone, r->n) / 1e3,
			median(r->b_rate_during, r->n) / 1e3);
	}
	fprintf(out, "\nBy pair (B p50 alone -> beside, ratio; B on the daemon's CPU alone / beside; A's ratio):\n");
	for (int l = 0; l < N_LOADS; l++) {
		struct result *r = &res[l];
		for (unsigned p = 0; p < r->n; p++)
			fprintf(out, "  %s %2u: %6.1f -> %6.1f us  %.3f  %3.0f%% / %3.0f%%  %.3f\n",
				load_name[l], p + 1, r->alone_us[p], r->during_us[p], r->ratio[p],
				100 * r->same_alone[p], 100 * r->same_during[p], r->a_ratio[p]);
	}
}

static void json_array(const char *name, const double *v, unsigned n)
{
	printf(",\"%s\":[", name);
	for (unsigned i = 0; i < n; i++)
		printf("%s%.4g", i ? "," : "", v[i]);
	printf("]");
}

static void print_json(void)
{
	printf("{\"blocks\":%llu,\"pairs\":%u,\"iters\":%u,\"rounds\":%u,\"pin\":\"%s\",\"loads\":{",
	       (unsigned long long)n_blocks, n_pairs, n_iters, n_rounds, pin_name[pin_mode]);
	bool first = true;
	for (int l = 0; l < N_LOADS; l++) {
		struct result *r = &res[l];
		if (!r->n)
			continue;
		printf("%s\"%s\":{\"alone_p50_us\":%.2f,\"beside_p50_us\":%.2f,\"ratio\":%.3f,"
		       "\"ratio_min\":%.3f,\"ratio_max\":%.3f,\"ratio_q1\":%.3f,\"ratio_q3\":%.3f,"
		       "\"pairs_above_2x\":%u,\"alone_p90_us\":%.2f,"
		       "\"beside_p90_us\":%.2f,\"alone_worst_us\":%.1f,"
		       "\"beside_worst_us\":%.1f,\"a_rate_alone\":%.1f,\"a_rate_beside\":%.1f,"
		       "\"same_cpu_alone\":%.3f,\"same_cpu_beside\":%.3f",
		       first ? "" : ",", load_name[l], median(r->alone_us, r->n),
		       median(r->during_us, r->n), median(r->ratio, r->n), vmin(r->ratio, r->n),
		       vmax(r->ratio, r->n), quantile(r->ratio, r->n, 0.25),
		       quantile(r->ratio, r->n, 0.75), count_above(r->ratio, r->n, 2.0),
		       median(r->p90_alone_us, r->n), median(r->p90_during_us, r->n),
		       median(r->worst_alone_us, r->n), median(r->worst_during_us, r->n),
		       r->a_rate_alone, r->a_rate_during, median(r->same_alone, r->n),
		       median(r->same_during, r->n));
		if (r->paired_rate)
			printf(",\"a_ratio\":%.3f,\"a_ratio_min\":%.3f,\"a_ratio_max\":%.3f,"
			       "\"cuts_per_request\":%.2f,\"cut_turn_us\":%.2f,"
			       "\"b_rate_alone\":%.1f,\"b_rate_beside\":%.1f",
			       median(r->a_ratio, r->n), vmin(r->a_ratio, r->n),
			       vmax(r->a_ratio, r->n), median(r->cuts_per_req, r->n),
			       vmin(r->cut_turn_us, r->n) >= 0 ? median(r->cut_turn_us, r->n) : -1.0,
			       median(r->b_rate_alone, r->n), median(r->b_rate_during, r->n));
		json_array("pair_alone_p50_us", r->alone_us, r->n);
		json_array("pair_beside_p50_us", r->during_us, r->n);
		json_array("pair_ratio", r->ratio, r->n);
		json_array("pair_same_cpu_alone", r->same_alone, r->n);
		json_array("pair_same_cpu_beside", r->same_during, r->n);
		if (r->paired_rate)
			json_array("pair_a_ratio", r->a_ratio, r->n);
		printf("}");
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
	       "  --rounds N   rounds a pair of lookup, stats and store: B alone, A alone and\n"
	       "               both, forwards and backwards in turn (default 4)\n"
	       "  --pin MODE   none (default); split: the daemon's loop on one CPU, B and A\n"
	       "               on another; same: the daemon's loop and B on one, A on another\n"
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
		{"rounds", required_argument, NULL, 'r'}, {"pin", required_argument, NULL, 'P'},
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
		case 'r':
			n_rounds = (unsigned)parse_u64(optarg, 1, 100, "--rounds");
			break;
		case 'P':
			for (pin_mode = 0; pin_mode < N_PINS; pin_mode++)
				if (!strcmp(optarg, pin_name[pin_mode]))
					break;
			if (pin_mode == N_PINS)
				die("--pin: none, split or same, not '%s'", optarg);
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
	cpus_probe();
	bench_daemon_start(&dmn, 120ull * 1000000000ull);
	place();
	char stat_path[64];
	snprintf(stat_path, sizeof(stat_path), "/proc/%d/stat", (int)dmn.pid);
	daemon_stat_fd = open(stat_path, O_RDONLY | O_CLOEXEC);
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
	if (daemon_stat_fd >= 0)
		close(daemon_stat_fd);
	bench_daemon_stop(&dmn);
	bench_daemon_remove(&dmn);
	bench_print(json, print_table, print_json);
	return 0;
}
