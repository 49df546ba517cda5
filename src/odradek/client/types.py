"""Plain data the client hands out: topic partitions, record metadata, consumed records, admin
descriptions."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from ..common import TopicPartition


class OffsetAndMetadata(NamedTuple):
    offset: int
    metadata: str = ""
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """What a transactional producer sends with the consumed offsets (KIP-447): the group and
    the consumer's membership, so the group coordinator fences a zombie of an older generation
    (Consumer.consumer_group_metadata())."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


TIMESTAMP_CREATE_TIME = 0
TIMESTAMP_LOG_APPEND_TIME = 1


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """What a producer learns about a delivered record."""

    topic: str
    partition: int
    offset: int  # -1 when unknown (acks=0, or a duplicate the broker no longer caches)
    timestamp: int
    serialized_key_size: int = -1
    serialized_value_size: int = -1

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass(slots=True)
class ConsumerRecord:
    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int  # 0 CreateTime, 1 LogAppendTime
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    leader_epoch: int = -1

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def timestamp_type_name(self) -> str:
        return "LogAppendTime" if self.timestamp_type == TIMESTAMP_LOG_APPEND_TIME else "CreateTime"


@dataclass(frozen=True, slots=True)
class NewTopic:
    name: str
    num_partitions: int = -1  # -1: the broker's num.partitions
    replication_factor: int = -1  # -1: the broker's default.replication.factor
    config: dict[str, str] = field(default_factory=dict)
    replica_assignment: dict[int, list[int]] | None = None


@dataclass(frozen=True, slots=True)
class PartitionReassignment:
    """An ongoing partition reassignment (ListPartitionReassignments, S-6.2): the replica set
    during the move (target + original), and the replicas being added and removed."""

    replicas: list[int]
    adding_replicas: list[int]
    removing_replicas: list[int]


@dataclass(frozen=True, slots=True)
class PartitionDescription:
    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int] = field(default_factory=list)
    error: int = 0


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    topic_id: object
    internal: bool
    partitions: list[PartitionDescription]
    error: int = 0


@dataclass(frozen=True, slots=True)
class Node:
    """A broker as clients know it (Kafka's Node): in the metadata, a cluster description, a
    group's coordinator."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    cluster_id: str | None
    controller_id: int
    brokers: list[Node]


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None
    source: int = -1
    read_only: bool = False
    is_default: bool = False
    is_sensitive: bool = False
    synonyms: list[tuple[str, str | None, int]] = field(default_factory=list)

    SOURCE_NAMES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG",
                    3: "DYNAMIC_DEFAULT_BROKER_CONFIG", 4: "STATIC_BROKER_CONFIG",
                    5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG"}


class ConfigResource(NamedTuple):
    """A DescribeConfigs/AlterConfigs target: ("topic", name) or ("broker", "<id>")."""

    type: str
    name: str

    TYPE_CODES = {"topic": 2, "broker": 4, "broker_logger": 8, "group": 32}

    @property
    def code(self) -> int:
        return self.TYPE_CODES[self.type]


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str | None = None


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: list[TopicPartition]
    subscription: list[str]


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberDescription]
    error: int = 0


# -- transactions (KIP-98 admin: KIP-664) ---------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ProducerState:
    """An active producer of a partition (DescribeProducers); coordinator_epoch and
    current_transaction_start_offset are -1 when unknown / no transaction is open."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int = -1
    current_transaction_start_offset: int = -1


@dataclass(frozen=True, slots=True)
class TransactionListing:
    """One transactional id a coordinator knows (ListTransactions)."""

    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """The state of one transactional id at its coordinator (DescribeTransactions);
    transaction_start_time_ms is -1 when no transaction is ongoing."""

    coordinator_id: int
    state: str
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_start_time_ms: int
    topic_partitions: list[TopicPartition]


@dataclass(frozen=True, slots=True)
class AbortTransactionSpec:
    """The transaction to abort on one partition (Kafka's AbortTransactionSpec)."""

    topic_partition: TopicPartition
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
