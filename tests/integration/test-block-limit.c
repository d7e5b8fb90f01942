/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The largest block is the daemon's limit (one io_uring buffer, 1 GiB),
 * not the wire's: a namespace whose block is larger is refused with
 * -EFBIG and a reason, the daemon's log says why, and the connection
 * stays usable.
 */
#include <errno.h>
#include <string.h>

#include "harness.h"

int main(void)
{
	struct daemon d;

	daemon_start(&d, "");
	kvt_client *c = client_connect(&d, "big");

	/* 32 layers x 2 planes x 8 heads x 1 KiB x 4096 tokens = 2 GiB. */
	kvt_layer_group g = {.n_layers = 32, .attn = KVT_ATTN_MHA, .planes = 2, .kv_heads = 8,
			     .head_bytes = 1024};
	kvt_ns_desc desc = {.model = "huge-blocks", .layer_end = 32, .tp_size = 1, .cp_size = 1,
			    .block_tokens = 4096, .n_groups = 1, .groups = &g};
	kvt_ns *ns = NULL;
	int r = kvt_ns_open(c, &desc, &ns);
	CHECK(r == -EFBIG && !ns, "a 2 GiB block refused with -EFBIG (%d)", r);
	CHECK(strstr(kvt_client_error(c), "exceeds 1 GiB"), "reason: %s", kvt_client_error(c));
	CHECK(daemon_log_contains(&d, "one block is 2048 MiB"), "the daemon's log says why");

	/* Refused, not broken: the connection and the tenant serve on. */
	CHECK(kvt_client_ping(c) == 0, "ping after the refusal");
	kvt_ns *small = engine_ns(c, "tiny", 1);
	CHECK(small != NULL, "a namespace of ordinary blocks opens");
	CHECK(stat_get(c, "daemon", "malformed") == 0, "no connection closed as malformed");

	kvt_ns_close(small);
	kvt_client_free(c);
	daemon_stop(&d);
	daemon_cleanup(&d);
	return 0;
}
