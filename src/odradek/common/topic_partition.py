"""TopicPartition: one partition of one topic, the key of nearly every map in a broker."""

from __future__ import annotations

from typing import NamedTuple


class TopicPartition(NamedTuple):
    """A partition of a topic; ``str()`` gives Kafka's ``topic-partition`` form.

    A NamedTuple, so it equals and hashes like the plain ``(topic, partition)`` tuple: maps keyed
    by either form find each other's keys, and decoded requests need no conversion.
    """

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"
