/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The engine's lifecycle hints in kvt-policy-sim: what an engine that knows
 * its requests would tell kvtierd (HINT, docs/protocol.md), derived from
 * what a trace says of each request (its shared leading blocks, whether its
 * conversation ends with it), applied through the daemon's own evict.c.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "evict.h"
#include "trace.h"

struct sim_hints {
	unsigned mode; /* enum trace_hint, or 0 for none */
	uint64_t duration_us;  /* of a turn's retention */
	uint64_t *until;       /* [n_blocks] when its retention lapses, 0: never */
	uint64_t now_us, swept_us;
	uint64_t lapsed;       /* retentions that ran out */
};

int sim_hints_init(struct sim_hints *h, const struct trace *t, unsigned mode,
		   uint64_t duration_us);
void sim_hints_done(struct sim_hints *h);
/* Before a request at t_us: whether retentions that ran out by then are to
 * lapse now (once a second of trace time, as kvtierd checks them); if so,
 * sim_hints_lapse on every tier. */
bool sim_hints_due(struct sim_hints *h, uint64_t t_us);
void sim_hints_lapse(struct sim_hints *h, struct evict *e);
/* After request r was served: its hints, for its blocks that are stored
 * (state[id] == stored; ent is the per-block entry array). */
void sim_hints_request(struct sim_hints *h, struct evict *e, struct evict_entry *ent,
		       const struct trace *t, const struct trace_req *r, const uint8_t *state,
		       uint8_t stored);
/* Block id left the tier. */
void sim_hints_forget(struct sim_hints *h, uint32_t id);

