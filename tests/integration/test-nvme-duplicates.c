/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Two copies of one key on disk with different bytes, as a kvtierd before
 * docs/nvme.md §9's rule could leave them (a store during background
 * recovery, a crash before an erasure landed): the older in the first
 * region of its namespace, the newer in a region recovery reads 4 regions
 * later.  The spill file is made so by the daemon itself and one write of
 * the test's: the older copy's slot, saved before the key was deleted and
 * stored anew, put back where it was.
 *
 *   - background recovery: a client loads the key as soon as it can, so
 *     that the older copy is found, staged and leased before the scan
 *     reaches the newer; once recovery has ended every load returns the
 *     newer bytes, and the older copy was counted as replaced;
 *   - a restart after that finds the newer copy only: the older was
 *     erased, not only forgotten;
 *   - foreground recovery, from the same file made again: the first load
 *     returns the newer bytes.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

#define BYTES 4096u
#define STRIDE (4096u + BYTES)
#define SLOTS ((64u * 1024 * 1024 - 8192) / STRIDE)
#define BATCH 512u
#define OLDER 1u
#define NEWER 2u

static uint8_t key[KVT_KEY_BYTES];

static void store_tagged(kvt_ns *ns, const uint8_t *k, uint32_t tag)
{
	uint8_t *buf = malloc(BYTES);
	int32_t st = -1;
	CHECK(buf, "out of memory");
	block_pattern(buf, BYTES, tag, k);
	const void *src = buf;
	CHECK(kvt_store(ns, 0, k, 1, &src, &st) >= 0 && st == 0, "store: %d", st);
	free(buf);
}

/* n blocks of filler keys from the first, in batches. */
static void fill(kvt_ns *ns, uint32_t tag, uint32_t first, uint32_t n)
{
	static uint8_t keys[BATCH][KVT_KEY_BYTES];
	uint8_t *bufs = malloc((size_t)BATCH * BYTES);
	const void *srcs[BATCH];
	int32_t st[BATCH];

	CHECK(bufs, "out of memory");
	for (uint32_t i = 0; i < n; i += BATCH) {
		uint32_t m = n - i < BATCH ? n - i : BATCH;
		for (uint32_t j = 0; j < m; j++) {
			token_key(tag, first + i + j, keys[j]);
			block_pattern(bufs + (size_t)j * BYTES, BYTES, tag, keys[j]);
			srcs[j] = bufs + (size_t)j * BYTES;
		}
		CHECK(kvt_store(ns, 0, keys[0], m, srcs, st) == (int)m, "filler stored");
	}
	free(bufs);
}

/* The key's bytes, or 0 for a miss: OLDER, NEWER, or a failure. */
static uint32_t load_key(kvt_ns *ns)
{
	uint8_t *buf = malloc(BYTES), *want = malloc(BYTES);
	void *dst = buf;
	int32_t st = -1;
	uint32_t got = 0;

	CHECK(buf && want, "out of memory");
	load_staged(ns, key, 1, &dst, &st);
	if (st == 0) {
		for (uint32_t tag = OLDER; tag <= NEWER && !got; tag++) {
			block_pattern(want, BYTES, tag, key);
			if (!memcmp(buf, want, BYTES))
				got = tag;
		}
		CHECK(got, "the key's bytes are neither copy's");
	}
	free(buf);
	free(want);
	return got;
}

static void wait_written(const struct daemon *d, kvt_client *c, uint64_t writes)
{
	WAIT_FOR(stat_get(c, "daemon", "nvme_writes") >= writes &&
			 stat_get(c, "daemon", "nvme_in_flight") == 0,
		 "write-back");
}

static void config_for(char *buf, size_t size, const char *recovery)
{
	snprintf(buf, size,
		 "[pool]\ncapacity = 64M\nextent_size = 16M\n"
		 "[nvme]\nwriteback_high = 0%%\nwriteback_low = 0%%\nrecovery = %s\n"
		 "[spill.a]\npath = @DIR@/spill0\ncapacity = 576M\n"
		 "[limits]\nkeys_per_request = %u\n", recovery, BATCH);
}

/* The spill file with the older copy in region 0, slot 0, and the newer
 * in region 5; the daemon stopped. */
static void make_file(struct daemon *d)
{
	char config[512], path[300];
	uint8_t saved[STRIDE], hdr[4096];

	config_for(config, sizeof(config), "foreground");
	daemon_start(d, config);
	kvt_client *c = client_connect(d, "maker");
	kvt_ns *ns = small_ns(c, "dup");
	store_tagged(ns, key, OLDER);
	wait_written(d, c, 1);
	kvt_ns_close(ns);
	kvt_client_free(c);
	daemon_stop(d);

	snprintf(path, sizeof(path), "%s/spill0", d->dir);
	int fd = open(path, O_RDWR | O_CLOEXEC);
	CHECK(fd >= 0, "open the spill file");
	CHECK(pread(fd, saved, STRIDE, 8192) == STRIDE, "read region 0, slot 0");
	CHECK(!memcmp(saved, "KVTSPSL1", 8) && !memcmp(saved + 56, key, KVT_KEY_BYTES),
	      "region 0, slot 0 holds the key's first copy");

	/* Deleted (its slot erased), region 0 filled with other blocks, four
	 * regions bound by other namespaces, and then the key anew: in
	 * region 5. */
	daemon_restart(d, config);
	c = client_connect(d, "maker");
	ns = small_ns(c, "dup");
	CHECK(kvt_delete(ns, key, 1) == 1, "delete");
	fill(ns, 0xf111, 0, SLOTS);
	wait_written(d, c, SLOTS);
	for (uint32_t i = 0; i < 4; i++) {
		char model[32];
		uint8_t k[KVT_KEY_BYTES];
		snprintf(model, sizeof(model), "ballast-%u", i);
		kvt_ns *b = small_ns(c, model);
		token_key(0xba11, i, k);
		store_tagged(b, k, 7);
		wait_written(d, c, SLOTS + i + 1);
		kvt_ns_close(b);
	}
	store_tagged(ns, key, NEWER);
	wait_written(d, c, SLOTS + 4 + 1);
	kvt_ns_close(ns);
	kvt_client_free(c);
	daemon_stop(d);

	/* The older copy back where it was, over a filler's. */
	CHECK(pread(fd, hdr, sizeof(hdr), 5ull * 64 * 1024 * 1024) == sizeof(hdr) &&
		      !memcmp(hdr, "KVTSPRG1", 8),
	      "region 5 is bound");
	CHECK(pwrite(fd, saved, STRIDE, 8192) == STRIDE && fsync(fd) == 0, "put the copy back");
	close(fd);
}

/* The daemon restarted (it is stopped), the key loaded once, the daemon
 * stopped again.  \return what load_key() saw */
static uint32_t first_load_after_restart(struct daemon *d, const char *config)
{
	daemon_restart(d, config);
	kvt_client *c = client_connect(d, "reader");
	kvt_ns *ns = small_ns(c, "dup");
	uint32_t got = load_key(ns);
	kvt_ns_close(ns);
	kvt_client_free(c);
	daemon_stop(d);
	return got;
}

int main(void)
{
	struct daemon d;
	char config[512];

	token_key(0xd0b1e, 1, key);

	/* Background: the older copy is found first and may be served until
	 * the newer is; then only the newer. */
	make_file(&d);
	config_for(config, sizeof(config), "background");
	daemon_restart(&d, config);
	kvt_client *c = client_connect(&d, "reader");
	kvt_ns *ns = small_ns(c, "dup");
	/* Looked up without a pause until recovery finds a copy (region 0
	 * is read before the ballast, region 5 after), then loaded. */
	uint32_t first = 0;
	for (uint32_t i = 1; !first; i++) {
		uint8_t state = KVT_MISS;
		CHECK(kvt_lookup(ns, key, 1, 0, &state) >= 0, "lookup");
		if (state != KVT_MISS)
			first = load_key(ns);
		else if (i % 256 == 0 && !stat_get(c, "recovery", "running"))
			break;
	}
	WAIT_FOR(stat_get(c, "recovery", "running") == 0, "recovery to end");
	uint32_t after = load_key(ns);
	printf("background: first load during recovery %s, after it %s\n",
	       first == OLDER ? "the older copy" : first == NEWER ? "the newer copy" : "none",
	       after == NEWER ? "the newer copy" : "another");
	CHECK(after == NEWER, "after recovery the key loads %s",
	      after == OLDER ? "the older copy" : "nothing");
	CHECK(stat_get(c, "daemon", "nvme_recovered") == 1 + SLOTS - 1 + 4,
	      "the older copy counted as replaced (%llu)",
	      (unsigned long long)stat_get(c, "daemon", "nvme_recovered"));
	WAIT_FOR(stat_get(c, "erasures", "erasing") == 0, "the older copy's erasure");
	kvt_ns_close(ns);
	kvt_client_free(c);
	daemon_stop(&d);

	/* Erased: the next recovery finds the newer only. */
	config_for(config, sizeof(config), "foreground");
	CHECK(first_load_after_restart(&d, config) == NEWER, "after a restart, the newer copy");

	/* Foreground, from the same situation made again. */
	char path[300];
	snprintf(path, sizeof(path), "%s/spill0", d.dir);
	unlink(path);
	daemon_cleanup(&d);
	make_file(&d);
	CHECK(first_load_after_restart(&d, config) == NEWER,
	      "foreground recovery serves the newer copy");
	snprintf(path, sizeof(path), "%s/spill0", d.dir);
	unlink(path);
	daemon_cleanup(&d);
	return 0;
}
