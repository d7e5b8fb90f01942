/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Eviction under capacity: a pool of 128 tiny blocks receives 200; the
 * daemon evicts, never exceeds its capacity, and every hit it still
 * reports loads byte-exact.  The default policy's shadows are fed the
 * touching lookups, and only those.
 */
#include <string.h>

#include "harness.h"

int main(void)
{
	struct daemon d;
	char out[4096];

	/* tiny blocks are 32 KiB: 2 MiB extents of 64 slots, 4 MiB = 128. */
	daemon_start(&d, "[pool]\ncapacity = 4M\nextent_size = 2M\n");
	CHECK(engine_run(&d, out, sizeof(out), "--model", "tiny", "--prefix", "1600",
			 "--suffix", "0", "--prefix-seed", "1", "--name", "A", NULL) == 0, "A");
	CHECK(engine_run(&d, out, sizeof(out), "--model", "tiny", "--prefix", "1600",
			 "--suffix", "0", "--prefix-seed", "2", "--name", "B", NULL) == 0, "B");

	kvt_client *c = client_connect(&d, "checker");
	kvt_ns *ns = engine_ns(c, "tiny", 1);
	CHECK(stat_get(c, "daemon", "allocated") <= 4u << 20, "pool within capacity");
	CHECK(stat_get(c, "namespace", "evictions") >= 72, "at least 200 - 128 evictions");
	CHECK(stat_get(c, "namespace", "blocks") == 128, "pool full of blocks");

	/* B is the most recent: all of it must still be there and load. */
	CHECK(engine_run(&d, out, sizeof(out), "--model", "tiny", "--prefix", "1600",
			 "--suffix", "0", "--prefix-seed", "2", "--expect-hits", "100",
			 "--no-store", NULL) == 0, "B's blocks survive");
	/* A's chain lost blocks: whatever leading run remains must verify. */
	CHECK(engine_run(&d, out, sizeof(out), "--model", "tiny", "--prefix", "1600",
			 "--suffix", "0", "--prefix-seed", "1", "--no-store", NULL) == 0,
	      "A's remaining hits verify");

	/* Per-key states agree with the leading count. */
	uint8_t keys[100 * 32], st[100];
	engine_keys(1, 1600, 0, 0, keys, 100);
	int lead = kvt_lookup(ns, keys, 100, 0, st);
	CHECK(lead >= 0 && lead < 100, "A was partly evicted (%d)", lead);
	for (int i = 0; i < lead; i++)
		CHECK(st[i] == KVT_HOST, "leading key %d is a hit", i);
	if (lead < 100)
		CHECK(st[lead] == KVT_MISS, "the run ends at a miss");

	/* The default policy's shadows score every lookup that touches its
	 * hits (the engines' did), once each however it is split, and no
	 * other. */
	uint64_t scored = stat_get(c, "class", "policy_lookups");
	CHECK(scored > 0, "the engines' lookups were scored");
	for (int i = 0; i < 5; i++)
		CHECK(kvt_lookup(ns, keys, 100, 0, st) == lead, "a lookup that does not touch");
	CHECK(stat_get(c, "class", "policy_lookups") == scored,
	      "a lookup that does not touch is not scored");
	for (int i = 0; i < 5; i++)
		CHECK(kvt_lookup(ns, keys, 100, KVT_LOOKUP_TOUCH, st) >= 0, "a touching lookup");
	CHECK(stat_get(c, "class", "policy_lookups") == scored + 5, "%llu lookups scored, not %llu",
	      (unsigned long long)(stat_get(c, "class", "policy_lookups") - scored), 5ull);
	CHECK(stat_get(c, "class", "policy_weight") == 0 || stat_get(c, "class", "policy_switches") > 0,
	      "a tier leaves LRU (weight 0) only by a switch");
	/* The filter: off (0), seen before (1) or strict (2); a tier
	 * starts with none. */
	uint64_t filter = stat_get(c, "class", "policy_filter");
	CHECK(filter <= 2, "policy_filter %llu", (unsigned long long)filter);
	CHECK(filter == 0 || stat_get(c, "class", "policy_switches") > 0,
	      "a tier takes a filter only by a switch");

	kvt_ns_close(ns);
	kvt_client_free(c);
	daemon_stop(&d);
	daemon_cleanup(&d);
	return 0;
}
