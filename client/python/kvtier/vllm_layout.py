# SPDX-License-Identifier: Apache-2.0
"""Where vLLM keeps a layer's KV cache, as a kvtier :class:`Layout`.

vLLM (0.32) hands a connector one view per attention layer, shaped
``[pages, head slots, tokens, content]`` and laid out in memory in any of
its ``KVCacheLayout`` orders (LBHNC, LBNHC, LHBNC, BLHNC, BLNHC, BHLNC):
the view's own strides say which, so they are read, never assumed.  What
a backend reads out of a page is its own; the rule of each backend known
here is one entry of RULES:

``cell``    K and V side by side in each (page, head, token) cell of
            2 x head_size elements: ``view.transpose(1, 2).split(head_size,
            -1)`` (FlashAttention, Triton, Flex, FlashInfer but NVFP4).
``rows``    per head, the page's K rows and then its V rows:
            ``view.view(B, H, 2N, D).chunk(2, dim=2)`` (CPU_ATTN).
``latent``  MLA: one plane of kv_lora_rank + rope dims, one head slot,
            the same on every rank.

When the backend's kernel pages are smaller than vLLM's blocks (hybrid
models, FlashMLA's 64-token pages), the view has ``ratio`` kernel pages
per block, ``ratio`` times as many of them: a block's tokens are then named
by their slots (block x block_tokens + token), which kvtier maps to kernel
pages itself.  Anything else fails closed, naming the backend and the
layout, rather than copy bytes to the wrong place.
"""

from dataclasses import dataclass

from . import INDEX_PAGE, INDEX_SLOT, Layout

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


def geometry(backend: str, view, head_size: int, heads: int,
             block_tokens: int) -> Geometry:
    """The geometry of one layer's view under backend's rule.

    head_size: elements of one head of K (or of the MLA latent); heads:
    the KV heads this rank holds (1 for MLA); block_tokens: vLLM's block
    size, which kvtier's blocks share."""
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
    return Geometry(2, heads, head_size * e, tokens, ratio, tokens * head_size * e, st[0],
                    head_size * e, st[1], pages)


def layout(geo: Geometry, tensors: list, block_tokens: int) -> Layout:
    """The Layout of layers whose views all have geometry geo."""
    return Layout(len(tensors), geo.planes, geo.heads, geo.head_bytes, geo.page_tokens,
                  [t.data_ptr() for t in tensors], geo.stride_plane, geo.stride_page,
                  geo.stride_token, geo.stride_head,
                  INDEX_PAGE if geo.pages_per_block == 1 else INDEX_SLOT, keep=tensors,
                  n_pages=geo.n_pages)


def indices(geo: Geometry, block_ids: list[int], block_tokens: int) -> list[int]:
    """What the Layout of geo names vLLM's blocks by: their ids, or, with
    kernel pages smaller than a block, their tokens' slots."""
    if geo.pages_per_block == 1:
        return list(block_ids)
    return [b * block_tokens + t for b in block_ids for t in range(block_tokens)]
