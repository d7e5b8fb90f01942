/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The LRU: victim order, touch, remove, operations on unlinked nodes, and a
 * random walk against a reference array kept in use order, with the list
 * checked in both directions after every step.
 *
 * The table of policies: every row complete, names that round-trip, and
 * for every policy in it a random walk of stores, hits, pins and
 * evictions in which the victim is always a listed entry, asking twice
 * names the same one, the count is right and the walk from the oldest
 * visits every listed entry once.
 *
 * LRU, S3-FIFO, SIEVE and ARC: the rules of the last three one by one,
 * and for each of the four a random walk (inserts of new and returning
 * entries, hits, pins, evictions of blocks that are later stored again)
 * against a model kept in plain arrays, with the queues, hit counts and
 * victims compared after every step.  test-evict-lrfu has LRFU's rules.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "evict-arc.h"
#include "evict-s3fifo.h"
#include "evict.h"
#include "keyhash.h"
#include "../check.h"
#define RNG_SEED UINT64_C(0x13198a2e03707344)
#include "rng.h"

#define N_NODES 64

/* Places fingerprints in the ghost lists: fixed, so runs repeat. */
static struct keyhash test_hash;

struct block {
	int id;
	struct evict_node node;
};

static struct block blocks[N_NODES];

static int id_of(const struct evict_node *n)
{
	if (!n)
		return -1;
	return ((const struct block *)((const char *)n -
				       offsetof(struct block, node)))->id;
}

/*
 * The list must hold exactly ids[0..n) from most to least recently used,
 * walking forward, and the same in reverse walking back.
 */
static bool check_order(int line, const struct evict_lru *l, const int *ids,
			unsigned n)
{
	const struct evict_node *p = &l->head;
	unsigned i;

	if (l->n != n)
		goto bad;
	for (i = 0, p = l->head.next; p != &l->head && i <= n; p = p->next, i++)
		if (i >= n || id_of(p) != ids[i] || p->next->prev != p)
			goto bad;
	if (i != n)
		goto bad;
	for (i = n, p = l->head.prev; p != &l->head && i > 0; p = p->prev, i--)
		if (id_of(p) != ids[i - 1])
			goto bad;
	if (i != 0 || p != &l->head)
		goto bad;
	if (id_of(evict_lru_victim(l)) != (n ? ids[n - 1] : -1))
		goto bad;
	return true;
bad:
	fprintf(stderr, "%s:%d: list order wrong (n %" PRIu64 ", expected", __FILE__,
		line, l->n);
	for (i = 0; i < n; i++)
		fprintf(stderr, " %d", ids[i]);
	fprintf(stderr, ")\n");
	failures++;
	return false;
}

#define CHECK_ORDER(l, ...)                                                  \
	do {                                                                 \
		static const int _ids[] = { __VA_ARGS__ };                  \
		check_order(__LINE__, l, _ids + 1,                           \
			    sizeof(_ids) / sizeof(_ids[0]) - 1);             \
	} while (0)

static void reset_blocks(void)
{
	memset(blocks, 0, sizeof(blocks));
	for (int i = 0; i < N_NODES; i++)
		blocks[i].id = i;
}

static void test_basic(void)
{
	struct evict_lru l;
	struct evict_node *a = &blocks[0].node, *b = &blocks[1].node,
			  *c = &blocks[2].node, *d = &blocks[3].node;

	reset_blocks();
	evict_lru_init(&l);
	CHECK(evict_lru_victim(&l) == NULL);
	CHECK(l.n == 0);
	CHECK_ORDER(&l, -1);

	evict_lru_insert(&l, a);
	CHECK(evict_node_linked(a));
	CHECK(evict_lru_victim(&l) == a);
	evict_lru_insert(&l, b);
	evict_lru_insert(&l, c);
	CHECK_ORDER(&l, -1, 2, 1, 0);

	/* Touch the victim: the next oldest becomes the victim. */
	evict_lru_touch(&l, a);
	CHECK_ORDER(&l, -1, 0, 2, 1);
	CHECK(evict_lru_victim(&l) == b);
	/* Touching the most recent changes nothing. */
	evict_lru_touch(&l, a);
	CHECK_ORDER(&l, -1, 0, 2, 1);
	/* Touch one in the middle. */
	evict_lru_touch(&l, c);
	CHECK_ORDER(&l, -1, 2, 0, 1);

	/* Remove the victim, the middle, the head. */
	evict_lru_remove(&l, b);
	CHECK(!evict_node_linked(b));
	CHECK_ORDER(&l, -1, 2, 0);
	evict_lru_insert(&l, b);
	evict_lru_insert(&l, d);
	CHECK_ORDER(&l, -1, 3, 1, 2, 0);
	evict_lru_remove(&l, b);
	CHECK_ORDER(&l, -1, 3, 2, 0);
	evict_lru_remove(&l, d);
	CHECK_ORDER(&l, -1, 2, 0);

	/* Unlinked nodes: remove and touch do nothing. */
	evict_lru_remove(&l, b);
	evict_lru_remove(&l, d);
	CHECK_ORDER(&l, -1, 2, 0);
	evict_lru_touch(&l, b);
	CHECK(!evict_node_linked(b));
	CHECK_ORDER(&l, -1, 2, 0);
	struct evict_node fresh;
	memset(&fresh, 0, sizeof(fresh));
	CHECK(!evict_node_linked(&fresh));
	evict_lru_touch(&l, &fresh);
	evict_lru_remove(&l, &fresh);
	CHECK(!evict_node_linked(&fresh));
	CHECK_ORDER(&l, -1, 2, 0);

	/* Drain through the victim, as eviction does. */
	struct evict_node *v = evict_lru_victim(&l);
	CHECK(v == a);
	evict_lru_remove(&l, v);
	v = evict_lru_victim(&l);
	CHECK(v == c);
	evict_lru_remove(&l, v);
	CHECK(evict_lru_victim(&l) == NULL && l.n == 0);
	CHECK(l.head.next == &l.head && l.head.prev == &l.head);
	/* Removing again from an empty list changes nothing. */
	evict_lru_remove(&l, a);
	evict_lru_touch(&l, c);
	CHECK(evict_lru_victim(&l) == NULL && l.n == 0);

	/* A removed node can be inserted again, in another list too. */
	struct evict_lru other;
	evict_lru_init(&other);
	evict_lru_insert(&other, a);
	CHECK(evict_lru_victim(&other) == a && other.n == 1 && l.n == 0);
	evict_lru_remove(&other, a);
	CHECK(other.n == 0 && !evict_node_linked(a));
}

static void test_random(void)
{
	struct evict_lru l;
	int ref[N_NODES]; /* most recently used first */
	unsigned n = 0;

	reset_blocks();
	evict_lru_init(&l);
	for (unsigned op = 0; op < 200000; op++) {
		int id = (int)(rnd() % N_NODES);
		struct evict_node *node = &blocks[id].node;
		unsigned pos = n;

		for (unsigned i = 0; i < n; i++)
			if (ref[i] == id)
				pos = i;
		bool linked = pos < n;
		if (evict_node_linked(node) != linked) {
			fprintf(stderr, "op %u: node %d linked %d, expected %d\n",
				op, id, evict_node_linked(node), linked);
			failures++;
			break;
		}

		switch (rnd() % 5) {
		case 0: /* insert, if not linked */
		case 1:
			if (linked)
				break;
			evict_lru_insert(&l, node);
			memmove(ref + 1, ref, n * sizeof(ref[0]));
			ref[0] = id;
			n++;
			break;
		case 2: /* touch, linked or not */
			evict_lru_touch(&l, node);
			if (linked) {
				memmove(ref + 1, ref, pos * sizeof(ref[0]));
				ref[0] = id;
			}
			break;
		case 3: /* remove, linked or not */
			evict_lru_remove(&l, node);
			if (linked) {
				memmove(ref + pos, ref + pos + 1,
					(n - pos - 1) * sizeof(ref[0]));
				n--;
			}
			break;
		case 4: /* evict the victim */
			if (n == 0) {
				if (evict_lru_victim(&l) != NULL) {
					fprintf(stderr, "op %u: victim of an empty list\n", op);
					failures++;
				}
				break;
			}
			if (id_of(evict_lru_victim(&l)) != ref[n - 1]) {
				fprintf(stderr, "op %u: victim %d, expected %d\n", op,
					id_of(evict_lru_victim(&l)), ref[n - 1]);
				failures++;
			}
			evict_lru_remove(&l, evict_lru_victim(&l));
			n--;
			break;
		}
		if (!check_order(__LINE__, &l, ref, n)) {
			fprintf(stderr, "  after op %u\n", op);
			break;
		}
	}
}

/* ---- policy-generic ------------------------------------------------ */

struct pblock {
	int id;
	struct evict_entry e;
};

static struct pblock pblocks[N_NODES];

static int pid_of(const struct evict_entry *x)
{
	if (!x)
		return -1;
	return container_of(x, const struct pblock, e)->id;
}

/* A new block with a given key fingerprint, as the store creates one. */
static void pblock_fresh(int id)
{
	memset(&pblocks[id].e, 0, sizeof(pblocks[id].e));
	pblocks[id].id = id;
	pblocks[id].e.fp = UINT64_C(0xabc0000000000000) + (uint64_t)id;
}

/*
 * The queue q (EVICT_Q_*) must hold ids from young to old.  Read through
 * the walk, which goes through each of the policy's queues from its old
 * end whatever lists it keeps: the entries of queue q, in the order the
 * walk meets them, are ids from the last, each one linked back to the one
 * before.
 */
static bool check_queue(int line, struct evict *e, uint8_t q, const int *ids, unsigned n)
{
	int have[N_NODES];
	unsigned i, k = 0, steps = 0;
	bool linked = true;
	const struct evict_entry *last = NULL;

	for (const struct evict_entry *x = evict_oldest(e); x && steps <= 2 * N_NODES;
	     x = evict_walk_next(e, x), steps++) {
		if (x->queue != q)
			continue;
		if (k == N_NODES || (last && x->node.next != &last->node)) {
			linked = false;
			break;
		}
		have[k++] = pid_of(x);
		last = x;
	}
	if (!linked || k != n)
		goto bad;
	for (i = 0; i < n; i++)
		if (have[n - 1 - i] != ids[i])
			goto bad;
	return true;
bad:
	fprintf(stderr, "%s:%d: queue %u wrong (expected", __FILE__, line, q);
	for (i = 0; i < n; i++)
		fprintf(stderr, " %d", ids[i]);
	fprintf(stderr, "; have");
	for (i = k; i > 0; i--)
		fprintf(stderr, " %d", have[i - 1]);
	fprintf(stderr, "%s)\n", linked ? "" : ", not linked in order");
	failures++;
	return false;
}

#define CHECK_QUEUE(e, q, ...)                                               \
	do {                                                                 \
		static const int _ids[] = { __VA_ARGS__ };                  \
		check_queue(__LINE__, e, q, _ids + 1,                        \
			    sizeof(_ids) / sizeof(_ids[0]) - 1);             \
	} while (0)

#define P(i) (&pblocks[i].e)

static void evict_and_forget(struct evict *e, int id)
{
	evict_evicted(e, P(id));
	pblock_fresh(id); /* the store frees an evicted block */
}

static void test_s3fifo(void)
{
	struct evict e;

	for (int i = 0; i < N_NODES; i++)
		pblock_fresh(i);
	CHECK(evict_init(&e, EVICT_S3FIFO, &test_hash) == 0);
	CHECK(evict_victim(&e) == NULL);

	/* New blocks are on probation. */
	for (int i = 0; i < 10; i++)
		evict_insert(&e, P(i));
	CHECK_QUEUE(&e, EVICT_Q_SMALL, -1, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
	CHECK_QUEUE(&e, EVICT_Q_MAIN, -1);
	CHECK(evict_count(&e) == 10);

	/* The oldest on probation, not hit: the victim, and the same one
	 * when asked twice. */
	CHECK(pid_of(evict_victim(&e)) == 0);
	CHECK(pid_of(evict_victim(&e)) == 0);
	evict_and_forget(&e, 0);
	CHECK_QUEUE(&e, EVICT_Q_SMALL, -1, 9, 8, 7, 6, 5, 4, 3, 2, 1);

	/* Stored again while remembered: straight to main, and only once. */
	evict_insert(&e, P(0));
	CHECK_QUEUE(&e, EVICT_Q_MAIN, -1, 0);
	CHECK(P(0)->queue == EVICT_Q_MAIN && P(0)->freq == 0);

	/* A hit on probation moves it to main, its count cleared, when it
	 * reaches the end of the small queue. */
	evict_touch(&e, P(1));
	CHECK(P(1)->freq == 1);
	CHECK(pid_of(evict_victim(&e)) == 2);
	CHECK_QUEUE(&e, EVICT_Q_MAIN, -1, 1, 0);
	CHECK(P(1)->freq == 0);
	evict_and_forget(&e, 2);

	/* A pin keeps the queue and the count: the block returns to the
	 * young end of small, still hit. */
	evict_touch(&e, P(3));
	evict_remove(&e, P(3));
	CHECK(!evict_entry_linked(P(3)) && P(3)->queue == EVICT_Q_SMALL && P(3)->freq == 1);
	evict_touch(&e, P(3)); /* off the list: nothing */
	CHECK(P(3)->freq == 1);
	evict_insert(&e, P(3));
	CHECK_QUEUE(&e, EVICT_Q_SMALL, -1, 3, 9, 8, 7, 6, 5, 4);
	CHECK(P(3)->freq == 1);
	/* The count saturates at 3. */
	for (int i = 0; i < 5; i++)
		evict_touch(&e, P(0));
	CHECK(P(0)->freq == 3);

	/* Small (7 of 9) is above a tenth: victims come from it. */
	CHECK(pid_of(evict_victim(&e)) == 4);
	evict_and_forget(&e, 4);
	for (int want = 5; want <= 9; want++) {
		CHECK(pid_of(evict_victim(&e)) == want);
		evict_and_forget(&e, want);
	}
	CHECK_QUEUE(&e, EVICT_Q_SMALL, -1, 3);
	/* Small still above a tenth: its hit block 3 moves to main, which
	 * then gives the victim: 0 was hit, so it gets another lap with one
	 * hit less, and 1 goes. */
	CHECK(pid_of(evict_victim(&e)) == 1);
	CHECK_QUEUE(&e, EVICT_Q_SMALL, -1);
	CHECK_QUEUE(&e, EVICT_Q_MAIN, -1, 0, 3, 1);
	CHECK(P(0)->freq == 2);
	evict_and_forget(&e, 1);
	/* Evicted from main: not remembered. */
	evict_insert(&e, P(1));
	CHECK(P(1)->queue == EVICT_Q_SMALL);

	/* The walk goes toward the young end of the small queue, then on to
	 * the main queue's oldest. */
	evict_insert(&e, P(20));
	CHECK_QUEUE(&e, EVICT_Q_SMALL, -1, 20, 1);
	CHECK_QUEUE(&e, EVICT_Q_MAIN, -1, 0, 3);
	CHECK(pid_of(evict_victim(&e)) == 1);
	CHECK(pid_of(evict_walk_next(&e, P(1))) == 20);
	CHECK(pid_of(evict_walk_next(&e, P(20))) == 3);
	CHECK(pid_of(evict_walk_next(&e, P(3))) == 0);
	CHECK(evict_walk_next(&e, P(0)) == NULL);

	/* The ghost remembers as many as are listed when one is put. */
	evict_done(&e);
	for (int i = 0; i < N_NODES; i++)
		pblock_fresh(i);
	CHECK(evict_init(&e, EVICT_S3FIFO, &test_hash) == 0);
	for (int i = 0; i < 4; i++)
		evict_insert(&e, P(i));
	/* 4 listed when 0 goes: forgotten after 4 more. */
	evict_and_forget(&e, 0);
	for (int i = 4; i < 8; i++)
		evict_insert(&e, P(i));
	for (int i = 1; i < 4; i++)
		evict_and_forget(&e, i);
	evict_insert(&e, P(0));
	CHECK(P(0)->queue == EVICT_Q_MAIN); /* 3 put since: still there */
	evict_remove(&e, P(0));
	pblock_fresh(0);
	evict_insert(&e, P(0));
	CHECK(P(0)->queue == EVICT_Q_SMALL); /* taken: once only */
	/* Now 5 listed when 0 goes. */
	evict_and_forget(&e, 0);
	for (int i = 4; i < 8; i++)
		evict_and_forget(&e, i);
	evict_insert(&e, P(8));
	evict_and_forget(&e, 8);
	evict_insert(&e, P(0));
	CHECK(P(0)->queue == EVICT_Q_SMALL); /* 5 put since: forgotten */
	evict_done(&e);
	evict_done(&e); /* twice is harmless */
}

static void test_sieve(void)
{
	struct evict e;

	for (int i = 0; i < N_NODES; i++)
		pblock_fresh(i);
	CHECK(evict_init(&e, EVICT_SIEVE, &test_hash) == 0);
	CHECK(evict_victim(&e) == NULL);
	for (int i = 0; i < 5; i++)
		evict_insert(&e, P(i));
	CHECK_QUEUE(&e, EVICT_Q_MAIN, -1, 4, 3, 2, 1, 0);
	evict_touch(&e, P(0));
	evict_touch(&e, P(1));
	evict_touch(&e, P(3));
	/* The hand clears 0 and 1 and stops at 2; hits do not move blocks. */
	CHECK(pid_of(evict_victim(&e)) == 2);
	CHECK(pid_of(evict_victim(&e)) == 2);
	CHECK(P(0)->freq == 0 && P(1)->freq == 0 && P(3)->freq == 1);
	evict_and_forget(&e, 2);
	CHECK_QUEUE(&e, EVICT_Q_MAIN, -1, 4, 3, 1, 0);
	/* From where it stopped: 3 is cleared, 4 goes. */
	CHECK(pid_of(evict_victim(&e)) == 4);
	/* Pinning the block under the hand moves the hand on; the lap
	 * wraps to the oldest. */
	evict_remove(&e, P(4));
	CHECK(pid_of(evict_victim(&e)) == 0);
	evict_insert(&e, P(4));
	CHECK_QUEUE(&e, EVICT_Q_MAIN, -1, 4, 3, 1, 0);
	evict_and_forget(&e, 0);
	CHECK(pid_of(evict_victim(&e)) == 1);
	evict_done(&e);
}

/* ---- the model --------------------------------------------------- */

struct model {
	enum evict_policy policy;
	int q[2][N_NODES]; /* [0] main, [1] small; young first */
	unsigned n[2];
	uint8_t queue[N_NODES], freq[N_NODES];
	bool linked[N_NODES];
	int hand; /* SIEVE, -1: from the oldest */
	/* Ghosts, per queue: every fingerprint ever put, with when it
	 * expires. */
	uint64_t gfp[2][1 << 17], gexp[2][1 << 17];
	unsigned gn[2];
	uint64_t gseq[2];
	uint64_t arc_p;
	uint32_t small_percent;
	unsigned ghost_hits, promotions, evictions; /* that the walk covered them */
};

static int m_qi(uint8_t q)
{
	return q == EVICT_Q_SMALL ? 1 : 0;
}

static unsigned m_pos(const struct model *m, int id)
{
	int qi = m_qi(m->queue[id]);
	for (unsigned i = 0; i < m->n[qi]; i++)
		if (m->q[qi][i] == id)
			return i;
	return ~0u;
}

static void m_unlink(struct model *m, int id)
{
	int qi = m_qi(m->queue[id]);
	unsigned pos = m_pos(m, id);
	memmove(&m->q[qi][pos], &m->q[qi][pos + 1], (m->n[qi] - pos - 1) * sizeof(int));
	m->n[qi]--;
	m->linked[id] = false;
}

static void m_link_young(struct model *m, int id)
{
	int qi = m_qi(m->queue[id]);
	memmove(&m->q[qi][1], &m->q[qi][0], m->n[qi] * sizeof(int));
	m->q[qi][0] = id;
	m->n[qi]++;
	m->linked[id] = true;
}

static bool m_ghost_take(struct model *m, int g, uint64_t fp)
{
	for (unsigned i = 0; i < m->gn[g]; i++)
		if (m->gfp[g][i] == fp && m->gexp[g][i] > m->gseq[g]) {
			m->gexp[g][i] = 0;
			m->ghost_hits++;
			return true;
		}
	return false;
}

static void m_ghost_put(struct model *m, int g, uint64_t fp, uint64_t window)
{
	unsigned i;

	m->gseq[g]++;
	for (i = 0; i < m->gn[g] && m->gfp[g][i] != fp; i++)
		;
	if (i == m->gn[g]) {
		if (m->gn[g] >= sizeof(m->gfp[g]) / sizeof(m->gfp[g][0]))
			return;
		m->gfp[g][m->gn[g]++] = fp;
	}
	m->gexp[g][i] = m->gseq[g] + window;
}

/* ARC's nominal ghost lengths: B1 as long as T2, B2 as T1. */
static uint64_t m_arc_len(const struct model *m, int g)
{
	uint64_t n = m->n[g ? 0 : 1];
	return n ? n : 1;
}

static void m_insert(struct model *m, int id)
{
	if (m->queue[id] == EVICT_Q_NONE) {
		uint64_t fp = pblocks[id].e.fp, c = m->n[0] + m->n[1] + 1;
		m->freq[id] = 0;
		if (m->policy == EVICT_ARC) {
			m->queue[id] = EVICT_Q_MAIN;
			if (m_ghost_take(m, 1, fp)) {
				uint64_t d = m_arc_len(m, 0) / m_arc_len(m, 1);
				m->arc_p += d ? d : 1;
				if (m->arc_p > c)
					m->arc_p = c;
			} else if (m_ghost_take(m, 0, fp)) {
				uint64_t d = m_arc_len(m, 1) / m_arc_len(m, 0);
				d = d ? d : 1;
				m->arc_p = m->arc_p > d ? m->arc_p - d : 0;
			} else {
				m->queue[id] = EVICT_Q_SMALL;
			}
		} else if (m->policy == EVICT_S3FIFO && !m_ghost_take(m, 1, fp)) {
			m->queue[id] = EVICT_Q_SMALL;
		} else {
			m->queue[id] = EVICT_Q_MAIN;
		}
	}
	m_link_young(m, id);
}

static void m_remove(struct model *m, int id)
{
	if (!m->linked[id])
		return;
	if (m->hand == id) {
		unsigned pos = m_pos(m, id);
		m->hand = pos == 0 ? -1 : m->q[0][pos - 1];
	}
	m_unlink(m, id);
}

static void m_touch(struct model *m, int id)
{
	if (!m->linked[id])
		return;
	if (m->policy == EVICT_LRU) {
		m_unlink(m, id);
		m_link_young(m, id);
	} else if (m->policy == EVICT_ARC) {
		m_unlink(m, id);
		m->queue[id] = EVICT_Q_MAIN;
		m_link_young(m, id);
	} else if (m->policy == EVICT_S3FIFO) {
		if (m->freq[id] < 3)
			m->freq[id]++;
	} else {
		m->freq[id] = 1;
	}
}

static int m_victim(struct model *m)
{
	unsigned total = m->n[0] + m->n[1];

	if (m->policy == EVICT_LRU)
		return m->n[0] ? m->q[0][m->n[0] - 1] : -1;
	if (m->policy == EVICT_ARC) {
		if (m->n[1] && (m->n[1] > m->arc_p || !m->n[0]))
			return m->q[1][m->n[1] - 1];
		return m->n[0] ? m->q[0][m->n[0] - 1] : -1;
	}
	if (m->policy == EVICT_SIEVE) {
		if (!m->n[0])
			return -1;
		unsigned pos = m->hand < 0 ? m->n[0] - 1 : m_pos(m, m->hand);
		for (;;) {
			int id = m->q[0][pos];
			if (!m->freq[id]) {
				m->hand = id;
				return id;
			}
			m->freq[id] = 0;
			pos = pos == 0 ? m->n[0] - 1 : pos - 1;
		}
	}
	for (;;) {
		if (m->n[1] && (m->n[1] * 100 >= total * m->small_percent || !m->n[0])) {
			int id = m->q[1][m->n[1] - 1];
			if (!m->freq[id])
				return id;
			m_unlink(m, id);
			m->queue[id] = EVICT_Q_MAIN;
			m->freq[id] = 0;
			m_link_young(m, id);
			m->promotions++;
			continue;
		}
		if (!m->n[0])
			return -1;
		int id = m->q[0][m->n[0] - 1];
		if (!m->freq[id])
			return id;
		m->freq[id]--;
		m_unlink(m, id);
		m_link_young(m, id);
	}
}

static void m_evicted(struct model *m, int id)
{
	if (!m->linked[id])
		return;
	unsigned window = m->n[0] + m->n[1];
	int g = m_qi(m->queue[id]);
	uint64_t fp = pblocks[id].e.fp;
	m_remove(m, id);
	if (m->policy == EVICT_S3FIFO && g == 1)
		m_ghost_put(m, 1, fp, window);
	else if (m->policy == EVICT_ARC)
		m_ghost_put(m, g, fp, m_arc_len(m, g));
	m->queue[id] = EVICT_Q_NONE;
	m->freq[id] = 0;
}

static bool m_compare(struct model *m, struct evict *e, unsigned op)
{
	const struct evict_arc_state *arc = evict_state(e, &evict_policy_arc);
	bool ok = check_queue(__LINE__, e, EVICT_Q_MAIN, m->q[0], m->n[0]);
	ok &= check_queue(__LINE__, e, EVICT_Q_SMALL, m->q[1], m->n[1]);
	if (ok && evict_policy_count(e) != m->n[0] + m->n[1]) {
		fprintf(stderr, "%" PRIu64 " listed, model %u\n", evict_policy_count(e),
			m->n[0] + m->n[1]);
		failures++;
		ok = false;
	}
	if (ok && arc && arc->p != m->arc_p) {
		fprintf(stderr, "ARC target %" PRIu64 ", model %" PRIu64 "\n", arc->p, m->arc_p);
		failures++;
		ok = false;
	}
	for (int id = 0; ok && id < N_NODES; id++) {
		const struct evict_entry *x = P(id);
		if (evict_entry_linked(x) != m->linked[id] || x->queue != m->queue[id] ||
		    x->freq != m->freq[id]) {
			fprintf(stderr, "entry %d: linked %d queue %u freq %u, model %d %u %u\n", id,
				evict_entry_linked(x), x->queue, x->freq, m->linked[id],
				m->queue[id], m->freq[id]);
			failures++;
			ok = false;
		}
	}
	if (!ok)
		fprintf(stderr, "  %s, after op %u\n", evict_policy_to_string(m->policy), op);
	return ok;
}

static struct model model;

static void test_policy_random(enum evict_policy policy, unsigned ops, uint32_t small_percent)
{
	struct model *m = &model;
	struct evict e;

	memset(m, 0, sizeof(*m));
	m->policy = policy;
	m->hand = -1;
	for (int i = 0; i < N_NODES; i++)
		pblock_fresh(i);
	CHECK(evict_init(&e, policy, &test_hash) == 0);
	struct evict_s3fifo_state *s3 = evict_state(&e, &evict_policy_s3fifo);
	CHECK(!s3 || s3->small_percent == EVICT_S3FIFO_SMALL_PERCENT);
	if (s3 && small_percent)
		s3->small_percent = small_percent;
	m->small_percent = s3 ? s3->small_percent : 0;
	for (unsigned op = 0; op < ops; op++) {
		/* A skewed choice of block, so some are hot. */
		int id = (int)(rnd() % N_NODES);
		if (rnd() % 2)
			id %= 8;
		struct evict_entry *x = P(id);

		switch (rnd() % 10) {
		case 0: case 1: case 2: /* store or unpin */
			if (m->linked[id])
				break;
			evict_insert(&e, x);
			m_insert(m, id);
			break;
		case 3: case 4: /* lookup hit */
			evict_touch(&e, x);
			m_touch(m, id);
			break;
		case 5: /* pin */
			evict_remove(&e, x);
			m_remove(m, id);
			break;
		case 6: case 7: { /* a full class: evict */
			int want = m_victim(m);
			struct evict_entry *v = evict_victim(&e);
			if (pid_of(v) != want) {
				fprintf(stderr, "%s op %u: victim %d, model %d\n",
					evict_policy_to_string(policy), op, pid_of(v), want);
				failures++;
				goto out;
			}
			if (v && pid_of(evict_victim(&e)) != want) {
				fprintf(stderr, "%s op %u: victim changed when asked again\n",
					evict_policy_to_string(policy), op);
				failures++;
			}
			if (v) {
				evict_evicted(&e, v);
				m_evicted(m, want);
				m->evictions++;
				pblock_fresh(want);
			}
			break;
		}
		case 8: { /* the candidate after the victim, in walk order */
			struct evict_entry *v = evict_victim(&e);
			int want = m_victim(m);
			if (pid_of(v) != want) {
				fprintf(stderr, "%s op %u: victim %d, model %d\n",
					evict_policy_to_string(policy), op, pid_of(v), want);
				failures++;
				goto out;
			}
			if (v) {
				int qi = m_qi(m->queue[want]);
				unsigned pos = m_pos(m, want);
				int next = pos > 0 ? m->q[qi][pos - 1]
					 : qi == 1 && m->n[0] ? m->q[0][m->n[0] - 1] : -1;
				CHECK(pid_of(evict_walk_next(&e, v)) == next);
			}
			break;
		}
		case 9: /* deleted: dropped without eviction */
			if (rnd() % 4 == 0) {
				/* The walk, oldest first: every linked entry once,
				 * the small queue's before the main one's. */
				unsigned seen = 0, linked = 0;
				for (int i = 0; i < N_NODES; i++)
					linked += m->linked[i];
				for (struct evict_entry *w = evict_oldest(&e); w && seen <= linked;
				     w = evict_walk_next(&e, w)) {
					int want;
					if (seen < m->n[1])
						want = m->q[1][m->n[1] - 1 - seen];
					else
						want = m->q[0][m->n[0] - 1 - (seen - m->n[1])];
					if (pid_of(w) != want) {
						fprintf(stderr, "%s op %u: walk step %u is %d, model %d\n",
							evict_policy_to_string(policy), op, seen, pid_of(w), want);
						failures++;
						goto out;
					}
					seen++;
				}
				CHECK(seen == linked);
			}
			evict_remove(&e, x);
			m_remove(m, id);
			if (!m->linked[id]) {
				pblock_fresh(id);
				m->queue[id] = EVICT_Q_NONE;
				m->freq[id] = 0;
			}
			break;
		}
		if (!m_compare(m, &e, op))
			break;
	}
	CHECK(m->evictions > ops / 10);
	if (policy == EVICT_S3FIFO || policy == EVICT_ARC)
		CHECK(m->ghost_hits > ops / 100, "%u ghost hits", m->ghost_hits);
	if (policy == EVICT_S3FIFO)
		CHECK(m->promotions > ops / 100, "%u promotions", m->promotions);
out:
	evict_done(&e);
}

static void test_arc(void)
{
	struct evict e;

	for (int i = 0; i < N_NODES; i++)
		pblock_fresh(i);
	CHECK(evict_init(&e, EVICT_ARC, &test_hash) == 0);
	const struct evict_arc_state *arc = evict_state(&e, &evict_policy_arc);
	CHECK(evict_victim(&e) == NULL);
	for (int i = 0; i < 4; i++)
		evict_insert(&e, P(i));
	CHECK_QUEUE(&e, EVICT_Q_SMALL, -1, 3, 2, 1, 0);
	/* The target starts at 0: T1's oldest goes first. */
	CHECK(pid_of(evict_victim(&e)) == 0);
	/* A hit moves a block to T2, and a pin brings it back there. */
	evict_touch(&e, P(1));
	CHECK_QUEUE(&e, EVICT_Q_MAIN, -1, 1);
	evict_remove(&e, P(1));
	evict_insert(&e, P(1));
	CHECK_QUEUE(&e, EVICT_Q_MAIN, -1, 1);
	CHECK_QUEUE(&e, EVICT_Q_SMALL, -1, 3, 2, 0);
	CHECK(pid_of(evict_victim(&e)) == 0);
	evict_and_forget(&e, 0);
	/* Stored again while B1 remembers it: T1 was too small; the target
	 * grows by |B1|/|B2| measured as |T1|/|T2| = 2, and it goes to T2. */
	evict_insert(&e, P(0));
	CHECK(arc->p == 2);
	CHECK_QUEUE(&e, EVICT_Q_MAIN, -1, 0, 1);
	/* T1 (2) is not above the target: T2's oldest goes. */
	CHECK(pid_of(evict_victim(&e)) == 1);
	evict_and_forget(&e, 1);
	/* Stored again while B2 remembers it: the target shrinks. */
	evict_insert(&e, P(1));
	CHECK(arc->p == 1);
	CHECK(P(1)->queue == EVICT_Q_MAIN);
	CHECK(pid_of(evict_victim(&e)) == 2);
	evict_done(&e);
}

static void test_policy_names(void)
{
	for (int p = 0; p < _EVICT_POLICY_MAX; p++)
		CHECK(evict_policy_from_string(evict_policy_to_string(p)) == p);
	CHECK(evict_policy_from_string("LRU") < 0);
	CHECK(evict_policy_from_string("") < 0);
	CHECK(evict_policy_from_string(NULL) < 0);
	CHECK(evict_policy_to_string(_EVICT_POLICY_MAX) == NULL);
}

/* Every row of the table: a name, a state and every method a policy must
 * have; evict_init gives the row's state, which no other row's ops reach,
 * and evict_done frees it, harmlessly twice. */
static void test_policy_table(void)
{
	struct evict e;

	for (int p = 0; p < _EVICT_POLICY_MAX; p++) {
		const struct evict_policy_ops *ops = evict_policy_ops(p);
		CHECK(ops && ops->name && ops->state_size && ops->init && ops->insert &&
			      ops->remove && ops->touch && ops->victim && ops->oldest &&
			      ops->walk_next && ops->count,
		      "policy %d: its row lacks a name, a state or a method", p);
		if (!ops)
			continue;
		CHECK(evict_init(&e, p, &test_hash) == 0);
		CHECK(e.ops == ops && evict_state(&e, ops) == e.state && e.state);
		for (int q = 0; q < _EVICT_POLICY_MAX; q++)
			CHECK(q == p || evict_state(&e, evict_policy_ops(q)) == NULL);
		CHECK(evict_count(&e) == 0 && evict_victim(&e) == NULL && evict_oldest(&e) == NULL);
		evict_done(&e);
		CHECK(e.state == NULL && evict_count(&e) == 0);
		evict_done(&e);
	}
	CHECK(evict_policy_ops(_EVICT_POLICY_MAX) == NULL);
	CHECK(evict_init(&e, _EVICT_POLICY_MAX, &test_hash) == -EINVAL);
	CHECK(e.state == NULL && evict_count(&e) == 0);
	evict_done(&e);
}

/*
 * Any policy, a random walk of stores, hits, pins and evictions: the
 * victim is always a listed entry (never a pinned or evicted one), asking
 * twice names the same one, the count is the model's, and the walk from
 * the oldest visits every listed entry once.
 */
static void test_policy_walk(enum evict_policy policy)
{
	enum { N = 512 };
	static struct evict_entry x[N];
	static bool listed[N];
	struct evict e;
	unsigned n_listed = 0, evictions = 0;

	CHECK(evict_init(&e, policy, &test_hash) == 0);
	for (int i = 0; i < N; i++) {
		memset(&x[i], 0, sizeof(x[i]));
		x[i].fp = (uint64_t)i * 7919;
		listed[i] = false;
	}
	for (unsigned op = 0; op < 200000; op++) {
		int id = (int)(rnd() % N);
		if (rnd() % 2)
			id %= 32;
		switch (rnd() % 8) {
		case 0: case 1: case 2: /* store, or unpin */
			if (listed[id])
				break;
			evict_insert(&e, &x[id]);
			listed[id] = true;
			n_listed++;
			break;
		case 3: case 4: /* hit */
			evict_touch(&e, &x[id]);
			break;
		case 5: /* pin */
			if (!listed[id])
				break;
			evict_remove(&e, &x[id]);
			listed[id] = false;
			n_listed--;
			break;
		case 6: { /* a full class */
			struct evict_entry *v = evict_victim(&e);
			if (!v) {
				CHECK(n_listed == 0);
				break;
			}
			int vid = (int)(v - x);
			CHECK(vid >= 0 && vid < N && listed[vid]);
			CHECK(evict_victim(&e) == v);
			evict_evicted(&e, v);
			memset(v, 0, sizeof(*v));
			v->fp = (uint64_t)vid * 7919;
			listed[vid] = false;
			n_listed--;
			evictions++;
			break;
		}
		case 7:
			if (op % 64 == 0) {
				unsigned seen = 0;
				for (struct evict_entry *w = evict_oldest(&e); w && seen <= n_listed;
				     w = evict_walk_next(&e, w)) {
					CHECK(listed[w - x]);
					seen++;
				}
				CHECK(seen == n_listed);
			}
			break;
		}
		if (evict_count(&e) != n_listed) {
			fprintf(stderr, "%s op %u: %" PRIu64 " listed, model %u\n",
				evict_policy_to_string(policy), op, evict_count(&e), n_listed);
			failures++;
			break;
		}
	}
	CHECK(evictions > 10000, "%s: %u evictions", evict_policy_to_string(policy), evictions);
	evict_done(&e);
}

/* The longest run of slots a ghost lookup walks through (live, expired or
 * taken back: only empty slots end a probe), whatever the hash. */
static uint64_t ghost_longest_run(const struct evict_ghost *g)
{
	uint64_t run = 0, best = 0;

	for (uint64_t i = 0; i < 2 * g->cap && best < g->cap; i++) {
		run = g->slots[i & (g->cap - 1)].expire ? run + 1 : 0;
		if (run > best)
			best = run;
	}
	return best;
}

/* The inverse of the mixer the ghost lists once used (the first half of
 * MurmurHash3's finalizer), which anyone could run backwards. */
static uint64_t unmix(uint64_t h)
{
	const uint64_t c = UINT64_C(0xff51afd7ed558ccd);
	uint64_t inv = c;

	for (int i = 0; i < 6; i++)
		inv *= 2 - c * inv; /* Newton: c * inv == 1 mod 2^64 */
	h ^= h >> 33;
	h *= inv;
	return h ^ (h >> 33);
}

/*
 * 16,384 fingerprints aimed at one slot: with an unkeyed mixer a caller who
 * picks fingerprints (or the keys they come from) can make every one of
 * them hash to slot 0, so that each remembered one lengthens the probe run
 * of all the others.  Evicted through S3-FIFO's small queue they are all
 * still remembered at the end (the window is the cache's size); the ghost
 * table must then look as it does for random fingerprints: at a load of a
 * quarter, runs of 11 to 18 slots under these secrets, where the aimed
 * ones made one run of 16,384.
 */
static void test_ghost_flood(void)
{
	enum { N = 16384 };
	static struct evict_entry x[N];
	static const uint64_t seeds[] = {0, 1, UINT64_C(0x5eed), UINT64_C(0xdeadbeefcafe)};

	for (size_t si = 0; si < sizeof(seeds) / sizeof(seeds[0]); si++) {
		struct keyhash kh;
		struct evict e;

		keyhash_init_seed(&kh, seeds[si]);
		CHECK(evict_init(&e, EVICT_S3FIFO, &kh) == 0);
		for (uint32_t i = 0; i < N; i++) {
			memset(&x[i], 0, sizeof(x[i]));
			x[i].fp = unmix((uint64_t)(i + 1) << 32);
			evict_insert(&e, &x[i]);
		}
		for (uint32_t i = 0; i < N; i++) {
			struct evict_entry *v = evict_victim(&e);
			CHECK(v == &x[i]);
			if (!v)
				break;
			evict_evicted(&e, v);
		}
		const struct evict_s3fifo_state *s3 = evict_state(&e, &evict_policy_s3fifo);
		const struct evict_ghost *g = &s3->ghost;
		uint64_t run = ghost_longest_run(g);
		CHECK(g->used == N && run <= 128, "secret %zu: %" PRIu64
		      " fingerprints in %" PRIu64 " slots, longest run %" PRIu64,
		      si, g->used, g->cap, run);
		/* Still a ghost list: each one, stored again as a new
		 * block, goes straight to main. */
		for (uint32_t i = 0; i < N; i += 61) {
			uint64_t fp = x[i].fp;
			memset(&x[i], 0, sizeof(x[i]));
			x[i].fp = fp;
			evict_insert(&e, &x[i]);
			CHECK(x[i].queue == EVICT_Q_MAIN);
			evict_remove(&e, &x[i]);
		}
		evict_done(&e);
	}
}

int main(void)
{
	keyhash_init_seed(&test_hash, UINT64_C(0x7e57));
	test_ghost_flood();
	test_basic();
	test_random();
	test_s3fifo();
	test_sieve();
	test_arc();
	test_policy_names();
	test_policy_table();
	for (int p = 0; p < _EVICT_POLICY_MAX; p++)
		test_policy_walk(p);
	/* The policies the model knows; test-evict-lrfu has LRFU's rules. */
	static const enum evict_policy modelled[] = {EVICT_LRU, EVICT_S3FIFO, EVICT_SIEVE,
						     EVICT_ARC};
	for (unsigned i = 0; i < sizeof(modelled) / sizeof(modelled[0]); i++)
		test_policy_random(modelled[i], 200000, 0);
	test_policy_random(EVICT_S3FIFO, 100000, 40);

	if (failures) {
		fprintf(stderr, "test-evict: %d check(s) failed\n", failures);
		return 1;
	}
	printf("test-evict: ok\n");
	return 0;
}
