"""One partition as this broker sees it (Kafka's Partition): its log, its role, ISR and HW.

S-3.3: the leader tracks each follower's LEO from its fetch offsets; HW = min LEO over the ISR,
never moving backwards; consumers read only below the HW. With a single replica (this issue's
standalone broker) the ISR is the leader alone, so the HW follows the LEO on every append.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from ..protocol.records import BatchHeader
from ..storage.log import Log

log = logging.getLogger("odradek.partition")


class NotLeaderError(Exception):
    """This broker does not lead the partition (NOT_LEADER_OR_FOLLOWER)."""


class NotEnoughReplicasError(Exception):
    """acks=all and the ISR is smaller than min.insync.replicas (NOT_ENOUGH_REPLICAS)."""


class FencedLeaderEpochError(Exception):
    """The request's leader epoch is older than ours (FENCED_LEADER_EPOCH)."""


class UnknownLeaderEpochError(Exception):
    """The request's leader epoch is newer than ours (UNKNOWN_LEADER_EPOCH)."""


@dataclass(slots=True)
class ReplicaState:
    """The leader's view of a follower (Kafka's Replica)."""

    broker_id: int
    log_end_offset: int = -1
    last_caught_up_time_ms: int = 0


@dataclass
class Partition:
    topic: str
    index: int
    log: Log
    local_broker_id: int
    leader_id: int = -1
    leader_epoch: int = -1
    replicas: list[int] = field(default_factory=list)
    isr: list[int] = field(default_factory=list)
    high_watermark: int = 0
    remote: dict[int, ReplicaState] = field(default_factory=dict)
    zk_version: int = 0  # version of the partition state node (Kafka's partition epoch)

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_broker_id

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    def make_leader(self, leader_epoch: int, isr: list[int], replicas: list[int],
                    now_ms: int) -> bool:
        """Become leader at `leader_epoch` (LeaderAndIsr). Returns False for a stale epoch."""
        if leader_epoch < self.leader_epoch:
            return False
        self.leader_id = self.local_broker_id
        self.leader_epoch = leader_epoch
        self.isr = list(isr)
        self.replicas = list(replicas)
        self.log.leader_epoch_cache.assign(leader_epoch, self.log.log_end_offset)
        self.remote = {
            r: ReplicaState(r, last_caught_up_time_ms=now_ms)
            for r in replicas if r != self.local_broker_id
        }
        self.high_watermark = min(max(self.high_watermark, self.log.log_start_offset),
                                  self.log.log_end_offset)
        self.maybe_increment_high_watermark()
        return True

    def make_follower(self, leader_id: int, leader_epoch: int, isr: list[int],
                      replicas: list[int]) -> bool:
        """Follow `leader_id` at `leader_epoch` (LeaderAndIsr). Returns False for a stale
        epoch. Fetching from the new leader is the replica fetcher's job."""
        if leader_epoch < self.leader_epoch:
            return False
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.isr = list(isr)
        self.replicas = list(replicas)
        self.remote = {}
        return True

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

    def append_records_to_leader(self, buf: bytearray, headers: list[BatchHeader],
                                 required_acks: int, min_insync_replicas: int, now_ms: int):
        if not self.is_leader:
            raise NotLeaderError(f"broker {self.local_broker_id} is not the leader of "
                                 f"{self.topic}-{self.index}")
        if required_acks == -1 and len(self.isr) < min_insync_replicas:
            raise NotEnoughReplicasError(
                f"the ISR {self.isr} of {self.topic}-{self.index} is smaller than "
                f"min.insync.replicas {min_insync_replicas}")
        info = self.log.append_as_leader(buf, headers, self.leader_epoch, now_ms)
        self.maybe_increment_high_watermark()
        return info

    def maybe_increment_high_watermark(self) -> bool:
        """HW = min LEO over the ISR; never moves backwards. Returns True if it moved."""
        leo = self.log.log_end_offset
        new_hw = leo
        for r in self.isr:
            if r == self.local_broker_id:
                continue
            state = self.remote.get(r)
            new_hw = min(new_hw, state.log_end_offset if state else -1)
        if new_hw > self.high_watermark:
            self.high_watermark = new_hw
            self.log.high_watermark = new_hw  # retention never deletes above the HW
            return True
        return False
