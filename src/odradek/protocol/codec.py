"""Kafka request/response codec on top of kio (sans-IO: bytes in, objects out).

kio's native reader is fast but fails on tagged fields it does not know, which the protocol says
must be skipped. On that failure we re-read the message with `_PyReader`, a schema walker built
on kio's primitive readers that skips unknown tags. Inter-broker APIs (keys 4-7) live in
`interbroker.py` since kio lacks them; so does ListOffsets v0 (`list_offsets_v0.py`, which
`decode_request` reads: HAND_WRITTEN_VERSIONS).
"""

from __future__ import annotations

import datetime
import struct
from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields
from functools import cache
from typing import Any

import kio.index
from kio._kio_native import (
    read_boolean,
    read_compact_array_length,
    read_compact_string,
    read_compact_string_as_bytes,
    read_compact_string_as_bytes_nullable,
    read_compact_string_nullable,
    read_error_code,
    read_float64,
    read_int8,
    read_int16,
    read_int32,
    read_int64,
    read_legacy_array_length,
    read_legacy_bytes,
    read_legacy_string,
    read_nullable_datetime_i64,
    read_nullable_legacy_bytes,
    read_nullable_legacy_string,
    read_timedelta_i32,
    read_timedelta_i64,
    read_uint8,
    read_uint16,
    read_uint32,
    read_uint64,
    read_unsigned_varint,
    read_uuid,
)
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)
from kio.serial.errors import OutOfBoundValue

from . import list_offsets_v0

_HH = struct.Struct(">hh")
_I = struct.Struct(">i")


class MalformedRequest(ValueError):
    """The bytes of a request do not parse under its header's API key and version."""


class UnsupportedVersion(ValueError):
    """The request's (api key, version) is not one this broker implements."""


# A reader takes (buffer, offset) and returns (value, number of bytes consumed), as kio's do.
Reader = Callable[[Any, int], tuple[Any, int]]

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def _read_any_datetime_i64(buf: Any, off: int) -> tuple[datetime.datetime, int]:
    """A millisecond timestamp, negative ones included: Kafka sends -1 for "none" in fields
    such as DescribeTransactions' transaction_start_time, which kio's reader refuses."""
    ms, n = read_int64(buf, off)
    return _EPOCH + datetime.timedelta(milliseconds=ms), n


def _primitive_reader(kafka_type: str, flexible: bool, optional: bool) -> Reader:
    table: dict[tuple[str, bool, bool], Reader] = {
        ("int8", False, False): read_int8, ("int16", False, False): read_int16,
        ("int32", False, False): read_int32, ("int64", False, False): read_int64,
        ("uint8", False, False): read_uint8, ("uint16", False, False): read_uint16,
        ("uint32", False, False): read_uint32, ("uint64", False, False): read_uint64,
        ("float64", False, False): read_float64, ("bool", False, False): read_boolean,
        ("error_code", False, False): read_error_code,
        ("timedelta_i32", False, False): read_timedelta_i32,
        ("timedelta_i64", False, False): read_timedelta_i64,
        ("datetime_i64", False, False): _read_any_datetime_i64,
        ("datetime_i64", False, True): read_nullable_datetime_i64,
        ("uuid", False, False): read_uuid, ("uuid", False, True): read_uuid,
        ("string", True, False): read_compact_string,
        ("string", True, True): read_compact_string_nullable,
        ("string", False, False): read_legacy_string,
        ("string", False, True): read_nullable_legacy_string,
        ("bytes", True, False): read_compact_string_as_bytes,
        ("bytes", True, True): read_compact_string_as_bytes_nullable,
        ("bytes", False, False): read_legacy_bytes,
        ("bytes", False, True): read_nullable_legacy_bytes,
    }
    kafka_type = "bytes" if kafka_type == "records" else kafka_type
    key = (kafka_type, flexible if kafka_type in ("string", "bytes") else False, optional)
    try:
        return table[key]
    except KeyError:
        raise MalformedRequest(f"no reader for field type {key}") from None


@cache
def _py_entity_reader(entity_type: type, nullable: bool = False) -> Reader:
    """A pure-Python reader for a kio entity that skips unknown tagged fields."""
    flexible = entity_type.__flexible__
    is_header = entity_type.__name__ == "RequestHeader"
    plain: list[tuple[str, Reader]] = []
    tagged: dict[int, tuple[str, Reader]] = {}
    defaults: dict[str, Any] = {}
    for f in fields(entity_type):
        tag = get_field_tag(f)
        cls = classify_field(f)
        opt = False if tag is not None else is_optional(f)
        item: Reader
        if isinstance(cls, EntityField | EntityTupleField):
            item = _py_entity_reader(cls.type_, opt and isinstance(cls, EntityField))
        elif is_header and f.name == "client_id":
            item = read_nullable_legacy_string
        else:
            item = _primitive_reader(f.metadata["kafka_type"], flexible,
                                     opt and isinstance(cls, PrimitiveField))
        if isinstance(cls, EntityTupleField | PrimitiveTupleField):
            item = _array_reader(item, flexible)
        if tag is None:
            plain.append((f.name, item))
        else:
            tagged[int(tag)] = (f.name, item)
            defaults[f.name] = (f.default if f.default is not MISSING
                                else get_tagged_field_default(f))

    def read(buf: Any, start: int) -> tuple[Any, int]:
        off = start
        if nullable:
            marker, n = read_int8(buf, off)
            off += n
            if marker < 0:
                return None, off - start
        kwargs: dict[str, Any] = {}
        for name, reader in plain:
            kwargs[name], n = reader(buf, off)
            off += n
        if flexible:
            kwargs.update(defaults)
            count, n = read_unsigned_varint(buf, off)
            off += n
            for _ in range(count):
                tag, n = read_unsigned_varint(buf, off)
                off += n
                size, n = read_unsigned_varint(buf, off)
                off += n
                if tag in tagged:
                    name, reader = tagged[tag]
                    kwargs[name], _ = reader(buf, off)
                off += size  # unknown tags are skipped, as the protocol requires
        return entity_type(**kwargs), off - start

    return read


def _array_reader(item: Reader, flexible: bool) -> Reader:
    length_reader = read_compact_array_length if flexible else read_legacy_array_length

    def read(buf: Any, start: int) -> tuple[Any, int]:
        count, off = length_reader(buf, start)
        off += start
        if count is None or count < 0:  # kio's length readers return None for a null array
            return None, off - start
        out = []
        for _ in range(count):
            value, n = item(buf, off)
            off += n
            out.append(value)
        return tuple(out), off - start

    return read


# kio's native reader allocates an array by its declared element count before reading any
# element: a 13-byte request declaring 2**32 - 2 topics aborts the process (Rust OOM, not an
# exception). `_bounds_checker` walks the message first and rejects, as Kafka's generated readers
# do, an array whose count exceeds the bytes remaining, and any length running past the end.
_FIXED_SIZE = {
    "int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint8": 1, "uint16": 2, "uint32": 4,
    "uint64": 8, "float64": 8, "bool": 1, "error_code": 2, "timedelta_i32": 4,
    "timedelta_i64": 8, "datetime_i64": 8, "uuid": 16,
}
_H = struct.Struct(">h")
# A checker takes (buffer, offset, end) and returns the offset just past the value.
Checker = Callable[[Any, int, int], int]
# Steps of an entity's checker: (_FIXED, size, None) | (_SIZED, None, legacy length struct or
# None when compact) | (_CALL, checker, None) | (_ARRAY, item size or item checker, legacy count
# struct or None when compact).
_FIXED, _SIZED, _CALL, _ARRAY = range(4)


def _length(buf: Any, off: int, end: int, legacy: struct.Struct | None) -> tuple[int, int]:
    """A length or count at `off`, -1 for null, and the offset after it."""
    if legacy is None:
        b = buf[off] if off < end else 0x80
        if b < 0x80:
            return b - 1, off + 1
        n, size = read_unsigned_varint(buf, off)
        if off + size > end:
            raise MalformedRequest("length field truncated")
        return n - 1, off + size
    if off + legacy.size > end:
        raise MalformedRequest("length field truncated")
    return legacy.unpack_from(buf, off)[0], off + legacy.size


@cache
def _bounds_checker(entity_type: type, nullable: bool = False) -> Checker:
    flexible = entity_type.__flexible__
    is_header = entity_type.__name__ == "RequestHeader"
    steps: list[tuple[int, Any, Any]] = []
    tagged: dict[int, Checker] = {}
    for f in fields(entity_type):
        tag = get_field_tag(f)
        cls = classify_field(f)
        kind = f.metadata.get("kafka_type")
        step: tuple[int, Any, Any]
        if is_header and f.name == "client_id":
            step = (_SIZED, None, _H)  # a legacy nullable string even in flexible headers
        elif isinstance(cls, EntityField | EntityTupleField):
            opt = tag is None and is_optional(f) and isinstance(cls, EntityField)
            step = (_CALL, _bounds_checker(cls.type_, opt), None)
        elif kind in _FIXED_SIZE:
            step = (_FIXED, _FIXED_SIZE[kind], None)
        elif kind in ("string", "bytes", "records"):
            step = (_SIZED, None, None if flexible else _H if kind == "string" else _I)
        else:
            raise MalformedRequest(f"no checker for field type {kind}")
        if isinstance(cls, EntityTupleField | PrimitiveTupleField):
            item = _steps_checker([step], False) if step[0] == _SIZED else step[1]
            step = (_ARRAY, item, None if flexible else _I)
        if tag is not None:
            tagged[int(tag)] = _steps_checker([step], False)
        elif step[0] == _FIXED and steps and steps[-1][0] == _FIXED:
            steps[-1] = (_FIXED, steps[-1][1] + step[1], None)
        else:
            steps.append(step)
    if not flexible:
        return _steps_checker(steps, nullable)
    check_plain = _steps_checker(steps, False)

    def check(buf: Any, off: int, end: int) -> int:
        if nullable:
            off = _null_marker(buf, off, end)
            if off < 0:
                return -off
        off = check_plain(buf, off, end)
        count, off = _length(buf, off, end, None)  # tag count + 1, like a compact length
        for _ in range(count + 1):
            tag, n = read_unsigned_varint(buf, off)
            size, m = read_unsigned_varint(buf, off + n)
            off += n + m
            if off + size > end:
                raise MalformedRequest(f"tagged field {tag} of {size} bytes runs past the end")
            if tag in tagged:
                tagged[tag](buf, off, off + size)
            off += size
        return off

    return check


def _null_marker(buf: Any, off: int, end: int) -> int:
    """Skip the int8 marker of a nullable struct: the offset after it, negated when null."""
    if off >= end:
        raise MalformedRequest("nullable struct marker truncated")
    return -(off + 1) if buf[off] >= 0x80 else off + 1  # a negative int8 is null


def _steps_checker(steps: list[tuple[int, Any, Any]], nullable: bool) -> Checker:
    def check(buf: Any, off: int, end: int) -> int:
        if nullable:
            off = _null_marker(buf, off, end)
            if off < 0:
                return -off
        for op, item, legacy in steps:
            if op == _FIXED:
                off += item
                if off > end:
                    raise MalformedRequest("message truncated")
            elif op == _SIZED:
                n, off = _length(buf, off, end, legacy)
                if n > 0:
                    off += n
                    if off > end:
                        raise MalformedRequest(f"string or bytes of length {n} runs past the end")
                elif n < -1:
                    raise MalformedRequest(f"negative length {n}")
            elif op == _CALL:
                off = item(buf, off, end)
            else:
                count, off = _length(buf, off, end, legacy)
                if count < -1 or count > end - off:
                    raise MalformedRequest(
                        f"array of {count} elements with {end - off} bytes remaining")
                if isinstance(item, int):
                    off += item * max(count, 0)
                    if off > end:
                        raise MalformedRequest("array truncated")
                else:
                    for _ in range(count):
                        off = item(buf, off, end)
        return off

    return check


def read_entity(entity_type: type, buf: bytes | memoryview, off: int) -> tuple[Any, int]:
    """Read one kio entity at `off`: (entity, bytes consumed). Falls back to the tag-skipping
    Python reader on unknown tags and on negative timestamps (which it reads as such)."""
    _bounds_checker(entity_type)(buf, off, len(buf))
    try:
        return entity_reader(entity_type)(buf, off)
    except KeyError as exc:  # kio: 'Unknown tagged field tag'
        if "tag" not in str(exc).lower():
            raise
        return _py_entity_reader(entity_type)(buf, off)
    except OutOfBoundValue as exc:  # kio: 'Cannot parse negative timestamp' (Kafka's -1)
        if "timestamp" not in str(exc).lower():
            raise
        return _py_entity_reader(entity_type)(buf, off)


def peek_api(payload: bytes | memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) of a request, or MalformedRequest."""
    if len(payload) < 8:
        raise MalformedRequest(f"request of {len(payload)} bytes is shorter than a header")
    key, ver = _HH.unpack_from(payload, 0)
    (corr,) = _I.unpack_from(payload, 4)
    return key, ver, corr


# APIs whose v0 is v1 on the wire (v1 changed only what the broker does: throttling after the
# response); kio has no v0 classes for them, so v0 is decoded and answered with v1's.
V0_SAME_WIRE_AS_V1 = frozenset({34, 35})  # AlterReplicaLogDirs, DescribeLogDirs


# Versions kio lacks whose wire differs from every version it has: (api key, version) -> the
# hand-written reader of the body (the header is request header v1).
HAND_WRITTEN_VERSIONS: dict[tuple[int, int], Callable[[Any, int], Any]] = {
    (list_offsets_v0.API_KEY, list_offsets_v0.VERSION): list_offsets_v0.decode_request,
}


@cache
def request_class(api_key: int, api_version: int) -> type:
    if api_version == 0 and api_key in V0_SAME_WIRE_AS_V1:
        api_version = 1
    try:
        return kio.index.load_request_schema(api_key, api_version)
    except (kio.index.UnknownAPIKey, kio.index.UnknownEntity) as exc:
        raise UnsupportedVersion(f"api key {api_key} version {api_version}: {exc}") from None


@cache
def response_class(request_cls: type) -> type:
    return kio.index.load_response_from_request(request_cls)


def decode_request(payload: bytes | memoryview) -> tuple[Any, Any]:
    """Parse header and body of a request frame's payload (without the size prefix)."""
    key, ver, _ = peek_api(payload)
    hand_written = HAND_WRITTEN_VERSIONS.get((key, ver))
    if hand_written is not None:
        try:
            header, off = read_entity(RequestHeaderV1, payload, 0)
            return header, hand_written(payload, off)
        except MalformedRequest:
            raise
        except Exception as exc:
            raise MalformedRequest(f"cannot parse api key {key} v{ver}: {exc!r}") from exc
    cls = request_class(key, ver)
    try:
        header, off = read_entity(cls.__header_schema__, payload, 0)
        body, _ = read_entity(cls, payload, off)
    except MalformedRequest:
        raise
    except Exception as exc:  # kio raises many kinds on truncated/garbage input
        raise MalformedRequest(f"cannot parse api key {key} v{ver}: {exc!r}") from exc
    return header, body


class _Buffer(bytearray):
    """A bytearray with `write`, the sink kio's writers expect."""

    def write(self, data: bytes | bytearray | memoryview) -> int:
        self.extend(data)
        return len(data)


def encode_response(request_cls: type, correlation_id: int, response: Any) -> bytes:
    """Serialize a response with its header and the 4-byte size prefix."""
    out = _Buffer(b"\0\0\0\0")
    header_cls = response.__header_schema__
    entity_writer(header_cls)(out, header_cls(correlation_id=correlation_id))
    entity_writer(type(response))(out, response)
    _I.pack_into(out, 0, len(out) - 4)
    return bytes(out)


# request_api_key, request_api_version, correlation_id
_REQUEST_HEADER_START = struct.Struct(">hhi")


@cache
def _client_id_field(client_id: str | None) -> bytes:
    """A request header's client_id: a nullable string with an int16 length (also in header
    v2, where it is the one field that is not compact)."""
    if client_id is None:
        return b"\xff\xff"
    raw = client_id.encode()
    return len(raw).to_bytes(2, "big") + raw


def encode_request(request: Any, correlation_id: int, client_id: str | None) -> bytes:
    """Serialize a request with its header and size prefix (client side, tests)."""
    out = _Buffer(b"\0\0\0\0")
    header_cls = request.__header_schema__
    if header_cls.__name__ == "RequestHeader" and header_cls.__version__ in (1, 2):
        # headers v1 and v2 written directly: the same bytes as kio's writer (v2 adds an empty
        # tagged-field section), without building a header entity per request
        out += _REQUEST_HEADER_START.pack(request.__api_key__, request.__version__,
                                          correlation_id)
        out += _client_id_field(client_id)
        if header_cls.__version__ == 2:
            out.append(0)
        entity_writer(type(request))(out, request)
        _I.pack_into(out, 0, len(out) - 4)
        return bytes(out)
    kwargs: dict[str, Any] = {
        "request_api_key": request.__api_key__, "request_api_version": request.__version__,
        "correlation_id": correlation_id, "client_id": client_id,
    }
    entity_writer(header_cls)(out, header_cls(**kwargs))
    entity_writer(type(request))(out, request)
    _I.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def decode_response(response_cls: type, payload: bytes | memoryview) -> tuple[int, Any]:
    """Parse a response payload (without size prefix): (correlation_id, body)."""
    header, off = read_entity(response_cls.__header_schema__, payload, 0)
    body, _ = read_entity(response_cls, payload, off)
    return header.correlation_id, body


# ---------------------------------------------------------------------------------------------
# Building responses across versions: kio has one set of classes per version, each with only the
# fields of that version. `make` keeps the keyword arguments the class has and converts plain
# milliseconds to the timedelta kio expects, so one handler serves every version.
# ---------------------------------------------------------------------------------------------


@cache
def _field_kinds(cls: type) -> dict[str, str]:
    return {f.name: f.metadata.get("kafka_type", "") for f in fields(cls)}


def make(cls: type, **kwargs: Any) -> Any:
    kinds = _field_kinds(cls)
    out: dict[str, Any] = {}
    for name, value in kwargs.items():
        kind = kinds.get(name)
        if kind is None:
            continue
        if kind.startswith("timedelta") and isinstance(value, int):
            value = datetime.timedelta(milliseconds=value)
        out[name] = value
    return cls(**out)


# ---------------------------------------------------------------------------------------------
# `build()` is `make()` for messages given as nested data (the client's requests): nested
# entities may be dicts (or lists of dicts), sequences become the tuples kio holds, fields a
# version lacks are dropped, milliseconds become timedeltas. Fields a version requires and the
# caller did not give raise TypeError.
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _FieldInfo:
    name: str
    kind: str
    nested: type | None
    many: bool


@cache
def _field_infos(cls: type) -> dict[str, _FieldInfo]:
    out = {}
    for f in fields(cls):
        c = classify_field(f)
        nested = c.type_ if isinstance(c, EntityField | EntityTupleField) else None
        many = isinstance(c, EntityTupleField) or (
            nested is None and str(f.type).startswith("tuple"))
        out[f.name] = _FieldInfo(f.name, f.metadata.get("kafka_type", ""), nested, many)
    return out


def _convert(info: _FieldInfo, value: Any) -> Any:
    if value is None:
        return None
    if info.nested is not None:
        if info.many:
            return tuple(v if not isinstance(v, dict) else build(info.nested, **v) for v in value)
        return value if not isinstance(value, dict) else build(info.nested, **value)
    if info.many:
        return tuple(value)
    if info.kind.startswith("timedelta") and isinstance(value, int):
        return datetime.timedelta(milliseconds=value)
    return value


def build(cls: type, **kwargs: Any) -> Any:
    infos = _field_infos(cls)
    return cls(**{k: _convert(infos[k], v) for k, v in kwargs.items() if k in infos})


@cache
def response_module(request_cls: type) -> Any:
    import sys

    return sys.modules[response_class(request_cls).__module__]
