"""Broker configuration (odradek.server.configs.config): server.properties parsing, Kafka's
defaults and
precedence rules, validation errors naming the key, and topic-level defaults."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.server.configs.config import (
    DEFS,
    IGNORED,
    LONG_MAX,
    TOPIC_CONFIG_SYNONYMS,
    ConfigError,
    Endpoint,
    KafkaConfig,
    parse_properties,
)
from odradek.storage.log_config import LogConfig

# --- properties syntax --------------------------------------------------------------------------


def test_properties_syntax() -> None:
    text = """# a comment
! another comment
   # indented comment
broker.id=3
zookeeper.connect : localhost:2181/kafka
log.dirs   =   /data/a,/data/b
num.partitions 4
broker.rack=rack # not a comment
  advertised.listeners=PLAINTEXT://h:9092

empty.value=
lonely.key
a=b=c
url:http://x:1
"""
    assert parse_properties(text) == {
        "broker.id": "3",
        "zookeeper.connect": "localhost:2181/kafka",
        "log.dirs": "/data/a,/data/b",
        "num.partitions": "4",
        "broker.rack": "rack # not a comment",
        "advertised.listeners": "PLAINTEXT://h:9092",
        "empty.value": "",
        "lonely.key": "",
        "a": "b=c",
        "url": "http://x:1",
    }


def test_properties_continuation_lines() -> None:
    text = "log.dirs=/data/a,\\\n    /data/b,\\\n\t/data/c\nbroker.id=1\n"
    assert parse_properties(text) == {"log.dirs": "/data/a,/data/b,/data/c", "broker.id": "1"}


def test_continued_line_starting_with_hash_is_not_a_comment() -> None:
    assert parse_properties("broker.rack=a\\\n#b\n") == {"broker.rack": "a#b"}


def test_trailing_backslash_on_the_last_line() -> None:
    # java.util.Properties keeps the line (without the backslash) when the file ends there.
    assert parse_properties("broker.id=1\nbroker.rack=r1\\") == {"broker.id": "1",
                                                                  "broker.rack": "r1"}


def test_later_duplicate_wins_and_crlf() -> None:
    assert parse_properties("broker.id=1\r\nbroker.id=2\r\n") == {"broker.id": "2"}


def test_from_properties_text_dict_and_overrides(tmp_path: Path) -> None:
    text = "broker.id=1\nnum.partitions=2\n"
    cfg = KafkaConfig.from_properties(text, {"num.partitions": "5", "broker.rack": "r"})
    assert (cfg.broker_id, cfg["num.partitions"], cfg.get("broker.rack")) == (1, 5, "r")
    cfg2 = KafkaConfig.from_properties({"broker.id": 7, "delete.topic.enable": "false"})
    assert cfg2.broker_id == 7 and cfg2["delete.topic.enable"] is False
    assert cfg2.originals == {"broker.id": "7", "delete.topic.enable": "false"}


def test_values_are_trimmed() -> None:
    cfg = KafkaConfig.from_properties({"broker.id": " 4 ", "auto.create.topics.enable": " TRUE ",
                                       "log.message.timestamp.type": " LogAppendTime "})
    assert cfg.broker_id == 4
    assert cfg["auto.create.topics.enable"] is True
    assert cfg["log.message.timestamp.type"] == "LogAppendTime"


# --- defaults and precedence --------------------------------------------------------------------


def test_defaults() -> None:
    cfg = KafkaConfig.from_properties("")
    assert cfg.broker_id == -1
    assert cfg.retention_ms == 168 * 3_600_000
    assert cfg.roll_ms == 168 * 3_600_000
    assert cfg.flush_ms == LONG_MAX
    assert cfg["num.partitions"] == 1
    assert cfg["default.replication.factor"] == 1
    assert cfg["log.segment.bytes"] == 1024**3
    assert cfg["message.max.bytes"] == 1048588
    assert cfg["socket.request.max.bytes"] == 100 * 1024 * 1024
    assert cfg["min.insync.replicas"] == 1
    assert cfg["unclean.leader.election.enable"] is False
    assert cfg["auto.create.topics.enable"] is True
    assert cfg["zookeeper.session.timeout.ms"] == 18000
    assert cfg["offsets.topic.num.partitions"] == 50
    assert cfg["replica.lag.time.max.ms"] == 10000
    assert cfg.listeners == [Endpoint("PLAINTEXT", "", 9092)]
    assert cfg.advertised_listeners == cfg.listeners
    assert cfg.log_dirs == [Path("/tmp/kafka-logs")]
    assert cfg.unknown_keys == []


@pytest.mark.parametrize(
    ("props", "retention_ms"),
    [
        ({"log.retention.hours": "1"}, 3_600_000),
        ({"log.retention.minutes": "2", "log.retention.hours": "1"}, 120_000),
        ({"log.retention.ms": "5", "log.retention.minutes": "2", "log.retention.hours": "1"}, 5),
        ({"log.retention.ms": "-1", "log.retention.minutes": "2"}, -1),
        ({"log.retention.hours": "-1"}, -1),
        ({"log.retention.minutes": "-1"}, -1),
        ({"log.retention.minutes": "0"}, 0),
    ],
)
def test_retention_precedence(props: dict[str, str], retention_ms: int) -> None:
    cfg = KafkaConfig.from_properties(props)
    assert cfg.retention_ms == retention_ms
    assert cfg.topic_defaults()["retention.ms"] == str(retention_ms)
    assert LogConfig.from_props(cfg.topic_defaults(), allow_unknown=True).retention_ms == (
        retention_ms)


def test_roll_and_flush_precedence() -> None:
    cfg = KafkaConfig.from_properties({"log.roll.hours": "2"})
    assert cfg.roll_ms == 7_200_000
    cfg = KafkaConfig.from_properties({"log.roll.hours": "2", "log.roll.ms": "1234"})
    assert cfg.roll_ms == 1234
    cfg = KafkaConfig.from_properties({"log.flush.scheduler.interval.ms": "3000"})
    assert cfg.flush_ms == 3000
    cfg = KafkaConfig.from_properties({"log.flush.scheduler.interval.ms": "3000",
                                       "log.flush.interval.ms": "10"})
    assert cfg.flush_ms == 10


def test_log_dirs_and_listeners() -> None:
    cfg = KafkaConfig.from_properties({
        "log.dirs": "/a, /b ,,", "log.dir": "/ignored",
        "listeners": "PLAINTEXT://0.0.0.0:9092",
        "advertised.listeners": "plaintext://[::1]:19092",
    })
    assert cfg.log_dirs == [Path("/a"), Path("/b")]
    assert cfg.listeners == [Endpoint("PLAINTEXT", "0.0.0.0", 9092)]
    assert cfg.advertised_listeners == [Endpoint("PLAINTEXT", "::1", 19092)]
    assert str(cfg.listeners[0]) == "PLAINTEXT://0.0.0.0:9092"
    assert KafkaConfig.from_properties({"log.dir": "/one"}).log_dirs == [Path("/one")]


# --- validation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("num.partitions", "0"),
        ("num.partitions", "-3"),
        ("num.partitions", "1.5"),
        ("broker.id", "abc"),
        ("broker.id", "-2"),
        ("broker.id", ""),
        ("log.message.timestamp.type", "Foo"),
        ("log.message.timestamp.type", "createtime"),
        ("listeners", "garbage"),
        ("listeners", "PLAINTEXT://host"),
        ("listeners", "PLAINTEXT://host:99999"),
        ("listeners", "SSL://:9093"),
        ("listeners", "PLAINTEXT://:9092,SSL://:9093"),  # (SB: SASL_PLAINTEXT now valid)
        ("listeners", "PLAINTEXT://:9092,PLAINTEXT://:9093"),
        ("advertised.listeners", "nonsense"),
        ("auto.create.topics.enable", "yes"),
        ("compression.type", "brotli"),
        ("log.segment.bytes", "13"),
        ("log.retention.hours", "-2"),
        ("min.insync.replicas", "0"),
        ("fetch.max.bytes", "1023"),
        ("log.cleaner.min.cleanable.ratio", "x"),
        # odradek speaks Kafka 2.8-IV1's inter-broker protocol only
        ("inter.broker.protocol.version", "2.7-IV2"),
        ("inter.broker.protocol.version", "2.8-IV0"),
        ("inter.broker.protocol.version", "3.0"),
    ],
)
def test_invalid_values_name_the_key(key: str, value: str) -> None:
    with pytest.raises(ConfigError, match=rf"\b{key.replace('.', '[.]')}\b"):
        KafkaConfig.from_properties({key: value})


@pytest.mark.parametrize(
    ("key", "value"),
    [
        # Kafka: log.cleaner.min.cleanable.ratio is between(0, 1); log.cleanup.policy is a list
        # of compact/delete; log.segment.bytes, message.max.bytes, log.index.* and
        # min.insync.replicas are INT; retention bytes is LONG.
        ("log.cleaner.min.cleanable.ratio", "1.5"),
        ("log.cleaner.min.cleanable.ratio", "-0.1"),
        ("log.cleanup.policy", "shred"),
        ("log.cleanup.policy", "compact,shred"),
        ("log.segment.bytes", str(2**31)),
        ("message.max.bytes", str(2**31)),
        ("log.index.size.max.bytes", str(2**31)),
        ("log.index.interval.bytes", str(2**31)),
        ("min.insync.replicas", str(2**31)),
        ("log.retention.bytes", str(2**63)),
    ],
)
def test_values_the_topic_configs_would_reject_fail_at_the_broker_key(key: str,
                                                                      value: str) -> None:
    with pytest.raises(ConfigError, match=rf"\b{key.replace('.', '[.]')}\b"):
        KafkaConfig.from_properties({key: value})


@pytest.mark.parametrize("value", ["2.8-IV1", "2.8", "2.8.1", " 2.8.0 "])
def test_the_inter_broker_protocol_version_names_2_8_iv1_as_kafka_parses_it(value: str) -> None:
    cfg = KafkaConfig.from_properties({"inter.broker.protocol.version": value})
    assert cfg["inter.broker.protocol.version"] == value.strip()


def test_overrides_are_validated() -> None:
    with pytest.raises(ConfigError, match=r"num\.partitions"):
        KafkaConfig.from_properties("num.partitions=3", {"num.partitions": "zero"})


def test_unknown_and_ignored_keys() -> None:
    cfg = KafkaConfig.from_properties(
        "foo.bar=1\nbroker.id=0\nnum.network.threads=3\nnum.io.threads=not-a-number\n"
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT\nsome.plugin.setting=x\n")
    assert cfg.unknown_keys == ["foo.bar", "some.plugin.setting"]
    assert "num.network.threads" not in cfg.values
    assert cfg.originals["num.io.threads"] == "not-a-number"


def test_every_ignored_key_is_accepted_silently() -> None:
    cfg = KafkaConfig.from_properties({key: "whatever" for key in IGNORED})
    assert cfg.unknown_keys == []
    assert not IGNORED & DEFS.keys()


# --- topic defaults -----------------------------------------------------------------------------


def test_topic_defaults_cover_the_synonyms() -> None:
    assert set(KafkaConfig.from_properties("").topic_defaults()) == set(TOPIC_CONFIG_SYNONYMS)
    assert set(TOPIC_CONFIG_SYNONYMS.values()) <= DEFS.keys()


def test_default_topic_defaults_are_kafkas_topic_defaults() -> None:
    defaults = KafkaConfig.from_properties("").topic_defaults()
    assert LogConfig.from_props(defaults) == LogConfig()


def test_topic_defaults_map_broker_names() -> None:
    cfg = KafkaConfig.from_properties("""
log.segment.bytes=1048576
log.roll.hours=2
log.index.size.max.bytes=4096
log.index.interval.bytes=100
log.flush.interval.messages=10
log.flush.interval.ms=500
log.retention.minutes=30
log.retention.bytes=123456789
message.max.bytes=2000000
log.message.timestamp.type=LogAppendTime
log.cleanup.policy=compact,delete
log.segment.delete.delay.ms=0
min.insync.replicas=2
unclean.leader.election.enable=true
compression.type=zstd
log.cleaner.delete.retention.ms=1000
log.cleaner.min.cleanable.ratio=0.25
log.cleaner.min.compaction.lag.ms=5000
log.cleaner.max.compaction.lag.ms=86400000
""")
    log_config = LogConfig.from_props(cfg.topic_defaults(), allow_unknown=True)
    assert log_config == LogConfig(
        segment_bytes=1048576, segment_ms=7_200_000, segment_index_bytes=4096,
        index_interval_bytes=100, flush_messages=10, flush_ms=500, retention_ms=1_800_000,
        retention_bytes=123456789, max_message_bytes=2000000,
        message_timestamp_type="LogAppendTime", cleanup_policy=("compact", "delete"),
        file_delete_delay_ms=0, min_insync_replicas=2, unclean_leader_election_enable=True,
        compression_type="zstd", delete_retention_ms=1000, min_cleanable_dirty_ratio=0.25,
        min_compaction_lag_ms=5000, max_compaction_lag_ms=86_400_000,
    )


def _valid(key: str) -> st.SearchStrategy[str]:
    i32 = 2**31 - 1
    ints = {
        "log.segment.bytes": st.integers(14, i32), "log.roll.ms": st.integers(1, LONG_MAX),
        "log.roll.hours": st.integers(1, 10**6), "log.retention.ms": st.integers(-1, LONG_MAX),
        "log.retention.minutes": st.integers(-1, 10**9),
        "log.retention.hours": st.integers(-1, 10**7),
        "log.retention.bytes": st.integers(-(2**63), LONG_MAX),
        "log.index.size.max.bytes": st.integers(4, i32),
        "log.index.interval.bytes": st.integers(0, i32),
        "log.flush.interval.messages": st.integers(1, LONG_MAX),
        "log.flush.interval.ms": st.integers(0, LONG_MAX),
        "log.flush.scheduler.interval.ms": st.integers(0, LONG_MAX),
        "message.max.bytes": st.integers(0, i32), "min.insync.replicas": st.integers(1, i32),
        "log.segment.delete.delay.ms": st.integers(0, LONG_MAX),
        "log.cleaner.delete.retention.ms": st.integers(0, LONG_MAX),
        "log.cleaner.min.compaction.lag.ms": st.integers(0, LONG_MAX),
        "log.cleaner.max.compaction.lag.ms": st.integers(1, LONG_MAX),
        "log.roll.jitter.ms": st.integers(0, LONG_MAX),
        "log.roll.jitter.hours": st.integers(0, i32),
        "log.message.timestamp.difference.max.ms": st.integers(0, LONG_MAX),
    }
    if key in ints:
        return ints[key].map(str)
    return {
        "log.message.timestamp.type": st.sampled_from(["CreateTime", "LogAppendTime"]),
        "log.cleanup.policy": st.sampled_from(["delete", "compact", "compact,delete"]),
        "unclean.leader.election.enable": st.sampled_from(["true", "false"]),
        "compression.type": st.sampled_from(
            ["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"]),
        "log.cleaner.min.cleanable.ratio": st.floats(0, 1).map(str),
        "log.preallocate": st.sampled_from(["true", "false"]),
        "log.message.downconversion.enable": st.sampled_from(["true", "false"]),
        "log.message.format.version": st.sampled_from(["2.8-IV1", "3.0-IV1"]),
    }[key]


TOPIC_BROKER_KEYS = sorted({*TOPIC_CONFIG_SYNONYMS.values(), "log.roll.hours",
                            "log.roll.jitter.hours",
                            "log.retention.minutes", "log.retention.hours",
                            "log.flush.scheduler.interval.ms"})


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_any_valid_broker_config_gives_acceptable_topic_defaults(data: st.DataObject) -> None:
    keys = data.draw(st.lists(st.sampled_from(TOPIC_BROKER_KEYS), unique=True), label="keys")
    props = {key: data.draw(_valid(key), label=key) for key in keys}
    cfg = KafkaConfig.from_properties(props)
    log_config = LogConfig.from_props(cfg.topic_defaults(), allow_unknown=True)
    assert log_config.retention_ms == cfg.retention_ms
    assert log_config.segment_ms == cfg.roll_ms
    assert log_config.segment_jitter_ms == cfg.roll_jitter_ms
    assert log_config.flush_ms == cfg.flush_ms
    assert log_config.segment_bytes == cfg["log.segment.bytes"]
    assert log_config.min_cleanable_dirty_ratio == cfg["log.cleaner.min.cleanable.ratio"]
    assert log_config.min_compaction_lag_ms == cfg["log.cleaner.min.compaction.lag.ms"]
    assert log_config.max_compaction_lag_ms == cfg["log.cleaner.max.compaction.lag.ms"]
