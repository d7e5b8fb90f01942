/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvtierctl's plumbing: copies of kvt_stats() records, human-readable
 * numbers, aligned tables and a small JSON writer.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kvtier.h"
#include "size.h"

/* ------------------------------------------------------------------ */
/* Records                                                            */
/* ------------------------------------------------------------------ */

/* The library reuses one record for every callback, so each is copied. */
struct field {
	char *name;
	int type; /* KVT_FIELD_* */
	uint64_t u;
	char *s;
};

struct rec {
	char *kind;
	uint32_t n_fields;
	struct field *fields;
};

struct snapshot {
	struct rec *recs;
	size_t n, cap;
	int error;
};

void snapshot_clear(struct snapshot *s);
/* A kvt_record_fn: copies r into the snapshot userdata points to. */
int snapshot_add(const kvt_record *r, void *userdata);
/* \return the first record of kind, or NULL */
const struct rec *snapshot_find(const struct snapshot *s, const char *kind);

const struct field *rec_field(const struct rec *r, const char *name);
/* Missing numbers read as 0: a non-admin view or an older daemon lacks
 * some fields, and a table cell of 0 is as honest as the daemon allows. */
uint64_t rec_u64(const struct rec *r, const char *name);
bool rec_has(const struct rec *r, const char *name);
/* "" when absent */
const char *rec_str(const struct rec *r, const char *name);
bool rec_is(const struct rec *r, const char *kind);

/* \return hits / (hits + misses), or a negative number when there were no
 * lookups (so callers print "-" or null rather than a made-up 0%). */
double hit_rate(const struct rec *r);
/* part / whole, or -1 when whole is 0 */
double ratio_of(uint64_t part, uint64_t whole);

/* ------------------------------------------------------------------ */
/* Human formatting; each returns buf                                 */
/* ------------------------------------------------------------------ */

const char *fmt_pct(char *buf, size_t len, double ratio);    /* "12.5%", "-" */
const char *fmt_duration(char *buf, size_t len, uint64_t s); /* "3h05m" */
const char *fmt_count(char *buf, size_t len, uint64_t n);    /* "327,680" */

/* ------------------------------------------------------------------ */
/* Tables                                                             */
/* ------------------------------------------------------------------ */

struct column {
	const char *name;
	bool right; /* numbers line up on their last digit */
};

struct table {
	const struct column *cols;
	size_t n_cols;
	char **cells; /* row-major, without the header */
	size_t n, cap;
	int error;
};

/* One cell, printf-style; control characters become '?' and "" becomes
 * "-".  An allocation failure is kept for table_print to return. */
void table_add(struct table *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Print to f, "(none)" when empty.  \return 0 or a negative errno */
int table_print(struct table *t, FILE *f);
void table_free(struct table *t);

/* ------------------------------------------------------------------ */
/* JSON                                                               */
/* ------------------------------------------------------------------ */

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
void json_bool(struct json *j, bool v);
void json_null(struct json *j);
/* A ratio, or null when it is undefined (negative). */
void json_ratio(struct json *j, double v);
/* Every field of r, whatever it is, so new daemon fields show up unasked;
 * with_hit_rate adds "hit_rate" unless the daemon sent one. */
void json_rec(struct json *j, const struct rec *r, bool with_hit_rate);
/* An array of every record of kind. */
void json_recs(struct json *j, const struct snapshot *s, const char *kind,
	       bool with_hit_rate);

/* Length of the valid UTF-8 sequence at s, or 0 (JSON and Prometheus text
 * must be UTF-8, and names from clients are arbitrary bytes). */
size_t utf8_len(const unsigned char *s);
