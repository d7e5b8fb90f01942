/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Checks for the tests: CHECK(cond) or CHECK(cond, fmt, ...).  A failed
 * check prints where, the condition and the message, if any:
 *
 *	test-foo.c:42: check failed: n == 3: got 4
 *
 * and then does CHECK_FAILED().  By default that counts the failure in
 * `failures` and the test goes on, so one run shows every failure; the
 * test exits 1 when `failures` is not zero.  A header that includes this
 * one may define CHECK_FAILED() to stop instead: the integration harness
 * stops the test and its daemon there (harness.h).
 *
 * `failures` is one count for the whole program, also when a test is made
 * of several files that include this header (a helper file's checks count
 * too): each file's definition is weak, and the linker keeps one.
 *
 * Included by tests/integration/harness.h; other tests include it as
 * "../check.h".
 */
#pragma once

#include <stdio.h>

#include "skip.h"

__attribute__((weak)) int failures;

#ifndef CHECK_FAILED
#define CHECK_FAILED() (failures++)
#endif

#define CHECK(cond, ...)                                                   \
	do {                                                               \
		if (!(cond)) {                                             \
			fprintf(stderr, "%s:%d: check failed: %s",         \
				__FILE__, __LINE__, #cond);                \
			__VA_OPT__(fputs(": ", stderr);                    \
				   fprintf(stderr, __VA_ARGS__);)          \
			fputc('\n', stderr);                               \
			CHECK_FAILED();                                    \
		}                                                          \
	} while (0)

/* CHECK(cond) of a case of size n: the message names n. */
#define CHECK_N(cond, n) CHECK(cond, "n = %u", (unsigned)(n))
