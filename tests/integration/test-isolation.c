/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tenant isolation: blocks stored by one uid are invisible to another,
 * whose statistics do not reveal the first tenant at all; an admin sees
 * both.
 */
#include <errno.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static int child_as(uid_t uid, struct daemon *d, int expect_hits)
{
	pid_t pid = fork();
	if (pid == 0) {
		harness_in_child();
		if (setgid(uid) < 0 || setuid(uid) < 0)
			_exit(3);
		kvt_client *c = client_connect(d, "other-tenant");
		kvt_ns *ns = engine_ns(c, "tiny", 1);
		uint8_t keys[8 * 32];
		engine_keys(1, 128, 0, 0, keys, 8);
		int hits = kvt_lookup(ns, keys, 8, 0, NULL);
		CHECK(hits == expect_hits, "uid %u sees %d hits, want %d", (unsigned)uid, hits,
		      expect_hits);
		kvt_slot_ref refs[8];
		CHECK(kvt_acquire(ns, 0, keys, 8, refs) == 0 && refs[0].status == -ENOENT,
		      "another tenant's block cannot be acquired");
		/* It can store the same keys: in its own pool. */
		static uint8_t blk[32768];
		const void *srcs[8];
		for (int i = 0; i < 8; i++)
			srcs[i] = blk;
		CHECK(kvt_store(ns, 0, keys, 8, srcs, NULL) == 8, "own store");
		CHECK(stat_count(c, "tenant") == 1, "sees only its own tenant");
		CHECK(stat_get(c, "tenant", "uid") == uid, "and it is its own");
		kvt_client_free(c);
		_exit(0);
	}
	return wait_exit(pid);
}

/* A worker that connected before its uid had a tenant can still finish
 * what a scheduler connection of the same uid started. */
static int early_worker(uid_t uid, struct daemon *d)
{
	pid_t pid = fork();
	if (pid == 0) {
		harness_in_child();
		if (setgid(uid) < 0 || setuid(uid) < 0)
			_exit(3);
		kvt_client *worker = client_connect(d, "worker");
		kvt_client *sched = client_connect(d, "scheduler");
		kvt_ns *ns = engine_ns(sched, "tiny", 1);
		uint8_t keys[32];
		engine_keys(5, 16, 0, 0, keys, 1);
		kvt_slot_ref ref;
		CHECK(kvt_reserve(ns, 0, keys, 1, &ref) == 1, "scheduler reserves");
		void *p = NULL;
		CHECK(kvt_client_ping(worker) == 0, "worker still connected");
		CHECK(kvt_client_map(worker, ref.extent_id, ref.offset, ref.bytes, &p) == 0,
		      "the worker was given the new tenant's extent");
		memset(p, 0x77, ref.bytes);
		uint8_t ok = 1;
		int32_t st = -1;
		CHECK(kvt_commit(worker, &ref.handle, &ok, 1, &st) == 0 && st == 0,
		      "the worker commits the scheduler's reservation (%d)", st);
		CHECK(kvt_lookup(ns, keys, 1, 0, NULL) == 1, "visible");
		kvt_client_free(worker);
		kvt_client_free(sched);
		_exit(0);
	}
	return wait_exit(pid);
}

int main(void)
{
	struct daemon d;
	char out[4096];

	if (geteuid() != 0) {
		printf("skipped: switching uids needs root\n");
		return KVT_TEST_SKIP;
	}
	daemon_start(&d, NULL);
	CHECK(engine_run(&d, out, sizeof(out), "--model", "tiny", "--prefix", "128",
			 "--suffix", "0", NULL) == 0, "root stores 8 blocks");
	CHECK(child_as(65534, &d, 0) == 0, "nobody sees none of root's blocks");
	CHECK(child_as(65533, &d, 0) == 0, "a third uid neither");
	CHECK(early_worker(65532, &d) == 0, "an early worker joins its tenant");

	kvt_client *c = client_connect(&d, "admin");
	CHECK(stat_count(c, "tenant") == 4, "the admin sees all four tenants");
	/* Root's blocks are intact and its own. */
	CHECK(engine_run(&d, out, sizeof(out), "--model", "tiny", "--prefix", "128",
			 "--suffix", "0", "--expect-hits", "8", "--no-store", NULL) == 0,
	      "root still loads its own bytes");
	kvt_client_free(c);
	daemon_stop(&d);
	daemon_cleanup(&d);
	return 0;
}
