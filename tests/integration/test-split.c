/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The scheduler/worker split: one process looks up and pins blocks, another
 * process of the same tenant maps them, copies, verifies and releases the
 * first one's leases.
 */
#include <string.h>
#include <unistd.h>

#include "harness.h"

int main(void)
{
	struct daemon d;
	char out[4096], line[256], pins[256];
	int in;
	FILE *fout;

	daemon_start(&d, NULL);
	snprintf(pins, sizeof(pins), "%s/pins", d.dir);
	CHECK(engine_run(&d, out, sizeof(out), "--model", "tiny", "--prefix", "320",
			 "--suffix", "0", NULL) == 0, "store");
	kvt_client *c = client_connect(&d, "checker");

	pid_t sched = engine_spawn(&d, &in, &fout, "--model", "tiny", "--prefix", "320",
				   "--suffix", "0", "--pin", pins, "--name", "scheduler", NULL);
	CHECK(fgets(line, sizeof(line), fout) && !strncmp(line, "PINNED 20", 9),
	      "scheduler pinned 20: %s", line);
	CHECK(stat_get(c, "tenant", "handles") == 20, "20 leases held");

	CHECK(engine_run(&d, out, sizeof(out), "--model", "tiny", "--copy", pins, "--name",
			 "worker", NULL) == 0, "worker copies the scheduler's pins");
	CHECK(strstr(out, "copied 20 pinned blocks, 0 wrong bytes"), "worker verified");
	CHECK(stat_get(c, "tenant", "handles") == 0, "worker released every lease");

	close(in);
	CHECK(wait_exit(sched) == 0, "scheduler exits");
	fclose(fout);
	kvt_client_free(c);
	daemon_stop(&d);
	daemon_cleanup(&d);
	return 0;
}
