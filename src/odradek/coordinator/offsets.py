"""`__consumer_offsets` for the group coordinator (S-7.3, S-7.5): the group -> partition mapping
(Java's String.hashCode, Kafka's Utils.abs and partitionFor) and what the coordinator reads of a
consumer's subscription. The records' bytes (keys and values, Kafka's GroupMetadataManager
formats) are protocol/group_metadata_records.py, shared with dump-log's ``--offsets-decoder``;
they are re-exported here for the coordinator's modules.
"""

from __future__ import annotations

from ..protocol import group_metadata_records
from ..protocol.group_metadata_records import *  # noqa: F403 (re-exported, see __all__)
from ..protocol.primitives import Reader

__all__ = [
    "OFFSETS_TOPIC",
    "java_string_hashcode",
    "kafka_abs",
    "partition_for",
    "subscribed_topics",
]
__all__ += group_metadata_records.__all__

OFFSETS_TOPIC = "__consumer_offsets"


# -- group id -> partition (Java's String.hashCode and Kafka's Utils.abs) ----------------------

def java_string_hashcode(s: str) -> int:
    """`String.hashCode()`: s[0]*31^(n-1) + ... + s[n-1] over UTF-16 code units, int32 wrap."""
    h = 0
    units = s.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def kafka_abs(n: int) -> int:
    """Kafka's `Utils.abs`: |n|, except Integer.MIN_VALUE -> 0 (Math.abs would return it)."""
    return 0 if n == -(1 << 31) else abs(n)


def partition_for(group_id: str, num_partitions: int) -> int:
    """The `__consumer_offsets` partition whose leader coordinates `group_id`."""
    return kafka_abs(java_string_hashcode(group_id)) % num_partitions


# -- the consumer protocol (only what the coordinator needs) --------------------------------------

def subscribed_topics(subscription: bytes) -> set[str]:
    """Topics of a ConsumerProtocolSubscription, read with its v0 prefix (version int16, topics
    array of strings), which every later version keeps, as Kafka's coordinator does."""
    r = Reader(subscription)
    r.int16()
    count = r.int32()
    if count < 0:
        return set()
    return {r.string() for _ in range(count)}
