"""DescribeClientQuotas (key 48) and AlterClientQuotas (key 49), v0-1, as Kafka 2.8's
KafkaApis and ZkAdminManager answer them on a ZooKeeper cluster.

Describe needs DESCRIBE_CONFIGS on the cluster (else CLUSTER_AUTHORIZATION_FAILED for the
request), Alter needs ALTER_CONFIGS (else CLUSTER_AUTHORIZATION_FAILED for each entry). A bad
filter (a duplicate or empty entity type, ip with user or client-id) is INVALID_REQUEST, a custom
entity type UNSUPPORTED_VERSION; a bad entity or op (unknown key, a fractional byte rate, a
negative or non-finite value) is INVALID_REQUEST for that entry only. With validate_only nothing
is written. Entities are read from and written to ZooKeeper (server/quotas/quota_config.py).
"""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from ...coordination.store import CoordinationError, CoordinationStore
from ...protocol.codec import encode_response, make, response_module
from ...security.acl import AclOperation, ResourceType
from ...security.authorizer import ALLOW_ALL, Authorizer
from ..network import Connection
from ..quotas.client_quota_manager import DEFAULT
from ..quotas.quota_config import (
    CLIENT_ID,
    IP,
    USER,
    EntityName,
    FilterComponent,
    InvalidQuotaRequest,
    UnsupportedQuotaEntity,
    all_quota_entities,
    apply_quota_ops,
    check_filter,
    describe_matches,
    entity_path,
    parse_entity,
    quota_values,
    read_entity_config,
    write_entity_config,
)
from .authz import allowed

log = logging.getLogger("odradek.quotas")


def _wire_name(name: str | None) -> str | None:
    return None if name == DEFAULT else name


def _entity_data(cls: type, entity: EntityName) -> tuple[Any, ...]:
    out = []
    if entity.user is not None:
        out.append(make(cls, entity_type=USER, entity_name=_wire_name(entity.user)))
    if entity.client_id is not None:
        out.append(make(cls, entity_type=CLIENT_ID, entity_name=_wire_name(entity.client_id)))
    return tuple(out)


class ClientQuotaApis:
    def __init__(self, store: CoordinationStore, authorizer: Authorizer = ALLOW_ALL) -> None:
        self.store = store
        self.authorizer = authorizer

    async def handle_describe(self, header: Any, request: Any, conn: Connection) -> bytes:
        mod = response_module(type(request))

        def respond(code: ErrorCode, message: str | None, entries: tuple[Any, ...] | None
                    ) -> bytes:
            return encode_response(type(request), header.correlation_id, make(
                mod.DescribeClientQuotasResponse, throttle_time=0, error_code=code,
                error_message=message, entries=entries))

        if not allowed(self.authorizer, conn, AclOperation.DESCRIBE_CONFIGS,
                       ResourceType.CLUSTER, request_name="DescribeClientQuotas"):
            return respond(ErrorCode.cluster_authorization_failed, None, None)
        try:
            components = check_filter(
                FilterComponent(c.entity_type, int(c.match_type), c.match)
                for c in request.components)
            found = await self._describe(components, bool(request.strict))
        except InvalidQuotaRequest as exc:
            return respond(ErrorCode.invalid_request, str(exc), None)
        except UnsupportedQuotaEntity as exc:
            return respond(ErrorCode.unsupported_version, str(exc), None)
        except CoordinationError as exc:
            log.warning("DescribeClientQuotas failed: %s", exc)
            return respond(ErrorCode.unknown_server_error, str(exc), None)
        entries = tuple(
            make(mod.EntryData, entity=_entity_data(mod.EntityData, entity),
                 values=tuple(make(mod.ValueData, key=k, value=v) for k, v in values.items()))
            for entity, values in found)
        return respond(ErrorCode.none, None, entries)

    async def _describe(self, components: dict[str, FilterComponent], strict: bool
                        ) -> list[tuple[EntityName, dict[str, float]]]:
        if IP in components or (strict and not components):
            return []  # IP quotas are not kept here; nothing matches an empty strict filter
        user_c, client_c = components.get(USER), components.get(CLIENT_ID)
        exact: EntityName | None = None
        if (user_c is None or user_c.match_type != 2) and (
                client_c is None or client_c.match_type != 2) and strict:
            exact = EntityName(_component_name(user_c), _component_name(client_c))
        if exact is not None and (exact.user is not None or exact.client_id is not None):
            props = await read_entity_config(self.store, entity_path(exact.quota_entity))
            candidates = {exact: props}
        else:
            candidates = await all_quota_entities(self.store)
        out = []
        for entity, props in sorted(candidates.items(), key=lambda e: (
                e[0].user or "", e[0].client_id or "")):
            values = quota_values(props)
            if values and describe_matches(components, strict, entity):
                out.append((entity, values))
        return out

    async def handle_alter(self, header: Any, request: Any, conn: Connection) -> bytes:
        mod = response_module(type(request))
        authorized = allowed(self.authorizer, conn, AclOperation.ALTER_CONFIGS,
                             ResourceType.CLUSTER, request_name="AlterClientQuotas")
        results = []
        for entry in request.entries:
            code, message = ErrorCode.none, None
            if not authorized:
                code = ErrorCode.cluster_authorization_failed
            else:
                try:
                    await self._alter_entry(entry, bool(request.validate_only))
                except InvalidQuotaRequest as exc:
                    code, message = ErrorCode.invalid_request, str(exc)
                except CoordinationError as exc:
                    log.warning("AlterClientQuotas failed: %s", exc)
                    code, message = ErrorCode.unknown_server_error, str(exc)
            results.append(make(mod.EntryData, error_code=code, error_message=message,
                                entity=tuple(make(mod.EntityData, entity_type=e.entity_type,
                                                  entity_name=e.entity_name)
                                             for e in entry.entity)))
        return encode_response(type(request), header.correlation_id, make(
            mod.AlterClientQuotasResponse, throttle_time=0, entries=tuple(results)))

    async def _alter_entry(self, entry: Any, validate_only: bool) -> None:
        entity = parse_entity((e.entity_type, e.entity_name) for e in entry.entity)
        quota_entity = entity.quota_entity
        props = await read_entity_config(self.store, entity_path(quota_entity))
        new = apply_quota_ops(props, ((op.key, None if op.remove else float(op.value))
                                      for op in entry.ops))
        if not validate_only:
            await write_entity_config(self.store, quota_entity, new)


def _component_name(component: FilterComponent | None) -> str | None:
    if component is None:
        return None
    return DEFAULT if component.match_type == 1 else component.match
