"""Partition assignors (S-7.4) and Kafka's ConsumerProtocol byte formats — pure functions.

The group leader runs the assignor every member named in JoinGroup (protocol type "consumer",
protocol names "range" and "roundrobin", as Java's RangeAssignor/RoundRobinAssignor and
librdkafka call them), so odradek consumers can share a group with real clients. Subscriptions
and assignments travel as Kafka's `ConsumerProtocolSubscription` / `ConsumerProtocolAssignment`:
an int16 version, then the fields of that version (non-flexible encoding). Readers accept any
version and ignore trailing fields of newer ones, as Kafka's do.

  Subscription v0: topics [string], user_data nullable bytes
               v1: + owned_partitions [(topic string, partitions [int32])]
               v2: + generation_id int32          v3: + rack_id nullable string
  Assignment v0-v3: assigned_partitions [(topic, partitions [int32])], user_data nullable bytes

Member order, where it decides the outcome, is Kafka's `MemberInfo` order: static members
(with a group.instance.id) first by instance id, then dynamic members by member id.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ..protocol.primitives import INT16, INT32, Reader, SchemaError, write_bytes, write_string
from .types import TopicPartition

PROTOCOL_TYPE = "consumer"



@dataclass(slots=True)
class Subscription:
    topics: list[str]
    user_data: bytes | None = None
    owned_partitions: list[TopicPartition] = field(default_factory=list)
    generation_id: int = -1
    rack_id: str | None = None
    version: int = 1
    # Not part of the bytes: JoinGroup carries it per member.
    group_instance_id: str | None = None


@dataclass(slots=True)
class Assignment:
    partitions: list[TopicPartition]
    user_data: bytes | None = None
    version: int = 1


# -- encoding ----------------------------------------------------------------------------------
def _topic_partitions(out: bytearray, partitions: Iterable[TopicPartition]) -> None:
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    out += INT32.pack(len(by_topic))
    for topic, parts in by_topic.items():
        write_string(out, topic)
        out += INT32.pack(len(parts))
        for p in parts:
            out += INT32.pack(p)


def encode_subscription(sub: Subscription, version: int | None = None) -> bytes:
    version = sub.version if version is None else version
    if not 0 <= version <= 3:
        raise ValueError(f"ConsumerProtocolSubscription v{version} is not supported (0-3)")
    out = bytearray(INT16.pack(version))
    out += INT32.pack(len(sub.topics))
    for t in sub.topics:
        write_string(out, t)
    write_bytes(out, sub.user_data)
    if version >= 1:
        _topic_partitions(out, sub.owned_partitions)
    if version >= 2:
        out += INT32.pack(sub.generation_id)
    if version >= 3:
        write_string(out, sub.rack_id)
    return bytes(out)


def encode_assignment(assignment: Assignment, version: int | None = None) -> bytes:
    version = assignment.version if version is None else version
    if not 0 <= version <= 3:
        raise ValueError(f"ConsumerProtocolAssignment v{version} is not supported (0-3)")
    out = bytearray(INT16.pack(version))
    _topic_partitions(out, assignment.partitions)
    write_bytes(out, assignment.user_data)
    return bytes(out)


# -- decoding ----------------------------------------------------------------------------------
class _Reader(Reader):
    __slots__ = ()

    def __init__(self, buf: bytes) -> None:
        super().__init__(buf, "ConsumerProtocol data truncated at byte {pos}")

    def count(self) -> int:
        n = self.int32()
        if n < 0:
            return 0
        if n > self.remaining:
            raise SchemaError(f"array of {n} elements in {self.remaining} bytes")
        return n

    def topic_partitions(self) -> list[TopicPartition]:
        out = []
        for _ in range(self.count()):
            topic = self.nullable_string() or ""
            for _ in range(self.count()):
                out.append(TopicPartition(topic, self.int32()))
        return out


def decode_subscription(data: bytes, group_instance_id: str | None = None) -> Subscription:
    r = _Reader(data)
    version = r.int16()
    if version < 0:
        raise ValueError(f"unsupported ConsumerProtocolSubscription version {version}")
    topics = [r.nullable_string() or "" for _ in range(r.count())]
    user_data = r.nullable_bytes()
    sub = Subscription(topics, user_data, version=version, group_instance_id=group_instance_id)
    if version >= 1:
        sub.owned_partitions = r.topic_partitions()
    if version >= 2:
        sub.generation_id = r.int32()
    if version >= 3:
        sub.rack_id = r.nullable_string()
    return sub


def decode_assignment(data: bytes) -> Assignment:
    if not data:
        return Assignment([], None, 0)  # what a follower's empty SyncGroup entry decodes to
    r = _Reader(data)
    version = r.int16()
    if version < 0:
        raise ValueError(f"unsupported ConsumerProtocolAssignment version {version}")
    partitions = r.topic_partitions()
    user_data = r.nullable_bytes() if r.remaining >= 4 else None
    return Assignment(partitions, user_data, version)


# -- assignors ---------------------------------------------------------------------------------
def _java_string_key(s: str) -> bytes:
    return s.encode("utf-16-be")  # Java compares strings by UTF-16 code unit


def member_order(member_id: str, sub: Subscription) -> tuple[int, bytes]:
    if sub.group_instance_id is not None:
        return (0, _java_string_key(sub.group_instance_id))
    return (1, _java_string_key(member_id))


class PartitionAssignor:
    name = ""

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, list[TopicPartition]]:
        raise NotImplementedError


class RangeAssignor(PartitionAssignor):
    """Per topic: its partitions in order, split into contiguous ranges over the members
    subscribed to it; the first (n mod members) members get one more."""

    name = "range"

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, list[TopicPartition]]:
        out: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
        per_topic: dict[str, list[str]] = {}
        for member, sub in subscriptions.items():
            for topic in dict.fromkeys(sub.topics):
                per_topic.setdefault(topic, []).append(member)
        for topic in sorted(per_topic):
            count = partitions_per_topic.get(topic)
            if count is None:
                continue
            members = sorted(per_topic[topic], key=lambda m: member_order(m, subscriptions[m]))
            each, extra = divmod(count, len(members))
            for i, member in enumerate(members):
                start = each * i + min(i, extra)
                length = each + (1 if i < extra else 0)
                out[member].extend(TopicPartition(topic, p) for p in range(start, start + length))
        return out


class RoundRobinAssignor(PartitionAssignor):
    """All partitions of all subscribed topics, sorted by topic then partition, dealt to the
    members in order, skipping members not subscribed to a partition's topic."""

    name = "roundrobin"

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, list[TopicPartition]]:
        out: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
        if not subscriptions:
            return out
        members = sorted(subscriptions, key=lambda m: member_order(m, subscriptions[m]))
        subscribed = {m: set(subscriptions[m].topics) for m in members}
        topics = sorted(set().union(*subscribed.values()))
        i = 0
        for topic in topics:
            count = partitions_per_topic.get(topic)
            if count is None:
                continue
            for p in range(count):
                while topic not in subscribed[members[i % len(members)]]:
                    i += 1
                out[members[i % len(members)]].append(TopicPartition(topic, p))
                i += 1
        return out


ASSIGNORS: dict[str, type[PartitionAssignor]] = {
    RangeAssignor.name: RangeAssignor,
    RoundRobinAssignor.name: RoundRobinAssignor,
}

# Java class names are accepted for partition.assignment.strategy, as in Java configs.
_ALIASES = {
    "org.apache.kafka.clients.consumer.RangeAssignor": "range",
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
}


def assignors_from_config(value: str | Sequence[str | PartitionAssignor]
                          ) -> list[PartitionAssignor]:
    items = value.split(",") if isinstance(value, str) else list(value)
    out: list[PartitionAssignor] = []
    for item in items:
        if isinstance(item, PartitionAssignor):
            out.append(item)
            continue
        name = _ALIASES.get(item.strip(), item.strip().lower())
        if not name:
            continue
        if name not in ASSIGNORS:
            raise ValueError(f"unknown partition.assignment.strategy {item!r} "
                             f"(supported: {', '.join(ASSIGNORS)})")
        out.append(ASSIGNORS[name]())
    if not out:
        raise ValueError("partition.assignment.strategy names no assignor")
    return out
