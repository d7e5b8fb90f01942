# SPDX-License-Identifier: Apache-2.0
"""A hybrid model through kvtier.vllm: full-attention layers beside
sliding-window ones, in two KV cache groups of vLLM's hybrid allocator that
share one block pool and one allocation (each tensor backs a layer of each
group), driven by vLLM's own Scheduler, KV cache manager and block pool,
with the connector's scheduler inside it and its worker on vLLM's CPU
cache views (allocate_kv_cache, FlashAttention's layout).

vLLM runs its hybrid allocator on GPUs only, so the forward pass is played
here, as a model would touch the cache: each step first reads, in every
layer, each earlier token the layer attends to (all of them for full
attention; the window for sliding-window layers), failing on any byte that
is not what that token's prefix computes, then writes the tokens it
computes.  A block kvtier restored into the wrong group's pages, a page
given to another request while a copy used it, or a store of a page that
held something else shows as a wrong byte in a later read."""

import os
import threading
import time
from types import SimpleNamespace

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import pytest  # noqa: E402
import torch  # noqa: E402

import kvtd  # noqa: E402
from vllm.config import set_current_vllm_config  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole  # noqa: E402
from vllm.distributed.parallel_state import (  # noqa: E402
    init_distributed_environment,
    initialize_model_parallel,
    model_parallel_is_initialized,
)
from vllm.engine.arg_utils import EngineArgs  # noqa: E402
from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend  # noqa: E402
from vllm.utils.hashing import get_hash_fn_by_name  # noqa: E402
from vllm.v1.core.kv_cache_utils import (  # noqa: E402
    get_kv_cache_config_from_groups,
    get_kv_cache_groups,
    get_request_block_hasher,
    init_none_hash,
)
from vllm.v1.core.sched.scheduler import Scheduler  # noqa: E402
from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec  # noqa: E402
from vllm.v1.kv_cache_layout import KVCacheLayout  # noqa: E402
from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput  # noqa: E402
from vllm.v1.request import Request, RequestStatus  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402
from vllm.v1.worker.utils import allocate_kv_cache  # noqa: E402

from kvtier.vllm import KvtierConnector  # noqa: E402

BLOCK = 16
WINDOW = 2 * BLOCK  # the sliding-window layers see their last 32 tokens
LAYERS = 4  # even layers full attention, odd ones a sliding window
PAGES = 40  # a pool small enough that freed pages come back soon
PROMPT = 9 * BLOCK + 5
NEW_TOKENS = 4
_MASK = (1 << 61) - 1
LAYOUT = KVCacheLayout.LBNHC  # vLLM's default for FlashAttention


def prefix_hashes(tokens: list[int]) -> list[int]:
    """A number for each position that its whole prefix decides."""
    out, h = [], 0
    for t in tokens:
        h = (h * 1000003 + t + 1) & _MASK
        out.append(h)
    return out


class Engine:
    """vLLM's scheduler and the kvtier connector's two halves in one
    process; the forward pass played (module docstring)."""

    def __init__(self, model_dir: str, sock: str):
        ktc = {"kv_connector": "KvtierConnector", "kv_connector_module_path": "kvtier.vllm",
               "kv_role": "kv_both", "kv_load_failure_policy": "recompute",
               "kv_connector_extra_config": {"socket": sock}}
        self.cfg = EngineArgs(model=model_dir, block_size=BLOCK, dtype="bfloat16",
                              max_model_len=1024, max_num_batched_tokens=1024,
                              enable_prefix_caching=True,
                              kv_transfer_config=ktc).create_engine_config()
        self.cfg.scheduler_config.disable_hybrid_kv_cache_manager = False
        self.cfg.cache_config.kv_cache_layout = LAYOUT.name  # as vLLM's engine core resolves it
        mc = self.cfg.model_config
        kw = dict(block_size=BLOCK, num_kv_heads=mc.get_num_kv_heads(self.cfg.parallel_config),
                  head_size=mc.get_head_size(), dtype=torch.bfloat16)
        self.names = [f"model.layers.{i}.self_attn.attn" for i in range(LAYERS)]
        specs = {n: FullAttentionSpec(**kw) if i % 2 == 0
                 else SlidingWindowSpec(**kw, sliding_window=WINDOW)
                 for i, n in enumerate(self.names)}
        with set_current_vllm_config(self.cfg):
            groups = get_kv_cache_groups(self.cfg, specs)
            page = specs[self.names[0]].page_size_bytes
            self.kv_cfg = get_kv_cache_config_from_groups(self.cfg, groups, page * PAGES * 2)
            self.cfg.cache_config.num_gpu_blocks = self.kv_cfg.num_blocks
            self.caches = allocate_kv_cache(self.kv_cfg, torch.device("cpu"), LAYOUT)
            for n in self.names:
                self.cfg.compilation_config.static_forward_context[n] = SimpleNamespace(
                    attn_backend=FlashAttentionBackend)
            self.sched = Scheduler(self.cfg, self.kv_cfg, StructuredOutputManager(self.cfg),
                                   block_size=BLOCK)
            self.worker = KvtierConnector(self.cfg, KVConnectorRole.WORKER, self.kv_cfg)
            self.worker.register_kv_caches(self.caches)
        # Copies handed to the worker's mover thread, counted (run).
        self.submitted = 0
        mover = self.worker.side.mover
        submit = mover.submit

        def counted(job):
            self.submitted += 1
            submit(job)
        mover.submit = counted
        hash_fn = get_hash_fn_by_name(self.cfg.cache_config.prefix_caching_hash_algo)
        init_none_hash(hash_fn)
        self.hasher = get_request_block_hasher(BLOCK, hash_fn)
        self.conn = self.sched.connector
        self.pool = self.sched.kv_cache_manager.block_pool
        # Which group each layer's pages are named in.
        self.group_of = {n: g for g, grp in enumerate(self.kv_cfg.kv_cache_groups)
                         for n in grp.layer_names}
        self.window = {n: WINDOW if isinstance(grp.kv_cache_spec, SlidingWindowSpec) else 0
                       for grp in self.kv_cfg.kv_cache_groups for n in grp.layer_names}
        self.pages = {n: self.caches[n].view(torch.uint8) for n in self.names}  # [pages, heads, tokens, bytes]
        cell = self.pages[self.names[0]][0, :, 0, :]
        self.ramp = torch.arange(cell.numel(), dtype=torch.int64).reshape(cell.shape) * 131
        self.requests: dict[str, Request] = {}
        self.wrong: list[str] = []  # reads that found other bytes

    def close(self):
        self.worker.shutdown()
        self.conn.shutdown()

    # The played forward pass.

    def _cell(self, layer: int, h: int) -> torch.Tensor:
        return ((self.ramp + (h % 65521) + layer * 7919) % 256).to(torch.uint8)

    def _forward(self, rid: str, start: int, n: int) -> list[int]:
        req = self.requests[rid]
        tokens = req.all_token_ids[: start + n]
        hashes = prefix_hashes(tokens)
        blocks = self.sched.kv_cache_manager.get_block_ids(rid)
        for layer, name in enumerate(self.names):
            ids, view, window = blocks[self.group_of[name]], self.pages[name], self.window[name]
            first = max(0, start - window + 1) if window else 0
            for p in range(first, start):  # what the step's first token attends to
                page = ids[p // BLOCK]
                got = view[page, :, p % BLOCK, :]
                if not torch.equal(got, self._cell(layer, hashes[p])):
                    self.wrong.append(f"{rid} layer {layer} token {p} (page {page})")
            for p in range(start, start + n):
                view[ids[p // BLOCK], :, p % BLOCK, :] = self._cell(layer, hashes[p])
        if start + n < len(req.all_token_ids):
            return []  # a chunk of the prompt
        return [4 + hashes[-1] % (kvtd.VOCAB - 4)]

    def step(self, out=None) -> bool:
        """One engine step (out: what vLLM's scheduler gave for it, or
        None to ask it); whether it scheduled any token."""
        out = out or self.sched.schedule()
        w = self.worker
        w.bind_connector_metadata(out.kv_connector_metadata)
        w.start_load_kv(None)
        sampled = {}
        for rid, n in out.num_scheduled_tokens.items():
            start = self.requests[rid].num_computed_tokens - n
            sampled[rid] = self._forward(rid, start, n)
        w.wait_for_save()
        results = w.get_transfer_results(out.finished_req_ids)
        kv = KVConnectorOutput(finished_recving=results.finished_recving,
                               failed_recving=results.failed_recving,
                               invalid_block_ids=w.get_block_ids_with_load_errors(),
                               kv_connector_worker_meta=w.build_connector_worker_meta())
        w.clear_connector_metadata()
        ids = list(sampled)
        self.sched.update_from_output(out, ModelRunnerOutput(
            req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
            sampled_token_ids=[sampled[r] for r in ids], kv_connector_output=kv))
        if not ids:
            time.sleep(0.001)  # idle: the mover has the CPU
        return bool(ids)

    def add(self, rid: str, seed: int, n: int = PROMPT) -> Request:
        req = Request(rid, kvtd.prompt_ids(n, seed),
                      SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0,
                                     ignore_eos=True), None,
                      block_hasher=self.hasher)
        self.requests[rid] = req
        self.sched.add_request(req)
        return req

    def run(self, until=None, limit: int = 200) -> None:
        """Steps until every request is done and nothing is pinned, or
        until until() holds.  Steps that schedule nothing (vLLM's engine
        goes on stepping while the connector has copies under way) do not
        count towards limit."""
        busy = stuck = 0
        while not (until() if until else not self.sched.has_requests()):
            before = (self.submitted, self.worker.side.mover.pending)
            if self.step():
                busy, stuck = busy + 1, 0
            else:
                # Nothing scheduled, nothing handed to the mover and nothing
                # left to it, three times running: no progress is possible.
                after = (self.submitted, self.worker.side.mover.pending)
                stuck = stuck + 1 if before == after == (before[0], 0) else 0
            if busy > limit or stuck > 2:
                raise AssertionError("the engine did not finish its requests")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return kvtd.make_model(str(tmp_path_factory.mktemp("model4")), layers=LAYERS)


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory, model):
    """vLLM's tensor-parallel group of one rank (gloo), as a worker has."""
    if model_parallel_is_initialized():  # by another test module in this process
        return
    cfg = EngineArgs(model=model, block_size=BLOCK).create_engine_config()
    with set_current_vllm_config(cfg):
        init_distributed_environment(
            world_size=1, rank=0, local_rank=0, backend="gloo",
            distributed_init_method=f"file://{tmp_path_factory.mktemp('dist')}/init")
        initialize_model_parallel(tensor_model_parallel_size=1)


@pytest.fixture
def engines(model, one_rank):
    """A daemon and a way to start engines on it, all stopped after."""
    made = []
    with kvtd.Daemon() as d:
        def start():
            e = Engine(model, d.socket)
            made.append(e)
            return e
        yield d, start
        for e in made:
            e.close()


def finished(*reqs) -> bool:
    return all(r.is_finished() for r in reqs)


def test_hybrid_blocks_restored_into_each_groups_pages(engines):
    """Blocks a hybrid engine stored are restored by a fresh one into the
    pages of both groups (the sliding window's early pages left to vLLM's
    null block), and every read finds what that prefix computes."""
    _, start = engines
    a = start()
    assert [len(g.layer_names) for g in a.kv_cfg.kv_cache_groups] == [2, 2]
    free = a.pool.get_num_free_blocks()
    ra = a.add("a", seed=5)
    a.run()
    assert a.wrong == []
    assert a.worker.stats["stored_blocks"] == PROMPT // BLOCK
    assert a.pool.get_num_free_blocks() == free  # no page left pinned

    b = start()
    rb = b.add("b", seed=5)
    b.run()
    assert b.wrong == []
    # Every full prompt block but the one holding the last prompt token's.
    assert b.worker.stats["loaded_blocks"] == (PROMPT - 1) // BLOCK
    assert b.worker.stats["async_loads"] == 1  # a hybrid request's load waits
    assert list(rb.output_token_ids) == list(ra.output_token_ids)
    assert b.pool.get_num_free_blocks() == free


def test_pages_under_a_copy_are_not_given_out(engines):
    """While the worker's copies wait, the pages they read stay out of
    vLLM's free queue even though their request has finished: the next
    request is given other pages, and the stored blocks are the first
    request's bytes."""
    _, start = engines
    a = start()
    free = a.pool.get_num_free_blocks()
    held = threading.Event()
    a.worker.side.mover.submit(held.wait)  # the mover is busy until held is set
    try:
        r1 = a.add("r1", seed=7)
        a.run(until=lambda: finished(r1))
        pinned = {b.block_id for blocks in a.conn.side._pins.values() for b in blocks}
        assert len(pinned) == 2 * (PROMPT // BLOCK)  # both groups' pages of every stored block
        assert a.pool.get_num_free_blocks() == free - len(pinned)
        assert all(a.pool.blocks[p].ref_cnt > 0 for p in pinned)  # not in the free queue
        r2 = a.add("r2", seed=8)

        def r2_done() -> bool:
            if "r2" in a.sched.requests:
                mine = {p for g in a.sched.kv_cache_manager.get_block_ids("r2") for p in g}
                assert not mine & pinned, "a page under a copy was given to another request"
            return finished(r2)
        a.run(until=r2_done)
        assert a.wrong == []
    finally:
        held.set()
    a.run()
    assert a.pool.get_num_free_blocks() == free
    b = start()
    rb = b.add("b", seed=7)
    b.run()
    assert b.wrong == []
    assert b.worker.stats["loaded_blocks"] == (PROMPT - 1) // BLOCK
    assert list(rb.output_token_ids) == list(r1.output_token_ids)


def stored_then_looked_up(start, seed: int):
    """Engine a computes and stores a prompt; a fresh engine b is given it
    and schedules one step, in which its lookup hits and the load is left
    to its worker.  Returns a, its request, b, its request and the step."""
    a = start()
    ra = a.add("a", seed=seed)
    a.run()
    b = start()
    rb = b.add("b", seed=seed)
    out = b.sched.schedule()
    assert b.conn.stats["hit_tokens"] > 0
    return a, ra, b, rb, out


def test_failed_hybrid_load_is_recomputed(engines):
    """A hybrid request whose load fails (kvtierd killed between the
    lookup and the copy) is recomputed whole by vLLM, from its
    failed_recving report, and gives the same tokens."""
    d, start = engines
    _, ra, b, rb, out = stored_then_looked_up(start, seed=9)
    d.kill()
    b.step(out)
    b.run()
    assert b.wrong == []
    assert rb.status == RequestStatus.FINISHED_LENGTH_CAPPED, rb.status
    assert b.worker.stats["load_failures"] == (PROMPT - 1) // BLOCK
    assert list(rb.output_token_ids) == list(ra.output_token_ids)


def test_a_failed_load_is_not_offered_again(engines):
    """After a request's load failed, vLLM computes it and asks the
    connector again for its blocks: none are offered, even where kvtierd
    holds them again by then, so that a load that fails the same way each
    time cannot keep a request waiting for ever."""
    _, start = engines
    a, ra, b, rb, out = stored_then_looked_up(start, seed=11)
    client, ns = b.conn.side._conn.client, b.conn.side._conn.ns
    tenant = [r for r in client.stats() if r["kind"] == "tenant"][0]["id"]
    assert client.admin_evict(tenant, ns.info["ns_id"], drop=True) == PROMPT // BLOCK
    b.step(out)  # the load finds nothing
    a.add("again", seed=11)
    a.run()  # kvtierd holds the blocks again
    b.run()
    assert b.wrong == []
    assert b.conn.stats["lookups"] == 1
    assert b.worker.stats["load_failures"] == (PROMPT - 1) // BLOCK
    assert rb.status == RequestStatus.FINISHED_LENGTH_CAPPED, rb.status
    assert list(rb.output_token_ids) == list(ra.output_token_ids)


def test_refused_at_start(model, one_rank):
    """What kvtier does not store is refused when the connector is made or
    its caches registered, each with a message naming it: a KV cache group
    of Mamba state, a speculative decoding draft model's cache layers
    (more layers than the model has), pipeline parallelism."""
    from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheGroupSpec, MambaSpec

    e = Engine(model, "/nonexistent/kvtierd.sock")
    try:
        mamba = MambaSpec(block_size=BLOCK, shapes=((4, 8),), dtypes=(torch.bfloat16,))
        cfg = KVCacheConfig(num_blocks=PAGES, kv_cache_tensors=[],
                            kv_cache_groups=[KVCacheGroupSpec(e.names[:2], mamba)])
        for role in (KVConnectorRole.SCHEDULER, KVConnectorRole.WORKER):
            with pytest.raises(NotImplementedError, match="KV cache group of MambaSpec"):
                KvtierConnector(e.cfg, role, cfg)
        # One cache layer more than the model's: a draft model's.
        w = KvtierConnector(e.cfg, KVConnectorRole.WORKER, e.kv_cfg)
        more = dict(e.caches, **{"drafter.layers.0.attn": e.caches[e.names[0]]})
        with pytest.raises(NotImplementedError, match="speculative decoding"):
            w.register_kv_caches(more)
        w.shutdown()
        e.cfg.parallel_config.pipeline_parallel_size = 2
        for role in (KVConnectorRole.SCHEDULER, KVConnectorRole.WORKER):
            with pytest.raises(NotImplementedError, match="pipeline parallelism"):
                KvtierConnector(e.cfg, role, e.kv_cfg)
    finally:
        e.close()
