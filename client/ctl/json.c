/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The JSON writer, kept rather than libsmartcols' JSON because libsmartcols
 * (2.38) cannot print any of the shapes kvtierctl's --json has printed,
 * and scripts read those shapes:
 *  - it wraps every table as {"name": [...]}, while clients and namespaces
 *    print a bare array, status an object of the daemon record (an object,
 *    or null) and four arrays, evict and plan objects of scalars (plan's
 *    with an array in it);
 *  - it prints an empty string as null, and "" is a string here;
 *  - it copies bytes that are not UTF-8 into its strings, which makes the
 *    document invalid, and names come from clients.
 * So the tables go through libsmartcols and the JSON through this.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "text.h"

static void json_indent(struct json *j)
{
	putc('\n', j->f);
	for (unsigned i = 0; i < j->depth; i++)
		fputs("  ", j->f);
}

/* Before a value: a comma after the previous item, and a fresh line. */
static void json_sep(struct json *j)
{
	if (j->after_key) {
		j->after_key = false;
		return;
	}
	if (j->depth == 0)
		return;
	if (j->has_items[j->depth])
		putc(',', j->f);
	j->has_items[j->depth] = true;
	json_indent(j);
}

/* Bytes that are not UTF-8 become U+FFFD, escaped. */
static void json_string_raw(FILE *f, const char *s)
{
	putc('"', f);
	while (*s) {
		size_t n = text_utf8_len(s);
		unsigned char c = (unsigned char)*s;

		if (n == 0) {
			fputs("\\ufffd", f);
			s++;
		} else if (c == '"' || c == '\\') {
			putc('\\', f);
			putc(*s++, f);
		} else if (c < 0x20) {
			fprintf(f, "\\u%04x", c);
			s++;
		} else {
			fwrite(s, 1, n, f);
			s += n;
		}
	}
	putc('"', f);
}

void json_open(struct json *j, char c)
{
	json_sep(j);
	putc(c, j->f);
	j->depth++;
	if (j->depth >= JSON_MAX_DEPTH)
		abort(); /* kvtierctl nests three deep at most */
	j->has_items[j->depth] = false;
}

void json_close(struct json *j, char c)
{
	bool had_items = j->has_items[j->depth];

	j->depth--;
	if (had_items)
		json_indent(j);
	putc(c, j->f);
	if (j->depth == 0)
		putc('\n', j->f);
}

void json_key(struct json *j, const char *key)
{
	json_sep(j);
	json_string_raw(j->f, key);
	fputs(": ", j->f);
	j->after_key = true;
}

void json_str(struct json *j, const char *s)
{
	json_sep(j);
	json_string_raw(j->f, s);
}

void json_u64(struct json *j, uint64_t v)
{
	json_sep(j);
	fprintf(j->f, "%" PRIu64, v);
}

void json_i64(struct json *j, int64_t v)
{
	json_sep(j);
	fprintf(j->f, "%" PRId64, v);
}

void json_null(struct json *j)
{
	json_sep(j);
	fputs("null", j->f);
}

void json_ratio(struct json *j, double v)
{
	if (v < 0) {
		json_null(j);
		return;
	}
	json_sep(j);
	fprintf(j->f, "%.6g", v);
}

void json_u64_or_null(struct json *j, const char *key, uint64_t v, bool have)
{
	json_key(j, key);
	if (have)
		json_u64(j, v);
	else
		json_null(j);
}

void json_str_or_null(struct json *j, const char *key, const char *s)
{
	json_key(j, key);
	if (s)
		json_str(j, s);
	else
		json_null(j);
}

void json_rec(struct json *j, const struct rec *r, bool with_hit_rate)
{
	json_open(j, '{');
	for (uint32_t i = 0; i < r->n_fields; i++) {
		const struct field *f = &r->fields[i];
		size_t len = strlen(f->name);
		/* Ratios travel in parts per million (records carry integers);
		 * a program reading JSON gets the ratio, under the name without
		 * the unit. */
		if (f->type == KVT_FIELD_U64 && len > 4 && !strcmp(f->name + len - 4, "_ppm")) {
			char key[64];
			snprintf(key, sizeof(key), "%.*s", (int)(len - 4), f->name);
			json_key(j, key);
			json_ratio(j, (double)f->u / 1e6);
			continue;
		}
		json_key(j, f->name);
		if (f->type == KVT_FIELD_STR)
			json_str(j, f->s);
		else if (f->type == KVT_FIELD_I64)
			json_i64(j, (int64_t)f->u);
		else
			json_u64(j, f->u);
	}
	if (with_hit_rate && !rec_has(r, "hit_rate")) {
		json_key(j, "hit_rate");
		json_ratio(j, hit_rate(r));
	}
	json_close(j, '}');
}

void json_recs(struct json *j, const struct snapshot *s, const char *kind,
	       bool with_hit_rate)
{
	json_open(j, '[');
	for (size_t i = 0; i < s->n; i++)
		if (rec_is(&s->recs[i], kind))
			json_rec(j, &s->recs[i], with_hit_rate);
	json_close(j, ']');
}
