/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Pools on reserved hugetlb pages: the daemon uses them when they are
 * there, falls back to 4 KiB pages when they run out, and serves byte-exact
 * either way.  Reserves pages through vm.nr_hugepages (root) and puts the
 * old value back.
 *
 * Then a hostile tenant punches a hole in the hugetlb extent it was sent
 * (seals do not stop that), while another tenant takes the freed huge page,
 * so that the daemon's next touch of the hole (the checksum of write-back to
 * NVMe) finds no page to refill it with: SIGBUS.  The daemon survives, and
 * the other tenant's blocks, stored before and after, load byte-exact.
 */
#include <fcntl.h>
#include <grp.h>
#include <linux/magic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "raw.h"

static const char *knob = "/proc/sys/vm/nr_hugepages";
static long saved = -1;

static long read_knob(void)
{
	FILE *f = fopen(knob, "re");
	long v = -1;
	if (f) {
		if (fscanf(f, "%ld", &v) != 1)
			v = -1;
		fclose(f);
	}
	return v;
}

static int write_knob(long v)
{
	FILE *f = fopen(knob, "we");
	if (!f)
		return -1;
	fprintf(f, "%ld\n", v);
	return fclose(f);
}

static void restore(void)
{
	if (saved >= 0)
		write_knob(saved);
}

static struct daemon d;

static long meminfo(const char *field)
{
	FILE *f = fopen("/proc/meminfo", "re");
	char line[128];
	long v = -1;
	size_t n = strlen(field);
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, field, n) && line[n] == ':' &&
		    sscanf(line + n + 1, "%ld", &v) == 1)
			break;
	if (f)
		fclose(f);
	return v;
}

static long huge_free(void)
{
	return meminfo("HugePages_Free");
}

static long huge_total(void)
{
	return meminfo("HugePages_Total");
}

static uint64_t admin_stat(const char *field)
{
	kvt_client *c = client_connect(&d, "checker");
	uint64_t v = stat_get(c, "daemon", field);
	kvt_client_free(c);
	return v;
}

/* The hostile tenant, in a process of its own: reserve a slot, write it,
 * punch the whole extent out, and commit when told to. */
static void hostile(int report, int go)
{
	static struct raw r;
	struct kvt_buf b;
	struct kvt_slot slot;
	uint32_t n;
	char c;

	harness_in_child();
	if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0)
		_exit(3);
	raw_connect(&r, &d);
	raw_hello(&r, "hole-puncher");
	struct kvt_identity id = {.key_scheme = 1, .model = "tiny", .layer_end = 4, .tp_size = 1,
				  .cp_size = 1, .block_tokens = 16, .n_groups = 1};
	id.groups[0] = (struct kvt_id_group){4, KVT_ATTN_MHA, 0, 2, 2, 128, 1, 0};
	int64_t ns = raw_ns_open(&r, &id);
	CHECK(ns >= 0, "namespace: %s", strerror((int)-ns));
	uint8_t key[32];
	memset(key, 0x5b, sizeof(key));
	r.keep_fds = true;
	CHECK(raw_keys(&r, KVT_OP_RESERVE, (uint32_t)ns, 0, key, 1) == 0, "reserve");
	struct kvt_cursor cur = {r.payload, r.h.length};
	CHECK(kvt_dec_slots_rep(&cur, &slot, 1, &n) == 0 && n == 1 && slot.status == 0,
	      "reserved (%d)", slot.status);
	CHECK(r.n_fds == 1, "the extent came with the reservation (%u fds)", r.n_fds);
	int fd = r.fds[0];
	r.n_fds = 0;
	r.keep_fds = false;

	struct statfs sfs;
	struct stat st;
	CHECK(fstatfs(fd, &sfs) == 0, "fstatfs");
	if (sfs.f_type != HUGETLBFS_MAGIC) {
		/* Huge pages are the whole machine's: another process took the
		 * free ones between the check and this extent. */
		CHECK(write(report, "n", 1) == 1, "report");
		_exit(0);
	}
	CHECK(fstat(fd, &st) == 0, "fstat");
	uint8_t *map = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(map != MAP_FAILED, "map the extent");
	memset(map + slot.offset, 0x5b, 32768);
	CHECK(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, st.st_size) == 0,
	      "punching holes in a sealed hugetlb extent works (seals do not stop it)");
	munmap(map, (size_t)st.st_size);
	close(fd);
	CHECK(write(report, "p", 1) == 1, "report");
	CHECK(read(go, &c, 1) == 1, "go");

	struct kvt_handle_arg h = {slot.handle, 1};
	kvt_buf_init(&b);
	kvt_enc_handles_req(&b, 1, KVT_OP_COMMIT, ++r.rid, &h, 1);
	CHECK(raw_call(&r, &b) == 0, "commit");
	kvt_buf_free(&b);
	CHECK(write(report, "c", 1) == 1, "report");
	/* Stay connected until the daemon has dealt with the block. */
	CHECK(read(go, &c, 1) == 0, "end");
	raw_disconnect(&r);
	_exit(0);
}

/* Two free huge pages, one for each tenant's first extent: the
 * pages of the daemon just stopped come back asynchronously. */
static bool two_free_pages(void)
{
	for (int i = 0; i < 1500 && huge_free() < 2; i++)
		usleep(20000);
	long f = huge_free();
	if (f < 2 && write_knob(read_knob() + 2 - f) < 0)
		return false;
	return huge_free() >= 2;
}

static int punch(void)
{
	char out[4096], c;
	int report[2], go[2];

	if (!two_free_pages()) {
		printf("skipped: the kernel would not free two hugetlb pages (%ld)\n",
		       huge_free());
		return KVT_TEST_SKIP;
	}
	daemon_start(&d, "[pool]\ncapacity = 16M\nextent_size = 2M\nhugepages = auto\n"
			 "[nvme]\nwriteback_high = 0%\nwriteback_low = 0%\n"
			 "[spill.s]\npath = @DIR@/spill0\ncapacity = 128M\n");
	/* The other tenant (root) first: one hugetlb extent. */
	CHECK(engine_run(&d, out, sizeof(out), "--model", "tiny", "--prefix", "512",
			 "--prefix-seed", "71", "--suffix", "0", NULL) == 0, "store 32 blocks");
	uint64_t huge = admin_stat("extents_hugetlb");

	CHECK(pipe2(report, O_CLOEXEC) == 0 && pipe2(go, O_CLOEXEC) == 0, "pipe");
	pid_t h = fork();
	CHECK(h >= 0, "fork");
	if (h == 0) {
		close(report[0]);
		close(go[1]);
		hostile(report[1], go[0]);
	}
	close(report[1]);
	close(go[0]);
	CHECK(read(report[0], &c, 1) == 1 && (c == 'p' || c == 'n'), "the hostile tenant");
	if (c == 'n') {
		CHECK(wait_exit(h) == 0, "hostile tenant");
		daemon_stop(&d);
		char path[256];
		snprintf(path, sizeof(path), "%s/spill0", d.dir);
		unlink(path);
		daemon_cleanup(&d);
		printf("skipped: another process took the free huge pages before the hostile tenant's extent\n");
		return KVT_TEST_SKIP;
	}
	CHECK(admin_stat("extents_hugetlb") == huge + 1, "the hostile tenant's extent was hugetlb");

	/* The other tenant fills its extent and gets another: where a page is
	 * free again, it is that page. */
	CHECK(engine_run(&d, out, sizeof(out), "--model", "tiny", "--prefix", "1536",
			 "--prefix-seed", "72", "--suffix", "0", NULL) == 0, "store 96 blocks");
	long left = huge_free();
	printf("%ld huge pages free when the hole is touched\n", left);

	CHECK(write(go[1], "g", 1) == 1, "go");
	CHECK(read(report[0], &c, 1) == 1 && c == 'c', "the hostile tenant committed");
	WAIT_FOR(daemon_log_contains(&d, "faulted in host memory") ||
			 admin_stat("nvme_blocks") == 32 + 96 + 1,
		 "write-back of the punched block");
	CHECK(waitpid(d.pid, NULL, WNOHANG) == 0, "the daemon survives the hole");
	if (left == 0)
		CHECK(daemon_log_contains(&d, "faulted in host memory"),
		      "with no huge page free, touching the hole faults and the block is dropped");
	close(go[1]);
	CHECK(wait_exit(h) == 0, "hostile tenant");
	close(report[0]);

	/* The other tenant: a block stored after the attack, and the ones
	 * before it, byte-exact. */
	CHECK(engine_run(&d, out, sizeof(out), "--model", "tiny", "--prefix", "256",
			 "--prefix-seed", "73", "--suffix", "0", "--expect-hits", "0", NULL) == 0,
	      "store after the hole");
	CHECK(engine_run(&d, out, sizeof(out), "--model", "tiny", "--prefix", "256",
			 "--prefix-seed", "73", "--suffix", "0", "--expect-hits", "16",
			 "--no-store", NULL) == 0, "load after the hole");
	CHECK(engine_run(&d, out, sizeof(out), "--model", "tiny", "--prefix", "512",
			 "--prefix-seed", "71", "--suffix", "0", "--expect-hits", "32",
			 "--no-store", NULL) == 0, "the blocks from before");
	CHECK(engine_run(&d, out, sizeof(out), "--model", "tiny", "--prefix", "1536",
			 "--prefix-seed", "72", "--suffix", "0", "--expect-hits", "96",
			 "--no-store", NULL) == 0, "and those stored meanwhile");
	daemon_stop(&d);
	char path[256];
	snprintf(path, sizeof(path), "%s/spill0", d.dir);
	unlink(path);
	daemon_cleanup(&d);
	/* Leave no page pinned behind for whoever reserves them next. */
	for (int i = 0; i < 1500 && huge_free() < huge_total(); i++)
		usleep(20000);
	return 0;
}

int main(void)
{
	char out[4096];

	saved = read_knob();
	if (geteuid() != 0 || saved < 0) {
		printf("skipped: reserving hugetlb pages needs root and %s\n", knob);
		return KVT_TEST_SKIP;
	}
	/* Two 2 MiB extents' worth on top of what is already reserved. */
	if (write_knob(saved + 2) < 0 || read_knob() < saved + 2) {
		restore();
		printf("skipped: the kernel would not reserve hugetlb pages\n");
		return KVT_TEST_SKIP;
	}
	atexit(restore);
	/* Pages an earlier daemon's io_uring pinned come back asynchronously. */
	for (int i = 0; i < 1500 && huge_free() < 2; i++)
		usleep(20000);

	daemon_start(&d, "[pool]\ncapacity = 8M\nextent_size = 2M\nhugepages = auto\n");
	CHECK(engine_run(&d, out, sizeof(out), "--model", "tiny", "--prefix", "3200",
			 "--suffix", "0", NULL) == 0, "store 200 blocks (4 extents)");
	kvt_client *c = client_connect(&d, "checker");
	uint64_t huge = stat_get(c, "daemon", "extents_hugetlb");
	CHECK(huge >= 1 && huge <= 2, "1-2 hugetlb extents, got %llu", (unsigned long long)huge);
	CHECK(stat_get(c, "daemon", "extents") == 4, "the rest on 4 KiB pages");
	kvt_client_free(c);
	/* Every block that is still resident loads byte-exact, whatever backs it. */
	CHECK(engine_run(&d, out, sizeof(out), "--model", "tiny", "--prefix", "3200",
			 "--suffix", "0", "--no-store", NULL) == 0, "reload");
	daemon_stop(&d);
	daemon_cleanup(&d);

	return punch();
}
