# SPDX-License-Identifier: Apache-2.0
"""What makes two engines' caches interchangeable, computed the same way by
every adapter, so that transformers and vLLM share blocks of one model.

A namespace is named by the model id, a fingerprint of its weights, the KV
dtype and geometry, the block size and the tensor-parallel layout.  Change
any of these and nothing is shared.
"""

import hashlib
import os
from dataclasses import dataclass

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
            weights=self.weights, salt=self.salt, groups=list(self.groups) or None)


def shard_of(rank: int, shards: int, tp_size: int) -> tuple[int, bool]:
    """The shard a tensor-parallel rank reads, and whether it writes it.

    A namespace has a shard per rank, or one per replica group where ranks
    replicate KV heads (rank r holds head r / (tp_size / kv_heads)), or one
    for an MLA latent (docs/protocol.md, geometry): the ranks of a group
    read the same shard, and its first rank alone writes it."""
    per = tp_size // shards
    return rank // per, rank % per == 0
