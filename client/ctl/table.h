/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Aligned tables for people, printed by libsmartcols: a table is its
 * column description (a static array of struct column) and the cells,
 * added row by row, left to right.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

struct libscols_table;
struct libscols_line;

struct column {
	const char *name;
	bool right; /* numbers line up on their last digit */
};

struct table {
	const struct column *cols;
	size_t n_cols;
	struct libscols_table *tb; /* made at the first cell */
	struct libscols_line *line;
	size_t col; /* of the next cell in line */
	int error;
};

#define TABLE_INIT(c, n) ((struct table){.cols = (c), .n_cols = (n)})

/* One cell, printf-style; control characters become '?', invalid UTF-8
 * U+FFFD, and "" becomes "-".  A failure is kept for table_print. */
void table_add(struct table *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Print to f, "(none)" under the header when empty.
 * \return 0 or a negative errno */
int table_print(struct table *t, FILE *f);
void table_free(struct table *t);
