"""Group membership APIs, answered by the group coordinator (`odradek.coordinator`):
JoinGroup (11) v0-v7, SyncGroup (14) v0-v5, Heartbeat (12) v0-v4, LeaveGroup (13) v0-v5,
ListGroups (16) v0-v4, DescribeGroups (15) v0-v5, DeleteGroups (42) v0-v2.

JoinGroup and SyncGroup wait (a future) until the rebalance phase ends; the others answer at
once. As in Kafka: JoinGroup v4+ from a member without a group.instance.id and without a member
id is answered MEMBER_ID_REQUIRED with a new id (KIP-394); v0 has no rebalance timeout (the
session timeout is used); protocol type and name are nullable from JoinGroup v7 and SyncGroup
v5 on (SyncGroup v5 must name both); LeaveGroup v0-v2 carry one member and report its error at
the top level, v3+ a batch of members (KIP-345).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from ...coordinator.group import JoinGroupResult, SyncGroupResult
from ...coordinator.group_coordinator import GroupCoordinator
from ...protocol.codec import encode_response, make, response_module
from ...security.acl import AclOperation, ResourceType
from ...security.authorizer import ALLOW_ALL, Authorizer
from ..network import Connection
from .authz import allowed, allowed_names

log = logging.getLogger("odradek.apis.groups")

UNAUTHORIZED_OPS = -2147483648  # authorized operations not requested / not computed
GROUP_AUTHORIZATION_FAILED = ErrorCode.group_authorization_failed
T = TypeVar("T")


def ms(value: Any) -> int:
    """kio gives durations as timedelta; plain ints pass through."""
    if isinstance(value, datetime.timedelta):
        return value // datetime.timedelta(milliseconds=1)
    return int(value)


def client_host(conn: Connection) -> str:
    """Kafka's clientHost: the peer address as InetAddress.toString prints it ("/1.2.3.4")."""
    host = conn.peer.rsplit(":", 1)[0] if ":" in conn.peer else conn.peer
    return "/" + host


class GroupApis:
    """The group membership APIs of one group coordinator (which answers
    COORDINATOR_NOT_AVAILABLE while it is not active)."""

    def __init__(self, coordinator: GroupCoordinator, authorizer: Authorizer = ALLOW_ALL
                 ) -> None:
        self.coordinator = coordinator
        self.authorizer = authorizer

    def _read_denied(self, conn: Connection, group_id: str, request_name: str) -> bool:
        """Kafka: the membership APIs need READ on the group."""
        return self.authorizer.enabled and not allowed(
            self.authorizer, conn, AclOperation.READ, ResourceType.GROUP, group_id,
            request_name=request_name)

    def _groups_allowed(self, conn: Connection, operation: AclOperation, groups: list[str],
                        request_name: str) -> set[str]:
        return allowed_names(self.authorizer, conn, operation, ResourceType.GROUP, groups,
                             request_name=request_name)

    def handle_join_group(self, header: Any, request: Any, conn: Connection) -> Any:
        denied = self._read_denied(conn, request.group_id, "JoinGroup")
        return _join_group(self.coordinator, header, request, conn, denied)

    def handle_sync_group(self, header: Any, request: Any, conn: Connection) -> Any:
        denied = self._read_denied(conn, request.group_id, "SyncGroup")
        return _sync_group(self.coordinator, header, request, denied)

    def handle_heartbeat(self, header: Any, request: Any, conn: Connection) -> bytes:
        denied = self._read_denied(conn, request.group_id, "Heartbeat")
        return _heartbeat(self.coordinator, header, request, denied)

    def handle_leave_group(self, header: Any, request: Any, conn: Connection) -> bytes:
        denied = self._read_denied(conn, request.group_id, "LeaveGroup")
        return _leave_group(self.coordinator, header, request, denied)

    def handle_list_groups(self, header: Any, request: Any, conn: Connection) -> bytes:
        visible = None
        auth = self.authorizer
        # Kafka: DESCRIBE on the cluster lists every group, else those with DESCRIBE on them
        if auth.enabled and not allowed(auth, conn, AclOperation.DESCRIBE, ResourceType.CLUSTER,
                                        request_name="ListGroups", log_if_denied=False):
            visible = self._groups_allowed
        return _list_groups(self.coordinator, header, request,
                            None if visible is None else lambda groups: visible(
                                conn, AclOperation.DESCRIBE, groups, "ListGroups"))

    def handle_describe_groups(self, header: Any, request: Any, conn: Connection) -> bytes:
        ok = self._groups_allowed(conn, AclOperation.DESCRIBE, list(request.groups),
                                  "DescribeGroups")
        return _describe_groups(self.coordinator, header, request, ok)

    def handle_delete_groups(self, header: Any, request: Any, conn: Connection) -> bytes:
        ok = self._groups_allowed(conn, AclOperation.DELETE, list(request.groups_names),
                                  "DeleteGroups")
        return _delete_groups(self.coordinator, header, request, ok)


def when_done(future: asyncio.Future[T], build: Callable[[T], bytes]) -> Any:
    """The response now if the coordinator answered at once, else an awaitable of it."""
    if future.done():
        return build(future.result())

    async def wait() -> bytes:
        return build(await future)
    return wait()


def resolver(future: asyncio.Future[T]) -> Callable[[T], None]:
    def resolve(result: T) -> None:
        if not future.done():  # the connection may be gone (the awaiting task cancelled)
            future.set_result(result)
    return resolve


# -- JoinGroup -------------------------------------------------------------------------------------

def _join_group(coordinator: GroupCoordinator, header: Any, request: Any, conn: Connection,
                denied: bool = False) -> Any:
    version = header.request_api_version
    mod = response_module(type(request))

    def build(r: JoinGroupResult) -> bytes:
        members = tuple(make(mod.JoinGroupResponseMember, member_id=m.member_id,
                             group_instance_id=m.group_instance_id, metadata=m.metadata)
                        for m in r.members)
        resp = make(mod.JoinGroupResponse, throttle_time=0, error_code=ErrorCode(r.error),
                    generation_id=r.generation_id, protocol_type=r.protocol_type,
                    protocol_name=(r.protocol_name if version >= 7 else r.protocol_name or ""),
                    leader=r.leader_id, member_id=r.member_id, members=members)
        return encode_response(type(request), header.correlation_id, resp)

    future: asyncio.Future[JoinGroupResult] = asyncio.get_running_loop().create_future()
    if denied:
        return build(JoinGroupResult(request.member_id, ErrorCode.group_authorization_failed))
    instance_id = getattr(request, "group_instance_id", None)
    session = ms(request.session_timeout)
    rebalance = ms(getattr(request, "rebalance_timeout", request.session_timeout))
    coordinator.handle_join_group(
        request.group_id, request.member_id, instance_id,
        version >= 4 and instance_id is None, header.client_id or "", client_host(conn),
        rebalance, session, request.protocol_type,
        [(p.name, p.metadata) for p in request.protocols], resolver(future))
    return when_done(future, build)


# -- SyncGroup -------------------------------------------------------------------------------------

def _sync_group(coordinator: GroupCoordinator, header: Any, request: Any,
                denied: bool = False) -> Any:
    version = header.request_api_version
    mod = response_module(type(request))

    def build(r: SyncGroupResult) -> bytes:
        resp = make(mod.SyncGroupResponse, throttle_time=0, error_code=ErrorCode(r.error),
                    protocol_type=r.protocol_type, protocol_name=r.protocol_name,
                    assignment=r.assignment)
        return encode_response(type(request), header.correlation_id, resp)

    future: asyncio.Future[SyncGroupResult] = asyncio.get_running_loop().create_future()
    protocol_type = getattr(request, "protocol_type", None)
    protocol_name = getattr(request, "protocol_name", None)
    if denied:
        future.set_result(SyncGroupResult(ErrorCode.group_authorization_failed))
    elif version >= 5 and (protocol_type is None or protocol_name is None):
        future.set_result(SyncGroupResult(ErrorCode.inconsistent_group_protocol))
    else:
        coordinator.handle_sync_group(
            request.group_id, request.generation_id, request.member_id, protocol_type,
            protocol_name, getattr(request, "group_instance_id", None),
            {a.member_id: a.assignment for a in request.assignments}, resolver(future))
    return when_done(future, build)


# -- Heartbeat -------------------------------------------------------------------------------------

def _heartbeat(coordinator: GroupCoordinator, header: Any, request: Any,
               denied: bool = False) -> bytes:
    mod = response_module(type(request))
    error = GROUP_AUTHORIZATION_FAILED if denied else coordinator.handle_heartbeat(
        request.group_id, request.member_id, getattr(request, "group_instance_id", None),
        request.generation_id)
    resp = make(mod.HeartbeatResponse, throttle_time=0, error_code=ErrorCode(error))
    return encode_response(type(request), header.correlation_id, resp)


# -- LeaveGroup ------------------------------------------------------------------------------------

def _leave_group(coordinator: GroupCoordinator, header: Any, request: Any,
                 denied: bool = False) -> bytes:
    version = header.request_api_version
    mod = response_module(type(request))
    if denied:
        return encode_response(type(request), header.correlation_id, make(
            mod.LeaveGroupResponse, throttle_time=0, error_code=GROUP_AUTHORIZATION_FAILED,
            members=()))
    if version <= 2:
        members = [(request.member_id, None)]
    else:
        members = [(m.member_id, m.group_instance_id) for m in request.members]
        for m in request.members:
            reason = getattr(m, "reason", None)
            if reason:
                log.info("Member %s of group %s is leaving: %s", m.member_id, request.group_id,
                         reason)
    error, results = coordinator.handle_leave_group(request.group_id, members)
    if version <= 2:
        # One member, no member array: its error is the response's (LeaveGroupResponse).
        if error == ErrorCode.none:
            error = next((r.error for r in results if r.error != ErrorCode.none),
                         ErrorCode.none)
        resp = make(mod.LeaveGroupResponse, throttle_time=0, error_code=ErrorCode(error))
    else:
        resp = make(mod.LeaveGroupResponse, throttle_time=0, error_code=ErrorCode(error),
                    members=tuple(make(mod.MemberResponse, member_id=r.member_id,
                                       group_instance_id=r.group_instance_id,
                                       error_code=ErrorCode(r.error)) for r in results))
    return encode_response(type(request), header.correlation_id, resp)


# -- ListGroups / DescribeGroups / DeleteGroups ----------------------------------------------------

def _list_groups(coordinator: GroupCoordinator, header: Any, request: Any,
                 visible: Callable[[list[str]], set[str]] | None = None) -> bytes:
    mod = response_module(type(request))
    states = set(getattr(request, "states_filter", None) or ())
    error, groups = coordinator.handle_list_groups(states)
    if visible is not None:
        shown = visible([g.group_id for g in groups])
        groups = [g for g in groups if g.group_id in shown]
    resp = make(mod.ListGroupsResponse, throttle_time=0, error_code=ErrorCode(error),
                groups=tuple(make(mod.ListedGroup, group_id=g.group_id,
                                  protocol_type=g.protocol_type, group_state=g.state)
                             for g in groups))
    return encode_response(type(request), header.correlation_id, resp)


def _describe_groups(coordinator: GroupCoordinator, header: Any, request: Any,
                     authorized: set[str] | None = None) -> bytes:
    mod = response_module(type(request))
    described = []
    for group_id in request.groups:
        if authorized is not None and group_id not in authorized:
            described.append(make(
                mod.DescribedGroup, error_code=GROUP_AUTHORIZATION_FAILED, group_id=group_id,
                group_state="", protocol_type="", protocol_data="", members=(),
                authorized_operations=UNAUTHORIZED_OPS))
            continue
        error, summary = coordinator.handle_describe_group(group_id)
        state, protocol_type, protocol = (summary.state, summary.protocol_type,
                                          summary.protocol)
        members = summary.members
        described.append(make(
            mod.DescribedGroup, error_code=ErrorCode(error), group_id=group_id,
            group_state=state, protocol_type=protocol_type, protocol_data=protocol,
            members=tuple(make(mod.DescribedGroupMember, member_id=m.member_id,
                               group_instance_id=m.group_instance_id, client_id=m.client_id,
                               client_host=m.client_host, member_metadata=m.metadata,
                               member_assignment=m.assignment) for m in members),
            authorized_operations=UNAUTHORIZED_OPS))
    resp = make(mod.DescribeGroupsResponse, throttle_time=0, groups=tuple(described))
    return encode_response(type(request), header.correlation_id, resp)


def _delete_groups(coordinator: GroupCoordinator, header: Any, request: Any,
                   authorized: set[str] | None = None) -> bytes:
    mod = response_module(type(request))
    names = list(dict.fromkeys(request.groups_names))
    ok = names if authorized is None else [g for g in names if g in authorized]
    errors = coordinator.handle_delete_groups(ok) if ok else {}
    for g in names:
        if g not in errors:  # Kafka: DELETE on each group
            errors[g] = ErrorCode.group_authorization_failed
    resp = make(mod.DeleteGroupsResponse, throttle_time=0,
                results=tuple(make(mod.DeletableGroupResult, group_id=g,
                                   error_code=ErrorCode(errors[g])) for g in names))
    return encode_response(type(request), header.correlation_id, resp)
