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

Validation is Kafka's DynamicBrokerConfig.validate: names Kafka cannot change at run time, the
security configs given without their listener prefix, values of the wrong type and per-broker
configs at the cluster-wide default are refused; any other name (a custom config, or a dynamic
config odradek does not act on) is stored and described as given.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

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

# Kafka 2.8's broker config names by type (KafkaConfig.configDef, internal ones included): a
# name Kafka knows and cannot change at run time is refused by AlterConfigs; any other name that
# is not dynamic is a custom config, stored as given (DynamicConfig.Broker allows custom configs).
_KAFKA_NAMES_BY_TYPE: dict[str, tuple[str, ...]] = {
    "BOOLEAN": (
        "auto.create.topics.enable", "auto.leader.rebalance.enable",
        "broker.id.generation.enable", "controlled.shutdown.enable", "delete.topic.enable",
        "log.cleaner.enable", "log.message.downconversion.enable", "log.preallocate",
        "unclean.leader.election.enable", "zookeeper.set.acl", "zookeeper.ssl.client.enable",
        "zookeeper.ssl.crl.enable", "zookeeper.ssl.ocsp.enable",
    ),
    "STRING": (
        "advertised.host.name", "advertised.listeners", "authorizer.class.name", "broker.rack",
        "compression.type", "control.plane.listener.name", "controller.listener.names",
        "host.name", "inter.broker.listener.name", "inter.broker.protocol.version",
        "listener.security.protocol.map", "listeners", "log.dir", "log.dirs",
        "log.message.format.version", "log.message.timestamp.type",
        "max.connections.per.ip.overrides", "metadata.log.dir", "metrics.recording.level",
        "password.encoder.cipher.algorithm", "password.encoder.keyfactory.algorithm",
        "replica.selector.class", "sasl.kerberos.kinit.cmd", "sasl.kerberos.service.name",
        "sasl.mechanism.controller.protocol", "sasl.mechanism.inter.broker.protocol",
        "security.inter.broker.protocol", "security.providers", "ssl.client.auth",
        "ssl.endpoint.identification.algorithm", "ssl.keymanager.algorithm",
        "ssl.keystore.location", "ssl.keystore.type", "ssl.principal.mapping.rules",
        "ssl.protocol", "ssl.provider", "ssl.secure.random.implementation",
        "ssl.trustmanager.algorithm", "ssl.truststore.location", "ssl.truststore.type",
        "zookeeper.clientCnxnSocket", "zookeeper.connect",
        "zookeeper.ssl.endpoint.identification.algorithm", "zookeeper.ssl.keystore.location",
        "zookeeper.ssl.keystore.type", "zookeeper.ssl.protocol",
        "zookeeper.ssl.truststore.location", "zookeeper.ssl.truststore.type",
    ),
    "INT": (
        "advertised.port", "alter.log.dirs.replication.quota.window.num",
        "alter.log.dirs.replication.quota.window.size.seconds", "background.threads",
        "broker.heartbeat.interval.ms", "broker.id", "broker.session.timeout.ms",
        "connection.failed.authentication.delay.ms", "controlled.shutdown.max.retries",
        "controller.quorum.append.linger.ms", "controller.quorum.election.backoff.max.ms",
        "controller.quorum.election.timeout.ms", "controller.quorum.fetch.timeout.ms",
        "controller.quorum.request.timeout.ms", "controller.quorum.retry.backoff.ms",
        "controller.quota.window.num", "controller.quota.window.size.seconds",
        "controller.socket.timeout.ms", "default.replication.factor",
        "delete.records.purgatory.purge.interval.requests", "fetch.max.bytes",
        "fetch.purgatory.purge.interval.requests", "group.initial.rebalance.delay.ms",
        "group.max.session.timeout.ms", "group.max.size", "group.min.session.timeout.ms",
        "initial.broker.registration.timeout.ms", "kafka.metrics.polling.interval.secs",
        "leader.imbalance.per.broker.percentage", "log.cleaner.io.buffer.size",
        "log.cleaner.threads", "log.flush.offset.checkpoint.interval.ms",
        "log.flush.start.offset.checkpoint.interval.ms", "log.index.interval.bytes",
        "log.index.size.max.bytes", "log.retention.hours", "log.retention.minutes",
        "log.roll.hours", "log.roll.jitter.hours", "log.segment.bytes",
        "max.connection.creation.rate", "max.connections", "max.connections.per.ip",
        "max.incremental.fetch.session.cache.slots", "message.max.bytes", "metrics.num.samples",
        "min.insync.replicas", "node.id", "num.io.threads", "num.network.threads",
        "num.partitions", "num.recovery.threads.per.data.dir",
        "num.replica.alter.log.dirs.threads", "num.replica.fetchers", "offset.metadata.max.bytes",
        "offsets.commit.timeout.ms", "offsets.load.buffer.size", "offsets.retention.minutes",
        "offsets.topic.compression.codec", "offsets.topic.num.partitions",
        "offsets.topic.segment.bytes", "password.encoder.iterations",
        "password.encoder.key.length", "port", "producer.purgatory.purge.interval.requests",
        "queued.max.requests", "quota.window.num", "quota.window.size.seconds",
        "replica.fetch.backoff.ms", "replica.fetch.max.bytes", "replica.fetch.min.bytes",
        "replica.fetch.response.max.bytes", "replica.fetch.wait.max.ms",
        "replica.socket.receive.buffer.bytes", "replica.socket.timeout.ms",
        "replication.quota.window.num", "replication.quota.window.size.seconds",
        "request.timeout.ms", "reserved.broker.max.id", "sasl.server.max.receive.size",
        "socket.receive.buffer.bytes", "socket.request.max.bytes", "socket.send.buffer.bytes",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        "transaction.max.timeout.ms",
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        "transaction.state.log.load.buffer.size", "transaction.state.log.min.isr",
        "transaction.state.log.num.partitions", "transaction.state.log.segment.bytes",
        "transactional.id.expiration.ms", "zookeeper.connection.timeout.ms",
        "zookeeper.max.in.flight.requests", "zookeeper.session.timeout.ms",
        "zookeeper.sync.time.ms",
    ),
    "SHORT": (
        "offsets.commit.required.acks", "offsets.topic.replication.factor",
        "sasl.login.refresh.buffer.seconds", "sasl.login.refresh.min.period.seconds",
        "transaction.state.log.replication.factor",
    ),
    "LONG": (
        "connections.max.idle.ms", "connections.max.reauth.ms",
        "controlled.shutdown.retry.backoff.ms", "delegation.token.expiry.check.interval.ms",
        "delegation.token.expiry.time.ms", "delegation.token.max.lifetime.ms",
        "leader.imbalance.check.interval.seconds", "log.cleaner.backoff.ms",
        "log.cleaner.dedupe.buffer.size", "log.cleaner.delete.retention.ms",
        "log.cleaner.max.compaction.lag.ms", "log.cleaner.min.compaction.lag.ms",
        "log.flush.interval.messages", "log.flush.interval.ms", "log.flush.scheduler.interval.ms",
        "log.message.timestamp.difference.max.ms", "log.retention.bytes",
        "log.retention.check.interval.ms", "log.retention.ms", "log.roll.jitter.ms",
        "log.roll.ms", "log.segment.delete.delay.ms", "metrics.sample.window.ms",
        "offsets.retention.check.interval.ms", "queued.max.request.bytes",
        "quota.consumer.default", "quota.producer.default",
        "replica.high.watermark.checkpoint.interval.ms", "replica.lag.time.max.ms",
        "sasl.kerberos.min.time.before.relogin", "socket.connection.setup.timeout.max.ms",
        "socket.connection.setup.timeout.ms",
    ),
    "DOUBLE": (
        "log.cleaner.io.buffer.load.factor", "log.cleaner.io.max.bytes.per.second",
        "log.cleaner.min.cleanable.ratio", "sasl.kerberos.ticket.renew.jitter",
        "sasl.kerberos.ticket.renew.window.factor", "sasl.login.refresh.window.factor",
        "sasl.login.refresh.window.jitter",
    ),
    "LIST": (
        "controller.quorum.voters", "kafka.metrics.reporters", "log.cleanup.policy",
        "metric.reporters", "process.roles", "sasl.enabled.mechanisms",
        "sasl.kerberos.principal.to.local.rules", "ssl.cipher.suites", "ssl.enabled.protocols",
        "zookeeper.ssl.cipher.suites", "zookeeper.ssl.enabled.protocols",
    ),
    "CLASS": (
        "alter.config.policy.class.name", "client.quota.callback.class",
        "create.topic.policy.class.name", "principal.builder.class",
        "sasl.client.callback.handler.class", "sasl.login.callback.handler.class",
        "sasl.login.class", "sasl.server.callback.handler.class", "ssl.engine.factory.class",
    ),
    "PASSWORD": (
        "delegation.token.master.key", "delegation.token.secret.key",
        "password.encoder.old.secret", "password.encoder.secret", "sasl.jaas.config",
        "ssl.key.password", "ssl.keystore.certificate.chain", "ssl.keystore.key",
        "ssl.keystore.password", "ssl.truststore.certificates", "ssl.truststore.password",
        "zookeeper.ssl.keystore.password", "zookeeper.ssl.truststore.password",
    ),
}
KAFKA_CONFIG_TYPES: dict[str, str] = {
    name: kind for kind, names in _KAFKA_NAMES_BY_TYPE.items() for name in names}

# DynamicConfig.Broker's own configs: only ever set dynamically, not in KafkaConfig.
QUOTA_CONFIGS: frozenset[str] = frozenset(
    {LEADER_THROTTLED_RATE, FOLLOWER_THROTTLED_RATE, ALTER_LOG_DIRS_IO_MAX_BYTES})

# DynamicBrokerConfig.DynamicSecurityConfigs (SslConfigs.RECONFIGURABLE_CONFIGS): updatable only
# per listener, as listener.name.<listener>.<name>.
DYNAMIC_SECURITY_CONFIGS: frozenset[str] = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.truststore.certificates"})

# DynamicListenerConfig.ReconfigurableConfigs
_LISTENER_RECONFIGURABLE: frozenset[str] = frozenset({
    "advertised.listeners", "listeners", "listener.security.protocol.map",
    "principal.builder.class", "ssl.protocol", "ssl.provider", "ssl.cipher.suites",
    "ssl.enabled.protocols", "ssl.keystore.type", "ssl.keystore.location",
    "ssl.keystore.password", "ssl.key.password", "ssl.truststore.type",
    "ssl.truststore.location", "ssl.truststore.password", "ssl.keymanager.algorithm",
    "ssl.trustmanager.algorithm", "ssl.endpoint.identification.algorithm",
    "ssl.secure.random.implementation", "ssl.client.auth", "ssl.engine.factory.class",
    "sasl.mechanism.inter.broker.protocol", "sasl.jaas.config", "sasl.enabled.mechanisms",
    "sasl.kerberos.service.name", "sasl.kerberos.kinit.cmd",
    "sasl.kerberos.ticket.renew.window.factor", "sasl.kerberos.ticket.renew.jitter",
    "sasl.kerberos.min.time.before.relogin", "sasl.kerberos.principal.to.local.rules",
    "sasl.login.refresh.window.factor", "sasl.login.refresh.window.jitter",
    "sasl.login.refresh.min.period.seconds", "sasl.login.refresh.buffer.seconds",
    "max.connections", "max.connection.creation.rate"})

# Kafka's DynamicBrokerConfig.AllDynamicConfigs: security and listener configs, the log cleaner's,
# DynamicLogConfig's (the broker synonyms of topic configs but log.message.format.version), the
# thread pools', metric.reporters and the connection limits.
ALL_DYNAMIC_CONFIGS: frozenset[str] = frozenset({
    *DYNAMIC_SECURITY_CONFIGS, *_LISTENER_RECONFIGURABLE,
    "log.cleaner.threads", "log.cleaner.dedupe.buffer.size", "log.cleaner.io.buffer.load.factor",
    "log.cleaner.io.buffer.size", "message.max.bytes", "log.cleaner.io.max.bytes.per.second",
    "log.cleaner.backoff.ms",
    "log.segment.bytes", "log.roll.ms", "log.roll.jitter.ms", "log.index.size.max.bytes",
    "log.flush.interval.messages", "log.flush.interval.ms", "log.retention.bytes",
    "log.retention.ms", "log.index.interval.bytes", "log.cleaner.delete.retention.ms",
    "log.cleaner.min.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms",
    "log.segment.delete.delay.ms", "log.cleaner.min.cleanable.ratio", "log.cleanup.policy",
    "unclean.leader.election.enable", "min.insync.replicas", "compression.type",
    "log.preallocate", "log.message.timestamp.type", "log.message.timestamp.difference.max.ms",
    "log.message.downconversion.enable",
    "num.io.threads", "num.network.threads", "num.replica.fetchers",
    "num.recovery.threads.per.data.dir", "background.threads",
    "metric.reporters",
    "max.connections.per.ip", "max.connections.per.ip.overrides"})

# Per-broker only: refused at the cluster-wide default (Kafka's PerBrokerConfigs).
_CLUSTER_LEVEL_LISTENER_CONFIGS = frozenset({"max.connections", "max.connection.creation.rate"})
PER_BROKER_CONFIGS: frozenset[str] = (DYNAMIC_SECURITY_CONFIGS | _LISTENER_RECONFIGURABLE) \
    - _CLUSTER_LEVEL_LISTENER_CONFIGS

# Dynamic password configs (stored encrypted with password.encoder.secret in Kafka).
_DYNAMIC_PASSWORD_CONFIGS = frozenset(
    n for n in ALL_DYNAMIC_CONFIGS if KAFKA_CONFIG_TYPES.get(n) == "PASSWORD")

# Known names that cannot change at run time (Kafka's DynamicConfig.Broker.nonDynamicProps, and
# odradek's own static configs).
NON_DYNAMIC_CONFIGS: frozenset[str] = frozenset({*KAFKA_CONFIG_TYPES, *DEFS}) \
    - ALL_DYNAMIC_CONFIGS - QUOTA_CONFIGS

# Of the dynamic configs, those odradek acts on at run time (the others are stored and
# described, as Kafka does, without effect): the KIP-73 / KIP-113 rates, the `log.*` defaults of
# topics (Kafka's DynamicLogConfig) and the connection limits (server/quotas/connection_quotas.py).
DYNAMIC_BROKER_CONFIGS: frozenset[str] = frozenset(
    {*TOPIC_CONFIG_SYNONYMS.values(), *QUOTA_CONFIGS,
     "max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides"}
) & frozenset(DEFS) & (ALL_DYNAMIC_CONFIGS | QUOTA_CONFIGS)

# listener.name.<listener>.<name> (Kafka's ListenerConfigRegex)
_LISTENER_CONFIG = re.compile(r"^listener\.name\.[^.]*\.(.*)$")
# listener.name.<l>.max.connections: applied too, validated as max.connections
_LISTENER_MAX_CONNECTIONS = re.compile(r"^listener\.name\.[^.]+\.max\.connections$")

# Kafka's validators of the dynamic configs that have one (ConfigDef.Range.atLeast, ValidString)
_AT_LEAST: dict[str, int] = {
    "message.max.bytes": 0, "num.network.threads": 1, "num.io.threads": 1,
    "background.threads": 1, "max.connections.per.ip": 0, "max.connections": 0,
    "max.connection.creation.rate": 0, "log.segment.bytes": 14, "log.cleaner.threads": 0,
    "log.cleaner.io.buffer.size": 0, "log.cleaner.backoff.ms": 0, "log.index.size.max.bytes": 4,
    "log.index.interval.bytes": 0, "log.flush.interval.messages": 1,
    "log.segment.delete.delay.ms": 0, "num.recovery.threads.per.data.dir": 1,
    "min.insync.replicas": 1, LEADER_THROTTLED_RATE: 0, FOLLOWER_THROTTLED_RATE: 0,
    ALTER_LOG_DIRS_IO_MAX_BYTES: 0}
_ONE_OF: dict[str, tuple[str, ...]] = {
    "log.cleanup.policy": ("compact", "delete"),
    "log.message.timestamp.type": ("CreateTime", "LogAppendTime"),
    "ssl.client.auth": ("required", "requested", "none")}


_JAVA_INTEGER = re.compile(r"^[+-]?[0-9]+$")


def _definition_key(key: str) -> str:
    return "max.connections" if _LISTENER_MAX_CONNECTIONS.match(key) else key


def _base_name(key: str) -> str:
    m = _LISTENER_CONFIG.match(key)
    return m.group(1) if m else key


def config_type(key: str) -> str | None:
    """Kafka's KafkaConfig.configType: the type of a broker config, of the base config for a
    listener override, None for a custom config."""
    if key in KAFKA_CONFIG_TYPES:
        return KAFKA_CONFIG_TYPES[key]
    if key in QUOTA_CONFIGS:
        return "LONG"
    return KAFKA_CONFIG_TYPES.get(_base_name(key))


def is_sensitive(key: str) -> bool:
    """Kafka's KafkaConfig.maybeSensitive: passwords, and any config of unknown type."""
    kind = config_type(key)
    return kind is None or kind == "PASSWORD"


def is_password_config(key: str) -> bool:
    """Kafka's DynamicBrokerConfig.isPasswordConfig (listener overrides included)."""
    return any(key.endswith(name) for name in _DYNAMIC_PASSWORD_CONFIGS)


def scala_set(names: Iterable[str]) -> str:
    """A set of config names as Kafka's messages print it."""
    return f"Set({', '.join(sorted(names))})"


class NonDynamicConfigError(ValueError):
    """Maps to INVALID_REQUEST (Kafka: a ConfigException from DynamicBrokerConfig.validate)."""


def _parse_kafka_type(key: str, kind: str, text: str) -> Any:
    """Kafka's ConfigDef.parseType, with its messages."""
    def bad(reason: str) -> ConfigError:
        return ConfigError(f"Invalid value {text} for configuration {key}: {reason}")

    trimmed = text.strip()
    if kind == "BOOLEAN":
        if trimmed.lower() not in ("true", "false"):
            raise bad("Expected value to be either true or false")
        return trimmed.lower() == "true"
    if kind in ("INT", "SHORT", "LONG"):
        bits = {"INT": 32, "SHORT": 16, "LONG": 64}[kind]
        if not _JAVA_INTEGER.match(trimmed) or \
                not -(2 ** (bits - 1)) <= int(trimmed) < 2 ** (bits - 1):
            raise bad(f"Not a number of type {kind}")
        return int(trimmed)
    if kind == "DOUBLE":
        try:
            return float(trimmed)
        except ValueError:
            raise bad("Not a number of type DOUBLE") from None
    if kind == "LIST":
        return [x.strip() for x in trimmed.split(",")] if trimmed else []
    return trimmed  # STRING, PASSWORD, CLASS (odradek loads no classes)


def _check_dynamic_value(key: str, base: str, text: str) -> None:
    """Kafka's DynamicConfig.Broker.validate of one dynamic config (listener overrides as their
    base config): its type and Kafka's validator, then odradek's own bound where it has one."""
    kind = config_type(base)
    if kind is None:
        return
    value = _parse_kafka_type(base, kind, text)
    if base in _AT_LEAST and value < _AT_LEAST[base]:
        raise ConfigError(f"Invalid value {text} for configuration {base}: Value must be at "
                          f"least {_AT_LEAST[base]}")
    if base in _ONE_OF:
        for item in value if isinstance(value, list) else [value]:
            if item not in _ONE_OF[base]:
                raise ConfigError(f"Invalid value {item} for configuration {base}: String must "
                                  f"be one of: {', '.join(_ONE_OF[base])}")
    d = DEFS.get(_definition_key(key)) or DEFS.get(base)
    if d is not None:
        try:
            parsed = d.parse(str(text))
        except ValueError as exc:
            raise ConfigError(f"Invalid value {text} for configuration {key}: {exc}") from None
        if not d.check(parsed):
            raise ConfigError(
                f"Invalid value {text} for configuration {key}: Value must be {d.why}")


def validate_dynamic_broker_configs(props: Mapping[str, str], per_broker: bool = True) -> None:
    """Kafka's DynamicBrokerConfig.validateConfigs for a broker's new dynamic configs (its own
    id: `per_broker`, else the cluster-wide default), in Kafka's order: names Kafka cannot change
    at run time, security configs without their listener prefix, values of the wrong type, and
    per-broker configs at the cluster-wide default. Every other name is allowed: custom configs
    are stored as given."""
    non_dynamic = [k for k in props if k in NON_DYNAMIC_CONFIGS]
    if non_dynamic:
        raise NonDynamicConfigError(
            f"Cannot update these configs dynamically: {scala_set(non_dynamic)}")
    unprefixed = [k for k in props if k in DYNAMIC_SECURITY_CONFIGS]
    if unprefixed:
        raise NonDynamicConfigError(
            "These security configs can be dynamically updated only per-listener using the "
            f"listener prefix: {scala_set(unprefixed)}")
    for key, text in props.items():
        base = _base_name(key)
        if base in ALL_DYNAMIC_CONFIGS or base in QUOTA_CONFIGS:
            _check_dynamic_value(key, base, str(text))
    if not per_broker:
        per_broker_only = [k for k in props if k in PER_BROKER_CONFIGS or (
            (m := _LISTENER_CONFIG.match(k)) is not None
            and m.group(1) not in _CLUSTER_LEVEL_LISTENER_CONFIGS)]
        if per_broker_only:
            raise NonDynamicConfigError(
                "Cannot update these configs at default cluster level, broker id must be "
                f"specified: {scala_set(per_broker_only)}")


def check_password_configs(props: Mapping[str, str], per_broker: bool) -> None:
    """Kafka's DynamicBrokerConfig.toPersistentProps, run before a dynamic config is written
    (not for validate_only): password configs are stored encrypted with the broker's
    password.encoder.secret, which odradek does not implement, and only per broker."""
    for key in props:
        if is_password_config(key):
            if not per_broker:
                raise ConfigError("Password config can be defined only at broker level")
            raise ConfigError("Password encoder secret not configured")


def from_persistent_props(props: Mapping[str, str], per_broker: bool) -> dict[str, str]:
    """Kafka's DynamicBrokerConfig.fromPersistentProps: the stored dynamic configs without those
    that could not have been set (non-dynamic names, security configs without their listener
    prefix, values that do not validate, per-broker configs at the cluster-wide default), each
    logged and ignored."""
    out: dict[str, str] = {}
    for key, value in props.items():
        try:
            validate_dynamic_broker_configs({key: value}, per_broker)
        except ValueError as exc:
            log.error("Ignoring dynamic %s config %s: %s",
                      "broker" if per_broker else "default cluster", key, exc)
            continue
        out[key] = value
    return out


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
        self.default_configs = from_persistent_props(await self._read(DEFAULT_ENTITY),
                                                     per_broker=False)
        self.broker_configs = from_persistent_props(await self._read(str(self.broker_id)),
                                                    per_broker=True)
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
