/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The I/O engine, each kind on a real sd-event loop and a real file opened
 * O_DIRECT: random blocks written from and read back into pool-like memfd
 * regions and compared; more requests than the queue depth; buffers outside
 * every region; malformed requests; injected -EIO and short transfers;
 * -EAGAIN completions and refused io_uring submissions, passing and
 * persistent (every request ends, after exactly IO_RETRY_MAX retries);
 * freeing with I/O in flight, with a read the kernel would hold forever (a
 * pipe: cancelled), and when waiting for it fails (its buffer is reported
 * held); io_uring's restrictions, its fallback when seccomp refuses
 * io_uring_setup, and its fallback to unregistered buffers when
 * RLIMIT_MEMLOCK refuses the registration.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/io_uring.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fault.h"
#include "io.h"
#include "log.h"
#include "../check.h"
#include "rng.h"

#define BLOCK (64u * 1024u)
#define N_BLOCKS 64u
#define REGION (4u * 1024u * 1024u)              /* N_BLOCKS * BLOCK */
#define FILE_SIZE (16ull * 1024u * 1024u)        /* room for random offsets */
#define QUEUE_DEPTH 8u

static void fill_random(uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i += 8) {
		uint64_t v = rnd();
		memcpy(p + i, &v, 8);
	}
}

struct op {
	struct io_req req; /* first: done() gets it back */
	int result;
	bool done;
	unsigned *n_done;
};

static void on_done(struct io_req *req, int result, void *userdata)
{
	struct op *op = userdata;

	CHECK(&op->req == req);
	CHECK(!op->done);
	op->result = result;
	op->done = true;
	(*op->n_done)++;
}

/* Run the loop until *n reaches want; false if it stalls. */
static bool run_until(sd_event *e, const unsigned *n, unsigned want)
{
	while (*n < want) {
		/* Only a hang guard, far above any run of this test. */
		int r = sd_event_run(e, 60ULL * 1000000ULL);
		if (r < 0) {
			fprintf(stderr, "sd_event_run: %s\n", strerror(-r));
			return false;
		}
		if (r == 0) {
			fprintf(stderr, "the loop stalled at %u of %u completions\n", *n, want);
			return false;
		}
	}
	return true;
}

/* Run the loop until *n reaches want, at most max_iterations times: a
 * request retried forever keeps the loop busy without stalling it, so only
 * a count can tell. */
static bool run_counted(sd_event *e, const unsigned *n, unsigned want, unsigned max_iterations)
{
	for (unsigned i = 0; *n < want; i++) {
		if (i == max_iterations) {
			fprintf(stderr, "%u loop iterations and only %u of %u requests ended\n",
				max_iterations, *n, want);
			return false;
		}
		/* The timeout is only a hang guard. */
		int r = sd_event_run(e, 60ULL * 1000000ULL);
		if (r <= 0) {
			fprintf(stderr, "the loop stalled at %u of %u completions\n", *n, want);
			return false;
		}
	}
	return true;
}

static uint8_t *region_new(size_t size)
{
	int fd = memfd_create("test-io", MFD_CLOEXEC);
	void *p;

	if (fd < 0)
		return NULL;
	if (ftruncate(fd, (off_t)size) < 0) {
		close(fd);
		return NULL;
	}
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	return p == MAP_FAILED ? NULL : p;
}

struct ctx {
	sd_event *event;
	int fd;                       /* the test file, O_DIRECT where it can */
	uint8_t *src, *dst;           /* REGION bytes each */
	uint64_t offsets[N_BLOCKS];   /* distinct BLOCK-aligned file offsets */
	struct op ops[N_BLOCKS];
	unsigned n_done;
};

static void pick_offsets(struct ctx *c)
{
	bool used[FILE_SIZE / BLOCK] = { false };

	for (unsigned i = 0; i < N_BLOCKS; i++) {
		uint64_t slot;
		do
			slot = rnd() % (FILE_SIZE / BLOCK);
		while (used[slot]);
		used[slot] = true;
		c->offsets[i] = slot * BLOCK;
	}
}

/* Submit N_BLOCKS requests between the file and buf, all at once. */
static void submit_all(struct ctx *c, struct io_engine *io, int file, uint8_t *buf, bool write)
{
	c->n_done = 0;
	for (unsigned i = 0; i < N_BLOCKS; i++) {
		struct op *op = &c->ops[i];
		*op = (struct op){
			.req = {
				.file = file,
				.offset = c->offsets[i],
				.buf = buf + (size_t)i * BLOCK,
				.len = BLOCK,
				.write = write,
				.done = on_done,
				.userdata = op,
			},
			.n_done = &c->n_done,
		};
		io_submit(io, &op->req);
	}
}

static unsigned count_results(const struct ctx *c, int result)
{
	unsigned n = 0;
	for (unsigned i = 0; i < N_BLOCKS; i++)
		n += c->ops[i].result == result;
	return n;
}

static struct io_engine *engine(struct ctx *c, enum io_engine_kind kind, int *ret_file)
{
	struct io_engine *io;
	int r = io_engine_new(c->event, kind, QUEUE_DEPTH, &io);

	CHECK(r == 0);
	if (r < 0)
		return NULL;
	*ret_file = io_file_add(io, c->fd);
	CHECK(*ret_file == 0);
	CHECK(io_buffer_add(io, c->src, REGION) == 0);
	CHECK(io_buffer_add(io, c->dst, REGION) == 0);
	return io;
}

/* Write random blocks from src, read them back into poisoned dst. */
static void round_trip(struct ctx *c, struct io_engine *io, int file, bool fixed)
{
	struct io_stats before, after;

	io_get_stats(io, &before);
	pick_offsets(c);
	fill_random(c->src, REGION);
	memset(c->dst, 0xa5, REGION);

	submit_all(c, io, file, c->src, true);
	/* Beyond the queue depth they wait; none completes inside io_submit. */
	CHECK(c->n_done == 0);
	CHECK(io_in_flight(io) == N_BLOCKS);
	CHECK(run_until(c->event, &c->n_done, N_BLOCKS));
	CHECK(count_results(c, (int)BLOCK) == N_BLOCKS);
	CHECK(io_in_flight(io) == 0);
	for (unsigned i = 0; i < N_BLOCKS; i++)
		CHECK(fixed ? c->ops[i].req.buf_index >= 0 : c->ops[i].req.buf_index == -1);

	submit_all(c, io, file, c->dst, false);
	CHECK(run_until(c->event, &c->n_done, N_BLOCKS));
	CHECK(count_results(c, (int)BLOCK) == N_BLOCKS);
	CHECK(memcmp(c->src, c->dst, REGION) == 0);

	io_get_stats(io, &after);
	CHECK(after.writes - before.writes == N_BLOCKS);
	CHECK(after.reads - before.reads == N_BLOCKS);
	CHECK(after.write_bytes - before.write_bytes == (uint64_t)N_BLOCKS * BLOCK);
	CHECK(after.read_bytes - before.read_bytes == (uint64_t)N_BLOCKS * BLOCK);
	CHECK(after.errors == before.errors);
}

/* A buffer in no region: plain READ/WRITE with io_uring. */
static void outside_region(struct ctx *c, struct io_engine *io, int file)
{
	void *a = NULL, *b = NULL;
	struct op w = { .n_done = &c->n_done }, r = { .n_done = &c->n_done };

	CHECK(posix_memalign(&a, IO_ALIGN, BLOCK) == 0);
	CHECK(posix_memalign(&b, IO_ALIGN, BLOCK) == 0);
	if (!a || !b)
		goto out;
	fill_random(a, BLOCK);
	memset(b, 0x5a, BLOCK);
	c->n_done = 0;
	w.req = (struct io_req){ .file = file, .offset = FILE_SIZE, .buf = a, .len = BLOCK,
				 .write = true, .done = on_done, .userdata = &w };
	io_submit(io, &w.req);
	CHECK(run_until(c->event, &c->n_done, 1));
	CHECK(w.result == (int)BLOCK);
	CHECK(w.req.buf_index == -1);
	r.req = (struct io_req){ .file = file, .offset = FILE_SIZE, .buf = b, .len = BLOCK,
				 .done = on_done, .userdata = &r };
	io_submit(io, &r.req);
	CHECK(run_until(c->event, &c->n_done, 2));
	CHECK(r.result == (int)BLOCK);
	CHECK(memcmp(a, b, BLOCK) == 0);
out:
	free(a);
	free(b);
}

/* Malformed requests fail with -EINVAL, from the loop, not from io_submit. */
static void malformed(struct ctx *c, struct io_engine *io, int file)
{
	struct op ops[4];
	const struct io_req bad[4] = {
		{ .file = file, .offset = 0, .buf = c->src, .len = 1000 },
		{ .file = file, .offset = 512, .buf = c->src, .len = BLOCK },
		{ .file = file + 7, .offset = 0, .buf = c->src, .len = BLOCK },
		{ .file = file, .offset = 0, .buf = c->src + 8, .len = BLOCK },
	};

	c->n_done = 0;
	for (unsigned i = 0; i < 4; i++) {
		ops[i] = (struct op){ .req = bad[i], .n_done = &c->n_done };
		ops[i].req.done = on_done;
		ops[i].req.userdata = &ops[i];
		io_submit(io, &ops[i].req);
	}
	CHECK(c->n_done == 0);
	CHECK(run_until(c->event, &c->n_done, 4));
	for (unsigned i = 0; i < 4; i++)
		CHECK(ops[i].result == -EINVAL);
}

static void region_errors(struct io_engine *io, struct ctx *c)
{
	CHECK(io_buffer_add(io, c->src + IO_ALIGN, IO_ALIGN) == -EEXIST);
	CHECK(io_buffer_add(io, c->src - IO_ALIGN, 2 * IO_ALIGN) == -EEXIST);
	CHECK(io_buffer_add(io, c->src + 1, IO_ALIGN) == -EINVAL);
	CHECK(io_buffer_add(io, c->src, 0) == -EINVAL);
	CHECK(io_file_add(io, -1) == -EBADF);
}

/* The ring refuses register operations it was not allowed. */
static void check_restricted(void)
{
	char path[64], link[64];
	int ring = -1;

	for (int fd = 3; fd < 1024 && ring < 0; fd++) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		ssize_t n = readlink(path, link, sizeof(link) - 1);
		if (n > 0) {
			link[n] = 0;
			if (!strcmp(link, "anon_inode:[io_uring]"))
				ring = fd;
		}
	}
	CHECK(ring >= 0);
	if (ring < 0)
		return;
	uint8_t probe[sizeof(struct io_uring_probe) + 256 * sizeof(struct io_uring_probe_op)] = { 0 };
	errno = 0;
	CHECK(syscall(__NR_io_uring_register, ring, IORING_REGISTER_PROBE, probe, 256) < 0);
	CHECK(errno == EACCES);
	int fd = 0;
	errno = 0;
	CHECK(syscall(__NR_io_uring_register, ring, IORING_REGISTER_EVENTFD, &fd, 1) < 0);
	CHECK(errno == EACCES);
}

/* Far above what IO_RETRY_MAX back-offs of N_BLOCKS requests take. */
#define MAX_ITERATIONS 200000u

static void arm_faults(const char *value)
{
	setenv(FAULT_ENV, value, 1);
	CHECK(fault_init() == 0);
	unsetenv(FAULT_ENV);
}

/* -EAGAIN from every write completion: each request is resubmitted
 * exactly IO_RETRY_MAX times, then ends with -EAGAIN; then every 3rd
 * completion either way: all of them end whole, with the right bytes. */
static void eagain(struct ctx *c, enum io_engine_kind kind)
{
	struct io_engine *io;
	struct io_stats st;
	int file;

	arm_faults("write_eagain=1+");
	io = engine(c, kind, &file);
	if (io) {
		pick_offsets(c);
		submit_all(c, io, file, c->src, true);
		CHECK(run_counted(c->event, &c->n_done, N_BLOCKS, MAX_ITERATIONS));
		io_get_stats(io, &st);
		printf("persistent -EAGAIN: %u of %u requests ended, %llu retries, %llu injected\n",
		       c->n_done, N_BLOCKS, (unsigned long long)st.retried,
		       (unsigned long long)st.injected);
		CHECK(count_results(c, -EAGAIN) == N_BLOCKS);
		CHECK(st.retried == (uint64_t)N_BLOCKS * IO_RETRY_MAX);
		CHECK(st.injected == (uint64_t)N_BLOCKS * (IO_RETRY_MAX + 1));
		CHECK(st.errors == N_BLOCKS && st.writes == N_BLOCKS && st.write_bytes == 0);
		CHECK(io_in_flight(io) == 0);
		io_engine_free(io);
	}

	arm_faults("write_eagain=%3,read_eagain=%3");
	io = engine(c, kind, &file);
	if (io) {
		round_trip(c, io, file, kind == IO_ENGINE_URING);
		io_get_stats(io, &st);
		CHECK(st.retried > 0 && st.retried == st.injected);
		io_engine_free(io);
	}
	CHECK(fault_init() == 0);
}

/* io_uring_enter() refuses every submission: each batch is tried 1 +
 * IO_RETRY_MAX times, then its requests end with the error, and nothing
 * reaches the file; refused every 2nd time, everything still gets through. */
static void submit_refused(struct ctx *c)
{
	struct io_engine *io;
	struct io_stats st;
	int file;

	/* What the refused writes would have written, if anything did. */
	pick_offsets(c);
	memset(c->src, 0xc3, REGION);
	arm_faults("uring_submit=1+");
	io = engine(c, IO_ENGINE_URING, &file);
	if (io) {
		submit_all(c, io, file, c->src, true);
		CHECK(run_counted(c->event, &c->n_done, N_BLOCKS, MAX_ITERATIONS));
		io_get_stats(io, &st);
		printf("persistent submission error: %u of %u requests ended, %llu refused submissions\n",
		       c->n_done, N_BLOCKS, (unsigned long long)st.submit_errors);
		CHECK(count_results(c, -ENXIO) == N_BLOCKS);
		CHECK(st.submit_errors == (uint64_t)(N_BLOCKS / QUEUE_DEPTH) * (IO_RETRY_MAX + 1));
		CHECK(st.errors == N_BLOCKS);
		CHECK(io_in_flight(io) == 0);
		for (unsigned i = 0; i < N_BLOCKS; i++)
			CHECK(!io_req_held(&c->ops[i].req));
		io_engine_free(io);
	}
	CHECK(fault_init() == 0);
	io = engine(c, IO_ENGINE_URING, &file);
	if (io) {
		memset(c->dst, 0xc3, REGION);
		submit_all(c, io, file, c->dst, false);
		CHECK(run_until(c->event, &c->n_done, N_BLOCKS));
		CHECK(count_results(c, (int)BLOCK) == N_BLOCKS);
		unsigned written = 0;
		for (unsigned i = 0; i < N_BLOCKS; i++)
			written += memcmp(c->dst + (size_t)i * BLOCK, c->src, BLOCK) == 0;
		CHECK(written == 0, "%u refused writes reached the file", written);
		io_engine_free(io);
	}

	arm_faults("uring_submit=%2");
	io = engine(c, IO_ENGINE_URING, &file);
	if (io) {
		round_trip(c, io, file, true);
		io_get_stats(io, &st);
		CHECK(st.submit_errors > 0 && st.submit_errors == st.injected);
		io_engine_free(io);
	}
	CHECK(fault_init() == 0);
}

static void run_kind(struct ctx *c, enum io_engine_kind kind)
{
	const char *name = kind == IO_ENGINE_URING ? "io_uring" : "threads";
	struct io_engine *io;
	struct io_stats st;
	int file, r;

	r = io_engine_new(c->event, kind, QUEUE_DEPTH, &io);
	if (r < 0 && kind == IO_ENGINE_URING) {
		printf("io_uring unavailable (%s): skipping its half\n", strerror(-r));
		return;
	}
	CHECK(r == 0);
	if (r < 0)
		return;
	io_engine_free(io);
	printf("--- %s\n", name);

	io = engine(c, kind, &file);
	if (!io)
		return;
	CHECK(!strcmp(io_engine_name(io), name));
	CHECK(!strcmp(io_engine_reason(io), "forced by configuration"));
	if (kind == IO_ENGINE_URING)
		check_restricted();
	region_errors(io, c);
	round_trip(c, io, file, kind == IO_ENGINE_URING);
	round_trip(c, io, file, kind == IO_ENGINE_URING);
	outside_region(c, io, file);
	malformed(c, io, file);
	io_get_stats(io, &st);
	CHECK(st.injected == 0 && st.short_requeued == 0);
	CHECK(st.errors == 4);
	io_engine_free(io);

	/* Every 3rd completion fails; one completion per request here. */
	setenv(FAULT_ENV, "read_eio=%3,write_eio=%3", 1);
	CHECK(fault_init() == 0);
	unsetenv(FAULT_ENV);
	io = engine(c, kind, &file);
	if (io) {
		pick_offsets(c);
		submit_all(c, io, file, c->src, true);
		CHECK(run_until(c->event, &c->n_done, N_BLOCKS));
		CHECK(count_results(c, -EIO) == N_BLOCKS / 3);
		CHECK(count_results(c, (int)BLOCK) == N_BLOCKS - N_BLOCKS / 3);
		io_get_stats(io, &st);
		CHECK(st.injected == N_BLOCKS / 3);
		CHECK(st.errors == N_BLOCKS / 3);
		CHECK(st.writes == N_BLOCKS);
		io_engine_free(io);
	}

	setenv(FAULT_ENV, "write_enospc=%4", 1);
	CHECK(fault_init() == 0);
	unsetenv(FAULT_ENV);
	io = engine(c, kind, &file);
	if (io) {
		submit_all(c, io, file, c->src, true);
		CHECK(run_until(c->event, &c->n_done, N_BLOCKS));
		CHECK(count_results(c, -ENOSPC) == N_BLOCKS / 4);
		io_engine_free(io);
	}

	/* Only the 5th write fails: the Nth call, not every Nth. */
	setenv(FAULT_ENV, "write_eio=5", 1);
	CHECK(fault_init() == 0);
	unsetenv(FAULT_ENV);
	io = engine(c, kind, &file);
	if (io) {
		submit_all(c, io, file, c->src, true);
		CHECK(run_until(c->event, &c->n_done, N_BLOCKS));
		CHECK(count_results(c, -EIO) == 1);
		CHECK(fault_injected(FAULT_WRITE_EIO) == 1);
		io_engine_free(io);
	}

	/* Every 2nd completion is cut in half: the remainders are resubmitted
	 * and every request still completes whole, with the right bytes. */
	setenv(FAULT_ENV, "read_short=%2,write_short=%2", 1);
	CHECK(fault_init() == 0);
	unsetenv(FAULT_ENV);
	io = engine(c, kind, &file);
	if (io) {
		round_trip(c, io, file, kind == IO_ENGINE_URING);
		io_get_stats(io, &st);
		CHECK(st.short_requeued > 0);
		CHECK(st.injected == st.short_requeued);
		io_engine_free(io);
	}
	CHECK(fault_init() == 0); /* disarmed */

	eagain(c, kind);
	if (kind == IO_ENGINE_URING)
		submit_refused(c);

	/* Freed with everything in flight or queued: no callback, no crash,
	 * no leak (the sanitizer build checks). */
	io = engine(c, kind, &file);
	if (io) {
		submit_all(c, io, file, c->src, true);
		(void)sd_event_run(c->event, 0);
		io_engine_free(io);
		for (unsigned i = 0; i < N_BLOCKS; i++)
			c->ops[i].done = false;
	}
	/* ... and with nothing submitted to the kernel yet. */
	io = engine(c, kind, &file);
	if (io) {
		submit_all(c, io, file, c->dst, false);
		io_engine_free(io);
	}
	unsigned late = c->n_done;
	(void)sd_event_run(c->event, 0);
	CHECK(c->n_done == late);
}

/* In a child: seccomp makes io_uring_setup fail; AUTO must fall back. */
static int child_seccomp(struct ctx *c, int error)
{
	struct sock_filter filter[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (unsigned)error),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { .len = sizeof(filter) / sizeof(filter[0]), .filter = filter };
	struct io_engine *io;
	int file;

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0) {
		printf("cannot install a seccomp filter (%s): skipping the fallback check\n",
		       strerror(errno));
		return KVT_TEST_SKIP;
	}
	CHECK(io_engine_new(c->event, IO_ENGINE_URING, QUEUE_DEPTH, &io) == -error);
	io = engine(c, IO_ENGINE_AUTO, &file);
	if (!io)
		return 1;
	CHECK(!strcmp(io_engine_name(io), "threads"));
	CHECK(strstr(io_engine_reason(io), "io_uring") != NULL);
	printf("seccomp %s: %s: %s\n", strerror(error), io_engine_name(io), io_engine_reason(io));
	round_trip(c, io, file, false);
	io_engine_free(io);
	return failures ? 1 : 0;
}

/* In a child without CAP_IPC_LOCK and with an 8 MiB RLIMIT_MEMLOCK: a
 * 64 MiB region cannot be registered and is used unregistered, with the
 * right bytes. */
static int child_memlock(struct ctx *c, int unused)
{
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct data[2];
	struct rlimit rl = { 8u << 20, 8u << 20 };
	struct io_engine *io;
	const size_t big_size = 64u << 20;
	uint8_t *big;
	int file;

	if (syscall(SYS_capget, &hdr, data) < 0)
		return KVT_TEST_SKIP;
	data[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
	if (syscall(SYS_capset, &hdr, data) < 0 || setrlimit(RLIMIT_MEMLOCK, &rl) < 0) {
		printf("cannot drop CAP_IPC_LOCK or lower RLIMIT_MEMLOCK: skipping the memlock check\n");
		return KVT_TEST_SKIP;
	}
	big = region_new(big_size);
	if (!big)
		return 1;
	if (io_engine_new(c->event, IO_ENGINE_URING, QUEUE_DEPTH, &io) < 0)
		return KVT_TEST_SKIP;
	file = io_file_add(io, c->fd);
	CHECK(file == 0);
	/* The big one cannot fit the limit.  Whether src does is not
	 * checked: the limit counts what every process of this uid without
	 * CAP_IPC_LOCK has pinned, and a ring that was just closed releases
	 * its pages only a little later. */
	CHECK(io_buffer_add(io, c->src, REGION) == 0);
	CHECK(io_buffer_add(io, big, big_size) == 0);

	pick_offsets(c);
	fill_random(c->src, REGION);
	memset(big, 0xa5, REGION);
	submit_all(c, io, file, c->src, true);
	CHECK(run_until(c->event, &c->n_done, N_BLOCKS));
	CHECK(count_results(c, (int)BLOCK) == N_BLOCKS);
	submit_all(c, io, file, big, false);
	CHECK(run_until(c->event, &c->n_done, N_BLOCKS));
	CHECK(count_results(c, (int)BLOCK) == N_BLOCKS);
	CHECK(c->ops[0].req.buf_index == -1);
	CHECK(memcmp(c->src, big, REGION) == 0);
	io_engine_free(io);
	munmap(big, big_size);
	return failures ? 1 : 0;
}

/*
 * In a child: io_engine_free() with a read in flight that the kernel would
 * hold forever (from an empty pipe) next to writes to the file.  The read
 * is cancelled, the writes end, and it returns with nothing held: the bytes
 * written into the pipe afterwards are still there for anyone to read.
 * With fail_wait, every io_uring_enter() after the first fails: the engine
 * gives up waiting, reports the read as held, and the writes it never
 * submitted as not.
 */
/* A buffer reported held: never freed. */
static uint8_t *held_buffer;

static int child_free_in_flight(struct ctx *c, int fail_wait)
{
	struct op rd = { .n_done = &c->n_done }, wr[4];
	struct io_engine *io;
	uint8_t *buf = NULL, bytes[IO_ALIGN], back[IO_ALIGN];
	int p[2], file, pipe_file;

	if (pipe2(p, O_CLOEXEC) < 0 || posix_memalign((void **)&buf, IO_ALIGN, IO_ALIGN) != 0)
		return 1;
	if (fail_wait)
		arm_faults("uring_submit=2+");
	io = engine(c, IO_ENGINE_URING, &file);
	if (!io)
		return 1;
	pipe_file = io_file_add(io, p[0]);
	CHECK(pipe_file == 1);
	c->n_done = 0;
	rd.req = (struct io_req){ .file = pipe_file, .offset = 0, .buf = buf, .len = IO_ALIGN,
				  .done = on_done, .userdata = &rd };
	io_submit(io, &rd.req);
	(void)sd_event_run(c->event, 0); /* the read is submitted */
	for (unsigned i = 0; i < 4; i++) {
		wr[i] = (struct op){ .n_done = &c->n_done };
		wr[i].req = (struct io_req){ .file = file, .offset = (uint64_t)i * BLOCK,
					     .buf = c->src + (size_t)i * BLOCK, .len = BLOCK,
					     .write = true, .done = on_done, .userdata = &wr[i] };
		io_submit(io, &wr[i].req);
	}
	(void)sd_event_run(c->event, 0);
	CHECK(io_in_flight(io) == 5);
	CHECK(io_req_held(&rd.req));
	/* Only a hang guard: a read that is waited for, not cancelled,
	 * keeps io_engine_free() from returning at all. */
	alarm(60);
	io_engine_free(io);
	alarm(0);
	CHECK(c->n_done == 0);
	for (unsigned i = 0; i < 4; i++)
		CHECK(!io_req_held(&wr[i].req));
	if (fail_wait) {
		CHECK(io_req_held(&rd.req));
		held_buffer = buf;
		printf("waiting failed: the pipe read is reported held, its buffer kept\n");
	} else {
		CHECK(!io_req_held(&rd.req));
		free(buf);
		memset(bytes, 0x3c, sizeof(bytes));
		CHECK(write(p[1], bytes, sizeof(bytes)) == (ssize_t)sizeof(bytes));
		CHECK(read(p[0], back, sizeof(back)) == (ssize_t)sizeof(back));
		CHECK(memcmp(bytes, back, sizeof(bytes)) == 0);
		printf("the pipe read was cancelled at free\n");
	}
	CHECK(fault_init() == 0);
	close(p[0]);
	close(p[1]);
	return failures ? 1 : 0;
}

static void in_child(struct ctx *c, const char *what, int (*fn)(struct ctx *, int), int arg)
{
	pid_t pid;
	int status;

	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid < 0) {
		failures++;
		return;
	}
	if (pid == 0) {
		/* The child's own count and loop: an sd_event is not shared
		 * across fork. */
		failures = 0;
		sd_event_unref(c->event);
		if (sd_event_new(&c->event) < 0)
			_exit(1);
		int r = fn(c, arg);
		sd_event_unref(c->event);
		fflush(stdout);
		exit(r);
	}
	if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status)) {
		fprintf(stderr, "%s: the child died%s\n", what,
			WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM ?
				" (SIGALRM: it hung)" : "");
		failures++;
	} else if (WEXITSTATUS(status) == KVT_TEST_SKIP) {
		printf("%s: skipped\n", what);
	} else if (WEXITSTATUS(status) != 0) {
		fprintf(stderr, "%s: failed\n", what);
		failures++;
	}
}

int main(void)
{
	struct ctx c = { .fd = -1 };
	char dir[] = "/var/tmp/kvtier-test-io.XXXXXX", path[sizeof(dir) + 16];
	struct io_engine *io;
	bool have_uring = false;
	int r;

	if (!mkdtemp(dir)) {
		fprintf(stderr, "mkdtemp: %s\n", strerror(errno));
		return 1;
	}
	snprintf(path, sizeof(path), "%s/spill", dir);
	c.fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_DIRECT, 0600);
	if (c.fd < 0 && errno == EINVAL) {
		printf("%s does not take O_DIRECT: testing buffered I/O\n", dir);
		c.fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	}
	/* The file is not needed by name: tests that die leave nothing. */
	unlink(path);
	rmdir(dir);
	if (c.fd < 0 || ftruncate(c.fd, (off_t)(FILE_SIZE + BLOCK)) < 0) {
		fprintf(stderr, "test file: %s\n", strerror(errno));
		return 1;
	}
	c.src = region_new(REGION);
	c.dst = region_new(REGION);
	if (!c.src || !c.dst || sd_event_new(&c.event) < 0) {
		fprintf(stderr, "setup failed\n");
		return 1;
	}

	/* AUTO: whichever this machine has, and why. */
	r = io_engine_new(c.event, IO_ENGINE_AUTO, 0, &io);
	CHECK(r == 0);
	if (r == 0) {
		printf("auto: %s (%s)\n", io_engine_name(io), io_engine_reason(io));
		have_uring = !strcmp(io_engine_name(io), "io_uring");
		CHECK(io_engine_reason(io)[0] != 0);
		io_engine_free(io);
	}
	CHECK(io_engine_new(c.event, IO_ENGINE_THREADS, IO_QUEUE_DEPTH_MAX + 1, &io) == -EINVAL);

	run_kind(&c, IO_ENGINE_URING);
	run_kind(&c, IO_ENGINE_THREADS);
	if (have_uring) {
		in_child(&c, "fallback on ENOSYS", child_seccomp, ENOSYS);
		in_child(&c, "fallback on EPERM", child_seccomp, EPERM);
		in_child(&c, "memlock", child_memlock, 0);
		in_child(&c, "free with a read held forever", child_free_in_flight, 0);
		in_child(&c, "free when waiting fails", child_free_in_flight, 1);
	}

	sd_event_unref(c.event);
	munmap(c.src, REGION);
	munmap(c.dst, REGION);
	close(c.fd);
	if (failures) {
		fprintf(stderr, "%d failures\n", failures);
		return 1;
	}
	printf("ok\n");
	return 0;
}
