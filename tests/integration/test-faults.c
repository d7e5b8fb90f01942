/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Faults at the Nth call (daemon/fault.h), swept as SQLite does: for every
 * site and N = 1 up to its bound, a daemon with that one fault armed serves
 * a workload of real engine clients over both tiers (stores, write-back to
 * NVMe, host eviction that spills, loads that restore), and then
 *
 *   - the fault really fired, during the workload (its log line): a sweep
 *     whose fault never fires is a test that cannot fail;
 *   - the daemon still runs;
 *   - every block a client loaded had exactly the bytes derived from its
 *     key (kvt-engine checks every byte), and failures reached clients as
 *     errors or misses (exit status 0 or 1, never a crash);
 *   - it keeps serving: a fresh store and load round is complete and
 *     byte-exact;
 *   - nothing is left behind: no handles, no reservations, every host slot
 *     in use holds a block, no descriptor beyond its extents; and SIGTERM
 *     stops it cleanly (exit 0; the ASan build checks for leaks).
 *
 * The I/O sites fail the Nth write completion (write-back) or the Nth read
 * completion (restore) with -EIO, -ENOSPC, -EAGAIN or a short count, or
 * the Nth io_uring_enter() (uring_submit; with the io_uring engine only).  Faults the
 * daemon retries or hides (write-back, statistics, short transfers) must
 * cost no client anything, and no client may be left waiting for a block
 * that will never come.  Then every site fails from its first call on
 * (site=1+): the daemon must still run, serve no wrong byte, hold nothing
 * once its clients are gone and stop cleanly.  At start, an allocation that
 * fails while the NVMe index is recovered makes the daemon refuse to start
 * (exit 1, with the reason) and the next start recovers every block; a
 * fault setting that does not parse is refused too.
 *
 * Prints a table: site, N, outcome.  KVT_FAULT_SITE=NAME runs one site only.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

/* 4 MiB of host memory: two extents of 64 tiny blocks (32 KiB each).
 * Write-back takes every block at once, so host eviction spills; two
 * regions of spill file, one per namespace. */
static const char *config =
	"[pool]\ncapacity = 4M\nextent_size = 2M\n"
	"[nvme]\nwriteback_high = 0%\nwriteback_low = 0%\n"
	"[spill.a]\npath = @DIR@/spill0\ncapacity = 128M\n";

struct site {
	const char *name;
	int bound;
	/* Retried or hidden inside the daemon: no client loses anything. */
	bool absorbed;
	/* Reached only when the NVMe tier runs on io_uring. */
	bool uring_only;
};

/* The bounds of fault.h: every N up to them is reached by the workload. */
static const struct site sites[] = {
	{"session_in", 6, false},   {"session_out", 8, false},  {"process", 6, false},
	{"tenant", 1, false},       {"ns", 2, false},           {"extent", 2, false},
	{"block", 8, false},        {"index", 8, false},        {"handle", 8, false},
	{"stats", 4, true},         {"spill_region", 2, true},  {"writeback", 8, true},
	{"restore", 8, false},      {"write_eio", 8, false},    {"write_enospc", 4, true},
	{"write_short", 8, true},   {"read_eio", 8, false},     {"read_short", 8, true},
	{"write_eagain", 8, true},  {"read_eagain", 8, true},   {"uring_submit", 4, true, true},
};

/* A site the daemon does not reach here: say so and stop it. */
static bool unreachable(struct daemon *d, const struct site *site)
{
	if (!site->uring_only || daemon_log_contains(d, "engine io_uring"))
		return false;
	printf("%-13s      skipped: the NVMe tier does not run on io_uring here\n", site->name);
	fflush(stdout);
	return true;
}

#define ENGINE_LIMIT_S 6

/* ---- the daemon's statistics, from a client that may be refused ---- */

struct totals {
	bool daemon_seen;
	uint64_t handles, extents, in_flight, writes, dirty_drops, files_failed;
	uint64_t ledger_fds; /* the ledger's memfds (keep record) */
	uint64_t used;                  /* host slots in use, bytes */
	uint64_t bytes, reserved;       /* of blocks in host memory, all namespaces */
	uint64_t spills, restores;
	uint64_t tenants, namespaces;   /* what the daemon record says */
	uint64_t n_tenants, n_namespaces; /* records received */
};

static void add(const kvt_record *r, const char *field, uint64_t *sum)
{
	uint64_t v;
	if (kvt_record_get_u64(r, field, &v) == 0)
		*sum += v;
}

static int totals_cb(const kvt_record *r, void *userdata)
{
	struct totals *t = userdata;
	const char *kind = kvt_record_kind(r);

	if (!strcmp(kind, "daemon")) {
		t->daemon_seen = true;
		add(r, "handles", &t->handles);
		add(r, "extents", &t->extents);
		add(r, "nvme_in_flight", &t->in_flight);
		add(r, "nvme_writes", &t->writes);
		add(r, "nvme_dirty_drops", &t->dirty_drops);
		add(r, "nvme_files_failed", &t->files_failed);
		add(r, "tenants", &t->tenants);
		add(r, "namespaces", &t->namespaces);
	} else if (!strcmp(kind, "keep")) {
		add(r, "descriptors", &t->ledger_fds);
	} else if (!strcmp(kind, "tenant")) {
		t->n_tenants++;
		add(r, "used", &t->used);
	} else if (!strcmp(kind, "namespace")) {
		t->n_namespaces++;
		add(r, "bytes", &t->bytes);
		add(r, "reserved", &t->reserved);
		add(r, "spills", &t->spills);
		add(r, "restores", &t->restores);
	}
	return 0;
}

/* A fault may refuse this connection or this one query: ask again. */
static bool query_try(const struct daemon *d, struct totals *t)
{
	for (int i = 0; i < 10; i++) {
		kvt_client *c = NULL;
		memset(t, 0, sizeof(*t));
		int r = kvt_client_connect(d->socket, "checker", &c);
		if (r == 0) {
			r = kvt_stats(c, KVT_STATS_ALL, totals_cb, t);
			kvt_client_free(c);
			/* A failed answer says so: only a daemon that never
			 * answers makes the client give up (-ETIMEDOUT after
			 * KVTIER_TIMEOUT_MS). */
			CHECK(r != -ETIMEDOUT, "a statistics query was never answered");
		}
		/* One that says it is whole must be. */
		if (r == 0) {
			CHECK(t->daemon_seen && t->n_tenants == t->tenants &&
			      t->n_namespaces == t->namespaces,
			      "statistics answered as complete lack records (daemon %d, %llu of %llu tenants, %llu of %llu namespaces)",
			      t->daemon_seen, (unsigned long long)t->n_tenants,
			      (unsigned long long)t->tenants, (unsigned long long)t->n_namespaces,
			      (unsigned long long)t->namespaces);
			return true;
		}
		usleep(20000);
	}
	return false;
}

static void query(const struct daemon *d, struct totals *t)
{
	CHECK(query_try(d, t), "the daemon answers no statistics");
}

static bool alive(const struct daemon *d)
{
	return waitpid(d->pid, NULL, WNOHANG) == 0;
}

/* ---- engine clients ------------------------------------------------ */

struct outcome {
	int runs, errors; /* engine runs, and those that saw an error */
	int reload_hits;  /* leading hits of the reload of A */
	uint64_t spills, restores;
};

/* kvt-engine on the tiny model; exit 0, or 1 for an error it was told of.
 * Returns the leading hits it reused, -1 if it failed; ret_stored (may be
 * NULL) gets how many blocks it stored. */
static int engine(const struct daemon *d, struct outcome *o, const char *seed,
		  const char *tokens, const char *salt, bool store, const char *expect,
		  int *ret_stored)
{
	const char *argv[32];
	int n = 0, p[2];
	char out[8192];
	size_t len = 0;
	ssize_t k;

	argv[n++] = "kvt-engine";
	argv[n++] = "--socket";
	argv[n++] = d->socket;
	argv[n++] = "--model";
	argv[n++] = "tiny";
	argv[n++] = "--prefix";
	argv[n++] = tokens;
	argv[n++] = "--prefix-seed";
	argv[n++] = seed;
	argv[n++] = "--suffix";
	argv[n++] = "0";
	if (salt) {
		argv[n++] = "--salt";
		argv[n++] = salt;
	}
	if (!store)
		argv[n++] = "--no-store";
	if (expect) {
		argv[n++] = "--expect-hits";
		argv[n++] = expect;
	}
	argv[n] = NULL;

	CHECK(pipe2(p, O_CLOEXEC) == 0, "pipe");
	pid_t pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		dup2(p[1], 1);
		dup2(p[1], 2);
		/* A client the daemon leaves waiting (for a staged block that
		 * will never be announced) sits out kvt_wait_resident's 10 s:
		 * far beyond a run's usual tenth of a second. */
		alarm(ENGINE_LIMIT_S);
		execv(getenv("KVT_ENGINE"), (char **)argv);
		_exit(127);
	}
	close(p[1]);
	while (len < sizeof(out) - 1 && (k = read(p[0], out + len, sizeof(out) - 1 - len)) > 0)
		len += (size_t)k;
	out[len] = 0;
	close(p[0]);
	int rc = wait_exit(pid);
	o->runs++;
	if (ret_stored)
		*ret_stored = 0;
	CHECK(rc != 128 + SIGALRM, "kvt-engine was left waiting for more than %d s:\n%s",
	      ENGINE_LIMIT_S, out);
	CHECK(rc == 0 || rc == 1, "kvt-engine exited with %d:\n%s", rc, out);
	CHECK(!strstr(out, "VERIFY FAILED"), "a client was served wrong bytes:\n%s", out);
	if (rc != 0) {
		o->errors++;
		return -1;
	}
	const char *line = strstr(out, "blocks (");
	const char *computed = strstr(out, " computed, ");
	int hits = -1, stored = -1;
	CHECK(line && sscanf(line, "blocks (%*u tokens); %d leading hits", &hits) == 1 &&
	      computed && sscanf(computed, " computed, %d stored", &stored) == 1,
	      "no summary from kvt-engine:\n%s", out);
	if (ret_stored)
		*ret_stored = stored;
	return hits;
}

/*
 * Wait until write-back has taken every block stored (or a file failed)
 * and nothing is in flight.  A fault that fires once is retried past, so
 * that always comes and is waited for; one that fires at every call may
 * stop write-back for good, so a persistent case polls a while and goes on
 * (nothing it checks depends on write-back).
 */
static void settle(const struct daemon *d, uint64_t writes, bool persistent)
{
	struct totals t;
	uint64_t until = now_ms() + 2000;
	for (;;) {
		if (!query_try(d, &t))
			return; /* a persistent fault on the way in: nothing to see */
		if ((t.writes >= writes || t.files_failed) && t.in_flight == 0)
			return;
		if (persistent && now_ms() > until)
			return;
		usleep(10000);
	}
}

/*
 * A stores 96 blocks, which are written back; B stores 64 more, and host
 * memory (128) makes room by moving 32 of A's to NVMe; A loads all 96 back,
 * 32 of them restored from NVMe; a second (salted) namespace stores 8.
 */
static void workload(const struct daemon *d, struct outcome *o, bool persistent)
{
	int stored;

	engine(d, o, "1", "1536", NULL, true, NULL, &stored);
	settle(d, (uint64_t)stored, persistent);
	engine(d, o, "2", "1024", NULL, true, NULL, NULL);
	o->reload_hits = engine(d, o, "1", "1536", NULL, false, NULL, NULL);
	engine(d, o, "3", "128", "second", true, NULL, NULL);
	settle(d, 0, persistent);
	struct totals t;
	if (query_try(d, &t)) {
		o->spills = t.spills;
		o->restores = t.restores;
	}
}

/* ---- one case ------------------------------------------------------ */

static int base_fds;

static void finish(struct daemon *d)
{
	char path[300];
	daemon_stop(d);
	snprintf(path, sizeof(path), "%s/spill0", d->dir);
	unlink(path);
	daemon_cleanup(d);
}

/* Nothing held for clients that are gone: handles end when their process
 * has exited and its quarantine (200 ms) has passed. */
static void check_released(struct daemon *d)
{
	struct totals t;

	WAIT_FOR((query(d, &t), t.handles == 0 && t.reserved == 0 && t.in_flight == 0),
		 "no handles, reservations or I/O left");
	CHECK(t.used == t.bytes, "host slots in use (%llu bytes) hold exactly the resident blocks (%llu bytes)",
	      (unsigned long long)t.used, (unsigned long long)t.bytes);
	/* The ledger's root is in the start's count, its other memfds (one
	 * an extent, one a tenant with handles) are not. */
	uint64_t extents = t.extents, ledger = t.ledger_fds ? t.ledger_fds - 1 : 0;
	WAIT_FOR(daemon_fd_count(d) == base_fds + (int)extents + (int)ledger,
		 "descriptors back to the start's plus one per extent and the ledger's");
}

/* After the workload: it still serves, completely, and holds nothing. */
static void check_after(struct daemon *d, const char *seed)
{
	struct outcome o = {0};

	CHECK(alive(d), "kvtierd died");
	CHECK(engine(d, &o, seed, "256", NULL, true, NULL, NULL) == 0, "a fresh store");
	CHECK(engine(d, &o, seed, "256", NULL, false, "16", NULL) == 16,
	      "the fresh blocks load complete and byte-exact");
	check_released(d);
	CHECK(alive(d), "kvtierd died");
}

static bool only(const char *site)
{
	const char *o = getenv("KVT_FAULT_SITE");
	return !o || !*o || !strcmp(o, site);
}

static void run_case(const struct site *site, int nth, int index)
{
	struct daemon d;
	struct outcome o = {0};
	char env[64], needle[96], seed[16];
	uint64_t t0 = now_ms();

	snprintf(env, sizeof(env), "%s=%d", site->name, nth);
	setenv("KVTIERD_FAULTS", env, 1);
	daemon_start(&d, config);
	unsetenv("KVTIERD_FAULTS");
	if (unreachable(&d, site)) {
		finish(&d);
		return;
	}
	workload(&d, &o, false);

	snprintf(needle, sizeof(needle), "Fault injected: %s call %d\n", site->name, nth);
	CHECK(daemon_log_contains(&d, needle), "%s=%d never fired during the workload: its bound is too high",
	      site->name, nth);
	if (site->absorbed)
		CHECK(o.errors == 0 && o.reload_hits == 96,
		      "%s=%d costs a client something (%d errors, %d of 96 reloaded)", site->name, nth,
		      o.errors, o.reload_hits);
	snprintf(seed, sizeof(seed), "%d", 1000 + index);
	check_after(&d, seed);
	printf("%-13s %2d  %5llu ms  served; %d of %d client runs saw an error; A reloaded %d/96; %llu spilled, %llu restored\n",
	       site->name, nth, (unsigned long long)(now_ms() - t0), o.errors, o.runs,
	       o.reload_hits < 0 ? 0 : o.reload_hits, (unsigned long long)o.spills,
	       (unsigned long long)o.restores);
	fflush(stdout);
	finish(&d);
}

/* Every call from the first fails: no recovery to check, but the daemon
 * runs on, serves no wrong byte, holds nothing once the clients are gone
 * (where statistics can still be asked for) and stops cleanly. */
static void run_persistent(const struct site *site)
{
	struct daemon d;
	struct outcome o = {0};
	struct totals t;
	char env[64], needle[96];
	uint64_t t0 = now_ms();
	bool seen;

	snprintf(env, sizeof(env), "%s=1+", site->name);
	setenv("KVTIERD_FAULTS", env, 1);
	daemon_start(&d, config);
	unsetenv("KVTIERD_FAULTS");
	if (unreachable(&d, site)) {
		finish(&d);
		return;
	}
	workload(&d, &o, true);
	snprintf(needle, sizeof(needle), "Fault injected: %s call 1\n", site->name);
	CHECK(daemon_log_contains(&d, needle), "%s never fired during the workload", env);
	CHECK(alive(&d), "kvtierd died");
	seen = query_try(&d, &t);
	if (seen)
		check_released(&d);
	CHECK(alive(&d), "kvtierd died");
	printf("%-13s %2s  %5llu ms  served; %d of %d client runs saw an error; A reloaded %d/96; %s\n",
	       site->name, "1+", (unsigned long long)(now_ms() - t0), o.errors, o.runs,
	       o.reload_hits < 0 ? 0 : o.reload_hits,
	       seen ? "nothing held" : "no statistics to be had");
	fflush(stdout);
	finish(&d);
}

/* ---- start-up ------------------------------------------------------ */

/* kvtierd on d's configuration with KVTIERD_FAULTS=faults; its exit status
 * (or -1 if it is still running after 10 s: then it is stopped). */
static int start_fails(struct daemon *d, const char *faults, const char *expect_log)
{
	char log[200], line[1024];
	bool found = false;

	snprintf(log, sizeof(log), "%s/start.log", d->dir);
	pid_t pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		setenv("KVTIERD_FAULTS", faults, 1);
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		dup2(fd, 2);
		execl(getenv("KVTIERD"), "kvtierd", "--config", d->config, (char *)NULL);
		_exit(127);
	}
	int rc = -1;
	for (int i = 0; i < 1000; i++) {
		int status;
		if (waitpid(pid, &status, WNOHANG) == pid) {
			rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
			break;
		}
		usleep(10000);
	}
	if (rc < 0) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
	}
	FILE *f = fopen(log, "re");
	while (f && fgets(line, sizeof(line), f))
		found |= strstr(line, expect_log) != NULL;
	if (f)
		fclose(f);
	unlink(log);
	CHECK(found, "kvtierd with KVTIERD_FAULTS=%s does not say '%s'", faults, expect_log);
	return rc;
}

static void startup(void)
{
	static const char *const at_recovery[] = {"tenant", "ns", "block", "index"};
	struct daemon d;
	struct outcome o = {0};
	struct totals t;

	/* Blocks on NVMe to recover: 160 written back. */
	daemon_start(&d, config);
	engine(&d, &o, "1", "1536", NULL, true, NULL, NULL);
	/* A on disk before B needs its room: B's stores then evict clean
	 * blocks only, however far write-back falls behind on a busy
	 * machine. */
	WAIT_FOR((query(&d, &t), t.writes >= 96 && t.in_flight == 0), "write-back of A");
	engine(&d, &o, "2", "1024", NULL, true, NULL, NULL);
	CHECK(o.errors == 0, "stores without faults");
	WAIT_FOR((query(&d, &t), t.writes >= 160 && t.in_flight == 0), "write-back");
	CHECK(t.dirty_drops == 0, "no block dropped before it was written");
	daemon_stop(&d);

	for (size_t i = 0; i < sizeof(at_recovery) / sizeof(at_recovery[0]); i++) {
		char faults[32];
		snprintf(faults, sizeof(faults), "%s=1", at_recovery[i]);
		int rc = start_fails(&d, faults, "NVMe recovery failed: Cannot allocate memory");
		CHECK(rc == 1, "kvtierd with %s during recovery must refuse to start with status 1 (%d)",
		      faults, rc);
		printf("%-13s %2d  %8s  start-up: recovery failed, kvtierd refused to start (status 1)\n",
		       at_recovery[i], 1, "");
	}
	int rc = start_fails(&d, "nosuch=1", "is not of the form");
	CHECK(rc == 1, "a fault setting that does not parse must stop kvtierd (%d)", rc);
	rc = start_fails(&d, "block=0", "is not of the form");
	CHECK(rc == 1, "N = 0 must stop kvtierd (%d)", rc);
	printf("%-13s %2s  %8s  start-up: a setting that does not parse is refused (status 1)\n",
	       "nosuch", "1", "");

	/* Nothing was lost: the next start recovers every block. */
	daemon_restart(&d, config);
	kvt_client *c = client_connect(&d, "checker");
	CHECK(stat_get(c, "daemon", "nvme_recovered") == 160, "160 blocks recovered");
	kvt_client_free(c);
	CHECK(engine(&d, &o, "2", "1024", NULL, false, "64", NULL) == 64,
	      "B loads from NVMe, byte-exact");
	finish(&d);
}

int main(void)
{
	struct daemon d;
	struct outcome o = {0};
	struct totals t;
	uint64_t t0 = now_ms();
	int index = 0;

	CHECK(getenv("KVT_ENGINE") && getenv("KVTIERD"), "run through meson");
	unsetenv("KVTIERD_FAULTS");
	/* A request the daemon never answers fails in 5 s, not 30. */
	setenv("KVTIER_TIMEOUT_MS", "5000", 1);

	/* Without faults: the descriptors of an idle daemon, and a workload
	 * that really spills and restores.  An armed fault that never fires
	 * makes the daemon report how often each site is reached. */
	setenv("KVTIERD_FAULTS", "tenant=1000000", 1);
	daemon_start(&d, config);
	unsetenv("KVTIERD_FAULTS");
	usleep(200000);
	base_fds = daemon_fd_count(&d);
	workload(&d, &o, false);
	CHECK(o.errors == 0, "no errors without faults");
	CHECK(o.reload_hits == 96, "A reloads all 96 blocks (%d)", o.reload_hits);
	query(&d, &t);
	CHECK(t.spills >= 32 && t.restores >= 32, "the workload spills and restores (%llu, %llu)",
	      (unsigned long long)t.spills, (unsigned long long)t.restores);
	check_after(&d, "999");
	daemon_stop(&d);
	FILE *f = fopen(d.log, "re");
	char line[2048];
	while (f && fgets(line, sizeof(line), f))
		if (strstr(line, "Fault sites"))
			printf("without faults: %s", strstr(line, "Fault sites"));
	if (f)
		fclose(f);
	char path[300];
	snprintf(path, sizeof(path), "%s/spill0", d.dir);
	unlink(path);
	daemon_cleanup(&d);

	printf("%-13s %2s  %8s  %s\n", "site", "N", "time", "outcome");
	for (size_t i = 0; i < sizeof(sites) / sizeof(sites[0]); i++) {
		if (!only(sites[i].name))
			continue;
		for (int n = 1; n <= sites[i].bound; n++)
			run_case(&sites[i], n, index++);
	}
	for (size_t i = 0; i < sizeof(sites) / sizeof(sites[0]); i++)
		if (only(sites[i].name)) {
			run_persistent(&sites[i]);
			index++;
		}
	if (only("startup"))
		startup();
	printf("%d cases in %.1f s\n", index, (double)(now_ms() - t0) / 1000);
	return 0;
}
