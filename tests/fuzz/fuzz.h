/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz targets are libFuzzer entry points.  Built with clang and
 * -fsanitize=fuzzer (scripts/fuzz.sh) libFuzzer drives them; built as a
 * plain test, fuzz-main.c replays their seeds and a fixed number of
 * deterministic mutations of them, so CI exercises the same code under
 * ASan/UBSan on every run.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Valid inputs to start from; each target provides them. */
typedef void (*fuzz_seed_fn)(const uint8_t *data, size_t size, void *userdata);
void fuzz_seeds(fuzz_seed_fn emit, void *userdata);
