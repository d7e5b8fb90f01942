# SPDX-License-Identifier: Apache-2.0
"""vLLM's own cache views, built on the CPU by vLLM's allocate_kv_cache for
every KVCacheLayout order, dtype, kernel-page split and attention backend
rule, stored into a real kvtierd through kvtier.layouts and loaded
back: the bytes of each block are compared with what the backend's own
split expression reads out of the cache, in both directions.  A wrong K/V
rule must show: the FlashAttention rule applied to CPU_ATTN's views does
not give CPU_ATTN's K and V.

transformers meets FlashAttention's views there too: the blocks kvtier.hf
stored, loaded into FLASH_ATTN views, are transformers' K and V by
FlashAttention's own split; blocks stored from such views, written through
that split, are restored by kvtier.hf with logits bit-identical to
recomputing the prefix."""

import itertools
import json

import pytest
import torch

import kvtd
import kvtier
import vllm_views
from kvtier import layouts
from kvtier.hf import KvtierCache
from test_hf import generate, load, prefix_cache, same_logits
from vllm_views import BLOCK, BLOCKS, HEAD, HEADS, LATENT, LAYERS

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
    vllm_views.fill(torch.empty(0, dtype=torch.uint8).set_(caches[names[0]].untyped_storage()))
    return [caches[n] for n in names]


def spec_of(dtype, mla):
    if mla:
        return MLAAttentionSpec(block_size=BLOCK, num_kv_heads=1, head_size=LATENT, dtype=dtype)
    return FullAttentionSpec(block_size=BLOCK, num_kv_heads=HEADS, head_size=HEAD, dtype=dtype)


def round_trip(client, backend, rule, dtype, layout, kernel, mla=False, check_rule=None):
    """vllm_views.round_trip on the views vLLM allocates; False where vLLM
    refuses the layout and split."""
    layers = views(spec_of(dtype, mla), layout, kernel)
    if layers is None:
        return False
    vllm_views.round_trip(client, backend, rule, layers, mla, check_rule,
                          tag=(layout.name, kernel))
    return True


@pytest.fixture(scope="module")
def daemon():
    with kvtd.Daemon() as d:
        yield d


@pytest.fixture(scope="module")
def client(daemon):
    with kvtier.Client(socket=daemon.socket, name="layout-test") as c:
        yield c


def recorded_cases() -> list[dict]:
    """The fixture of GPU runs (vllm_views.FIXTURE): the views of every
    order, split and dtype a GPU backend allocates, for each K/V rule."""
    cases = []
    for rule, mla, dtypes in [(layouts.CELL, False, DTYPES),
                              (layouts.LATENT, True, [torch.bfloat16, torch.float8_e4m3fn])]:
        for dtype, layout, kernel in itertools.product(dtypes, KVCacheLayout, KERNELS):
            layers = views(spec_of(dtype, mla), layout, kernel)
            if layers is not None:
                cases.append(vllm_views.record(layers, rule=rule, mla=mla, order=layout.name,
                                               kernel=kernel))
    return cases


def test_gpu_fixture_is_what_vllm_allocates():
    """vllm-views.json, which the GPU run rebuilds its views from, is what
    this vLLM allocates (python test_layouts.py --record rewrites it)."""
    assert vllm_views.load_fixture() == json.loads(json.dumps(recorded_cases())), \
        "vllm-views.json is stale: run python tests/engines/test_layouts.py --record"


@pytest.mark.parametrize("backend", CELL_BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cell_backends(client, backend, dtype):
    """K and V side by side in each cell, in every layout order and split."""
    ran = 0
    for layout, kernel in itertools.product(KVCacheLayout, KERNELS):
        ran += round_trip(client, backend, layouts.CELL, dtype, layout, kernel)
    # Every order unsplit, the layer-compact ones split too.
    assert ran >= len(KVCacheLayout) + 2 * 2, ran


@pytest.mark.parametrize("backend", MLA_BACKENDS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float8_e4m3fn], ids=str)
def test_mla_backends(client, backend, dtype):
    """One latent plane, one head slot."""
    ran = 0
    for layout, kernel in itertools.product(KVCacheLayout, KERNELS):
        ran += round_trip(client, backend, layouts.LATENT, dtype, layout, kernel, mla=True)
    assert ran >= len(KVCacheLayout), ran


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_cpu_backend(client, dtype):
    """K rows then V rows per head; layouts whose head rows are not
    contiguous are refused, not copied wrong."""
    ran = refused = 0
    for layout, kernel in itertools.product(KVCacheLayout, KERNELS):
        try:
            ran += round_trip(client, "CPU_ATTN", layouts.ROWS, dtype, layout, kernel)
        except layouts.LayoutError as e:
            assert "CPU_ATTN" in str(e) and "contiguous" in str(e)
            refused += 1
    assert ran >= 4 and refused >= 2, (ran, refused)


@pytest.mark.parametrize("isa", ["vec", "vec16"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_cpu_kernel_writes_what_kvtier_reads(client, isa, dtype):
    """vLLM's own CPU kernel (cpu_attn_reshape_and_cache) writes K and V of
    known tokens into its views; kvtier's blocks of those pages are those
    tokens' K and V in kvtier's block layout, and a load puts back what
    the kernel wrote."""
    from vllm import _custom_ops as ops

    head = 32  # the kernels' smallest head size
    spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=HEADS, head_size=head, dtype=dtype)
    layers = views(spec, KVCacheLayout.LBHNC, None)
    g = torch.Generator().manual_seed(11)
    slots = torch.tensor([p * BLOCK + t for p in vllm_views.STORED for t in range(BLOCK)])
    kv = []
    for v in layers:
        v.zero_()
        k, val = (torch.randn(len(slots), HEADS, head, generator=g).to(dtype) for _ in range(2))
        key_cache, value_cache = v.view(v.shape[0], HEADS, 2 * BLOCK, head).chunk(2, dim=2)
        ops.cpu_attn_reshape_and_cache(k, val, key_cache, value_cache, slots, isa)
        kv.append((k, val))
    geo = layouts.geometry("CPU_ATTN", layers[0], head, HEADS, BLOCK, cpu_isa=isa)
    lay = layouts.layout(geo, layers, BLOCK)
    ident = vllm_views.ModelIdentity(model="vllm-cpu-kernel-test", layers=LAYERS, kv_heads=HEADS,
                                     head_size=head, dtype=kvtier.dtype_name(dtype),
                                     block_tokens=BLOCK)
    ns = ident.open(client)
    keys = vllm_views.keys_for("cpu-kernel", isa, str(dtype))
    keys = keys[: kvtier.KEY_BYTES * len(vllm_views.STORED)]
    stored, _ = ns.store_paged(0, lay, keys, vllm_views.STORED)
    assert stored == len(vllm_views.STORED)
    bufs = [bytearray(ns.info["shard_bytes"]) for _ in vllm_views.STORED]
    assert ns.load(0, keys, bufs)[0] == len(bufs)
    for i, buf in enumerate(bufs):
        rows = slice(i * BLOCK, (i + 1) * BLOCK)
        want = torch.stack([torch.stack([k[rows], val[rows]]) for k, val in kv])
        got = torch.frombuffer(buf, dtype=torch.uint8).view(dtype).view(want.shape)
        assert torch.equal(got.view(torch.uint8), want.view(torch.uint8)), (isa, i)
    written = [v.clone() for v in layers]
    for v in layers:
        v.zero_()
    assert ns.load_paged(0, lay, keys, vllm_views.STORED)[0] == len(bufs)
    for v, w in zip(layers, written):
        assert torch.equal(v.view(torch.uint8), w.view(torch.uint8))
    ns.delete(keys)
    for other in ["amx", "neon", None]:
        with pytest.raises(layouts.LayoutError, match="ISA kernels"):
            layouts.geometry("CPU_ATTN", layers[0], head, HEADS, BLOCK, cpu_isa=other)


def test_wrong_rule_shows(client):
    """The negative control: the FlashAttention rule on CPU_ATTN's views
    stores bytes that are not CPU_ATTN's K and V."""
    with pytest.raises(AssertionError, match="not the backend's K/V"):
        round_trip(client, "FLASH_ATTN", layouts.CELL, torch.bfloat16, KVCacheLayout.LBHNC,
                   None, check_rule=layouts.ROWS)


def test_unknown_backend_and_quantised_cache_fail_closed():
    spec = spec_of(torch.bfloat16, False)
    layers = views(spec, KVCacheLayout.LBNHC, None)
    with pytest.raises(layouts.LayoutError, match="ROCM_AITER_FA.*is not one kvtier knows"):
        layouts.geometry("ROCM_AITER_FA", layers[0], HEAD, HEADS, BLOCK)
    # A content axis wider than K and V (scales beside them).
    with pytest.raises(layouts.LayoutError, match="quantised"):
        layouts.geometry("FLASH_ATTN", layers[0], HEAD - 2, HEADS, BLOCK)
    # Pages that do not divide the block.
    with pytest.raises(layouts.LayoutError, match="do not divide"):
        layouts.geometry("FLASH_ATTN", layers[0], HEAD, HEADS, 48)


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
        assert backend.get_name() in layouts.RULES, backend.get_name()
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
    geo = layouts.geometry("FLASH_ATTN", layers[0], cfg.head_dim, cfg.num_key_value_heads,
                               HF_BLOCK)
    return layers, geo, layouts.layout(geo, layers, HF_BLOCK)


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
            loaded, status = kv.ns.load_paged(0, lay, keys, layouts.indices(geo, PAGES, HF_BLOCK))
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
            stored, status = kv.ns.store_paged(0, lay, keys, layouts.indices(geo, PAGES, HF_BLOCK))
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


if __name__ == "__main__":
    import sys

    if sys.argv[1:] != ["--record"]:
        sys.exit("usage: test_layouts.py --record (rewrites vllm-views.json)")
    with open(vllm_views.FIXTURE, "w") as f:
        json.dump(recorded_cases(), f, indent=0)
        f.write("\n")
