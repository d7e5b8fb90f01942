/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A namespace's codec as the daemon sees it: part of the identity (blocks
 * of one codec are never served to another, or to a reader that asked for
 * none), bounded per tenant by [tenant.NAME] codecs (also after a reload),
 * and reported with the bytes its blocks would take in the engine's dtype.
 * The daemon stores coded blocks as opaque slots: what a raw store put in
 * comes back byte for byte.
 */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static struct daemon d;

/* A bfloat16 cache: 4 layers, 2 KV heads of 64, 16 tokens a block. */
static int open_ns(kvt_client *c, uint32_t codec, kvt_ns **ret)
{
	static const uint8_t weights[] = "codec-test-weights";
	const kvt_layer_group g = {
		.n_layers = 4, .attn = KVT_ATTN_MHA, .planes = 2, .kv_heads = 2,
		.head_bytes = 64 * 2, .dtype = KVT_DTYPE_BFLOAT16,
	};
	const kvt_ns_desc desc = {
		.model = "codec-model", .weights = weights, .weights_len = sizeof(weights),
		.layer_end = 4, .tp_size = 1, .cp_size = 1, .block_tokens = 16,
		.n_groups = 1, .groups = &g, .codec = codec,
	};
	*ret = NULL;
	return kvt_ns_open(c, &desc, ret);
}

struct ns_seen {
	uint32_t id;
	char codec[16];
	uint64_t block_bytes, logical_block_bytes, bytes, logical_bytes;
	bool found;
};

static int ns_cb(const kvt_record *r, void *userdata)
{
	struct ns_seen *s = userdata;
	uint64_t id;
	if (strcmp(kvt_record_kind(r), "namespace") || kvt_record_get_u64(r, "id", &id) ||
	    id != s->id)
		return 0;
	s->found = true;
	snprintf(s->codec, sizeof(s->codec), "%s", kvt_record_get_str(r, "codec"));
	kvt_record_get_u64(r, "block_bytes", &s->block_bytes);
	kvt_record_get_u64(r, "logical_block_bytes", &s->logical_block_bytes);
	kvt_record_get_u64(r, "bytes", &s->bytes);
	kvt_record_get_u64(r, "logical_bytes", &s->logical_bytes);
	return 0;
}

static void test_identity(void)
{
	kvt_client *c = client_connect(&d, "codecs");
	kvt_ns *plain, *fp8, *int4;
	kvt_ns_info ip, i8, i4;

	CHECK(open_ns(c, KVT_CODEC_NONE, &plain) == 0, "open none: %s", kvt_client_error(c));
	CHECK(open_ns(c, KVT_CODEC_FP8_E4M3, &fp8) == 0, "open fp8: %s", kvt_client_error(c));
	CHECK(open_ns(c, KVT_CODEC_INT4, &int4) == 0, "open int4: %s", kvt_client_error(c));
	kvt_ns_get_info(plain, &ip);
	kvt_ns_get_info(fp8, &i8);
	kvt_ns_get_info(int4, &i4);
	CHECK(ip.ns_id != i8.ns_id && i8.ns_id != i4.ns_id && ip.ns_id != i4.ns_id,
	      "three namespaces, not one");
	CHECK(ip.codec == KVT_CODEC_NONE && i8.codec == KVT_CODEC_FP8_E4M3 &&
		      i4.codec == KVT_CODEC_INT4,
	      "codecs reported: %u %u %u", ip.codec, i8.codec, i4.codec);
	/* 4 layers x 2 planes x 2 heads of 16 x 64 bf16 = 16 KiB; fp8 tiles
	 * of 4 + 1024 bytes; int4 K 256 + 512, V 16 x 2 x 4 + 512. */
	CHECK(ip.shard_bytes == 4 * 2 * 2 * 16 * 64 * 2, "plain shard %llu",
	      (unsigned long long)ip.shard_bytes);
	CHECK(i8.shard_bytes == 4 * 2 * 2 * (4 + 16 * 64), "fp8 shard %llu",
	      (unsigned long long)i8.shard_bytes);
	CHECK(i4.shard_bytes == 4 * 2 * ((256 + 512) + (128 + 512)), "int4 shard %llu",
	      (unsigned long long)i4.shard_bytes);

	/* A block stored raw in fp8 comes back byte for byte there, and is a
	 * miss for the reader that asked for none or for int4. */
	uint8_t key[KVT_KEY_BYTES];
	token_key(28, 1, key);
	uint8_t *src = malloc(i8.shard_bytes), *dst = malloc(i8.shard_bytes);
	CHECK(src && dst, "out of memory");
	block_pattern(src, i8.shard_bytes, 28, key);
	const void *srcs[1] = {src};
	void *dsts[1] = {dst};
	CHECK(kvt_store(fp8, 0, key, 1, srcs, NULL) == 1, "store fp8: %s", kvt_client_error(c));
	CHECK(kvt_lookup(plain, key, 1, 0, NULL) == 0, "an fp8 block is a miss for none");
	CHECK(kvt_lookup(int4, key, 1, 0, NULL) == 0, "an fp8 block is a miss for int4");
	CHECK(kvt_lookup(fp8, key, 1, 0, NULL) == 1, "and a hit for fp8");
	memset(dst, 0, i8.shard_bytes);
	CHECK(kvt_load(fp8, 0, key, 1, dsts, NULL) == 1, "load fp8");
	CHECK(!memcmp(src, dst, i8.shard_bytes), "the stored bytes, as they were");

	/* The record: physical bytes against those of the engine's dtype. */
	struct ns_seen s = {.id = i8.ns_id};
	CHECK(kvt_stats(c, KVT_STATS_NAMESPACES, ns_cb, &s) == 0 && s.found, "namespace record");
	CHECK(!strcmp(s.codec, "fp8-e4m3"), "codec '%s'", s.codec);
	CHECK(s.block_bytes == i8.block_bytes && s.logical_block_bytes == ip.block_bytes,
	      "block %llu of logical %llu", (unsigned long long)s.block_bytes,
	      (unsigned long long)s.logical_block_bytes);
	CHECK(s.bytes == i8.block_bytes && s.logical_bytes == ip.block_bytes,
	      "one block: %llu bytes holding %llu", (unsigned long long)s.bytes,
	      (unsigned long long)s.logical_bytes);
	free(src);
	free(dst);
	kvt_ns_close(plain);
	kvt_ns_close(fp8);
	kvt_ns_close(int4);
	kvt_client_free(c);
}

/* Through q's socket only the codecs its section names may be opened. */
static void expect_codecs(const char *socket, uint32_t allowed, const char *names)
{
	kvt_client *c = NULL;
	CHECK(kvt_client_connect(socket, "codec-tenant", &c) == 0, "connect: %s",
	      kvt_connect_error());
	for (uint32_t codec = 0; codec < 3; codec++) {
		kvt_ns *ns;
		int r = open_ns(c, codec, &ns);
		if (allowed & (1u << codec)) {
			CHECK(r == 0, "codec %u allowed: %s", codec, kvt_client_error(c));
			kvt_ns_close(ns);
			continue;
		}
		CHECK(r == -EPERM, "codec %u refused: %d", codec, r);
		CHECK(strstr(kvt_client_error(c), names) &&
			      strstr(kvt_client_error(c), "[tenant.q] codecs"),
		      "the refusal names what may be used and where: '%s'", kvt_client_error(c));
	}
	kvt_client_free(c);
}

int main(void)
{
	daemon_start(&d, "[tenant.q]\nsocket = @DIR@/q.sock\ncodecs = fp8-e4m3\n");
	char q[200];
	snprintf(q, sizeof(q), "%s/q.sock", d.dir);

	test_identity();
	expect_codecs(q, 1u << KVT_CODEC_FP8_E4M3, "only as fp8-e4m3");

	/* A reload narrows or widens it for the next open. */
	daemon_rewrite_config(&d, "[tenant.q]\nsocket = @DIR@/q.sock\ncodecs = none, int4\n");
	kill(d.pid, SIGHUP);
	kvt_client *c = client_connect(&d, "watcher");
	WAIT_FOR(daemon_log_contains(&d, "Reloaded"), "the reload");
	kvt_client_free(c);
	expect_codecs(q, 1u << KVT_CODEC_NONE | 1u << KVT_CODEC_INT4, "only as none, int4");

	daemon_stop(&d);
	daemon_cleanup(&d);
	return 0;
}
