/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A LOOKUP's wait for the keys it answered DISK (KVT_LOOKUP_SETTLED): its
 * session keeps a watch of them, and as each staged or fetched block of
 * the namespace settles the loop moves the watch's cursor past the keys
 * that have; once it has passed the last, the client is told once
 * (SETTLED) instead of a BLOCK_READY for every block.  Blocks land about
 * in the order they were asked for, so each check looks at one key or a
 * few: a watch of n keys costs about n index look-ups plus one for each
 * block of its namespace that settles meanwhile.  No policy, no I/O: the
 * manager sends the notice.
 */
#pragma once

#include <stdint.h>
#include <sys/queue.h>

#include "kvt-proto.h"

struct ns;

/* Watches a session may have at once: a LOOKUP beyond them is told of its
 * blocks one by one (BLOCK_READY), as without the flag. */
#define SETTLE_WATCHES_MAX 16
/* A watch whose keys have not all settled after this long (a key deleted
 * while it was being staged settles without a word) is dropped when the
 * session asks for another; the client looks up again before (every
 * 10 s, libkvtier-client). */
#define SETTLE_WATCH_USEC (30ull * 1000 * 1000)

struct settle_watch;

struct settle_set {
	LIST_HEAD(, settle_watch) watches;
	unsigned n;
};

typedef void (*settle_done_fn)(void *userdata, const struct kvt_settled *m);

void settle_init(struct settle_set *set);
/* Watch the keys of a LOOKUP whose states say DISK; done is called at
 * once if they have all settled already.  \return 0, -EMFILE (the set
 * is full) or -ENOMEM: the caller falls back to BLOCK_READY. */
int settle_watch(struct settle_set *set, struct ns *ns, uint32_t ns_id, uint64_t request_id,
		 const uint8_t *keys, const uint8_t *states, uint32_t n, uint64_t now_usec,
		 settle_done_fn done, void *userdata);
/* A block of ns settled: the set's watches of ns move on; each whose keys
 * have all settled is handed to done and freed. */
void settle_advance(struct settle_set *set, struct ns *ns, settle_done_fn done, void *userdata);
void settle_clear(struct settle_set *set);
