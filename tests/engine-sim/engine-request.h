/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What an engine request is, for kvt-engine and for the tests that check
 * its work: the model presets and their namespace, and the token ids of a
 * request (a shared prefix and a private suffix), from which block keys
 * follow.  One definition, so the tests compute exactly the keys and
 * namespace kvt-engine uses.
 */
#pragma once

#include <stdint.h>
#include <string.h>

#include "kvtier.h"
#include "../helpers.h"

#define ENGINE_BLOCK_TOKENS 16
#define ENGINE_VOCAB 128256

struct engine_model {
	const char *name;
	uint32_t layers, kv_heads, head_dim, elem_bytes;
};

static const struct engine_model engine_models[] = {
	{"llama3-8b", 32, 8, 128, 2},
	{"llama3-70b", 80, 8, 128, 2},
	{"tiny", 4, 2, 64, 2},
};

static inline const struct engine_model *engine_model_find(const char *name)
{
	for (size_t i = 0; i < sizeof(engine_models) / sizeof(engine_models[0]); i++)
		if (!strcmp(name, engine_models[i].name))
			return &engine_models[i];
	return NULL;
}

/* The bytes of one head of one token of the block with this key: what the
 * model computed for it.  Every byte depends on the key, so a block served
 * under another key, or a slot reused under a live reader, never compares
 * equal. */
static inline void engine_element(const uint8_t *key, uint32_t layer, uint32_t plane,
				  uint32_t token, uint32_t head, uint8_t *out, uint32_t bytes)
{
	uint64_t k;
	memcpy(&k, key, 8);
	uint64_t s = mix(k ^ mix(((uint64_t)layer << 40) ^ ((uint64_t)plane << 32) ^
					      ((uint64_t)token << 16) ^ head));
	for (uint32_t i = 0; i < bytes; i += 8) {
		s = mix(s);
		memcpy(out + i, &s, bytes - i < 8 ? bytes - i : 8);
	}
}

/* Rank tp_rank's shard of a block of model m in kvtier's block layout
 * [layer][plane][token][head], as kvt-engine stores it.  out: the
 * namespace's shard_bytes. */
static inline void engine_shard(const struct engine_model *m, uint32_t tp_size,
				uint32_t tp_rank, const uint8_t *key, uint8_t *out)
{
	uint32_t heads = m->kv_heads / tp_size, head_bytes = m->head_dim * m->elem_bytes;
	for (uint32_t l = 0; l < m->layers; l++)
		for (uint32_t p = 0; p < 2; p++)
			for (uint32_t t = 0; t < ENGINE_BLOCK_TOKENS; t++)
				for (uint32_t h = 0; h < heads; h++) {
					engine_element(key, l, p, t, tp_rank * heads + h, out,
						       head_bytes);
					out += head_bytes;
				}
}

/* tok[prefix + suffix]: the shared prompt of prefix_seed, then the private
 * part of suffix_seed. */
static inline void engine_tokens(uint32_t *tok, uint64_t prefix_seed, uint32_t prefix,
				 uint64_t suffix_seed, uint32_t suffix)
{
	for (uint32_t i = 0; i < prefix; i++)
		tok[i] = (uint32_t)(mix(prefix_seed * 1000003 + i) % ENGINE_VOCAB);
	for (uint32_t i = 0; i < suffix; i++)
		tok[prefix + i] =
			(uint32_t)(mix((suffix_seed ^ 0x5555) * 1000003 + i) % ENGINE_VOCAB);
}

/* The namespace of model m with tp_size ranks; g is filled for d->groups. */
static inline void engine_ns_desc(const struct engine_model *m, uint32_t tp_size,
				  const char *salt, kvt_layer_group *g, kvt_ns_desc *d)
{
	static const uint8_t weights[16] = "weights-v1";
	*g = (kvt_layer_group){
		.n_layers = m->layers,
		.attn = KVT_ATTN_MHA,
		.planes = 2,
		.kv_heads = m->kv_heads,
		.head_bytes = m->head_dim * m->elem_bytes,
		.dtype = 1, /* fp16 */
	};
	*d = (kvt_ns_desc){
		.model = m->name,
		.weights = weights,
		.weights_len = sizeof(weights),
		.layer_first = 0,
		.layer_end = m->layers,
		.tp_size = tp_size,
		.cp_size = 1,
		.block_tokens = ENGINE_BLOCK_TOKENS,
		.n_groups = 1,
		.groups = g,
		.salt = (const uint8_t *)salt,
		.salt_len = salt ? (uint32_t)strlen(salt) : 0,
	};
}
