"""The ACL APIs (Kafka's AclApis): DescribeAcls (29), CreateAcls (30), DeleteAcls (31), v1-v2.

DescribeAcls needs DESCRIBE on the cluster, CreateAcls and DeleteAcls ALTER on the cluster
(CLUSTER_AUTHORIZATION_FAILED otherwise); without an authorizer every answer is
SECURITY_DISABLED ("No Authorizer is configured on the broker"), as Kafka answers. Filters have
Kafka's semantics (security/acl.py): pattern type ANY selects patterns of exactly the name,
MATCH every pattern that applies to it, LITERAL/PREFIXED only those patterns. DescribeAcls
answers from this broker's ACL cache; CreateAcls/DeleteAcls update the znodes (every broker
learns through the change notifications).

v0 (before KIP-290's pattern types) is not served: the codec (kio, Kafka 4.x schemas) lacks it;
clients of Kafka 2.0+ (Java, librdkafka, kafka-python) send v1 or later.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from ...protocol.codec import encode_response, make, response_module
from ...security.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    PatternType,
    ResourceType,
    binding_from_wire,
    filter_from_wire,
    group_by_pattern,
)
from ...security.authorizer import ALLOW_ALL, Authorizer
from ..network import Connection
from .authz import allowed

SECURITY_DISABLED = "No Authorizer is configured on the broker"


def describe_filter(request: Any) -> AclBindingFilter:
    return filter_from_wire(request.resource_type_filter, request.resource_name_filter,
                            getattr(request, "pattern_type_filter", PatternType.LITERAL),
                            request.principal_filter, request.host_filter, request.operation,
                            request.permission_type)


def delete_filter(f: Any) -> AclBindingFilter:
    return filter_from_wire(f.resource_type_filter, f.resource_name_filter,
                            getattr(f, "pattern_type_filter", PatternType.LITERAL),
                            f.principal_filter, f.host_filter, f.operation, f.permission_type)


def creation_binding(c: Any) -> AclBinding:
    return binding_from_wire(c.resource_type, c.resource_name,
                             getattr(c, "resource_pattern_type", PatternType.LITERAL),
                             c.principal, c.host, c.operation, c.permission_type)


class AclApis:
    def __init__(self, authorizer: Authorizer = ALLOW_ALL) -> None:
        self.authorizer = authorizer

    def _refusal(self, conn: Connection, operation: AclOperation, request_name: str
                 ) -> tuple[ErrorCode, str | None] | None:
        if not self.authorizer.enabled:
            return ErrorCode.security_disabled, SECURITY_DISABLED
        if not allowed(self.authorizer, conn, operation, ResourceType.CLUSTER,
                       request_name=request_name):
            return ErrorCode.cluster_authorization_failed, None
        return None

    def handle_describe_acls(self, header: Any, request: Any, conn: Connection) -> bytes:
        mod = response_module(type(request))
        refusal = self._refusal(conn, AclOperation.DESCRIBE, "DescribeAcls")
        resources: tuple[Any, ...] = ()
        error, message = refusal or (ErrorCode.none, None)
        if refusal is None:
            filt = describe_filter(request)
            why = filt.indefinite_field()
            if why is not None:
                error, message = ErrorCode.invalid_request, why
            else:
                found = self.authorizer.describe(filt)  # type: ignore[attr-defined]
                resources = tuple(
                    make(mod.DescribeAclsResource, resource_type=int(p.resource_type),
                         resource_name=p.name, pattern_type=int(p.pattern_type),
                         acls=tuple(make(mod.AclDescription, principal=e.principal,
                                         host=e.host, operation=int(e.operation),
                                         permission_type=int(e.permission_type))
                                    for e in sorted(entries, key=str)))
                    for p, entries in sorted(group_by_pattern(found).items(),
                                             key=lambda kv: str(kv[0])))
        return encode_response(type(request), header.correlation_id, make(
            mod.DescribeAclsResponse, throttle_time=0, error_code=error, error_message=message,
            resources=resources))

    async def handle_create_acls(self, header: Any, request: Any, conn: Connection) -> bytes:
        mod = response_module(type(request))
        refusal = self._refusal(conn, AclOperation.ALTER, "CreateAcls")
        if refusal is not None:
            results = [refusal] * len(request.creations)
        else:
            bindings = [creation_binding(c) for c in request.creations]
            outcome = await self.authorizer.create(bindings)  # type: ignore[attr-defined]
            results = [(ErrorCode.none, None) if e is None else
                       (getattr(ErrorCode, e.code), str(e)) for e in outcome]
        return encode_response(type(request), header.correlation_id, make(
            mod.CreateAclsResponse, throttle_time=0, results=tuple(
                make(mod.AclCreationResult, error_code=code, error_message=message)
                for code, message in results)))

    async def handle_delete_acls(self, header: Any, request: Any, conn: Connection) -> bytes:
        mod = response_module(type(request))
        refusal = self._refusal(conn, AclOperation.ALTER, "DeleteAcls")
        out = []
        if refusal is not None:
            out = [make(mod.DeleteAclsFilterResult, error_code=refusal[0],
                        error_message=refusal[1], matching_acls=())
                   for _ in request.filters]
        else:
            filters = [delete_filter(f) for f in request.filters]
            outcome = await self.authorizer.delete(filters)  # type: ignore[attr-defined]
            for deleted, error in outcome:
                out.append(make(
                    mod.DeleteAclsFilterResult,
                    error_code=ErrorCode.none if error is None else getattr(ErrorCode,
                                                                            error.code),
                    error_message=None if error is None else str(error),
                    matching_acls=tuple(make(
                        mod.DeleteAclsMatchingAcl, error_code=ErrorCode.none,
                        error_message=None, resource_type=int(b.pattern.resource_type),
                        resource_name=b.pattern.name, pattern_type=int(b.pattern.pattern_type),
                        principal=b.entry.principal, host=b.entry.host,
                        operation=int(b.entry.operation),
                        permission_type=int(b.entry.permission_type))
                        for b in sorted(deleted, key=str))))
        return encode_response(type(request), header.correlation_id, make(
            mod.DeleteAclsResponse, throttle_time=0, filter_results=tuple(out)))
