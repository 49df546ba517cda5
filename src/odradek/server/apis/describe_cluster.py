"""DescribeCluster (key 60, KIP-700): the cluster id, the controller id and the alive brokers
with their host, port and rack on the listener the request came in on -- what the admin
clients' ``describeCluster`` asks instead of Metadata. Kafka 2.8 has v0; v1 (KIP-919, Kafka
3.7) adds ``endpoint_type`` (1: brokers, 2: controllers) to the request and the response.

Kafka's ``handleDescribeCluster``: no permission is needed to describe the cluster. When the
request asks for ``include_cluster_authorized_operations`` the answer carries the cluster's
authorized-operations bit field -- 0 when the principal may not DESCRIBE the cluster (that
check logs a denial as any other), else one bit per operation of the cluster it may do (asked
without logging) -- and otherwise the schema's default (``Int.MinValue``). A broker lists the
brokers that have an endpoint on the request's listener (those without one are left out, as in
Metadata).

``endpoint_type`` (v1, as the later Kafka answers it): 1 is a broker's endpoint; 2 (controllers)
is MISMATCHED_ENDPOINT_TYPE, any other value UNSUPPORTED_ENDPOINT_TYPE, each with Kafka's
message and no brokers."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...protocol.codec import encode_response, make, response_module
from ...security.acl import AclOperation, ResourceType
from ...security.authorizer import ALLOW_ALL, Authorizer
from ..metadata_cache import MetadataCache
from ..network import Connection
from .authz import CLUSTER_NAME, allowed
from .metadata import CLUSTER_OPS, UNAUTHORIZED_OPS, authorized_operations

BROKER_ENDPOINT, CONTROLLER_ENDPOINT = 1, 2
ENDPOINT_TYPE_NAMES = {BROKER_ENDPOINT: "BROKER", CONTROLLER_ENDPOINT: "CONTROLLER"}


def endpoint_type_error(endpoint_type: int) -> tuple[ErrorCode, str] | None:
    """The error of a v1 request for `endpoint_type` at a broker (None: it is served)."""
    if endpoint_type == BROKER_ENDPOINT:
        return None
    if endpoint_type not in ENDPOINT_TYPE_NAMES:
        return ErrorCode.unsupported_endpoint_type, f"Unsupported endpoint type {endpoint_type}"
    return (ErrorCode.mismatched_endpoint_type,
            "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of "
            f"type {ENDPOINT_TYPE_NAMES[endpoint_type]}")


class DescribeClusterApi:
    def __init__(self, metadata_cache: MetadataCache,
                 authorizer: Authorizer = ALLOW_ALL) -> None:
        self.metadata_cache = metadata_cache
        self.authorizer = authorizer

    def handle(self, header: Any, request: Any, conn: Connection) -> bytes:
        mod = response_module(type(request))
        cache = self.metadata_cache
        endpoint_type = int(getattr(request, "endpoint_type", BROKER_ENDPOINT))
        error = endpoint_type_error(endpoint_type)
        if error is not None:
            response = make(mod.DescribeClusterResponse, throttle_time=0, error_code=error[0],
                            error_message=error[1], cluster_id="", brokers=(),
                            endpoint_type=endpoint_type)
            return encode_response(type(request), header.correlation_id, response)
        operations = UNAUTHORIZED_OPS
        if request.include_cluster_authorized_operations:
            operations = 0
            if allowed(self.authorizer, conn, AclOperation.DESCRIBE, ResourceType.CLUSTER,
                       CLUSTER_NAME, request_name="DescribeCluster"):
                operations = authorized_operations(self.authorizer, conn, ResourceType.CLUSTER,
                                                   CLUSTER_NAME, CLUSTER_OPS)
        listener = conn.listener_name
        brokers = tuple(make(mod.DescribeClusterBroker, broker_id=b.broker_id, host=ep.host,
                             port=ep.port, rack=b.rack)
                        for b in sorted(cache.brokers.values(), key=lambda b: b.broker_id)
                        if (ep := b.endpoint(listener)) is not None)
        response = make(mod.DescribeClusterResponse, throttle_time=0,
                        error_code=ErrorCode.none, error_message=None,
                        cluster_id=cache.cluster_id or "", controller_id=cache.controller_id,
                        brokers=brokers, cluster_authorized_operations=operations,
                        endpoint_type=endpoint_type)
        return encode_response(type(request), header.correlation_id, response)
