"""InitProducerId (key 22), v0-v4, for idempotent producers (no transactions).

A new producer gets a fresh id from the cluster-wide block allocator at epoch 0. KIP-360 (v3+):
a producer that names its current id and epoch gets the same id with the epoch bumped, so it can
reset its sequence numbers after an error."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...protocol.codec import encode_response, make, response_module
from ...security.acl import AclOperation, ResourceType
from ...security.authorizer import ALLOW_ALL, Authorizer
from ..network import Connection
from ..producer_id_manager import ProducerIdManager
from .authz import allowed, host_of, principal_of

MAX_EPOCH = 32767


class InitProducerIdApi:
    def __init__(self, producer_ids: ProducerIdManager, authorizer: Authorizer = ALLOW_ALL
                 ) -> None:
        self.producer_ids = producer_ids
        self.authorizer = authorizer

    async def handle(self, header: Any, request: Any, conn: Connection) -> bytes:
        auth = self.authorizer
        # Kafka: an idempotent producer needs IDEMPOTENT_WRITE on the cluster, or WRITE on
        # some topic (KIP-679's authorizeByResourceType)
        if auth.enabled and request.transactional_id is None and not (
                allowed(auth, conn, AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER,
                        request_name="InitProducerId", log_if_denied=False)
                or auth.authorize_any(principal_of(conn), host_of(conn), AclOperation.WRITE,
                                      ResourceType.TOPIC, request_name="InitProducerId")):
            mod = response_module(type(request))
            return encode_response(type(request), header.correlation_id, make(
                mod.InitProducerIdResponse, throttle_time=0,
                error_code=ErrorCode.cluster_authorization_failed, producer_id=-1,
                producer_epoch=-1))
        return await _handle(self.producer_ids, header, request)


async def _handle(producer_ids: ProducerIdManager, header: Any, request: Any) -> bytes:
    mod = response_module(type(request))
    if request.transactional_id is not None:
        resp = make(mod.InitProducerIdResponse, throttle_time=0,
                    error_code=ErrorCode.transactional_id_authorization_failed,
                    producer_id=-1, producer_epoch=-1)
        return encode_response(type(request), header.correlation_id, resp)
    pid = int(getattr(request, "producer_id", -1))
    epoch = int(getattr(request, "producer_epoch", -1))
    if pid >= 0 and 0 <= epoch < MAX_EPOCH - 1:
        new_pid, new_epoch = pid, epoch + 1
    else:
        new_pid, new_epoch = await producer_ids.next_producer_id(), 0
    resp = make(mod.InitProducerIdResponse, throttle_time=0, error_code=ErrorCode.none,
                producer_id=new_pid, producer_epoch=new_epoch)
    return encode_response(type(request), header.correlation_id, resp)
