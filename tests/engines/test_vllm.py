# SPDX-License-Identifier: Apache-2.0
"""vLLM (CPU) through the kvtier connector, against vLLM without it:
a fresh engine finds what another stored; transformers and vLLM, and
SGLang's host pool and vLLM, load each other's blocks; a killed daemon
costs recomputation, never other tokens.
The tests run in order and share one daemon and two vLLM engines."""

import json
import os
import subprocess
import sys

import pytest
import torch

import kvtd
from kvtier.hf import KvtierCache

BLOCK = 32  # vLLM's CPU backend wants multiples of 32
N = 6 * BLOCK + 8  # six full blocks can be restored
P1, P2, P3, P4, P5 = (dict(seed=s, n=N) for s in (21, 22, 23, 24, 26))
HERE = os.path.dirname(os.path.abspath(__file__))


class Engine:
    """vllm_run.py in a process of its own; extra: more of the connector's
    extra config."""

    def __init__(self, model_dir, sock, extra: dict | None = None):
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "vllm_run.py"),
                                      model_dir, sock, str(BLOCK), json.dumps(extra or {})],
                                     stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env, text=True)
        self._read()

    def _read(self):
        for line in self.proc.stdout:
            if line.startswith("{"):
                return json.loads(line)
        raise RuntimeError(f"vLLM exited ({self.proc.wait()})")

    def ask(self, prompt):
        self.proc.stdin.write(json.dumps(prompt) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=120)


@pytest.fixture(scope="module")
def env():
    with kvtd.Daemon() as d:
        yield {"daemon": d}


@pytest.fixture(scope="module")
def model(model_dir):
    return model_dir


@pytest.fixture(scope="module")
def reference(model):
    """Tokens of vLLM without kvtier."""
    e = Engine(model, "none")
    try:
        return {k: e.ask(p)["tokens"]
                for k, p in (("p1", P1), ("p2", P2), ("p3", P3), ("p5", P5))}
    finally:
        e.close()


def hf(model_dir, sock):
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    return KvtierCache(m, socket=sock, block_tokens=BLOCK)


def hf_tokens(kv, prompt):
    out = kv.generate(kvtd.prompt_ids(prompt["n"], prompt["seed"]), max_new_tokens=12,
                      do_sample=False)
    return out.sequences[0, prompt["n"]:].tolist()


def test_fresh_engine_finds_stored_blocks(env, model, reference):
    a = Engine(model, env["daemon"].socket)
    ra = a.ask(P1)
    a.close()
    assert ra["cached"] == 0 and ra["tokens"] == reference["p1"]
    assert ra["stats"]["stored_blocks"] == 6
    b = Engine(model, env["daemon"].socket)
    env["engine"], env["model"] = b, model
    # Connected, and so its pool mapped, at the engine's start, not by the
    # first request that loads.
    assert "vllm-worker" in _client_names(env["daemon"].socket)
    rb = b.ask(P1)
    assert rb["cached"] == 6 * BLOCK, rb
    assert rb["tokens"] == reference["p1"]


def test_transformers_to_vllm(env, model, reference):
    with hf(model, env["daemon"].socket) as kv:
        assert hf_tokens(kv, P2) and kv.restored_tokens == 0
    r = env["engine"].ask(P2)
    assert r["cached"] == 6 * BLOCK, r
    assert r["tokens"] == reference["p2"]


def test_vllm_to_transformers(env, model):
    # P1 was stored by vLLM; transformers restores it and must agree with
    # itself run without kvtier.
    with hf(model, env["daemon"].socket) as kv:
        restored = hf_tokens(kv, P1)
        assert kv.restored_tokens == 6 * BLOCK
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
    ids = kvtd.prompt_ids(P1["n"], P1["seed"])
    plain = m.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False)
    assert restored == plain[0, P1["n"]:].tolist()


def sglang_side(model_dir, sock, layout, seed):
    """SGLang's host pool class in layout, for the model's geometry with
    pages of vLLM's block, and kvtier.sglang made over it by SGLang's
    factory."""
    import sglang_pools as sp
    from transformers import AutoConfig

    pool = sp.model_pool(AutoConfig.from_pretrained(model_dir), layout, seed, torch.float32,
                         page=BLOCK)
    return pool, sp.backend(pool, sock, model=model_dir)


def transformers_prefix(model_dir, ids):
    """The K and V transformers computes for ids, [layers][2] of
    [tokens, heads, head]."""
    from test_hf import load, prefix_cache

    cache = prefix_cache(load(model_dir, torch.float32), ids, len(ids))
    return [(lay.keys[0].transpose(0, 1), lay.values[0].transpose(0, 1))
            for lay in cache.layers]


def test_sglang_to_vllm(env, model, reference):
    """Pages SGLang's host pool stored under its own page hashes are a
    prefix vLLM restores, with the tokens of vLLM run without kvtier."""
    import sglang_pools as sp

    ids = kvtd.prompt_ids(P5["n"], P5["seed"])
    kv = transformers_prefix(model, ids[: 6 * BLOCK])
    pool, b = sglang_side(model, env["daemon"].socket, "page_first", seed=5)
    pages = [6, 1, 4, 0, 7, 2]
    for i, p in enumerate(pages):
        page = sp.page_kv(pool, p)
        for layer, (k, v) in enumerate(kv):
            page[layer, 0].copy_(k[i * BLOCK:(i + 1) * BLOCK])
            page[layer, 1].copy_(v[i * BLOCK:(i + 1) * BLOCK])
    try:
        stored = b.batch_set_v1(sp.hicache_keys(ids, BLOCK), sp.host_indices(pages, BLOCK))
        assert stored == [True] * 6
    finally:
        b.close()
    r = env["engine"].ask(P5)
    assert r["cached"] == 6 * BLOCK, r
    assert r["tokens"] == reference["p5"]


def test_vllm_to_sglang(env, model):
    """The prefix vLLM stored (P1, the first test) is a leading hit for
    SGLang under its own page hashes, and loads into its host pool as the
    bytes transformers restores from kvtier, which are that prefix's K and
    V as transformers computes them (up to rounding: two engines)."""
    import sglang_pools as sp

    ids = kvtd.prompt_ids(P1["n"], P1["seed"])
    keys = sp.hicache_keys(ids, BLOCK)
    assert kvtier_keys(ids) == keys
    pool, b = sglang_side(model, env["daemon"].socket, "page_head", seed=6)
    pages = [3, 7, 0, 5, 2, 6]
    try:
        assert b.batch_exists(keys) == 6
        assert b.batch_get_v1(keys, sp.host_indices(pages, BLOCK)) == [True] * 6
    finally:
        b.close()
    with hf(model, env["daemon"].socket) as kv:
        cache, t = kv.restore(ids)
    assert t == 6 * BLOCK
    computed = transformers_prefix(model, ids[: 6 * BLOCK])
    for i, p in enumerate(pages):
        page = sp.page_kv(pool, p)
        for layer, lay in enumerate(cache.layers):
            for plane, x in enumerate((lay.keys, lay.values)):
                restored = x[0, :, i * BLOCK:(i + 1) * BLOCK].transpose(0, 1)
                assert torch.equal(page[layer, plane], restored), ("kvtier.hf", p, layer, plane)
                want = computed[layer][plane][i * BLOCK:(i + 1) * BLOCK]
                assert torch.allclose(page[layer, plane], want, atol=1e-4), \
                    ("computed", p, layer, plane, (page[layer, plane] - want).abs().max())


def kvtier_keys(ids) -> list[str]:
    """kvtier's block keys of ids' full blocks, as hex."""
    import kvtier

    raw = kvtier.hash_chain(ids[: len(ids) // BLOCK * BLOCK], BLOCK)
    return [k.hex() for k in kvtier.split_keys(raw)]


def test_altered_block_changes_vllm_output(env):
    """The negative control: a block zeroed in the pool shows in vLLM's
    logprobs far beyond the noise of prefilling fewer tokens."""
    import kvtier

    e = env["engine"]
    computed = e.ask(P4)
    assert computed["cached"] == 0
    clean = e.ask(P4)
    assert clean["cached"] == 6 * BLOCK and clean["tokens"] == computed["tokens"]
    ids = kvtd.prompt_ids(P4["n"], P4["seed"])
    keys = kvtier.hash_chain(ids[: 6 * BLOCK], BLOCK)
    with hf(env["model"], env["daemon"].socket) as kv:
        lease = kv.ns.acquire(0, keys[kvtier.KEY_BYTES: 2 * kvtier.KEY_BYTES])[0]
        assert lease["status"] == 0
        kv.client.map(lease["extent_id"], lease["offset"], lease["bytes"])[:] = bytes(lease["bytes"])
        kv.client.release([lease["handle"]])
    altered = e.ask(P4)
    assert altered["cached"] == 6 * BLOCK

    def dist(a, b):
        return max(abs(x - y) for x, y in zip(a["logprobs"], b["logprobs"]))

    noise = dist(clean, computed)
    assert dist(altered, computed) > max(1e-3, 10 * noise), (noise, altered, computed)


def _client_names(sock):
    import kvtier

    with kvtier.Client(socket=sock, name="checker") as c:
        return [r["name"] for r in c.stats(kvtier.STATS_CLIENTS) if r.get("kind") == "client"]


def _ns_stats(sock):
    import kvtier

    with kvtier.Client(socket=sock, name="checker") as c:
        recs = c.stats(kvtier.STATS_NAMESPACES | kvtier.STATS_TENANTS)
    ns = [r for r in recs if r.get("kind") == "namespace"]
    out = {k: sum(r.get(k, 0) for r in ns) for k in ("hints", "demotions")}
    out["retained"] = sum(r.get("retained", 0) for r in recs if r.get("kind") == "class")
    return out


def test_request_hints_reach_kvtierd(env):
    """A request's kv_transfer_params: its shared tokens are retained and,
    its session over, the rest demoted; kvtierd counts both."""
    e = env["engine"]
    before = _ns_stats(env["daemon"].socket)
    r = e.ask(dict(seed=25, n=N, kvtier={"shared_tokens": 2 * BLOCK, "end": "session"}))
    assert r["cached"] == 0 and r["stats"]["stored_blocks"] >= 6, r
    after = _ns_stats(env["daemon"].socket)
    assert r["stats"]["retained_blocks"] == 2 and r["stats"]["ended_blocks"] == 4, r
    assert after["retained"] - before["retained"] == 2, (before, after)
    assert after["demotions"] - before["demotions"] == 4, (before, after)
    assert after["hints"] - before["hints"] == 6, (before, after)


def test_daemon_killed_during_a_run(env, model, reference):
    d, e = env["daemon"], env["engine"]
    d.kill()
    r = e.ask(P1)  # was a hit: now recomputed
    assert r["cached"] == 0 and r["tokens"] == reference["p1"]
    r = e.ask(P3)
    assert r["tokens"] == reference["p3"]
    d.start()
    # The connector reconnects by itself; the first prompts after the restart
    # store again, and hits resume.
    for _ in range(20):
        r = e.ask(P3)
        assert r["tokens"] == reference["p3"]
        if r["cached"] == 6 * BLOCK:
            break
    assert r["cached"] == 6 * BLOCK, "hits did not resume after the restart"
    e.close()


def test_staged_prefix_is_an_asynchronous_load(model, reference):
    """A prefix on NVMe only: the request waits for its staging (vLLM's
    WAITING_FOR_REMOTE_KVS, an asynchronous load), not the batch, and gets
    the tokens of a run without kvtier with every block loaded."""
    import time

    import kvtier

    cfg = "[nvme]\nwriteback_high = 0%\nwriteback_low = 0%\n"
    with kvtd.Daemon(cfg, spill_mb=64) as d, kvtier.Client(socket=d.socket, name="checker") as c:
        e = Engine(model, d.socket)
        try:
            r1 = e.ask(P1)
            assert r1["cached"] == 0 and r1["stats"]["stored_blocks"] == 6, r1

            def written():
                dr = [r for r in c.stats() if r["kind"] == "daemon"][0]
                return dr["nvme_blocks"] >= 6 and dr["nvme_in_flight"] == 0

            for _ in range(3000):  # write-back starts at once with these watermarks
                if written():
                    break
                time.sleep(0.02)
            assert written(), "the blocks were never written to NVMe"
            recs = c.stats()
            tenant = [r for r in recs if r["kind"] == "tenant"][0]["id"]
            for ns in (r for r in recs if r["kind"] == "namespace"):
                c.admin_evict(tenant, ns["id"], drop=False)  # host copies only
            r2 = e.ask(P1)
        finally:
            e.close()
    assert r2["tokens"] == reference["p1"], r2
    assert r2["cached"] == 6 * BLOCK, r2
    assert r2["stats"]["async_loads"] == 1 and r2["stats"]["load_failures"] == 0, r2


@pytest.fixture(scope="module")
def ceph_conf():
    """A single-machine Ceph cluster (tests/ceph/cluster.sh); skipped
    without the ceph packages."""
    import shutil
    import tempfile

    script = os.path.join(HERE, "..", "ceph", "cluster.sh")
    d = tempfile.mkdtemp(prefix="kvt-ceph-")
    r = subprocess.run(["sh", script, "start", d], timeout=300)
    if r.returncode == 77:
        shutil.rmtree(d, ignore_errors=True)
        pytest.skip("the ceph packages are not installed (scripts/deps.sh installs them)")
    assert r.returncode == 0, f"the test cluster did not start (see {d}/log)"
    try:
        yield os.path.join(d, "ceph.conf")
    finally:
        subprocess.run(["sh", script, "stop", d], timeout=120)
        shutil.rmtree(d, ignore_errors=True)


def test_remote_misses_are_computed_and_stored(model, reference, ceph_conf):
    """With a remote tier, a prompt no node has seen is staging at the
    lookup (its keys are being fetched) and then a miss: the request's
    asynchronous load fails, vLLM computes the prompt, and the connector
    stores the computed blocks, so that the next engine restores them."""
    import time

    import kvtier

    cfg = (f"[tenant.t]\nuids = {os.getuid()}\n[remote.shared]\nceph_conf = {ceph_conf}\n"
           "pool = kvtier\ncapacity = 64M\ntimeout_ms = 5000\nmin_reuse = 0\n")
    with kvtd.Daemon(cfg) as d, kvtier.Client(socket=d.socket, name="checker") as c:
        def remote():
            return [r for r in c.stats() if r["kind"] == "remote"][0]

        for _ in range(600):
            if remote()["state"] == "up":
                break
            time.sleep(0.1)
        assert remote()["state"] == "up", remote()
        e = Engine(model, d.socket)
        try:
            r1 = e.ask(P1)
            assert r1["tokens"] == reference["p1"], r1
            assert remote()["misses"] == 6, remote()
            # The run was being fetched at the lookup: an asynchronous
            # load, for which the request waited (not the batch); it
            # failed, and vLLM computed the prompt.
            assert r1["stats"]["async_loads"] == 1, r1
            assert r1["stats"]["load_failures"] == 6, r1
            assert r1["cached"] == 0, r1
            assert r1["stats"].get("stored_blocks", 0) == 6, r1
            r2 = e.ask(P1)
        finally:
            e.close()
        assert r2["cached"] == 6 * BLOCK and r2["tokens"] == reference["p1"], r2
        for _ in range(300):
            if remote()["writes"] == 6:
                break
            time.sleep(0.1)
        assert remote()["writes"] == 6, remote()
