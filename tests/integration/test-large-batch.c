/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A kvt_store and a kvt_load of a batch larger than the last-level cache
 * (which the client copies with non-temporal stores, client/copy.c), from
 * and into buffers at every alignment from 0 to 63 bytes: every block
 * comes back byte for byte, and so does a small batch of the same blocks
 * (copied with memcpy).  The destinations are poisoned first, so a block
 * that was not copied, or copied short, cannot pass.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "macro.h"

#define BLOCK (1u << 20) /* 32 layers, K and V, 4 heads of 256 bytes, 16 tokens */
#define SMALL 4u

static struct daemon d;

static kvt_ns *open_1m(kvt_client *c)
{
	kvt_layer_group g = {
		.n_layers = 32, .attn = KVT_ATTN_MHA, .planes = 2, .kv_heads = 4,
		.head_bytes = 256, .dtype = 1,
	};
	static const uint8_t weights[] = "test-large-batch";
	kvt_ns_desc desc = {
		.model = "large-batch", .weights = weights, .weights_len = sizeof(weights),
		.layer_end = 32, .tp_size = 1, .cp_size = 1, .block_tokens = 16,
		.n_groups = 1, .groups = &g,
	};
	kvt_ns *ns = NULL;
	int r = kvt_ns_open(c, &desc, &ns);
	CHECK(r == 0, "ns open: %s (%s)", strerror(-r), kvt_client_error(c));
	kvt_ns_info info;
	CHECK(kvt_ns_get_info(ns, &info) == 0 && info.shard_bytes == BLOCK, "1 MiB blocks");
	return ns;
}

/* Blocks [from, from + n) through one kvt_store and one kvt_load. */
static void round_trip(kvt_ns *ns, uint8_t *src, uint8_t *dst, uint32_t from, uint32_t n)
{
	uint8_t *keys = calloc(n, 32);
	const void **srcs = calloc(n, sizeof(*srcs));
	void **dsts = calloc(n, sizeof(*dsts));
	int32_t *st = calloc(n, sizeof(*st));
	CHECK(keys && srcs && dsts && st, "out of memory");
	for (uint32_t i = 0; i < n; i++) {
		uint32_t b = from + i;
		memset(keys + i * 32, 0, 32);
		memcpy(keys + i * 32, &b, 4);
		keys[i * 32 + 31] = 0x6c;
		/* Block b's bytes start b % 64 bytes into its stretch of
		 * src, and (b * 7) % 64 into its stretch of dst. */
		srcs[i] = src + (size_t)b * (BLOCK + 64) + b % 64;
		dsts[i] = dst + (size_t)b * (BLOCK + 64) + (b * 7) % 64;
		block_pattern((uint8_t *)srcs[i], BLOCK, b, keys + i * 32);
		memset(dsts[i], 0xa5, BLOCK);
	}
	CHECK(kvt_store(ns, 0, keys, n, srcs, st) == (int)n, "store of %u blocks", n);
	for (uint32_t i = 0; i < n; i++)
		CHECK(st[i] == 0, "block %u stored: %d", from + i, st[i]);
	CHECK(kvt_load(ns, 0, keys, n, dsts, st) == (int)n, "load of %u blocks", n);
	for (uint32_t i = 0; i < n; i++) {
		CHECK(st[i] == 0, "block %u loaded: %d", from + i, st[i]);
		CHECK(!memcmp(dsts[i], srcs[i], BLOCK), "block %u (source at +%u, destination at +%u) came back with other bytes",
		      from + i, (from + i) % 64, ((from + i) * 7) % 64);
	}
	CHECK(kvt_delete(ns, keys, n) == (int)n, "delete of %u blocks", n);
	free(keys);
	free(srcs);
	free(dsts);
	free(st);
}

/* The last-level cache as client/copy.c reads it. */
static uint64_t cache_bytes(void)
{
	unsigned long long v = 0;
	char unit = 0;
	FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "re");

	if (f) {
		if (fscanf(f, "%llu%c", &v, &unit) < 1)
			v = 0;
		fclose(f);
	}
	v = unit == 'K' ? v << 10 : unit == 'M' ? v << 20 : v;
	return v ? v : UINT64_C(32) << 20;
}

int main(void)
{
	uint64_t cache = cache_bytes();
	/* More blocks than the cache holds, and at least every alignment. */
	uint32_t n = (uint32_t)(cache / BLOCK) + 8;
	if (n < 64)
		n = 64;
	char config[160];
	uint64_t pool = ((uint64_t)n * BLOCK + (64u << 20)) / (64u << 20) * (64u << 20) + (64u << 20);
	snprintf(config, sizeof(config), "[pool]\ncapacity = %lluM\nextent_size = 64M\n[tenants]\ndefault_quota = %lluM\n",
		 (unsigned long long)(pool >> 20), (unsigned long long)(pool >> 20));
	daemon_start(&d, config);

	kvt_client *c = client_connect(&d, "large-batch");
	kvt_ns *ns = open_1m(c);
	size_t stretch = (size_t)n * (BLOCK + 64);
	uint8_t *src = malloc(stretch), *dst = malloc(stretch);
	CHECK(src && dst, "out of memory");

	round_trip(ns, src, dst, 0, n);
	fprintf(stderr, "%u blocks of 1 MiB in one batch (last-level cache %llu MiB): byte-exact\n", n,
		(unsigned long long)(cache >> 20));
	round_trip(ns, src, dst, n - SMALL, SMALL);

	free(src);
	free(dst);
	kvt_ns_close(ns);
	kvt_client_free(c);
	daemon_stop(&d);
	daemon_cleanup(&d);
	return 0;
}
