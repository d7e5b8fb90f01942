/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvt-proto.h"
#include "snapshot.h"

static void rec_clear(struct rec *r)
{
	for (uint32_t i = 0; i < r->n_fields; i++) {
		free(r->fields[i].name);
		free(r->fields[i].s);
	}
	free(r->fields);
	free(r->kind);
}

void snapshot_clear(struct snapshot *s)
{
	for (size_t i = 0; i < s->n; i++)
		rec_clear(&s->recs[i]);
	free(s->recs);
	memset(s, 0, sizeof(*s));
}

int snapshot_push(struct snapshot *s, const char *kind, uint32_t n_fields, struct rec **ret)
{
	struct rec *r;

	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 32;
		struct rec *v = realloc(s->recs, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		s->recs = v;
		s->cap = cap;
	}
	r = &s->recs[s->n];
	memset(r, 0, sizeof(*r));
	r->kind = strdup(kind);
	/* Every field zeroed: a record given up half set is freed whole. */
	r->fields = calloc(n_fields ? n_fields : 1, sizeof(*r->fields));
	if (!r->kind || !r->fields) {
		free(r->kind);
		free(r->fields);
		return -ENOMEM;
	}
	r->n_fields = n_fields;
	s->n++;
	*ret = r;
	return 0;
}

int rec_set(struct rec *r, uint32_t i, const char *name, int type, uint64_t u, const char *s)
{
	struct field *f = &r->fields[i];

	f->type = type;
	f->name = strdup(name ? name : "");
	if (!f->name)
		return -ENOMEM;
	if (type == KVT_FIELD_STR) {
		f->s = strdup(s ? s : "");
		if (!f->s)
			return -ENOMEM;
	} else {
		f->u = u;
	}
	return 0;
}

int snapshot_add_record(struct snapshot *s, const struct kvt_record *r)
{
	struct rec *c;
	int e = snapshot_push(s, r->kind, r->n_fields, &c);

	for (uint32_t i = 0; e == 0 && i < r->n_fields; i++) {
		const struct kvt_field *f = &r->fields[i];
		e = rec_set(c, i, f->name, f->type, f->u, f->s);
	}
	return e;
}

const struct field *rec_field(const struct rec *r, const char *name)
{
	for (uint32_t i = 0; i < r->n_fields; i++)
		if (r->fields[i].name && strcmp(r->fields[i].name, name) == 0)
			return &r->fields[i];
	return NULL;
}

uint64_t rec_u64(const struct rec *r, const char *name)
{
	const struct field *f = rec_field(r, name);
	return f && f->type != KVT_FIELD_STR ? f->u : 0;
}

bool rec_has(const struct rec *r, const char *name)
{
	return rec_field(r, name) != NULL;
}

const char *rec_str(const struct rec *r, const char *name)
{
	const struct field *f = rec_field(r, name);
	return f && f->type == KVT_FIELD_STR && f->s ? f->s : "";
}

bool rec_is(const struct rec *r, const char *kind)
{
	return strcmp(r->kind, kind) == 0;
}

const struct rec *snapshot_find(const struct snapshot *s, const char *kind)
{
	for (size_t i = 0; i < s->n; i++)
		if (strcmp(s->recs[i].kind, kind) == 0)
			return &s->recs[i];
	return NULL;
}
