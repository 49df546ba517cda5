"""FetchResponse v4-v12, encoded by hand so that record data can stay in the log files.

kio would copy every partition's records into one buffer; here the response is a list of parts
(`bytes` for the structure, file regions for the records) that the network layer writes with
sendfile. Field order follows Kafka's FetchResponse.json.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .primitives import uvarint

_h = struct.Struct(">h")
_i = struct.Struct(">i")
_q = struct.Struct(">q")
_PART_V4 = struct.Struct(">ihqq")  # partition, error, high watermark, last stable offset

MIN_VERSION = 4
MAX_VERSION = 12
FLEXIBLE_FROM = 12


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


def encode_fetch_response(
    version: int, correlation_id: int,
    topics: Sequence[tuple[str, Sequence[PartitionData]]],
    throttle_time_ms: int = 0, error_code: int = 0, session_id: int = 0,
) -> list[Any]:
    """Encode a whole response frame (size prefix included) as a list of parts."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"FetchResponse v{version} is not supported")
    flexible = version >= FLEXIBLE_FROM
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
                if p.diverging_epoch is not None:
                    body = _i.pack(p.diverging_epoch[0]) + _q.pack(p.diverging_epoch[1]) + b"\x00"
                    cur += b"\x01" + uvarint(0) + uvarint(len(body)) + body
                else:
                    cur += b"\x00"
        if flexible:
            cur += b"\x00"
    if flexible:
        cur += b"\x00"
    total += len(cur)
    parts.append(bytes(cur))
    parts.insert(0, _i.pack(total))
    return parts
