"""`ClusterSecurity` without brokers: the broker configs it implies, Kafka's ACL znodes,
client properties for Java and librdkafka clients, generated certificates, `odradek cluster`'s
security flags."""

from __future__ import annotations

import json
import ssl
from pathlib import Path

import pytest

from odradek.cli import build_parser, cluster_security_from_args
from odradek.cluster import (
    AsyncCluster,
    ClusterAcl,
    ClusterSecurity,
    acl_znodes,
    broker_jaas,
    security_broker_props,
)
from odradek.common.properties import parse_properties
from odradek.security.jaas import parse_jaas_config


def test_plain_cluster_unchanged(tmp_path: Path) -> None:
    cluster = AsyncCluster(2, data_dir=tmp_path)
    assert cluster.security is None and cluster.security_files is None
    assert cluster.listener_names == ("PLAINTEXT",)
    assert not (tmp_path / "security").exists()


def test_broker_props_for_sasl_ssl_and_ssl() -> None:
    security = ClusterSecurity(listeners=("sasl_ssl", "SSL"),
                               sasl_mechanisms=("SCRAM-SHA-512", "PLAIN"),
                               users={"alice": 'pa"ss'}, super_users=("bob", "User:carol"),
                               client_auth="required")
    props = security_broker_props(security, None)
    assert props["listener.security.protocol.map"] == "SASL_SSL:SASL_SSL,SSL:SSL"
    assert props["inter.broker.listener.name"] == "SASL_SSL"
    assert props["sasl.enabled.mechanisms"] == "SCRAM-SHA-512,PLAIN"
    assert props["sasl.mechanism.inter.broker.protocol"] == "SCRAM-SHA-512"
    scram = parse_jaas_config(props["listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config"])
    assert scram.options == {"username": "admin", "password": "admin-secret"}
    plain = parse_jaas_config(props["listener.name.sasl_ssl.plain.sasl.jaas.config"])
    assert plain.options["user_alice"] == 'pa"ss' and plain.options["user_admin"]
    assert props["authorizer.class.name"] == "kafka.security.authorizer.AclAuthorizer"
    assert props["super.users"] == "User:admin;User:broker;User:bob;User:carol"
    assert props["allow.everyone.if.no.acl.found"] == "false"
    assert broker_jaas(security, "SCRAM-SHA-512").endswith(";")
    # No authorizer unless ACLs or super users are declared.
    assert "authorizer.class.name" not in security_broker_props(ClusterSecurity(), None)


def test_bad_security_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown security protocol"):
        ClusterSecurity(listeners=("TLS",))
    with pytest.raises(ValueError, match="unsupported SASL mechanism"):
        ClusterSecurity(sasl_mechanisms=("GSSAPI",))
    with pytest.raises(ValueError, match="tls=True"):
        ClusterSecurity(listeners=("SSL",), tls=False)


def test_acl_znodes_in_kafka_form() -> None:
    znodes = acl_znodes([
        ClusterAcl("User:alice", "Read", "Topic", "events"),
        ClusterAcl("User:alice", "describe", "topic", "events"),
        ClusterAcl("User:alice", "Read", "Topic", "events"),  # a duplicate: once
        ClusterAcl("User:bob", "Write", "Topic", "logs-", pattern="PREFIXED", permission="deny"),
        ClusterAcl("User:alice", "IDEMPOTENT_WRITE", "Cluster"),
        ClusterAcl("User:alice", "Read", "Group", "g", host="10.0.0.1"),
    ])
    assert json.loads(znodes["/kafka-acl/Topic/events"]) == {"version": 1, "acls": [
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"},
        {"principal": "User:alice", "permissionType": "Allow", "operation": "Describe",
         "host": "*"}]}
    assert json.loads(znodes["/kafka-acl-extended/prefixed/Topic/logs-"])["acls"] == [
        {"principal": "User:bob", "permissionType": "Deny", "operation": "Write", "host": "*"}]
    assert json.loads(znodes["/kafka-acl/Cluster/kafka-cluster"])["acls"][0]["operation"] == \
        "IdempotentWrite"
    assert json.loads(znodes["/kafka-acl/Group/g"])["acls"][0]["host"] == "10.0.0.1"
    with pytest.raises(ValueError):
        acl_znodes([ClusterAcl("User:a", "Fly", "Topic", "t")])


def test_client_config_and_certificates(tmp_path: Path) -> None:
    security = ClusterSecurity(listeners=("SASL_SSL", "SSL"), users={"alice": "alice-secret"},
                               client_auth="required", client_certificates=("carol",))
    cluster = AsyncCluster(1, data_dir=tmp_path, security=security)
    assert cluster.security_files is not None
    cluster.security_files.ensure()
    files = cluster.security_files
    # The server certificate is valid for 127.0.0.1 under the CA; the client's has CN=carol.
    ctx = ssl.create_default_context(cafile=str(files.ca))
    ctx.load_cert_chain(str(files.server))
    ctx.load_cert_chain(str(files.client_cert("carol")))
    cluster.listener_ports = {0: [9093, 9094]}
    cluster.brokers = {0: type("B", (), {"started": True})()}  # type: ignore[dict-item]

    java = cluster.client_config("alice")
    assert java["bootstrap.servers"] == "127.0.0.1:9093"
    assert java["security.protocol"] == "SASL_SSL" and java["sasl.mechanism"] == "SCRAM-SHA-256"
    assert parse_jaas_config(java["sasl.jaas.config"]).options == {
        "username": "alice", "password": "alice-secret"}
    assert java["ssl.truststore.location"] == str(files.ca)
    rdkafka = cluster.client_config("carol", listener="SSL", style="librdkafka")
    assert rdkafka == {"bootstrap.servers": "127.0.0.1:9094", "security.protocol": "SSL",
                       "ssl.ca.location": str(files.ca),
                       "ssl.certificate.location": str(files.client_cert("carol")
                                                       .with_suffix(".crt")),
                       "ssl.key.location": str(files.client_key("carol"))}
    admin = cluster.client_config(style="librdkafka")
    assert (admin["sasl.username"], admin["sasl.password"]) == ("admin", "admin-secret")
    with pytest.raises(KeyError):
        cluster.client_config("mallory")
    path = cluster.write_client_properties(tmp_path / "alice.properties", "alice")
    assert parse_properties(path.read_text()) == java


def test_cli_security_flags() -> None:
    args = build_parser().parse_args([
        "cluster", "--security-protocol", "SASL_SSL", "--sasl-mechanism", "SCRAM-SHA-256",
        "--user", "alice:alice:secret", "--super-user", "admin",
        "--acl", "User:alice,Read,Topic,events", "--acl", "User:bob,Write,Topic,l-,PREFIXED"])
    security = cluster_security_from_args(args)
    assert security.listeners == ("SASL_SSL",)
    assert dict(security.users) == {"alice": "alice:secret"}
    assert security.super_users == ("admin",)
    assert security.acls[1] == ClusterAcl("User:bob", "Write", "Topic", "l-", "PREFIXED")
    plain = build_parser().parse_args(["cluster"])
    assert cluster_security_from_args(plain) is None
    with pytest.raises(SystemExit):
        cluster_security_from_args(build_parser().parse_args(["cluster", "--user", "a:b"]))
