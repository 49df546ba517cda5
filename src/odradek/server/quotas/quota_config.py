"""Client quota configs in ZooKeeper (Kafka's AdminZkClient for users and clients, the quota
parts of ZkAdminManager, and the DynamicConfigManager's user and client handlers).

Layout (names sanitized as Kafka's Sanitizer does; `<default>` as is):

  /config/users/<user>                    {"version":1,"config":{"producer_byte_rate":"1024"}}
  /config/users/<user>/clients/<client>   (a user's SCRAM credentials share /config/users/<user>)
  /config/clients/<client>

Each change writes a `/config/changes/config_change_<seq>` notification whose entity_path is
`users/<u>`, `clients/<c>` or `users/<u>/clients/<c>`; every broker's DynamicConfigManager
(server/configs/dynamic_config_manager.py) hands it to the ClientQuotaConfigManager, which reloads
that
entity into its quota managers.

The request-side rules (pure) are ZkAdminManager's: an entity has a user, a client id or both
(a null name is the default); a key must be a quota config; producer_byte_rate and
consumer_byte_rate must be whole numbers; anything else is INVALID_REQUEST with Kafka's message.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ...common.java_double import java_double
from ...common.sanitizer import desanitize_user, sanitize_user
from ...coordination import paths
from ...coordination.admin_zk import change_entity_config
from ...coordination.store import CoordinationStore, NoNodeError
from .client_quota_manager import DEFAULT, QUOTA_CONFIG_TYPES, QuotaEntity, QuotaManagers

log = logging.getLogger("odradek.quotas")

USER, CLIENT_ID, IP = "user", "client-id", "ip"  # ClientQuotaEntity's types
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
USERS = f"{paths.CONFIG}/users"
CLIENTS = f"{paths.CONFIG}/clients"


class InvalidQuotaRequest(ValueError):
    """INVALID_REQUEST with Kafka's message."""


class UnsupportedQuotaEntity(ValueError):
    """UNSUPPORTED_VERSION: a custom entity type (Kafka: "Custom entity type 'x' not
    supported")."""


def sanitize(name: str) -> str:
    return name if name == DEFAULT else sanitize_user(name)


def desanitize(name: str) -> str:
    return name if name == DEFAULT else desanitize_user(name)


def entity_path(entity: QuotaEntity) -> str:
    """The entity's znode (QuotaEntity: the user already sanitized, the client id as sent)."""
    if entity.user is not None:
        base = f"{USERS}/{entity.user}"
        return base if entity.client_id is None else \
            f"{base}/clients/{sanitize(entity.client_id)}"
    assert entity.client_id is not None
    return f"{CLIENTS}/{sanitize(entity.client_id)}"


def notification_entity(entity: QuotaEntity) -> str:
    """The entity_path of its change notification, e.g. `users/alice/clients/app`."""
    return entity_path(entity)[len(paths.CONFIG) + 1:]


def entity_of_notification(kind: str, name: str) -> QuotaEntity | None:
    """The quota entity a `/config/changes` notification names (kind "users" or "clients"),
    None for anything else. QuotaEntity holds the user sanitized, the client id as sent."""
    if kind == "clients" and name and "/" not in name:
        return QuotaEntity(None, desanitize(name))
    if kind == "users" and name:
        parts = name.split("/")
        if len(parts) == 1:
            return QuotaEntity(parts[0], None)
        if len(parts) == 3 and parts[1] == "clients" and parts[0] and parts[2]:
            return QuotaEntity(parts[0], desanitize(parts[2]))
    return None


# -- requests (pure) ---------------------------------------------------------------------------
@dataclass(frozen=True)
class EntityName:
    """One entity of a request: user and client id (None: absent), each a name or DEFAULT;
    the user here is NOT sanitized (the wire's name)."""

    user: str | None
    client_id: str | None

    @property
    def quota_entity(self) -> QuotaEntity:
        user = None if self.user is None else sanitize(self.user)
        return QuotaEntity(user, self.client_id)


def parse_entity(entries: Iterable[tuple[str, str | None]]) -> EntityName:
    """ZkAdminManager.parseAndSanitizeQuotaEntity for users and client ids."""
    entries = list(entries)
    if not entries:
        raise InvalidQuotaRequest("Invalid empty client quota entity")
    user: str | None = None
    client: str | None = None
    ip = False
    for entity_type, name in entries:
        value = DEFAULT if name is None else name
        if entity_type == USER:
            user = value
        elif entity_type == CLIENT_ID:
            client = value
        elif entity_type == IP:
            ip = True
        else:
            raise InvalidQuotaRequest(f"Unhandled client quota entity type: {entity_type}")
        if name is not None and name == "":
            raise InvalidQuotaRequest(f"Empty {entity_type} not supported")
    if ip:
        if user is not None or client is not None:
            raise InvalidQuotaRequest("Invalid quota entity combination, IP entity should not "
                                      "be used with user/client ID entity.")
        raise InvalidQuotaRequest("IP quotas (connection_creation_rate) are not supported")
    return EntityName(user, client)


def apply_quota_ops(props: Mapping[str, str], ops: Iterable[tuple[str, float | None]]
                    ) -> dict[str, str]:
    """ZkAdminManager.alterEntityQuotas: each (key, value) sets (whole numbers for the LONG
    quotas) or, with None, removes a quota config."""
    out = dict(props)
    for key, value in ops:
        if value is None:
            out.pop(key, None)
            continue
        kind = QUOTA_CONFIG_TYPES.get(key)
        if kind is None:
            raise InvalidQuotaRequest(f"Invalid configuration key {key}")
        if not math.isfinite(value) or value < 0:
            raise InvalidQuotaRequest(f"Configuration {key} must be a non-negative number")
        if kind == "DOUBLE":
            out[key] = java_double(value)
            continue
        epsilon = 1e-6
        whole = int(value + epsilon)
        if abs(whole - value) > epsilon or whole > 2**63 - 1:
            raise InvalidQuotaRequest(f"Configuration {key} must be a {kind} value")
        out[key] = str(whole)
    return out


def quota_values(props: Mapping[str, str]) -> dict[str, float]:
    """The quota configs of an entity's props as numbers (unreadable ones skipped)."""
    out: dict[str, float] = {}
    for key, text in props.items():
        if key in QUOTA_CONFIG_TYPES:
            try:
                out[key] = float(text)
            except ValueError:
                log.warning("Unexpected client quota configuration value: %s -> %s", key, text)
    return out


@dataclass(frozen=True)
class FilterComponent:
    entity_type: str
    match_type: int
    match: str | None


def check_filter(components: Iterable[FilterComponent]) -> dict[str, FilterComponent]:
    """ZkAdminManager.describeClientQuotas's checks: one component per type, known types."""
    out: dict[str, FilterComponent] = {}
    for c in components:
        if c.entity_type in (USER, CLIENT_ID, IP):
            if c.entity_type in out:
                what = {USER: "user", CLIENT_ID: "client", IP: "ip"}[c.entity_type]
                raise InvalidQuotaRequest(f"Duplicate {what} filter component entity type")
            if c.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
                raise InvalidQuotaRequest(f"Unexpected match type: {c.match_type}")
            if c.match_type == MATCH_EXACT and c.match is None:
                raise InvalidQuotaRequest("Unexpected null match for an exact match type")
            out[c.entity_type] = c
        elif c.entity_type == "":
            raise InvalidQuotaRequest("Unexpected empty filter component entity type")
        else:
            raise UnsupportedQuotaEntity(f"Custom entity type '{c.entity_type}' not supported")
    if IP in out and (USER in out or CLIENT_ID in out):
        raise InvalidQuotaRequest("Invalid entity filter component combination, IP filter "
                                  "component should not be used with user or clientId filter "
                                  "component.")
    return out


def _matches(component: FilterComponent | None, name: str | None, strict: bool) -> bool:
    if component is None:
        return name is None or not strict
    if component.match_type == MATCH_SPECIFIED:
        return name is not None
    wanted = DEFAULT if component.match_type == MATCH_DEFAULT else component.match
    return name == wanted


def describe_matches(components: Mapping[str, FilterComponent], strict: bool,
                     entity: EntityName) -> bool:
    """Whether an entity (names desanitized, DEFAULT for defaults) passes the filter."""
    return (_matches(components.get(USER), entity.user, strict)
            and _matches(components.get(CLIENT_ID), entity.client_id, strict))


# -- ZooKeeper ---------------------------------------------------------------------------------
async def _children(store: CoordinationStore, path: str) -> list[str]:
    try:
        return sorted(await store.get_children(path))
    except NoNodeError:
        return []


async def read_entity_config(store: CoordinationStore, path: str) -> dict[str, str]:
    found = await store.get_or_none(path)
    if found is None:
        return {}
    try:
        return paths.decode_entity_config(found[0])
    except ValueError:
        log.warning("Ignoring the unreadable config of %s", path)
        return {}


async def all_quota_entities(store: CoordinationStore) -> dict[EntityName, dict[str, str]]:
    """Every user, client and user/client entity with its props (Kafka's
    fetchAllEntityConfigs and fetchAllChildEntityConfigs)."""
    out: dict[EntityName, dict[str, str]] = {}
    for su in await _children(store, USERS):
        user = desanitize(su)
        out[EntityName(user, None)] = await read_entity_config(store, f"{USERS}/{su}")
        for sc in await _children(store, f"{USERS}/{su}/clients"):
            out[EntityName(user, desanitize(sc))] = await read_entity_config(
                store, f"{USERS}/{su}/clients/{sc}")
    for sc in await _children(store, CLIENTS):
        out[EntityName(None, desanitize(sc))] = await read_entity_config(
            store, f"{CLIENTS}/{sc}")
    return out


async def write_entity_config(store: CoordinationStore, entity: QuotaEntity,
                              config: Mapping[str, str]) -> None:
    """Kafka's AdminZkClient.changeConfigs: the entity's znode, then the notification."""
    await change_entity_config(store, entity_path(entity), config, notification_entity(entity))


class ClientQuotaConfigManager:
    """Loads every quota entity at start-up and reloads the ones change notifications name
    (Kafka's UserConfigHandler and ClientIdConfigHandler, for quotas)."""

    def __init__(self, store: CoordinationStore, quotas: QuotaManagers) -> None:
        self.store = store
        self.quotas = quotas

    async def start(self) -> None:
        """Load every quota entity (the broker has the DynamicConfigManager take the existing
        notifications as seen before, so no change is missed)."""
        for name, props in (await all_quota_entities(self.store)).items():
            self.quotas.apply_entity(name.quota_entity, props)

    async def reload(self, entity: QuotaEntity) -> None:
        props = await read_entity_config(self.store, entity_path(entity))
        self.quotas.apply_entity(entity, props)

    async def on_user_config_change(self, name: str) -> None:
        """The `users` handler of the DynamicConfigManager (`alice`, `alice/clients/app`)."""
        await self._on_change("users", name)

    async def on_client_config_change(self, name: str) -> None:
        """The `clients` handler of the DynamicConfigManager (`app`, `<default>`)."""
        await self._on_change("clients", name)

    async def _on_change(self, kind: str, name: str) -> None:
        entity = entity_of_notification(kind, name)
        if entity is None:
            log.warning("Ignoring the quota change notification of %s/%s: not a quota entity",
                        kind, name)
            return
        await self.reload(entity)
