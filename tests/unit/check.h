/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Checks for the unit tests: a failed check prints where and what, is
 * counted, and the test goes on, so one run shows every failure.  The test
 * exits 1 when `failures` is not zero.
 *
 * `failures` is one count for the whole program, also when a test is made
 * of several files that include this header (a helper file's checks count
 * too): each file's definition is weak, and the linker keeps one.
 */
#pragma once

#include <dirent.h>
#include <stdio.h>

#include "../skip.h"

__attribute__((weak)) int failures;

#define CHECK(cond)                                                        \
	do {                                                               \
		if (!(cond)) {                                             \
			fprintf(stderr, "%s:%d: check failed: %s\n",       \
				__FILE__, __LINE__, #cond);                \
			failures++;                                        \
		}                                                          \
	} while (0)

#define CHECK_MSG(cond, ...)                                               \
	do {                                                               \
		if (!(cond)) {                                             \
			fprintf(stderr, "%s:%d: check failed: %s: ",       \
				__FILE__, __LINE__, #cond);                \
			fprintf(stderr, __VA_ARGS__);                      \
			fputc('\n', stderr);                               \
			failures++;                                        \
		}                                                          \
	} while (0)

/* Descriptors this process has open (and the directory's own, and . and
 * ..): compared before and after, a leak shows as a difference. */
static inline int open_fd_count(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	if (!d)
		return -1;
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

