# SPDX-License-Identifier: Apache-2.0
"""SGLang's own HiCache host pools, built on the CPU, and kvtier.sglang
made by SGLang's own storage backend factory over them.  Run as a script,
fresh backends in a process of their own load pages and save what they
read (test_sglang.py):

    sglang_pools.py REQUESTS.json RESULTS.pt
"""

import json
import sys

import torch
from sglang.srt.mem_cache.device_pool_info import (
    KVBufferLayout,
    KVBuffers,
    MHABufferInfo,
    MLABufferInfo,
)
from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost
from sglang.srt.mem_cache.pool_host.mla import MLATokenToKVPoolHost
from sglang.srt.mem_cache.storage import StorageBackendFactory

LAYERS, HEADS, HEAD, PAGE, DEVICE_TOKENS = 3, 2, 16, 16, 64
LORA, ROPE = 32, 8  # MLA: the latent of kv_lora_rank + rope dims
DTYPE = torch.bfloat16
MHA_LAYOUTS = ["layer_first", "page_first", "page_first_direct", "page_head"]
MLA_LAYOUTS = ["layer_first", "page_first", "page_first_direct"]
MODEL = "sglang-test-model"


def _ptrs(ts):
    return torch.tensor([t.data_ptr() for t in ts], dtype=torch.uint64)


def host_pool(layout: str, mla: bool = False, heads: int = HEADS, seed: int = 1,
              layers: int = 0, head: int = 0, dtype=DTYPE, page: int = PAGE):
    """SGLang's host pool class in layout, over device buffers on the CPU,
    its pages (of page tokens; DEVICE_TOKENS // PAGE device pages, twice
    as many host pages) filled with random bytes (seed); layers and head:
    LAYERS and HEAD unless given."""
    cpu, n_layers, head_dim = torch.device("cpu"), layers or LAYERS, head or HEAD
    device_tokens = DEVICE_TOKENS // PAGE * page
    if mla:
        bufs = tuple(torch.zeros(device_tokens, 1, LORA + ROPE, dtype=dtype)
                     for _ in range(n_layers))
        info = MLABufferInfo(buffers=bufs, data_ptrs=_ptrs(bufs),
                             layer_indices=tuple(range(n_layers)), device_layer_num=n_layers,
                             page_size=page, kv_lora_rank=LORA, qk_rope_head_dim=ROPE,
                             kv_cache_dim=LORA + ROPE, dtype=dtype, device=cpu)
        pool = MLATokenToKVPoolHost(info, 2.0, 0, page, layout, pin_memory=False, device="cpu",
                                    device_capacity_tokens=device_tokens, start_layer=0,
                                    end_layer=n_layers, target_layer_num=n_layers)
    else:
        k, v = ([torch.zeros(device_tokens, heads, head_dim, dtype=dtype)
                 for _ in range(n_layers)] for _ in range(2))
        k, v = tuple(k), tuple(v)
        info = MHABufferInfo(buffers=KVBuffers(k=k, v=v, k_data_ptrs=_ptrs(k),
                                               v_data_ptrs=_ptrs(v), layout=KVBufferLayout.NHD),
                             page_size=page, head_num=heads, head_dim=head_dim,
                             v_head_dim=head_dim, dtype=dtype, device=cpu)
        pool = MHATokenToKVPoolHost(info, 2.0, 0, page, layout, pin_memory=False, device="cpu",
                                    device_capacity_tokens=device_tokens, start_layer=0,
                                    end_layer=n_layers)
    raw = pool.kv_buffer.view(torch.uint8)
    g = torch.Generator().manual_seed(seed)
    raw.copy_(torch.randint(0, 256, raw.shape, dtype=torch.uint8, generator=g))
    return pool


def model_pool(config, layout: str, seed: int, dtype, page: int = PAGE):
    """host_pool() for a transformers model's geometry (its config)."""
    return host_pool(layout, heads=config.num_key_value_heads, seed=seed,
                     layers=config.num_hidden_layers, head=config.head_dim, dtype=dtype,
                     page=page)


def hicache_keys(ids, page: int = PAGE) -> list[str]:
    """SGLang's own page hashes (HiCache's keys) of ids' full pages."""
    from sglang.srt.mem_cache.utils import get_hash_str

    return get_hash_str(ids[: len(ids) // page * page], None, page)


def page_kv(pool, page: int) -> torch.Tensor:
    """Page `page` of a host pool as [layers, planes, tokens, heads, dim],
    indexed as SGLang's init_kv_buffer lays each layout out (the tests'
    reference, apart from kvtier.layouts' table)."""
    kv, s, e = pool.kv_buffer, page * pool.page_size, (page + 1) * pool.page_size
    if isinstance(pool, MLATokenToKVPoolHost):
        x = {"layer_first": lambda: kv[:, s:e],
             "page_first": lambda: kv[s:e].permute(1, 0, 2, 3),
             "page_first_direct": lambda: kv[page]}[pool.layout]()
        return x.unsqueeze(1)
    return {"layer_first": lambda: kv[:, :, s:e].permute(1, 0, 2, 3, 4),
            "page_first": lambda: kv[:, s:e].permute(2, 0, 1, 3, 4),
            "page_first_direct": lambda: kv[:, page].permute(1, 0, 2, 3, 4),
            "page_head": lambda: kv[:, page].permute(3, 0, 2, 1, 4)}[pool.layout]()


def host_indices(pages, page: int = PAGE) -> torch.Tensor:
    """The token indices of pages (of page tokens), as SGLang's cache
    controller passes them."""
    return torch.cat([torch.arange(p * page, (p + 1) * page, dtype=torch.int64) for p in pages])


def storage_config(socket: str, mla: bool = False, tp_rank: int = 0, tp_size: int = 1,
                   pp_size: int = 1, model: str = MODEL, metrics: bool = False,
                   **extra) -> HiCacheStorageConfig:
    cfg = {"backend_name": "kvtier", "module_path": "kvtier.sglang",
           "class_name": "KvtierStorage", "interface_v1": 1, "socket": socket, **extra}
    return HiCacheStorageConfig(tp_rank=tp_rank, tp_size=tp_size, pp_rank=0, pp_size=pp_size,
                                attn_cp_rank=0, attn_cp_size=1, is_mla_model=mla,
                                enable_storage_metrics=metrics, is_page_first_layout=False,
                                model_name=model, extra_config=cfg)


def backend(pool, socket: str, mla: bool = False, **kw):
    """kvtier.sglang as SGLang's cache controller attaches it: made by the
    factory by module path, then given the host pool."""
    cfg = storage_config(socket, mla, **kw)
    b = StorageBackendFactory.create_backend("dynamic", cfg, pool)
    b.register_mem_pool_host(pool)
    b.on_host_pools_registered()
    return b


def load_in_fresh(req: dict) -> dict:
    """A fresh backend loads the request's keys into its pool's pages:
    what it reported, and what each page holds then."""
    pool = host_pool(req["layout"], req["mla"], req.get("heads", HEADS), seed=99)
    b = backend(pool, req["socket"], req["mla"], tp_rank=req.get("tp_rank", 0),
                tp_size=req.get("tp_size", 1))
    hits = b.batch_exists(req["keys"])
    ok = b.batch_get_v1(req["keys"], host_indices(req["pages"]))
    b.close()
    return {"hits": hits, "ok": ok, "pages": [page_kv(pool, p).clone() for p in req["pages"]]}


def main(requests: str, results: str) -> None:
    """load_in_fresh for each request of a JSON list, results saved in order."""
    with open(requests) as f:
        reqs = json.load(f)
    torch.save([load_in_fresh(r) for r in reqs], results)


if __name__ == "__main__":
    main(*sys.argv[1:3])
