"""The coordinator's delayed operations (Kafka's DelayedJoin, InitialDelayedJoin, DelayedSync,
DelayedHeartbeat), kept in two purgatories of the GroupCoordinator:

* rebalance purgatory, keys ``("join", group_id)`` and ``("sync", group_id)``: the join phase
  completes when every member has rejoined or the rebalance timeout passes; the sync phase
  expires members that never sent SyncGroup;
* heartbeat purgatory, key ``(group_id, member_id)``: one DelayedHeartbeat per member, completed
  by each heartbeat and replaced by a new one, expiring the member after its session timeout.

Each operation only calls back into the coordinator; all decisions live there. Everything runs
on the broker's loop, so there are no group locks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from ..runtime.purgatory import DelayedOperation, DelayedOperationPurgatory

if TYPE_CHECKING:
    from .group import GroupMetadata


class GroupCallbacks(Protocol):
    """The coordinator's decisions the delayed operations call back into (GroupCoordinator
    implements them)."""

    def try_complete_join(self, group: GroupMetadata, force_complete: Callable[[], bool]
                          ) -> bool: ...

    def on_complete_join(self, group: GroupMetadata) -> None: ...

    def try_complete_pending_sync(self, group: GroupMetadata, generation_id: int,
                                  force_complete: Callable[[], bool]) -> bool: ...

    def on_expire_pending_sync(self, group: GroupMetadata, generation_id: int) -> None: ...

    def try_complete_heartbeat(self, group: GroupMetadata, member_id: str, is_pending: bool,
                               force_complete: Callable[[], bool]) -> bool: ...

    def on_expire_heartbeat(self, group: GroupMetadata, member_id: str,
                            is_pending: bool) -> None: ...


def join_key(group_id: str) -> tuple[str, str]:
    return ("join", group_id)


def sync_key(group_id: str) -> tuple[str, str]:
    return ("sync", group_id)


def member_key(group_id: str, member_id: str) -> tuple[str, str]:
    return (group_id, member_id)


class DelayedJoin(DelayedOperation):
    """Completes once all known members have rejoined (or at the rebalance timeout): then the
    coordinator starts the next generation."""

    def __init__(self, coordinator: GroupCallbacks, group: GroupMetadata,
                 rebalance_timeout_ms: int) -> None:
        super().__init__(rebalance_timeout_ms)
        self.coordinator = coordinator
        self.group = group

    def try_complete(self) -> bool:
        return self.coordinator.try_complete_join(self.group, self.force_complete)

    def on_complete(self) -> None:
        self.coordinator.on_complete_join(self.group)


class InitialDelayedJoin(DelayedJoin):
    """The first rebalance of an empty group waits `group.initial.rebalance.delay.ms`, and again
    (up to the rebalance timeout) while new members keep arriving, so that a group starting
    many consumers at once does not rebalance once per consumer (KIP-134)."""

    def __init__(self, coordinator: GroupCallbacks,
                 purgatory: DelayedOperationPurgatory[DelayedOperation], group: GroupMetadata,
                 configured_delay_ms: int, delay_ms: int, remaining_ms: int) -> None:
        super().__init__(coordinator, group, delay_ms)
        self.purgatory = purgatory
        self.configured_delay_ms = configured_delay_ms
        self.delay = delay_ms
        self.remaining_ms = remaining_ms

    def try_complete(self) -> bool:
        return False

    def on_complete(self) -> None:
        group = self.group
        if group.new_member_added and self.remaining_ms != 0:
            group.new_member_added = False
            delay = min(self.configured_delay_ms, self.remaining_ms)
            remaining = max(self.remaining_ms - self.delay, 0)
            self.purgatory.try_complete_else_watch(
                InitialDelayedJoin(self.coordinator, self.purgatory, group,
                                   self.configured_delay_ms, delay, remaining),
                [join_key(group.group_id)])
        else:
            super().on_complete()


class DelayedSync(DelayedOperation):
    """After a join phase, members that do not send SyncGroup within the rebalance timeout are
    removed (KAFKA-13406's pending-sync expiry)."""

    def __init__(self, coordinator: GroupCallbacks, group: GroupMetadata, generation_id: int,
                 rebalance_timeout_ms: int) -> None:
        super().__init__(rebalance_timeout_ms)
        self.coordinator = coordinator
        self.group = group
        self.generation_id = generation_id

    def try_complete(self) -> bool:
        return self.coordinator.try_complete_pending_sync(self.group, self.generation_id,
                                                          self.force_complete)

    def on_complete(self) -> None:
        pass

    def on_expiration(self) -> None:
        self.coordinator.on_expire_pending_sync(self.group, self.generation_id)


class DelayedHeartbeat(DelayedOperation):
    """A member's session: completed by a heartbeat (or leaving), else it expires the member.
    `pending_member`: a member id handed out with MEMBER_ID_REQUIRED, not joined yet."""

    def __init__(self, coordinator: GroupCallbacks, group: GroupMetadata, member_id: str,
                 is_pending: bool, timeout_ms: int) -> None:
        super().__init__(timeout_ms)
        self.coordinator = coordinator
        self.group = group
        self.member_id = member_id
        self.pending_member = is_pending

    def try_complete(self) -> bool:
        return self.coordinator.try_complete_heartbeat(self.group, self.member_id,
                                                       self.pending_member, self.force_complete)

    def on_complete(self) -> None:
        pass

    def on_expiration(self) -> None:
        self.coordinator.on_expire_heartbeat(self.group, self.member_id, self.pending_member)
