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
	uint8_t keys[16 * 32], st[16];
	engine_keys(1, 256, 0, 0, keys, 16);
	uint64_t used_before = stat_get(c, "tenant", "used");
	int fds_before = -1;

	/* Twice: the first round creates what the daemon keeps for good (an
	 * extent, its timer); after the second nothing may have grown. */
	for (int round = 0; round < 2; round++) {
		pid_t holder = engine_spawn(&d, &in, &fout, "--model", "tiny", "--prefix",
					    "256", "--suffix", "0", "--hold", "--name",
					    "holder", NULL);
		CHECK(fgets(line, sizeof(line), fout) && !strncmp(line, "HELD 16", 7),
		      "holder reserved 16 blocks: %s", line);
		CHECK(stat_get(c, "tenant", "handles") == 16, "16 reservations open");
		CHECK(kvt_lookup(ns, keys, 16, 0, st) == 0, "reserved blocks are invisible");
		for (int i = 0; i < 16; i++)
			CHECK(st[i] == KVT_PENDING, "key %d pending", i);

		kill(holder, SIGKILL);
		CHECK(wait_exit(holder) == 128 + SIGKILL, "holder killed");
		close(in);
		fclose(fout);

		WAIT_FOR(stat_sum(c, "tenant", "handles") == 0, "quarantine to end");
		CHECK(kvt_lookup(ns, keys, 16, 0, st) == 0, "nothing visible after the crash");
		for (int i = 0; i < 16; i++)
			CHECK(st[i] == KVT_MISS, "key %d is a miss after the crash", i);
		CHECK(stat_get(c, "tenant", "used") == used_before, "every slot returned");
		CHECK(stat_get(c, "daemon", "quarantined") == 16u * (round + 1),
		      "16 handles ended by quarantine");
		if (round == 0) {
			WAIT_FOR(stat_get(c, "daemon", "clients") == 1, "holder's session to close");
			fds_before = daemon_fd_count(&d);
			continue;
		}
		for (int i = 0; i < 1500 && daemon_fd_count(&d) != fds_before; i++)
			usleep(20000);
		CHECK(daemon_fd_count(&d) == fds_before, "daemon has %d fds, had %d",
		      daemon_fd_count(&d), fds_before);
	}

	/* The slots are reusable: store and load the same request for real. */
	CHECK(engine_run(&d, out, sizeof(out), "--model", "tiny", "--prefix", "256",
			 "--suffix", "0", "--expect-hits", "0", NULL) == 0, "store after crash");
	CHECK(engine_run(&d, out, sizeof(out), "--model", "tiny", "--prefix", "256",
			 "--suffix", "0", "--expect-hits", "16", "--no-store", NULL) == 0,
	      "load after crash");

	kvt_ns_close(ns);
	kvt_client_free(c);
	daemon_stop(&d);
	daemon_cleanup(&d);
	return 0;
}
