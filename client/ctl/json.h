/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvtierctl's JSON: a small streaming writer, two-space indents, one
 * member per line.  Why not libsmartcols' JSON: see json.c.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "records.h"

#define JSON_MAX_DEPTH 8

struct json {
	FILE *f;
	unsigned depth;
	bool after_key;
	bool has_items[JSON_MAX_DEPTH];
};

void json_open(struct json *j, char c);  /* '{' or '[' */
void json_close(struct json *j, char c); /* '}' or ']' */
void json_key(struct json *j, const char *key);
void json_str(struct json *j, const char *s);
void json_u64(struct json *j, uint64_t v);
void json_i64(struct json *j, int64_t v);
void json_null(struct json *j);
/* A ratio, or null when it is undefined (negative). */
void json_ratio(struct json *j, double v);
/* key: v, or key: null when !have */
void json_u64_or_null(struct json *j, const char *key, uint64_t v, bool have);
/* key: s, or key: null when s is NULL */
void json_str_or_null(struct json *j, const char *key, const char *s);
/* Every field of r, whatever it is, so new daemon fields show up unasked;
 * with_hit_rate adds "hit_rate" unless the daemon sent one. */
void json_rec(struct json *j, const struct rec *r, bool with_hit_rate);
/* An array of every record of kind. */
void json_recs(struct json *j, const struct snapshot *s, const char *kind,
	       bool with_hit_rate);
