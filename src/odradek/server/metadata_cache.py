"""What this broker believes about the cluster: live brokers, topics, partition leadership.

Kafka's MetadataCache, filled from UpdateMetadata requests (``update_metadata``, called by the
replica manager once the request passed its controller-epoch check, as Kafka's
maybeUpdateMetadataCache does). Metadata responses are built from here only.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from typing import Any

from ..protocol.interbroker import UpdateMetadataRequest

# UpdateMetadata's leader of a partition whose topic is being deleted (Kafka's
# LeaderAndIsr.LeaderDuringDelete).
LEADER_DURING_DELETE = -2


@dataclass(frozen=True, slots=True)
class ListenerEndpoint:
    """One of a broker's endpoints: its listener name, address and security protocol id
    (UpdateMetadata's endpoint: 0 PLAINTEXT, 1 SSL, 2 SASL_PLAINTEXT, 3 SASL_SSL)."""

    listener: str
    host: str
    port: int
    security_protocol: int = 0


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A live broker. `host`/`port` are its first endpoint's; `endpoints` are all of them,
    by listener (Kafka's per-listener node map). A BrokerInfo built without endpoints
    answers its host/port for every listener."""

    broker_id: int
    host: str
    port: int
    rack: str | None = None
    endpoints: tuple[ListenerEndpoint, ...] = ()

    def endpoint(self, listener: str) -> ListenerEndpoint | None:
        """The endpoint on `listener`, None if this broker has no such listener."""
        if not self.endpoints:
            return ListenerEndpoint(listener, self.host, self.port)
        for ep in self.endpoints:
            if ep.listener == listener:
                return ep
        return None

    @classmethod
    def from_update_metadata(cls, broker: Any) -> BrokerInfo:
        """From an UpdateMetadata live broker (v0: its host/port as a PLAINTEXT endpoint)."""
        eps = tuple(ListenerEndpoint(e.listener or "PLAINTEXT", e.host, e.port,
                                     e.security_protocol)
                    for e in (getattr(broker, "endpoints", ()) or ()))
        if not eps:
            eps = (ListenerEndpoint("PLAINTEXT", broker.v0_host, broker.v0_port, 0),)
        return cls(broker.id, eps[0].host, eps[0].port, broker.rack, eps)


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
        self._names_by_id: dict[uuid.UUID, str] = {}  # Fetch v13+ resolves ids (KIP-516)
        self.controller_id: int = -1
        self.cluster_id: str | None = None
        # Set by the first UpdateMetadata: until then this broker knows only itself, and a
        # Metadata answer would name no controller or one missing from the broker list.
        self.initialized = asyncio.Event()

    def broker_endpoint(self, broker_id: int, listener: str) -> ListenerEndpoint | None:
        """Where broker `broker_id` listens on `listener` (None: not alive, or not there)."""
        info = self.brokers.get(broker_id)
        return None if info is None else info.endpoint(listener)

    def topic(self, name: str) -> TopicInfo | None:
        return self.topics.get(name)

    def partition(self, topic: str, partition: int) -> PartitionInfo | None:
        t = self.topics.get(topic)
        return t.partitions.get(partition) if t else None

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        name = self._names_by_id.get(topic_id)
        return None if name is None else self.topics.get(name)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        """Kafka's topicIdsToNames lookup: the topic of a (non-zero) id, None if unknown."""
        return self._names_by_id.get(topic_id)

    def update_partition(self, topic: str, topic_id: uuid.UUID, partition: int,
                         info: PartitionInfo, internal: bool = False) -> None:
        t = self.topics.get(topic)
        if t is None:
            t = self.topics[topic] = TopicInfo(topic, topic_id, internal=internal)
            if topic_id.int:
                self._names_by_id[topic_id] = topic
        elif topic_id.int and t.topic_id != topic_id:  # an id assigned (or the topic re-made)
            self._names_by_id.pop(t.topic_id, None)
            t.topic_id = topic_id
            self._names_by_id[topic_id] = topic
        t.partitions[partition] = info

    def update_metadata(self, request: UpdateMetadataRequest) -> int:
        """Kafka's MetadataCache.updateMetadata: the live brokers (every listener's endpoint),
        the controller and the leadership of each partition the request names; a partition
        whose leader is LEADER_DURING_DELETE leaves the cache. The first update sets
        `initialized`. Returns how many partition states the request held."""
        self.controller_id = request.controller_id
        self.brokers = {b.id: BrokerInfo.from_update_metadata(b) for b in request.live_brokers}
        topic_ids = {t.topic_name: t.topic_id for t in getattr(request, "topic_states", ())}
        count = 0
        no_id = uuid.UUID(int=0)
        for topic, s in request.named_partition_states():
            count += 1
            if s.leader == LEADER_DURING_DELETE:
                self.remove_partition(topic, s.partition_index)
                continue
            self.update_partition(
                topic, topic_ids.get(topic, no_id), s.partition_index,
                PartitionInfo(s.leader, s.leader_epoch, list(s.replicas), list(s.isr),
                              list(s.offline_replicas), s.zk_version, s.controller_epoch),
                internal=topic.startswith("__"))
        self.initialized.set()
        return count

    def remove_topic(self, topic: str) -> None:
        t = self.topics.pop(topic, None)
        if t is not None:
            self._names_by_id.pop(t.topic_id, None)

    def remove_partition(self, topic: str, partition: int) -> None:
        t = self.topics.get(topic)
        if t is None:
            return
        t.partitions.pop(partition, None)
        if not t.partitions:
            self.remove_topic(topic)
