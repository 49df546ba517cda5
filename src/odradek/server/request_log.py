"""Kafka's request log: one DEBUG line per completed request on logger `kafka.request.logger`.

Kafka 2.8's RequestChannel writes ``Completed request:`` followed by a JSON description
(RequestConvertToJson.requestDescMetrics): the request header, the connection id
(``local-remote-index``), the times in milliseconds, the security protocol, principal, listener
and client software. odradek writes the same keys; the request and response bodies are left
empty (""), and of the times only what one event loop can tell apart is measured:
``localTimeMs`` from decoding to the response being ready (including any purgatory wait, which
Kafka counts as remote time), ``responseQueueTimeMs`` while a ready response waits behind an
earlier one on its connection (responses leave in order); the queue, remote, throttle and send
times are 0. Nothing is measured unless the logger is enabled for DEBUG.
"""

from __future__ import annotations

import json
import logging
import struct
from typing import Any

REQUEST_LOGGER_NAME = "kafka.request.logger"
request_logger = logging.getLogger(REQUEST_LOGGER_NAME)

_HEADER = struct.Struct(">hhih")


def request_header(payload: bytes) -> dict[str, Any]:
    """The request header fields of a request frame (api key, version, correlation id and
    client id, as Kafka's RequestHeader JSON); {} for a frame too short to have one."""
    if len(payload) < _HEADER.size:
        return {}
    key, version, correlation_id, n = _HEADER.unpack_from(payload)
    client_id = None
    if n >= 0:
        client_id = payload[_HEADER.size:_HEADER.size + n].decode("utf-8", "replace")
    return {"requestApiKey": key, "requestApiVersion": version, "correlationId": correlation_id,
            "clientId": client_id}


def completed_request_line(header: dict[str, Any], connection: str, *, total_ms: float,
                           local_ms: float, response_queue_ms: float, security_protocol: str,
                           principal: str, listener: str,
                           client_software: tuple[str, str] | None) -> str:
    """The message Kafka's request logger writes for one completed request."""
    name, version = client_software or ("unknown", "unknown")
    desc = {
        "isForwarded": False, "requestHeader": header, "request": "", "response": "",
        "connection": connection, "totalTimeMs": round(total_ms, 3),
        "requestQueueTimeMs": 0.0, "localTimeMs": round(local_ms, 3), "remoteTimeMs": 0.0,
        "throttleTimeMs": 0, "responseQueueTimeMs": round(response_queue_ms, 3),
        "sendTimeMs": 0.0, "securityProtocol": security_protocol, "principal": principal,
        "listener": listener,
        "clientInformation": {"softwareName": name, "softwareVersion": version},
    }
    return "Completed request:" + json.dumps(desc, separators=(",", ":"))


def connection_id(local: Any, remote: Any, index: int = 0) -> str:
    """Kafka's connection id: localHost:localPort-remoteHost:remotePort-index."""
    def addr(a: Any) -> str:
        return f"{a[0]}:{a[1]}" if a else "?"
    return f"{addr(local)}-{addr(remote)}-{index}"
