/* SPDX-License-Identifier: Apache-2.0 */
/*
 * STATS records copied out of the replies they came in: what kvtierctl
 * prints and what the daemon's scrape endpoint renders (prom.h).  Each
 * record and field is its own allocation, so a snapshot of many
 * namespaces costs what its records say, not KVT_MAX_FIELDS each.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct kvt_record; /* kvt-proto.h */

struct field {
	char *name;
	int type; /* KVT_FIELD_* of kvt-proto.h (and kvtier.h) */
	uint64_t u;
	char *s; /* KVT_FIELD_STR only */
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
/* A new record of kind with room for n_fields, appended; its fields are
 * set with rec_set.  \return 0, or -ENOMEM (the snapshot as it was) */
int snapshot_push(struct snapshot *s, const char *kind, uint32_t n_fields, struct rec **ret);
/* Field i of a record snapshot_push made (i < its n_fields); s is copied
 * for KVT_FIELD_STR and ignored otherwise.  \return 0, or -ENOMEM */
int rec_set(struct rec *r, uint32_t i, const char *name, int type, uint64_t u, const char *s);
/* A decoded record, copied.  \return 0, or -ENOMEM */
int snapshot_add_record(struct snapshot *s, const struct kvt_record *r);
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
