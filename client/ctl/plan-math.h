/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The arithmetic of "kvtierctl plan": KV-cache bytes per token, per block and
 * per context, and how much of it fits in a tier.  Pure functions, no I/O,
 * so that the figures an operator sizes a node by are tested on their own.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* kvtierd's block geometry (proto/identity.c): each tensor-parallel shard of
 * a block starts on a 4 KiB boundary, and a slot may not exceed 1 GiB. */
#define PLAN_SHARD_ALIGN 4096u
#define PLAN_MAX_SLOT_BYTES (UINT64_C(1) << 30)
#define PLAN_MAX_BLOCK_TOKENS 4096u
#define PLAN_MAX_TP 64u

struct plan_dtype {
	const char *name;
	uint32_t bytes;
};

/** \return every dtype plan knows, [*ret_n] */
const struct plan_dtype *plan_dtypes(size_t *ret_n);
/** \return bytes per element of dtype name, or -EINVAL if unknown */
int plan_dtype_bytes(const char *name);

struct plan_preset {
	const char *name;        /* as given to --model */
	const char *description; /* the model it stands for */
	bool mla;
	uint32_t layers;
	uint32_t kv_heads;   /* GQA/MHA only */
	uint32_t head_dim;   /* GQA/MHA only */
	uint32_t latent_dim; /* MLA only: kv_lora_rank + rope head dim */
	const char *dtype;   /* what it is served in unless --dtype says */
};

/** \return every preset, [*ret_n] */
const struct plan_preset *plan_presets(size_t *ret_n);
/** \return the preset called name, or NULL */
const struct plan_preset *plan_preset_find(const char *name);

/* What one token costs.  Either the model geometry (mla selects which
 * fields count) or bytes_per_token, which then overrides it. */
struct plan_geometry {
	bool mla;
	uint64_t layers;
	uint64_t kv_heads;   /* !mla */
	uint64_t head_dim;   /* !mla */
	uint64_t latent_dim; /* mla */
	uint64_t dtype_bytes;
	uint64_t bytes_per_token; /* non-zero: use this, ignore the above */
	uint64_t tp;              /* tensor-parallel ranks, >= 1 */
	uint64_t block_tokens;    /* tokens per kvtier block, >= 1 */
	uint32_t codec;           /* KVT_CODEC_*: blocks stored quantised
				   * (proto/codec.h); not with bytes_per_token */
};

struct plan {
	uint64_t tp, block_tokens;
	/* The model's KV bytes for one token: every layer, each KV head
	 * once (MHA/GQA: K and V planes; MLA: one latent). */
	uint64_t bytes_per_token;
	/* What one tensor-parallel rank holds per token.  With more ranks
	 * than KV heads each rank still holds a whole head (replicated);
	 * MLA's latent is the same on every rank. */
	uint64_t bytes_per_token_rank;
	uint32_t shards;       /* MLA: 1 (stored once); else tp */
	uint64_t shard_bytes;  /* one rank's part of one block */
	uint64_t block_bytes;  /* shards * shard_bytes: KV bytes of one block */
	uint64_t slot_bytes;   /* what kvtierd allocates for one block */
	uint64_t plain_slot_bytes; /* the same without the codec */
};

/**
 * Work out the per-token and per-block figures.
 * \return 0, -EINVAL (a zero, or KV heads not divisible by tp, or
 *         bytes_per_token not divisible by tp, or a codec with it) or -EOVERFLOW (a product
 *         past 2^64: rejected, never wrapped)
 */
int plan_compute(const struct plan_geometry *g, struct plan *ret);

/**
 * KV bytes of batch contexts of tokens tokens each.
 * \param ret_bytes       tokens * batch * bytes_per_token
 * \param ret_rank_bytes  the same for one tensor-parallel rank (may be NULL)
 * \return 0, -EINVAL or -EOVERFLOW
 */
int plan_context_bytes(const struct plan *p, uint64_t tokens, uint64_t batch,
		       uint64_t *ret_bytes, uint64_t *ret_rank_bytes);

struct plan_fit {
	uint64_t blocks;   /* whole slots that fit */
	uint64_t tokens;   /* blocks * block_tokens */
	uint64_t contexts; /* of tokens each, 0 when tokens was 0 */
	uint64_t batches;  /* contexts / batch */
};

/**
 * How much of the cache fits in capacity bytes.  Everything rounds down:
 * kvtier keeps whole blocks only, and a context needs all of its blocks
 * (its last partial block counted as a whole one).
 * \param tokens  context length, 0 if none was given
 * \return 0, -EINVAL or -EOVERFLOW
 */
int plan_fit(const struct plan *p, uint64_t capacity, uint64_t tokens,
	     uint64_t batch, struct plan_fit *ret);

/**
 * A count such as 131072 or 128K (K = 1024, M = 1048576: context lengths
 * are quoted that way).  \return 0, -EINVAL or -ERANGE
 */
int plan_parse_count(const char *s, uint64_t *ret);
