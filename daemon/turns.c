/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fair turns at the event loop: a queue of sessions with work left, served
 * round-robin by one timer, always due, armed for one dispatch at a time,
 * so that sockets that became ready since the last turn are read (and,
 * when the queue is empty, served) before the next.
 */
#include <errno.h>
#include <poll.h>
#include <time.h>

#include "macro.h"
#include "session.h"
#include "turns.h"

struct turn turn_begin(struct turns *q)
{
	uint64_t now = kvt_now_ns();

	if (q)
		q->look_at = now + TURN_CUT_MIN_NSEC;
	return (struct turn){.start = now, .deadline = now + TURN_NSEC, .q = q};
}

/* The loop's epoll descriptor is readable while any descriptor it watches
 * is: a socket with a request, a timer due, a completion.  A turn's own
 * session does not count once it is queued (it reads nothing then), nor
 * does the queue's timer, which is read at the dispatch that serves it. */
static bool others_ready(const struct turns *q)
{
	struct pollfd p = {.fd = q->loop_fd, .events = POLLIN};

	return q->loop_fd >= 0 && poll(&p, 1, 0) > 0;
}

bool turn_over(const struct turn *t)
{
	struct turns *q = t->q;
	uint64_t now = kvt_now_ns();

	if (now >= t->deadline)
		return true;
	if (!q || now < q->look_at)
		return false;
	q->look_at = now + TURN_LOOK_NSEC;
	if (!others_ready(q))
		return false;
	q->cut++;
	q->cut_ns += now - t->start;
	q->after_cut = true;
	return true;
}

/* Due at once: it becomes pending when the loop next looks at its
 * clocks, after the sockets that were ready before it. */
static void arm(struct turns *q)
{
	sd_event_source_set_time(q->source, 1);
	sd_event_source_set_enabled(q->source, SD_EVENT_ONESHOT);
}

static void enqueue(struct turns *q, struct session *s)
{
	s->queued = true;
	TAILQ_INSERT_TAIL(&q->queue, s, turn_link);
	if (q->n++ == 0)
		arm(q);
}

static struct session *dequeue(struct turns *q)
{
	struct session *s = TAILQ_FIRST(&q->queue);
	if (!s)
		return NULL;
	TAILQ_REMOVE(&q->queue, s, turn_link);
	s->queued = false;
	if (--q->n == 0)
		sd_event_source_set_enabled(q->source, SD_EVENT_OFF);
	return s;
}

/* One turn of s; back to the end of the queue if work is left. */
static void take_turn(struct turns *q, struct session *s)
{
	struct turn t = turn_begin(q);

	q->taken++;
	if (q->ops->work(s, &t) && !s->dead) {
		q->yielded++;
		enqueue(q, s);
	}
	q->ops->settled(s);
}

static int on_turn(sd_event_source *src, uint64_t usec, void *userdata)
{
	struct turns *q = userdata;

	/* A turn was cut for what is ready, but the queue's timer can become
	 * pending in the same look at the loop as that, and then their order
	 * is not kept: what is ready goes first.  Once: the next dispatch
	 * takes the turn whatever is ready then. */
	if (q->after_cut) {
		q->after_cut = false;
		if (others_ready(q)) {
			arm(q);
			return 0;
		}
	}
	struct session *s = dequeue(q);

	if (s && !s->dead)
		take_turn(q, s);
	/* Once a dispatch: sockets that became ready meanwhile are older
	 * than its next turn and go first. */
	if (q->n > 0)
		arm(q);
	return 0;
}

int turns_init(struct turns *q, sd_event *e, const struct turns_ops *ops)
{
	int r;

	TAILQ_INIT(&q->queue);
	q->n = 0;
	q->ops = ops;
	q->loop_fd = sd_event_get_fd(e);
	/* A timer that is always due, not a deferred source: a deferred
	 * source stays first among sources of its priority for as long as
	 * it is re-armed, and one of a lower priority waits for ever behind
	 * one that is always pending (write-back that keeps kicking itself);
	 * a due timer takes its place in the order in which sources became
	 * ready, like a socket. */
	r = sd_event_add_time(e, &q->source, CLOCK_MONOTONIC, 1, 1, on_turn, q);
	if (r < 0)
		return r;
	return sd_event_source_set_enabled(q->source, SD_EVENT_OFF);
}

void turns_done(struct turns *q)
{
	q->source = sd_event_source_disable_unref(q->source);
}

/* A turn at once, also when others wait: they have had a turn since they
 * last waited for nothing, and s, which has not, is served before their
 * next one.  A session that keeps sending gets no more than they: while
 * it has work left it waits in the queue and reads nothing. */
void turns_request(struct turns *q, struct session *s)
{
	if (s->queued || s->dead)
		return;
	take_turn(q, s);
}

void turns_forget(struct turns *q, struct session *s)
{
	if (!s->queued)
		return;
	TAILQ_REMOVE(&q->queue, s, turn_link);
	s->queued = false;
	if (--q->n == 0)
		sd_event_source_set_enabled(q->source, SD_EVENT_OFF);
}
