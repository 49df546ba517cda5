"""What this broker believes about the cluster: live brokers, topics, partition leadership.

Kafka's MetadataCache, filled from UpdateMetadata requests (or, for a single broker, by the solo
controller). Metadata responses are built from here only.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    broker_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(slots=True)
class PartitionInfo:
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int] = field(default_factory=list)
    zk_version: int = 0
    controller_epoch: int = 0


@dataclass(slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionInfo] = field(default_factory=dict)
    internal: bool = False


class MetadataCache:
    def __init__(self) -> None:
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.controller_id: int = -1
        self.cluster_id: str | None = None
        # Set by the first UpdateMetadata: until then this broker knows only itself, and a
        # Metadata answer would name no controller or one missing from the broker list.
        self.initialized = asyncio.Event()

    def topic(self, name: str) -> TopicInfo | None:
        return self.topics.get(name)

    def partition(self, topic: str, partition: int) -> PartitionInfo | None:
        t = self.topics.get(topic)
        return t.partitions.get(partition) if t else None

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        for t in self.topics.values():
            if t.topic_id == topic_id:
                return t
        return None

    def update_partition(self, topic: str, topic_id: uuid.UUID, partition: int,
                         info: PartitionInfo, internal: bool = False) -> None:
        t = self.topics.get(topic)
        if t is None:
            t = self.topics[topic] = TopicInfo(topic, topic_id, internal=internal)
        t.partitions[partition] = info

    def remove_topic(self, topic: str) -> None:
        self.topics.pop(topic, None)

    def remove_partition(self, topic: str, partition: int) -> None:
        t = self.topics.get(topic)
        if t is None:
            return
        t.partitions.pop(partition, None)
        if not t.partitions:
            del self.topics[topic]
