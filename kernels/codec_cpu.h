/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CPU path's codecs (codec_cpu.c), behind kvt_layout_gather and
 * kvt_layout_scatter (layout_cpu.c), which validate the descriptor and
 * every index before they call in here.
 */
#ifndef KVT_CODEC_CPU_H
#define KVT_CODEC_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "layout.h"

/*
 * Bytes of one coded block of g: its [layer][plane][head] tiles
 * (proto/codec.h).  0 for an unknown codec, a dtype no codec reads, a head
 * that is not a whole number of elements, or a size past int64.
 */
uint64_t kvt_codec_block_bytes(const struct kvt_geom *g, uint32_t codec, uint32_t dtype);

/*
 * Quantises n_blocks blocks out of the engine's cache (to_block, into
 * dst) or dequantises them into it (from src).  g, base and indices are
 * already checked (layout_cpu.c); padding slots read as zeros and are not
 * written.
 *
 * base:    [kvt_geom_n_bases(g)] engine pointers
 * indices: [n_blocks] (PAGE) or [n_blocks * block_tokens] (SLOT)
 * dst/src: [n_blocks] blocks of kvt_codec_block_bytes(g, codec, dtype)
 * \return 0, or -ENOMEM for the work buffers
 */
int kvt_codec_copy(const struct kvt_geom *g, void *const *base, uint32_t codec,
		   uint32_t dtype, const int64_t *indices, size_t n_blocks, int to_block,
		   void *const *dst, const void *const *src);

#endif
