"""FetchResponse v4-v16, encoded by hand so that record data can stay in the log files.

kio would copy every partition's records into one buffer; here the response is a list of parts
(`bytes` for the structure, file regions for the records) that the network layer writes with
sendfile. Field order follows Kafka's FetchResponse.json: v12 is flexible and has the
partition's `diverging_epoch` (tag 0, KIP-320) and `current_leader` (tag 1) tagged fields, v13
names each topic by its id (16 bytes, KIP-516) instead of its name, v14 and v15 are v13, v16 adds
the response's `node_endpoints` (tag 0, KIP-951): the leaders named by `current_leader`.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .primitives import uvarint

_h = struct.Struct(">h")
_i = struct.Struct(">i")
_q = struct.Struct(">q")
_PART_V4 = struct.Struct(">ihqq")  # partition, error, high watermark, last stable offset

MIN_VERSION = 4
MAX_VERSION = 16
FLEXIBLE_FROM = 12
TOPIC_IDS_FROM = 13  # KIP-516: topics named by id
NODE_ENDPOINTS_FROM = 16  # KIP-951


@dataclass(frozen=True, slots=True)
class NodeEndpoint:
    """A broker named by some partition's `current_leader` (v16 `node_endpoints`)."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(slots=True)
class PartitionData:
    partition: int
    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: Sequence[Any] = ()  # bytes or file regions (with .size)
    records_size: int = 0
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset), v12+ tag 0
    preferred_read_replica: int = -1
    aborted_transactions: list[tuple[int, int]] | None = field(default=None)
    current_leader: tuple[int, int] | None = None  # (leader id, leader epoch), v12+ tag 1


def encode_fetch_response(
    version: int, correlation_id: int,
    topics: Sequence[tuple[str | uuid.UUID, Sequence[PartitionData]]],
    throttle_time_ms: int = 0, error_code: int = 0, session_id: int = 0,
    node_endpoints: Sequence[NodeEndpoint] = (),
) -> list[Any]:
    """Encode a whole response frame (size prefix included) as a list of parts. Each topic is
    named by its name (v4-v12) or its id (v13+): the caller passes the one the version has."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"FetchResponse v{version} is not supported")
    flexible = version >= FLEXIBLE_FROM
    by_id = version >= TOPIC_IDS_FROM
    parts: list[Any] = []
    cur = bytearray()
    total = 0

    def arr_len(n: int) -> bytes:
        return uvarint(n + 1) if flexible else _i.pack(n)

    def string(s: str) -> bytes:
        b = s.encode()
        return (uvarint(len(b) + 1) if flexible else _h.pack(len(b))) + b

    # Response header: correlation id (+ empty tagged fields for header v1).
    cur += _i.pack(correlation_id)
    if flexible:
        cur += b"\x00"
    cur += _i.pack(throttle_time_ms)
    if version >= 7:
        cur += _h.pack(error_code) + _i.pack(session_id)
    cur += arr_len(len(topics))
    for topic, partitions in topics:
        if by_id:
            if not isinstance(topic, uuid.UUID):
                raise TypeError(f"FetchResponse v{version} names topics by id, not {topic!r}")
            cur += topic.bytes
        else:
            if not isinstance(topic, str):
                raise TypeError(f"FetchResponse v{version} names topics by name, not {topic!r}")
            cur += string(topic)
        cur += arr_len(len(partitions))
        for p in partitions:
            cur += _PART_V4.pack(p.partition, p.error_code, p.high_watermark, p.last_stable_offset)
            if version >= 5:
                cur += _q.pack(p.log_start_offset)
            aborted = p.aborted_transactions
            if aborted is None:
                cur += b"\x00" if flexible else _i.pack(-1)
            else:
                cur += arr_len(len(aborted))
                for pid, first in aborted:
                    cur += _q.pack(pid) + _q.pack(first)
                    if flexible:
                        cur += b"\x00"
            if version >= 11:
                cur += _i.pack(p.preferred_read_replica)
            size = p.records_size
            cur += uvarint(size + 1) if flexible else _i.pack(size)
            if size:
                total += len(cur)
                parts.append(bytes(cur))
                cur = bytearray()
                for r in p.records:
                    parts.append(r)
                    total += len(r) if isinstance(r, bytes | bytearray | memoryview) else r.size
            if flexible:
                cur += _partition_tags(p)
        if flexible:
            cur += b"\x00"
    if flexible:
        if version >= NODE_ENDPOINTS_FROM and node_endpoints:
            body = bytearray(uvarint(len(node_endpoints) + 1))
            for n in node_endpoints:
                body += _i.pack(n.node_id) + string(n.host) + _i.pack(n.port)
                body += b"\x00" if n.rack is None else string(n.rack)
                body += b"\x00"
            cur += b"\x01" + uvarint(0) + uvarint(len(body)) + body
        else:
            cur += b"\x00"
    total += len(cur)
    parts.append(bytes(cur))
    parts.insert(0, _i.pack(total))
    return parts


def _partition_tags(p: PartitionData) -> bytes:
    """A flexible partition's tagged fields, in tag order: diverging_epoch (0), current_leader
    (1); each a struct ending with its own (empty) tagged fields."""
    tags: list[bytes] = []
    if p.diverging_epoch is not None:
        body = _i.pack(p.diverging_epoch[0]) + _q.pack(p.diverging_epoch[1]) + b"\x00"
        tags.append(b"\x00" + uvarint(len(body)) + body)
    if p.current_leader is not None:
        body = _i.pack(p.current_leader[0]) + _i.pack(p.current_leader[1]) + b"\x00"
        tags.append(b"\x01" + uvarint(len(body)) + body)
    if not tags:
        return b"\x00"
    return uvarint(len(tags)) + b"".join(tags)
