"""The authorization seam (Kafka's org.apache.kafka.server.authorizer.Authorizer).

Every request handler asks its `Authorizer` whether the connection's principal, from its host,
may do an operation on a resource. `ALLOW_ALL` (no `authorizer.class.name`) says yes to
everything and costs one attribute test: handlers check `authorizer.enabled` before doing any
per-resource work. The server's AclAuthorizer (odradek.server.authorizer) decides from ACLs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from .acl import AclOperation, ResourceType

__all__ = ["ALLOW_ALL", "AllowAll", "Authorizer", "filter_authorized"]


class Authorizer(Protocol):
    #: False only for ALLOW_ALL: handlers skip their checks entirely.
    enabled: bool

    def authorize(self, principal: Any, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str, *, request_name: str,
                  ref_count: int = 1, log_if_allowed: bool = True,
                  log_if_denied: bool = True) -> bool:
        """May `principal` (a KafkaPrincipal) do `operation` on the resource?"""
        ...

    def authorize_any(self, principal: Any, host: str, operation: AclOperation,
                      resource_type: ResourceType, *, request_name: str) -> bool:
        """May `principal` do `operation` on at least one resource of the type (Kafka's
        authorizeByResourceType, KIP-679)?"""
        ...


class AllowAll:
    """No authorizer configured: everything is allowed."""

    enabled = False

    def authorize(self, principal: Any, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str, *, request_name: str,
                  ref_count: int = 1, log_if_allowed: bool = True,
                  log_if_denied: bool = True) -> bool:
        return True

    def authorize_any(self, principal: Any, host: str, operation: AclOperation,
                      resource_type: ResourceType, *, request_name: str) -> bool:
        return True


ALLOW_ALL: Authorizer = AllowAll()


def filter_authorized(authorizer: Authorizer, principal: Any, host: str,
                      operation: AclOperation, resource_type: ResourceType,
                      names: Iterable[str], *, request_name: str,
                      log_if_allowed: bool = True, log_if_denied: bool = True) -> set[str]:
    """The names among `names` the principal may act on (Kafka's AuthHelper.filterByAuthorized:
    one decision per distinct name, logged with how often the request names it)."""
    counts: dict[str, int] = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    if not authorizer.enabled:
        return set(counts)
    return {n for n, c in counts.items()
            if authorizer.authorize(principal, host, operation, resource_type, n,
                                    request_name=request_name, ref_count=c,
                                    log_if_allowed=log_if_allowed, log_if_denied=log_if_denied)}
