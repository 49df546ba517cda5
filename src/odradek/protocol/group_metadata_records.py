"""The records of `__consumer_offsets` as bytes (Kafka 2.8's GroupMetadataManager formats, the
generated OffsetCommitKey/Value and GroupMetadataKey/Value, byte-compatible): what the group
coordinator writes and loads (coordinator/metadata_manager.py, through coordinator/offsets.py)
and what dump-log's ``--offsets-decoder`` prints (tools/dump_log.py). Tools may not import the
coordinator, so this is their one home.

Every record's key and value start with an int16 schema version; strings are int16 length +
UTF-8 (-1 = null), bytes are int32 length + data, none of these schemas is flexible:

  key v0/v1  offset commit   group string, topic string, partition int32
  key v2     group metadata  group string
  offset commit value v0  offset int64, metadata string, commit_timestamp int64
                      v1  offset, metadata, commit_timestamp, expire_timestamp int64
                      v2  offset, metadata, commit_timestamp
                      v3  offset, leader_epoch int32, metadata, commit_timestamp
  group metadata value v0  protocol_type string, generation int32, protocol string?, leader
                           string?, members [member_id, client_id, client_host,
                           session_timeout int32, subscription bytes, assignment bytes]
                       v1  members gain rebalance_timeout int32 (before session_timeout)
                       v2  current_state_timestamp int64 (after leader)
                       v3  members gain group_instance_id string? (after member_id)

Written as Kafka 2.3+ does: offset key v1, offset value v3 (v1 when the commit carries an
explicit expire timestamp, i.e. OffsetCommit v2-v4 with a retention time), group key v2, group
value v3. A null value is a tombstone. All versions are read.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .primitives import (
    INT16,
    INT32,
    INT64,
    Reader,
    SchemaError,
    write_bytes,
    write_string,
)

__all__ = [
    "GROUP_KEY_VERSION",
    "GROUP_VALUE_VERSION",
    "NO_LEADER_EPOCH",
    "NO_TIMESTAMP",
    "OFFSET_KEY_VERSION",
    "OFFSET_VALUE_VERSION",
    "OFFSET_VALUE_VERSION_WITH_EXPIRE",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "MemberRecord",
    "OffsetAndMetadata",
    "OffsetKey",
    "SchemaError",
    "group_metadata_key",
    "group_metadata_value",
    "offset_commit_key",
    "offset_commit_value",
    "read_group_value",
    "read_message_key",
    "read_offset_value",
]

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
OFFSET_VALUE_VERSION_WITH_EXPIRE = 1
GROUP_VALUE_VERSION = 3

NO_TIMESTAMP = -1  # OffsetCommitRequest.DEFAULT_TIMESTAMP
NO_LEADER_EPOCH = -1  # RecordBatch.NO_PARTITION_LEADER_EPOCH


# -- keys -----------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int
    version: int = OFFSET_KEY_VERSION


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str
    version: int = GROUP_KEY_VERSION


def offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    out = bytearray(INT16.pack(OFFSET_KEY_VERSION))
    write_string(out, group)
    write_string(out, topic)
    out += INT32.pack(partition)
    return bytes(out)


def group_metadata_key(group: str) -> bytes:
    out = bytearray(INT16.pack(GROUP_KEY_VERSION))
    write_string(out, group)
    return bytes(out)


def read_message_key(data: bytes | memoryview) -> OffsetKey | GroupMetadataKey:
    r = Reader(data)
    version = r.int16()
    if version in (0, 1):
        return OffsetKey(r.string(), r.string(), r.int32(), version)
    if version == 2:
        return GroupMetadataKey(r.string(), version)
    raise SchemaError(f"Unknown group metadata message version: {version}")


# -- offset commit values -------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """Kafka's OffsetAndMetadata: what a commit stores for one partition."""

    offset: int
    leader_epoch: int = NO_LEADER_EPOCH
    metadata: str = ""
    commit_timestamp: int = NO_TIMESTAMP
    expire_timestamp: int | None = None  # only from OffsetCommit v1-v4 with a retention time


def offset_commit_value(om: OffsetAndMetadata) -> bytes:
    """Value v3, or v1 when the commit carries an explicit expire timestamp (Kafka 2.1+)."""
    if om.expire_timestamp is not None:
        out = bytearray(INT16.pack(OFFSET_VALUE_VERSION_WITH_EXPIRE))
        out += INT64.pack(om.offset)
        write_string(out, om.metadata)
        out += INT64.pack(om.commit_timestamp)
        out += INT64.pack(om.expire_timestamp)
        return bytes(out)
    out = bytearray(INT16.pack(OFFSET_VALUE_VERSION))
    out += INT64.pack(om.offset)
    out += INT32.pack(om.leader_epoch)
    write_string(out, om.metadata)
    out += INT64.pack(om.commit_timestamp)
    return bytes(out)


def read_offset_value(data: bytes | memoryview | None) -> OffsetAndMetadata | None:
    """None for a tombstone."""
    if data is None:
        return None
    r = Reader(data)
    version = r.int16()
    if not 0 <= version <= 3:
        raise SchemaError(f"Unknown offset message version: {version}")
    offset = r.int64()
    leader_epoch = r.int32() if version >= 3 else NO_LEADER_EPOCH
    metadata = r.string()
    commit_timestamp = r.int64()
    expire = r.int64() if version == 1 else NO_TIMESTAMP
    return OffsetAndMetadata(offset, leader_epoch, metadata, commit_timestamp,
                             None if expire == NO_TIMESTAMP else expire)


# -- group metadata values ------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class MemberRecord:
    member_id: str
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = NO_TIMESTAMP
    members: tuple[MemberRecord, ...] = field(default_factory=tuple)


def group_metadata_value(value: GroupMetadataValue, version: int = GROUP_VALUE_VERSION) -> bytes:
    if not 0 <= version <= 3:
        raise SchemaError(f"Unknown group metadata value version: {version}")
    out = bytearray(INT16.pack(version))
    write_string(out, value.protocol_type)
    out += INT32.pack(value.generation)
    write_string(out, value.protocol)
    write_string(out, value.leader)
    if version >= 2:
        out += INT64.pack(value.current_state_timestamp)
    out += INT32.pack(len(value.members))
    for m in value.members:
        write_string(out, m.member_id)
        if version >= 3:
            write_string(out, m.group_instance_id)
        write_string(out, m.client_id)
        write_string(out, m.client_host)
        if version >= 1:
            out += INT32.pack(m.rebalance_timeout_ms)
        out += INT32.pack(m.session_timeout_ms)
        write_bytes(out, m.subscription)
        write_bytes(out, m.assignment)
    return bytes(out)


def read_group_value(data: bytes | memoryview | None) -> GroupMetadataValue | None:
    """None for a tombstone. In v0 the rebalance timeout is the session timeout (as Kafka)."""
    if data is None:
        return None
    r = Reader(data)
    version = r.int16()
    if not 0 <= version <= 3:
        raise SchemaError(f"Unknown group metadata message version: {version}")
    protocol_type = r.string()
    generation = r.int32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    state_ts = r.int64() if version >= 2 else NO_TIMESTAMP
    count = r.int32()
    if count < 0:
        raise SchemaError("null members array")
    members = []
    for _ in range(count):
        member_id = r.string()
        instance_id = r.nullable_string() if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        rebalance = r.int32() if version >= 1 else None
        session = r.int32()
        subscription = r.bytes_()
        assignment = r.bytes_()
        members.append(MemberRecord(member_id, client_id, client_host,
                                    session if rebalance is None else rebalance, session,
                                    subscription, assignment, instance_id))
    return GroupMetadataValue(protocol_type, generation, protocol, leader, state_ts,
                              tuple(members))
