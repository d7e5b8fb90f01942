# SPDX-License-Identifier: Apache-2.0
"""What makes two engines' caches interchangeable, computed the same way by
every adapter, so that transformers and vLLM share blocks of one model.

A namespace is named by the model id, a fingerprint of its weights, the KV
dtype and geometry, the block size, the tensor-parallel layout and the
codec its blocks are stored in.  Change any of these and nothing is shared.

Codecs (``CODECS``): "none" stores the cache's own bytes; "fp8-e4m3" and
"int4" store blocks quantised (proto/codec.h), in this process's copies
between the cache and kvtierd's pool, so that every tier holds two or four
times the blocks.  They read float32, float16 and bfloat16 caches; a cache
that is already fp8 or int8 is stored as it is, never quantised twice (its
identity's codec is "none", and one INFO line says so).  The CUDA copy
path encodes them too where kvtier is built with CUDA (``HAVE_CUDA``); a
cache on another device takes "none".
"""

import hashlib
import logging
import os
from dataclasses import dataclass

from ._kvtier import CODECS, HAVE_CUDA

log = logging.getLogger("kvtier")

#: dtype codes that are part of the namespace identity (kvtier's own
#: numbering, shared by every adapter).
DTYPES = {
    "float32": 1,
    "float16": 2,
    "bfloat16": 3,
    "float8_e4m3fn": 4,
    "float8_e5m2": 5,
    "int8": 6,
    "uint8": 7,
}
#: Bytes of one element of each.
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}

# Other names engines give the same dtypes (vLLM's cache_dtype).
_ALIASES = {"fp8": "float8_e4m3fn", "fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2",
            "half": "float16", "float": "float32"}


def dtype_name(dtype) -> str:
    """The canonical name of a dtype given as a name, an alias or a torch
    dtype ("torch.bfloat16")."""
    name = str(dtype).removeprefix("torch.")
    name = _ALIASES.get(name, name)
    if name not in DTYPES:
        raise ValueError(f"kvtier: no dtype code for {dtype!r}; known: {', '.join(DTYPES)}")
    return name


def dtype_code(dtype) -> int:
    """The code of a dtype (see dtype_name)."""
    return DTYPES[dtype_name(dtype)]


def codec_name(codec) -> str:
    """The canonical name of a codec given as a name of CODECS, its index,
    or None ("none")."""
    if codec is None:
        return "none"
    if isinstance(codec, int) and not isinstance(codec, bool) and 0 <= codec < len(CODECS):
        return CODECS[codec]
    if isinstance(codec, str) and codec.strip().lower() in CODECS:
        return codec.strip().lower()
    raise ValueError(f"kvtier: unknown codec {codec!r}; one of: {', '.join(CODECS)}")


def stored_codec(codec, dtype: str) -> str:
    """The codec a cache of dtype (a canonical name) is stored in when codec
    is asked for: codec itself for the float dtypes a codec reads, "none"
    for a cache that is quantised already (fp8, int8), with an INFO line."""
    codec = codec_name(codec)
    if codec != "none" and dtype not in DTYPE_BYTES:
        log.info("kvtier: the KV cache is %s already: stored as it is, not as %s "
                 "(codec none)", dtype, codec)
        return "none"
    return codec


# Bytes read from each weights file: its header and evenly spaced samples.
_SAMPLES = 16
_SAMPLE_BYTES = 64 << 10


def weights_fingerprint(model_dir: str) -> bytes:
    """SHA-256 of a model directory's weight files: each file's name, size,
    first 64 KiB (a safetensors header names every tensor) and 16 samples of
    64 KiB spread over it.  Cheap for a 100 GB model, and any retrained or
    re-quantised model differs.  b"" when model_dir is not a local directory
    (the model id alone then names the weights)."""
    if not model_dir or not os.path.isdir(model_dir):
        return b""
    names = sorted(
        n for n in os.listdir(model_dir)
        if n.endswith((".safetensors", ".bin", ".pt", ".gguf"))
    )
    if not names:
        return b""
    h = hashlib.sha256()
    for n in names:
        path = os.path.join(model_dir, n)
        size = os.path.getsize(path)
        h.update(n.encode() + b"\0" + size.to_bytes(8, "little"))
        with open(path, "rb") as f:
            h.update(f.read(_SAMPLE_BYTES))
            for i in range(1, _SAMPLES + 1):
                f.seek(size * i // (_SAMPLES + 1))
                h.update(f.read(_SAMPLE_BYTES))
    return h.digest()


# The library takes model names of 1..256 bytes.
_MODEL_MAX = 256


def model_id(name_or_path: str) -> str:
    """The model part of the identity: a local directory by its real path,
    anything else (a hub name) as it is.  A name longer than the library
    takes keeps its start and ends in a digest of the whole, so that two
    long names never become one."""
    name = str(name_or_path).rstrip("/")
    name = os.path.realpath(name) if os.path.isdir(name) else name
    raw = name.encode()
    if len(raw) <= _MODEL_MAX:
        return name
    digest = hashlib.sha256(raw).hexdigest()
    head = raw[: _MODEL_MAX - len(digest) - 1].decode(errors="ignore")
    return f"{head}#{digest}"


@dataclass(frozen=True)
class ModelIdentity:
    """One rank's view of a model's KV cache, as open_namespace wants it."""

    model: str
    layers: int
    kv_heads: int  # total over all tensor-parallel ranks
    head_size: int  # elements per head
    dtype: str  # KV cache dtype, canonical name (dtype_name)
    block_tokens: int
    weights: bytes = b""
    tp_size: int = 1
    salt: bytes = b""
    mla: bool = False  # one latent per token (kv_heads 1, head_size its width)
    # A hybrid model's layer groups in block order, as (layers, sliding
    # window or 0) pairs adding up to layers; () for one group of all.
    groups: tuple[tuple[int, int], ...] = ()
    # How blocks are stored (a name of CODECS, its index or None as asked;
    # canonical once made: "none" for a cache that is fp8 or int8 already).
    codec: str = "none"

    def __post_init__(self):
        object.__setattr__(self, "codec", stored_codec(self.codec, self.dtype))

    @property
    def elem_bytes(self) -> int:
        return DTYPE_BYTES.get(self.dtype, 1)

    @property
    def heads_per_rank(self) -> int:
        """KV heads one rank holds: with more ranks than heads, a replica
        of one."""
        return 1 if self.mla else max(1, self.kv_heads // self.tp_size)

    def open(self, client):
        """Open this identity's namespace on client."""
        return client.open_namespace(
            self.model, self.layers, 1 if self.mla else self.kv_heads,
            self.head_size * self.elem_bytes, self.block_tokens,
            dtype_code(self.dtype), tp_size=self.tp_size, mla=self.mla,
            weights=self.weights, salt=self.salt, groups=list(self.groups) or None,
            codec=self.codec)

    def check_device(self, device_type: str, adapter: str) -> None:
        """Refuse (NotImplementedError) a codec other than none for a cache on
        a device whose copy path does not encode it: the CPU path does, and
        the CUDA path where this kvtier is built with CUDA (HAVE_CUDA)."""
        if self.codec == "none" or device_type == "cpu" or (device_type == "cuda" and HAVE_CUDA):
            return
        why = ("this kvtier is built without CUDA" if device_type == "cuda"
               else f"kvtier has no copy path for {device_type}")
        raise NotImplementedError(
            f"{adapter}: codec {self.codec!r} is encoded by kvtier's CPU and CUDA copy paths, "
            f"this KV cache is on {device_type} and {why}; use codec 'none' (the default) "
            "on this device")


def shard_of(rank: int, shards: int, tp_size: int) -> tuple[int, bool]:
    """The shard a tensor-parallel rank reads, and whether it writes it.

    A namespace has a shard per rank, or one per replica group where ranks
    replicate KV heads (rank r holds head r / (tp_size / kv_heads)), or one
    for an MLA latent (docs/protocol.md, geometry): the ranks of a group
    read the same shard, and its first rank alone writes it."""
    per = tp_size // shards
    return rank // per, rank % per == 0
