# SPDX-License-Identifier: Apache-2.0
"""vLLM's own cache views, built on the CPU by vLLM's allocate_kv_cache for
every KVCacheLayout order, dtype, kernel-page split and attention backend
rule, stored into a real kvtierd through kvtier.vllm_layout and loaded
back: the bytes of each block are compared with what the backend's own
split expression reads out of the cache, in both directions.  A wrong K/V
rule must show: the FlashAttention rule applied to CPU_ATTN's views does
not give CPU_ATTN's K and V."""

import hashlib
import itertools

import pytest
import torch

import kvtd
import kvtier
from kvtier import vllm_layout
from kvtier.identity import ModelIdentity

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


def views(spec, layout, kernel):
    """vLLM's per-layer views of one allocation, as its model runner makes
    them (allocate_kv_cache), filled with random bytes; None where vLLM
    itself refuses the layout and split."""
    names = [f"model.layers.{i}.self_attn.attn" for i in range(LAYERS)]
    per_block = spec.page_size_bytes * LAYERS
    block_stride = per_block if layout.is_block_outermost else None
    layer_stride, block_stride, *_ = compute_layout_strides(
        spec, BLOCKS, LAYERS, layout, fixed_strides=(None, block_stride, None, None, None))
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
