"""Topic-level log configs (Kafka's LogConfig): their names, types, bounds and defaults,
and the parsing of CreateTopics/AlterConfigs string values."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..common.api_version import LATEST_API_VERSION
from .errors import StorageError

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1


class InvalidConfigError(StorageError, ValueError):
    """INVALID_CONFIG (40): a topic config that does not parse or validate."""

    error_code = 40


@dataclass(frozen=True, slots=True)
class _Spec:
    name: str
    attr: str
    kind: str  # int (32-bit), long, bool, str, list, double
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] | None = None


_SPECS: tuple[_Spec, ...] = (
    _Spec("segment.bytes", "segment_bytes", "int", 14),
    _Spec("segment.ms", "segment_ms", "long", 1),
    _Spec("segment.jitter.ms", "segment_jitter_ms", "long", 0),
    _Spec("segment.index.bytes", "segment_index_bytes", "int", 4),
    _Spec("index.interval.bytes", "index_interval_bytes", "int", 0),
    _Spec("flush.messages", "flush_messages", "long", 1),
    _Spec("flush.ms", "flush_ms", "long", 0),
    _Spec("retention.ms", "retention_ms", "long", -1),
    _Spec("retention.bytes", "retention_bytes", "long"),
    _Spec("max.message.bytes", "max_message_bytes", "int", 0),
    _Spec("message.timestamp.type", "message_timestamp_type", "str",
          choices=("CreateTime", "LogAppendTime")),
    _Spec("message.timestamp.difference.max.ms", "message_timestamp_difference_max_ms", "long",
          0),
    _Spec("message.timestamp.before.max.ms", "message_timestamp_before_max_ms", "long", 0),
    _Spec("message.timestamp.after.max.ms", "message_timestamp_after_max_ms", "long", 0),
    _Spec("cleanup.policy", "cleanup_policy", "list", choices=("compact", "delete")),
    _Spec("file.delete.delay.ms", "file_delete_delay_ms", "long", 0),
    _Spec("min.insync.replicas", "min_insync_replicas", "int", 1),
    _Spec("unclean.leader.election.enable", "unclean_leader_election_enable", "bool"),
    _Spec("delete.retention.ms", "delete_retention_ms", "long", 0),
    _Spec("min.compaction.lag.ms", "min_compaction_lag_ms", "long", 0),
    _Spec("max.compaction.lag.ms", "max_compaction_lag_ms", "long", 1),
    _Spec("min.cleanable.dirty.ratio", "min_cleanable_dirty_ratio", "double", 0, 1),
    _Spec("compression.type", "compression_type", "str",
          choices=("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")),
    _Spec("preallocate", "preallocate", "bool"),
    _Spec("message.downconversion.enable", "message_downconversion_enable", "bool"),
    _Spec("message.format.version", "message_format_version", "str"),
    _Spec("leader.replication.throttled.replicas", "leader_replication_throttled_replicas",
          "list"),
    _Spec("follower.replication.throttled.replicas", "follower_replication_throttled_replicas",
          "list"),
)
_SPEC_BY_NAME = {spec.name: spec for spec in _SPECS}
_KAFKA_TYPES = {"int": "INT", "long": "LONG", "bool": "BOOLEAN", "str": "STRING", "list": "LIST",
                "double": "DOUBLE"}


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Topic-level log configs with Kafka's names (``LogConfig.from_props``) and defaults."""

    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10485760
    index_interval_bytes: int = 4096
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    retention_ms: int = 604800000
    retention_bytes: int = -1
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    message_timestamp_difference_max_ms: int = LONG_MAX
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    cleanup_policy: tuple[str, ...] = ("delete",)
    file_delete_delay_ms: int = 60000
    min_insync_replicas: int = 1
    unclean_leader_election_enable: bool = False
    delete_retention_ms: int = 86400000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5
    compression_type: str = "producer"
    preallocate: bool = False
    message_downconversion_enable: bool = True
    message_format_version: str = LATEST_API_VERSION
    leader_replication_throttled_replicas: tuple[str, ...] = ()
    follower_replication_throttled_replicas: tuple[str, ...] = ()

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @staticmethod
    def config_names() -> list[str]:
        return [spec.name for spec in _SPECS]

    @staticmethod
    def config_type(name: str) -> str | None:
        """A topic config's type as Kafka names it (ConfigDef.Type), None if unknown."""
        spec = _SPEC_BY_NAME.get(name)
        return None if spec is None else _KAFKA_TYPES[spec.kind]

    @staticmethod
    def unknown_keys(props: Mapping[str, str]) -> list[str]:
        return sorted(k for k in props if k not in _SPEC_BY_NAME)

    @classmethod
    def from_props(cls, props: Mapping[str, Any], base: LogConfig | None = None, *,
                   allow_unknown: bool = False) -> LogConfig:
        """Parse topic configs (string values, as in CreateTopics/AlterConfigs) over `base`
        (the broker's defaults). Raises InvalidConfigError naming the key for a bad value, and
        for unknown keys unless `allow_unknown` (Kafka rejects unknown topic configs)."""
        unknown = cls.unknown_keys(props)
        if unknown and not allow_unknown:
            raise InvalidConfigError(f"Unknown topic config name: {', '.join(unknown)}")
        values = {spec.attr: _parse(spec, props[spec.name])
                  for spec in _SPECS if spec.name in props}
        return replace(base if base is not None else cls(), **values)

    def to_props(self) -> dict[str, str]:
        """Every config as Kafka would describe it (strings)."""
        out: dict[str, str] = {}
        for spec in _SPECS:
            value = getattr(self, spec.attr)
            if spec.kind == "bool":
                out[spec.name] = "true" if value else "false"
            elif spec.kind == "list":
                out[spec.name] = ",".join(value)
            else:
                out[spec.name] = str(value)
        return out


def _parse(spec: _Spec, raw: Any) -> Any:
    def bad(reason: str) -> InvalidConfigError:
        return InvalidConfigError(f"Invalid value {raw} for configuration {spec.name}: {reason}")

    text = raw.strip() if isinstance(raw, str) else raw
    value: Any
    if spec.kind in ("int", "long"):
        if isinstance(text, bool):
            raise bad("not a number")
        try:
            value = int(text)
        except (TypeError, ValueError):
            raise bad(f"Not a number of type {spec.kind.upper()}") from None
        lo, hi = (-(2**31), INT_MAX) if spec.kind == "int" else (-(2**63), LONG_MAX)
        if not lo <= value <= hi:
            raise bad(f"Not a number of type {spec.kind.upper()}")
    elif spec.kind == "double":
        try:
            value = float(text)
        except (TypeError, ValueError):
            raise bad("Not a number of type DOUBLE") from None
    elif spec.kind == "bool":
        if isinstance(text, bool):
            value = text
        elif isinstance(text, str) and text.lower() in ("true", "false"):
            value = text.lower() == "true"
        else:
            raise bad("Expected value to be either true or false")
    elif spec.kind == "list":
        items = text if isinstance(text, list | tuple) else str(text).split(",")
        value = tuple(s.strip() for s in items if str(s).strip())
        if spec.name.endswith(".replication.throttled.replicas") and value != ("*",):
            # Kafka's ThrottledReplicaListValidator (KIP-73)
            for item in value:
                p, sep, b = item.partition(":")
                if not (sep and p.strip().isdigit() and b.strip().isdigit()):
                    raise bad("must be the literal '*' or a list of replicas in the following "
                              "format: [partitionId]:[brokerId],[partitionId]:[brokerId],...")
        if spec.choices is not None:
            for item in value:
                if item not in spec.choices:
                    raise bad(f"String must be one of: {', '.join(spec.choices)}")
        return value
    else:
        value = str(text)
        if spec.choices is not None and value not in spec.choices:
            raise bad(f"String must be one of: {', '.join(spec.choices)}")
        return value
    if spec.minimum is not None and value < spec.minimum:
        raise bad(f"Value must be at least {spec.minimum:g}")
    if spec.maximum is not None and value > spec.maximum:
        raise bad(f"Value must be no more than {spec.maximum:g}")
    return value


__all__ = [
    "INT_MAX",
    "LONG_MAX",
    "InvalidConfigError",
    "LogConfig",
]
