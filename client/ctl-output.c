/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctl-output.h"

/* ------------------------------------------------------------------ */
/* Records                                                            */
/* ------------------------------------------------------------------ */

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

/* ------------------------------------------------------------------ */
/* Human formatting                                                   */
/* ------------------------------------------------------------------ */

const char *fmt_pct(char *buf, size_t len, double ratio)
{
	if (ratio < 0)
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%.1f%%", ratio * 100.0);
	return buf;
}

double ratio_of(uint64_t part, uint64_t whole)
{
	return whole ? (double)part / (double)whole : -1.0;
}

const char *fmt_count(char *buf, size_t len, uint64_t n)
{
	char digits[24];
	size_t nd, o = 0;

	nd = (size_t)snprintf(digits, sizeof(digits), "%" PRIu64, n);
	for (size_t i = 0; i < nd && o + 1 < len; i++) {
		if (i && (nd - i) % 3 == 0 && o + 2 < len)
			buf[o++] = ',';
		buf[o++] = digits[i];
	}
	buf[o] = 0;
	return buf;
}

const char *fmt_duration(char *buf, size_t len, uint64_t s)
{
	if (s < 60)
		snprintf(buf, len, "%" PRIu64 "s", s);
	else if (s < 3600)
		snprintf(buf, len, "%" PRIu64 "m%02" PRIu64 "s", s / 60, s % 60);
	else if (s < 86400)
		snprintf(buf, len, "%" PRIu64 "h%02" PRIu64 "m", s / 3600, s / 60 % 60);
	else
		snprintf(buf, len, "%" PRIu64 "d%02" PRIu64 "h", s / 86400, s / 3600 % 24);
	return buf;
}

/* ------------------------------------------------------------------ */
/* Tables                                                             */
/* ------------------------------------------------------------------ */

/* Names come from clients: a control character in one must not reach the
 * terminal, and an empty one reads better as "-". */
void table_add(struct table *t, const char *fmt, ...)
{
	char *cell = NULL;
	va_list ap;

	if (t->error)
		return;
	if (t->n == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 64;
		char **v = realloc(t->cells, cap * sizeof(*v));
		if (!v) {
			t->error = -ENOMEM;
			return;
		}
		t->cells = v;
		t->cap = cap;
	}
	va_start(ap, fmt);
	if (vasprintf(&cell, fmt, ap) < 0)
		cell = NULL;
	va_end(ap);
	if (!cell) {
		t->error = -ENOMEM;
		return;
	}
	if (!cell[0]) {
		free(cell);
		cell = strdup("-");
		if (!cell) {
			t->error = -ENOMEM;
			return;
		}
	}
	for (char *p = cell; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?';
	t->cells[t->n++] = cell;
}

/* Columns on a terminal, counting each UTF-8 sequence once. */
static size_t text_width(const char *s)
{
	size_t w = 0;
	for (; *s; s++)
		if (((unsigned char)*s & 0xc0) != 0x80)
			w++;
	return w;
}

static void print_cell(FILE *f, const char *s, size_t width, bool right, bool last)
{
	size_t pad = width - text_width(s);

	if (right)
		fprintf(f, "%*s%s", (int)pad, "", s);
	else if (last)
		fputs(s, f); /* no trailing blanks */
	else
		fprintf(f, "%s%*s", s, (int)pad, "");
}

static void print_row(FILE *f, const struct table *t, const char *const *row,
		      const size_t *widths)
{
	for (size_t c = 0; c < t->n_cols; c++) {
		if (c)
			fputs("  ", f);
		print_cell(f, row[c], widths[c], t->cols[c].right, c + 1 == t->n_cols);
	}
	putc('\n', f);
}

int table_print(struct table *t, FILE *f)
{
	size_t *widths;
	const char **header;
	int r = 0;

	if (t->error)
		return t->error;
	widths = calloc(t->n_cols, sizeof(*widths));
	header = calloc(t->n_cols, sizeof(*header));
	if (!widths || !header) {
		r = -ENOMEM;
		goto out;
	}
	for (size_t c = 0; c < t->n_cols; c++) {
		header[c] = t->cols[c].name;
		widths[c] = text_width(header[c]);
	}
	for (size_t i = 0; i < t->n; i++) {
		size_t w = text_width(t->cells[i]);
		if (w > widths[i % t->n_cols])
			widths[i % t->n_cols] = w;
	}
	print_row(f, t, header, widths);
	for (size_t i = 0; i + t->n_cols <= t->n; i += t->n_cols)
		print_row(f, t, (const char *const *)&t->cells[i], widths);
	if (t->n == 0)
		fputs("(none)\n", f);
out:
	free(widths);
	free(header);
	return r;
}

void table_free(struct table *t)
{
	for (size_t i = 0; i < t->n; i++)
		free(t->cells[i]);
	free(t->cells);
}

/* ------------------------------------------------------------------ */
/* JSON                                                               */
/* ------------------------------------------------------------------ */

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

/* Length of the valid UTF-8 sequence at s, or 0: JSON must be UTF-8, and
 * client names are arbitrary bytes. */
size_t utf8_len(const unsigned char *s)
{
	uint32_t cp;
	size_t n;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf) {
		n = 2;
		cp = s[0] & 0x1f;
	} else if (s[0] >= 0xe0 && s[0] <= 0xef) {
		n = 3;
		cp = s[0] & 0x0f;
	} else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
		n = 4;
		cp = s[0] & 0x07;
	} else {
		return 0;
	}
	for (size_t i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	/* Overlong forms, surrogates and code points past U+10FFFF. */
	if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return n;
}

static void json_string_raw(FILE *f, const char *str)
{
	const unsigned char *s = (const unsigned char *)str;

	putc('"', f);
	while (*s) {
		size_t n = utf8_len(s);
		if (n == 0) {
			fputs("\\ufffd", f);
			s++;
		} else if (*s == '"' || *s == '\\') {
			putc('\\', f);
			putc(*s++, f);
		} else if (*s < 0x20) {
			fprintf(f, "\\u%04x", *s++);
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

void json_bool(struct json *j, bool v)
{
	json_sep(j);
	fputs(v ? "true" : "false", j->f);
}

void json_null(struct json *j)
{
	json_sep(j);
	fputs("null", j->f);
}

/* A ratio, or null when it is undefined (negative). */
void json_ratio(struct json *j, double v)
{
	if (v < 0) {
		json_null(j);
		return;
	}
	json_sep(j);
	fprintf(j->f, "%.6g", v);
}

/* Every field, whatever it is, so new daemon fields show up unasked. */
void json_rec(struct json *j, const struct rec *r, bool with_hit_rate)
{
	json_open(j, '{');
	for (uint32_t i = 0; i < r->n_fields; i++) {
		const struct field *f = &r->fields[i];
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
		if (strcmp(s->recs[i].kind, kind) == 0)
			json_rec(j, &s->recs[i], with_hit_rate);
	json_close(j, ']');
}

