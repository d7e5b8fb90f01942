/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The NVMe tier with real spill files and the real I/O engine: blocks
 * written back and evicted to NVMe come back byte-exact; a restart recovers
 * them; torn and corrupted slots are misses, never wrong bytes; SIGKILL at
 * random moments never makes the daemon serve a wrong byte.  The engine
 * (kvt-engine) checks every byte it loads against what computed it.
 *
 * Runs once per I/O engine: KVT_NVME_ENGINE=io_uring|threads (meson runs
 * both); KVT_LONG=1 makes the crash loop longer.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static char config[512];

static const char *engine_kind(void)
{
	const char *e = getenv("KVT_NVME_ENGINE");
	return e && *e ? e : "auto";
}

static uint64_t stat_nvme(const struct daemon *d, const char *field)
{
	kvt_client *c = client_connect(d, "checker");
	uint64_t v = stat_get(c, "daemon", field);
	kvt_client_free(c);
	return v;
}

static uint64_t stat_ns(const struct daemon *d, const char *field)
{
	kvt_client *c = client_connect(d, "checker");
	uint64_t v = stat_get(c, "namespace", field);
	kvt_client_free(c);
	return v;
}

static int run(struct daemon *d, const char *seed, const char *prefix, const char *expect,
	       bool store)
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

/* Flip one byte of the spill file. */
static void poke(const struct daemon *d, uint64_t offset)
{
	char path[256];
	snprintf(path, sizeof(path), "%s/spill0", d->dir);
	int fd = open(path, O_RDWR | O_CLOEXEC);
	CHECK(fd >= 0, "open %s", path);
	uint8_t b;
	CHECK(pread(fd, &b, 1, (off_t)offset) == 1, "pread");
	b ^= 0x5a;
	CHECK(pwrite(fd, &b, 1, (off_t)offset) == 1, "pwrite");
	close(fd);
}

int main(void)
{
	struct daemon d;

	/* 8 MiB of host memory = 256 tiny blocks; write back everything at
	 * once (watermarks 0%), so every committed block reaches NVMe. */
	snprintf(config, sizeof(config),
		 "[pool]\ncapacity = 8M\nextent_size = 2M\n"
		 "[nvme]\nengine = %s\nwriteback_high = 0%%\nwriteback_low = 0%%\n"
		 "[spill.a]\npath = @DIR@/spill0\ncapacity = 128M\n",
		 engine_kind());
	daemon_start(&d, config);

	/* 1. Spill and restore under host-memory pressure. */
	CHECK(run(&d, "1", "3200", "0", true) == 0, "A stores 200 blocks");
	WAIT_FOR(stat_nvme(&d, "nvme_writes") >= 200, "A's blocks to reach NVMe");
	CHECK(run(&d, "2", "1600", "0", true) == 0, "B stores 100 blocks");
	CHECK(stat_ns(&d, "spills") >= 44, "host eviction moved clean blocks to NVMe");
	CHECK(stat_ns(&d, "dirty_drops") == 0, "nothing dropped: write-back kept ahead");
	/* Before A reloads: a restore may take the slot of a block not yet
	 * written back (dropping it) when no clean one is left. */
	WAIT_FOR(stat_nvme(&d, "nvme_writes") >= 300, "B's blocks to reach NVMe");
	CHECK(run(&d, "1", "3200", "200", false) == 0, "A's 200 blocks come back byte-exact");
	CHECK(stat_ns(&d, "restores") >= 44, "restored from NVMe");

	/* 2. A restart recovers the spilled blocks, and two clients share a
	 * prefix that now lives only on NVMe. */
	daemon_stop(&d);
	daemon_restart(&d, config);
	CHECK(stat_nvme(&d, "nvme_recovered") == 300, "300 blocks recovered (%llu)",
	      (unsigned long long)stat_nvme(&d, "nvme_recovered"));
	CHECK(run(&d, "2", "1600", "100", false) == 0, "B after restart");
	CHECK(run(&d, "2", "1600", "100", false) == 0, "another client, the same prefix");

	/* 2b. Deleted blocks stay deleted across a restart: their slot
	 * headers are erased before the slots are reused. */
	kvt_client *c = client_connect(&d, "deleter");
	kvt_ns *ns = engine_ns(c, "tiny", 1);
	static uint8_t keys[100 * 32];
	CHECK(engine_keys(2, 1600, 0, 0, keys, 100) == 100, "keys");
	CHECK(kvt_delete(ns, keys, 100) == 100, "delete B's 100 blocks");
	kvt_ns_close(ns);
	kvt_client_free(c);
	WAIT_FOR(stat_nvme(&d, "nvme_blocks") == 200, "the erasures to land");
	daemon_stop(&d);
	daemon_restart(&d, config);
	CHECK(stat_nvme(&d, "nvme_recovered") == 200, "200 blocks recovered (%llu)",
	      (unsigned long long)stat_nvme(&d, "nvme_recovered"));
	CHECK(run(&d, "2", "1600", "0", false) == 0, "deleted blocks do not come back");
	CHECK(run(&d, "2", "1600", "0", true) == 0, "B stores again");
	WAIT_FOR(stat_nvme(&d, "nvme_writes") >= 100, "B's blocks to reach NVMe again");

	/* 3. Corruption while the daemon is down: a torn slot header and a
	 * flipped payload byte are misses; every intact block still loads. */
	daemon_stop(&d);
	const uint64_t region = 0, header = 8192, stride = 4096 + 32768;
	poke(&d, region + header + 10 * stride + 60);           /* slot 10's header */
	poke(&d, region + header + 20 * stride + 4096 + 777);   /* slot 20's payload */
	daemon_restart(&d, config);
	CHECK(stat_nvme(&d, "nvme_recovery_dropped") == 1, "the torn header is dropped");
	CHECK(run(&d, "1", "3200", NULL, false) == 0, "A: whatever loads is byte-exact");
	CHECK(run(&d, "2", "1600", NULL, false) == 0, "B: whatever loads is byte-exact");
	CHECK(stat_nvme(&d, "nvme_checksum_errors") == 1, "the flipped payload is caught (%llu)",
	      (unsigned long long)stat_nvme(&d, "nvme_checksum_errors"));

	/* 4. SIGKILL at random moments while clients store and load. */
	int cycles = getenv("KVT_LONG") ? 500 : 50;
	srand(12345);
	for (int i = 0; i < cycles; i++) {
		char seed[16];
		int in;
		FILE *out;
		snprintf(seed, sizeof(seed), "%d", 100 + i % 7);
		pid_t e = engine_spawn(&d, &in, &out, "--model", "tiny", "--prefix", "800",
				       "--prefix-seed", seed, "--suffix", "0", "--repeat", "3",
				       NULL);
		usleep((useconds_t)(rand() % 40000));
		daemon_kill(&d);
		kill(e, SIGKILL);
		wait_exit(e);
		close(in);
		fclose(out);
		daemon_restart(&d, config);
		CHECK(run(&d, seed, "800", NULL, false) == 0,
		      "after kill %d every byte served is exact", i);
	}
	daemon_stop(&d);
	char path[300];
	snprintf(path, sizeof(path), "%s/spill0", d.dir);
	unlink(path);

	/* 5. A full NVMe tier evicts its least recently used copies: one
	 * 64 MiB region holds 31 blocks of 2 MiB; 48 are written back. */
	snprintf(config, sizeof(config),
		 "[pool]\ncapacity = 16M\nextent_size = 4M\n"
		 "[nvme]\nengine = %s\nwriteback_high = 0%%\nwriteback_low = 0%%\n"
		 "[spill.a]\npath = @DIR@/spill0\ncapacity = 64M\n",
		 engine_kind());
	daemon_restart(&d, config);
	char out[4096];
	for (int i = 0; i < 6; i++) {
		char seed[16];
		snprintf(seed, sizeof(seed), "%d", 300 + i);
		CHECK(engine_run(&d, out, sizeof(out), "--prefix", "128", "--prefix-seed", seed,
				 "--suffix", "0", NULL) == 0, "store 8 blocks of 2 MiB");
		WAIT_FOR(stat_nvme(&d, "nvme_writes") >= 8u * (unsigned)(i + 1),
			 "write-back of each batch");
	}
	CHECK(stat_nvme(&d, "nvme_full") > 0, "the tier filled up");
	CHECK(stat_nvme(&d, "nvme_blocks") <= 31, "and never holds more than fits");
	for (int i = 0; i < 6; i++) {
		char seed[16];
		snprintf(seed, sizeof(seed), "%d", 300 + i);
		CHECK(engine_run(&d, out, sizeof(out), "--prefix", "128", "--prefix-seed", seed,
				 "--suffix", "0", "--no-store", NULL) == 0,
		      "whatever is still cached loads byte-exact");
	}
	CHECK(engine_run(&d, out, sizeof(out), "--prefix", "128", "--prefix-seed", "305",
			 "--suffix", "0", "--expect-hits", "8", "--no-store", NULL) == 0,
	      "the newest batch is all there");
	daemon_stop(&d);
	unlink(path);
	daemon_cleanup(&d);
	return 0;
}
