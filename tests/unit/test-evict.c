/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The LRU: victim order, touch, remove, operations on unlinked nodes, and a
 * random walk against a reference array kept in use order, with the list
 * checked in both directions after every step.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "evict.h"
#include "check.h"

#define N_NODES 64

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

static uint64_t rng_state = UINT64_C(0x13198a2e03707344);

static uint64_t rnd(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * UINT64_C(0x2545f4914f6cdd1d);
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

int main(void)
{
	test_basic();
	test_random();

	if (failures) {
		fprintf(stderr, "test-evict: %d check(s) failed\n", failures);
		return 1;
	}
	printf("test-evict: ok\n");
	return 0;
}
