# SPDX-License-Identifier: Apache-2.0
"""kvtier.sglang as SGLang (0.5.23) runs a HiCache storage backend: made by
SGLang's own factory from its module path, over SGLang's own host pool
classes (on the CPU), against a real kvtierd.  Pages stored from every
host layout, MHA and MLA, are kvtier's block bytes, and a fresh backend in
another process, in another layout, loads them back equal; a byte altered
in the pool shows; tensor-parallel ranks keep their shards, and an MLA
page is written once; a killed kvtierd is misses and skipped stores, and
hits again once it is back."""

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time

import pytest
import torch

import kvtd
import kvtier
import sglang_pools as sp
from kvtier import layouts
from kvtier.identity import ModelIdentity
from kvtier.sglang import KvtierStorage

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = [(lay, False) for lay in sp.MHA_LAYOUTS] + [(lay, True) for lay in sp.MLA_LAYOUTS]


@pytest.fixture(scope="module")
def daemon():
    with kvtd.Daemon() as d:
        yield d


def page_keys(*what, n=3) -> list[str]:
    seed = hashlib.sha256(repr(what).encode()).digest()
    return [hashlib.sha256(seed + bytes([i])).hexdigest() for i in range(n)]


def namespace(client, mla, heads=sp.HEADS, tp_size=1):
    ident = ModelIdentity(model=sp.MODEL, layers=sp.LAYERS, kv_heads=1 if mla else heads,
                          head_size=sp.LORA + sp.ROPE if mla else sp.HEAD, dtype="bfloat16",
                          block_tokens=sp.PAGE, tp_size=tp_size, mla=mla)
    return ident.open(client)


def in_child(requests: list[dict]) -> list[dict]:
    """Fresh backends in a process of their own load each request's keys
    into its pages (sglang_pools.load_in_fresh), in order."""
    d = tempfile.mkdtemp(prefix="kvt-sglang-")
    req, res = os.path.join(d, "req.json"), os.path.join(d, "res.pt")
    with open(req, "w") as f:
        json.dump(requests, f)
    subprocess.run([sys.executable, os.path.join(HERE, "sglang_pools.py"), req, res],
                   check=True, timeout=300)
    return torch.load(res)


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Byte for byte (random bytes hold NaNs, which torch.equal does not
    find equal to themselves)."""
    return a.shape == b.shape and torch.equal(a.contiguous().view(torch.uint8),
                                              b.contiguous().view(torch.uint8))


def block_bytes(page: torch.Tensor) -> bytes:
    """kvtier's block layout of a [layers, planes, tokens, heads, dim] page."""
    return bytes(page.contiguous().view(torch.uint8).flatten().numpy())


def test_pages_round_trip(daemon):
    """Stored from each layout, kvtierd holds kvtier's block bytes (what
    vLLM and transformers store), and fresh backends in another process,
    each in another layout of the same kind, read back every page equal."""
    stored, requests = [], []
    with kvtier.Client(socket=daemon.socket, name="checker") as c:
        for layout, mla in CASES:
            pool = sp.host_pool(layout, mla)
            b = sp.backend(pool, daemon.socket, mla)
            assert isinstance(b, KvtierStorage)
            keys, pages = page_keys(layout, mla), [2, 5, 3]
            assert b.batch_exists(keys) == 0
            assert b.batch_set_v1(keys, sp.host_indices(pages)) == [True] * 3
            assert b.batch_exists(keys + page_keys("absent")) == 3
            assert b.batch_set_v1(keys, sp.host_indices(pages)) == [True] * 3  # already there
            assert b.counts["stored_pages"] == 3
            b.close()
            ns = namespace(c, mla)
            bufs = [bytearray(ns.info["shard_bytes"]) for _ in keys]
            got, _ = ns.load(0, b"".join(bytes.fromhex(k) for k in keys), bufs)
            assert got == 3
            for buf, p in zip(bufs, pages):
                assert bytes(buf) == block_bytes(sp.page_kv(pool, p)), \
                    f"{layout}: page {p} is not kvtier's block"
            kinds = sp.MLA_LAYOUTS if mla else sp.MHA_LAYOUTS
            other = kinds[(kinds.index(layout) + 1) % len(kinds)]
            stored.append((layout, other, pool, pages))
            requests.append(dict(socket=daemon.socket, layout=other, mla=mla, keys=keys,
                                 pages=[7, 1, 4]))
    for (layout, other, pool, pages), r in zip(stored, in_child(requests)):
        assert r["hits"] == 3 and r["ok"] == [True] * 3, (layout, r["hits"], r["ok"])
        for got, p in zip(r["pages"], pages):
            assert same(got, sp.page_kv(pool, p)), f"{layout} -> {other}: page {p} differs"


def test_altered_byte_is_caught(daemon):
    """The negative control: one byte changed in kvtierd's copy of a page
    reaches the loading backend, and the comparison sees it."""
    pool = sp.host_pool("page_first")
    b = sp.backend(pool, daemon.socket)
    keys = page_keys("altered", n=1)
    assert b.batch_set_v1(keys, sp.host_indices([4])) == [True]
    with kvtier.Client(socket=daemon.socket, name="checker") as c:
        ns = namespace(c, False)
        lease = ns.acquire(0, bytes.fromhex(keys[0]))[0]
        mem = c.map(lease["extent_id"], lease["offset"], lease["bytes"])
        mem[1000] ^= 0x40
        c.release([lease["handle"]])
    fresh = sp.host_pool("page_first", seed=5)
    b2 = sp.backend(fresh, daemon.socket)
    assert b2.batch_get_v1(keys, sp.host_indices([6])) == [True]
    assert not same(sp.page_kv(fresh, 6), sp.page_kv(pool, 4))
    diff = (sp.page_kv(fresh, 6).contiguous().view(torch.uint8).flatten()
            != sp.page_kv(pool, 4).contiguous().view(torch.uint8).flatten())
    assert diff.sum() == 1 and diff.nonzero().item() == 1000
    b.close()
    b2.close()


def test_generic_interface(daemon):
    """SGLang's generic calls (interface_v1 off): flat pages as its cache
    controller makes them, the same blocks as the zero-copy calls."""
    pool = sp.host_pool("layer_first")
    b = sp.backend(pool, daemon.socket)
    keys = page_keys("generic", n=2)
    pages = [pool.get_data_page(p * sp.PAGE) for p in (1, 6)]
    assert b.batch_set(keys, pages) is True
    assert b.exists(keys[0]) and not b.exists(page_keys("nothing", n=1)[0])
    fresh = sp.host_pool("layer_first", seed=3)
    b2 = sp.backend(fresh, daemon.socket)
    assert b2.batch_get_v1(keys, sp.host_indices([2, 3])) == [True, True]
    assert same(sp.page_kv(fresh, 2), sp.page_kv(pool, 1))
    assert same(sp.page_kv(fresh, 3), sp.page_kv(pool, 6))
    dummies = [fresh.get_dummy_flat_data_page() for _ in keys]
    got = b2.batch_get(keys + page_keys("missing", n=1), dummies + [fresh.get_dummy_flat_data_page()])
    assert got[2] is None and got[0] is dummies[0] and got[1] is dummies[1]
    assert same(dummies[0], pool.get_data_page(1 * sp.PAGE))
    assert same(dummies[1], pool.get_data_page(6 * sp.PAGE))
    b.close()
    b2.close()


def test_tensor_parallel_shards(daemon):
    """Ranks 0 and 1 of tp_size=2 store their own heads; a page is a hit
    once both shards are in; fresh ranks read back their own shard."""
    heads = sp.HEADS  # per rank
    pools = [sp.host_pool("page_head", heads=heads, seed=10 + r) for r in (0, 1)]
    bs = [sp.backend(pools[r], daemon.socket, tp_rank=r, tp_size=2) for r in (0, 1)]
    keys, pages = page_keys("tp"), [1, 2, 3]
    assert bs[0].batch_set_v1(keys, sp.host_indices(pages)) == [True] * 3
    assert bs[1].batch_exists(keys) == 0, "visible with one shard of two"
    assert bs[1].batch_set_v1(keys, sp.host_indices(pages)) == [True] * 3
    got = in_child([dict(socket=daemon.socket, layout="layer_first", mla=False, keys=keys,
                         pages=[4, 5, 6], heads=heads, tp_rank=r, tp_size=2) for r in (0, 1)])
    for r in (0, 1):
        assert got[r]["ok"] == [True] * 3
        for g, p in zip(got[r]["pages"], pages):
            assert same(g, sp.page_kv(pools[r], p)), f"rank {r} page {p}"
    for b in bs:
        b.close()


def test_replicated_heads_written_once(daemon):
    """A model of one KV head on two ranks (kv_heads 1): both ranks hold
    that head, the pages are one shard, rank 0 writes it and rank 1 reads
    rank 0's; a count that no replication explains is refused."""
    pools = [sp.host_pool("page_first", heads=1, seed=40 + r) for r in (0, 1)]
    bs = [sp.backend(pools[r], daemon.socket, tp_rank=r, tp_size=2, kv_heads=1)
          for r in (0, 1)]
    keys, pages = page_keys("replicated"), [2, 3, 4]
    assert bs[1].batch_set_v1(keys, sp.host_indices(pages)) == [True] * 3
    assert bs[1].batch_exists(keys) == 0, "rank 1 wrote its replica's shard"
    assert bs[0].batch_set_v1(keys, sp.host_indices(pages)) == [True] * 3
    assert bs[1].batch_exists(keys) == 3
    assert bs[1].batch_get_v1(keys, sp.host_indices([5, 6, 7])) == [True] * 3
    for p, q in zip(pages, [5, 6, 7]):
        assert same(sp.page_kv(pools[1], q), sp.page_kv(pools[0], p))
    with kvtier.Client(socket=daemon.socket, name="checker") as c:
        assert namespace(c, False, heads=1, tp_size=2).info["shards"] == 1
    for b in bs:
        b.close()
    with pytest.raises(ValueError, match="do not replicate the model's 3"):
        sp.backend(sp.host_pool("page_first", heads=2), daemon.socket, tp_rank=0, tp_size=2,
                   kv_heads=3)


def test_mla_written_once(daemon):
    """An MLA page is one latent for every rank: rank 0 writes it, rank
    1's store writes nothing, and rank 1 reads rank 0's latent."""
    pools = [sp.host_pool("page_first", mla=True, seed=20 + r) for r in (0, 1)]
    bs = [sp.backend(pools[r], daemon.socket, mla=True, tp_rank=r, tp_size=2) for r in (0, 1)]
    keys, pages = page_keys("mla-tp"), [3, 4, 5]
    assert bs[1].batch_set_v1(keys, sp.host_indices(pages)) == [True] * 3
    assert bs[1].batch_exists(keys) == 0, "rank 1 wrote an MLA page"
    assert bs[0].batch_set_v1(keys, sp.host_indices(pages)) == [True] * 3
    got = in_child([dict(socket=daemon.socket, layout="layer_first", mla=True, keys=keys,
                         pages=[0, 1, 2], tp_rank=1, tp_size=2)])[0]
    assert got["ok"] == [True] * 3
    for g, p in zip(got["pages"], pages):
        assert same(g, sp.page_kv(pools[0], p))
    for b in bs:
        b.close()


def test_daemon_killed_and_restarted():
    """Misses and skipped stores while kvtierd is away, never an exception
    into SGLang; hits again once it is back."""
    with kvtd.Daemon() as d:
        pool = sp.host_pool("page_first_direct")
        b = sp.backend(pool, d.socket)
        keys, pages = page_keys("restart"), [1, 2, 3]
        assert b.batch_set_v1(keys, sp.host_indices(pages)) == [True] * 3
        d.kill()
        assert b.batch_exists(keys) == 0
        assert b.batch_get_v1(keys, sp.host_indices([4, 5, 6])) == [False] * 3
        assert b.batch_set_v1(keys, sp.host_indices(pages)) == [False] * 3
        d.start()
        # The blocks died with it: stored again once it answers.
        deadline = time.monotonic() + 60
        while b.batch_set_v1(keys, sp.host_indices(pages)) != [True] * 3:
            assert time.monotonic() < deadline, "no store reached the restarted kvtierd"
            time.sleep(0.05)
        assert b.batch_exists(keys) == 3
        assert b.batch_get_v1(keys, sp.host_indices([4, 5, 6])) == [True] * 3
        for p, q in zip(pages, [4, 5, 6]):
            assert same(sp.page_kv(pool, q), sp.page_kv(pool, p))
        assert b.counts["store_skipped"] >= 3
        b.close()


def test_refused_at_start(daemon):
    """What the backend cannot serve is refused when it is made, naming it."""
    from sglang.srt.mem_cache.storage import StorageBackendFactory

    with pytest.raises(NotImplementedError, match="pipeline parallelism"):
        StorageBackendFactory.create_backend("dynamic", sp.storage_config(daemon.socket,
                                                                          pp_size=2), None)
    # A hybrid model's side pool (SGLang's v2 calls), registered at attach.
    pool = sp.host_pool("layer_first")
    b = sp.backend(pool, daemon.socket)
    b.register_mem_host_pool_v2(pool, "kv")  # the KV pool itself
    with pytest.raises(NotImplementedError, match="mamba.*not supported"):
        b.register_mem_host_pool_v2(sp.host_pool("layer_first", seed=2), "mamba")
    b.close()
    from sglang.srt.mem_cache.pool_host.group import HostPoolGroup, PoolEntry

    group = HostPoolGroup([PoolEntry("kv", pool, None, lambda i: i, True),
                           PoolEntry("swa", sp.host_pool("layer_first", seed=3), None,
                                     lambda i: i)])
    with pytest.raises(NotImplementedError, match="swa.*not supported"):
        sp.backend(group, daemon.socket)
    with pytest.raises(layouts.LayoutError, match="'page_unified' layout is not one kvtier knows"):
        layouts.sglang_host(pool.kv_buffer, "page_unified", False, sp.PAGE, sp.LAYERS,
                            sp.HEADS, sp.HEAD)
    with pytest.raises(layouts.LayoutError, match="along its head axis"):
        layouts.sglang_host(pool.kv_buffer, "layer_first", False, sp.PAGE, sp.LAYERS,
                            sp.HEADS + 1, sp.HEAD)


def test_pools_kvtier_cannot_read_refused_by_name(daemon, caplog):
    """Host pools whose pages are not per-head K and V alone are refused
    when SGLang attaches them, each naming what it is: an MXFP8 KV cache's
    pool (per-page scales beside kv_buffer, SGLang's own class), a unified
    memory pool (pages of its own format), a speculative decoding draft
    model's KV (packed beside the target's, or registered as a draft
    pool).  A model named by something that is not a directory of weights
    is said to have no weights fingerprint."""
    import logging

    from sglang.srt.mem_cache.pool_host.group import HostPoolGroup, PoolEntry
    from sglang.srt.mem_cache.pool_host.mha_mxfp8 import MHATokenToKVPoolMXFP8Host
    from sglang.srt.mem_cache.pool_host.unified import UnifiedPageEnvelopeHostPool

    base = sp.host_pool("page_first")
    # SGLang builds these on GPUs only (their write-back kernels): the state
    # their constructors leave, over a CPU pool.
    mx = object.__new__(MHATokenToKVPoolMXFP8Host)
    mx.__dict__.update(base.__dict__)
    mx.k_scale_host = torch.zeros(base.page_num, base.layer_num, 16, dtype=torch.uint8)
    mx.v_scale_host = torch.zeros(base.page_num, base.layer_num, 16, dtype=torch.uint8)
    with pytest.raises(NotImplementedError, match="MHATokenToKVPoolMXFP8Host keeps per-page "
                                                  "scales"):
        sp.backend(mx, daemon.socket)
    unified = object.__new__(UnifiedPageEnvelopeHostPool)
    unified.__dict__.update(page_size=sp.PAGE, layout="page_first", dtype=torch.uint8,
                            layer_num=1, page_num=8,
                            kv_buffer=torch.zeros(8 * sp.PAGE * 64, dtype=torch.uint8))
    with pytest.raises(NotImplementedError, match="UnifiedPageEnvelopeHostPool.*unified memory"):
        sp.backend(unified, daemon.socket)
    packed = HostPoolGroup([PoolEntry("kv", base, None, lambda i: i, True,
                                      packed_draft_device_pools=(object(),))])
    with pytest.raises(NotImplementedError, match="kv hold a speculative decoding draft"):
        sp.backend(packed, daemon.socket)
    b = sp.backend(base, daemon.socket)
    with pytest.raises(NotImplementedError, match="draft hold a speculative decoding draft"):
        b.register_mem_host_pool_v2(sp.host_pool("page_first", seed=2), "draft")
    b.close()
    with caplog.at_level(logging.WARNING, logger="kvtier.sglang"):
        sp.backend(base, daemon.socket, model="served-name").close()
    assert "'served-name' is not a local directory" in caplog.text
    assert "no weights fingerprint" in caplog.text


# ---- one prefix, SGLang and transformers ------------------------------

HF_PAGES = 4  # pages of the prefix


def hf_page(t, b):
    """Page b of a transformers K or V [1, heads, seq, head] as [tokens, heads, head]."""
    return t[0, :, b * sp.PAGE:(b + 1) * sp.PAGE].transpose(0, 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_transformers_and_sglang_share_a_prefix(daemon, model_dir, dtype):
    """SGLang's keys are kvtier's: pages SGLang's host pool stored under
    its own page hashes are restored by kvtier.hf with logits bit-identical
    to recomputing the prefix, and a prefix kvtier.hf stored is a leading
    hit for SGLang, loaded into its host pool as transformers computed it."""
    from test_hf import generate, load, prefix_cache, same_logits

    from kvtier.hf import KvtierCache

    model = load(model_dir, dtype)
    n = HF_PAGES * sp.PAGE
    ids = kvtd.prompt_ids(n + 5, seed=31)
    ref = prefix_cache(model, ids, n)
    assert kvtier.hash_chain(ids[:n], sp.PAGE).hex() == "".join(sp.hicache_keys(ids[:n]))

    # SGLang -> transformers: its host pool holds the prefix's K and V.
    pool = sp.model_pool(model.config, "page_first", 4, dtype)
    pages = [5, 0, 7, 2]
    for b, p in enumerate(pages):
        kv = sp.page_kv(pool, p)
        for layer in range(model.config.num_hidden_layers):
            kv[layer, 0].copy_(hf_page(ref.layers[layer].keys, b))
            kv[layer, 1].copy_(hf_page(ref.layers[layer].values, b))
    b = sp.backend(pool, daemon.socket, model=model_dir)
    assert b.batch_set_v1(sp.hicache_keys(ids[:n]), sp.host_indices(pages)) == [True] * HF_PAGES
    with KvtierCache(model, socket=daemon.socket, block_tokens=sp.PAGE) as kv:
        cache, t = kv.restore(ids)
        assert t == n, f"transformers restored {t} of SGLang's {n} tokens"
        for layer in range(model.config.num_hidden_layers):
            assert same(cache.layers[layer].keys, ref.layers[layer].keys[:, :, :n])
            assert same(cache.layers[layer].values, ref.layers[layer].values[:, :, :n])
        again, want = generate(model, ids, cache), generate(model, ids, prefix_cache(model, ids, n))
        assert torch.equal(again.sequences, want.sequences)
        assert same_logits(again, want), "logits differ from the prefix computed in-process"

        # transformers -> SGLang.
        ids2 = kvtd.prompt_ids(n + 3, seed=32)
        ref2 = prefix_cache(model, ids2, n)
        assert kv.save(ids2[:n], ref2) == HF_PAGES
    fresh = sp.model_pool(model.config, "page_head", 6, dtype)
    b2 = sp.backend(fresh, daemon.socket, model=model_dir)
    keys2 = sp.hicache_keys(ids2[:n])
    assert b2.batch_exists(keys2) == HF_PAGES
    assert b2.batch_get_v1(keys2, sp.host_indices([1, 3, 6, 8])) == [True] * HF_PAGES
    for i, p in enumerate([1, 3, 6, 8]):
        kv = sp.page_kv(fresh, p)
        for layer in range(model.config.num_hidden_layers):
            assert same(kv[layer, 0], hf_page(ref2.layers[layer].keys, i)), (p, layer, "K")
            assert same(kv[layer, 1], hf_page(ref2.layers[layer].values, i)), (p, layer, "V")
    b.close()
    b2.close()


def test_storage_metrics_reach_sglang(daemon):
    """With SGLang's storage metrics on, get_stats hands its collector the
    pages and bandwidth of each call since the last one."""
    from sglang.srt.observability.metrics_collector import StorageMetricsCollector

    pool = sp.host_pool("page_first_direct")
    b = sp.backend(pool, daemon.socket, metrics=True)
    keys = page_keys("metrics", n=4)
    assert b.batch_set_v1(keys, sp.host_indices([0, 1, 2, 3])) == [True] * 4
    assert b.batch_get_v1(keys[:2], sp.host_indices([5, 6])) == [True] * 2
    m = b.get_stats()
    assert m.backup_pgs == [4] and m.prefetch_pgs == [2]
    assert all(x > 0 for x in m.backup_bandwidth + m.prefetch_bandwidth)
    StorageMetricsCollector(labels={"model_name": "kvtier-test"}).log_storage_metrics(m)
    assert b.get_stats().backup_pgs == []  # drained
    assert sp.backend(pool, daemon.socket).get_stats() is None  # metrics off
    b.close()


def test_prefetch_and_backup_threads_at_once(daemon):
    """SGLang's prefetch and backup threads call one backend at the same
    time (a round's loads beside the next round's stores): every page
    stored by one thread is loaded whole by the other."""
    import threading

    pool = sp.host_pool("layer_first")
    b = sp.backend(pool, daemon.socket)
    rounds, errors = 20, []
    keys = [page_keys("threads", r, n=2) for r in range(rounds)]
    stored = [threading.Event() for _ in range(rounds)]

    def backup():
        for r in range(rounds):
            if b.batch_set_v1(keys[r], sp.host_indices([0, 1])) != [True, True]:
                errors.append(f"round {r}: store")
            stored[r].set()

    def prefetch():
        for r in range(rounds):
            stored[r].wait()
            if b.batch_get_v1(keys[r], sp.host_indices([2 + r % 4, 6 + r % 2])) != [True, True]:
                errors.append(f"round {r}: load")

    threads = [threading.Thread(target=f) for f in (backup, prefetch)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert same(sp.page_kv(pool, 2 + (rounds - 1) % 4), sp.page_kv(pool, 0))
    assert b.counts["stored_pages"] == 2 * rounds and b.counts["loaded_pages"] == 2 * rounds
    b.close()
