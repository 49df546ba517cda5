"""Client quotas applied to requests (KIP-219, as Kafka's KafkaApis and RequestHandlerHelper).

After a request is handled its quotas are recorded: Produce records the request's size
(`producer_byte_rate`), a consumer's Fetch the response's size (`consumer_byte_rate`), and every
request not exempt the time the broker spent on it (`request_percentage`). When a quota is
violated the response leaves at once carrying `throttle_time_ms` (the larger of the byte-rate and
request throttles) and the connection is muted (no request read from it) for that time.

As Kafka does:
- a throttled consumer Fetch gets an empty response (same error and session id) and its bytes
  are unrecorded; a consumer's fetch size is capped at what one quota window allows;
- Produce with acks=0 has no response: only the byte rate is recorded and may mute the
  connection; its request time is not checked;
- followers' Fetch and the cluster actions (WriteTxnMarkers; LeaderAndIsr, StopReplica,
  UpdateMetadata and ControlledShutdown never reach here) are exempt;
- APIs whose response has no throttle_time_ms (SaslHandshake, SaslAuthenticate, old versions)
  are still muted.

The throttle field is written into the encoded response frame: its offset is known from the
schema (the first body field for most APIs, the last for Produce, after the api keys for
ApiVersions).
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Awaitable, Callable
from functools import lru_cache
from typing import Any

from ...common import clock
from ...common.sanitizer import sanitize_user
from ...protocol.codec import request_class, response_class
from ..network import Connection, Response
from ..replication.fetch_topic_ids import replica_id_of  # Fetch v15+: replica_state (KIP-903)
from .client_quota_manager import QuotaManagers

_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")

PRODUCE, FETCH, API_VERSIONS, WRITE_TXN_MARKERS = 0, 1, 18, 27
EXEMPT_API_KEYS = frozenset({WRITE_TXN_MARKERS})  # Kafka's clusterAction APIs served here

# NanosToPercentagePerSecond: a request's nanoseconds as a percentage of one second
NANOS_TO_PERCENTAGE = 100.0 / 1e9

_FIXED_SIZES = {"int8": 1, "int16": 2, "error_code": 2, "int32": 4, "int64": 8}


@lru_cache(maxsize=512)
def throttle_field(api_key: int, version: int) -> tuple[str, int] | None:
    """Where throttle_time_ms sits in the response frame (size prefix included):
    ("start", offset), ("end", bytes after it), ("api_versions", 0), or None (no field)."""
    try:
        cls = response_class(request_class(api_key, version))
    except Exception:  # a version kio has no schema for: no field to patch
        return None
    fields = [f.name for f in dataclasses.fields(cls)]
    if "throttle_time" not in fields:
        return None
    flexible_header = cls.__header_schema__.__module__.split(".")[-2] == "v1"
    flexible_body = getattr(cls, "__flexible__", flexible_header)
    index = fields.index("throttle_time")
    if api_key == PRODUCE:
        return "end", 4 + (1 if flexible_body else 0)
    if api_key == API_VERSIONS:
        return "api_versions", version
    header = 4 + 4 + (1 if flexible_header else 0)
    offset = header
    for name in fields[:index]:
        kind = _kafka_type(cls, name)
        if kind not in _FIXED_SIZES:
            return None
        offset += _FIXED_SIZES[kind]
    return "start", offset


def _kafka_type(cls: type, name: str) -> str:
    for f in dataclasses.fields(cls):
        if f.name == name:
            return str(f.metadata.get("kafka_type", ""))
    return ""


def _uvarint(buf: bytes | bytearray, off: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = buf[off]
        off += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, off
        shift += 7


def throttle_offset(api_key: int, version: int, frame: bytes | bytearray) -> int | None:
    """The byte offset of throttle_time_ms in an encoded response frame, None if it has none."""
    where = throttle_field(api_key, version)
    if where is None:
        return None
    kind, n = where
    if kind == "start":
        return n if len(frame) >= n + 4 else None
    if kind == "end":
        return len(frame) - n if len(frame) >= n + 8 else None
    # ApiVersions: size, correlation id (header v0), error code, api keys, throttle
    off = 4 + 4 + 2
    if version >= 3:
        count, off = _uvarint(frame, off)
        count -= 1
        for _ in range(max(count, 0)):
            off += 6
            tags, off = _uvarint(frame, off)
            for _ in range(tags):
                _, off = _uvarint(frame, off)
                size, off = _uvarint(frame, off)
                off += size
    else:
        (count,) = _INT32.unpack_from(frame, off)
        off += 4 + 6 * max(count, 0)
    return off if len(frame) >= off + 4 else None


def _head(response: Response, size: int = 64) -> bytes:
    """The first bytes of a response frame (its leading bytes parts joined)."""
    if response is None:
        return b""
    if isinstance(response, bytes | bytearray):
        return bytes(response[:size])
    out = bytearray()
    for part in response:
        if not isinstance(part, bytes | bytearray | memoryview) or len(out) >= size:
            break
        out += part
    return bytes(out[:size])


def with_throttle_time(api_key: int, version: int, response: Response, throttle_ms: int
                       ) -> Response:
    """The response with its throttle_time_ms set (unchanged if it has no such field)."""
    if response is None or throttle_ms <= 0:
        return response
    if isinstance(response, bytes | bytearray):
        offset = throttle_offset(api_key, version, response)
        if offset is None:
            return response
        patched = bytearray(response)
        _INT32.pack_into(patched, offset, throttle_ms)
        return bytes(patched)
    # a list of parts: the field is in the leading bytes parts (only "start" fields here)
    where = throttle_field(api_key, version)
    if where is None or where[0] != "start":
        return response
    offset = where[1]
    parts = list(response)
    start = 0
    for i, part in enumerate(parts):
        if not isinstance(part, bytes | bytearray):
            break
        if start <= offset and offset + 4 <= start + len(part):
            patched = bytearray(part)
            _INT32.pack_into(patched, offset - start, throttle_ms)
            parts[i] = bytes(patched)
            return parts
        start += len(part)
    return response


def _throttle_time(version: int, response: Response) -> int:
    """A Fetch response's throttle_time_ms as encoded (0 when it can't be read)."""
    where = throttle_field(FETCH, version)
    if where is None or where[0] != "start":
        return 0
    head = _head(response, where[1] + 4)
    return _INT32.unpack_from(head, where[1])[0] if len(head) >= where[1] + 4 else 0


def response_size(response: Response) -> int:
    """The response frame's size (its size prefix)."""
    head = _head(response, 4)
    return int(_INT32.unpack_from(head, 0)[0]) if len(head) == 4 else 0


def _wall_ms() -> int:
    return int(clock.monotonic() * 1000)


class RequestThrottler:
    """Records each client request in the quota managers and throttles as Kafka does."""

    def __init__(self, quotas: QuotaManagers, clock_ms: Callable[[], int] = _wall_ms) -> None:
        self.quotas = quotas
        self.clock_ms = clock_ms

    @property
    def enabled(self) -> bool:
        return self.quotas.enabled

    @staticmethod
    def _who(conn: Connection, header: Any) -> tuple[str, str]:
        user = conn.attributes.get("sanitized_user")
        name = conn.principal.name
        if user is None or user[0] != name:
            user = conn.attributes["sanitized_user"] = (name, sanitize_user(name))
        return user[1], header.client_id or ""

    def prepare(self, api_key: int, header: Any, request: Any, conn: Connection) -> Any:
        """A consumer's fetch asks for no more than one quota window allows."""
        if api_key != FETCH or replica_id_of(request) >= 0 \
                or not self.quotas.fetch.quotas_enabled:
            return request
        user, client_id = self._who(conn, header)
        window = self.quotas.fetch.max_value_in_quota_window(user, client_id)
        cap = int(min(window, 2**31 - 1))
        if getattr(request, "max_bytes", cap) <= cap:
            return request
        return dataclasses.replace(request, max_bytes=cap,
                                   min_bytes=min(request.min_bytes, cap))

    def fetch_throttle(self, header: Any, conn: Connection, size: int) -> int:
        """A consumer's Fetch answer of `size` bytes against consumer_byte_rate, asked by the
        Fetch API before its fetch session is updated (Kafka's handleFetchRequest: record,
        and when throttled unrecord, mute the channel and answer the throttled, empty
        response). Returns the throttle time in ms (0: answer as read)."""
        quotas = self.quotas
        if not quotas.fetch.quotas_enabled or not conn.authenticated:
            return 0
        user, client_id = self._who(conn, header)
        now = self.clock_ms()
        throttle = quotas.fetch.record_and_get_throttle_ms(user, client_id, size, now)
        if throttle > 0:
            quotas.fetch.unrecord(user, client_id, size, now)
            conn.throttle(throttle)
        return throttle

    def complete(self, api_key: int, header: Any, request: Any, conn: Connection,
                 request_size: int, thread_ns: int, result: Response | Awaitable[Response]
                 ) -> Response | Awaitable[Response]:
        if isinstance(result, Awaitable):
            return self._complete_later(api_key, header, request, conn, request_size,
                                        thread_ns, result)
        return self._apply(api_key, header, request, conn, request_size, thread_ns, result)

    async def _complete_later(self, api_key: int, header: Any, request: Any, conn: Connection,
                              request_size: int, thread_ns: int,
                              result: Awaitable[Response]) -> Response:
        response = await result
        return self._apply(api_key, header, request, conn, request_size, thread_ns, response)

    def _apply(self, api_key: int, header: Any, request: Any, conn: Connection,
               request_size: int, thread_ns: int, response: Response) -> Response:
        quotas = self.quotas
        version = header.request_api_version
        if api_key in EXEMPT_API_KEYS or (api_key == FETCH and replica_id_of(request) >= 0):
            return response
        user, client_id = self._who(conn, header)
        now = self.clock_ms()
        bandwidth = 0
        if api_key == PRODUCE:
            bandwidth = quotas.produce.record_and_get_throttle_ms(user, client_id,
                                                                  request_size, now)
            if request.acks == 0:  # no response: the request quota is not enforced
                if bandwidth > 0:
                    conn.throttle(bandwidth)
                return response
        request_throttle = quotas.request.record_and_get_throttle_ms(
            user, client_id, thread_ns * NANOS_TO_PERCENTAGE, now)
        if api_key == FETCH:
            # the byte rate was decided by fetch_throttle before the session moved on; a
            # throttled answer already carries its throttle time and is empty
            if request_throttle <= 0 or _throttle_time(version, response) > 0:
                return response
            conn.throttle(request_throttle)
            return with_throttle_time(api_key, version, response, request_throttle)
        throttle = max(bandwidth, request_throttle)
        if throttle <= 0:
            return response
        conn.throttle(throttle)
        return with_throttle_time(api_key, version, response, throttle)
