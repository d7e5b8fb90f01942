/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What tests/gpu/test-gpu-layout.cu and its cases (layout-case.cu) share:
 * a case of the sweep, an engine cache on the host, one case's data, and
 * phase 1, the host emulation.  C++ (nvcc): the segment split is a
 * template.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "kvtier.h"
#include "layout_cuda.h"
#include "../engine-layouts.h"

#define N_LAYERS 3
/* Engine buffers at most: one per layer and plane (K_KV_SPLIT). */
#define MAX_BUFS (2 * N_LAYERS)
/* CTA budgets the kernel is run and emulated with: unbounded, and so
 * small that every CTA walks many blocks and items. */
#define SMALL_BUDGET 3
/* Blocks of the case past the grid's 65,535 along y. */
#define MANY_BLOCKS 70000
#define POISON 0xff
/* Room for the largest pointer offset. */
#define SLACK 16
/* Padding after each token row and after each head: strides that are not
 * multiples of the head size limit the access width by themselves. */
#define ROW_PAD 4
#define HEAD_PAD 2

/* Checks made and failed, over the whole run. */
extern int failures;
extern long n_checks;

/* One case of the sweep. */
struct tcase {
	enum layout_kind kind;
	uint32_t index_kind;
	uint32_t elem;    /* bytes per element */
	uint32_t dim;     /* head dim */
	uint32_t heads;
	uint32_t planes;
	uint32_t pt;      /* engine page tokens (S for dense) */
	uint32_t np;      /* pages (B for dense) */
	uint32_t bt;      /* block tokens */
	uint32_t shift;   /* bytes every pointer is offset by */
	int64_t n_blocks;
	size_t buf_bytes; /* bytes of each engine buffer */
	int n_bufs;       /* 1 for cross-layer, 2 per layer for kv-split,
			   * else one per layer */
	uint64_t block_bytes;
};

/* An engine cache in one memory: buffers (with slack for the offset) and
 * the layer bases the library sees. */
struct engine {
	uint8_t *alloc[MAX_BUFS];
	void *base[MAX_BUFS];
};

/* One case's buffers: the engine's original, the CPU path's results, the
 * emulation's, and the blocks. */
struct case_data {
	struct engine orig, want_eng, emu_eng;
	uint8_t **want_blk; /* [n_blocks] the CPU path's gather */
	uint8_t **emu_blk;  /* [n_blocks] at the case's pointer offset */
	uint8_t **src_blk;  /* [n_blocks] random, for scatters */
	uint8_t *tmp;       /* a buffer or block for reading back */
	int64_t n_idx, *idx;
	struct kvt_geom g;
	char what[200];
};

uint64_t rng(void);
void fill_random(uint8_t *p, size_t n);
void *xmalloc(size_t n);
void describe(const struct tcase *tc, char *buf, size_t n);
/* Strides of the engine layout, and where layer l starts in its buffer. */
void case_layout(const struct tcase *tc, void *const *base, kvt_layout *ret,
		 int64_t *ret_layer_off);
int n_bases(const struct tcase *tc);
void engine_bases(const struct tcase *tc, struct engine *e);
void engine_host(const struct tcase *tc, struct engine *e);
void engine_host_free(const struct tcase *tc, struct engine *e);
uint8_t *engine_buf(const struct tcase *tc, const struct engine *e, int i);
void pick_indices(const struct tcase *tc, int64_t *idx);
/* 0 when equal; else the first difference printed and counted. */
int report_diff(const char *what, const char *step, const char *where,
		const uint8_t *got, const uint8_t *want, size_t n);
uint32_t other_size(uint32_t bs);
size_t buf_bytes(const struct tcase *tc);
void emulate_case(const struct tcase *tc, struct case_data *d);
