# SPDX-License-Identifier: Apache-2.0
"""Where each engine keeps its KV cache, as a kvtier :class:`Layout`: one
place for every engine's layout rules, each read from the engine's own
tensors (their strides), never from a shape assumed.

vLLM (0.32) hands a connector one view per attention layer, shaped
``[pages, head slots, tokens, content]`` and laid out in memory in any of
its ``KVCacheLayout`` orders (LBHNC, LBNHC, LHBNC, BLHNC, BLNHC, BHLNC):
the view's own strides say which, so they are read, never assumed.  What
a backend reads out of a page is its own; the rule of each backend known
here is one entry of RULES:

``cell``    K and V side by side in each (page, head, token) cell of
            2 x head_size elements: ``view.transpose(1, 2).split(head_size,
            -1)`` (FlashAttention, Triton, Flex, FlashInfer but NVFP4).
``rows``    per head, the page's K and then its V:
            ``view.view(B, H, 2N, D).chunk(2, dim=2)`` (CPU_ATTN), where
            the kernels of the vector ISAs (CPU_K_COLUMNS) write K column
            by column, ``[D, N]``, and V row by row, ``[N, D]``.
``latent``  MLA: one plane of kv_lora_rank + rope dims, one head slot,
            the same on every rank.

When the backend's kernel pages are smaller than vLLM's blocks (hybrid
models, FlashMLA's 64-token pages), the view has ``ratio`` kernel pages
per block, ``ratio`` times as many of them: a block's tokens are then named
by their slots (block x block_tokens + token), which kvtier maps to kernel
pages itself.  Anything else fails closed, naming the backend and the
layout, rather than copy bytes to the wrong place.

SGLang (0.5.23) keeps a host pool of pages for its HiCache, one tensor for
all layers in one of its host layouts (SGLANG_HOST): for MHA K and V are
the first axis, for MLA there is one latent plane; pages are named by
their index (host token index // page size).  sglang_host() reads it.

transformers (5) keeps each layer's K and V in tensors of their own,
``[batch, kv_heads, tokens, head_dim]`` (a DynamicCache's layers);
kvtier.hf copies one sequence's through a staging tensor of all layers,
``[layers, K/V, kv_heads, tokens, head_dim]`` (hf_stack, hf_unstack),
whose pages are runs of block_tokens tokens (hf_layout).
"""

from dataclasses import dataclass

from . import INDEX_PAGE, INDEX_SLOT, LAYOUT_K_COLUMNS, Layout

CELL, ROWS, LATENT = "cell", "rows", "latent"

#: The K/V rule of each attention backend whose cache kvtier understands,
#: by the name its get_name() gives.
RULES = {
    "FLASH_ATTN": CELL,
    "TRITON_ATTN": CELL,
    "FLEX_ATTENTION": CELL,
    "FLASHINFER": CELL,
    "CPU_ATTN": ROWS,
    "FLASHMLA": LATENT,
    "CUTLASS_MLA": LATENT,
    "TRITON_MLA": LATENT,
    "FLASHINFER_MLA": LATENT,
    "FLASH_ATTN_MLA": LATENT,
}


#: The ISAs of vLLM's CPU attention whose kernels keep each page's K of a
#: head as [head_size, tokens] and its V as [tokens, head_size]
#: (csrc/cpu/cpu_attn_vec.hpp and the ISAs that share its layout); AMX and
#: NEON pack K and V in tiles of their own, which kvtier does not read.
CPU_K_COLUMNS = ("vec", "vec16", "vxe", "rvv")


class LayoutError(ValueError):
    """A cache that kvtier cannot copy; the message says what to do."""


def _refuse(backend: str, view, why: str):
    raise LayoutError(
        f"kvtier: the {backend} attention backend's cache (shape {tuple(view.shape)}, "
        f"strides {tuple(view.stride())}, {view.dtype}) {why}; kvtier.vllm knows "
        f"{', '.join(sorted(RULES))}. Run without the kvtier connector, or choose one of "
        "those (VLLM_ATTENTION_BACKEND) and a block size that is a multiple of its "
        "kernel's pages")


@dataclass(frozen=True)
class Geometry:
    """One layer's cache as kvtier addresses it (byte strides)."""

    planes: int
    heads: int
    head_bytes: int
    page_tokens: int  # tokens per kernel page
    pages_per_block: int  # kernel pages per vLLM block
    stride_plane: int
    stride_page: int
    stride_token: int
    stride_head: int
    n_pages: int
    k_column_elem: int = 0  # K kept column by column, elements of this size


def geometry(backend: str, view, head_size: int, heads: int,
             block_tokens: int, cpu_isa: str | None = None) -> Geometry:
    """The geometry of one layer's view under backend's rule.

    head_size: elements of one head of K (or of the MLA latent); heads:
    the KV heads this rank holds (1 for MLA); block_tokens: vLLM's block
    size, which kvtier's blocks share; cpu_isa: for CPU_ATTN, the ISA its
    kernels run (layer.isa), which decides where they put K."""
    rule = RULES.get(backend)
    if rule is None:
        _refuse(backend, view, "is not one kvtier knows")
    if view.dim() != 4:
        _refuse(backend, view, "is not a [pages, heads, tokens, content] view")
    pages, slots, tokens, content = view.shape
    e = view.element_size()
    st = [s * e for s in view.stride()]
    if view.stride(3) != 1:
        _refuse(backend, view, "does not keep a cell's content contiguous")
    if tokens == 0 or block_tokens % tokens:
        _refuse(backend, view, f"has {tokens}-token pages, which do not divide "
                f"vLLM's {block_tokens}-token blocks")
    ratio = block_tokens // tokens
    if pages % ratio:
        _refuse(backend, view, f"has {pages} pages, not a whole number of "
                f"{block_tokens}-token blocks")
    if rule == LATENT:
        if slots != 1 or content != head_size:
            _refuse(backend, view, f"is not one {head_size}-element latent per token")
        return Geometry(1, 1, content * e, tokens, ratio, 0, st[0], st[2], st[1], pages)
    if slots != heads or content != 2 * head_size:
        _refuse(backend, view, f"does not hold {heads} KV heads of 2 x {head_size} "
                "elements per token (a quantised cache with scales is not supported)")
    if rule == CELL:
        return Geometry(2, heads, head_size * e, tokens, ratio, head_size * e, st[0], st[2],
                        st[1], pages)
    # ROWS: the backend views each head's [tokens, 2 x head_size] cells as
    # [2 x tokens, head_size] rows, which needs them contiguous.
    if view.stride(2) != content:
        _refuse(backend, view, "does not keep a head's tokens contiguous (the "
                "CPU backend reads its K rows and then its V rows)")
    if cpu_isa not in CPU_K_COLUMNS:
        _refuse(backend, view, f"is written by its {cpu_isa!r} ISA kernels, whose K and V "
                f"tiles kvtier does not read (it reads {', '.join(CPU_K_COLUMNS)})")
    return Geometry(2, heads, head_size * e, tokens, ratio, tokens * head_size * e, st[0],
                    head_size * e, st[1], pages, k_column_elem=e)


def page_tokens(view) -> int:
    """Tokens per kernel page of a vLLM view ([pages, head slots, tokens,
    content])."""
    return view.shape[2]


def by_slot(geo: Geometry, gaps: bool = False) -> bool:
    """Whether a Layout of geo names blocks by their tokens' slots: with
    kernel pages smaller than a block, or where a block may have no pages
    (gaps: a sliding-window group's pages that left the window, which vLLM
    frees), since only slots have a padding value (-1)."""
    return gaps or geo.pages_per_block > 1


def layout(geo: Geometry, tensors: list, block_tokens: int, gaps: bool = False) -> Layout:
    """The Layout of layers whose views all have geometry geo (gaps: see
    by_slot)."""
    return Layout(len(tensors), geo.planes, geo.heads, geo.head_bytes, geo.page_tokens,
                  [t.data_ptr() for t in tensors], geo.stride_plane, geo.stride_page,
                  geo.stride_token, geo.stride_head,
                  INDEX_SLOT if by_slot(geo, gaps) else INDEX_PAGE, keep=tensors,
                  n_pages=geo.n_pages, flags=LAYOUT_K_COLUMNS if geo.k_column_elem else 0,
                  elem_bytes=geo.k_column_elem)


def indices(geo: Geometry, block_ids: list[int], block_tokens: int,
            gaps: bool = False) -> list[int]:
    """What the Layout of geo names vLLM's blocks by: their ids, or their
    tokens' slots (by_slot), a block id of -1 (no pages) making padding."""
    if not by_slot(geo, gaps):
        return list(block_ids)
    return [b * block_tokens + t if b >= 0 else -1
            for b in block_ids for t in range(block_tokens)]


#: SGLang's host pool layouts: the axes of its kv_buffer, outermost first
#: (plane: K/V, absent for MLA; token: a token of the pool, pages of
#: page_size back to back; page and slot: a page and a token in it).
SGLANG_HOST = {
    ("mha", "layer_first"): ("plane", "layer", "token", "head", "dim"),
    ("mha", "page_first"): ("plane", "token", "layer", "head", "dim"),
    ("mha", "page_first_direct"): ("plane", "page", "layer", "slot", "head", "dim"),
    ("mha", "page_head"): ("plane", "page", "head", "slot", "layer", "dim"),
    ("mla", "layer_first"): ("layer", "token", "head", "dim"),
    ("mla", "page_first"): ("token", "layer", "head", "dim"),
    ("mla", "page_first_direct"): ("page", "layer", "slot", "head", "dim"),
}


def sglang_page_shape(kv_buffer, layout: str, mla: bool, page_size: int) -> list[int]:
    """The shape of one page of an SGLang host pool's kv_buffer: a flat page
    of its generic calls (get_data_page), viewed as a pool of one page."""
    axes = SGLANG_HOST[("mla" if mla else "mha", layout)]
    return [page_size if a == "token" else 1 if a == "page" else n
            for a, n in zip(axes, kv_buffer.shape)]


def sglang_page(page, dtype, shape: list[int]):
    """A flat page of SGLang's generic calls as a host pool of one page:
    its elements of dtype in the shape sglang_page_shape gives."""
    return page.view(dtype).view(shape)


def sglang_pages(host_indices, n: int, page_size: int) -> list[int]:
    """The host pool pages of n pages' tokens (host_indices: their token
    indices in the pool, page_size a page)."""
    first = host_indices[: n * page_size: page_size]
    return [int(i) // page_size for i in first.tolist()]


def sglang_host(kv_buffer, layout: str, mla: bool, page_size: int, layers: int,
                heads: int, head_size: int):
    """The Geometry of an SGLang host pool's kv_buffer in its layout, and
    the per-layer views whose data_ptr() are the layers' bases (for
    layout()).  heads: the KV heads this rank holds (1 for MLA)."""
    kind = "mla" if mla else "mha"
    axes = SGLANG_HOST.get((kind, layout))
    pool = f"SGLang's {kind.upper()} host pool in the {layout!r} layout"
    if axes is None:
        known = ", ".join(sorted(l for k, l in SGLANG_HOST if k == kind))
        raise LayoutError(f"kvtier: {pool} is not one kvtier knows (it knows {known}); "
                          "run SGLang with --hicache-mem-layout set to one of those")
    if kv_buffer.dim() != len(axes):
        raise LayoutError(f"kvtier: {pool} has shape {tuple(kv_buffer.shape)}, not the "
                          f"{len(axes)} axes {axes}")
    dim = dict(zip(axes, kv_buffer.shape))
    e = kv_buffer.element_size()
    st = {a: s * e for a, s in zip(axes, kv_buffer.stride())}
    want = {"layer": layers, "head": heads, "dim": head_size, "plane": 2, "slot": page_size}
    for a, n in want.items():
        if a in dim and dim[a] != n:
            raise LayoutError(f"kvtier: {pool} has {dim[a]} along its {a} axis where "
                              f"kvtier expects {n} (shape {tuple(kv_buffer.shape)})")
    if kv_buffer.stride(-1) != 1:
        raise LayoutError(f"kvtier: {pool} does not keep a head's elements contiguous")
    if "token" in dim:
        if dim["token"] % page_size:
            raise LayoutError(f"kvtier: {pool} holds {dim['token']} tokens, not whole "
                              f"pages of {page_size}")
        st["slot"], st["page"] = st["token"], st["token"] * page_size
        dim["page"] = dim["token"] // page_size
    geo = Geometry(2 if "plane" in dim else 1, heads, head_size * e, page_size, 1,
                   st.get("plane", 0), st["page"], st["slot"], st["head"], dim["page"])
    views = []
    for layer in range(layers):
        index = tuple(layer if a == "layer" else 0 for a in axes[:axes.index("layer") + 1])
        views.append(kv_buffer[index])
    return geo, views


def hf_shape(layers: int, heads: int, tokens: int, head_size: int) -> tuple:
    """The shape of kvtier.hf's staging tensor of tokens tokens."""
    return (layers, 2, heads, tokens, head_size)


def hf_tokens(cache_layers) -> set[int]:
    """The tokens each layer of a transformers cache holds: one count,
    unless a sliding-window layer keeps only its window."""
    return {layer.keys.shape[-2] for layer in cache_layers}


def hf_stack(cache_layers, t0: int, t1: int):
    """Tokens t0..t1 of a transformers cache (its first sequence), every
    layer's K and V, as one contiguous staging tensor."""
    import torch

    return torch.stack([torch.stack((layer.keys[0, :, t0:t1], layer.values[0, :, t0:t1]))
                        for layer in cache_layers]).contiguous()


def hf_unstack(kv, tokens: int) -> list:
    """Each layer's first tokens of a staging tensor as (K, V), shaped as a
    transformers cache takes them ([1, kv_heads, tokens, head_dim])."""
    return [(kv[layer, 0, :, :tokens].unsqueeze(0), kv[layer, 1, :, :tokens].unsqueeze(0))
            for layer in range(kv.shape[0])]


def hf_layout(kv, block_tokens: int) -> Layout:
    """The Layout of a staging tensor whose pages are consecutive runs of
    block_tokens tokens."""
    e = kv.element_size()
    n_layers, _, heads, seq, dim = kv.shape
    base = kv.data_ptr()
    return Layout(n_layers, 2, heads, dim * e, block_tokens,
                  [base + l * kv.stride(0) * e for l in range(n_layers)],
                  kv.stride(1) * e, block_tokens * dim * e, dim * e,
                  kv.stride(2) * e, INDEX_PAGE, keep=kv,
                  n_pages=seq // block_tokens)
