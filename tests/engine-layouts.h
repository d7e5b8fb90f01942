/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The engine cache layouts the layout tests build, one table for the unit
 * test of the CPU path (tests/unit/test-layout.c, against a reference of
 * its own) and the GPU tests (tests/gpu: the kernels and the copy engines
 * against the CPU path): a name for the messages, and how the cache is
 * split into buffers.  Each test sweeps the layouts it builds, a list of
 * its own.  C for the unit test, C++ for nvcc.
 *
 * Shapes: NP pages (B sequences for dense) of BS tokens (S positions), H
 * heads of D elements, NL layers; 2 is K and V.  A padded row or head has
 * a few bytes after it, as many as the test sets.
 */
#pragma once

/* How a layout's memory is split into buffers. */
enum layout_buffers {
	LAYOUT_PER_LAYER,  /* one per layer */
	LAYOUT_ONE_BUFFER, /* one for all layers */
	LAYOUT_PER_PLANE,  /* one per layer and plane (K, V) */
};

/* id, name, buffers */
#define ENGINE_LAYOUTS(X)                                                      \
	/* (2, NP, BS, H, D) */                                                \
	X(FA_NHD, "fa-nhd", LAYOUT_PER_LAYER)                                  \
	/* (2, NP, H, BS, D) */                                                \
	X(FA_HND, "fa-hnd", LAYOUT_PER_LAYER)                                  \
	/* (NP, 2, BS, H, D) */                                                \
	X(FLASHINFER, "flashinfer", LAYOUT_PER_LAYER)                          \
	/* (NP, BS, D_latent): one plane, one head */                          \
	X(MLA, "mla", LAYOUT_PER_LAYER)                                        \
	/* (NP, NL, 2, BS, H, D) */                                            \
	X(CROSS, "cross-layer", LAYOUT_ONE_BUFFER)                             \
	/* K and V, each [B, H, S, D] */                                       \
	X(DENSE, "dense", LAYOUT_PER_LAYER)                                    \
	/* (2, NP, BS, H*D + pad): aligned token rows */                       \
	X(ROW_PAD, "row-padded", LAYOUT_PER_LAYER)                             \
	/* (2, NP, BS, H, D + pad) */                                          \
	X(HEAD_PAD, "head-padded", LAYOUT_PER_LAYER)                           \
	/* (NP, BS, H, D) each: SGLang's k_buffer and v_buffer */              \
	X(KV_SPLIT, "kv-split", LAYOUT_PER_PLANE)                              \
	/* (NP, NL, 2, H, BS, D): TensorRT-LLM's pool */                       \
	X(TRTLLM, "trtllm-pool", LAYOUT_ONE_BUFFER)                            \
	/* vLLM 0.32's views [NP, H, BS, K|V] in its KVCacheLayout orders:     \
	 * K and V side by side in each (page, head, token) cell.              \
	 * (NP, BS, H, 2, D): the default, "NHD" */                            \
	X(VLLM_LBNHC, "vllm-lbnhc", LAYOUT_PER_LAYER)                          \
	/* (NP, H, BS, 2, D): "HND" */                                         \
	X(VLLM_LBHNC, "vllm-lbhnc", LAYOUT_PER_LAYER)                          \
	/* (H, NP, BS, 2, D) */                                                \
	X(VLLM_LHBNC, "vllm-lhbnc", LAYOUT_PER_LAYER)                          \
	/* (NP, NL, BS, H, 2, D) */                                            \
	X(VLLM_BLNHC, "vllm-blnhc", LAYOUT_ONE_BUFFER)                         \
	/* (NP, H, NL, BS, 2, D) */                                            \
	X(VLLM_BHLNC, "vllm-bhlnc", LAYOUT_ONE_BUFFER)                         \
	/* CPU_ATTN: (NP, H, 2, BS, D), K rows then V rows */                  \
	X(VLLM_CPU, "vllm-cpu", LAYOUT_PER_LAYER)                              \
	/* CPU_ATTN as its vector kernels write it: per (page, head) K as      \
	 * [D, BS] (column by column), then V as [BS, D] */                    \
	X(VLLM_CPU_COLUMNS, "vllm-cpu-columns", LAYOUT_PER_LAYER)

enum layout_kind {
#define LAYOUT_KIND_ENUM(id, name, buffers) K_##id,
	ENGINE_LAYOUTS(LAYOUT_KIND_ENUM)
#undef LAYOUT_KIND_ENUM
	K_COUNT,
};

static inline const char *layout_kind_name(enum layout_kind k)
{
#define LAYOUT_KIND_NAME(id, name, buffers) name,
	static const char *const names[K_COUNT] = { ENGINE_LAYOUTS(LAYOUT_KIND_NAME) };
#undef LAYOUT_KIND_NAME
	return names[k];
}

static inline enum layout_buffers layout_kind_buffers(enum layout_kind k)
{
#define LAYOUT_KIND_BUFFERS(id, name, buffers) buffers,
	static const enum layout_buffers buffers[K_COUNT] = { ENGINE_LAYOUTS(LAYOUT_KIND_BUFFERS) };
#undef LAYOUT_KIND_BUFFERS
	return buffers[k];
}
