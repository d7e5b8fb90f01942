/* SPDX-License-Identifier: Apache-2.0 */
#include <inttypes.h>
#include <limits.h>
#include <locale.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

#include "text.h"

#define REPLACEMENT "\xef\xbf\xbd" /* U+FFFD */

/* libc decodes UTF-8, whatever the user's locale: C.UTF-8 is built into
 * glibc (2.35 on).  Without it only ASCII counts as valid, which keeps the
 * output well-formed, only plainer. */
locale_t text_utf8_locale(void)
{
	static locale_t loc;
	static int tried;

	if (!tried) {
		loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
		tried = 1;
	}
	return loc;
}

size_t text_utf8_len(const char *s)
{
	locale_t loc, old;
	mbstate_t st = {0};
	wchar_t wc;
	size_t n;

	if ((unsigned char)*s < 0x80)
		return 1;
	loc = text_utf8_locale();
	if (!loc)
		return 0;
	old = uselocale(loc);
	n = mbrtowc(&wc, s, strnlen(s, MB_LEN_MAX), &st);
	uselocale(old);
	/* glibc also decodes the code points past U+10FFFF, which neither
	 * JSON nor Python's UTF-8 codec accepts. */
	if (n == (size_t)-1 || n == (size_t)-2 || n == 0 || (uint32_t)wc > 0x10ffff)
		return 0;
	return n;
}

bool text_is_plain(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || (unsigned char)*s >= 0x7f)
			return false;
	return true;
}

char *text_cell(const char *s)
{
	char *cell, *o;

	if (!*s)
		return strdup("-");
	/* Each byte at most becomes the three of U+FFFD. */
	cell = malloc(strlen(s) * 3 + 1);
	if (!cell)
		return NULL;
	for (o = cell; *s;) {
		size_t n = text_utf8_len(s);
		unsigned char c = (unsigned char)*s;

		if (n == 0 && !text_utf8_locale()) {
			*o++ = '?'; /* all of the cell must be ASCII then */
			s++;
		} else if (n == 0) {
			memcpy(o, REPLACEMENT, 3);
			o += 3;
			s++;
		} else if (c < 0x20 || c == 0x7f) {
			/* Names come from clients: a control character in one
			 * must not reach the terminal. */
			*o++ = '?';
			s++;
		} else {
			memcpy(o, s, n);
			o += n;
			s += n;
		}
	}
	*o = 0;
	return cell;
}

const char *fmt_pct(char *buf, size_t len, double ratio)
{
	if (ratio < 0)
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%.1f%%", ratio * 100.0);
	return buf;
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
