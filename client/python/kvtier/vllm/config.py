# SPDX-License-Identifier: Apache-2.0
"""The connector's configuration, read once for either side: the extra
config keys of ``--kv-transfer-config`` and the namespace identity of
the model vLLM runs, with what kvtier refuses at start and why."""

import logging
from dataclasses import dataclass
from typing import Any

from ..identity import ModelIdentity, dtype_name, model_id, weights_fingerprint
from . import events

log = logging.getLogger("kvtier.vllm")

# What a finished request may tell kvtierd (kvt_end), and the priority of
# a request's shared tokens when it does not give one.
ENDS = ("none", "request", "session")
SHARED_PRIORITY = 90


def flag(extra: dict, name: str) -> bool:
    """A boolean extra config key (also "true"/"false"/"1"/"0")."""
    v = extra.get(name, False)
    if isinstance(v, str) and v.lower() in ("true", "false", "1", "0"):
        return v.lower() in ("true", "1")
    if not isinstance(v, bool):
        raise ValueError(f"kvtier.vllm: kv_connector_extra_config {name!r} is {v!r}; "
                         "it is true or false")
    return v


def groups_of(kv_cache_config) -> list[tuple[list[str], int, Any]]:
    """vLLM's KV cache groups as (layer names, sliding window or 0, spec);
    a group kvtier cannot store is refused, naming it."""
    from vllm.v1.kv_cache_interface import FullAttentionSpec, MLAAttentionSpec, SlidingWindowSpec

    out = []
    for g in getattr(kv_cache_config, "kv_cache_groups", None) or ():
        spec = g.kv_cache_spec
        kind = type(spec)
        if kind not in (FullAttentionSpec, MLAAttentionSpec, SlidingWindowSpec):
            raise NotImplementedError(
                f"kvtier.vllm: this model has a KV cache group of {kind.__name__} "
                f"({len(g.layer_names)} layers, e.g. {g.layer_names[0]}); kvtier stores "
                "full-attention, MLA and sliding-window layers only (no Mamba or other "
                "state). Run without the kvtier connector")
        out.append((list(g.layer_names), spec.sliding_window if kind is SlidingWindowSpec else 0,
                    spec))
    return out


def identity_of(vllm_config, extra: dict, kv_cache_config=None) -> ModelIdentity:
    mc, pc, cc = vllm_config.model_config, vllm_config.parallel_config, vllm_config.cache_config
    if pc.pipeline_parallel_size > 1:
        raise NotImplementedError("kvtier.vllm: pipeline parallelism is not supported yet; "
                                  "run without the kvtier connector")
    dcp = getattr(pc, "decode_context_parallel_size", 1)
    pcp = getattr(pc, "prefill_context_parallel_size", 1)
    if dcp > 1 or pcp > 1:
        # A block then covers block_size x dcp tokens spread over the ranks,
        # each holding other tokens of it, where kvtier's ranks each store
        # their heads of every token.
        raise NotImplementedError(
            f"kvtier.vllm: decode context parallelism (--decode-context-parallel-size "
            f"{dcp}) and prefill context parallelism (--prefill-context-parallel-size "
            f"{pcp}) spread a block's tokens over the ranks, which kvtier does not store; "
            "run with both at 1 or without the kvtier connector")
    if getattr(mc, "enable_sleep_mode", False):
        # Sleep gives the cache's GPU memory back under the same addresses,
        # and nothing tells a connector: a copy under way or after it would
        # touch memory that is gone, or serve what is left in it.
        raise NotImplementedError("kvtier.vllm: sleep mode (--enable-sleep-mode) frees the KV "
                                  "cache's GPU memory while kvtier may be copying to or from "
                                  "it; run without sleep mode or without the kvtier connector")
    dtype = mc.dtype if cc.cache_dtype in (None, "auto") else cc.cache_dtype
    try:
        dtype = dtype_name(dtype)
    except ValueError:
        raise ValueError(f"kvtier.vllm: the KV cache dtype {cc.cache_dtype!r} is not one "
                         "kvtier stores (quantised caches with scales are not supported); "
                         "run with --kv-cache-dtype auto or fp8, or without the kvtier "
                         "connector") from None
    path = extra.get("model_name") or mc.model
    weights = extra.get("weights")
    mla = bool(getattr(mc, "use_mla", False))
    block, groups = cc.block_size, ()
    specs = groups_of(kv_cache_config)
    if specs:
        sizes = {spec.block_size for _, _, spec in specs}
        heads = {spec.head_size for _, _, spec in specs}
        if len(sizes) != 1 or len(heads) != 1 or heads != {mc.get_head_size()}:
            raise NotImplementedError(
                f"kvtier.vllm: the model's KV cache groups differ in block size "
                f"({sorted(sizes)}) or head size ({sorted(heads)}); kvtier stores groups "
                "of one geometry. Run without the kvtier connector")
        block = sizes.pop()
        if len(specs) > 1 or specs[0][1]:
            groups = tuple((len(names), window) for names, window, _ in specs)
    return ModelIdentity(
        model=model_id(path),
        layers=mc.get_num_layers(pc),
        kv_heads=1 if mla else mc.get_total_num_kv_heads(),
        head_size=mc.get_head_size(),
        dtype=dtype,
        block_tokens=block,
        weights=bytes.fromhex(weights) if weights else weights_fingerprint(path),
        tp_size=pc.tensor_parallel_size,
        salt=str(extra.get("salt", "")).encode(),
        mla=mla,
        groups=groups,
        codec=extra.get("codec", "none"),
    )


@dataclass
class Config:
    """What both sides read from vLLM's config (the module docstring of
    kvtier.vllm lists the extra config keys)."""

    identity: ModelIdentity
    socket: str | None
    end: str  # what a finished request that says nothing tells kvtierd
    block: int  # tokens per block
    # A hybrid model's failed load can only be recomputed whole, which
    # vLLM does for asynchronous loads.
    hybrid: bool
    workers: int  # tensor-parallel ranks, each a worker
    # Whether the connector publishes KV events (kvtier.vllm.events), and
    # the block size of vLLM's request block hashes.
    events: bool = False
    hash_block: int = 0


def config_of(vllm_config, kv_transfer_config, kv_cache_config=None) -> Config:
    extra = dict(kv_transfer_config.kv_connector_extra_config or {})
    end = extra.get("end", "none")
    if end not in ENDS:
        raise ValueError(f"kvtier.vllm: kv_connector_extra_config 'end' is {end!r}; "
                         f"it is one of {', '.join(ENDS)}")
    if flag(extra, "layerwise"):
        log.warning("kvtier: kv_connector_extra_config 'layerwise' has no effect: every load "
                    "is over before its request is scheduled")
    identity = identity_of(vllm_config, extra, kv_cache_config)
    device = getattr(getattr(vllm_config, "device_config", None), "device_type", None)
    if device:
        identity.check_device(device, "kvtier.vllm")
    return Config(identity=identity, socket=extra.get("socket"), end=end,
                  block=identity.block_tokens, hybrid=len(identity.groups) > 1,
                  workers=vllm_config.parallel_config.tensor_parallel_size,
                  events=events.enabled(vllm_config),
                  hash_block=getattr(kv_cache_config, "hash_block_size", None)
                  or identity.block_tokens)
