# SPDX-License-Identifier: Apache-2.0
"""kvtier as a vLLM V1 KV connector.

    vllm serve MODEL --kv-transfer-config '{"kv_connector": "KvtierConnector",
        "kv_connector_module_path": "kvtier.vllm", "kv_role": "kv_both",
        "kv_connector_extra_config": {"socket": "/run/kvtierd/kvtierd.sock"}}'

Extra config keys: ``socket`` (default $KVTIER_SOCKET or kvtierd's
default), ``salt`` (a string that narrows sharing to engines that give the
same one), ``model_name`` and ``weights`` (hex) to override the namespace
identity (default: the model path and a fingerprint of its weight files, as
kvtier.hf computes it, so that both engines share blocks), and ``end``:
what a finished request tells kvtierd of its blocks when the request
itself does not say ("none", the default; "request"; "session"), and
``codec``: how blocks are stored, "none" (the default), "fp8-e4m3" or
"int4" (kvtier.CODECS): quantised by this process's copies, shared only
with engines that ask for the same codec.  A cache that is fp8 already
(``--kv-cache-dtype fp8``) is stored as it is whatever the codec; codecs
are encoded on the CPU and, where kvtier is built with CUDA
(kvtier.HAVE_CUDA), on the GPU; a connector on a GPU without it refuses
one other than none.

Lifecycle hints: a request may say, in its kv_transfer_params
(``SamplingParams(extra_args={"kv_transfer_params": {"kvtier": {...}}})``),
``shared_tokens`` (its leading prompt tokens that every request shares, a
system prompt: retained at ``shared_priority``, default 90, for as long as
kvtierd runs), and ``end``: when it finishes, "session" demotes its blocks
after the shared ones (the conversation is over), "request" the ones
nobody else used, "none" nothing.  On conversation traces an end of
request costs the next turn its hits (docs/workload.md), hence the default.

Per step: the scheduler asks kvtierd for the leading run of a new prompt's
blocks (one LOOKUP, never a wait; every full block, the last one of a
prompt that ends on a block boundary too: vLLM loads it and computes the
prompt's last token again) and tells the workers which of their pages to
fill.  Every load
is asynchronous to vLLM: the request waits in WAITING_FOR_REMOTE_KVS
while the worker's mover thread copies its blocks (waiting first for any
staging from NVMe or a remote tier), and the batch goes on without it;
the workers report the load done, with the blocks that failed, before
vLLM schedules the request.  After the forward, every full prompt block
the step computed that kvtierd does not hold yet is stored, by the mover
while the next step computes.  The pages a copy under way reads or
writes are pinned in vLLM's block pool from the step that hands it to
the mover until every worker has reported it done, so that no page is
given to another request under a copy: not when the request finishes,
is preempted or is aborted, and not when a sliding window leaves it.

A block that fails to load is reported before vLLM computes anything of
its request, so vLLM never computes over pages a load left unfilled:
with ``kv_load_failure_policy`` "recompute" it computes the request from
that block on, with the tokens of a run without kvtier, and the
connector stores those blocks; with "fail" (vLLM's default) the request
ends with an error.  Under vLLM's asynchronous scheduling (the default on
GPUs) as under synchronous, no block computed after a failed load is
stored, so kvtierd holds nothing a later request could restore wrong
(tests/engines/test_vllm_failures.py).  Without kvtierd (absent, killed,
restarting) lookups miss and stores are skipped, and the connector
reconnects by itself.

On a GPU the copies run on the library's CUDA streams, from the mover's
thread: a load after an event recorded on the compute stream when it is
handed over (the pages may still be read by work queued before), a store
after an event recorded at the end of the forward, copying while the
next step computes, its pages pinned as on the CPU.

Hybrid models (vLLM's hybrid KV cache allocator, several KV cache groups:
sliding-window layers beside full attention): one namespace of a layer
group per KV cache group, in vLLM's group order, each group's layers read
through its own pages.  A sliding-window group keeps pages only for the
blocks its window still sees: a load leaves the others alone (the block
holds them, for a request whose window ends there), and a block is stored
only when every group holds its pages.  vLLM recomputes a hybrid
request's failed load as a whole (failed_recving), not block by block.
Mamba and other groups without per-token pages are refused at start.

Layouts: each layer's cache is read from the view vLLM allocated, by its
strides and the attention backend's K/V rule (kvtier.layouts: the
FlashAttention, Triton, Flex and FlashInfer backends, FlashMLA and the
other MLA backends, CPU_ATTN), in every KVCacheLayout order and with
kernel pages smaller than vLLM's blocks.  A backend, dtype or layout it
does not know is refused at start with a message naming it.

Tensor parallelism: every rank stores its shard (the ranks of a group
that replicates KV heads, and the ranks of an MLA model, share one, which
the group's first rank writes).  A load that fails on any rank reaches
vLLM's scheduler through its aggregation of the ranks' outputs, which
reports the load done only once every rank has, with the failed blocks
of all: every rank then computes the request from the first of them.
"""

import logging
from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorRole,
    KVConnectorTransferResults,
    SupportsHMA,
)

from .. import vllm_stats
from .config import config_of, identity_of  # noqa: F401
from .metadata import KvtierConnectorMetadata, KvtierWorkerMetadata, Transfer  # noqa: F401
from .scheduler import KvtierScheduler
from .worker import KvtierWorker

log = logging.getLogger("kvtier.vllm")


class KvtierConnector(KVConnectorBase_V1, SupportsHMA):
    """vLLM V1 KV connector backed by kvtierd (see the module docstring):
    vLLM makes one per role, and each hands its role's calls to its side,
    kvtier.vllm.scheduler's or kvtier.vllm.worker's."""

    def __init__(self, vllm_config, role: KVConnectorRole, kv_cache_config=None):
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        config = config_of(vllm_config, self._kv_transfer_config, kv_cache_config)
        self._scheduler: KvtierScheduler | None = None
        self._worker: KvtierWorker | None = None
        if role == KVConnectorRole.SCHEDULER:
            self._scheduler = KvtierScheduler(config, self._kv_transfer_config)
        else:
            self._worker = KvtierWorker(config, vllm_config, kv_cache_config)

    @property
    def requires_kv_delivery(self) -> bool:
        # A best-effort cache: a preempted request's output in flight need
        # not be dropped, since the pages a store under way reads stay
        # pinned until it is done, and a store that does not happen is a
        # miss later.
        return False

    @property
    def side(self):
        """This role's side: a KvtierScheduler or a KvtierWorker."""
        return self._scheduler or self._worker

    @property
    def stats(self) -> dict[str, int]:
        """This side's counters (kvtier.vllm's docstring)."""
        return self.side.stats

    def shutdown(self):
        self.side.shutdown()

    @classmethod
    def build_kv_connector_stats(cls, data=None):
        return vllm_stats.KvtierStats(data=dict(data or {}))

    @classmethod
    def build_prom_metrics(cls, vllm_config, metric_types, labelnames, per_engine_labelvalues):
        return vllm_stats.KvtierPromMetrics(vllm_config, metric_types, labelnames,
                                            per_engine_labelvalues)

    # ------------------------------------------------------------ scheduler

    def bind_gpu_block_pool(self, gpu_block_pool) -> None:
        self._scheduler.bind_gpu_block_pool(gpu_block_pool)

    def get_num_new_matched_tokens(self, request, num_computed_tokens: int):
        return self._scheduler.get_num_new_matched_tokens(request, num_computed_tokens)

    def update_state_after_alloc(self, request, blocks, num_external_tokens: int):
        self._scheduler.update_state_after_alloc(request, blocks, num_external_tokens)

    def build_connector_meta(self, scheduler_output) -> KvtierConnectorMetadata:
        return self._scheduler.build_connector_meta(scheduler_output)

    def request_finished(self, request, block_ids):
        return self._scheduler.request_finished_all_groups(request, (block_ids,))

    def request_finished_all_groups(self, request, block_ids):
        return self._scheduler.request_finished_all_groups(request, block_ids)

    def update_connector_output(self, connector_output):
        self._scheduler.update_connector_output(connector_output)

    def has_pending_block_frees(self) -> bool:
        return self._scheduler.has_pending_block_frees()

    def take_events(self):
        return self._scheduler.take_events() if self._scheduler else ()

    def has_pending_push_work(self) -> bool:
        return self._scheduler.has_pending_push_work()

    # --------------------------------------------------------------- worker

    def register_kv_caches(self, kv_caches):
        self._worker.register_kv_caches(kv_caches)

    def start_load_kv(self, forward_context, **kwargs: Any) -> None:
        self._worker.start_load_kv(self._get_connector_metadata())

    def wait_for_layer_load(self, layer_name: str) -> None:
        self._worker.wait_for_layer_load(layer_name)

    def save_kv_layer(self, layer_name: str, kv_layer, attn_metadata, **kwargs: Any) -> None:
        return  # blocks hold every layer: stored once the step is done

    def wait_for_save(self):
        self._worker.wait_for_save(self._get_connector_metadata())

    def drain(self) -> None:
        """Wait until the worker's copies under way are done."""
        self._worker.drain()

    def get_kv_connector_stats(self):
        return self._worker.get_kv_connector_stats() if self._worker else None

    def build_connector_worker_meta(self):
        return self._worker.build_connector_worker_meta()

    def get_block_ids_with_load_errors(self) -> set[int]:
        return self._worker.get_block_ids_with_load_errors()

    def get_finished(self, finished_req_ids):
        return self._worker.get_finished(finished_req_ids)

    def get_transfer_results(self, finished_req_ids: set[str]) -> KVConnectorTransferResults:
        _, recving = self._worker.get_finished(finished_req_ids)
        return KVConnectorTransferResults(finished_recving=set(recving or ()),
                                          failed_recving=self._worker.take_failed_recving())
