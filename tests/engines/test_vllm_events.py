# SPDX-License-Identifier: Apache-2.0
"""KV events for the blocks kvtierd holds, through vLLM's own path: its
Scheduler (sync) and AsyncScheduler take the connector's events each
step (take_events) and publish them with vLLM's own; the publisher here
encodes each batch as vLLM's ZMQ publisher does and decodes it as a
subscriber (a router) does, into vLLM's KVEventBatch.  The engine loop,
the played model and the real kvtierd are test_vllm_failures.py's
(vllm_loop.py).

Checked: the events are vLLM's BlockStored and BlockRemoved; a
BlockStored names, by vLLM's own hashes of the request's blocks (those
its block pool's events carry), exactly the blocks kvtierd holds, each
with its tokens, parent and the reference's bytes in kvtierd; a load that
finds a block deleted publishes BlockRemoved for that block alone, and
its recomputed blocks are published stored again; a store the worker
deletes (computed before vLLM heard of a failed load) is reported gone."""

import os
import sys

import msgspec
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import kvtd  # noqa: E402
import vllm_loop as vl  # noqa: E402
from test_vllm_failures import (  # noqa: E402,F401
    Checker,
    daemon,
    engines,
    fail_at_load,
    model,
    one_rank,
    reference_tokens,
    store,
)
from vllm.distributed.kv_events import (  # noqa: E402
    BlockRemoved,
    BlockStored,
    EventPublisher,
    KVEventBatch,
)
from vllm.v1.core.kv_cache_utils import maybe_convert_block_hash  # noqa: E402

B = vl.BLOCK


class Subscriber(EventPublisher):
    """vLLM's scheduler's publisher: each batch as its ZMQ publisher
    encodes it, decoded as a router decodes it."""

    def __init__(self):
        super().__init__()
        self.events = []
        self._enc = msgspec.msgpack.Encoder()
        self._dec = msgspec.msgpack.Decoder(type=KVEventBatch)

    def publish(self, events) -> None:
        self.events += self._dec.decode(self._enc.encode(events)).events

    def shutdown(self) -> None:
        return


def with_events(start, **kw):
    e = start(events=True, **kw)
    sub = Subscriber()
    e.sched.kv_event_publisher = sub
    return e, sub


@pytest.fixture
def checker(engines, daemon):
    c = Checker(engines(async_sched=False), daemon.socket)
    yield c
    c.close()


def hashes(request, n: int) -> list:
    """vLLM's names of the request's first n blocks in its events."""
    return [maybe_convert_block_hash(h) for h in request.block_hashes[:n]]


def check_stored(events, request, ids: list[int]) -> list[int]:
    """The blocks the BlockStored events name, in order, each checked
    against vLLM's hashes, the request's tokens and its parent."""
    vllm = hashes(request, len(request.block_hashes))
    out = []
    for ev in events:
        assert type(ev) is BlockStored
        assert (ev.medium, ev.ownership, ev.block_size, ev.group_idx) == ("CPU", "kvtier", B, 0)
        first = vllm.index(ev.block_hashes[0])
        assert ev.block_hashes == vllm[first: first + len(ev.block_hashes)]
        assert ev.parent_block_hash == (vllm[first - 1] if first else None)
        assert ev.token_ids == ids[first * B:(first + len(ev.block_hashes)) * B]
        out += range(first, first + len(ev.block_hashes))
    return out


@pytest.mark.parametrize("async_sched", [False, True], ids=["sync", "async"])
def test_stored_blocks_published(engines, checker, async_sched):
    """Each block a store commits is published once, BlockStored with
    vLLM's hash, its tokens and its parent, and kvtierd holds the
    reference's bytes for each; an engine without events publishes
    nothing of kvtier's."""
    ids = kvtd.prompt_ids(12 * B + 5, 300 + async_sched)
    a, sub = with_events(engines, async_sched=async_sched)
    r = a.add("a", ids)
    a.run()
    assert list(r.output_token_ids) == reference_tokens(checker.model, ids)
    a.worker.drain()
    assert not a.conn.side._named  # every store reported done
    assert a.worker.stats["stored_blocks"] == 12
    published = check_stored(sub.events, r, ids)
    assert published == list(range(12))
    assert checker.held(ids, checker.model) == published

    plain = engines(async_sched=async_sched)
    assert plain.cfg.kv_events_config is None or \
        not plain.cfg.kv_events_config.enable_kv_cache_events
    plain.add("again", kvtd.prompt_ids(4 * B + 1, 310 + async_sched))
    plain.run()
    assert plain.conn.take_events() == []


@pytest.mark.parametrize("async_sched", [False, True], ids=["sync", "async"])
def test_missing_block_published_removed(engines, checker, async_sched):
    """A block deleted from kvtierd between the scheduler's lookup and the
    load: the load publishes BlockRemoved for it alone (the blocks after
    it are there); vLLM recomputes from it, and the stores of the
    recomputed blocks publish them stored, the reference's in kvtierd."""
    ids = kvtd.prompt_ids(12 * B + 5, 320 + async_sched)
    bad = 3
    store(engines, async_sched, ids[: 6 * B + 1], checker.model)
    keys = checker.keys(ids)
    b, sub = with_events(engines, async_sched=async_sched, policy="recompute")
    seen = fail_at_load(b, checker, keys[bad])
    rb = b.add("b", ids)
    b.run()
    assert seen["deleted"] and b.wrong == []
    assert list(rb.output_token_ids) == reference_tokens(checker.model, ids)
    b.worker.drain()
    assert not b.conn.side._named
    removed = [ev for ev in sub.events if type(ev) is BlockRemoved]
    assert len(removed) == 1
    assert (removed[0].medium, removed[0].ownership, removed[0].group_idx) == ("CPU", "kvtier", 0)
    assert removed[0].block_hashes == hashes(rb, 12)[bad: bad + 1]
    gone_at = sub.events.index(removed[0])
    stored = check_stored([ev for ev in sub.events[gone_at + 1:]], rb, ids)
    assert stored == list(range(bad, 12))
    assert not any(type(ev) is BlockStored for ev in sub.events[:gone_at])
    assert checker.held(ids, checker.model) == list(range(12))


def test_deleted_store_reported_gone(engines, checker):
    """On the worker: a store built before vLLM's scheduler heard of a
    failed load is deleted from kvtierd and reported not stored and gone
    (the scheduler publishes those blocks removed); a load that finds a
    block missing reports that block gone; a store reports what it did
    not commit, -EEXIST counting as committed."""
    from kvtier.vllm.metadata import KvtierConnectorMetadata, Transfer

    ids = kvtd.prompt_ids(6 * B + 1, 330)
    store(engines, False, ids, checker.model)
    keys = checker.keys(ids)
    w = engines(async_sched=False, events=True).worker

    def step(meta):
        w.bind_connector_metadata(meta)
        w.start_load_kv(None)
        w.wait_for_save()
        w.drain()
        w.get_transfer_results(set())
        w.get_block_ids_with_load_errors()
        w.clear_connector_metadata()
        return w.build_connector_worker_meta()

    assert checker.ns.delete(keys[2]) == 1
    out = step(KvtierConnectorMetadata(
        loads=[Transfer("x", b"".join(keys[:4]), ([1, 2, 3, 4],), pin=5)]))
    assert (dict(out.done), out.unstored, out.gone) == ({5: 1}, {}, {5: {2}})
    early = Transfer("x", b"".join(keys[3:5]), ([4, 5],), pin=6, failures=0)
    out = step(KvtierConnectorMetadata(stores=[early]))
    assert (dict(out.done), out.unstored, out.gone) == ({6: 1}, {6: {0, 1}}, {6: {0, 1}})
    assert [checker.ns.lookup(k)[0] for k in keys] == [1, 1, 0, 0, 0, 1]
    late = Transfer("x", b"".join(keys[1:5]), ([2, 3, 4, 5],), pin=7, failures=1)
    out = step(KvtierConnectorMetadata(stores=[late]))
    assert (dict(out.done), out.unstored, out.gone) == ({7: 1}, {}, {})
    assert [checker.ns.lookup(k)[0] for k in keys] == [1] * 6
