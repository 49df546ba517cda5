"""Broker configuration: Kafka's server.properties names, types, defaults and validation.

`KafkaConfig.from_properties(text_or_dict, overrides)` parses and validates; an invalid value is a
`ConfigError` naming the key; an unknown key is kept and reported in `unknown_keys` (the broker
logs a warning, as Kafka does). Keys that Kafka has but odradek does not act on (thread counts,
SASL, ...) are listed in IGNORED so that they are accepted quietly.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..common.properties import parse_properties

LONG_MAX = 2**63 - 1


class ConfigError(ValueError):
    """An invalid configuration value; the message names the key."""


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


@dataclass(frozen=True)
class Def:
    parse: Callable[[str], Any]
    default: Any
    check: Callable[[Any], bool] = lambda _v: True
    why: str = ""


def _at_least(n: int) -> Callable[[Any], bool]:
    return lambda v: v >= n


def _one_of(*choices: str) -> Callable[[Any], bool]:
    return lambda v: v in choices


# name -> definition. Defaults are Kafka's (2.x/3.x, ZooKeeper mode); replica.lag.time.max.ms
# is 10000, as in docs/design.md S-3.4.
DEFS: dict[str, Def] = {
    "broker.id": Def(_int, -1, _at_least(-1), ">= -1"),
    "listeners": Def(_list, ["PLAINTEXT://:9092"]),
    "advertised.listeners": Def(_list, None),
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
    "log.message.timestamp.type": Def(_str, "CreateTime", _one_of("CreateTime", "LogAppendTime"),
                                      "CreateTime or LogAppendTime"),
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
    "queued.max.requests": Def(_int, 500, _at_least(1), ">= 1"),
    "max.connections": Def(_int, 2**31 - 1, _at_least(0), ">= 0"),
    "fetch.max.bytes": Def(_int, 57671680, _at_least(1024), ">= 1024"),
    "min.insync.replicas": Def(_int32, 1, _at_least(1), ">= 1"),
    "unclean.leader.election.enable": Def(_bool, False),
    "replica.lag.time.max.ms": Def(_int, 10000, _at_least(1), ">= 1"),
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
    "transaction.state.log.replication.factor": Def(_int, 3, _at_least(1), ">= 1"),
    "transaction.state.log.min.isr": Def(_int, 2, _at_least(1), ">= 1"),
    "transaction.state.log.num.partitions": Def(_int, 50, _at_least(1), ">= 1"),
    "producer.id.expiration.ms": Def(_int, 86400000, _at_least(1), ">= 1"),
    "reserved.broker.max.id": Def(_int, 1000, _at_least(0), ">= 0"),
    "broker.id.generation.enable": Def(_bool, True),
    "request.timeout.ms": Def(_int, 30000),
}

# Kafka keys accepted without effect in odradek (threads and pools: one asyncio loop does it all;
# security: PLAINTEXT only).
IGNORED = {
    "num.network.threads", "num.io.threads", "num.recovery.threads.per.data.dir",
    "background.threads", "socket.send.buffer.bytes", "socket.receive.buffer.bytes",
    "log.preallocate",
    "inter.broker.protocol.version", "log.message.format.version",
    "group.coordinator.rebalance.protocols", "listener.security.protocol.map",
    "inter.broker.listener.name", "security.inter.broker.protocol",
    "zookeeper.set.acl", "metric.reporters", "metrics.num.samples", "connections.max.idle.ms",
    "confluent.support.metrics.enable",
}

_LISTENER = re.compile(r"^(?:(?P<name>[A-Za-z_][A-Za-z0-9_]*)://)(?P<host>\[[^\]]*\]|[^:]*):(?P<port>\d+)$")


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
                if key not in IGNORED:
                    unknown.append(key)
                continue
            try:
                value = d.parse(text)
            except ValueError as exc:
                raise ConfigError(
                    f"Invalid value {text!r} for configuration {key}: {exc}") from None
            if not d.check(value):
                raise ConfigError(
                    f"Invalid value {text!r} for configuration {key}: must be {d.why or 'valid'}"
                )
            values[key] = value
        cfg = cls(values, raw, unknown)
        cfg._validate()
        return cfg

    def _validate(self) -> None:
        for ep in self.listeners:  # (helper SB's minimal stand-in; SA's config replaces it)
            if self.security_protocol(ep.listener) not in ("PLAINTEXT", "SASL_PLAINTEXT"):
                raise ConfigError(f"listeners: only PLAINTEXT and SASL_PLAINTEXT are supported, "
                                  f"got {ep}")
        names = [ep.listener for ep in self.listeners]
        if len(set(names)) != len(names):
            raise ConfigError("listeners: each listener name must appear once")
        self.advertised_listeners  # noqa: B018  (parses and validates)
        if self.get("log.segment.bytes") < 14:
            raise ConfigError("log.segment.bytes must be >= 14")

    def get(self, key: str) -> Any:
        return self.values[key]

    def security_protocol(self, listener: str) -> str:
        """The listener's protocol from listener.security.protocol.map (else its own name)."""
        mapping = self.originals.get("listener.security.protocol.map", "")
        for item in mapping.split(","):
            name, sep, protocol = item.strip().partition(":")
            if sep and name.strip().upper() == listener.upper():
                return protocol.strip().upper()
        return listener.upper()

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
    def flush_ms(self) -> int:
        v = self.values
        if v["log.flush.interval.ms"] is not None:
            return int(v["log.flush.interval.ms"])
        return int(v["log.flush.scheduler.interval.ms"])

    def topic_defaults(self) -> dict[str, str]:
        """The broker-level defaults of topic configs, under the topic config names (Kafka's
        LogConfig synonyms): one entry per TOPIC_CONFIG_SYNONYMS pair, the broker configs with
        fallbacks (log.roll.ms, log.flush.interval.ms, log.retention.ms) resolved."""
        resolved = {"log.roll.ms": self.roll_ms, "log.flush.interval.ms": self.flush_ms,
                    "log.retention.ms": self.retention_ms}
        out: dict[str, str] = {}
        for topic_key, broker_key in TOPIC_CONFIG_SYNONYMS.items():
            value = resolved[broker_key] if broker_key in resolved else self.values[broker_key]
            out[topic_key] = str(value).lower() if isinstance(value, bool) else str(value)
        return out


# Topic-level config -> the broker config it defaults from (DescribeConfigs synonyms).
TOPIC_CONFIG_SYNONYMS: dict[str, str] = {
    "segment.bytes": "log.segment.bytes",
    "segment.ms": "log.roll.ms",
    "segment.index.bytes": "log.index.size.max.bytes",
    "index.interval.bytes": "log.index.interval.bytes",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": "log.flush.interval.ms",
    "retention.ms": "log.retention.ms",
    "retention.bytes": "log.retention.bytes",
    "max.message.bytes": "message.max.bytes",
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
}
