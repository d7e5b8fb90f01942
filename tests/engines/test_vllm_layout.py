# SPDX-License-Identifier: Apache-2.0
"""vLLM's own cache views, built on the CPU by vLLM's allocate_kv_cache for
every KVCacheLayout order, dtype, kernel-page split and attention backend
rule, stored into a real kvtierd through kvtier.vllm_layout and loaded
back: the bytes of each block are compared with what the backend's own
split expression reads out of the cache, in both directions.  A wrong K/V
rule must show: the FlashAttention rule applied to CPU_ATTN's views does
not give CPU_ATTN's K and V.

transformers meets FlashAttention's views there too: the blocks kvtier.hf
stored, loaded into FLASH_ATTN views, are transformers' K and V by
FlashAttention's own split; blocks stored from such views, written through
that split, are restored by kvtier.hf with logits bit-identical to
recomputing the prefix."""

import hashlib
import itertools

import pytest
import torch

import kvtd
import kvtier
from kvtier import vllm_layout
from kvtier.hf import KvtierCache
from kvtier.identity import ModelIdentity
from test_hf import generate, load, prefix_cache, same_logits

from vllm.v1.kv_cache_interface import (  # noqa: E402
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    KVCacheTensor,
    MLAAttentionSpec,
    compute_layout_strides,
)
from vllm.v1.kv_cache_layout import KVCacheLayout  # noqa: E402
from vllm.v1.worker.utils import allocate_kv_cache  # noqa: E402

LAYERS, HEADS, HEAD, LATENT = 3, 2, 16, 40
BLOCK, BLOCKS = 32, 6
DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float8_e4m3fn]
KERNELS = [None, 16, 8]  # kernel pages per vLLM block: 1, 2, 4
CELL_BACKENDS = ["FLASH_ATTN", "TRITON_ATTN", "FLEX_ATTENTION", "FLASHINFER"]
MLA_BACKENDS = ["FLASHMLA", "TRITON_MLA"]


def views(spec, layout, kernel, n_layers=LAYERS):
    """vLLM's per-layer views of one allocation, as its model runner makes
    them (allocate_kv_cache), filled with random bytes; None where vLLM
    itself refuses the layout and split."""
    names = [f"model.layers.{i}.self_attn.attn" for i in range(n_layers)]
    per_block = spec.page_size_bytes * n_layers
    block_stride = per_block if layout.is_block_outermost else None
    layer_stride, block_stride, *_ = compute_layout_strides(
        spec, BLOCKS, n_layers, layout, fixed_strides=(None, block_stride, None, None, None))
    cfg = KVCacheConfig(num_blocks=BLOCKS, kv_cache_groups=[KVCacheGroupSpec(names, spec)],
                        kv_cache_tensors=[KVCacheTensor(size=per_block * BLOCKS, layers=names,
                                                        layer_stride=layer_stride,
                                                        block_stride=block_stride)])
    try:
        caches = allocate_kv_cache(cfg, torch.device("cpu"), layout,
                                   [kernel] if kernel else None)
    except ValueError:
        return None  # vLLM does not split blocks of this layout
    raw = torch.empty(0, dtype=torch.uint8).set_(caches[names[0]].untyped_storage())
    g = torch.Generator().manual_seed(7)
    raw.copy_(torch.randint(0, 256, raw.shape, dtype=torch.uint8, generator=g))
    return [caches[n] for n in names]


def backend_kv(rule, view, pages_per_block):
    """What the backend reads from one layer's view, by its own expression,
    as [blocks, planes, tokens, heads, content] bytes."""
    v = view.view(torch.uint8) if view.element_size() == 1 else view
    if rule == vllm_layout.CELL:  # flash_attn.py, triton_attn.py, flex_attention.py
        k, val = v.transpose(1, 2).split(HEAD, dim=-1)
        planes = [k, val]
    elif rule == vllm_layout.ROWS:  # cpu_attn.py
        p, h, n, _ = v.shape
        k, val = v.view((p, h, n * 2, -1)).chunk(2, dim=2)
        planes = [k.transpose(1, 2), val.transpose(1, 2)]
    else:  # MLA: [pages, 1, tokens, latent]
        planes = [v.transpose(1, 2)]
    out = []
    for x in planes:  # [pages, tokens, heads, content] -> whole blocks
        p, n, h, c = x.shape
        out.append(x.reshape(p // pages_per_block, pages_per_block * n, h, c))
    return torch.stack(out, dim=1).contiguous().view(torch.uint8)


@pytest.fixture(scope="module")
def daemon():
    with kvtd.Daemon() as d:
        yield d


@pytest.fixture(scope="module")
def client(daemon):
    with kvtier.Client(socket=daemon.socket, name="layout-test") as c:
        yield c


_namespaces = {}


def namespace(client, dtype, mla):
    key = (dtype, mla)
    if key not in _namespaces:
        ident = ModelIdentity(model="vllm-layout-test", layers=LAYERS,
                              kv_heads=1 if mla else HEADS, head_size=LATENT if mla else HEAD,
                              dtype=kvtier.dtype_name(dtype), block_tokens=BLOCK, mla=mla)
        _namespaces[key] = ident.open(client)
    return _namespaces[key]


def keys_for(*what) -> bytes:
    seed = hashlib.sha256(repr(what).encode()).digest()
    return b"".join(hashlib.sha256(seed + bytes([i])).digest() for i in range(BLOCKS))


def spec_of(dtype, mla):
    if mla:
        return MLAAttentionSpec(block_size=BLOCK, num_kv_heads=1, head_size=LATENT, dtype=dtype)
    return FullAttentionSpec(block_size=BLOCK, num_kv_heads=HEADS, head_size=HEAD, dtype=dtype)


def round_trip(client, backend, rule, dtype, layout, kernel, mla=False, check_rule=None):
    """Store blocks 1, 4 and 2 of vLLM's views through the layout that
    vllm_layout derives for backend, compare kvtierd's blocks with the
    bytes check_rule's expression reads (default: backend's), then load
    them into zeroed views and compare again.  False where vLLM refuses
    the layout; raises AssertionError on a mismatch."""
    spec = spec_of(dtype, mla)
    layers = views(spec, layout, kernel)
    if layers is None:
        return False
    head = LATENT if mla else HEAD
    geo = vllm_layout.geometry(backend, layers[0], head, 1 if mla else HEADS, BLOCK)
    lay = vllm_layout.layout(geo, layers, BLOCK)
    ns = namespace(client, dtype, mla)
    keys = keys_for(backend, rule, dtype, layout.name, kernel, mla, check_rule)
    ids = [1, 4, 2]
    stored, status = ns.store_paged(0, lay, keys[: 3 * 32], vllm_layout.indices(geo, ids, BLOCK))
    assert stored == 3 and status == [0, 0, 0], status
    expect = [backend_kv(check_rule or rule, v, geo.pages_per_block) for v in layers]
    bufs = [bytearray(ns.info["shard_bytes"]) for _ in ids]
    got, _ = ns.load(0, keys[: 3 * 32], bufs)
    assert got == 3
    for i, b in enumerate(ids):
        want = b"".join(bytes(e[b].flatten().numpy()) for e in expect)
        assert bytes(bufs[i]) == want, f"block {b}: kvtierd's bytes are not the backend's K/V"
    # Back: into zeroed views, only the loaded blocks change.
    for v in layers:
        v.view(torch.uint8).zero_() if v.element_size() == 1 else v.zero_()
    loaded, status = ns.load_paged(0, lay, keys[: 3 * 32], vllm_layout.indices(geo, ids, BLOCK))
    assert loaded == 3, status
    for layer, (v, e) in enumerate(zip(layers, expect)):
        now = backend_kv(check_rule or rule, v, geo.pages_per_block)
        for b in range(BLOCKS):
            want = e[b] if b in ids else torch.zeros_like(e[b])
            assert torch.equal(now[b], want), f"layer {layer} block {b} after the load"
    return True


@pytest.mark.parametrize("backend", CELL_BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cell_backends(client, backend, dtype):
    """K and V side by side in each cell, in every layout order and split."""
    ran = 0
    for layout, kernel in itertools.product(KVCacheLayout, KERNELS):
        ran += round_trip(client, backend, vllm_layout.CELL, dtype, layout, kernel)
    # Every order unsplit, the layer-compact ones split too.
    assert ran >= len(KVCacheLayout) + 2 * 2, ran


@pytest.mark.parametrize("backend", MLA_BACKENDS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float8_e4m3fn], ids=str)
def test_mla_backends(client, backend, dtype):
    """One latent plane, one head slot."""
    ran = 0
    for layout, kernel in itertools.product(KVCacheLayout, KERNELS):
        ran += round_trip(client, backend, vllm_layout.LATENT, dtype, layout, kernel, mla=True)
    assert ran >= len(KVCacheLayout), ran


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_cpu_backend(client, dtype):
    """K rows then V rows per head; layouts whose head rows are not
    contiguous are refused, not copied wrong."""
    ran = refused = 0
    for layout, kernel in itertools.product(KVCacheLayout, KERNELS):
        try:
            ran += round_trip(client, "CPU_ATTN", vllm_layout.ROWS, dtype, layout, kernel)
        except vllm_layout.LayoutError as e:
            assert "CPU_ATTN" in str(e) and "contiguous" in str(e)
            refused += 1
    assert ran >= 4 and refused >= 2, (ran, refused)


def test_wrong_rule_shows(client):
    """The negative control: the FlashAttention rule on CPU_ATTN's views
    stores bytes that are not CPU_ATTN's K and V."""
    with pytest.raises(AssertionError, match="not the backend's K/V"):
        round_trip(client, "FLASH_ATTN", vllm_layout.CELL, torch.bfloat16, KVCacheLayout.LBHNC,
                   None, check_rule=vllm_layout.ROWS)


def test_unknown_backend_and_quantised_cache_fail_closed():
    spec = spec_of(torch.bfloat16, False)
    layers = views(spec, KVCacheLayout.LBNHC, None)
    with pytest.raises(vllm_layout.LayoutError, match="ROCM_AITER_FA.*is not one kvtier knows"):
        vllm_layout.geometry("ROCM_AITER_FA", layers[0], HEAD, HEADS, BLOCK)
    # A content axis wider than K and V (scales beside them).
    with pytest.raises(vllm_layout.LayoutError, match="quantised"):
        vllm_layout.geometry("FLASH_ATTN", layers[0], HEAD - 2, HEADS, BLOCK)
    # Pages that do not divide the block.
    with pytest.raises(vllm_layout.LayoutError, match="do not divide"):
        vllm_layout.geometry("FLASH_ATTN", layers[0], HEAD, HEADS, 48)


def test_rules_name_real_backends():
    """The names in RULES are the ones vLLM's backends give (those that
    import on the CPU)."""
    import importlib

    found = 0
    for mod, cls in [("vllm.v1.attention.backends.flash_attn", "FlashAttentionBackend"),
                     ("vllm.v1.attention.backends.triton_attn", "TritonAttentionBackend"),
                     ("vllm.v1.attention.backends.flex_attention", "FlexAttentionBackend"),
                     ("vllm.v1.attention.backends.cpu_attn", "CPUAttentionBackend"),
                     ("vllm.v1.attention.backends.mla.flashmla", "FlashMLABackend"),
                     ("vllm.v1.attention.backends.mla.triton_mla", "TritonMLABackend")]:
        try:
            backend = getattr(importlib.import_module(mod), cls)
        except (ImportError, AttributeError):
            continue
        assert backend.get_name() in vllm_layout.RULES, backend.get_name()
        found += 1
    assert found >= 3, found


# ---- transformers and FlashAttention's views ----------------------------

HF_BLOCK = 16  # tokens per block, kvtier.hf's and the views'
HF_BLOCKS = 4  # blocks of the prefix
PAGES = [5, 0, 3, 1]  # the vLLM blocks they sit in


def flash_kv(view, head, pages_per_block):
    """FlashAttention's K and V of one layer's view (flash_attn.py's split),
    as [blocks, tokens, heads, head] views into it."""
    k, v = view.transpose(1, 2).split(head, dim=-1)
    p, n, h, c = k.shape
    return (x.unflatten(0, (p // pages_per_block, pages_per_block)) for x in (k, v))


def hf_block(t, b):
    """Block b of a transformers K or V [1, heads, seq, head] as [tokens, heads, head]."""
    return t[0, :, b * HF_BLOCK:(b + 1) * HF_BLOCK].transpose(0, 1)


def flash_views(model, dtype, layout, kernel):
    """FLASH_ATTN views for the model's layers, their geometry and Layout;
    None where vLLM refuses the layout and split."""
    cfg = model.config
    spec = FullAttentionSpec(block_size=HF_BLOCK, num_kv_heads=cfg.num_key_value_heads,
                             head_size=cfg.head_dim, dtype=dtype)
    layers = views(spec, layout, kernel, n_layers=cfg.num_hidden_layers)
    if layers is None:
        return None
    geo = vllm_layout.geometry("FLASH_ATTN", layers[0], cfg.head_dim, cfg.num_key_value_heads,
                               HF_BLOCK)
    return layers, geo, vllm_layout.layout(geo, layers, HF_BLOCK)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_transformers_blocks_read_by_flash_attention(daemon, model_dir, dtype):
    """kvtier.hf stores a prefix; loaded into FLASH_ATTN views of every
    order and split, FlashAttention's split reads transformers' K and V."""
    model = load(model_dir, dtype)
    ids = kvtd.prompt_ids(HF_BLOCKS * HF_BLOCK + 3, seed=11)
    n = HF_BLOCKS * HF_BLOCK
    ref = prefix_cache(model, ids, n)
    ran = 0
    with KvtierCache(model, socket=daemon.socket, block_tokens=HF_BLOCK) as kv:
        assert kv.save(ids[:n], ref) == HF_BLOCKS
        keys = kv._keys(ids[:n])
        for layout, kernel in itertools.product(KVCacheLayout, KERNELS):
            made = flash_views(model, dtype, layout, kernel)
            if made is None:
                continue
            layers, geo, lay = made
            loaded, status = kv.ns.load_paged(0, lay, keys, vllm_layout.indices(geo, PAGES, HF_BLOCK))
            assert loaded == HF_BLOCKS, status
            for layer, view in enumerate(layers):
                k, v = flash_kv(view, model.config.head_dim, geo.pages_per_block)
                for b, page in enumerate(PAGES):
                    for got, want, what in ((k, ref.layers[layer].keys, "K"),
                                            (v, ref.layers[layer].values, "V")):
                        assert torch.equal(got[page].flatten(0, 1), hf_block(want, b)), \
                            f"{layout.name} split {kernel}: layer {layer} block {b} {what}"
            ran += 1
    assert ran >= len(KVCacheLayout), ran


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_flash_attention_blocks_restored_by_transformers(daemon, model_dir, dtype):
    """K and V written into FLASH_ATTN views through FlashAttention's split
    and stored from them are restored by kvtier.hf: the same K and V in
    every order and split, and the first one's generation has logits
    bit-identical to the prefix computed in-process."""
    model = load(model_dir, dtype)
    ids = kvtd.prompt_ids(HF_BLOCKS * HF_BLOCK + 7, seed=12)
    n = HF_BLOCKS * HF_BLOCK
    ref = prefix_cache(model, ids, n)
    ran = 0
    with KvtierCache(model, socket=daemon.socket, block_tokens=HF_BLOCK) as kv:
        keys = kv._keys(ids[:n])
        for layout, kernel in itertools.product(KVCacheLayout, KERNELS):
            made = flash_views(model, dtype, layout, kernel)
            if made is None:
                continue
            layers, geo, lay = made
            for layer, view in enumerate(layers):
                k, v = flash_kv(view, model.config.head_dim, geo.pages_per_block)
                for b, page in enumerate(PAGES):
                    k[page].copy_(hf_block(ref.layers[layer].keys, b).unflatten(0, k.shape[1:3]))
                    v[page].copy_(hf_block(ref.layers[layer].values, b).unflatten(0, v.shape[1:3]))
            stored, status = kv.ns.store_paged(0, lay, keys, vllm_layout.indices(geo, PAGES, HF_BLOCK))
            assert stored == HF_BLOCKS and status == [0] * HF_BLOCKS, status
            cache, t = kv.restore(ids)
            assert t == n, f"{layout.name} split {kernel}: restored {t} of {n} tokens"
            for layer in range(model.config.num_hidden_layers):
                assert torch.equal(cache.layers[layer].keys, ref.layers[layer].keys[:, :, :n])
                assert torch.equal(cache.layers[layer].values, ref.layers[layer].values[:, :, :n])
            if ran == 0:
                again = generate(model, ids, cache)
                want = generate(model, ids, prefix_cache(model, ids, n))
                assert torch.equal(again.sequences, want.sequences)
                assert same_logits(again, want), "logits differ from the prefix computed in-process"
            assert kv.ns.delete(keys) == HF_BLOCKS
            ran += 1
    assert ran >= len(KVCacheLayout), ran
