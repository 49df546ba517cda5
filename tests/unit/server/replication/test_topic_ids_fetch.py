"""Pure parts of topic ids in Fetch (KIP-516) and diverging epochs (KIP-320): resolving a Fetch
request's topic ids, the replica id of v15+, Kafka's topic id consistency rule, the leader's
diverging-epoch decision, and the partition.metadata file."""

from __future__ import annotations

import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
from kio.schema.errors import ErrorCode

from odradek.common.topic_id import topic_id_to_text
from odradek.server.replication.diverging_epoch import READ, check_last_fetched_epoch
from odradek.server.replication.fetch_topic_ids import (
    ZERO_ID,
    has_consistent_topic_id,
    replica_id_of,
    resolve_topics,
)
from odradek.storage.leader_epoch import LeaderEpochFileCache
from odradek.storage.partition_metadata import (
    PartitionMetadataError,
    parse_partition_metadata,
    read_partition_metadata,
    write_partition_metadata,
)

A, B, C = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()


def topic(topic_id: uuid.UUID | None = None, name: str = "", parts: tuple[int, ...] = (0,)
          ) -> SimpleNamespace:
    return SimpleNamespace(topic_id=topic_id, topic=name,
                           partitions=[SimpleNamespace(partition=p) for p in parts])


def test_resolve_by_name_before_v13() -> None:
    r = resolve_topics(12, [topic(name="a"), topic(name="b")], lambda _i: None)
    assert r.names == ["a", "b"] and r.ids == {}


def test_resolve_by_id_from_v13() -> None:
    known = {A: "a", B: "b"}
    topics = [topic(A, parts=(0, 1)), topic(C, parts=(2, 5)), topic(B), topic(ZERO_ID),
              topic(None, parts=(7,))]
    r = resolve_topics(13, topics, known.get)
    assert r.names == ["a", None, "b", None, None]
    assert r.ids == {"a": A, "b": B}
    assert r.unknown(topics) == [(C, [2, 5]), (ZERO_ID, [0]), (ZERO_ID, [7])]


def test_zero_id_never_resolves() -> None:
    r = resolve_topics(16, [topic(ZERO_ID)], lambda _i: "whatever")
    assert r.names == [None]


def test_replica_id_of_each_version() -> None:
    assert replica_id_of(SimpleNamespace(replica_id=3)) == 3
    assert replica_id_of(SimpleNamespace(replica_id=-1)) == -1
    assert replica_id_of(SimpleNamespace(replica_state=SimpleNamespace(replica_id=2))) == 2
    assert replica_id_of(SimpleNamespace(replica_state=SimpleNamespace(replica_id=-1))) == -1


def test_consistent_topic_ids() -> None:
    assert has_consistent_topic_id(None, A) and has_consistent_topic_id(A, None)
    assert has_consistent_topic_id(ZERO_ID, A) and has_consistent_topic_id(A, ZERO_ID)
    assert has_consistent_topic_id(A, A)
    assert not has_consistent_topic_id(A, B)


# -- KIP-320: the leader's decision --------------------------------------------------------------


def leader_cache(entries: list[tuple[int, int]], leo: int):  # type: ignore[no-untyped-def]
    cache = LeaderEpochFileCache(None)
    for epoch, start in entries:
        cache.assign(epoch, start)

    def end_offset_for_epoch(epoch: int) -> tuple[int, int] | None:
        e, o = cache.end_offset_for(epoch, leo)
        return None if o == -1 else (e, o)
    return end_offset_for_epoch


# The leader's log: epoch 0 at 0-4, epoch 2 at 5-9, epoch 4 from 10, LEO 15.
LEADER = leader_cache([(0, 0), (2, 5), (4, 10)], 15)


@pytest.mark.parametrize(("last_epoch", "fetch_offset", "expected"), [
    (-1, 7, READ),                      # no last fetched epoch: read
    (4, 15, READ),                      # the latest epoch, at the LEO
    (4, 12, READ),
    (2, 10, READ),                      # epoch 2 ends at 10: caught up to its end
    (2, 8, READ),
    (0, 5, READ),
    (2, 11, ((2, 10), ErrorCode.none)),  # records of epoch 2 the leader does not have
    (3, 10, ((2, 10), ErrorCode.none)),  # an epoch the leader never had
    (3, 7, ((2, 10), ErrorCode.none)),   # ... even below its end (the epoch itself differs)
    (1, 5, ((0, 5), ErrorCode.none)),
    (0, 6, ((0, 5), ErrorCode.none)),
    (5, 15, (None, ErrorCode.offset_out_of_range)),  # newer than any leader epoch
])
def test_diverging_epoch(last_epoch: int, fetch_offset: int, expected: object) -> None:
    got = check_last_fetched_epoch(last_epoch, fetch_offset, 0, LEADER)
    if expected is READ:
        assert got is READ
    else:
        diverging, error = expected  # type: ignore[misc]
        assert (got.diverging_epoch, got.error) == (diverging, error)


def test_below_log_start_is_out_of_range_diverging_or_not() -> None:
    assert check_last_fetched_epoch(2, 3, 4, LEADER).error == ErrorCode.offset_out_of_range
    assert check_last_fetched_epoch(3, 3, 4, LEADER).error == ErrorCode.offset_out_of_range
    assert check_last_fetched_epoch(-1, 3, 4, LEADER) is READ  # no epoch: the read decides


def test_no_epochs_on_the_leader() -> None:
    assert check_last_fetched_epoch(0, 0, 0, leader_cache([], 0)).error == \
        ErrorCode.offset_out_of_range


# -- partition.metadata -----------------------------------------------------------------------


def test_partition_metadata_round_trip(tmp_path: Path) -> None:
    assert read_partition_metadata(tmp_path) is None
    write_partition_metadata(tmp_path, A)
    text = (tmp_path / "partition.metadata").read_text()
    assert text == f"version: 0\ntopic_id: {topic_id_to_text(A)}"  # Kafka's format
    assert read_partition_metadata(tmp_path) == A
    write_partition_metadata(tmp_path, B)
    assert read_partition_metadata(tmp_path) == B
    assert not (tmp_path / "partition.metadata.tmp").exists()


@pytest.mark.parametrize("text", [
    "", "version: 0", "version: 1\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA",
    "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA",  # the zero id
    "version: 0\ntopic_id: !!", "version: x\ntopic_id: AAAA", "version: 0\nname: t",
])
def test_bad_partition_metadata(text: str) -> None:
    with pytest.raises(PartitionMetadataError):
        parse_partition_metadata(text)


def test_metadata_cache_resolves_ids() -> None:
    from odradek.server.metadata_cache import MetadataCache, PartitionInfo

    cache = MetadataCache()
    info = PartitionInfo(0, 0, [0], [0])
    cache.update_partition("a", A, 0, info)
    cache.update_partition("a", A, 1, info)
    cache.update_partition("z", ZERO_ID, 0, info)  # a topic without an id
    assert cache.topic_name(A) == "a" and cache.topic_by_id(A) is cache.topic("a")
    assert cache.topic_name(ZERO_ID) is None
    cache.update_partition("z", B, 0, info)  # the controller assigned one
    assert cache.topic_name(B) == "z"
    cache.remove_partition("a", 0)
    assert cache.topic_name(A) == "a"
    cache.remove_partition("a", 1)
    assert cache.topic_name(A) is None
    cache.remove_topic("z")
    assert cache.topic_name(B) is None and cache.topic_by_id(B) is None


def test_partition_metadata_not_utf8(tmp_path: Path) -> None:
    (tmp_path / "partition.metadata").write_bytes(b"version: 0\ntopic_id: \xff\xfe")
    with pytest.raises(PartitionMetadataError):
        read_partition_metadata(tmp_path)
