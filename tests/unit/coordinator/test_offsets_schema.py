"""`__consumer_offsets` records (S-7.5): Kafka's GroupMetadataManager key/value schemas, checked
against bytes built by hand from the schemas, and the group -> partition mapping (S-7.3)."""

from __future__ import annotations

import struct

import pytest

from odradek.coordinator import offsets as o
from odradek.protocol.primitives import SchemaError


def s16(text: str | None) -> bytes:
    """int16 length + UTF-8, -1 for null (Kafka's legacy string)."""
    if text is None:
        return struct.pack(">h", -1)
    b = text.encode()
    return struct.pack(">h", len(b)) + b


def b32(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


# -- Java String.hashCode, Utils.abs, partitionFor -------------------------------------------------

@pytest.mark.parametrize(("group", "expected"), [
    ("", 0),
    ("a", 97),
    ("hello", 99162322),  # the textbook value
    ("Aa", 2112),
    ("BB", 2112),  # the classic collision
    ("polygenelubricants", -2**31),  # the classic Integer.MIN_VALUE
    ("\U0001F600", 0xD83D * 31 + 0xDE00),  # a surrogate pair: two UTF-16 code units
])
def test_java_string_hashcode(group: str, expected: int) -> None:
    assert o.java_string_hashcode(group) == expected


def test_java_string_hashcode_my_group_by_hand() -> None:
    # h = 31 * h + c for m y - g r o u p, wrapping to int32 each step:
    # 109, 3500, 108545, 3364998, 104315052, 3233766723 -> -1061200573,
    # -1061200573*31 + 111 = -32897217652 -> 1462520722, 1462520722*31 + 117 = 45338142499
    # -> -1906497762
    assert o.java_string_hashcode("my-group") == -1906497762
    assert o.partition_for("my-group", 50) == 1906497762 % 50 == 12


def test_kafka_abs_and_partition_for() -> None:
    assert o.kafka_abs(-5) == 5
    assert o.kafka_abs(7) == 7
    assert o.kafka_abs(-2**31) == 0  # Math.abs would stay negative
    assert o.partition_for("polygenelubricants", 50) == 0
    assert o.partition_for("", 50) == 0
    assert o.partition_for("a", 50) == 97 % 50
    assert o.partition_for("hello", 7) == 99162322 % 7
    for g in ("x", "group-1", "consumer-group", "ünïcödé"):
        assert 0 <= o.partition_for(g, 50) < 50


# -- keys ------------------------------------------------------------------------------------------

def test_offset_commit_key_v1_golden() -> None:
    expected = b"\x00\x01" + b"\x00\x05group" + b"\x00\x05topic" + b"\x00\x00\x00\x07"
    assert o.offset_commit_key("group", "topic", 7) == expected
    assert o.read_message_key(expected) == o.OffsetKey("group", "topic", 7, 1)


def test_offset_commit_key_v0_is_read() -> None:
    key = b"\x00\x00" + s16("g") + s16("t") + struct.pack(">i", 2)
    assert o.read_message_key(key) == o.OffsetKey("g", "t", 2, 0)


def test_group_metadata_key_v2_golden() -> None:
    expected = b"\x00\x02\x00\x08my-group"
    assert o.group_metadata_key("my-group") == expected
    assert o.read_message_key(expected) == o.GroupMetadataKey("my-group")


def test_unknown_key_version() -> None:
    with pytest.raises(SchemaError):
        o.read_message_key(b"\x00\x03\x00\x01g")
    with pytest.raises(SchemaError):
        o.read_message_key(b"\x00\x01\x00\x05gr")  # truncated


# -- offset commit values --------------------------------------------------------------------------

def test_offset_value_v3_golden() -> None:
    om = o.OffsetAndMetadata(offset=42, leader_epoch=5, metadata="meta",
                             commit_timestamp=1_600_000_000_123)
    expected = (b"\x00\x03" + struct.pack(">q", 42) + struct.pack(">i", 5) + s16("meta")
                + struct.pack(">q", 1_600_000_000_123))
    assert o.offset_commit_value(om) == expected
    assert o.read_offset_value(expected) == om


def test_offset_value_v1_when_expire_timestamp() -> None:
    om = o.OffsetAndMetadata(offset=9, metadata="", commit_timestamp=1000,
                             expire_timestamp=61000)
    expected = (b"\x00\x01" + struct.pack(">q", 9) + s16("") + struct.pack(">q", 1000)
                + struct.pack(">q", 61000))
    assert o.offset_commit_value(om) == expected
    assert o.read_offset_value(expected) == om  # v1 has no leader epoch: -1


def test_offset_values_v0_and_v2_are_read() -> None:
    v0 = b"\x00\x00" + struct.pack(">q", 3) + s16("x") + struct.pack(">q", 77)
    assert o.read_offset_value(v0) == o.OffsetAndMetadata(3, -1, "x", 77, None)
    v2 = b"\x00\x02" + struct.pack(">q", 4) + s16("") + struct.pack(">q", 88)
    assert o.read_offset_value(v2) == o.OffsetAndMetadata(4, -1, "", 88, None)
    # v1 with the default expire timestamp -1 means "no explicit expiry"
    v1 = v0[2:]
    v1 = b"\x00\x01" + v1 + struct.pack(">q", -1)
    assert o.read_offset_value(v1) == o.OffsetAndMetadata(3, -1, "x", 77, None)


def test_tombstones_and_bad_values() -> None:
    assert o.read_offset_value(None) is None
    assert o.read_group_value(None) is None
    with pytest.raises(SchemaError):
        o.read_offset_value(b"\x00\x04" + bytes(20))
    with pytest.raises(SchemaError):
        o.read_offset_value(b"\x00\x03\x00")


# -- group metadata values -------------------------------------------------------------------------

MEMBER = o.MemberRecord(member_id="m-1", client_id="cli", client_host="/127.0.0.1",
                        rebalance_timeout_ms=300000, session_timeout_ms=10000,
                        subscription=b"\x00\x00sub", assignment=b"\x00\x00asg",
                        group_instance_id="inst-1")


def member_bytes(version: int, m: o.MemberRecord = MEMBER) -> bytes:
    out = s16(m.member_id)
    if version >= 3:
        out += s16(m.group_instance_id)
    out += s16(m.client_id) + s16(m.client_host)
    if version >= 1:
        out += struct.pack(">i", m.rebalance_timeout_ms)
    out += struct.pack(">i", m.session_timeout_ms) + b32(m.subscription) + b32(m.assignment)
    return out


def group_bytes(version: int, members: list[o.MemberRecord]) -> bytes:
    out = struct.pack(">h", version) + s16("consumer") + struct.pack(">i", 4) + s16("range") \
        + s16("m-1")
    if version >= 2:
        out += struct.pack(">q", 1_700_000_000_000)
    out += struct.pack(">i", len(members))
    for m in members:
        out += member_bytes(version, m)
    return out


def test_group_value_v3_golden() -> None:
    value = o.GroupMetadataValue("consumer", 4, "range", "m-1", 1_700_000_000_000, (MEMBER,))
    expected = group_bytes(3, [MEMBER])
    assert o.group_metadata_value(value) == expected
    assert o.read_group_value(expected) == value


@pytest.mark.parametrize("version", [0, 1, 2])
def test_older_group_values_are_read(version: int) -> None:
    got = o.read_group_value(group_bytes(version, [MEMBER]))
    assert got is not None
    assert got.protocol_type == "consumer" and got.generation == 4
    assert got.protocol == "range" and got.leader == "m-1"
    assert got.current_state_timestamp == (1_700_000_000_000 if version >= 2 else -1)
    m = got.members[0]
    assert (m.member_id, m.client_id, m.client_host) == ("m-1", "cli", "/127.0.0.1")
    assert m.group_instance_id is None  # only v3 has it
    assert m.session_timeout_ms == 10000
    # v0 has no rebalance timeout: Kafka uses the session timeout
    assert m.rebalance_timeout_ms == (10000 if version == 0 else 300000)
    assert (m.subscription, m.assignment) == (b"\x00\x00sub", b"\x00\x00asg")
    # and the writer produces the same bytes for that version
    value = o.GroupMetadataValue("consumer", 4, "range", "m-1",
                                 1_700_000_000_000 if version >= 2 else -1,
                                 (o.MemberRecord("m-1", "cli", "/127.0.0.1",
                                                 10000 if version == 0 else 300000, 10000,
                                                 b"\x00\x00sub", b"\x00\x00asg"),))
    assert o.group_metadata_value(value, version) == group_bytes(version, [MEMBER])


def test_empty_group_value_has_null_protocol_and_leader() -> None:
    value = o.GroupMetadataValue("consumer", 7, None, None, 123, ())
    expected = (b"\x00\x03" + s16("consumer") + struct.pack(">i", 7) + b"\xff\xff\xff\xff"
                + struct.pack(">q", 123) + struct.pack(">i", 0))
    assert o.group_metadata_value(value) == expected
    assert o.read_group_value(expected) == value


def test_consumer_subscription_topics() -> None:
    # ConsumerProtocolSubscription v1: version, topics, user_data, owned partitions
    sub = (b"\x00\x01" + struct.pack(">i", 2) + s16("a") + s16("b") + struct.pack(">i", -1)
           + struct.pack(">i", 0))
    assert o.subscribed_topics(sub) == {"a", "b"}
