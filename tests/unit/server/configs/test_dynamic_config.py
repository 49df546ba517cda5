"""Runtime config changes as pure decisions (S-6.3): IncrementalAlterConfigs
operations, Kafka's error mapping, dynamic broker config validation and precedence, the
DescribeConfigs sources/synonyms, the throttled-replica list validation of topic configs, and
the `odradek configs` argument parsing and output format."""

from __future__ import annotations

import argparse
from types import SimpleNamespace

import pytest
from kio.schema.errors import ErrorCode

from odradek.server.admin_manager import (
    DEFAULT_CONFIG,
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    DYNAMIC_TOPIC_CONFIG,
    STATIC_BROKER_CONFIG,
    broker_synonyms,
    topic_config_entries,
)
from odradek.server.apis.alter_configs import error_for
from odradek.server.configs.broker_config_manager import (
    ALL_DYNAMIC_CONFIGS,
    DYNAMIC_BROKER_CONFIGS,
    NonDynamicConfigError,
    check_password_configs,
    effective_config,
    from_persistent_props,
    merge_dynamic,
    validate_dynamic_broker_configs,
)
from odradek.server.configs.config import ConfigError, KafkaConfig
from odradek.server.configs.config_ops import (
    APPEND,
    DELETE,
    SET,
    SUBTRACT,
    ConfigOp,
    InvalidRequestError,
    UnknownConfigKeyError,
    UnknownTopicError,
    apply_incremental,
)
from odradek.storage.log_config import InvalidConfigError, LogConfig
from odradek.tools import configs as tool
from odradek.tools.command import ToolError

LISTS = {"cleanup.policy": "delete", "leader.replication.throttled.replicas": ""}


def test_set_and_delete() -> None:
    out = apply_incremental({"retention.ms": "1", "segment.ms": "5"},
                            [ConfigOp("retention.ms", SET, "2"), ConfigOp("segment.ms", DELETE,
                                                                           None),
                             ConfigOp("flush.ms", DELETE, None)], LISTS)
    assert out == {"retention.ms": "2"}


def test_append_and_subtract_start_from_the_default() -> None:
    out = apply_incremental({}, [ConfigOp("cleanup.policy", APPEND, "compact")], LISTS)
    assert out == {"cleanup.policy": "delete,compact"}
    out = apply_incremental(out, [ConfigOp("cleanup.policy", APPEND, "compact,delete")], LISTS)
    assert out == {"cleanup.policy": "delete,compact"}  # distinct
    out = apply_incremental(out, [ConfigOp("cleanup.policy", SUBTRACT, "delete")], LISTS)
    assert out == {"cleanup.policy": "compact"}
    out = apply_incremental({"leader.replication.throttled.replicas": "0:1"},
                            [ConfigOp("leader.replication.throttled.replicas", APPEND, "1:2")],
                            LISTS)
    assert out == {"leader.replication.throttled.replicas": "0:1,1:2"}


def test_append_to_a_non_list_config_is_an_invalid_request() -> None:
    with pytest.raises(InvalidRequestError, match=r"append is not allowed for config key: "
                                                  r"retention\.ms"):
        apply_incremental({}, [ConfigOp("retention.ms", APPEND, "1")], LISTS)
    with pytest.raises(InvalidRequestError, match=r"subtract"):
        apply_incremental({}, [ConfigOp("retention.ms", SUBTRACT, "1")], LISTS)


def test_duplicates_unknown_operations_and_null_set() -> None:
    with pytest.raises(InvalidRequestError, match=r"^Error due to duplicate config keys : a$"):
        apply_incremental({}, [ConfigOp("a", SET, "1"), ConfigOp("a", DELETE, None)], LISTS)
    with pytest.raises(InvalidRequestError, match=r"Unknown config operation 9"):
        apply_incremental({}, [ConfigOp("a", 9, "1")], LISTS)
    # Kafka: every null value but DELETE's, named with its operation
    with pytest.raises(InvalidRequestError,
                       match=r"^Null value not supported for : SET:a,APPEND:b$"):
        apply_incremental({}, [ConfigOp("a", SET, None), ConfigOp("b", APPEND, None),
                               ConfigOp("c", DELETE, None)], LISTS)
    # APPEND of a name the resource type does not define: Kafka's NoSuchElementException
    with pytest.raises(UnknownConfigKeyError):
        apply_incremental({}, [ConfigOp("no.such", APPEND, "x")], LISTS, {"cleanup.policy"})


def test_error_mapping_follows_kafka() -> None:
    code, _ = error_for(UnknownTopicError("Topic t does not exist."), 2, "t")
    assert code == ErrorCode.unknown_topic_or_partition
    code, msg = error_for(InvalidConfigError("Unknown topic config name: foo"), 2, "t")
    assert (code, msg) == (ErrorCode.invalid_config, "Unknown topic config name: foo")
    code, msg = error_for(InvalidConfigError(
        "Invalid value x for configuration retention.ms: Not a number of type LONG"), 2, "t")
    assert code == ErrorCode.invalid_request
    assert msg.startswith("Invalid config value for resource ConfigResource(type=TOPIC, "
                          "name='t'): Invalid value x for configuration retention.ms")
    code, msg = error_for(NonDynamicConfigError("Cannot update these configs dynamically: "
                                                "Set(broker.id)"), 4, "0")
    assert code == ErrorCode.invalid_request and msg is not None
    assert "type=BROKER, name='0'" in msg
    assert error_for(UnknownConfigKeyError("x"), 4, "") == (ErrorCode.unknown_server_error, None)


def test_topic_config_validation_names_the_key() -> None:
    with pytest.raises(InvalidConfigError, match=r"Unknown topic config name: nope"):
        LogConfig.from_props({"nope": "1"})
    with pytest.raises(InvalidConfigError, match=r"min\.insync\.replicas"):
        LogConfig.from_props({"min.insync.replicas": "0"})
    with pytest.raises(InvalidConfigError, match=r"follower\.replication\.throttled\.replicas"):
        LogConfig.from_props({"follower.replication.throttled.replicas": "0:x"})
    cfg = LogConfig.from_props({"leader.replication.throttled.replicas": "0:1,1:2",
                                "follower.replication.throttled.replicas": "*"})
    assert cfg.leader_replication_throttled_replicas == ("0:1", "1:2")
    assert cfg.follower_replication_throttled_replicas == ("*",)


def test_dynamic_broker_config_validation() -> None:
    """Kafka's DynamicBrokerConfig.validateConfigs, in its order."""
    validate_dynamic_broker_configs({"leader.replication.throttled.rate": "1000",
                                     "log.retention.ms": "5000", "min.insync.replicas": "2"})
    # custom names and dynamic configs odradek does not act on are stored
    validate_dynamic_broker_configs({"no.such.config": "1", "cleanup.policy": "compact",
                                     "sasl.kerberos.min.time.before.relogin": "58000",
                                     "num.io.threads": "16",
                                     "listener.name.external.ssl.keystore.location": "/k"})
    with pytest.raises(NonDynamicConfigError, match=r"Set\(broker.id, zookeeper.connect\)"):
        validate_dynamic_broker_configs({"broker.id": "3", "zookeeper.connect": "x"})
    # Kafka names odradek does not define, and Kafka's own synonyms that are not dynamic
    for name in ("zookeeper.sync.time.ms", "log.retention.hours", "log.roll.hours",
                 "log.message.format.version", "http.listener"):
        with pytest.raises(NonDynamicConfigError, match=r"dynamically: Set\(" + name):
            validate_dynamic_broker_configs({name: "1"})
    with pytest.raises(NonDynamicConfigError, match=r"only per-listener using the listener "
                                                    r"prefix: Set\(ssl.truststore.password\)"):
        validate_dynamic_broker_configs({"ssl.truststore.password": "x"})
    with pytest.raises(ConfigError, match=r"^Invalid value -1 for configuration follower\."
                                          r"replication\.throttled\.rate: Value must be at "
                                          r"least 0$"):
        validate_dynamic_broker_configs({"follower.replication.throttled.rate": "-1"})
    with pytest.raises(ConfigError, match=r"^Invalid value soon for configuration log\."
                                          r"retention\.ms: Not a number of type LONG$"):
        validate_dynamic_broker_configs({"log.retention.ms": "soon"})
    with pytest.raises(ConfigError, match=r"sasl\.login\.refresh\.buffer\.seconds: Not a "
                                          r"number of type SHORT"):
        validate_dynamic_broker_configs({"sasl.login.refresh.buffer.seconds": "40000"})
    with pytest.raises(ConfigError, match=r"Invalid value x for configuration max\.connections"):
        validate_dynamic_broker_configs({"listener.name.internal.max.connections": "x"})
    # per-broker configs at the cluster-wide default; max.connections is cluster-level
    validate_dynamic_broker_configs({"max.connections": "5",
                                     "listener.name.a.max.connections": "5"}, per_broker=False)
    for name in ("listeners", "sasl.kerberos.min.time.before.relogin",
                 "listener.name.a.ssl.keystore.location"):
        with pytest.raises(NonDynamicConfigError, match=r"default cluster level, broker id "
                                                        r"must be specified: Set\("):
            validate_dynamic_broker_configs({name: "1"}, per_broker=False)
    assert "leader.replication.throttled.rate" in DYNAMIC_BROKER_CONFIGS
    assert "listeners" not in DYNAMIC_BROKER_CONFIGS and "listeners" in ALL_DYNAMIC_CONFIGS
    assert "log.retention.hours" not in ALL_DYNAMIC_CONFIGS


def test_password_configs_and_stored_configs() -> None:
    check_password_configs({"log.retention.ms": "1"}, per_broker=True)
    with pytest.raises(ConfigError, match=r"^Password encoder secret not configured$"):
        check_password_configs({"listener.name.a.plain.sasl.jaas.config": "x"}, True)
    with pytest.raises(ConfigError, match=r"only at broker level"):
        check_password_configs({"listener.name.a.ssl.key.password": "x"}, False)
    # what could not have been set is ignored when read back (Kafka's fromPersistentProps)
    stored = {"log.retention.ms": "5", "broker.id": "3", "ssl.keystore.location": "/k",
              "log.retention.bytes": "x", "listeners": "PLAINTEXT://:1", "custom": "y"}
    assert from_persistent_props(stored, per_broker=True) == {
        "log.retention.ms": "5", "listeners": "PLAINTEXT://:1", "custom": "y"}
    assert from_persistent_props(stored, per_broker=False) == {
        "log.retention.ms": "5", "custom": "y"}


def test_precedence_per_broker_over_default_over_static() -> None:
    static = KafkaConfig.from_properties({"log.retention.ms": "100", "broker.id": "1"})
    dynamic = merge_dynamic({"log.retention.ms": "200", "min.insync.replicas": "2"},
                            {"log.retention.ms": "300"})
    assert dynamic == {"log.retention.ms": "300", "min.insync.replicas": "2"}
    eff = effective_config(static, dynamic)
    assert eff.retention_ms == 300 and eff["min.insync.replicas"] == 2
    assert eff.broker_id == 1
    assert effective_config(static, {}) is static
    # a stored value that does not parse is skipped, not fatal
    assert effective_config(static, {"log.retention.ms": "x"}).retention_ms == 100


def test_broker_synonyms_by_source_then_fallback() -> None:
    """Kafka's ConfigHelper.configSynonyms: per source, the config then its fallbacks; Kafka's
    defaults only where not null (log.retention.ms has none: log.retention.hours=168)."""
    syn = broker_synonyms("log.retention.ms", {"log.retention.ms": "3"},
                          {"log.retention.minutes": "2"}, {"log.retention.ms": "1",
                                                           "log.retention.hours": "9"})
    assert syn == [("log.retention.ms", "3", DYNAMIC_BROKER_CONFIG),
                   ("log.retention.minutes", "2", DYNAMIC_DEFAULT_BROKER_CONFIG),
                   ("log.retention.ms", "1", STATIC_BROKER_CONFIG),
                   ("log.retention.hours", "9", STATIC_BROKER_CONFIG),
                   ("log.retention.hours", "168", DEFAULT_CONFIG)]
    assert broker_synonyms("log.roll.hours", {}, {}, {}) == [
        ("log.roll.hours", "168", DEFAULT_CONFIG)]
    assert broker_synonyms("zookeeper.connect", {}, {}, {}) == []


@pytest.mark.parametrize(("key", "per_broker", "default", "static", "expected"), [
    # the entries before the described name are dropped (Kafka's dropWhile)
    ("log.retention.ms", {}, {}, {}, []),
    ("log.retention.ms", {}, {}, {"log.retention.hours": "24"}, []),
    ("log.retention.hours", {"log.retention.ms": "5"}, {}, {},
     [("log.retention.hours", "168", DEFAULT_CONFIG)]),
    ("log.retention.minutes", {"log.retention.ms": "5"}, {"log.retention.minutes": "2"},
     {"log.retention.hours": "1"},
     [("log.retention.minutes", "2", DYNAMIC_DEFAULT_BROKER_CONFIG),
      ("log.retention.hours", "1", STATIC_BROKER_CONFIG),
      ("log.retention.hours", "168", DEFAULT_CONFIG)]),
    ("log.roll.ms", {}, {}, {}, []),
    ("log.roll.hours", {"log.roll.ms": "9"}, {}, {},
     [("log.roll.hours", "168", DEFAULT_CONFIG)]),
    ("log.roll.jitter.ms", {}, {}, {"log.roll.jitter.hours": "1"}, []),
    ("log.roll.jitter.hours", {}, {}, {}, [("log.roll.jitter.hours", "0", DEFAULT_CONFIG)]),
    ("log.flush.interval.ms", {}, {}, {}, []),
    ("log.flush.interval.ms", {"log.flush.interval.ms": "7"}, {}, {},
     [("log.flush.interval.ms", "7", DYNAMIC_BROKER_CONFIG),
      ("log.flush.scheduler.interval.ms", "9223372036854775807", DEFAULT_CONFIG)]),
    ("log.flush.scheduler.interval.ms", {"log.flush.interval.ms": "7"}, {}, {},
     [("log.flush.scheduler.interval.ms", "9223372036854775807", DEFAULT_CONFIG)]),
    # a listener override and its base config; the mechanism configs' base is the config
    ("listener.name.a.ssl.keystore.type", {"listener.name.a.ssl.keystore.type": "PKCS12"}, {},
     {"ssl.keystore.type": "JKS"},
     [("listener.name.a.ssl.keystore.type", "PKCS12", DYNAMIC_BROKER_CONFIG),
      ("ssl.keystore.type", "JKS", STATIC_BROKER_CONFIG),
      ("ssl.keystore.type", "JKS", DEFAULT_CONFIG)]),
    ("listener.name.a.plain.sasl.jaas.config", {}, {},
     {"listener.name.a.plain.sasl.jaas.config": "x", "sasl.jaas.config": "y"},
     [("listener.name.a.plain.sasl.jaas.config", "x", STATIC_BROKER_CONFIG),
      ("sasl.jaas.config", "y", STATIC_BROKER_CONFIG)]),
    ("ssl.keystore.type", {}, {}, {}, [("ssl.keystore.type", "JKS", DEFAULT_CONFIG)]),
    # DynamicConfig.Broker's rates: no KafkaConfig default
    ("leader.replication.throttled.rate", {}, {"leader.replication.throttled.rate": "5"}, {},
     [("leader.replication.throttled.rate", "5", DYNAMIC_DEFAULT_BROKER_CONFIG)]),
    ("leader.replication.throttled.rate", {}, {}, {}, []),
])
def test_broker_synonym_chains_as_kafka(key: str, per_broker: dict[str, str],
                                        default: dict[str, str], static: dict[str, str],
                                        expected: list[tuple[str, str, int]]) -> None:
    """Kafka's ConfigHelper.configSynonyms over DynamicBrokerConfig.brokerConfigSynonyms."""
    assert broker_synonyms(key, per_broker, default, static) == expected


def test_topic_entries_sources_and_synonyms() -> None:
    static = KafkaConfig.from_properties({"log.segment.bytes": "2000000"})
    bcm = SimpleNamespace(broker_configs={}, default_configs={"log.retention.ms": "5000"},
                          effective=effective_config(static, {"log.retention.ms": "5000"}))
    entries = {e.name: e for e in topic_config_entries({"max.message.bytes": "100"}, bcm,
                                                       static)}
    e = entries["max.message.bytes"]
    assert (e.value, e.source) == ("100", DYNAMIC_TOPIC_CONFIG)
    assert e.synonyms[0] == ("max.message.bytes", "100", DYNAMIC_TOPIC_CONFIG)
    assert e.synonyms[-1][2] == DEFAULT_CONFIG
    e = entries["retention.ms"]
    assert (e.value, e.source) == ("5000", DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert e.synonyms == [("log.retention.ms", "5000", DYNAMIC_DEFAULT_BROKER_CONFIG),
                          ("log.retention.hours", "168", DEFAULT_CONFIG)]
    e = entries["segment.bytes"]
    assert (e.value, e.source) == ("2000000", STATIC_BROKER_CONFIG)
    # LogConfig.TopicConfigSynonyms: no synonyms before log.roll.ms / log.flush.interval.ms /
    # log.roll.jitter.ms, which have no default; the others' broker config
    for name in ("segment.ms", "flush.ms", "segment.jitter.ms"):
        assert (entries[name].source, entries[name].synonyms) == (DEFAULT_CONFIG, []), name
    assert entries["preallocate"].synonyms == [("log.preallocate", "false", DEFAULT_CONFIG)]
    assert entries["message.timestamp.difference.max.ms"].synonyms == [
        ("log.message.timestamp.difference.max.ms", "9223372036854775807", DEFAULT_CONFIG)]
    e = entries["min.insync.replicas"]
    assert (e.value, e.source) == ("1", DEFAULT_CONFIG)
    assert entries["leader.replication.throttled.replicas"].value == ""


def test_tool_parses_add_config_with_lists() -> None:
    assert tool.parse_add_config("a=1,b=[x,y],c=z") == {"a": "1", "b": "x,y", "c": "z"}
    assert tool.parse_add_config("leader.replication.throttled.replicas=[0:1,1:2]") == {
        "leader.replication.throttled.replicas": "0:1,1:2"}
    with pytest.raises(ToolError, match=r"key=val"):
        tool.parse_add_config("a")
    assert tool.parse_delete_config(["a,b", "c"]) == ["a", "b", "c"]


def test_tool_formats_entries_like_kafka() -> None:
    entry = SimpleNamespace(name="retention.ms", value="1000", is_sensitive=False,
                            synonyms=[("retention.ms", "1000", 1),
                                      ("log.retention.ms", "604800000", 5)])
    assert tool.format_entry(entry) == (
        "  retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000, "
        "DEFAULT_CONFIG:log.retention.ms=604800000}")


def _args(*argv: str) -> argparse.Namespace:
    """The tool's own parser, so the test sees what `odradek configs ARGV` gets."""
    parser = argparse.ArgumentParser()
    tool.add_parser(parser.add_subparsers())
    return parser.parse_args(["configs", *argv])


@pytest.mark.parametrize(("argv", "message"), [
    ((), "exactly one action"),
    (("--describe", "--alter"), "exactly one action"),
    (("--describe", "--entity-type", "ips"), "Invalid entity type ips"),
    (("--describe", "--entity-type", "topics", "--entity-type", "brokers"),
     "Only one entity type"),
    (("--describe", "--zookeeper", "zk:2181", "--bootstrap-server", "",
      "--entity-type", "topics"), "--zookeeper is only supported with --entity-type users"),
    (("--describe", "--entity-type", "users", "--zookeeper", "zk:2181"), "Only one of"),
    (("--describe", "--entity-type", "topics", "--entity-default"),
     "not supported with --entity-type topics"),
    (("--alter", "--entity-type", "topics", "--entity-name", "t"),
     "At least one of --add-config"),
    (("--alter", "--entity-type", "topics", "--add-config", "a=1"),
     "an entity name must be specified"),
    (("--describe", "--entity-type", "brokers", "--entity-name", "x"), "valid integer"),
    (("--describe", "--entity-type", "topics", "--bootstrap-server", ""), "bootstrap-server"),
])
def test_tool_rejects_bad_command_lines(argv: tuple[str, ...], message: str,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert tool.main(_args("--bootstrap-server", "h:1", *argv)) == 1
    assert message in capsys.readouterr().err
