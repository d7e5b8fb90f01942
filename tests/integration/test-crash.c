/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A client killed with SIGKILL in the middle of a reservation leaves no
 * visible block and, once its quarantine has passed, no slot, handle or
 * file descriptor behind.
 */
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

int main(void)
{
	struct daemon d;
	char out[4096], line[256];
	int in;
	FILE *fout;

	daemon_start(&d, NULL);
	kvt_client *c = client_connect(&d, "checker");
	kvt_ns *ns = engine_ns(c, "tiny", 1);
	int fds_before = daemon_fd_count(&d);
	uint64_t extents_before = stat_get(c, "daemon", "extents");
	uint64_t used_before = stat_get(c, "tenant", "used");

	pid_t holder = engine_spawn(&d, &in, &fout, "--model", "tiny", "--prefix", "256",
				    "--suffix", "0", "--hold", "--name", "holder", NULL);
	CHECK(fgets(line, sizeof(line), fout) && !strncmp(line, "HELD 16", 7),
	      "holder reserved 16 blocks: %s", line);
	CHECK(stat_get(c, "tenant", "handles") == 16, "16 reservations open");

	uint8_t keys[16 * 32], st[16];
	engine_keys(1, 256, 0, 0, keys, 16);
	CHECK(kvt_lookup(ns, keys, 16, 0, st) == 0, "reserved blocks are invisible");
	for (int i = 0; i < 16; i++)
		CHECK(st[i] == KVT_PENDING, "key %d pending", i);

	kill(holder, SIGKILL);
	CHECK(wait_exit(holder) == 128 + SIGKILL, "holder killed");
	close(in);
	fclose(fout);

	WAIT_FOR(stat_get(c, "tenant", "handles") == 0, "quarantine to end");
	CHECK(kvt_lookup(ns, keys, 16, 0, st) == 0, "nothing visible after the crash");
	for (int i = 0; i < 16; i++)
		CHECK(st[i] == KVT_MISS, "key %d is a miss after the crash", i);
	CHECK(stat_get(c, "tenant", "used") == used_before, "every slot returned");
	CHECK(stat_get(c, "daemon", "quarantined") == 16, "16 handles ended by quarantine");
	/* The daemon keeps one fd per pool extent, and nothing else. */
	int fds_want = fds_before + (int)(stat_get(c, "daemon", "extents") - extents_before);
	WAIT_FOR(daemon_fd_count(&d) == fds_want, "daemon fds back to baseline");

	/* The slots are reusable: store and load the same request for real. */
	CHECK(engine_run(&d, out, sizeof(out), "--model", "tiny", "--prefix", "256",
			 "--suffix", "0", "--expect-hits", "0", NULL) == 0, "store after crash");
	CHECK(engine_run(&d, out, sizeof(out), "--model", "tiny", "--prefix", "256",
			 "--suffix", "0", "--expect-hits", "16", "--no-store", NULL) == 0,
	      "load after crash");

	kvt_client_free(c);
	daemon_stop(&d);
	daemon_cleanup(&d);
	return 0;
}
