"""ApiVersions (key 18): the (api key, min, max) ranges this broker implements."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from ...protocol.codec import encode_response, make, response_module
from ..network import Connection

SupportedVersions = Callable[[], list[tuple[int, int, int]]]


class ApiVersionsApi:
    def __init__(self, supported: SupportedVersions) -> None:
        self.supported = supported

    def handle(self, header: Any, request: Any, conn: Connection) -> bytes:
        return _handle(self.supported, header, request, conn)

    def unsupported_version(self, correlation_id: int) -> bytes:
        return unsupported_version(self.supported, correlation_id)


def _handle(supported: SupportedVersions, header: Any, request: Any, conn: Connection) -> bytes:
    mod = response_module(type(request))
    keys = tuple(make(mod.ApiVersion, api_key=k, min_version=lo, max_version=hi)
                 for k, lo, hi in supported())
    resp = make(mod.ApiVersionsResponse, error_code=ErrorCode.none, api_keys=keys,
                throttle_time=0)
    if hasattr(request, "client_software_name"):
        conn.attributes["client_software"] = (request.client_software_name,
                                              request.client_software_version)
    return encode_response(type(request), header.correlation_id, resp)


def unsupported_version(supported_versions: SupportedVersions, correlation_id: int) -> bytes:
    """A v0 ApiVersionsResponse with UNSUPPORTED_VERSION and our ranges, so the client retries
    at a version we support (Kafka's behaviour; librdkafka falls back to v0)."""
    body = bytearray(struct.pack(">ih", correlation_id, ErrorCode.unsupported_version))
    supported = supported_versions()
    body += struct.pack(">i", len(supported))
    for k, lo, hi in supported:
        body += struct.pack(">hhh", k, lo, hi)
    return struct.pack(">i", len(body)) + bytes(body)
