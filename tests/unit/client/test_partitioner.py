"""The partitioner (S-1.3): murmur2 exactly as Kafka's Java client, the partition Java's default
partitioner gives a key, and sticky partitioning of keyless records.

Golden values: `UtilsTest.testMurmur2` in apache/kafka (clients/src/test/java/org/apache/kafka/
common/utils/UtilsTest.java) for the hash, and the partitions "compared with output from Kafka's
org.apache.kafka.clients.producer.Partitioner" that kafka-python's test_partitioner.py carries
(1000 partitions) for key placement.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from odradek.client.partitioner import (
    Partitioner,
    StickyPartitioner,
    consistent_partition,
    murmur2,
    murmur2_partition,
    to_positive,
)

# Kafka's UtilsTest.testMurmur2.
KAFKA_MURMUR2 = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (bytes([ord("a"), ord("b"), ord("c")]), 479470107),
]

# key -> partition out of 1000, as Java's default partitioner computes it.
JAVA_PARTITIONS = [
    (b"", 681), (b"a", 524), (b"ab", 434), (b"abc", 107), (b"123456789", 566), (b"\x00 ", 742),
]


@pytest.mark.parametrize(("data", "expected"), KAFKA_MURMUR2)
def test_murmur2_matches_kafka_utils_test(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


@pytest.mark.parametrize(("key", "partition"), JAVA_PARTITIONS)
def test_key_lands_where_javas_partitioner_puts_it(key: bytes, partition: int) -> None:
    assert murmur2_partition(key, 1000) == partition
    assert Partitioner("murmur2_random").partition("t", key, 1000, range(1000)) == partition


def test_murmur2_tail_lengths_and_high_bytes() -> None:
    # Every tail length (0-3 bytes past a 4-byte block) and bytes >= 0x80, which Java's signed
    # bytes must not sign-extend into the hash.
    for n in range(9):
        data = bytes(range(0x80, 0x80 + n))
        h = murmur2(data)
        assert -(2**31) <= h < 2**31
    assert murmur2(b"\xa4") == murmur2(bytes([0xA4]))
    assert murmur2(b"\x81" * 1000) != murmur2(b"\x81" * 999)


def test_to_positive_is_javas_not_abs() -> None:
    assert to_positive(-(2**31)) == 0  # Math.abs would overflow; Kafka masks the sign bit
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-973932308) == (-973932308) & 0x7FFFFFFF
    assert to_positive(12345) == 12345


def test_keyed_partition_ignores_availability() -> None:
    # Java hashes over all partitions, leader or not: a key keeps its partition.
    p = Partitioner("murmur2_random")
    assert p.partition("t", b"abc", 1000, available=[5]) == 107


def test_murmur2_partitioner_hashes_a_null_key_as_empty() -> None:
    # librdkafka's plain `murmur2`: a null key goes to one fixed partition.
    assert Partitioner("murmur2").partition("t", None, 1000, range(1000)) == 681


def test_consistent_is_crc32() -> None:
    import zlib

    assert consistent_partition(b"key", 7) == zlib.crc32(b"key") % 7
    assert Partitioner("consistent").partition("t", None, 7, range(7)) == 0  # crc32(b"") == 0


def test_sticky_keeps_one_partition_until_batch_size_bytes() -> None:
    sticky = StickyPartitioner(batch_size=1000, rng=random.Random(1))
    first = sticky.partition("t", 6, range(6))
    for _ in range(9):  # 900 bytes: still below batch.size
        assert sticky.partition("t", 6, range(6)) == first
        sticky.record_appended("t", first, 100, 6, range(6))
    sticky.record_appended("t", first, 100, 6, range(6))  # 1000 bytes: switch
    second = sticky.partition("t", 6, range(6))
    assert second != first


def test_sticky_spreads_over_available_partitions_only() -> None:
    sticky = StickyPartitioner(batch_size=10, rng=random.Random(7))
    seen: Counter[int] = Counter()
    for _ in range(600):
        p = sticky.partition("t", 6, [1, 3, 4])
        seen[p] += 1
        sticky.record_appended("t", p, 10, 6, [1, 3, 4])
    assert set(seen) == {1, 3, 4}
    assert min(seen.values()) > 100  # roughly even


def test_sticky_leaves_a_partition_that_lost_its_leader() -> None:
    sticky = StickyPartitioner(batch_size=10**9, rng=random.Random(3))
    p = sticky.partition("t", 4, range(4))
    others = [x for x in range(4) if x != p]
    assert sticky.partition("t", 4, others) in others


def test_sticky_is_per_topic_and_single_partition_stays() -> None:
    sticky = StickyPartitioner(batch_size=1, rng=random.Random(5))
    for _ in range(10):
        assert sticky.partition("one", 1, [0]) == 0
        sticky.record_appended("one", 0, 100, 1, [0])
    a = sticky.partition("a", 100, range(100))
    sticky.record_appended("b", sticky.partition("b", 100, range(100)), 100, 100, range(100))
    assert sticky.partition("a", 100, range(100)) == a


def test_keyed_records_do_not_move_the_sticky_partition() -> None:
    p = Partitioner("murmur2_random", batch_size=100, rng=random.Random(2))
    sticky = p.partition("t", None, 8, range(8))
    for i in range(50):
        key = f"k{i}".encode()
        part = p.partition("t", key, 8, range(8))
        p.record_appended("t", part, key, 1000, 8, range(8))
    assert p.partition("t", None, 8, range(8)) == sticky


def test_custom_partitioner_callable() -> None:
    calls = []

    def last(key: bytes | None, all_partitions: list[int], available: list[int]) -> int:
        calls.append((key, all_partitions, available))
        return all_partitions[-1]

    p = Partitioner(last)
    assert p.partition("t", b"k", 3, [0, 2]) == 2
    assert calls == [(b"k", [0, 1, 2], [0, 2])]
    with pytest.raises(ValueError, match="unknown partitioner"):
        Partitioner("fnv1a")
