/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Two spill files, each with its own worker and ring (docs/nvme.md): four
 * namespaces' blocks are written back, the namespaces' regions bound two
 * in each file; evicted from host memory, every block comes back from its
 * file with its bytes; and after a restart, recovery finds every block in
 * both files, and they load back again, byte for byte.  Then loads in
 * batches as an engine makes them, each batch mixing blocks in host
 * memory, blocks on NVMe only and keys never stored: every block present
 * comes back with its bytes, a missing key is a miss that leaves its
 * buffer alone, and only the NVMe-only blocks are read.  Last, a client
 * that speaks the protocol itself asks with one LOOKUP (KVT_LOOKUP_SETTLED)
 * for a batch whose blocks are on NVMe, one of them corrupt on its file:
 * it is told once (SETTLED, with the LOOKUP's id), never block by block,
 * and at that moment every block is in host memory with its bytes, or
 * (the corrupt one) a miss; the flag from a connection that did not
 * negotiate it closes that connection.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "raw.h"

#define BYTES 4096u
#define NS 4u
#define N 300u /* blocks per namespace */
#define REGION (64ull * 1024 * 1024)
#define REGIONS 4u /* per file */

static const char config[] =
	"[pool]\ncapacity = 64M\nextent_size = 16M\n"
	"[nvme]\nwriteback_high = 0%\nwriteback_low = 0%\n"
	"[spill.a]\npath = @DIR@/spill0\ncapacity = 256M\n"
	"[spill.b]\npath = @DIR@/spill1\ncapacity = 256M\n"
	"[limits]\nkeys_per_request = 512\n";

static const char *const models[NS] = {"files-0", "files-1", "files-2", "files-3"};

static void store_ns(kvt_ns *ns, uint32_t tag)
{
	uint8_t *bufs = malloc((size_t)N * BYTES);
	static uint8_t keys[N][KVT_KEY_BYTES];
	const void *srcs[N];
	int32_t st[N];

	CHECK(bufs, "out of memory");
	for (uint32_t i = 0; i < N; i++) {
		token_key(tag, i, keys[i]);
		block_pattern(bufs + (size_t)i * BYTES, BYTES, tag, keys[i]);
		srcs[i] = bufs + (size_t)i * BYTES;
	}
	CHECK(kvt_store(ns, 0, keys[0], N, srcs, st) == (int)N, "stored");
	free(bufs);
}

/* Every block of the namespace loads, with its bytes. */
static void check_ns(kvt_ns *ns, uint32_t tag)
{
	uint8_t *bufs = malloc((size_t)N * BYTES), *want = malloc(BYTES);
	static uint8_t keys[N][KVT_KEY_BYTES];
	void *dsts[N];
	int32_t st[N];

	CHECK(bufs && want, "out of memory");
	for (uint32_t i = 0; i < N; i++) {
		token_key(tag, i, keys[i]);
		dsts[i] = bufs + (size_t)i * BYTES;
	}
	load_staged(ns, keys[0], N, dsts, st);
	for (uint32_t i = 0; i < N; i++) {
		CHECK(st[i] == 0, "namespace %u block %u loads: %d", tag, i, st[i]);
		block_pattern(want, BYTES, tag, keys[i]);
		CHECK(!memcmp(dsts[i], want, BYTES), "namespace %u block %u: its bytes", tag, i);
	}
	free(bufs);
	free(want);
}

/* Regions of the file whose header is a bound region's. */
static unsigned bound_regions(const struct daemon *d, unsigned file)
{
	char path[300], magic[8];
	unsigned n = 0;

	snprintf(path, sizeof(path), "%s/spill%u", d->dir, file);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	CHECK(fd >= 0, "open %s", path);
	for (unsigned i = 0; i < REGIONS; i++)
		if (pread(fd, magic, sizeof(magic), (off_t)(i * REGION)) == sizeof(magic) &&
		    !memcmp(magic, "KVTSPRG1", 8))
			n++;
	close(fd);
	return n;
}

/*
 * Batches of BATCH entries, in each two of every three blocks on NVMe
 * only (the others brought back to host memory first) and a key never
 * stored after every two blocks: kvt_wait_resident on the batch's blocks
 * (which stages those on NVMe, and sleeps on their notices), then one
 * kvt_load of the whole batch, missing keys and all.
 */
#define BATCH 48u
#define POISON 0xa5

static void load_mixed(kvt_client *c, kvt_ns *ns, uint32_t k, uint32_t tag)
{
	uint64_t tenant = stat_get(c, "tenant", "id");
	static uint8_t keys[N][KVT_KEY_BYTES], batch[BATCH][KVT_KEY_BYTES],
		present[BATCH][KVT_KEY_BYTES];
	uint8_t *bufs = malloc((size_t)BATCH * BYTES), *want = malloc(BYTES);
	uint32_t idx[BATCH];
	void *dsts[BATCH];
	int32_t st[BATCH];
	kvt_ns_info info;

	CHECK(bufs && want, "out of memory");
	CHECK(kvt_ns_get_info(ns, &info) == 0, "info");
	CHECK(kvt_admin_evict(c, (uint32_t)tenant, info.ns_id, 0) == N, "namespace %u evicted", k);
	/* Every third block back in host memory, through the same path. */
	uint32_t n_host = 0;
	for (uint32_t i = 0; i < N; i += 3) {
		token_key(tag, i, keys[n_host]);
		dsts[0] = bufs;
		load_staged(ns, keys[n_host], 1, dsts, st);
		CHECK(st[0] == 0, "namespace %u block %u staged", k, i);
		n_host++;
	}
	uint64_t reads0 = stat_get(c, "daemon", "nvme_reads");
	uint32_t from_nvme = 0, missing = 0;
	for (uint32_t i = 0; i < N;) {
		uint32_t n = 0, n_present = 0;
		while (n < BATCH && i < N) {
			if (n % 3 == 2) {
				token_key(tag + 1000, i, batch[n]); /* never stored */
				idx[n++] = UINT32_MAX;
				continue;
			}
			token_key(tag, i, batch[n]);
			memcpy(present[n_present++], batch[n], KVT_KEY_BYTES);
			from_nvme += i % 3 != 0;
			idx[n++] = i++;
		}
		memset(bufs, POISON, (size_t)n * BYTES);
		for (uint32_t j = 0; j < n; j++)
			dsts[j] = bufs + (size_t)j * BYTES;
		int w = kvt_wait_resident(ns, present[0], n_present, 600000);
		CHECK(w == (int)n_present, "namespace %u: %d of %u resident", k, w, n_present);
		int r = kvt_load(ns, 0, batch[0], n, dsts, st);
		CHECK(r == (int)n_present, "namespace %u: loaded %d of %u", k, r, n_present);
		for (uint32_t j = 0; j < n; j++) {
			if (idx[j] == UINT32_MAX) {
				CHECK(st[j] == -ENOENT, "a missing key: %d", st[j]);
				for (uint32_t b = 0; b < BYTES; b++)
					CHECK(((uint8_t *)dsts[j])[b] == POISON, "a miss's buffer untouched");
				missing++;
				continue;
			}
			CHECK(st[j] == 0, "namespace %u block %u loads: %d", k, idx[j], st[j]);
			block_pattern(want, BYTES, tag, batch[j]);
			CHECK(!memcmp(dsts[j], want, BYTES), "namespace %u block %u: its bytes", k,
			      idx[j]);
		}
	}
	CHECK(missing > 0 && from_nvme == N - n_host, "the batches mixed all three");
	CHECK(stat_get(c, "daemon", "nvme_reads") - reads0 == from_nvme,
	      "read from NVMe: the NVMe-only blocks, once each");
	free(bufs);
	free(want);
}

/* Flip a byte of every copy of block (its whole payload, on a 512-byte
 * boundary) in the spill files: it fails verification when staged.
 * \return the copies found */
static unsigned corrupt_block(const struct daemon *d, const uint8_t *want)
{
	static uint8_t buf[1 << 20];
	unsigned found = 0;

	for (unsigned f = 0; f < 2; f++) {
		char path[256];
		snprintf(path, sizeof(path), "%s/spill%u", d->dir, f);
		int fd = open(path, O_RDWR | O_CLOEXEC);
		CHECK(fd >= 0, "open %s", path);
		for (off_t off = 0;; off += sizeof(buf) - BYTES) {
			ssize_t n = pread(fd, buf, sizeof(buf), off);
			CHECK(n >= 0, "read %s", path);
			for (ssize_t i = 0; i + (ssize_t)BYTES <= n; i += 512) {
				if (memcmp(buf + i, want, BYTES))
					continue;
				uint8_t x = want[100] ^ 0xff;
				CHECK(pwrite(fd, &x, 1, off + i + 100) == 1, "corrupt %s", path);
				found++;
				i += BYTES - 512;
			}
			if (n < (ssize_t)sizeof(buf))
				break;
		}
		close(fd);
	}
	return found;
}

/* What the raw client was sent until the reply to its request rid:
 * SETTLED notices into *settled (the last), counted; BLOCK_READY counted. */
struct heard {
	unsigned settled, ready;
	struct kvt_settled last;
};

static void hear(struct raw *r, struct heard *h)
{
	struct kvt_cursor c = {r->payload, r->h.length};

	if (r->h.opcode == KVT_OP_SETTLED) {
		CHECK(kvt_dec_settled(&c, &h->last) == 0, "SETTLED decodes");
		h->settled++;
	} else if (r->h.opcode == KVT_OP_BLOCK_READY || r->h.opcode == KVT_OP_RUN_READY) {
		h->ready++;
	}
}

/* Send b; the notices before its reply into h. */
static void raw_call_hearing(struct raw *r, struct kvt_buf *b, struct heard *h)
{
	CHECK(kvt_msg_finish(b, 0) == 0, "encode");
	CHECK(write(r->fd, b->data, b->len) == (ssize_t)b->len, "write");
	for (;;) {
		CHECK(raw_recv(r) == 1, "the daemon closed the connection");
		if (!(r->h.flags & KVT_FLAG_NOTIFY))
			break;
		hear(r, h);
	}
	CHECK(r->h.request_id == r->rid && !(r->h.flags & KVT_FLAG_ERROR), "answered");
}

static void raw_lookup(struct raw *r, uint32_t ns_id, uint32_t flags, const uint8_t *keys,
		       uint32_t n, uint8_t *ret_states, struct heard *h)
{
	struct kvt_buf b;
	struct kvt_keys_req req = {ns_id, flags, n, keys};
	struct kvt_lookup_rep rep;

	kvt_buf_init(&b);
	kvt_enc_keys_req(&b, 1, KVT_OP_LOOKUP, ++r->rid, &req);
	raw_call_hearing(r, &b, h);
	kvt_buf_free(&b);
	struct kvt_cursor c = {r->payload, r->h.length};
	CHECK(r->h.opcode == KVT_OP_LOOKUP && kvt_dec_lookup_rep(&c, &rep) == 0 && rep.n == n,
	      "LOOKUP reply");
	memcpy(ret_states, rep.states, n);
}

#define SETTLE_BATCH 128u
#define SETTLE_MISSING 4u /* of them, keys never stored */
#define SETTLE_BAD 77u    /* the block corrupt on its file */

static void settled_notice(const struct daemon *d, kvt_client *c, kvt_ns *ns, uint32_t k,
			   uint32_t tag)
{
	static struct raw r, old;
	static uint8_t keys[SETTLE_BATCH][KVT_KEY_BYTES];
	uint8_t st[SETTLE_BATCH];
	uint8_t *bufs = malloc((size_t)SETTLE_BATCH * BYTES), *want = malloc(BYTES);
	void *dsts[SETTLE_BATCH];
	int32_t lst[SETTLE_BATCH];
	const uint32_t present = SETTLE_BATCH - SETTLE_MISSING;
	uint64_t tenant = stat_get(c, "tenant", "id");
	kvt_ns_info info;
	struct heard h = {0};

	CHECK(bufs && want, "out of memory");
	CHECK(kvt_ns_get_info(ns, &info) == 0, "info");
	for (uint32_t i = 0; i < SETTLE_BATCH; i++)
		token_key(i < present ? tag : tag + 1000, i, keys[i]);
	block_pattern(want, BYTES, tag, keys[SETTLE_BAD]);
	CHECK(kvt_admin_evict(c, (uint32_t)tenant, info.ns_id, 0) == N, "namespace %u evicted", k);
	CHECK(corrupt_block(d, want) >= 1, "block %u found on its file", SETTLE_BAD);

	/* The namespace as small_ns() says it. */
	struct kvt_identity id = {.key_scheme = KVT_KEY_SCHEME, .layer_end = 1, .tp_size = 1,
				  .cp_size = 1, .block_tokens = 16, .n_groups = 1};
	snprintf(id.model, sizeof(id.model), "%s", models[k]);
	memcpy(id.weights, models[k], strlen(models[k]));
	id.weights_len = (uint32_t)strlen(models[k]);
	id.groups[0] = (struct kvt_id_group){1, KVT_ATTN_MHA, 0, 2, 1, 128, 1, 0};
	raw_connect(&r, d);
	raw_hello(&r, "settle");
	int64_t ns_id = raw_ns_open(&r, &id);
	CHECK(ns_id == info.ns_id, "the same namespace: %lld", (long long)ns_id);

	uint64_t reads0 = stat_get(c, "daemon", "nvme_reads");
	uint64_t bad0 = stat_get(c, "daemon", "nvme_checksum_errors");
	raw_lookup(&r, (uint32_t)ns_id, KVT_LOOKUP_SETTLED, keys[0], SETTLE_BATCH, st, &h);
	uint64_t rid = r.rid;
	for (uint32_t i = 0; i < SETTLE_BATCH; i++)
		CHECK(st[i] == (i < present ? KVT_STATE_DISK : KVT_STATE_MISS), "key %u: state %u",
		      i, st[i]);
	while (!h.settled) {
		CHECK(raw_recv(&r) == 1, "the daemon closed the connection");
		CHECK(r.h.flags & KVT_FLAG_NOTIFY, "only notices while waiting");
		hear(&r, &h);
	}
	/* Told: nothing is on its way any more.  Told early, the blocks
	 * still being read would say DISK here. */
	raw_lookup(&r, (uint32_t)ns_id, 0, keys[0], SETTLE_BATCH, st, &h);
	for (uint32_t i = 0; i < SETTLE_BATCH; i++)
		CHECK(st[i] == (i < present && i != SETTLE_BAD ? KVT_STATE_HOST : KVT_STATE_MISS),
		      "key %u when SETTLED came: state %u", i, st[i]);
	CHECK(h.settled == 1 && h.ready == 0, "one SETTLED (%u), no BLOCK_READY (%u)", h.settled,
	      h.ready);
	CHECK(h.last.request_id == rid && h.last.ns_id == (uint32_t)ns_id &&
		      h.last.n_keys == present && h.last.n_host == present - 1,
	      "SETTLED: request %llu (want %llu), %u keys, %u in host memory",
	      (unsigned long long)h.last.request_id, (unsigned long long)rid, h.last.n_keys,
	      h.last.n_host);
	CHECK(stat_get(c, "daemon", "nvme_reads") - reads0 == present - 1 &&
		      stat_get(c, "daemon", "nvme_checksum_errors") - bad0 == 1,
	      "read: every block but the corrupt one, which failed");

	/* Their bytes, loaded without waiting; the corrupt one is a miss. */
	memset(bufs, POISON, (size_t)SETTLE_BATCH * BYTES);
	for (uint32_t i = 0; i < SETTLE_BATCH; i++)
		dsts[i] = bufs + (size_t)i * BYTES;
	CHECK(kvt_load(ns, 0, keys[0], SETTLE_BATCH, dsts, lst) == (int)present - 1, "loaded");
	for (uint32_t i = 0; i < SETTLE_BATCH; i++) {
		if (i >= present || i == SETTLE_BAD) {
			CHECK(lst[i] == -ENOENT, "key %u: a miss (%d)", i, lst[i]);
			for (uint32_t b = 0; b < BYTES; b++)
				CHECK(((uint8_t *)dsts[i])[b] == POISON, "a miss's buffer untouched");
			continue;
		}
		CHECK(lst[i] == 0, "block %u loads: %d", i, lst[i]);
		block_pattern(want, BYTES, tag, keys[i]);
		CHECK(!memcmp(dsts[i], want, BYTES), "block %u: its bytes", i);
	}
	/* Nothing more comes: the first PING's reply is the next message. */
	struct kvt_buf b;
	kvt_buf_init(&b);
	kvt_msg_begin(&b, 1, KVT_OP_PING, 0, ++r.rid);
	raw_call_hearing(&r, &b, &h);
	CHECK(h.settled == 1 && h.ready == 0, "no other notice");
	raw_disconnect(&r);

	/* Not negotiated: the flag is a malformed LOOKUP, that connection
	 * closes, and the daemon serves on. */
	struct kvt_hello_req hr = {1, 1, KVT_FEATURES_ALL & ~KVT_FEATURE_SETTLED, "old", ""};
	raw_connect(&old, d);
	kvt_buf_reset(&b);
	kvt_enc_hello_req(&b, ++old.rid, &hr);
	CHECK(raw_call(&old, &b) == 0, "hello");
	CHECK(raw_ns_open(&old, &id) == ns_id, "namespace");
	struct kvt_keys_req req = {(uint32_t)ns_id, KVT_LOOKUP_SETTLED, 1, keys[0]};
	kvt_buf_reset(&b);
	kvt_enc_keys_req(&b, 1, KVT_OP_LOOKUP, ++old.rid, &req);
	CHECK(kvt_msg_finish(&b, 0) == 0, "encode");
	CHECK(write(old.fd, b.data, b.len) == (ssize_t)b.len, "write");
	int got;
	while ((got = raw_recv(&old)) == 1)
		CHECK(old.h.flags & KVT_FLAG_NOTIFY, "no reply to a malformed LOOKUP");
	raw_disconnect(&old);
	kvt_buf_free(&b);
	CHECK(kvt_lookup(ns, keys[0], 1, 0, st) == 1 && st[0] == KVT_HOST, "the daemon serves on");
	free(bufs);
	free(want);
}

/* Evict each namespace from host memory and load it back from NVMe. */
static void evict_and_load(kvt_client *c, kvt_ns **ns)
{
	uint64_t tenant = stat_get(c, "tenant", "id");

	for (uint32_t k = 0; k < NS; k++) {
		kvt_ns_info info;
		CHECK(kvt_ns_get_info(ns[k], &info) == 0, "info");
		int64_t ev = kvt_admin_evict(c, (uint32_t)tenant, info.ns_id, 0);
		CHECK(ev == N, "namespace %u: %lld evicted", k, (long long)ev);
	}
	for (uint32_t k = 0; k < NS; k++)
		check_ns(ns[k], k + 1);
}

int main(void)
{
	struct daemon d;
	kvt_ns *ns[NS];

	daemon_start(&d, config);
	kvt_client *c = client_connect(&d, "files");
	for (uint32_t k = 0; k < NS; k++) {
		ns[k] = small_ns(c, models[k]);
		store_ns(ns[k], k + 1);
	}
	CHECK(stat_get(c, "daemon", "nvme_files") == 2, "two spill files");
	WAIT_FOR(stat_get(c, "daemon", "nvme_writes") >= NS * N &&
			 stat_get(c, "daemon", "nvme_in_flight") == 0,
		 "every block written back");
	/* A region holds one namespace's blocks; new regions are bound from
	 * the files in turn. */
	CHECK(bound_regions(&d, 0) == 2 && bound_regions(&d, 1) == 2,
	      "two regions bound in each file (%u, %u)", bound_regions(&d, 0),
	      bound_regions(&d, 1));
	evict_and_load(c, ns);
	CHECK(stat_get(c, "daemon", "nvme_reads") == NS * N, "every block read back from NVMe");
	CHECK(stat_get(c, "daemon", "nvme_checksum_errors") == 0 &&
		      stat_get(c, "daemon", "nvme_io_errors") == 0,
	      "no verification or I/O error");
	for (uint32_t k = 0; k < NS; k++)
		kvt_ns_close(ns[k]);
	kvt_client_free(c);
	daemon_stop(&d);

	/* Recovered from both files: every block is on NVMe only. */
	daemon_restart(&d, config);
	c = client_connect(&d, "files");
	CHECK(stat_get(c, "daemon", "nvme_recovered") == NS * N, "recovered %llu of %u",
	      (unsigned long long)stat_get(c, "daemon", "nvme_recovered"), NS * N);
	for (uint32_t k = 0; k < NS; k++) {
		ns[k] = small_ns(c, models[k]);
		check_ns(ns[k], k + 1);
	}
	CHECK(stat_get(c, "daemon", "nvme_reads") == NS * N, "staged from both files");
	CHECK(stat_get(c, "daemon", "nvme_checksum_errors") == 0, "every block verified");
	/* Again, evicted: the copies stayed on NVMe. */
	evict_and_load(c, ns);
	CHECK(stat_get(c, "daemon", "nvme_reads") == 2 * NS * N, "staged again");
	for (uint32_t k = 0; k < NS; k++)
		load_mixed(c, ns[k], k, k + 1);
	CHECK(stat_get(c, "daemon", "nvme_checksum_errors") == 0 &&
		      stat_get(c, "daemon", "nvme_io_errors") == 0,
	      "no verification or I/O error");
	settled_notice(&d, c, ns[0], 0, 1);
	for (uint32_t k = 0; k < NS; k++)
		kvt_ns_close(ns[k]);
	kvt_client_free(c);
	daemon_stop(&d);
	daemon_cleanup(&d);
	return 0;
}
