# SPDX-License-Identifier: Apache-2.0
"""The connector's worker side, in each of vLLM's workers (one per
tensor-parallel rank): reads the attention backend's layout from the
cache views vLLM registers, copies the blocks the scheduler names
between kvtierd and those views (on the CPU, or through the library's
CUDA path), and reports what failed to load and which copies are done."""

import errno
import logging
import threading
from collections import Counter
from typing import Any

import torch

from .. import HAVE_CUDA, KEY_BYTES, Error
from .. import layouts, vllm_stats
from ..identity import shard_of
from ..reconnect import Reconnecting
from .config import Config, groups_of
from .metadata import KvtierConnectorMetadata, KvtierWorkerMetadata, Transfer
from .mover import Mover

log = logging.getLogger("kvtier.vllm")

# How long an asynchronous load waits for blocks staged from NVMe or the
# remote tier (the request waits, not the batch); later ones are
# recomputed.
_STAGE_TIMEOUT_MS = 10000
# A CUDA job's status for a block whose copy is still under way.
_IN_FLIGHT = -errno.EINPROGRESS


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


class KvtierWorker:
    def __init__(self, config: Config, vllm_config, kv_cache_config):
        self._config = config
        self._identity = config.identity
        self._block = config.block
        self._vllm_config = vllm_config
        self._kv_cache_config = kv_cache_config
        self._conn = Reconnecting(config.identity, socket=config.socket, name="vllm-worker",
                                  log=log)
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
        self.stats = {"loaded_blocks": 0, "load_failures": 0, "stored_blocks": 0,
                      "store_skipped": 0, "async_loads": 0}
        self._lock = threading.Lock()  # the mover's thread and vLLM's
        self.mover = Mover()
        self._done_pins: list[int] = []  # transfers done with, since the last step
        self._received: list[tuple[str, tuple[list[int], ...], int]] = []  # async loads done
        self._reported: dict[str, int] = {}  # counters as last handed to vLLM's statistics

    def shutdown(self):
        self.mover.close()  # the copies under way finish first
        self._close_loads()
        for held in (self._cuda, self._mover_cuda):
            if held is not None:
                held[1].close()
        self._cuda = self._mover_cuda = None
        self._conn.close()

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
        specs = groups_of(self._kv_cache_config) or [(names, 0, None)]
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
        from .. import CudaContext

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

    def _indices(self, t: Transfer) -> list[list[int]]:
        """What each group's Layout names the transfer's pages by."""
        return [layouts.indices(geo, ids, self._block, gaps)
                for geo, ids, gaps in zip(self._geometries, t.block_ids, self._gaps)]

    def _copy(self, load: bool, ns, t: Transfer, event=None) -> tuple[int, list[int]]:
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

    def _load_on_stream(self, ns, t: Transfer) -> list[int]:
        """A load on a GPU, queued after the work on the compute stream,
        which waits for it on the GPU (before the forward, or layer by
        layer in wait_for_layer_load); the CPU does not wait.  Returns the
        statuses known at once (leases refused); copies under way read
        _IN_FLIGHT."""
        stream = torch.cuda.current_stream(self._device).cuda_stream
        job = self._context(ns, mover=False).load(ns, self._shard, None, t.keys, stream=stream,
                                                  groups=self._layouts,
                                                  group_indices=self._indices(t))
        if self._config.layerwise:
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

    def _done(self, t: Transfer) -> None:
        """This worker is done with t's pages (called with the lock held)."""
        if t.pin:
            self._done_pins.append(t.pin)

    def _load_async(self, ns, t: Transfer, event) -> None:
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

    def _store(self, ns, t: Transfer, event) -> None:
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
        self.mover.drain()

    def start_load_kv(self, meta) -> None:
        self._failed_reqs = set()  # for this step's wait_for_save
        self._step_jobs = []
        if not isinstance(meta, KvtierConnectorMetadata):
            return
        if not meta.loads and not meta.async_loads:
            return
        ns = self._conn.namespace()
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
                self.mover.submit(lambda t=t: self._load_async(ns, t, event))
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

    def _compute_event(self):
        """On a GPU, an event recorded on the compute stream now; else None."""
        if self._device is None:
            return None
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(self._device))
        return event

    def wait_for_save(self, meta) -> None:
        """The step's new blocks, handed to the mover, which copies them
        while the next step computes (their pages pinned until every
        worker is done with them); on a GPU on the library's store stream,
        after an event recorded here, at the end of the forward that
        computed them."""
        self._step_jobs = []
        if not isinstance(meta, KvtierConnectorMetadata) or not meta.stores:
            return
        ns = self._conn.namespace()
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
            self.mover.submit(lambda t=t: self._store(ns, t, event))

    def get_kv_connector_stats(self):
        """The worker's counts since vLLM last asked (kvtier.vllm_stats):
        they reach vLLM's Prometheus endpoint as vllm:kvtier_*_total."""
        with self._lock:
            counts = dict(self.stats)
        return vllm_stats.since(counts, self._reported)

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
                if self._config.hybrid:
                    self._failed_recving.add(rid)
                else:
                    self._load_errors.update(failed[0])
        recving = {rid for rid, _, _ in received}
        return None, recving or None

    def take_failed_recving(self) -> set[str]:
        failed, self._failed_recving = self._failed_recving, set()
        return failed
