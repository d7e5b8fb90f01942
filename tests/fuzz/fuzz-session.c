/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A live daemon session over a socketpair, fed arbitrary bytes in writes of
 * at most 143 bytes (so every message is split at every possible place):
 * the daemon must neither crash nor leak, whatever a client sends.  Each
 * input gets a fresh manager, as a fresh daemon would.
 */
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz-daemon.h"
#include "fuzz.h"
#include "kvt-proto.h"

#define CHUNK 143

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_daemon d;

	fuzz_daemon_new(&d);
	int peer = fuzz_daemon_connect(&d, getpid());
	for (size_t off = 0; off < size; off += CHUNK) {
		size_t n = size - off < CHUNK ? size - off : CHUNK;
		if (send(peer, data + off, n, MSG_NOSIGNAL) < 0)
			break; /* the daemon closed us: a malformed message */
		fuzz_daemon_run(&d, &peer, 1);
	}
	close(peer);
	peer = -1;
	fuzz_daemon_run(&d, &peer, 1);
	fuzz_daemon_free(&d);
	return 0;
}

/* Seeds: the life's prefix after HELLO, after NS_OPEN, after the commit,
 * and the whole of it. */
struct seeds {
	struct kvt_buf all;
	unsigned n;
	fuzz_seed_fn emit;
	void *ud;
};

static void add(const uint8_t *msg, size_t len, void *userdata)
{
	struct seeds *s = userdata;
	kvt_put_bytes(&s->all, msg, len);
	if (++s->n == 1 || s->n == 2 || s->n == 5)
		s->emit(s->all.data, s->all.len, s->ud);
}

void fuzz_seeds(fuzz_seed_fn emit, void *ud)
{
	struct seeds s = {.emit = emit, .ud = ud};

	kvt_buf_init(&s.all);
	fuzz_life_messages(add, &s);
	emit(s.all.data, s.all.len, ud);
	kvt_buf_free(&s.all);
}
