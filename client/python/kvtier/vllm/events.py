# SPDX-License-Identifier: Apache-2.0
"""What the connector tells vLLM's KV events (--kv-events-config) of the
blocks kvtierd holds, so that a KV-aware router (llm-d's, Dynamo's) sees
them beside the GPU's own: vLLM's BlockStored once a block is committed
to kvtierd (or found there by the store: -EEXIST), BlockRemoved when a
load finds a block gone (-ENOENT) or the connector deletes one itself.
Each names the block by the hash vLLM's own events give it (the
request's block hashes at the block size, maybe_convert_block_hash), with
the tier a store commits to, host memory, as ``medium`` ("CPU") and
"kvtier" as ``ownership``, one event per KV cache group.

Blocks are named as the scheduler hands them to the workers; the events
go out once every worker has reported the copy done (what any worker did
not store is not announced), through the scheduler side's take_events,
which vLLM's scheduler publishes with its own events each step."""

import logging
from dataclasses import dataclass
from typing import Any

from vllm.distributed.kv_events import MEDIUM_CPU, BlockRemoved, BlockStored
from vllm.v1.core.kv_cache_utils import (
    generate_block_hash_extra_keys,
    maybe_convert_block_hash,
    resolve_block_hashes,
    to_event_extra_keys,
)

log = logging.getLogger("kvtier.vllm")

MEDIUM = MEDIUM_CPU  # kvtierd commits a store to host memory
OWNERSHIP = "kvtier"


def enabled(vllm_config) -> bool:
    """Whether vLLM publishes KV events, and the connector can name its
    blocks as vLLM's events do."""
    ec = getattr(vllm_config, "kv_events_config", None)
    if ec is None or not ec.enable_kv_cache_events:
        return False
    if getattr(vllm_config, "num_hash_lookahead_tokens", 0):
        # vLLM 0.33: a block's hash covers tokens after it, which its
        # events carry; kvtier's blocks do not.
        log.warning("kvtier: vLLM hashes blocks with lookahead tokens; the connector "
                    "publishes no KV events")
        return False
    return True


@dataclass
class Blocks:
    """Blocks a..b of a request, as vLLM's events name them."""

    hashes: list[Any]  # external hash of each block
    parent: Any  # of block a-1, or None
    tokens: list[int]  # block x block of them
    extra_keys: list[tuple[Any, ...] | None]
    block: int
    groups: int
    lora_id: int | None
    lora_name: str | None
    session_id: str | None


def blocks_of(request, a: int, b: int, block: int, hash_block: int,
              groups: int) -> Blocks | None:
    """Blocks a..b of vLLM's request, or None where vLLM has not hashed
    them."""
    hashes = resolve_block_hashes(request.block_hashes, hash_block, block)
    if len(hashes) < b or a >= b:
        return None
    extra, mm = [], 0
    for i in range(b):  # mm inputs are walked from the first block
        keys, mm = generate_block_hash_extra_keys(request, i * block, (i + 1) * block, mm)
        if i >= a:
            extra.append(keys)
    lora = request.lora_request
    return Blocks(hashes=[maybe_convert_block_hash(hashes[i]) for i in range(a, b)],
                  parent=maybe_convert_block_hash(hashes[a - 1]) if a else None,
                  tokens=list(request.all_token_ids[a * block: b * block]),
                  extra_keys=extra, block=block, groups=groups,
                  lora_id=lora.adapter_id if lora else None,
                  lora_name=lora.name if lora else None,
                  session_id=getattr(request, "session_id", None))


def _runs(indices) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for i in sorted(indices):
        if runs and runs[-1][1] == i:
            runs[-1] = (runs[-1][0], i + 1)
        else:
            runs.append((i, i + 1))
    return runs


def stored(blocks: Blocks, indices) -> list[BlockStored]:
    """BlockStored events for the blocks at indices (of blocks), one per
    run of them and KV cache group."""
    out = []
    for s, e in _runs(indices):
        for g in range(blocks.groups):
            out.append(BlockStored(
                block_hashes=blocks.hashes[s:e],
                parent_block_hash=blocks.hashes[s - 1] if s else blocks.parent,
                token_ids=blocks.tokens[s * blocks.block: e * blocks.block],
                block_size=blocks.block,
                lora_id=blocks.lora_id,
                medium=MEDIUM,
                lora_name=blocks.lora_name,
                extra_keys=to_event_extra_keys(blocks.extra_keys[s:e]),
                group_idx=g,
                ownership=OWNERSHIP,
                session_id=blocks.session_id))
    return out


def removed(blocks: Blocks, indices) -> list[BlockRemoved]:
    """BlockRemoved events for the blocks at indices, one per KV cache
    group."""
    hashes = [blocks.hashes[i] for i in sorted(indices)]
    if not hashes:
        return []
    return [BlockRemoved(block_hashes=hashes, medium=MEDIUM, group_idx=g, ownership=OWNERSHIP)
            for g in range(blocks.groups)]
