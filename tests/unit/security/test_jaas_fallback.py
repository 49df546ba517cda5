"""The brokers' own SASL login from a JAAS file (server/configs/config.py `inter_broker_login`): as
in
Kafka's JaasContext, `listener.name.<l>.<mechanism>.sasl.jaas.config`, else the file's
`<l>.KafkaServer` section, else its `KafkaServer` section; the config is refused at start when
none gives the mechanism's login module a username and password."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from odradek.security.protocol import SecurityProtocol
from odradek.security.sasl_server import PlainServer, SaslServerConfig
from odradek.server.configs.config import ConfigError, KafkaConfig

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"

JAAS_FILE = f"""
// the brokers' login and the PLAIN users of every listener without a section of its own
KafkaServer {{
    {PLAIN_MODULE} required
        username="broker" password="broker-pw"
        user_broker="broker-pw" user_alice="alice-pw";
    {SCRAM_MODULE} required username="broker-scram" password="scram-pw";
}};
internal.KafkaServer {{
    {SCRAM_MODULE} required username="internal-broker" password="internal-pw";
}};
Client {{
    org.apache.zookeeper.server.auth.DigestLoginModule required
        username="kafka" password="kafka-zk";
}};
"""


def sasl_config(jaas: Path | str | None, mechanism: str = "PLAIN", listener: str = "SASL_PLAINTEXT",
                **extra: str) -> KafkaConfig:
    props = {"listeners": f"{listener}://:9092",
             "listener.security.protocol.map": f"{listener}:SASL_PLAINTEXT",
             "inter.broker.listener.name": listener,
             "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
             "sasl.mechanism.inter.broker.protocol": mechanism, **extra}
    if jaas is not None:
        props["java.security.auth.login.config"] = str(jaas)
    return KafkaConfig.from_properties(props)


@pytest.fixture
def jaas_file(tmp_path: Path) -> Path:
    path = tmp_path / "kafka_server_jaas.conf"
    path.write_text(JAAS_FILE)
    return path


def test_kafka_server_section_gives_the_inter_broker_login(jaas_file: Path) -> None:
    c = sasl_config(jaas_file)  # refused before the fallback: no listener.name...sasl.jaas.config
    assert c.inter_broker_login("SASL_PLAINTEXT", "PLAIN") == ("broker", "broker-pw")
    sec = c.inter_broker_client_security()
    assert sec.protocol is SecurityProtocol.SASL_PLAINTEXT and sec.sasl_mechanism == "PLAIN"
    assert (sec.username, sec.password) == ("broker", "broker-pw")


def test_the_login_module_of_the_mechanism_is_used(jaas_file: Path) -> None:
    c = sasl_config(jaas_file, "SCRAM-SHA-512")
    sec = c.inter_broker_client_security()
    assert sec.sasl_mechanism == "SCRAM-SHA-512"
    assert (sec.username, sec.password) == ("broker-scram", "scram-pw")


def test_the_listener_section_wins_over_kafka_server(jaas_file: Path) -> None:
    c = sasl_config(jaas_file, "SCRAM-SHA-256", listener="INTERNAL")
    assert c.inter_broker_login("INTERNAL", "SCRAM-SHA-256") == ("internal-broker", "internal-pw")
    # the listener's own section has no PlainLoginModule, and KafkaServer is not merged in
    with pytest.raises(ConfigError, match="PlainLoginModule"):
        sasl_config(jaas_file, "PLAIN", listener="INTERNAL")


def test_the_listener_prefixed_config_wins_over_the_file(jaas_file: Path) -> None:
    inline = f'{PLAIN_MODULE} required username="inline" password="inline-pw";'
    c = sasl_config(jaas_file, **{
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": inline})
    sec = c.inter_broker_client_security()
    assert (sec.username, sec.password) == ("inline", "inline-pw")


def test_the_broker_logs_in_to_its_own_plain_listener(jaas_file: Path) -> None:
    """The client side and the server side read the same section: the login is a user."""
    c = sasl_config(jaas_file)
    sec = c.inter_broker_client_security()
    server_cfg = SaslServerConfig.for_listener(c.originals, "SASL_PLAINTEXT", lambda m, u: None)
    server = PlainServer(server_cfg.plain_users)
    server.evaluate(f"\0{sec.username}\0{sec.password}".encode())
    assert server.complete and server.authorization_id == "broker"


def test_no_login_anywhere_is_refused_naming_both_places(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        sasl_config(None)
    assert str(exc.value).startswith("listener.name.sasl_plaintext.plain.sasl.jaas.config:")
    assert "java.security.auth.login.config is not set" in str(exc.value)
    only_client = tmp_path / "client_only.conf"
    only_client.write_text('Client { a.B required username="u" password="p"; };')
    with pytest.raises(ConfigError, match=re.escape(
            "neither a 'sasl_plaintext.KafkaServer' nor a 'KafkaServer' section")):
        sasl_config(only_client)


def test_a_section_without_credentials_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "users_only.conf"
    path.write_text(f'KafkaServer {{ {PLAIN_MODULE} required user_alice="alice-pw"; }};')
    with pytest.raises(ConfigError) as exc:
        sasl_config(path)
    message = str(exc.value)
    assert message.startswith("java.security.auth.login.config:")
    assert "no org.apache.kafka.common.security.plain.PlainLoginModule with username" in message


@pytest.mark.parametrize("content", [None, "KafkaServer { a.B required; "])
def test_an_unreadable_or_invalid_file_is_refused(tmp_path: Path, content: str | None) -> None:
    path = tmp_path / "jaas.conf"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError, match=r"^java\.security\.auth\.login\.config: "):
        sasl_config(path)


def test_a_non_inter_broker_sasl_listener_needs_no_login(tmp_path: Path) -> None:
    c = KafkaConfig.from_properties({
        "listeners": "PLAINTEXT://:9092,SASL_PLAINTEXT://:9093",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256"})
    assert c.inter_broker_client_security() is None


def test_security_doc_python_snippets_compile_and_import() -> None:
    """docs/security.md's Python snippets (run by hand against a broker) still compile, and
    every name they import exists."""
    import ast
    import importlib

    doc = (Path(__file__).resolve().parents[3] / "docs" / "security.md").read_text()
    snippets = re.findall(r"```python\n(.*?)```", doc, re.S)
    assert len(snippets) >= 2
    for snippet in snippets:
        for node in ast.walk(ast.parse(snippet)):
            if isinstance(node, ast.ImportFrom) and node.module:
                module = importlib.import_module(node.module)
                for alias in node.names:
                    assert hasattr(module, alias.name), f"{node.module}.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    importlib.import_module(alias.name)
