"""ListOffsets v0 (protocol/list_offsets_v0.py and the handler's v0 path): the bytes of Kafka
2.8's ListOffsetsRequest/Response v0 schemas, decoded through the codec like any request, and
Kafka's handleListOffsetRequestV0 rules: the high-watermark cap for consumers, followers
answering only a debugging client, per-partition errors, unauthorized topics last."""

from __future__ import annotations

import struct
from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.protocol import list_offsets_v0 as v0
from odradek.protocol.codec import MalformedRequest, decode_request
from odradek.server.apis.list_offsets import ListOffsetsApi
from odradek.storage.errors import KafkaStorageError


def s16(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def v0_frame(topics: list[tuple[str, list[tuple[int, int, int]]]], replica_id: int = -1,
             correlation_id: int = 9) -> bytes:
    """A ListOffsets v0 request frame built by hand from ListOffsetsRequest.json."""
    body = struct.pack(">ii", replica_id, len(topics))
    for name, parts in topics:
        body += s16(name) + struct.pack(">i", len(parts))
        for index, timestamp, max_num in parts:
            body += struct.pack(">iqi", index, timestamp, max_num)
    payload = struct.pack(">hhi", 2, 0, correlation_id) + s16("cli") + body
    return struct.pack(">i", len(payload)) + payload


def test_a_hand_built_request_decodes_through_the_codec() -> None:
    frame = v0_frame([("a", [(0, -1, 5), (3, 1234, 1)]), ("b", [])], replica_id=-2)
    header, request = decode_request(frame[4:])
    assert (header.request_api_key, header.request_api_version) == (2, 0)
    assert (header.correlation_id, header.client_id) == (9, "cli")
    assert request == v0.ListOffsetsRequestV0(replica_id=-2, topics=(
        v0.ListOffsetsTopicV0(name="a", partitions=(
            v0.ListOffsetsPartitionV0(partition_index=0, timestamp=-1, max_num_offsets=5),
            v0.ListOffsetsPartitionV0(partition_index=3, timestamp=1234, max_num_offsets=1))),
        v0.ListOffsetsTopicV0(name="b")))
    assert v0.encode_request_frame(request, 9, "cli") == frame


@pytest.mark.parametrize("cut", [1, 4, 9, 20])
def test_a_truncated_request_is_malformed(cut: int) -> None:
    payload = v0_frame([("topic", [(0, -1, 5)])])[4:]
    with pytest.raises(MalformedRequest):
        decode_request(payload[:-cut])


def test_an_array_count_beyond_the_bytes_is_malformed() -> None:
    payload = struct.pack(">hhi", 2, 0, 1) + s16("c") + struct.pack(">ii", -1, 2**31 - 1)
    with pytest.raises(MalformedRequest):
        decode_request(payload)


def test_the_response_bytes() -> None:
    response = v0.ListOffsetsResponseV0(topics=(v0.ListOffsetsTopicResponseV0(
        name="t", partitions=(
            v0.ListOffsetsPartitionResponseV0(partition_index=1, old_style_offsets=(7, 3, 0)),
            v0.ListOffsetsPartitionResponseV0(partition_index=2, error_code=6))),))
    frame = v0.encode_response_frame(42, response)
    expected = (struct.pack(">i", 42) + struct.pack(">i", 1) + s16("t") + struct.pack(">i", 2)
                + struct.pack(">ihi", 1, 0, 3) + struct.pack(">qqq", 7, 3, 0)
                + struct.pack(">ihi", 2, 6, 0))
    assert frame == struct.pack(">i", len(expected)) + expected
    assert v0.decode_response_frame(frame[4:]) == (42, response)


# -- the handler --------------------------------------------------------------------------------


class FakeLog:
    def __init__(self, offsets: list[int] | Exception) -> None:
        self.offsets = offsets
        self.asked: list[tuple[int, int]] = []

    def legacy_offsets_before(self, timestamp: int, max_num_offsets: int) -> list[int]:
        self.asked.append((timestamp, max_num_offsets))
        if isinstance(self.offsets, Exception):
            raise self.offsets
        return self.offsets[:max_num_offsets]


class FakeReplicaManager:
    """("t", 0) led here with HW 5, ("t", 1) followed here, ("gone", 0) unknown."""

    def __init__(self, log0: FakeLog, log1: FakeLog) -> None:
        self.parts = {("t", 0): SimpleNamespace(log=log0, high_watermark=5, is_leader=True),
                      ("t", 1): SimpleNamespace(log=log1, high_watermark=2, is_leader=False)}

    def leader_partition_or_error(self, tp: tuple[str, int], current_leader_epoch: int = -1, *,
                                  require_leader: bool = True) -> tuple[Any, ErrorCode]:
        p = self.parts.get(tp)
        if p is None:
            return None, ErrorCode.unknown_topic_or_partition
        if require_leader and not p.is_leader:
            return p, ErrorCode.not_leader_or_follower
        return p, ErrorCode.none


def answer(api: ListOffsetsApi, request: v0.ListOffsetsRequestV0
           ) -> list[tuple[str, int, int, tuple[int, ...]]]:
    frame = api.handle(SimpleNamespace(correlation_id=3), request,
                       SimpleNamespace(principal=None, peer="127.0.0.1:1"))  # type: ignore[arg-type]
    cid, body = v0.decode_response_frame(frame[4:])
    assert cid == 3
    return [(t.name, p.partition_index, p.error_code, p.old_style_offsets)
            for t in body.topics for p in t.partitions]


def request_of(replica_id: int, *parts: tuple[str, int, int, int]) -> v0.ListOffsetsRequestV0:
    topics: dict[str, list[v0.ListOffsetsPartitionV0]] = {}
    for name, index, ts, n in parts:
        topics.setdefault(name, []).append(v0.ListOffsetsPartitionV0(
            partition_index=index, timestamp=ts, max_num_offsets=n))
    return v0.ListOffsetsRequestV0(replica_id=replica_id, topics=tuple(
        v0.ListOffsetsTopicV0(name=n, partitions=tuple(ps)) for n, ps in topics.items()))


def test_a_consumer_gets_offsets_above_the_high_watermark_replaced_by_it() -> None:
    log0 = FakeLog([9, 6, 5, 3, 0])
    api = ListOffsetsApi(FakeReplicaManager(log0, FakeLog([4])))  # type: ignore[arg-type]
    assert answer(api, request_of(-1, ("t", 0, -1, 10), ("t", 1, -1, 10), ("gone", 0, -1, 1))) \
        == [("t", 0, 0, (5, 5, 3, 0)), ("t", 1, ErrorCode.not_leader_or_follower, ()),
            ("gone", 0, ErrorCode.unknown_topic_or_partition, ())]
    assert log0.asked == [(-1, 10)]
    # a broker (replica id >= 0) gets the offsets as the log has them
    assert answer(api, request_of(1, ("t", 0, 77, 2))) == [("t", 0, 0, (9, 6))]
    assert log0.asked[-1] == (77, 2)


def test_a_debugging_client_may_ask_a_follower() -> None:
    api = ListOffsetsApi(FakeReplicaManager(FakeLog([1]), FakeLog([4, 0])))  # type: ignore[arg-type]
    assert answer(api, request_of(-2, ("t", 1, -1, 5))) == [("t", 1, 0, (4, 0))]


def test_storage_errors_and_a_negative_count_fail_the_partition() -> None:
    failing = FakeLog(KafkaStorageError("offline"))
    negative = FakeLog(ValueError("max_num_offsets -1 is negative"))
    api = ListOffsetsApi(FakeReplicaManager(failing, negative))  # type: ignore[arg-type]
    assert answer(api, request_of(-2, ("t", 0, -1, 1), ("t", 1, -1, -1))) == [
        ("t", 0, ErrorCode.kafka_storage_error, ()), ("t", 1, ErrorCode.unknown_server_error, ())]


class DenyTopic:
    enabled = True

    def __init__(self, denied: str) -> None:
        self.denied = denied

    def authorize(self, _principal: object, _host: object, _operation: object,
                  _resource_type: object, name: str, **_kw: object) -> bool:
        return name != self.denied

    def authorize_any(self, *_a: object, **_kw: object) -> bool:
        return True


def test_unauthorized_topics_come_last_with_their_error() -> None:
    rm = FakeReplicaManager(FakeLog([2, 0]), FakeLog([]))
    api = ListOffsetsApi(rm, DenyTopic("a"))  # type: ignore[arg-type]
    assert answer(api, request_of(-1, ("a", 0, -1, 1), ("t", 0, -2, 1))) == [
        ("t", 0, 0, (2,)), ("a", 0, ErrorCode.topic_authorization_failed, ())]
