"""The group coordinator's configuration (Kafka's `GroupConfig` and `OffsetConfig`): session
timeout bounds, group size, the initial rebalance delay and the `offsets.*` settings of
`__consumer_offsets`, read from the broker's `group.*` and `offsets.*` configs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class GroupConfig:
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    max_size: int = 2**31 - 1
    initial_rebalance_delay_ms: int = 3000
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600000
    offsets_commit_timeout_ms: int = 5000
    offsets_load_buffer_size: int = 5 * 1024 * 1024
    offset_metadata_max_bytes: int = 4096
    offsets_topic_num_partitions: int = 50
    offsets_topic_replication_factor: int = 3
    offsets_topic_segment_bytes: int = 104857600

    @classmethod
    def from_config(cls, config: Any) -> GroupConfig:
        return cls(
            min_session_timeout_ms=config["group.min.session.timeout.ms"],
            max_session_timeout_ms=config["group.max.session.timeout.ms"],
            max_size=config["group.max.size"],
            initial_rebalance_delay_ms=config["group.initial.rebalance.delay.ms"],
            offsets_retention_ms=config["offsets.retention.minutes"] * 60 * 1000,
            offsets_retention_check_interval_ms=config["offsets.retention.check.interval.ms"],
            offsets_commit_timeout_ms=config["offsets.commit.timeout.ms"],
            offsets_load_buffer_size=config["offsets.load.buffer.size"],
            offset_metadata_max_bytes=config["offset.metadata.max.bytes"],
            offsets_topic_num_partitions=config["offsets.topic.num.partitions"],
            offsets_topic_replication_factor=config["offsets.topic.replication.factor"],
            offsets_topic_segment_bytes=config["offsets.topic.segment.bytes"])

    def offsets_topic_configs(self) -> dict[str, str]:
        return {"cleanup.policy": "compact",
                "segment.bytes": str(self.offsets_topic_segment_bytes),
                "compression.type": "producer"}
