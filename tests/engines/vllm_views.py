# SPDX-License-Identifier: Apache-2.0
"""vLLM's per-layer cache views without vLLM: what a backend reads out of
them, their round trip through kvtierd, and the record of the views vLLM
0.32's allocate_kv_cache makes (vllm-views.json, written and checked
against vLLM by test_layouts.py) rebuilt on any device, so that a
machine with a GPU but no vLLM copies through views shaped and strided
exactly as vLLM allocates them (test_vllm_gpu.py)."""

import hashlib
import json
import os

import torch

from kvtier import layouts
from kvtier.identity import ModelIdentity
import kvtier

LAYERS, HEADS, HEAD, LATENT = 3, 2, 16, 40
BLOCK, BLOCKS = 32, 6
STORED = [1, 4, 2]  # the vLLM blocks a round trip stores and loads
FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vllm-views.json")


def fill(raw, seed: int = 7):
    """Random bytes into a uint8 tensor (the same on every device)."""
    g = torch.Generator().manual_seed(seed)
    raw.copy_(torch.randint(0, 256, raw.shape, dtype=torch.uint8, generator=g))


def record(layers, **case) -> dict:
    """One allocation's views, as the fixture keeps them: every layer's
    storage offset, shape and strides (in elements), over one storage."""
    storage = layers[0].untyped_storage()
    assert all(v.untyped_storage().data_ptr() == storage.data_ptr() for v in layers)
    return dict(case, dtype=str(layers[0].dtype).removeprefix("torch."),
                storage_bytes=storage.nbytes(),
                layers=[{"offset": v.storage_offset(), "shape": list(v.shape),
                         "stride": list(v.stride())} for v in layers])


def views(rec: dict, device) -> list:
    """The views of a record, over a new storage on device, filled with
    random bytes."""
    dtype = getattr(torch, rec["dtype"])
    raw = torch.empty(rec["storage_bytes"], dtype=torch.uint8, device=device)
    fill(raw)
    typed = raw.view(dtype)
    return [typed.as_strided(v["shape"], v["stride"], v["offset"]) for v in rec["layers"]]


def load_fixture() -> list[dict]:
    with open(FIXTURE) as f:
        return json.load(f)


def backend_kv(rule, view, pages_per_block):
    """What the backend reads from one layer's view, by its own expression,
    as [blocks, planes, tokens, heads, content] bytes."""
    v = view.view(torch.uint8) if view.element_size() == 1 else view
    if rule == layouts.CELL:  # flash_attn.py, triton_attn.py, flex_attention.py
        head = v.shape[-1] // 2
        k, val = v.transpose(1, 2).split(head, dim=-1)
        planes = [k, val]
    elif rule == layouts.ROWS:  # cpu_attn.py, with K as its vec kernels write it
        p, h, n, _ = v.shape
        k, val = v.view((p, h, n * 2, -1)).chunk(2, dim=2)
        k = k.reshape(p, h, -1, n).transpose(2, 3)  # [D, N] per (page, head)
        planes = [k.transpose(1, 2), val.transpose(1, 2)]
    else:  # MLA: [pages, 1, tokens, latent]
        planes = [v.transpose(1, 2)]
    out = []
    for x in planes:  # [pages, tokens, heads, content] -> whole blocks
        p, n, h, c = x.shape
        out.append(x.reshape(p // pages_per_block, pages_per_block * n, h, c))
    return torch.stack(out, dim=1).contiguous().view(torch.uint8)


_namespaces = {}


def namespace(client, dtype, mla):
    key = (id(client), dtype, mla)
    if key not in _namespaces:
        ident = ModelIdentity(model="vllm-layout-test", layers=LAYERS,
                              kv_heads=1 if mla else HEADS, head_size=LATENT if mla else HEAD,
                              dtype=kvtier.dtype_name(dtype), block_tokens=BLOCK, mla=mla)
        _namespaces[key] = ident.open(client)
    return _namespaces[key]


def keys_for(*what) -> bytes:
    seed = hashlib.sha256(repr(what).encode()).digest()
    return b"".join(hashlib.sha256(seed + bytes([i])).digest() for i in range(BLOCKS))


def paged(ns):
    """A round trip's copies on the CPU path."""
    return lambda load, lay, keys, idx: (ns.load_paged if load else ns.store_paged)(0, lay, keys, idx)


def round_trip(client, backend, rule, layers, mla=False, check_rule=None, copy=None, tag=()):
    """Store blocks STORED of layers through the layout that kvtier.layouts
    derives for backend (copy: default the CPU path, or a function
    (load, layout, keys, indices) -> (copied, statuses)), compare
    kvtierd's blocks with the bytes check_rule's expression reads (default:
    backend's), then load them into zeroed views and compare again.
    Raises AssertionError on a mismatch."""
    head = LATENT if mla else HEAD
    geo = layouts.geometry(backend, layers[0], head, 1 if mla else HEADS, BLOCK,
                           cpu_isa="vec" if backend == "CPU_ATTN" else None)
    lay = layouts.layout(geo, layers, BLOCK)
    ns = namespace(client, layers[0].dtype, mla)
    copy = copy or paged(ns)
    n = len(STORED)
    keys = keys_for(backend, rule, str(layers[0].dtype), mla, check_rule, *tag)
    keys = keys[: n * kvtier.KEY_BYTES]
    idx = layouts.indices(geo, STORED, BLOCK)
    stored, status = copy(False, lay, keys, idx)
    assert stored == n and list(status) == [0] * n, status
    expect = [backend_kv(check_rule or rule, v, geo.pages_per_block).cpu() for v in layers]
    bufs = [bytearray(ns.info["shard_bytes"]) for _ in STORED]
    got, _ = ns.load(0, keys, bufs)
    assert got == n
    for i, b in enumerate(STORED):
        want = b"".join(bytes(e[b].flatten().numpy()) for e in expect)
        assert bytes(bufs[i]) == want, f"block {b}: kvtierd's bytes are not the backend's K/V"
    # Back: into zeroed views, only the loaded blocks change.
    for v in layers:
        v.view(torch.uint8).zero_() if v.element_size() == 1 else v.zero_()
    loaded, status = copy(True, lay, keys, idx)
    assert loaded == n, status
    for layer, (v, e) in enumerate(zip(layers, expect)):
        now = backend_kv(check_rule or rule, v, geo.pages_per_block).cpu()
        for b in range(BLOCKS):
            want = e[b] if b in STORED else torch.zeros_like(e[b])
            assert torch.equal(now[b], want), f"layer {layer} block {b} after the load"
    assert ns.delete(keys) == n
