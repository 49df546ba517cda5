"""odradek's Kafka client: an asyncio core and a thin synchronous face, on the broker's own
protocol code (kio through `odradek.protocol.codec`, record batches of `odradek.protocol.records`).

    from odradek.client import Producer, Consumer, Admin

    with Producer({"bootstrap.servers": "localhost:9092"}) as p:
        p.send("events", b"hello", key=b"user-1")       # a DeliveryHandle: .result(timeout)

    c = Consumer({"bootstrap.servers": "localhost:9092", "group.id": "g",
                  "auto.offset.reset": "earliest"})
    c.subscribe(["events"])
    records = c.poll(1.0)

`AsyncProducer`, `AsyncConsumer` and `AsyncAdmin` are the same clients for a running event loop.
Configs use Kafka's names and defaults (a dict, and/or keyword arguments with `_` for `.`).
"""

from .admin import Admin, AsyncAdmin
from .assignors import RangeAssignor, RoundRobinAssignor
from .consumer import AsyncConsumer
from .delivery import DeliveryHandle
from .errors import (
    CommitFailedError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    NoOffsetForPartitionError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    UnsupportedVersionError,
)
from .partitioner import murmur2, murmur2_partition
from .producer import AsyncProducer
from .sync_consumer import Consumer
from .sync_producer import Producer
from .types import (
    ConfigResource,
    ConsumerRecord,
    NewTopic,
    OffsetAndMetadata,
    RecordMetadata,
    TopicPartition,
)

__all__ = [
    "Admin",
    "AsyncAdmin",
    "AsyncConsumer",
    "AsyncProducer",
    "CommitFailedError",
    "ConfigResource",
    "Consumer",
    "ConsumerRecord",
    "DeliveryHandle",
    "KafkaConnectionError",
    "KafkaError",
    "KafkaTimeoutError",
    "NewTopic",
    "NoOffsetForPartitionError",
    "OffsetAndMetadata",
    "OffsetOutOfRangeError",
    "Producer",
    "RangeAssignor",
    "RecordMetadata",
    "RecordTooLargeError",
    "RoundRobinAssignor",
    "TopicPartition",
    "UnsupportedVersionError",
    "murmur2",
    "murmur2_partition",
]
