/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench-nvme: the NVMe tier end to end, against fio on the same file system
 * in the same run.
 *
 * It starts its own kvtierd (a private directory under --dir, default
 * /var/tmp, with the daemon's spill file and fio's file side by side) and
 * measures, as pairs of contenders run one after the other (A B A B ...):
 *
 *   1. spill: kvt_store of a set of 2 MiB blocks (a Llama-3-8B-shaped
 *      namespace: 32 layers, K and V, 8 KV heads of 256 bytes, 16 tokens),
 *      timed from the first store until the daemon's nvme_write_bytes say
 *      that every block is on disk (write-back is asynchronous), against
 *      fio writing as many bytes;
 *   2. restore: a set that is on NVMe only, looked up (this starts staging
 *      every block) and loaded into client memory in batches of --batch
 *      blocks in order, as an engine loads a request's prefix: each batch
 *      waits until it is resident (kvt_wait_resident, which sleeps on the
 *      daemon's notices) and is loaded with one kvt_load; and the same with
 *      one block a request (wait and load per block), the two in turn;
 *      timed from the first lookup to the last byte loaded, against fio
 *      reading as many bytes;
 *   3. the same two with the daemon's threads engine (a second daemon);
 *   4. an engine's restore of a whole context (token chain keys, kvt-engine's
 *      lookup/retry loop, then one kvt_load_paged into vLLM-style per-layer
 *      pages), against fio reading as many bytes, and the seconds for a
 *      128K-token context extrapolated from it;
 *   5. with --files: spill and restore with the io_uring engine over 1, 2,
 *      ... spill files side by side (a daemon for each count, one worker
 *      and ring per file), against fio running as many jobs, one on each
 *      of as many files of its own, the set's bytes split evenly; the
 *      daemon's event loop's own CPU per GB moved beside its whole CPU;
 *   6. with --codec: the same context restore, of one bfloat16 context
 *      stored in namespaces that differ only by codec (none, fp8-e4m3,
 *      int4), on a daemon of its own, the codecs in turn (A B C A B C ...),
 *      each against the none restore of the same round and against fio
 *      reading the bytes that codec's slots take.
 *
 * How a set gets to be on NVMe only: the host pool holds exactly one set.
 * Spilling a set evicts the previous one, which is clean by then; in the
 * restore pairs two sets take turns, each restore taking the whole pool by
 * evicting the other.  So every restore reads a set that left host memory
 * through the daemon's own eviction, and nothing is written while reads
 * are measured, nor read while writes are.  Write-back runs between
 * watermarks of 0 % (see daemon_start()).
 *
 * fio: ioengine=io_uring with registered buffers and files (as the
 * daemon's ring has them; --fio-plain for without), direct=1, bs=2M,
 * iodepth = the daemon's queue_depth, sequential, on a file of the spill
 * file's size, in two halves that alternate as kvtier's two sets do.  Both
 * files are preallocated and written through once before anything is
 * timed, so that neither contender pays ext4's conversion of unwritten
 * extents.
 *
 * CPU: the daemon's whole, every thread's (the NVMe workers', the threads
 * engine's), and its event loop's alone, the main thread's
 * (/proc/PID/task/PID/schedstat: its run time in nanoseconds; stat's ticks
 * are too coarse for a loop that should take a few ms a set).
 *
 * In phase 6 the pool holds every codec's copy of the context at once, and
 * a context leaves host memory through the daemon's eviction of its
 * namespace (kvt_admin_evict, host copies only) once it is on disk: with
 * slots of three sizes in one pool, eviction by pressure would not say
 * which blocks go.
 *
 * The ratios are medians of the pairwise ratios; targets are printed, not
 * asserted.  It fails only when something does not work or bytes come back
 * wrong (every restored block is checked).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
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
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../codec-bound.h"
#include "bench-util.h"
#include "kvtier.h"

#define MIB (1024ull * 1024ull)
#define MAX_PAIRS 1000

/* Llama-3-8B: 32 layers, K and V, 8 KV heads of head_dim 128 in 16 bit. */
#define LAYERS 32u
#define KV_HEADS 8u
#define HEAD_BYTES 256u
#define BLOCK_TOKENS 16u
#define BLOCK_BYTES ((uint64_t)LAYERS * 2 * KV_HEADS * HEAD_BYTES * BLOCK_TOKENS) /* 2 MiB */
#define TOKEN_BYTES (BLOCK_BYTES / BLOCK_TOKENS)                                /* 128 KiB */
#define PAGE_BYTES ((uint64_t)BLOCK_TOKENS * KV_HEADS * HEAD_BYTES)              /* 32 KiB */
#define CONTEXT_128K 131072ull

/* The spill file's format (docs/nvme.md): what a set occupies. */
#define REGION_BYTES (64 * MIB)
#define REGION_HEADER_BYTES 8192ull
#define SLOT_HEADER_BYTES 4096ull

/* Targets from the issue; printed next to the figures, never asserted. */
#define TARGET_SPILL 0.9   /* >= x fio write */
#define TARGET_RESTORE 0.9 /* >= x fio read */

#define STORE_CHUNK 8                  /* blocks per kvt_store: 16 MiB */
/* Blocks per restore's load: a 2048-token request's prefix of 16-token
 * blocks, which an engine loads as one batch (docs/benchmarks.md). */
#define RESTORE_BATCH 128
#define POLL_NS 1000000ull             /* stats and lookup polling: 1 ms */
#define ENGINE_POLL_NS 5000000ull      /* kvt-engine's DISK retry: 5 ms */
#define WAIT_LIMIT_NS 120000000000ull  /* a write-back or staging this slow is broken */
#define START_LIMIT_NS 30000000000ull  /* kvtierd listening */
#define STAMP_BYTES 16
#define MAX_FILES 8 /* --files: spill files (and fio jobs) at most */

enum { ENG_URING, ENG_THREADS, N_ENGINES };
static const char *engine_conf[N_ENGINES] = {"io_uring", "threads"};

static struct {
	unsigned pairs;
	uint64_t set_bytes; /* one set; also the host pool */
	unsigned queue_depth;
	unsigned batch; /* blocks per load in the restore pairs */
	bool engine[N_ENGINES];
	bool context;
	uint32_t codecs[KVT_CODEC_COUNT]; /* --codec: phase 5, in this order */
	unsigned n_codecs;
	unsigned file_counts[MAX_FILES]; /* --files: phase 5, in this order */
	unsigned n_file_counts;
	unsigned n_files; /* spill files of the daemon running, fio jobs */
	const char *dir;
	const char *fio;
	bool fio_plain; /* fio without registered buffers and files */
	bool json;
} opt = {
	.pairs = 7,
	.set_bytes = 1024 * MIB,
	.queue_depth = 64,
	.batch = RESTORE_BATCH,
	.engine = {true, true},
	.context = true,
	.n_files = 1,
	.dir = "/var/tmp",
	.fio = "fio",
};

/* ---- failing and cleaning up ---------------------------------------- */

const char bench_name[] = "bench-nvme";

static struct bench_daemon daemon_state;
/* Beside the daemon's files in its directory. */
static struct {
	char spill[160]; /* the first spill file, the only one but in phase 5 */
	char fio_file[160];
	char fio_err[160];
	/* Phase 5's others, the first being spill and fio_file. */
	char spills[MAX_FILES][160];
	char fio_files[MAX_FILES][160];
} files;
static pid_t fio_pid = 0;

_Noreturn void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	bench_vsay(fmt, ap);
	va_end(ap);
	if (fio_pid > 0) {
		kill(fio_pid, SIGKILL);
		waitpid(fio_pid, NULL, 0);
		fio_pid = 0;
	}
	bench_daemon_abort(&daemon_state);
	exit(1);
}

static void on_signal(int sig)
{
	/* Only async-signal-safe calls: the children go, and the private
	 * directory's known files with them. */
	if (fio_pid > 0) {
		kill(fio_pid, SIGKILL);
		waitpid(fio_pid, NULL, 0);
	}
	bench_daemon_kill(&daemon_state);
	if (daemon_state.dir[0]) {
		unlink(files.spill);
		unlink(files.fio_file);
		unlink(files.fio_err);
		for (unsigned i = 1; i < MAX_FILES; i++) {
			if (files.spills[i][0])
				unlink(files.spills[i]);
			if (files.fio_files[i][0])
				unlink(files.fio_files[i]);
		}
	}
	bench_daemon_unlink(&daemon_state);
	_exit(128 + sig);
}

/* ---- the files ------------------------------------------------------- */

static uint64_t blocks_per_set(void)
{
	return opt.set_bytes / BLOCK_BYTES;
}

/*
 * Two sets live on disk at once (the one being restored and the one just
 * spilled), in regions of whole slots, plus two spare regions for the
 * region a set shares with the next.  fio's file has the same size and
 * uses two halves of it.
 */
static uint64_t spill_capacity(void)
{
	uint64_t stride = SLOT_HEADER_BYTES + BLOCK_BYTES;
	uint64_t per_region = (REGION_BYTES - REGION_HEADER_BYTES) / stride;
	uint64_t regions = (blocks_per_set() + per_region - 1) / per_region;
	return (2 * regions + 2) * REGION_BYTES;
}

/*
 * Preallocate and write the whole file once, with O_DIRECT, so that no
 * timed write converts unwritten extents.  Bytes are pseudo-random (a
 * virtual disk may treat zeros specially), except that the spill file's
 * region headers are zero: an all-zero header is an unbound region.
 */
static void prewrite(const char *path, uint64_t bytes, bool region_headers)
{
	const uint64_t chunk = 8 * MIB;
	int fd = open(path, O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
	if (fd < 0)
		die("cannot open %s with O_DIRECT: %s", path, strerror(errno));
	if (fallocate(fd, 0, 0, (off_t)bytes) < 0)
		die("cannot preallocate %llu MiB for %s: %s", (unsigned long long)(bytes / MIB),
		    path, strerror(errno));
	uint8_t *buf = NULL;
	if (posix_memalign((void **)&buf, 4096, chunk))
		die("out of memory");
	for (uint64_t off = 0; off < bytes; off += chunk) {
		uint64_t len = bytes - off < chunk ? bytes - off : chunk;
		fill_random(buf, len, off ^ 0x5eed);
		if (region_headers && off % REGION_BYTES == 0)
			memset(buf, 0, REGION_HEADER_BYTES);
		for (uint64_t done = 0; done < len;) {
			ssize_t n = pwrite(fd, buf + done, len - done, (off_t)(off + done));
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				die("writing %s: %s", path, n < 0 ? strerror(errno) : "no progress");
			done += (uint64_t)n;
		}
	}
	if (fdatasync(fd) < 0)
		die("fdatasync %s: %s", path, strerror(errno));
	free(buf);
	close(fd);
}

/* "ext4 on vda": what the files sit on, for the report. */
static void describe_fs(const char *path, char *out, size_t size)
{
	struct statfs sf;
	struct stat st;
	const char *fs = "unknown file system";
	char dev[64] = "?", line[256], sys[128];

	if (statfs(path, &sf) == 0) {
		switch ((unsigned long)sf.f_type) {
		case 0xEF53: fs = "ext4"; break;
		case 0x58465342: fs = "xfs"; break;
		case 0x9123683E: fs = "btrfs"; break;
		case 0x01021994: fs = "tmpfs (not a disk!)"; break;
		case 0x2FC12FC1: fs = "zfs"; break;
		}
	}
	if (stat(path, &st) == 0) {
		snprintf(sys, sizeof(sys), "/sys/dev/block/%u:%u/uevent", major(st.st_dev),
			 minor(st.st_dev));
		FILE *f = fopen(sys, "re");
		if (f) {
			while (fgets(line, sizeof(line), f))
				if (!strncmp(line, "DEVNAME=", 8)) {
					line[strcspn(line, "\n")] = 0;
					snprintf(dev, sizeof(dev), "%.63s", line + 8);
				}
			fclose(f);
		}
	}
	snprintf(out, size, "%s on %s", fs, dev);
}

/* ---- the daemon ------------------------------------------------------ */

/*
 * The host pool is exactly one set (see the top of this file).  Write-back
 * watermarks of 0 %: every committed block is written back at once, so
 * that "spilled" has an end to time.  With the defaults (80 %/60 % of the
 * quota) write-back starts only above 80 % and stops at 60 %: a set the
 * size of the pool would never be entirely on disk.  Eviction is plain
 * LRU: the set stored or restored last takes the whole pool.  A policy
 * that weighs how often a block was used (lrfu-admit, the default) keeps
 * some blocks of the other set, whose restore would then not be from NVMe
 * alone.
 */
static void daemon_start(int engine)
{
	uint64_t extent = opt.set_bytes % (256 * MIB) ? 64 * MIB : 256 * MIB;
	char more[MAX_FILES * 220] = "";
	for (unsigned i = 1; i < opt.n_files; i++) {
		size_t l = strlen(more);
		snprintf(more + l, sizeof(more) - l, "[spill.bench%u]\npath = %s\ncapacity = %lluM\n", i,
			 files.spills[i], (unsigned long long)(spill_capacity() / MIB));
	}
	bench_daemon_config(&daemon_state,
			    "[pool]\ncapacity = %lluM\nextent_size = %lluM\neviction = lru\n"
			    "[nvme]\nengine = %s\nqueue_depth = %u\n"
			    "writeback_high = 0%%\nwriteback_low = 0%%\n"
			    "[spill.bench]\npath = %s\ncapacity = %lluM\n%s"
			    "[limits]\nkeys_per_request = 8192\n",
			    (unsigned long long)(opt.set_bytes / MIB),
			    (unsigned long long)(extent / MIB), engine_conf[engine], opt.queue_depth,
			    files.spill,
			    (unsigned long long)(spill_capacity() / MIB), more);
	bench_daemon_start(&daemon_state, START_LIMIT_NS);
}

struct dstats {
	bool nvme;
	uint64_t write_bytes, writes, read_bytes, reads, in_flight;
	uint64_t io_errors, checksum_errors, full;
	char engine[32], reason[192];
	bool ns_seen;
	uint64_t dirty_drops, spills, restores;
};

static int stats_record(const kvt_record *r, void *userdata)
{
	struct dstats *d = userdata;
	const char *kind = kvt_record_kind(r);

	if (!strcmp(kind, "namespace")) {
		d->ns_seen = true;
		kvt_record_get_u64(r, "dirty_drops", &d->dirty_drops);
		kvt_record_get_u64(r, "spills", &d->spills);
		kvt_record_get_u64(r, "restores", &d->restores);
		return 0;
	}
	if (strcmp(kind, "daemon"))
		return 0;
	d->nvme = kvt_record_get_u64(r, "nvme_write_bytes", &d->write_bytes) == 0;
	kvt_record_get_u64(r, "nvme_writes", &d->writes);
	kvt_record_get_u64(r, "nvme_read_bytes", &d->read_bytes);
	kvt_record_get_u64(r, "nvme_reads", &d->reads);
	kvt_record_get_u64(r, "nvme_in_flight", &d->in_flight);
	kvt_record_get_u64(r, "nvme_io_errors", &d->io_errors);
	kvt_record_get_u64(r, "nvme_checksum_errors", &d->checksum_errors);
	kvt_record_get_u64(r, "nvme_full", &d->full);
	const char *s = kvt_record_get_str(r, "nvme_engine");
	snprintf(d->engine, sizeof(d->engine), "%s", s ? s : "?");
	s = kvt_record_get_str(r, "nvme_engine_reason");
	snprintf(d->reason, sizeof(d->reason), "%s", s ? s : "");
	return 0;
}

static void get_stats(kvt_client *c, uint32_t what, struct dstats *d)
{
	memset(d, 0, sizeof(*d));
	int r = kvt_stats(c, what, stats_record, d);
	if (r < 0)
		die("kvt_stats: %s (%s)", strerror(-r), kvt_client_error(c));
	if (!d->nvme)
		die("the daemon reports no NVMe tier (nvme_* fields missing from its \"daemon\" record)");
	if (d->io_errors || d->checksum_errors || d->full)
		die("the NVMe tier reports %llu I/O errors, %llu checksum errors, %llu times full",
		    (unsigned long long)d->io_errors, (unsigned long long)d->checksum_errors,
		    (unsigned long long)d->full);
}

/* Nothing in flight: a sample starts on an idle tier. */
static void wait_idle(kvt_client *c, struct dstats *d)
{
	uint64_t t0 = kvt_now_ns();
	for (;;) {
		get_stats(c, KVT_STATS_DAEMON, d);
		if (d->in_flight == 0)
			return;
		if (kvt_now_ns() - t0 > WAIT_LIMIT_NS)
			die("%llu NVMe I/Os still in flight after %llu s",
			    (unsigned long long)d->in_flight, WAIT_LIMIT_NS / 1000000000ull);
		sleep_ns(POLL_NS);
	}
}

/* ---- fio ------------------------------------------------------------- */

/* The number after "key" : within the text from p on. */
static bool json_u64(const char *p, const char *key, uint64_t *ret)
{
	char pat[64];
	snprintf(pat, sizeof(pat), "\"%s\"", key);
	const char *q = strstr(p, pat);
	if (!q)
		return false;
	q = strchr(q + strlen(pat), ':');
	if (!q)
		return false;
	return sscanf(q + 1, " %llu", (unsigned long long *)ret) == 1;
}

/* The object "key" : { ... } from p on (not a string value "key"). */
static const char *json_object(const char *p, const char *key)
{
	char pat[64];
	snprintf(pat, sizeof(pat), "\"%s\"", key);
	for (const char *q = strstr(p, pat); q; q = strstr(q + 1, pat)) {
		const char *r = q + strlen(pat);
		while (*r == ' ' || *r == '\t' || *r == '\n')
			r++;
		if (*r++ != ':')
			continue;
		while (*r == ' ' || *r == '\t' || *r == '\n')
			r++;
		if (*r == '{')
			return r;
	}
	return NULL;
}

static void fio_err_tail(void)
{
	char line[512];
	FILE *f = fopen(files.fio_err, "re");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f))
		fputs(line, stderr);
	fclose(f);
}

/* One fio job, or opt.n_files jobs, each on its own file with an even
 * share of the bytes, reported as a group; \return GB/s as fio measured it
 * (bytes over its runtime, the slowest job's). */
static double fio_run(bool write, uint64_t offset, uint64_t bytes)
{
	char a_file[MAX_FILES][200], a_name[MAX_FILES][40], a_size[64], a_offset[64], a_depth[64],
		a_rw[32];
	unsigned jobs_n = opt.n_files;
	for (unsigned i = 0; i < jobs_n; i++) {
		snprintf(a_file[i], sizeof(a_file[i]), "--filename=%s",
			 i ? files.fio_files[i] : files.fio_file);
		snprintf(a_name[i], sizeof(a_name[i]), "--name=kvt-bench-nvme-%u", i);
	}
	snprintf(a_size, sizeof(a_size), "--size=%llu", (unsigned long long)(bytes / jobs_n));
	snprintf(a_offset, sizeof(a_offset), "--offset=%llu", (unsigned long long)offset);
	snprintf(a_depth, sizeof(a_depth), "--iodepth=%u", opt.queue_depth);
	snprintf(a_rw, sizeof(a_rw), "--rw=%s", write ? "write" : "read");
	/* Registered buffers and files, as the daemon's ring has them, unless
	 * --fio-plain. */
	const char *fixed = opt.fio_plain ? "--fixedbufs=0" : "--fixedbufs=1";
	const char *regf = opt.fio_plain ? "--registerfiles=0" : "--registerfiles=1";
	/* Options before the first --name are global; each --name starts a
	 * job with its own file. */
	char *argv[16 + 2 * MAX_FILES] = {(char *)opt.fio, a_size, a_offset,
			"--bs=2M", a_depth, "--ioengine=io_uring", (char *)fixed, (char *)regf,
			"--direct=1", a_rw, "--fallocate=native", "--output-format=json",
			"--group_reporting"};
	unsigned argc = 13;
	for (unsigned i = 0; i < jobs_n; i++) {
		argv[argc++] = a_name[i];
		argv[argc++] = a_file[i];
	}
	argv[argc] = NULL;
	int pfd[2];

	if (pipe2(pfd, O_CLOEXEC) < 0)
		die("pipe: %s", strerror(errno));
	fio_pid = fork();
	if (fio_pid < 0)
		die("fork: %s", strerror(errno));
	if (fio_pid == 0) {
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		signal(SIGHUP, SIG_DFL);
		int efd = open(files.fio_err, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		dup2(pfd[1], 1);
		if (efd >= 0)
			dup2(efd, 2);
		execvp(argv[0], argv);
		fprintf(stderr, "cannot execute %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(pfd[1]);
	size_t cap = 1 << 16, len = 0;
	char *out = malloc(cap);
	if (!out)
		die("out of memory");
	for (;;) {
		if (len + 1 >= cap) {
			char *n = realloc(out, cap *= 2);
			if (!n)
				die("out of memory");
			out = n;
		}
		ssize_t n = read(pfd[0], out + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	out[len] = 0;
	close(pfd[0]);
	int status;
	if (waitpid(fio_pid, &status, 0) != fio_pid)
		die("waitpid fio: %s", strerror(errno));
	fio_pid = 0;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fio_err_tail();
		die("fio (%s) failed with status %d", opt.fio, status);
	}

	uint64_t io_bytes = 0, runtime_ms = 0, err = 0;
	const char *jobs = strstr(out, "\"jobs\"");
	const char *dir = jobs ? json_object(jobs, write ? "write" : "read") : NULL;
	if (!jobs || !json_u64(jobs, "error", &err) || !dir ||
	    !json_u64(dir, "io_bytes", &io_bytes) || !json_u64(dir, "runtime", &runtime_ms))
		die("cannot read fio's JSON output:\n%.2000s", out);
	free(out);
	if (err)
		die("fio reports error %llu", (unsigned long long)err);
	if (io_bytes != bytes / jobs_n * jobs_n || runtime_ms == 0)
		die("fio moved %llu bytes in %llu ms, expected %llu bytes",
		    (unsigned long long)io_bytes, (unsigned long long)runtime_ms,
		    (unsigned long long)bytes);
	return (double)io_bytes / ((double)runtime_ms * 1e6);
}

/* ---- CPU time --------------------------------------------------------- */

/* What one timed sample took: wall time, and CPU time of both processes. */
struct sample {
	uint64_t ns;     /* the measured interval */
	uint64_t aux_ns; /* spill: until the last store returned; engine
			  * restore: until everything was resident */
	uint64_t first_ns; /* batched restore: the set's first batch resident */
	uint64_t aux_bytes; /* spill: on disk when the last store returned */
	uint64_t daemon_cpu_ns, bench_cpu_ns;
	uint64_t loop_cpu_ns; /* the daemon's main thread's: its event loop */
};

/* The daemon's CPU time so far: every thread's (the threads engine's
 * workers too), from schedstat, in nanoseconds. */
static uint64_t daemon_cpu_ns(void)
{
	char path[96], line[128];
	uint64_t sum = 0;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)daemon_state.pid);
	DIR *d = opendir(path);
	if (!d)
		return 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%.16s/schedstat", (int)daemon_state.pid,
			 e->d_name);
		FILE *f = fopen(path, "re");
		if (!f)
			continue;
		unsigned long long ns;
		if (fgets(line, sizeof(line), f) && sscanf(line, "%llu", &ns) == 1)
			sum += ns;
		fclose(f);
	}
	closedir(d);
	return sum;
}

/* The daemon's event loop's CPU time so far: its main thread's, from
 * schedstat (nanoseconds; stat's clock ticks are too coarse here). */
static uint64_t daemon_loop_cpu_ns(void)
{
	char path[96], line[128];
	unsigned long long ns = 0;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/schedstat", (int)daemon_state.pid,
		 (int)daemon_state.pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return 0;
	if (!fgets(line, sizeof(line), f) || sscanf(line, "%llu", &ns) != 1)
		ns = 0;
	fclose(f);
	return ns;
}

static uint64_t bench_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void cpu_begin(struct sample *sm)
{
	sm->daemon_cpu_ns = daemon_cpu_ns();
	sm->loop_cpu_ns = daemon_loop_cpu_ns();
	sm->bench_cpu_ns = bench_cpu_ns();
}

static void cpu_end(struct sample *sm)
{
	sm->daemon_cpu_ns = daemon_cpu_ns() - sm->daemon_cpu_ns;
	sm->loop_cpu_ns = daemon_loop_cpu_ns() - sm->loop_cpu_ns;
	sm->bench_cpu_ns = bench_cpu_ns() - sm->bench_cpu_ns;
}

/* ---- sets of blocks -------------------------------------------------- */

struct bench {
	kvt_client *c;
	kvt_ns *ns;
	uint64_t n;        /* blocks per set */
	uint64_t slot_bytes; /* a block as the daemon stores it (b->ns's) */
	uint8_t *src, *dst; /* set_bytes each */
	const void **srcs;
	void **dsts;
	uint8_t *keys[2];  /* two sets' keys: the one spilled, the one restored */
	uint8_t *states;
	int32_t *status;
	int64_t *pages;
	/* The context phase: per-layer pages (2, n, 16, heads, head_bytes),
	 * laid over src and dst. */
	void *src_layers[LAYERS], *dst_layers[LAYERS];
	kvt_layout src_layout, dst_layout;
};

static uint8_t *set_keys(struct bench *b, unsigned set)
{
	return b->keys[set % 2];
}

/* Random keys for set `set` of phase `phase`. */
static void make_set_keys(struct bench *b, unsigned phase, unsigned set)
{
	uint8_t *keys = set_keys(b, set);
	for (uint64_t i = 0; i < b->n; i++)
		make_keys(keys + i * KVT_KEY_BYTES, 1,
			  ((uint64_t)phase << 56) ^ ((uint64_t)set << 32) ^ (i << 3));
}

/* Keys of a context: a token chain, as an engine hashes its prompt. */
static void make_context_keys(struct bench *b, unsigned ctx)
{
	uint64_t n_tokens = b->n * BLOCK_TOKENS;
	uint32_t *tokens = malloc(n_tokens * sizeof(uint32_t));
	if (!tokens)
		die("out of memory");
	for (uint64_t i = 0; i < n_tokens; i++)
		tokens[i] = (uint32_t)(mix(((uint64_t)ctx << 40) + i) % 128256);
	int r = kvt_hash_chain(NULL, tokens, n_tokens, BLOCK_TOKENS, NULL, 0, set_keys(b, ctx),
			       b->n);
	if (r != (int)b->n)
		die("kvt_hash_chain: %d", r);
	free(tokens);
}

/*
 * A stamp (phase, set, block) at both ends of each block (in the context
 * phase: at the start of each block's page in layer 0, plane 0), so that
 * bytes of another set cannot pass; the rest of a block is the same
 * pseudo-random bytes in every set.
 */
static void stamp_for(unsigned phase, unsigned set, uint64_t block, uint8_t *out)
{
	uint64_t s[2] = {((uint64_t)phase << 32) | set, block ^ 0x57a3ull};
	memcpy(out, s, STAMP_BYTES);
}

static void stamp_set(struct bench *b, unsigned phase, unsigned set, bool context)
{
	uint8_t st[STAMP_BYTES];
	for (uint64_t i = 0; i < b->n; i++) {
		stamp_for(phase, set, i, st);
		if (context) {
			memcpy((uint8_t *)b->src_layers[0] + i * PAGE_BYTES, st, STAMP_BYTES);
		} else {
			memcpy(b->src + i * BLOCK_BYTES, st, STAMP_BYTES);
			memcpy(b->src + (i + 1) * BLOCK_BYTES - STAMP_BYTES, st, STAMP_BYTES);
		}
	}
}

/* src carries the stamps of a later set by now: compare around them. */
static void verify_set(struct bench *b, unsigned phase, unsigned set, bool context)
{
	uint8_t st[STAMP_BYTES];
	for (uint64_t i = 0; i < b->n; i++) {
		stamp_for(phase, set, i, st);
		const uint8_t *d, *s;
		uint64_t len;
		bool ok;
		if (context) {
			d = (const uint8_t *)b->dst_layers[0] + i * PAGE_BYTES;
			s = (const uint8_t *)b->src_layers[0] + i * PAGE_BYTES;
			len = PAGE_BYTES;
			ok = !memcmp(d, st, STAMP_BYTES) &&
			     !memcmp(d + STAMP_BYTES, s + STAMP_BYTES, len - STAMP_BYTES);
		} else {
			d = b->dst + i * BLOCK_BYTES;
			s = b->src + i * BLOCK_BYTES;
			len = BLOCK_BYTES;
			ok = !memcmp(d, st, STAMP_BYTES) &&
			     !memcmp(d + len - STAMP_BYTES, st, STAMP_BYTES) &&
			     !memcmp(d + STAMP_BYTES, s + STAMP_BYTES, len - 2 * STAMP_BYTES);
		}
		if (!ok)
			die("set %u, block %llu came back with different bytes", set,
			    (unsigned long long)i);
	}
	if (context) {
		/* Everything but layer 0's stamped pages: as stored. */
		uint64_t plane = PAGE_BYTES * b->n;
		if (memcmp((uint8_t *)b->dst_layers[0] + plane, (uint8_t *)b->src_layers[0] + plane,
			   plane))
			die("context %u: layer 0, V came back with different bytes", set);
		for (unsigned l = 1; l < LAYERS; l++)
			if (memcmp(b->dst_layers[l], b->src_layers[l], 2 * plane))
				die("context %u: layer %u came back with different bytes", set, l);
	}
}

/*
 * Spill: store the set (chunks of STORE_CHUNK blocks, as an engine stores
 * request by request) and wait until the daemon has written every block.
 * ret->ns: first store to last block on disk; ret->aux_ns: until the last
 * store returned, when ret->aux_bytes were on disk.
 */
static void spill(struct bench *b, unsigned set, bool context, struct sample *ret)
{
	const uint8_t *keys = set_keys(b, set);
	struct dstats d0, d;

	wait_idle(b->c, &d0);
	uint64_t want = d0.write_bytes + b->n * b->slot_bytes;
	memset(ret, 0, sizeof(*ret));
	cpu_begin(ret);
	uint64_t t0 = kvt_now_ns();
	for (uint64_t i = 0; i < b->n; i += STORE_CHUNK) {
		size_t k = b->n - i < STORE_CHUNK ? (size_t)(b->n - i) : STORE_CHUNK;
		int r;
		if (context)
			r = kvt_store_paged(b->ns, 0, &b->src_layout, keys + i * KVT_KEY_BYTES, k,
					    b->pages + i, b->status);
		else
			r = kvt_store(b->ns, 0, keys + i * KVT_KEY_BYTES, k, b->srcs + i,
				      b->status);
		if (r != (int)k)
			die("kvt_store of %zu blocks stored %d (%s)", k, r, kvt_client_error(b->c));
		for (size_t j = 0; j < k; j++)
			if (b->status[j] != 0) /* -EEXIST would mean no copy happened */
				die("kvt_store: block %llu status %d",
				    (unsigned long long)(i + j), b->status[j]);
	}
	uint64_t t1 = kvt_now_ns();
	bool first = true;
	for (;;) {
		get_stats(b->c, KVT_STATS_DAEMON, &d);
		if (first)
			ret->aux_bytes = d.write_bytes - d0.write_bytes;
		first = false;
		if (d.write_bytes >= want)
			break;
		if (kvt_now_ns() - t0 > WAIT_LIMIT_NS)
			die("write-back of set %u: %llu of %llu MiB on disk after %llu s", set,
			    (unsigned long long)((d.write_bytes - d0.write_bytes) / MIB),
			    (unsigned long long)(b->n * b->slot_bytes / MIB),
			    WAIT_LIMIT_NS / 1000000000ull);
		sleep_ns(POLL_NS);
	}
	uint64_t t2 = kvt_now_ns();
	cpu_end(ret);
	if (d.write_bytes != want || d.writes - d0.writes != b->n)
		die("write-back of set %u: %llu blocks, %llu bytes written, expected %llu blocks",
		    set, (unsigned long long)(d.writes - d0.writes),
		    (unsigned long long)(d.write_bytes - d0.write_bytes),
		    (unsigned long long)b->n);
	/* Still all there: nothing was dropped for want of a clean victim. */
	int r = kvt_lookup(b->ns, keys, b->n, 0, b->states);
	if (r != (int)b->n)
		die("after spilling set %u: %d of %llu blocks found", set, r,
		    (unsigned long long)b->n);
	ret->ns = t2 - t0;
	ret->aux_ns = t1 - t0;
}

static void expect_all_on_disk(struct bench *b, unsigned set, int r)
{
	if (r != (int)b->n)
		die("restore of set %u: lookup found %d of %llu blocks", set, r,
		    (unsigned long long)b->n);
	uint64_t host = 0;
	for (uint64_t i = 0; i < b->n; i++)
		host += b->states[i] == KVT_HOST;
	if (host)
		die("restore of set %u: %llu of %llu blocks are still in host memory, so this would not measure NVMe",
		    set, (unsigned long long)host, (unsigned long long)b->n);
}

/*
 * Restore as an engine loads requests' prefixes: one lookup of the whole
 * set starts staging every block; then, batch by batch in order, wait until
 * the batch is resident (kvt_wait_resident: the client sleeps on the
 * daemon's BLOCK_READY notices) and load it with one kvt_load.  batch 1 is
 * a request (and a wait) per block.  ret->ns: first lookup to last byte
 * loaded; ret->aux_ns: until the last batch was resident; ret->first_ns:
 * until the first batch (the head of the prefix) was resident.
 */
static void restore_batched(struct bench *b, unsigned set, unsigned batch, struct sample *ret)
{
	const uint8_t *keys = set_keys(b, set);
	struct dstats d;
	uint64_t t_resident = 0;

	wait_idle(b->c, &d);
	memset(b->dst, 0xa5, b->n * BLOCK_BYTES);
	memset(ret, 0, sizeof(*ret));
	cpu_begin(ret);
	uint64_t t0 = kvt_now_ns();
	int r = kvt_lookup(b->ns, keys, b->n, 0, b->states);
	expect_all_on_disk(b, set, r);
	for (uint64_t i = 0; i < b->n; i += batch) {
		size_t k = b->n - i < batch ? (size_t)(b->n - i) : batch;
		const uint8_t *bk = keys + i * KVT_KEY_BYTES;
		r = kvt_wait_resident(b->ns, bk, k, (uint32_t)(WAIT_LIMIT_NS / 1000000ull));
		if (r != (int)k)
			die("restore of set %u: blocks %llu..%llu: %d of %zu resident (%s)", set,
			    (unsigned long long)i, (unsigned long long)(i + k - 1), r, k,
			    r < 0 ? strerror(-r) : "one failed verification?");
		t_resident = kvt_now_ns();
		if (i == 0)
			ret->first_ns = t_resident - t0;
		r = kvt_load(b->ns, 0, bk, k, b->dsts + i, b->status);
		if (r != (int)k)
			die("restore of set %u: kvt_load of %zu resident blocks loaded %d", set, k, r);
	}
	ret->ns = kvt_now_ns() - t0;
	ret->aux_ns = t_resident - t0;
	cpu_end(ret);
}

/*
 * Restore as tests/engine-sim/kvt-engine.c does: look up the whole context
 * (with TOUCH), ask again every 5 ms while any block is on disk, then one
 * kvt_load_paged into the engine's pages.  ret->ns: first lookup to last
 * byte loaded; ret->aux_ns: to the lookup that found everything resident.
 */
static void restore_engine(struct bench *b, unsigned ctx, struct sample *ret)
{
	const uint8_t *keys = set_keys(b, ctx);
	struct dstats d;

	wait_idle(b->c, &d);
	memset(b->dst, 0xa5, b->n * BLOCK_BYTES);
	memset(ret, 0, sizeof(*ret));
	cpu_begin(ret);
	uint64_t t0 = kvt_now_ns();
	int r = kvt_lookup(b->ns, keys, b->n, KVT_LOOKUP_TOUCH, b->states);
	expect_all_on_disk(b, ctx, r);
	uint64_t disk = b->n;
	while (disk) {
		if (kvt_now_ns() - t0 > WAIT_LIMIT_NS)
			die("context %u: %llu blocks still on disk after %llu s", ctx,
			    (unsigned long long)disk, WAIT_LIMIT_NS / 1000000000ull);
		sleep_ns(ENGINE_POLL_NS);
		r = kvt_lookup(b->ns, keys, b->n, 0, b->states);
		if (r != (int)b->n)
			die("context %u: %d of %llu blocks still found (one failed verification?)",
			    ctx, r, (unsigned long long)b->n);
		disk = 0;
		for (uint64_t i = 0; i < b->n; i++)
			disk += b->states[i] == KVT_DISK;
	}
	uint64_t t1 = kvt_now_ns();
	r = kvt_load_paged(b->ns, 0, &b->dst_layout, keys, b->n, b->pages, b->status);
	if (r != (int)b->n)
		die("context %u: kvt_load_paged of %llu resident blocks loaded %d", ctx,
		    (unsigned long long)b->n, r);
	uint64_t t2 = kvt_now_ns();
	cpu_end(ret);
	ret->ns = t2 - t0;
	ret->aux_ns = t1 - t0;
}

/* Deleting in reverse order hands the set's NVMe slots back so that the
 * next set is written in ascending offsets again (slots are a stack). */
static void delete_set(struct bench *b, unsigned set)
{
	const uint8_t *keys = set_keys(b, set);
	for (uint64_t i = b->n; i-- > 0;) {
		int r = kvt_delete(b->ns, keys + i * KVT_KEY_BYTES, 1);
		if (r != 1)
			die("kvt_delete of block %llu of set %u found %d", (unsigned long long)i, set,
			    r);
	}
}

/* ---- the phases ------------------------------------------------------ */

struct pairs {
	double kv[MAX_PAIRS], fio[MAX_PAIRS], ratio[MAX_PAIRS];
	double kv_s[MAX_PAIRS], fio_s[MAX_PAIRS];
	double aux_s[MAX_PAIRS]; /* spill: stores returned; restores: all resident */
	double first_s[MAX_PAIRS]; /* batched restore: first batch resident */
	double aux_mib[MAX_PAIRS]; /* spill: MiB on disk when the stores returned */
	double dcpu_ms[MAX_PAIRS], bcpu_ms[MAX_PAIRS]; /* CPU: daemon, bench */
	double dcpu_s_gb[MAX_PAIRS]; /* the daemon's CPU seconds per GB moved */
	double lcpu_s_gb[MAX_PAIRS]; /* its event loop's alone */
};

/* A node of 8 NVMe drives at this many GB/s together: the cores the daemon
 * would need at the CPU per byte measured here (docs/benchmarks.md). */
#define NODE_GBS 50.0

struct engine_result {
	bool ran;
	char engine[32], reason[192], nvme_line[512], pool[256];
	struct pairs spill, restore; /* restore: batches of opt.batch */
	struct pairs restore1;       /* a block a request (when opt.batch > 1) */
	uint64_t dirty_drops, spills, restores;
};

struct context_result {
	bool ran;
	struct pairs r;
	uint64_t tokens;
};

static struct engine_result E[N_ENGINES];
/* Phase 5, in opt.file_counts' order. */
static struct engine_result F[MAX_FILES];
static struct context_result C;

static void record(struct pairs *p, unsigned i, uint64_t bytes, const struct sample *sm,
		   double fio_gbs)
{
	p->kv[i] = gbs(bytes, sm->ns);
	p->fio[i] = fio_gbs;
	p->ratio[i] = p->kv[i] / fio_gbs;
	p->kv_s[i] = (double)sm->ns / 1e9;
	p->fio_s[i] = (double)bytes / (fio_gbs * 1e9);
	p->aux_s[i] = (double)sm->aux_ns / 1e9;
	p->first_s[i] = (double)sm->first_ns / 1e9;
	p->aux_mib[i] = (double)sm->aux_bytes / MIB;
	p->dcpu_ms[i] = (double)sm->daemon_cpu_ns / 1e6;
	p->bcpu_ms[i] = (double)sm->bench_cpu_ns / 1e6;
	/* Around the whole run: checksums, the event loop, the io_uring
	 * submissions (and the threads engine's workers). */
	p->dcpu_s_gb[i] = ((double)sm->daemon_cpu_ns / 1e9) / ((double)bytes / 1e9);
	p->lcpu_s_gb[i] = ((double)sm->loop_cpu_ns / 1e9) / ((double)bytes / 1e9);
}

static void connect_daemon(struct bench *b)
{
	b->c = bench_daemon_connect(&daemon_state);
	b->ns = bench_ns_open(b->c, "bench-nvme-llama3-8b", LAYERS, KV_HEADS, HEAD_BYTES,
			      BLOCK_BYTES);
}

static void disconnect_daemon(struct bench *b)
{
	kvt_ns_close(b->ns);
	kvt_client_free(b->c);
	b->ns = NULL;
	b->c = NULL;
}

static void phase_end(struct bench *b, struct engine_result *er)
{
	struct dstats d;
	get_stats(b->c, KVT_STATS_DAEMON | KVT_STATS_NAMESPACES, &d);
	if (!d.ns_seen)
		die("the daemon reports no namespace record");
	if (d.dirty_drops)
		die("%llu dirty blocks were dropped from host memory: the measurement lost data",
		    (unsigned long long)d.dirty_drops);
	if (er) {
		er->dirty_drops = d.dirty_drops;
		er->spills = d.spills;
		er->restores = d.restores;
	}
}

/* fio's half of its file for pair i: the halves alternate, as kvtier's two
 * sets do in the spill file. */
static uint64_t fio_offset(unsigned i)
{
	return (i % 2) * opt.set_bytes;
}

/*
 * Spill pairs.  Set 0 is spilled first, untimed (the daemon creates its
 * extents).  Pair i (i = 0 is a warm-up, not recorded): delete set i-1,
 * which is on NVMe only by now (no I/O: freeing a slot does not erase
 * it); spill set i+1, whose stores evict set i from the full pool (it is
 * clean); fio writes.  Afterwards set P is on NVMe only and set P+1 in host
 * memory, both on disk, for the restore pairs.
 */
static void phase_spill(struct bench *b, struct engine_result *er, const char *label,
			unsigned phase)
{
	uint64_t bytes = b->n * BLOCK_BYTES;
	struct sample t;

	make_set_keys(b, phase, 0);
	stamp_set(b, phase, 0, false);
	spill(b, 0, false, &t);
	progress("  set 0 spilled in %.3f s (%.2f GB/s), untimed", (double)t.ns / 1e9,
		 gbs(bytes, t.ns));
	for (unsigned i = 0; i <= opt.pairs; i++) {
		unsigned k = i + 1;
		if (k >= 2)
			delete_set(b, k - 2);
		make_set_keys(b, phase, k);
		stamp_set(b, phase, k, false);
		spill(b, k, false, &t);
		double fw = fio_run(true, fio_offset(i), bytes);
		if (i == 0) {
			progress("  warm-up pair: spill %.2f GB/s, fio write %.2f GB/s",
				 gbs(bytes, t.ns), fw);
			continue;
		}
		record(&er->spill, i - 1, bytes, &t, fw);
		progress("  %s spill pair %u/%u: kvtier %.2f GB/s (%.3f s, stores done at %.3f s with %.0f MiB on disk; CPU daemon %.0f ms, its loop %.4f s/GB, bench %.0f ms), fio write %.2f GB/s: %.3f",
			 label, i, opt.pairs, er->spill.kv[i - 1], er->spill.kv_s[i - 1],
			 er->spill.aux_s[i - 1], er->spill.aux_mib[i - 1], er->spill.dcpu_ms[i - 1],
			 er->spill.lcpu_s_gb[i - 1],
			 er->spill.bcpu_ms[i - 1], fw,
			 er->spill.ratio[i - 1]);
	}
}

/*
 * Restore pairs, on the two sets the spill pairs left: restoring one
 * needs the whole pool and evicts the other (clean, so it stays on disk),
 * so they take turns and nothing is written meanwhile.  Pair i (i = 0 is
 * a warm-up): restore in batches of opt.batch, and (when that is not 1)
 * restore the other set a block a request, in turns which goes first; fio
 * read; every byte checked after each restore.
 */
static void phase_restore(struct bench *b, struct engine_result *er, const char *label,
			  unsigned phase)
{
	uint64_t bytes = b->n * BLOCK_BYTES;
	unsigned last = opt.pairs + 1; /* the set in host memory */
	unsigned resident = last;
	unsigned kinds = opt.batch > 1 ? 2 : 1;

	for (unsigned i = 0; i <= opt.pairs; i++) {
		struct sample t[2];
		for (unsigned j = 0; j < kinds; j++) {
			unsigned kind = kinds == 2 ? (i + j) % 2 : 0; /* 0: batched */
			unsigned set = resident == last ? last - 1 : last;
			restore_batched(b, set, kind ? 1 : opt.batch, &t[kind]);
			verify_set(b, phase, set, false);
			resident = set;
		}
		double fr = fio_run(false, fio_offset(i + 1), bytes);
		if (i == 0) {
			progress("  warm-up pair: restore %.2f GB/s, fio read %.2f GB/s",
				 gbs(bytes, t[0].ns), fr);
			continue;
		}
		for (unsigned kind = 0; kind < kinds; kind++) {
			struct pairs *p = kind ? &er->restore1 : &er->restore;
			record(p, i - 1, bytes, &t[kind], fr);
			progress("  %s restore pair %u/%u, %u block%s a load: kvtier %.2f GB/s (%.3f s, first batch resident at %.3f s, last at %.3f s; CPU daemon %.0f ms, its loop %.4f s/GB, bench %.0f ms), fio read %.2f GB/s: %.3f",
				 label, i, opt.pairs, kind ? 1 : opt.batch,
				 (kind ? 1 : opt.batch) > 1 ? "s" : "", p->kv[i - 1], p->kv_s[i - 1],
				 p->first_s[i - 1], p->aux_s[i - 1], p->dcpu_ms[i - 1],
				 p->lcpu_s_gb[i - 1], p->bcpu_ms[i - 1], fr, p->ratio[i - 1]);
		}
	}
	delete_set(b, last - 1);
	delete_set(b, last);
	phase_end(b, er);
	er->ran = true;
}

/*
 * Context pairs: two contexts are stored (untimed; the second evicts the
 * first) and then take turns as in the restore pairs.  Pair i (i = 0 is a
 * warm-up): restore a context as kvt-engine does, fio read, check.
 */
static void phase_context(struct bench *b)
{
	const unsigned phase = 9;
	uint64_t bytes = b->n * BLOCK_BYTES;
	struct sample t;

	C.tokens = b->n * BLOCK_TOKENS;
	for (unsigned ctx = 0; ctx < 2; ctx++) {
		make_context_keys(b, ctx);
		stamp_set(b, phase, ctx, true);
		spill(b, ctx, true, &t);
	}
	for (unsigned i = 0; i <= opt.pairs; i++) {
		unsigned ctx = i % 2;
		struct sample tr;
		restore_engine(b, ctx, &tr);
		double fr = fio_run(false, fio_offset(i + 1), bytes);
		verify_set(b, phase, ctx, true);
		if (i == 0) {
			progress("  warm-up pair: context restored in %.3f s (%.2f GB/s), fio read %.2f GB/s",
				 (double)tr.ns / 1e9, gbs(bytes, tr.ns), fr);
			continue;
		}
		record(&C.r, i - 1, bytes, &tr, fr);
		progress("  context pair %u/%u: %llu tokens in %.3f s (%.2f GB/s; all resident at %.3f s; CPU daemon %.0f ms, bench %.0f ms), fio read %.3f s (%.2f GB/s): %.3f",
			 i, opt.pairs, (unsigned long long)C.tokens, C.r.kv_s[i - 1], C.r.kv[i - 1],
			 C.r.aux_s[i - 1], C.r.dcpu_ms[i - 1], C.r.bcpu_ms[i - 1], C.r.fio_s[i - 1], fr,
			 C.r.ratio[i - 1]);
	}
	delete_set(b, 0);
	delete_set(b, 1);
	phase_end(b, NULL);
	C.ran = true;
}

/* ---- phase 5: the context by codec ------------------------------------ */

#define CODEC_TILES 4 /* (layer, head)s checked a block, K and V, after the first round */

struct codec_result {
	bool ran;
	uint64_t tokens;
	uint64_t slot[KVT_CODEC_COUNT]; /* a block as stored, in opt.codecs' order */
	struct pairs r[KVT_CODEC_COUNT]; /* against fio reading the slots' bytes */
	double vs_none[KVT_CODEC_COUNT][MAX_PAIRS]; /* restore time over none's, same round */
	double logical_gbs[KVT_CODEC_COUNT][MAX_PAIRS]; /* bfloat16 bytes into the pages */
	int none; /* the index of none in opt.codecs, or -1 */
};

static struct codec_result K = {.none = -1};

/* The blocks' shard as proto/codec.h codes it, in whole pages: a slot. */
static uint64_t codec_slot_bytes(uint32_t codec)
{
	if (codec == KVT_CODEC_NONE)
		return BLOCK_BYTES;
	uint64_t shard = (uint64_t)LAYERS * KV_HEADS *
			 (kvt_codec_tile_bytes(codec, 1, BLOCK_TOKENS, HEAD_BYTES / 2) +
			  kvt_codec_tile_bytes(codec, 0, BLOCK_TOKENS, HEAD_BYTES / 2));
	return (shard + 4095) & ~4095ull;
}

static uint64_t regions_for(uint64_t blocks, uint64_t slot)
{
	uint64_t per_region = (REGION_BYTES - REGION_HEADER_BYTES) / (SLOT_HEADER_BYTES + slot);
	return (blocks + per_region - 1) / per_region;
}

/* Every codec's regions (a region is bound to one namespace) and one
 * spare each. */
static uint64_t codec_spill_capacity(void)
{
	uint64_t regions = 0;
	for (unsigned j = 0; j < opt.n_codecs; j++)
		regions += regions_for(blocks_per_set(), codec_slot_bytes(opt.codecs[j])) + 1;
	return regions * REGION_BYTES;
}

/* A pool for every codec's copy of the context, in extents of 64 MiB a
 * slot size, and one extent more each. */
static uint64_t codec_pool_bytes(void)
{
	uint64_t bytes = 0;
	for (unsigned j = 0; j < opt.n_codecs; j++) {
		uint64_t per_extent = 64 * MIB / codec_slot_bytes(opt.codecs[j]);
		bytes += ((blocks_per_set() + per_extent - 1) / per_extent + 1) * 64 * MIB;
	}
	return bytes;
}

static void codec_daemon_start(void)
{
	bench_daemon_config(&daemon_state,
			    "[pool]\ncapacity = %lluM\nextent_size = 64M\n"
			    "[nvme]\nengine = io_uring\nqueue_depth = %u\n"
			    "writeback_high = 0%%\nwriteback_low = 0%%\n"
			    "[spill.bench]\npath = %s\ncapacity = %lluM\n"
			    "[limits]\nkeys_per_request = 8192\n",
			    (unsigned long long)(codec_pool_bytes() / MIB), opt.queue_depth,
			    files.spill, (unsigned long long)(codec_spill_capacity() / MIB));
	bench_daemon_start(&daemon_state, START_LIMIT_NS);
}

static kvt_ns *codec_ns_open(kvt_client *c, uint32_t codec)
{
	static const uint8_t weights[16] = "bench-weights";
	const kvt_layer_group g = {.n_layers = LAYERS, .attn = KVT_ATTN_MHA, .planes = 2,
				   .kv_heads = KV_HEADS, .head_bytes = HEAD_BYTES,
				   .dtype = KVT_DTYPE_BFLOAT16};
	const kvt_ns_desc desc = {.model = "bench-nvme-llama3-8b-bf16", .weights = weights,
				  .weights_len = sizeof(weights), .layer_end = LAYERS, .tp_size = 1,
				  .cp_size = 1, .block_tokens = BLOCK_TOKENS, .n_groups = 1,
				  .groups = &g, .codec = codec};
	kvt_ns_info info;
	kvt_ns *ns = NULL;
	int r = kvt_ns_open(c, &desc, &ns);

	if (r < 0)
		die("kvt_ns_open %s: %s (%s)", kvt_codec_name(codec), strerror(-r),
		    kvt_client_error(c));
	kvt_ns_get_info(ns, &info);
	if (info.codec != codec || info.block_bytes != codec_slot_bytes(codec))
		die("namespace of codec %s: codec %u, slots of %llu bytes, expected %llu",
		    kvt_codec_name(codec), info.codec, (unsigned long long)info.block_bytes,
		    (unsigned long long)codec_slot_bytes(codec));
	return ns;
}

static int tenant_id_record(const kvt_record *r, void *userdata)
{
	if (!strcmp(kvt_record_kind(r), "tenant"))
		kvt_record_get_u64(r, "id", userdata);
	return 0;
}

/* Host copies only: the blocks are clean, so all of them stay on NVMe. */
static void evict_host(struct bench *b, uint64_t tenant, uint32_t codec)
{
	kvt_ns_info info;
	kvt_ns_get_info(b->ns, &info);
	int64_t r = kvt_admin_evict(b->c, (uint32_t)tenant, info.ns_id, 0);
	if (r != (int64_t)b->n)
		die("evicting the %s context (namespace %u of tenant %llu) from host memory: %lld of %llu blocks (%s)",
		    kvt_codec_name(codec), info.ns_id, (unsigned long long)tenant, (long long)r,
		    (unsigned long long)b->n, r < 0 ? kvt_client_error(b->c) : "some not resident?");
}

/* Element (l, p, g, t, h, i) of the context's pages. */
static uint8_t *context_at(void *const *layers, uint64_t n, unsigned l, unsigned p, uint64_t g,
			   unsigned t, unsigned h, unsigned i)
{
	return (uint8_t *)layers[l] + p * PAGE_BYTES * n + g * PAGE_BYTES +
	       ((uint64_t)t * KV_HEADS + h) * HEAD_BYTES + 2 * i;
}

/* A bfloat16 context as a model's K and V might hold it: each (layer,
 * plane, head) its own magnitude (2^-4 .. 2^3), every 37th channel 8 times
 * larger, the rest uniform; finite everywhere, so every codec can code it. */
static void codec_fill(struct bench *b)
{
	uint64_t x = 0x9e3779b97f4a7c15ull;

	for (unsigned l = 0; l < LAYERS; l++)
		for (unsigned p = 0; p < 2; p++)
			for (uint64_t g = 0; g < b->n; g++)
				for (unsigned t = 0; t < BLOCK_TOKENS; t++)
					for (unsigned h = 0; h < KV_HEADS; h++) {
						uint8_t *e = context_at(b->src_layers, b->n, l, p, g, t, h, 0);
						float mag = ldexpf(1.0f, (int)((l + p * 3 + h + g) % 8) - 4);

						for (unsigned i = 0; i < HEAD_BYTES / 2; i++) {
							uint16_t u = codec_test_bf16(&x, mag, i);
							memcpy(e + 2 * i, &u, 2);
						}
					}
}

/* One tile (block g, layer l, plane p, head h): every value within the
 * codec's bound (codec-bound.h). */
static void codec_check_tile(struct bench *b, uint32_t codec, uint64_t g, unsigned l, unsigned p,
			     unsigned h)
{
	const unsigned D = HEAD_BYTES / 2;
	float amax = 0;

	for (unsigned t = 0; t < BLOCK_TOKENS; t++)
		for (unsigned i = 0; i < D; i++)
			amax = fmaxf(amax, fabsf(codec_test_bf16_at(context_at(b->src_layers, b->n, l, p, g, t, h, i))));
	for (unsigned t = 0; t < BLOCK_TOKENS; t++)
		for (unsigned i = 0; i < D; i++) {
			/* int4's group: K, channel i over the tokens; V,
			 * KVT_INT4_GROUP channels of token t. */
			float lo = INFINITY, hi = -INFINITY;
			unsigned n = p == 0 ? BLOCK_TOKENS : KVT_INT4_GROUP;
			for (unsigned j = 0; j < n; j++) {
				float y = codec_test_bf16_at(p == 0 ? context_at(b->src_layers, b->n, l, p, g, j, h, i)
							 : context_at(b->src_layers, b->n, l, p, g, t, h,
								      i / KVT_INT4_GROUP * KVT_INT4_GROUP + j));
				lo = fminf(lo, y);
				hi = fmaxf(hi, y);
			}
			float x = codec_test_bf16_at(context_at(b->src_layers, b->n, l, p, g, t, h, i));
			float got = codec_test_bf16_at(context_at(b->dst_layers, b->n, l, p, g, t, h, i));
			if (!(fabs((double)got - x) <= codec_bf16_bound(codec, x, amax, lo, hi)))
				die("%s: block %llu (layer %u, plane %u, token %u, head %u, %u) came back as %a, stored %a",
				    kvt_codec_name(codec), (unsigned long long)g, l, p, t, h, i, got, x);
		}
}

/*
 * none: every byte as stored.  A codec: CODEC_TILES (layer, head)s of
 * every block, K and V, chosen anew each round, within the codec's bound;
 * when all is set (the first round), every tile of every 16th block too.
 */
static void codec_verify(struct bench *b, uint32_t codec, unsigned round, bool all)
{
	if (codec == KVT_CODEC_NONE) {
		if (memcmp(b->dst, b->src, b->n * BLOCK_BYTES))
			die("none: the context came back with different bytes");
		return;
	}
	for (uint64_t g = 0; g < b->n; g++)
		for (unsigned k = 0; k < (all && g % 16 == 0 ? LAYERS * KV_HEADS : CODEC_TILES); k++) {
			uint64_t x = all && g % 16 == 0 ? k : mix(((uint64_t)round << 40) ^ (g << 8) ^ k);
			unsigned l = (unsigned)(x / KV_HEADS % LAYERS), h = (unsigned)(x % KV_HEADS);
			codec_check_tile(b, codec, g, l, 0, h);
			codec_check_tile(b, codec, g, l, 1, h);
		}
}

/*
 * The context, stored once in every codec's namespace (the same keys, the
 * same bfloat16 pages) and written back.  Round i (i = 0 is a warm-up,
 * checked more): for each codec in turn, evict its copy from host
 * memory, restore it as kvt-engine does into poisoned pages, fio reads the
 * bytes its slots take, check.
 */
static void phase_codecs(struct bench *b)
{
	kvt_ns *ns[KVT_CODEC_COUNT];
	uint64_t tenant = 0, logical = b->n * BLOCK_BYTES;
	unsigned fio_turn = 0;
	struct sample t;

	K.tokens = b->n * BLOCK_TOKENS;
	codec_fill(b);
	make_context_keys(b, 0);
	for (unsigned j = 0; j < opt.n_codecs; j++) {
		ns[j] = codec_ns_open(b->c, opt.codecs[j]);
		K.slot[j] = codec_slot_bytes(opt.codecs[j]);
		if (opt.codecs[j] == KVT_CODEC_NONE)
			K.none = (int)j;
		b->ns = ns[j];
		b->slot_bytes = K.slot[j];
		spill(b, 0, true, &t);
		progress("  %s: context stored and written back in %.3f s (%llu MiB as stored), untimed",
			 kvt_codec_name(opt.codecs[j]), (double)t.ns / 1e9,
			 (unsigned long long)(b->n * K.slot[j] / MIB));
	}
	/* The tenant's id (uid:N) once it has namespaces. */
	if (kvt_stats(b->c, KVT_STATS_TENANTS, tenant_id_record, &tenant) < 0)
		die("kvt_stats: %s", kvt_client_error(b->c));
	for (unsigned i = 0; i <= opt.pairs; i++) {
		double secs[KVT_CODEC_COUNT];
		for (unsigned j = 0; j < opt.n_codecs; j++) {
			uint32_t codec = opt.codecs[j];
			uint64_t bytes = b->n * K.slot[j];
			b->ns = ns[j];
			b->slot_bytes = K.slot[j];
			evict_host(b, tenant, codec);
			restore_engine(b, 0, &t);
			/* fio in whole 2 MiB requests; its rate for the slots' bytes */
			double fr = fio_run(false, fio_offset(fio_turn++),
					    (bytes + 2 * MIB - 1) / (2 * MIB) * (2 * MIB));
			codec_verify(b, codec, i, i == 0);
			secs[j] = (double)t.ns / 1e9;
			if (i == 0) {
				progress("  warm-up, %s: context restored in %.3f s, fio read %.2f GB/s",
					 kvt_codec_name(codec), secs[j], fr);
				continue;
			}
			record(&K.r[j], i - 1, bytes, &t, fr);
			K.logical_gbs[j][i - 1] = gbs(logical, t.ns);
			progress("  %s round %u/%u: %llu tokens in %.3f s (%.2f GB/s as stored, %.2f GB/s of bfloat16; CPU daemon %.0f ms, bench %.0f ms), fio read %.3f s (%.2f GB/s): %.3f",
				 kvt_codec_name(codec), i, opt.pairs, (unsigned long long)K.tokens,
				 K.r[j].kv_s[i - 1], K.r[j].kv[i - 1], K.logical_gbs[j][i - 1],
				 K.r[j].dcpu_ms[i - 1], K.r[j].bcpu_ms[i - 1], K.r[j].fio_s[i - 1], fr,
				 K.r[j].ratio[i - 1]);
		}
		if (i > 0 && K.none >= 0)
			for (unsigned j = 0; j < opt.n_codecs; j++)
				K.vs_none[j][i - 1] = secs[j] / secs[K.none];
	}
	for (unsigned j = 0; j < opt.n_codecs; j++) {
		b->ns = ns[j];
		delete_set(b, 0);
	}
	phase_end(b, NULL);
	for (unsigned j = 0; j < opt.n_codecs; j++)
		kvt_ns_close(ns[j]);
	b->ns = NULL;
	b->slot_bytes = BLOCK_BYTES;
	K.ran = true;
}

static void bench_setup(struct bench *b)
{
	memset(b, 0, sizeof(*b));
	b->n = blocks_per_set();
	b->slot_bytes = BLOCK_BYTES;
	b->src = alloc_populated(opt.set_bytes);
	b->dst = alloc_populated(opt.set_bytes);
	b->srcs = calloc(b->n, sizeof(*b->srcs));
	b->dsts = calloc(b->n, sizeof(*b->dsts));
	b->keys[0] = calloc(b->n, KVT_KEY_BYTES);
	b->keys[1] = calloc(b->n, KVT_KEY_BYTES);
	b->states = calloc(b->n, 1);
	b->status = calloc(b->n, sizeof(*b->status));
	b->pages = calloc(b->n, sizeof(*b->pages));
	if (!b->srcs || !b->dsts || !b->keys[0] || !b->keys[1] || !b->states || !b->status ||
	    !b->pages)
		die("out of memory");
	for (uint64_t i = 0; i < b->n; i++) {
		b->srcs[i] = b->src + i * BLOCK_BYTES;
		b->dsts[i] = b->dst + i * BLOCK_BYTES;
		b->pages[i] = (int64_t)i;
	}
	/* Every block different; the stamps make every set different. */
	for (uint64_t i = 0; i < b->n; i++)
		fill_random(b->src + i * BLOCK_BYTES, BLOCK_BYTES, mix(i + 1));

	/* vLLM's per-layer (2, pages, 16, heads, head_bytes), one page per
	 * block, laid over the same memory. */
	uint64_t layer_bytes = 2 * PAGE_BYTES * b->n;
	for (unsigned l = 0; l < LAYERS; l++) {
		b->src_layers[l] = b->src + l * layer_bytes;
		b->dst_layers[l] = b->dst + l * layer_bytes;
	}
	kvt_layout lay = {
		.n_layers = LAYERS,
		.planes = 2,
		.heads = KV_HEADS,
		.head_bytes = HEAD_BYTES,
		.page_tokens = BLOCK_TOKENS,
		.index_kind = KVT_INDEX_PAGE,
		.stride_plane = (int64_t)(PAGE_BYTES * b->n),
		.stride_page = (int64_t)PAGE_BYTES,
		.stride_token = (int64_t)KV_HEADS * HEAD_BYTES,
		.stride_head = HEAD_BYTES,
	};
	b->src_layout = lay;
	b->src_layout.layer_base = b->src_layers;
	b->dst_layout = lay;
	b->dst_layout.layer_base = b->dst_layers;
}

/* ---- output ---------------------------------------------------------- */

struct machine {
	char kernel[160];
	long cpus;
	char fs[128];
};

static struct machine M;

#define ROW "%-36s %-22s %-24s %-22s %s\n"

static void print_pairs_row(FILE *out, const char *name, const struct pairs *p, const char *limit,
			    double target)
{
	unsigned n = opt.pairs;
	char a[48], l[48], r[48], t[48];
	double ratio = median(p->ratio, n);
	snprintf(a, sizeof(a), "%.2f GB/s", median(p->kv, n));
	snprintf(l, sizeof(l), "%.2f GB/s %s", median(p->fio, n), limit);
	ratio_range(p->ratio, n, r, sizeof(r));
	if (target > 0)
		snprintf(t, sizeof(t), ">= %.2fx: %s", target, verdict(ratio >= target));
	else
		snprintf(t, sizeof(t), "-");
	fprintf(out, ROW, name, a, l, r, t);
}

/* A line of detail under a row, medians over the pairs. */
static void detail(FILE *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void detail(FILE *out, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(out, "%-36s ", "");
	vfprintf(out, fmt, ap);
	fprintf(out, "\n");
	va_end(ap);
}

/* Phase 5: a row per codec against fio reading its slots' bytes, and its
 * restore time against none's. */
static void print_codecs(FILE *out)
{
	unsigned n = opt.pairs;
	char name[64], r[48];

	fprintf(out, "\ncodecs: the same %llu-token bfloat16 context (%llu MiB) restored from NVMe as kvt-engine does, codecs in turn; kvtierd io_uring, pool %llu MiB for every codec's copy, each evicted from host memory before its restore\n",
		(unsigned long long)K.tokens, (unsigned long long)(opt.set_bytes / MIB),
		(unsigned long long)(codec_pool_bytes() / MIB));
	for (unsigned j = 0; j < opt.n_codecs; j++) {
		const struct pairs *p = &K.r[j];
		snprintf(name, sizeof(name), "context, %s", kvt_codec_name(opt.codecs[j]));
		print_pairs_row(out, name, p, "read", 0);
		detail(out, "%.3f s (fio %.3f s) for %.0f MiB as stored (slot %llu KiB, %.3f of bfloat16's); %.2f GB/s of bfloat16 into the pages",
		       median(p->kv_s, n), median(p->fio_s, n),
		       (double)(blocks_per_set() * K.slot[j]) / MIB,
		       (unsigned long long)(K.slot[j] / 1024), (double)K.slot[j] / BLOCK_BYTES,
		       median(K.logical_gbs[j], n));
		detail(out, "all resident at %.3f s; CPU: kvtierd %.0f ms, client %.0f ms",
		       median(p->aux_s, n), median(p->dcpu_ms, n), median(p->bcpu_ms, n));
		if (K.none >= 0 && (int)j != K.none)
			detail(out, "restore time / none's (same round): %s; aim: close to %.2f (the bytes)",
			       ratio_range(K.vs_none[j], n, r, sizeof(r)),
			       (double)K.slot[j] / K.slot[K.none]);
	}
}

static void print_table(FILE *out)
{
	char s_limit[48];
	unsigned n = opt.pairs;
	double set_mib = (double)opt.set_bytes / MIB;

	fprintf(out, "\nkvtier NVMe tier: %u pairs, contenders alternating; ratio = median of the pairwise ratios [min..max]; absolute figures are medians\n",
		n);
	fprintf(out, "machine: %s, %ld CPUs; files: %s (%s); set %.0f MiB = %llu blocks of 2 MiB; queue depth %u; fio %s\n",
		M.kernel, M.cpus, M.fs, opt.dir, set_mib, (unsigned long long)blocks_per_set(),
		opt.queue_depth, opt.fio_plain ? "without registered buffers" : "with registered buffers and files");
	for (int e = 0; e < N_ENGINES; e++)
		if (E[e].ran)
			fprintf(out, "kvtierd, engine %s: %s\n", engine_conf[e], E[e].nvme_line);
	for (unsigned j = 0; j < opt.n_file_counts; j++)
		if (F[j].ran)
			fprintf(out, "kvtierd, %u spill file(s): %s\n", opt.file_counts[j], F[j].nvme_line);
	fprintf(out, "\n");
	fprintf(out, ROW, "", "kvtier", "fio (same run)", "ratio", "target");
	for (int e = 0; e < N_ENGINES; e++) {
		char name[64];
		const struct pairs *sp = &E[e].spill, *rs = &E[e].restore;
		if (!E[e].ran)
			continue;
		snprintf(name, sizeof(name), "spill (write), %s", engine_conf[e]);
		print_pairs_row(out, name, sp, "write", TARGET_SPILL);
		detail(out, "%.0f ms (fio %.0f); stores returned at %.0f ms with %.0f MiB on disk; CPU: kvtierd %.0f ms, client %.0f ms",
		       1000 * median(sp->kv_s, n), 1000 * median(sp->fio_s, n),
		       1000 * median(sp->aux_s, n), median(sp->aux_mib, n), median(sp->dcpu_ms, n),
		       median(sp->bcpu_ms, n));
		detail(out, "kvtierd CPU per byte spilled: %.3f s/GB [%.3f..%.3f]; at %.0f GB/s: %.1f cores",
		       median(sp->dcpu_s_gb, n), vmin(sp->dcpu_s_gb, n), vmax(sp->dcpu_s_gb, n),
		       NODE_GBS, NODE_GBS * median(sp->dcpu_s_gb, n));
		detail(out, "its event loop's own: %.4f s/GB [%.4f..%.4f]", median(sp->lcpu_s_gb, n),
		       vmin(sp->lcpu_s_gb, n), vmax(sp->lcpu_s_gb, n));
		for (unsigned kind = 0; kind < (opt.batch > 1 ? 2u : 1u); kind++) {
			rs = kind ? &E[e].restore1 : &E[e].restore;
			snprintf(name, sizeof(name), "restore (read), %s, %u a load", engine_conf[e],
				 kind ? 1 : opt.batch);
			print_pairs_row(out, name, rs, "read", TARGET_RESTORE);
			detail(out, "%.0f ms (fio %.0f); last batch resident at %.0f ms, first at %.0f ms; CPU: kvtierd %.0f ms, client %.0f ms",
			       1000 * median(rs->kv_s, n), 1000 * median(rs->fio_s, n),
			       1000 * median(rs->aux_s, n), 1000 * median(rs->first_s, n),
			       median(rs->dcpu_ms, n), median(rs->bcpu_ms, n));
			detail(out, "kvtierd CPU per byte restored: %.3f s/GB [%.3f..%.3f]; at %.0f GB/s: %.1f cores",
			       median(rs->dcpu_s_gb, n), vmin(rs->dcpu_s_gb, n),
			       vmax(rs->dcpu_s_gb, n), NODE_GBS, NODE_GBS * median(rs->dcpu_s_gb, n));
			detail(out, "its event loop's own: %.4f s/GB [%.4f..%.4f]",
			       median(rs->lcpu_s_gb, n), vmin(rs->lcpu_s_gb, n),
			       vmax(rs->lcpu_s_gb, n));
		}
	}
	for (unsigned j = 0; j < opt.n_file_counts; j++) {
		unsigned k = opt.file_counts[j];
		char name[64];
		const struct engine_result *f = &F[j];
		for (int w = 0; w < (opt.batch > 1 ? 3 : 2) && f->ran; w++) {
			const struct pairs *p = w == 2 ? &f->restore1 : w ? &f->restore : &f->spill;
			char what[48];
			snprintf(what, sizeof(what), "restore (read), %u a load", w == 2 ? 1 : opt.batch);
			snprintf(name, sizeof(name), "%s, %u file%s", w ? what : "spill (write)", k,
				 k > 1 ? "s" : "");
			snprintf(s_limit, sizeof(s_limit), "%s, %u job%s", w ? "read" : "write", k,
				 k > 1 ? "s" : "");
			print_pairs_row(out, name, p, s_limit, w ? TARGET_RESTORE : TARGET_SPILL);
			detail(out, "CPU per GB: event loop %.4f s [%.4f..%.4f], all threads %.3f s [%.3f..%.3f]",
			       median(p->lcpu_s_gb, n), vmin(p->lcpu_s_gb, n), vmax(p->lcpu_s_gb, n),
			       median(p->dcpu_s_gb, n), vmin(p->dcpu_s_gb, n), vmax(p->dcpu_s_gb, n));
		}
	}
	if (C.ran) {
		char name[64], a[48], l[48];
		snprintf(name, sizeof(name), "context %llu tokens, io_uring", (unsigned long long)C.tokens);
		print_pairs_row(out, name, &C.r, "read", 0);
		detail(out, "%.3f s (fio %.3f s); all resident at %.3f s; CPU: kvtierd %.0f ms, client %.0f ms",
		       median(C.r.kv_s, n), median(C.r.fio_s, n), median(C.r.aux_s, n),
		       median(C.r.dcpu_ms, n), median(C.r.bcpu_ms, n));
		double bytes128 = (double)(CONTEXT_128K * TOKEN_BYTES);
		snprintf(name, sizeof(name), "context 131072 tokens (16 GiB)");
		snprintf(a, sizeof(a), "%.1f s extrapolated", bytes128 / (median(C.r.kv, n) * 1e9));
		snprintf(l, sizeof(l), "%.1f s extrapolated", bytes128 / (median(C.r.fio, n) * 1e9));
		fprintf(out, ROW, name, a, l, "", "not measured");
	}
	if (K.ran)
		print_codecs(out);
}

static void json_pairs(const char *key, const struct pairs *p, double target, const char *aux,
		       bool first)
{
	unsigned n = opt.pairs;
	printf(",\"%s\":{\"ratio\":%.4f,\"ratio_min\":%.4f,\"ratio_max\":%.4f,"
	       "\"kvtier_gbs\":%.3f,\"fio_gbs\":%.3f,\"kvtier_s\":%.4f,\"fio_s\":%.4f",
	       key, median(p->ratio, n), vmin(p->ratio, n), vmax(p->ratio, n), median(p->kv, n),
	       median(p->fio, n), median(p->kv_s, n), median(p->fio_s, n));
	printf(",\"%s\":%.4f,\"kvtierd_cpu_ms\":%.1f,\"client_cpu_ms\":%.1f", aux,
	       median(p->aux_s, n), median(p->dcpu_ms, n), median(p->bcpu_ms, n));
	printf(",\"loop_cpu_s_per_gb\":%.5f,\"loop_cpu_s_per_gb_min\":%.5f,"
	       "\"loop_cpu_s_per_gb_max\":%.5f",
	       median(p->lcpu_s_gb, n), vmin(p->lcpu_s_gb, n), vmax(p->lcpu_s_gb, n));
	printf(",\"kvtierd_cpu_s_per_gb\":%.4f,\"kvtierd_cpu_s_per_gb_min\":%.4f,"
	       "\"kvtierd_cpu_s_per_gb_max\":%.4f,\"kvtierd_cores_at_%.0f_gbs\":%.2f",
	       median(p->dcpu_s_gb, n), vmin(p->dcpu_s_gb, n), vmax(p->dcpu_s_gb, n), NODE_GBS,
	       NODE_GBS * median(p->dcpu_s_gb, n));
	if (first)
		printf(",\"first_block_resident_s\":%.4f", median(p->first_s, n));
	if (target > 0)
		printf(",\"target_min_ratio\":%.2f", target);
	printf("}");
}

static void print_json(void)
{
	printf("{\"bench\":\"bench-nvme\",\"kernel\":");
	json_string(M.kernel);
	printf(",\"cpus\":%ld,\"fs\":", M.cpus);
	json_string(M.fs);
	printf(",\"dir\":");
	json_string(opt.dir);
	printf(",\"pairs\":%u,\"set_bytes\":%llu,\"block_bytes\":%llu,\"queue_depth\":%u,"
	       "\"fio_registered\":%s,\"restore_batch\":%u",
	       opt.pairs, (unsigned long long)opt.set_bytes, (unsigned long long)BLOCK_BYTES,
	       opt.queue_depth, opt.fio_plain ? "false" : "true", opt.batch);
	for (int e = 0; e < N_ENGINES; e++) {
		char key[64];
		if (!E[e].ran)
			continue;
		printf(",\"engine_%s\":", engine_conf[e]);
		json_string(E[e].nvme_line);
		snprintf(key, sizeof(key), "spill_%s", engine_conf[e]);
		json_pairs(key, &E[e].spill, TARGET_SPILL, "stores_done_s", false);
		printf(",\"spill_%s_on_disk_at_stores_done_mib\":%.0f", engine_conf[e],
		       median(E[e].spill.aux_mib, opt.pairs));
		snprintf(key, sizeof(key), "restore_%s", engine_conf[e]);
		json_pairs(key, &E[e].restore, TARGET_RESTORE, "resident_s", true);
		if (opt.batch > 1) {
			snprintf(key, sizeof(key), "restore_%s_batch1", engine_conf[e]);
			json_pairs(key, &E[e].restore1, TARGET_RESTORE, "resident_s", true);
		}
	}
	for (unsigned j = 0; j < opt.n_file_counts; j++) {
		char key[64];
		if (!F[j].ran)
			continue;
		snprintf(key, sizeof(key), "spill_files_%u", opt.file_counts[j]);
		json_pairs(key, &F[j].spill, TARGET_SPILL, "stores_done_s", false);
		snprintf(key, sizeof(key), "restore_files_%u", opt.file_counts[j]);
		json_pairs(key, &F[j].restore, TARGET_RESTORE, "resident_s", true);
		if (opt.batch > 1) {
			snprintf(key, sizeof(key), "restore_files_%u_batch1", opt.file_counts[j]);
			json_pairs(key, &F[j].restore1, TARGET_RESTORE, "resident_s", true);
		}
	}
	if (C.ran) {
		unsigned n = opt.pairs;
		double bytes128 = (double)(CONTEXT_128K * TOKEN_BYTES);
		printf(",\"context_tokens\":%llu", (unsigned long long)C.tokens);
		json_pairs("context", &C.r, 0, "resident_s", false);
		printf(",\"context_128k_s_extrapolated\":%.2f,"
		       "\"context_128k_fio_s_extrapolated\":%.2f",
		       bytes128 / (median(C.r.kv, n) * 1e9),
		       bytes128 / (median(C.r.fio, n) * 1e9));
	}
	if (K.ran) {
		printf(",\"codec_context_tokens\":%llu,\"codec_pool_bytes\":%llu",
		       (unsigned long long)K.tokens, (unsigned long long)codec_pool_bytes());
		for (unsigned j = 0; j < opt.n_codecs; j++) {
			unsigned n = opt.pairs;
			char key[64];
			snprintf(key, sizeof(key), "codec_%s", kvt_codec_name(opt.codecs[j]));
			json_pairs(key, &K.r[j], 0, "resident_s", false);
			printf(",\"%s_slot_bytes\":%llu,\"%s_bf16_gbs\":%.3f", key,
			       (unsigned long long)K.slot[j], key, median(K.logical_gbs[j], n));
			if (K.none >= 0 && (int)j != K.none)
				printf(",\"%s_vs_none\":%.4f,\"%s_vs_none_min\":%.4f,"
				       "\"%s_vs_none_max\":%.4f",
				       key, median(K.vs_none[j], n), key, vmin(K.vs_none[j], n), key,
				       vmax(K.vs_none[j], n));
		}
	}
	printf("}\n");
}

/* ---- main ------------------------------------------------------------ */

static void help(void)
{
	printf("Usage: bench-nvme [OPTIONS] [KVTIERD]\n"
	       "\n"
	       "Measure kvtier's NVMe tier end to end against a kvtierd it starts\n"
	       "itself (KVTIERD, else $KVTIERD, else kvtierd from PATH) and fio ($FIO,\n"
	       "else fio from PATH) on the same file system: spill and restore\n"
	       "throughput with the io_uring and the threads engine, and an engine's\n"
	       "restore of a Llama-3-8B context.  Contenders alternate; the medians of\n"
	       "the pairwise ratios are reported.  Progress goes to stderr.\n"
	       "\n"
	       "Options:\n"
	       "  -p, --pairs N        pairs of samples per comparison (>= 5, default %u)\n"
	       "  -m, --mib N          MiB per set, also the host pool (multiple of 64,\n"
	       "                       128..16384, default %llu = %llu tokens)\n"
	       "  -q, --queue-depth N  the daemon's [nvme] queue_depth and fio's iodepth\n"
	       "                       (default %u)\n"
	       "  -b, --batch N        blocks per load in the restores (default %u, a\n"
	       "                       2048-token prefix); unless 1, each pair also\n"
	       "                       restores a block a request\n"
	       "  -e, --engine NAME    io_uring, threads or both (default both); none:\n"
	       "                       only the restore by codec (with --codec)\n"
	       "      --no-context     skip the context restore\n"
	       "      --codec LIST     also restore the context from namespaces of these\n"
	       "                       codecs (comma-separated: none, fp8-e4m3, int4), in\n"
	       "                       turn, on a daemon of its own (default: not run)\n"
	       "      --files LIST     also spill and restore with the io_uring engine over\n"
	       "                       this many spill files, each count in turn on a\n"
	       "                       daemon of its own (comma-separated, 1..%u), against\n"
	       "                       fio running as many jobs on as many files (default:\n"
	       "                       not run); --engine none runs only these\n"
	       "      --fio-plain      fio without registered buffers and files\n"
	       "                       (--fixedbufs=0 --registerfiles=0)\n"
	       "  -d, --dir DIR        where the spill file and fio's file go (default\n"
	       "                       %s; must be a disk, not tmpfs)\n"
	       "  -j, --json           print one JSON line on stdout (the table goes to\n"
	       "                       stderr)\n"
	       "  -h, --help           show this help\n",
	       opt.pairs, (unsigned long long)(opt.set_bytes / MIB),
	       (unsigned long long)(opt.set_bytes / TOKEN_BYTES), opt.queue_depth, RESTORE_BATCH, MAX_FILES,
	       opt.dir);
}

/* --codec's list into opt.codecs. \return 0 or -EINVAL */
static int parse_codecs(const char *list)
{
	char buf[128];
	char *save = NULL;

	snprintf(buf, sizeof(buf), "%s", list);
	opt.n_codecs = 0;
	for (char *w = strtok_r(buf, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
		uint32_t c;
		for (c = 0; c < KVT_CODEC_COUNT; c++)
			if (!strcmp(w, kvt_codec_name(c)))
				break;
		if (c == KVT_CODEC_COUNT)
			return -EINVAL;
		for (unsigned j = 0; j < opt.n_codecs; j++)
			if (opt.codecs[j] == c)
				return -EINVAL;
		opt.codecs[opt.n_codecs++] = c;
	}
	return opt.n_codecs ? 0 : -EINVAL;
}

/* --files's list into opt.file_counts. \return 0 or -EINVAL */
static int parse_file_counts(const char *list)
{
	char buf[128];
	char *save = NULL;

	snprintf(buf, sizeof(buf), "%s", list);
	opt.n_file_counts = 0;
	for (char *w = strtok_r(buf, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
		char *end;
		unsigned long k = strtoul(w, &end, 10);
		if (*end || k < 1 || k > MAX_FILES || opt.n_file_counts == MAX_FILES)
			return -EINVAL;
		opt.file_counts[opt.n_file_counts++] = (unsigned)k;
	}
	return opt.n_file_counts ? 0 : -EINVAL;
}

/* fio on PATH (or as named)? */
static bool have_program(const char *name)
{
	if (strchr(name, '/'))
		return access(name, X_OK) == 0;
	const char *path = getenv("PATH");
	char buf[4096], full[4200];
	snprintf(buf, sizeof(buf), "%s", path ? path : "/usr/bin:/bin");
	for (char *save = NULL, *d = strtok_r(buf, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
		snprintf(full, sizeof(full), "%s/%s", d, name);
		if (access(full, X_OK) == 0)
			return true;
	}
	return false;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"pairs", required_argument, NULL, 'p'},
		{"mib", required_argument, NULL, 'm'},
		{"queue-depth", required_argument, NULL, 'q'},
		{"batch", required_argument, NULL, 'b'},
		{"engine", required_argument, NULL, 'e'},
		{"no-context", no_argument, NULL, 'C'},
		{"codec", required_argument, NULL, 'c'},
		{"fio-plain", no_argument, NULL, 'P'},
		{"files", required_argument, NULL, 'F'},
		{"dir", required_argument, NULL, 'd'},
		{"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{},
	};
	int ch;

	while ((ch = getopt_long(argc, argv, "p:m:q:b:e:d:jh", opts, NULL)) >= 0) {
		switch (ch) {
		case 'p': opt.pairs = (unsigned)parse_u64(optarg, 5, MAX_PAIRS - 1, "--pairs"); break;
		case 'm':
			opt.set_bytes = parse_u64(optarg, 128, 16384, "--mib") * MIB;
			if (opt.set_bytes % (64 * MIB)) {
				fprintf(stderr, "bench-nvme: --mib must be a multiple of 64\n");
				return 2;
			}
			break;
		case 'q': opt.queue_depth = (unsigned)parse_u64(optarg, 1, 4096, "--queue-depth"); break;
		case 'b': opt.batch = (unsigned)parse_u64(optarg, 1, 8192, "--batch"); break;
		case 'e':
			if (!strcmp(optarg, "none")) {
				opt.engine[ENG_URING] = opt.engine[ENG_THREADS] = false;
			} else if (!strcmp(optarg, "both")) {
				opt.engine[ENG_URING] = opt.engine[ENG_THREADS] = true;
			} else if (!strcmp(optarg, "io_uring") || !strcmp(optarg, "threads")) {
				opt.engine[ENG_URING] = !strcmp(optarg, "io_uring");
				opt.engine[ENG_THREADS] = !opt.engine[ENG_URING];
			} else {
				fprintf(stderr, "bench-nvme: --engine must be io_uring, threads, both or none\n");
				return 2;
			}
			break;
		case 'C': opt.context = false; break;
		case 'c':
			if (parse_codecs(optarg) < 0) {
				fprintf(stderr, "bench-nvme: --codec takes a comma-separated list of none, fp8-e4m3 and int4, each once\n");
				return 2;
			}
			break;
		case 'P': opt.fio_plain = true; break;
		case 'F':
			if (parse_file_counts(optarg) < 0) {
				fprintf(stderr, "bench-nvme: --files takes a comma-separated list of counts, 1..%u\n",
					MAX_FILES);
				return 2;
			}
			break;
		case 'd': opt.dir = optarg; break;
		case 'j': opt.json = true; break;
		case 'h': help(); return 0;
		default: return bench_try_help();
		}
	}
	if (strlen(opt.dir) > 60) {
		fprintf(stderr, "bench-nvme: --dir is too long for a socket path (at most 60 bytes)\n");
		return 2;
	}
	if (!opt.engine[ENG_URING] && !opt.engine[ENG_THREADS] && !opt.n_codecs &&
	    !opt.n_file_counts) {
		fprintf(stderr, "bench-nvme: --engine none measures only --codec's and --files's\n");
		return 2;
	}
	daemon_state.kvtierd = bench_kvtierd(argc, argv);
	if (getenv("FIO") && *getenv("FIO"))
		opt.fio = getenv("FIO");
	if (!have_program(opt.fio)) {
		printf("bench-nvme: skipped: fio (%s) not found; install it (apt-get install fio) or set FIO\n",
		       opt.fio);
		return KVT_TEST_SKIP;
	}
	/* The context phase runs on the io_uring daemon. */
	if (!opt.engine[ENG_URING])
		opt.context = false;

	bench_catch_signals(on_signal);

	struct utsname u;
	uname(&u);
	snprintf(M.kernel, sizeof(M.kernel), "%s %s", u.sysname, u.release);
	M.cpus = sysconf(_SC_NPROCESSORS_ONLN);
	describe_fs(opt.dir, M.fs, sizeof(M.fs));

	uint64_t cap = spill_capacity();
	struct statvfs vfs;
	if (statvfs(opt.dir, &vfs) < 0) {
		fprintf(stderr, "bench-nvme: %s: %s\n", opt.dir, strerror(errno));
		return 1;
	}
	/* Phase 5's spill file replaces the others'. */
	uint64_t codec_cap = opt.n_codecs ? codec_spill_capacity() : 0;
	unsigned most_files = 1;
	for (unsigned j = 0; j < opt.n_file_counts; j++)
		if (opt.file_counts[j] > most_files)
			most_files = opt.file_counts[j];
	uint64_t need = most_files * cap + (codec_cap > most_files * cap ? codec_cap : most_files * cap);
	if ((uint64_t)vfs.f_bavail * vfs.f_frsize < need + 256 * MIB) {
		printf("bench-nvme: skipped: %s has %llu MiB free; two files of %llu MiB are needed\n",
		       opt.dir, (unsigned long long)((uint64_t)vfs.f_bavail * vfs.f_frsize / MIB),
		       (unsigned long long)(cap / MIB));
		return KVT_TEST_SKIP;
	}

	int r = bench_daemon_mkdir(&daemon_state, opt.dir, "kvt-bench-nvme");
	if (r < 0) {
		fprintf(stderr, "bench-nvme: mkdtemp in %s: %s\n", opt.dir, strerror(-r));
		return 1;
	}
	bench_daemon_path(&daemon_state, "spill.kvt", files.spill, sizeof(files.spill));
	bench_daemon_path(&daemon_state, "fio.dat", files.fio_file, sizeof(files.fio_file));
	bench_daemon_path(&daemon_state, "fio.err", files.fio_err, sizeof(files.fio_err));
	for (unsigned i = 1; i < most_files; i++) {
		char name[32];
		snprintf(name, sizeof(name), "spill.kvt.%u", i);
		bench_daemon_path(&daemon_state, name, files.spills[i], sizeof(files.spills[i]));
		snprintf(name, sizeof(name), "fio.dat.%u", i);
		bench_daemon_path(&daemon_state, name, files.fio_files[i], sizeof(files.fio_files[i]));
	}

	static struct bench b;
	bench_setup(&b);
	uint64_t t0 = kvt_now_ns();

	progress("files in %s (%s); two files of %llu MiB; sets of %llu MiB (%llu blocks), pool the same; %u pairs",
		 daemon_state.dir, M.fs, (unsigned long long)(cap / MIB),
		 (unsigned long long)(opt.set_bytes / MIB), (unsigned long long)b.n, opt.pairs);
	progress("preallocating and writing fio's file once");
	prewrite(files.fio_file, cap, false);

	for (int e = 0; e < N_ENGINES; e++) {
		if (!opt.engine[e])
			continue;
		/* A fresh spill file for every daemon: no recovered blocks. */
		unlink(files.spill);
		progress("engine %s: preallocating and writing the spill file once", engine_conf[e]);
		prewrite(files.spill, cap, true);
		daemon_start(e);
		connect_daemon(&b);
		struct dstats d;
		get_stats(b.c, KVT_STATS_DAEMON, &d);
		snprintf(E[e].engine, sizeof(E[e].engine), "%s", d.engine);
		snprintf(E[e].reason, sizeof(E[e].reason), "%s", d.reason);
		bench_daemon_log_find(&daemon_state, "NVMe tier: ", NULL, E[e].nvme_line,
				      sizeof(E[e].nvme_line));
		bench_daemon_log_find(&daemon_state, "Host pool: ", NULL, E[e].pool,
				      sizeof(E[e].pool));
		progress("kvtierd pid %d, engine %s; NVMe tier: %s", (int)daemon_state.pid,
			 d.engine, E[e].nvme_line);
		progress("host pool: %s", E[e].pool);
		if (strcmp(d.engine, engine_conf[e]))
			die("asked for engine %s, the daemon runs %s", engine_conf[e], d.engine);
		progress("engine %s: spill vs fio write, %u pairs (+1 warm-up) of %llu MiB",
			 engine_conf[e], opt.pairs, (unsigned long long)(opt.set_bytes / MIB));
		phase_spill(&b, &E[e], engine_conf[e], 1 + (unsigned)e);
		progress("engine %s: restore vs fio read, %u pairs (+1 warm-up)", engine_conf[e],
			 opt.pairs);
		phase_restore(&b, &E[e], engine_conf[e], 1 + (unsigned)e);
		if (e == ENG_URING && opt.context) {
			progress("context: %llu tokens restored as kvt-engine does vs fio read, %u pairs (+1 warm-up)",
				 (unsigned long long)(b.n * BLOCK_TOKENS), opt.pairs);
			phase_context(&b);
		}
		disconnect_daemon(&b);
		bench_daemon_stop(&daemon_state);
	}
	for (unsigned j = 0; j < opt.n_file_counts; j++) {
		unsigned k = opt.file_counts[j];
		char label[32];
		snprintf(label, sizeof(label), "%u file%s", k, k > 1 ? "s" : "");
		opt.n_files = k;
		progress("%s: preallocating and writing the spill files (and fio's others) once", label);
		unlink(files.spill);
		prewrite(files.spill, cap, true);
		for (unsigned i = 1; i < k; i++) {
			unlink(files.spills[i]);
			prewrite(files.spills[i], cap, true);
			if (access(files.fio_files[i], F_OK) < 0)
				prewrite(files.fio_files[i], cap, false);
		}
		daemon_start(ENG_URING);
		connect_daemon(&b);
		bench_daemon_log_find(&daemon_state, "NVMe tier: ", NULL, F[j].nvme_line,
				      sizeof(F[j].nvme_line));
		progress("kvtierd pid %d, %s; NVMe tier: %s", (int)daemon_state.pid, label,
			 F[j].nvme_line);
		progress("%s: spill vs fio write with %u job(s), %u pairs (+1 warm-up)", label, k,
			 opt.pairs);
		phase_spill(&b, &F[j], label, 20 + j);
		progress("%s: restore vs fio read with %u job(s), %u pairs (+1 warm-up)", label, k,
			 opt.pairs);
		phase_restore(&b, &F[j], label, 20 + j);
		disconnect_daemon(&b);
		bench_daemon_stop(&daemon_state);
		for (unsigned i = 1; i < k; i++)
			unlink(files.spills[i]);
		opt.n_files = 1;
	}
	for (unsigned i = 1; i < most_files; i++)
		unlink(files.fio_files[i]);
	if (opt.n_codecs) {
		unlink(files.spill);
		progress("codecs: preallocating and writing a spill file of %llu MiB once",
			 (unsigned long long)(codec_cap / MIB));
		prewrite(files.spill, codec_cap, true);
		codec_daemon_start();
		b.c = bench_daemon_connect(&daemon_state);
		progress("codecs: %llu tokens restored as kvt-engine does, %s in turn vs fio read, %u rounds (+1 warm-up)",
			 (unsigned long long)(b.n * BLOCK_TOKENS), opt.n_codecs == 1 ? "one codec" : "the codecs",
			 opt.pairs);
		phase_codecs(&b);
		kvt_client_free(b.c);
		b.c = NULL;
		bench_daemon_stop(&daemon_state);
	}
	progress("measured in %.1f s", (double)(kvt_now_ns() - t0) / 1e9);
	bench_daemon_remove(&daemon_state);

	bench_print(opt.json, print_table, print_json);
	return 0;
}
