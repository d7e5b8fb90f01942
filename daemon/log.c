/* SPDX-License-Identifier: Apache-2.0 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "log.h"

static int max_level = LOG_INFO;

void log_set_max_level(int level)
{
	max_level = level;
}

int log_get_max_level(void)
{
	return max_level;
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

	if (journal < 0)
		journal = getenv("JOURNAL_STREAM") != NULL;
	vsnprintf(line, sizeof(line), fmt, ap);
	if (journal)
		fprintf(stderr, "<%d>%s\n", level, line);
	else
		fprintf(stderr, "kvtierd: %s: %s\n", level_name(level), line);
}

void log_internal(int level, const char *fmt, ...)
{
	va_list ap;

	if (level > max_level)
		return;
	va_start(ap, fmt);
	log_emit(level, fmt, ap);
	va_end(ap);
}

int log_internal_errno(int level, int error, const char *fmt, ...)
{
	va_list ap;
	int e = error < 0 ? -error : error;

	if (level <= max_level) {
		errno = e;
		va_start(ap, fmt);
		log_emit(level, fmt, ap);
		va_end(ap);
	}
	return -e;
}
