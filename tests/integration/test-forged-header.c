/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Forged slot headers on the NVMe tier.  Tenant a controls the payload bytes
 * of its blocks, and those bytes reach the spill file.  It fills them with
 * slot headers, encoded by the daemon's own encoder with their checksums
 * right, at every 4 KiB offset, claiming tenant b: b's tenant hash, the
 * digest of b's namespace identity, keys b has stored (with a higher
 * sequence number, to replace them) and keys b will look up but never
 * stored.  The test plays an attacker who also knows the spill file's
 * layout: region and slot numbers, and the generation of every binding it
 * could have read.
 *
 * 1. a's forged blocks sit in a's region beside b's region; after a
 *    restart b sees only its own blocks (misses for the others, its own
 *    bytes for its keys, statistics of its own blocks only) and a's blocks
 *    load back byte-exact.
 * 2. a's region is emptied and rebound to b with another slot size, so the
 *    forged headers lie exactly where b's slot headers are read; they name
 *    the region's previous generation, the best a could know.  After a
 *    restart b still sees only its own blocks.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "spill.h"

#define NB 6      /* blocks b stores */
#define NM 6      /* keys b looks up but never stores */
#define NA 16     /* a's forged blocks */
#define PAGE 4096

static struct daemon d;
static char config[1024], spill_path[256], a_sock[256], b_sock[256];
static uint8_t b_keys[(NB + NM) * 32], a_keys[(NA + 1) * 32];

/* a: 16 tokens of 2 KiB per block (32 KiB, 9 pages a slot); b: 8 tokens
 * (16 KiB, 5 pages a slot), so b's slot headers fall inside a's payloads
 * once a region changes hands. */
static struct kvt_identity identity(uint32_t block_tokens)
{
	struct kvt_identity id = {.key_scheme = 1, .model = "forge", .weights = "w1",
				  .weights_len = 2, .layer_end = 4, .tp_size = 1, .cp_size = 1,
				  .block_tokens = block_tokens, .n_groups = 1};
	id.groups[0] = (struct kvt_id_group){4, KVT_ATTN_MHA, 0, 2, 2, 128, 1, 0};
	return id;
}

static kvt_ns *open_ns(kvt_client *c, uint32_t block_tokens)
{
	kvt_layer_group g = {.n_layers = 4, .attn = KVT_ATTN_MHA, .planes = 2, .kv_heads = 2,
			     .head_bytes = 128, .dtype = 1};
	kvt_ns_desc desc = {.model = "forge", .weights = (const uint8_t *)"w1", .weights_len = 2,
			    .layer_end = 4, .tp_size = 1, .cp_size = 1,
			    .block_tokens = block_tokens, .n_groups = 1, .groups = &g};
	kvt_ns *ns = NULL;
	int r = kvt_ns_open(c, &desc, &ns);
	CHECK(r == 0, "ns open: %s %s", strerror(-r), kvt_client_error(c));
	return ns;
}

static kvt_client *connect_via(const char *path, const char *name)
{
	kvt_client *c = NULL;
	int r = kvt_client_connect(path, name, &c);
	CHECK(r == 0, "connect %s: %s", path, kvt_connect_error());
	return c;
}

static uint64_t admin_stat(const char *field)
{
	kvt_client *c = client_connect(&d, "admin");
	uint64_t v = stat_get(c, "daemon", field);
	kvt_client_free(c);
	return v;
}

/* With O_DIRECT, as the daemon writes: a cached page read earlier (the
 * readahead of a region header) is never what is compared. */
static void read_spill(uint64_t offset, void *buf, size_t len)
{
	void *aligned = NULL;
	int fd = open(spill_path, O_RDONLY | O_DIRECT | O_CLOEXEC);
	CHECK(fd >= 0, "open %s", spill_path);
	CHECK(posix_memalign(&aligned, PAGE, len) == 0, "buffer");
	CHECK(pread(fd, aligned, len, (off_t)offset) == (ssize_t)len, "read the spill file");
	memcpy(buf, aligned, len);
	free(aligned);
	close(fd);
}

static bool region_bound(uint32_t region, uint8_t *buf, struct spill_region_header *h)
{
	read_spill((uint64_t)region * SPILL_REGION_BYTES, buf, SPILL_REGION_HEADER_BYTES);
	return spill_region_header_decode(buf, SPILL_REGION_HEADER_BYTES, h) == 0;
}

/* A region's header is written beside its first slots, not before them:
 * wait for it to name the tenant. */
static struct spill_region_header region_header(uint32_t region, const char *tenant,
						uint8_t *buf)
{
	struct spill_region_header h;
	WAIT_FOR(region_bound(region, buf, &h) && !strcmp(h.tenant, tenant),
		 "the region header on disk");
	return h;
}

/* Where b's slots would be in a region, counted in pages from its start. */
static uint32_t b_stride_pages(void)
{
	return (uint32_t)(spill_stride_for(16384) / PAGE);
}

/* Block i of a (in a's slot `slot` of region `region`): eight pages, each
 * a slot header for b that claims the b slot whose header would lie at
 * that page, in b's region `claim_region` of generation `generation`.
 * Built backwards so that a header whose claimed payload lies within the
 * block carries that payload's true checksum. */
static void forge_block(uint8_t *blk, size_t bytes, uint32_t slot, uint32_t claim_region,
			uint64_t generation)
{
	struct kvt_identity bid = identity(8);
	struct kvt_buf ident;
	uint8_t digest[16];
	uint32_t pages = (uint32_t)(bytes / PAGE), stride = b_stride_pages();
	uint32_t a_stride = (uint32_t)(spill_stride_for(bytes) / PAGE);

	kvt_buf_init(&ident);
	CHECK(kvt_identity_encode(&bid, &ident) == 0, "b's identity");
	spill_ns_digest(ident.data, ident.len, digest);
	kvt_buf_free(&ident);
	for (uint32_t j = pages; j-- > 0;) {
		/* Pages from the region's start: 2 for its header, then a's
		 * slots of one header page and the payload. */
		uint32_t page = SPILL_REGION_HEADER_BYTES / PAGE + slot * a_stride + 1 + j;
		uint32_t k = (slot * pages + j) % (NB + NM);
		struct spill_slot_header h = {
			.region = claim_region,
			.slot = (page - SPILL_REGION_HEADER_BYTES / PAGE) / stride,
			.generation = generation,
			.tenant_hash = spill_tenant_hash("b", 1),
			.payload_len = 16384,
			.seq = (UINT64_C(1) << 60) + page,
		};
		memcpy(h.ns_digest, digest, 16);
		memcpy(h.key, b_keys + k * 32, 32);
		h.payload_sum = j + 1 + 4 <= pages ? spill_payload_sum(blk + (j + 1) * PAGE, 16384)
						   : spill_payload_sum(blk, 16384);
		CHECK(spill_slot_header_encode(&h, blk + j * PAGE, PAGE) == 0, "encode");
		struct spill_slot_header back;
		CHECK(spill_slot_header_decode(blk + j * PAGE, PAGE, &back) == 0,
		      "the forged header decodes");
	}
}

static void b_pattern(int i, uint8_t *buf)
{
	block_pattern(buf, 16384, 'b', b_keys + i * 32);
}

/* b stores its NB blocks. */
static void b_store(void)
{
	kvt_client *c = connect_via(b_sock, "b");
	kvt_ns *ns = open_ns(c, 8);
	static uint8_t blk[NB][16384];
	const void *srcs[NB];
	for (int i = 0; i < NB; i++) {
		b_pattern(i, blk[i]);
		srcs[i] = blk[i];
	}
	CHECK(kvt_store(ns, 0, b_keys, NB, srcs, NULL) == NB, "b stores");
	kvt_ns_close(ns);
	kvt_client_free(c);
}

/* After a restart, before b touches anything: b's statistics show its own
 * blocks, all on NVMe, and nothing else; then its keys load with its own
 * bytes and the keys it never stored are misses. */
static void b_sees_only_its_own(const char *when)
{
	kvt_client *c = connect_via(b_sock, "b");
	kvt_ns *ns = open_ns(c, 8);
	CHECK(stat_count(c, "tenant") == 1 && stat_count(c, "namespace") == 1,
	      "%s: b sees one tenant and one namespace", when);
	CHECK(stat_get(c, "namespace", "spilled") == NB, "%s: b has %d blocks on NVMe, not %llu",
	      when, NB, (unsigned long long)stat_get(c, "namespace", "spilled"));
	CHECK(stat_get(c, "namespace", "blocks") == 0, "%s: and none in host memory", when);

	uint8_t st[NB + NM];
	CHECK(kvt_lookup(ns, b_keys + NB * 32, NM, 0, st) == 0, "%s: never-stored keys", when);
	for (int i = 0; i < NM; i++)
		CHECK(st[i] == KVT_MISS, "%s: b's never-stored key %d is a miss (state %u)", when, i,
		      st[i]);
	CHECK(kvt_wait_resident(ns, b_keys, NB, 30000) == NB, "%s: b's blocks staged", when);
	static uint8_t got[NB][16384], want[16384];
	void *dsts[NB];
	int32_t rs[NB];
	for (int i = 0; i < NB; i++)
		dsts[i] = got[i];
	CHECK(kvt_load(ns, 0, b_keys, NB, dsts, rs) == NB, "%s: b loads its blocks", when);
	for (int i = 0; i < NB; i++) {
		b_pattern(i, want);
		CHECK(!memcmp(got[i], want, sizeof(want)), "%s: b's block %d holds b's bytes", when,
		      i);
	}
	CHECK(kvt_lookup(ns, b_keys, NB + NM, 0, st) == NB, "%s: all of b's keys", when);
	for (int i = NB; i < NB + NM; i++)
		CHECK(st[i] == KVT_MISS, "%s: b's key %d still a miss", when, i);
	CHECK(stat_get(c, "namespace", "blocks") + stat_get(c, "namespace", "spilled") == NB,
	      "%s: b still has exactly its %d blocks", when, NB);
	kvt_ns_close(ns);
	kvt_client_free(c);
}

static void restart(void)
{
	daemon_stop(&d);
	daemon_restart(&d, config);
}

/* Part 1: forged blocks in a's own region, beside b's. */
static void beside(void)
{
	uint8_t hdr[SPILL_REGION_HEADER_BYTES];

	snprintf(config, sizeof(config),
		 "[pool]\ncapacity = 16M\nextent_size = 2M\n"
		 "[nvme]\nwriteback_high = 0%%\nwriteback_low = 0%%\n"
		 "[spill.s]\npath = @DIR@/spill0\ncapacity = 128M\n"
		 "[tenant.a]\nsocket = @DIR@/a.sock\nquota = 8M\n"
		 "[tenant.b]\nsocket = @DIR@/b.sock\nquota = 8M\n");
	daemon_start(&d, config);
	snprintf(spill_path, sizeof(spill_path), "%s/spill0", d.dir);
	snprintf(a_sock, sizeof(a_sock), "%s/a.sock", d.dir);
	snprintf(b_sock, sizeof(b_sock), "%s/b.sock", d.dir);

	b_store();
	WAIT_FOR(admin_stat("nvme_writes") >= NB, "b's blocks on NVMe");
	/* The attacker knows b's region and its generation. */
	struct spill_region_header bh = region_header(0, "b", hdr);

	kvt_client *c = connect_via(a_sock, "a");
	kvt_ns *ns = open_ns(c, 16);
	kvt_ns_info info;
	CHECK(kvt_ns_get_info(ns, &info) == 0 && info.shard_bytes == 32768, "a's blocks");
	static uint8_t blk[NA][32768];
	const void *srcs[NA];
	for (int i = 0; i < NA; i++) {
		forge_block(blk[i], sizeof(blk[i]), (uint32_t)i, 0, bh.generation);
		srcs[i] = blk[i];
	}
	CHECK(kvt_store(ns, 0, a_keys, NA, srcs, NULL) == NA, "a stores its forged blocks");
	kvt_ns_close(ns);
	kvt_client_free(c);
	WAIT_FOR(admin_stat("nvme_writes") >= NB + NA, "a's blocks on NVMe");
	region_header(1, "a", hdr);

	restart();
	CHECK(admin_stat("nvme_recovered") == NB + NA, "%d blocks recovered, not %llu", NB + NA,
	      (unsigned long long)admin_stat("nvme_recovered"));
	b_sees_only_its_own("beside");

	c = connect_via(a_sock, "a");
	ns = open_ns(c, 16);
	CHECK(kvt_wait_resident(ns, a_keys, NA, 30000) == NA, "a's blocks staged");
	static uint8_t got[NA][32768];
	void *dsts[NA];
	int32_t st[NA];
	for (int i = 0; i < NA; i++)
		dsts[i] = got[i];
	CHECK(kvt_load(ns, 0, a_keys, NA, dsts, st) == NA, "a loads its blocks");
	for (int i = 0; i < NA; i++)
		CHECK(st[i] == 0 && !memcmp(got[i], blk[i], sizeof(blk[i])),
		      "a's forged block %d comes back byte-exact", i);
	CHECK(admin_stat("nvme_checksum_errors") == 0, "no checksum errors");
	kvt_ns_close(ns);
	kvt_client_free(c);
	daemon_stop(&d);
	unlink(spill_path);
	daemon_cleanup(&d);
}

/* Part 2: a's region, full of forged headers, rebound to b. */
static void rebound(void)
{
	uint8_t hdr[SPILL_REGION_HEADER_BYTES];

	/* One region: b can only have a's once a has emptied it. */
	snprintf(config, sizeof(config),
		 "[pool]\ncapacity = 16M\nextent_size = 2M\n"
		 "[nvme]\nwriteback_high = 0%%\nwriteback_low = 0%%\n"
		 "[spill.s]\npath = @DIR@/spill0\ncapacity = 64M\n"
		 "[tenant.a]\nsocket = @DIR@/a.sock\nquota = 8M\n"
		 "[tenant.b]\nsocket = @DIR@/b.sock\nquota = 8M\n");
	daemon_start(&d, config);
	snprintf(spill_path, sizeof(spill_path), "%s/spill0", d.dir);
	snprintf(a_sock, sizeof(a_sock), "%s/a.sock", d.dir);
	snprintf(b_sock, sizeof(b_sock), "%s/b.sock", d.dir);

	/* A first block binds the region to a and shows its generation. */
	kvt_client *c = connect_via(a_sock, "a");
	kvt_ns *ns = open_ns(c, 16);
	static uint8_t blk[32768];
	const void *src = blk;
	memset(blk, 0x61, sizeof(blk));
	CHECK(kvt_store(ns, 0, a_keys + NA * 32, 1, &src, NULL) == 1, "a's first block");
	WAIT_FOR(admin_stat("nvme_writes") >= 1, "a's first block on NVMe");
	struct spill_region_header ah = region_header(0, "a", hdr);

	/* One block at a time, so that block i lands in slot i + 1. */
	for (int i = 0; i < NA; i++) {
		forge_block(blk, sizeof(blk), (uint32_t)i + 1, 0, ah.generation);
		CHECK(kvt_store(ns, 0, a_keys + i * 32, 1, &src, NULL) == 1, "a stores");
		WAIT_FOR(admin_stat("nvme_writes") >= (uint64_t)i + 2, "a's block on NVMe");
		uint8_t page[PAGE];
		struct spill_slot_header h;
		read_spill(SPILL_REGION_HEADER_BYTES + (i + 1) * spill_stride_for(32768), page, PAGE);
		CHECK(spill_slot_header_decode(page, PAGE, &h) == 0 &&
			      !memcmp(h.key, a_keys + i * 32, 32),
		      "a's block %d is in slot %d", i, i + 1);
	}
	CHECK(kvt_delete(ns, a_keys, NA) == NA && kvt_delete(ns, a_keys + NA * 32, 1) == 1,
	      "a deletes all its blocks");
	kvt_ns_close(ns);
	kvt_client_free(c);
	WAIT_FOR(admin_stat("nvme_blocks") == 0, "a's slots to be erased");

	b_store();
	WAIT_FOR(admin_stat("nvme_writes") >= NA + 1 + NB, "b's blocks on NVMe");
	struct spill_region_header bh = region_header(0, "b", hdr);
	CHECK(bh.slot_bytes == 16384, "the region is b's now");
	CHECK(bh.generation != ah.generation, "with a new generation");

	/* The precondition: forged headers where b's slot headers are read. */
	uint32_t planted = 0;
	for (uint32_t i = NB; i < spill_slots_per_region(16384); i++) {
		uint8_t page[PAGE];
		struct spill_slot_header h;
		read_spill(SPILL_REGION_HEADER_BYTES + i * spill_stride_for(16384), page, PAGE);
		if (spill_slot_header_decode(page, PAGE, &h) == 0) {
			CHECK(h.slot == i && h.region == 0 && h.generation == ah.generation &&
				      h.tenant_hash == spill_tenant_hash("b", 1),
			      "the header at b's slot %u is one a forged for it", i);
			planted++;
		}
	}
	printf("%u forged headers lie at b's slot header positions\n", planted);
	CHECK(planted >= NA, "a's payloads cover b's slot headers (%u)", planted);

	restart();
	CHECK(admin_stat("nvme_recovered") == NB, "%d blocks recovered, not %llu", NB,
	      (unsigned long long)admin_stat("nvme_recovered"));
	kvt_client *admin = client_connect(&d, "admin");
	CHECK(stat_count(admin, "tenant") == 1, "only b has blocks");
	kvt_client_free(admin);
	b_sees_only_its_own("rebound");
	CHECK(admin_stat("nvme_checksum_errors") == 0, "no checksum errors");
	daemon_stop(&d);
	unlink(spill_path);
	daemon_cleanup(&d);
}

int main(void)
{
	engine_keys(31337, 16 * (NB + NM), 0, 0, b_keys, NB + NM);
	engine_keys(4711, 16 * (NA + 1), 0, 0, a_keys, NA + 1);
	beside();
	rebound();
	return 0;
}
