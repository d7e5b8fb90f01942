/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One line of a Mooncake trace (the FAST'25 release of kvcache-ai/Mooncake):
 * a JSON object with "timestamp" (ms), "input_length" and "output_length"
 * (tokens) and "hash_ids" (one id per 512-token block of the prompt, equal
 * ids for equal prefixes).  Other fields are passed over.
 *
 * The parser is the importer's own and reads exactly what the format needs:
 * an object, integers, an array of integers, and any JSON value of a field
 * it does not know, nested no deeper than MOONCAKE_MAX_DEPTH.  What it
 * keeps of a line is bounded by MOONCAKE_MAX_IDS, whatever the input.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define MOONCAKE_BLOCK_TOKENS 512
#define MOONCAKE_MAX_IDS (1u << 20)
#define MOONCAKE_MAX_DEPTH 64

struct mooncake_req {
	uint64_t timestamp_ms;
	uint64_t input_length, output_length;
	const uint64_t *hash_ids; /* [n_hash_ids], in the parser's buffer until the next line */
	uint32_t n_hash_ids;
};

struct mooncake_parser {
	uint64_t *ids;
	uint32_t cap_ids;
	char error[160]; /* what was wrong with the last line refused */
};

/*
 * Parse one line (without its newline; it need not be NUL-terminated).
 * Checks the JSON, that every field the format defines is there once and a
 * non-negative integer, and that input_length needs exactly n_hash_ids
 * blocks of 512 tokens (the last may be partial).  On -EINVAL, p->error
 * says why.
 * \return 0, or -EINVAL, or -ENOMEM
 */
int mooncake_parse_line(struct mooncake_parser *p, const char *line, size_t len,
			struct mooncake_req *ret);
void mooncake_parser_done(struct mooncake_parser *p);
