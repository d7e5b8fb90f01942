# SPDX-License-Identifier: Apache-2.0
"""The connector's scheduler side, in vLLM's scheduler process: looks a
new prompt's blocks up in kvtierd, tells the workers each step which
pages to load and which blocks to store, pins the pages a copy under way
uses in vLLM's block pool until every worker is done with them, and
passes a finished request's lifecycle hints on to kvtierd.

Every load is asynchronous to vLLM (get_num_new_matched_tokens answers
(n, True)): the request waits in WAITING_FOR_REMOTE_KVS until the
workers report the load done, its failed blocks with it, so that vLLM
truncates the request to its loaded blocks before it computes anything
of it.  A synchronous load is reported failed only after its step ran,
and under asynchronous scheduling after the next step was scheduled and
ran too, over the pages the load never filled: vLLM then keeps what that
next step sampled, and, for a prompt loaded whole but its last token,
schedules a token past the prompt (vLLM 0.32, scheduler.py:
_update_requests_with_invalid_blocks leaves num_output_placeholders as
they were).  Asynchronous loads give vLLM no such step.

A prompt's last full block is looked up and stored too, when the prompt
ends on a block boundary: vLLM computes at least one token of a prompt,
and after an asynchronous load that covers the whole prompt it computes
its last token again into the loaded page (both 0.32 and 0.33,
scheduler.py: _update_waiting_for_remote_kv sets num_computed_tokens to
the prompt's length less one), so that the loaded block is not computed
again whole."""

import logging
from collections import Counter
from dataclasses import dataclass

from .. import KEY_BYTES, Error, hash_chain
from ..reconnect import Reconnecting
from . import events
from .config import ENDS, SHARED_PRIORITY, Config
from .metadata import KvtierConnectorMetadata, KvtierWorkerMetadata, Transfer

log = logging.getLogger("kvtier.vllm")


@dataclass
class _Request:
    keys: bytes  # every full prompt block
    block_ids: tuple[list[int], ...]  # per KV cache group
    prompt: int = 0  # its prompt tokens
    local: int = 0  # tokens vLLM's own prefix cache had
    done: int = 0  # leading blocks loaded or stored already
    failures: int = 0  # its failed loads the workers reported
    request: object = None  # vLLM's Request (its block hashes, for KV events)


class KvtierScheduler:
    def __init__(self, config: Config, kv_transfer_config):
        self._config = config
        self._block = config.block
        if getattr(kv_transfer_config, "kv_load_failure_policy", "") == "fail":
            log.warning("kvtier: kv_load_failure_policy is 'fail' (vLLM's default): a request "
                        "whose blocks kvtier cannot load (evicted, kvtierd restarting) ends "
                        "with an error; set \"kv_load_failure_policy\": \"recompute\" in "
                        "--kv-transfer-config to compute them instead")
        self._conn = Reconnecting(config.identity, socket=config.socket,
                                  name="vllm-scheduler", log=log)
        self._requests: dict[str, _Request] = {}
        # req -> (first block, end block, vLLM's pages) of a load to hand
        # the workers
        self._pending_loads: dict[str, tuple[int, int, tuple[list[int], ...]]] = {}
        self._load_failed: set[str] = set()  # requests vLLM computes after a failed load
        self._pool = None  # vLLM's block pool (bind_gpu_block_pool)
        self._null = 0  # its null block's id
        self._pins: dict[int, list] = {}  # pin -> the pool's blocks it holds
        self._pinned: Counter = Counter()  # block id -> the pins that hold it
        self._pin_reports: Counter = Counter()  # pin -> workers that are done with it
        self._next_pin = 0
        # With KV events: pin -> (a load?, its blocks as vLLM names them),
        # what the workers reported of them so far, and the events for
        # take_events.
        self._named: dict[int, tuple[bool, events.Blocks]] = {}
        self._unstored: dict[int, set[int]] = {}
        self._gone: dict[int, set[int]] = {}
        self._events: list = []
        self.stats = {"lookups": 0, "hit_tokens": 0, "retained_blocks": 0, "ended_blocks": 0}

    def shutdown(self):
        self._conn.close()

    def bind_gpu_block_pool(self, gpu_block_pool) -> None:
        self._pool = gpu_block_pool
        self._null = gpu_block_pool.null_block.block_id

    def get_num_new_matched_tokens(self, request, num_computed_tokens: int):
        tokens = list(request.prompt_token_ids or [])
        # Every full block: a hit of the whole prompt is loaded whole and
        # vLLM computes its last token again (the module docstring).
        n = len(tokens) // self._block
        if n <= 0:
            return 0, False
        salt = getattr(request, "cache_salt", None)
        keys = hash_chain(tokens[: n * self._block], self._block,
                          extra=salt.encode() if salt else None)
        # A request vLLM looks up again (computing it whole after a failed
        # load, or resumed after preemption) keeps its failed loads.
        old = self._requests.get(request.request_id)
        self._requests[request.request_id] = _Request(keys=keys, block_ids=(),
                                                      prompt=len(tokens),
                                                      local=num_computed_tokens,
                                                      failures=old.failures if old else 0,
                                                      request=request)
        ns = self._conn.namespace()
        if ns is None or request.request_id in self._load_failed:
            return 0, False
        try:
            hits, _ = ns.lookup(keys)
        except Error as e:
            log.warning("kvtier: lookup failed: %s", e)
            return 0, False
        self.stats["lookups"] += 1
        self.stats["hit_tokens"] += hits * self._block
        r = self._requests[request.request_id]
        r.done = hits  # in kvtierd already
        # The request waits for its load (staging from NVMe or a remote
        # tier included), the batch does not.
        n = max(0, hits * self._block - num_computed_tokens)
        return n, bool(n)

    def _pages(self, block_ids) -> tuple[list[int], ...]:
        """vLLM's block ids of each group, its null block as -1."""
        return tuple([-1 if b == self._null else b for b in ids] for ids in block_ids)

    def update_state_after_alloc(self, request, blocks, num_external_tokens: int):
        r = self._requests.get(request.request_id)
        if num_external_tokens <= 0 or r is None:
            return
        first = r.local // self._block
        self._pending_loads[request.request_id] = (
            first, first + num_external_tokens // self._block, self._pages(blocks.get_block_ids()))

    def _track(self, req_id: str, block_ids, new: bool):
        r = self._requests.get(req_id)
        if r is None:
            return None
        if block_ids:
            pages = self._pages(block_ids)
            r.block_ids = pages if new or not r.block_ids else tuple(
                old + add for old, add in zip(r.block_ids, pages))
        return r

    def _transfer(self, rid: str, r: _Request, a: int, b: int, pages=None,
                  load: bool = False) -> Transfer:
        """Blocks a..b of request rid, its pages pinned in vLLM's pool until
        every worker is done with them (and, with KV events, named as
        vLLM's events name them)."""
        ids = tuple(g[a:b] for g in (pages or r.block_ids))
        t = Transfer(rid, r.keys[a * KEY_BYTES: b * KEY_BYTES], ids, failures=r.failures)
        named = None
        if self._config.events and r.request is not None:
            named = events.blocks_of(r.request, a, b, self._block, self._config.hash_block,
                                     len(ids))
        if self._pool is None and named is None:
            return t
        self._next_pin += 1
        t.pin = self._next_pin
        if named is not None:
            self._named[t.pin] = (load, named)
        if self._pool is not None:
            held = [self._pool.blocks[p] for g in ids for p in g if p >= 0]
            self._pool.touch(held)
            self._pins[t.pin] = held
            self._pinned.update(b.block_id for b in held)
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

    def build_connector_meta(self, scheduler_output) -> KvtierConnectorMetadata:
        meta = KvtierConnectorMetadata(
            idle=not getattr(scheduler_output, "total_num_scheduled_tokens", 1))
        steps = []
        for nr in scheduler_output.scheduled_new_reqs:
            steps.append((nr.req_id, nr.block_ids, True, nr.num_computed_tokens))
        cached = scheduler_output.scheduled_cached_reqs
        for i, rid in enumerate(cached.req_ids):
            steps.append((rid, cached.new_block_ids[i], rid in cached.resumed_req_ids,
                          cached.num_computed_tokens[i]))
        for rid, (a, b, pages) in self._pending_loads.items():
            # Waits in WAITING_FOR_REMOTE_KVS: scheduled once loaded.
            r = self._requests[rid]
            r.block_ids = pages
            meta.loads.append(self._transfer(rid, r, a, b, load=True))
            r.done = max(r.done, b)
        self._pending_loads.clear()
        for rid, block_ids, new, computed in steps:
            r = self._track(rid, block_ids, new)
            if r is None or not r.block_ids:
                continue
            n_keys = len(r.keys) // KEY_BYTES
            # vLLM computes from `computed` on.  After a failed load it has
            # moved back to the first failed block: what it recomputes is
            # not in kvtierd, and is stored once computed.  A prompt loaded
            # whole is computed from its last token, in a loaded block.
            r.done = min(r.done, (computed + (computed + 1 == r.prompt)) // self._block)
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
        # again the same way, for ever).  The stores built from now on say
        # that the scheduler knows of the failure.
        failed = set(getattr(connector_output, "failed_recving", None) or ())
        bad = getattr(connector_output, "invalid_block_ids", None)
        if bad:
            failed.update(rid for rid, r in self._requests.items()
                          if r.block_ids and not bad.isdisjoint(r.block_ids[0]))
        self._load_failed.update(failed)
        for rid in failed:
            r = self._requests.get(rid)
            if r is not None:
                r.failures += 1
        meta = getattr(connector_output, "kv_connector_worker_meta", None)
        if not isinstance(meta, KvtierWorkerMetadata):
            return
        for mine, theirs in ((self._unstored, meta.unstored), (self._gone, meta.gone)):
            for pin, blocks in theirs.items():
                mine.setdefault(pin, set()).update(blocks)
        for pin, n in meta.done.items():
            self._pin_reports[pin] += n
            if self._pin_reports[pin] >= self._config.workers:
                del self._pin_reports[pin]
                self._announce(pin)
                held = self._pins.pop(pin, ())
                if held:
                    self._pinned.subtract(b.block_id for b in held)
                    self._pool.free_blocks(held)
        self._pinned += Counter()  # drops the blocks no pin holds

    def _announce(self, pin: int) -> None:
        """Every worker is done with transfer pin: KV events for the blocks
        every worker stored (a store), and for those any found gone or
        deleted."""
        unstored, gone = self._unstored.pop(pin, set()), self._gone.pop(pin, set())
        named = self._named.pop(pin, None)
        if named is None:
            return
        load, blocks = named
        if not load:
            self._events += events.stored(
                blocks, set(range(len(blocks.hashes))) - unstored - gone)
        self._events += events.removed(blocks, gone)

    def take_events(self):
        """The KV events since vLLM last asked (kvtier.vllm.events)."""
        out, self._events = self._events, []
        return out

    def has_pending_block_frees(self) -> bool:
        """Whether a copy under way holds pages that only it holds: pages
        vLLM will have back when the copy is done.  Pages of a running
        request under a store would not come free then: vLLM preempts
        rather than wait for them."""
        if self._pool is None:
            return False
        return any(self._pool.blocks[b].ref_cnt <= n for b, n in self._pinned.items())

    def has_pending_push_work(self) -> bool:
        # The engine steps on while copies hold pages, to hear that they
        # are done and give the pages back (and publish their KV events).
        return bool(self._pins or self._named)

    def _hint(self, request, keys: bytes):
        """The request's lifecycle hints (kvtier.vllm's docstring) for its
        stored blocks; a hint that cannot be given is only logged."""
        params = (getattr(request, "kv_transfer_params", None) or {}).get("kvtier") or {}
        try:
            shared = int(params.get("shared_tokens", 0)) // self._block
            priority = int(params.get("shared_priority", SHARED_PRIORITY))
            end = params.get("end", self._config.end)
            if end not in ENDS or shared < 0:
                raise ValueError(f"end is one of {', '.join(ENDS)}, shared_tokens >= 0")
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
