/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The one size grammar of kvtier: what the config, kvtierctl and the logs
 * read and write.
 *
 *   size   = digits [ "." digits ] [ unit [ "i" ] [ "B" ] | "B" ]
 *   unit   = K | M | G | T | P        (binary: K = 1024; any case)
 *
 * "65536", "64K", "64Ki", "64KiB", "1.5T", "4096B" are sizes; a fraction is cut to
 * whole bytes.  No blanks and no sign are accepted, so "-1" cannot wrap
 * around into a huge size.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* Room for any formatted size, with its terminating NUL. */
#define KVT_SIZE_LEN 32

/* 0, -EINVAL when s is not a size, -ERANGE when it passes 2^64 - 1. */
int kvt_size_parse(const char *s, uint64_t *ret);

/* In the grammar above and exact, so that it reads back equal: the largest
 * unit that divides n ("64G", "1536K"), else plain bytes ("4097"). */
const char *kvt_size_format_exact(uint64_t n, char *buf, size_t len);

/* For people: one decimal and a binary unit ("1.5 GiB", "512 B"). */
const char *kvt_size_format(uint64_t n, char *buf, size_t len);
