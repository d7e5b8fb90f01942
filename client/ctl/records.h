/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Copies of the kvt_stats() records a command prints, and the lookups and
 * ratios every view needs.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvtier.h"

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
