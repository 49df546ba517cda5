"""Inter-broker codecs (LeaderAndIsr 4, StopReplica 5, UpdateMetadata 6, ControlledShutdown 7).

Round trips for every message at every version, golden bytes written by hand from Kafka's JSON
schemas, unknown tagged fields skipped, and version rules.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol import interbroker as ib
from odradek.protocol.interbroker import (
    CODEC_VERSIONS,
    CONTROLLED_SHUTDOWN,
    LEADER_AND_ISR,
    STOP_REPLICA,
    SUPPORTED_API_VERSIONS,
    UPDATE_METADATA,
    ControlledShutdownRequest,
    ControlledShutdownResponse,
    DecodeError,
    LeaderAndIsrPartitionError,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    RemainingPartition,
    StopReplicaPartitionState,
    StopReplicaRequest,
    StopReplicaTopicState,
    UnsupportedVersionError,
    UpdateMetadataBroker,
    UpdateMetadataEndpoint,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)

# ---- strategies built from the schemas -------------------------------------------------------

_INT_RANGES = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}


def _field_strategy(field: ib.Field, version: int) -> st.SearchStrategy[Any]:
    nullable = ib._in(ib._parse_versions(field.nullable_versions), version)
    if field.type in _INT_RANGES:
        bits = _INT_RANGES[field.type]
        return st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    if field.type == "bool":
        return st.booleans()
    if field.type == "uuid":
        return st.uuids()
    if field.type == "string":
        text = st.text(max_size=12)
        return st.none() | text if nullable else text
    if field.type == "[]int32":
        return st.lists(st.integers(-(2**31), 2**31 - 1), max_size=5).map(tuple)
    assert field.struct is not None
    return st.lists(message_strategy(field.struct, version), max_size=3).map(tuple)


def message_strategy(cls: type, version: int) -> st.SearchStrategy[Any]:
    """Messages valid at ``version``: fields absent at that version keep their defaults."""
    present = {f.name: _field_strategy(f, version) for f in cls.SCHEMA  # type: ignore[attr-defined]
               if ib._in(f.version_range, version)}
    return st.builds(cls, **present)


def _cases(kind: str) -> list[tuple[int, int, type]]:
    out = []
    for key, (lo, hi) in CODEC_VERSIONS.items():
        api = ib._APIS[key]
        for v in range(lo, hi + 1):
            out.append((key, v, api.request if kind == "request" else api.response))
    return out


REQUEST_CASES = _cases("request")
RESPONSE_CASES = _cases("response")


def _id(case: tuple[int, int, type]) -> str:
    return f"{case[2].__name__}-v{case[1]}"


@pytest.mark.parametrize("case", REQUEST_CASES, ids=_id)
def test_request_round_trip(case: tuple[int, int, type]) -> None:
    key, version, cls = case

    @settings(max_examples=25, deadline=None)
    @given(message_strategy(cls, version), st.binary(max_size=4))
    def check(msg: Any, prefix: bytes) -> None:
        raw = encode_request(key, version, msg)
        assert decode_request(key, version, raw) == msg
        assert decode_request(key, version, prefix + raw, len(prefix)) == msg
        assert encode_request(key, version, decode_request(key, version, raw)) == raw

    check()


@pytest.mark.parametrize("case", RESPONSE_CASES, ids=_id)
def test_response_round_trip(case: tuple[int, int, type]) -> None:
    key, version, cls = case

    @settings(max_examples=25, deadline=None)
    @given(message_strategy(cls, version))
    def check(msg: Any) -> None:
        raw = encode_response(key, version, msg)
        assert decode_response(key, version, raw) == msg
        assert decode_response(key, version, bytearray(raw)) == msg
        assert encode_response(key, version, decode_response(key, version, raw)) == raw

    check()


# ---- golden bytes, written by hand from the schemas --------------------------------------------

def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


CS_V3_MSG = ControlledShutdownRequest(broker_id=1, broker_epoch=0x1234)
CS_V3 = i32(1) + i64(0x1234) + b"\x00"  # BrokerId, BrokerEpoch, empty tagged fields

STOP_V3_MSG = StopReplicaRequest(
    controller_id=0, controller_epoch=1, broker_epoch=5,
    topic_states=(StopReplicaTopicState(topic_name="t", partition_states=(
        StopReplicaPartitionState(partition_index=0, leader_epoch=3, delete_partition=True),)),))
STOP_V3 = (i32(0) + i32(1) + i64(5)
           + b"\x02"                  # TopicStates: compact array, 1 element
           + b"\x02t"                 # TopicName: compact string "t"
           + b"\x02"                  # PartitionStates: 1 element
           + i32(0) + i32(3) + b"\x01"  # PartitionIndex, LeaderEpoch, DeletePartition
           + b"\x00"                  # partition state tagged fields
           + b"\x00"                  # topic state tagged fields
           + b"\x00")                 # request tagged fields

LAI_RESP_V4_MSG = LeaderAndIsrResponse(error_code=0, partition_errors=(
    LeaderAndIsrPartitionError(topic_name="a", partition_index=2, error_code=6),))
LAI_RESP_V4 = i16(0) + b"\x02" + b"\x02a" + i32(2) + i16(6) + b"\x00" + b"\x00"

UM_V8_MSG = UpdateMetadataRequest(controller_id=3, type=2, controller_epoch=4, broker_epoch=9)
UM_V8 = (i32(3) + b"\x00" + i32(4) + i64(9)
         + b"\x01" + b"\x01"          # TopicStates, LiveBrokers: empty compact arrays
         + b"\x01" + b"\x00" + b"\x01" + b"\x02")  # 1 tagged field: tag 0 (Type), size 1, 2

STOP_V0_MSG = StopReplicaRequest(controller_id=2, controller_epoch=7, delete_partitions=True,
                                 ungrouped_partitions=(ib.StopReplicaPartitionV0(
                                     topic_name="ab", partition_index=5),))
STOP_V0 = i32(2) + i32(7) + b"\x01" + i32(1) + i16(2) + b"ab" + i32(5)

UM_V1_BROKER = UpdateMetadataBroker(id=1, endpoints=(
    UpdateMetadataEndpoint(port=9092, host="h", security_protocol=0),))
UM_V1_MSG = UpdateMetadataRequest(controller_id=1, controller_epoch=2, ungrouped_partition_states=(
    UpdateMetadataPartitionState(topic_name="t", partition_index=0, controller_epoch=2, leader=1,
                                 leader_epoch=0, isr=(1,), zk_version=0, replicas=(1,)),),
    live_brokers=(UM_V1_BROKER,))
UM_V1 = (i32(1) + i32(2)
         + i32(1) + i16(1) + b"t" + i32(0) + i32(2) + i32(1) + i32(0)
         + i32(1) + i32(1) + i32(0) + i32(1) + i32(1)
         + i32(1) + i32(1) + i32(1) + i32(9092) + i16(1) + b"h" + i16(0))

GOLDEN = [
    ("request", CONTROLLED_SHUTDOWN, 3, CS_V3_MSG, CS_V3),
    ("request", STOP_REPLICA, 3, STOP_V3_MSG, STOP_V3),
    ("response", LEADER_AND_ISR, 4, LAI_RESP_V4_MSG, LAI_RESP_V4),
    ("request", UPDATE_METADATA, 8, UM_V8_MSG, UM_V8),
    ("request", STOP_REPLICA, 0, STOP_V0_MSG, STOP_V0),
    ("request", UPDATE_METADATA, 1, UM_V1_MSG, UM_V1),
]


def _codec(kind: str) -> tuple[Any, Any]:
    if kind == "request":
        return encode_request, decode_request
    return encode_response, decode_response


@pytest.mark.parametrize(("kind", "key", "version", "msg", "raw"), GOLDEN,
                         ids=[f"{g[3].__class__.__name__}-v{g[2]}" for g in GOLDEN])
def test_golden_bytes(kind: str, key: int, version: int, msg: Any, raw: bytes) -> None:
    encode, decode = _codec(kind)
    assert encode(key, version, msg) == raw
    assert decode(key, version, raw) == msg


@pytest.mark.parametrize(("kind", "key", "version", "msg", "raw"), GOLDEN,
                         ids=[f"{g[3].__class__.__name__}-v{g[2]}" for g in GOLDEN])
def test_every_truncation_is_a_decode_error(kind: str, key: int, version: int, msg: Any,
                                            raw: bytes) -> None:
    _, decode = _codec(kind)
    for cut in range(len(raw)):
        with pytest.raises(DecodeError):
            decode(key, version, raw[:cut])


def test_controlled_shutdown_v0_body_has_no_epoch() -> None:
    assert encode_request(CONTROLLED_SHUTDOWN, 0, ControlledShutdownRequest(broker_id=7)) == i32(7)
    resp = ControlledShutdownResponse(error_code=0, remaining_partitions=(
        RemainingPartition(topic_name="x", partition_index=1),))
    assert encode_response(CONTROLLED_SHUTDOWN, 1, resp) == i16(0) + i32(1) + i16(1) + b"x" + i32(1)


# ---- tagged fields ------------------------------------------------------------------------------

UNKNOWN_TAGS = (b"\x02"                         # two tagged fields
                + b"\x07" + b"\x03" + b"abc"     # tag 7, 3 bytes
                + b"\x81\x01" + b"\x00")         # tag 129 (2-byte uvarint), empty


def test_unknown_tagged_fields_are_skipped_at_top_level() -> None:
    raw = CS_V3[:-1] + UNKNOWN_TAGS
    assert decode_request(CONTROLLED_SHUTDOWN, 3, raw) == CS_V3_MSG


def test_unknown_tagged_fields_are_skipped_in_nested_structs() -> None:
    # replace the partition state's empty tagged section (first of the three trailing zeros)
    raw = STOP_V3[:-3] + UNKNOWN_TAGS + b"\x00\x00"
    assert decode_request(STOP_REPLICA, 3, raw) == STOP_V3_MSG


def test_known_and_unknown_tagged_fields_together() -> None:
    raw = UM_V8[:-4] + b"\x02" + b"\x00\x01\x01" + b"\x05\x02zz"
    assert decode_request(UPDATE_METADATA, 8, raw) == UpdateMetadataRequest(
        controller_id=3, type=1, controller_epoch=4, broker_epoch=9)


def test_default_tagged_field_is_not_written() -> None:
    raw = encode_request(UPDATE_METADATA, 8, UpdateMetadataRequest(controller_id=3))
    assert raw.endswith(b"\x01\x01\x00")


def test_truncated_tagged_field_is_a_decode_error() -> None:
    with pytest.raises(DecodeError):
        decode_request(CONTROLLED_SHUTDOWN, 3, CS_V3[:-1] + b"\x01\x07\x05ab")


# ---- version rules -------------------------------------------------------------------------------


def test_non_ignorable_field_cannot_be_written_at_older_version() -> None:
    with pytest.raises(UnsupportedVersionError, match="non-default topic_states at version 1"):
        encode_request(LEADER_AND_ISR, 1, LeaderAndIsrRequest(topic_states=(
            ib.LeaderAndIsrTopicState(topic_name="t"),)))
    with pytest.raises(UnsupportedVersionError, match="type"):
        encode_request(LEADER_AND_ISR, 4, LeaderAndIsrRequest(type=1))


def test_ignorable_field_is_dropped_at_older_version() -> None:
    raw = encode_request(CONTROLLED_SHUTDOWN, 1, ControlledShutdownRequest(broker_id=1,
                                                                           broker_epoch=99))
    assert raw == i32(1)
    assert decode_request(CONTROLLED_SHUTDOWN, 1, raw).broker_epoch == -1


@pytest.mark.parametrize("case", REQUEST_CASES, ids=_id)
def test_a_shared_body_sent_with_another_broker_epoch_is_that_message_encoded(
        case: tuple[int, int, type]) -> None:
    """KIP-380: one body encoded for several brokers carries each one's broker epoch; the
    frame of a message over a body encoded with another epoch is the message's own frame."""
    key, version, cls = case
    has_epoch = any(f.name == "broker_epoch" and ib._in(f.version_range, version)
                    for f in cls.SCHEMA)  # type: ignore[attr-defined]
    offset = ib.broker_epoch_offset(key, version)
    assert (offset is not None) == has_epoch

    @settings(max_examples=25, deadline=None)
    @given(message_strategy(cls, version), st.integers(-(2**63), 2**63 - 1))
    def check(msg: Any, epoch: int) -> None:
        mine = replace(msg, broker_epoch=epoch)
        shared = encode_request(key, version, msg)
        frame = ib.encode_request_frame(key, version, mine, 3, "controller-0", shared)
        expected = mine if has_epoch else msg  # (the field dropped where it does not exist)
        assert frame == ib.encode_request_frame(key, version, expected, 3, "controller-0")
        assert ib.decode_request_frame(frame[4:])[3] == expected
        if offset is not None:
            assert encode_request(key, version, mine)[offset:offset + 8] == i64(epoch)

    check()


def test_unsupported_versions_and_keys() -> None:
    with pytest.raises(UnsupportedVersionError):
        encode_request(LEADER_AND_ISR, 8, LeaderAndIsrRequest())
    with pytest.raises(UnsupportedVersionError):
        decode_request(0, 0, b"")
    with pytest.raises(TypeError):
        encode_request(STOP_REPLICA, 0, LeaderAndIsrRequest())


def test_advertised_versions_and_headers() -> None:
    assert SUPPORTED_API_VERSIONS == ((4, 0, 5), (5, 0, 3), (6, 0, 7), (7, 0, 3))
    for key, lo, hi in SUPPORTED_API_VERSIONS:
        assert CODEC_VERSIONS[key][0] <= lo and hi <= CODEC_VERSIONS[key][1]
    assert [ib.is_flexible(LEADER_AND_ISR, v) for v in (3, 4)] == [False, True]
    assert [ib.is_flexible(STOP_REPLICA, v) for v in (1, 2)] == [False, True]
    assert [ib.is_flexible(UPDATE_METADATA, v) for v in (5, 6)] == [False, True]
    assert [ib.is_flexible(CONTROLLED_SHUTDOWN, v) for v in (2, 3)] == [False, True]
    assert ib.request_header_version(CONTROLLED_SHUTDOWN, 0) == 0
    assert ib.request_header_version(CONTROLLED_SHUTDOWN, 1) == 1
    assert ib.request_header_version(LEADER_AND_ISR, 4) == 2
    assert ib.response_header_version(UPDATE_METADATA, 5) == 0
    assert ib.response_header_version(UPDATE_METADATA, 6) == 1


def test_nullable_rack_and_bad_utf8() -> None:
    req = UpdateMetadataRequest(live_brokers=(UpdateMetadataBroker(id=1, rack=None),))
    raw = encode_request(UPDATE_METADATA, 2, req)
    assert raw.endswith(i16(-1))
    assert decode_request(UPDATE_METADATA, 2, raw) == req
    with pytest.raises(DecodeError, match="UTF-8"):
        decode_request(STOP_REPLICA, 0, STOP_V0.replace(b"ab", b"\xff\xfe"))
    with pytest.raises(ValueError, match="non-nullable"):
        encode_response(CONTROLLED_SHUTDOWN, 0, ControlledShutdownResponse(
            remaining_partitions=(RemainingPartition(topic_name=None),)))  # type: ignore[arg-type]


# ---- re-layout between versions (the Java builders' job) ---------------------------------------


def _lai_state(topic: str, p: int) -> LeaderAndIsrPartitionState:
    return LeaderAndIsrPartitionState(topic_name=topic, partition_index=p, controller_epoch=1,
                                      leader=1, leader_epoch=2, isr=(1, 2), partition_epoch=3,
                                      replicas=(1, 2))


def test_leader_and_isr_for_version_groups_by_topic() -> None:
    states = (_lai_state("a", 0), _lai_state("b", 0), _lai_state("a", 1))
    req = LeaderAndIsrRequest(controller_id=1, controller_epoch=1,
                              ungrouped_partition_states=states)
    tid = uuid.uuid4()
    for version in range(0, 8):
        laid = req.for_version(version, {"a": tid})
        decoded = decode_request(LEADER_AND_ISR, version,
                                 encode_request(LEADER_AND_ISR, version, laid))
        assert sorted(decoded.partition_states(), key=lambda s: (s.topic_name, s.partition_index)
                      ) == sorted(states, key=lambda s: (s.topic_name, s.partition_index))
        if version >= 5:
            assert decoded.topic_states[0].topic_id == tid


def test_stop_replica_for_version() -> None:
    req = StopReplicaRequest(controller_id=1, controller_epoch=2, topic_states=(
        StopReplicaTopicState(topic_name="t", partition_states=(
            StopReplicaPartitionState(partition_index=0, delete_partition=True),
            StopReplicaPartitionState(partition_index=1, delete_partition=True))),))
    for version in range(0, 5):
        laid = req.for_version(version)
        decoded = decode_request(STOP_REPLICA, version, encode_request(STOP_REPLICA, version, laid))
        assert [(t, ps.partition_index, ps.delete_partition)
                for t, ps in decoded.partition_states()] == [("t", 0, True), ("t", 1, True)]
    mixed = StopReplicaRequest(topic_states=(StopReplicaTopicState(
        topic_name="t", partition_states=(
            StopReplicaPartitionState(partition_index=0, delete_partition=True),
            StopReplicaPartitionState(partition_index=1, delete_partition=False))),))
    with pytest.raises(UnsupportedVersionError, match="mix"):
        mixed.for_version(2)


def test_update_metadata_for_version_brokers_and_partitions() -> None:
    laid0 = UM_V1_MSG.for_version(0)
    assert laid0.live_brokers[0].v0_host == "h" and laid0.live_brokers[0].v0_port == 9092
    decoded = decode_request(UPDATE_METADATA, 0, encode_request(UPDATE_METADATA, 0, laid0))
    assert decoded.live_brokers[0].v0_host == "h"
    back = decoded.for_version(7)
    assert back.live_brokers[0].endpoints[0].host == "h"
    assert [s.topic_name for s in back.partition_states()] == ["t"]
    assert back.topic_states[0].topic_name == "t"
