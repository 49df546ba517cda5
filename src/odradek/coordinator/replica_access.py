"""What the group coordinator may ask of the broker's replica manager (Kafka's
GroupMetadataManager holds a ReplicaManager): the `__consumer_offsets` partitions hosted here,
appends to them, and a hook told when this broker leads or stops leading one. A Protocol, so the
coordinator does not import the server layer above it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from ..common import TopicPartition
from ..storage.append_origin import AppendOrigin

# f(partition, is_leader, leader_epoch); (False, -1) when the partition is no longer hosted.
RoleListener = Callable[[int, bool, int], None]


class HostedPartition(Protocol):
    @property
    def is_leader(self) -> bool: ...

    @property
    def leader_epoch(self) -> int: ...

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def log(self) -> Any: ...


class ReplicaAccess(Protocol):
    @property
    def partitions(self) -> Mapping[TopicPartition, HostedPartition]: ...

    @property
    def role_listeners(self) -> dict[str, RoleListener]: ...

    def append_records(self, acks: int, timeout_ms: int,
                       entries: dict[TopicPartition, bytes | None], *,
                       origin: AppendOrigin = AppendOrigin.CLIENT) -> Any:
        """Per-partition results (error, base_offset), or a future of them (acks=-1).
        The coordinators append with ``AppendOrigin.COORDINATOR``."""
        ...
