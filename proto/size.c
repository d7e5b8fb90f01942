/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdbool.h>
#include <inttypes.h>
#include <stdio.h>

#include "size.h"

static int unit_shift(char c)
{
	switch (c) {
	case 'K': case 'k': return 10;
	case 'M': case 'm': return 20;
	case 'G': case 'g': return 30;
	case 'T': case 't': return 40;
	case 'P': case 'p': return 50;
	default: return -1;
	}
}

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

int kvt_size_parse(const char *s, uint64_t *ret)
{
	uint64_t whole = 0, frac = 0, frac_div = 1, mult = 1, v;
	const char *p = s;

	if (!s || !is_digit(*s))
		return -EINVAL;
	for (; is_digit(*p); p++)
		if (__builtin_mul_overflow(whole, 10, &whole) ||
		    __builtin_add_overflow(whole, (uint64_t)(*p - '0'), &whole))
			return -ERANGE;
	if (*p == '.') {
		p++;
		if (!is_digit(*p))
			return -EINVAL;
		/* Nine places are finer than any byte count needs. */
		for (int n = 0; is_digit(*p); p++, n++)
			if (n < 9) {
				frac = frac * 10 + (uint64_t)(*p - '0');
				frac_div *= 10;
			}
	}
	int shift = unit_shift(*p);
	if (shift >= 0) {
		mult = UINT64_C(1) << shift;
		p++;
		if (*p == 'i')
			p++;
		if (*p == 'B')
			p++;
	} else if (*p == 'B') {
		p++;
	}
	if (*p)
		return -EINVAL;
	if (__builtin_mul_overflow(whole, mult, &v))
		return -ERANGE;
	/* floor(mult * frac / frac_div) without forming mult * frac, which can
	 * pass 2^64: both products stay below mult and 10^18. */
	uint64_t part = mult / frac_div * frac + mult % frac_div * frac / frac_div;
	if (__builtin_add_overflow(v, part, &v))
		return -ERANGE;
	*ret = v;
	return 0;
}

const char *kvt_size_format_exact(uint64_t n, char *buf, size_t len)
{
	static const char units[] = "PTGMK";

	for (int i = 0; i < 5; i++) {
		uint64_t u = UINT64_C(1) << (10 * (5 - i));
		if (n && n % u == 0) {
			snprintf(buf, len, "%" PRIu64 "%c", n / u, units[i]);
			return buf;
		}
	}
	snprintf(buf, len, "%" PRIu64, n);
	return buf;
}

const char *kvt_size_format(uint64_t n, char *buf, size_t len)
{
	static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
	double v = (double)n / 1024.0;
	unsigned u = 0;

	if (n < 1024) {
		snprintf(buf, len, "%" PRIu64 " B", n);
		return buf;
	}
	/* Switch unit before rounding would print "1024.0". */
	while (v >= 1023.95 && u + 1 < sizeof(units) / sizeof(units[0])) {
		v /= 1024.0;
		u++;
	}
	snprintf(buf, len, "%.1f %s", v, units[u]);
	return buf;
}
