/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvtierd.conf: each kind of error in [daemon], [pool], [limits] and the
 * file syntax, with the file:line it must be reported at (stderr is
 * captured around each load); several errors in one file; a file that
 * is not there.  Tenants' errors are test-config-tenants.c's, the NVMe
 * tier's test-config-nvme.c's.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"
#include "config-util.h"

static void test_errors(void)
{
	static const struct bad_case cases[] = {
		{ "unknown section", "# c\n\n[daemon]\nquarantine_ms = 1\n[bogus]\nkey = 1\n",
		  6, "unknown section [bogus]" },
		{ "unknown key", "[pool]\ncapacity = 1G\n\n; x\ncapacty = 2G\n", 5,
		  "capacty" },
		{ "unknown key in a later section",
		  "[pool]\ncapacity = 1G\n[limits]\nconnections = 5\nfds = 3\n", 5,
		  "fds" },
		{ "size 12Q", "[daemon]\n\n[pool]\ncapacity = 12Q\n", 4, "capacity" },
		{ "admin group unknown", "[daemon]\nlog_level = info\nadmin_groups = kvt-no-such-group\n",
		  3, "no such group" },
		{ "admin groups empty", "[daemon]\nadmin_groups = ,\n", 2, "admin_groups" },
		{ "eviction clock", "[pool]\ncapacity = 1G\neviction = clock\n", 3, "s3fifo" },
		{ "nvme_quota 1X", "[tenant.a]\nuids = 5\nnvme_quota = 1X\n", 3, "nvme_quota" },
		{ "codecs fp9", "[tenant.a]\nuids = 5\ncodecs = none fp9\n", 3,
		  "one or more of none, fp8-e4m3, int4" },
		{ "codecs empty", "[tenant.a]\ncodecs = ,\n", 2, "codecs" },
		{ "default_nvme_quota -3", "[tenants]\ndefault_nvme_quota = -3\n", 2,
		  "default_nvme_quota" },
		{ "size -1", "[pool]\n\n\ncapacity = -1\n", 4, "capacity" },
		{ "size 99999999999999999999G", "[pool]\ncapacity = 99999999999999999999G\n",
		  2, "capacity" },
		{ "size 2^64", "[pool]\nextent_size = 16777216T\n", 2, "extent_size" },
		{ "size empty", "[tenants]\n\ndefault_quota =\n", 3, "default_quota" },
		{ "size with a space", "[limits]\noutput_bytes = 16 M\n", 2, "output_bytes" },
		{ "size 1.5Q", "[pool]\ncapacity = 1.5Q\n", 2, "capacity" },
		{ "listen without a port", "[metrics]\nlisten = 127.0.0.1\n", 2, "ADDRESS:PORT" },
		{ "listen by name", "[metrics]\nlisten = localhost:9464\n", 2, "ADDRESS:PORT" },
		{ "listen IPv6 bare", "[metrics]\nlisten = ::1:9464\n", 2, "ADDRESS:PORT" },
		{ "listen port 65536", "[metrics]\nlisten = 127.0.0.1:65536\n", 2, "listen" },
		{ "listen port -1", "[metrics]\nlisten = 127.0.0.1:-1\n", 2, "listen" },
		{ "listen port 9x", "[metrics]\n\nlisten = [::1]:9x\n", 3, "listen" },
		{ "listen empty", "[metrics]\nlisten =\n", 2, "listen" },
		{ "bad enum hugepages", "[pool]\nhugepages = maybe\n", 2, "hugepages" },
		{ "bad enum lock", "\n[pool]\nlock = true\n", 3, "lock" },
		{ "bad enum case", "[pool]\nlock = YES\n", 2, "lock" },
		{ "bad enum unknown", "[tenants]\nunknown = deny\n", 2, "unknown" },
		{ "bad enum log_level", "[daemon]\nlog_level = verbose\n", 2, "log_level" },
		{ "bad number", "[limits]\n# a\n# b\nconnections = 12x\n", 4, "connections" },
		{ "negative number", "[limits]\nconnections_per_uid = -1\n", 2,
		  "connections_per_uid" },
		{ "number over u32", "[limits]\nhandles_per_tenant = 4294967296\n", 2,
		  "handles_per_tenant" },
		{ "number empty", "[daemon]\nquarantine_ms =\n", 2, "quarantine_ms" },
		{ "relative socket path", "[daemon]\nsocket = run/kvtierd.sock\n", 2,
		  "socket" },
		{ "relative runtime_dir", "[daemon]\n\nruntime_dir = ./run\n", 3,
		  "runtime_dir" },
		{ "socket path too long for sun_path",
		  "[daemon]\nsocket = /aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
		  2, "socket" },
		{ "syntax error", "[pool]\ncapacity = 1G\n\nthis is not a setting\n", 4,
		  "syntax" },
		{ "syntax error: unclosed section", "# a\n[pool\ncapacity = 1G\n", 2,
		  "syntax" },
		{ "key outside any section", "capacity = 1G\n", 1, NULL },
		{ "error after a long comment",
		  "# 0123456789012345678901234567890123456789012345678901234567890123456789"
		  "0123456789012345678901234567890123456789012345678901234567890123456789"
		  "0123456789012345678901234567890123456789\n"
		  "[pool]\nbogus = 1\n",
		  3, "bogus" },
		/* An over-long line is refused, at its own line. */
		{ "over-long line",
		  "[pool]\n# 0123456789012345678901234567890123456789012345678901234567890123456789"
		  "0123456789012345678901234567890123456789012345678901234567890123456789"
		  "0123456789012345678901234567890123456789012345678901234567890123456789\n"
		  "lock = no\n",
		  2, "longer than" },
		{ "bad enum numa", "[pool]\nnuma = on\n", 2, "numa" },
		{ "bad enum numa case", "[pool]\n\nnuma = Auto\n", 3, "numa" },
		{ "numa empty", "[pool]\nnuma =\n", 2, "numa" },
		{ "relative topology_root", "[pool]\ntopology_root = sys/fake\n", 2,
		  "topology_root" },
		{ "empty topology_root", "[pool]\n#\ntopology_root =\n", 3,
		  "topology_root" },
	};

	RUN_BAD_CASES(cases);
}

/* Several errors: each is reported at its own line. */
static void test_several_errors(void)
{
	struct config c;
	char *err;

	CHECK(config_defaults(&c) == 0);
	const char *path = write_conf("multi.conf",
				      "[pool]\ncapacity = 1X\n\n[limits]\nconnections = z\n");
	CHECK(load_captured(&c, path, &err) < 0);
	char w1[160], w2[160];
	snprintf(w1, sizeof(w1), "%s:2:", path);
	snprintf(w2, sizeof(w2), "%s:5:", path);
	CHECK(strstr(err, w1) && strstr(err, w2), "%s", err);
	free(err);
	config_free(&c);
}

/* A file that is not there. */
static void test_missing_file(void)
{
	struct config c;
	char *err;

	CHECK(config_defaults(&c) == 0);
	char missing[128];
	snprintf(missing, sizeof(missing), "%s/missing.conf", conf_dir);
	CHECK(load_captured(&c, missing, &err) == -ENOENT);
	CHECK(strstr(err, missing) != NULL, "%s", err);
	free(err);
	config_free(&c);
}

int main(void)
{
	config_test_begin();
	test_errors();
	test_several_errors();
	test_missing_file();
	return config_test_end("test-config-errors");
}
