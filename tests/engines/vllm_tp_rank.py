# SPDX-License-Identifier: Apache-2.0
"""One tensor-parallel rank of a vLLM worker, for test_vllm_tp.py: vLLM's
own config, its tensor-parallel group (gloo, on the CPU), its cache views
for the FlashAttention backend (allocate_kv_cache) and a KvtierConnector
worker on them.  It answers JSON commands on stdin with a JSON line each:

  {"op": "fill", "blocks": [...], "seed": S}   random bytes into those pages
  {"op": "step", "loads": [[req, keys_hex, ids]], "stores": [[req, keys_hex, ids,
   failures]]}
      one step: start_load_kv, wait_for_save, the mover's copies waited
      for; answers what the rank tells vLLM's scheduler (the loads it
      finished, the pages that failed to load) and its counters
  {"op": "digest", "blocks": [...]}             SHA-256 of each page, all layers

argv: model dir, socket, rank, init file, block size."""

import hashlib
import json
import os
import sys
from types import SimpleNamespace

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
# vLLM's CPU communicator names its shared memory by this; ranks that name
# it differently talk through torch.distributed (gloo) alone.
os.environ.setdefault("VLLM_DIST_IDENT", f"kvtier-test-{os.getpid()}")

import torch  # noqa: E402
from vllm.config import set_current_vllm_config  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole  # noqa: E402
from vllm.distributed.parallel_state import (  # noqa: E402
    init_distributed_environment,
    initialize_model_parallel,
)
from vllm.engine.arg_utils import EngineArgs  # noqa: E402
from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend  # noqa: E402
from vllm.v1.kv_cache_interface import (  # noqa: E402
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    KVCacheTensor,
    compute_layout_strides,
)
from vllm.v1.kv_cache_layout import KVCacheLayout  # noqa: E402
from vllm.v1.worker.utils import allocate_kv_cache  # noqa: E402

from kvtier.vllm import KvtierConnector  # noqa: E402
from kvtier.vllm.metadata import KvtierConnectorMetadata, Transfer  # noqa: E402

model, sock, rank, init, block = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], \
    int(sys.argv[5])
PAGES = 8
ktc = {"kv_connector": "KvtierConnector", "kv_connector_module_path": "kvtier.vllm",
       "kv_role": "kv_both", "kv_connector_extra_config": {"socket": sock}}
cfg = EngineArgs(model=model, tensor_parallel_size=2, block_size=block, dtype="bfloat16",
                 kv_transfer_config=ktc, distributed_executor_backend="mp").create_engine_config()

with set_current_vllm_config(cfg):
    init_distributed_environment(world_size=2, rank=rank, distributed_init_method=f"file://{init}",
                                 local_rank=rank, backend="gloo")
    initialize_model_parallel(tensor_model_parallel_size=2)
    mc = cfg.model_config
    layers = mc.get_num_layers(cfg.parallel_config)
    names = [f"model.layers.{i}.self_attn.attn" for i in range(layers)]
    spec = FullAttentionSpec(block_size=block, num_kv_heads=mc.get_num_kv_heads(cfg.parallel_config),
                             head_size=mc.get_head_size(), dtype=torch.bfloat16)
    layout = KVCacheLayout.LBNHC  # vLLM's default ("NHD")
    layer_stride, block_stride, *_ = compute_layout_strides(spec, PAGES, layers, layout)
    kv_cfg = KVCacheConfig(num_blocks=PAGES, kv_cache_groups=[KVCacheGroupSpec(names, spec)],
                           kv_cache_tensors=[KVCacheTensor(size=spec.page_size_bytes * layers * PAGES,
                                                           layers=names, layer_stride=layer_stride,
                                                           block_stride=block_stride)])
    caches = allocate_kv_cache(kv_cfg, torch.device("cpu"), layout)
    # The attention layers, as vLLM's model would have registered them.
    for n in names:
        cfg.compilation_config.static_forward_context[n] = SimpleNamespace(
            attn_backend=FlashAttentionBackend)
    conn = KvtierConnector(cfg, KVConnectorRole.WORKER, kv_cfg)
    conn.register_kv_caches(caches)
    pages = [caches[n].view(torch.uint8) for n in names]  # [pages, heads, tokens, bytes]

    def transfers(items):
        return [Transfer(r, bytes.fromhex(k), (list(ids),), failures=f[0] if f else 0)
                for r, k, ids, *f in items]

    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        out = {}
        if cmd["op"] == "fill":
            g = torch.Generator().manual_seed(cmd["seed"] * 1000 + rank)
            for p in pages:
                for b in cmd["blocks"]:
                    p[b].copy_(torch.randint(0, 256, p[b].shape, dtype=torch.uint8, generator=g))
        elif cmd["op"] == "step":
            conn.bind_connector_metadata(KvtierConnectorMetadata(
                loads=transfers(cmd.get("loads", [])), stores=transfers(cmd.get("stores", []))))
            conn.start_load_kv(None)
            conn.wait_for_save()
            conn.drain()  # the loads and stores the mover copies
            results = conn.get_transfer_results(set())
            conn.clear_connector_metadata()
            reported = conn.get_kv_connector_stats()  # what vLLM's statistics get
            out = {"finished": sorted(results.finished_recving),
                   "errors": sorted(conn.get_block_ids_with_load_errors()), "stats": conn.stats,
                   "reported": reported.data if reported is not None else None}
        elif cmd["op"] == "digest":
            out = {"digests": [hashlib.sha256(b"".join(bytes(p[b].contiguous().numpy())
                                                       for p in pages)).hexdigest()
                               for b in cmd["blocks"]]}
        print(json.dumps(out), flush=True)
    conn.shutdown()
