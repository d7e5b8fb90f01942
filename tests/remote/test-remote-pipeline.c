/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A leading run longer than the queue depth comes back whole from one
 * lookup and one wait: the node reads its keys in order as earlier reads
 * complete, without the client asking again.  An object in the middle of
 * a run that fails verification is a miss and ends the run: the client is
 * served the blocks before it, the keys still waiting are not read, and
 * what the client then computes and stores is what a later lookup serves.
 * A run whose blocks need new extents on the reading node comes back
 * whole too: its reads wait off the loop for the memory made ahead.
 */
#include <string.h>

#include "ceph.h"

#define DEPTH "4"
#define RUN 24 /* blocks of the tiny model's 384-token prefix: 6 x DEPTH */
#define BAD 10
#define BIG_RUN 32 /* blocks of llama3-8b's 512-token prefix */

int main(void)
{
	struct ceph ceph;
	static struct daemon a, b;
	char out[8192], hex[65];
	uint8_t keys[RUN * 32];

	ceph_start(&ceph);
	kvt_client *ca, *cb;
	/* Room for the last part's run: extents of 16 MiB, 8 blocks of 2 MiB. */
	two_nodes_with(&ceph, "[pool]\ncapacity = 256M\nextent_size = 16M\n[tenants]\ndefault_quota = 256M\n",
		       "min_reuse = 0\nqueue_depth = " DEPTH "\n", &a, &b, &ca, &cb);

	CHECK(engine_run(&a, out, sizeof(out), "--model", "tiny", "--name", "A1", "--prefix", "384",
			 "--suffix", "0", "--expect-hits", "0", NULL) == 0, "A stores 24 blocks");
	WAIT_FOR(stat_get(ca, "remote", "writes") == RUN, "A writes the 24 back at commit");
	CHECK(engine_run(&b, out, sizeof(out), "--model", "tiny", "--name", "B1", "--prefix", "384",
			 "--suffix", "0", "--expect-hits", "24", "--no-store", NULL) == 0,
	      "B: the whole run of 24 from one lookup and its wait, at queue depth 4: %s", out);
	CHECK(strstr(out, "every loaded byte verified"), "B1's bytes are A's");
	CHECK(stat_get(cb, "remote", "reads") == RUN, "24 read from the remote tier");
	CHECK(stat_get(cb, "remote", "lookup_rounds") == 1, "for one lookup");

	/* Another run of 24; block 10's object gets a payload byte flipped. */
	CHECK(engine_run(&a, out, sizeof(out), "--model", "tiny", "--name", "A2", "--prefix", "384",
			 "--prefix-seed", "2", "--suffix", "0", "--expect-hits", "0", NULL) == 0,
	      "A stores 24 more");
	WAIT_FOR(stat_get(ca, "remote", "writes") == 2 * RUN, "and writes them back");
	CHECK(engine_keys(2, 384, 0, 0, keys, RUN) == RUN, "keys");
	key_hex(keys + BAD * 32, hex);
	CHECK(ceph_sh(&ceph, NULL, 0,
		      "o=$(rados -p kvtier -N alice ls | grep %s) && rados -p kvtier -N alice get $o %s/obj && "
		      "printf '\\377' | dd of=%s/obj bs=1 seek=9000 conv=notrunc 2>/dev/null && "
		      "rados -p kvtier -N alice put $o %s/obj", hex, ceph.dir, ceph.dir, ceph.dir) == 0,
	      "flip a byte of block 10's object");
	CHECK(engine_run(&b, out, sizeof(out), "--model", "tiny", "--name", "B2", "--prefix", "384",
			 "--prefix-seed", "2", "--suffix", "0", "--expect-hits", "10", NULL) == 0,
	      "B: the 10 blocks before the corrupt one, the rest computed and stored: %s", out);
	CHECK(strstr(out, "every loaded byte verified"), "B2's bytes");
	WAIT_FOR(stat_get(cb, "remote", "in_flight") == 0, "B's reads settle");
	CHECK(stat_get(cb, "remote", "rejected") == 1, "one object failed verification");
	uint64_t read = stat_get(cb, "remote", "reads") - RUN;
	/* At most the reads in flight beside block 10's were made after it;
	 * the keys still waiting when it failed were never read. */
	CHECK(read >= BAD && read < RUN - 1, "the run ended at the corrupt object: %llu read",
	      (unsigned long long)read);
	CHECK(engine_run(&b, out, sizeof(out), "--model", "tiny", "--name", "B3", "--prefix", "384",
			 "--prefix-seed", "2", "--suffix", "0", "--expect-hits", "24", "--no-store",
			 NULL) == 0, "B: all 24 local now");
	CHECK(strstr(out, "every loaded byte verified"), "B3's bytes: fetched and recomputed alike");

	/* 32 blocks of 2 MiB: B's pool grows by four extents while the
	 * reads complete, those after the first made ahead. */
	CHECK(engine_run(&a, out, sizeof(out), "--model", "llama3-8b", "--name", "A4", "--prefix",
			 "512", "--prefix-seed", "4", "--suffix", "0", "--expect-hits", "0", NULL) == 0,
	      "A stores 32 blocks of 2 MiB");
	WAIT_FOR(stat_get(ca, "remote", "writes") == 2 * RUN + BIG_RUN, "A writes them back");
	uint64_t reads0 = stat_get(cb, "remote", "reads");
	uint64_t ahead0 = stat_get(cb, "daemon", "extents_ahead");
	CHECK(engine_run(&b, out, sizeof(out), "--model", "llama3-8b", "--name", "B4", "--prefix",
			 "512", "--prefix-seed", "4", "--suffix", "0", "--expect-hits", "32",
			 "--no-store", NULL) == 0,
	      "B: the whole run of 32, into new extents: %s", out);
	CHECK(strstr(out, "every loaded byte verified"), "B4's bytes are A's");
	CHECK(stat_get(cb, "remote", "reads") - reads0 == BIG_RUN, "32 read from the remote tier");
	CHECK(stat_get(cb, "daemon", "extents_ahead") > ahead0, "an extent made ahead for them");

	two_nodes_stop(&ceph, &a, &b, ca, cb);
	return 0;
}
