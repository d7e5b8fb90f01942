# SPDX-License-Identifier: Apache-2.0
"""What the two sides tell each other each step: the scheduler's
connector metadata (the workers' loads and stores) and the workers'
metadata back (the copies they have done with)."""

from collections import Counter
from dataclasses import dataclass, field

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorMetadata,
    KVConnectorWorkerMetadata,
)


@dataclass
class Transfer:
    req_id: str
    keys: bytes  # KEY_BYTES per block
    # vLLM's pages, one per key, in each KV cache group; -1 where a group
    # holds none (a sliding window's freed pages)
    block_ids: tuple[list[int], ...]
    pin: int = 0  # the scheduler's pin of the pages (0: none)


@dataclass
class KvtierConnectorMetadata(KVConnectorMetadata):
    loads: list[Transfer] = field(default_factory=list)  # this step's forward reads them
    # Runs still staging in kvtierd: their requests wait (vLLM's
    # WAITING_FOR_REMOTE_KVS) until get_finished says they are loaded.
    async_loads: list[Transfer] = field(default_factory=list)
    stores: list[Transfer] = field(default_factory=list)


@dataclass
class KvtierWorkerMetadata(KVConnectorWorkerMetadata):
    """What workers tell the scheduler: the pins of the transfers they
    have done with, each counted once per worker."""

    done: Counter = field(default_factory=Counter)

    def aggregate(self, other: "KVConnectorWorkerMetadata") -> "KVConnectorWorkerMetadata":
        if isinstance(other, KvtierWorkerMetadata):
            self.done.update(other.done)
        return self
