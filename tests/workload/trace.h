/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The trace format of docs/workload.md, read and written in one place:
 * kvt-trace writes it, kvt-policy-sim and kvt-replay read it.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define TRACE_KEY_BYTES 32
#define TRACE_MAX_TENANTS 256

/* An R line, but for its block ids. */
struct trace_record {
	uint64_t seq, t_us;
	uint32_t tenant;
	uint64_t conv;
	uint64_t turn;
	char kind; /* 'c' a plain chat, 'r' with retrieved documents */
	uint32_t n_lookup, n_new;
	/* What the engine knows that block history cannot: its leading
	 * blocks that are the application's template (the system prompt),
	 * shared with other conversations, and whether the conversation
	 * ends with it.  0 and false where the trace does not say. */
	uint32_t shared;
	bool last;
};

/* A request as read: its blocks are trace.ids[off, off + n_lookup + n_new). */
struct trace_req {
	uint64_t off;
	uint32_t n_lookup, n_new;
	uint32_t tenant;
	uint64_t conv;
	uint64_t t_us;
	uint32_t shared; /* as in trace_record */
	bool last;
};

struct trace {
	struct trace_req *r;
	uint64_t n_req, cap_req;
	uint32_t *ids; /* every request's blocks, back to back */
	uint64_t n_pos, cap_pos;
	uint8_t *keys; /* [n_keys]: the K lines, when they are read */
	uint64_t n_keys, cap_keys;
	uint32_t n_blocks; /* distinct: ids are 0..n_blocks-1 */
	uint32_t block_tokens;
	uint32_t n_tenants;
	uint64_t lookups; /* blocks looked up, all requests */
	uint64_t tenant_blocks[TRACE_MAX_TENANTS]; /* looked up and added */
};

/*
 * Read path ("-" for standard input) into t, which is zeroed.  With keys,
 * the K lines too, and a record may use only ids whose key came before;
 * without, K lines are passed over.  What is wrong is said on stderr,
 * after "<prog>: ".
 * \return 0 or a negative errno
 */
int trace_read(struct trace *t, const char *path, bool keys, const char *prog);
void trace_free(struct trace *t);
/* Leading hits of a tier that never evicts: only first uses miss. */
uint64_t trace_unbounded_hits(const struct trace *t);

/* ---- what an engine that knows its requests would tell kvtierd ----- */

/* The lifecycle hints (kvt_retain, kvt_end) an engine sends for a trace's
 * requests, from what the records say (shared, last); kvt-policy-sim and
 * kvt-replay apply them, any combination ("end+shared"). */
enum trace_hint {
	/* Every request ends with an end of request over all its blocks:
	 * vLLM's request_finished passed through, nothing else known. */
	TRACE_HINT_REQUEST = 1 << 0,
	/* A conversation's last turn ends its session over its private
	 * blocks (those after its system prompt). */
	TRACE_HINT_END = 1 << 1,
	/* Every turn but the last retains its private blocks (priority
	 * TRACE_HINT_TURN_PRIORITY) for the hint duration: the conversation
	 * continues. */
	TRACE_HINT_TURNS = 1 << 2,
	/* The system prompt's blocks retained (TRACE_HINT_SHARED_PRIORITY),
	 * with no end. */
	TRACE_HINT_SHARED = 1 << 3,
};

#define TRACE_HINT_TURN_PRIORITY 60
#define TRACE_HINT_SHARED_PRIORITY 90

/* "none", or the hints' names joined by '+' */
void trace_hint_name(unsigned hints, char *buf, size_t size);
/* "none", "all" (end+turns+shared) or names joined by '+'.
 * \return the hints or -1 */
int trace_hint_from_name(const char *s);

/* The block_tokens and keys lines, after the writer's comments. */
void trace_write_params(FILE *f, uint32_t block_tokens, bool keys);
/* A K line: the next id's key. */
void trace_write_key(FILE *f, const uint8_t *key);
/* An R line: rec, then its n_lookup + n_new ids as runs of consecutive
 * ids, then what the engine knows (shared, last) when there is any. */
void trace_write_record(FILE *f, const struct trace_record *rec, const uint32_t *ids);
