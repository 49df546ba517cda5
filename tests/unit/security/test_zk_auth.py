"""The brokers' ZooKeeper login and Kafka's default znode ACLs (security/zk_auth.py)."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.security.zk_auth import (
    ALL,
    OPEN_ACL,
    READ,
    WORLD_READ,
    ZkAcl,
    ZkDigestIdentity,
    ZkSecurity,
    ZooKeeperLoginError,
    default_acls,
    generate_digest,
    is_sensitive_path,
    jaas_file_sections,
    login_config_path,
    zookeeper_identity,
)

JAAS = """
// the brokers' logins
KafkaServer {
    org.apache.kafka.common.security.scram.ScramLoginModule required
    username="admin" password="admin;secret";
};
/* ZooKeeper */
Client {
    org.apache.zookeeper.server.auth.DigestLoginModule required
    username="kafka"
    password="kafka-secret";
};
"""


def test_digest_matches_zookeeper_known_value() -> None:
    # ZooKeeper's own tests: superDigest "super:D/InIHSb7yEEbrWz8b9l71RjZJU=" is password "test".
    assert generate_digest("super", "test") == "super:D/InIHSb7yEEbrWz8b9l71RjZJU="


@given(st.text(alphabet=st.characters(blacklist_characters=":", blacklist_categories=("Cs",)),
               min_size=1),
       st.text(alphabet=st.characters(blacklist_categories=("Cs",))))
def test_digest_is_base64_sha1_of_user_colon_password(user: str, password: str) -> None:
    name, _, digest = generate_digest(user, password).partition(":")
    assert name == user
    assert base64.b64decode(digest) == hashlib.sha1(f"{user}:{password}".encode()).digest()


def test_client_section_gives_the_digest_identity() -> None:
    sections = jaas_file_sections(JAAS)
    assert set(sections) == {"KafkaServer", "Client"}
    assert sections["KafkaServer"][0].options["password"] == "admin;secret"
    identity = zookeeper_identity(JAAS)
    assert identity == ZkDigestIdentity("kafka", "kafka-secret")
    assert identity.auth_data == ("digest", "kafka:kafka-secret")
    assert identity.acl == ZkAcl(ALL, "digest", generate_digest("kafka", "kafka-secret"))
    assert str(identity.acl).endswith(":rwcda")
    assert "kafka-secret" not in repr(identity)


def test_no_client_section_and_unsupported_modules() -> None:
    assert zookeeper_identity("KafkaServer { a.B required; };") is None
    with pytest.raises(ZooKeeperLoginError, match="digest scheme only"):
        zookeeper_identity('Client { com.sun.security.auth.module.Krb5LoginModule required '
                           'useKeyTab=true; };')
    with pytest.raises(ZooKeeperLoginError, match="username and password"):
        zookeeper_identity("Client { org.apache.zookeeper.server.auth.DigestLoginModule "
                           "required username=kafka; };")
    with pytest.raises(ZooKeeperLoginError, match="cannot parse"):
        jaas_file_sections("Client { unterminated")


def test_kafka_default_acls() -> None:
    identity = ZkDigestIdentity("kafka", "pw")
    assert default_acls("/brokers/ids/0", identity) == (identity.acl, WORLD_READ)
    assert default_acls("/kafka-acl/Topic/t", identity) == (identity.acl, WORLD_READ)
    # Kafka's sensitive roots: SCRAM credentials, broker configs, delegation tokens.
    for path in ("/config/users", "/config/users/alice", "/config/brokers/0",
                 "/delegation_token/tokens"):
        assert is_sensitive_path(path)
        assert default_acls(path, identity) == (identity.acl,)
    assert default_acls("/consumers", identity) == (OPEN_ACL,)
    assert default_acls("/brokers", None) == (OPEN_ACL,)
    assert WORLD_READ.perms == READ


def test_login_config_from_kafka_opts(tmp_path: Path) -> None:
    env = {"KAFKA_OPTS": "-Xmx1g -Djava.security.auth.login.config=/etc/kafka/jaas.conf -Dx=y"}
    assert login_config_path(None, env) == "/etc/kafka/jaas.conf"
    assert login_config_path("/given", env) == "/given"
    assert login_config_path(None, {"KAFKA_OPTS": "-Djava.security.auth.login.config==/o"}) == "/o"
    assert login_config_path(None, {}) is None

    jaas = tmp_path / "jaas.conf"
    jaas.write_text(JAAS)
    tool = ZkSecurity.for_tool({"KAFKA_OPTS": f"-Djava.security.auth.login.config={jaas}"})
    assert tool.set_acl and tool.auth_data == [("digest", "kafka:kafka-secret")]
    assert tool.acl_provider is not None
    assert ZkSecurity.for_tool({}).acl_provider is None


def test_broker_requires_a_login_with_set_acl(tmp_path: Path) -> None:
    with pytest.raises(ZooKeeperLoginError, match=r"zookeeper\.set\.acl is true"):
        ZkSecurity.for_broker(True, None, {})
    bare = tmp_path / "bare.conf"
    bare.write_text("KafkaServer { a.B required; };")
    with pytest.raises(ZooKeeperLoginError, match="has no 'Client' section"):
        ZkSecurity.for_broker(True, str(bare), {})
    with pytest.raises(ZooKeeperLoginError, match="cannot read"):
        ZkSecurity.for_broker(True, str(tmp_path / "missing.conf"), {})
    jaas = tmp_path / "jaas.conf"
    jaas.write_text(JAAS)
    # Without set.acl a login found still authenticates, but creates open znodes (as Kafka).
    plain = ZkSecurity.for_broker(False, str(jaas), {})
    assert plain.auth_data and plain.acl_provider is None
    assert ZkSecurity.for_broker(False, None, {}) == ZkSecurity()
