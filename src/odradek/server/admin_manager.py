"""Topic administration as Kafka's ZkAdminManager/AdminZkClient do it: validate, then write the
coordination store (`/config/topics/<t>` first, then `/brokers/topics/<t>` with the replica
assignment; deletion by `/admin/delete_topics/<t>`), and let the controller act on the nodes.
Requests wait (up to their timeout) until the metadata cache shows the outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from ..common import entropy
from ..common import replica_assignment as asg
from ..common.topic_id import topic_id_to_text
from ..coordination import paths
from ..coordination.admin_zk import change_entity_config
from ..coordination.store import CoordinationError, CoordinationStore, NodeExistsError
from ..storage.log_config import LogConfig
from .configs.broker_config_manager import (
    ALL_DYNAMIC_CONFIGS,
    DEFAULT_ENTITY,
    DYNAMIC_BROKER_CONFIGS,
    KAFKA_CONFIG_TYPES,
    QUOTA_CONFIGS,
    BrokerConfigManager,
    broker_config_path,
    check_password_configs,
    config_type,
    from_persistent_props,
    is_sensitive,
    validate_dynamic_broker_configs,
)
from .configs.config import DEFS, SENSITIVE, TOPIC_CONFIG_SYNONYMS, KafkaConfig
from .configs.config_ops import ConfigOp, InvalidRequestError, UnknownTopicError, apply_incremental
from .configs.topic_config_manager import TopicConfigManager
from .configs.topic_configs import TopicConfigs
from .metadata_cache import MetadataCache
from .topic_names import INTERNAL_TOPICS, validate_topic_name

log = logging.getLogger("odradek.admin")

# List-type configs (APPEND / SUBTRACT) with the default their APPEND starts from.
TOPIC_LIST_DEFAULTS = {"cleanup.policy": "delete", "leader.replication.throttled.replicas": "",
                       "follower.replication.throttled.replicas": ""}


def _list_default(name: str) -> str:
    default = DEFS[name].default if name in DEFS else None
    return ",".join(default) if isinstance(default, list) else str(default or "")


# Broker configs: Kafka's LIST-type configs (APPEND to any other known name is refused).
BROKER_LIST_DEFAULTS = {name: _list_default(name)
                        for name, kind in KAFKA_CONFIG_TYPES.items() if kind == "LIST"}

# DescribeConfigs config sources (Kafka's ConfigSource).
DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG = 1, 2, 3
STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 4, 5


@dataclass
class TopicSpec:
    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: dict[int, list[int]] = field(default_factory=dict)
    configs: dict[str, str | None] = field(default_factory=dict)


@dataclass
class TopicResult:
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    topic_id: uuid.UUID | None = None
    num_partitions: int = -1
    replication_factor: int = -1
    configs: dict[str, tuple[str, int]] = field(default_factory=dict)


@dataclass
class PartitionsSpec:
    name: str
    count: int
    assignments: list[list[int]] | None = None


@dataclass
class ConfigEntry:
    name: str
    value: str | None
    source: int
    read_only: bool = False
    synonyms: list[tuple[str, str | None, int]] = field(default_factory=list)
    config_type: int = 0
    is_sensitive: bool = False


@dataclass(eq=False, repr=False)
class AdminManager:
    """Kafka's ZkAdminManager: `config` is the static broker config (defaults for new topics),
    `topic_configs` validates topic configs against the broker's defaults, and the two config
    managers are reloaded after a write so this broker reads its own writes."""

    config: KafkaConfig
    store: CoordinationStore
    metadata_cache: MetadataCache
    topic_configs: TopicConfigs
    topic_config_manager: TopicConfigManager
    broker_configs: BrokerConfigManager

    # -- create -----------------------------------------------------------------------------
    async def _validate(self, spec: TopicSpec) -> tuple[dict[int, list[int]], dict[str, str]]:
        """Kafka's ZkAdminManager.createTopics and AdminZkClient.validateTopicCreate, in their
        order: null config values, a count given with an assignment, the assignment (computed:
        the partition and replication-factor checks), the name, the topic's existence and
        name collisions, the assignment (given: same replica count, no duplicate broker,
        consecutive partition ids; its brokers are not checked, as in Kafka), the configs."""
        cfg = self.config
        nulls = [k for k, v in spec.configs.items() if v is None]
        if nulls:
            raise InvalidRequestError(
                f"Null value not supported for topic configs : {','.join(nulls)}")
        if spec.assignments and (spec.num_partitions != -1 or spec.replication_factor != -1):
            raise InvalidRequestError(
                "Both numPartitions or replicationFactor and replicasAssignments were set. "
                "Both cannot be used at the same time.")
        if spec.assignments:
            assignment = {p: list(r) for p, r in spec.assignments.items()}
        else:
            partitions = (spec.num_partitions if spec.num_partitions != -1
                          else cfg["num.partitions"])
            rf = (spec.replication_factor if spec.replication_factor != -1
                  else cfg["default.replication.factor"])
            assignment = asg.assign_replicas_to_brokers(
                sorted(self.metadata_cache.brokers), partitions, rf, racks=self._racks())
        try:
            validate_topic_name(spec.name)
        except ValueError as exc:
            raise _InvalidTopic(str(exc)) from None
        if await self.store.exists(paths.topic_path(spec.name)) is not None:
            raise NodeExistsError(f"Topic '{spec.name}' already exists.")
        if "." in spec.name or "_" in spec.name:  # Kafka's Topic.hasCollision
            existing = await self.store.get_children(paths.TOPICS)
            if spec.name in existing:
                raise NodeExistsError(f"Topic '{spec.name}' already exists.")
            key = spec.name.replace(".", "_")
            colliding = [t for t in existing if t.replace(".", "_") == key]
            if colliding:
                raise _InvalidTopic(f"Topic '{spec.name}' collides with existing topics: "
                                    f"{', '.join(colliding)}")
        if spec.assignments:
            if len({len(r) for r in assignment.values()}) != 1:
                raise asg.InvalidReplicaAssignmentError(
                    "All partitions should have the same number of replicas")
            if any(len(r) != len(set(r)) for r in assignment.values()):
                raise asg.InvalidReplicaAssignmentError(
                    f"Duplicate replica assignment found: {_scala_assignment(assignment)}")
            if sorted(assignment) != list(range(len(assignment))):
                raise asg.InvalidReplicaAssignmentError(
                    "partitions should be a consecutive 0-based integer sequence")
            if not assignment[0]:  # Kafka writes it: a partition that can never have a leader
                raise asg.InvalidReplicaAssignmentError(
                    "Cannot have replication factor of 0 for partition id 0.")
        configs = {k: v for k, v in spec.configs.items() if v is not None}
        # Raises InvalidConfigError (a ValueError) naming the key for unknown or invalid configs.
        self.topic_configs.validate(configs)
        return assignment, configs

    def _racks(self) -> dict[int, str | None]:
        """Each live broker's `broker.rack` (rack-aware assignment when all have one)."""
        return {b.broker_id: b.rack for b in self.metadata_cache.brokers.values()}

    async def create_topics(self, specs: list[TopicSpec], timeout_ms: int,
                            validate_only: bool = False) -> dict[str, TopicResult]:
        results: dict[str, TopicResult] = {}
        created: list[str] = []
        names = [spec.name for spec in specs]
        for spec in specs:
            if names.count(spec.name) > 1:  # Kafka: every entry of the name, none created
                results[spec.name] = TopicResult(ErrorCode.invalid_request,
                                                 "Found multiple entries for this topic.")
                continue
            try:
                if self.metadata_cache.topic(spec.name) is not None:
                    raise NodeExistsError(f"Topic '{spec.name}' already exists.")
                assignment, configs = await self._validate(spec)
                topic_id = entropy.uuid4()
                if not validate_only:
                    await self.create_topic_with_assignment(spec.name, assignment, configs,
                                                            topic_id)
                    created.append(spec.name)
                results[spec.name] = TopicResult(
                    ErrorCode.none, None, topic_id, len(assignment), len(assignment[0]),
                    self._effective_configs(configs))
            except Exception as exc:  # each topic gets its own error code
                results[spec.name] = TopicResult(_error_code(exc), _error_message(exc))
        if created:
            ok = await self._wait(lambda: all(self._has_leaders(n) for n in created), timeout_ms)
            if not ok:
                for n in created:
                    if not self._has_leaders(n):  # Kafka's DelayedCreatePartitions
                        results[n] = TopicResult(ErrorCode.request_timed_out, None)
        for name in created:
            info = self.metadata_cache.topic(name)
            if info is not None and results[name].error == ErrorCode.none:
                results[name].topic_id = info.topic_id
        return results

    async def auto_create_topics(self, names: list[str]) -> None:
        for name in names:
            if name in INTERNAL_TOPICS:
                continue
            try:
                assignment, _ = await self._validate(TopicSpec(name))
                await self.create_topic_with_assignment(name, assignment, {}, entropy.uuid4())
                log.info("Auto-created topic %s with %d partitions", name, len(assignment))
            except NodeExistsError:
                pass
            except _InvalidTopic as exc:  # a name colliding with an existing topic's
                log.info("Not auto-creating topic %s: %s", name, exc)

    async def create_topic_with_assignment(self, name: str, assignment: dict[int, list[int]],
                                           configs: dict[str, str], topic_id: uuid.UUID
                                           ) -> None:
        """Kafka's AdminZkClient.createTopicWithAssignment: the topic's config node, then its
        assignment node (NodeExistsError if the topic exists)."""
        # Kafka writes the config first so the controller never sees a topic without it.
        config_path = paths.topic_config_path(name)
        data = paths.encode_entity_config(configs)
        if await self.store.exists(config_path) is None:
            await self.store.create(config_path, data, makepath=True)
        else:
            await self.store.set(config_path, data)
        tid = topic_id_to_text(topic_id)
        await self.store.create(
            paths.topic_path(name),
            paths.encode_topic_assignment(paths.TopicAssignment(
                {p: tuple(r) for p, r in assignment.items()}, topic_id=tid)),
            makepath=True)

    def _has_leaders(self, name: str) -> bool:
        info = self.metadata_cache.topic(name)
        return info is not None and bool(info.partitions) and all(
            p.leader >= 0 for p in info.partitions.values())

    async def _wait(self, condition: Callable[[], bool], timeout_ms: int) -> bool:
        deadline = asyncio.get_running_loop().time() + max(0, timeout_ms) / 1000
        while not condition():
            if asyncio.get_running_loop().time() >= deadline:
                return False
            await asyncio.sleep(0.01)
        return True

    # -- delete -----------------------------------------------------------------------------
    async def delete_topics(self, names: list[str], timeout_ms: int
                            ) -> dict[str, tuple[ErrorCode, str | None]]:
        results: dict[str, tuple[ErrorCode, str | None]] = {}
        pending: list[str] = []
        for name in names:
            # Kafka answers from the metadata cache, which drops a topic as its deletion
            # starts: a topic on its way out is unknown, not deleted a second time
            if self.metadata_cache.topic(name) is None or \
                    await self.store.exists(paths.topic_path(name)) is None:
                results[name] = (ErrorCode.unknown_topic_or_partition, None)
                continue
            if not self.config["delete.topic.enable"]:
                results[name] = (ErrorCode.topic_deletion_disabled,
                                 "Topic deletion is disabled.")
                continue
            with contextlib.suppress(NodeExistsError):
                await self.store.create(paths.delete_topic_path(name), b"", makepath=True)
            pending.append(name)
            results[name] = (ErrorCode.none, None)
        if pending:
            cache = self.metadata_cache
            ok = await self._wait(lambda: all(cache.topic(n) is None for n in pending), timeout_ms)
            if not ok:
                for n in pending:
                    if cache.topic(n) is not None:
                        results[n] = (ErrorCode.request_timed_out, "Timed out deleting the topic")
        return results

    # -- partitions -------------------------------------------------------------------------
    async def create_partitions(self, specs: list[PartitionsSpec], timeout_ms: int,
                                validate_only: bool) -> dict[str, tuple[ErrorCode, str | None]]:
        """Kafka's KafkaApis.handleCreatePartitionsRequest and ZkAdminManager.createPartitions:
        a topic named twice, queued for deletion, being reassigned, unknown, not growing; a
        given assignment naming a broker not registered, not one list per new partition, or
        invalid (AdminZkClient.validateReplicaAssignment)."""
        results: dict[str, tuple[ErrorCode, str | None]] = {}
        changed: dict[str, int] = {}
        names = [spec.name for spec in specs]
        try:
            registered = {int(b) for b in await self.store.get_children(paths.BROKER_IDS)}
        except CoordinationError as exc:  # each topic answers the store's error
            return {spec.name: (_error_code(exc), _error_message(exc)) for spec in specs}
        for spec in specs:
            if names.count(spec.name) > 1:
                results[spec.name] = (ErrorCode.invalid_request, "Duplicate topic in request.")
                continue
            try:
                if await self.store.exists(paths.delete_topic_path(spec.name)) is not None:
                    raise _InvalidTopic("The topic is queued for deletion.")
                found = await self.store.get_or_none(paths.topic_path(spec.name))
                data, stat = found if found is not None else (None, None)
                current = paths.decode_topic_assignment(data) if data is not None else None
                if current is not None and (current.adding_replicas or current.removing_replicas):
                    raise _ReassignmentInProgress(
                        "A partition reassignment is in progress for the topic "
                        f"'{spec.name}'.")
                if current is None or not current.partitions:
                    raise _UnknownTopic(f"The topic '{spec.name}' does not exist.")
                existing = {p: list(r) for p, r in current.partitions.items()}
                increment = spec.count - len(existing)
                if increment < 0:
                    raise asg.InvalidPartitionsError(
                        f"Topic currently has {len(existing)} partitions, which is higher than "
                        f"the requested {spec.count}.")
                if increment == 0:
                    raise asg.InvalidPartitionsError(
                        f"Topic already has {len(existing)} partitions.")
                manual = None
                if spec.assignments is not None:
                    unknown = sorted({b for a in spec.assignments for b in a} - registered)
                    if unknown:
                        raise asg.InvalidReplicaAssignmentError(
                            "Unknown broker(s) in replica assignment: "
                            f"{', '.join(map(str, unknown))}.")
                    if len(spec.assignments) != increment:
                        raise asg.InvalidReplicaAssignmentError(
                            f"Increasing the number of partitions by {increment} but "
                            f"{len(spec.assignments)} assignments provided.")
                    manual = {len(existing) + i: a for i, a in enumerate(spec.assignments)}
                new = asg.add_partitions(spec.name, existing,
                                         sorted(self.metadata_cache.brokers), spec.count,
                                         replica_assignment=manual, racks=self._racks())
                if not validate_only:
                    merged = {**{p: tuple(r) for p, r in existing.items()},
                              **{p: tuple(r) for p, r in new.items()}}
                    await self.store.set(paths.topic_path(spec.name), paths.encode_topic_assignment(
                        paths.TopicAssignment(merged, topic_id=current.topic_id)),
                        version=stat.version if stat is not None else -1)
                    changed[spec.name] = spec.count
                results[spec.name] = (ErrorCode.none, None)
            except Exception as exc:
                results[spec.name] = (_error_code(exc), _error_message(exc))
        if changed:
            cache = self.metadata_cache

            def done() -> bool:
                return all((t := cache.topic(n)) is not None and len(t.partitions) >= c
                           and all(p.leader >= 0 for p in t.partitions.values())
                           for n, c in changed.items())
            if not await self._wait(done, timeout_ms):
                for n in changed:  # Kafka's DelayedCreatePartitions: no message
                    results[n] = (ErrorCode.request_timed_out, None)
        return results

    # -- alter configs (AlterConfigs / IncrementalAlterConfigs) ------------------------------
    async def alter_topic_config(self, topic: str, ops: list[ConfigOp], incremental: bool,
                                 validate_only: bool) -> dict[str, str]:
        """Kafka's AdminZkClient.changeTopicConfig: validate the topic's new overrides, then
        write `/config/topics/<t>` and a change notification. Returns the new overrides."""
        if await self.store.exists(paths.topic_path(topic)) is None:
            raise UnknownTopicError(f"The topic '{topic}' does not exist.")
        path = paths.topic_config_path(topic)
        found = await self.store.get_or_none(path)
        current = paths.decode_entity_config(found[0]) if found else {}
        base = {} if not incremental else current
        new = apply_incremental(base, ops, TOPIC_LIST_DEFAULTS, LogConfig.config_names())
        self.topic_configs.validate(new)  # raises naming the key
        if not validate_only:
            await change_entity_config(self.store, path, new, f"topics/{topic}")
            log.info("Updated topic %s configs: %s", topic, new)
            # read-your-writes on this broker; the others follow the notification
            await self.topic_config_manager.reload(topic)
        return new

    async def alter_broker_config(self, name: str, ops: list[ConfigOp], incremental: bool,
                                  validate_only: bool) -> dict[str, str]:
        """Dynamic broker configs (KIP-226): "" is the cluster-wide default `<default>`,
        otherwise a broker id. Written to `/config/brokers/<entity>` + a notification."""
        per_broker = name != ""
        if not per_broker:
            entity = DEFAULT_ENTITY
        else:
            try:
                broker_id = int(name)
            except ValueError:
                raise InvalidRequestError(
                    f"Broker id must be an integer, but it is: {name}") from None
            own = self.broker_configs.broker_id
            if broker_id != own:  # Kafka's getBrokerId: each broker alters its own configs
                raise InvalidRequestError(
                    f"Unexpected broker id, expected {own}, but received {name}")
            entity = str(broker_id)
        path = broker_config_path(entity)
        found = await self.store.get_or_none(path)
        current = paths.decode_entity_config(found[0]) if found else {}
        # Kafka starts an incremental change from the stored configs it would apply
        # (fromPersistentProps), and validates the whole new set (DynamicBrokerConfig.validate)
        new = apply_incremental(from_persistent_props(current, per_broker) if incremental
                                else {}, ops, BROKER_LIST_DEFAULTS, KAFKA_CONFIG_TYPES)
        validate_dynamic_broker_configs(new, per_broker)
        if not validate_only:
            check_password_configs(new, per_broker)
            await change_entity_config(self.store, path, new, f"brokers/{entity}")
            log.info("Updated broker %s configs: %s", entity, new)
            if self.broker_configs.on_change(entity):
                await self.broker_configs.reload()
        return new

    # -- configs ----------------------------------------------------------------------------
    def _effective_configs(self, overrides: dict[str, str]) -> dict[str, tuple[str, int]]:
        defaults = self.broker_configs.effective.topic_defaults()
        out = {k: (v, DEFAULT_CONFIG) for k, v in defaults.items()}
        for k, v in overrides.items():
            out[k] = (v, DYNAMIC_TOPIC_CONFIG)
        return out

    async def describe_topic_config(self, topic: str) -> list[ConfigEntry]:
        """Every topic config with its value, source and synonyms (topic override, then the
        broker synonym's dynamic per-broker, dynamic default, static and default values). The
        overrides are read from the store, so any broker answers for any topic."""
        found = await self.store.get_or_none(paths.topic_config_path(topic))
        overrides = paths.decode_entity_config(found[0]) if found else {}
        return topic_config_entries(overrides, self.broker_configs, self.config)

    def describe_broker_config(self, name: str) -> list[ConfigEntry]:
        """Kafka's ConfigHelper for a broker resource. "" (the cluster-wide default): its
        dynamic configs only; this broker's id: its configs (odradek's, with Kafka's names)
        and every name set in server.properties or dynamically, custom names included. A name
        of unknown type is described as Kafka does: sensitive, its value hidden."""
        bcm = self.broker_configs
        static = self.config.originals
        if name == "":  # Kafka keeps the synonyms from the dynamic default only
            return [_broker_entry(k, v, [
                syn for syn in broker_synonyms(k, bcm.broker_configs, bcm.default_configs,
                                               static)
                if syn[2] == DYNAMIC_DEFAULT_BROKER_CONFIG])
                for k, v in sorted(bcm.default_configs.items())]
        dynamic = bcm.dynamic_config
        # the dynamic-only rates (DynamicConfig.Broker) are not KafkaConfig's: listed when set
        names = {k for k in DEFS if k not in QUOTA_CONFIGS} | set(static) | set(dynamic)
        entries = []
        for key in sorted(names):
            synonyms = broker_synonyms(key, bcm.broker_configs, bcm.default_configs, static)
            if key in DEFS and (key in DYNAMIC_BROKER_CONFIGS or key not in dynamic):
                text = _text(bcm.effective.values[key])
            else:  # a value odradek keeps without acting on it
                text = dynamic.get(key, static.get(key))
            entries.append(_broker_entry(key, text, synonyms))
        return entries


# DescribeConfigs config types (Kafka's DescribeConfigsResponse.ConfigType)
CONFIG_TYPE_IDS = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "SHORT": 4, "LONG": 5, "DOUBLE": 6,
                   "LIST": 7, "CLASS": 8, "PASSWORD": 9}


def _broker_sensitive(key: str) -> bool:
    """Kafka's KafkaConfig.maybeSensitive: passwords and names of unknown type (custom
    configs); odradek's own configs are not hidden."""
    if key in SENSITIVE:
        return True
    return is_sensitive(key) if config_type(key) is not None or key not in DEFS else False


def _broker_entry(key: str, text: str | None,
                  synonyms: list[tuple[str, str | None, int]]) -> ConfigEntry:
    """Kafka's ConfigHelper.createBrokerConfigEntry: read-only unless in AllDynamicConfigs;
    a sensitive config's value and its synonyms' values hidden."""
    sensitive = _broker_sensitive(key)
    if sensitive:
        text, synonyms = None, [(n, None, src) for n, _v, src in synonyms]
    source = synonyms[0][2] if synonyms else DEFAULT_CONFIG
    kind = config_type(key)
    return ConfigEntry(key, text, source, read_only=key not in ALL_DYNAMIC_CONFIGS,
                       synonyms=synonyms, config_type=CONFIG_TYPE_IDS.get(kind or "", 0),
                       is_sensitive=sensitive)


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, list):
        return ",".join(value)
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


# Broker configs that are one setting in several units (Kafka's
# DynamicBrokerConfig.brokerConfigSynonyms), in precedence order. Describing any of them lists the
# group from the described name on.
_SYNONYM_GROUPS: tuple[tuple[str, ...], ...] = (
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
)
# listener.name.<listener>.<name>; the SASL mechanism configs are
# listener.name.<listener>.<mechanism>.<name> (Kafka's ListenerMechanismConfigs)
_LISTENER_CONFIG = re.compile(r"^listener\.name\.[^.]*\.(.*)$")
_LISTENER_MECHANISM_CONFIGS = (
    "sasl.jaas.config", "sasl.login.callback.handler.class", "sasl.login.class",
    "sasl.server.callback.handler.class", "connections.max.reauth.ms")


def synonym_names(key: str) -> tuple[str, ...]:
    """Kafka's brokerConfigSynonyms(key, matchListenerOverride = true): the names whose values
    stand for `key`'s, most precedent first (`key` itself not always first: the describing
    side drops what precedes it)."""
    for group in _SYNONYM_GROUPS:
        if key in group:
            return group
    if key == "log.flush.interval.ms":  # log.flush.scheduler.interval.ms is its default
        return (key, "log.flush.scheduler.interval.ms")
    m = _LISTENER_CONFIG.match(key)
    if m is not None:
        base = m.group(1)
        return (key, next((c for c in _LISTENER_MECHANISM_CONFIGS if base.endswith(c)), base))
    return (key,)


def broker_synonyms(key: str, per_broker: Mapping[str, str], default: Mapping[str, str],
                    static: Mapping[str, str]) -> list[tuple[str, str | None, int]]:
    """Kafka's ConfigHelper.configSynonyms: the values of `key`'s synonyms by source (dynamic
    per-broker, dynamic default, static, Kafka's default where not null), highest precedence
    first, without the entries before the first of `key` itself: describing
    log.retention.hours never shows log.retention.ms, and describing log.retention.ms (which
    has no default) when only log.retention.hours is set shows nothing, as Kafka does."""
    names = synonym_names(key)
    out: list[tuple[str, str | None, int]] = []
    for values, source in ((per_broker, DYNAMIC_BROKER_CONFIG),
                           (default, DYNAMIC_DEFAULT_BROKER_CONFIG),
                           (static, STATIC_BROKER_CONFIG)):
        out += [(n, values[n], source) for n in names if n in values]
    # Kafka's defaults: KafkaConfig's (the dynamic-only replication rates have none)
    out += [(n, _text(DEFS[n].default), DEFAULT_CONFIG) for n in names
            if n in DEFS and DEFS[n].default is not None and n not in QUOTA_CONFIGS]
    first = next((i for i, (n, _v, _s) in enumerate(out) if n == key), len(out))
    return out[first:]


def topic_config_entries(overrides: Mapping[str, str], bcm: Any, static: Any
                         ) -> list[ConfigEntry]:
    """DescribeConfigs entries of a topic (Kafka's ConfigHelper.createTopicConfigEntry): its
    overrides over the broker's effective defaults; the synonyms are the override, then the
    broker synonym's (LogConfig.TopicConfigSynonyms) as for a broker config."""
    effective = {**LogConfig().to_props(), **bcm.effective.topic_defaults()}
    entries = []
    for name in sorted(set(LogConfig.config_names()) | set(overrides)):
        synonyms: list[tuple[str, str | None, int]] = []
        if name in overrides:
            synonyms.append((name, overrides[name], DYNAMIC_TOPIC_CONFIG))
        broker_key = TOPIC_CONFIG_SYNONYMS.get(name)
        if broker_key is not None:
            synonyms += broker_synonyms(broker_key, bcm.broker_configs, bcm.default_configs,
                                        static.originals)
        value = overrides[name] if name in overrides else effective.get(name)
        source = synonyms[0][2] if synonyms else DEFAULT_CONFIG
        entries.append(ConfigEntry(name, value, source, synonyms=synonyms,
                                   config_type=CONFIG_TYPE_IDS.get(
                                       LogConfig.config_type(name) or "", 0)))
    return entries


class _UnknownTopic(ValueError):
    pass


class _InvalidTopic(ValueError):
    """INVALID_TOPIC_EXCEPTION (Kafka's InvalidTopicException)."""


class _ReassignmentInProgress(ValueError):
    """REASSIGNMENT_IN_PROGRESS."""


def _scala_assignment(assignment: Mapping[int, list[int]]) -> str:
    """A replica assignment as Kafka's messages print it (a Scala map of buffers)."""
    return "HashMap(" + ", ".join(
        f"{p} -> ArrayBuffer({', '.join(map(str, r))})"
        for p, r in sorted(assignment.items())) + ")"


def _error_code(exc: Exception) -> ErrorCode:
    if isinstance(exc, asg.AssignmentError):
        return ErrorCode(exc.error_code) if exc.error_code != -1 \
            else ErrorCode.unknown_server_error
    if isinstance(exc, NodeExistsError):
        return ErrorCode.topic_already_exists
    if isinstance(exc, _UnknownTopic):
        return ErrorCode.unknown_topic_or_partition
    if isinstance(exc, _InvalidTopic):
        return ErrorCode.invalid_topic_exception
    if isinstance(exc, _ReassignmentInProgress):
        return ErrorCode.reassignment_in_progress
    if isinstance(exc, InvalidRequestError):
        return ErrorCode.invalid_request
    if isinstance(exc, ValueError):
        return ErrorCode.invalid_config
    if isinstance(exc, CoordinationError):  # ZooKeeper unreachable or the session lost
        log.warning("Topic administration interrupted: %r", exc)
        return ErrorCode.unknown_server_error
    log.exception("Unexpected error in topic administration", exc_info=exc)
    return ErrorCode.unknown_server_error


def _error_message(exc: Exception) -> str | None:
    """Kafka's ApiError.fromThrowable: no message for UNKNOWN_SERVER_ERROR (logged here)."""
    if _error_code(exc) == ErrorCode.unknown_server_error:
        log.error("Error processing topic administration: %s", exc)
        return None
    return str(exc)
