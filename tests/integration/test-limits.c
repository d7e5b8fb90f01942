/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Every resource a client can create has a limit, and a refused call says
 * which limit refused it.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "harness.h"

int main(void)
{
	struct daemon d;

	daemon_start(&d, "[daemon]\nhandshake_timeout_ms = 300\n"
			 "[limits]\nkeys_per_request = 8\nnamespaces_per_tenant = 1\n"
			 "connections_per_uid = 3\nhandles_per_tenant = 4\n");
	kvt_client *c = client_connect(&d, "one");
	kvt_ns *ns = engine_ns(c, "tiny", 1);
	WAIT_FOR(stat_get(c, "daemon", "clients") == 1, "the start-up probe to close");

	/* A connection that never says HELLO is closed at the deadline; one
	 * that did (c) lives on past it. */
	int silent = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	CHECK(strlen(d.socket) < sizeof(sa.sun_path), "socket path too long");
	memcpy(sa.sun_path, d.socket, strlen(d.socket) + 1);
	CHECK(silent >= 0 && connect(silent, (struct sockaddr *)&sa, sizeof(sa)) == 0,
	      "silent connection");
	char byte;
	WAIT_FOR(recv(silent, &byte, 1, MSG_DONTWAIT) == 0, "the daemon to close a silent connection");
	close(silent);
	CHECK(stat_get(c, "daemon", "handshake_timeouts") == 1, "one handshake timeout counted");
	CHECK(daemon_log_contains(&d, "no HELLO within"), "the log says why");

	/* The library splits batches larger than the daemon's limit. */
	uint8_t keys[20 * 32];
	engine_keys(1, 320, 0, 0, keys, 20);
	uint8_t st[20];
	CHECK(kvt_lookup(ns, keys, 20, 0, st) == 0, "20 keys in batches of 8");

	/* A second namespace exceeds namespaces_per_tenant. */
	kvt_layer_group g = {.n_layers = 1, .attn = KVT_ATTN_MHA, .planes = 2, .kv_heads = 1,
			     .head_bytes = 128};
	kvt_ns_desc desc = {.model = "other", .layer_end = 1, .tp_size = 1, .cp_size = 1,
			    .block_tokens = 16, .n_groups = 1, .groups = &g};
	kvt_ns *ns2 = NULL;
	int r = kvt_ns_open(c, &desc, &ns2);
	CHECK(r == -EMFILE, "second namespace refused: %d", r);
	CHECK(strstr(kvt_client_error(c), "namespaces_per_tenant"), "reason: %s",
	      kvt_client_error(c));
	/* The same namespace again is not a new one. */
	kvt_ns *again = engine_ns(c, "tiny", 1);
	kvt_ns_close(again);

	/* Handles: 4 reservations, the 5th key is refused on its own. */
	kvt_slot_ref refs[6];
	r = kvt_reserve(ns, 0, keys, 6, refs);
	CHECK(r == 4, "4 of 6 reserved (%d)", r);
	CHECK(refs[4].status == -ENOBUFS && refs[5].status == -ENOBUFS, "over the limit: %d %d",
	      refs[4].status, refs[5].status);
	uint64_t h[4];
	for (int i = 0; i < 4; i++)
		h[i] = refs[i].handle;
	int32_t cst[4];
	CHECK(kvt_abort(c, h, 4, cst) == 0 && !cst[0] && !cst[3], "abort");
	CHECK(stat_get(c, "tenant", "handles") == 0, "handles returned");

	/* Connections: 3 per uid; the 4th hears why. */
	kvt_client *c2 = client_connect(&d, "two");
	kvt_client *c3 = client_connect(&d, "three");
	kvt_client *c4 = NULL;
	r = kvt_client_connect(d.socket, "four", &c4);
	CHECK(r < 0 && !c4, "4th connection refused (%d)", r);
	kvt_client_free(c3);
	WAIT_FOR(stat_get(c, "daemon", "clients") == 2, "a connection to close");
	r = kvt_client_connect(d.socket, "four", &c4);
	CHECK(r == 0, "room again after one closed (%d)", r);
	CHECK(stat_get(c, "daemon", "refused") == 1, "one refusal counted");

	kvt_client_free(c4);
	kvt_client_free(c2);
	kvt_ns_close(ns);
	kvt_client_free(c);
	daemon_stop(&d);
	daemon_cleanup(&d);
	return 0;
}
