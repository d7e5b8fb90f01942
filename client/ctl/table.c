/* SPDX-License-Identifier: Apache-2.0 */
/*
 * kvtierctl's tables through libsmartcols.  Two things it is not left to
 * decide: the width of the terminal (a cell is never cut or wrapped: the
 * whole name is what an operator greps for; top cuts its own lines) and
 * the encoding of names: text_cell() has replaced control characters and
 * bytes that are not UTF-8, and the table is measured as UTF-8 whatever
 * the user's locale.  libsmartcols 2.38 loops forever on a byte that is
 * not UTF-8, and on any non-ASCII text in the C locale (cron, systemd
 * units), where the cells are UTF-8 all the same.
 */
#include <errno.h>
#include <libsmartcols/libsmartcols.h>
#include <locale.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "macro.h"
#include "table.h"
#include "text.h"

static int table_make(struct table *t)
{
	struct libscols_table *tb = scols_new_table();

	if (!tb)
		return -ENOMEM;
	scols_table_set_termforce(tb, SCOLS_TERMFORCE_NEVER);
	scols_table_enable_noencoding(tb, 1);
	scols_table_set_column_separator(tb, "  ");
	for (size_t c = 0; c < t->n_cols; c++) {
		if (!scols_table_new_column(tb, t->cols[c].name, 0,
					    t->cols[c].right ? SCOLS_FL_RIGHT : 0)) {
			scols_unref_table(tb);
			return -ENOMEM;
		}
	}
	t->tb = tb;
	return 0;
}

static int table_add_cell(struct table *t, char *cell)
{
	int r;

	if (!t->tb)
		TRY(table_make(t));
	if (!t->line || t->col == t->n_cols) {
		t->line = scols_table_new_line(t->tb, NULL);
		if (!t->line)
			return -ENOMEM;
		t->col = 0;
	}
	/* refer: the line owns the cell from here on, and frees it. */
	r = scols_line_refer_data(t->line, t->col, cell);
	if (r < 0)
		return r;
	t->col++;
	return 0;
}

void table_add(struct table *t, const char *fmt, ...)
{
	_cleanup_free_ char *raw = NULL;
	char *cell;
	va_list ap;
	int r;

	if (t->error)
		return;
	va_start(ap, fmt);
	r = vasprintf(&raw, fmt, ap);
	va_end(ap);
	if (r < 0) {
		raw = NULL;
		t->error = -ENOMEM;
		return;
	}
	/* Most cells are numbers and plain names: no copy for those. */
	cell = raw[0] && text_is_plain(raw) ? TAKE_PTR(raw) : text_cell(raw);
	if (!cell) {
		t->error = -ENOMEM;
		return;
	}
	r = table_add_cell(t, cell);
	if (r < 0) {
		free(cell);
		t->error = r;
	}
}

/* libsmartcols prints nothing at all for a table without lines; the
 * header still says what would be there.  Without cells every column is
 * as wide as its name, so the names joined are the aligned header. */
static void print_empty(const struct table *t, FILE *f)
{
	for (size_t c = 0; c < t->n_cols; c++)
		fprintf(f, "%s%s", c ? "  " : "", t->cols[c].name);
	fputs("\n(none)\n", f);
}

int table_print(struct table *t, FILE *f)
{
	locale_t utf8 = text_utf8_locale(), old = (locale_t)0;
	int r;

	if (t->error)
		return t->error;
	if (!t->tb) {
		print_empty(t, f);
		return 0;
	}
	r = scols_table_set_stream(t->tb, f);
	if (r < 0)
		return r;
	if (utf8)
		old = uselocale(utf8);
	r = scols_print_table(t->tb);
	if (utf8)
		uselocale(old);
	return r;
}

void table_free(struct table *t)
{
	scols_unref_table(t->tb);
	t->tb = NULL;
	t->line = NULL;
}
