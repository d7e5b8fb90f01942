/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvtierctl: what a running kvtierd holds, as tables for people and JSON for
 * programs.  Everything comes from kvt_stats() records; this tool only
 * selects, copies and formats them.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvt-config.h"
#include "kvtier.h"

#define EXIT_DAEMON 1 /* daemon unreachable or the request failed */
#define EXIT_USAGE 2

static int verbose;

/* ------------------------------------------------------------------ */
/* Records                                                            */
/* ------------------------------------------------------------------ */

/* The library reuses one record for every callback, so each is copied. */
struct field {
	char *name;
	int type;
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

static void rec_clear(struct rec *r)
{
	for (uint32_t i = 0; i < r->n_fields; i++) {
		free(r->fields[i].name);
		free(r->fields[i].s);
	}
	free(r->fields);
	free(r->kind);
}

static void snapshot_clear(struct snapshot *s)
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

static int snapshot_add(const kvt_record *r, void *userdata)
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

static const struct field *rec_field(const struct rec *r, const char *name)
{
	for (uint32_t i = 0; i < r->n_fields; i++)
		if (strcmp(r->fields[i].name, name) == 0)
			return &r->fields[i];
	return NULL;
}

/* Missing numbers read as 0: a non-admin view or an older daemon lacks
 * some fields, and a table cell of 0 is as honest as the daemon allows. */
static uint64_t rec_u64(const struct rec *r, const char *name)
{
	const struct field *f = rec_field(r, name);
	return f && f->type != KVT_FIELD_STR ? f->u : 0;
}

static bool rec_has(const struct rec *r, const char *name)
{
	return rec_field(r, name) != NULL;
}

static const char *rec_str(const struct rec *r, const char *name)
{
	const struct field *f = rec_field(r, name);
	return f && f->type == KVT_FIELD_STR ? f->s : "";
}

static const struct rec *snapshot_find(const struct snapshot *s, const char *kind)
{
	for (size_t i = 0; i < s->n; i++)
		if (strcmp(s->recs[i].kind, kind) == 0)
			return &s->recs[i];
	return NULL;
}

/* \return the share of lookups that hit, or a negative number when there
 * were none (so callers print "-" or null rather than a made-up 0%). */
static double hit_rate(const struct rec *r)
{
	uint64_t hits = rec_u64(r, "hits"), misses = rec_u64(r, "misses");
	if (hits + misses == 0)
		return -1.0;
	return (double)hits / (double)(hits + misses);
}

/* ------------------------------------------------------------------ */
/* Human formatting                                                   */
/* ------------------------------------------------------------------ */

static const char *fmt_size(char *buf, size_t len, uint64_t n)
{
	static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
	double v = (double)n;
	unsigned u = 0;

	if (n < 1024) {
		snprintf(buf, len, "%" PRIu64 " B", n);
		return buf;
	}
	v /= 1024.0;
	/* Switch unit before rounding would print "1024.0". */
	while (v >= 1023.95 && u + 1 < sizeof(units) / sizeof(units[0])) {
		v /= 1024.0;
		u++;
	}
	snprintf(buf, len, "%.1f %s", v, units[u]);
	return buf;
}

static const char *fmt_pct(char *buf, size_t len, double ratio)
{
	if (ratio < 0)
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%.1f%%", ratio * 100.0);
	return buf;
}

static double ratio_of(uint64_t part, uint64_t whole)
{
	return whole ? (double)part / (double)whole : -1.0;
}

static const char *fmt_duration(char *buf, size_t len, uint64_t s)
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

/* Names come from clients: a control character in one must not reach the
 * terminal, and an empty one reads better as "-". */
static void table_add(struct table *t, const char *fmt, ...)
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

static void print_cell(const char *s, size_t width, bool right, bool last)
{
	size_t pad = width - text_width(s);

	if (right)
		printf("%*s%s", (int)pad, "", s);
	else if (last)
		fputs(s, stdout); /* no trailing blanks */
	else
		printf("%s%*s", s, (int)pad, "");
}

static void print_row(const struct table *t, const char *const *row,
		      const size_t *widths)
{
	for (size_t c = 0; c < t->n_cols; c++) {
		if (c)
			fputs("  ", stdout);
		print_cell(row[c], widths[c], t->cols[c].right, c + 1 == t->n_cols);
	}
	putchar('\n');
}

static int table_print(struct table *t)
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
	print_row(t, header, widths);
	for (size_t i = 0; i + t->n_cols <= t->n; i += t->n_cols)
		print_row(t, (const char *const *)&t->cells[i], widths);
	if (t->n == 0)
		puts("(none)");
out:
	free(widths);
	free(header);
	return r;
}

static void table_free(struct table *t)
{
	for (size_t i = 0; i < t->n; i++)
		free(t->cells[i]);
	free(t->cells);
}

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
static size_t utf8_len(const unsigned char *s)
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

static void json_open(struct json *j, char c)
{
	json_sep(j);
	putc(c, j->f);
	j->depth++;
	if (j->depth >= JSON_MAX_DEPTH)
		abort(); /* only this file nests, and never this deep */
	j->has_items[j->depth] = false;
}

static void json_close(struct json *j, char c)
{
	bool had_items = j->has_items[j->depth];

	j->depth--;
	if (had_items)
		json_indent(j);
	putc(c, j->f);
	if (j->depth == 0)
		putc('\n', j->f);
}

static void json_key(struct json *j, const char *key)
{
	json_sep(j);
	json_string_raw(j->f, key);
	fputs(": ", j->f);
	j->after_key = true;
}

static void json_str(struct json *j, const char *s)
{
	json_sep(j);
	json_string_raw(j->f, s);
}

static void json_u64(struct json *j, uint64_t v)
{
	json_sep(j);
	fprintf(j->f, "%" PRIu64, v);
}

static void json_i64(struct json *j, int64_t v)
{
	json_sep(j);
	fprintf(j->f, "%" PRId64, v);
}

static void json_null(struct json *j)
{
	json_sep(j);
	fputs("null", j->f);
}

/* A ratio, or null when it is undefined (negative). */
static void json_ratio(struct json *j, double v)
{
	if (v < 0) {
		json_null(j);
		return;
	}
	json_sep(j);
	fprintf(j->f, "%.6g", v);
}

/* Every field, whatever it is, so new daemon fields show up unasked. */
static void json_rec(struct json *j, const struct rec *r, bool with_hit_rate)
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

static void json_recs(struct json *j, const struct snapshot *s, const char *kind,
		      bool with_hit_rate)
{
	json_open(j, '[');
	for (size_t i = 0; i < s->n; i++)
		if (strcmp(s->recs[i].kind, kind) == 0)
			json_rec(j, &s->recs[i], with_hit_rate);
	json_close(j, ']');
}

/* ------------------------------------------------------------------ */
/* Commands                                                           */
/* ------------------------------------------------------------------ */

struct ctx {
	const char *socket;
	bool json;
	struct snapshot snap;
};

static int print_tenants(const struct snapshot *s)
{
	static const struct column cols[] = {
		{"TENANT", false}, {"QUOTA", true}, {"USED", true},
		{"BLOCKS", true}, {"NAMESPACES", true}, {"CLIENTS", true},
		{"HIT RATE", true},
	};
	struct table t = {.cols = cols, .n_cols = sizeof(cols) / sizeof(cols[0])};
	char a[32], b[32], c[32];
	int r;

	for (size_t i = 0; i < s->n; i++) {
		const struct rec *x = &s->recs[i];
		if (strcmp(x->kind, "tenant") != 0)
			continue;
		table_add(&t, "%s", rec_str(x, "name"));
		table_add(&t, "%s", fmt_size(a, sizeof(a), rec_u64(x, "quota")));
		table_add(&t, "%s (%s)", fmt_size(b, sizeof(b), rec_u64(x, "used")),
			  fmt_pct(c, sizeof(c), ratio_of(rec_u64(x, "used"), rec_u64(x, "quota"))));
		table_add(&t, "%" PRIu64, rec_u64(x, "blocks"));
		table_add(&t, "%" PRIu64, rec_u64(x, "namespaces"));
		table_add(&t, "%" PRIu64, rec_u64(x, "clients"));
		table_add(&t, "%s", fmt_pct(a, sizeof(a), hit_rate(x)));
	}
	r = table_print(&t);
	table_free(&t);
	return r;
}

static int print_namespaces(const struct snapshot *s, bool all)
{
	static const struct column short_cols[] = {
		{"TENANT", false}, {"ID", true}, {"MODEL", false},
		{"LAYERS", true}, {"TP", true}, {"BLOCK TOKENS", true},
		{"BLOCK SIZE", true}, {"BLOCKS", true}, {"BYTES", true},
		{"HIT RATE", true}, {"STORES", true}, {"LOADS", true},
		{"EVICTIONS", true},
	};
	/* The same first columns, then every counter the daemon keeps. */
	static const struct column all_cols[] = {
		{"TENANT", false}, {"ID", true}, {"MODEL", false},
		{"LAYERS", true}, {"TP", true}, {"BLOCK TOKENS", true},
		{"BLOCK SIZE", true}, {"BLOCKS", true}, {"BYTES", true},
		{"HIT RATE", true}, {"STORES", true}, {"LOADS", true},
		{"EVICTIONS", true}, {"RESERVED", true}, {"LOOKUPS", true},
		{"KEYS", true}, {"HITS", true}, {"MISSES", true},
		{"STORED", true}, {"LOADED", true}, {"ABORTS", true},
		{"DELETES", true}, {"REJECTED", true}, {"OPENS", true},
	};
	struct table t = {
		.cols = all ? all_cols : short_cols,
		.n_cols = all ? sizeof(all_cols) / sizeof(all_cols[0])
			      : sizeof(short_cols) / sizeof(short_cols[0]),
	};
	char a[32];
	int r;

	for (size_t i = 0; i < s->n; i++) {
		const struct rec *x = &s->recs[i];
		if (strcmp(x->kind, "namespace") != 0)
			continue;
		table_add(&t, "%s", rec_str(x, "tenant"));
		table_add(&t, "%" PRIu64, rec_u64(x, "id"));
		table_add(&t, "%s", rec_str(x, "model"));
		table_add(&t, "%" PRIu64 "-%" PRIu64, rec_u64(x, "layer_first"),
			  rec_u64(x, "layer_end"));
		table_add(&t, "%" PRIu64, rec_u64(x, "tp"));
		table_add(&t, "%" PRIu64, rec_u64(x, "block_tokens"));
		table_add(&t, "%s", fmt_size(a, sizeof(a), rec_u64(x, "block_bytes")));
		table_add(&t, "%" PRIu64, rec_u64(x, "blocks"));
		table_add(&t, "%s", fmt_size(a, sizeof(a), rec_u64(x, "bytes")));
		table_add(&t, "%s", fmt_pct(a, sizeof(a), hit_rate(x)));
		table_add(&t, "%" PRIu64, rec_u64(x, "stores"));
		table_add(&t, "%" PRIu64, rec_u64(x, "loads"));
		table_add(&t, "%" PRIu64, rec_u64(x, "evictions"));
		if (!all)
			continue;
		table_add(&t, "%" PRIu64, rec_u64(x, "reserved"));
		table_add(&t, "%" PRIu64, rec_u64(x, "lookups"));
		table_add(&t, "%" PRIu64, rec_u64(x, "lookup_keys"));
		table_add(&t, "%" PRIu64, rec_u64(x, "hits"));
		table_add(&t, "%" PRIu64, rec_u64(x, "misses"));
		table_add(&t, "%s", fmt_size(a, sizeof(a), rec_u64(x, "store_bytes")));
		table_add(&t, "%s", fmt_size(a, sizeof(a), rec_u64(x, "load_bytes")));
		table_add(&t, "%" PRIu64, rec_u64(x, "aborts"));
		table_add(&t, "%" PRIu64, rec_u64(x, "deletes"));
		table_add(&t, "%" PRIu64, rec_u64(x, "rejected"));
		table_add(&t, "%" PRIu64, rec_u64(x, "opens"));
	}
	r = table_print(&t);
	table_free(&t);
	return r;
}

static int print_clients(const struct snapshot *s)
{
	static const struct column cols[] = {
		{"ID", true}, {"PID", true}, {"UID", true}, {"TENANT", false},
		{"NAME", false}, {"PROTOCOL", true}, {"REQUESTS", true},
		{"HANDLES", true}, {"QUEUED", true}, {"CONNECTED", true},
	};
	struct table t = {.cols = cols, .n_cols = sizeof(cols) / sizeof(cols[0])};
	char a[32];
	int r;

	for (size_t i = 0; i < s->n; i++) {
		const struct rec *x = &s->recs[i];
		if (strcmp(x->kind, "client") != 0)
			continue;
		table_add(&t, "%" PRIu64, rec_u64(x, "id"));
		table_add(&t, "%" PRIu64, rec_u64(x, "pid"));
		table_add(&t, "%" PRIu64, rec_u64(x, "uid"));
		table_add(&t, "%s", rec_str(x, "tenant"));
		table_add(&t, "%s", rec_str(x, "name"));
		table_add(&t, "%" PRIu64, rec_u64(x, "protocol"));
		table_add(&t, "%" PRIu64, rec_u64(x, "requests"));
		table_add(&t, "%" PRIu64, rec_u64(x, "handles"));
		table_add(&t, "%s", fmt_size(a, sizeof(a), rec_u64(x, "queued_bytes")));
		table_add(&t, "%s", fmt_duration(a, sizeof(a), rec_u64(x, "connected_s")));
	}
	r = table_print(&t);
	table_free(&t);
	return r;
}

/* One "label: value" line, only when the daemon sent the field: a
 * non-admin view carries version, protocol and uptime only. */
static void print_size_line(const struct rec *d, const char *label,
			    const char *field)
{
	char a[32], b[32];

	if (!rec_has(d, field))
		return;
	if (strcmp(field, "capacity") == 0) {
		printf("%-13s%s\n", label, fmt_size(a, sizeof(a), rec_u64(d, field)));
		return;
	}
	printf("%-13s%s (%s)\n", label, fmt_size(a, sizeof(a), rec_u64(d, field)),
	       fmt_pct(b, sizeof(b), ratio_of(rec_u64(d, field), rec_u64(d, "capacity"))));
}

static void print_daemon(const struct ctx *x, const struct rec *d)
{
	char a[32];

	printf("%-13skvtierd %s, protocol %" PRIu64, "Daemon:", rec_str(d, "version"),
	       rec_u64(d, "protocol"));
	if (rec_has(d, "pid"))
		printf(", pid %" PRIu64, rec_u64(d, "pid"));
	putchar('\n');
	printf("%-13s%s\n", "Uptime:", fmt_duration(a, sizeof(a), rec_u64(d, "uptime_s")));
	printf("%-13s%s\n", "Socket:", rec_has(d, "socket") ? rec_str(d, "socket") : x->socket);
	print_size_line(d, "Host pool:", "capacity");
	print_size_line(d, "  allocated:", "allocated");
	print_size_line(d, "  used:", "used");
	print_size_line(d, "  free:", "free");
	if (rec_has(d, "extents")) {
		printf("%-13s%" PRIu64, "  extents:", rec_u64(d, "extents"));
		if (rec_has(d, "extents_hugetlb"))
			printf(" (%" PRIu64 " hugetlb, %" PRIu64 " THP, %" PRIu64 " locked)",
			       rec_u64(d, "extents_hugetlb"), rec_u64(d, "extents_thp"),
			       rec_u64(d, "extents_locked"));
		putchar('\n');
	}
	if (rec_has(d, "pages"))
		printf("%-13s%s\n", "Pages:", rec_str(d, "pages"));
	if (rec_has(d, "lock"))
		printf("%-13s%s\n", "Lock:", rec_str(d, "lock"));
	if (rec_has(d, "tenants"))
		printf("%-13stenants %" PRIu64 ", namespaces %" PRIu64 ", blocks %" PRIu64
		       ", handles %" PRIu64 "\n", "Contents:",
		       rec_u64(d, "tenants"), rec_u64(d, "namespaces"),
		       rec_u64(d, "blocks"), rec_u64(d, "handles"));
	if (rec_has(d, "clients"))
		printf("%-13s%" PRIu64 "\n", "Clients:", rec_u64(d, "clients"));
	if (rec_has(d, "connections"))
		printf("%-13s%" PRIu64 " accepted, %" PRIu64 " refused, %" PRIu64
		       " malformed\n", "Connections:", rec_u64(d, "connections"),
		       rec_u64(d, "refused"), rec_u64(d, "malformed"));
	if (!rec_has(d, "capacity"))
		printf("\n(Only your own tenant is shown; run as root or as kvtierd's user for the whole daemon.)\n");
}

static int cmd_status(struct ctx *x)
{
	const struct rec *d = snapshot_find(&x->snap, "daemon");
	int r;

	if (x->json) {
		struct json j = {.f = stdout};
		json_open(&j, '{');
		json_key(&j, "daemon");
		if (d)
			json_rec(&j, d, false);
		else
			json_null(&j);
		json_key(&j, "tenants");
		json_recs(&j, &x->snap, "tenant", true);
		json_key(&j, "namespaces");
		json_recs(&j, &x->snap, "namespace", true);
		if (snapshot_find(&x->snap, "client")) {
			json_key(&j, "clients");
			json_recs(&j, &x->snap, "client", false);
		}
		json_close(&j, '}');
		return 0;
	}
	if (d)
		print_daemon(x, d);
	printf("\nTenants:\n");
	r = print_tenants(&x->snap);
	if (r < 0)
		return r;
	printf("\nNamespaces:\n");
	return print_namespaces(&x->snap, false);
}

static int cmd_clients(struct ctx *x)
{
	if (x->json) {
		struct json j = {.f = stdout};
		json_recs(&j, &x->snap, "client", false);
		return 0;
	}
	return print_clients(&x->snap);
}

static int cmd_namespaces(struct ctx *x)
{
	if (x->json) {
		struct json j = {.f = stdout};
		json_recs(&j, &x->snap, "namespace", true);
		return 0;
	}
	return print_namespaces(&x->snap, true);
}

static const struct command {
	const char *name;
	uint32_t what; /* only what the command shows crosses the socket */
	int (*run)(struct ctx *x);
	const char *help;
} commands[] = {
	{"status", KVT_STATS_DAEMON | KVT_STATS_TENANTS | KVT_STATS_NAMESPACES,
	 cmd_status, "daemon summary, host pool, tenants and namespaces"},
	{"clients", KVT_STATS_CLIENTS, cmd_clients,
	 "connected clients: pid, uid, tenant, requests, handles"},
	{"namespaces", KVT_STATS_NAMESPACES, cmd_namespaces,
	 "every namespace with all its counters"},
};

/* ------------------------------------------------------------------ */
/* Main                                                               */
/* ------------------------------------------------------------------ */

static void help(void)
{
	printf("Usage: kvtierctl [OPTIONS] COMMAND\n"
	       "\n"
	       "Show what a running kvtierd holds: the host pool, tenants,\n"
	       "namespaces and connected clients.  Sizes in tables are\n"
	       "human-readable; --json prints raw numbers for programs.\n"
	       "\n"
	       "Commands:\n");
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		printf("  %-12s %s\n", commands[i].name, commands[i].help);
	printf("\n"
	       "Options:\n"
	       "  -s, --socket PATH  talk to the kvtierd listening on PATH\n"
	       "                     (default %s)\n"
	       "      --json         print JSON instead of tables\n"
	       "  -v, --verbose      show the client library's warnings and errors\n"
	       "                     (twice: also its informational messages)\n"
	       "  -h, --help         show this help\n"
	       "  -V, --version      show the version\n"
	       "\n"
	       "Examples:\n"
	       "  kvtierctl status\n"
	       "  kvtierctl --socket /tmp/kvt.sock clients\n"
	       "  kvtierctl --json namespaces | jq '.[] | {model, hit_rate}'\n"
	       "\n"
	       "Environment:\n"
	       "  KVTIER_SOCKET      the socket when --socket is not given\n"
	       "\n"
	       "Exit status:\n"
	       "  0  success\n"
	       "  1  kvtierd could not be reached or refused the request\n"
	       "  2  bad usage\n",
	       kvt_default_socket());
}

static void log_stderr(int level, const char *message, void *userdata)
{
	const char *what;

	if (level > KVT_LOG_WARNING && verbose < 2)
		return;
	what = level <= KVT_LOG_ERR ? "error" : level <= KVT_LOG_WARNING ? "warning" : "info";
	fprintf(stderr, "kvtierctl: libkvtier-client %s: %s\n", what, message);
}

static void connect_failed(const char *path, int r)
{
	fprintf(stderr, "kvtierctl: cannot connect to kvtierd at %s: %s\n", path, strerror(-r));
	switch (-r) {
	case ENOENT:
	case ECONNREFUSED:
	case ENOTSOCK:
		fprintf(stderr, "kvtierctl: is kvtierd running? start it with 'kvtierd --socket %s' or 'systemctl start kvtierd', or point KVTIER_SOCKET at its socket\n",
			path);
		break;
	case EACCES:
	case EPERM:
		fprintf(stderr, "kvtierctl: the socket or its directory is not open to you; run as root or as a user kvtierd accepts\n");
		break;
	default:
		/* The daemon's own reason reaches only the log handler. */
		if (!verbose)
			fprintf(stderr, "kvtierctl: run with -v for the reason\n");
		break;
	}
}

/* The library waits for replies without a deadline, so a wedged daemon
 * would hang the tool that is meant to diagnose it. */
#define REPLY_TIMEOUT_S 10

static char timeout_msg[256];

static void on_alarm(int sig)
{
	ssize_t n = write(STDERR_FILENO, timeout_msg, strlen(timeout_msg));
	(void)n;
	_exit(EXIT_DAEMON);
}

static void arm_timeout(const char *path)
{
	struct sigaction sa = {.sa_handler = on_alarm};

	snprintf(timeout_msg, sizeof(timeout_msg),
		 "kvtierctl: kvtierd at %s did not answer within %d s\n", path,
		 REPLY_TIMEOUT_S);
	sigaction(SIGALRM, &sa, NULL);
	alarm(REPLY_TIMEOUT_S);
}

static int usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs("kvtierctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\nTry 'kvtierctl --help'.\n", stderr);
	return EXIT_USAGE;
}

int main(int argc, char **argv)
{
	enum { OPT_JSON = 0x100 };
	static const struct option opts[] = {
		{"socket", required_argument, NULL, 's'},
		{"json", no_argument, NULL, OPT_JSON},
		{"verbose", no_argument, NULL, 'v'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{},
	};
	struct ctx x = {0};
	const struct command *cmd = NULL;
	kvt_client *client = NULL;
	int c, r, ret = EXIT_DAEMON;

	while ((c = getopt_long(argc, argv, "s:vhV", opts, NULL)) >= 0) {
		switch (c) {
		case 's':
			x.socket = optarg;
			break;
		case OPT_JSON:
			x.json = true;
			break;
		case 'v':
			verbose++;
			break;
		case 'h':
			help();
			return 0;
		case 'V':
			printf("kvtierctl %s (libkvtier-client %s, protocol %u)\n",
			       KVT_VERSION, kvt_version(), (unsigned)kvt_protocol_version());
			return 0;
		default:
			/* getopt has said what was wrong. */
			fputs("Try 'kvtierctl --help'.\n", stderr);
			return EXIT_USAGE;
		}
	}
	if (optind >= argc)
		return usage_error("no command given (one of: status, clients, namespaces)");
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (strcmp(argv[optind], commands[i].name) == 0)
			cmd = &commands[i];
	if (!cmd)
		return usage_error("unknown command '%s'", argv[optind]);
	if (optind + 1 < argc)
		return usage_error("unexpected argument '%s'", argv[optind + 1]);
	if (!x.socket)
		x.socket = kvt_default_socket();
	if (!x.socket[0])
		return usage_error("--socket needs a non-empty PATH");

	if (verbose)
		kvt_set_default_log(log_stderr, NULL);
	arm_timeout(x.socket);
	kvt_connect_opts copts = {.size = sizeof(copts), .flags = KVT_CONNECT_OBSERVER,
				 .socket_path = x.socket, .name = "kvtierctl"};
	r = kvt_client_connect_opts(&copts, &client);
	if (r < 0) {
		connect_failed(x.socket, r);
		return EXIT_DAEMON;
	}
	r = kvt_stats(client, cmd->what, snapshot_add, &x.snap);
	if (r >= 0 && x.snap.error < 0)
		r = x.snap.error;
	if (r < 0) {
		const char *why = kvt_client_error(client);
		fprintf(stderr, "kvtierctl: cannot read statistics from kvtierd at %s: %s%s%s\n",
			x.socket, strerror(-r), why[0] ? ": " : "", why);
		goto out;
	}
	alarm(0);
	r = cmd->run(&x);
	if (r < 0) {
		fprintf(stderr, "kvtierctl: %s\n", strerror(-r));
		goto out;
	}
	/* A full disk or a closed pipe must not look like success. */
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "kvtierctl: cannot write the output: %m\n");
		goto out;
	}
	ret = 0;
out:
	snapshot_clear(&x.snap);
	kvt_client_free(client);
	return ret;
}
