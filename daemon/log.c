/* SPDX-License-Identifier: Apache-2.0 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "log.h"

/* Atomic: the NVMe tier's workers log on threads of their own while a
 * reload sets it on the event loop. */
static int max_level = LOG_INFO;

void log_set_max_level(int level)
{
	__atomic_store_n(&max_level, level, __ATOMIC_RELAXED);
}

int log_get_max_level(void)
{
	return __atomic_load_n(&max_level, __ATOMIC_RELAXED);
}

static const char *level_name(int level)
{
	switch (level) {
	case LOG_DEBUG: return "debug";
	case LOG_INFO: return "info";
	case LOG_NOTICE: return "notice";
	case LOG_WARNING: return "warning";
	default: return "error";
	}
}

static void log_emit(int level, const char *fmt, va_list ap)
{
	static int journal = -1;
	char line[2048];

	int j = __atomic_load_n(&journal, __ATOMIC_RELAXED);

	if (j < 0) {
		j = getenv("JOURNAL_STREAM") != NULL;
		__atomic_store_n(&journal, j, __ATOMIC_RELAXED);
	}
	vsnprintf(line, sizeof(line), fmt, ap);
	if (j)
		fprintf(stderr, "<%d>%s\n", level, line);
	else
		fprintf(stderr, "kvtierd: %s: %s\n", level_name(level), line);
}

void log_internal(int level, const char *fmt, ...)
{
	va_list ap;

	if (level > log_get_max_level())
		return;
	va_start(ap, fmt);
	log_emit(level, fmt, ap);
	va_end(ap);
}

int log_internal_errno(int level, int error, const char *fmt, ...)
{
	va_list ap;
	int e = error < 0 ? -error : error;

	if (level <= log_get_max_level()) {
		errno = e;
		va_start(ap, fmt);
		log_emit(level, fmt, ap);
		va_end(ap);
	}
	return -e;
}
