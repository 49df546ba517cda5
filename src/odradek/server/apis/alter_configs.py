"""AlterConfigs (key 33, v0-2) and IncrementalAlterConfigs (key 44, v0-1) for TOPIC (2) and
BROKER (4) resources, as Kafka's ZkAdminManager does them (S-6.3).

AlterConfigs replaces a resource's dynamic configs with the given set; IncrementalAlterConfigs
changes single configs: SET (0), DELETE (1), APPEND (2) and SUBTRACT (3) (the last two for
list configs only). A broker resource named "" is the cluster-wide default (`<default>`).
The new set is validated, then (unless validate_only) written to `/config/topics/<t>` or
`/config/brokers/<entity>` followed by a `/config/changes` notification, so every broker applies
it. Errors as Kafka's: unknown topic UNKNOWN_TOPIC_OR_PARTITION, unknown topic config name
INVALID_CONFIG, a bad value or a broker config not updatable at run time INVALID_REQUEST
("Invalid config value for resource ..."). Unknown broker config names are custom configs,
stored as given (Kafka's DynamicBrokerConfig.validate).

The decisions (`config_ops.apply_incremental`, `error_for`) are pure functions.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...protocol.codec import encode_response, make, response_module
from ...security.acl import AclOperation, ResourceType
from ...security.authorizer import ALLOW_ALL, Authorizer
from ...storage.log_config import InvalidConfigError
from ..admin_manager import AdminManager
from ..configs.broker_config_manager import NonDynamicConfigError
from ..configs.config_ops import (
    SET,
    ConfigOp,
    InvalidRequestError,
    UnknownConfigKeyError,
    UnknownTopicError,
)
from ..network import Connection
from .authz import allowed

TOPIC, BROKER = 2, 4
RESOURCE_TYPES = {TOPIC: "TOPIC", BROKER: "BROKER"}


class AlterConfigsApis:
    def __init__(self, admin_manager: AdminManager, authorizer: Authorizer = ALLOW_ALL) -> None:
        self.admin = admin_manager
        self.authorizer = authorizer

    def _denied(self, conn: Connection, request: Any, request_name: str
                ) -> dict[int, ErrorCode]:
        """Kafka: ALTER_CONFIGS on each topic (TOPIC_AUTHORIZATION_FAILED), on the cluster for
        brokers (CLUSTER_AUTHORIZATION_FAILED); by position in the request."""
        out: dict[int, ErrorCode] = {}
        if not self.authorizer.enabled:
            return out
        for i, res in enumerate(request.resources):
            if res.resource_type == TOPIC and not allowed(
                    self.authorizer, conn, AclOperation.ALTER_CONFIGS, ResourceType.TOPIC,
                    res.resource_name, request_name=request_name):
                out[i] = ErrorCode.topic_authorization_failed
            elif res.resource_type == BROKER and not allowed(
                    self.authorizer, conn, AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER,
                    request_name=request_name):
                out[i] = ErrorCode.cluster_authorization_failed
        return out

    async def handle_alter_configs(self, header: Any, request: Any, conn: Connection) -> bytes:
        results = await _alter(self.admin, request, incremental=False,
                               denied=self._denied(conn, request, "AlterConfigs"))
        return _response(request, header, results, "AlterConfigsResponse")

    async def handle_incremental_alter_configs(self, header: Any, request: Any,
                                               conn: Connection) -> bytes:
        results = await _alter(self.admin, request, incremental=True, denied=self._denied(
            conn, request, "IncrementalAlterConfigs"))
        return _response(request, header, results, "IncrementalAlterConfigsResponse")


def resource_text(resource_type: int, name: str) -> str:
    """Kafka's ConfigResource.toString."""
    return f"ConfigResource(type={RESOURCE_TYPES.get(resource_type, resource_type)}, " \
           f"name='{name}')"


def error_for(exc: Exception, resource_type: int, name: str) -> tuple[ErrorCode, str | None]:
    if isinstance(exc, UnknownTopicError):
        return ErrorCode.unknown_topic_or_partition, str(exc)
    if isinstance(exc, InvalidConfigError) and str(exc).startswith("Unknown topic config"):
        return ErrorCode.invalid_config, str(exc)
    if isinstance(exc, UnknownConfigKeyError):
        return ErrorCode.unknown_server_error, None
    if isinstance(exc, InvalidRequestError):
        return ErrorCode.invalid_request, str(exc)
    if isinstance(exc, NonDynamicConfigError | ValueError):
        return ErrorCode.invalid_request, \
            f"Invalid config value for resource {resource_text(resource_type, name)}: {exc}"
    return ErrorCode.unknown_server_error, str(exc) or type(exc).__name__


def _response(request: Any, header: Any, results: list[tuple[Any, ErrorCode, str | None]],
              response_name: str) -> bytes:
    mod = response_module(type(request))
    out = tuple(make(mod.AlterConfigsResourceResponse, error_code=code,
                     error_message=None if code == ErrorCode.none else message,
                     resource_type=res.resource_type, resource_name=res.resource_name)
                for res, code, message in results)
    return encode_response(type(request), header.correlation_id,
                           make(getattr(mod, response_name), throttle_time=0, responses=out))


async def _alter(admin: AdminManager, request: Any, incremental: bool,
                 denied: dict[int, ErrorCode] | None = None
                 ) -> list[tuple[Any, ErrorCode, str | None]]:
    results: list[tuple[Any, ErrorCode, str | None]] = []
    for i, res in enumerate(request.resources):
        if denied and i in denied:
            results.append((res, denied[i], None))
            continue
        try:
            if incremental:
                ops = [ConfigOp(c.name, int(c.config_operation), c.value) for c in res.configs]
            else:
                # Kafka's alterConfigs: null values refused by name; a name given twice takes
                # its last value
                nulls = [c.name for c in res.configs if c.value is None]
                if nulls:
                    raise InvalidRequestError(
                        f"Null value not supported for : {','.join(nulls)}")
                ops = [ConfigOp(n, SET, v) for n, v in
                       {c.name: c.value for c in res.configs}.items()]
            if res.resource_type == TOPIC:
                await admin.alter_topic_config(res.resource_name, ops, incremental,
                                               request.validate_only)
            elif res.resource_type == BROKER:
                await admin.alter_broker_config(res.resource_name, ops, incremental,
                                                request.validate_only)
            else:
                raise InvalidRequestError(
                    "AlterConfigs is only supported for topics and brokers, but resource type "
                    f"is {res.resource_type}")
            results.append((res, ErrorCode.none, None))
        except Exception as exc:  # each resource gets its own error
            code, message = error_for(exc, res.resource_type, res.resource_name)
            results.append((res, code, message))
    return results
