"""ListOffsets v0 (api key 2), the version kio lacks (its ListOffsets starts at v1): the request
and response bodies of Kafka 2.8's ``ListOffsetsRequest.json`` / ``ListOffsetsResponse.json`` at
version 0, as :class:`~odradek.protocol.interbroker.Field` tables read and written by that
module's schema interpreter.

v0 is the form before KIP-79: a partition asks for up to ``max_num_offsets`` offsets before a
timestamp and gets them back, largest first, in ``old_style_offsets``; there is no isolation
level, leader epoch or throttle time. Request header v1, response header v0 (nothing flexible)::

  request   replica_id int32, topics [name string, partitions [partition_index int32,
            timestamp int64, max_num_offsets int32]]
  response  topics [name string, partitions [partition_index int32, error_code int16,
            old_style_offsets [int64]]]

The field names are kio's names of the same fields in v1+, so a handler reads either.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from .interbroker import Buffer, DecodeError, Field, read_message, write_message

__all__ = [
    "API_KEY",
    "VERSION",
    "ListOffsetsPartitionResponseV0",
    "ListOffsetsPartitionV0",
    "ListOffsetsRequestV0",
    "ListOffsetsResponseV0",
    "ListOffsetsTopicResponseV0",
    "ListOffsetsTopicV0",
    "decode_request",
    "decode_response_frame",
    "encode_request_frame",
    "encode_response_frame",
]

API_KEY = 2
VERSION = 0

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_REQUEST_HEADER = struct.Struct(">hhi")  # api key, api version, correlation id


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsPartitionV0:
    partition_index: int = 0
    timestamp: int = 0
    """-1: latest, -2: earliest, else milliseconds since the epoch."""
    max_num_offsets: int = 1

    SCHEMA: ClassVar[tuple[Field, ...]] = (
        Field("partition_index", "int32", "0+"),
        Field("timestamp", "int64", "0+"),
        Field("max_num_offsets", "int32", "0"),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsTopicV0:
    name: str = ""
    partitions: tuple[ListOffsetsPartitionV0, ...] = ()

    SCHEMA: ClassVar[tuple[Field, ...]] = (
        Field("name", "string", "0+"),
        Field("partitions", "[]struct", "0+", ListOffsetsPartitionV0),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsRequestV0:
    replica_id: int = -1
    """-1: a consumer (offsets capped at the high watermark), -2: a debugging client (a follower
    answers too), else a broker."""
    topics: tuple[ListOffsetsTopicV0, ...] = ()

    SCHEMA: ClassVar[tuple[Field, ...]] = (
        Field("replica_id", "int32", "0+"),
        Field("topics", "[]struct", "0+", ListOffsetsTopicV0),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsPartitionResponseV0:
    partition_index: int = 0
    error_code: int = 0
    old_style_offsets: tuple[int, ...] = ()

    SCHEMA: ClassVar[tuple[Field, ...]] = (
        Field("partition_index", "int32", "0+"),
        Field("error_code", "int16", "0+"),
        Field("old_style_offsets", "[]int64", "0"),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsTopicResponseV0:
    name: str = ""
    partitions: tuple[ListOffsetsPartitionResponseV0, ...] = ()

    SCHEMA: ClassVar[tuple[Field, ...]] = (
        Field("name", "string", "0+"),
        Field("partitions", "[]struct", "0+", ListOffsetsPartitionResponseV0),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsResponseV0:
    topics: tuple[ListOffsetsTopicResponseV0, ...] = ()

    SCHEMA: ClassVar[tuple[Field, ...]] = (
        Field("topics", "[]struct", "0+", ListOffsetsTopicResponseV0),
    )


def decode_request(buf: Buffer, offset: int) -> ListOffsetsRequestV0:
    """The v0 request body starting at `offset` (just after the request header); a body that
    does not parse is a DecodeError."""
    try:
        request, _ = read_message(ListOffsetsRequestV0, VERSION, False, buf, offset)
    except (IndexError, struct.error) as exc:
        raise DecodeError(f"malformed ListOffsets v0 request: {exc}") from None
    return request  # type: ignore[no-any-return]


def encode_request_frame(request: ListOffsetsRequestV0, correlation_id: int,
                         client_id: str | None) -> bytes:
    """A whole request frame (size prefix, request header v1, body): the client side."""
    header = bytearray(_REQUEST_HEADER.pack(API_KEY, VERSION, correlation_id))
    if client_id is None:
        header += _I16.pack(-1)
    else:
        cid = client_id.encode()
        header += _I16.pack(len(cid)) + cid
    body = write_message(request, VERSION, False)
    return _I32.pack(len(header) + len(body)) + bytes(header) + body


def encode_response_frame(correlation_id: int, response: ListOffsetsResponseV0) -> bytes:
    """A whole response frame: size prefix, response header v0 (the correlation id), body."""
    body = write_message(response, VERSION, False)
    return _I32.pack(4 + len(body)) + _I32.pack(correlation_id) + body


def decode_response_frame(payload: Buffer) -> tuple[int, ListOffsetsResponseV0]:
    """(correlation id, response) of a response frame's payload (after the size prefix)."""
    (correlation_id,) = _I32.unpack_from(payload, 0)
    response, _ = read_message(ListOffsetsResponseV0, VERSION, False, payload, 4)
    return correlation_id, response
