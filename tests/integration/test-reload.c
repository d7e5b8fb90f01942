/* SPDX-License-Identifier: Apache-2.0 */
/*
 * SIGHUP reloads what can change live (capacity, limits, tenant quotas),
 * names what needs a restart, and survives a broken file by keeping the
 * running configuration.
 */
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

int main(void)
{
	struct daemon d;
	char out[4096];

	daemon_start(&d, "[limits]\nkeys_per_request = 64\n");
	kvt_client *c = client_connect(&d, "checker");
	kvt_ns *ns = engine_ns(c, "tiny", 1);
	(void)ns;
	CHECK(stat_get(c, "daemon", "capacity") == 16u << 20, "16M at start");

	daemon_rewrite_config(&d, "[pool]\ncapacity = 32M\nextent_size = 4M\n"
				  "[tenants]\ndefault_quota = 3M\n"
				  "[limits]\nkeys_per_request = 8\n");
	kill(d.pid, SIGHUP);
	WAIT_FOR(stat_get(c, "daemon", "capacity") == 32u << 20, "capacity to grow to 32M");
	CHECK(daemon_log_contains(&d, "[limits] keys_per_request"), "keys_per_request reloaded");
	CHECK(daemon_log_contains(&d, "needs a restart") &&
		      daemon_log_contains(&d, "[pool] extent_size"),
	      "extent_size named as needing a restart");
	/* Root keeps the whole pool as its quota: default_quota is for others. */
	CHECK(stat_get(c, "tenant", "quota") == 32u << 20, "root's quota follows capacity");
	/* The daemon still serves, with the new limit (the library splits). */
	CHECK(engine_run(&d, out, sizeof(out), "--model", "tiny", "--prefix", "320", "--suffix",
			 "0", NULL) == 0, "store after reload");
	CHECK(engine_run(&d, out, sizeof(out), "--model", "tiny", "--prefix", "320", "--suffix",
			 "0", "--expect-hits", "20", "--no-store", NULL) == 0, "load after reload");

	/* A broken file: error with file:line, nothing changes. */
	daemon_rewrite_config(&d, "[pool]\ncapacity = lots\n");
	kill(d.pid, SIGHUP);
	WAIT_FOR(daemon_log_contains(&d, "still running on the previous configuration"),
		 "the failed reload to be reported");
	char where[256];
	snprintf(where, sizeof(where), "%s:", d.config);
	CHECK(daemon_log_contains(&d, where) && daemon_log_contains(&d, "capacity = 'lots'"),
	      "the error names the file, line and key");
	CHECK(stat_get(c, "daemon", "capacity") == 32u << 20, "capacity unchanged");
	CHECK(kvt_client_ping(c) == 0, "still serving");

	kvt_ns_close(ns);
	kvt_client_free(c);
	daemon_stop(&d);
	daemon_cleanup(&d);
	return 0;
}
