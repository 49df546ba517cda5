"""One partition as this broker sees it (Kafka's Partition): its log, its role, ISR and HW.

S-3.3: the leader tracks each follower's LEO from its fetch offsets; HW = min LEO over the ISR,
never moving backwards; consumers read only below the HW. Followers learn the HW from fetch
responses (HW = min(own LEO, leader HW)).

S-3.4: a follower that has not caught up with the leader's LEO within `replica.lag.time.max.ms`
leaves the ISR; one whose LEO reaches the HW (and the start offset of the current leader epoch)
joins it again. The decisions are the pure functions below (`high_watermark_candidate`,
`out_of_sync_replicas`, `can_join_isr`); the ISR write to the coordination store is
`server/replication/isr.py`'s job. While a write is in flight the partition holds a *pending* ISR
(Kafka's
KIP-497 "maximal ISR": the union of the committed and the proposed ISR), used for the HW so that
an expansion is safe at once and a shrink takes effect only once it is committed.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ...common import TopicPartition, clock
from ...protocol.records import BatchHeader
from ...storage.append_origin import AppendOrigin
from ...storage.errors import OffsetOutOfRangeError, UnexpectedAppendOffsetError
from ...storage.log import AppendInfo, Log

log = logging.getLogger("odradek.partition")

UNKNOWN_OFFSET = -1
DEFAULT_REPLICA_LAG_TIME_MAX_MS = 10000


def _now_ms() -> int:
    return clock.now_ms()


class NotLeaderError(Exception):
    """This broker does not lead the partition (NOT_LEADER_OR_FOLLOWER)."""


class NotEnoughReplicasError(Exception):
    """acks=all and the ISR is smaller than min.insync.replicas (NOT_ENOUGH_REPLICAS)."""


class FencedLeaderEpochError(Exception):
    """The request's leader epoch is older than ours (FENCED_LEADER_EPOCH)."""


class UnknownLeaderEpochError(Exception):
    """The request's leader epoch is newer than ours (UNKNOWN_LEADER_EPOCH)."""


class PolicyViolationError(Exception):
    """DeleteRecords on a topic whose cleanup.policy lacks delete (POLICY_VIOLATION)."""

    error_code = 44


HIGH_WATERMARK_OFFSET = -1  # DeleteRecords' "up to the high watermark"


@dataclass(slots=True)
class ReplicaState:
    """The leader's view of a follower (Kafka's Replica)."""

    broker_id: int
    log_end_offset: int = UNKNOWN_OFFSET
    log_start_offset: int = UNKNOWN_OFFSET
    last_caught_up_time_ms: int = 0
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_time_ms: int = 0

    def update_fetch_state(self, fetch_offset: int, start_offset: int, fetch_time_ms: int,
                           leader_end_offset: int) -> None:
        """Kafka's Replica.updateFetchState: a fetch at or past the leader's LEO means caught
        up now; a fetch at or past the leader's LEO *at the previous fetch* means the follower
        was caught up at the previous fetch's time."""
        if fetch_offset >= leader_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, fetch_time_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms,
                                              self.last_fetch_time_ms)
        self.log_start_offset = start_offset
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_log_end_offset = leader_end_offset
        self.last_fetch_time_ms = fetch_time_ms

    def reset_last_caught_up_time(self, leader_end_offset: int, now_ms: int,
                                  last_caught_up_time_ms: int) -> None:
        self.last_fetch_leader_log_end_offset = leader_end_offset
        self.last_fetch_time_ms = now_ms
        self.last_caught_up_time_ms = last_caught_up_time_ms


# -- decisions (pure) ---------------------------------------------------------------------------


def high_watermark_candidate(leader_end_offset: int, remotes: Iterable[ReplicaState],
                             maximal_isr: Iterable[int], now_ms: int, max_lag_ms: int) -> int:
    """Kafka's maybeIncrementLeaderHW: the smallest LEO among the leader, the (maximal) ISR and
    the followers caught up within `max_lag_ms` (waiting for those too lets a follower that is
    catching up reach the HW and join the ISR). An ISR member whose LEO is unknown (-1) holds
    the HW where it is."""
    isr = set(maximal_isr)
    hw = leader_end_offset
    for r in remotes:
        if r.log_end_offset < hw and (
                r.broker_id in isr or now_ms - r.last_caught_up_time_ms <= max_lag_ms):
            hw = r.log_end_offset
    return hw


def out_of_sync_replicas(isr: Iterable[int], local_broker_id: int,
                         remotes: Mapping[int, ReplicaState], leader_end_offset: int,
                         now_ms: int, max_lag_ms: int) -> set[int]:
    """Kafka's getOutOfSyncReplicas: ISR followers not at the leader's LEO whose last
    caught-up time is older than `max_lag_ms` (stuck or slow followers alike)."""
    out: set[int] = set()
    for r in isr:
        if r == local_broker_id:
            continue
        state = remotes.get(r)
        if state is None or (state.log_end_offset != leader_end_offset
                             and now_ms - state.last_caught_up_time_ms > max_lag_ms):
            out.add(r)
    return out


def can_join_isr(follower_end_offset: int, high_watermark: int,
                 leader_epoch_start_offset: int | None) -> bool:
    """Kafka's isFollowerAtHighwatermark: the follower has everything below the HW and has
    caught up into the current leader epoch (else, with committed data between the HW and the
    leader's LEO, it could become leader without it)."""
    return (leader_epoch_start_offset is not None
            and follower_end_offset >= high_watermark
            and follower_end_offset >= leader_epoch_start_offset)


def fmt_isr(isr: Iterable[int]) -> str:
    return ",".join(str(r) for r in isr)


@dataclass(slots=True)
class FollowerFetchOutcome:
    """What a follower's fetch did on the leader."""

    known: bool  # the follower is an assigned replica
    high_watermark_moved: bool = False
    expand_isr_to: tuple[int, ...] | None = None  # an ISR expansion to write
    log_start_moved: bool = False  # the follower's log start offset changed (DeleteRecords)


class DelayedOperations(Protocol):
    """The requests waiting on a partition in the replica manager's purgatories (Kafka's
    DelayedOperations, which Partition completes after its state changed): told when the ISR
    write moved the HW, when the partition lost leadership (fenced by the state node), and,
    on a follower, when a fetch response moved its HW (the replica fetcher)."""

    def on_high_watermark_moved(self, tp: TopicPartition) -> None: ...

    def on_leadership_lost(self, tp: TopicPartition) -> None: ...

    def on_follower_high_watermark_moved(self, tp: TopicPartition) -> None: ...


class _NoDelayedOperations:
    """A partition outside a replica manager: nothing waits on it."""

    def on_high_watermark_moved(self, tp: TopicPartition) -> None:
        pass

    def on_leadership_lost(self, tp: TopicPartition) -> None:
        pass

    def on_follower_high_watermark_moved(self, tp: TopicPartition) -> None:
        pass


NO_DELAYED_OPERATIONS: DelayedOperations = _NoDelayedOperations()


@dataclass
class Partition:
    topic: str
    index: int
    log: Log
    local_broker_id: int
    leader_id: int = -1
    leader_epoch: int = -1
    replicas: list[int] = field(default_factory=list)
    isr: list[int] = field(default_factory=list)  # committed: as in the partition state node
    high_watermark: int = 0
    remote: dict[int, ReplicaState] = field(default_factory=dict)
    zk_version: int = 0  # version of the partition state node (Kafka's partition epoch)
    topic_id: uuid.UUID | None = None  # KIP-516: from LeaderAndIsr v5+ / partition.metadata
    controller_epoch: int = -1  # of the controller that wrote the state node (when read)
    pending_isr: tuple[int, ...] | None = None  # an ISR write in flight
    leader_epoch_start_offset: int | None = None  # the LEO when this replica became leader
    fenced: bool = False  # the state node shows another leader: refuse to act as leader
    replica_lag_time_max_ms: int = DEFAULT_REPLICA_LAG_TIME_MAX_MS
    clock: Callable[[], int] = _now_ms
    # told when DeleteRecords (or, on a follower, the leader's) moved the log start offset
    log_start_listener: Callable[[Partition], None] | None = None
    # the replica manager's purgatories, told by the ISR tasks (server/replication/isr.py)
    delayed_operations: DelayedOperations = NO_DELAYED_OPERATIONS

    def __str__(self) -> str:
        return f"{self.topic}-{self.index}"

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_broker_id and not self.fenced

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def last_stable_offset(self) -> int:
        """min(first unstable offset, HW): where read_committed consumers stop (KIP-98)."""
        return self.log.last_stable_offset

    @property
    def maximal_isr(self) -> list[int]:
        """The committed ISR plus a pending expansion (KIP-497)."""
        if self.pending_isr is None:
            return self.isr
        return self.isr + [r for r in self.pending_isr if r not in self.isr]

    @property
    def isr_update_in_flight(self) -> bool:
        return self.pending_isr is not None

    # -- high watermark -------------------------------------------------------------------------

    def initialize_high_watermark(self, checkpointed: int) -> None:
        """HW from replication-offset-checkpoint at creation, clamped to [LSO, LEO]."""
        self._set_high_watermark(checkpointed)

    def _set_high_watermark(self, hw: int) -> None:
        hw = min(max(hw, self.log.log_start_offset), self.log.log_end_offset)
        self.high_watermark = hw
        self.log.high_watermark = hw  # retention never deletes above the HW

    # -- role changes (LeaderAndIsr) ------------------------------------------------------------

    def make_leader(self, leader_epoch: int, isr: list[int], replicas: list[int],
                    now_ms: int | None = None) -> bool:
        """Become leader at `leader_epoch` (Kafka's makeLeader). Returns False for a stale
        epoch. The new epoch's start offset (this LEO) goes into the leader epoch cache at once
        (KIP-279), so a follower holding entries of an epoch this log never saw still finds its
        truncation point."""
        if leader_epoch < self.leader_epoch:
            return False
        now = self.clock() if now_ms is None else now_ms
        was_leader = self.is_leader
        self.leader_id = self.local_broker_id
        self.leader_epoch = leader_epoch
        self.isr = list(isr)
        self.replicas = list(replicas)
        self.pending_isr = None
        self.fenced = False
        leo = self.log.log_end_offset
        self.leader_epoch_start_offset = leo
        self.log.leader_epoch_cache.assign(leader_epoch, leo)
        remote = {r: self.remote.get(r) or ReplicaState(r)
                  for r in replicas if r != self.local_broker_id}
        for r, state in remote.items():
            if not was_leader:  # a new leader knows nothing of the followers' logs yet
                state.log_end_offset = UNKNOWN_OFFSET
                state.log_start_offset = UNKNOWN_OFFSET
            state.reset_last_caught_up_time(leo, now, now if r in self.isr else 0)
        self.remote = remote
        self._set_high_watermark(self.high_watermark)
        self.maybe_increment_high_watermark(now)
        return True

    def make_follower(self, leader_id: int, leader_epoch: int, isr: list[int],
                      replicas: list[int]) -> bool:
        """Follow `leader_id` at `leader_epoch` (Kafka's makeFollower). Returns True when the
        leader or the epoch changed (the replica fetcher must truncate and fetch anew), False
        for a stale epoch or when nothing changed."""
        if leader_epoch < self.leader_epoch:
            return False
        changed = (self.leader_id != leader_id or self.leader_epoch != leader_epoch
                   or self.fenced)
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.isr = list(isr)
        self.replicas = list(replicas)
        self.remote = {}
        self.pending_isr = None
        self.leader_epoch_start_offset = None
        self.fenced = False
        return changed

    def fence(self) -> None:
        """The state node names another leader: stop acting as leader until the controller's
        LeaderAndIsr arrives (waiting acks=all produces then fail with NOT_LEADER_OR_FOLLOWER)."""
        self.fenced = True
        self.pending_isr = None

    def check_leader_epoch(self, requested: int) -> None:
        """KIP-320: a client's current_leader_epoch (-1 = unknown, not checked)."""
        if requested < 0:
            return
        if requested < self.leader_epoch:
            raise FencedLeaderEpochError(
                f"leader epoch {requested} is older than {self.leader_epoch}")
        if requested > self.leader_epoch:
            raise UnknownLeaderEpochError(
                f"leader epoch {requested} is newer than {self.leader_epoch}")

    # -- leader: appends, follower fetches, HW, ISR ---------------------------------------------

    def append_records_to_leader(self, buf: bytearray, headers: list[BatchHeader],
                                 required_acks: int, min_insync_replicas: int, now_ms: int,
                                 origin: AppendOrigin = AppendOrigin.CLIENT) -> AppendInfo:
        if not self.is_leader:
            raise NotLeaderError(f"broker {self.local_broker_id} is not the leader of "
                                 f"{self.topic}-{self.index}")
        if required_acks == -1 and len(self.isr) < min_insync_replicas:
            raise NotEnoughReplicasError(
                f"the ISR {self.isr} of {self.topic}-{self.index} is smaller than "
                f"min.insync.replicas {min_insync_replicas}")
        info = self.log.append_as_leader(buf, headers, self.leader_epoch, now_ms, origin)
        self.maybe_increment_high_watermark(now_ms)
        return info

    def maybe_increment_high_watermark(self, now_ms: int | None = None) -> bool:
        """HW = min LEO over the (maximal) ISR; never moves backwards. True if it moved."""
        if not self.is_leader:
            return False
        now = self.clock() if now_ms is None else now_ms
        new_hw = high_watermark_candidate(self.log.log_end_offset, self.remote.values(),
                                          self.maximal_isr, now, self.replica_lag_time_max_ms)
        if new_hw > self.high_watermark:
            self.high_watermark = new_hw
            self.log.high_watermark = new_hw
            return True
        return False

    def update_follower_fetch_state(self, follower_id: int, fetch_offset: int,
                                    follower_start_offset: int, now_ms: int,
                                    leader_end_offset: int | None = None
                                    ) -> FollowerFetchOutcome:
        """Kafka's updateFollowerFetchState: record the follower's LEO (its fetch offset),
        maybe advance the HW, and say whether the follower should join the ISR."""
        state = self.remote.get(follower_id)
        if state is None or not self.is_leader:
            return FollowerFetchOutcome(known=False)
        leo = self.log.log_end_offset if leader_end_offset is None or leader_end_offset < 0 \
            else leader_end_offset
        previous, previous_start = state.log_end_offset, state.log_start_offset
        state.update_fetch_state(fetch_offset, follower_start_offset, now_ms, leo)
        expand = None
        if (not self.isr_update_in_flight and follower_id not in self.isr
                and can_join_isr(fetch_offset, self.high_watermark,
                                 self.leader_epoch_start_offset)):
            expand = (*self.isr, follower_id)
        moved = previous != fetch_offset and self.maybe_increment_high_watermark(now_ms)
        return FollowerFetchOutcome(True, moved, expand, previous_start != follower_start_offset)

    # -- leader: DeleteRecords ------------------------------------------------------------------

    def delete_records_on_leader(self, offset: int) -> int:
        """Kafka's deleteRecordsOnLeader: move the log start offset up to `offset` (-1: the
        high watermark); returns the offset asked for. Raises NotLeaderError,
        PolicyViolationError (cleanup.policy without delete), OffsetOutOfRangeError (negative,
        or beyond the high watermark)."""
        if not self.is_leader:
            raise NotLeaderError(f"broker {self.local_broker_id} is not the leader of {self}")
        if not self.log.config.delete:
            raise PolicyViolationError(f"Records of partition {self} can not be deleted due to "
                                       f"the configured policy")
        target = self.high_watermark if offset == HIGH_WATERMARK_OFFSET else offset
        if target < 0:
            raise OffsetOutOfRangeError(f"The offset {target} for partition {self} is not valid")
        if self.log.maybe_increment_log_start_offset(target):
            log.info("[Partition %s broker=%d] Incremented log start offset to %d due to client "
                     "delete records request", self, self.local_broker_id, target)
            if self.log_start_listener is not None:
                self.log_start_listener(self)
        return target

    def low_watermark(self, alive: Callable[[int], bool]) -> int:
        """Kafka's lowWatermarkIfLeader: the smallest log start offset among this log and the
        followers on live brokers (-1 for a follower that has not fetched since this replica
        became leader)."""
        low = self.log.log_start_offset
        for r in self.remote.values():
            if r.log_start_offset < low and alive(r.broker_id):
                low = r.log_start_offset
        return low

    def isr_to_shrink_to(self, now_ms: int | None = None) -> tuple[tuple[int, ...], set[int]]:
        """(new ISR, out-of-sync replicas) if the ISR should shrink, else ((), set())."""
        if not self.is_leader or self.isr_update_in_flight:
            return (), set()
        now = self.clock() if now_ms is None else now_ms
        out = out_of_sync_replicas(self.isr, self.local_broker_id, self.remote,
                                   self.log.log_end_offset, now, self.replica_lag_time_max_ms)
        if not out:
            return (), set()
        return tuple(r for r in self.isr if r not in out), out

    def begin_isr_update(self, proposed: Sequence[int]) -> None:
        self.pending_isr = tuple(proposed)

    def complete_isr_update(self, isr: Sequence[int], zk_version: int,
                            controller_epoch: int | None = None) -> bool:
        """The proposed ISR is in the state node (at `zk_version`). True if the HW moved."""
        self.isr = list(isr)
        self.zk_version = zk_version
        if controller_epoch is not None:
            self.controller_epoch = controller_epoch
        self.pending_isr = None
        return self.maybe_increment_high_watermark()

    def abort_isr_update(self) -> None:
        self.pending_isr = None

    # -- follower: appends fetched from the leader, truncation ---------------------------------

    def append_records_to_follower(self, data: bytes | bytearray | memoryview
                                   ) -> AppendInfo | None:
        """Kafka's appendRecordsToFollowerOrFutureReplica. A log start offset moved inside a
        batch (DeleteRecords) makes the leader send that batch whole to a follower whose log
        is empty and starts at that offset: the follower restarts its log at the batch's base
        offset and appends it (the leader's log start offset is taken after the append),
        rather than failing the partition with UnexpectedAppendOffsetError."""
        if self.is_leader:
            raise NotLeaderError(f"broker {self.local_broker_id} leads {self}; it cannot append "
                                 f"as a follower")
        try:
            return self.log.append_as_follower(data)
        except UnexpectedAppendOffsetError as exc:
            end = self.log.log_end_offset
            if not (end == self.log.log_start_offset
                    and exc.first_offset < end <= exc.last_offset):
                raise
            log.info("Unexpected offset in append to %s. First offset %d is less than log start "
                     "offset %d. Since this is the first record to be appended to the "
                     "follower's log, will start the log from offset %d.", self,
                     exc.first_offset, end, exc.first_offset)
            self.truncate_fully_and_start_at(exc.first_offset)
            return self.log.append_as_follower(data)

    def update_follower_high_watermark(self, leader_high_watermark: int,
                                       leader_log_start_offset: int) -> bool:
        """S-3.3: follower HW = min(own LEO, leader HW); the log start offset follows the
        leader's (never past the HW). True when the HW changed (Kafka's
        Log.maybeUpdateHighWatermark): consumers waiting on this follower (KIP-392) may now
        read more."""
        previous = self.high_watermark
        self._set_high_watermark(leader_high_watermark)
        if leader_log_start_offset >= 0:
            target = min(leader_log_start_offset, self.high_watermark)
            if target > self.log.log_start_offset and \
                    self.log.maybe_increment_log_start_offset(target) and \
                    self.log_start_listener is not None:
                self.log_start_listener(self)
        return self.high_watermark != previous

    def truncate_to(self, offset: int) -> None:
        self.log.truncate_to(offset)
        if self.high_watermark > self.log.log_end_offset:
            self._set_high_watermark(self.log.log_end_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.log.truncate_fully_and_start_at(offset)
        self._set_high_watermark(offset)
