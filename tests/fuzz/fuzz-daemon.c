/* SPDX-License-Identifier: Apache-2.0 */
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <syslog.h>
#include <unistd.h>

#include "fuzz-daemon.h"
#include "kvt-proto.h"
#include "log.h"
#include "process.h"
#include "session.h"

void fuzz_daemon_new(struct fuzz_daemon *d)
{
	log_set_max_level(getenv("KVT_FUZZ_VERBOSE") ? LOG_DEBUG : LOG_CRIT);
	if (config_defaults(&d->c) < 0)
		abort();
	d->c.capacity = 8u << 20;
	d->c.extent_size = 2u << 20;
	d->c.max_output_bytes = 2u << 20;
	if (manager_new(&d->c, &d->m) < 0)
		abort();
	pool_probe(&d->m->pool);
}

void fuzz_daemon_free(struct fuzz_daemon *d)
{
	manager_free(d->m);
	config_free(&d->c);
}

int fuzz_daemon_connect(struct fuzz_daemon *d, pid_t pid)
{
	struct session *s;
	struct process *p;
	int sv[2];

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) < 0)
		abort();
	if (process_get(d->m, pid, -1, &p) < 0 || session_new(d->m, sv[0], &s) < 0)
		abort();
	s->process = p;
	return sv[1];
}

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

static void drain_all(const int *peers, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		if (peers[i] >= 0)
			drain(peers[i]);
}

void fuzz_daemon_run(struct fuzz_daemon *d, const int *peers, unsigned n)
{
	for (int i = 0; i < 64; i++) {
		drain_all(peers, n);
		if (sd_event_run(d->m->event, 0) <= 0)
			break;
	}
	drain_all(peers, n);
}

static void finish(struct kvt_buf *b, fuzz_msg_fn emit, void *ud)
{
	kvt_msg_finish(b, 0);
	emit(b->data, b->len, ud);
}

void fuzz_life_messages(fuzz_msg_fn emit, void *ud)
{
	struct kvt_buf b, ident;
	uint8_t keys[4 * KVT_KEY_SIZE];
	uint64_t rid = 0;

	memset(keys, 0x33, sizeof(keys));
	kvt_buf_init(&b);
	kvt_buf_init(&ident);

	struct kvt_hello_req hr = {1, 1, KVT_FEATURES_ALL, "fuzz", ""};
	kvt_enc_hello_req(&b, ++rid, &hr);
	finish(&b, emit, ud);

	struct kvt_identity id = {.key_scheme = 1, .model = "fuzz", .layer_end = 1,
				  .tp_size = 2, .cp_size = 1, .block_tokens = 16, .n_groups = 1};
	id.groups[0] = (struct kvt_id_group){1, KVT_ATTN_MHA, 0, 2, 2, 128, 1, 0};
	kvt_identity_encode(&id, &ident);
	struct kvt_ns_open_req nr = {ident.data, (uint32_t)ident.len};
	kvt_enc_ns_open_req(&b, 1, ++rid, &nr);
	finish(&b, emit, ud);

	struct kvt_keys_req kr = {1, 0, 4, keys};
	kvt_enc_keys_req(&b, 1, KVT_OP_RESERVE, ++rid, &kr);
	finish(&b, emit, ud);
	kr.arg = 1;
	kvt_enc_keys_req(&b, 1, KVT_OP_RESERVE, ++rid, &kr);
	finish(&b, emit, ud);
	struct kvt_handle_arg ha[8];
	for (int i = 0; i < 8; i++)
		ha[i] = (struct kvt_handle_arg){(UINT64_C(1) << 32) | (uint64_t)(i + 1), 1};
	kvt_enc_handles_req(&b, 1, KVT_OP_COMMIT, ++rid, ha, 8);
	finish(&b, emit, ud);
	kr.arg = KVT_LOOKUP_TOUCH;
	kvt_enc_keys_req(&b, 1, KVT_OP_LOOKUP, ++rid, &kr);
	finish(&b, emit, ud);
	kr.arg = KVT_LOOKUP_TOUCH | KVT_LOOKUP_SETTLED;
	kvt_enc_keys_req(&b, 1, KVT_OP_LOOKUP, ++rid, &kr);
	finish(&b, emit, ud);
	kr.arg = 0;
	kvt_enc_keys_req(&b, 1, KVT_OP_ACQUIRE, ++rid, &kr);
	finish(&b, emit, ud);
	for (int i = 0; i < 4; i++)
		ha[i] = (struct kvt_handle_arg){(UINT64_C(2) << 32) | (uint64_t)(i + 1), 0};
	kvt_enc_handles_req(&b, 1, KVT_OP_RELEASE, ++rid, ha, 4);
	finish(&b, emit, ud);
	kvt_enc_keys_req(&b, 1, KVT_OP_TOUCH, ++rid, &kr);
	finish(&b, emit, ud);
	kvt_enc_stats_req(&b, 1, ++rid, KVT_STATS_ALL);
	finish(&b, emit, ud);
	kvt_msg_begin(&b, 1, KVT_OP_PING, 0, ++rid);
	finish(&b, emit, ud);
	kvt_enc_keys_req(&b, 1, KVT_OP_DELETE, ++rid, &kr);
	finish(&b, emit, ud);
	struct kvt_evict_req er = {1, 1, 0};
	kvt_enc_evict_req(&b, 1, ++rid, &er);
	finish(&b, emit, ud);
	kvt_enc_handles_req(&b, 1, KVT_OP_ABORT, ++rid, ha, 4);
	finish(&b, emit, ud);

	kvt_buf_free(&ident);
	kvt_buf_free(&b);
}
