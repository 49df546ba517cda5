"""JAAS text (security/jaas.py): sasl.jaas.config values, JAAS files' sections, quoting and
comments; and how a broker listener finds its login modules (security/sasl_server.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.security.jaas import (
    JaasError,
    parse_jaas_config,
    parse_jaas_file,
    parse_login_modules,
)
from odradek.security.sasl_server import (
    SaslServerConfig,
    enabled_mechanisms,
    login_credentials,
    plain_users,
    server_jaas_entries,
)

PLAIN = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
         'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')


def test_plain_module() -> None:
    e = parse_jaas_config(PLAIN)
    assert e.login_module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert e.flag == "required"
    assert dict(e.options) == {"username": "admin", "password": "admin-secret",
                               "user_admin": "admin-secret", "user_alice": "alice-secret"}
    assert plain_users([e]) == {"admin": "admin-secret", "alice": "alice-secret"}
    assert login_credentials([e], "PLAIN") == ("admin", "admin-secret")


def test_quoting_escapes_and_comments() -> None:
    e = parse_jaas_config(
        "org.apache.kafka.common.security.scram.ScramLoginModule Required // a comment\n"
        " username='o\\'brien' /* block\n comment */ password=\"a;b=c \\\"q\\\" {}\" "
        "tokenauth=true ;")
    assert e.flag == "required"
    assert dict(e.options) == {"username": "o'brien", "password": 'a;b=c "q" {}',
                               "tokenauth": "true"}
    assert login_credentials([e], "SCRAM-SHA-256") == ("o'brien", 'a;b=c "q" {}')


@pytest.mark.parametrize("text, message", [
    ("", "0 login modules"),
    (PLAIN + PLAIN, "2 login modules"),
    ("a.B required x=1", "ends"),
    ("a.B mandatory;", "invalid control flag"),
    ("a.B required x;", "expected '='"),
    ('a.B required x="unterminated;', "unterminated"),
])
def test_bad_config(text: str, message: str) -> None:
    with pytest.raises(JaasError, match=message):
        parse_jaas_config(text)


def test_several_modules() -> None:
    entries = parse_login_modules(PLAIN + "\n a.B optional; c.D sufficient k=v;")
    assert [(e.login_module, e.flag) for e in entries] == [
        ("org.apache.kafka.common.security.plain.PlainLoginModule", "required"),
        ("a.B", "optional"), ("c.D", "sufficient")]


JAAS_FILE = """
// the broker's JAAS file
KafkaServer {
    org.apache.kafka.common.security.plain.PlainLoginModule required
    username="admin" password="admin-secret" user_admin="admin-secret" user_bob="bob-pw";
    org.apache.kafka.common.security.scram.ScramLoginModule required
    username="admin" password="admin-secret";
};
sasl_plaintext.KafkaServer {
    org.apache.kafka.common.security.plain.PlainLoginModule required user_carol="carol-pw";
};
Client {
    org.apache.zookeeper.server.auth.DigestLoginModule required
    username="kafka" password="kafka-zk";
};
"""


def test_jaas_file_sections() -> None:
    sections = parse_jaas_file(JAAS_FILE)
    assert list(sections) == ["KafkaServer", "sasl_plaintext.KafkaServer", "Client"]
    assert len(sections["KafkaServer"]) == 2
    assert dict(sections["Client"][0].options) == {"username": "kafka", "password": "kafka-zk"}
    with pytest.raises(JaasError):
        parse_jaas_file("KafkaServer { a.B required; ")


def test_listener_lookup_order(tmp_path: Path) -> None:
    path = tmp_path / "jaas.conf"
    path.write_text(JAAS_FILE)
    props = {"java.security.auth.login.config": str(path), "sasl.enabled.mechanisms": "PLAIN"}
    # the listener's own section wins over KafkaServer
    assert plain_users(server_jaas_entries(props, "SASL_PLAINTEXT", "PLAIN")) == {
        "carol": "carol-pw"}
    assert plain_users(server_jaas_entries(props, "OTHER", "PLAIN")) == {
        "admin": "admin-secret", "bob": "bob-pw"}
    # a listener-prefixed sasl.jaas.config wins over the file
    props["listener.name.other.plain.sasl.jaas.config"] = PLAIN
    assert plain_users(server_jaas_entries(props, "OTHER", "PLAIN"))["alice"] == "alice-secret"


def test_enabled_mechanisms_per_listener() -> None:
    props = {"sasl.enabled.mechanisms": "PLAIN",
             "listener.name.internal.sasl.enabled.mechanisms": "scram-sha-512, SCRAM-SHA-256"}
    assert enabled_mechanisms(props, "INTERNAL") == ("SCRAM-SHA-512", "SCRAM-SHA-256")
    assert enabled_mechanisms(props, "EXTERNAL") == ("PLAIN",)
    assert enabled_mechanisms({}, "X") == ("GSSAPI",)  # Kafka's default, refused at handshake
    cfg = SaslServerConfig.for_listener(
        {**props, "connection.failed.authentication.delay.ms": "7"}, "INTERNAL",
        lambda m, u: None)
    assert cfg.failed_authentication_delay_ms == 7 and cfg.max_receive_size == 524288
