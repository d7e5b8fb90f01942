# SPDX-License-Identifier: Apache-2.0
"""kvtier: pinned host memory and NVMe tiers for an inference engine's KV cache.

The package is libkvtier-client in Python terms.  A :class:`Client` connects
to kvtierd and maps the tenant's pool; :meth:`Client.open_namespace` names a
model and its KV geometry; :func:`hash_chain` turns token ids into block keys
(``KEY_BYTES`` each; :func:`split_keys` gives them one by one); a
:class:`Namespace` looks keys up, stores and loads blocks from caller memory
or from an engine's paged cache described by a :class:`Layout`, and hands
out reservations and leases for a scheduler/worker split.  Block bytes
never cross the socket.  Where the library was built with CUDA
(``HAVE_CUDA``), :class:`CudaContext` copies between the pool and GPU pages
on CUDA streams: by the kernel or the copy engines (``copy_path``), after
the compute stream, an event of the engine's or at once (``after``), with a
layout per layer group where a namespace's groups differ in geometry
(``groups``); its arguments are checked before any CUDA call, and
:func:`cuda_unavailable` says, before any is made, why it cannot run
here (built without CUDA, no NVIDIA driver, a driver too old for the CUDA
runtime linked in, no device).  A namespace's ``codec`` (one of
:data:`CODECS`) stores its blocks quantised: the paged copies on the CPU
quantise and dequantise them.

Engine adapters: :mod:`kvtier.hf` (transformers) and :mod:`kvtier.vllm`
(a vLLM V1 KV connector).  Errors raise :class:`Error`, an OSError that
carries the errno and the daemon's reason.
"""

from ._kvtier import (  # noqa: F401
    CODECS,
    DISK,
    HAVE_CUDA,
    HOST,
    INDEX_PAGE,
    INDEX_SLOT,
    KEY_BYTES,
    LAYOUT_K_COLUMNS,
    LAYOUT_PLANE_BASES,
    MISS,
    PENDING,
    PRIORITY_DEFAULT,
    PRIORITY_MAX,
    STATS_ALL,
    STATS_CLIENTS,
    STATS_DAEMON,
    STATS_NAMESPACES,
    STATS_TENANTS,
    Client,
    Error,
    Layout,
    Namespace,
    cuda_unavailable,
    default_socket,
    hash_chain,
    protocol_version,
    version,
)
if HAVE_CUDA:
    from ._kvtier import CudaContext, CudaJob  # noqa: F401
from .identity import (  # noqa: F401
    DTYPE_BYTES,
    DTYPES,
    ModelIdentity,
    codec_name,
    dtype_code,
    dtype_name,
    weights_fingerprint,
)

__version__ = version()


def split_keys(keys: bytes) -> list[bytes]:
    """The keys of a hash_chain result (KEY_BYTES each), one bytes object
    a block."""
    return [keys[i:i + KEY_BYTES] for i in range(0, len(keys), KEY_BYTES)]


__all__ = [
    "Client", "Namespace", "Layout", "Error", "hash_chain", "version", "dtype_name", "DTYPE_BYTES",
    "protocol_version", "default_socket", "DTYPES", "dtype_code", "split_keys",
    "weights_fingerprint", "ModelIdentity", "MISS", "HOST", "DISK", "PENDING",
    "INDEX_PAGE", "INDEX_SLOT", "KEY_BYTES", "LAYOUT_K_COLUMNS", "LAYOUT_PLANE_BASES", "STATS_ALL", "STATS_DAEMON",
    "STATS_TENANTS", "STATS_NAMESPACES", "STATS_CLIENTS", "HAVE_CUDA", "PRIORITY_DEFAULT",
    "PRIORITY_MAX", "CODECS", "codec_name", "cuda_unavailable",
] + (["CudaContext", "CudaJob"] if HAVE_CUDA else [])
