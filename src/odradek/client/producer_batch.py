"""The producer's batches (Kafka's ProducerBatch and MemoryRecordsBuilder): records waiting
for their batch, a batch being built record by record into a magic-2 record batch, and each
partition's batches in flight or failed and waiting to be resent (the idempotent producer's
sequence numbers are `idempotence`'s)."""

from __future__ import annotations

import asyncio
import itertools
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from crc32c import crc32c

from ..protocol.compression import compress
from ..protocol.records import encode_record, write_varint
from .types import TopicPartition

_HEADER = struct.Struct(">qiibIhiqqqhii")
_TRANSACTIONAL = 0x10  # the batch attribute of a transaction's batches
_CRC = struct.Struct(">I")
BATCH_OVERHEAD = 61

_order = itertools.count()
# Where a record's RecordMetadata goes: an asyncio.Future, or the synchronous face's
# DeliveryHandle (both have done / set_result / set_exception / exception).
RecordSink = Any



def encode_varint(n: int) -> bytes:
    out = bytearray()
    write_varint(out, n)
    return bytes(out)


_SMALL_VARINTS = tuple(encode_varint(n) for n in range(1 << 14))  # varints of 1-3 bytes
_NULL = encode_varint(-1)
_NO_HEADERS = encode_varint(0)
_ATTRIBUTES = b"\x00"


def encode_plain_record(offset_delta: int, timestamp_delta: int, key: bytes | None,
                        value: bytes | None,
                        headers: Sequence[tuple[str, bytes | None]] = ()) -> bytes:
    """`protocol.records.encode_record`, byte for byte, with the varints of the producer's
    common case (no headers, deltas and sizes under 16384) taken from a table: the per-record
    step of the send path."""
    small = _SMALL_VARINTS
    limit = len(small)
    klen = -1 if key is None else len(key)
    vlen = -1 if value is None else len(value)
    if headers or not (0 <= offset_delta < limit and 0 <= timestamp_delta < limit
                       and klen < limit and vlen < limit):
        return encode_record(offset_delta, timestamp_delta, key, value, headers)
    body = b"".join((_ATTRIBUTES, small[timestamp_delta], small[offset_delta],
                     _NULL if key is None else small[klen], key or b"",
                     _NULL if value is None else small[vlen], value or b"", _NO_HEADERS))
    n = len(body)
    return (small[n] if n < limit else encode_varint(n)) + body


@dataclass(slots=True)
class PendingRecord:
    topic: str
    partition: int | None
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    timestamp: int
    size: int
    enqueued: float = 0.0
    appended: bool = False


class ProducerBatch:
    __slots__ = ("attempts", "base_sequence", "base_ts", "body", "closed", "count", "created",
                 "deadline", "done", "encoded", "futures", "max_ts", "may_be_written", "memory",
                 "order", "producer_epoch", "producer_id", "sizes", "stamps", "tp",
                 "transactional")

    def __init__(self, tp: TopicPartition, created: float, deadline: float,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.tp = tp
        self.order = next(_order)
        self.body = bytearray()
        self.count = 0
        self.base_ts = 0
        self.max_ts = -1
        self.futures: list[RecordSink] = []
        self.stamps: list[int] = []
        self.sizes: list[tuple[int, int]] = []
        self.created = created
        self.deadline = deadline
        self.attempts = 0
        # An attempt ended without the broker refusing it by its sequence (a network error, a
        # timeout, NOT_LEADER_OR_FOLLOWER after the append...): the batch may be in the log.
        self.may_be_written = False
        self.producer_id = -1
        self.producer_epoch = -1
        self.base_sequence = -1
        self.encoded: bytes | None = None
        self.closed = False
        self.memory = 0
        self.transactional = False
        self.done: asyncio.Future[None] = loop.create_future()

    def append(self, rec: PendingRecord, fut: RecordSink, batch_size: int) -> bool:
        if self.closed:
            return False
        if self.count == 0:
            self.base_ts = rec.timestamp
        data = encode_plain_record(self.count, rec.timestamp - self.base_ts, rec.key,
                                   rec.value, rec.headers)
        if self.count and len(self.body) + len(data) > batch_size:
            self.closed = True
            return False
        self.body += data
        self.memory += rec.size
        self.count += 1
        self.max_ts = max(self.max_ts, rec.timestamp)
        self.futures.append(fut)
        self.stamps.append(rec.timestamp)
        self.sizes.append((-1 if rec.key is None else len(rec.key),
                           -1 if rec.value is None else len(rec.value)))
        if len(self.body) >= batch_size:
            self.closed = True
        return True

    @property
    def size(self) -> int:
        return len(self.body) + BATCH_OVERHEAD

    def encode(self, codec: int) -> bytes:
        """The v2 batch (CRC32C over attributes..end), cached until its producer id/sequence
        change."""
        if self.encoded is None:
            payload = compress(codec, bytes(self.body)) if codec else bytes(self.body)
            buf = bytearray(_HEADER.pack(
                0, BATCH_OVERHEAD - 12 + len(payload), -1, 2, 0,
                (int(codec) & 0x07) | (_TRANSACTIONAL if self.transactional else 0),
                self.count - 1, self.base_ts, self.max_ts, self.producer_id,
                self.producer_epoch, self.base_sequence, self.count))
            buf += payload
            _CRC.pack_into(buf, 17, crc32c(memoryview(buf)[21:]))
            self.encoded = bytes(buf)
        return self.encoded


@dataclass(slots=True)
class PartitionBatches:
    inflight: list[ProducerBatch] = field(default_factory=list)
    failed: list[ProducerBatch] = field(default_factory=list)
    backoff_until: float = 0.0
