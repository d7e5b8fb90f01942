/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The exit status of a test that could not run here (no GPU, no root, no
 * io_uring, ...), which meson and automake count as skipped rather than
 * failed.  A test that exits with it first prints why.  The shell tests
 * spell it KVT_TEST_SKIP=77.
 *
 * Included by tests/check.h (and so by tests/integration/harness.h);
 * other tests include it as "../skip.h".
 */
#pragma once

#define KVT_TEST_SKIP 77
