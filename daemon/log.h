/* SPDX-License-Identifier: Apache-2.0 */
#pragma once

#include <errno.h>
#include <syslog.h>

/*
 * Logging to stderr.  Under systemd (JOURNAL_STREAM set) each line carries a
 * "<N>" priority prefix that journald turns into the record's level.
 * The *_errno variants set errno from a negative errno so "%m" prints it,
 * and return that negative errno for "return log_error_errno(r, ...)".
 */
void log_set_max_level(int level);
int log_get_max_level(void);
void log_internal(int level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
int log_internal_errno(int level, int error, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#define log_debug(...) log_internal(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_internal(LOG_INFO, __VA_ARGS__)
#define log_notice(...) log_internal(LOG_NOTICE, __VA_ARGS__)
#define log_warning(...) log_internal(LOG_WARNING, __VA_ARGS__)
#define log_error(...) log_internal(LOG_ERR, __VA_ARGS__)
#define log_debug_errno(e, ...) log_internal_errno(LOG_DEBUG, e, __VA_ARGS__)
#define log_info_errno(e, ...) log_internal_errno(LOG_INFO, e, __VA_ARGS__)
#define log_warning_errno(e, ...) log_internal_errno(LOG_WARNING, e, __VA_ARGS__)
#define log_error_errno(e, ...) log_internal_errno(LOG_ERR, e, __VA_ARGS__)
