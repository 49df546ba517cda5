"""The controller's in-memory view of the cluster (Kafka's ``ControllerContext``, S-5.6).

The controller loads this from the coordination store at fail-over (S-5.6) and keeps it in
step with every change it makes; all decisions read it, nothing here does I/O.  It also hosts
the small value types everybody shares: :class:`TopicPartition`, :class:`PartitionAndReplica`,
:class:`LeaderAndIsr` (the content of ``/brokers/topics/<t>/partitions/<p>/state``),
:class:`BrokerEndpoint` (a pending reassignment, OAR -> RAR, is coordination.admin_zk's
:class:`Reassignment`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import NamedTuple

from odradek.controller.partition_states import PartitionStates
from odradek.controller.replica_states import ReplicaStates

from ..common import TopicPartition
from ..coordination.admin_zk import Reassignment

__all__ = [
    "EPOCH_DURING_DELETE",
    "INITIAL_CONTROLLER_EPOCH",
    "INITIAL_CONTROLLER_EPOCH_ZK_VERSION",
    "INITIAL_LEADER_EPOCH",
    "LEADER_DURING_DELETE",
    "NO_EPOCH",
    "NO_LEADER",
    "BrokerEndpoint",
    "ControllerContext",
    "LeaderAndIsr",
    "PartitionAndReplica",
    "TopicPartition",
]

NO_LEADER = -1
"""``leader`` of a partition without leader (Kafka's ``LeaderAndIsr.NoLeader``)."""
LEADER_DURING_DELETE = -2
"""``leader`` sent for partitions of a topic being deleted."""
INITIAL_LEADER_EPOCH = 0
NO_EPOCH = -1
EPOCH_DURING_DELETE = -2
"""Leader epoch sent in requests while the topic is queued for deletion."""
INITIAL_CONTROLLER_EPOCH = 0
INITIAL_CONTROLLER_EPOCH_ZK_VERSION = 0



class PartitionAndReplica(NamedTuple):
    """One replica of one partition: the key of the replica state machine."""

    topic_partition: TopicPartition
    replica: int

    def __str__(self) -> str:
        tp = self.topic_partition
        return f"[Topic={tp.topic},Partition={tp.partition},Replica={self.replica}]"


@dataclass(frozen=True, slots=True)
class LeaderAndIsr:
    """A partition's leadership as stored in its state node and sent in LeaderAndIsr.

    ``zk_version`` is the version of the state node the value was read from or written as
    (Kafka's ``partitionEpoch`` in the ZooKeeper era); writes are conditional on it (S-3.4, S-4.2).
    ``controller_epoch`` is the epoch of the controller that wrote it (Kafka keeps it next to
    the value in ``LeaderIsrAndControllerEpoch``).
    """

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    zk_version: int = 0
    controller_epoch: int = INITIAL_CONTROLLER_EPOCH

    @classmethod
    def initial(cls, leader: int, isr: Iterable[int],
                controller_epoch: int = INITIAL_CONTROLLER_EPOCH) -> LeaderAndIsr:
        """The first leadership of a new partition (leader epoch 0, version 0)."""
        return cls(leader, INITIAL_LEADER_EPOCH, tuple(isr), 0, controller_epoch)

    def new_leader(self, leader: int) -> LeaderAndIsr:
        """Same ISR, another leader, leader epoch + 1 (Kafka's ``newLeader``)."""
        return LeaderAndIsr(leader, self.leader_epoch + 1, self.isr, self.zk_version,
                            self.controller_epoch)

    def new_leader_and_isr(self, leader: int, isr: Iterable[int]) -> LeaderAndIsr:
        """New leader and ISR, leader epoch + 1 (Kafka's ``newLeaderAndIsr``). Built directly:
        ``dataclasses.replace`` cost ~5 us each, 10,000 times in a broker failure."""
        return LeaderAndIsr(leader, self.leader_epoch + 1,
                            isr if type(isr) is tuple else tuple(isr), self.zk_version,
                            self.controller_epoch)

    def new_epoch(self) -> LeaderAndIsr:
        """Same leader and ISR with leader epoch + 1 (reassignment bumps it, S-6.2)."""
        return replace(self, leader_epoch=self.leader_epoch + 1)


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    """Where a live broker listens (from ``/brokers/ids/<id>``)."""

    host: str
    port: int
    listener_name: str = "PLAINTEXT"
    security_protocol: int = 0
    """Kafka's SecurityProtocol id: 0 = PLAINTEXT."""
    rack: str | None = None
    listeners: tuple[tuple[str, str, int, int], ...] = ()
    """All its endpoints, (listener name, host, port, security protocol id), for UpdateMetadata;
    host/port above are the inter-broker listener's, which the controller connects to."""


@dataclass
class ControllerContext:
    """Everything the controller knows (Kafka's ``ControllerContext``), mutated on its loop only.

    Assignments are ``topic -> {partition: [replicas]}`` as in ``/brokers/topics/<topic>``; the
    first replica is the preferred one (S-3.1).
    """

    epoch: int = INITIAL_CONTROLLER_EPOCH
    epoch_zk_version: int = INITIAL_CONTROLLER_EPOCH_ZK_VERSION
    live_brokers: dict[int, BrokerEndpoint] = field(default_factory=dict)
    live_broker_epochs: dict[int, int] = field(default_factory=dict)
    shutting_down_broker_ids: set[int] = field(default_factory=set)
    all_topics: set[str] = field(default_factory=set)
    topic_ids: dict[str, uuid.UUID] = field(default_factory=dict)
    partition_assignments: dict[str, dict[int, list[int]]] = field(default_factory=dict)
    partition_leadership: dict[TopicPartition, LeaderAndIsr] = field(default_factory=dict)
    partition_states: PartitionStates[TopicPartition] = field(default_factory=PartitionStates)
    replica_states: ReplicaStates[PartitionAndReplica] = field(default_factory=ReplicaStates)
    topics_to_be_deleted: set[str] = field(default_factory=set)
    topics_with_deletion_started: set[str] = field(default_factory=set)
    topics_ineligible_for_deletion: set[str] = field(default_factory=set)
    partitions_being_reassigned: dict[TopicPartition, Reassignment] = field(default_factory=dict)
    # KIP-112: broker -> its partitions whose replica is in an offline log dir (learnt from
    # KAFKA_STORAGE_ERROR in LeaderAndIsr responses; forgotten when the broker restarts)
    replicas_on_offline_dirs: dict[int, set[TopicPartition]] = field(default_factory=dict)

    # ---- brokers -------------------------------------------------------------------------

    @property
    def live_broker_ids(self) -> set[int]:
        """Live brokers that are not shutting down (Kafka's ``liveBrokerIds``)."""
        return set(self.live_brokers) - self.shutting_down_broker_ids

    @property
    def live_or_shutting_down_broker_ids(self) -> set[int]:
        return set(self.live_brokers)

    def add_live_broker(self, broker_id: int, endpoint: BrokerEndpoint,
                        broker_epoch: int = -1) -> None:
        self.live_brokers[broker_id] = endpoint
        self.live_broker_epochs[broker_id] = broker_epoch

    def remove_live_brokers(self, broker_ids: Iterable[int]) -> None:
        """Forget dead brokers; a dead broker is no longer shutting down either."""
        for broker_id in broker_ids:
            self.live_brokers.pop(broker_id, None)
            self.live_broker_epochs.pop(broker_id, None)
            self.shutting_down_broker_ids.discard(broker_id)
            self.replicas_on_offline_dirs.pop(broker_id, None)

    def is_replica_online(self, broker_id: int, partition: TopicPartition | None = None,
                          include_shutting_down: bool = False) -> bool:
        """Whether the replica on ``broker_id`` can serve: its broker is live and, for a
        ``partition``, the replica is not in an offline log dir of that broker (KIP-112)."""
        if partition is not None and partition in self.replicas_on_offline_dirs.get(broker_id, ()):
            return False
        if include_shutting_down:
            return broker_id in self.live_brokers
        return broker_id in self.live_brokers and broker_id not in self.shutting_down_broker_ids

    # ---- assignments ---------------------------------------------------------------------

    def partition_replica_assignment(self, partition: TopicPartition) -> list[int]:
        """AR of ``partition`` ([] if unknown), a copy."""
        return list(self.replicas_of(partition))

    def replicas_of(self, partition: TopicPartition) -> Sequence[int]:
        """AR of ``partition`` (() if unknown) as stored, not copied: for reading only (the
        elections and requests of a 10,000-partition failover ask ~50,000 times)."""
        parts = self.partition_assignments.get(partition.topic)
        if parts is None:
            return ()
        return parts.get(partition.partition, ())

    def update_partition_replica_assignment(self, partition: TopicPartition,
                                            replicas: Iterable[int]) -> None:
        self.partition_assignments.setdefault(partition.topic, {})[partition.partition] = list(
            replicas)

    def set_topic_assignment(self, topic: str, assignment: Mapping[int, Iterable[int]]) -> None:
        self.all_topics.add(topic)
        self.partition_assignments[topic] = {p: list(r) for p, r in assignment.items()}

    def all_partitions(self) -> set[TopicPartition]:
        return {TopicPartition(t, p) for t, parts in self.partition_assignments.items()
                for p in parts}

    def partitions_for_topic(self, topic: str) -> set[TopicPartition]:
        return {TopicPartition(topic, p) for p in self.partition_assignments.get(topic, {})}

    def partitions_on_broker(self, broker_id: int) -> set[TopicPartition]:
        """Partitions with a replica on ``broker_id``."""
        return {TopicPartition(t, p) for t, parts in self.partition_assignments.items()
                for p, replicas in parts.items() if broker_id in replicas}

    def live_replicas(self, partition: TopicPartition,
                      include_shutting_down: bool = False) -> list[int]:
        """AR filtered to live brokers, in assignment order."""
        return [r for r in self.partition_replica_assignment(partition)
                if self.is_replica_online(r, partition, include_shutting_down)]

    def online_and_offline_replicas(self) -> tuple[set[PartitionAndReplica],
                                                   set[PartitionAndReplica]]:
        online: set[PartitionAndReplica] = set()
        offline: set[PartitionAndReplica] = set()
        for t, parts in self.partition_assignments.items():
            for p, replicas in parts.items():
                tp = TopicPartition(t, p)
                for r in replicas:
                    (online if self.is_replica_online(r, tp) else offline).add(
                        PartitionAndReplica(tp, r))
        return online, offline

    # ---- leadership ----------------------------------------------------------------------

    def leader_and_isr(self, partition: TopicPartition) -> LeaderAndIsr | None:
        return self.partition_leadership.get(partition)

    def put_leader_and_isr(self, partition: TopicPartition, value: LeaderAndIsr) -> None:
        self.partition_leadership[partition] = value

    def leader_epoch(self, partition: TopicPartition) -> int:
        """The epoch to send: -2 while the topic is queued for deletion, -1 if unknown."""
        if partition.topic in self.topics_to_be_deleted:
            return EPOCH_DURING_DELETE
        current = self.partition_leadership.get(partition)
        return NO_EPOCH if current is None else current.leader_epoch

    def partitions_led_by(self, broker_ids: Iterable[int]) -> set[TopicPartition]:
        """Partitions whose leader is one of ``broker_ids`` (set_p for dead brokers, S-4.2)."""
        ids = set(broker_ids)
        return {tp for tp, lai in self.partition_leadership.items() if lai.leader in ids}

    def partition_leaders_on_broker(self, broker_id: int) -> set[TopicPartition]:
        """Kafka's ``partitionLeadersOnBroker``: led by ``broker_id``, RF > 1, not being deleted.

        These are the partitions controlled shutdown must move (S-4.4).
        """
        return {tp for tp, lai in self.partition_leadership.items()
                if lai.leader == broker_id
                and tp.topic not in self.topics_to_be_deleted
                and len(self.partition_replica_assignment(tp)) > 1}

    def partitions_with_offline_leader(self) -> set[TopicPartition]:
        return {tp for tp, lai in self.partition_leadership.items()
                if not self.is_replica_online(lai.leader, tp)
                and tp.topic not in self.topics_to_be_deleted}

    # ---- topic deletion ------------------------------------------------------------------

    def queue_topic_deletion(self, topics: Iterable[str]) -> None:
        self.topics_to_be_deleted.update(topics)

    def is_topic_queued_up_for_deletion(self, topic: str) -> bool:
        return topic in self.topics_to_be_deleted

    def begin_topic_deletion(self, topics: Iterable[str]) -> None:
        self.topics_with_deletion_started.update(topics)

    def is_topic_deletion_in_progress(self, topic: str) -> bool:
        return topic in self.topics_with_deletion_started

    def remove_topic(self, topic: str) -> None:
        """Forget a deleted topic: assignments, leadership, states, deletion bookkeeping."""
        self.topics_to_be_deleted.discard(topic)
        self.topics_with_deletion_started.discard(topic)
        self.topics_ineligible_for_deletion.discard(topic)
        self.all_topics.discard(topic)
        self.topic_ids.pop(topic, None)
        for p in self.partition_assignments.pop(topic, {}):
            tp = TopicPartition(topic, p)
            self.partition_leadership.pop(tp, None)
            self.partitions_being_reassigned.pop(tp, None)
            self.partition_states.remove(tp)
        for replica, _ in self.replica_states.items():
            if replica.topic_partition.topic == topic:
                self.replica_states.remove(replica)

    # ---- reset ---------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget everything (on resignation, Kafka's ``resetContext``)."""
        fresh = ControllerContext()
        for f in fields(self):
            setattr(self, f.name, getattr(fresh, f.name))
