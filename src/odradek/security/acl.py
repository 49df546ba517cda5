"""Kafka's ACL model and the pure authorization decision (Kafka's org.apache.kafka.common.acl and
.resource packages, and the decision of kafka.security.authorizer.AclAuthorizer).

Enums carry Kafka's wire codes (DescribeAcls/CreateAcls/DeleteAcls send them as int8). A
`ResourcePattern` names what an ACL protects: a resource type, a name, and how the name matches
(LITERAL: that name, or every name if it is `*`; PREFIXED: every name starting with it). An
`AccessControlEntry` says who (principal `User:alice`, or `User:*`), from where (host, or `*`),
what (operation) and whether it is allowed or denied. Filters (`AclBindingFilter`) select
bindings for DescribeAcls and DeleteAcls, with Kafka's ANY and MATCH semantics.

The decision (`authorize`): super users may do anything; otherwise a DENY entry that matches
wins over any ALLOW; READ, WRITE, DELETE and ALTER imply DESCRIBE, ALTER_CONFIGS implies
DESCRIBE_CONFIGS, ALL matches every operation; a resource without any ACL is allowed only if
`allow.everyone.if.no.acl.found` is true.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CLUSTER_NAME", "WILDCARD_HOST", "WILDCARD_PRINCIPAL", "WILDCARD_RESOURCE",
    "AccessControlEntry", "AccessControlEntryFilter", "AclBinding", "AclBindingFilter",
    "AclIndex", "AclOperation", "AclPermissionType", "PatternType", "ResourcePattern",
    "ResourcePatternFilter", "ResourceType", "authorize", "decide", "implied_operations",
    "parse_super_users",
]

WILDCARD_RESOURCE = "*"
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"
#: The one CLUSTER resource's name (Kafka's Resource.CLUSTER_NAME).
CLUSTER_NAME = "kafka-cluster"


def _key(text: str) -> str:
    return text.replace("_", "").replace("-", "").upper()


class _Named(enum.IntEnum):
    """An enum with Kafka's two spellings: `name` (TRANSACTIONAL_ID, what Java's toString
    prints) and `pascal` (TransactionalId, SecurityUtils' names in znode paths and JSON)."""

    @property
    def pascal(self) -> str:
        return "".join(w.capitalize() for w in self.name.split("_"))

    @classmethod
    def from_string(cls, text: str) -> _Named:
        """Either spelling, any case; UNKNOWN if not a name (Kafka's fromString)."""
        wanted = _key(text)
        for member in cls:
            if _key(member.name) == wanted:
                return member
        return cls(0)

    @classmethod
    def from_code(cls, code: int) -> _Named:
        """The member of a wire code; UNKNOWN for codes Kafka does not define."""
        try:
            return cls(code)
        except ValueError:
            return cls(0)


class ResourceType(_Named):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6


class PatternType(_Named):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4

    @property
    def is_specific(self) -> bool:
        return self in (PatternType.LITERAL, PatternType.PREFIXED)


class AclOperation(_Named):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


class AclPermissionType(_Named):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


_SPECIFIC_RESOURCE_TYPES = frozenset(ResourceType) - {ResourceType.UNKNOWN, ResourceType.ANY}
_IMPLIED = {
    AclOperation.DESCRIBE: frozenset({AclOperation.DESCRIBE, AclOperation.READ,
                                      AclOperation.WRITE, AclOperation.DELETE,
                                      AclOperation.ALTER}),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.DESCRIBE_CONFIGS,
                                              AclOperation.ALTER_CONFIGS}),
}


def implied_operations(operation: AclOperation) -> frozenset[AclOperation]:
    """The operations an ALLOW entry may name to allow `operation` (besides ALL)."""
    return _IMPLIED.get(operation, frozenset({operation}))


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def __str__(self) -> str:
        return (f"ResourcePattern(resourceType={self.resource_type.name}, name={self.name}, "
                f"patternType={self.pattern_type.name})")

    def indefinite_field(self) -> str | None:
        """Why this pattern cannot be stored (Kafka's findIndefiniteField), or None."""
        if self.resource_type not in _SPECIFIC_RESOURCE_TYPES:
            return f"Resource type is {self.resource_type.name}"
        if not self.pattern_type.is_specific:
            return f"Resource pattern type is {self.pattern_type.name}"
        if not self.name:
            return "Resource name is empty"
        return None


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def __str__(self) -> str:
        return (f"(principal={self.principal}, host={self.host}, "
                f"operation={self.operation.name}, permissionType={self.permission_type.name})")

    def indefinite_field(self) -> str | None:
        if self.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
            return f"Operation is {self.operation.name}"
        if self.permission_type in (AclPermissionType.UNKNOWN, AclPermissionType.ANY):
            return f"Permission type is {self.permission_type.name}"
        kind, sep, _ = self.principal.partition(":")
        if not sep or not kind:
            return f"Principal {self.principal!r} is not principalType:principalName"
        if not self.host:
            return "Host is empty"
        return None


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry

    def __str__(self) -> str:
        return f"(pattern={self.pattern}, entry={self.entry})"


@dataclass(frozen=True, slots=True)
class ResourcePatternFilter:
    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY

    def matches(self, pattern: ResourcePattern) -> bool:
        """Kafka's ResourcePatternFilter.matches: ANY selects patterns of exactly this name;
        MATCH selects every pattern that would apply to a resource of this name (the literal
        name, the literal `*`, and prefixes of it)."""
        if self.resource_type != ResourceType.ANY and self.resource_type != pattern.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) \
                and self.pattern_type != pattern.pattern_type:
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        if pattern.pattern_type == PatternType.LITERAL:
            return self.name == pattern.name or pattern.name == WILDCARD_RESOURCE
        if pattern.pattern_type == PatternType.PREFIXED:
            return self.name.startswith(pattern.name)
        return False

    def indefinite_field(self) -> str | None:
        if self.resource_type == ResourceType.UNKNOWN:
            return "Resource type is UNKNOWN"
        if self.pattern_type == PatternType.UNKNOWN:
            return "Resource pattern type is UNKNOWN"
        return None


@dataclass(frozen=True, slots=True)
class AccessControlEntryFilter:
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def matches(self, entry: AccessControlEntry) -> bool:
        return ((self.principal is None or self.principal == entry.principal)
                and (self.host is None or self.host == entry.host)
                and (self.operation == AclOperation.ANY or self.operation == entry.operation)
                and (self.permission_type == AclPermissionType.ANY
                     or self.permission_type == entry.permission_type))

    def indefinite_field(self) -> str | None:
        if self.operation == AclOperation.UNKNOWN:
            return "Operation is UNKNOWN"
        if self.permission_type == AclPermissionType.UNKNOWN:
            return "Permission type is UNKNOWN"
        return None


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    pattern: ResourcePatternFilter = ResourcePatternFilter()
    entry: AccessControlEntryFilter = AccessControlEntryFilter()

    def matches(self, binding: AclBinding) -> bool:
        return self.pattern.matches(binding.pattern) and self.entry.matches(binding.entry)

    def indefinite_field(self) -> str | None:
        return self.pattern.indefinite_field() or self.entry.indefinite_field()


ANY_BINDING = AclBindingFilter()


# -- the ACL APIs' wire fields (CreateAcls, DescribeAcls, DeleteAcls), both directions ----------


def binding_from_wire(resource_type: int, resource_name: str, pattern_type: int,
                      principal: str, host: str, operation: int,
                      permission_type: int) -> AclBinding:
    """A binding from the codes and names of a CreateAcls creation or a Describe/DeleteAcls
    result."""
    return AclBinding(
        ResourcePattern(ResourceType.from_code(resource_type),  # type: ignore[arg-type]
                        resource_name, PatternType.from_code(pattern_type)),  # type: ignore[arg-type]
        AccessControlEntry(principal, host,
                           AclOperation.from_code(operation),  # type: ignore[arg-type]
                           AclPermissionType.from_code(permission_type)))  # type: ignore[arg-type]


def filter_from_wire(resource_type: int, resource_name: str | None, pattern_type: int,
                     principal: str | None, host: str | None, operation: int,
                     permission_type: int) -> AclBindingFilter:
    """A filter from the codes and names of a DescribeAcls request or a DeleteAcls filter."""
    return AclBindingFilter(
        ResourcePatternFilter(ResourceType.from_code(resource_type),  # type: ignore[arg-type]
                              resource_name, PatternType.from_code(pattern_type)),  # type: ignore[arg-type]
        AccessControlEntryFilter(principal, host,
                                 AclOperation.from_code(operation),  # type: ignore[arg-type]
                                 AclPermissionType.from_code(permission_type)))  # type: ignore[arg-type]


def filter_to_wire(f: AclBindingFilter) -> dict[str, Any]:
    """A filter as a DescribeAcls request's (or a DeleteAcls filter's) fields."""
    return {"resource_type_filter": int(f.pattern.resource_type),
            "resource_name_filter": f.pattern.name,
            "pattern_type_filter": int(f.pattern.pattern_type),
            "principal_filter": f.entry.principal, "host_filter": f.entry.host,
            "operation": int(f.entry.operation), "permission_type": int(f.entry.permission_type)}


def binding_to_wire(b: AclBinding) -> dict[str, Any]:
    """A binding as a CreateAcls creation's fields."""
    return {"resource_type": int(b.pattern.resource_type), "resource_name": b.pattern.name,
            "resource_pattern_type": int(b.pattern.pattern_type),
            "principal": b.entry.principal, "host": b.entry.host,
            "operation": int(b.entry.operation),
            "permission_type": int(b.entry.permission_type)}


# ---------------------------------------------------------------------------------------------
# The decision
# ---------------------------------------------------------------------------------------------


def parse_super_users(text: str | None) -> frozenset[str]:
    """`super.users`: principals separated by semicolons (`User:admin;User:broker`)."""
    return frozenset(p.strip() for p in (text or "").split(";") if p.strip())


def _entry_matches(entry: AccessControlEntry, principal: str, host: str,
                   permission: AclPermissionType, operations: frozenset[AclOperation]) -> bool:
    return (entry.permission_type == permission
            and (entry.principal == principal or entry.principal == WILDCARD_PRINCIPAL)
            and (entry.host == host or entry.host == WILDCARD_HOST)
            and (entry.operation == AclOperation.ALL or entry.operation in operations))


def decide(entries: Iterable[AccessControlEntry], principal: str, host: str,
           operation: AclOperation, *, allow_everyone_if_no_acl_found: bool) -> bool:
    """Kafka's aclsAllowAccess on the entries of every pattern matching the resource (super
    users are the caller's business). A matching DENY wins; else a matching ALLOW (of the
    operation, one implying it, or ALL) allows; no entries at all: the no-ACL default."""
    if operation in (AclOperation.ANY, AclOperation.UNKNOWN):
        raise ValueError(f"cannot authorize operation {operation.name}")
    entries = tuple(entries)
    if not entries:
        return allow_everyone_if_no_acl_found
    deny_ops = frozenset({operation})
    if any(_entry_matches(e, principal, host, AclPermissionType.DENY, deny_ops) for e in entries):
        return False
    allow_ops = implied_operations(operation)
    return any(_entry_matches(e, principal, host, AclPermissionType.ALLOW, allow_ops)
               for e in entries)


class AclIndex:
    """Every ACL, indexed by resource pattern (Kafka's AclAuthorizer cache): finding the entries
    that apply to a resource costs a few dictionary lookups, whatever the number of ACLs."""

    def __init__(self) -> None:
        self._literal: dict[tuple[ResourceType, str], frozenset[AccessControlEntry]] = {}
        self._prefixed: dict[ResourceType, dict[str, frozenset[AccessControlEntry]]] = {}
        self._prefix_lengths: dict[ResourceType, set[int]] = {}

    def __len__(self) -> int:
        return len(self._literal) + sum(len(d) for d in self._prefixed.values())

    def set(self, pattern: ResourcePattern, entries: Iterable[AccessControlEntry]) -> None:
        """Replace the entries of `pattern` (no entries: forget the pattern)."""
        entries = frozenset(entries)
        rt = pattern.resource_type
        if pattern.pattern_type == PatternType.LITERAL:
            if entries:
                self._literal[(rt, pattern.name)] = entries
            else:
                self._literal.pop((rt, pattern.name), None)
            return
        if pattern.pattern_type != PatternType.PREFIXED:
            raise ValueError(f"cannot index a {pattern.pattern_type.name} pattern")
        by_name = self._prefixed.setdefault(rt, {})
        if entries:
            by_name[pattern.name] = entries
        else:
            by_name.pop(pattern.name, None)
        self._prefix_lengths[rt] = {len(n) for n in by_name}

    def get(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]:
        if pattern.pattern_type == PatternType.LITERAL:
            return self._literal.get((pattern.resource_type, pattern.name), frozenset())
        return self._prefixed.get(pattern.resource_type, {}).get(pattern.name, frozenset())

    def patterns(self) -> Iterator[tuple[ResourcePattern, frozenset[AccessControlEntry]]]:
        for (rt, name), entries in self._literal.items():
            yield ResourcePattern(rt, name, PatternType.LITERAL), entries
        for rt, by_name in self._prefixed.items():
            for name, entries in by_name.items():
                yield ResourcePattern(rt, name, PatternType.PREFIXED), entries

    def bindings(self, filt: AclBindingFilter = ANY_BINDING) -> list[AclBinding]:
        return [AclBinding(p, e) for p, entries in self.patterns() for e in entries
                if filt.matches(AclBinding(p, e))]

    def matching(self, resource_type: ResourceType, name: str) -> list[AccessControlEntry]:
        """The entries of every pattern that applies to the resource: its literal name, the
        literal wildcard `*`, and every prefix of the name."""
        out: list[AccessControlEntry] = []
        literal = self._literal
        found = literal.get((resource_type, name))
        if found:
            out.extend(found)
        if name != WILDCARD_RESOURCE:
            found = literal.get((resource_type, WILDCARD_RESOURCE))
            if found:
                out.extend(found)
        by_name = self._prefixed.get(resource_type)
        if by_name:
            for n in self._prefix_lengths[resource_type]:
                if n <= len(name):
                    found = by_name.get(name[:n])
                    if found:
                        out.extend(found)
        return out

    def has_type(self, resource_type: ResourceType) -> bool:
        return bool(self._prefixed.get(resource_type)) or any(
            rt == resource_type for rt, _ in self._literal)

    def by_type(self, resource_type: ResourceType
                ) -> Iterator[tuple[ResourcePattern, frozenset[AccessControlEntry]]]:
        return ((p, e) for p, e in self.patterns() if p.resource_type == resource_type)


def authorize(index: AclIndex, principal: str, host: str, operation: AclOperation,
              resource_type: ResourceType, name: str, *, super_users: frozenset[str],
              allow_everyone_if_no_acl_found: bool) -> bool:
    """Kafka's AclAuthorizer.authorize for one action: super users always, else `decide` on the
    entries of every pattern applying to the resource."""
    if principal in super_users:
        return True
    return decide(index.matching(resource_type, name), principal, host, operation,
                  allow_everyone_if_no_acl_found=allow_everyone_if_no_acl_found)


def authorize_by_resource_type(index: AclIndex, principal: str, host: str,
                               operation: AclOperation, resource_type: ResourceType, *,
                               super_users: frozenset[str],
                               allow_everyone_if_no_acl_found: bool) -> bool:
    """Kafka's authorizeByResourceType (KIP-679): may the principal do `operation` on at least
    one resource of the type? True if some ALLOW pattern is not wholly covered by DENY
    patterns (a denied `*` or empty prefix covers everything; a denied prefix covers longer
    names), or if there are no ACLs of the type and the no-ACL default allows."""
    if principal in super_users:
        return True
    allow_ops = implied_operations(operation)
    deny_ops = frozenset({operation})
    deny_literal: set[str] = set()
    deny_prefix: set[str] = set()
    allow: list[ResourcePattern] = []
    seen = False
    for pattern, entries in index.by_type(resource_type):
        seen = True
        for e in entries:
            if _entry_matches(e, principal, host, AclPermissionType.DENY, deny_ops):
                (deny_literal if pattern.pattern_type == PatternType.LITERAL
                 else deny_prefix).add(pattern.name)
            if _entry_matches(e, principal, host, AclPermissionType.ALLOW, allow_ops):
                allow.append(pattern)
    if not seen:
        return allow_everyone_if_no_acl_found
    if WILDCARD_RESOURCE in deny_literal or "" in deny_prefix:
        return False

    def covered(name: str) -> bool:
        return any(name.startswith(p) for p in deny_prefix)

    for pattern in allow:
        if pattern.pattern_type == PatternType.PREFIXED and not covered(pattern.name):
            return True
        if pattern.pattern_type == PatternType.LITERAL and (
                pattern.name == WILDCARD_RESOURCE
                or (pattern.name not in deny_literal and not covered(pattern.name))):
            return True
    return False


def group_by_pattern(bindings: Iterable[AclBinding]
                     ) -> Mapping[ResourcePattern, list[AccessControlEntry]]:
    out: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for b in bindings:
        out.setdefault(b.pattern, []).append(b.entry)
    return out
