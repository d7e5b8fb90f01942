/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fair turns at the one event loop.  A session's requests are handled in
 * turns of at most TURN_NSEC of work; a session with work left after its
 * turn (whole requests still buffered, or a long request under way) waits
 * at the end of a queue, and the queue is served one turn at a time, taking
 * its place among the sockets that are ready.  A session's new input is
 * handled at once, in the wakeup that read it, before the next turn of
 * those that wait: so a request that arrives waits for at most the turn
 * under way, however much others have asked for, and a session alone
 * costs nothing more than without turns.  Nor for all of that turn: a
 * turn that finds anything else ready at the loop (every TURN_LOOK_NSEC,
 * once it has done TURN_CUT_MIN_NSEC of work) ends after the part under
 * way.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>
#include <systemd/sd-event.h>

struct session;

/* A turn's share of the loop.  A request checks turn_over() between
 * slices of its work; every turn makes some progress, however short. */
#define TURN_NSEC (50 * 1000)
/* How often a turn looks whether anything else at the loop is ready (a
 * neighbour's request on its socket, a completion, a timer): then the
 * turn ends there, and the work left waits behind it.  A neighbour's
 * one-key request that comes during a long one waits about this long
 * (after the quantum below) rather than for the rest of the turn; each
 * look is a poll(2). */
#define TURN_LOOK_NSEC (10 * 1000)
/* Nor before this much of its work, the quantum: a neighbour that asks
 * back to back, each of its requests cutting a turn, cannot shrink a
 * batched session's turns below it (each cut costs the session a
 * dispatch of the queue's timer and a look at the loop), and a neighbour's
 * request that comes during a turn waits for at most about this long.
 * Cut turns were 14-15 µs of work with 10 µs, 19-20 µs with 15 µs and
 * 23-24 µs with 20 µs; beside a session of 8192-key lookups, with the loop
 * on a CPU of its own, a one-key lookup's median stayed within 2x its
 * time alone in all but 1 of 35, 43 and 33 pairs with 10, 15 and 20 µs,
 * 2 of 20 with 25 µs and 18 of 20 with 40 µs, while what the session of
 * 8192 keys kept of its rate moved less than from pair to pair
 * (docs/benchmarks.md, "Neighbours"). */
#define TURN_CUT_MIN_NSEC (15 * 1000)

struct turn {
	uint64_t start;    /* CLOCK_MONOTONIC, ns */
	uint64_t deadline;
	struct turns *q;   /* whose loop to look at; NULL: the deadline only */
};

struct turns_ops {
	/* Handle s's input for one turn.  \return true when work is left. */
	bool (*work)(struct session *s, const struct turn *t);
	/* s was queued or has left the queue: its socket's events follow
	 * (a queued session does not read). */
	void (*settled)(struct session *s);
};

struct turns {
	TAILQ_HEAD(, session) queue;
	uint32_t n;
	sd_event_source *source; /* serves the queue, a turn a dispatch */
	const struct turns_ops *ops;
	int loop_fd;      /* the loop's epoll descriptor, to look at */
	uint64_t look_at; /* the turn under way looks at the loop from then */
	bool after_cut;   /* the last turn was cut: what cut it goes first */
	uint64_t taken;   /* turns */
	uint64_t yielded; /* turns that ended with work left */
	uint64_t cut;     /* turns ended early: something else was ready */
	uint64_t cut_ns;  /* their work, in all */
};

int turns_init(struct turns *q, sd_event *e, const struct turns_ops *ops);
void turns_done(struct turns *q);
/* s has new input: a turn now (and a place in the queue if work is left). */
void turns_request(struct turns *q, struct session *s);
/* s goes away (it is being freed). */
void turns_forget(struct turns *q, struct session *s);
/* A turn from now, TURN_NSEC long, that ends early once something else
 * at q's loop is ready (q NULL: the deadline only). */
struct turn turn_begin(struct turns *q);
/* The turn's time is up, or (every TURN_LOOK_NSEC after its first
 * TURN_CUT_MIN_NSEC) something else at the loop is ready. */
bool turn_over(const struct turn *t);
