# SPDX-License-Identifier: Apache-2.0
"""kvtier for transformers: restore a prompt's cached prefix before
``generate`` and store what it computed after.

    from kvtier.hf import KvtierCache
    kv = KvtierCache(model)                      # connects to kvtierd
    out = kv.generate(input_ids, max_new_tokens=32)
    # or by hand:
    cache, restored = kv.restore(input_ids)      # DynamicCache or None
    out = model.generate(input_ids, past_key_values=cache, ...)
    kv.save(out.sequences[0], out.past_key_values)

Any decoder whose cache is per-layer K/V tensors of shape [batch, kv_heads,
seq, head_dim] (the ``DynamicCache`` layers of transformers 5) works; one
sequence at a time (batch 1).  A model on a GPU copies through the
library's CUDA path (kvtier.CudaContext) on the current stream.  Blocks
are kvtier's layout [layer][K/V][token][head][dim], the same bytes vLLM's
connector stores, so the two engines share blocks of one model.

``codec="fp8-e4m3"`` or ``"int4"`` stores the blocks quantised (a quarter
or an eighth of a float32 cache's bytes, half or a quarter of a bf16
one's): restored K/V are then within the codec's rounding of the computed
ones, not equal, and such blocks are shared only with engines that ask for
the same codec (kvtier.identity).  The CPU copy path encodes them, and the
CUDA path where kvtier is built with CUDA (kvtier.HAVE_CUDA).

At most floor((n-1)/block) blocks of an n-token prompt are restored: a
cache that covers the whole prompt makes ``generate`` feed the prompt again.
When kvtierd is absent or restarting, restore() finds nothing and save()
stores nothing; generation itself never fails because of kvtier.
"""

import errno
import logging

import torch

from . import HAVE_CUDA, KEY_BYTES, Client, Error, hash_chain, layouts
from .identity import ModelIdentity, dtype_name, model_id, weights_fingerprint
from .reconnect import Reconnecting

log = logging.getLogger("kvtier.hf")



def identity_of(model, block_tokens: int, model_name: str | None = None,
                weights: bytes | None = None, salt: bytes = b"",
                codec: str = "none") -> ModelIdentity:
    """The namespace identity of a transformers model's KV cache."""
    cfg = model.config.get_text_config(decoder=True)
    heads = cfg.num_attention_heads
    head_size = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    path = model_name or getattr(model.config, "_name_or_path", "") or type(model).__name__
    return ModelIdentity(
        model=model_id(path),
        layers=cfg.num_hidden_layers,
        kv_heads=getattr(cfg, "num_key_value_heads", None) or heads,
        head_size=head_size,
        dtype=dtype_name(model.dtype),
        block_tokens=block_tokens,
        weights=weights_fingerprint(path) if weights is None else weights,
        salt=salt,
        codec=codec,
    )


class KvtierCache:
    """A transformers model's prompt prefixes, kept in kvtierd.

    client: a kvtier.Client to share, or None to connect (socket, or
    $KVTIER_SOCKET).  block_tokens: tokens per kvtier block (vLLM shares
    blocks with the same value).  model_name, weights, salt: override the
    namespace identity (default: the model's path and a fingerprint of its
    weight files).  codec: how blocks are stored, "none" (default),
    "fp8-e4m3" or "int4" (kvtier.CODECS); a model on a GPU is refused one
    other than none (NotImplementedError) where kvtier has no CUDA."""

    def __init__(self, model, client: Client | None = None, socket: str | None = None,
                 block_tokens: int = 16, model_name: str | None = None,
                 weights: bytes | None = None, salt: bytes = b"", codec: str = "none"):
        self.model = model
        self.block_tokens = block_tokens
        self.identity = identity_of(model, block_tokens, model_name, weights, salt, codec)
        self.identity.check_device(self._device().type, "kvtier.hf")
        self._conn = Reconnecting(self.identity, client=client, socket=socket,
                                  name="transformers", log=log)
        self.restored_tokens = 0
        self._cuda = None
        self._namespace()

    @property
    def client(self) -> Client | None:
        return self._conn.client

    @property
    def ns(self):
        return self._conn.ns

    def _namespace(self):
        """The namespace, or None while kvtierd cannot be reached."""
        return self._conn.namespace()

    def close(self):
        if self._cuda is not None:
            self._cuda.close()
        self._conn.close()

    def _gpu_copy(self, load: bool, kv: torch.Tensor, keys: bytes, n: int) -> list[int]:
        """A copy between the pool and a cache on a GPU through the
        library's CUDA path, on the current stream; returns the statuses."""
        from . import CudaContext

        if self._cuda is None:
            self._cuda = CudaContext(self.client, kv.device.index or 0)
        submit = self._cuda.load if load else self._cuda.store
        with submit(self.ns, 0, layouts.hf_layout(kv, self.block_tokens), keys, list(range(n)),
                    torch.cuda.current_stream(kv.device).cuda_stream) as job:
            return job.wait()

    def _copy(self, load: bool, kv: torch.Tensor, keys: bytes, n: int) -> list[int]:
        if kv.device.type == "cuda":
            if not HAVE_CUDA:
                raise Error(errno.EOPNOTSUPP, "kvtier was built without CUDA: the cache is on a GPU")
            return self._gpu_copy(load, kv, keys, n)
        op = self.ns.load_paged if load else self.ns.store_paged
        return op(0, layouts.hf_layout(kv, self.block_tokens), keys, list(range(n)))[1]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _keys(self, tokens) -> bytes:
        ids = torch.as_tensor(tokens).flatten().to(torch.int64).tolist()
        return hash_chain(ids, self.block_tokens)

    def _device(self):
        return next(self.model.parameters()).device

    def restore(self, input_ids):
        """The longest stored prefix of input_ids (one sequence) as a
        DynamicCache, and the number of tokens it covers; (None, 0) when
        nothing is stored or kvtierd cannot be reached."""
        from transformers import DynamicCache

        ids = torch.as_tensor(input_ids).flatten()
        n_max = max(0, (ids.numel() - 1) // self.block_tokens)
        self.restored_tokens = 0
        if n_max == 0:
            return None, 0
        keys = self._keys(ids[: n_max * self.block_tokens])
        if self._namespace() is None:
            return None, 0
        try:
            hits, _ = self.ns.lookup(keys)
            if hits == 0:
                return None, 0
            # Those on NVMe are staged now; the leading run in host memory.
            hits = self.ns.wait_resident(keys[: hits * KEY_BYTES])
            if hits == 0:
                return None, 0
            ident = self.identity
            kv = torch.empty(layouts.hf_shape(ident.layers, ident.kv_heads,
                                              hits * self.block_tokens, ident.head_size),
                             dtype=self.model.dtype, device=self._device())
            status = self._copy(True, kv, keys[: hits * KEY_BYTES], hits)
        except (Error, ValueError) as e:  # ValueError: a layout kvtier refused
            log.warning("kvtier: restore skipped: %s", e)
            return None, 0
        # Only the leading run of loaded blocks is usable.
        good = next((i for i, s in enumerate(status) if s < 0), len(status))
        if good == 0:
            return None, 0
        t = good * self.block_tokens
        cache = DynamicCache(config=self.model.config)
        for layer, (k, v) in enumerate(layouts.hf_unstack(kv, t)):
            cache.update(k, v, layer)
        self.restored_tokens = t
        return cache, t

    def save(self, tokens, cache) -> int:
        """Store every full block of tokens whose K/V the cache holds and
        kvtierd does not; returns the number of blocks stored."""
        ids = torch.as_tensor(tokens).flatten()
        held = layouts.hf_tokens(cache.layers)
        if len(held) != 1:
            # A sliding-window layer keeps only its window: no whole blocks.
            log.warning("kvtier: save skipped: the cache's layers hold %s tokens", sorted(held))
            return 0
        n = min(ids.numel(), held.pop()) // self.block_tokens
        if n == 0:
            return 0
        keys = self._keys(ids[: n * self.block_tokens])
        if self._namespace() is None:
            return 0
        try:
            have, _ = self.ns.lookup(keys, touch=False)
            if have >= n:
                return 0
            t0, t1 = have * self.block_tokens, n * self.block_tokens
            kv = layouts.hf_stack(cache.layers, t0, t1)
            status = self._copy(False, kv, keys[have * KEY_BYTES:], n - have)
            return sum(1 for s in status if s in (0, -errno.EEXIST))
        except (Error, ValueError) as e:
            log.warning("kvtier: save skipped: %s", e)
            return 0

    def generate(self, input_ids, **kwargs):
        """model.generate with the prompt's prefix restored from kvtierd and
        the computed blocks stored after; returns what generate returns
        (return_dict_in_generate is turned on to reach the cache)."""
        cache, _ = self.restore(input_ids)
        kwargs.update(return_dict_in_generate=True, use_cache=True)
        out = self.model.generate(torch.as_tensor(input_ids).reshape(1, -1).to(self._device()),
                                  past_key_values=cache, **kwargs)
        self.save(out.sequences[0], out.past_key_values)
        return out
