"""Configs at run time through real clients against a broker process (S-6.3):
confluent-kafka's AdminClient incremental_alter_configs / alter_configs / describe_configs,
kafka-python's alter_configs, and the `odradek configs` tool (kafka-configs) as users run it.
Each change is checked by its effect, not only by the answer: a lowered max.message.bytes makes
the next produce fail with MESSAGE_TOO_LARGE."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from .clients import create_topic, wait_for_leaders
from .conftest import BrokerProcess, unique_topic

pytestmark = [pytest.mark.interop, pytest.mark.timeout(120)]


def wait_until(predicate: Callable[[], object], timeout: float = 15,
               what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def produce_error(bs: str, topic: str, size: int) -> int | None:
    """The error code of one produce of `size` bytes (None: delivered)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bs, "message.max.bytes": 10_000_000,
                  "message.send.max.retries": 0, "linger.ms": 0})
    out: list[object] = []
    # keyed: the tests make topics compacted, which refuse records without a key
    p.produce(topic, b"x" * size, key=b"k", partition=0,
              on_delivery=lambda err, _m: out.append(err))
    p.flush(15)
    assert out, "no delivery report"
    err = out[0]
    return None if err is None else err.code()  # type: ignore[attr-defined]


def test_confluent_incremental_alter_describe(broker: BrokerProcess) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ConfigSource,
    )

    bs = broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bs})
    topic = unique_topic("cfg-ck")
    create_topic(bs, topic, 1)
    wait_for_leaders(bs, topic, 1)
    assert produce_error(bs, topic, 5000) is None

    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("max.message.bytes", "2000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact",
                    incremental_operation=AlterConfigOpType.APPEND)])
    admin.incremental_alter_configs([res])[res].result(15)
    entries = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)])
    got = next(iter(entries.values())).result(15)
    assert got["max.message.bytes"].value == "2000"
    assert got["max.message.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert got["cleanup.policy"].value == "delete,compact"
    assert got["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    wait_until(lambda: produce_error(bs, topic, 5000) == KafkaError.MSG_SIZE_TOO_LARGE,
               what="max.message.bytes applied")

    # DELETE restores the default
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("max.message.bytes", None, incremental_operation=AlterConfigOpType.DELETE)])
    admin.incremental_alter_configs([res])[res].result(15)
    wait_until(lambda: produce_error(bs, topic, 5000) is None, what="max.message.bytes removed")

    # errors with Kafka's codes
    bad = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("no.such.config", "1", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as exc:
        admin.incremental_alter_configs([bad])[bad].result(15)
    assert exc.value.args[0].code() == KafkaError.INVALID_CONFIG
    missing = ConfigResource(ConfigResource.Type.TOPIC, unique_topic("none"),
                             incremental_configs=[ConfigEntry(
                                 "retention.ms", "1",
                                 incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as exc:
        admin.incremental_alter_configs([missing])[missing].result(15)
    assert exc.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    # broker configs: the KIP-73 rate on broker 0 (per-broker) and cluster-wide defaults
    b0 = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
        ConfigEntry("leader.replication.throttled.rate", "1048576",
                    incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([b0])[b0].result(15)
    got = admin.describe_configs([ConfigResource(ConfigResource.Type.BROKER, "0")])
    entry = next(iter(got.values())).result(15)["leader.replication.throttled.rate"]
    assert entry.value == "1048576"
    assert entry.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    ro = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
        ConfigEntry("log.dirs", "/tmp/x", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as exc:
        admin.incremental_alter_configs([ro])[ro].result(15)
    assert exc.value.args[0].code() == KafkaError.INVALID_REQUEST
    b0 = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
        ConfigEntry("leader.replication.throttled.rate", None,
                    incremental_operation=AlterConfigOpType.DELETE)])
    admin.incremental_alter_configs([b0])[b0].result(15)


def test_confluent_describe_configs_reports_the_2_8_iv1_versions(broker: BrokerProcess) -> None:
    """A 2.8 broker's versions (docs/design.md, "Protocol versions"): the topic's
    message.format.version defaults from the broker's log.message.format.version, and
    inter.broker.protocol.version is read-only, all 2.8-IV1."""
    from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource

    bs = broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bs})
    topic = unique_topic("cfg-versions")
    create_topic(bs, topic, 1)
    wait_for_leaders(bs, topic, 1)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    got = admin.describe_configs([resource])[resource].result(15)
    entry = got["message.format.version"]
    assert entry.value == "2.8-IV1"
    assert entry.source == ConfigSource.DEFAULT_CONFIG.value
    resource = ConfigResource(ConfigResource.Type.BROKER, "0")
    got = admin.describe_configs([resource])[resource].result(15)
    for name in ("inter.broker.protocol.version", "log.message.format.version"):
        assert got[name].value == "2.8-IV1", name
        assert got[name].source == ConfigSource.DEFAULT_CONFIG.value, name
        assert got[name].is_read_only, name


def test_confluent_alter_configs_replaces(broker: BrokerProcess) -> None:
    from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource

    bs = broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bs})
    topic = unique_topic("cfg-ck-alter")
    create_topic(bs, topic, 1)
    wait_for_leaders(bs, topic, 1)
    res = ConfigResource(ConfigResource.Type.TOPIC, topic,
                         set_config={"retention.ms": "3600000", "segment.bytes": "1000000"})
    admin.alter_configs([res])[res].result(15)
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config={"retention.ms": "60000"})
    admin.alter_configs([res])[res].result(15)  # replaces the whole set: segment.bytes reverts
    got = next(iter(admin.describe_configs(
        [ConfigResource(ConfigResource.Type.TOPIC, topic)]).values())).result(15)
    assert got["retention.ms"].value == "60000"
    assert got["segment.bytes"].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert got["segment.bytes"].value == "1073741824"


def test_kafka_python_alter_configs(broker: BrokerProcess) -> None:
    from confluent_kafka import KafkaError
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource, ConfigResourceType

    bs = broker.bootstrap
    topic = unique_topic("cfg-kp")
    admin = KafkaAdminClient(bootstrap_servers=bs)
    try:
        create_topic(bs, topic, 1)
        wait_for_leaders(bs, topic, 1)
        # AlterConfigs (incremental=False) and IncrementalAlterConfigs (the default)
        out = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                                  configs={"max.message.bytes": "1500"})],
                                  incremental=False)
        assert out == {"topic": {topic: "OK"}}
        out = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                                  configs={"retention.ms": "60000"})])
        assert out == {"topic": {topic: "OK"}}
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        got = {k: (v["value"], v["config_source"])
               for k, v in described["topic"][topic].items()}
        assert got == {"max.message.bytes": ("1500", "DYNAMIC_TOPIC_CONFIG"),
                       "retention.ms": ("60000", "DYNAMIC_TOPIC_CONFIG")}
        wait_until(lambda: produce_error(bs, topic, 3000) == KafkaError.MSG_SIZE_TOO_LARGE,
                   what="max.message.bytes applied")
        out = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                                  configs={"max.message.bytes": "soon"})])
        text = str(out["topic"][topic])
        assert "Error 42" in text and "Invalid value soon for configuration " \
            "max.message.bytes: Not a number of type INT" in text
    finally:
        admin.close()


def configs_tool(*args: str) -> subprocess.CompletedProcess[str]:
    from odradek.chaos.environment.processes import _odradek_command

    return subprocess.run([*_odradek_command(), "configs", *args], capture_output=True,
                          text=True, timeout=60)


def test_configs_tool(broker: BrokerProcess, tmp_path: Path) -> None:
    bs = broker.bootstrap
    topic = unique_topic("cfg-tool")
    create_topic(bs, topic, 1)
    wait_for_leaders(bs, topic, 1)
    base = ["--bootstrap-server", bs]

    r = configs_tool(*base, "--entity-type", "topics", "--entity-name", topic, "--alter",
                     "--add-config", "retention.ms=1000,cleanup.policy=[delete,compact]")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"Completed updating config for topic {topic}."
    r = configs_tool(*base, "--entity-type", "topics", "--entity-name", topic, "--describe")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f"Dynamic configs for topic {topic} are:"
    assert "  cleanup.policy=delete,compact sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:" \
           "cleanup.policy=delete,compact, DEFAULT_CONFIG:log.cleanup.policy=delete}" in lines
    assert "  retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000}" \
        in lines
    assert len(lines) == 3

    r = configs_tool(*base, "--entity-type", "topics", "--entity-name", topic, "--alter",
                     "--delete-config", "retention.ms")
    assert r.returncode == 0, r.stderr
    r = configs_tool(*base, "--entity-type", "topics", "--entity-name", topic, "--describe",
                     "--all")
    assert r.stdout.splitlines()[0] == f"All configs for topic {topic} are:"
    # Kafka drops the synonyms before log.retention.ms / log.roll.ms, which have no default
    assert "  retention.ms=604800000 sensitive=false synonyms={}" in r.stdout.splitlines()
    assert "  segment.ms=604800000 sensitive=false synonyms={}" in r.stdout.splitlines()

    # brokers: cluster-wide default and per broker
    r = configs_tool(*base, "--entity-type", "brokers", "--entity-default", "--alter",
                     "--add-config", "follower.replication.throttled.rate=5000000")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "Completed updating default config for brokers in the cluster."
    r = configs_tool(*base, "--entity-type", "brokers", "--entity-default", "--describe")
    assert r.stdout.splitlines() == [
        "Default configs for brokers in the cluster are:",
        "  follower.replication.throttled.rate=5000000 sensitive=false synonyms="
        "{DYNAMIC_DEFAULT_BROKER_CONFIG:follower.replication.throttled.rate=5000000}"]
    r = configs_tool(*base, "--entity-type", "brokers", "--entity-name", "0", "--alter",
                     "--add-config", "follower.replication.throttled.rate=7000000")
    assert r.stdout.strip() == "Completed updating config for broker 0.", r.stderr
    r = configs_tool(*base, "--entity-type", "brokers", "--entity-name", "0", "--describe")
    assert r.stdout.splitlines() == [
        "Dynamic configs for broker 0 are:",
        "  follower.replication.throttled.rate=7000000 sensitive=false synonyms="
        "{DYNAMIC_BROKER_CONFIG:follower.replication.throttled.rate=7000000, "
        "DYNAMIC_DEFAULT_BROKER_CONFIG:follower.replication.throttled.rate=5000000}"]
    for target in (["--entity-default"], ["--entity-name", "0"]):
        r = configs_tool(*base, "--entity-type", "brokers", *target, "--alter",
                         "--delete-config", "follower.replication.throttled.rate")
        assert r.returncode == 0, r.stderr

    # failures: a clear message and exit status 1, never a traceback
    r = configs_tool(*base, "--entity-type", "topics", "--entity-name", topic, "--alter",
                     "--add-config", "no.such.config=1")
    assert r.returncode == 1
    assert "Error while executing config command with args" in r.stderr
    assert "InvalidConfigurationException: Unknown topic config name: no.such.config" in \
        r.stderr
    assert "Traceback" not in r.stderr
    r = configs_tool(*base, "--entity-type", "topics", "--entity-name", topic, "--alter",
                     "--delete-config", "segment.ms")
    assert r.returncode == 1 and "Invalid config(s): segment.ms" in r.stderr
    r = configs_tool(*base, "--entity-type", "brokers", "--entity-name", "0", "--alter",
                     "--add-config", "broker.id=5")
    assert r.returncode == 1
    assert "InvalidRequestException" in r.stderr and "broker.id" in r.stderr
    r = configs_tool(*base, "--entity-type", "topics", "--describe", "--alter")
    assert r.returncode == 1 and "exactly one action" in r.stderr
    assert "Traceback" not in r.stderr
    r = configs_tool(*base, "--entity-type", "topics", "--entity-name", topic, "--describe")
    assert r.stdout.splitlines() == [
        f"Dynamic configs for topic {topic} are:",
        "  cleanup.policy=delete,compact sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:"
        "cleanup.policy=delete,compact, DEFAULT_CONFIG:log.cleanup.policy=delete}"]

    # Kafka's shortcuts --topic / --broker / --broker-defaults (were "unrecognized arguments")
    r = configs_tool(*base, "--topic", topic, "--describe")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        f"Dynamic configs for topic {topic} are:",
        "  cleanup.policy=delete,compact sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:"
        "cleanup.policy=delete,compact, DEFAULT_CONFIG:log.cleanup.policy=delete}"]
    r = configs_tool(*base, "--broker-defaults", "--alter", "--add-config",
                     "leader.replication.throttled.rate=6000000")
    assert r.stdout.strip() == "Completed updating default config for brokers in the cluster.", \
        r.stderr
    r = configs_tool(*base, "--broker", "0", "--describe", "--all")
    # the dynamic-only rates have no Kafka default (DynamicConfig.Broker, not KafkaConfig)
    assert "  leader.replication.throttled.rate=6000000 sensitive=false synonyms={" \
           "DYNAMIC_DEFAULT_BROKER_CONFIG:leader.replication.throttled.rate=6000000}" in \
        r.stdout.splitlines(), r.stdout
    r = configs_tool(*base, "--broker-defaults", "--alter", "--delete-config",
                     "leader.replication.throttled.rate")
    assert r.returncode == 0, r.stderr
    r = configs_tool(*base, "--topic", topic, "--broker", "0", "--describe")
    assert r.returncode == 1 and "Only one entity type may be specified" in r.stderr


def test_dynamic_configs_survive_a_restart(broker_factory: Callable[..., BrokerProcess]
                                           ) -> None:
    """Dynamic broker and topic configs live in the coordination store: a restarted broker
    process applies them again (KIP-226)."""
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ConfigSource,
    )

    b = broker_factory()
    topic = unique_topic("cfg-restart")
    create_topic(b.bootstrap, topic, 1)
    wait_for_leaders(b.bootstrap, topic, 1)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    res = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
        ConfigEntry("message.max.bytes", "2000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(15)
    wait_until(lambda: produce_error(b.bootstrap, topic, 4000) == KafkaError.MSG_SIZE_TOO_LARGE,
               what="dynamic message.max.bytes applied")
    b.restart()
    wait_for_leaders(b.bootstrap, topic, 1)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    got = next(iter(admin.describe_configs(
        [ConfigResource(ConfigResource.Type.TOPIC, topic)]).values())).result(15)
    assert got["max.message.bytes"].value == "2000"
    assert got["max.message.bytes"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    assert produce_error(b.bootstrap, topic, 4000) == KafkaError.MSG_SIZE_TOO_LARGE


def _broker_alter_error(bs: str, admin: object, name: str, configs: dict[str, str | None],
                        validate_only: bool = False) -> tuple[int, str] | None:
    """IncrementalAlterConfigs SET (DELETE for None) on broker resource `name`: None if it
    succeeded, else (error code, message). The cluster-wide default ("") through odradek's
    client: neither confluent-kafka nor kafka-python can name it."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    if name == "":
        from odradek.client import Admin
        from odradek.client.types import ConfigResource as Resource

        with Admin({"bootstrap.servers": bs}) as odradek_admin:
            out = odradek_admin.incremental_alter_configs(
                {Resource("broker", ""): configs}, validate_only=validate_only,
                raise_errors=False)
        (found,) = out.values()
        if found is None:
            return None
        return found.code, str(found).split(f"{found.name.upper()}: ", 1)[1]

    res = ConfigResource(ConfigResource.Type.BROKER, name, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET if v is not None
                    else AlterConfigOpType.DELETE) for k, v in configs.items()])
    try:
        admin.incremental_alter_configs(  # type: ignore[attr-defined]
            [res], validate_only=validate_only)[res].result(15)
    except KafkaException as exc:
        err = exc.args[0]
        return err.code(), err.str()
    return None


def test_broker_alter_configs_refuses_only_what_kafka_refuses(broker: BrokerProcess) -> None:
    """Kafka's DynamicBrokerConfig.validate: a name Kafka cannot change at run time, a security
    config without its listener prefix, a value of the wrong type and a per-broker config at
    the cluster-wide default are refused; every other name (a dynamic config odradek does not
    act on, a custom config) is stored. librdkafka's admin test sets
    sasl.kerberos.min.time.before.relogin on a broker and expects NO_ERROR."""
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient

    bs = broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bs})
    for validate_only in (True, False):
        assert _broker_alter_error(bs, admin, "0", {
            "sasl.kerberos.min.time.before.relogin": "58000", "cleanup.policy": "compact",
            "listener.name.plaintext.max.connections": "1000"}, validate_only) is None
    assert _broker_alter_error(bs, admin, "", {"some.plugin.setting": "x"}) is None

    def refused(name: str, configs: dict[str, str | None], message: str,
                validate_only: bool = False) -> None:
        got = _broker_alter_error(bs, admin, name, configs, validate_only)
        assert got == (KafkaError.INVALID_REQUEST, "Invalid config value for resource "
                       f"ConfigResource(type=BROKER, name='{name}'): {message}"), got

    for validate_only in (True, False):
        refused("0", {"log.retention.hours": "24"},
                "Cannot update these configs dynamically: Set(log.retention.hours)",
                validate_only)
        refused("0", {"ssl.keystore.location": "/tmp/k.jks"},
                "These security configs can be dynamically updated only per-listener using "
                "the listener prefix: Set(ssl.keystore.location)", validate_only)
        refused("0", {"log.retention.ms": "soon"},
                "Invalid value soon for configuration log.retention.ms: Not a number of type "
                "LONG", validate_only)
        refused("0", {"listener.name.plaintext.max.connections": "-1"},
                "Invalid value -1 for configuration max.connections: Value must be at least 0",
                validate_only)
        refused("", {"sasl.kerberos.min.time.before.relogin": "58000"},
                "Cannot update these configs at default cluster level, broker id must be "
                "specified: Set(sasl.kerberos.min.time.before.relogin)", validate_only)
    # password configs are stored encrypted with password.encoder.secret: not set here
    jaas = {"listener.name.plaintext.plain.sasl.jaas.config": "x required;"}
    assert _broker_alter_error(bs, admin, "0", jaas, validate_only=True) is None
    refused("0", jaas, "Password encoder secret not configured")

    assert _broker_alter_error(bs, admin, "0", {
        "sasl.kerberos.min.time.before.relogin": None, "cleanup.policy": None,
        "listener.name.plaintext.max.connections": None}) is None
    assert _broker_alter_error(bs, admin, "", {"some.plugin.setting": None}) is None


def test_kafka_python_alter_configs_custom_broker_config(broker: BrokerProcess) -> None:
    """A broker config name Kafka does not define is a custom config: AlterConfigs stores it
    (another client's admin test sets cleanup.policy on a broker and expects success).
    raise_on_unknown=False: kafka-python otherwise checks the names client-side against the
    broker's described dynamic configs, which do not list a custom name before it is set."""
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource, ConfigResourceType

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        for incremental in (False, True):
            out = admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, "0",
                                                      configs={"cleanup.policy": "compact"})],
                                      incremental=incremental, raise_on_unknown=False)
            assert out == {"broker": {"0": "OK"}}, out
        out = admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, "0",
                                                  configs={"log.dirs": "/tmp/x"})],
                                  incremental=False, raise_on_unknown=False)
        text = str(out["broker"]["0"])
        assert "Error 42" in text and "Cannot update these configs dynamically: Set(log.dirs)" \
            in text, text
        out = admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, "0", configs={})],
                                  incremental=False, raise_on_unknown=False)
        assert out == {"broker": {"0": "OK"}}, out
    finally:
        admin.close()


def test_describe_configs_shows_stored_broker_configs_as_kafka(broker: BrokerProcess) -> None:
    """Kafka's ConfigHelper lists every name a broker was given, custom ones included: a name
    of unknown type is sensitive (value hidden) and read-only; a dynamic config odradek does
    not act on shows its stored value; the dynamic-only replication rates are listed once
    set; passwords are sensitive."""
    from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource

    from odradek.client import Admin
    from odradek.client.types import ConfigResource as Resource

    bs = broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bs})
    b0 = ConfigResource(ConfigResource.Type.BROKER, "0")

    def describe() -> dict[str, object]:
        return admin.describe_configs([b0])[b0].result(15)  # type: ignore[no-any-return]

    before = describe()
    assert "leader.replication.throttled.rate" not in before
    assert before["ssl.keystore.password"].is_sensitive  # type: ignore[attr-defined]
    assert not before["log.retention.ms"].is_sensitive  # type: ignore[attr-defined]
    assert _broker_alter_error(bs, admin, "0", {
        "cleanup.policy": "compact", "sasl.kerberos.min.time.before.relogin": "58000",
        "leader.replication.throttled.rate": "1000000"}) is None
    assert _broker_alter_error(bs, admin, "", {"my.plugin.setting": "y"}) is None
    try:
        got = describe()
        custom = got["cleanup.policy"]
        assert (custom.value, custom.is_sensitive, custom.is_read_only,  # type: ignore
                custom.source) == (None, True, True, ConfigSource.DYNAMIC_BROKER_CONFIG.value)
        kerberos = got["sasl.kerberos.min.time.before.relogin"]
        assert (kerberos.value, kerberos.is_sensitive, kerberos.is_read_only,  # type: ignore
                kerberos.source) == ("58000", False, False,
                                     ConfigSource.DYNAMIC_BROKER_CONFIG.value)
        rate = got["leader.replication.throttled.rate"]
        assert (rate.value, rate.is_sensitive, rate.is_read_only) == (  # type: ignore
            "1000000", False, True)  # not in Kafka's AllDynamicConfigs
        default = got["my.plugin.setting"]
        assert (default.value, default.source) == (  # type: ignore[attr-defined]
            None, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
        with Admin({"bootstrap.servers": bs}) as odradek_admin:
            found = odradek_admin.describe_configs([Resource("broker", "")])
        (entries,) = found.values()
        assert {e.name: (e.value, e.is_sensitive) for e in entries.values()} == {
            "my.plugin.setting": (None, True)}
    finally:
        assert _broker_alter_error(bs, admin, "0", {
            "cleanup.policy": None, "sasl.kerberos.min.time.before.relogin": None,
            "leader.replication.throttled.rate": None}) is None
        assert _broker_alter_error(bs, admin, "", {"my.plugin.setting": None}) is None


def test_describe_configs_synonyms_as_kafka(broker_factory: Callable[..., BrokerProcess]
                                            ) -> None:
    """Kafka's ConfigHelper.configSynonyms lists a config's synonyms (LogConfig's
    TopicConfigSynonyms, DynamicBrokerConfig.brokerConfigSynonyms) by source and drops those
    before the described name: a topic's retention.ms has none while log.retention.ms is unset
    (log.retention.ms has no default, the log.retention.hours entries are dropped), even with
    log.retention.hours in server.properties (then also described DEFAULT_CONFIG, as Kafka
    does). kafka-python: confluent-kafka keeps synonyms by name, one per name."""
    from confluent_kafka.admin import AdminClient, ConfigResource
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource as KpResource
    from kafka.admin import ConfigResourceType

    b = broker_factory(overrides={"log.retention.hours": "24", "log.roll.jitter.hours": "1"})
    bs = b.bootstrap
    topic = unique_topic("cfg-syn")
    create_topic(bs, topic, 1)
    wait_for_leaders(bs, topic, 1)
    default, static, dynamic = "DEFAULT_CONFIG", "STATIC_BROKER_CONFIG", "DYNAMIC_BROKER_CONFIG"
    kp = KafkaAdminClient(bootstrap_servers=bs)

    def describe(kind: ConfigResourceType, name: str, include: bool = True
                 ) -> dict[str, tuple[str | None, str, list[tuple[str, str | None, str]]]]:
        found = kp.describe_configs([KpResource(kind, name)], include_synonyms=include,
                                    config_filter="all")
        (entries,) = next(iter(found.values())).values()
        return {k: (e["value"], e["config_source"],
                    [(s["name"], s["value"], s["source"]) for s in e["synonyms"]])
                for k, e in entries.items()}

    try:
        got = describe(ConfigResourceType.TOPIC, topic)
        assert got["retention.ms"] == ("86400000", default, [])
        for name in ("segment.ms", "flush.ms"):
            assert got[name][2] == [], name
        # log.roll.jitter.ms unset: the hours are dropped
        assert got["segment.jitter.ms"] == ("3600000", default, [])
        assert got["preallocate"][2] == [("log.preallocate", "false", default)]
        assert got["message.downconversion.enable"][2] == [
            ("log.message.downconversion.enable", "true", default)]
        assert got["segment.bytes"][2] == [("log.segment.bytes", "1073741824", default)]

        got = describe(ConfigResourceType.BROKER, "0")
        assert got["log.retention.hours"][2] == [("log.retention.hours", "24", static),
                                                 ("log.retention.hours", "168", default)]
        assert got["log.retention.ms"] == (None, default, [])
        assert got["log.retention.minutes"] == (None, default, [])
        assert got["log.roll.jitter.hours"][2] == [("log.roll.jitter.hours", "1", static),
                                                   ("log.roll.jitter.hours", "0", default)]
        assert got["log.flush.scheduler.interval.ms"][2] == [
            ("log.flush.scheduler.interval.ms", "9223372036854775807", default)]

        # a dynamic log.retention.ms: first on the topic's and the broker's log.retention.ms,
        # the entries after it kept; not on log.retention.hours
        after = [("log.retention.ms", "7200000", dynamic), ("log.retention.hours", "24", static),
                 ("log.retention.hours", "168", default)]
        out = kp.alter_configs([KpResource(ConfigResourceType.BROKER, "0",
                                           configs={"log.retention.ms": "7200000"})],
                               incremental=True, raise_on_unknown=False)
        assert out == {"broker": {"0": "OK"}}, out
        for include in (True, False):
            got = describe(ConfigResourceType.TOPIC, topic, include)
            assert got["retention.ms"] == ("7200000", dynamic, after if include else [])
        got = describe(ConfigResourceType.BROKER, "0")
        assert got["log.retention.ms"] == ("7200000", dynamic, after)
        assert got["log.retention.hours"][2] == [("log.retention.hours", "24", static),
                                                 ("log.retention.hours", "168", default)]
    finally:
        kp.close()
    # confluent-kafka (librdkafka asks for synonyms): none for retention.ms's default either
    admin = AdminClient({"bootstrap.servers": bs})
    other = unique_topic("cfg-syn-ck")
    create_topic(bs, other, 1)
    res = ConfigResource(ConfigResource.Type.TOPIC, other)
    entry = admin.describe_configs([res])[res].result(15)["segment.ms"]
    assert (entry.value, list(entry.synonyms)) == ("604800000", [])
