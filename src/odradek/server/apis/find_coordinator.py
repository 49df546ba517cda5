"""FindCoordinator (key 10), v0-v4: until the group coordinator exists, every key is answered
COORDINATOR_NOT_AVAILABLE, as Kafka does while `__consumer_offsets` is not yet available.

The API must still be advertised: librdkafka enables LZ4 compression (and its broker-based group
features) only when ApiVersions lists FindCoordinator, and otherwise silently sends LZ4-configured
batches uncompressed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ...protocol.codec import encode_response, make, response_module
from ..network import Connection

if TYPE_CHECKING:
    from ..broker import Broker

MESSAGE = "The coordinator is not available."


def handle(broker: Broker, header: Any, request: Any, conn: Connection) -> bytes:
    mod = response_module(type(request))
    error = ErrorCode.coordinator_not_available
    if hasattr(request, "coordinator_keys"):  # v4+: batched keys (KIP-699)
        coordinators = tuple(make(mod.Coordinator, key=k, node_id=-1, host="", port=-1,
                                  error_code=error, error_message=MESSAGE)
                             for k in request.coordinator_keys)
        resp = make(mod.FindCoordinatorResponse, throttle_time=0, coordinators=coordinators)
    else:
        resp = make(mod.FindCoordinatorResponse, throttle_time=0, error_code=error,
                    error_message=MESSAGE, node_id=-1, host="", port=-1)
    return encode_response(type(request), header.correlation_id, resp)
