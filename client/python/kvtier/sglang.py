# SPDX-License-Identifier: Apache-2.0
"""kvtier as an SGLang HiCache storage backend (the L3 tier behind SGLang's
host pool).

    python -m sglang.launch_server --model-path MODEL --enable-hierarchical-cache \\
        --hicache-storage-backend dynamic \\
        --hicache-storage-backend-extra-config '{"backend_name": "kvtier",
            "module_path": "kvtier.sglang", "class_name": "KvtierStorage",
            "interface_v1": 1, "socket": "/run/kvtierd/kvtierd.sock"}'

Extra config keys besides SGLang's own: ``socket`` (default $KVTIER_SOCKET
or kvtierd's default), ``salt`` (narrows sharing to engines that give the
same one), ``model_name`` and ``weights`` (hex) to override the namespace
identity (default: the model path SGLang names and a fingerprint of its
weight files, as kvtier.hf and kvtier.vllm compute it), ``kv_heads``,
the model's KV heads over all ranks (default: from its config.json), and
``codec``: how pages are stored, "none" (the default), "fp8-e4m3" or
"int4" (kvtier.CODECS), quantised as they leave the host pool and
dequantised as they come back, shared only with engines that ask for the
same codec; an fp8 host pool is stored as it is whatever the codec.

Pages move between kvtierd's pool and SGLang's registered host pool
directly (``batch_set_v1`` / ``batch_get_v1``, with ``interface_v1``: no
buffer between them), through kvtier.layouts' rules for every host layout
SGLang has for MHA and MLA (layer_first, page_first, page_first_direct,
and page_head for MHA); anything else is refused at start, naming it, as
are pools whose pages are more than K and V or not per-head K and V (an
MXFP8 KV cache's scales, unified memory) and a speculative decoding draft
model's KV.  A model named by something that is not a directory of
weights (a served model name) has no weights fingerprint, which is said
at attach.
``batch_exists`` is the leading run of pages kvtierd holds (in memory or
on NVMe, which ``batch_get_v1`` waits for).  Each tensor-parallel rank
stores and loads its own shard of a page; where the model has fewer KV
heads than ranks, the ranks that replicate a head share one shard, which
the first of them writes; an MLA page is one shard, written by rank 0.

Keys: SGLang's page hashes are kvtier's block keys (key scheme 2), so a
prefix SGLang stored is a hit for kvtier.vllm and kvtier.hf on the same
model and geometry (page size = their block size), and theirs for SGLang.

Without kvtierd (absent, killed, restarting) every page is a miss and
every store is skipped: nothing raises into SGLang's cache controller, a
page that did not load whole is never reported loaded, and the backend
reconnects by itself (at most once a second, one warning per outage).
"""

import errno
import hashlib
import json
import logging
import os
import threading
import time
from typing import Any, List, Optional

import torch

from sglang.srt.mem_cache.hicache_storage import HiCacheStorage, HiCacheStorageConfig
from sglang.srt.observability.metrics_collector import StorageMetrics

from . import Error, layouts, split_keys
from .identity import ModelIdentity, dtype_name, model_id, shard_of, weights_fingerprint
from .reconnect import Reconnecting

log = logging.getLogger("kvtier.sglang")

# How long a load waits for pages staging from NVMe (SGLang's prefetch
# thread waits, not the batch); pages still staging then are misses.
_STAGE_TIMEOUT_MS = 10000
_COUNTERS = ("lookups", "hit_pages", "loaded_pages", "load_failures", "stored_pages",
             "store_skipped")


def page_key(key: str) -> bytes:
    """kvtier's 32-byte key of an SGLang page key: its SHA-256 hex digest
    as bytes, or the digest of any other string."""
    if len(key) == 64:
        try:
            return bytes.fromhex(key)
        except ValueError:
            pass
    return hashlib.sha256(key.encode()).digest()


def _keys(keys: List[str]) -> bytes:
    return b"".join(page_key(k) for k in keys)


def _model_kv_heads(path: str) -> int:
    """The model's KV heads over all ranks, from its config.json; 0 where
    that cannot be read."""
    try:
        with open(os.path.join(path, "config.json")) as f:
            cfg = json.load(f)
    except (OSError, ValueError):
        return 0
    cfg = cfg.get("text_config", cfg)
    heads = cfg.get("num_key_value_heads") or cfg.get("num_attention_heads") or 0
    return heads if isinstance(heads, int) and heads > 0 else 0


def _refuse_draft_pools(names) -> None:
    raise NotImplementedError(
        f"kvtier.sglang: the host pools {', '.join(map(str, names))} hold a speculative "
        "decoding draft model's KV (EAGLE, MTP), which kvtier does not store; run without "
        "speculative decoding or without the kvtier storage backend")


def _refuse_side_pools(names) -> None:
    if any(str(n).startswith("draft") for n in names):
        _refuse_draft_pools(names)
    raise NotImplementedError(
        f"kvtier.sglang: the host pools {', '.join(map(str, names))} beside the KV pages (a "
        "hybrid model's Mamba, sliding-window or indexer pools, which SGLang moves with its "
        "v2 storage calls) are not supported; kvtier stores KV pages only. Run this model "
        "without the kvtier storage backend")


def _refuse_pool_kind(pool) -> None:
    """Host pools whose pages are more than kv_buffer, or not per-head
    K and V: refused, naming them."""
    kind = type(pool).__name__
    if any(getattr(pool, a, None) is not None for a in ("k_scale_host", "v_scale_host")):
        raise NotImplementedError(
            f"kvtier.sglang: the host pool {kind} keeps per-page scales beside its KV "
            "(an MXFP8 KV cache): kvtier would store the pages without them. Run with "
            "another --kv-cache-dtype or without the kvtier storage backend")
    if not hasattr(pool, "kv_buffer") or not (hasattr(pool, "head_num") or
                                                hasattr(pool, "kv_cache_dim")):
        raise NotImplementedError(
            f"kvtier.sglang: the host pool {kind} holds pages of its own format (unified "
            "memory, --enable-unified-memory), not per-head K and V that kvtier can read. "
            "Run without unified memory or without the kvtier storage backend")


class KvtierStorage(HiCacheStorage):
    """SGLang HiCacheStorage backed by kvtierd (see the module docstring)."""

    def __init__(self, storage_config: HiCacheStorageConfig, kwargs: Optional[dict] = None):
        cfg = storage_config
        for what, size in (("pipeline", cfg.pp_size), ("attention context", cfg.attn_cp_size),
                           ("decode context", cfg.dcp_size)):
            if size > 1:
                raise NotImplementedError(
                    f"kvtier.sglang: {what} parallelism ({what} size {size}) is not supported "
                    "yet; run without the kvtier storage backend")
        self._config = cfg
        self._extra = dict(cfg.extra_config or {})
        self._conn: Reconnecting | None = None  # made when the host pool is registered
        self._layout = None
        self._one_page: tuple = ()
        self._page = 0
        self._shard, self._writer = 0, True
        # SGLang calls from its prefetch and backup threads at once.
        self._lock = threading.Lock()
        # kvtier's counts since the start (get_stats is SGLang's metrics).
        self.counts = dict.fromkeys(_COUNTERS, 0)
        # SGLang's per-call figures, when it asks for them, until get_stats.
        self._metrics = StorageMetrics() if cfg.enable_storage_metrics else None

    # ----------------------------------------------------------- registration

    def register_mem_pool_host(self, mem_pool_host):
        entries = getattr(mem_pool_host, "entries", ())
        side = [e.name for e in entries if e is not mem_pool_host.anchor_entry]
        if side:
            _refuse_side_pools(side)
        packed = [e.name for e in entries if getattr(e, "packed_draft_device_pools", ())]
        if packed:  # a draft model's layers packed beside the target's
            _refuse_draft_pools(packed)
        # A hybrid model's group of one pool is its KV pool.
        pool = getattr(getattr(mem_pool_host, "anchor_entry", None), "host_pool", mem_pool_host)
        _refuse_pool_kind(pool)
        super().register_mem_pool_host(mem_pool_host)
        cfg = self._config
        mla = bool(cfg.is_mla_model)
        if mla:
            heads, head_size = 1, pool.kv_cache_dim
        else:
            heads, head_size = pool.head_num, pool.head_dim
            if pool.v_head_dim != pool.head_dim:
                raise NotImplementedError(
                    f"kvtier.sglang: K heads of {pool.head_dim} and V heads of "
                    f"{pool.v_head_dim} elements; kvtier stores equal ones. Run without "
                    "the kvtier storage backend")
        try:
            dtype = dtype_name(pool.dtype)
        except ValueError:
            raise ValueError(f"kvtier.sglang: the host pool's dtype {pool.dtype} is not one "
                             "kvtier stores; run without the kvtier storage backend") from None
        geo, views = layouts.sglang_host(pool.kv_buffer, pool.layout, mla, pool.page_size,
                                         pool.layer_num, heads, head_size)
        self._layout = layouts.layout(geo, views, pool.page_size)
        self._page = pool.page_size
        # One page of the pool, as the generic calls hand pages over.
        self._one_page = (pool.dtype, layouts.sglang_page_shape(pool.kv_buffer, pool.layout,
                                                                mla, pool.page_size),
                          (pool.layout, mla, pool.page_size, pool.layer_num, heads, head_size))
        path = self._extra.get("model_name") or cfg.model_name or ""
        if not path:
            raise ValueError("kvtier.sglang: SGLang names no model; give model_name in "
                             "--hicache-storage-backend-extra-config")
        weights = self._extra.get("weights")
        if not weights and not weights_fingerprint(path):
            log.warning("kvtier: the model %r is not a local directory of weight files (a "
                        "served model name?): its identity has no weights fingerprint, and "
                        "other engines share its pages only if they name it so too; give "
                        "model_name (the model's path) or weights in "
                        "--hicache-storage-backend-extra-config", path)
        identity = ModelIdentity(
            model=model_id(path), layers=pool.layer_num,
            kv_heads=1 if mla else self._kv_heads(path, heads), head_size=head_size,
            dtype=dtype,
            block_tokens=pool.page_size,
            weights=bytes.fromhex(weights) if weights else weights_fingerprint(path),
            tp_size=cfg.tp_size, salt=str(self._extra.get("salt", "")).encode(), mla=mla,
            codec=self._extra.get("codec", "none"))
        self._conn = Reconnecting(identity, socket=self._extra.get("socket"),
                                  name=f"sglang-tp{cfg.tp_rank}", log=log)
        log.info("kvtier: SGLang host pool registered (%s, %s, %d layers, pages of %d "
                 "tokens, codec %s), tp rank %d of %d", pool.layout, "MLA" if mla else "MHA",
                 pool.layer_num, pool.page_size, identity.codec, cfg.tp_rank, cfg.tp_size)
        # Connect now, at the engine's start: connecting maps the tenant's
        # pool extents and faults them in, which the first prefetch would
        # pay otherwise.  kvtierd away: the first call tries again.
        self._namespace()

    def register_mem_host_pool_v2(self, host_pool, host_pool_name):
        """SGLang's v2 calls move a hybrid model's side pools (Mamba states,
        sliding-window and indexer caches) beside the KV pages: refused
        when SGLang registers one, at attach, rather than failing later on
        its cache controller's threads.  The KV pool itself is accepted."""
        mine = self.mem_pool_host
        anchor = getattr(getattr(mine, "anchor_entry", None), "host_pool", mine)
        if host_pool is not mine and host_pool is not anchor:
            _refuse_side_pools([host_pool_name])
        super().register_mem_host_pool_v2(host_pool, host_pool_name)

    def _kv_heads(self, path: str, heads: int) -> int:
        """KV heads over all ranks.  Where the model has fewer than ranks,
        each is replicated on tp / kv_heads ranks, one head a rank: one
        shard per replica group, written by its first rank (the model's
        count from the extra config's kv_heads, or its config.json)."""
        tp = self._config.tp_size
        total = int(self._extra.get("kv_heads") or _model_kv_heads(path) or heads * tp)
        if total >= heads * tp:
            return heads * tp
        if heads != 1 or tp % total:
            raise ValueError(f"kvtier.sglang: {heads} KV heads a rank on {tp} ranks do not "
                             f"replicate the model's {total}; give kv_heads in "
                             "--hicache-storage-backend-extra-config")
        return total

    def _namespace(self):
        if self._conn is None:
            return None
        with self._lock:  # one connection for both threads, made once
            ns = self._conn.namespace()
            if ns is not None:
                self._shard, self._writer = shard_of(self._config.tp_rank, ns.info["shards"],
                                                     self._config.tp_size)
        return ns

    def _count(self, **n):
        with self._lock:
            for k, v in n.items():
                self.counts[k] += v

    def _measured(self, load: bool, pages: int, started: float, ns) -> None:
        """A call's pages and GB/s, for SGLang's storage metrics."""
        if self._metrics is None or not pages:
            return
        gbs = pages * ns.info["shard_bytes"] / 1e9 / max(time.perf_counter() - started, 1e-9)
        with self._lock:
            (self._metrics.prefetch_pgs if load else self._metrics.backup_pgs).append(pages)
            (self._metrics.prefetch_bandwidth if load else self._metrics.backup_bandwidth).append(gbs)

    def _pages(self, host_indices, n: int) -> list[int]:
        """The host pool pages of n keys' tokens."""
        return layouts.sglang_pages(host_indices, n, self._page)

    # --------------------------------------------------------------- v1 calls

    def batch_exists(self, keys: List[str], extra_info=None) -> int:
        ns = self._namespace()
        if ns is None or not keys:
            return 0
        try:
            hits, _ = ns.lookup(_keys(keys))
        except Error as e:
            log.warning("kvtier: lookup failed: %s", e)
            return 0
        self._count(lookups=1, hit_pages=hits)
        return hits

    def batch_get_v1(self, keys: List[str], host_indices: torch.Tensor,
                     extra_info=None) -> List[bool]:
        n = len(keys)
        ns = self._namespace()
        if ns is None or not n:
            return [False] * n
        kb, pages = _keys(keys), self._pages(host_indices, n)
        started = time.perf_counter()
        try:
            _, status = ns.load_paged(self._shard, self._layout, kb, pages)
            late = [i for i, s in enumerate(status) if s == -errno.EAGAIN]
            if late:  # still staging from NVMe: wait for them, then again
                each = split_keys(kb)
                lk = b"".join(each[i] for i in late)
                ns.wait_resident(lk, _STAGE_TIMEOUT_MS)
                _, again = ns.load_paged(self._shard, self._layout, lk, [pages[i] for i in late])
                for i, s in zip(late, again):
                    status[i] = s
        except Error as e:
            log.warning("kvtier: load failed: %s", e)
            self._count(load_failures=n)
            return [False] * n
        ok = [s == 0 for s in status]
        self._count(loaded_pages=sum(ok), load_failures=n - sum(ok))
        self._measured(True, sum(ok), started, ns)
        return ok

    def batch_set_v1(self, keys: List[str], host_indices: torch.Tensor,
                     extra_info=None) -> List[bool]:
        n = len(keys)
        ns = self._namespace()
        if ns is None:
            self._count(store_skipped=n)
            return [False] * n
        if not self._writer or not n:
            return [True] * n  # another rank of its replica group writes the shard
        started = time.perf_counter()
        try:
            _, status = ns.store_paged(self._shard, self._layout, _keys(keys),
                                       self._pages(host_indices, n))
        except Error as e:
            log.warning("kvtier: store skipped: %s", e)
            self._count(store_skipped=n)
            return [False] * n
        ok = [s in (0, -errno.EEXIST) for s in status]
        stored = sum(1 for s in status if s == 0)
        self._count(stored_pages=stored, store_skipped=n - sum(ok))
        self._measured(False, stored, started, ns)
        return ok

    # ------------------------------------------------------ the generic calls

    def exists(self, key: str) -> bool:
        return self.batch_exists([key]) == 1

    def _page_layout(self, page: torch.Tensor):
        """A Layout of one flat page as SGLang's generic calls hand it over
        (get_data_page / get_dummy_flat_data_page): a host pool of one
        page in the pool's own layout."""
        dtype, shape, args = self._one_page
        geo, views = layouts.sglang_host(layouts.sglang_page(page, dtype, shape), *args)
        return layouts.layout(geo, views, self._page)

    def get(self, key: str, target_location: Optional[Any] = None,
            target_sizes: Optional[Any] = None):
        return self.batch_get([key], [target_location])[0]

    def batch_get(self, keys: List[str], target_locations: Optional[Any] = None,
                  target_sizes: Optional[Any] = None):
        """Pages into SGLang's flat page tensors, for its generic interface
        (which copies each page again into the pool; interface_v1 does
        not): the tensors loaded, None from the first page that was not."""
        out = [None] * len(keys)
        ns = self._namespace()
        if ns is None or target_locations is None:
            return out
        for i, (key, t) in enumerate(zip(keys, target_locations)):
            try:
                _, status = ns.load_paged(self._shard, self._page_layout(t), page_key(key), [0])
            except (Error, RuntimeError, ValueError) as e:
                log.warning("kvtier: load failed: %s", e)
                status = [-errno.EIO]
            if status[0] != 0:
                self._count(load_failures=len(keys) - i)
                break
            self._count(loaded_pages=1)
            out[i] = t
        return out

    def set(self, key: str, value: Optional[Any] = None, target_location: Optional[Any] = None,
            target_sizes: Optional[Any] = None) -> bool:
        return self.batch_set([key], [value])

    def batch_set(self, keys: List[str], values: Optional[Any] = None,
                  target_locations: Optional[Any] = None,
                  target_sizes: Optional[Any] = None) -> bool:
        """SGLang's generic interface: pages from flat page tensors."""
        ns = self._namespace()
        if ns is None or values is None:
            self._count(store_skipped=len(keys))
            return False
        if not self._writer:
            return True
        ok = True
        for key, v in zip(keys, values):
            try:
                _, status = ns.store_paged(self._shard, self._page_layout(v.contiguous()),
                                           page_key(key), [0])
            except (Error, RuntimeError, ValueError) as e:
                log.warning("kvtier: store skipped: %s", e)
                status = [-errno.EIO]
            self._count(stored_pages=int(status[0] == 0),
                        store_skipped=int(status[0] not in (0, -errno.EEXIST)))
            ok = ok and status[0] in (0, -errno.EEXIST)
        return ok

    def clear(self) -> None:
        return  # kvtierd's blocks are shared with other engines: not one engine's to clear

    def get_stats(self):
        """SGLang's storage metrics since the last call (pages and GB/s of
        each load and store), with enable_storage_metrics; else None.
        kvtier's own counts are in ``counts``."""
        if self._metrics is None:
            return None
        with self._lock:
            m, self._metrics = self._metrics, StorageMetrics()
        return m

    def close(self):
        if self._conn is not None:
            self._conn.close()
