"""Partitioners (S-1.3): murmur2 of the key exactly as Kafka's Java client (`Utils.murmur2` and
`Utils.toPositive`), so a key lands where a Java client (or librdkafka with
`partitioner=murmur2_random`) would put it; a sticky partition for records without a key.

Null keys follow Kafka's built-in partitioner (KIP-480, KIP-794): all keyless records of a topic
go to one partition with a live leader until `batch.size` bytes have gone to it, then another is
picked at random (never the same one again when there is a choice). docs/design.md S-1.3
also names the older rule (a random partition kept for `metadata.max.age.ms`); both keep a
producer's keyless records together in large batches.

Names (config `partitioner`, librdkafka's): `murmur2_random` (default), `murmur2` (a null key
hashes as the empty key), `consistent_random` / `consistent` (CRC-32, librdkafka's default),
`random`; or a callable `(key_bytes, all_partitions, available_partitions) -> partition`.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable, Sequence

from ..common import entropy

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's `Utils.murmur2`: a signed 32-bit int, as Java returns it."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    n4 = length & ~3
    for i in range(0, n4, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    extra = length & 3
    if extra == 3:
        h ^= data[n4 + 2] << 16
    if extra >= 2:
        h ^= data[n4 + 1] << 8
    if extra >= 1:
        h ^= data[n4]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(n: int) -> int:
    """Kafka's `Utils.toPositive`: clear the sign bit (not abs: MIN_VALUE maps to 0)."""
    return n & 0x7FFFFFFF


def murmur2_partition(key: bytes, num_partitions: int) -> int:
    """The partition Kafka's default partitioner gives a non-null key."""
    return to_positive(murmur2(key)) % num_partitions


def consistent_partition(key: bytes, num_partitions: int) -> int:
    """librdkafka's `consistent` partitioner: CRC-32 of the key."""
    return zlib.crc32(key) % num_partitions


class StickyPartitioner:
    """Where keyless records go: one partition per topic until `batch_size` bytes have been
    produced to it, then a different one (at random among partitions with a leader)."""

    def __init__(self, batch_size: int, rng: random.Random | None = None) -> None:
        self.batch_size = max(1, batch_size)
        self.rng = rng or entropy.new_random()
        self._current: dict[str, int] = {}
        self._produced: dict[str, int] = {}

    def partition(self, topic: str, num_partitions: int, available: Sequence[int]) -> int:
        current = self._current.get(topic)
        choices = list(available) or list(range(num_partitions))
        if current is not None and current in choices and current < num_partitions:
            return current
        return self._switch(topic, choices, current)

    def _switch(self, topic: str, choices: list[int], old: int | None) -> int:
        if len(choices) > 1 and old in choices:
            choices = [p for p in choices if p != old]
        new = choices[self.rng.randrange(len(choices))]
        self._current[topic] = new
        self._produced[topic] = 0
        return new

    def record_appended(self, topic: str, partition: int, size: int, num_partitions: int,
                        available: Sequence[int]) -> None:
        """Count `size` bytes into the sticky partition; switch once batch.size is reached."""
        if self._current.get(topic) != partition:
            return
        produced = self._produced.get(topic, 0) + size
        self._produced[topic] = produced
        if produced >= self.batch_size:
            self._switch(topic, list(available) or list(range(num_partitions)), partition)


PartitionerFn = Callable[[bytes | None, list[int], list[int]], int]


class Partitioner:
    """Chooses the partition of each record (see the module docstring for the names)."""

    NAMES = ("murmur2_random", "murmur2", "consistent_random", "consistent", "random")

    def __init__(self, name: str | PartitionerFn = "murmur2_random", batch_size: int = 16384,
                 rng: random.Random | None = None) -> None:
        self.custom: PartitionerFn | None = None
        if callable(name):
            self.custom = name
            self.name = getattr(name, "__name__", "custom")
        elif name in self.NAMES:
            self.name = name
        else:
            raise ValueError(f"unknown partitioner {name!r} (one of {', '.join(self.NAMES)} "
                             "or a callable)")
        self.sticky = StickyPartitioner(batch_size, rng)

    def partition(self, topic: str, key: bytes | None, num_partitions: int,
                  available: Sequence[int]) -> int:
        if self.custom is not None:
            return int(self.custom(key, list(range(num_partitions)), list(available)))
        name = self.name
        if key is None:
            if name in ("murmur2", "consistent"):
                key = b""
            else:
                return self.sticky.partition(topic, num_partitions, available)
        if name.startswith("murmur2"):
            return murmur2_partition(key, num_partitions)
        if name.startswith("consistent"):
            return consistent_partition(key, num_partitions)
        return self.sticky.partition(topic, num_partitions, available)  # random

    def record_appended(self, topic: str, partition: int, key: bytes | None, size: int,
                        num_partitions: int, available: Sequence[int]) -> None:
        if self.custom is None and (key is None or self.name == "random"):
            self.sticky.record_appended(topic, partition, size, num_partitions, available)
