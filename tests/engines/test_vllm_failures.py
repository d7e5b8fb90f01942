# SPDX-License-Identifier: Apache-2.0
"""No wrong KV from a failed load, under every scheduling mode and failure
policy of vLLM: its own Scheduler and AsyncScheduler (two batches in
flight, step N+1 scheduled and run before step N's output is processed,
as on GPUs), with kv_load_failure_policy recompute and fail, drive the
kvtier connector's scheduler side, its worker side copies between a real
kvtierd and cache views from vLLM's allocate_kv_cache, and the model is
played (vllm_loop.py): every cell a step writes is a hash of the cells it
reads, so a step that computed over pages a load never filled shows in
every later cell and token.

Each case stores a prompt's blocks with one engine, then a fresh engine
is given a prompt that hits them and one block is deleted from kvtierd
between its lookup and its load (the first, a middle or the last block of
the hit; the hit followed by several chunks of the prompt, or by its last
chunk only, or the whole prompt but its last token; once at the first
load, once at the load of a request resumed after preemption).  Then:
the engine never read a page the load left unfilled; its tokens are the
reference's (recompute) or the request ends in an error (fail); every
block kvtierd holds for the prompt is byte for byte the reference's; and
a third engine restores the prompt with the reference's tokens."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import kvtd  # noqa: E402
import kvtier  # noqa: E402
import vllm_loop as vl  # noqa: E402
from vllm.config import set_current_vllm_config  # noqa: E402
from vllm.distributed.parallel_state import (  # noqa: E402
    init_distributed_environment,
    initialize_model_parallel,
    model_parallel_is_initialized,
)
from vllm.engine.arg_utils import EngineArgs  # noqa: E402
from vllm.v1.request import RequestStatus  # noqa: E402

B = vl.BLOCK
NEW_TOKENS = 4


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return kvtd.make_model(str(tmp_path_factory.mktemp("model")), layers=vl.LAYERS)


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory, model):
    """vLLM's tensor-parallel group of one rank (gloo), as a worker has."""
    if model_parallel_is_initialized():  # by another test module in this process
        return
    cfg = EngineArgs(model=model, block_size=B).create_engine_config()
    with set_current_vllm_config(cfg):
        init_distributed_environment(
            world_size=1, rank=0, local_rank=0, backend="gloo",
            distributed_init_method=f"file://{tmp_path_factory.mktemp('dist')}/init")
        initialize_model_parallel(tensor_model_parallel_size=1)


@pytest.fixture(scope="module")
def daemon():
    with kvtd.Daemon() as d:
        yield d


@pytest.fixture
def engines(model, one_rank, daemon):
    """A way to start engines on the module's daemon, all stopped after."""
    made = []

    def start(**kw):
        e = vl.Engine(model, kw.pop("sock", daemon.socket), **kw)
        made.append(e)
        return e
    yield start
    for e in made:
        e.close()


def reference_tokens(model: vl.Model, ids: list[int], n: int = NEW_TOKENS) -> list[int]:
    tokens = list(ids)
    for _ in range(n):
        tokens.append(model.next_token(tokens))
    return tokens[len(ids):]


def block_bytes(model: vl.Model, ids: list[int], i: int, head_bytes: int) -> bytes:
    """Block i of ids as kvtier holds it: [layer][K/V][token][head][head
    bytes], from the reference cells (each [head][K | V])."""
    cells = model.reference(ids[: (i + 1) * B])
    out = []
    for layer in range(vl.LAYERS):
        block = cells[layer][i * B:(i + 1) * B]
        heads = len(block[0]) // (2 * head_bytes)
        for plane in (0, 1):
            out.append(b"".join(
                c[(h * 2 + plane) * head_bytes:(h * 2 + plane + 1) * head_bytes]
                for c in block for h in range(heads)))
    return b"".join(out)


class Checker:
    """A client of the daemon on the engines' namespace."""

    def __init__(self, engine, sock):
        self.client = kvtier.Client(socket=sock, name="checker")
        self.ns = engine.identity().open(self.client)
        self.head_bytes = engine.cfg.model_config.get_head_size() * 2  # bfloat16
        self.model = engine.model

    def close(self):
        self.ns.close()
        self.client.close()

    def keys(self, ids: list[int]) -> list[bytes]:
        n = len(ids) // B  # every full block (kvtier.vllm.scheduler)
        return kvtier.split_keys(kvtier.hash_chain(ids[: n * B], B))

    def held(self, ids: list[int], model: vl.Model) -> list[int]:
        """The blocks of ids kvtierd holds, each checked byte for byte
        against the reference."""
        out = []
        for i, key in enumerate(self.keys(ids)):
            if self.ns.lookup(key)[0] != 1:
                continue
            buf = bytearray(self.ns.info["shard_bytes"])
            assert self.ns.load(0, key, [buf])[0] == 1
            want = block_bytes(model, ids, i, self.head_bytes)
            assert bytes(buf[: len(want)]) == want, f"block {i} in kvtierd is not the reference's"
            out.append(i)
        return out


@pytest.fixture
def checker(engines, daemon):
    c = Checker(engines(async_sched=False), daemon.socket)
    yield c
    c.close()


def fail_at_load(engine, checker, key: bytes, nth: int = 1):
    """Deletes key from kvtierd after the scheduler has handed the
    workers the engine's nth load (looked up in that schedule, or the one
    before), before the step that carries it runs."""
    seen = {"loads": 0, "deleted": False}

    def hook(out):
        meta = out.kv_connector_metadata
        # (the connector before this change also had async_loads)
        n = len(meta.loads) + len(getattr(meta, "async_loads", ()))
        if n:
            seen["loads"] += n
            if seen["loads"] >= nth and not seen["deleted"]:
                assert checker.ns.delete(key) == 1
                seen["deleted"] = True
    engine.on_schedule = hook
    return seen


def store(start, async_sched: bool, ids: list[int], model: vl.Model, **kw) -> None:
    """An engine computes ids and stores their blocks, with the
    reference's tokens."""
    a = start(async_sched=async_sched, **kw)
    r = a.add("a", ids)
    a.run()
    assert list(r.output_token_ids) == reference_tokens(model, ids)
    assert a.wrong == []
    a.worker.drain()
    assert a.worker.stats["stored_blocks"] == len(ids) // B


# name: (prompt tokens, blocks stored before, the block deleted)
CASES = {
    "first": (12 * B + 5, 6, 0),  # the hit, then three chunks of the prompt
    "middle": (12 * B + 5, 6, 3),
    "last": (12 * B + 5, 6, 5),
    "last-chunk": (11 * B + 5, 11, 5),  # the hit, then the prompt's last chunk
    "whole-prompt": (12 * B + 1, 12, 6),  # the hit is the prompt but its last token
    # the prompt ends on a block boundary and the hit is all of it
    "aligned-first": (12 * B, 12, 0),
    "aligned-last": (12 * B, 12, 11),
}


def failed_load(engines, checker, case: str, policy: str, async_sched: bool, seed: int,
                **kw) -> None:
    """One case of CASES (the module docstring), kw: more of the engines'
    arguments."""
    n, stored, bad = CASES[case]
    ids = kvtd.prompt_ids(n, seed)
    model = checker.model
    store(engines, async_sched, ids[: stored * B + 1], model, **kw)
    keys = checker.keys(ids)
    assert checker.held(ids, model) == list(range(stored))

    b = engines(async_sched=async_sched, policy=policy, **kw)
    seen = fail_at_load(b, checker, keys[bad])
    rb = b.add("b", ids)
    b.run()
    assert seen["deleted"]
    assert b.wrong == [], "a step computed over pages the failed load never filled"
    b.worker.drain()
    assert b.worker.stats["load_failures"] == stored - bad
    want = reference_tokens(model, ids)
    held = checker.held(ids, model)
    if policy == "recompute":
        assert rb.status == RequestStatus.FINISHED_LENGTH_CAPPED, rb.status
        assert list(rb.output_token_ids) == want
        assert held == list(range(len(keys)))  # the recomputed blocks stored
    else:
        assert rb.status == RequestStatus.FINISHED_ERROR, rb.status
        assert list(rb.output_token_ids) == []
        assert held == [i for i in range(stored) if i != bad]

    c = engines(async_sched=async_sched, **kw)
    rc = c.add("c", ids)
    c.run()
    assert c.wrong == []
    assert list(rc.output_token_ids) == want
    c.worker.drain()
    assert c.worker.stats["loaded_blocks"] == (len(keys) if policy == "recompute" else bad)


@pytest.mark.parametrize("async_sched", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("policy", ["recompute", "fail"])
@pytest.mark.parametrize("case", list(CASES))
def test_failed_load(engines, checker, case, policy, async_sched):
    seed = 100 + list(CASES).index(case) * 4 + (policy == "fail") * 2 + async_sched
    failed_load(engines, checker, case, policy, async_sched, seed)


def failed_load_after_preemption(engines, checker, async_sched: bool, seed: int, **kw):
    n = 12 * B + 5
    ids = kvtd.prompt_ids(n, seed)
    model = checker.model
    store(engines, async_sched, ids, model, **kw)
    keys = checker.keys(ids)
    # A pool that holds both requests at first, not once the other grows.
    b = engines(async_sched=async_sched, pages=17, **kw)
    seen = fail_at_load(b, checker, keys[4], nth=2)
    other = kvtd.prompt_ids(3 * B - 1, seed + 100)
    r0 = b.add("grows", other, max_tokens=60)
    r1 = b.add("resumed", ids, max_tokens=24)
    b.run()
    assert r1.num_preemptions >= 1 and seen["deleted"], (r1.num_preemptions, seen)
    b.worker.drain()
    assert b.worker.stats["load_failures"] == 8  # blocks 4..11 of the resumed load
    assert b.wrong == []
    assert list(r1.output_token_ids) == reference_tokens(model, ids, 24)
    assert list(r0.output_token_ids) == reference_tokens(model, other, 60)
    assert checker.held(ids, model) == list(range(len(keys)))


@pytest.mark.parametrize("async_sched", [False, True], ids=["sync", "async"])
def test_failed_load_after_preemption(engines, checker, async_sched):
    """A request that loaded its prefix is preempted by another that grows,
    and its load when it is resumed fails: it is computed from the failed
    block with the reference's tokens, and what is stored is the
    reference's."""
    failed_load_after_preemption(engines, checker, async_sched, 90 + async_sched)


@pytest.mark.parametrize("async_sched", [False, True], ids=["sync", "async"])
def test_preemption_while_stores_hold_pages(engines, checker, async_sched):
    """Stores under way (the mover held) pin the pages of a running
    request: releasing them would give vLLM no page back, so vLLM preempts
    that request for one that grows rather than wait for the stores
    (has_pending_block_frees); once they are done, both requests finish
    with the reference's tokens and kvtierd holds the reference's blocks.
    The connector asks vLLM not to drop a preempted request's output in
    flight (requires_kv_delivery)."""
    import threading

    b = engines(async_sched=async_sched, pages=17)
    assert b.sched.requires_kv_delivery is False
    ids = kvtd.prompt_ids(12 * B + 5, 95 + async_sched)
    other = kvtd.prompt_ids(3 * B - 1, 195 + async_sched)
    held = threading.Event()
    b.drain = False
    b.worker.side.mover.submit(held.wait)
    try:
        r0 = b.add("grows", other, max_tokens=60)
        r1 = b.add("pinned", ids, max_tokens=24)
        for _ in range(80):
            if r1.num_preemptions:
                break
            b.step()
        assert r1.num_preemptions, "vLLM waited for stores that free no page"
        assert b.conn.side._pins  # the stores still wait
    finally:
        held.set()
    b.drain = True
    b.run()
    assert b.wrong == []
    assert list(r1.output_token_ids) == reference_tokens(checker.model, ids, 24)
    assert list(r0.output_token_ids) == reference_tokens(checker.model, other, 60)
    assert checker.held(ids, checker.model) == list(range(12))


def round_trip(engines, checker, async_sched: bool, seed: int, **kw):
    ids = kvtd.prompt_ids(12 * B + 5, seed)
    model = checker.model
    plain = engines(sock=None, async_sched=async_sched, **kw)
    r = plain.add("plain", ids)
    plain.run()
    assert list(r.output_token_ids) == reference_tokens(model, ids)
    store(engines, async_sched, ids, model, **kw)
    assert checker.held(ids, model) == list(range(12))
    c = engines(async_sched=async_sched, **kw)
    rc = c.add("c", ids)
    c.run()
    assert c.wrong == [] and list(rc.output_token_ids) == reference_tokens(model, ids)
    c.worker.drain()
    assert c.worker.stats["loaded_blocks"] == 12


@pytest.mark.parametrize("async_sched", [False, True], ids=["sync", "async"])
def test_load_that_raises(engines, checker, async_sched):
    """A load whose call to kvtierd fails whole (the library raises: the
    daemon gone mid-call) is reported failed, every block of it: vLLM
    computes the request and no step reads the pages it never filled."""
    import errno

    import kvtier

    ids = kvtd.prompt_ids(12 * B + 5, 60 + async_sched)
    model = checker.model
    store(engines, async_sched, ids, model)
    b = engines(async_sched=async_sched)
    side = b.worker.side  # the KvtierWorker
    copy = side._copy

    def failing(load, *a, **k):
        if load:
            raise kvtier.Error(errno.ECONNRESET, "load_paged")
        return copy(load, *a, **k)
    side._copy = failing
    rb = b.add("b", ids)
    b.run()
    assert b.wrong == [], "a step computed over pages the failed load never filled"
    assert list(rb.output_token_ids) == reference_tokens(model, ids)
    b.worker.drain()
    assert b.worker.stats["load_failures"] == len(ids) // B
    assert b.worker.stats["loaded_blocks"] == 0


@pytest.mark.parametrize("async_sched", [False, True], ids=["sync", "async"])
def test_round_trip_and_reference(engines, checker, async_sched):
    """Without a failure every block round-trips byte for byte, and an
    engine without kvtier gives the reference's tokens (the played model
    is what the checks assume)."""
    round_trip(engines, checker, async_sched, 80 + async_sched)


def test_store_from_before_the_failure_was_heard(engines, checker):
    """Defence in depth, on the worker alone: after a request's load failed,
    a store built before vLLM's scheduler heard of the failure (its
    failures count below the worker's) is not stored and its blocks are
    deleted from kvtierd, whoever stored them; one built after is stored;
    the record goes when vLLM says the request finished."""
    from kvtier.vllm.metadata import KvtierConnectorMetadata, Transfer

    ids = kvtd.prompt_ids(6 * B + 1, 70)
    store(engines, False, ids, checker.model)
    keys = checker.keys(ids)
    w = engines(async_sched=False).worker

    def step(meta, finished=()):
        w.bind_connector_metadata(meta)
        w.start_load_kv(None)
        w.wait_for_save()
        w.drain()
        results = w.get_transfer_results(set(finished))
        errors = w.get_block_ids_with_load_errors()
        w.clear_connector_metadata()
        return results.finished_recving, errors

    assert checker.ns.delete(keys[2]) == 1
    load = Transfer("x", b"".join(keys[:4]), ([1, 2, 3, 4],))
    assert step(KvtierConnectorMetadata(loads=[load])) == ({"x"}, {3, 4})
    before = dict(w.stats)
    early = Transfer("x", b"".join(keys[2:4]), ([3, 4],), failures=0)
    step(KvtierConnectorMetadata(stores=[early]))
    assert w.stats["store_skipped"] - before["store_skipped"] == 2
    assert w.stats["stored_blocks"] == before["stored_blocks"]
    assert [checker.ns.lookup(k)[0] for k in keys] == [1, 1, 0, 0, 1, 1]
    late = Transfer("x", b"".join(keys[2:4]), ([3, 4],), failures=1)
    step(KvtierConnectorMetadata(stores=[late]), finished={"x"})
    assert w.stats["stored_blocks"] - before["stored_blocks"] == 2
    assert [checker.ns.lookup(k)[0] for k in keys] == [1] * 6
    assert not w.side._failures  # forgotten with the request


def aligned_prompt(engines, checker, async_sched: bool, seed: int, **kw):
    """A prompt of whole blocks: every block of it is stored, and a fresh
    engine loads them all and computes its last token only (in the loaded
    last block), with the reference's tokens."""
    ids = kvtd.prompt_ids(12 * B, seed)
    model = checker.model
    plain = engines(sock=None, async_sched=async_sched, **kw)
    r = plain.add("plain", ids)
    plain.run()
    want = reference_tokens(model, ids)
    assert list(r.output_token_ids) == want
    store(engines, async_sched, ids, model, **kw)
    assert checker.held(ids, model) == list(range(12))  # the last block too
    c = engines(async_sched=async_sched, **kw)
    prefill = []  # (computed before, tokens scheduled) of c's steps before it samples

    def hook(out):
        starts = c._starts(out)
        if "c" in out.num_scheduled_tokens and not c.requests["c"].output_token_ids:
            prefill.append((starts["c"], out.num_scheduled_tokens["c"]))
    c.on_schedule = hook
    rc = c.add("c", ids)
    c.run()
    assert c.wrong == [] and list(rc.output_token_ids) == want
    assert prefill[0] == (12 * B - 1, 1), prefill  # one token computed, none again
    c.worker.drain()
    assert c.worker.stats["loaded_blocks"] == 12
    assert c.conn.side.stats["hit_tokens"] == 12 * B
    assert c.worker.stats["stored_blocks"] == 0  # nothing it loaded stored again


@pytest.mark.parametrize("async_sched", [False, True], ids=["sync", "async"])
def test_aligned_prompt(engines, checker, async_sched):
    """A prompt that ends on a block boundary is restored whole: its last
    block stored and loaded, its last token alone computed again."""
    aligned_prompt(engines, checker, async_sched, 85 + async_sched)
