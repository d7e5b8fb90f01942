/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The host tier outlives the daemon (docs/reliability.md, Restarts): the
 * pool's extents and the ledger go to the file descriptor store, played
 * here by the test as systemd plays it (harness.h, struct fdstore), and
 * to a binary re-executed in place (SIGUSR2).
 *
 *   kill -9     N blocks stored, a lease and a reservation open in a live
 *               client, a reservation in a client that dies: SIGKILL, and
 *               the daemon started again with what the store kept.  Every
 *               block loads back byte-exact from host memory; the live
 *               client releases its lease (the handle it holds still names
 *               it), its reservation commits as -ECANCELED and the key is
 *               a miss; the dead client's reservation ends after the
 *               quarantine.  Nothing is held at the end.
 *   SIGTERM     the same after a clean stop, as systemd 254's
 *               FileDescriptorStorePreserve= (or a Restart=) keeps the store.
 *   torn        one slot's record damaged in the ledger: that block is a
 *               miss, counted, the others load.
 *   upgrade     SIGUSR2 three times while a client stores and loads in a
 *               loop: the same pid serves on, the client never gets other
 *               bytes than a block's own, and every block it stored loads.
 *   NVMe        with a spill file, the blocks written back are adopted
 *               and their NVMe copies found by recovery are theirs: an
 *               eviction from host memory keeps them (clean), and they
 *               load from NVMe.
 *   keep = no   nothing adopted, and everything the store held is let go.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

#define N 2000u
#define BATCH 256u
#define BYTES 4096u

static const char *host_config =
	"[pool]\ncapacity = 64M\nextent_size = 16M\n"
	"[daemon]\nquarantine_ms = 100\n"
	"[limits]\nkeys_per_request = 256\n";

static uint8_t keys[N + 8][KVT_KEY_BYTES];

static void store_range(kvt_ns *ns, uint32_t from, uint32_t to, uint32_t tag)
{
	uint8_t *bufs = malloc((size_t)BATCH * BYTES);
	const void *srcs[BATCH];
	int32_t st[BATCH];

	CHECK(bufs, "out of memory");
	for (uint32_t i = from; i < to; i += BATCH) {
		uint32_t n = to - i < BATCH ? to - i : BATCH;
		for (uint32_t k = 0; k < n; k++) {
			block_pattern(bufs + (size_t)k * BYTES, BYTES, tag, keys[i + k]);
			srcs[k] = bufs + (size_t)k * BYTES;
		}
		CHECK(kvt_store(ns, 0, keys[i], n, srcs, st) == (int)n, "store %u..%u", i, i + n);
	}
	free(bufs);
}

/* Keys [from, to): how many hit, each with tag's bytes (else the test
 * fails); a miss is fine only where allowed. */
static uint32_t load_range(kvt_ns *ns, uint32_t from, uint32_t to, uint32_t tag)
{
	uint8_t *bufs = malloc((size_t)BATCH * BYTES), *want = malloc(BYTES);
	void *dsts[BATCH];
	int32_t st[BATCH];
	uint32_t hits = 0;

	CHECK(bufs && want, "out of memory");
	for (uint32_t i = from; i < to; i += BATCH) {
		uint32_t n = to - i < BATCH ? to - i : BATCH;
		for (uint32_t k = 0; k < n; k++)
			dsts[k] = bufs + (size_t)k * BYTES;
		load_staged(ns, keys[i], n, dsts, st);
		for (uint32_t k = 0; k < n; k++) {
			if (st[k] != 0)
				continue;
			block_pattern(want, BYTES, tag, keys[i + k]);
			CHECK(!memcmp(bufs + (size_t)k * BYTES, want, BYTES), "block %u: wrong bytes",
			      i + k);
			hits++;
		}
	}
	free(bufs);
	free(want);
	return hits;
}

/* A connection to the daemon, also while it re-executes: one accepted by
 * the image that exec replaces ends before its HELLO is answered. */
static kvt_client *connect_any(const struct daemon *d)
{
	kvt_client *c = NULL;
	int r = -1;
	for (int i = 0; i < 3000 && r != 0; i++) {
		r = kvt_client_connect(d->socket, "checker", &c);
		if (r != 0)
			usleep(20000);
	}
	CHECK(r == 0, "connect: %s", strerror(-r));
	return c;
}

static uint64_t keep_stat(const struct daemon *d, const char *field)
{
	kvt_client *c = connect_any(d);
	uint64_t v = stat_get(c, "keep", field);
	kvt_client_free(c);
	return v;
}

/* Blocks stored since this daemon started (0 before a namespace is). */
static uint64_t stores_now(const struct daemon *d)
{
	kvt_client *c = connect_any(d);
	uint64_t v = stat_sum(c, "namespace", "stores");
	kvt_client_free(c);
	return v;
}

/* A client process holding a lease on keys[0] and a reservation of
 * keys[N] (half written) across the restart; told to go on by a byte on
 * its pipe, it releases and commits, and writes the two statuses back. */
static pid_t holder(const struct daemon *d, int *ret_go, int *ret_result)
{
	int go[2], res[2];

	CHECK(pipe(go) == 0 && pipe(res) == 0, "pipes");
	pid_t pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		harness_in_child();
		close(go[1]);
		close(res[0]);
		kvt_client *c = client_connect(d, "holder");
		kvt_ns *ns = small_ns(c, "keep");
		kvt_slot_ref lease, resv;
		CHECK(kvt_acquire(ns, 0, keys[0], 1, &lease) == 1, "acquire");
		CHECK(kvt_reserve(ns, 0, keys[N], 1, &resv) == 1, "reserve");
		memset(resv.ptr, 0x5a, resv.bytes / 2);
		char b = 1;
		CHECK(write(res[1], &b, 1) == 1, "ready");
		CHECK(read(go[0], &b, 1) == 1, "go");
		/* The lease's bytes are still the block's. */
		uint8_t *want = malloc(BYTES);
		block_pattern(want, BYTES, 1, keys[0]);
		int32_t st[2] = {99, 99};
		st[0] = memcmp(lease.ptr, want, BYTES) ? -EBADMSG : 0;
		if (st[0] == 0)
			CHECK(kvt_release(c, &lease.handle, 1, &st[0]) == 0, "release call");
		/* The library reconnects after a back-off: a commit while
		 * it has not is -ENOTCONN, the handle still this client's. */
		uint8_t ok = 1;
		for (int i = 0; i < 3000; i++) {
			kvt_commit(c, &resv.handle, &ok, 1, &st[1]);
			if (st[1] != -ENOTCONN)
				break;
			usleep(20000);
		}
		CHECK(write(res[1], st, sizeof(st)) == sizeof(st), "result");
		free(want);
		kvt_ns_close(ns);
		kvt_client_free(c);
		_exit(0);
	}
	close(go[0]);
	close(res[1]);
	char b;
	CHECK(read(res[0], &b, 1) == 1, "holder ready");
	*ret_go = go[1];
	*ret_result = res[0];
	return pid;
}

/* A client that reserves keys[N + 1] and exits without committing. */
static void dead_reserver(const struct daemon *d)
{
	pid_t pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		harness_in_child();
		kvt_client *c = client_connect(d, "dead");
		kvt_ns *ns = small_ns(c, "keep");
		kvt_slot_ref r;
		CHECK(kvt_reserve(ns, 0, keys[N + 1], 1, &r) == 1, "reserve");
		_exit(0); /* no commit, no release */
	}
	CHECK(wait_exit(pid) == 0, "dead reserver");
}

static void crash_case(bool kill9)
{
	struct daemon d;
	struct fdstore s;

	daemon_start_stored(&d, host_config, &s);
	kvt_client *c = client_connect(&d, "writer");
	kvt_ns *ns = small_ns(c, "keep");
	store_range(ns, 0, N, 1);
	int go, result;
	pid_t h = holder(&d, &go, &result);
	if (kill9)
		dead_reserver(&d);
	kvt_ns_close(ns);
	kvt_client_free(c);
	if (kill9)
		daemon_kill(&d);
	else
		daemon_stop(&d);

	daemon_restart_stored(&d, host_config, &s);
	CHECK(keep_stat(&d, "adopted_blocks") == N, "%llu blocks adopted of %u",
	      (unsigned long long)keep_stat(&d, "adopted_blocks"), N);
	CHECK(keep_stat(&d, "adopted_leases") == 1, "the lease kept");
	CHECK(keep_stat(&d, "adopted_reservations") == (kill9 ? 2u : 1u), "the reservations kept");
	c = client_connect(&d, "reader");
	ns = small_ns(c, "keep");
	CHECK(stat_get(c, "namespace", "blocks") == N, "every block in host memory");
	CHECK(load_range(ns, 0, N, 1) == N, "every block loads back");

	char b = 1;
	int32_t st[2];
	CHECK(write(go, &b, 1) == 1, "go");
	CHECK(read(result, st, sizeof(st)) == sizeof(st), "holder result");
	CHECK(wait_exit(h) == 0, "holder");
	CHECK(st[0] == 0, "the kept lease: bytes and release (%d)", st[0]);
	CHECK(st[1] == -ECANCELED, "the kept reservation commits as -ECANCELED (%d)", st[1]);
	uint8_t state = 0xff;
	CHECK(kvt_lookup(ns, keys[N], 1, 0, &state) >= 0 && state == KVT_MISS,
	      "the half-written key is a miss");
	WAIT_FOR(stat_get(c, "daemon", "handles") == 0, "every kept handle to end");
	CHECK(stat_get(c, "namespace", "reserved") == 0, "nothing reserved");
	printf("%s: %u blocks adopted in %llu ms, the kept lease released, the reservations ended\n",
	       kill9 ? "kill -9" : "SIGTERM", N,
	       (unsigned long long)stat_get(c, "keep", "adopt_ms"));
	kvt_ns_close(ns);
	kvt_client_free(c);
	close(go);
	close(result);
	daemon_stop(&d);
	fdstore_close(&s);
	daemon_cleanup(&d);
}

static void kill9_case(void)
{
	crash_case(true);
}

static void sigterm_case(void)
{
	crash_case(false);
}

static void torn_case(void)
{
	struct daemon d;
	struct fdstore s;

	daemon_start_stored(&d, host_config, &s);
	kvt_client *c = client_connect(&d, "writer");
	kvt_ns *ns = small_ns(c, "keep");
	store_range(ns, 0, 64, 1);
	kvt_ns_close(ns);
	kvt_client_free(c);
	daemon_kill(&d);
	fdstore_drain(&s);
	/* One byte of slot 7's record, in the memfd the store holds. */
	int fd = -1;
	for (int i = 0; i < s.n; i++)
		if (!strcmp(s.names[i], "slots.0"))
			fd = s.fds[i];
	CHECK(fd >= 0, "the ledger of extent 0 is in the store");
	uint8_t *p = mmap(NULL, 4096 * 2, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(p != MAP_FAILED, "mmap");
	p[4096 + 7 * 64 + 20] ^= 0x40; /* in the key */
	munmap(p, 4096 * 2);
	daemon_restart_stored(&d, host_config, &s);
	CHECK(keep_stat(&d, "adopted_blocks") == 63, "63 of 64 adopted");
	CHECK(keep_stat(&d, "adopted_bad") == 1, "the damaged record counted");
	c = client_connect(&d, "reader");
	ns = small_ns(c, "keep");
	CHECK(load_range(ns, 0, 64, 1) == 63, "every block but the damaged one loads");
	uint8_t state = 0xff;
	CHECK(kvt_lookup(ns, keys[7], 1, 0, &state) >= 0 && state == KVT_MISS,
	      "the damaged one is a miss");
	kvt_ns_close(ns);
	kvt_client_free(c);
	daemon_stop(&d);
	fdstore_close(&s);
	daemon_cleanup(&d);
}

/* A client storing and loading in a loop until a byte arrives on stop:
 * exits 0 when it never saw other bytes, with how many blocks it stored
 * written on its pipe. */
static pid_t looper(const struct daemon *d, int *ret_stop, int *ret_result)
{
	int stop[2], res[2];

	CHECK(pipe(stop) == 0 && pipe(res) == 0, "pipes");
	pid_t pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		harness_in_child();
		close(stop[1]);
		close(res[0]);
		fcntl(stop[0], F_SETFL, O_NONBLOCK);
		kvt_client *c = client_connect(d, "looper");
		kvt_ns *ns = small_ns(c, "keep");
		uint8_t *buf = malloc(BYTES), *want = malloc(BYTES);
		uint32_t stored = 0;
		for (uint32_t round = 0;; round++) {
			char b;
			if (read(stop[0], &b, 1) >= 0)
				break; /* told to stop, or the test is gone */
			/* A new block, then every one stored so far. */
			if (stored < N) {
				int32_t st = -1;
				const void *src = buf;
				block_pattern(buf, BYTES, 2, keys[stored]);
				if (kvt_store(ns, 0, keys[stored], 1, &src, &st) == 1 && st == 0)
					stored++;
			}
			for (uint32_t i = 0; i < stored; i += 32) {
				uint32_t n = stored - i < 32 ? stored - i : 32;
				void *dsts[32];
				int32_t st[32];
				uint8_t *bufs = malloc((size_t)n * BYTES);
				for (uint32_t k = 0; k < n; k++)
					dsts[k] = bufs + (size_t)k * BYTES;
				int r = kvt_load(ns, 0, keys[i], n, dsts, st);
				for (uint32_t k = 0; r >= 0 && k < n; k++) {
					if (st[k] != 0)
						continue;
					block_pattern(want, BYTES, 2, keys[i + k]);
					if (memcmp(bufs + (size_t)k * BYTES, want, BYTES))
						_exit(1);
				}
				free(bufs);
			}
		}
		CHECK(write(res[1], &stored, sizeof(stored)) == sizeof(stored), "result");
		_exit(0);
	}
	close(stop[0]);
	close(res[1]);
	*ret_stop = stop[1];
	*ret_result = res[0];
	return pid;
}

static void upgrade_case(void)
{
	struct daemon d;
	struct fdstore s;

	daemon_start_stored(&d, host_config, &s);
	int stop, result;
	pid_t l = looper(&d, &stop, &result);
	pid_t pid = d.pid;
	for (int i = 0; i < 3; i++) {
		/* Some stores first (counted anew by each daemon), then the
		 * upgrade under them. */
		WAIT_FOR(stores_now(&d) >= 20, "the looper to store");
		kill(pid, SIGUSR2);
		WAIT_FOR(daemon_log_count(&d, "Adopted the host tier") == i + 1,
			 "the re-executed daemon to adopt");
		CHECK(waitpid(pid, NULL, WNOHANG) == 0, "the same process serves on");
	}
	char b = 1;
	uint32_t stored = 0;
	CHECK(write(stop, &b, 1) == 1, "stop");
	CHECK(read(result, &stored, sizeof(stored)) == sizeof(stored), "looper result");
	CHECK(wait_exit(l) == 0, "the looper got other bytes than a block's own");
	kvt_client *c = client_connect(&d, "reader");
	kvt_ns *ns = small_ns(c, "keep");
	CHECK(load_range(ns, 0, stored, 2) == stored, "every block the looper stored loads");
	printf("upgrade: 3 re-executions in place under a client; its %u blocks all load\n",
	       stored);
	kvt_ns_close(ns);
	kvt_client_free(c);
	close(stop);
	close(result);
	daemon_stop(&d);
	fdstore_close(&s);
	daemon_cleanup(&d);
}

static void nvme_case(void)
{
	struct daemon d;
	struct fdstore s;
	char config[512];

	snprintf(config, sizeof(config),
		 "%s[nvme]\nwriteback_high = 0%%\nwriteback_low = 0%%\n"
		 "[spill.a]\npath = @DIR@/spill0\ncapacity = 128M\n",
		 host_config);
	daemon_start_stored(&d, config, &s);
	kvt_client *c = client_connect(&d, "writer");
	kvt_ns *ns = small_ns(c, "keep");
	store_range(ns, 0, N, 1);
	WAIT_FOR(stat_get(c, "daemon", "nvme_writes") >= N &&
			 stat_get(c, "daemon", "nvme_in_flight") == 0,
		 "every block written back");
	kvt_ns_close(ns);
	kvt_client_free(c);
	daemon_kill(&d);
	daemon_restart_stored(&d, config, &s);
	c = client_connect(&d, "reader");
	ns = small_ns(c, "keep");
	CHECK(stat_get(c, "keep", "adopted_blocks") == N, "adopted");
	CHECK(stat_get(c, "daemon", "nvme_recovered") == N, "recovered on NVMe too");
	kvt_ns_info info;
	CHECK(kvt_ns_get_info(ns, &info) == 0, "info");
	int64_t ev = kvt_admin_evict(c, (uint32_t)stat_get(c, "tenant", "id"), info.ns_id, 0);
	CHECK(ev == N, "evicted %lld", (long long)ev);
	CHECK(stat_get(c, "namespace", "spilled") == N,
	      "every adopted block was clean: its NVMe copy is its own");
	CHECK(load_range(ns, 0, N, 1) == N, "every block loads back from NVMe");
	kvt_ns_close(ns);
	kvt_client_free(c);
	daemon_stop(&d);
	char path[300];
	snprintf(path, sizeof(path), "%s/spill0", d.dir);
	unlink(path);
	fdstore_close(&s);
	daemon_cleanup(&d);
}

static void keep_no_case(void)
{
	struct daemon d;
	struct fdstore s;
	char config[256];

	daemon_start_stored(&d, host_config, &s);
	kvt_client *c = client_connect(&d, "writer");
	kvt_ns *ns = small_ns(c, "keep");
	store_range(ns, 0, 64, 1);
	kvt_ns_close(ns);
	kvt_client_free(c);
	daemon_kill(&d);
	snprintf(config, sizeof(config), "%s[pool]\nkeep = no\n", host_config);
	daemon_restart_stored(&d, config, &s);
	CHECK(keep_stat(&d, "adopted_blocks") == 0 && keep_stat(&d, "kept") == 0,
	      "keep = no adopts and keeps nothing");
	fdstore_drain(&s);
	CHECK(s.n == 0, "everything the store held was let go (%d left)", s.n);
	daemon_stop(&d);
	fdstore_close(&s);
	daemon_cleanup(&d);
}

int main(void)
{
	/* KVT_CASE=name runs that case alone. */
	static const struct {
		const char *name;
		void (*run)(void);
	} cases[] = {{"kill9", kill9_case}, {"sigterm", sigterm_case}, {"torn", torn_case},
		     {"upgrade", upgrade_case}, {"nvme", nvme_case}, {"keep-no", keep_no_case}};
	const char *only = getenv("KVT_CASE");

	for (uint32_t i = 0; i < N + 8; i++)
		token_key(0x6ee9, i, keys[i]);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		if (!only || !strcmp(only, cases[i].name))
			cases[i].run();
	return 0;
}
