# SPDX-License-Identifier: Apache-2.0
"""What the two sides tell each other each step: the scheduler's
connector metadata (the workers' loads and stores) and the workers'
metadata back (the copies they have done with, and, where vLLM publishes
KV events, which blocks of them they did not store or found gone)."""

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
    # The scheduler's id of the transfer, under which it pins the pages
    # and names its blocks in KV events (0: none).
    pin: int = 0
    # The request's failed loads the scheduler had heard of when it built
    # the transfer: a store built before it heard of one holds what a
    # step computed over pages that load never filled.
    failures: int = 0


@dataclass
class KvtierConnectorMetadata(KVConnectorMetadata):
    # Loads of requests that wait (vLLM's WAITING_FOR_REMOTE_KVS) until
    # get_finished says they are loaded, failed blocks and all: vLLM
    # computes nothing of a request before it knows what it must compute.
    loads: list[Transfer] = field(default_factory=list)
    stores: list[Transfer] = field(default_factory=list)
    # The step computes nothing (its requests wait for their loads): the
    # workers wait for a load under way to end before they report, rather
    # than have vLLM step again at once.
    idle: bool = False


@dataclass
class KvtierWorkerMetadata(KVConnectorWorkerMetadata):
    """What workers tell the scheduler: the pins of the transfers they
    have done with, each counted once per worker; with KV events, per pin
    the blocks (indices in the transfer) a store did not commit, and those
    a load found missing or the worker deleted."""

    done: Counter = field(default_factory=Counter)
    unstored: dict[int, set[int]] = field(default_factory=dict)
    gone: dict[int, set[int]] = field(default_factory=dict)

    def aggregate(self, other: "KVConnectorWorkerMetadata") -> "KVConnectorWorkerMetadata":
        if isinstance(other, KvtierWorkerMetadata):
            self.done.update(other.done)
            for mine, theirs in ((self.unstored, other.unstored), (self.gone, other.gone)):
                for pin, blocks in theirs.items():
                    mine.setdefault(pin, set()).update(blocks)
        return self
