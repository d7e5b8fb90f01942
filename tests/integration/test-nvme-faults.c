/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Faults under the NVMe tier, injected on I/O completions through the
 * daemon's test-only hook (KVTIERD_FAULTS): short transfers are
 * finished transparently, ENOSPC fails one write-back and a later one
 * succeeds, EIO takes the spill file out while the host tier keeps
 * serving.  A device that answers every write or read with -EAGAIN, and an
 * io_uring that refuses every submission, do not keep a request retrying
 * forever: each write-back fails after its few retries (and is tried again
 * later), each restore ends in a miss, the daemon serves on from host
 * memory and stops cleanly with nothing left to the kernel.  In every case
 * every byte served is exact.  A write-back that failed leaves no slot a
 * restart would recover.  And a file system without O_DIRECT stops the
 * daemon at start with an actionable error.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static const char *config =
	"[pool]\ncapacity = 8M\nextent_size = 2M\n"
	"[nvme]\nwriteback_high = 0%\nwriteback_low = 0%\n"
	"[spill.a]\npath = @DIR@/spill0\ncapacity = 128M\n";

static uint64_t stat_of(const struct daemon *d, const char *kind, const char *field)
{
	kvt_client *c = client_connect(d, "checker");
	uint64_t v = stat_get(c, kind, field);
	kvt_client_free(c);
	return v;
}

static int run(struct daemon *d, const char *seed, const char *prefix, bool store,
	       const char *expect)
{
	char out[4096];
	if (expect)
		return engine_run(d, out, sizeof(out), "--model", "tiny", "--prefix", prefix,
				  "--prefix-seed", seed, "--suffix", "0", "--expect-hits", expect,
				  store ? NULL : "--no-store", NULL);
	return engine_run(d, out, sizeof(out), "--model", "tiny", "--prefix", prefix,
			  "--prefix-seed", seed, "--suffix", "0", store ? NULL : "--no-store",
			  NULL);
}

static void finish(struct daemon *d)
{
	char path[300];
	daemon_stop(d);
	CHECK(!daemon_log_contains(d, "left allocated"), "I/O was left to the kernel at shutdown");
	snprintf(path, sizeof(path), "%s/spill0", d->dir);
	unlink(path);
	daemon_cleanup(d);
}

/*
 * Every write-back's I/O fails for good (KVTIERD_FAULTS=faults): it ends
 * with an error after bounded retries, again and again, and host memory
 * keeps serving every block, exact.  Stopped while write-backs are being
 * retried.
 */
static void writes_never_succeed(const char *faults)
{
	struct daemon d;

	setenv("KVTIERD_FAULTS", faults, 1);
	daemon_start(&d, config);
	unsetenv("KVTIERD_FAULTS");
	if (!strncmp(faults, "uring_submit", 12) && !daemon_log_contains(&d, "engine io_uring")) {
		printf("%s: skipped, the NVMe tier does not run on io_uring here\n", faults);
		finish(&d);
		return;
	}
	CHECK(run(&d, "1", "3200", true, "0") == 0, "store");
	WAIT_FOR(stat_of(&d, "daemon", "nvme_io_errors") >= 2,
		 "write-backs to fail, after bounded retries, more than once");
	CHECK(stat_of(&d, "daemon", "nvme_writes") == 0, "nothing was written back");
	CHECK(stat_of(&d, "daemon", "nvme_files_failed") == 0, "the file is not failed");
	CHECK(run(&d, "1", "3200", false, "200") == 0, "host copies serve, exact");
	printf("%s: %llu write-back failures, the host tier serves on\n", faults,
	       (unsigned long long)stat_of(&d, "daemon", "nvme_io_errors"));
	finish(&d);
}

/* Every read fails with -EAGAIN: a block on NVMe only becomes a miss. */
static void reads_never_succeed(void)
{
	struct daemon d;

	setenv("KVTIERD_FAULTS", "read_eagain=1+", 1);
	daemon_start(&d, config);
	unsetenv("KVTIERD_FAULTS");
	CHECK(run(&d, "1", "3200", true, "0") == 0, "store A");
	WAIT_FOR(stat_of(&d, "daemon", "nvme_writes") >= 200, "write-back of A");
	CHECK(run(&d, "2", "1600", true, "0") == 0, "push A out to NVMe");
	uint64_t spills = stat_of(&d, "namespace", "spills");
	CHECK(spills > 0, "blocks spilled");
	CHECK(run(&d, "1", "3200", false, NULL) == 0, "A's restores end, served exact or missed");
	CHECK(stat_of(&d, "daemon", "nvme_io_errors") >= 1, "the failed reads are counted");
	CHECK(stat_of(&d, "daemon", "nvme_reads") == 0, "no read succeeded");
	CHECK(stat_of(&d, "daemon", "nvme_files_failed") == 0, "the file is not failed");
	CHECK(run(&d, "2", "1600", false, NULL) == 0, "whatever of B is served is exact");
	printf("read_eagain=1+: %llu blocks spilled, restores ended in misses\n",
	       (unsigned long long)spills);
	finish(&d);
}

int main(void)
{
	struct daemon d;

	/* Short transfers: completed by resubmitting the rest. */
	setenv("KVTIERD_FAULTS", "read_short=%2,write_short=%2", 1);
	daemon_start(&d, config);
	CHECK(run(&d, "1", "3200", true, "0") == 0, "store");
	WAIT_FOR(stat_of(&d, "daemon", "nvme_writes") >= 200, "write-back");
	CHECK(run(&d, "2", "1600", true, "0") == 0, "push A out to NVMe");
	CHECK(stat_of(&d, "namespace", "spills") > 0, "blocks spilled");
	CHECK(run(&d, "1", "3200", false, "200") == 0, "restore through short reads");
	CHECK(stat_of(&d, "daemon", "nvme_io_errors") == 0, "short transfers are not errors");
	finish(&d);

	/* ENOSPC on some writes: those write-backs fail, later ones succeed. */
	setenv("KVTIERD_FAULTS", "write_enospc=%5", 1);
	daemon_start(&d, config);
	CHECK(run(&d, "1", "3200", true, "0") == 0, "store");
	WAIT_FOR(stat_of(&d, "daemon", "nvme_writes") >= 200, "write-back despite ENOSPC");
	CHECK(stat_of(&d, "daemon", "nvme_io_errors") > 0, "ENOSPC counted");
	CHECK(stat_of(&d, "daemon", "nvme_files_failed") == 0, "ENOSPC does not fail the file");
	CHECK(run(&d, "2", "1600", true, "0") == 0, "push A out");
	CHECK(run(&d, "1", "3200", false, NULL) == 0, "every byte served is exact");
	finish(&d);

	/* A failed write-back's slot is erased like any dropped one.  Every
	 * write completion reports ENOSPC, though its bytes landed, so each
	 * try leaves a whole, valid slot on disk; the block is then deleted,
	 * and after a restart it must not come back from that slot.  The
	 * erasures' completions report ENOSPC too: the daemon cannot know
	 * that their zeros landed, so the delete does not count the block as
	 * deleted for good, and says so in the erasures record. */
	setenv("KVTIERD_FAULTS", "write_enospc=1+", 1);
	daemon_start(&d, config);
	CHECK(run(&d, "5", "16", true, "0") == 0, "store one block");
	WAIT_FOR(stat_of(&d, "daemon", "nvme_io_errors") >= 3, "write-backs to fail");
	CHECK(stat_of(&d, "daemon", "nvme_writes") == 0, "no write-back succeeded");
	kvt_client *c = client_connect(&d, "deleter");
	kvt_ns *ns = engine_ns(c, "tiny", 1);
	uint8_t key[32];
	CHECK(engine_keys(5, 16, 0, 0, key, 1) == 1, "key");
	CHECK(kvt_delete(ns, key, 1) == 0, "a delete whose erasure failed is not counted");
	CHECK(stat_get(c, "erasures", "failures") >= 1, "the failed erasures are counted");
	CHECK(stat_get(c, "erasures", "erasing") == 0, "the delete was answered after them");
	kvt_ns_close(ns);
	kvt_client_free(c);
	WAIT_FOR(stat_of(&d, "daemon", "nvme_in_flight") == 0 &&
		 stat_of(&d, "daemon", "nvme_blocks") == 0, "the last write-back and erasure");
	daemon_stop(&d);
	unsetenv("KVTIERD_FAULTS");
	daemon_restart(&d, config);
	CHECK(stat_of(&d, "daemon", "nvme_recovered") == 0,
	      "a failed write-back's slot is not recovered (%llu)",
	      (unsigned long long)stat_of(&d, "daemon", "nvme_recovered"));
	CHECK(run(&d, "5", "16", false, "0") == 0, "the deleted block stays deleted");
	finish(&d);

	/* EIO: the spill file is failed; the host tier keeps serving. */
	setenv("KVTIERD_FAULTS", "read_eio=%7,write_eio=%7", 1);
	daemon_start(&d, config);
	CHECK(run(&d, "1", "3200", true, "0") == 0, "store");
	WAIT_FOR(stat_of(&d, "daemon", "nvme_files_failed") == 1, "the file to be failed");
	CHECK(stat_of(&d, "daemon", "nvme_io_errors") >= 1, "the error is counted");
	CHECK(run(&d, "1", "3200", false, "200") == 0, "host copies still serve, exact");
	CHECK(run(&d, "2", "1600", true, "0") == 0, "stores go on in host memory");
	CHECK(run(&d, "1", "3200", false, NULL) == 0, "whatever is served is exact");
	CHECK(run(&d, "2", "1600", false, "100") == 0, "the newest blocks are all there");
	finish(&d);
	unsetenv("KVTIERD_FAULTS");

	writes_never_succeed("write_eagain=1+");
	writes_never_succeed("uring_submit=1+");
	reads_never_succeed();

	/* No O_DIRECT on the spill file's file system: refused at start. */
	daemon_start(&d, NULL);
	daemon_stop(&d);
	daemon_rewrite_config(&d, config);
	char log[200];
	snprintf(log, sizeof(log), "%s/nodirect.log", d.dir);
	pid_t pid = fork();
	if (pid == 0) {
		setenv("KVTIERD_SPILL_NO_DIRECT", "1", 1);
		if (!freopen(log, "w", stderr))
			_exit(126);
		execl(getenv("KVTIERD"), "kvtierd", "--config", d.config, (char *)NULL);
		_exit(127);
	}
	int rc = wait_exit(pid);
	CHECK(rc != 0 && rc != 127 && rc != 126, "kvtierd must refuse to start (%d)", rc);
	FILE *f = fopen(log, "re");
	char line[1024];
	bool named = false;
	while (f && fgets(line, sizeof(line), f))
		named |= strstr(line, "O_DIRECT") != NULL;
	if (f)
		fclose(f);
	CHECK(named, "the error names O_DIRECT");
	unlink(log);
	char path[300];
	snprintf(path, sizeof(path), "%s/spill0", d.dir);
	unlink(path);
	daemon_cleanup(&d);
	return 0;
}
