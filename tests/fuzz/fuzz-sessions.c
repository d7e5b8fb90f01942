/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Four clients of one tenant at once, their messages interleaved in pieces
 * as the input says, sessions closed and opened again in between: handles
 * taken on one connection used on another, a connection closing with
 * reservations and leases open (its handles quarantined while its process
 * lives), replies and notices queued for clients that do not read.  Two of
 * the clients belong to this process and two to its parent, so the
 * quarantine of a closed session's handles outlives the input and is cut
 * short by the daemon's teardown, as at shutdown.  No crash, no leak.
 *
 * The input is a sequence of records: a control byte, a length byte, then
 * that many bytes (fewer at the end) for one client:
 *   bits 0-1  which client;
 *   bit 2     close that client's connection first and open a fresh one.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz-daemon.h"
#include "fuzz.h"
#include "kvt-proto.h"

#define CLIENTS 4

static pid_t owner(unsigned client)
{
	return client & 1 ? getppid() : getpid();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_daemon d;
	int peers[CLIENTS];

	fuzz_daemon_new(&d);
	for (unsigned i = 0; i < CLIENTS; i++)
		peers[i] = fuzz_daemon_connect(&d, owner(i));
	for (size_t off = 0; off + 2 <= size;) {
		unsigned ctl = data[off], k = ctl & (CLIENTS - 1);
		size_t n = data[off + 1];
		off += 2;
		if (n > size - off)
			n = size - off;
		if (ctl & 4) {
			if (peers[k] >= 0)
				close(peers[k]);
			fuzz_daemon_run(&d, peers, CLIENTS);
			peers[k] = fuzz_daemon_connect(&d, owner(k));
		}
		/* A client the daemon closed stays closed until reopened. */
		if (peers[k] >= 0 && send(peers[k], data + off, n, MSG_NOSIGNAL) < 0) {
			close(peers[k]);
			peers[k] = -1;
		}
		off += n;
		fuzz_daemon_run(&d, peers, CLIENTS);
	}
	for (unsigned i = 0; i < CLIENTS; i++)
		if (peers[i] >= 0)
			close(peers[i]);
	memset(peers, -1, sizeof(peers));
	fuzz_daemon_run(&d, peers, CLIENTS);
	fuzz_daemon_free(&d);
	return 0;
}

/* ---- seeds: one life spread over the clients --------------------------- */

struct seed {
	struct kvt_buf in;
	unsigned n;	  /* messages so far */
	unsigned piece;	  /* bytes per record: whole messages when 255 */
	unsigned reopen;  /* reopen the client that sent message n (0: never) */
};

static void record(struct seed *s, unsigned ctl, const uint8_t *p, size_t len)
{
	uint8_t h[2] = {(uint8_t)ctl, (uint8_t)len};
	kvt_put_bytes(&s->in, h, 2);
	if (len)
		kvt_put_bytes(&s->in, p, len);
}

/* Every client says HELLO and opens the namespace; each later message goes
 * to the next client in turn, so a reservation is committed, and a lease
 * released, by another connection than the one that took it. */
static void add(const uint8_t *msg, size_t len, void *userdata)
{
	struct seed *s = userdata;
	unsigned first = s->n < FUZZ_FIRST_OP ? 0 : (s->n - FUZZ_FIRST_OP) % CLIENTS;
	unsigned last = s->n < FUZZ_FIRST_OP ? CLIENTS - 1 : first;

	/* The previous sender's session ends, handles open, and it starts
	 * anew (without HELLO: what it sends next is refused). */
	if (s->reopen && s->n == s->reopen + 1)
		record(s, 4 | ((s->reopen - FUZZ_FIRST_OP) % CLIENTS), NULL, 0);
	for (unsigned k = first; k <= last; k++)
		for (size_t off = 0; off < len; off += s->piece) {
			size_t take = len - off < s->piece ? len - off : s->piece;
			record(s, k, msg + off, take);
		}
	s->n++;
}

static void emit_life(fuzz_seed_fn emit, void *ud, unsigned piece, unsigned reopen)
{
	struct seed s = {.piece = piece, .reopen = reopen};

	kvt_buf_init(&s.in);
	fuzz_life_messages(add, &s);
	emit(s.in.data, s.in.len, ud);
	kvt_buf_free(&s.in);
}

void fuzz_seeds(fuzz_seed_fn emit, void *ud)
{
	emit_life(emit, ud, 255, 0);
	/* In 7-byte pieces: every message split across many records. */
	emit_life(emit, ud, 7, 0);
	/* The client that reserved the first shards (message 2) reconnects
	 * right after, its reservations still open. */
	emit_life(emit, ud, 255, FUZZ_FIRST_OP);
	/* The client that acquired (message 6) reconnects while leasing. */
	emit_life(emit, ud, 255, 6);
}
