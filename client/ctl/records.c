/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "records.h"

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

static int rec_copy(const kvt_record *src, struct rec *ret)
{
	uint32_t n = kvt_record_n_fields(src);

	memset(ret, 0, sizeof(*ret));
	ret->kind = strdup(kvt_record_kind(src));
	ret->fields = calloc(n ? n : 1, sizeof(*ret->fields));
	if (!ret->kind || !ret->fields)
		goto fail;
	for (uint32_t i = 0; i < n; i++) {
		struct field *f = &ret->fields[i];
		const char *name = kvt_record_field_name(src, i);

		ret->n_fields = i + 1;
		f->type = kvt_record_field_type(src, i);
		f->name = strdup(name ? name : "");
		if (!f->name)
			goto fail;
		if (f->type == KVT_FIELD_STR) {
			const char *s = kvt_record_field_str(src, i);
			f->s = strdup(s ? s : "");
			if (!f->s)
				goto fail;
		} else {
			f->u = kvt_record_field_u64(src, i);
		}
	}
	return 0;
fail:
	rec_clear(ret);
	return -ENOMEM;
}

int snapshot_add(const kvt_record *r, void *userdata)
{
	struct snapshot *s = userdata;

	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 32;
		struct rec *v = realloc(s->recs, cap * sizeof(*v));
		if (!v) {
			s->error = -ENOMEM;
			return 1;
		}
		s->recs = v;
		s->cap = cap;
	}
	s->error = rec_copy(r, &s->recs[s->n]);
	if (s->error < 0)
		return 1;
	s->n++;
	return 0;
}

const struct field *rec_field(const struct rec *r, const char *name)
{
	for (uint32_t i = 0; i < r->n_fields; i++)
		if (strcmp(r->fields[i].name, name) == 0)
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
	return f && f->type == KVT_FIELD_STR ? f->s : "";
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

double hit_rate(const struct rec *r)
{
	uint64_t hits = rec_u64(r, "hits"), misses = rec_u64(r, "misses");
	if (hits + misses == 0)
		return -1.0;
	return (double)hits / (double)(hits + misses);
}

double ratio_of(uint64_t part, uint64_t whole)
{
	return whole ? (double)part / (double)whole : -1.0;
}
