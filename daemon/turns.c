/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fair turns at the event loop: a queue of sessions with work left, served
 * round-robin by one timer, always due, armed for one dispatch at a time,
 * so that sockets that became ready since the last turn are read (and,
 * when the queue is empty, served) before the next.
 */
#include <errno.h>
#include <time.h>

#include "macro.h"
#include "session.h"
#include "turns.h"

bool turn_over(const struct turn *t)
{
	return kvt_now_ns() >= t->deadline;
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
	struct turn t = {.deadline = kvt_now_ns() + TURN_NSEC};

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
