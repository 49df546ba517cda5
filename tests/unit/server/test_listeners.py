"""Named listeners in the broker's config (Kafka's validation), listener-prefixed security
configs, and the per-listener endpoints of the metadata cache and the Metadata answer."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from odradek.protocol import interbroker as ib
from odradek.protocol.codec import request_class
from odradek.security.connector import ClientSecurity
from odradek.security.protocol import SecurityProtocol
from odradek.server.apis.metadata import build_response
from odradek.server.configs.config import ConfigError, Endpoint, KafkaConfig
from odradek.server.metadata_cache import BrokerInfo, ListenerEndpoint, MetadataCache
from tests.tls_certs import Certs


def cfg(**props: str) -> KafkaConfig:
    return KafkaConfig.from_properties({k.replace("__", "."): v for k, v in props.items()})


def test_security_protocols() -> None:
    assert [p.id for p in SecurityProtocol] == [0, 1, 2, 3]
    assert SecurityProtocol.SASL_SSL.uses_ssl and SecurityProtocol.SASL_SSL.uses_sasl
    assert not SecurityProtocol.SSL.uses_sasl and not SecurityProtocol.PLAINTEXT.uses_ssl
    assert SecurityProtocol.for_name("sasl_plaintext") is SecurityProtocol.SASL_PLAINTEXT
    assert SecurityProtocol.for_id(1) is SecurityProtocol.SSL
    assert SecurityProtocol.SSL == "SSL" and str(SecurityProtocol.SSL) == "SSL"


def test_several_listeners_with_the_default_map(certs: Certs) -> None:
    c = KafkaConfig.from_properties({
        "listeners": "PLAINTEXT://:9092,SSL://:9093", **certs.broker_ssl()})
    assert c.listeners == [Endpoint("PLAINTEXT", "", 9092), Endpoint("SSL", "", 9093)]
    assert c.listener_security_protocol_map == {"PLAINTEXT": SecurityProtocol.PLAINTEXT,
                                                "SSL": SecurityProtocol.SSL}
    assert c.inter_broker_listener_name == "PLAINTEXT"
    assert c.inter_broker_client_security() is None


def test_custom_listener_names(certs: Certs) -> None:
    c = KafkaConfig.from_properties({
        "listeners": "INTERNAL://:9092,EXTERNAL://:9093",
        "advertised.listeners": "INTERNAL://broker0:9092,EXTERNAL://public.example:19093",
        "listener.security.protocol.map": "INTERNAL:SSL,EXTERNAL:SSL",
        "inter.broker.listener.name": "internal",
        **certs.broker_ssl("listener.name.internal."),
        **certs.broker_ssl("listener.name.external."),
        "listener.name.internal.ssl.client.auth": "required",
        "listener.name.internal.ssl.endpoint.identification.algorithm": ""})
    assert c.inter_broker_listener_name == "INTERNAL"
    assert c.inter_broker_security_protocol is SecurityProtocol.SSL
    assert c.listener_props("INTERNAL")["ssl.client.auth"] == "required"
    assert c.listener_props("EXTERNAL")["ssl.client.auth"] == "none"
    sec = c.inter_broker_client_security()
    assert isinstance(sec, ClientSecurity)
    assert sec.protocol is SecurityProtocol.SSL and sec.ssl_context is not None
    assert not sec.check_hostname  # the prefixed empty algorithm wins
    assert c.inter_broker_client_security() is sec  # built once
    assert c.unknown_keys == []


def test_prefixed_value_overrides_the_unprefixed(certs: Certs) -> None:
    c = KafkaConfig.from_properties({
        "listeners": "PLAINTEXT://:9092,SSL://:9093", **certs.broker_ssl(),
        "ssl.client.auth": "requested", "listener.name.ssl.ssl.client.auth": "required",
        "ssl.principal.mapping.rules": "RULE:^CN=(.*?),.*$/$1/",
        "listener.name.ssl.ssl.principal.mapping.rules": "DEFAULT"})
    assert c.listener_props("SSL")["ssl.client.auth"] == "required"
    assert c.listener_props("PLAINTEXT")["ssl.client.auth"] == "requested"
    assert c.principal_mapper("SSL").get_name("CN=a,O=b") == "CN=a,O=b"
    assert c.principal_mapper("PLAINTEXT").get_name("CN=a,O=b") == "a"


def test_sasl_jaas_config_lookup() -> None:
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
            'username="admin" password="secret" user_admin="secret";')
    c = KafkaConfig.from_properties({
        "listeners": "SASL_PLAINTEXT://:9092",
        "security.inter.broker.protocol": "SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas})
    assert c.sasl_jaas_config("SASL_PLAINTEXT", "PLAIN") == jaas
    assert c.sasl_jaas_config("SASL_PLAINTEXT", "SCRAM-SHA-256") is None
    assert c.sasl_enabled_mechanisms("SASL_PLAINTEXT") == ["PLAIN", "SCRAM-SHA-256"]
    assert c.unknown_keys == []


@pytest.mark.parametrize(("props", "key"), [
    ({"listeners": "INTERNAL://:9092"}, "listener.security.protocol.map"),
    ({"listener.security.protocol.map": "PLAINTEXT:TLS"}, "listener.security.protocol.map"),
    ({"listener.security.protocol.map": "PLAINTEXT"}, "listener.security.protocol.map"),
    ({"advertised.listeners": "PLAINTEXT://h:1,SSL://h:2"}, "advertised.listeners"),
    ({"inter.broker.listener.name": "PLAINTEXT",
      "security.inter.broker.protocol": "PLAINTEXT"}, "inter.broker.listener.name"),
    ({"inter.broker.listener.name": "OTHER"}, "inter.broker.listener.name"),
    ({"security.inter.broker.protocol": "SSL"}, "security.inter.broker.protocol"),
    ({"security.inter.broker.protocol": "TLS"}, "security.inter.broker.protocol"),
    ({"listeners": "SSL://:9093", "security.inter.broker.protocol": "SSL"},
     "ssl.keystore.location"),
    ({"listeners": "SASL_PLAINTEXT://:9093",
      "security.inter.broker.protocol": "SASL_PLAINTEXT"}, "sasl.enabled.mechanisms"),
    ({"listeners": "SASL_PLAINTEXT://:9093", "sasl.enabled.mechanisms": "PLAIN",
      "security.inter.broker.protocol": "SASL_PLAINTEXT",
      "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512"},
     "sasl.mechanism.inter.broker.protocol"),
    ({"listeners": "SASL_PLAINTEXT://:9093", "sasl.enabled.mechanisms": "PLAIN",
      "security.inter.broker.protocol": "SASL_PLAINTEXT",
      "sasl.mechanism.inter.broker.protocol": "PLAIN"},
     "listener.name.sasl_plaintext.plain.sasl.jaas.config"),
    ({"ssl.client.auth": "always"}, "ssl.client.auth"),
    ({"listener.name.plaintext.ssl.client.auth": "always"},
     "listener.name.plaintext.ssl.client.auth"),
    ({"ssl.keystore.type": "JKS"}, "ssl.keystore.type"),
    ({"ssl.truststore.type": "JKS"}, "ssl.truststore.type"),
    ({"ssl.enabled.protocols": "TLSv1.2,SSLv3"}, "ssl.enabled.protocols"),
    ({"ssl.endpoint.identification.algorithm": "http"},
     "ssl.endpoint.identification.algorithm"),
    ({"ssl.principal.mapping.rules": "RULE:x/y/Q"}, "ssl.principal.mapping.rules"),
    ({"authorizer.class.name": "kafka.security.auth.Nope"}, "authorizer.class.name"),
    ({"allow.everyone.if.no.acl.found": "maybe"}, "allow.everyone.if.no.acl.found"),
    ({"connection.failed.authentication.delay.ms": "-1"},
     "connection.failed.authentication.delay.ms"),
])
def test_invalid_security_configs_name_the_key(props: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", "[.]")):
        KafkaConfig.from_properties({"listeners": "PLAINTEXT://:9092", **props})


def test_security_defaults_change_nothing() -> None:
    c = KafkaConfig.from_properties({})
    assert c.listener_security_protocol_map == {"PLAINTEXT": SecurityProtocol.PLAINTEXT}
    assert c["authorizer.class.name"] == "" and c.super_users == []
    assert c["allow.everyone.if.no.acl.found"] is False
    assert c["connection.failed.authentication.delay.ms"] == 100
    assert c["zookeeper.set.acl"] is False
    assert c.inter_broker_client_security() is None
    c = KafkaConfig.from_properties({"super.users": "User:alice; User:CN=bob,O=x"})
    assert c.super_users == ["User:alice", "User:CN=bob,O=x"]
    assert KafkaConfig.from_properties({
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"})


@pytest.mark.parametrize("name", ["kafka.security.authorizer.AclAuthorizer",
                                  "kafka.security.auth.SimpleAclAuthorizer"])
def test_kafka_28_authorizer_names_run_the_acl_authorizer(name: str) -> None:
    """Kafka 2.8 still runs its deprecated SimpleAclAuthorizer (KIP-504 replaced it with
    AclAuthorizer, 3.0 removed it) on the same ACLs; test brokers such as kafka-python's name
    it."""
    from odradek.server.authorizer import AclAuthorizer, authorizer_from_config

    c = KafkaConfig.from_properties({"authorizer.class.name": name,
                                     "allow.everyone.if.no.acl.found": "true"})
    authorizer = authorizer_from_config(c, store=None, broker_id=0)  # type: ignore[arg-type]
    assert isinstance(authorizer, AclAuthorizer)
    assert authorizer.allow_everyone_if_no_acl_found


def test_listener_prefixed_unknown_keys_are_reported() -> None:
    c = KafkaConfig.from_properties({"listener.name.plaintext.no.such.key": "1",
                                     "listener.name.plaintext.plain.sasl.jaas.config": "x"})
    assert c.unknown_keys == ["listener.name.plaintext.no.such.key"]


def test_bad_key_store_stops_broker_start(tmp_path: Path) -> None:
    from odradek.server.broker import Broker

    c = KafkaConfig.from_properties({
        "listeners": "PLAINTEXT://:0,SSL://:0", "ssl.keystore.location": str(tmp_path / "no"),
        "log.dirs": str(tmp_path / "logs")})
    with pytest.raises(ConfigError, match=r"listener SSL: ssl\.keystore\.location"):
        Broker(c).make_listener("SSL")


def _cache() -> MetadataCache:
    cache = MetadataCache()
    cache.brokers = {
        0: BrokerInfo(0, "h0", 9092, None, (ListenerEndpoint("PLAINTEXT", "h0", 9092, 0),
                                            ListenerEndpoint("SSL", "h0", 9093, 1))),
        1: BrokerInfo(1, "h1", 9092, None, (ListenerEndpoint("PLAINTEXT", "h1", 9092, 0),)),
    }
    return cache


@pytest.mark.parametrize(("listener", "expected"), [
    ("PLAINTEXT", [(0, "h0", 9092), (1, "h1", 9092)]),
    ("SSL", [(0, "h0", 9093)]),  # broker 1 has no SSL listener: left out, as Kafka does
    ("OTHER", []),
])
def test_metadata_answers_on_the_request_listener(listener: str,
                                                  expected: list[tuple[int, str, int]]) -> None:
    request = request_class(3, 9)(topics=(), allow_auto_topic_creation=False,
                                  include_cluster_authorized_operations=False,
                                  include_topic_authorized_operations=False)
    resp = build_response(_cache(), request, [], {}, listener=listener)
    assert [(b.node_id, b.host, b.port) for b in resp.brokers] == expected


def test_broker_info_from_update_metadata() -> None:
    b = ib.UpdateMetadataBroker(id=3, endpoints=(
        ib.UpdateMetadataEndpoint(port=1, host="a", listener="PLAINTEXT", security_protocol=0),
        ib.UpdateMetadataEndpoint(port=2, host="b", listener="SSL", security_protocol=1)),
        rack="r")
    info = BrokerInfo.from_update_metadata(b)
    assert (info.host, info.port, info.rack) == ("a", 1, "r")
    assert info.endpoint("SSL") == ListenerEndpoint("SSL", "b", 2, 1)
    assert info.endpoint("SASL_SSL") is None
    legacy: Any = SimpleNamespace(id=4, endpoints=(), v0_host="c", v0_port=3, rack=None)
    assert BrokerInfo.from_update_metadata(legacy).endpoint("PLAINTEXT") == ListenerEndpoint(
        "PLAINTEXT", "c", 3, 0)
    # built without endpoints (tests, a cache seeded by hand): every listener answers
    assert BrokerInfo(5, "d", 4).endpoint("SSL") == ListenerEndpoint("SSL", "d", 4)
