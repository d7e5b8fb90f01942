/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The NVMe tier's format and space: header round trips; every single-byte
 * corruption of a header, a flipped payload bit, a header copied to another
 * region or slot, and a wrong key, length or sequence number detected;
 * spill files created, preallocated, kept, extended, locked against a second
 * holder, and refused with the right words (too small, no directory,
 * no O_DIRECT, no space, read-only, the same file twice); recovery finding
 * exactly the intact slots among torn, garbage and stale ones; space for
 * two tenants x two namespaces filled, freed, rebound and refilled; and
 * regions counted per tenant and taken back for another.
 *
 * Files live in a fresh directory under /var/tmp (O_DIRECT; tmpfs may refuse
 * it on older kernels).  Exit 77 when that file system refuses O_DIRECT.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "spill.h"
#include "../check.h"
#include "../helpers.h"
#define RNG_SEED UINT64_C(0x243f6a8885a308d3)
#include "rng.h"

#define MiB (UINT64_C(1) << 20)

static char dir[] = "/var/tmp/kvtier-test-spill-XXXXXX";

static void fill_random(uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)rnd();
}

static char *path_of(const char *name)
{
	char *p;
	if (asprintf(&p, "%s/%s", dir, name) < 0)
		abort();
	return p;
}

/*
 * stderr capture, to check the words of an error.
 */

static int saved_stderr = -1, capture_fd = -1;

static void capture_begin(void)
{
	fflush(stderr);
	capture_fd = memfd_create("stderr", MFD_CLOEXEC);
	saved_stderr = dup(STDERR_FILENO);
	if (capture_fd < 0 || saved_stderr < 0)
		abort();
	dup2(capture_fd, STDERR_FILENO);
}

/* The captured text, also passed on to the real stderr. */
static char *capture_end(void)
{
	static char text[16384];
	fflush(stderr);
	dup2(saved_stderr, STDERR_FILENO);
	close(saved_stderr);
	ssize_t n = pread(capture_fd, text, sizeof(text) - 1, 0);
	close(capture_fd);
	text[n > 0 ? n : 0] = 0;
	fputs(text, stderr);
	return text;
}

/* spill_open() of one file that must fail with want and say `words`. */
static void expect_open_error(const char *path, uint64_t capacity, int want,
			      const char *words, int line)
{
	struct spill_file_conf c = { path, capacity };
	struct spill *s = NULL;

	capture_begin();
	int r = spill_open(&c, 1, &s);
	char *text = capture_end();
	if (r != want || !strstr(text, words) || !strstr(text, path)) {
		fprintf(stderr, "%s:%d: spill_open('%s') gave %d (want %d), said \"%s\" (want \"%s\")\n",
			__FILE__, line, path, r, want, text, words);
		failures++;
	}
	if (r == 0)
		spill_free(s);
}

/* The last "' failed" in text: the first one when said once. */
static const char *strrstr_failed(const char *text)
{
	const char *last = NULL;
	for (const char *p = text; (p = strstr(p, "' failed")); p++)
		last = p;
	return last;
}

/*
 * Pure format.
 */

static const uint8_t ident_a[] = "kvt-ns v1: llama-3-8b fp16 32 layers 16 tokens";
static const uint8_t ident_b[] = "kvt-ns v1: llama-3-8b fp8 32 layers 16 tokens";

/* A region bound as spill_region_find() would, without files. */
struct fake_region {
	struct spill_file file;
	struct spill_binding b;
	struct spill_region r;
};

static void fake_region(struct fake_region *f, const char *tenant, const uint8_t *ident,
			size_t ident_len, uint64_t slot_bytes, uint32_t index,
			uint64_t generation)
{
	memset(f, 0, sizeof(*f));
	strcpy(f->b.tenant, tenant);
	f->b.tenant_len = (uint32_t)strlen(tenant);
	f->b.identity = (uint8_t *)ident;
	f->b.identity_len = (uint32_t)ident_len;
	f->b.slot_bytes = slot_bytes;
	f->b.tenant_hash = spill_tenant_hash(tenant, strlen(tenant));
	spill_ns_digest(ident, ident_len, f->b.ns_digest);
	f->r.file = &f->file;
	f->r.index = index;
	f->r.binding = &f->b;
	f->r.generation = generation;
	f->r.stride = spill_stride_for(slot_bytes);
	f->r.slots.n = spill_slots_per_region(slot_bytes);
}

static void test_sizes(void)
{
	CHECK(spill_stride_for(1) == 8192);
	CHECK(spill_stride_for(4096) == 8192);
	CHECK(spill_stride_for(4097) == 12288);
	CHECK(spill_slots_per_region(0) == 0);
	CHECK(spill_slots_per_region(4096) == (64 * MiB - 8192) / 8192);
	CHECK(spill_slots_per_region(SPILL_SLOT_BYTES_MAX) == 1);
	CHECK(spill_slots_per_region(SPILL_SLOT_BYTES_MAX + 1) == 0);
	CHECK(SPILL_SLOT_BYTES_MAX % SPILL_ALIGN == 0);
}

static void test_region_header(void)
{
	uint8_t *buf = spill_buf_alloc(SPILL_REGION_HEADER_BYTES);
	uint8_t *copy = spill_buf_alloc(SPILL_REGION_HEADER_BYTES);
	uint8_t ident[SPILL_IDENTITY_MAX];
	struct spill_region_header h = {
		.index = 5,
		.generation = UINT64_C(0x0123456789abcdef),
		.slot_bytes = 123456,
		.identity_len = 300,
		.identity = ident,
	}, d;

	fill_random(ident, sizeof(ident));
	strcpy(h.tenant, "alpha");
	h.tenant_len = 5;
	CHECK(spill_region_header_encode(&h, buf, SPILL_REGION_HEADER_BYTES) == 0);
	CHECK(memcmp(buf, "KVTSPRG1", 8) == 0);
	CHECK(spill_region_header_decode(buf, SPILL_REGION_HEADER_BYTES, &d) == 0);
	CHECK(d.index == 5 && d.generation == h.generation && d.slot_bytes == 123456);
	CHECK(d.tenant_len == 5 && strcmp(d.tenant, "alpha") == 0);
	CHECK(d.identity_len == 300 && memcmp(d.identity, ident, 300) == 0);

	/* The longest tenant and identity fit. */
	memset(h.tenant, 'x', SPILL_TENANT_MAX);
	h.tenant[SPILL_TENANT_MAX] = 0;
	h.tenant_len = SPILL_TENANT_MAX;
	h.identity_len = SPILL_IDENTITY_MAX;
	h.slot_bytes = SPILL_SLOT_BYTES_MAX;
	CHECK(spill_region_header_encode(&h, buf, SPILL_REGION_HEADER_BYTES) == 0);
	CHECK(spill_region_header_decode(buf, SPILL_REGION_HEADER_BYTES, &d) == 0);
	CHECK(d.tenant_len == SPILL_TENANT_MAX && strlen(d.tenant) == SPILL_TENANT_MAX);
	CHECK(d.identity_len == SPILL_IDENTITY_MAX &&
	      memcmp(d.identity, ident, SPILL_IDENTITY_MAX) == 0);

	/* Out of range: refused, buffer untouched. */
	struct spill_region_header bad[8];
	for (int i = 0; i < 8; i++)
		bad[i] = h;
	bad[0].tenant_len = 0;
	bad[1].tenant_len = SPILL_TENANT_MAX + 1;
	bad[2].identity_len = 0;
	bad[3].identity_len = SPILL_IDENTITY_MAX + 1;
	bad[4].generation = 0;
	bad[5].slot_bytes = 0;
	bad[6].slot_bytes = SPILL_SLOT_BYTES_MAX + 1;
	bad[7].tenant[3] = 0; /* a NUL inside the name */
	memcpy(copy, buf, SPILL_REGION_HEADER_BYTES);
	for (int i = 0; i < 8; i++)
		CHECK_N(spill_region_header_encode(&bad[i], buf, SPILL_REGION_HEADER_BYTES) == -EINVAL, i);
	CHECK(spill_region_header_encode(&h, buf, SPILL_REGION_HEADER_BYTES - 1) == -EINVAL);
	CHECK(memcmp(copy, buf, SPILL_REGION_HEADER_BYTES) == 0);

	/* Never written. */
	memset(copy, 0, SPILL_REGION_HEADER_BYTES);
	CHECK(spill_region_header_decode(copy, SPILL_REGION_HEADER_BYTES, &d) == -ENODATA);

	/* Every byte, every bit pattern class: no change passes. */
	h.tenant_len = 7;
	h.tenant[7] = 0;
	h.identity_len = 1000;
	CHECK(spill_region_header_encode(&h, buf, SPILL_REGION_HEADER_BYTES) == 0);
	static const uint8_t masks[] = { 0x01, 0x80, 0xff };
	unsigned passed = 0;
	for (unsigned i = 0; i < SPILL_REGION_HEADER_BYTES; i++)
		for (unsigned m = 0; m < sizeof(masks); m++) {
			memcpy(copy, buf, SPILL_REGION_HEADER_BYTES);
			copy[i] ^= masks[m];
			if (spill_region_header_decode(copy, SPILL_REGION_HEADER_BYTES, &d) == 0 &&
			    passed++ < 5)
				fprintf(stderr, "region header byte %u ^ 0x%02x decoded\n", i, masks[m]);
		}
	CHECK(passed == 0);

	/* Another format version is named as such. */
	memcpy(copy, buf, SPILL_REGION_HEADER_BYTES);
	copy[8] = 2;
	CHECK(spill_region_header_decode(copy, SPILL_REGION_HEADER_BYTES, &d) == -EPROTONOSUPPORT);

	/* Garbage. */
	for (int i = 0; i < 200; i++) {
		fill_random(copy, SPILL_REGION_HEADER_BYTES);
		CHECK(spill_region_header_decode(copy, SPILL_REGION_HEADER_BYTES, &d) < 0);
	}
	free(buf);
	free(copy);
}

static void test_slot_header(void)
{
	struct fake_region fa, other_index, other_gen, other_tenant, other_ns;
	uint8_t *buf = spill_buf_alloc(SPILL_SLOT_HEADER_BYTES);
	uint8_t *copy = spill_buf_alloc(SPILL_SLOT_HEADER_BYTES);
	uint8_t key[KVT_KEY_SIZE], key2[KVT_KEY_SIZE];
	const uint64_t len = 50000, seq = 77;
	uint8_t *payload = malloc(len);
	struct spill_slot_header h, d;

	fill_random(key, sizeof(key));
	fill_random(payload, len);
	fake_region(&fa, "alpha", ident_a, sizeof(ident_a), 60000, 3, 1111);
	fake_region(&other_index, "alpha", ident_a, sizeof(ident_a), 60000, 4, 1111);
	fake_region(&other_gen, "alpha", ident_a, sizeof(ident_a), 60000, 3, 2222);
	fake_region(&other_tenant, "beta", ident_a, sizeof(ident_a), 60000, 3, 1111);
	fake_region(&other_ns, "alpha", ident_b, sizeof(ident_b), 60000, 3, 1111);

	spill_slot_header_init(&h, &fa.r, 7, key, len, seq, spill_payload_sum(payload, len));
	CHECK(spill_slot_header_encode(&h, buf, SPILL_SLOT_HEADER_BYTES) == 0);
	CHECK(memcmp(buf, "KVTSPSL1", 8) == 0);
	CHECK(spill_slot_header_decode(buf, SPILL_SLOT_HEADER_BYTES, &d) == 0);
	CHECK(memcmp(&d, &h, sizeof(h)) == 0);
	CHECK(spill_slot_check(buf, SPILL_SLOT_HEADER_BYTES, &fa.r, 7, key, len, seq, &d) == 0);
	CHECK(spill_payload_check(&d, payload) == 0);
	CHECK(spill_slot_header_encode(&h, buf, SPILL_SLOT_HEADER_BYTES - 1) == -EINVAL);
	CHECK(spill_slot_header_decode(buf, SPILL_SLOT_HEADER_BYTES - 1, &d) == -EINVAL);

	/* Every byte of the header: decode or verify refuses. */
	static const uint8_t masks[] = { 0x01, 0x80, 0xff };
	unsigned passed = 0;
	for (unsigned i = 0; i < SPILL_SLOT_HEADER_BYTES; i++)
		for (unsigned m = 0; m < sizeof(masks); m++) {
			memcpy(copy, buf, SPILL_SLOT_HEADER_BYTES);
			copy[i] ^= masks[m];
			if (spill_slot_check(copy, SPILL_SLOT_HEADER_BYTES, &fa.r, 7, key, len,
					     seq, NULL) == 0 && passed++ < 5)
				fprintf(stderr, "slot header byte %u ^ 0x%02x passed\n", i, masks[m]);
		}
	CHECK(passed == 0);
	memset(copy, 0, SPILL_SLOT_HEADER_BYTES);
	CHECK(spill_slot_header_decode(copy, SPILL_SLOT_HEADER_BYTES, &d) == -ENODATA);
	memcpy(copy, buf, SPILL_SLOT_HEADER_BYTES);
	copy[8] = 9;
	CHECK(spill_slot_header_decode(copy, SPILL_SLOT_HEADER_BYTES, &d) == -EPROTONOSUPPORT);
	for (int i = 0; i < 200; i++) {
		fill_random(copy, SPILL_SLOT_HEADER_BYTES);
		CHECK(spill_slot_header_decode(copy, SPILL_SLOT_HEADER_BYTES, &d) < 0);
	}

	/* The same intact header read anywhere else is someone else's. */
	CHECK(spill_slot_header_decode(buf, SPILL_SLOT_HEADER_BYTES, &d) == 0);
	CHECK(spill_slot_header_match(&d, &fa.r, 7) == 0);
	CHECK(spill_slot_header_match(&d, &fa.r, 8) == -ESTALE);
	CHECK(spill_slot_header_match(&d, &other_index.r, 7) == -ESTALE);
	CHECK(spill_slot_header_match(&d, &other_gen.r, 7) == -ESTALE);
	CHECK(spill_slot_header_match(&d, &other_tenant.r, 7) == -ESTALE);
	CHECK(spill_slot_header_match(&d, &other_ns.r, 7) == -ESTALE);
	CHECK(spill_slot_check(buf, SPILL_SLOT_HEADER_BYTES, &other_index.r, 7, key, len, seq, NULL) == -ESTALE);
	/* A slot number past the region's slots, or a length past its size. */
	CHECK(spill_slot_header_match(&d, &fa.r, fa.r.slots.n) == -ESTALE);
	struct fake_region small;
	fake_region(&small, "alpha", ident_a, sizeof(ident_a), len - 1, 3, 1111);
	CHECK(spill_slot_header_match(&d, &small.r, 7) == -ESTALE);

	/* Wrong key (each byte), length or sequence number. */
	for (unsigned i = 0; i < KVT_KEY_SIZE; i++) {
		memcpy(key2, key, sizeof(key));
		key2[i] ^= 0x20;
		CHECK_N(spill_slot_header_verify(&d, &fa.r, 7, key2, len, seq) == -ESTALE, i);
	}
	CHECK(spill_slot_header_verify(&d, &fa.r, 7, key, len - 1, seq) == -ESTALE);
	CHECK(spill_slot_header_verify(&d, &fa.r, 7, key, len + 1, seq) == -ESTALE);
	CHECK(spill_slot_header_verify(&d, &fa.r, 7, key, len, seq + 1) == -ESTALE);
	CHECK(spill_slot_header_verify(&d, &fa.r, 7, key, len, seq - 1) == -ESTALE);
	CHECK(spill_slot_header_verify(&d, &fa.r, 7, key, len, seq) == 0);

	/* Payload bit flips, first and last bytes included. */
	unsigned missed = 0;
	for (int i = 0; i < 2000; i++) {
		uint64_t bit = i == 0 ? 0 : i == 1 ? len * 8 - 1 : rnd() % (len * 8);
		payload[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		if (spill_payload_check(&d, payload) != -EBADMSG)
			missed++;
		payload[bit / 8] ^= (uint8_t)(1u << (bit % 8));
	}
	CHECK(missed == 0);
	CHECK(spill_payload_check(&d, payload) == 0);
	free(payload);
	free(buf);
	free(copy);
}

/*
 * Files.
 */

static bool o_direct_works(void)
{
	char *p = path_of("probe");
	int fd = open(p, O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
	int e = errno;
	if (fd >= 0)
		close(fd);
	unlink(p);
	free(p);
	if (fd < 0)
		printf("test-spill: skipped: %s refuses O_DIRECT (%s)\n", dir, strerror(e));
	return fd >= 0;
}

static int open_one(const char *path, uint64_t capacity, struct spill **ret)
{
	struct spill_file_conf c = { path, capacity };
	return spill_open(&c, 1, ret);
}

static void test_open(void)
{
	char *p = path_of("open.spill");
	uint8_t *buf = spill_buf_alloc(SPILL_ALIGN), *back = spill_buf_alloc(SPILL_ALIGN);
	const uint64_t cap = 2 * SPILL_REGION_BYTES + 12288; /* a partial region at the end */
	const uint64_t mark = 100 * MiB;
	struct spill *s = NULL;
	struct stat st;

	/* Created and preallocated. */
	CHECK(open_one(p, cap, &s) == 0);
	CHECK(s && s->n_files == 1 && s->files[0].n_regions == 2);
	CHECK(stat(p, &st) == 0 && (uint64_t)st.st_size == cap);
	CHECK((uint64_t)st.st_blocks * 512 >= cap);
	CHECK((st.st_mode & 0777) == 0600);
	CHECK(fcntl(s->files[0].fd, F_GETFD) & FD_CLOEXEC);
	CHECK(fcntl(s->files[0].fd, F_GETFL) & O_DIRECT);
	fill_random(buf, SPILL_ALIGN);
	CHECK(pwrite(s->files[0].fd, buf, SPILL_ALIGN, (off_t)mark) == SPILL_ALIGN);
	spill_free(s);

	/* Reopened as configured: same size, same data. */
	CHECK(open_one(p, cap, &s) == 0);
	CHECK(stat(p, &st) == 0 && (uint64_t)st.st_size == cap);
	CHECK(pread(s->files[0].fd, back, SPILL_ALIGN, (off_t)mark) == SPILL_ALIGN &&
	      memcmp(buf, back, SPILL_ALIGN) == 0);
	spill_free(s);

	/* Configured smaller than the file: the file keeps its size and data. */
	CHECK(open_one(p, SPILL_REGION_BYTES, &s) == 0);
	CHECK(s && s->files[0].n_regions == 1);
	CHECK(stat(p, &st) == 0 && (uint64_t)st.st_size == cap);
	spill_free(s);

	/* Configured larger: extended, data kept. */
	CHECK(open_one(p, 3 * SPILL_REGION_BYTES, &s) == 0);
	CHECK(s && s->files[0].n_regions == 3);
	CHECK(stat(p, &st) == 0 && (uint64_t)st.st_size == 3 * SPILL_REGION_BYTES);
	CHECK((uint64_t)st.st_blocks * 512 >= 3 * SPILL_REGION_BYTES);
	memset(back, 0, SPILL_ALIGN);
	CHECK(pread(s->files[0].fd, back, SPILL_ALIGN, (off_t)mark) == SPILL_ALIGN &&
	      memcmp(buf, back, SPILL_ALIGN) == 0);
	spill_free(s);

	/* A file that shrank behind our back is extended, data before the cut kept. */
	CHECK(truncate(p, 2 * SPILL_REGION_BYTES) == 0);
	CHECK(open_one(p, 3 * SPILL_REGION_BYTES, &s) == 0);
	CHECK(stat(p, &st) == 0 && (uint64_t)st.st_size == 3 * SPILL_REGION_BYTES);
	CHECK(pread(s->files[0].fd, back, SPILL_ALIGN, (off_t)mark) == SPILL_ALIGN &&
	      memcmp(buf, back, SPILL_ALIGN) == 0);
	spill_free(s);

	free(buf);
	free(back);
	unlink(p);
	free(p);
}

/* A child holds the file's lock until told to go, or for hold_ms. */
static pid_t lock_holder(const char *path, int hold_ms, int *ret_go)
{
	int ready[2], go[2];
	char c;

	if (pipe2(ready, O_CLOEXEC) < 0 || pipe2(go, O_CLOEXEC) < 0)
		abort();
	pid_t pid = fork();
	if (pid == 0) {
		struct spill *s;
		close(ready[0]);
		close(go[1]);
		if (open_one(path, SPILL_REGION_BYTES, &s) < 0)
			_exit(1);
		if (write(ready[1], "x", 1) != 1)
			_exit(1);
		if (hold_ms > 0)
			usleep((useconds_t)hold_ms * 1000);
		else if (read(go[0], &c, 1) < 0)
			_exit(1);
		spill_free(s);
		_exit(0);
	}
	close(ready[1]);
	close(go[0]);
	CHECK(pid > 0 && read(ready[0], &c, 1) == 1);
	close(ready[0]);
	*ret_go = go[1];
	return pid;
}

static void test_lock(void)
{
	char *p = path_of("lock.spill");
	struct spill *s = NULL;
	int go, status;

	/* Held for good: refused after the wait, in those words. */
	pid_t pid = lock_holder(p, 0, &go);
	expect_open_error(p, SPILL_REGION_BYTES, -EBUSY, "Another kvtierd holds spill file", __LINE__);
	close(go);
	CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);

	/* Released while we wait, as a killed predecessor's lock is. */
	pid = lock_holder(p, 300, &go);
	CHECK(open_one(p, SPILL_REGION_BYTES, &s) == 0);
	spill_free(s);
	close(go);
	CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0);

	/* Two of our own files are one file: said so, not taken for a lock. */
	struct spill_file_conf two[2] = { { p, SPILL_REGION_BYTES }, { p, SPILL_REGION_BYTES } };
	capture_begin();
	int r = spill_open(two, 2, &s);
	char *text = capture_end();
	CHECK(r == -EINVAL && strstr(text, "are the same file"));
	unlink(p);
	free(p);
}

/* A read-only bind mount in a private mount namespace, if we may. */
static void test_erofs(void)
{
	char *ro = path_of("ro");
	char *p = path_of("ro/x.spill");
	int status;

	CHECK(mkdir(ro, 0700) == 0);
	pid_t pid = fork();
	if (pid == 0) {
		if (unshare(CLONE_NEWNS) < 0 ||
		    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
		    mount(ro, ro, NULL, MS_BIND, NULL) < 0 ||
		    mount(NULL, ro, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY, NULL) < 0)
			_exit(KVT_TEST_SKIP);
		expect_open_error(p, SPILL_REGION_BYTES, -EROFS, "ReadWritePaths=", __LINE__);
		_exit(failures ? 1 : 0);
	}
	CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status));
	if (WEXITSTATUS(status) == KVT_TEST_SKIP)
		printf("test-spill: read-only file system case skipped: no private mount namespace here\n");
	else
		CHECK(WEXITSTATUS(status) == 0);
	rmdir(ro);
	free(ro);
	free(p);
}

static void test_open_errors(void)
{
	char *p = path_of("err.spill");
	char *missing = path_of("no-such-dir/x.spill");
	struct stat st;

	expect_open_error(p, SPILL_REGION_BYTES - SPILL_ALIGN, -EINVAL, "too small: at least 64M", __LINE__);
	CHECK(stat(p, &st) < 0 && errno == ENOENT); /* refused before anything was created */
	expect_open_error(missing, SPILL_REGION_BYTES, -ENOENT, "does not exist", __LINE__);

	setenv(SPILL_NO_DIRECT_ENV, "1", 1);
	expect_open_error(p, SPILL_REGION_BYTES, -EINVAL, "does not support O_DIRECT", __LINE__);
	unsetenv(SPILL_NO_DIRECT_ENV);

	/* Far more than any test machine has: refused before allocating. */
	expect_open_error(p, UINT64_C(1) << 50, -ENOSPC, "Not enough space on the file system", __LINE__);
	CHECK(stat(p, &st) == 0 && st.st_size == 0 && st.st_blocks == 0);
	unlink(p);

	char *d = path_of("a-dir");
	CHECK(mkdir(d, 0700) == 0);
	expect_open_error(d, SPILL_REGION_BYTES, -EISDIR, "is a directory", __LINE__);
	rmdir(d);
	free(d);
	free(p);
	free(missing);
}

/*
 * Recovery.
 */

#define MAX_FOUND 4096

struct found {
	unsigned calls, n;
	struct {
		struct spill_region *r;
		uint32_t slot;
		struct spill_slot_header h;
		bool replaced;
	} e[MAX_FOUND];
};

/* What the daemon's index would do: keep the newest copy of each key. */
static int on_found(struct spill_region *r, uint32_t slot, const struct spill_slot_header *h,
		    void *userdata)
{
	struct found *f = userdata;

	f->calls++;
	CHECK(spill_slot_header_match(h, r, slot) == 0);
	if (f->n == MAX_FOUND)
		return -E2BIG;
	for (unsigned i = 0; i < f->n; i++) {
		if (f->e[i].replaced || f->e[i].r->binding != r->binding ||
		    memcmp(f->e[i].h.key, h->key, KVT_KEY_SIZE) != 0)
			continue;
		if (f->e[i].h.seq > h->seq)
			return 0;
		CHECK(spill_slot_free(f->e[i].r, f->e[i].slot) == 0);
		f->e[i].replaced = true;
	}
	f->e[f->n].r = r;
	f->e[f->n].slot = slot;
	f->e[f->n].h = *h;
	f->e[f->n].replaced = false;
	f->n++;
	return 1;
}

static void write_at(int fd, const void *buf, size_t len, uint64_t off)
{
	CHECK(pwrite(fd, buf, len, (off_t)off) == (ssize_t)len);
}

struct written {
	uint32_t slot;
	uint8_t key[KVT_KEY_SIZE];
	uint64_t seq, len;
	bool intact;
};

/* Write an intact slot (header and payload) of r. */
static void write_slot(struct spill *s, struct spill_region *r, struct written *w,
		       uint8_t *hdr, uint8_t *payload)
{
	struct spill_slot_header h;

	CHECK(spill_slot_alloc(r, &w->slot) == 0);
	fill_random(w->key, KVT_KEY_SIZE);
	w->seq = spill_next_seq(s);
	w->len = r->binding->slot_bytes - (rnd() % 100);
	w->intact = true;
	fill_random(payload, w->len);
	spill_slot_header_init(&h, r, w->slot, w->key, w->len, w->seq,
			       spill_payload_sum(payload, w->len));
	CHECK(spill_slot_header_encode(&h, hdr, SPILL_SLOT_HEADER_BYTES) == 0);
	write_at(r->file->fd, hdr, SPILL_SLOT_HEADER_BYTES, spill_slot_offset(r, w->slot));
	uint64_t plen = spill_slot_stride(r) - SPILL_SLOT_HEADER_BYTES;
	write_at(r->file->fd, payload, plen, spill_slot_offset(r, w->slot) + SPILL_SLOT_HEADER_BYTES);
}

static void test_recover(void)
{
	char *p = path_of("recover.spill");
	struct spill_file_conf c = { p, 3 * SPILL_REGION_BYTES };
	struct spill *s = NULL;
	struct spill_recovery st;
	struct spill_region *ra, *rb, *rc;
	/* Stride 64 KiB (read region by region) and 200 KiB (header by header). */
	const uint64_t bytes_a = 60000, bytes_b = 200000;
	uint8_t *hdr = spill_buf_alloc(SPILL_SLOT_HEADER_BYTES);
	uint8_t *payload = spill_buf_alloc(256 * 1024);
	static struct written wa[40], wb[20];
	static struct found found;

	CHECK(spill_open(&c, 1, &s) == 0);
	if (!s)
		return;
	/* Before recovery nothing is handed out. */
	CHECK(spill_region_find(s, "t1", ident_a, sizeof(ident_a), bytes_a, &ra) == -EINVAL);
	CHECK(spill_recover(s, on_found, &found, &st) == 0);
	CHECK(spill_recover(s, on_found, &found, &st) == -EINVAL); /* once */
	CHECK(found.n == 0 && st.regions == 3 && st.regions_bound == 0 && st.slots_recovered == 0);
	CHECK(st.slots_dropped == 0 && st.next_seq == 1);

	CHECK(spill_region_find(s, "t1", ident_a, sizeof(ident_a), bytes_a, &ra) == 1);
	CHECK(spill_region_find(s, "t2", ident_b, sizeof(ident_b), bytes_b, &rb) == 1);
	CHECK(spill_region_find(s, "t2", ident_a, sizeof(ident_a), bytes_a, &rc) == 1);
	CHECK(ra->index == 0 && rb->index == 1 && rc->index == 2);
	CHECK(ra->header && ((uintptr_t)ra->header % SPILL_ALIGN) == 0);
	write_at(ra->file->fd, ra->header, SPILL_REGION_HEADER_BYTES, ra->offset);
	write_at(rb->file->fd, rb->header, SPILL_REGION_HEADER_BYTES, rb->offset);
	spill_region_header_written(ra);
	spill_region_header_written(rb);
	CHECK(!ra->header && !rb->header);
	for (unsigned i = 0; i < 40; i++)
		write_slot(s, ra, &wa[i], hdr, payload);
	for (unsigned i = 0; i < 20; i++)
		write_slot(s, rb, &wb[i], hdr, payload);
	/* Region c: slots written, then its header is garbage: none recovered. */
	write_at(rc->file->fd, rc->header, SPILL_REGION_HEADER_BYTES, rc->offset);
	spill_region_header_written(rc);
	struct written wc;
	write_slot(s, rc, &wc, hdr, payload);
	fill_random(payload, SPILL_REGION_HEADER_BYTES);
	write_at(rc->file->fd, payload, SPILL_REGION_HEADER_BYTES, rc->offset);

	/* A newer copy of wa[30]'s key in slot 31, an older one in 32. */
	uint64_t seq_30 = wa[30].seq;
	memcpy(wa[31].key, wa[30].key, KVT_KEY_SIZE);
	memcpy(wa[32].key, wa[30].key, KVT_KEY_SIZE);
	wa[32].seq = seq_30 - 1; /* unique enough: only order matters here */
	for (unsigned i = 31; i <= 32; i++) {
		struct spill_slot_header h;
		spill_slot_header_init(&h, ra, wa[i].slot, wa[i].key, wa[i].len, wa[i].seq, 1);
		spill_slot_header_encode(&h, hdr, SPILL_SLOT_HEADER_BYTES);
		write_at(ra->file->fd, hdr, SPILL_SLOT_HEADER_BYTES, spill_slot_offset(ra, wa[i].slot));
	}

	/* Tear and corrupt some. */
	uint64_t off;
	uint8_t *h2 = spill_buf_alloc(SPILL_SLOT_HEADER_BYTES);
	static const unsigned torn_a[] = { 3, 7 };
	for (unsigned i = 0; i < 2; i++) {
		/* The second half of the header's fields never landed. */
		off = spill_slot_offset(ra, wa[torn_a[i]].slot);
		CHECK(pread(ra->file->fd, h2, SPILL_SLOT_HEADER_BYTES, (off_t)off) == SPILL_SLOT_HEADER_BYTES);
		memset(h2 + 60, 0, SPILL_SLOT_HEADER_BYTES - 60);
		write_at(ra->file->fd, h2, SPILL_SLOT_HEADER_BYTES, off);
		wa[torn_a[i]].intact = false;
	}
	fill_random(h2, SPILL_SLOT_HEADER_BYTES);          /* garbage after the magic */
	memcpy(h2, "KVTSPSL1", 8);
	write_at(ra->file->fd, h2, SPILL_SLOT_HEADER_BYTES, spill_slot_offset(ra, wa[11].slot));
	wa[11].intact = false;
	off = spill_slot_offset(ra, wa[15].slot);                        /* one bit */
	CHECK(pread(ra->file->fd, h2, SPILL_SLOT_HEADER_BYTES, (off_t)off) == SPILL_SLOT_HEADER_BYTES);
	h2[100] ^= 4;
	write_at(ra->file->fd, h2, SPILL_SLOT_HEADER_BYTES, off);
	wa[15].intact = false;
	/* No header at all: counted with the stale ones (the bytes an earlier
	 * binding left look like this), gone just the same. */
	fill_random(h2, SPILL_SLOT_HEADER_BYTES);
	write_at(rb->file->fd, h2, SPILL_SLOT_HEADER_BYTES, spill_slot_offset(rb, wb[5].slot));
	wb[5].intact = false;
	/* The newest slot of all is torn: the next sequence number follows
	 * the newest intact one. */
	off = spill_slot_offset(rb, wb[19].slot);
	CHECK(pread(rb->file->fd, h2, SPILL_SLOT_HEADER_BYTES, (off_t)off) == SPILL_SLOT_HEADER_BYTES);
	memset(h2 + 60, 0, 60);
	write_at(rb->file->fd, h2, SPILL_SLOT_HEADER_BYTES, off);
	wb[19].intact = false;
	unsigned dropped = 5;

	/* Stale: rb's slot 2 header copied over ra's slot 13; a header of an
	 * earlier binding of ra in slot 20. */
	CHECK(pread(rb->file->fd, h2, SPILL_SLOT_HEADER_BYTES,
		    (off_t)spill_slot_offset(rb, wb[2].slot)) == SPILL_SLOT_HEADER_BYTES);
	write_at(ra->file->fd, h2, SPILL_SLOT_HEADER_BYTES, spill_slot_offset(ra, wa[13].slot));
	wa[13].intact = false;
	{
		struct spill_slot_header h;
		spill_slot_header_init(&h, ra, wa[20].slot, wa[20].key, wa[20].len, wa[20].seq, 1);
		h.generation ^= 1;
		spill_slot_header_encode(&h, h2, SPILL_SLOT_HEADER_BYTES);
		write_at(ra->file->fd, h2, SPILL_SLOT_HEADER_BYTES, spill_slot_offset(ra, wa[20].slot));
		wa[20].intact = false;
	}
	unsigned stale = 3; /* with wb[5] */

	uint64_t max_seq = 0;
	unsigned intact = 0;
	for (unsigned i = 0; i < 40; i++)
		if (wa[i].intact) {
			intact++;
			if (wa[i].seq > max_seq)
				max_seq = wa[i].seq;
		}
	for (unsigned i = 0; i < 20; i++)
		if (wb[i].intact) {
			intact++;
			if (wb[i].seq > max_seq)
				max_seq = wb[i].seq;
		}
	CHECK(max_seq < wb[19].seq);
	uint32_t a_slot0 = wa[0].slot;
	uint64_t a_len0 = wa[0].len;
	uint32_t a_index = ra->index;
	spill_free(s);

	/* Restart. */
	s = NULL;
	memset(&found, 0, sizeof(found));
	CHECK(spill_open(&c, 1, &s) == 0);
	if (!s)
		goto out;
	CHECK(spill_recover(s, on_found, &found, &st) == 0);
	CHECK(st.files == 1 && st.files_failed == 0 && st.regions == 3);
	CHECK(st.regions_bound == 2 && st.regions_dropped == 1);
	CHECK_N(st.slots_recovered == intact - 1, st.slots_recovered); /* wa[32] declined */
	CHECK_N(st.slots_dropped == dropped, st.slots_dropped);
	CHECK_N(st.slots_stale == stale, st.slots_stale);
	CHECK_N(st.slots_replaced == 1, st.slots_replaced); /* wa[30] by wa[31] */
	CHECK_N(st.slots_rejected == 1, st.slots_rejected); /* wa[32], older */
	CHECK(st.next_seq == max_seq + 1 && spill_next_seq(s) == max_seq + 1);
	CHECK(st.bytes > 0 && st.bytes_read > 0);

	/* fn saw exactly the intact slots, and kept all but the older copy. */
	CHECK(found.calls == intact && found.n == intact - 1);
	ra = &s->files[0].regions[a_index];
	rb = &s->files[0].regions[1];
	CHECK(ra->binding && strcmp(ra->binding->tenant, "t1") == 0 &&
	      ra->binding->identity_len == sizeof(ident_a) &&
	      memcmp(ra->binding->identity, ident_a, sizeof(ident_a)) == 0 &&
	      ra->binding->slot_bytes == bytes_a);
	CHECK(rb->binding && strcmp(rb->binding->tenant, "t2") == 0 && rb->binding->slot_bytes == bytes_b);
	CHECK(!s->files[0].regions[2].binding);
	for (unsigned i = 0; i < 40; i++) {
		bool kept = wa[i].intact && i != 30 && i != 32;
		CHECK_N(slots_is_used(&ra->slots, wa[i].slot) == kept, i);
	}
	for (unsigned i = 0; i < 20; i++)
		CHECK_N(slots_is_used(&rb->slots, wb[i].slot) == wb[i].intact, i);
	for (unsigned i = 0; i < found.n; i++) {
		struct written *w = found.e[i].r == ra ? wa : wb;
		unsigned n = found.e[i].r == ra ? 40 : 20;
		bool match = false;
		for (unsigned j = 0; j < n; j++)
			if (w[j].slot == found.e[i].slot && w[j].intact &&
			    w[j].seq == found.e[i].h.seq && w[j].len == found.e[i].h.payload_len &&
			    memcmp(w[j].key, found.e[i].h.key, KVT_KEY_SIZE) == 0)
				match = true;
		CHECK_N(match, i);
	}

	/* The lowest free slot comes first: the first torn one. */
	uint32_t slot;
	struct spill_region *r;
	CHECK(spill_region_find(s, "t1", ident_a, sizeof(ident_a), bytes_a, &r) == 0 && r == ra);
	CHECK(spill_slot_alloc(ra, &slot) == 0 && slot == wa[3].slot);
	CHECK(spill_slot_free(ra, slot) == 0);
	/* The region with the corrupt header is unbound again. */
	CHECK(spill_region_find(s, "t3", ident_b, sizeof(ident_b), 4096, &r) == 1 && r->index == 2);

	/* A restore: header and payload read back and checked, and a payload
	 * changed on disk caught. */
	uint8_t *slotbuf = spill_buf_alloc(spill_slot_stride(ra));
	struct spill_slot_header h;
	off = spill_slot_offset(ra, a_slot0);
	CHECK(pread(ra->file->fd, slotbuf, spill_slot_stride(ra), (off_t)off) == (ssize_t)spill_slot_stride(ra));
	CHECK(spill_slot_check(slotbuf, SPILL_SLOT_HEADER_BYTES, ra, a_slot0, wa[0].key, a_len0,
			       wa[0].seq, &h) == 0);
	CHECK(spill_payload_check(&h, slotbuf + SPILL_SLOT_HEADER_BYTES) == 0);
	slotbuf[SPILL_SLOT_HEADER_BYTES + 1000] ^= 1;
	CHECK(spill_payload_check(&h, slotbuf + SPILL_SLOT_HEADER_BYTES) == -EBADMSG);
	free(slotbuf);
	spill_free(s);
out:
	free(h2);
	free(hdr);
	free(payload);
	unlink(p);
	free(p);
}

/*
 * Space.
 */

static void test_space(void)
{
	char *p0 = path_of("space0.spill"), *p1 = path_of("space1.spill");
	struct spill_file_conf c[2] = { { p0, 3 * SPILL_REGION_BYTES }, { p1, 3 * SPILL_REGION_BYTES } };
	static const char *tenants[2] = { "tenant-a", "tenant-b" };
	static const uint8_t *idents[2] = { ident_a, ident_b };
	static const size_t ident_lens[2] = { sizeof(ident_a), sizeof(ident_b) };
	const uint64_t bytes = 4 * MiB - 4096; /* stride 4 MiB: 15 slots a region */
	const uint32_t per = spill_slots_per_region(bytes);
	struct spill *s = NULL;
	struct spill_recovery st;
	struct spill_region *r, *first[4];
	uint32_t slot;
	static struct {
		struct spill_region *r;
		uint32_t slot;
		unsigned b;
	} used[6 * 16];
	unsigned n_used = 0;

	CHECK(per == 15);
	CHECK(spill_open(c, 2, &s) == 0);
	if (!s)
		goto out;
	CHECK(spill_recover(s, NULL, NULL, &st) == 0 && st.regions == 6 && st.regions_bound == 0);

	/* Argument checks. */
	char long_name[SPILL_TENANT_MAX + 2];
	memset(long_name, 'n', sizeof(long_name) - 1);
	long_name[sizeof(long_name) - 1] = 0;
	CHECK(spill_region_find(s, "", ident_a, sizeof(ident_a), bytes, &r) == -EINVAL);
	CHECK(spill_region_find(s, long_name, ident_a, sizeof(ident_a), bytes, &r) == -EINVAL);
	CHECK(spill_region_find(s, "t", ident_a, 0, bytes, &r) == -EINVAL);
	CHECK(spill_region_find(s, "t", ident_a, SPILL_IDENTITY_MAX + 1, bytes, &r) == -EINVAL);
	CHECK(spill_region_find(s, "t", ident_a, sizeof(ident_a), 0, &r) == -EINVAL);
	CHECK(spill_region_find(s, "t", ident_a, sizeof(ident_a), SPILL_SLOT_BYTES_MAX + 1, &r) == -E2BIG);

	/* One region per (tenant, namespace), taken from the files in turn. */
	for (unsigned b = 0; b < 4; b++) {
		CHECK_N(spill_region_find(s, tenants[b / 2], idents[b % 2], ident_lens[b % 2],
					  bytes, &first[b]) == 1, b);
		CHECK_N(first[b]->file == &s->files[b % 2], b);
		CHECK_N(first[b]->header != NULL, b);
		spill_region_header_written(first[b]);
		/* Bound, with a free slot: found again without a new binding. */
		CHECK_N(spill_region_find(s, tenants[b / 2], idents[b % 2], ident_lens[b % 2],
					  bytes, &r) == 0 && r == first[b], b);
		for (unsigned o = 0; o < b; o++)
			CHECK_N(first[o] != first[b] && first[o]->binding != first[b]->binding, b);
	}

	/* Fill everything, the four in turn, until each is refused. */
	bool full[4] = { false };
	for (unsigned round = 0; round < 200 && !(full[0] && full[1] && full[2] && full[3]); round++)
		for (unsigned b = 0; b < 4; b++) {
			if (full[b])
				continue;
			int k = spill_region_find(s, tenants[b / 2], idents[b % 2], ident_lens[b % 2],
						  bytes, &r);
			if (k == -ENOSPC) {
				full[b] = true;
				continue;
			}
			CHECK_N(k == 0 || k == 1, b);
			if (k < 0)
				continue;
			if (k == 1)
				spill_region_header_written(r);
			CHECK(strcmp(r->binding->tenant, tenants[b / 2]) == 0 &&
			      memcmp(r->binding->identity, idents[b % 2], ident_lens[b % 2]) == 0);
			CHECK(spill_slot_alloc(r, &slot) == 0);
			used[n_used].r = r;
			used[n_used].slot = slot;
			used[n_used].b = b;
			n_used++;
		}
	CHECK_N(n_used == 6 * per, n_used);
	/* Slots are aligned, inside their region, and distinct. */
	for (unsigned i = 0; i < n_used; i++) {
		uint64_t off = spill_slot_offset(used[i].r, used[i].slot);
		CHECK(off % SPILL_ALIGN == 0);
		CHECK(off >= used[i].r->offset + SPILL_REGION_HEADER_BYTES);
		CHECK(off + spill_slot_stride(used[i].r) <= used[i].r->offset + SPILL_REGION_BYTES);
		for (unsigned j = 0; j < i; j++)
			CHECK(used[j].r != used[i].r || used[j].slot != used[i].slot);
	}
	CHECK(spill_slot_alloc(first[0], &slot) == -ENOSPC);

	/* Free what tenant-a's first namespace holds: its regions are empty
	 * but stay bound, and another binding can have them. */
	unsigned freed = 0;
	struct spill_region *emptied = NULL;
	for (unsigned i = 0; i < n_used; i++)
		if (used[i].b == 0) {
			CHECK(spill_slot_free(used[i].r, used[i].slot) == 0);
			CHECK(spill_slot_free(used[i].r, used[i].slot) == -EINVAL);
			emptied = used[i].r;
			used[i].r = NULL;
			freed++;
		}
	CHECK(freed > 0 && freed % per == 0);
	CHECK(emptied && emptied->binding && emptied->slots.n_free == per);
	/* tenant-b's second namespace rebinds one of them... */
	CHECK(spill_region_find(s, tenants[1], idents[1], ident_lens[1], bytes, &r) == 1);
	CHECK(r && r->binding && strcmp(r->binding->tenant, tenants[1]) == 0);
	CHECK(r->header != NULL); /* rebinding writes a header */
	struct spill_region *rebound = r;
	/* ...and while that header write is in flight, nobody else gets it,
	 * even when it is empty. */
	CHECK(spill_slot_alloc(rebound, &slot) == 0);
	CHECK(spill_slot_free(rebound, slot) == 0);
	CHECK(rebound->slots.n_free == per);
	int k = spill_region_find(s, "tenant-c", ident_a, sizeof(ident_a), bytes, &r);
	CHECK(freed / per > 1 ? k == 1 && r != rebound : k == -ENOSPC);
	if (k == 1) {
		spill_region_header_written(r);
		CHECK(spill_slot_alloc(r, &slot) == 0);
		CHECK(spill_slot_free(r, slot) == 0);
	}
	spill_region_header_written(rebound);
	/* Written: now it can be rebound. */
	k = spill_region_find(s, "tenant-d", ident_b, sizeof(ident_b), bytes, &r);
	CHECK(k == 1);
	if (k == 1)
		spill_region_header_written(r);

	/* Free everything, allocate again: every slot comes back. */
	for (unsigned i = 0; i < n_used; i++)
		if (used[i].r)
			CHECK(spill_slot_free(used[i].r, used[i].slot) == 0);
	n_used = 0;
	for (unsigned b = 0; b < 4; b++)
		full[b] = false;
	for (unsigned round = 0; round < 200 && !(full[0] && full[1] && full[2] && full[3]); round++)
		for (unsigned b = 0; b < 4; b++) {
			if (full[b])
				continue;
			k = spill_region_find(s, tenants[b / 2], idents[b % 2], ident_lens[b % 2],
					      bytes, &r);
			if (k == -ENOSPC) {
				full[b] = true;
				continue;
			}
			if (k == 1)
				spill_region_header_written(r);
			CHECK(k >= 0 && spill_slot_alloc(r, &slot) == 0);
			if (k >= 0)
				n_used++;
		}
	CHECK_N(n_used == 6 * per, n_used);

	/* A failed file gives nothing more; when all have failed, the tier is gone. */
	capture_begin();
	spill_file_fail(&s->files[1], -EIO);
	spill_file_fail(&s->files[1], -EIO); /* said once */
	char *text = capture_end();
	CHECK(strstr(text, "space1.spill' failed") && strstr(text, "host tier keeps serving"));
	CHECK(strstr(text, "' failed") == strrstr_failed(text));
	CHECK(s->files[1].error == -EIO);
	struct spill_region *dead = &s->files[1].regions[0];
	CHECK(spill_slot_alloc(dead, &slot) == -EIO);
	CHECK(dead->slots.n_free < dead->slots.n);
	for (uint32_t i = 0; i < dead->slots.n; i++)
		if (slots_is_used(&dead->slots, i))
			CHECK(spill_slot_free(dead, i) == 0);
	k = spill_region_find(s, tenants[0], idents[0], ident_lens[0], bytes, &r);
	CHECK(k == -ENOSPC); /* file 0 is full, file 1's free slots do not count */
	spill_file_fail(&s->files[0], -EIO);
	CHECK(spill_region_find(s, "new", ident_a, sizeof(ident_a), bytes, &r) == -ENODEV);
	spill_free(s);
out:
	unlink(p0);
	unlink(p1);
	free(p0);
	free(p1);
}

/*
 * Of a binding's regions with free slots, a partly used one is taken before
 * an empty one, which stays free for another binding to take.
 */
static void test_partly_used_first(void)
{
	char *p0 = path_of("order.spill");
	struct spill_file_conf c[1] = { { p0, 2 * SPILL_REGION_BYTES } };
	const uint64_t bytes = 4 * MiB - 4096; /* 15 slots a region */
	const uint32_t per = spill_slots_per_region(bytes);
	struct spill *s = NULL;
	struct spill_region *r1, *r2, *r;
	uint32_t slots[15], slot;

	CHECK(per == 15);
	CHECK(spill_open(c, 1, &s) == 0);
	if (!s)
		goto out;
	CHECK(spill_recover(s, NULL, NULL, NULL) == 0);
	CHECK(spill_region_find(s, "t", ident_a, sizeof(ident_a), bytes, &r1) == 1);
	spill_region_header_written(r1);
	for (uint32_t i = 0; i < per; i++)
		CHECK(spill_slot_alloc(r1, &slots[i]) == 0);
	/* Full: the second region is bound for the same namespace. */
	CHECK(spill_region_find(s, "t", ident_a, sizeof(ident_a), bytes, &r2) == 1);
	CHECK(r2 != r1 && r2->binding == r1->binding);
	spill_region_header_written(r2);
	CHECK(spill_slot_alloc(r2, &slot) == 0);
	/* r1 is emptied after r2 was used: r2, partly used, comes first all
	 * the same, and r1 goes to the other namespace. */
	for (uint32_t i = 0; i < per; i++)
		CHECK(spill_slot_free(r1, slots[i]) == 0);
	CHECK(spill_region_find(s, "t", ident_a, sizeof(ident_a), bytes, &r) == 0 && r == r2);
	CHECK(spill_slot_free(r2, slot) == 0);
	CHECK(spill_slot_alloc(r1, &slot) == 0);
	CHECK(spill_region_find(s, "t", ident_a, sizeof(ident_a), bytes, &r) == 0 && r == r1);
	CHECK(spill_slot_free(r1, slot) == 0);
	/* Both empty now; either may go to another binding, and the one left
	 * still serves this one. */
	CHECK(spill_region_find(s, "u", ident_b, sizeof(ident_b), bytes, &r) == 1);
	CHECK(r == r1 || r == r2);
	spill_region_header_written(r);
	struct spill_region *left = r == r1 ? r2 : r1;
	CHECK(spill_region_find(s, "t", ident_a, sizeof(ident_a), bytes, &r) == 0 && r == left);
	spill_free(s);
out:
	unlink(p0);
	free(p0);
}

/*
 * Regions counted per tenant, and taken back for another.
 */

static void test_reclaim(void)
{
	char *p = path_of("reclaim.spill");
	struct spill_file_conf c = { p, 4 * SPILL_REGION_BYTES };
	static const uint8_t idents[5][8] = { "ns-0", "ns-1", "ns-2", "ns-3", "ns-4" };
	const uint64_t bytes = 4 * MiB - 4096; /* 15 slots a region */
	struct spill *s = NULL;
	struct spill_region *r, *reg[4], *victim;
	uint32_t slot, slots[4][3];

	CHECK(spill_open(&c, 1, &s) == 0);
	if (!s)
		goto out;
	CHECK(spill_recover(s, NULL, NULL, NULL) == 0);
	CHECK(spill_tenant_regions(s, "a") == 0);
	CHECK(spill_region_victim(s, "a", &r) == -ENOENT);

	/* a takes every region with a few blocks, one namespace each. */
	for (unsigned i = 0; i < 4; i++) {
		CHECK_N(spill_region_find(s, "a", idents[i], 4, bytes, &reg[i]) == 1, i);
		/* Its header being written already holds it. */
		CHECK_N(spill_tenant_regions(s, "a") == i + 1, i);
		spill_region_header_written(reg[i]);
		CHECK_N(spill_tenant_regions(s, "a") == i, i); /* empty: no one's */
		for (unsigned j = 0; j < (i == 2 ? 1u : 3u); j++)
			CHECK_N(spill_slot_alloc(reg[i], &slots[i][j]) == 0, i);
		CHECK_N(spill_tenant_regions(s, "a") == i + 1, i);
	}
	CHECK(spill_region_find(s, "b", idents[0], 4, bytes, &r) == -ENOSPC);
	CHECK(spill_region_find(s, "a", idents[4], 4, bytes, &r) == -ENOSPC);

	/* The emptiest without I/O in flight. */
	CHECK(spill_region_victim(s, "a", &victim) == 0 && victim == reg[2]);
	reg[2]->ios = 1;
	CHECK(spill_region_victim(s, "a", &victim) == 0 && victim != reg[2]);
	CHECK(spill_region_reclaim(reg[2], "b") == -EBUSY);
	for (unsigned i = 0; i < 4; i++)
		reg[i]->ios++;
	CHECK(spill_region_victim(s, "a", &victim) == -EBUSY);
	for (unsigned i = 0; i < 4; i++)
		reg[i]->ios--;
	reg[2]->ios = 0;
	CHECK(spill_region_victim(s, "b", &victim) == -ENOENT);

	/* Taken back for b: it counts for b now, a's namespace puts nothing
	 * more in it, and b waits while the copy in it is given up. */
	CHECK(spill_region_reclaim(reg[2], "") == -EINVAL);
	CHECK(spill_region_reclaim(reg[2], "b") == 0);
	CHECK(spill_region_reclaim(reg[2], "c") == -EBUSY);
	CHECK(spill_tenant_regions(s, "a") == 3 && spill_tenant_regions(s, "b") == 1);
	CHECK(spill_region_victim(s, "a", &victim) == 0 && victim != reg[2]);
	CHECK(spill_region_find(s, "a", idents[2], 4, bytes, &r) == -ENOSPC);
	CHECK(spill_region_find(s, "b", idents[0], 4, bytes, &r) == -EINPROGRESS);
	CHECK(spill_region_find(s, "c", idents[0], 4, bytes, &r) == -ENOSPC);
	CHECK(spill_slot_free(reg[2], slots[2][0]) == 0);
	/* Empty: still b's alone. */
	CHECK(spill_tenant_regions(s, "a") == 3 && spill_tenant_regions(s, "b") == 1);
	CHECK(spill_region_find(s, "c", idents[0], 4, bytes, &r) == -ENOSPC);
	CHECK(spill_region_find(s, "a", idents[2], 4, bytes, &r) == -ENOSPC);
	/* b binds it anew, with a header to write. */
	CHECK(spill_region_find(s, "b", idents[0], 4, bytes, &r) == 1 && r == reg[2]);
	CHECK(r->header && !r->kept_for && strcmp(r->binding->tenant, "b") == 0);
	CHECK(spill_tenant_regions(s, "a") == 3 && spill_tenant_regions(s, "b") == 1);
	spill_region_header_written(r);
	CHECK(spill_slot_alloc(r, &slot) == 0);
	CHECK(spill_region_find(s, "b", idents[0], 4, bytes, &r) == 0 && r == reg[2]);
	/* Emptied by b, it is anyone's again. */
	CHECK(spill_slot_free(reg[2], slot) == 0);
	CHECK(spill_tenant_regions(s, "b") == 0);
	CHECK(spill_region_find(s, "a", idents[4], 4, bytes, &r) == 1 && r == reg[2]);
	spill_region_header_written(r);
	CHECK(spill_tenant_regions(s, "a") == 3); /* bound, but empty */

	/* A failed file keeps nothing for anyone. */
	CHECK(spill_region_reclaim(reg[0], "c") == 0 && spill_tenant_regions(s, "c") == 1);
	capture_begin();
	spill_file_fail(&s->files[0], -EIO);
	CHECK(strstr(capture_end(), "reclaim.spill' failed"));
	CHECK(spill_tenant_regions(s, "c") == 0 && spill_tenant_regions(s, "a") == 0);
	CHECK(spill_region_reclaim(reg[1], "c") == -EIO);
	CHECK(spill_region_find(s, "c", idents[0], 4, bytes, &r) == -ENODEV);
	spill_free(s);
out:
	unlink(p);
	free(p);
}

int main(void)
{
	int fds = count_fds(getpid());

	test_sizes();
	test_region_header();
	test_slot_header();

	if (!mkdtemp(dir)) {
		printf("test-spill: skipped: cannot create a directory under /var/tmp: %s\n",
		       strerror(errno));
		return failures ? 1 : KVT_TEST_SKIP;
	}
	if (!o_direct_works()) {
		rmdir(dir);
		return failures ? 1 : KVT_TEST_SKIP;
	}
	test_open();
	test_lock();
	test_open_errors();
	test_erofs();
	test_recover();
	test_space();
	test_partly_used_first();
	test_reclaim();
	CHECK(rmdir(dir) == 0);
	CHECK(count_fds(getpid()) == fds);

	if (failures) {
		fprintf(stderr, "test-spill: %d check(s) failed\n", failures);
		return 1;
	}
	printf("test-spill: ok\n");
	return 0;
}
