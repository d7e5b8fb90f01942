/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A pool that grows under a store: an engine stores 64 blocks of 2 MiB
 * (one RESERVE) into extents of 16 MiB, eight new extents at once.  Each
 * is made ahead on kvtierd's thread while the RESERVE waits off the loop
 * (none is populated inside a request, with other sessions waiting behind
 * it), and the blocks hold exactly what was stored.
 */
#include <string.h>

#include "harness.h"

static struct daemon d;

int main(void)
{
	char out[4096];

	daemon_start(&d, "[pool]\ncapacity = 512M\nextent_size = 16M\n"
			 "[tenants]\ndefault_quota = 512M\n");
	kvt_client *c = client_connect(&d, "checker");

	CHECK(engine_run(&d, out, sizeof(out), "--model", "llama3-8b", "--name", "A", "--prefix",
			 "1024", "--suffix", "0", "--expect-hits", "0", NULL) == 0,
	      "A stores 64 blocks of 2 MiB: %s", out);
	CHECK(strstr(out, "64 stored"), "all 64 stored: %s", out);
	uint64_t extents = stat_get(c, "daemon", "extents");
	CHECK(extents == 8, "8 extents of 16 MiB for 128 MiB, %llu", (unsigned long long)extents);
	CHECK(stat_get(c, "daemon", "extents_ahead") == extents,
	      "%llu of %llu extents made ahead: the others were populated inside the RESERVE",
	      (unsigned long long)stat_get(c, "daemon", "extents_ahead"),
	      (unsigned long long)extents);
	CHECK(stat_get(c, "daemon", "memory_waits") >= 1, "the RESERVE waited off the loop");

	CHECK(engine_run(&d, out, sizeof(out), "--model", "llama3-8b", "--name", "B", "--prefix",
			 "1024", "--suffix", "0", "--expect-hits", "64", "--no-store", NULL) == 0,
	      "B finds all 64: %s", out);
	CHECK(strstr(out, "every loaded byte verified"), "B's bytes are A's: %s", out);

	kvt_client_free(c);
	daemon_stop(&d);
	daemon_cleanup(&d);
	return 0;
}
