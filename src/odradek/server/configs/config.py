"""Broker configuration: Kafka's server.properties names, types, defaults and validation.

`KafkaConfig.from_properties(text_or_dict, overrides)` parses and validates; an invalid value is a
`ConfigError` naming the key; an unknown key is kept and reported in `unknown_keys` (the broker
logs a warning, as Kafka does). Keys that Kafka has but odradek does not act on (thread counts,
...) are listed in IGNORED so that they are accepted quietly.

Security (Kafka's names): named listeners (`listeners`, `advertised.listeners`,
`listener.security.protocol.map`, `inter.broker.listener.name` or
`security.inter.broker.protocol`), TLS (`ssl.*`), SASL (`sasl.enabled.mechanisms`,
`sasl.mechanism.inter.broker.protocol`) and the listener-prefixed forms
`listener.name.<listener>.<key>` (ssl.* and sasl.enabled.mechanisms) and
`listener.name.<listener>.<mechanism>.sasl.jaas.config`, listener names in lower case: see
`listener_props` and `sasl_jaas_config`. The broker's own login on the inter-broker SASL listener
comes from that key or, as in Kafka, from the JAAS file of `java.security.auth.login.config`
(`inter_broker_login`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...common.api_version import LATEST_API_VERSION, names_latest_api_version
from ...common.properties import ConfigError, parse_properties
from ...security import ssl_factory
from ...security.jaas import JaasError
from ...security.principal import SslPrincipalMapper
from ...security.protocol import SecurityProtocol
from ...security.sasl_server import (
    JAAS_FILE_KEY,
    PLAIN_LOGIN_MODULE,
    SCRAM_LOGIN_MODULE,
    login_credentials,
    server_jaas_entries,
)

LONG_MAX = 2**63 - 1


def _bool(v: str) -> bool:
    s = v.strip().lower()
    if s in ("true", "false"):
        return s == "true"
    raise ValueError("expected true or false")


def _int(v: str) -> int:
    """Kafka's LONG."""
    n = int(v.strip())
    if not -(2**63) <= n <= LONG_MAX:
        raise ValueError("not a number of type LONG")
    return n


def _int32(v: str) -> int:
    """Kafka's INT (the topic configs these default carry the same type)."""
    n = int(v.strip())
    if not -(2**31) <= n <= 2**31 - 1:
        raise ValueError("not a number of type INT")
    return n


def _str(v: str) -> str:
    return v.strip()


def _list(v: str) -> list[str]:
    return [x.strip() for x in v.split(",") if x.strip()]


def _semicolon_list(v: str) -> list[str]:
    """super.users: principals separated by semicolons (User:alice;User:bob)."""
    return [x.strip() for x in v.split(";") if x.strip()]


class ProtocolMap(dict[str, str]):
    """listener.security.protocol.map's value; str() is Kafka's NAME:PROTOCOL,... form."""

    def __str__(self) -> str:
        return ",".join(f"{k}:{v}" for k, v in self.items())


def _protocol_map(v: str) -> ProtocolMap:
    """listener.security.protocol.map: NAME:PROTOCOL,... (names upper-cased)."""
    out = ProtocolMap()
    for item in _list(v):
        name, sep, protocol = item.partition(":")
        if not sep or not name.strip():
            raise ValueError(f"{item!r} is not of the form LISTENER_NAME:SECURITY_PROTOCOL")
        out[name.strip().upper()] = SecurityProtocol.for_name(protocol).value
    return out


_HTTP_LISTENER = re.compile(r"^http://(?P<host>\[[^\]]*\]|[^:/\[\]]*):(?P<port>\d+)/?$")


def parse_http_listener(v: str) -> tuple[str, int] | None:
    """http.listener: ``http://host:port`` (port 0: a free port; empty: no HTTP listener) as
    (host, port), or None when empty."""
    text = v.strip()
    if not text:
        return None
    m = _HTTP_LISTENER.match(text)
    if m is None:
        raise ValueError("expected http://host:port (or empty for no HTTP listener)")
    port = int(m["port"])
    if port > 65535:
        raise ValueError(f"port {port} out of range")
    return m["host"].strip("[]"), port


def _http_listener(v: str) -> str:
    parse_http_listener(v)
    return v.strip()


def _protocol(v: str) -> str:
    return SecurityProtocol.for_name(v).value


def _principal_rules(v: str) -> str:
    SslPrincipalMapper.from_rules(v)  # ValueError names the bad rule
    return v.strip()


@dataclass(frozen=True)
class Def:
    parse: Callable[[str], Any]
    default: Any
    check: Callable[[Any], bool] = lambda _v: True
    why: str = ""


#: The replica selectors odradek knows (KIP-392), by Kafka's class names.
REPLICA_SELECTORS = ("org.apache.kafka.common.replica.RackAwareReplicaSelector",)

#: The `authorizer.class.name` values that mean Kafka's ACL authorizer
#: (server/authorizer.py): AclAuthorizer (KIP-504, Kafka 2.4), the deprecated
#: SimpleAclAuthorizer that Kafka 2.8 still runs over the same ACLs (removed in 3.0), and
#: odradek's own name for it.
ACL_AUTHORIZER_NAMES = ("kafka.security.authorizer.AclAuthorizer",
                        "kafka.security.auth.SimpleAclAuthorizer",
                        "odradek.security.AclAuthorizer")


def _at_least(n: int) -> Callable[[Any], bool]:
    return lambda v: v >= n


def _connection_overrides(v: Any) -> bool:
    """max.connections.per.ip.overrides: "host:count,..." (server/connection_quotas)."""
    for item in str(v or "").split(","):
        if not item.strip():
            continue
        host, sep, count = item.strip().rpartition(":")
        if not sep or not host.strip("[] ") or not count.strip().isdigit():
            return False
    return True


def _one_of(*choices: str) -> Callable[[Any], bool]:
    return lambda v: v in choices


# name -> definition. Defaults are Kafka's (2.x/3.x, ZooKeeper mode); replica.lag.time.max.ms
# is 10000, as in docs/design.md S-3.4.
DEFS: dict[str, Def] = {
    "broker.id": Def(_int, -1, _at_least(-1), ">= -1"),
    "listeners": Def(_list, ["PLAINTEXT://:9092"]),
    "advertised.listeners": Def(_list, None),
    # odradek's HTTP listener (/metrics, the console's JSON API and files): off when empty
    "http.listener": Def(_http_listener, ""),
    "log.dirs": Def(_list, None),
    "log.dir": Def(_str, "/tmp/kafka-logs"),
    "zookeeper.connect": Def(_str, None),
    "zookeeper.session.timeout.ms": Def(_int, 18000, _at_least(1), ">= 1"),
    "zookeeper.connection.timeout.ms": Def(_int, None),
    "num.partitions": Def(_int, 1, _at_least(1), ">= 1"),
    "default.replication.factor": Def(_int, 1, _at_least(1), ">= 1"),
    "auto.create.topics.enable": Def(_bool, True),
    "delete.topic.enable": Def(_bool, True),
    "broker.rack": Def(_str, None),
    "log.segment.bytes": Def(_int32, 1073741824, _at_least(14), ">= 14"),
    "log.roll.ms": Def(_int, None, _at_least(1), ">= 1"),
    "log.roll.hours": Def(_int, 168, _at_least(1), ">= 1"),
    "log.roll.jitter.ms": Def(_int, None, _at_least(0), ">= 0"),
    "log.roll.jitter.hours": Def(_int32, 0, _at_least(0), ">= 0"),
    "log.retention.ms": Def(_int, None, _at_least(-1), ">= -1"),
    "log.retention.minutes": Def(_int, None, _at_least(-1), ">= -1"),
    "log.retention.hours": Def(_int, 168, _at_least(-1), ">= -1"),
    "log.retention.bytes": Def(_int, -1),
    "log.retention.check.interval.ms": Def(_int, 300000, _at_least(1), ">= 1"),
    "log.segment.delete.delay.ms": Def(_int, 60000, _at_least(0), ">= 0"),
    "log.flush.interval.messages": Def(_int, LONG_MAX, _at_least(1), ">= 1"),
    "log.flush.interval.ms": Def(_int, None, _at_least(0), ">= 0"),
    "log.flush.scheduler.interval.ms": Def(_int, LONG_MAX, _at_least(0), ">= 0"),
    "log.flush.offset.checkpoint.interval.ms": Def(_int, 60000, _at_least(0), ">= 0"),
    "log.flush.start.offset.checkpoint.interval.ms": Def(_int, 60000, _at_least(0), ">= 0"),
    "log.index.interval.bytes": Def(_int32, 4096, _at_least(0), ">= 0"),
    "log.index.size.max.bytes": Def(_int32, 10485760, _at_least(4), ">= 4"),
    "log.message.timestamp.difference.max.ms": Def(_int, LONG_MAX, _at_least(0), ">= 0"),
    "log.message.downconversion.enable": Def(_bool, True),
    "log.preallocate": Def(_bool, False),
    "log.message.timestamp.type": Def(_str, "CreateTime", _one_of("CreateTime", "LogAppendTime"),
                                      "CreateTime or LogAppendTime"),
    # Kafka 2.8's defaults: ApiVersion.latestVersion (common/api_version.py). odradek speaks only
    # the 2.8-IV1 inter-broker protocol, so no other version is taken (Kafka's rolling-upgrade
    # values would claim a protocol it does not speak); the message format is not checked, as
    # the topic-level message.format.version is not: batches are magic 2 whatever it says.
    "inter.broker.protocol.version": Def(
        _str, LATEST_API_VERSION, names_latest_api_version,
        f"{LATEST_API_VERSION} (or 2.8, 2.8.x): odradek speaks Kafka 2.8's protocol only"),
    "log.message.format.version": Def(_str, LATEST_API_VERSION),
    "log.cleanup.policy": Def(_str, "delete",
                              lambda v: all(x in ("compact", "delete") for x in _list(v)),
                              "a list of compact and delete"),
    "log.cleaner.enable": Def(_bool, True),
    "log.cleaner.delete.retention.ms": Def(_int, 86400000, _at_least(0), ">= 0"),
    "log.cleaner.min.cleanable.ratio": Def(float, 0.5, lambda v: 0 <= v <= 1,
                                           "between 0 and 1"),
    "log.cleaner.min.compaction.lag.ms": Def(_int, 0, _at_least(0), ">= 0"),
    "log.cleaner.max.compaction.lag.ms": Def(_int, LONG_MAX, _at_least(1), ">= 1"),
    "log.cleaner.threads": Def(_int32, 1, _at_least(0), ">= 0"),
    "log.cleaner.dedupe.buffer.size": Def(_int, 128 * 1024 * 1024),
    "log.cleaner.io.buffer.size": Def(_int32, 512 * 1024, _at_least(0), ">= 0"),
    "log.cleaner.io.buffer.load.factor": Def(float, 0.9),  # the dedupe buffer's load factor
    "log.cleaner.io.max.bytes.per.second": Def(float, 1.7976931348623157e308),
    "log.cleaner.backoff.ms": Def(_int, 15000, _at_least(0), ">= 0"),
    "compression.type": Def(_str, "producer",
                            _one_of("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"),
                            "producer, uncompressed, gzip, snappy, lz4 or zstd"),
    "message.max.bytes": Def(_int32, 1048588, _at_least(0), ">= 0"),
    "socket.request.max.bytes": Def(_int, 104857600, _at_least(1), ">= 1"),
    # odradek: False stops the Produce/Fetch/request recording of metrics/ (gauges still work)
    "metrics.recording.enabled": Def(_bool, True),
    "queued.max.requests": Def(_int, 500, _at_least(1), ">= 1"),
    "max.connections": Def(_int, 2**31 - 1, _at_least(0), ">= 0"),
    # connection limits (Kafka's ConnectionQuotas; server/quotas/connection_quotas.py)
    "max.connections.per.ip": Def(_int32, 2**31 - 1, _at_least(0), ">= 0"),
    "max.connections.per.ip.overrides": Def(_str, "", _connection_overrides,
                                            "a list of host:count with counts >= 0"),
    # client quotas (server/quotas/client_quota_manager.py); the static defaults are Kafka's
    # deprecated quota.producer.default / quota.consumer.default
    "quota.window.num": Def(_int32, 11, _at_least(1), ">= 1"),
    "quota.window.size.seconds": Def(_int32, 1, _at_least(1), ">= 1"),
    "quota.producer.default": Def(_int, LONG_MAX, _at_least(1), ">= 1"),
    "quota.consumer.default": Def(_int, LONG_MAX, _at_least(1), ">= 1"),
    "fetch.max.bytes": Def(_int, 57671680, _at_least(1024), ">= 1024"),
    # KIP-227: fetch sessions the broker keeps (server/fetch_session.py)
    "max.incremental.fetch.session.cache.slots": Def(_int32, 1000, _at_least(0), ">= 0"),
    "min.insync.replicas": Def(_int32, 1, _at_least(1), ">= 1"),
    "unclean.leader.election.enable": Def(_bool, False),
    "replica.lag.time.max.ms": Def(_int, 10000, _at_least(1), ">= 1"),
    # KIP-392: consumers that send their client.rack may be told to fetch from a follower
    "replica.selector.class": Def(
        _str, None, lambda v: v is None or v in REPLICA_SELECTORS,
        "unset or org.apache.kafka.common.replica.RackAwareReplicaSelector"),
    "replica.fetch.max.bytes": Def(_int, 1048576, _at_least(0), ">= 0"),
    "replica.fetch.response.max.bytes": Def(_int, 10485760, _at_least(0), ">= 0"),
    "replica.fetch.wait.max.ms": Def(_int, 500, _at_least(0), ">= 0"),
    "replica.fetch.min.bytes": Def(_int, 1, _at_least(1), ">= 1"),
    "replica.fetch.backoff.ms": Def(_int, 1000, _at_least(0), ">= 0"),
    "replica.high.watermark.checkpoint.interval.ms": Def(_int, 5000, _at_least(1), ">= 1"),
    "replica.socket.timeout.ms": Def(_int, 30000),
    "num.replica.fetchers": Def(_int, 1, _at_least(1), ">= 1"),
    # KIP-73 replication quotas (dynamic broker configs; LONG_MAX = unthrottled)
    "leader.replication.throttled.rate": Def(_int, LONG_MAX, _at_least(0), ">= 0"),
    "follower.replication.throttled.rate": Def(_int, LONG_MAX, _at_least(0), ">= 0"),
    # KIP-113: bytes/s of replica moves between log dirs (dynamic)
    "replica.alter.log.dirs.io.max.bytes.per.second": Def(_int, LONG_MAX, _at_least(0),
                                                          ">= 0"),
    "replication.quota.window.num": Def(_int, 11, _at_least(1), ">= 1"),
    "replication.quota.window.size.seconds": Def(_int, 1, _at_least(1), ">= 1"),
    "controller.socket.timeout.ms": Def(_int, 30000, _at_least(1), ">= 1"),
    "controlled.shutdown.enable": Def(_bool, True),
    "controlled.shutdown.max.retries": Def(_int, 3, _at_least(0), ">= 0"),
    "controlled.shutdown.retry.backoff.ms": Def(_int, 5000, _at_least(0), ">= 0"),
    "auto.leader.rebalance.enable": Def(_bool, True),
    "leader.imbalance.per.broker.percentage": Def(_int, 10, _at_least(0), ">= 0"),
    "leader.imbalance.check.interval.seconds": Def(_int, 300, _at_least(1), ">= 1"),
    "offsets.topic.num.partitions": Def(_int, 50, _at_least(1), ">= 1"),
    "offsets.topic.replication.factor": Def(_int, 3, _at_least(1), ">= 1"),
    "offsets.topic.segment.bytes": Def(_int, 104857600, _at_least(1), ">= 1"),
    "offsets.retention.minutes": Def(_int, 10080, _at_least(1), ">= 1"),
    "offsets.retention.check.interval.ms": Def(_int, 600000, _at_least(1), ">= 1"),
    "offsets.commit.timeout.ms": Def(_int, 5000, _at_least(1), ">= 1"),
    "offsets.load.buffer.size": Def(_int, 5242880, _at_least(1), ">= 1"),
    "offset.metadata.max.bytes": Def(_int, 4096),
    "group.initial.rebalance.delay.ms": Def(_int, 3000, _at_least(0), ">= 0"),
    "group.min.session.timeout.ms": Def(_int, 6000),
    "group.max.session.timeout.ms": Def(_int, 1800000),
    "group.max.size": Def(_int, 2**31 - 1, _at_least(1), ">= 1"),
    # -- the transaction coordinator (Kafka's names and defaults) --------------------------------
    "transactional.id.expiration.ms": Def(_int, 604800000, _at_least(1), ">= 1"),
    "transaction.max.timeout.ms": Def(_int, 900000, _at_least(1), ">= 1"),
    "transaction.state.log.load.buffer.size": Def(_int, 5242880, _at_least(1), ">= 1"),
    "transaction.state.log.replication.factor": Def(_int, 3, _at_least(1), ">= 1"),
    "transaction.state.log.min.isr": Def(_int, 2, _at_least(1), ">= 1"),
    "transaction.state.log.num.partitions": Def(_int, 50, _at_least(1), ">= 1"),
    "transaction.state.log.segment.bytes": Def(_int, 104857600, _at_least(1), ">= 1"),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": Def(
        _int, 10000, _at_least(1), ">= 1"),
    "transaction.remove.expired.transaction.cleanup.interval.ms": Def(
        _int, 3600000, _at_least(1), ">= 1"),
    "producer.id.expiration.ms": Def(_int, 86400000, _at_least(1), ">= 1"),
    "reserved.broker.max.id": Def(_int, 1000, _at_least(0), ">= 0"),
    "broker.id.generation.enable": Def(_bool, True),
    "request.timeout.ms": Def(_int, 30000),
    # -- security: listeners ------------------------------------------------------------------
    "listener.security.protocol.map": Def(_protocol_map, ProtocolMap(
        {p.value: p.value for p in SecurityProtocol})),
    "inter.broker.listener.name": Def(_str, None),
    "security.inter.broker.protocol": Def(_protocol, "PLAINTEXT"),
    # -- TLS (security/ssl_factory.py checks the values; listener.name.<l>.ssl.* override) --
    "ssl.keystore.type": Def(_str, "JKS"),
    "ssl.keystore.location": Def(_str, None),
    "ssl.keystore.password": Def(_str, None),
    "ssl.key.password": Def(_str, None),
    "ssl.keystore.certificate.chain": Def(_str, None),
    "ssl.keystore.key": Def(_str, None),
    "ssl.truststore.type": Def(_str, "JKS"),
    "ssl.truststore.location": Def(_str, None),
    "ssl.truststore.password": Def(_str, None),
    "ssl.truststore.certificates": Def(_str, None),
    "ssl.client.auth": Def(_str, "none", _one_of("none", "requested", "required"),
                           "none, requested or required"),
    "ssl.enabled.protocols": Def(_list, ["TLSv1.2", "TLSv1.3"],
                                 lambda v: bool(v) and all(
                                     p in ssl_factory.TLS_VERSIONS for p in v),
                                 "a list of TLSv1.2, TLSv1.3"),
    "ssl.protocol": Def(_str, "TLSv1.3", lambda v: v in ssl_factory.SSL_PROTOCOLS,
                        "TLS, TLSv1.2 or TLSv1.3"),
    "ssl.cipher.suites": Def(_list, []),
    "ssl.endpoint.identification.algorithm": Def(_str, "https", _one_of("https", ""),
                                                 "https or empty"),
    "ssl.principal.mapping.rules": Def(_principal_rules, "DEFAULT"),
    # -- SASL ---------------------------------------------------------------------------------
    "sasl.enabled.mechanisms": Def(_list, ["GSSAPI"]),
    "sasl.mechanism.inter.broker.protocol": Def(_str, "GSSAPI"),
    "connection.failed.authentication.delay.ms": Def(_int32, 100, _at_least(0), ">= 0"),
    "java.security.auth.login.config": Def(_str, None),  # a JAAS file (KafkaServer, Client)
    # -- authorization ------------------------------------------------------------------------
    "authorizer.class.name": Def(_str, "", _one_of("", *ACL_AUTHORIZER_NAMES),
                                 "empty or " + ", ".join(ACL_AUTHORIZER_NAMES)),
    "super.users": Def(_str, ""),  # principals separated by ";" (see KafkaConfig.super_users)
    "allow.everyone.if.no.acl.found": Def(_bool, False),
    "zookeeper.set.acl": Def(_bool, False),
}

# Values never shown (DescribeConfigs answers null for them, as Kafka does for PASSWORD types).
SENSITIVE = frozenset({
    "ssl.keystore.password", "ssl.key.password", "ssl.truststore.password", "ssl.keystore.key",
})

SUPPORTED_SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

# The keys a listener may override as listener.name.<listener>.<key>
LISTENER_KEYS = frozenset(k for k in DEFS if k.startswith("ssl.")) | {"sasl.enabled.mechanisms"}

_LISTENER_PREFIXED = re.compile(r"^listener\.name\.([^.]+)\.(.+)$")
_MECHANISM_PREFIXED = re.compile(r"^([A-Za-z0-9-]+)\.(sasl\.[a-z.]+)$")

# Kafka keys accepted without effect in odradek (threads and pools: one asyncio loop does it all;
# security: PLAINTEXT only).
IGNORED = {
    "num.network.threads", "num.io.threads", "num.recovery.threads.per.data.dir",
    "background.threads", "socket.send.buffer.bytes", "socket.receive.buffer.bytes",
    "group.coordinator.rebalance.protocols", "metric.reporters",
    "ssl.keymanager.algorithm", "ssl.trustmanager.algorithm", "ssl.provider",
    "ssl.secure.random.implementation", "ssl.engine.factory.class",
    "ssl.truststore.certificates.type", "metrics.num.samples", "connections.max.idle.ms",
    "confluent.support.metrics.enable",
}

_LISTENER = re.compile(r"^(?:(?P<name>[A-Za-z_][A-Za-z0-9_]*)://)(?P<host>\[[^\]]*\]|[^:]*):(?P<port>\d+)$")


def _parse_value(d: Def, key: str, text: str) -> Any:
    try:
        value = d.parse(text)
    except ValueError as exc:
        raise ConfigError(f"Invalid value {text!r} for configuration {key}: {exc}") from None
    if not d.check(value):
        raise ConfigError(
            f"Invalid value {text!r} for configuration {key}: must be {d.why or 'valid'}")
    return value


@dataclass(frozen=True)
class Endpoint:
    listener: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.listener}://{self.host}:{self.port}"


def parse_endpoint(text: str, key: str) -> Endpoint:
    m = _LISTENER.match(text.strip())
    if not m:
        raise ConfigError(f"{key}: {text!r} is not a listener of the form NAME://host:port")
    port = int(m["port"])
    if not 0 <= port <= 65535:
        raise ConfigError(f"{key}: port {port} out of range")
    return Endpoint(m["name"].upper(), m["host"].strip("[]"), port)


@dataclass
class KafkaConfig:
    values: dict[str, Any]
    originals: dict[str, str] = field(default_factory=dict)
    unknown_keys: list[str] = field(default_factory=list)

    @classmethod
    def from_properties(
        cls, props: str | Mapping[str, str] | None = None,
        overrides: Mapping[str, str] | None = None,
    ) -> KafkaConfig:
        raw: dict[str, str] = {}
        if isinstance(props, str):
            raw.update(parse_properties(props))
        elif props:
            raw.update({k: str(v) for k, v in props.items()})
        if overrides:
            raw.update({k: str(v) for k, v in overrides.items()})
        values = {k: d.default for k, d in DEFS.items()}
        unknown: list[str] = []
        for key, text in raw.items():
            d = DEFS.get(key)
            if d is None:
                prefixed = _LISTENER_PREFIXED.match(key)
                if prefixed is not None:
                    suffix = prefixed.group(2)
                    if suffix in LISTENER_KEYS or suffix == "max.connections":
                        _parse_value(DEFS[suffix], key, text)
                    elif not _MECHANISM_PREFIXED.match(suffix):
                        unknown.append(key)
                elif key not in IGNORED:
                    unknown.append(key)
                continue
            values[key] = _parse_value(d, key, text)
        cfg = cls(values, raw, unknown)
        cfg._validate()
        return cfg

    def _validate(self) -> None:
        protocol_map = self.values["listener.security.protocol.map"]
        for key, endpoints in (("listeners", self.listeners),
                               ("advertised.listeners", self.advertised_listeners)):
            names = [ep.listener for ep in endpoints]
            if len(set(names)) != len(names):
                raise ConfigError(f"{key}: each listener name must appear once")
            for name in names:
                if name not in protocol_map:
                    raise ConfigError(
                        f"{key}: no security protocol defined for listener {name} (add it to "
                        "listener.security.protocol.map)")
        listener_names = {ep.listener for ep in self.listeners}
        advertised = {ep.listener for ep in self.advertised_listeners}
        if not advertised <= listener_names:
            raise ConfigError(
                "advertised.listeners: listener names must be equal to or a subset of the ones "
                f"defined in listeners ({', '.join(sorted(advertised - listener_names))} not "
                "in listeners)")
        if "inter.broker.listener.name" in self.originals and \
                "security.inter.broker.protocol" in self.originals:
            raise ConfigError("inter.broker.listener.name: only one of "
                              "inter.broker.listener.name and security.inter.broker.protocol "
                              "should be set")
        inter = self.inter_broker_listener_name
        if inter not in advertised:
            key = ("inter.broker.listener.name" if self.values["inter.broker.listener.name"]
                   else "security.inter.broker.protocol")
            raise ConfigError(
                f"{key}: the inter-broker listener {inter} must be a listener name defined in "
                "advertised.listeners")
        for ep in self.listeners:
            self._validate_listener_security(ep.listener)
        if self.get("log.segment.bytes") < 14:
            raise ConfigError("log.segment.bytes must be >= 14")

    def _validate_listener_security(self, listener: str) -> None:
        protocol = self.security_protocol(listener)
        props = self.listener_props(listener)
        try:
            ssl_factory.validate(props)
        except ssl_factory.SslConfigError as exc:
            raise ConfigError(self._listener_key(listener, str(exc))) from None
        if protocol.uses_ssl and not (props.get("ssl.keystore.location")
                                      or props.get("ssl.keystore.certificate.chain")):
            raise ConfigError(self._listener_key(
                listener, f"ssl.keystore.location: listener {listener} ({protocol}) of "
                "listeners needs a key store: set ssl.keystore.location, or "
                "ssl.keystore.certificate.chain and ssl.keystore.key"))
        if protocol.uses_sasl:
            mechanisms = self.sasl_enabled_mechanisms(listener)
            bad = [m for m in mechanisms if m not in SUPPORTED_SASL_MECHANISMS]
            if bad or not mechanisms:
                raise ConfigError(self._listener_key(
                    listener, f"sasl.enabled.mechanisms: {', '.join(bad) or 'none'} not "
                    f"supported on listener {listener} of listeners (odradek supports "
                    f"{', '.join(SUPPORTED_SASL_MECHANISMS)})"))
            if listener == self.inter_broker_listener_name:
                mech = self.values["sasl.mechanism.inter.broker.protocol"].upper()
                if mech not in mechanisms:
                    raise ConfigError(
                        "sasl.mechanism.inter.broker.protocol: must be included in "
                        f"sasl.enabled.mechanisms when SASL is used for inter-broker "
                        f"communication (got {mech}, enabled {', '.join(mechanisms)})")
                self.inter_broker_login(listener, mech)  # ConfigError when there is none

    def _listener_key(self, listener: str, message: str) -> str:
        """Name the listener-prefixed key when the value came from one."""
        key = message.split(":", 1)[0]
        prefixed = f"listener.name.{listener.lower()}.{key}"
        return f"{prefixed}{message[len(key):]}" if prefixed in self.originals else message

    # -- listeners and security --------------------------------------------------------------
    @property
    def super_users(self) -> list[str]:
        """super.users as a list of principals ("User:alice;User:bob")."""
        return _semicolon_list(self.values["super.users"])

    def security_protocol(self, listener: str) -> SecurityProtocol:
        """The security protocol of a listener (listener.security.protocol.map)."""
        return SecurityProtocol(self.values["listener.security.protocol.map"][listener.upper()])

    @property
    def listener_security_protocol_map(self) -> dict[str, SecurityProtocol]:
        """Each configured listener's protocol (what /brokers/ids/<id> advertises)."""
        return {ep.listener: self.security_protocol(ep.listener)
                for ep in self.advertised_listeners}

    @property
    def inter_broker_listener_name(self) -> str:
        """inter.broker.listener.name, else the listener named after
        security.inter.broker.protocol (PLAINTEXT by default), as Kafka resolves it."""
        name = self.values["inter.broker.listener.name"]
        if name:
            return name.strip().upper()
        return str(self.values["security.inter.broker.protocol"])

    @property
    def inter_broker_security_protocol(self) -> SecurityProtocol:
        return self.security_protocol(self.inter_broker_listener_name)

    def listener_props(self, listener: str) -> dict[str, str]:
        """The ssl.* and sasl.enabled.mechanisms values in force on `listener`: the
        unprefixed ones overridden by listener.name.<listener>.<key> (raw strings; Kafka's
        defaults where neither is set)."""
        out: dict[str, str] = {}
        for key in LISTENER_KEYS:
            value = self.originals.get(key)
            if value is None:
                default = DEFS[key].default
                if default is None or key in ("ssl.keystore.type", "ssl.truststore.type"):
                    continue  # the store's file says what it is (ssl_factory)
                value = ",".join(default) if isinstance(default, list) else str(default)
            out[key] = value
        prefix = f"listener.name.{listener.lower()}."
        for key, value in self.originals.items():
            if key.startswith(prefix) and key[len(prefix):] in LISTENER_KEYS:
                out[key[len(prefix):]] = value
        return out

    def sasl_enabled_mechanisms(self, listener: str) -> list[str]:
        return [m.upper() for m in _list(self.listener_props(listener).get(
            "sasl.enabled.mechanisms", ""))]

    def sasl_jaas_config(self, listener: str, mechanism: str) -> str | None:
        """listener.name.<listener>.<mechanism>.sasl.jaas.config (both lower-case), if set."""
        return self.originals.get(
            f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config")

    def inter_broker_login(self, listener: str, mechanism: str) -> tuple[str, str]:
        """The (username, password) this broker logs in to the others with on a SASL listener,
        found where Kafka's JaasContext looks for the listener's server login:
        `listener.name.<listener>.<mechanism>.sasl.jaas.config`, else the `<listener>.KafkaServer`
        section, else the `KafkaServer` section, of the JAAS file named by
        java.security.auth.login.config; the login module of the mechanism (PlainLoginModule or
        ScramLoginModule) gives its `username` and `password`. ConfigError names what is
        missing."""
        inline = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
        path = self.originals.get(JAAS_FILE_KEY)
        source = inline if inline in self.originals else JAAS_FILE_KEY
        try:
            entries = server_jaas_entries(self.originals, listener, mechanism)
        except JaasError as exc:
            raise ConfigError(f"{source}: {exc}") from None
        if not entries:
            where = (f"the JAAS file {path} has neither a '{listener.lower()}.KafkaServer' nor "
                     "a 'KafkaServer' section" if path else f"{JAAS_FILE_KEY} is not set")
            raise ConfigError(
                f"{inline}: needed for the inter-broker SASL listener (the username and password "
                f"this broker logs in with), or a JAAS file section; {where}")
        credentials = login_credentials(entries, mechanism)
        if credentials is None:
            module = PLAIN_LOGIN_MODULE if mechanism == "PLAIN" else SCRAM_LOGIN_MODULE
            what = inline if source == inline else f"the JAAS file {path}"
            raise ConfigError(
                f"{source}: {what} has no {module} with username and password for the "
                f"inter-broker SASL/{mechanism} login of listener {listener}")
        return credentials

    def principal_mapper(self, listener: str) -> SslPrincipalMapper:
        return SslPrincipalMapper.from_rules(
            self.listener_props(listener).get("ssl.principal.mapping.rules"))

    def inter_broker_client_security(self) -> Any:
        """How this broker connects to the others (a security.connector.ClientSecurity, None
        for PLAINTEXT): the inter-broker listener's ssl.* as a TLS client (its key store as
        the client certificate), SASL with sasl.mechanism.inter.broker.protocol and the
        username/password of `inter_broker_login` (the listener's JAAS config or file). Built
        once (it reads key files)."""
        cached = self.__dict__.get("_inter_broker_security", False)
        if cached is not False:
            return cached
        from ...security.connector import ClientSecurity

        listener = self.inter_broker_listener_name
        protocol = self.security_protocol(listener)
        security = None
        if protocol is not SecurityProtocol.PLAINTEXT:
            props: dict[str, Any] = {"security.protocol": protocol.value}
            if protocol.uses_ssl:
                props.update(self.listener_props(listener))
            if protocol.uses_sasl:
                mechanism = self.values["sasl.mechanism.inter.broker.protocol"].upper()
                props["sasl.mechanism"] = mechanism
                props["sasl.username"], props["sasl.password"] = self.inter_broker_login(
                    listener, mechanism)
            try:
                security = ClientSecurity.from_client_props(props)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        self.__dict__["_inter_broker_security"] = security
        return security

    def get(self, key: str) -> Any:
        return self.values[key]

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    @property
    def broker_id(self) -> int:
        return int(self.values["broker.id"])

    @property
    def listeners(self) -> list[Endpoint]:
        return [parse_endpoint(x, "listeners") for x in self.values["listeners"]]

    @property
    def advertised_listeners(self) -> list[Endpoint]:
        adv = self.values["advertised.listeners"]
        if not adv:
            return self.listeners
        return [parse_endpoint(x, "advertised.listeners") for x in adv]

    @property
    def log_dirs(self) -> list[Path]:
        dirs = self.values["log.dirs"] or [self.values["log.dir"]]
        return [Path(d) for d in dirs]

    @property
    def retention_ms(self) -> int:
        v = self.values
        if v["log.retention.ms"] is not None:
            millis = int(v["log.retention.ms"])
        elif v["log.retention.minutes"] is not None:
            millis = int(v["log.retention.minutes"]) * 60_000
        else:
            millis = int(v["log.retention.hours"]) * 3_600_000
        return -1 if millis < 0 else millis  # any negative setting means unlimited (Kafka)

    @property
    def roll_ms(self) -> int:
        v = self.values
        if v["log.roll.ms"] is not None:
            return int(v["log.roll.ms"])
        return int(v["log.roll.hours"]) * 3_600_000

    @property
    def roll_jitter_ms(self) -> int:
        v = self.values
        if v["log.roll.jitter.ms"] is not None:
            return int(v["log.roll.jitter.ms"])
        return int(v["log.roll.jitter.hours"]) * 3_600_000

    @property
    def flush_ms(self) -> int:
        v = self.values
        if v["log.flush.interval.ms"] is not None:
            return int(v["log.flush.interval.ms"])
        return int(v["log.flush.scheduler.interval.ms"])

    def topic_defaults(self) -> dict[str, str]:
        """The broker-level defaults of topic configs, under the topic config names (Kafka's
        LogConfig synonyms): one entry per TOPIC_CONFIG_SYNONYMS pair, the broker configs with
        fallbacks (log.roll.ms, log.roll.jitter.ms, log.flush.interval.ms, log.retention.ms)
        resolved."""
        resolved = {"log.roll.ms": self.roll_ms, "log.roll.jitter.ms": self.roll_jitter_ms,
                    "log.flush.interval.ms": self.flush_ms, "log.retention.ms": self.retention_ms}
        out: dict[str, str] = {}
        for topic_key, broker_key in TOPIC_CONFIG_SYNONYMS.items():
            value = resolved[broker_key] if broker_key in resolved else self.values[broker_key]
            out[topic_key] = str(value).lower() if isinstance(value, bool) else str(value)
        return out


# Topic-level config -> the broker config it defaults from (Kafka's LogConfig.TopicConfigSynonyms:
# the DescribeConfigs synonyms of topic configs).
TOPIC_CONFIG_SYNONYMS: dict[str, str] = {
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
    "segment.jitter.ms": "log.roll.jitter.ms",
    "segment.index.bytes": "log.index.size.max.bytes",
    "index.interval.bytes": "log.index.interval.bytes",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "retention.ms": "log.retention.ms",
    "retention.bytes": "log.retention.bytes",
    "max.message.bytes": "message.max.bytes",
    "message.format.version": "log.message.format.version",
    "message.timestamp.type": "log.message.timestamp.type",
    "cleanup.policy": "log.cleanup.policy",
    "file.delete.delay.ms": "log.segment.delete.delay.ms",
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "compression.type": "compression.type",
    "delete.retention.ms": "log.cleaner.delete.retention.ms",
    "min.cleanable.dirty.ratio": "log.cleaner.min.cleanable.ratio",
    "min.compaction.lag.ms": "log.cleaner.min.compaction.lag.ms",
    "max.compaction.lag.ms": "log.cleaner.max.compaction.lag.ms",
    "preallocate": "log.preallocate",
    "message.timestamp.difference.max.ms": "log.message.timestamp.difference.max.ms",
    "message.downconversion.enable": "log.message.downconversion.enable",
}
