/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Crash loops of clients.  Each cycle starts a few kvt-engine processes,
 * chosen at random, and SIGKILLs them at a random moment:
 *
 *   store  serves a request (shared prefix, private suffix) and stores it,
 *          while write-back to NVMe runs (low watermarks), so clients die
 *          mid-store, mid-load and mid-spill;
 *   hold   reserves its blocks and half-writes them (mid-reservation);
 *   pin    acquires leases on a shared prefix and keeps them (mid-load);
 *   load   looks up and loads a shared prefix, staging it from NVMe.
 *
 * Every few cycles (and after the loop) the dead clients' quarantine must
 * have ended everything they held: no handle, no reserved block, no host
 * slot outside a resident block, the daemon's descriptors back to its
 * baseline; and a verifier loads every block that is visible, from either
 * tier, and finds exactly the bytes derived from its key.  A half-written
 * reservation is never visible.  Every tenth cycle the daemon itself is
 * SIGKILLed among the clients and restarted, and the same checks hold for
 * the new instance.
 *
 * 100 cycles by default (a few seconds here), 500 with KVT_LONG=1.  The
 * choices and kill points come from a seeded generator: the seed is
 * printed, KVT_SEED replays it.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine-request.h"
#include "harness.h"

#define CHECK_EVERY 5  /* cycles between checkpoints */
#define DAEMON_EVERY 10 /* cycles between daemon kills */
#define SHARED_SEEDS 8  /* shared prompt prefixes in use at once */
#define MAX_CLIENTS 4   /* per cycle */
#define BATCH 64        /* keys per verifier request */

static const char config[] =
	/* 256 host slots of 32 KiB; every committed block is written back
	 * at once, so write-back runs whenever the clients store. */
	"[pool]\ncapacity = 8M\nextent_size = 2M\n"
	"[nvme]\nwriteback_high = 0%\nwriteback_low = 0%\n"
	"[spill.a]\npath = @DIR@/spill0\ncapacity = 128M\n";

static struct daemon d;
static uint64_t rng;

static uint64_t rnd(uint64_t n)
{
	rng = mix(rng);
	return rng % n;
}

/* Every request any client made: what the verifier looks for. */
struct request {
	uint64_t prefix_seed, suffix_seed;
	uint32_t prefix, suffix;
};
static struct request *requests;
static size_t n_requests, cap_requests;

static void remember(uint64_t prefix_seed, uint32_t prefix, uint64_t suffix_seed,
		     uint32_t suffix)
{
	if (n_requests == cap_requests) {
		cap_requests = cap_requests ? 2 * cap_requests : 64;
		requests = realloc(requests, cap_requests * sizeof(*requests));
		CHECK(requests, "out of memory");
	}
	requests[n_requests++] = (struct request){prefix_seed, suffix_seed, prefix, suffix};
}

/* Keys of held (half-written, never committed) reservations. */
static uint8_t *held_keys;
static size_t n_held, cap_held;

/* The daemon instance's figures, taken with only the checker connected. */
struct baseline {
	int fds;
	int pool_fds; /* pool_descriptors() */
	uint64_t quarantined_min; /* handles known to have been held at a kill */
	uint64_t confirmed;       /* of those, checked at a checkpoint */
};

/* Handles held at a kill and seen ended by quarantine, all instances. */
static uint64_t quarantine_confirmed;

struct sums {
	uint64_t host, disk, miss, bytes;
};

static int cmp_key(const void *a, const void *b)
{
	return memcmp(a, b, 32);
}

struct ns_totals {
	uint64_t resident_bytes, reserved;
};

static int ns_cb(const kvt_record *r, void *userdata)
{
	struct ns_totals *t = userdata;
	uint64_t v;
	if (strcmp(kvt_record_kind(r), "namespace"))
		return 0;
	if (kvt_record_get_u64(r, "bytes", &v) == 0)
		t->resident_bytes += v;
	if (kvt_record_get_u64(r, "reserved", &v) == 0)
		t->reserved += v;
	return 0;
}

/* Host bytes held by something other than a resident block: reservations,
 * blocks leased after they were dropped, blocks being staged. */
static int64_t pinned_bytes(kvt_client *c)
{
	struct ns_totals t = {0, 0};
	CHECK(kvt_stats(c, KVT_STATS_ALL, ns_cb, &t) == 0, "stats");
	return (int64_t)stat_sum(c, "tenant", "used") - (int64_t)t.resident_bytes;
}

static uint64_t reserved_blocks(kvt_client *c)
{
	struct ns_totals t = {0, 0};
	CHECK(kvt_stats(c, KVT_STATS_ALL, ns_cb, &t) == 0, "stats");
	return t.reserved;
}

/* Load every visible block among keys[n] (unique) and compare its bytes. */
static void verify_batch(kvt_ns *ns, const uint8_t *keys, uint32_t n, uint8_t *bufs,
			 uint8_t *want, uint64_t shard_bytes, struct sums *sum)
{
	const struct engine_model *m = engine_model_find("tiny");
	uint8_t todo[BATCH], ondisk[BATCH], st[BATCH], k[BATCH * 32];
	uint32_t idx[BATCH];
	void *dsts[BATCH];
	int32_t lst[BATCH];
	uint32_t left = n;

	memset(todo, 1, n);
	memset(ondisk, 0, n);
	/* A block evicted between the lookup and the load, or still being
	 * staged from NVMe, is looked up again; every round ends some keys
	 * or waits for staging, and the bound only stops a hang. */
	for (int round = 0; left && round < 1500; round++) {
		uint32_t m_keys = 0;
		for (uint32_t i = 0; i < n; i++)
			if (todo[i]) {
				idx[m_keys] = i;
				memcpy(k + (size_t)m_keys * 32, keys + (size_t)i * 32, 32);
				m_keys++;
			}
		CHECK(kvt_lookup(ns, k, m_keys, 0, st) >= 0, "lookup");
		uint32_t n_load = 0, staging = 0;
		uint8_t lk[BATCH * 32];
		uint32_t lidx[BATCH];
		for (uint32_t j = 0; j < m_keys; j++) {
			CHECK(st[j] != KVT_PENDING,
			      "a reservation outlived its client's quarantine");
			if (st[j] == KVT_MISS) {
				todo[idx[j]] = 0;
				left--;
				sum->miss++;
			} else if (st[j] == KVT_DISK) {
				/* The lookup started staging it. */
				ondisk[idx[j]] = 1;
				staging++;
			} else {
				lidx[n_load] = idx[j];
				memcpy(lk + (size_t)n_load * 32, k + (size_t)j * 32, 32);
				dsts[n_load] = bufs + (size_t)n_load * shard_bytes;
				memset(dsts[n_load], 0xA5, shard_bytes);
				n_load++;
			}
		}
		if (n_load) {
			int r = kvt_load(ns, 0, lk, n_load, dsts, lst);
			CHECK(r >= 0, "load: %s", strerror(-r));
			for (uint32_t j = 0; j < n_load; j++) {
				if (lst[j] != 0)
					continue; /* gone meanwhile: look again */
				engine_shard(m, 1, 0, lk + (size_t)j * 32, want);
				CHECK(!memcmp(want, dsts[j], shard_bytes),
				      "a visible block holds bytes other than its key's");
				todo[lidx[j]] = 0;
				left--;
				if (ondisk[lidx[j]])
					sum->disk++;
				else
					sum->host++;
				sum->bytes += shard_bytes;
			}
		}
		if (staging)
			usleep(20000);
	}
	CHECK(left == 0, "blocks still staging after the verifier's deadline");
}

static void verify_all(kvt_client *c, struct sums *sum)
{
	kvt_ns *ns = engine_ns(c, "tiny", 1);
	kvt_ns_info info;
	kvt_ns_get_info(ns, &info);
	size_t total = 0;
	for (size_t i = 0; i < n_requests; i++)
		total += (requests[i].prefix + requests[i].suffix) / ENGINE_BLOCK_TOKENS;
	uint8_t *keys = malloc(total * 32 + 32);
	uint8_t *bufs = malloc((size_t)BATCH * info.shard_bytes);
	uint8_t *want = malloc(info.shard_bytes);
	CHECK(keys && bufs && want, "out of memory");
	size_t n = 0;
	for (size_t i = 0; i < n_requests; i++) {
		const struct request *r = &requests[i];
		n += engine_keys(r->prefix_seed, r->prefix, r->suffix_seed, r->suffix,
				 keys + n * 32, (uint32_t)(total - n));
	}
	/* Shared prefixes recur in many requests: each block once. */
	qsort(keys, n, 32, cmp_key);
	size_t u = 0;
	for (size_t i = 0; i < n; i++)
		if (!u || memcmp(keys + (u - 1) * 32, keys + i * 32, 32))
			memmove(keys + (u++) * 32, keys + i * 32, 32);
	memset(sum, 0, sizeof(*sum));
	for (size_t i = 0; i < u; i += BATCH) {
		uint32_t b = (uint32_t)(u - i < BATCH ? u - i : BATCH);
		verify_batch(ns, keys + i * 32, b, bufs, want, info.shard_bytes, sum);
	}

	/* Half-written reservations never became blocks. */
	for (size_t i = 0; i < n_held; i += BATCH) {
		uint32_t b = (uint32_t)(n_held - i < BATCH ? n_held - i : BATCH);
		uint8_t st[BATCH];
		CHECK(kvt_lookup(ns, held_keys + i * 32, b, 0, st) >= 0, "lookup");
		for (uint32_t j = 0; j < b; j++)
			CHECK(st[j] == KVT_MISS, "a half-written block is visible (state %u)",
			      st[j]);
	}
	kvt_ns_close(ns);
	free(keys);
	free(bufs);
	free(want);
}

/* Everything the dead clients held has been given back. */
static void checkpoint(kvt_client *c, struct baseline *b, const char *when)
{
	struct sums sum;

	WAIT_FOR(stat_get(c, "daemon", "clients") == 1, "the dead clients' sessions to close");
	WAIT_FOR(stat_sum(c, "tenant", "handles") == 0, "quarantine to end every handle");
	WAIT_FOR(reserved_blocks(c) == 0, "every reserved block to be dropped");
	WAIT_FOR(pinned_bytes(c) == 0, "host slots outside resident blocks to return");
	int want_fds = b->fds + pool_descriptors(c) - b->pool_fds;
	WAIT_FOR(daemon_fd_count(&d) == want_fds, "the daemon's descriptors to return");
	CHECK(daemon_fd_count(&d) == want_fds, "daemon has %d fds, baseline %d",
	      daemon_fd_count(&d), want_fds);
	CHECK(stat_get(c, "daemon", "quarantined") >= b->quarantined_min,
	      "%" PRIu64 " handles ended by quarantine, at least %" PRIu64 " were held",
	      stat_get(c, "daemon", "quarantined"), b->quarantined_min);
	quarantine_confirmed += b->quarantined_min - b->confirmed;
	b->confirmed = b->quarantined_min;
	verify_all(c, &sum);
	/* The verifier's own leases are gone again. */
	WAIT_FOR(stat_sum(c, "tenant", "handles") == 0, "the verifier's leases to end");
	fprintf(stderr,
		"%s: %zu requests; %" PRIu64 " blocks loaded byte-exact (%" PRIu64
		" MiB, %" PRIu64 " staged from NVMe), %" PRIu64 " misses; %" PRIu64
		" quarantined, %" PRIu64
		" NVMe writes, %" PRIu64 " spills, %" PRIu64 " restores\n",
		when, n_requests, sum.host + sum.disk, sum.bytes >> 20, sum.disk, sum.miss,
		stat_get(c, "daemon", "quarantined"), stat_get(c, "daemon", "nvme_writes"),
		stat_get(c, "namespace", "spills"), stat_get(c, "namespace", "restores"));
}

static kvt_client *take_baseline(struct baseline *b)
{
	kvt_client *c = client_connect(&d, "checker");
	WAIT_FOR(stat_get(c, "daemon", "clients") == 1, "only the checker to be connected");
	b->fds = daemon_fd_count(&d);
	b->pool_fds = pool_descriptors(c);
	b->quarantined_min = 0;
	b->confirmed = 0;
	return c;
}

enum kind { STORE, HOLD, PIN, LOAD, N_KINDS };
static const char *const kind_name[] = {"store", "hold", "pin", "load"};

struct client {
	enum kind kind;
	pid_t pid;
	int in;
	FILE *out;
	char pin_file[256];
};

static void spawn(struct client *cl, uint64_t cycle, int i, bool *wait_line)
{
	char ps[32], pl[16], ss[32], sl[16], rep[16];
	/* The shared prompts drift (one new every 4 cycles), so clients keep
	 * storing new blocks and write-back never runs dry. */
	uint64_t prefix_seed = 1 + cycle / 4 + rnd(SHARED_SEEDS);
	uint32_t prefix = 16 * (uint32_t)(8 + rnd(25)); /* 8..32 blocks */
	uint64_t suffix_seed = cycle * MAX_CLIENTS + (uint64_t)i + 1;
	uint32_t suffix = 16 * (uint32_t)rnd(9); /* 0..8 private blocks */

	memset(cl, 0, sizeof(*cl));
	cl->kind = (enum kind)rnd(N_KINDS);
	*wait_line = false;
	if (cl->kind == HOLD) {
		/* Keys of its own, so that nobody else ever commits them. */
		prefix_seed = 1000000 + suffix_seed;
		suffix = 0;
		uint32_t nb = prefix / ENGINE_BLOCK_TOKENS;
		if (n_held + nb > cap_held) {
			cap_held = (n_held + nb) * 2;
			held_keys = realloc(held_keys, cap_held * 32);
			CHECK(held_keys, "out of memory");
		}
		n_held += engine_keys(prefix_seed, prefix, 0, 0, held_keys + n_held * 32, nb);
	} else {
		remember(prefix_seed, prefix, suffix_seed, suffix);
	}
	snprintf(ps, sizeof(ps), "%" PRIu64, prefix_seed);
	snprintf(pl, sizeof(pl), "%u", prefix);
	snprintf(ss, sizeof(ss), "%" PRIu64, suffix_seed);
	snprintf(sl, sizeof(sl), "%u", suffix);
	const char *extra = NULL, *extra2 = NULL;
	/* Repeats keep a client busy for most of the kill window: later
	 * rounds load what the first stored, and store again whatever host
	 * eviction took meanwhile. */
	snprintf(rep, sizeof(rep), "%u", 1 + (unsigned)rnd(8));
	switch (cl->kind) {
	case STORE:
		break;
	case HOLD:
		extra = "--hold";
		*wait_line = true;
		break;
	case PIN:
		snprintf(cl->pin_file, sizeof(cl->pin_file), "%s/pins-%" PRIu64 "-%d", d.dir,
			 cycle, i);
		extra = "--pin";
		extra2 = cl->pin_file;
		*wait_line = true;
		break;
	case LOAD:
		extra = "--no-store";
		break;
	default:
		break;
	}
	cl->pid = engine_spawn(&d, &cl->in, &cl->out, "--model", "tiny", "--name",
			       kind_name[cl->kind], "--prefix-seed", ps, "--prefix", pl,
			       "--suffix-seed", ss, "--suffix", sl, "--repeat", rep, extra, extra2,
			       NULL);
	CHECK(cl->pid > 0, "spawn");
}

/* The client's first line, "HELD n" or "PINNED n": n handles it holds. */
static int read_handles(struct client *cl)
{
	char line[128];
	/* Nobody has killed it yet: it must get there. */
	CHECK(fgets(line, sizeof(line), cl->out), "%s client died before holding anything",
	      kind_name[cl->kind]);
	const char *p = strchr(line, ' ');
	CHECK(p, "unexpected line from %s: %s", kind_name[cl->kind], line);
	return atoi(p + 1);
}

/* Kill and reap; a client that finished on its own must have succeeded,
 * and none may have seen a wrong byte. */
static uint64_t n_killed, n_finished;

static void reap(struct client *cl, bool daemon_died)
{
	char line[512];
	kill(cl->pid, SIGKILL);
	int status = wait_exit(cl->pid);
	close(cl->in);
	while (fgets(line, sizeof(line), cl->out)) {
		CHECK(!strstr(line, "VERIFY FAILED") && !strstr(line, "wrong bytes"),
		      "%s client saw wrong bytes: %s", kind_name[cl->kind], line);
	}
	fclose(cl->out);
	/* Without the daemon a client may fail to connect or to store;
	 * otherwise only the kill may end it early. */
	CHECK(status == 0 || status == 128 + SIGKILL || (daemon_died && status == 1),
	      "%s client exited with %d", kind_name[cl->kind], status);
	if (cl->pin_file[0])
		unlink(cl->pin_file);
	if (status == 128 + SIGKILL)
		n_killed++;
	else
		n_finished++;
}

/* The spill file needs O_DIRECT where the daemon's directory lives (tmpfs
 * has it from Linux 6.6 on). */
static bool direct_io_works(void)
{
	char path[] = "/tmp/kvt-direct-XXXXXX";
	int fd = mkstemp(path);
	if (fd < 0)
		return false;
	close(fd);
	fd = open(path, O_RDWR | O_DIRECT | O_CLOEXEC);
	int err = errno;
	unlink(path);
	if (fd < 0) {
		fprintf(stderr, "test-crash-loop: no O_DIRECT in /tmp (%s): no spill file possible\n",
			strerror(err));
		return false;
	}
	close(fd);
	return true;
}

/* The spill file is 128 MiB: never leave it behind, failed run or not. */
static void remove_dir(void)
{
	DIR *dir;
	struct dirent *e;
	char path[512];

	if (!d.dir[0] || getenv("KVT_KEEP") || !(dir = opendir(d.dir)))
		return;
	while ((e = readdir(dir)))
		if (e->d_name[0] != '.') {
			snprintf(path, sizeof(path), "%s/%s", d.dir, e->d_name);
			unlink(path);
		}
	closedir(dir);
	rmdir(d.dir);
}

int main(void)
{
	int cycles = getenv("KVT_LONG") ? 500 : 100;
	const char *seed_env = getenv("KVT_SEED");
	uint64_t seed = seed_env && *seed_env ? strtoull(seed_env, NULL, 0)
					      : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
	struct baseline base;
	uint64_t quarantined_total = 0, held_at_kill = 0, pinned_at_kill = 0;
	uint64_t writes_total = 0, restarts = 0;

	if (!direct_io_works())
		return KVT_TEST_SKIP;
	fprintf(stderr, "test-crash-loop: seed %" PRIu64 " (KVT_SEED=%" PRIu64
			" replays the choices), %d cycles\n", seed, seed, cycles);
	rng = seed;
	signal(SIGPIPE, SIG_IGN);
	daemon_start(&d, config);
	atexit(remove_dir);
	kvt_client *c = take_baseline(&base);
	CHECK(stat_get(c, "daemon", "nvme_files") == 1, "the spill file is in use");

	for (int cycle = 0; cycle < cycles; cycle++) {
		struct client cl[MAX_CLIENTS];
		bool wait_line[MAX_CLIENTS];
		int n = 1 + (int)rnd(MAX_CLIENTS);
		bool kill_daemon = cycle % DAEMON_EVERY == DAEMON_EVERY - 1;

		for (int i = 0; i < n; i++)
			spawn(&cl[i], (uint64_t)cycle, i, &wait_line[i]);
		/* Half the holders and pinners are killed once they hold
		 * their handles (and the first two cycles make sure both
		 * happen); the rest at whatever point the delay hits. */
		for (int i = 0; i < n; i++) {
			if (!wait_line[i] || (cycle >= 2 && rnd(2)))
				continue;
			int h = read_handles(&cl[i]);
			CHECK(h >= 0, "%s client failed to take its handles (%d)",
			      kind_name[cl[i].kind], h);
			if (cl[i].kind == HOLD)
				held_at_kill += (uint64_t)h;
			else
				pinned_at_kill += (uint64_t)h;
			if (!kill_daemon)
				base.quarantined_min += (uint64_t)h;
		}
		/* A client serves a request in a few milliseconds here: the
		 * window spans connecting, looking up, loading, storing and
		 * having exited. */
		usleep((useconds_t)rnd(30000));
		if (kill_daemon) {
			/* Mid store, spill and load: take the last figures
			 * first, then the daemon goes down with its clients. */
			writes_total += stat_get(c, "daemon", "nvme_writes");
			quarantined_total += stat_get(c, "daemon", "quarantined");
			kvt_client_free(c);
			daemon_kill(&d);
		}
		for (int i = 0; i < n; i++)
			reap(&cl[i], kill_daemon);
		if (kill_daemon) {
			daemon_restart(&d, config);
			restarts++;
			c = take_baseline(&base);
			char when[64];
			snprintf(when, sizeof(when), "after daemon kill %" PRIu64, restarts);
			checkpoint(c, &base, when);
		} else if (cycle % CHECK_EVERY == CHECK_EVERY - 1 || cycle == cycles - 1) {
			char when[64];
			snprintf(when, sizeof(when), "cycle %d", cycle + 1);
			checkpoint(c, &base, when);
		}
	}
	checkpoint(c, &base, "end");
	writes_total += stat_get(c, "daemon", "nvme_writes");
	quarantined_total += stat_get(c, "daemon", "quarantined");
	fprintf(stderr,
		"test-crash-loop: %d cycles, %" PRIu64 " clients killed, %" PRIu64
		" finished first, %" PRIu64 " daemon kills; %" PRIu64
		" reservations and %" PRIu64 " leases held at a kill; %" PRIu64
		" handles quarantined (%" PRIu64 " of them known held at a kill); %" PRIu64
		" NVMe writes\n",
		cycles, n_killed, n_finished, restarts, held_at_kill, pinned_at_kill,
		quarantined_total, quarantine_confirmed, writes_total);
	/* The loop really crashed clients in the middle of what it claims. */
	CHECK(held_at_kill > 0 && pinned_at_kill > 0, "no client was killed holding handles");
	CHECK(quarantine_confirmed > 0, "no checkpoint saw a killed client's handles quarantined");
	CHECK(writes_total > 0, "write-back ran while the clients stored");

	kvt_client_free(c);
	daemon_stop(&d);
	remove_dir();
	free(requests);
	free(held_keys);
	return 0;
}
