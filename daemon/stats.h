/* SPDX-License-Identifier: Apache-2.0 */
/*
 * STATS replies: the daemon, tenants, namespaces and clients as records,
 * built from what the daemon holds at the moment of the request.  Stats
 * only reads and returns finished messages; the session sends them.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvt-proto.h"

struct manager;
struct session;

struct stats_query {
	uint32_t what; /* KVT_STATS_* */
	/* An admin sees every tenant; anyone else only its own, and nothing
	 * that reveals another's activity. */
	bool admin;
	/* Its tenant; NULL for the scrape endpoint (metrics-http.c), an
	 * admin. */
	const struct session *asker;
	uint16_t version; /* of the replies: the asker's protocol */
	uint64_t request_id;
};

/* Finished STATS replies, to be sent in order: all but the last carry
 * KVT_FLAG_MORE. */
struct stats_replies {
	struct kvt_buf *v;
	size_t n;
	/* A record could not be built: the answer ends in an error reply
	 * (when even that could be built), never in a short list. */
	bool failed;
};

/* \return 0, or -ENOMEM when not even the error reply could be built
 * (ret then holds the replies before it, to be sent and freed as usual). */
int stats_build(const struct manager *m, const struct stats_query *q,
		struct stats_replies *ret);
void stats_replies_free(struct stats_replies *r);
