"""Request dispatch by API key (Kafka's KafkaApis, split by area into small modules).

`KafkaApis.handle(connection, payload)` parses the frame with the codec and calls the handler of
that API key. A handler returns a response (bytes or parts), None (no response), or an awaitable
of one. Unknown API keys and unparseable requests close the connection with a log line, as
Kafka does; ApiVersions at an unsupported version is answered with UNSUPPORTED_VERSION (v0 body).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ...protocol.codec import MalformedRequest, UnsupportedVersion, decode_request, peek_api
from ..network import CloseConnection, Connection, Response
from . import admin, api_versions, fetch, list_offsets, metadata, produce, producer_ids

if TYPE_CHECKING:
    from ..broker import Broker

log = logging.getLogger("odradek.apis")

HandlerFn = Callable[["Broker", Any, Any, Connection], "Response | Awaitable[Response]"]

# api key -> (name, min version, max version, handler)
APIS: dict[int, tuple[str, int, int, HandlerFn]] = {
    0: ("Produce", 3, 10, produce.handle),
    1: ("Fetch", 4, 12, fetch.handle),
    2: ("ListOffsets", 1, 7, list_offsets.handle),
    3: ("Metadata", 0, 12, metadata.handle),
    18: ("ApiVersions", 0, 3, api_versions.handle),
    19: ("CreateTopics", 2, 7, admin.handle_create_topics),
    20: ("DeleteTopics", 1, 6, admin.handle_delete_topics),
    22: ("InitProducerId", 0, 4, producer_ids.handle),
    32: ("DescribeConfigs", 1, 4, admin.handle_describe_configs),
    37: ("CreatePartitions", 0, 3, admin.handle_create_partitions),
}


class KafkaApis:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.apis = dict(APIS)

    def supported(self) -> list[tuple[int, int, int]]:
        return [(k, lo, hi) for k, (_, lo, hi, _) in sorted(self.apis.items())]

    def handle(self, conn: Connection, payload: bytes) -> Response | Awaitable[Response]:
        try:
            key, version, correlation_id = peek_api(payload)
        except MalformedRequest as exc:
            raise CloseConnection(str(exc)) from None
        entry = self.apis.get(key)
        if entry is None:
            raise CloseConnection(f"unknown API key {key} (correlation id {correlation_id})")
        name, lo, hi, fn = entry
        if not lo <= version <= hi:
            if key == 18:
                return api_versions.unsupported_version(self.broker, correlation_id)
            raise CloseConnection(f"unsupported {name} version {version} (supported {lo}-{hi})")
        try:
            header, request = decode_request(payload)
        except (MalformedRequest, UnsupportedVersion) as exc:
            raise CloseConnection(f"malformed {name} v{version} request: {exc}") from None
        return fn(self.broker, header, request, conn)
