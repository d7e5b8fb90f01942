# SPDX-License-Identifier: Apache-2.0
"""proto/codec.h's block formats, written again in torch from the format's
description alone: the reference the C kernels are checked against (the
bytes a codec namespace stores, decoded here, must equal what the C path
restored), and the way to build a wrong decoder on purpose.

A block of one shard of K/V (two planes) is, for each layer, plane and
head, a tile of T tokens x D elements:

  fp8-e4m3  f32 scale = amax / 448 (0 for an all-zero tile), then T*D
            E4M3 bytes of x / scale (saturating, nearest even);
  int4      K per channel: D (scale, min) half pairs, then T*D nibbles;
            V per token: T*(D/G) pairs, one per group of G = 32 channels
            (D where D is not a multiple of 32), then the nibbles;
            q = round((x - min) / scale) in 0..15, x = min + q * scale;

each tile padded to 4 bytes, little endian, nibble t*D + d (low first).
Tensors here are a block as kvtier.hf stages it: [layers, 2, heads, T, D].
"""

import torch

CODECS = ("none", "fp8-e4m3", "int4")
E4M3_MAX = 448.0
INT4_GROUP = 32


def int4_group(d: int) -> int:
    return INT4_GROUP if d % INT4_GROUP == 0 else d


def _pad4(n: int) -> int:
    return (n + 3) & ~3


def tile_bytes(codec: str, per_channel: bool, t: int, d: int) -> int:
    """Bytes of one tile (0 for none: a block is then the cache's bytes)."""
    if codec == "fp8-e4m3":
        return _pad4(4 + t * d)
    if codec == "int4":
        pairs = d if per_channel else t * (d // int4_group(d))
        return _pad4(4 * pairs + (t * d + 1) // 2)
    return 0


def block_bytes(codec: str, layers: int, heads: int, t: int, d: int, elem_bytes: int) -> int:
    if codec == "none":
        return layers * 2 * heads * t * d * elem_bytes
    return layers * heads * (tile_bytes(codec, True, t, d) + tile_bytes(codec, False, t, d))


# -- fp8-e4m3 ---------------------------------------------------------------

def _fp8_tiles(x: torch.Tensor, inverse: bool = False):
    """x [..., T, D] f32: (scales [...] f32, codes [..., T*D] uint8).
    inverse: x times 1 / scale (x / scale where that overflows)."""
    amax = x.abs().amax(dim=(-2, -1))
    scale = amax / E4M3_MAX
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))[..., None, None]
    if inverse:
        inv = 1 / safe
        y = torch.where(torch.isinf(inv), x / safe, x * inv)
    else:
        y = x / safe
    y = y.clamp(-E4M3_MAX, E4M3_MAX)
    y = torch.where(scale[..., None, None] > 0, y, torch.zeros_like(y))
    codes = y.to(torch.float8_e4m3fn).view(torch.uint8)
    return scale, codes.flatten(-2)


def _fp8_values(scale: torch.Tensor, codes: torch.Tensor, t: int, d: int) -> torch.Tensor:
    v = codes.contiguous().view(torch.float8_e4m3fn).to(torch.float32)
    return (v * scale[..., None]).reshape(*codes.shape[:-1], t, d)


# -- int4 --------------------------------------------------------------------

def _int4_pairs(lo: torch.Tensor, hi: torch.Tensor):
    """Half (scale, min) of each range, and the same back in f32."""
    scale = ((hi - lo) / 15).to(torch.float16)
    mn = lo.to(torch.float16)
    return scale, mn


def _int4_codes(x, mn, scale, inverse: bool = False):
    """inverse: (x - min) times 1 / scale, rounded half up."""
    s = scale.to(torch.float32)
    safe = torch.where(s > 0, s, 1)
    if inverse:
        y = ((x - mn.to(torch.float32)) * (1 / safe)).clamp(0, 15)
        q = torch.floor(y + 0.5)
    else:
        q = torch.round((x - mn.to(torch.float32)) / safe)
    return torch.where(s > 0, q, 0).clamp(0, 15).to(torch.uint8)


def _nibbles(q: torch.Tensor) -> torch.Tensor:
    """[..., n] codes 0..15 -> [..., ceil(n/2)] bytes, low nibble first."""
    if q.shape[-1] % 2:
        q = torch.nn.functional.pad(q, (0, 1))
    return q[..., 0::2] | (q[..., 1::2] << 4)


def _unnibble(b: torch.Tensor, n: int) -> torch.Tensor:
    return torch.stack((b & 15, b >> 4), dim=-1).flatten(-2)[..., :n]


def _pairs_bytes(scale, mn) -> torch.Tensor:
    """[..., P] half scale and min -> [..., 4P] bytes (scale, min)."""
    return torch.stack((scale, mn), dim=-1).contiguous().view(torch.uint8).flatten(-2)


def _bytes_pairs(b: torch.Tensor):
    h = b.contiguous().view(torch.float16).reshape(*b.shape[:-1], -1, 2)
    return h[..., 0].to(torch.float32), h[..., 1].to(torch.float32)


# -- blocks ------------------------------------------------------------------

def _tile_row(parts, width: int) -> torch.Tensor:
    row = torch.cat(parts, dim=-1)
    return torch.nn.functional.pad(row, (0, width - row.shape[-1]))


def encode(kv: torch.Tensor, codec: str, inverse: bool = False) -> bytes:
    """One block [layers, 2, heads, T, D] in codec's format.  The format
    fixes the scales; a code may come from x / scale rounded half to even
    (here), or, with inverse, from x times 1 / scale, int4's rounded half
    up: the other reading, which lands on the other side of a near-tie."""
    L, planes, H, T, D = kv.shape
    assert planes == 2
    if codec == "none":
        # kvtier's own layout: [layer][K/V][token][head][dim].
        return kv.permute(0, 1, 3, 2, 4).contiguous().view(torch.uint8).numpy().tobytes()
    x = kv.to(torch.float32)
    if codec == "fp8-e4m3":
        scale, codes = _fp8_tiles(x, inverse)
        row = _tile_row([scale[..., None].view(torch.uint8), codes], tile_bytes(codec, True, T, D))
        return row.numpy().tobytes()
    if codec != "int4":
        raise ValueError(f"unknown codec {codec!r}")
    k, v = x[:, 0], x[:, 1]
    # K: per channel over the block's tokens.
    ks, km = _int4_pairs(k.amin(dim=-2), k.amax(dim=-2))  # [L, H, D]
    kq = _int4_codes(k, km[..., None, :], ks[..., None, :], inverse)
    k_row = _tile_row([_pairs_bytes(ks, km), _nibbles(kq.flatten(-2))],
                      tile_bytes(codec, True, T, D))
    # V: per token, groups of G channels.
    G = int4_group(D)
    vg = v.reshape(L, H, T, D // G, G)
    vs, vm = _int4_pairs(vg.amin(dim=-1), vg.amax(dim=-1))  # [L, H, T, D/G]
    vq = _int4_codes(vg, vm[..., None], vs[..., None], inverse)
    v_row = _tile_row([_pairs_bytes(vs.flatten(-2), vm.flatten(-2)), _nibbles(vq.flatten(-3))],
                      tile_bytes(codec, False, T, D))
    # [layer][plane][head]: a layer's K tiles, then its V tiles.
    return torch.cat((k_row.flatten(1), v_row.flatten(1)), dim=-1).numpy().tobytes()


def decode(block, codec: str, layers: int, heads: int, t: int, d: int, dtype,
           scaled: bool = True) -> torch.Tensor:
    """One block's bytes back to [layers, 2, heads, T, D] of dtype, the
    arithmetic in f32 rounded once to dtype.  scaled=False drops the
    scales (fp8: scale 1; int4: scale 1, min 0): a broken decoder."""
    raw = torch.frombuffer(bytearray(bytes(block)), dtype=torch.uint8)
    L, H, T, D = layers, heads, t, d
    if codec == "none":
        return raw.view(dtype).reshape(L, 2, T, H, D).permute(0, 1, 3, 2, 4).contiguous()
    if codec == "fp8-e4m3":
        tb = tile_bytes(codec, True, T, D)
        tiles = raw[: L * 2 * H * tb].reshape(L, 2, H, tb)
        scale = tiles[..., :4].contiguous().view(torch.float32)[..., 0]
        if not scaled:
            scale = torch.ones_like(scale)
        return _fp8_values(scale, tiles[..., 4:4 + T * D], T, D).to(dtype)
    if codec != "int4":
        raise ValueError(f"unknown codec {codec!r}")
    kb, vb = tile_bytes(codec, True, T, D), tile_bytes(codec, False, T, D)
    tiles = raw[: L * H * (kb + vb)].reshape(L, H * (kb + vb))
    k_t = tiles[:, : H * kb].reshape(L, H, kb)
    v_t = tiles[:, H * kb:].reshape(L, H, vb)
    ks, km = _bytes_pairs(k_t[..., : 4 * D])  # [L, H, D]
    kq = _unnibble(k_t[..., 4 * D:], T * D).reshape(L, H, T, D).to(torch.float32)
    G = int4_group(D)
    P = T * (D // G)
    vs, vm = _bytes_pairs(v_t[..., : 4 * P])  # [L, H, T*D/G]
    vq = _unnibble(v_t[..., 4 * P:], T * D).reshape(L, H, T, D // G, G).to(torch.float32)
    if not scaled:
        ks, km, vs, vm = (torch.ones_like(ks), torch.zeros_like(km),
                          torch.ones_like(vs), torch.zeros_like(vm))
    k = km[..., None, :] + kq * ks[..., None, :]
    v = (vm.reshape(L, H, T, D // G)[..., None] + vq * vs.reshape(L, H, T, D // G)[..., None])
    return torch.stack((k, v.reshape(L, H, T, D)), dim=1).to(dtype)


def fields(block, codec: str, layers: int, heads: int, t: int, d: int):
    """A coded block's (scale bytes, codes): every tile's scale or (scale,
    min) pairs as bytes, and its codes as integers in value order (int4:
    0..15; fp8: sign and magnitude as a signed integer, so that adjacent
    E4M3 values differ by 1).  For comparing two encoders."""
    raw = torch.frombuffer(bytearray(bytes(block)), dtype=torch.uint8)
    L, H, T, D = layers, heads, t, d
    if codec == "fp8-e4m3":
        tb = tile_bytes(codec, True, T, D)
        tiles = raw[: L * 2 * H * tb].reshape(L, 2, H, tb)
        c = tiles[..., 4:4 + T * D].to(torch.int16)
        return tiles[..., :4].flatten(), torch.where(c >= 128, -(c & 127), c).flatten()
    if codec != "int4":
        raise ValueError(f"no fields in codec {codec!r}")
    kb, vb = tile_bytes(codec, True, T, D), tile_bytes(codec, False, T, D)
    tiles = raw[: L * H * (kb + vb)].reshape(L, H * (kb + vb))
    k_t = tiles[:, : H * kb].reshape(L, H, kb)
    v_t = tiles[:, H * kb:].reshape(L, H, vb)
    P = 4 * T * (D // int4_group(D))
    scales = torch.cat((k_t[..., : 4 * D].flatten(), v_t[..., :P].flatten()))
    codes = torch.cat((_unnibble(k_t[..., 4 * D:], T * D).flatten(),
                       _unnibble(v_t[..., P:], T * D).flatten()))
    return scales, codes.to(torch.int16)

