/* SPDX-License-Identifier: Apache-2.0 */
/*
 * While the daemon is away a client sees misses, not errors it must handle;
 * when the daemon is back the client reconnects by itself and reopens its
 * namespaces.  A forked child never talks on its parent's connection.
 */
#include <errno.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

int main(void)
{
	struct daemon d;
	static uint8_t blk[4][32768], back[32768];

	daemon_start(&d, NULL);
	kvt_client *c = client_connect(&d, "survivor");
	kvt_ns *ns = engine_ns(c, "tiny", 1);
	uint8_t keys[4 * 32];
	engine_keys(9, 64, 0, 0, keys, 4);
	const void *srcs[4];
	for (int i = 0; i < 4; i++) {
		memset(blk[i], 'a' + i, sizeof(blk[i]));
		srcs[i] = blk[i];
	}
	CHECK(kvt_store(ns, 0, keys, 4, srcs, NULL) == 4, "store");

	/* A child of a fork must not use the parent's connection. */
	pid_t pid = fork();
	if (pid == 0)
		_exit(kvt_lookup(ns, keys, 4, 0, NULL) == -ECHILD ? 0 : 1);
	CHECK(wait_exit(pid) == 0, "the forked child is refused with -ECHILD");
	CHECK(kvt_lookup(ns, keys, 4, 0, NULL) == 4, "the parent is unaffected");

	daemon_kill(&d);
	uint8_t st[4];
	CHECK(kvt_lookup(ns, keys, 4, 0, st) == 0, "misses while the daemon is away");
	CHECK(st[0] == KVT_MISS, "state miss");
	int32_t sst[4];
	CHECK(kvt_store(ns, 0, keys, 4, srcs, sst) < 0, "stores fail while away");
	CHECK(!kvt_client_connected(c), "reports disconnected");

	daemon_restart(&d, NULL);
	/* The pool did not survive (no fd store yet): store anew. */
	WAIT_FOR(kvt_lookup(ns, keys, 4, 0, NULL) == 0 && kvt_client_connected(c),
		 "the client to reconnect");
	CHECK(kvt_store(ns, 0, keys, 4, srcs, NULL) == 4, "store after reconnecting");
	void *dst[1] = {back};
	CHECK(kvt_load(ns, 0, keys + 2 * 32, 1, dst, NULL) == 1, "load");
	CHECK(!memcmp(back, blk[2], sizeof(back)), "byte-exact after reconnecting");

	kvt_ns_close(ns);
	kvt_client_free(c);
	daemon_stop(&d);
	daemon_cleanup(&d);
	return 0;
}
