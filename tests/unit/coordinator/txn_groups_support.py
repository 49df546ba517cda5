"""Test doubles for the group coordinator's transactional-offset tests: an in-memory
`__consumer_offsets` (one list of batches per partition, offsets assigned on append) behind the
ReplicaAccess protocol, and helpers that build the batches Kafka writes there."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from odradek.coordinator import offsets as schema
from odradek.coordinator.metadata_manager import GroupMetadataManager
from odradek.coordinator.offsets import OFFSETS_TOPIC, OffsetAndMetadata
from odradek.protocol import records as rb
from odradek.protocol.control_records import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_txn_marker_batch,
)
from odradek.storage.append_origin import AppendOrigin


@dataclass
class AppendResult:
    error: int = ErrorCode.none
    base_offset: int = -1


class FakeRead:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def read_bytes(self) -> bytes:
        return self.data


class FakeLog:
    """Batches at assigned offsets; `read` returns whole batches from `offset` on."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, bytes]] = []
        self.end = 0

    def append(self, batch: bytes) -> int:
        header = rb.read_header(batch, 0)
        base = self.end
        data = bytearray(batch)
        struct.pack_into(">q", data, 0, base)  # the CRC does not cover the base offset
        self.batches.append((base, bytes(data)))
        self.end = base + header.last_offset_delta + 1
        return base

    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_message: bool = True) -> FakeRead:
        out = bytearray()
        for base, data in self.batches:
            header = rb.read_header(data, 0)
            if header.next_offset <= offset or (max_offset is not None and base >= max_offset):
                continue
            if out and len(out) + len(data) > max_bytes:
                break
            out += data
        return FakeRead(bytes(out))


@dataclass
class FakePartition:
    log: FakeLog = field(default_factory=FakeLog)
    is_leader: bool = True
    leader_epoch: int = 0

    @property
    def log_start_offset(self) -> int:
        return 0

    @property
    def log_end_offset(self) -> int:
        return self.log.end


class FakeReplicas:
    """ReplicaAccess over FakeLogs: appends complete at once (as acks=-1 on a single replica);
    `fail_next` makes the next append answer that error; `appends` records each call's origin
    and batch header."""

    def __init__(self, num_partitions: int) -> None:
        self._partitions = {(OFFSETS_TOPIC, p): FakePartition() for p in range(num_partitions)}
        self._role_listeners: dict[str, Any] = {}
        self.fail_next: int | None = None
        self.appends: list[tuple[AppendOrigin, rb.BatchHeader]] = []

    @property
    def partitions(self) -> Mapping[tuple[str, int], FakePartition]:
        return self._partitions

    @property
    def role_listeners(self) -> dict[str, Any]:
        return self._role_listeners

    def log(self, partition: int) -> FakeLog:
        return self._partitions[(OFFSETS_TOPIC, partition)].log

    def append_records(self, acks: int, timeout_ms: int,
                       entries: dict[tuple[str, int], bytes | None], *,
                       origin: AppendOrigin = AppendOrigin.CLIENT) -> Any:
        out = {}
        for tp, data in entries.items():
            assert data is not None
            self.appends.append((origin, rb.read_header(data, 0)))
            if self.fail_next is not None:
                out[tp] = AppendResult(self.fail_next)
                self.fail_next = None
                continue
            out[tp] = AppendResult(ErrorCode.none, self._partitions[tp].log.append(data))
        return out


def make_manager(replicas: FakeReplicas, num_partitions: int) -> GroupMetadataManager:
    return GroupMetadataManager(1, replicas, lambda: num_partitions, lambda: 1000)


async def load_all(manager: GroupMetadataManager, num_partitions: int, epoch: int = 0) -> None:
    """Start the manager and load every partition (as on election), waiting for the loads."""
    manager.startup()
    for p in range(num_partitions):
        manager.schedule_load(p, epoch, lambda g: None)
    for _ in range(1000):
        if manager.owned == set(range(num_partitions)):
            return
        await asyncio.sleep(0)
    raise AssertionError(f"loads did not finish: owned {manager.owned}")


# -- batches as Kafka writes them to __consumer_offsets ----------------------------------------

def offset_batch(group: str, offsets: dict[tuple[str, int], int | None], *,
                 producer_id: int = rb.NO_PRODUCER_ID, producer_epoch: int = -1,
                 timestamp: int = 1000) -> bytes:
    """Offset commit records (None: a tombstone); transactional when a producer id is given."""
    records = [(schema.offset_commit_key(group, t, p),
                None if off is None else schema.offset_commit_value(
                    OffsetAndMetadata(off, -1, "", timestamp)))
               for (t, p), off in offsets.items()]
    return rb.build_batch(records, timestamp_ms=timestamp, producer_id=producer_id,
                          producer_epoch=producer_epoch, base_sequence=rb.NO_SEQUENCE,
                          is_transactional=producer_id != rb.NO_PRODUCER_ID)


def marker_batch(producer_id: int, commit: bool, producer_epoch: int = 0,
                 coordinator_epoch: int = 0) -> bytes:
    marker = EndTransactionMarker(ControlRecordType.COMMIT if commit else ControlRecordType.ABORT,
                                  coordinator_epoch)
    return build_end_txn_marker_batch(marker, producer_id, producer_epoch, timestamp_ms=1000)


def group_batch(group: str, generation: int = 1) -> bytes:
    value = schema.GroupMetadataValue("consumer", generation, "range", None, 1000, ())
    return rb.build_batch([(schema.group_metadata_key(group),
                            schema.group_metadata_value(value))], timestamp_ms=1000)
