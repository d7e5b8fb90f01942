/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Text for people and for other programs: names from clients made safe to
 * print, and numbers made readable.
 */
#pragma once

#include <locale.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* C.UTF-8, for reading text as UTF-8 whatever the user's locale; NULL
 * where the C library lacks it. */
locale_t text_utf8_locale(void);

/* Length of the valid UTF-8 sequence at s (1 for ASCII, also for NUL), or
 * 0 when it is not one: JSON and Prometheus text must be UTF-8, a table
 * must be too (see table.c), and names from clients are arbitrary bytes. */
size_t text_utf8_len(const char *s);

/* Whether s is printable ASCII only, which needs no text_cell(). */
bool text_is_plain(const char *s);

/* A copy of s for a table cell: control characters become '?', invalid
 * UTF-8 becomes U+FFFD ('?' without text_utf8_locale()) and "" becomes
 * "-".  \return it, or NULL */
char *text_cell(const char *s);

/* Each returns buf. */
const char *fmt_pct(char *buf, size_t len, double ratio);    /* "12.5%", "-" */
const char *fmt_duration(char *buf, size_t len, uint64_t s); /* "3h05m" */
const char *fmt_count(char *buf, size_t len, uint64_t n);    /* "327,680" */
