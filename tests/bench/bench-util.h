/* SPDX-License-Identifier: Apache-2.0 */
/* What both benchmarks use: clocks, statistics of pairwise ratios, data. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define BENCH_MAX_PAIRS 1000

/* Each benchmark's own: clean up (its daemon, its files), say why, exit 1. */
_Noreturn void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

uint64_t now_ns(void);
/* A well-mixed 64-bit function of x (splitmix64's finaliser). */
uint64_t mix(uint64_t x);
/* Of n ≤ BENCH_MAX_PAIRS values. */
double median(const double *v, unsigned n);
double vmin(const double *v, unsigned n);
double vmax(const double *v, unsigned n);
/* bytes per ns is GB/s. */
double gbs(uint64_t bytes, uint64_t ns);
const char *verdict(bool met);
/* Anonymous memory with every page written, so no copy pays a first
 * touch; dies when it cannot be had. */
uint8_t *alloc_populated(uint64_t bytes);
void fill_random(uint8_t *p, uint64_t bytes, uint64_t seed);
/* A JSON string literal of s on stdout. */
void json_string(const char *s);
/* 0 when something listens at path, else a negative errno. */
int try_connect(const char *path);
