"""Kafka's AclAuthorizer (kafka.security.authorizer.AclAuthorizer) on the coordination store.

ACLs live in Kafka's znodes (coordination/paths.py): one znode per resource pattern holding
its entries as JSON, version-checked on every update. Every broker keeps all ACLs in memory
(`AclIndex`), loaded at start-up and kept current through the change notifications each update
writes (`/kafka-acl-changes` for literal patterns, `/kafka-acl-extended-changes` for prefixed
ones): a broker reloads the one resource a notification names. Decisions are cached per
(principal, host, operation, resource) until the next ACL change, so the hot path (Produce,
Fetch) costs one dictionary lookup per topic.

Decisions are logged as Kafka's authorizer logger (`kafka.authorizer.logger`) logs them:
denials at INFO, allows at DEBUG, to `kafka-authorizer.log` beside the state-change log.

`authorizer_from_config` builds the broker's authorizer from `authorizer.class.name`:
empty is ALLOW_ALL; Kafka's `kafka.security.authorizer.AclAuthorizer` (also under 2.8's deprecated
`kafka.security.auth.SimpleAclAuthorizer` and odradek's `odradek.security.AclAuthorizer`) is this
class; anything else is a ConfigError.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ..common import clock
from ..coordination import paths
from ..coordination.optimistic_update import VersionConflict, optimistic_update
from ..coordination.store import (
    BadVersionError,
    CoordinationStore,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
)
from ..security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclIndex,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    authorize_by_resource_type,
    decide,
    parse_super_users,
)
from ..security.authorizer import ALLOW_ALL, Authorizer
from .configs.config import ACL_AUTHORIZER_NAMES, ConfigError

log = logging.getLogger("odradek.authorizer")
AUTHORIZER_LOGGER = "kafka.authorizer.logger"
audit = logging.getLogger(AUTHORIZER_LOGGER)

#: Kafka's ZkNodeChangeNotificationListener purges notifications older than this.
CHANGE_EXPIRATION_MS = 15 * 60 * 1000
#: Decisions cached between ACL changes, at most (then the cache starts over).
DECISION_CACHE_SIZE = 100_000
LOG_FORMAT = "[%(asctime)s] %(levelname)s %(message)s (%(name)s)"


class AclError(Exception):
    """An ACL that cannot be created or deleted; `code` is Kafka's error name."""

    def __init__(self, message: str, code: str = "invalid_request") -> None:
        super().__init__(message)
        self.code = code


def _setting(config: Any, key: str, default: Any) -> Any:
    """A broker setting, whether or not the config knows the key (its definition belongs to
    server/configs/config.py; until then the raw text is read)."""
    values = getattr(config, "values", {})
    if key in values and values[key] is not None:
        return values[key]
    raw = getattr(config, "originals", {}) or {}
    return raw.get(key, default)


def authorizer_from_config(config: Any, store: CoordinationStore, broker_id: int,
                           log_dir: Path | None = None) -> Authorizer:
    """The authorizer `authorizer.class.name` names (see the module docstring)."""
    name = str(_setting(config, "authorizer.class.name", "") or "").strip()
    if not name:
        return ALLOW_ALL
    if name not in ACL_AUTHORIZER_NAMES:
        raise ConfigError(f"Invalid value {name} for configuration authorizer.class.name: "
                          f"odradek supports {' or '.join(ACL_AUTHORIZER_NAMES)} (or empty "
                          f"for no authorization)")
    allow = _setting(config, "allow.everyone.if.no.acl.found", False)
    if isinstance(allow, str):
        allow = allow.strip().lower() == "true"
    return AclAuthorizer(store, super_users=parse_super_users(
        str(_setting(config, "super.users", "") or "")),
        allow_everyone_if_no_acl_found=bool(allow), broker_id=broker_id, log_dir=log_dir)


def entry_to_json(entry: AccessControlEntry) -> dict[str, str]:
    return {"principal": entry.principal, "permissionType": entry.permission_type.pascal,
            "operation": entry.operation.pascal, "host": entry.host}


def entry_from_json(obj: dict[str, str]) -> AccessControlEntry:
    op = AclOperation.from_string(obj["operation"])
    perm = AclPermissionType.from_string(obj["permissionType"])
    if op in (AclOperation.UNKNOWN, AclOperation.ANY) or perm in (
            AclPermissionType.UNKNOWN, AclPermissionType.ANY):
        raise ValueError(f"invalid acl entry {obj!r}")
    return AccessControlEntry(obj["principal"], obj["host"], AclOperation(op),
                              AclPermissionType(perm))


def resource_path(pattern: ResourcePattern) -> str:
    return paths.acl_resource_path(pattern.pattern_type.name, pattern.resource_type.pascal,
                                   pattern.name)


def change_notification(pattern: ResourcePattern) -> tuple[str, bytes]:
    """(sequential path prefix, data) of the notification announcing a change of `pattern`."""
    if pattern.pattern_type == PatternType.LITERAL:
        data = paths.encode_literal_acl_change(pattern.resource_type.name, pattern.name)
    else:
        data = paths.encode_extended_acl_change(pattern.resource_type.name, pattern.name,
                                                pattern.pattern_type.name)
    return paths.acl_change_path(pattern.pattern_type.name), data


def parse_change_notification(root: str, data: bytes | None) -> ResourcePattern:
    """The pattern a notification under `root` (ACL_CHANGES or ACL_EXTENDED_CHANGES) names."""
    if root == paths.ACL_CHANGES:
        kind, name = paths.decode_literal_acl_change(data)
        pattern_type = PatternType.LITERAL
    else:
        kind, name, pt = paths.decode_extended_acl_change(data)
        pattern_type = PatternType(PatternType.from_string(pt))
    rt = ResourceType(ResourceType.from_string(kind))
    if rt in (ResourceType.UNKNOWN, ResourceType.ANY) or not pattern_type.is_specific:
        raise ValueError(f"notification names no resource: {data!r}")
    return ResourcePattern(rt, name, pattern_type)


def resource_log_text(resource_type: ResourceType, name: str,
                      pattern_type: PatternType = PatternType.LITERAL) -> str:
    """Kafka's loggable resource: `Topic:LITERAL:foo`."""
    return f"{resource_type.pascal}:{pattern_type.name}:{name}"


class _OnlyBroker(logging.Filter):
    def __init__(self, broker_id: int) -> None:
        super().__init__()
        self.broker_id = broker_id

    def filter(self, record: logging.LogRecord) -> bool:
        return getattr(record, "broker_id", self.broker_id) == self.broker_id


class AclAuthorizer:
    enabled = True

    def __init__(self, store: CoordinationStore, *, super_users: Iterable[str] = (),
                 allow_everyone_if_no_acl_found: bool = False, broker_id: int = -1,
                 log_dir: Path | None = None) -> None:
        self.store = store
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self.broker_id = broker_id
        self.log_dir = log_dir
        self.index = AclIndex()
        self._decisions: dict[tuple[str, str, AclOperation, ResourceType, str], bool] = {}
        self._seen: dict[str, set[str]] = {paths.ACL_CHANGES: set(),
                                           paths.ACL_EXTENDED_CHANGES: set()}
        self._watches: list[Any] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()
        self._handler: logging.Handler | None = None
        self._extra = {"broker_id": broker_id}

    # -- life cycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        store = self.store
        for path in (paths.ACL, paths.ACL_CHANGES, paths.acl_store_path("PREFIXED"),
                     paths.ACL_EXTENDED_CHANGES):
            await store.ensure_path(path)
        if self.log_dir is not None and self._handler is None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            handler = logging.FileHandler(self.log_dir / "kafka-authorizer.log")
            handler.setFormatter(logging.Formatter(LOG_FORMAT))
            handler.addFilter(_OnlyBroker(self.broker_id))
            audit.addHandler(handler)
            if audit.level == logging.NOTSET or audit.level > logging.INFO:
                audit.setLevel(logging.INFO)
            self._handler = handler
        for root in self._seen:
            self._seen[root] = set(await store.get_children(root))
            self._watches.append(await store.watch_children(
                root, lambda _e, root=root: self._on_changes(root)))
        await self._load_all()

    def stop(self) -> None:
        for w in self._watches:
            w.cancel()
        self._watches.clear()
        for t in self._tasks:
            t.cancel()
        if self._handler is not None:
            audit.removeHandler(self._handler)
            self._handler.close()
            self._handler = None

    async def _load_all(self) -> None:
        """Every ACL znode into the cache (Kafka's loadCache)."""
        for pattern_type in (PatternType.LITERAL, PatternType.PREFIXED):
            root = paths.acl_store_path(pattern_type.name)
            for type_name in await self._children(root):
                rt = ResourceType.from_string(type_name)
                if rt in (ResourceType.UNKNOWN, ResourceType.ANY):
                    log.warning("Ignoring ACLs of unknown resource type %s", type_name)
                    continue
                for name in await self._children(f"{root}/{type_name}"):
                    await self._reload(ResourcePattern(ResourceType(rt), name, pattern_type))

    async def _children(self, path: str) -> list[str]:
        try:
            return await self.store.get_children(path)
        except NoNodeError:
            return []

    async def _read(self, pattern: ResourcePattern) -> tuple[frozenset[AccessControlEntry], int]:
        """The stored entries of a pattern and the znode's version (-1: no znode)."""
        found = await self.store.get_or_none(resource_path(pattern))
        if found is None:
            return frozenset(), -1
        out = set()
        for obj in paths.decode_acls(found[0]):
            try:
                out.add(entry_from_json(obj))
            except (KeyError, ValueError) as exc:
                log.warning("Ignoring an invalid ACL of %s: %s", pattern, exc)
        return frozenset(out), found[1].version

    async def _reload(self, pattern: ResourcePattern) -> None:
        try:
            entries, _ = await self._read(pattern)
        except ValueError as exc:
            log.error("Cannot read the ACLs of %s: %s", pattern, exc)
            return
        self._update_cache(pattern, entries)

    def _update_cache(self, pattern: ResourcePattern, entries: frozenset[AccessControlEntry]
                      ) -> None:
        if self.index.get(pattern) != entries:
            self.index.set(pattern, entries)
            self._decisions.clear()

    # -- change notifications --------------------------------------------------------------------
    def _on_changes(self, root: str) -> None:
        task = asyncio.ensure_future(self._process_changes(root))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _process_changes(self, root: str) -> None:
        store = self.store
        try:
            children = set(await store.get_children(root))
        except NoNodeError:
            return
        now_ms = clock.now_ms()
        for child in sorted(children - self._seen[root]):
            path = f"{root}/{child}"
            found = await store.get_or_none(path)
            if found is None:
                continue
            try:
                pattern = parse_change_notification(root, found[0])
            except ValueError as exc:
                log.warning("Ignoring ACL change notification %s: %s", path, exc)
                continue
            log.debug("Processing ACL change notification for %s", pattern)
            await self._reload(pattern)
        for child in children:
            found = await store.get_or_none(f"{root}/{child}")
            if found is not None and now_ms - found[1].ctime > CHANGE_EXPIRATION_MS:
                with contextlib.suppress(NoNodeError):
                    await store.delete(f"{root}/{child}")
        self._seen[root] = children

    # -- decisions -------------------------------------------------------------------------------
    def authorize(self, principal: Any, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str, *, request_name: str,
                  ref_count: int = 1, log_if_allowed: bool = True,
                  log_if_denied: bool = True) -> bool:
        who = str(principal)
        key = (who, host, operation, resource_type, name)
        allowed = self._decisions.get(key)
        if allowed is None:
            if who in self.super_users:
                allowed = True
            else:
                allowed = decide(self.index.matching(resource_type, name), who, host,
                                 operation, allow_everyone_if_no_acl_found=(
                                     self.allow_everyone_if_no_acl_found))
            if len(self._decisions) >= DECISION_CACHE_SIZE:
                self._decisions.clear()
            self._decisions[key] = allowed
        if allowed:
            if log_if_allowed and audit.isEnabledFor(logging.DEBUG):
                self._audit(logging.DEBUG, who, "Allowed", operation, host, resource_type, name,
                            request_name, ref_count)
        elif log_if_denied and audit.isEnabledFor(logging.INFO):
            self._audit(logging.INFO, who, "Denied", operation, host, resource_type, name,
                        request_name, ref_count)
        return allowed

    def authorize_any(self, principal: Any, host: str, operation: AclOperation,
                      resource_type: ResourceType, *, request_name: str) -> bool:
        return authorize_by_resource_type(
            self.index, str(principal), host, operation, resource_type,
            super_users=self.super_users,
            allow_everyone_if_no_acl_found=self.allow_everyone_if_no_acl_found)

    def _audit(self, level: int, who: str, result: str, operation: AclOperation, host: str,
               resource_type: ResourceType, name: str, request_name: str, ref_count: int
               ) -> None:
        audit.log(level, "Principal = %s is %s Operation = %s from host = %s on resource = %s "
                  "for request = %s with resourceRefCount = %d", who, result, operation.pascal,
                  host, resource_log_text(resource_type, name), request_name, ref_count,
                  extra=self._extra)

    # -- ACL administration (CreateAcls, DeleteAcls, DescribeAcls) --------------------------------
    def describe(self, filt: AclBindingFilter) -> list[AclBinding]:
        """The bindings matching `filt`, from this broker's cache (as Kafka answers)."""
        return self.index.bindings(filt)

    async def create(self, bindings: Sequence[AclBinding]) -> list[AclError | None]:
        """Store each binding; one result per binding (None: created or already there)."""
        results: list[AclError | None] = [None] * len(bindings)
        by_pattern: dict[ResourcePattern, list[int]] = {}
        for i, b in enumerate(bindings):
            why = b.pattern.indefinite_field() or b.entry.indefinite_field()
            if why is None and b.pattern.resource_type == ResourceType.CLUSTER \
                    and b.pattern.name != "kafka-cluster":
                why = "The only valid name for the CLUSTER resource is kafka-cluster"
            if why is None and "/" in b.pattern.name:
                why = f"Invalid resource name {b.pattern.name!r}: '/' is not allowed"
            if why is not None:
                results[i] = AclError(why)
            else:
                by_pattern.setdefault(b.pattern, []).append(i)
        async with self._lock:
            for pattern, indexes in by_pattern.items():
                new = frozenset(bindings[i].entry for i in indexes)
                try:
                    await self._update(pattern, lambda cur, new=new: cur | new)
                except Exception as exc:
                    log.warning("Failed to create ACLs for %s: %s", pattern, exc)
                    for i in indexes:
                        results[i] = AclError(f"Failed to create ACLs for {pattern}: {exc}",
                                              "unknown_server_error")
        return results

    async def delete(self, filters: Sequence[AclBindingFilter]
                     ) -> list[tuple[list[AclBinding], AclError | None]]:
        """Delete what each filter matches; per filter, the deleted bindings or the error."""
        results: list[tuple[list[AclBinding], AclError | None]] = [([], None)] * len(filters)
        valid: list[int] = []
        for i, f in enumerate(filters):
            why = f.indefinite_field()
            if why is not None:
                results[i] = ([], AclError(why))
            else:
                valid.append(i)
                results[i] = ([], None)
        async with self._lock:
            patterns: dict[ResourcePattern, list[int]] = {}
            for p, _ in list(self.index.patterns()):
                for i in valid:
                    if filters[i].pattern.matches(p):
                        patterns.setdefault(p, []).append(i)
            for i in valid:  # a specific pattern this broker may not have cached yet
                pf = filters[i].pattern
                if pf.name is not None and pf.pattern_type.is_specific and pf.resource_type \
                        not in (ResourceType.ANY, ResourceType.UNKNOWN) and "/" not in pf.name:
                    p = ResourcePattern(pf.resource_type, pf.name, pf.pattern_type)
                    if i not in patterns.setdefault(p, []):
                        patterns[p].append(i)
            for pattern, idx in patterns.items():
                removed: dict[int, list[AccessControlEntry]] = {}

                def compute(cur: frozenset[AccessControlEntry], pattern: ResourcePattern = pattern,
                            idx: list[int] = idx,
                            removed: dict[int, list[AccessControlEntry]] = removed
                            ) -> frozenset[AccessControlEntry]:
                    removed.clear()
                    keep = set(cur)
                    for e in cur:
                        hits = [i for i in idx
                                if filters[i].matches(AclBinding(pattern, e))]
                        for i in hits:
                            removed.setdefault(i, []).append(e)
                        if hits:
                            keep.discard(e)
                    return frozenset(keep)
                try:
                    await self._update(pattern, compute)
                except Exception as exc:
                    log.warning("Failed to delete ACLs of %s: %s", pattern, exc)
                    for i in idx:
                        results[i] = (results[i][0], AclError(
                            f"Failed to delete ACLs of {pattern}: {exc}", "unknown_server_error"))
                    continue
                for i, entries in removed.items():
                    results[i][0].extend(AclBinding(pattern, e) for e in entries)
        return results

    async def _update(self, pattern: ResourcePattern, transform: Any) -> None:
        """Kafka's updateResourceAcls: read the pattern's znode, apply `transform` to its
        entries, write the result conditionally on the version read (create, set, or delete
        when empty), retry on a conflict; then notify every broker and update this cache."""
        path = resource_path(pattern)
        store = self.store

        async def read() -> tuple[frozenset[AccessControlEntry], int]:
            return await self._read(pattern)

        def compute(current: tuple[frozenset[AccessControlEntry], int]
                    ) -> frozenset[AccessControlEntry] | None:
            new = frozenset(transform(current[0]))
            return None if new == current[0] else new

        async def write(current: tuple[frozenset[AccessControlEntry], int],
                        new: frozenset[AccessControlEntry]) -> bool:
            _, version = current
            data = paths.encode_acls(entry_to_json(e) for e in new)
            try:
                if version < 0:
                    if new:
                        await store.create(path, data, makepath=True)
                elif new:
                    await store.set(path, data, version)
                else:
                    await store.delete(path, version)
            except (BadVersionError, NodeExistsError, NoNodeError, NotEmptyError):
                raise VersionConflict() from None
            return True

        changed = await optimistic_update(read, compute, write)
        entries, _ = await self._read(pattern)
        self._update_cache(pattern, entries)
        if changed:
            prefix, data = change_notification(pattern)
            await store.create(prefix, data, sequence=True, makepath=True)
