# SPDX-License-Identifier: Apache-2.0
"""The connector's worker side, in each of vLLM's workers (one per
tensor-parallel rank): reads the attention backend's layout from the
cache views vLLM registers, copies the blocks the scheduler names
between kvtierd and those views (on the CPU, or through the library's
CUDA path) on its mover thread, and reports what failed to load and
which copies are done.

A request whose load failed stores nothing that a step computed before
vLLM heard of the failure (the store's ``failures`` count is below the
worker's for that request): such a step read pages the load never
filled.  vLLM does not run one while loads are asynchronous; should it
ever, the blocks are not stored, and are deleted from kvtierd in case
another rank, which did not see the failure, stored its part of them."""

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
# The longest a step that computes nothing waits in get_finished for a
# load under way to end (a request vLLM is given meanwhile waits as long).
_IDLE_WAIT_S = 0.01


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
        # (client, kvtier.CudaContext) of the mover's thread, made at its
        # first copy.
        self._cuda = None
        self._load_errors: set[int] = set()
        self._failed_recving: set[str] = set()  # hybrid: requests whose load failed
        # Each unfinished request's failed loads, as this worker saw them;
        # its loads under way; and the requests vLLM finished while one was.
        self._failures: Counter = Counter()
        self._loading: Counter = Counter()
        self._finished: set[str] = set()
        self.stats = {"loaded_blocks": 0, "load_failures": 0, "stored_blocks": 0,
                      "store_skipped": 0, "async_loads": 0}
        self._lock = threading.Lock()  # the mover's thread and vLLM's
        self._load_over = threading.Condition(self._lock)  # a load ended
        self._idle = False  # this step computes nothing (KvtierConnectorMetadata.idle)
        self.mover = Mover()
        self._done_pins: list[int] = []  # transfers done with, since the last step
        # With KV events, of those: pin -> blocks not stored, blocks gone
        self._unstored: dict[int, set[int]] = {}
        self._gone: dict[int, set[int]] = {}
        self._received: list[tuple[str, tuple[list[int], ...], int]] = []  # async loads done
        self._reported: dict[str, int] = {}  # counters as last handed to vLLM's statistics

    def shutdown(self):
        self.mover.close()  # the copies under way finish first
        if self._cuda is not None:
            self._cuda[1].close()
            self._cuda = None
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
        log.info("kvtier: %d layers in %d groups registered (%s, %s kernel pages per block), "
                 "rank %d", len(names), len(groups), _backend_name(self._vllm_config, names[0]),
                 "/".join(str(g.pages_per_block) for g in self._geometries), self._rank)
        # Connect at the engine's start: connecting maps the tenant's pool
        # extents and faults them in, which the first request to load would
        # pay otherwise (a fresh engine's first turn).  kvtierd away: the
        # first copy tries again, as ever.
        ns = self._conn.namespace()
        if ns is not None:
            self._open_shard(ns)

    def _context(self, ns):
        """The mover's CUDA context on ns's client (a new one after kvtierd
        restarted)."""
        from .. import CudaContext

        if self._cuda is None or self._cuda[0] is not ns.client:
            if self._cuda is not None:
                self._cuda[1].close()
            self._cuda = (ns.client, CudaContext(ns.client, self._device))
        return self._cuda[1]

    def _indices(self, t: Transfer) -> list[list[int]]:
        """What each group's Layout names the transfer's pages by."""
        return [layouts.indices(geo, ids, self._block, gaps)
                for geo, ids, gaps in zip(self._geometries, t.block_ids, self._gaps)]

    def _copy(self, load: bool, ns, t: Transfer, event=None) -> tuple[int, list[int]]:
        """Load or store a transfer's blocks between kvtierd and vLLM's
        pages, waited for: how many were copied, and the per-block
        statuses.  On a GPU through the mover's CUDA context, after event
        (a torch.cuda.Event recorded on the compute stream)."""
        idx = self._indices(t)
        if self._device is None:
            op = ns.load_paged if load else ns.store_paged
            return op(self._shard, None, t.keys, groups=self._layouts, group_indices=idx)
        ctx = self._context(ns)
        submit = ctx.load if load else ctx.store
        with submit(ns, self._shard, None, t.keys, event=event.cuda_event, after="event",
                    groups=self._layouts, group_indices=idx) as job:
            status = job.wait()
        return sum(1 for x in status if x == 0), status

    def _open_shard(self, ns) -> None:
        self._shard, self._writer = shard_of(self._rank, ns.info["shards"],
                                             self._identity.tp_size)

    def _done(self, t: Transfer, unstored=(), gone=()) -> None:
        """This worker is done with t's pages, unstored: the blocks (indices
        in t) it did not store, gone: those it found missing or deleted
        (called with the lock held)."""
        if t.pin:
            self._done_pins.append(t.pin)
            if self._config.events:
                for record, blocks in ((self._unstored, unstored), (self._gone, gone)):
                    if blocks:
                        record.setdefault(t.pin, set()).update(blocks)

    def _loaded(self, t: Transfer, good: int, gone=()) -> None:
        """t's load is over, its first good blocks loaded, the blocks gone
        found missing: reported at the next get_finished (called with the
        lock held)."""
        self._received.append((t.req_id, tuple(g[good:] for g in t.block_ids), good))
        self._load_over.notify_all()
        if good < len(t.keys) // KEY_BYTES:
            self._failures[t.req_id] += 1
        self._loading[t.req_id] -= 1
        if not self._loading[t.req_id]:
            del self._loading[t.req_id]
            if t.req_id in self._finished:
                self._finished.discard(t.req_id)
                self._failures.pop(t.req_id, None)
        self._done(t, gone=gone)

    def _load(self, ns, t: Transfer, event) -> None:
        status = None
        try:
            # One round trip when the blocks are in host memory; those
            # still staging from NVMe or the remote tier (staging began at
            # the lookup) are waited for, then loaded.
            status = list(self._copy(True, ns, t, event)[1])
            late = next((i for i, x in enumerate(status) if x), len(status))
            if late < len(status) and status[late] == -errno.EAGAIN:
                rest = Transfer(t.req_id, t.keys[late * KEY_BYTES:],
                                tuple(g[late:] for g in t.block_ids))
                ns.wait_resident(rest.keys, _STAGE_TIMEOUT_MS)
                status[late:] = self._copy(True, ns, rest, event)[1]
        except Error as e:
            log.warning("kvtier: load failed: %s", e)
        finally:
            n = len(t.keys) // KEY_BYTES
            good = 0 if status is None else next((i for i, x in enumerate(status) if x < 0), n)
            gone = [i for i, x in enumerate(status or ()) if x == -errno.ENOENT]
            with self._lock:
                self._loaded(t, good, gone)

    def _drop(self, ns, t: Transfer) -> None:
        """Deletes t's blocks from kvtierd: a step computed them over pages
        a failed load never filled."""
        n = len(t.keys) // KEY_BYTES
        deleted = False
        try:
            ns.delete(t.keys)
            deleted = True
        except Error as e:
            log.warning("kvtier: blocks computed after a failed load not deleted: %s", e)
        finally:
            with self._lock:
                self._done(t, unstored=range(n), gone=range(n) if deleted else ())

    def _store(self, ns, t: Transfer, event) -> None:
        n = len(t.keys) // KEY_BYTES
        stored, skipped, unstored = 0, 0, range(n)
        try:
            stored, status = self._copy(False, ns, t, event)
            # -EEXIST: kvtierd holds the block already
            unstored = [i for i, x in enumerate(status) if x not in (0, -errno.EEXIST)]
        except Error as e:
            skipped = n
            log.warning("kvtier: store skipped: %s", e)
        finally:
            with self._lock:
                self.stats["stored_blocks"] += stored
                self.stats["store_skipped"] += skipped
                self._done(t, unstored=unstored)

    def drain(self) -> None:
        """Wait until the copies handed to the mover are done."""
        self.mover.drain()

    def start_load_kv(self, meta) -> None:
        """Hands the step's loads to the mover; get_finished reports each
        once it is over, with its failed blocks."""
        self._idle = isinstance(meta, KvtierConnectorMetadata) and meta.idle
        if not isinstance(meta, KvtierConnectorMetadata) or not meta.loads:
            return
        ns = self._conn.namespace()
        if ns is not None:
            self._open_shard(ns)
        # On a GPU the pages may still be read by work queued before this
        # step (a freed block given to a new request): copies start after it.
        event = self._compute_event()
        for t in meta.loads:
            self.stats["async_loads"] += 1
            with self._lock:
                self._loading[t.req_id] += 1
            if ns is None or not self._layouts:
                with self._lock:
                    self._loaded(t, 0)
            else:
                self.mover.submit(lambda t=t: self._load(ns, t, event))

    def wait_for_layer_load(self, layer_name: str) -> None:
        return  # a load is over before its request is scheduled

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
        if not isinstance(meta, KvtierConnectorMetadata) or not meta.stores:
            return
        ns = self._conn.namespace()
        if ns is not None:
            self._open_shard(ns)
        event = self._compute_event()
        for t in meta.stores:
            with self._lock:
                poisoned = t.failures < self._failures.get(t.req_id, 0)
            if poisoned:
                log.error("kvtier: request %s: a step scheduled before vLLM heard of its "
                          "failed load computed %d blocks; not stored", t.req_id,
                          len(t.keys) // KEY_BYTES)
            if poisoned or ns is None or not self._layouts or not self._writer:
                n = len(t.keys) // KEY_BYTES
                with self._lock:
                    if self._writer or poisoned:
                        self.stats["store_skipped"] += n
                    if not poisoned or ns is None:
                        # (not a writer: another rank of its replica group
                        # writes the shard)
                        self._done(t, unstored=range(n) if self._writer or poisoned else ())
                if poisoned and ns is not None:
                    self.mover.submit(lambda t=t: self._drop(ns, t))
                continue
            self.mover.submit(lambda t=t: self._store(ns, t, event))

    def get_kv_connector_stats(self):
        """The worker's counts since vLLM last asked (kvtier.vllm_stats):
        they reach vLLM's Prometheus endpoint as vllm:kvtier_*_total."""
        with self._lock:
            counts = dict(self.stats)
        return vllm_stats.since(counts, self._reported)

    def build_connector_worker_meta(self):
        """The pins of the transfers this worker is done with (with KV
        events, what they did not store or found gone)."""
        with self._lock:
            done, self._done_pins = self._done_pins, []
            unstored, self._unstored = self._unstored, {}
            gone, self._gone = self._gone, {}
        return KvtierWorkerMetadata(Counter(done), unstored, gone) if done else None

    def get_block_ids_with_load_errors(self) -> set[int]:
        errors, self._load_errors = self._load_errors, set()
        return errors

    def get_finished(self, finished_req_ids):
        """The asynchronous loads that are done (their failed blocks go to
        get_block_ids_with_load_errors, which vLLM asks next, in the same
        step; a hybrid model's failed request to failed_recving).  The
        requests vLLM finished are forgotten.  A step that computes nothing
        waits a little for a load under way to end, so that vLLM schedules
        its request at the next step instead of stepping idly meanwhile."""
        with self._lock:
            if self._idle and self._loading and not self._received:
                self._load_over.wait(_IDLE_WAIT_S)
            received, self._received = self._received, []
            for rid in finished_req_ids or ():
                if rid in self._loading:
                    self._finished.add(rid)  # forgotten once its load is over
                else:
                    self._failures.pop(rid, None)
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
