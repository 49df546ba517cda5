"""Hand-encoded FetchResponse v4-v16 (odradek.protocol.fetch_response), checked against kio's
generated FetchResponse decoder of the same version (and, for v13+, kio's encoder: the same
response encoded by kio gives the same bytes). Tests name topics by name; for v13+ each name
stands for the id `topic_id(name)`."""

from __future__ import annotations

import dataclasses
import datetime
import os
import struct
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import kio.index
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

from odradek.protocol.codec import decode_response, encode_response
from odradek.protocol.fetch_response import (
    MAX_VERSION,
    MIN_VERSION,
    TOPIC_IDS_FROM,
    NodeEndpoint,
    PartitionData,
    encode_fetch_response,
)
from odradek.protocol.records import build_batch

VERSIONS = range(MIN_VERSION, MAX_VERSION + 1)


@dataclasses.dataclass
class FakeRegion:
    """Like storage.segment.FileRegion: `size` bytes at `position` of an open file."""

    file: Any
    position: int
    size: int


def kio_module(version: int) -> Any:
    return kio.index.load_payload_module(1, version, EntityType.response)


def resolve(parts: Sequence[Any]) -> bytes:
    out = bytearray()
    for part in parts:
        if isinstance(part, bytes | bytearray | memoryview):
            out += part
        else:
            data = os.pread(part.file.fileno(), part.size, part.position)
            assert len(data) == part.size
            out += data
    return bytes(out)


def topic_id(name: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_URL, name)


def wire_topics(version: int, topics: Sequence[tuple[str, Sequence[PartitionData]]]
                ) -> list[tuple[str | uuid.UUID, Sequence[PartitionData]]]:
    """What the encoder is given: names before v13, ids from v13."""
    if version < TOPIC_IDS_FROM:
        return list(topics)
    return [(topic_id(name), parts) for name, parts in topics]


def _kw(cls: type, **kwargs: Any) -> dict[str, Any]:
    """Keep the keyword arguments `cls` has in this version."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in kwargs.items() if k in names}


def expected_response(
    version: int, topics: Sequence[tuple[str, Sequence[PartitionData]]], records: dict[int, bytes],
    throttle_ms: int, error_code: int, session_id: int,
    node_endpoints: Sequence[NodeEndpoint] = (),
) -> Any:
    m = kio_module(version)
    out_topics = []
    for name, parts in topics:
        out_parts = []
        for p in parts:
            aborted = (None if p.aborted_transactions is None else tuple(
                m.AbortedTransaction(producer_id=pid, first_offset=first)
                for pid, first in p.aborted_transactions))
            kw: dict[str, Any] = dict(
                partition_index=p.partition, error_code=ErrorCode(p.error_code),
                high_watermark=p.high_watermark, last_stable_offset=p.last_stable_offset,
                log_start_offset=p.log_start_offset, aborted_transactions=aborted,
                preferred_read_replica=p.preferred_read_replica, records=records[id(p)],
            )
            if version >= 12 and p.diverging_epoch is not None:
                kw["diverging_epoch"] = m.EpochEndOffset(epoch=p.diverging_epoch[0],
                                                         end_offset=p.diverging_epoch[1])
            if version >= 12 and p.current_leader is not None:
                kw["current_leader"] = m.LeaderIdAndEpoch(leader_id=p.current_leader[0],
                                                          leader_epoch=p.current_leader[1])
            out_parts.append(m.PartitionData(**_kw(m.PartitionData, **kw)))
        out_topics.append(m.FetchableTopicResponse(**_kw(
            m.FetchableTopicResponse, topic=name, topic_id=topic_id(name),
            partitions=tuple(out_parts))))
    nodes = tuple(m.NodeEndpoint(node_id=n.node_id, host=n.host, port=n.port, rack=n.rack)
                  for n in node_endpoints) if version >= 16 else ()
    return m.FetchResponse(**_kw(
        m.FetchResponse, throttle_time=datetime.timedelta(milliseconds=throttle_ms),
        error_code=ErrorCode(error_code), session_id=session_id, responses=tuple(out_topics),
        node_endpoints=nodes))


def check(version: int, topics: Sequence[tuple[str, Sequence[PartitionData]]],
          records: dict[int, bytes], correlation_id: int = 17, throttle_ms: int = 0,
          error_code: int = 0, session_id: int = 0,
          node_endpoints: Sequence[NodeEndpoint] = ()) -> bytes:
    parts = encode_fetch_response(version, correlation_id, wire_topics(version, topics),
                                  throttle_time_ms=throttle_ms, error_code=error_code,
                                  session_id=session_id, node_endpoints=node_endpoints)
    data = resolve(parts)
    (size,) = struct.unpack_from(">i", data)
    assert parts[0] == data[:4]
    assert size == len(data) - 4
    corr, body = decode_response(kio_module(version).FetchResponse, data[4:])
    assert corr == correlation_id
    expected = expected_response(version, topics, records, throttle_ms,
                                 error_code if version >= 7 else 0,
                                 session_id if version >= 7 else 0, node_endpoints)
    assert body == expected
    if version >= TOPIC_IDS_FROM:  # kio's own encoder writes the same bytes
        assert encode_response(type(expected), correlation_id, expected) == data
    return data


@pytest.fixture
def segment_file(tmp_path: Path) -> Iterator[tuple[Any, bytes]]:
    batches = b"".join(build_batch([(b"k", b"v" * i)], base_offset=i, timestamp_ms=i)
                       for i in range(5))
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"\x00" * 100 + batches)
    with path.open("rb") as f:
        yield f, batches


@pytest.mark.parametrize("version", VERSIONS)
def test_byte_records(version: int) -> None:
    b1 = build_batch([(b"a", b"1"), (None, b"2")], base_offset=10, timestamp_ms=5)
    b2 = build_batch([(b"c", None)], base_offset=12, timestamp_ms=6)
    p0 = PartitionData(0, 0, 13, 13, 10, [b1, b2], len(b1) + len(b2),
                       aborted_transactions=[(7, 11), (8, 12)])
    p1 = PartitionData(3, 1, -1, -1, -1, (), 0)  # OFFSET_OUT_OF_RANGE, no records
    p2 = PartitionData(1, 0, 99, 90, 0, [b2], len(b2), diverging_epoch=(4, 80),
                       preferred_read_replica=2, aborted_transactions=[])
    topics = [("orders", [p0, p1]), ("t\u00e9", [p2]), ("empty", [])]
    check(version, topics, {id(p0): b1 + b2, id(p1): b"", id(p2): b2},
          correlation_id=123456, throttle_ms=25, error_code=0, session_id=77)


@pytest.mark.parametrize("version", VERSIONS)
def test_file_region_records(version: int, segment_file: tuple[Any, bytes]) -> None:
    f, batches = segment_file
    half = len(batches) // 2
    r1, r2 = FakeRegion(f, 100, half), FakeRegion(f, 100 + half, len(batches) - half)
    p0 = PartitionData(2, 0, 5, 5, 0, [r1, r2], len(batches))
    p1 = PartitionData(5, 0, 5, 5, 0, [b"\x01\x02", FakeRegion(f, 100, 3)], 5)
    check(version, [("logs", [p0, p1])], {id(p0): batches, id(p1): b"\x01\x02" + batches[:3]})


@pytest.mark.parametrize("version", VERSIONS)
def test_no_topics_and_top_level_error(version: int) -> None:
    check(version, [], {}, correlation_id=-5, throttle_ms=1000, error_code=71, session_id=0)


def test_unsupported_versions() -> None:
    for version in (0, 3, 17):
        with pytest.raises(ValueError):
            encode_fetch_response(version, 1, [])


def test_v12_diverging_epoch_tag_bytes() -> None:
    p = PartitionData(0, 0, 10, 10, 0, (), 0, diverging_epoch=(3, 42))
    data = b"".join(encode_fetch_response(12, 1, [("t", [p])]))
    # ... records (compact, empty: uvarint 1), then the partition's tagged fields: one field,
    # tag 0, size 13, EpochEndOffset {epoch i32, end offset i64, no tagged fields}.
    tag = b"\x01" + b"\x00" + b"\x0d" + struct.pack(">iq", 3, 42) + b"\x00"
    assert data.endswith(b"\x01" + tag + b"\x00" + b"\x00")
    plain = b"".join(encode_fetch_response(
        12, 1, [("t", [dataclasses.replace(p, diverging_epoch=None)])]))
    assert len(data) - len(plain) == len(tag) - 1
    _, body = decode_response(kio_module(12).FetchResponse, data[4:])
    epoch = body.responses[0].partitions[0].diverging_epoch
    assert (epoch.epoch, epoch.end_offset) == (3, 42)


@pytest.mark.parametrize("version", [12, 13, 15, 16])
def test_current_leader_and_node_endpoints(version: int) -> None:
    """KIP-951: a NOT_LEADER_OR_FOLLOWER partition names the leader (tag 1) and, from v16, the
    response carries the leader's endpoint (tag 0); ignored before v16."""
    p0 = PartitionData(0, 6, -1, -1, -1, (), 0, current_leader=(2, 7))
    p1 = PartitionData(1, 0, 5, 5, 0, (), 0, diverging_epoch=(3, 4), current_leader=(1, 9))
    nodes = [NodeEndpoint(2, "broker-2.example", 9092, "rack-b"), NodeEndpoint(1, "h", 1)]
    check(version, [("t", [p0, p1])], {id(p0): b"", id(p1): b""}, node_endpoints=nodes)


def test_v13_names_topics_by_id() -> None:
    p = PartitionData(0, 0, 1, 1, 0, (), 0)
    tid = topic_id("t")
    data = b"".join(encode_fetch_response(13, 1, [(tid, [p])]))
    assert tid.bytes in data and b"\x02t" not in data
    with pytest.raises(TypeError):
        encode_fetch_response(13, 1, [("t", [p])])
    with pytest.raises(TypeError):
        encode_fetch_response(12, 1, [(tid, [p])])


@pytest.mark.parametrize("version", [4, 11])
def test_diverging_epoch_ignored_before_v12(version: int) -> None:
    p = PartitionData(0, 0, 10, 10, 0, (), 0)
    with_epoch = dataclasses.replace(p, diverging_epoch=(3, 42))
    assert (b"".join(encode_fetch_response(version, 1, [("t", [p])]))
            == b"".join(encode_fetch_response(version, 1, [("t", [with_epoch])])))


# --- random responses ---------------------------------------------------------------------------

i64s = st.integers(-(2**63), 2**63 - 1)
i32s = st.integers(-(2**31), 2**31 - 1)
error_codes = st.sampled_from([0, 1, 3, 6, 74, 75])
partitions = st.builds(
    lambda idx, err, hw, lso, lso0, recs, div, rr, ab, cl: (
        PartitionData(idx, err, hw, lso, lso0, recs, sum(len(r) for r in recs), div, rr, ab,
                      cl)),
    i32s, error_codes, i64s, i64s, i64s,
    st.lists(st.binary(min_size=1, max_size=40), max_size=3),
    st.none() | st.tuples(i32s, i64s), i32s,
    st.none() | st.lists(st.tuples(i64s, i64s), max_size=3),
    st.none() | st.tuples(i32s, i32s),
)
topic_names = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=20)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(version=st.sampled_from(VERSIONS),
       topics=st.lists(st.tuples(topic_names, st.lists(partitions, max_size=3)), max_size=3),
       corr=i32s, throttle=st.integers(0, 2**31 - 1), err=error_codes, session=i32s,
       nodes=st.lists(st.builds(NodeEndpoint, i32s, topic_names, i32s, st.none() | topic_names),
                      max_size=2))
def test_random_responses_decode_with_kio(version: int, topics: list[Any], corr: int,
                                          throttle: int, err: int, session: int,
                                          nodes: list[NodeEndpoint]) -> None:
    records = {id(p): b"".join(p.records) for _, parts in topics for p in parts}
    check(version, topics, records, corr, throttle, err, session, nodes)
