/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A long request does not stop other sessions: while one session's
 * ADMIN_EVICT of a namespace of many blocks is under way (the daemon
 * record's turns_waiting says a session waits for its next turn), another
 * session is served: its STATS that saw it, then lookups and a load of its
 * own block, byte-exact.  Progress, not time: whether the second session
 * sees the first under way depends on scheduling, so each attempt that
 * misses it (the eviction finished first) stores the blocks again and
 * tries once more; a daemon that runs a request whole never shows it.
 *
 * The same for the quarantine: a process that exits holding a lease on
 * each of A's blocks has them ended in parts, and a STATS between two
 * parts sees some of them ended and some not.
 *
 * And for lookups: while A's process floods 8192-key lookups, each
 * answered in parts, B's one-key lookups and loads come in; a turn of A's
 * that finds B's request ready ends there (the loop record's turns_cut
 * grows), and every one of A's replies still has each key's state, in
 * the order of its keys (a window that moves by a request, half its keys
 * stored and half never), while B's block loads byte-exact.
 *
 * And A keeps its turns beside a B that asks back to back: B's requests
 * cut A's turns, but none before a quantum of A's work (the loop record's
 * turns_cut_work_us is at least TURN_CUT_MIN_NSEC a cut turn), and A's
 * lookups keep being answered, a few of them while B asks.
 */
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "macro.h"

#define BLOCK 4096u /* 1 layer, K and V, 1 head of 128 bytes, 16 tokens */
#define N_A 40000u  /* the evicted namespace's blocks */
#define BATCH 8192u
#define ATTEMPTS 20
/* daemon/turns.h's TURN_CUT_MIN_NSEC, in µs: no turn is cut before it. */
#define CUT_MIN_US 15u

static struct daemon d;

static kvt_ns *open_4k(kvt_client *c, const char *model)
{
	kvt_layer_group g = {
		.n_layers = 1, .attn = KVT_ATTN_MHA, .planes = 2, .kv_heads = 1,
		.head_bytes = 128, .dtype = 1,
	};
	static const uint8_t weights[] = "test-fair";
	kvt_ns_desc desc = {
		.model = model, .weights = weights, .weights_len = sizeof(weights),
		.layer_end = 1, .tp_size = 1, .cp_size = 1, .block_tokens = 16,
		.n_groups = 1, .groups = &g,
	};
	kvt_ns *ns = NULL;
	int r = kvt_ns_open(c, &desc, &ns);
	CHECK(r == 0, "ns open %s: %s (%s)", model, strerror(-r), kvt_client_error(c));
	return ns;
}

static void key_of(uint8_t *key, uint32_t i, uint32_t who)
{
	memset(key, 0, 32);
	memcpy(key, &i, 4);
	memcpy(key + 4, &who, 4);
	key[31] = 0x5a;
}

static void store_a(kvt_ns *ns)
{
	static uint8_t keys[BATCH * 32], block[BLOCK];
	static const void *srcs[BATCH];
	static int32_t st[BATCH];
	for (uint32_t i = 0; i < BATCH; i++)
		srcs[i] = block;
	for (uint32_t i = 0; i < N_A;) {
		uint32_t n = N_A - i < BATCH ? N_A - i : BATCH;
		for (uint32_t j = 0; j < n; j++)
			key_of(keys + j * 32, i + j, 1);
		CHECK(kvt_store(ns, 0, keys, n, srcs, st) == (int)n, "A's store");
		i += n;
	}
}

static int tenant_cb(const kvt_record *r, void *userdata)
{
	if (!strcmp(kvt_record_kind(r), "tenant"))
		kvt_record_get_u64(r, "id", userdata);
	return 0;
}

/* A's process: one ADMIN_EVICT, its count on the pipe. */
static pid_t evict_in_child(uint32_t tenant, uint32_t ns_id, int *ret_fd)
{
	int p[2];
	CHECK(pipe(p) == 0, "pipe");
	pid_t pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		harness_in_child();
		close(p[0]);
		kvt_client *c = client_connect(&d, "evictor");
		int64_t n = kvt_admin_evict(c, tenant, ns_id, 1);
		_exit(write(p[1], &n, sizeof(n)) == sizeof(n) ? 0 : 1);
	}
	close(p[1]);
	*ret_fd = p[0];
	return pid;
}

/* A's process: a lease on each of A's blocks, a byte on the pipe, and an
 * exit holding them all. */
static pid_t lease_in_child(int *ret_fd)
{
	int p[2];
	CHECK(pipe(p) == 0, "pipe");
	pid_t pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		static uint8_t keys[BATCH * 32];
		static kvt_slot_ref refs[BATCH];
		harness_in_child();
		close(p[0]);
		kvt_client *c = client_connect(&d, "leaser");
		kvt_ns *ns = open_4k(c, "fair-a");
		for (uint32_t i = 0; i < N_A;) {
			uint32_t n = N_A - i < BATCH ? N_A - i : BATCH;
			for (uint32_t j = 0; j < n; j++)
				key_of(keys + j * 32, i + j, 1);
			CHECK(kvt_acquire(ns, 0, keys, n, refs) == (int)n, "the leaser's acquire");
			i += n;
		}
		_exit(write(p[1], "l", 1) == 1 ? 0 : 1);
	}
	close(p[1]);
	*ret_fd = p[0];
	return pid;
}

/* What A's looking process and B share: its progress, and B's word to stop. */
struct flood {
	atomic_uint lookups; /* A's lookups answered, every key checked */
	atomic_int stop;
};

/* The state A expects of key j of its lookup number r: odd positions are
 * keys never stored, even ones A's blocks from a window that moves. */
static void flood_key(uint8_t *key, uint32_t r, uint32_t j)
{
	if (j % 2)
		key_of(key, N_A + j, 1);
	else
		key_of(key, (r * 997 + j / 2) % N_A, 1);
}

/* A's process: 8192-key lookups until told to stop, each reply checked
 * key by key. */
static pid_t flood_in_child(struct flood *f)
{
	pid_t pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		static uint8_t keys[BATCH * 32], states[BATCH];
		harness_in_child();
		kvt_client *c = client_connect(&d, "flooder");
		kvt_ns *ns = open_4k(c, "fair-a");
		for (uint32_t r = 0; !atomic_load(&f->stop); r++) {
			for (uint32_t j = 0; j < BATCH; j++)
				flood_key(keys + j * 32, r, j);
			memset(states, 0xee, sizeof(states));
			int n = kvt_lookup(ns, keys, BATCH, 0, states);
			CHECK(n == 1, "A's lookup %u: %d leading hits, not 1", r, n);
			for (uint32_t j = 0; j < BATCH; j++)
				CHECK(states[j] == (j % 2 ? KVT_MISS : KVT_HOST),
				      "A's lookup %u: key %u came back %u", r, j, states[j]);
			atomic_fetch_add(&f->lookups, 1);
		}
		kvt_ns_close(ns);
		kvt_client_free(c);
		_exit(0);
	}
	return pid;
}

static bool readable(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	return poll(&p, 1, 0) == 1;
}

/* The loop's turns cut and their work in µs, of one moment: each is a
 * STATS request of its own while A floods, so they are read until the
 * cuts are the same before and after the work (the loop answers a STATS
 * whole, between turns). */
static uint64_t cuts_and_work(kvt_client *c, uint64_t *work)
{
	uint64_t cuts = stat_get(c, "loop", "turns_cut"), before;

	do {
		before = cuts;
		*work = stat_get(c, "loop", "turns_cut_work_us");
		cuts = stat_get(c, "loop", "turns_cut");
	} while (cuts != before);
	return cuts;
}

int main(void)
{
	daemon_start(&d, "[daemon]\nquarantine_ms = 50\n"
			 "[pool]\ncapacity = 192M\nextent_size = 64M\n"
			 "[limits]\nkeys_per_request = 8192\n");
	kvt_client *ca = client_connect(&d, "a");
	kvt_client *cb = client_connect(&d, "b");
	kvt_ns *na = open_4k(ca, "fair-a");
	kvt_ns *nb = open_4k(cb, "fair-b");
	kvt_ns_info info;
	uint64_t tenant = 0;
	CHECK(kvt_ns_get_info(na, &info) == 0, "ns info");
	CHECK(kvt_stats(cb, KVT_STATS_TENANTS, tenant_cb, &tenant) == 0, "stats");

	/* B's own block, whose bytes it checks while A's request runs. */
	uint8_t kb[32], want[BLOCK], got[BLOCK];
	key_of(kb, 0, 2);
	block_pattern(want, BLOCK, 2, kb);
	const void *src = want;
	void *dst = got;
	int32_t st;
	CHECK(kvt_store(nb, 0, kb, 1, &src, &st) == 1 && st == 0, "B's store");

	bool seen = false;
	int attempt;
	for (attempt = 1; attempt <= ATTEMPTS && !seen; attempt++) {
		store_a(na);
		int fd;
		pid_t pid = evict_in_child((uint32_t)tenant, info.ns_id, &fd);
		while (!readable(fd)) {
			if (stat_get(cb, "daemon", "turns_waiting") == 0)
				continue;
			/* A's one request is under way, and B is served. */
			seen = !readable(fd);
			for (int i = 0; i < 16; i++) {
				uint8_t state;
				CHECK(kvt_lookup(nb, kb, 1, 0, &state) == 1, "B's lookup");
			}
			memset(got, 0, sizeof(got));
			CHECK(kvt_load(nb, 0, kb, 1, &dst, &st) == 1 && st == 0, "B's load");
			CHECK(!memcmp(got, want, BLOCK), "B's block loads byte-exact");
			break;
		}
		int64_t n = 0;
		CHECK(read(fd, &n, sizeof(n)) == sizeof(n), "the evictor's count");
		close(fd);
		CHECK(wait_exit(pid) == 0, "the evictor exited");
		CHECK(n == N_A, "all %u of A's blocks evicted, not %lld", N_A, (long long)n);
	}
	CHECK(seen, "B was never served while A's eviction was under way (%d attempts)",
	      ATTEMPTS);
	fprintf(stderr, "B served during A's eviction at attempt %d; %llu turns, %llu yielded\n",
		attempt - 1, (unsigned long long)stat_get(cb, "daemon", "turns"),
		(unsigned long long)stat_get(cb, "daemon", "turns_yielded"));

	/* Nothing of A's is left, and B's block is. */
	uint8_t ka[32], state;
	key_of(ka, N_A / 2, 1);
	CHECK(kvt_lookup(na, ka, 1, 0, &state) == 0 && state == KVT_MISS, "A's block gone");
	CHECK(kvt_load(nb, 0, kb, 1, &dst, &st) == 1 && !memcmp(got, want, BLOCK), "B's block stays");

	/* An exited process's leases end in parts. */
	store_a(na);
	seen = false;
	for (attempt = 1; attempt <= ATTEMPTS && !seen; attempt++) {
		int fd;
		char c;
		pid_t pid = lease_in_child(&fd);
		CHECK(read(fd, &c, 1) == 1, "the leaser holds its leases");
		close(fd);
		CHECK(wait_exit(pid) == 0, "the leaser exited");
		uint64_t q0 = stat_get(cb, "daemon", "quarantined"), h;
		CHECK(stat_get(cb, "daemon", "handles") == N_A, "the leaser's %u leases held", N_A);
		/* Until the quarantine has ended them all: a STATS between
		 * two parts sees some, fewer than all. */
		uint64_t t0 = kvt_now_ns();
		while ((h = stat_get(cb, "daemon", "handles")) > 0) {
			seen |= h < N_A;
			CHECK(kvt_now_ns() - t0 < 120000000000ull, "the exited leaser's leases never ended");
		}
		CHECK(stat_get(cb, "daemon", "quarantined") == q0 + N_A,
		      "all %u leases ended by the quarantine", N_A);
	}
	CHECK(seen, "the quarantine ended the leases in one go (%d attempts)", ATTEMPTS);
	fprintf(stderr, "a STATS saw the quarantine under way at attempt %d\n", attempt - 1);
	CHECK(kvt_load(nb, 0, kb, 1, &dst, &st) == 1 && !memcmp(got, want, BLOCK), "B's block stays");

	/* A's lookups in parts, B's requests between them. */
	struct flood *f = mmap(NULL, sizeof(*f), PROT_READ | PROT_WRITE,
			       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK(f != MAP_FAILED, "mmap");
	pid_t pid = flood_in_child(f);
	while (atomic_load(&f->lookups) == 0)
		CHECK(kvt_lookup(nb, kb, 1, 0, &state) == 1, "B's lookup");
	uint64_t cut0 = stat_get(cb, "loop", "turns_cut");
	unsigned i, from = atomic_load(&f->lookups);
	/* Progress, not time: B asks until a turn of A's was cut for it and
	 * A has had two more replies, each checked. */
	for (i = 0; i < 1000000; i++) {
		CHECK(kvt_lookup(nb, kb, 1, 0, &state) == 1 && state == KVT_HOST, "B's lookup");
		if (i % 64)
			continue;
		memset(got, 0, sizeof(got));
		CHECK(kvt_load(nb, 0, kb, 1, &dst, &st) == 1 && !memcmp(got, want, BLOCK),
		      "B's block loads byte-exact beside A's lookups");
		if (stat_get(cb, "loop", "turns_cut") > cut0 && atomic_load(&f->lookups) >= from + 2)
			break;
	}
	CHECK(i < 1000000, "no turn of A's lookups ended for B's requests (%llu cut)",
	      (unsigned long long)(stat_get(cb, "loop", "turns_cut") - cut0));
	fprintf(stderr, "B's requests cut %llu turns of A's %u lookups (%u of B's)\n",
		(unsigned long long)(stat_get(cb, "loop", "turns_cut") - cut0),
		atomic_load(&f->lookups), i + 1);

	/* B back to back, lookups only: A is answered on, and each turn of
	 * A's that B cut had a quantum of work.  Progress, not time: until
	 * B has cut a few turns and A has had four more replies; A makes a
	 * part of progress a turn and B cuts at most one turn a request, so
	 * a bound on B's requests ends a daemon that starves A. */
	uint64_t work0, cuts = 0;
	cut0 = cuts_and_work(cb, &work0);
	from = atomic_load(&f->lookups);
	for (i = 0; i < 1000000; i++) {
		CHECK(kvt_lookup(nb, kb, 1, 0, &state) == 1 && state == KVT_HOST, "B's lookup");
		if (i % 64 == 0 && atomic_load(&f->lookups) >= from + 4 &&
		    (cuts = stat_get(cb, "loop", "turns_cut") - cut0) >= 4)
			break;
	}
	CHECK(i < 1000000, "A had %u replies and %llu turns cut beside B's %u back-to-back lookups",
	      atomic_load(&f->lookups) - from, (unsigned long long)cuts, i);
	uint64_t work;
	cuts = cuts_and_work(cb, &work) - cut0;
	work -= work0;
	/* The record's total is in whole µs: one short at most. */
	CHECK(work + 1 >= cuts * CUT_MIN_US,
	      "%llu turns cut after %llu us of work in all, under %u us each",
	      (unsigned long long)cuts, (unsigned long long)work, CUT_MIN_US);
	fprintf(stderr, "beside B's %u back-to-back lookups A had %u replies; %llu turns cut, "
		"%.1f us of work each\n", i + 1, atomic_load(&f->lookups) - from,
		(unsigned long long)cuts, (double)work / (double)cuts);
	atomic_store(&f->stop, 1);
	CHECK(wait_exit(pid) == 0, "A's lookups each came back key by key as stored");
	munmap(f, sizeof(*f));

	CHECK(kvt_admin_evict(cb, (uint32_t)tenant, info.ns_id, 1) == N_A,
	      "A's blocks, their leases ended, can be dropped");

	kvt_ns_close(na);
	kvt_ns_close(nb);
	kvt_client_free(ca);
	kvt_client_free(cb);
	daemon_stop(&d);
	daemon_cleanup(&d);
	return 0;
}
