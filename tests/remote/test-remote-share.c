/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Two nodes share a prefix through the remote tier: node A's engine
 * stores it and reuses it (the policy writes back blocks loaded at least
 * once), node B, which never saw it, finds it as leading hits fetched in
 * one round and loads identical bytes.  Keys B's cluster does not have
 * are misses, and objects live in the tenant's RADOS namespace under
 * names made of the namespace digest and the key.
 */
#include <string.h>

#include "ceph.h"

int main(void)
{
	struct ceph ceph;
	static struct daemon a, b;
	char out[8192];

	ceph_start(&ceph);
	kvt_client *ca, *cb;
	two_nodes(&ceph, NULL, &a, &b, &ca, &cb);

	CHECK(engine_run(&a, out, sizeof(out), "--model", "tiny", "--name", "A1", "--prefix", "128",
			 "--suffix", "0", "--expect-hits", "0", NULL) == 0, "A computes 8 blocks");
	CHECK(stat_get(ca, "remote", "writes") == 0, "stored once, not reused yet: not written back");
	CHECK(engine_run(&a, out, sizeof(out), "--model", "tiny", "--name", "A2", "--prefix", "128",
			 "--suffix", "0", "--expect-hits", "8", "--no-store", NULL) == 0,
	      "A reuses them");
	WAIT_FOR(stat_get(ca, "remote", "writes") == 8, "A writes the 8 reused blocks back");
	CHECK(stat_get(ca, "remote", "errors") == 0, "no errors on A");

	CHECK(ceph_sh(&ceph, out, sizeof(out), "rados -p kvtier -N alice ls | grep -c '^[0-9a-f]\\{32\\}\\.[0-9a-f]\\{64\\}$'") == 0 &&
		      atoi(out) == 8,
	      "8 objects named digest.key in namespace alice, got %s", out);
	CHECK(ceph_sh(&ceph, out, sizeof(out), "rados -p kvtier ls | wc -l") == 0 && atoi(out) == 0,
	      "nothing in the default namespace, got %s", out);

	CHECK(engine_run(&b, out, sizeof(out), "--model", "tiny", "--name", "B1", "--prefix", "128",
			 "--suffix", "0", "--expect-hits", "8", "--no-store", NULL) == 0,
	      "B finds A's 8 blocks as leading hits");
	CHECK(strstr(out, "every loaded byte verified"), "B's bytes are A's");
	CHECK(stat_get(cb, "remote", "reads") == 8, "8 fetched from the remote tier");
	CHECK(stat_get(cb, "remote", "lookup_rounds") == 1, "in one round");
	CHECK(stat_get(cb, "remote", "writes") == 0, "fetched blocks are not written back again");

	/* Longer prompt on B: its 8 are local now, the 4 after them are
	 * nowhere: misses, asked for in one more round. */
	CHECK(engine_run(&b, out, sizeof(out), "--model", "tiny", "--name", "B2", "--prefix", "192",
			 "--suffix", "0", "--expect-hits", "8", NULL) == 0, "B: 8 hits, 4 computed");
	/* The first miss ends B2's leading run and its wait: the other
	 * reads may still be answering when it is done, and each miss is
	 * counted as its answer comes. */
	WAIT_FOR(stat_get(cb, "remote", "misses") == 4, "4 remote misses");
	CHECK(stat_get(cb, "remote", "lookup_rounds") == 2, "in one round");
	CHECK(engine_run(&b, out, sizeof(out), "--model", "tiny", "--name", "B3", "--prefix", "192",
			 "--suffix", "0", "--expect-hits", "12", "--no-store", NULL) == 0,
	      "B: all 12 local now");

	two_nodes_stop(&ceph, &a, &b, ca, cb);
	return 0;
}
