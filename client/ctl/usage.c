/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Refusing a command line: the words and the exit code are the same
 * whichever part of kvtierctl finds the mistake.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

#include "ctl.h"
#include "plan-math.h"

int ctl_usage_error(const char *prefix, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", prefix);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\nTry 'kvtierctl --help'.\n", stderr);
	return -EINVAL;
}

int ctl_opt_count(const char *name, const char *arg, uint64_t min, uint64_t *ret)
{
	uint64_t v;

	if (plan_parse_count(arg, &v) < 0 || v < min)
		return ctl_usage_error("kvtierctl", "%s needs a whole number%s, not '%s'", name,
				       min ? " of at least 1" : "", arg);
	*ret = v;
	return 0;
}

int ctl_opt_size(const char *name, const char *arg, uint64_t *ret)
{
	if (kvt_size_parse(arg, ret) < 0)
		return ctl_usage_error("kvtierctl",
				       "%s needs a size such as 64G, 1.5T or 512MiB, not '%s'",
				       name, arg);
	return 0;
}

int ctl_parse_u64(const char *s, uint64_t *ret)
{
	uint64_t v = 0;

	if (!*s)
		return -EINVAL;
	for (; *s; s++) {
		if (*s < '0' || *s > '9')
			return -EINVAL;
		if (__builtin_mul_overflow(v, 10, &v) ||
		    __builtin_add_overflow(v, (uint64_t)(*s - '0'), &v))
			return -ERANGE;
	}
	*ret = v;
	return 0;
}
