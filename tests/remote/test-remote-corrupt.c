/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Remote objects that are not what they claim are misses: one truncated,
 * one with a payload byte flipped, one emptied.  Node B's engine gets the
 * intact leading run, computes the rest, and every byte it loads is right.
 */
#include <string.h>

#include "ceph.h"

int main(void)
{
	struct ceph ceph;
	static struct daemon a, b;
	char out[8192], hex[65];
	uint8_t keys[8 * 32];

	ceph_start(&ceph);
	kvt_client *ca, *cb;
	two_nodes(&ceph, "min_reuse = 0\n", &a, &b, &ca, &cb);
	CHECK(engine_run(&a, out, sizeof(out), "--model", "tiny", "--name", "A", "--prefix", "128",
			 "--suffix", "0", "--expect-hits", "0", NULL) == 0, "A stores 8 blocks");
	WAIT_FOR(stat_get(ca, "remote", "writes") == 8, "written back at commit (min_reuse 0)");

	CHECK(engine_keys(1, 128, 0, 0, keys, 8) == 8, "keys");
	const char *dir = ceph.dir;
	/* Block 2 cut short, block 5 one payload byte flipped, block 6 empty. */
	key_hex(keys + 2 * 32, hex);
	CHECK(ceph_sh(&ceph, NULL, 0, "o=$(rados -p kvtier -N alice ls | grep %s) && rados -p kvtier -N alice truncate $o 20000", hex) == 0,
	      "truncate");
	key_hex(keys + 5 * 32, hex);
	CHECK(ceph_sh(&ceph, NULL, 0,
		      "o=$(rados -p kvtier -N alice ls | grep %s) && rados -p kvtier -N alice get $o %s/obj && "
		      "printf '\\377' | dd of=%s/obj bs=1 seek=9000 conv=notrunc 2>/dev/null && "
		      "rados -p kvtier -N alice put $o %s/obj", hex, dir, dir, dir) == 0, "flip");
	key_hex(keys + 6 * 32, hex);
	CHECK(ceph_sh(&ceph, NULL, 0, "o=$(rados -p kvtier -N alice ls | grep %s) && rados -p kvtier -N alice truncate $o 0", hex) == 0,
	      "empty");

	CHECK(engine_run(&b, out, sizeof(out), "--model", "tiny", "--name", "B1", "--prefix", "128",
			 "--suffix", "0", "--expect-hits", "2", NULL) == 0,
	      "B: the 2 blocks before the truncated one hit, the rest is computed");
	CHECK(strstr(out, "every loaded byte verified"), "B1's bytes");
	/* The fetches after the first bad one may land after B1 is done. */
	WAIT_FOR(stat_get(cb, "remote", "rejected") == 3, "3 objects failing verification");
	CHECK(engine_run(&b, out, sizeof(out), "--model", "tiny", "--name", "B2", "--prefix", "128",
			 "--suffix", "0", "--expect-hits", "8", "--no-store", NULL) == 0,
	      "B: all 8 local now");
	CHECK(strstr(out, "every loaded byte verified"), "B2's bytes: the intact fetched ones and the recomputed");

	two_nodes_stop(&ceph, &a, &b, ca, cb);
	return 0;
}
