/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A live daemon session over a socketpair, fed arbitrary bytes in writes of
 * at most 143 bytes (so every message is split at every possible place):
 * the daemon must neither crash nor leak, whatever a client sends.  Each
 * input gets a fresh manager, as a fresh daemon would.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <syslog.h>
#include <unistd.h>

#include "config.h"
#include "fuzz.h"
#include "kvt-proto.h"
#include "log.h"
#include "manager.h"
#include "process.h"
#include "session.h"

#define CHUNK 143

static void drain(int fd)
{
	uint8_t buf[65536];
	for (;;) {
		int fds[8];
		unsigned n_fds = 0;
		ssize_t n = kvt_recvmsg(fd, buf, sizeof(buf), fds, &n_fds, 8);
		for (unsigned i = 0; i < n_fds; i++)
			close(fds[i]);
		if (n <= 0)
			return;
	}
}

static void run_loop(struct manager *m, int peer)
{
	for (int i = 0; i < 64; i++) {
		drain(peer);
		if (sd_event_run(m->event, 0) <= 0)
			break;
	}
	drain(peer);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct config c;
	struct manager *m;
	struct session *s;
	struct process *p;
	int sv[2];

	log_set_max_level(getenv("KVT_FUZZ_VERBOSE") ? LOG_DEBUG : LOG_CRIT);
	if (config_defaults(&c) < 0)
		abort();
	c.capacity = 8u << 20;
	c.extent_size = 2u << 20;
	c.max_output_bytes = 2u << 20;
	if (manager_new(&c, &m) < 0)
		abort();
	pool_probe(&m->pool);
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) < 0)
		abort();
	if (process_get(m, getpid(), -1, &p) < 0 || session_new(m, sv[0], &s) < 0)
		abort();
	s->process = p;

	for (size_t off = 0; off < size; off += CHUNK) {
		size_t n = size - off < CHUNK ? size - off : CHUNK;
		if (send(sv[1], data + off, n, MSG_NOSIGNAL) < 0)
			break; /* the daemon closed us: a malformed message */
		run_loop(m, sv[1]);
	}
	close(sv[1]);
	run_loop(m, -1);
	manager_free(m);
	config_free(&c);
	return 0;
}

static uint64_t rid;

static void hello(struct kvt_buf *all, struct kvt_buf *b)
{
	struct kvt_hello_req hr = {1, 1, KVT_FEATURES_ALL, "fuzz", ""};
	kvt_enc_hello_req(b, ++rid, &hr);
	kvt_msg_finish(b, 0);
	kvt_put_bytes(all, b->data, b->len);
}

static void add(struct kvt_buf *all, struct kvt_buf *b)
{
	kvt_msg_finish(b, 0);
	kvt_put_bytes(all, b->data, b->len);
}

void fuzz_seeds(fuzz_seed_fn emit, void *ud)
{
	struct kvt_buf all, b, ident;
	uint8_t keys[4 * KVT_KEY_SIZE];

	memset(keys, 0x33, sizeof(keys));
	kvt_buf_init(&all);
	kvt_buf_init(&b);
	kvt_buf_init(&ident);

	hello(&all, &b);
	emit(all.data, all.len, ud);

	struct kvt_identity id = {.key_scheme = 1, .model = "fuzz", .layer_end = 1,
				  .tp_size = 2, .cp_size = 1, .block_tokens = 16, .n_groups = 1};
	id.groups[0] = (struct kvt_id_group){1, KVT_ATTN_MHA, 0, 2, 2, 128, 1, 0};
	kvt_identity_encode(&id, &ident);
	struct kvt_ns_open_req nr = {ident.data, (uint32_t)ident.len};
	kvt_enc_ns_open_req(&b, 1, ++rid, &nr);
	add(&all, &b);
	emit(all.data, all.len, ud);

	/* A whole life: both shards reserved and committed, looked up,
	 * acquired, released, touched, deleted, listed, evicted. */
	struct kvt_keys_req kr = {1, 0, 4, keys};
	kvt_enc_keys_req(&b, 1, KVT_OP_RESERVE, ++rid, &kr);
	add(&all, &b);
	kr.arg = 1;
	kvt_enc_keys_req(&b, 1, KVT_OP_RESERVE, ++rid, &kr);
	add(&all, &b);
	struct kvt_handle_arg ha[8];
	for (int i = 0; i < 8; i++)
		ha[i] = (struct kvt_handle_arg){(UINT64_C(1) << 32) | (uint64_t)(i + 1), 1};
	kvt_enc_handles_req(&b, 1, KVT_OP_COMMIT, ++rid, ha, 8);
	add(&all, &b);
	emit(all.data, all.len, ud);
	kr.arg = KVT_LOOKUP_TOUCH;
	kvt_enc_keys_req(&b, 1, KVT_OP_LOOKUP, ++rid, &kr);
	add(&all, &b);
	kr.arg = 0;
	kvt_enc_keys_req(&b, 1, KVT_OP_ACQUIRE, ++rid, &kr);
	add(&all, &b);
	for (int i = 0; i < 4; i++)
		ha[i] = (struct kvt_handle_arg){(UINT64_C(2) << 32) | (uint64_t)(i + 1), 0};
	kvt_enc_handles_req(&b, 1, KVT_OP_RELEASE, ++rid, ha, 4);
	add(&all, &b);
	kvt_enc_keys_req(&b, 1, KVT_OP_TOUCH, ++rid, &kr);
	add(&all, &b);
	kvt_enc_stats_req(&b, 1, ++rid, KVT_STATS_ALL);
	add(&all, &b);
	kvt_msg_begin(&b, 1, KVT_OP_PING, 0, ++rid);
	add(&all, &b);
	kvt_enc_keys_req(&b, 1, KVT_OP_DELETE, ++rid, &kr);
	add(&all, &b);
	struct kvt_evict_req er = {1, 1, 0};
	kvt_enc_evict_req(&b, 1, ++rid, &er);
	add(&all, &b);
	kvt_enc_handles_req(&b, 1, KVT_OP_ABORT, ++rid, ha, 4);
	add(&all, &b);
	emit(all.data, all.len, ud);

	kvt_buf_free(&ident);
	kvt_buf_free(&b);
	kvt_buf_free(&all);
}
