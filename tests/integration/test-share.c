/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Two engine processes share a prompt prefix through kvtierd: the second
 * finds exactly the first one's prefix blocks as leading hits and loads
 * byte-identical KV.  Also: a salt narrows sharing, and tensor-parallel
 * blocks become visible only when every rank has committed its shard.
 */
#include <string.h>

#include "harness.h"

int main(void)
{
	struct daemon d;
	char out[4096];

	daemon_start(&d, "[pool]\ncapacity = 32M\nextent_size = 4M\n");

	/* Llama-3-8B-shaped blocks (2 MiB): A stores 4 prefix + 2 own. */
	CHECK(engine_run(&d, out, sizeof(out), "--name", "A", "--prefix", "64",
			 "--suffix", "32", "--suffix-seed", "1", "--expect-hits", "0", NULL) == 0,
	      "engine A");
	CHECK(engine_run(&d, out, sizeof(out), "--name", "B", "--prefix", "64",
			 "--suffix", "32", "--suffix-seed", "2", "--expect-hits", "4", NULL) == 0,
	      "engine B must reuse A's 4 prefix blocks");
	CHECK(strstr(out, "every loaded byte verified"), "B verified");
	/* The same request again: everything hits. */
	CHECK(engine_run(&d, out, sizeof(out), "--name", "B2", "--prefix", "64",
			 "--suffix", "32", "--suffix-seed", "2", "--expect-hits", "6",
			 "--no-store", NULL) == 0, "B's own suffix is now stored too");
	/* A salt is another namespace: nothing shared. */
	CHECK(engine_run(&d, out, sizeof(out), "--name", "S", "--prefix", "64",
			 "--suffix", "32", "--salt", "tenant-x", "--expect-hits", "0",
			 "--no-store", NULL) == 0, "salted engine must not see the blocks");

	/* Tensor parallelism: tiny model, 2 ranks, 8 blocks. */
	const char *tp[] = {"--model", "tiny", "--prefix", "128", "--suffix", "0",
			    "--tp-size", "2"};
	CHECK(engine_run(&d, out, sizeof(out), tp[0], tp[1], tp[2], tp[3], tp[4], tp[5],
			 tp[6], tp[7], "--tp-rank", "0", "--name", "r0", NULL) == 0, "rank 0");
	kvt_client *c = client_connect(&d, "checker");
	kvt_ns *ns = engine_ns(c, "tiny", 2);
	uint8_t keys[8 * 32], st[8];
	CHECK(engine_keys(1, 128, 0, 0, keys, 8) == 8, "keys");
	CHECK(kvt_lookup(ns, keys, 8, 0, st) == 0, "half-committed blocks are invisible");
	for (int i = 0; i < 8; i++)
		CHECK(st[i] == KVT_PENDING, "key %d state %u, want pending", i, st[i]);
	CHECK(engine_run(&d, out, sizeof(out), tp[0], tp[1], tp[2], tp[3], tp[4], tp[5],
			 tp[6], tp[7], "--tp-rank", "1", "--name", "r1", "--expect-hits", "0",
			 NULL) == 0, "rank 1");
	CHECK(kvt_lookup(ns, keys, 8, 0, st) == 8, "all shards committed: visible");
	for (int r = 0; r < 2; r++) {
		char rank[4];
		snprintf(rank, sizeof(rank), "%d", r);
		CHECK(engine_run(&d, out, sizeof(out), tp[0], tp[1], tp[2], tp[3], tp[4], tp[5],
				 tp[6], tp[7], "--tp-rank", rank, "--expect-hits", "8",
				 "--no-store", NULL) == 0, "rank %d reload", r);
	}
	CHECK(stat_get(c, "tenant", "handles") == 0, "no handle left behind");
	kvt_ns_close(ns);
	kvt_client_free(c);
	daemon_stop(&d);
	daemon_cleanup(&d);
	return 0;
}
