# SPDX-License-Identifier: Apache-2.0
"""Codecs (kvtier.CODECS) through the Python package and every adapter,
against a real kvtierd: blocks of one codec are never a hit for another;
transformers, vLLM (CPU) and SGLang's host pools restore fp8-e4m3 and int4
blocks within the format's bound of the exact K/V (the bound computed from
the exact values, as proto/codec.h quantises them), codec none stays
bit-identical, and a cache that is fp8 already is stored as it is."""

import logging

import pytest
import torch

import kvtd
import kvtier
import sglang_pools as sp
from kvtier.hf import KvtierCache
from kvtier.identity import ModelIdentity
from test_hf import generate, load, prefix_cache

BLOCK = 16
NEW = 12  # tokens test_hf.generate makes
CODED = ["fp8-e4m3", "int4"]


# ------------------------------------------------------------------ bounds

def bound(x: torch.Tensor, codec: str) -> torch.Tensor:
    """How far each element of x, blocks as [layers, planes, blocks, tokens,
    heads, dim], may move through codec and back into a float cache.

    fp8-e4m3: a scale of amax/448 per (layer, plane, head) of a block; E4M3
    keeps 3 mantissa bits (half a step: 2^-4 of the element), and below
    its normal range steps of 2^-9 of the scale.  int4: (scale, min) per K
    channel over the block's tokens, per token and 32 channels (or the
    head, where its width is not a multiple of 32) for V and an MLA
    latent; half a step, scale/2, plus the rounding of scale and min to
    IEEE half.  Both: 2^-8 of the element for a bf16 cache's rounding."""
    x = x.float()
    a = x.abs()
    if codec == "fp8-e4m3":
        amax = a.amax(dim=(3, 5), keepdim=True)
        return a * 2.0 ** -4 + amax / 448 * 2.0 ** -9 + a * 2.0 ** -8
    assert codec == "int4", codec
    out = torch.empty_like(x)
    planes, d = x.shape[1], x.shape[-1]
    for p in range(planes):
        xp = x[:, p]
        if planes == 2 and p == 0:  # K: per channel over the tokens
            lo, hi = xp.amin(dim=2, keepdim=True), xp.amax(dim=2, keepdim=True)
        else:  # V, latent: per token, in groups of channels
            g = 32 if d % 32 == 0 else d
            grouped = xp.reshape(*xp.shape[:-1], d // g, g)
            lo = grouped.amin(dim=-1, keepdim=True).expand_as(grouped).reshape(xp.shape)
            hi = grouped.amax(dim=-1, keepdim=True).expand_as(grouped).reshape(xp.shape)
        scale = (hi - lo) / 15
        out[:, p] = scale / 2 + 2.0 ** -9 * (lo.abs() + 15 * scale + xp.abs()) + \
            xp.abs() * 2.0 ** -8
    return out


def assert_within(got: torch.Tensor, exact: torch.Tensor, codec: str, slack: float = 0.0):
    """got is exact through codec: every element within bound(), and the
    codec did round (got is not exact)."""
    assert got.shape == exact.shape, (got.shape, exact.shape)
    err = (got.float() - exact.float()).abs()
    b = bound(exact, codec) + slack
    worst = (err / b).max().item()
    assert torch.all(err <= b), f"{codec}: an element is {worst:.2f}x its bound " \
        f"(largest error {err.max().item():.3g})"
    assert not torch.equal(got.float(), exact.float()), f"{codec}: nothing was rounded"


def hf_blocks(cache, tokens: int, block: int = BLOCK) -> torch.Tensor:
    """A DynamicCache's first tokens as kvtier blocks:
    [layers, 2, blocks, block tokens, heads, dim]."""
    kv = torch.stack([torch.stack([lay.keys[0, :, :tokens], lay.values[0, :, :tokens]])
                      for lay in cache.layers])  # [L, 2, H, S, D]
    ly, _, h, _, d = kv.shape
    return kv.reshape(ly, 2, h, tokens // block, block, d).permute(0, 1, 3, 4, 2, 5).clone()


def test_bound_catches_dropped_scales():
    """The negative control of the bound: x rounded as fp8 without its
    scale (and int4 levels without theirs) is far outside it."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(2, 2, 3, BLOCK, 2, 32, generator=g) * 3
    amax = x.abs().amax(dim=(3, 5), keepdim=True)
    fp8 = (x / (amax / 448)).to(torch.float8_e4m3fn).float() * (amax / 448)
    assert torch.all((fp8 - x).abs() <= bound(x, "fp8-e4m3")), "a correct fp8 round trip"
    unscaled = (x / (amax / 448)).to(torch.float8_e4m3fn).float()
    assert not torch.all((unscaled - x).abs() <= bound(x, "fp8-e4m3"))
    levels = torch.round((x - x.amin()) / (x.amax() - x.amin()) * 15)
    assert not torch.all((levels - x).abs() <= bound(x, "int4"))


# --------------------------------------------------------- the extension

def test_open_namespace_codec(daemon):
    with kvtier.Client(socket=daemon.socket, name="codec-test") as c:
        sizes = {}
        for code, name in enumerate(kvtier.CODECS):
            for given in (name, code):
                ns = c.open_namespace("codec-model", 2, 2, 64, BLOCK, kvtier.dtype_code("bfloat16"),
                                      codec=given)
                assert ns.codec == name and ns.info["codec"] == name
                sizes[name] = ns.info["shard_bytes"]
                ns.close()
        # bf16 [2 layers][2 planes][16 tokens][2 heads][32]: 8192 bytes a
        # block; fp8 one byte an element and a scale a tile; int4 half a
        # byte and a (scale, min) per K channel, per V token.
        assert sizes == {"none": 8192, "fp8-e4m3": 8 * (4 + 512), "int4": 4 * (128 + 256) +
                         4 * (64 + 256)}, sizes
        for bad in ("fp8", "INT8", 3, -1):
            with pytest.raises(ValueError, match="none, fp8-e4m3, int4"):
                c.open_namespace("codec-model", 2, 2, 64, BLOCK, 3, codec=bad)
        with pytest.raises(TypeError):
            c.open_namespace("codec-model", 2, 2, 64, BLOCK, 3, codec=1.0)
        with pytest.raises(ValueError, match="stored as it is"):
            c.open_namespace("codec-model", 2, 2, 32, BLOCK, kvtier.dtype_code("fp8"),
                             codec="int4")


def test_identity_codec():
    """ModelIdentity names codecs canonically; a cache that is fp8 or int8
    already takes none, saying so once; a cache on a device without a copy
    path that encodes is refused a codec."""
    def ident(dtype, codec):
        return ModelIdentity(model="m", layers=2, kv_heads=2, head_size=32, dtype=dtype,
                             block_tokens=BLOCK, codec=codec)

    assert ident("bfloat16", None).codec == "none"
    assert ident("bfloat16", 1).codec == "fp8-e4m3"
    assert ident("float16", "int4").codec == "int4"
    with pytest.raises(ValueError, match="none, fp8-e4m3, int4"):
        ident("bfloat16", "fp4")
    for dtype in ("float8_e4m3fn", "float8_e5m2", "int8"):
        assert ident(dtype, "fp8-e4m3").codec == "none"
    if kvtier.HAVE_CUDA:
        ident("bfloat16", "int4").check_device("cuda", "kvtier.test")
    else:
        with pytest.raises(NotImplementedError, match="without CUDA.*codec 'none'"):
            ident("bfloat16", "int4").check_device("cuda", "kvtier.test")
    with pytest.raises(NotImplementedError, match="no copy path for xpu.*codec 'none'"):
        ident("bfloat16", "fp8-e4m3").check_device("xpu", "kvtier.test")
    ident("bfloat16", "none").check_device("cuda", "kvtier.test")
    ident("bfloat16", "int4").check_device("cpu", "kvtier.test")


def test_fp8_rule_logs_once(caplog):
    with caplog.at_level(logging.INFO, logger="kvtier"):
        ModelIdentity(model="m", layers=2, kv_heads=2, head_size=32, dtype="float8_e4m3fn",
                      block_tokens=BLOCK, codec="int4")
    said = [r for r in caplog.records if "stored as it is" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.INFO, caplog.records


# ------------------------------------------------------------ transformers

def test_codecs_never_mix(daemon, model_dir):
    """A prefix stored under one codec is a miss for every other, both
    ways; the same codec finds it."""
    model = load(model_dir, torch.float32)
    for i, (first, others) in enumerate((("none", ["fp8-e4m3", "int4"]),
                                         ("fp8-e4m3", ["none", "int4"]))):
        ids = kvtd.prompt_ids(6 * BLOCK + 3, seed=31 + i)
        with KvtierCache(model, socket=daemon.socket, block_tokens=BLOCK, codec=first) as kv:
            assert kv.ns.codec == first
            assert kv.save(ids, prefix_cache(model, ids, 6 * BLOCK)) == 6
        for other in others:
            with KvtierCache(model, socket=daemon.socket, block_tokens=BLOCK, codec=other) as kv:
                assert kv.restore(ids)[1] == 0, f"{other} found {first}'s blocks"
        with KvtierCache(model, socket=daemon.socket, block_tokens=BLOCK, codec=first) as kv:
            assert kv.restore(ids)[1] == 6 * BLOCK


def agreeing(a, b, prompt: int) -> int:
    """Leading generated tokens (after prompt ones) two generate() results
    share."""
    x, y = a.sequences[0, prompt:].tolist(), b.sequences[0, prompt:].tolist()
    assert len(x) == len(y) == NEW, (x, y)
    return next((i for i, (s, t) in enumerate(zip(x, y)) if s != t), NEW)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("codec", ["none"] + CODED)
def test_transformers_restore(daemon, model_dir, codec, dtype):
    """Saved through one KvtierCache, restored through another connection:
    codec none gives the saved K/V bit for bit and the same logits; fp8 and
    int4 give K/V within their bound and continuations that agree with the
    exact prefix's."""
    model = load(model_dir, dtype)
    n = 8 * BLOCK
    ids = kvtd.prompt_ids(n + 5, seed=41)
    exact = prefix_cache(model, ids, n)
    want = hf_blocks(exact, n)
    with KvtierCache(model, socket=daemon.socket, block_tokens=BLOCK, codec=codec) as kv:
        assert kv.save(ids, exact) == 8
        coded = kv.ns.info["shard_bytes"]
    with KvtierCache(model, socket=daemon.socket, block_tokens=BLOCK, codec=codec) as kv:
        cache, t = kv.restore(ids)
    assert t == n
    got = hf_blocks(cache, n)
    plain = generate(model, ids, prefix_cache(model, ids, n))
    again = generate(model, ids, cache)
    if codec == "none":
        assert torch.equal(got, want)
        assert all(torch.equal(x, y) for x, y in zip(plain.logits, again.logits))
        return
    assert coded < want.numel() // 8 * want.element_size()
    assert_within(got, want, codec)
    # Greedy decoding of a random model meets near-ties: fp8's rounding
    # keeps (here) all of the continuation, int4's coarser one its start.
    assert agreeing(plain, again, len(ids)) >= (8 if codec == "fp8-e4m3" else 3), \
        (plain.sequences[0, -NEW:].tolist(), again.sequences[0, -NEW:].tolist())


@pytest.mark.skipif(not (torch.cuda.is_available() and kvtier.HAVE_CUDA),
                    reason="no CUDA device, or kvtier built without CUDA")
def test_gpu_cache_takes_codec(daemon, model_dir):
    model = load(model_dir, torch.bfloat16, "cuda")
    KvtierCache(model, socket=daemon.socket, block_tokens=BLOCK, codec="fp8-e4m3").close()
    KvtierCache(model, socket=daemon.socket, block_tokens=BLOCK).close()


# ------------------------------------------------------------------ SGLang

def filled_pool(layout: str, mla: bool, seed: int, dtype=torch.bfloat16):
    """SGLang's host pool holding normal values (not random bytes, which
    hold NaNs and infinities no codec keeps)."""
    pool = sp.host_pool(layout, mla, seed=seed, dtype=dtype)
    g = torch.Generator().manual_seed(seed)
    pool.kv_buffer.copy_(torch.randn(pool.kv_buffer.shape, generator=g) * 2)
    return pool


def sglang_keys(*what, n=3) -> list[str]:
    import hashlib

    seed = hashlib.sha256(repr(what).encode()).digest()
    return [hashlib.sha256(seed + bytes([i])).hexdigest() for i in range(n)]


@pytest.mark.parametrize("layout,mla", [("page_first", False), ("page_head", False),
                                        ("layer_first", True)])
@pytest.mark.parametrize("codec", CODED)
def test_sglang_pages(daemon, codec, layout, mla):
    """Pages stored with the backend's codec come back, into other pages of
    another pool in another layout, within the codec's bound; a backend
    without the codec finds none of them."""
    pool = filled_pool(layout, mla, seed=1)
    b = sp.backend(pool, daemon.socket, mla, codec=codec)
    keys, pages = sglang_keys(codec, layout, mla), [2, 5, 3]
    try:
        assert b.batch_set_v1(keys, sp.host_indices(pages)) == [True] * 3
        assert b.counts["stored_pages"] == 3
    finally:
        b.close()
    plain = sp.backend(filled_pool(layout, mla, seed=2), daemon.socket, mla)
    try:
        assert plain.batch_exists(keys) == 0
    finally:
        plain.close()
    other = (sp.MLA_LAYOUTS if mla else sp.MHA_LAYOUTS)[0 if layout != "layer_first" else 1]
    fresh = filled_pool(other, mla, seed=3)
    b2 = sp.backend(fresh, daemon.socket, mla, codec=codec)
    try:
        assert b2.batch_exists(keys) == 3
        assert b2.batch_get_v1(keys, sp.host_indices([7, 1, 4])) == [True] * 3
    finally:
        b2.close()
    got = torch.stack([sp.page_kv(fresh, p) for p in (7, 1, 4)], dim=2)
    want = torch.stack([sp.page_kv(pool, p) for p in pages], dim=2)
    assert_within(got, want, codec)


def test_fp8_pool_stored_as_is(daemon, caplog):
    """An fp8 host pool with a codec asked for: stored as it is (codec
    none), bit for bit, said once at INFO; read back by a backend that
    asked for another codec, the same bytes."""
    pool = sp.host_pool("page_first", dtype=torch.float8_e4m3fn, seed=8)
    with caplog.at_level(logging.INFO, logger="kvtier"):
        b = sp.backend(pool, daemon.socket, codec="fp8-e4m3")
    said = [r for r in caplog.records if "stored as it is" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.INFO
    keys, pages = sglang_keys("fp8 pool"), [1, 6, 2]
    try:
        assert b.batch_set_v1(keys, sp.host_indices(pages)) == [True] * 3
        assert b._namespace().codec == "none"
    finally:
        b.close()
    with kvtier.Client(socket=daemon.socket, name="checker") as c:
        ns = ModelIdentity(model=sp.MODEL, layers=sp.LAYERS, kv_heads=sp.HEADS,
                           head_size=sp.HEAD, dtype="float8_e4m3fn", block_tokens=sp.PAGE).open(c)
        bufs = [bytearray(ns.info["shard_bytes"]) for _ in keys]
        assert ns.load(0, b"".join(bytes.fromhex(k) for k in keys), bufs)[0] == 3
        for buf, p in zip(bufs, pages):
            want = sp.page_kv(pool, p).contiguous().view(torch.uint8).flatten().numpy()
            assert bytes(buf) == bytes(want), f"page {p} was not stored as it is"
    fresh = sp.host_pool("page_head", dtype=torch.float8_e4m3fn, seed=9)
    b2 = sp.backend(fresh, daemon.socket, codec="int4")
    try:
        assert b2.batch_get_v1(keys, sp.host_indices([3, 0, 7])) == [True] * 3
    finally:
        b2.close()
    for q, p in zip((3, 0, 7), pages):
        assert torch.equal(sp.page_kv(fresh, q).contiguous().view(torch.uint8),
                           sp.page_kv(pool, p).contiguous().view(torch.uint8))


# -------------------------------------------------------------------- vLLM

def test_vllm_fp8_prefix(daemon, model_dir):
    """vLLM (CPU) with the connector's codec fp8-e4m3: a second engine with
    the same option finds the first's prefix and continues it as the first
    computed it; the blocks hold that prefix's K/V (as transformers
    computes them) within fp8's bound; an engine without the codec misses
    them."""
    from test_vllm import BLOCK as VBLOCK, Engine, transformers_prefix

    n = 6 * VBLOCK + 8
    prompt = dict(seed=51, n=n)
    a = Engine(model_dir, daemon.socket, {"codec": "fp8-e4m3"})
    try:
        computed = a.ask(prompt)
    finally:
        a.close()
    assert computed["cached"] == 0 and computed["stats"]["stored_blocks"] == 6, computed
    b = Engine(model_dir, daemon.socket, {"codec": "fp8-e4m3"})
    try:
        restored = b.ask(prompt)
    finally:
        b.close()
    assert restored["cached"] == 6 * VBLOCK, restored
    # The random model's next-token distribution is nearly flat in vLLM
    # (logprobs near -3), so fp8's rounding may flip a near-tie after a few
    # tokens; the first ones agree, their logprobs within fp8's noise.
    assert restored["tokens"][:2] == computed["tokens"][:2], (restored, computed)
    assert abs(restored["logprobs"][0] - computed["logprobs"][0]) < 0.05, (restored, computed)
    c = Engine(model_dir, daemon.socket)
    try:
        plain = c.ask(prompt)
    finally:
        c.close()
    assert plain["cached"] == 0, "an engine without the codec found fp8 blocks"
    assert plain["tokens"] == computed["tokens"]

    ids = kvtd.prompt_ids(n, 51)
    model = load(model_dir, torch.float32)
    with KvtierCache(model, socket=daemon.socket, block_tokens=VBLOCK, codec="fp8-e4m3") as kv:
        cache, t = kv.restore(ids)
    assert t == 6 * VBLOCK
    exact = transformers_prefix(model_dir, ids[:t])  # [layers][2] of [tokens, heads, dim]
    want = torch.stack([torch.stack(lay) for lay in exact])  # [L, 2, S, H, D]
    ly, _, _, h, d = want.shape
    want = want.reshape(ly, 2, 6, VBLOCK, h, d)
    # Two engines compute the same K/V up to float32 rounding.
    assert_within(hf_blocks(cache, t, VBLOCK), want, "fp8-e4m3", slack=1e-4)
