"""What every handler asks the authorizer, in one place: the connection's principal and host,
and "may it do this on that" (one name, or many with the denied ones left out).

With ALLOW_ALL (`authorizer.enabled` false) every helper answers at once, without looking at
the connection: an unsecured broker pays one attribute test per request.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ...security.acl import CLUSTER_NAME, AclOperation, ResourceType
from ...security.authorizer import Authorizer, filter_authorized
from ...security.principal import ANONYMOUS

__all__ = ["CLUSTER_NAME", "allowed", "allowed_names", "host_of", "principal_of"]


def principal_of(conn: Any) -> Any:
    """The connection's authenticated principal (User:ANONYMOUS until authenticated)."""
    return conn.principal or ANONYMOUS


def host_of(conn: Any) -> str:
    """The client's address without the port (`127.0.0.1` of `127.0.0.1:53422`)."""
    peer = str(conn.peer or "")
    host = peer.rsplit(":", 1)[0] if ":" in peer else peer
    return host.strip("[]") or "?"


def allowed(authorizer: Authorizer, conn: Any, operation: AclOperation,
            resource_type: ResourceType, name: str = CLUSTER_NAME, *, request_name: str,
            log_if_allowed: bool = True, log_if_denied: bool = True) -> bool:
    if not authorizer.enabled:
        return True
    return authorizer.authorize(principal_of(conn), host_of(conn), operation, resource_type,
                                name, request_name=request_name,
                                log_if_allowed=log_if_allowed, log_if_denied=log_if_denied)


def allowed_names(authorizer: Authorizer, conn: Any, operation: AclOperation,
                  resource_type: ResourceType, names: Iterable[str], *, request_name: str,
                  log_if_allowed: bool = True, log_if_denied: bool = True) -> set[str]:
    if not authorizer.enabled:
        return set(names)
    return filter_authorized(authorizer, principal_of(conn), host_of(conn), operation,
                             resource_type, names, request_name=request_name,
                             log_if_allowed=log_if_allowed, log_if_denied=log_if_denied)
