# SPDX-License-Identifier: Apache-2.0
"""The vLLM connector's worker counters in vLLM's own statistics: each
worker hands vLLM the counts since it last asked (KVConnectorStats),
vLLM sums them over workers and logging intervals, and its Prometheus
endpoint shows them as counters named ``vllm:kvtier_<counter>_total``,
labelled like vLLM's own metrics (model name, engine).
"""

from dataclasses import dataclass
from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.metrics import (
    KVConnectorPromMetrics,
    KVConnectorStats,
)

#: What each exported counter counts.
COUNTERS = {
    "loaded_blocks": "KV blocks loaded from kvtierd into vLLM's pages",
    "load_failures": "KV blocks that failed to load (vLLM recomputed them)",
    "stored_blocks": "KV blocks stored into kvtierd",
    "store_skipped": "KV blocks not stored (kvtierd unreachable, an error)",
    "async_loads": "loads of requests' prefixes (each asynchronous: the request waits for it)",
}


@dataclass
class KvtierStats(KVConnectorStats):
    """Counts since the last report, by name (COUNTERS)."""

    def __post_init__(self):
        for name in COUNTERS:
            self.data.setdefault(name, 0)

    def reset(self):
        self.data = dict.fromkeys(COUNTERS, 0)

    def aggregate(self, other: KVConnectorStats) -> KVConnectorStats:
        for name, value in other.data.items():
            if name in COUNTERS:
                self.data[name] = self.data.get(name, 0) + value
        return self

    def reduce(self) -> dict[str, int | float]:
        return {f"kvtier_{name}": self.data.get(name, 0) for name in COUNTERS}

    def is_empty(self) -> bool:
        return not any(self.data.get(name, 0) for name in COUNTERS)


def since(counters: dict[str, int], last: dict[str, int]) -> KvtierStats | None:
    """The counts of counters since last (updated to them), or None if none."""
    delta = {name: counters.get(name, 0) - last.get(name, 0) for name in COUNTERS}
    last.update({name: counters.get(name, 0) for name in COUNTERS})
    stats = KvtierStats(data=delta)
    return None if stats.is_empty() else stats


class KvtierPromMetrics(KVConnectorPromMetrics):
    """One Prometheus counter per name in COUNTERS, per engine."""

    def __init__(self, vllm_config, metric_types, labelnames, per_engine_labelvalues):
        super().__init__(vllm_config, metric_types, labelnames, per_engine_labelvalues)
        self._counters = {}
        for name, doc in COUNTERS.items():
            counter = self._counter_cls(name=f"vllm:kvtier_{name}", documentation=doc,
                                        labelnames=self._labelnames)
            self._counters[name] = {engine: counter.labels(*values)
                                    for engine, values in per_engine_labelvalues.items()}

    def observe(self, transfer_stats_data: dict[str, Any], engine_idx: int = 0):
        for name, value in transfer_stats_data.items():
            per_engine = self._counters.get(name)
            if per_engine is not None and value:
                per_engine[engine_idx].inc(value)
