/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvtierd.conf: the ranges of [pool], [limits] and [daemon] values,
 * checked once the file has parsed (reported with the file, no line),
 * values on and inside the bounds, and the bounds landing as written.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"
#include "config-util.h"

static void test_ranges(void)
{
	static const struct bad_case cases[] = {
		{ "extent_size below 2M", "[pool]\nextent_size = 1M\n", 0, "extent_size" },
		{ "extent_size 2M - 1", "[pool]\nextent_size = 2097151\n", 0, "extent_size" },
		{ "extent_size above 1G",
		  "[pool]\ncapacity = 8G\nextent_size = 2G\n", 0, "extent_size" },
		{ "capacity below extent_size",
		  "[pool]\ncapacity = 32M\nextent_size = 64M\n", 0, "capacity" },
		{ "keys_per_request 0", "[limits]\nkeys_per_request = 0\n", 0,
		  "keys_per_request" },
		{ "keys_per_request 9000", "[limits]\nkeys_per_request = 9000\n", 0,
		  "keys_per_request" },
		{ "keys_per_request 8193", "[limits]\nkeys_per_request = 8193\n", 0,
		  "keys_per_request" },
		{ "connections 0", "[limits]\nconnections = 0\n", 0, "limits" },
		{ "handshake_timeout_ms 99", "[daemon]\nhandshake_timeout_ms = 99\n", 0,
		  "handshake_timeout_ms" },
		{ "handshake_timeout_ms 600001", "[daemon]\nhandshake_timeout_ms = 600001\n", 0,
		  "handshake_timeout_ms" },
		{ "connections_per_uid 0", "[limits]\nconnections_per_uid = 0\n", 0, "limits" },
		{ "namespaces 0", "[limits]\nnamespaces_per_tenant = 0\n", 0, "limits" },
		{ "handles 0", "[limits]\nhandles_per_tenant = 0\n", 0, "limits" },
		{ "partial_block_ms 99", "[limits]\npartial_block_ms = 99\n", 0, "partial_block_ms" },
		{ "partial_block_ms 3600001", "[limits]\npartial_block_ms = 3600001\n", 0,
		  "partial_block_ms" },
		{ "output_bytes below 2M", "[limits]\noutput_bytes = 1M\n", 0,
		  "output_bytes" },
		{ "output_bytes above 1G", "[limits]\noutput_bytes = 1025M\n", 0,
		  "output_bytes" },
		/* Twice it is 2^64: a check of "twice the limit" that wraps
		 * to 0 would close every connection at its first reply. */
		{ "output_bytes 2^63", "[limits]\noutput_bytes = 8388608T\n", 0,
		  "output_bytes" },
	};
	static const char *good[] = {
		"[pool]\nextent_size = 2M\n",
		"[pool]\ncapacity = 1G\nextent_size = 1G\n",
		"[pool]\ncapacity = 64M\nextent_size = 64M\n",
		"[limits]\nkeys_per_request = 1\n",
		"[limits]\nkeys_per_request = 8192\n",
		"[limits]\noutput_bytes = 2M\n",
		"[limits]\noutput_bytes = 1G\n",
		"[limits]\nconnections = 1\nconnections_per_uid = 1\n"
		"namespaces_per_tenant = 1\nhandles_per_tenant = 1\n",
		"[limits]\nconnections = 4294967295\n",
		"[pool]\nnuma = off\ntopology_root = /\n",
	};
	struct config c;
	char *err;

	RUN_BAD_CASES(cases);
	RUN_GOOD_CASES(good);

	/* The bounds land as written. */
	CHECK(config_defaults(&c) == 0);
	CHECK(load_captured(&c, write_conf("edge.conf",
					   "[pool]\ncapacity = 1G\nextent_size = 1G\n"
					   "[limits]\nconnections = 4294967295\n"),
			    &err) == 0);
	free(err);
	CHECK(c.extent_size == (UINT64_C(1) << 30) && c.capacity == c.extent_size);
	CHECK(c.max_connections == UINT32_MAX);
	config_free(&c);
}

int main(void)
{
	config_test_begin();
	test_ranges();
	return config_test_end("test-config-ranges");
}
