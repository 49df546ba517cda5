"""Dynamic broker configs (KIP-226, ZooKeeper layout) on every broker.

Cluster-wide defaults live in `/config/brokers/<default>`, one broker's own in
`/config/brokers/<id>` (`{"version":1,"config":{...}}`); a change is announced by a
`/config/changes/config_change_<seq>` notification with entity_path `brokers/<default>` or
`brokers/<id>`. Precedence (Kafka's DynamicBrokerConfig): per-broker dynamic, then dynamic
default, then the static server.properties, then Kafka's default.

Applied at run time: the KIP-73 replication rates (`leader.replication.throttled.rate`,
`follower.replication.throttled.rate`, and KIP-113's
`replica.alter.log.dirs.io.max.bytes.per.second`) and the `log.*` defaults that feed topics
without their own override (Kafka's DynamicLogConfig), e.g. `log.retention.ms`, `message.max.bytes`,
`min.insync.replicas`, `unclean.leader.election.enable`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping

from ...coordination import paths
from ...coordination.store import CoordinationStore
from ...storage.log_config import LogConfig
from ..quotas.replication_quota import FOLLOWER_THROTTLED_RATE, LEADER_THROTTLED_RATE
from ..replication.replica_alter_log_dirs import ALTER_LOG_DIRS_IO_MAX_BYTES
from ..replication.replica_manager import ReplicaManager
from .config import DEFS, TOPIC_CONFIG_SYNONYMS, ConfigError, KafkaConfig
from .topic_configs import TopicConfigs

log = logging.getLogger("odradek.config")

DEFAULT_ENTITY = "<default>"  # Kafka's ConfigEntityName.Default

# Broker configs updatable without a restart (a subset of Kafka's DynamicBrokerConfig.
# AllDynamicConfigs: DynamicLogConfig.ReconfigurableConfigs, which excludes
# log.message.format.version, and DynamicConfig.Broker).
DYNAMIC_BROKER_CONFIGS: frozenset[str] = frozenset(
    {*TOPIC_CONFIG_SYNONYMS.values(), "log.roll.hours", "log.retention.minutes",
     "log.retention.hours", LEADER_THROTTLED_RATE, FOLLOWER_THROTTLED_RATE,
     ALTER_LOG_DIRS_IO_MAX_BYTES,
     # Kafka's DynamicConnectionQuota (server/quotas/connection_quotas.py)
     "max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides"}
) & frozenset(DEFS) - {"log.message.format.version"}

# listener.name.<l>.max.connections: dynamic too, validated as max.connections
_LISTENER_MAX_CONNECTIONS = re.compile(r"^listener\.name\.[^.]+\.max\.connections$")


def _definition_key(key: str) -> str:
    return "max.connections" if _LISTENER_MAX_CONNECTIONS.match(key) else key


class UnknownConfigError(ValueError):
    """Maps to INVALID_CONFIG."""


class NonDynamicConfigError(ValueError):
    """Maps to INVALID_REQUEST (Kafka: 'Cannot update these configs dynamically')."""


def validate_dynamic_broker_configs(props: Mapping[str, str]) -> None:
    """Kafka's DynamicBrokerConfig.validate for a dynamic update: unknown names, names not
    updatable at run time, and bad values are refused with a message naming the key."""
    unknown = sorted(k for k in props if _definition_key(k) not in DEFS)
    if unknown:
        raise UnknownConfigError(f"Unknown broker config name: {', '.join(unknown)}")
    non_dynamic = sorted(k for k in props
                         if _definition_key(k) not in DYNAMIC_BROKER_CONFIGS)
    if non_dynamic:
        raise NonDynamicConfigError(
            f"Cannot update these configs dynamically: Set({', '.join(non_dynamic)})")
    for key, text in props.items():
        d = DEFS[_definition_key(key)]
        try:
            value = d.parse(str(text))
        except ValueError as exc:
            raise ConfigError(f"Invalid value {text} for configuration {key}: {exc}") from None
        if not d.check(value):
            raise ConfigError(
                f"Invalid value {text} for configuration {key}: Value must be {d.why}")


def merge_dynamic(default: Mapping[str, str], per_broker: Mapping[str, str]) -> dict[str, str]:
    """The dynamic layer as one dict: per-broker values over the cluster-wide defaults."""
    return {**default, **per_broker}


def effective_config(static: KafkaConfig, dynamic: Mapping[str, str]) -> KafkaConfig:
    """The broker's config with the dynamic layer over server.properties. Values that no longer
    parse (written by another version) are skipped with a warning rather than breaking the
    broker, as Kafka does."""
    usable: dict[str, str] = {}
    for key, value in dynamic.items():
        if _definition_key(key) not in DYNAMIC_BROKER_CONFIGS:
            continue
        try:
            validate_dynamic_broker_configs({key: value})
        except ValueError as exc:
            log.warning("Ignoring dynamic broker config %s=%s: %s", key, value, exc)
            continue
        usable[key] = value
    if not usable:
        return static
    return KafkaConfig.from_properties({**static.originals, **usable})


def broker_config_path(entity: str) -> str:
    return paths.config_entity_path("brokers", entity)


class BrokerConfigManager:
    """Loads the dynamic broker configs and applies them to this broker: the replication
    quotas of the replica manager and the topic defaults of `topic_configs`. A dynamic
    unclean.leader.election.enable=true calls `on_unclean_leader_election_enabled()` (Kafka's
    DynamicLogConfig: the active controller tries its offline partitions again at once)."""

    def __init__(self, broker_id: int, config: KafkaConfig, store: CoordinationStore,
                 topic_configs: TopicConfigs, replica_manager: ReplicaManager,
                 on_unclean_leader_election_enabled: Callable[[], None]) -> None:
        self.broker_id = broker_id
        self.config = config
        self.store = store
        self.topic_configs = topic_configs
        self.replica_manager = replica_manager
        self.on_unclean_leader_election_enabled = on_unclean_leader_election_enabled
        self.default_configs: dict[str, str] = {}
        self.broker_configs: dict[str, str] = {}
        self.dynamic_config: dict[str, str] = {}  # KIP-226: <default> then <id> overrides
        self.effective: KafkaConfig = config
        # called with the new effective config after each change (connection limits)
        self.reconfigurables: list[Callable[[KafkaConfig], None]] = []

    async def start(self) -> None:
        await self.reload()

    async def _read(self, entity: str) -> dict[str, str]:
        found = await self.store.get_or_none(broker_config_path(entity))
        return paths.decode_entity_config(found[0]) if found else {}

    async def reload(self) -> None:
        self.default_configs = await self._read(DEFAULT_ENTITY)
        self.broker_configs = await self._read(str(self.broker_id))
        self.apply()

    def on_change(self, entity: str) -> bool:
        """Whether a notification for `brokers/<entity>` concerns this broker."""
        return entity in (DEFAULT_ENTITY, str(self.broker_id))

    def apply(self) -> None:
        dynamic = merge_dynamic(self.default_configs, self.broker_configs)
        self.dynamic_config = dynamic
        self.effective = effective_config(self.config, dynamic)
        eff = self.effective
        rm = self.replica_manager
        rm.leader_quota.update_quota(eff[LEADER_THROTTLED_RATE])
        rm.follower_quota.update_quota(eff[FOLLOWER_THROTTLED_RATE])
        rm.alter_log_dirs.quota.update_quota(eff[ALTER_LOG_DIRS_IO_MAX_BYTES])
        new_default = LogConfig.from_props(eff.topic_defaults(), allow_unknown=True)
        old_default = self.topic_configs.defaults
        if new_default != old_default:
            unclean_enabled = (new_default.unclean_leader_election_enable
                               and not old_default.unclean_leader_election_enable)
            self.topic_configs.set_defaults(new_default)
            if unclean_enabled:
                self.on_unclean_leader_election_enabled()
        for reconfigure in self.reconfigurables:
            reconfigure(eff)
        log.info("[DynamicConfigManager broker=%d] Dynamic broker configs: %s",
                 self.broker_id, dynamic or "{}")
