"""InitProducerId (key 22), v0-v4.

Without a transactional id (idempotent producers): a new producer gets a fresh id from the
cluster-wide block allocator at epoch 0. KIP-360 (v3+): a producer that names its current id and
epoch gets the same id with the epoch bumped, so it can reset its sequence numbers after an
error.

With a transactional id: the transaction coordinator answers (coordinator/
transaction_coordinator.py), after WRITE on the TRANSACTIONAL_ID when an authorizer is on. A
producer id and epoch must be given both or neither (INVALID_REQUEST). Clients before v4 do not
know PRODUCER_FENCED and get INVALID_PRODUCER_EPOCH, as Kafka 2.8 answers them."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from ...coordinator.transaction_coordinator import InitProducerIdResult, TransactionCoordinator
from ...protocol.codec import encode_response, make, response_module
from ...security.acl import AclOperation, ResourceType
from ...security.authorizer import ALLOW_ALL, Authorizer
from ..network import Connection
from ..producer_id_manager import ProducerIdManager
from .authz import allowed, host_of, principal_of

MAX_EPOCH = 32767
NO_PRODUCER_ID = NO_PRODUCER_EPOCH = -1


def ms(value: Any) -> int:
    """kio gives durations as timedelta."""
    if isinstance(value, datetime.timedelta):
        return value // datetime.timedelta(milliseconds=1)
    return int(value)


class InitProducerIdApi:
    def __init__(self, producer_ids: ProducerIdManager,
                 txn_coordinator: TransactionCoordinator | None = None,
                 authorizer: Authorizer = ALLOW_ALL) -> None:
        self.producer_ids = producer_ids
        self.txn_coordinator = txn_coordinator
        self.authorizer = authorizer

    async def handle(self, header: Any, request: Any, conn: Connection) -> bytes:
        auth = self.authorizer
        tid = request.transactional_id
        if tid is not None:
            if not allowed(auth, conn, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, tid,
                           request_name="InitProducerId"):
                return _response(header, request, InitProducerIdResult.failed(
                    ErrorCode.transactional_id_authorization_failed))
        # Kafka: an idempotent producer needs IDEMPOTENT_WRITE on the cluster, or WRITE on
        # some topic (KIP-679's authorizeByResourceType)
        elif auth.enabled and not (
                allowed(auth, conn, AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER,
                        request_name="InitProducerId", log_if_denied=False)
                or auth.authorize_any(principal_of(conn), host_of(conn), AclOperation.WRITE,
                                      ResourceType.TOPIC, request_name="InitProducerId")):
            return _response(header, request, InitProducerIdResult.failed(
                ErrorCode.cluster_authorization_failed))
        if tid is None:
            return _response(header, request, await _idempotent(self.producer_ids, request))
        pid = int(getattr(request, "producer_id", NO_PRODUCER_ID))
        epoch = int(getattr(request, "producer_epoch", NO_PRODUCER_EPOCH))
        if (pid == NO_PRODUCER_ID) != (epoch == NO_PRODUCER_EPOCH):
            return _response(header, request,
                             InitProducerIdResult.failed(ErrorCode.invalid_request))
        if self.txn_coordinator is None:
            return _response(header, request,
                             InitProducerIdResult.failed(ErrorCode.coordinator_not_available))
        result = await self.txn_coordinator.handle_init_producer_id(
            tid, ms(request.transaction_timeout),
            None if pid == NO_PRODUCER_ID else (pid, epoch))
        return _response(header, request, result)


def _response(header: Any, request: Any, result: InitProducerIdResult) -> bytes:
    mod = response_module(type(request))
    error = result.error
    if error == ErrorCode.producer_fenced and request.__version__ < 4:
        error = ErrorCode.invalid_producer_epoch
    return encode_response(type(request), header.correlation_id, make(
        mod.InitProducerIdResponse, throttle_time=0, error_code=ErrorCode(error),
        producer_id=result.producer_id, producer_epoch=result.producer_epoch))


async def _idempotent(producer_ids: ProducerIdManager, request: Any) -> InitProducerIdResult:
    pid = int(getattr(request, "producer_id", NO_PRODUCER_ID))
    epoch = int(getattr(request, "producer_epoch", NO_PRODUCER_EPOCH))
    if pid >= 0 and 0 <= epoch < MAX_EPOCH - 1:
        return InitProducerIdResult(pid, epoch + 1, ErrorCode.none)
    return InitProducerIdResult(await producer_ids.next_producer_id(), 0, ErrorCode.none)
