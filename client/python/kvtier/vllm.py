# SPDX-License-Identifier: Apache-2.0
"""kvtier as a vLLM V1 KV connector.

    vllm serve MODEL --kv-transfer-config '{"kv_connector": "KvtierConnector",
        "kv_connector_module_path": "kvtier.vllm", "kv_role": "kv_both",
        "kv_connector_extra_config": {"socket": "/run/kvtierd/kvtierd.sock"}}'

Extra config keys: ``socket`` (default $KVTIER_SOCKET or kvtierd's
default), ``salt`` (a string that narrows sharing to engines that give the
same one), ``model_name`` and ``weights`` (hex) to override the namespace
identity (default: the model path and a fingerprint of its weight files, as
kvtier.hf computes it, so that both engines share blocks), and ``end``:
what a finished request tells kvtierd of its blocks when the request
itself does not say ("none", the default; "request"; "session"), and
``codec``: how blocks are stored, "none" (the default), "fp8-e4m3" or
"int4" (kvtier.CODECS): quantised by this process's copies, shared only
with engines that ask for the same codec.  A cache that is fp8 already
(``--kv-cache-dtype fp8``) is stored as it is whatever the codec; codecs
are encoded on the CPU and, where kvtier is built with CUDA
(kvtier.HAVE_CUDA), on the GPU; a connector on a GPU without it refuses
one other than none.

Lifecycle hints: a request may say, in its kv_transfer_params
(``SamplingParams(extra_args={"kv_transfer_params": {"kvtier": {...}}})``),
``shared_tokens`` (its leading prompt tokens that every request shares, a
system prompt: retained at ``shared_priority``, default 90, for as long as
kvtierd runs), and ``end``: when it finishes, "session" demotes its blocks
after the shared ones (the conversation is over), "request" the ones
nobody else used, "none" nothing.  On conversation traces an end of
request costs the next turn its hits (docs/workload.md), hence the default.

Per step: the scheduler asks kvtierd for the leading run of a new prompt's
blocks (one LOOKUP, never a wait; always leaving one prompt token to
compute) and tells the workers which of their pages to fill.  A run in
host memory is copied into the pages before the forward pass.  A run that
goes on past host memory (staging from NVMe or a remote tier) is an
asynchronous load: the request waits in vLLM's WAITING_FOR_REMOTE_KVS
while the worker's mover thread waits for the staging and copies, and the
batch goes on without it.  After the forward, every full prompt block the
step computed that kvtierd does not hold yet is stored: on the CPU by the
mover while the next step computes.  The pages a copy under way reads or
writes are pinned in vLLM's block pool from the step that hands it to
the mover until every worker has reported it done, so that no page is
given to another request under a copy: not when the request finishes,
is preempted or is aborted, and not when a sliding window leaves it.
A block that fails to load is reported to vLLM, which recomputes it
(and the connector stores it then, not what the step computed on top of
the unfilled pages): kvtier never makes the engine produce other output.  Without kvtierd
(absent, killed, restarting) lookups miss and stores are skipped, and the
connector reconnects by itself.

On a GPU the copies run on the library's CUDA streams and the CPU waits
for none of them in the step: a load is queued after the work on the
compute stream, which waits for it on the GPU (before the forward, or
layer by layer with the extra config ``"layerwise": true``, which asks vLLM
for piecewise CUDA graphs); a store is queued after an event recorded at
the end of the forward and copies while the next step computes, its pages
pinned as on the CPU.

Hybrid models (vLLM's hybrid KV cache allocator, several KV cache groups:
sliding-window layers beside full attention): one namespace of a layer
group per KV cache group, in vLLM's group order, each group's layers read
through its own pages.  A sliding-window group keeps pages only for the
blocks its window still sees: a load leaves the others alone (the block
holds them, for a request whose window ends there), and a block is stored
only when every group holds its pages.  Their loads are all asynchronous,
since vLLM can only recompute a hybrid request's failed load as a whole.
Mamba and other groups without per-token pages are refused at start.

Layouts: each layer's cache is read from the view vLLM allocated, by its
strides and the attention backend's K/V rule (kvtier.layouts: the
FlashAttention, Triton, Flex and FlashInfer backends, FlashMLA and the
other MLA backends, CPU_ATTN), in every KVCacheLayout order and with
kernel pages smaller than vLLM's blocks.  A backend, dtype or layout it
does not know is refused at start with a message naming it.

Tensor parallelism: every rank stores its shard (the ranks of a group
that replicates KV heads, and the ranks of an MLA model, share one, which
the group's first rank writes).  A load that fails on any rank fails the
request's step on every rank: they agree over vLLM's tensor-parallel
group before the forward, and none stores what the step computes for it,
so that no block is ever made of shards from different computations.
"""

import errno
import logging
import queue
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
    KVConnectorTransferResults,
    KVConnectorWorkerMetadata,
    SupportsHMA,
)

from . import HAVE_CUDA, HOST, KEY_BYTES, Error, hash_chain
from . import layouts, vllm_stats
from .reconnect import Reconnecting
from .identity import ModelIdentity, dtype_name, model_id, shard_of, weights_fingerprint

log = logging.getLogger("kvtier.vllm")

# How long an asynchronous load waits for blocks staged from NVMe or the
# remote tier (the request waits, not the batch); later ones are
# recomputed.
_STAGE_TIMEOUT_MS = 10000
# A CUDA job's status for a block whose copy is still under way.
_IN_FLIGHT = -errno.EINPROGRESS
# What a finished request may tell kvtierd (kvt_end), and the priority of
# a request's shared tokens when it does not give one.
_ENDS = ("none", "request", "session")
_SHARED_PRIORITY = 90


@dataclass
class _Transfer:
    req_id: str
    keys: bytes  # KEY_BYTES per block
    # vLLM's pages, one per key, in each KV cache group; -1 where a group
    # holds none (a sliding window's freed pages)
    block_ids: tuple[list[int], ...]
    pin: int = 0  # the scheduler's pin of the pages (0: none)


@dataclass
class KvtierConnectorMetadata(KVConnectorMetadata):
    loads: list[_Transfer] = field(default_factory=list)  # this step's forward reads them
    # Runs still staging in kvtierd: their requests wait (vLLM's
    # WAITING_FOR_REMOTE_KVS) until get_finished says they are loaded.
    async_loads: list[_Transfer] = field(default_factory=list)
    stores: list[_Transfer] = field(default_factory=list)


@dataclass
class KvtierWorkerMetadata(KVConnectorWorkerMetadata):
    """What workers tell the scheduler: the pins of the transfers they
    have done with, each counted once per worker."""

    done: Counter = field(default_factory=Counter)

    def aggregate(self, other: "KVConnectorWorkerMetadata") -> "KVConnectorWorkerMetadata":
        if isinstance(other, KvtierWorkerMetadata):
            self.done.update(other.done)
        return self


@dataclass
class _Request:
    keys: bytes  # every full prompt block but the last prompt token's
    block_ids: tuple[list[int], ...]  # per KV cache group
    local: int = 0  # tokens vLLM's own prefix cache had
    done: int = 0  # leading blocks loaded or stored already
    staging: bool = False  # the run found goes on past host memory


def _groups_of(kv_cache_config) -> list[tuple[list[str], int, Any]]:
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
    specs = _groups_of(kv_cache_config)
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


def _backend_name(vllm_config, layer_name: str) -> str:
    layer = vllm_config.compilation_config.static_forward_context.get(layer_name)
    backend = getattr(layer, "attn_backend", None)
    return backend.get_name() if backend is not None else "unknown"


def _cpu_isa(vllm_config, layer_name: str, view) -> str | None:
    """The ISA of vLLM's CPU attention kernels for layer_name (where they
    put K depends on it): the one its metadata builder gave the layer, or
    the one that builder will choose."""
    layer = vllm_config.compilation_config.static_forward_context.get(layer_name)
    isa = getattr(layer, "isa", None)
    if isa is None:
        from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

        isa = _get_attn_isa(vllm_config.model_config.dtype, layouts.page_tokens(view),
                            getattr(layer, "head_size", None),
                            vllm_config.cache_config.cache_dtype)
    return isa


def _least_over_ranks(values: list[int]) -> list[int]:
    """Each of values, the least any rank of vLLM's tensor-parallel group
    has for it (every rank calls this with as many, in the same step)."""
    import torch.distributed as dist
    from vllm.distributed.parallel_state import get_tp_group

    t = torch.tensor(values, dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MIN, group=get_tp_group().cpu_group)
    return t.tolist()


def _flag(extra: dict, name: str) -> bool:
    v = extra.get(name, False)
    if isinstance(v, str) and v.lower() in ("true", "false", "1", "0"):
        return v.lower() in ("true", "1")
    if not isinstance(v, bool):
        raise ValueError(f"kvtier.vllm: kv_connector_extra_config {name!r} is {v!r}; "
                         "it is true or false")
    return v


class KvtierConnector(KVConnectorBase_V1, SupportsHMA):
    """vLLM V1 KV connector backed by kvtierd (see the module docstring)."""

    def __init__(self, vllm_config, role: KVConnectorRole, kv_cache_config=None):
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        extra = dict(self._kv_transfer_config.kv_connector_extra_config or {})
        self._end = extra.get("end", "none")
        if self._end not in _ENDS:
            raise ValueError(f"kvtier.vllm: kv_connector_extra_config 'end' is {self._end!r}; "
                             f"it is one of {', '.join(_ENDS)}")
        self._layerwise = _flag(extra, "layerwise")
        if role == KVConnectorRole.SCHEDULER and \
                getattr(self._kv_transfer_config, "kv_load_failure_policy", "") == "fail":
            log.warning("kvtier: kv_load_failure_policy is 'fail' (vLLM's default): a request "
                        "whose blocks kvtier cannot load (evicted, kvtierd restarting) ends "
                        "with an error; set \"kv_load_failure_policy\": \"recompute\" in "
                        "--kv-transfer-config to compute them instead")
        self._identity = identity_of(vllm_config, extra, kv_cache_config)
        device = getattr(getattr(vllm_config, "device_config", None), "device_type", None)
        if device:
            self._identity.check_device(device, "kvtier.vllm")
        self._block = self._identity.block_tokens
        # A hybrid model's failed load can only be recomputed whole, which
        # vLLM does for asynchronous loads.
        self._hybrid = len(self._identity.groups) > 1
        self._conn = Reconnecting(self._identity, socket=extra.get("socket"),
                                  name=f"vllm-{role.name.lower()}", log=log)
        # Scheduler side.
        self._requests: dict[str, _Request] = {}
        # req -> (first block, end block, vLLM's pages for an asynchronous load)
        self._pending_loads: dict[str, tuple[int, int, tuple[list[int], ...] | None]] = {}
        self._load_failed: set[str] = set()  # requests vLLM computes after a failed load
        self._pool = None  # vLLM's block pool (bind_gpu_block_pool)
        self._null = 0  # its null block's id
        self._pins: dict[int, list] = {}  # pin -> the pool's blocks it holds
        self._pin_reports: Counter = Counter()  # pin -> workers that are done with it
        self._next_pin = 0
        self._workers = vllm_config.parallel_config.tensor_parallel_size
        # Worker side.
        self._layouts: list = []  # kvtier.Layout of each group's layers
        self._geometries: list[layouts.Geometry] = []
        self._gaps: list[bool] = []  # whether a group's blocks may lack pages
        self._rank = 0  # this worker's tensor-parallel rank
        self._shard = 0  # the shard it reads
        self._writer = True  # whether it writes that shard
        self._device = None  # CUDA device index of the caches, or None (host memory)
        # (client, kvtier.CudaContext) of vLLM's thread and of the mover's
        # (a context serves one thread at a time), made at their first copy.
        self._cuda = None
        self._mover_cuda = None
        self._layer_index: dict[str, int] = {}
        self._step_jobs: list = []  # this step's loads on a GPU (wait_for_layer_load)
        self._load_jobs: list = []  # (job, statuses at submission) of loads not seen complete
        self._load_errors: set[int] = set()
        self._failed_recving: set[str] = set()  # hybrid: requests whose load failed
        self._failed_reqs: set[str] = set()  # this step's requests with a failed load
        self.stats = {"lookups": 0, "hit_tokens": 0, "loaded_blocks": 0,
                      "load_failures": 0, "stored_blocks": 0, "store_skipped": 0,
                      "retained_blocks": 0, "ended_blocks": 0, "async_loads": 0}
        self._lock = threading.Lock()  # the worker's mover thread and vLLM's
        self._mover: threading.Thread | None = None
        self._jobs: queue.Queue = queue.Queue()
        self._done_pins: list[int] = []  # transfers done with, since the last step
        self._received: list[tuple[str, tuple[list[int], ...], int]] = []  # async loads done
        self._reported: dict[str, int] = {}  # counters as last handed to vLLM's statistics

    # ---------------------------------------------------------------- common

    def _namespace(self):
        """The namespace, or None while kvtierd cannot be reached."""
        return self._conn.namespace()

    def shutdown(self):
        if self._mover is not None:  # the copies under way finish first
            self._jobs.put(None)
            self._mover.join()
            self._mover = None
        self._close_loads()
        for held in (self._cuda, self._mover_cuda):
            if held is not None:
                held[1].close()
        self._cuda = self._mover_cuda = None
        self._conn.close()

    @classmethod
    def requires_piecewise_for_cudagraph(cls, extra_config: dict[str, Any]) -> bool:
        # wait_for_layer_load runs between the graph's pieces, not in them.
        return _flag(extra_config or {}, "layerwise")

    # -------------------------------------------------------------- scheduler

    def bind_gpu_block_pool(self, gpu_block_pool) -> None:
        self._pool = gpu_block_pool
        self._null = gpu_block_pool.null_block.block_id

    def get_num_new_matched_tokens(self, request, num_computed_tokens: int):
        tokens = list(request.prompt_token_ids or [])
        n = (len(tokens) - 1) // self._block  # leave a prompt token to compute
        if n <= 0:
            return 0, False
        salt = getattr(request, "cache_salt", None)
        keys = hash_chain(tokens[: n * self._block], self._block,
                          extra=salt.encode() if salt else None)
        self._requests[request.request_id] = _Request(keys=keys, block_ids=(),
                                                      local=num_computed_tokens)
        ns = self._namespace()
        if ns is None or request.request_id in self._load_failed:
            return 0, False
        try:
            hits, states = ns.lookup(keys)
        except Error as e:
            log.warning("kvtier: lookup failed: %s", e)
            return 0, False
        self.stats["lookups"] += 1
        self.stats["hit_tokens"] += hits * self._block
        r = self._requests[request.request_id]
        r.done = hits  # in kvtierd already
        # A run that goes on past host memory is loaded asynchronously:
        # the request waits for its staging, the batch does not.
        r.staging = self._hybrid or any(s != HOST for s in states[:hits])
        n = max(0, hits * self._block - num_computed_tokens)
        return n, bool(n) and r.staging

    def _pages(self, block_ids) -> tuple[list[int], ...]:
        """vLLM's block ids of each group, its null block as -1."""
        return tuple([-1 if b == self._null else b for b in ids] for ids in block_ids)

    def update_state_after_alloc(self, request, blocks, num_external_tokens: int):
        r = self._requests.get(request.request_id)
        if num_external_tokens <= 0 or r is None:
            return
        first = r.local // self._block
        pages = self._pages(blocks.get_block_ids()) if r.staging else None
        self._pending_loads[request.request_id] = (
            first, first + num_external_tokens // self._block, pages)

    def _track(self, req_id: str, block_ids, new: bool):
        r = self._requests.get(req_id)
        if r is None:
            return None
        if block_ids:
            pages = self._pages(block_ids)
            r.block_ids = pages if new or not r.block_ids else tuple(
                old + add for old, add in zip(r.block_ids, pages))
        return r

    def _transfer(self, rid: str, r: _Request, a: int, b: int, pages=None) -> _Transfer:
        """Blocks a..b of request rid, its pages pinned in vLLM's pool until
        every worker is done with them."""
        ids = tuple(g[a:b] for g in (pages or r.block_ids))
        t = _Transfer(rid, r.keys[a * KEY_BYTES: b * KEY_BYTES], ids)
        if self._pool is not None:
            held = [self._pool.blocks[p] for g in ids for p in g if p >= 0]
            self._pool.touch(held)
            self._next_pin += 1
            t.pin = self._next_pin
            self._pins[t.pin] = held
        return t

    def _stored_runs(self, r: _Request, a: int, b: int) -> list[tuple[int, int]]:
        """The runs of blocks a..b whose every group holds its pages (a
        sliding window's freed pages, for blocks vLLM's own prefix cache
        had, cannot be stored)."""
        runs, start = [], None
        for i in range(a, b):
            whole = all(g[i] >= 0 for g in r.block_ids)
            if whole and start is None:
                start = i
            elif not whole and start is not None:
                runs.append((start, i))
                start = None
        if start is not None:
            runs.append((start, b))
        return runs

    def build_connector_meta(self, scheduler_output) -> KVConnectorMetadata:
        meta = KvtierConnectorMetadata()
        steps = []
        for nr in scheduler_output.scheduled_new_reqs:
            steps.append((nr.req_id, nr.block_ids, True, nr.num_computed_tokens))
        cached = scheduler_output.scheduled_cached_reqs
        for i, rid in enumerate(cached.req_ids):
            steps.append((rid, cached.new_block_ids[i], rid in cached.resumed_req_ids,
                          cached.num_computed_tokens[i]))
        scheduled = {step[0] for step in steps}
        for rid, (a, b, pages) in list(self._pending_loads.items()):
            if pages is None or rid in scheduled:
                continue
            # Waits in WAITING_FOR_REMOTE_KVS: scheduled once loaded.
            r = self._requests[rid]
            r.block_ids = pages
            meta.async_loads.append(self._transfer(rid, r, a, b))
            r.done = max(r.done, b)
            del self._pending_loads[rid]
        for rid, block_ids, new, computed in steps:
            r = self._track(rid, block_ids, new)
            if r is None or not r.block_ids:
                continue
            n_keys = len(r.keys) // KEY_BYTES
            load = self._pending_loads.pop(rid, None)
            if load is not None:
                a, b, _ = load
                meta.loads.append(_Transfer(rid, r.keys[a * KEY_BYTES: b * KEY_BYTES],
                                            tuple(g[a:b] for g in r.block_ids)))
                r.done = max(r.done, b)
            else:
                # vLLM computes from `computed` on.  After a failed load
                # (a key that was staging turned out a miss) it has moved
                # back to the first failed block: what it recomputes is
                # not in kvtierd, and is stored once computed.
                r.done = min(r.done, computed // self._block)
            # Blocks whose every token is computed by the end of this step
            # (computed counts vLLM's and kvtier's hits).
            full = min(n_keys, (computed + scheduler_output.num_scheduled_tokens.get(rid, 0))
                       // self._block, min(len(g) for g in r.block_ids))
            if full > r.done:
                for a, b in self._stored_runs(r, r.done, full):
                    meta.stores.append(self._transfer(rid, r, a, b))
                r.done = full
        for rid in scheduler_output.finished_req_ids:
            self._requests.pop(rid, None)
            self._pending_loads.pop(rid, None)
            self._load_failed.discard(rid)
        return meta

    def request_finished(self, request, block_ids):
        return self.request_finished_all_groups(request, (block_ids,))

    def request_finished_all_groups(self, request, block_ids):
        """Its pages go back to vLLM now: those a copy still uses stay
        pinned until the copy is done."""
        r = self._requests.pop(request.request_id, None)
        self._pending_loads.pop(request.request_id, None)
        self._load_failed.discard(request.request_id)
        if r is not None and r.keys:
            self._hint(request, r.keys)
        return False, None

    def update_connector_output(self, connector_output):
        # A request whose load failed is computed by vLLM, which asks for
        # its blocks again: it is not offered them again (they would fail
        # again the same way, for ever).
        failed = set(getattr(connector_output, "failed_recving", None) or ())
        bad = getattr(connector_output, "invalid_block_ids", None)
        if bad:
            failed.update(rid for rid, r in self._requests.items()
                          if r.block_ids and not bad.isdisjoint(r.block_ids[0]))
        self._load_failed.update(failed)
        meta = getattr(connector_output, "kv_connector_worker_meta", None)
        if not isinstance(meta, KvtierWorkerMetadata) or self._pool is None:
            return
        for pin, n in meta.done.items():
            self._pin_reports[pin] += n
            if self._pin_reports[pin] >= self._workers:
                del self._pin_reports[pin]
                self._pool.free_blocks(self._pins.pop(pin, ()))

    def has_pending_block_frees(self) -> bool:
        return bool(self._pins)

    def has_pending_push_work(self) -> bool:
        # The engine steps on while copies hold pages, to hear that they
        # are done and give the pages back.
        return bool(self._pins)

    def _hint(self, request, keys: bytes):
        """The request's lifecycle hints (module docstring) for its stored
        blocks; a hint that cannot be given is only logged."""
        params = (getattr(request, "kv_transfer_params", None) or {}).get("kvtier") or {}
        try:
            shared = int(params.get("shared_tokens", 0)) // self._block
            priority = int(params.get("shared_priority", _SHARED_PRIORITY))
            end = params.get("end", self._end)
            if end not in _ENDS or shared < 0:
                raise ValueError(f"end is one of {', '.join(_ENDS)}, shared_tokens >= 0")
        except (TypeError, ValueError) as e:
            log.warning("kvtier: request %s: bad kv_transfer_params 'kvtier' (%s); no hints",
                        request.request_id, e)
            return
        ns = self._conn.ns  # a hint is not worth connecting for
        n = len(keys) // KEY_BYTES
        shared = min(shared, n)
        if ns is None or (not shared and (end == "none" or shared == n)):
            return
        try:
            if shared:
                self.stats["retained_blocks"] += ns.retain(keys[: shared * KEY_BYTES], priority)
            if end != "none" and shared < n:
                self.stats["ended_blocks"] += ns.end(keys[shared * KEY_BYTES:],
                                                     session=end == "session")
        except Error as e:
            log.warning("kvtier: hints for request %s failed: %s", request.request_id, e)

    # ----------------------------------------------------------------- worker

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]):
        from vllm.distributed.parallel_state import get_tensor_model_parallel_rank

        self._rank = get_tensor_model_parallel_rank()
        ident = self._identity
        names = list(kv_caches)
        if len(names) != ident.layers:
            raise NotImplementedError(
                f"kvtier.vllm: vLLM registered {len(names)} cache layers for a model of "
                f"{ident.layers} (a speculative decoding draft model's layers?); kvtier "
                "stores the target model's layers only. Run without the kvtier connector "
                "or without speculative decoding")
        # Each group's layers in the order vLLM registered them; one group
        # of all without the hybrid allocator's groups.
        specs = _groups_of(self._kv_cache_config) or [(names, 0, None)]
        groups = [([n for n in names if n in set(g)], window) for g, window, _ in specs]
        if sum(len(g) for g, _ in groups) != len(names):
            raise NotImplementedError(
                "kvtier.vllm: vLLM's KV cache groups do not name every registered cache "
                "layer once; run without the kvtier connector")
        self._layouts, self._geometries, self._gaps = [], [], []
        first = kv_caches[names[0]]
        for group, window in groups:
            geoms = set()
            for n in group:
                backend = _backend_name(self._vllm_config, n)
                isa = _cpu_isa(self._vllm_config, n, kv_caches[n]) if backend == "CPU_ATTN" \
                    else None
                geoms.add(layouts.geometry(backend, kv_caches[n], ident.head_size,
                                           ident.heads_per_rank, self._block, cpu_isa=isa))
            if len(geoms) != 1:
                raise layouts.LayoutError(
                    "kvtier.vllm: the layers' caches are laid out differently "
                    f"({len(geoms)} geometries in a group); run without the kvtier connector")
            geo = geoms.pop()
            self._geometries.append(geo)
            self._gaps.append(bool(window))
            self._layouts.append(layouts.layout(geo, [kv_caches[n] for n in group], self._block,
                                                gaps=bool(window)))
        if first.device.type == "cuda":
            if not HAVE_CUDA:
                raise NotImplementedError(
                    "kvtier.vllm: vLLM's caches are on a GPU and this kvtier was built "
                    "without CUDA; rebuild it where nvcc is installed, or run without the "
                    "kvtier connector")
            self._device = first.device.index or 0
        elif first.device.type != "cpu":
            raise NotImplementedError(f"kvtier.vllm: caches on {first.device.type} are not "
                                      "supported; run without the kvtier connector")
        ident.check_device(first.device.type, "kvtier.vllm")
        # A load's layers are counted across the groups, in block order.
        order = [n for group, _ in groups for n in group]
        self._layer_index = {n: i for i, n in enumerate(order)}
        log.info("kvtier: %d layers in %d groups registered (%s, %s kernel pages per block), "
                 "rank %d", len(names), len(groups), _backend_name(self._vllm_config, names[0]),
                 "/".join(str(g.pages_per_block) for g in self._geometries), self._rank)

    def _context(self, ns, mover: bool):
        """The CUDA context of the mover's thread or of vLLM's, on ns's
        client (a new one after kvtierd restarted)."""
        from . import CudaContext

        slot = "_mover_cuda" if mover else "_cuda"
        held = getattr(self, slot)
        if held is None or held[0] is not ns.client:
            if held is not None:
                if not mover:
                    self._close_loads()
                held[1].close()
            held = (ns.client, CudaContext(ns.client, self._device))
            setattr(self, slot, held)
        return held[1]

    def _close_loads(self) -> None:
        for job, _ in self._load_jobs:
            job.close()  # waits for its copies, then releases its leases
        self._load_jobs, self._step_jobs = [], []

    def _indices(self, t: _Transfer) -> list[list[int]]:
        """What each group's Layout names the transfer's pages by."""
        return [layouts.indices(geo, ids, self._block, gaps)
                for geo, ids, gaps in zip(self._geometries, t.block_ids, self._gaps)]

    def _copy(self, load: bool, ns, t: _Transfer, event=None) -> tuple[int, list[int]]:
        """Load or store a transfer's blocks between kvtierd and vLLM's
        pages, waited for: how many were copied, and the per-block
        statuses.  On a GPU (from the mover only) through the mover's CUDA
        context, after event (a torch.cuda.Event recorded on the compute
        stream)."""
        idx = self._indices(t)
        if self._device is None:
            op = ns.load_paged if load else ns.store_paged
            return op(self._shard, None, t.keys, groups=self._layouts, group_indices=idx)
        ctx = self._context(ns, mover=True)
        submit = ctx.load if load else ctx.store
        with submit(ns, self._shard, None, t.keys, event=event.cuda_event, after="event",
                    groups=self._layouts, group_indices=idx) as job:
            status = job.wait()
        return sum(1 for x in status if x == 0), status

    def _load_on_stream(self, ns, t: _Transfer) -> list[int]:
        """A load on a GPU, queued after the work on the compute stream,
        which waits for it on the GPU (before the forward, or layer by
        layer in wait_for_layer_load); the CPU does not wait.  Returns the
        statuses known at once (leases refused); copies under way read
        _IN_FLIGHT."""
        stream = torch.cuda.current_stream(self._device).cuda_stream
        job = self._context(ns, mover=False).load(ns, self._shard, None, t.keys, stream=stream,
                                                  groups=self._layouts,
                                                  group_indices=self._indices(t))
        if self._layerwise:
            self._step_jobs.append(job)
        else:
            job.wait_stream(stream)
        status = job.poll()[1]
        self._load_jobs.append((job, status))
        return status

    def _reap_loads(self) -> None:
        """Loads on a GPU seen complete give their leases back; a copy that
        failed after its submission (the GPU's own error) is reported."""
        left = []
        for job, queued in self._load_jobs:
            done, status = job.poll()
            if not done:
                left.append((job, queued))
                continue
            failed = sum(1 for q, x in zip(queued, status) if q == _IN_FLIGHT and x < 0)
            if failed:
                log.error("kvtier: %d block copies to the GPU failed after they were queued "
                          "(the GPU's error); the step read what the pages held", failed)
            job.close()
        self._load_jobs = left

    def _open_shard(self, ns) -> None:
        self._shard, self._writer = shard_of(self._rank, ns.info["shards"],
                                             self._identity.tp_size)

    # The mover: one thread that copies what the step need not wait for
    # (asynchronous loads, and stores), in order.  The
    # library releases the GIL while it waits and copies.

    def _submit(self, job) -> None:
        if self._mover is None:
            self._mover = threading.Thread(target=self._move, name="kvtier-mover", daemon=True)
            self._mover.start()
        self._jobs.put(job)

    def _move(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                if job is None:
                    return
                job()
            except Exception:  # a job reports its own result; nothing may stop the mover
                log.exception("kvtier: a copy failed")
            finally:
                self._jobs.task_done()

    def _done(self, t: _Transfer) -> None:
        """This worker is done with t's pages (called with the lock held)."""
        if t.pin:
            self._done_pins.append(t.pin)

    def _load_async(self, ns, t: _Transfer, event) -> None:
        status = None
        try:
            # Staging from NVMe or the remote tier began at the lookup.
            ns.wait_resident(t.keys, _STAGE_TIMEOUT_MS)
            _, status = self._copy(True, ns, t, event)
        except Error as e:
            log.warning("kvtier: load failed: %s", e)
        finally:
            n = len(t.keys) // KEY_BYTES
            bad = n if status is None else next((i for i, x in enumerate(status) if x < 0), n)
            with self._lock:
                self._received.append((t.req_id, tuple(g[bad:] for g in t.block_ids), bad))
                self._done(t)

    def _store(self, ns, t: _Transfer, event) -> None:
        stored, skipped = 0, 0
        try:
            stored, _ = self._copy(False, ns, t, event)
        except Error as e:
            skipped = len(t.keys) // KEY_BYTES
            log.warning("kvtier: store skipped: %s", e)
        finally:
            with self._lock:
                self.stats["stored_blocks"] += stored
                self.stats["store_skipped"] += skipped
                self._done(t)

    def drain(self) -> None:
        """Wait until the copies handed to the mover are done."""
        if self._mover is not None:
            self._jobs.join()

    def start_load_kv(self, forward_context, **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        self._failed_reqs = set()  # for this step's wait_for_save
        self._step_jobs = []
        if not isinstance(meta, KvtierConnectorMetadata):
            return
        if not meta.loads and not meta.async_loads:
            return
        ns = self._namespace()
        if ns is not None:
            self._open_shard(ns)
        # On a GPU the pages may still be read by work queued before this
        # step (a freed block given to a new request): copies start after it.
        event = self._compute_event() if meta.async_loads else None
        for t in meta.async_loads:
            self.stats["async_loads"] += 1
            if ns is None or not self._layouts:
                with self._lock:
                    self._received.append((t.req_id, t.block_ids, 0))
                    self._done(t)
            else:
                self._submit(lambda t=t: self._load_async(ns, t, event))
        if not meta.loads:
            return
        firsts = []  # each load's first failed block
        for t in meta.loads:
            status = None
            if ns is not None and self._layouts:
                try:
                    if self._device is None:
                        _, status = self._copy(True, ns, t)
                    else:
                        status = self._load_on_stream(ns, t)
                except Error as e:
                    log.warning("kvtier: load failed: %s", e)
            # A failed block and every block after it are recomputed.
            n = len(t.keys) // KEY_BYTES
            firsts.append(n if status is None else next(
                (i for i, s in enumerate(status) if s < 0 and s != _IN_FLIGHT), n))
        # The ranks compute each request together: a load that failed on
        # one rank fails on all, from the first block any rank missed.
        if self._identity.tp_size > 1:
            firsts = _least_over_ranks(firsts)
        for bad, t in zip(firsts, meta.loads):
            self.stats["loaded_blocks"] += bad
            n = len(t.keys) // KEY_BYTES
            if bad < n:
                self.stats["load_failures"] += n - bad
                self._load_errors.update(t.block_ids[0][bad:])
                self._failed_reqs.add(t.req_id)

    def wait_for_layer_load(self, layer_name: str) -> None:
        """With layerwise on a GPU: the compute stream waits for this
        layer of the step's loads, the later layers still copying."""
        if not self._step_jobs:
            return  # none, on the CPU, or waited for before the forward
        layer = self._layer_index.get(layer_name)
        if layer is None:
            return
        stream = torch.cuda.current_stream(self._device).cuda_stream
        for job in self._step_jobs:
            job.wait_layer(layer, stream)

    def save_kv_layer(self, layer_name: str, kv_layer, attn_metadata, **kwargs: Any) -> None:
        return  # blocks hold every layer: stored once the step is done

    def _compute_event(self):
        """On a GPU, an event recorded on the compute stream now; else None."""
        if self._device is None:
            return None
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(self._device))
        return event

    def wait_for_save(self):
        """The step's new blocks, handed to the mover, which copies them
        while the next step computes (their pages pinned until every
        worker is done with them); on a GPU on the library's store stream,
        after an event recorded here, at the end of the forward that
        computed them."""
        self._step_jobs = []
        meta = self._get_connector_metadata()
        if not isinstance(meta, KvtierConnectorMetadata) or not meta.stores:
            return
        ns = self._namespace()
        if ns is not None:
            self._open_shard(ns)
        event = self._compute_event()
        for t in meta.stores:
            # What this step computed after a failed load (on any rank)
            # rests on pages that were never filled: vLLM computes it
            # again, and it is stored then.
            failed = t.req_id in self._failed_reqs
            if failed or ns is None or not self._layouts or not self._writer:
                with self._lock:
                    if self._writer or failed:
                        self.stats["store_skipped"] += len(t.keys) // KEY_BYTES
                    self._done(t)  # another rank of its replica group writes the shard
                continue
            self._submit(lambda t=t: self._store(ns, t, event))

    def get_kv_connector_stats(self):
        """The worker's counts since vLLM last asked (kvtier.vllm_stats):
        they reach vLLM's Prometheus endpoint as vllm:kvtier_*_total."""
        with self._lock:
            counts = dict(self.stats)
        return vllm_stats.since(counts, self._reported)

    @classmethod
    def build_kv_connector_stats(cls, data=None):
        return vllm_stats.KvtierStats(data=dict(data or {}))

    @classmethod
    def build_prom_metrics(cls, vllm_config, metric_types, labelnames, per_engine_labelvalues):
        return vllm_stats.KvtierPromMetrics(vllm_config, metric_types, labelnames,
                                            per_engine_labelvalues)

    def build_connector_worker_meta(self):
        """The pins of the transfers this worker is done with."""
        with self._lock:
            done, self._done_pins = self._done_pins, []
        return KvtierWorkerMetadata(Counter(done)) if done else None

    def get_block_ids_with_load_errors(self) -> set[int]:
        errors, self._load_errors = self._load_errors, set()
        return errors

    def get_finished(self, finished_req_ids):
        """The asynchronous loads that are done (their failed blocks go to
        get_block_ids_with_load_errors, which vLLM asks next, in the same
        step; a hybrid model's failed request to failed_recving)."""
        self._reap_loads()
        with self._lock:
            received, self._received = self._received, []
        for rid, failed, loaded in received:
            self.stats["loaded_blocks"] += loaded
            if failed[0]:
                self.stats["load_failures"] += len(failed[0])
                if self._hybrid:
                    self._failed_recving.add(rid)
                else:
                    self._load_errors.update(failed[0])
        recving = {rid for rid, _, _ in received}
        return None, recving or None

    def get_transfer_results(self, finished_req_ids: set[str]) -> KVConnectorTransferResults:
        _, recving = self.get_finished(finished_req_ids)
        failed, self._failed_recving = self._failed_recving, set()
        return KVConnectorTransferResults(finished_recving=set(recving or ()),
                                          failed_recving=failed)
