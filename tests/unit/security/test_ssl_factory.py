"""TLS contexts from Kafka's ssl.* configs: PEM files, inline PEM (KIP-651), PKCS12; JKS and
bad values refused with the key named; handshakes between the contexts made in memory."""

from __future__ import annotations

import os
import re
import ssl
import tempfile
from pathlib import Path

import pytest

from odradek.security.principal import dn_of_certificate
from odradek.security.ssl_factory import (
    SslConfigError,
    client_ssl_context,
    openssl_cipher_name,
    server_ssl_context,
)
from tests.tls_certs import PASSWORD, Certs, handshake, make_certs


def _client(certs: Certs, **extra: str) -> ssl.SSLContext:
    return client_ssl_context({"ssl.truststore.location": str(certs.ca_pem),
                               "ssl.truststore.type": "PEM", **extra})


def test_pem_files_server_and_client(certs: Certs) -> None:
    server = server_ssl_context(certs.broker_ssl())
    assert handshake(server, _client(certs)) is None  # ssl.client.auth=none


def test_client_auth_required_gives_the_dn(certs: Certs) -> None:
    server = server_ssl_context({**certs.broker_ssl(), "ssl.client.auth": "required"})
    client = _client(certs, **{"ssl.keystore.location": str(certs.client_pem)})
    der = handshake(server, client)
    assert der is not None
    assert dn_of_certificate(der) == "CN=alice,OU=eng,O=acme"
    with pytest.raises(ssl.SSLError):
        handshake(server, _client(certs))  # no client certificate: refused


def test_client_auth_requested_is_optional(certs: Certs) -> None:
    server = server_ssl_context({**certs.broker_ssl(), "ssl.client.auth": "requested"})
    assert handshake(server, _client(certs)) is None
    client = _client(certs, **{"ssl.keystore.location": str(certs.client_pem)})
    assert handshake(server, client) is not None


def test_inline_pem_kip_651(certs: Certs) -> None:
    pem = certs.broker_pem.read_text()
    server = server_ssl_context({
        "ssl.keystore.type": "PEM",
        "ssl.keystore.certificate.chain": "".join(re.findall(
            r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----\n", pem, re.S)),
        "ssl.keystore.key": re.search(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END "
                                      r"[A-Z ]*PRIVATE KEY-----\n", pem, re.S).group(0),  # type: ignore[union-attr]
        "ssl.client.auth": "required",
        "ssl.truststore.type": "PEM",
        "ssl.truststore.certificates": certs.ca_pem.read_text()})
    client = client_ssl_context({
        "ssl.truststore.certificates": certs.ca_pem.read_text(),
        "ssl.keystore.certificate.chain": certs.client_cert.read_text(),
        "ssl.keystore.key": certs.client_key.read_text()})
    assert handshake(server, client) is not None


def test_pkcs12_key_store_and_trust_store(certs: Certs) -> None:
    server = server_ssl_context({
        "ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(certs.broker_p12),
        "ssl.keystore.password": PASSWORD})
    client = client_ssl_context({
        "ssl.truststore.type": "PKCS12", "ssl.truststore.location": str(certs.trust_p12),
        "ssl.truststore.password": PASSWORD})
    handshake(server, client)
    # Kafka's default type (JKS) unset: the file's content says PKCS12
    server_ssl_context({"ssl.keystore.location": str(certs.broker_p12),
                        "ssl.keystore.password": PASSWORD})


def test_nothing_left_on_disk(certs: Certs) -> None:
    before = set(os.listdir(tempfile.gettempdir()))
    server_ssl_context({"ssl.keystore.location": str(certs.broker_p12),
                        "ssl.keystore.password": PASSWORD})
    after = set(os.listdir(tempfile.gettempdir()))
    assert not [n for n in after - before if n.startswith("odradek-key-")]


def test_wrong_pkcs12_password(certs: Certs) -> None:
    with pytest.raises(SslConfigError, match=r"ssl.keystore.location.*password"):
        server_ssl_context({"ssl.keystore.location": str(certs.broker_p12),
                            "ssl.keystore.password": "wrong"})


def test_jks_refused(certs: Certs, tmp_path: Path) -> None:
    jks = tmp_path / "broker.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed" + b"\0" * 64)
    with pytest.raises(SslConfigError, match=r"ssl.keystore.location: JKS .*PKCS12"):
        server_ssl_context({"ssl.keystore.location": str(jks)})
    with pytest.raises(SslConfigError, match=r"ssl.keystore.type: JKS"):
        server_ssl_context({"ssl.keystore.type": "JKS",
                            "ssl.keystore.location": str(certs.broker_p12)})
    with pytest.raises(SslConfigError, match=r"ssl.truststore.type: JKS"):
        client_ssl_context({"ssl.truststore.type": "JKS",
                            "ssl.truststore.location": str(jks)})


def test_hostname_checked_unless_disabled(certs: Certs) -> None:
    server = server_ssl_context(certs.broker_ssl())
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(server, _client(certs), server_hostname="elsewhere.example")
    handshake(server, _client(certs, **{"ssl.endpoint.identification.algorithm": ""}),
              server_hostname="elsewhere.example")


def test_untrusted_server_refused(certs: Certs, tmp_path: Path) -> None:
    other = make_certs(tmp_path / "other")
    server = server_ssl_context(other.broker_ssl())
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(server, _client(certs))


def test_protocols_and_ciphers(certs: Certs) -> None:
    server = server_ssl_context({**certs.broker_ssl(), "ssl.enabled.protocols": "TLSv1.2"})
    assert server.maximum_version == ssl.TLSVersion.TLSv1_2
    client = _client(certs, **{"ssl.enabled.protocols": "TLSv1.3"})
    with pytest.raises(ssl.SSLError):
        handshake(server, client)
    ctx = server_ssl_context({**certs.broker_ssl(), "ssl.enabled.protocols": "TLSv1.2",
                              "ssl.cipher.suites": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"})
    assert [c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.2"] == [
        "ECDHE-ECDSA-AES128-GCM-SHA256"]
    assert openssl_cipher_name("TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384") == \
        "ECDHE-RSA-AES256-GCM-SHA384"


@pytest.mark.parametrize(("props", "key"), [
    ({"ssl.client.auth": "maybe"}, "ssl.client.auth"),
    ({"ssl.enabled.protocols": "SSLv2"}, "ssl.enabled.protocols"),
    ({"ssl.enabled.protocols": ""}, None),
    ({"ssl.keystore.type": "BKS"}, "ssl.keystore.type"),
    ({"ssl.endpoint.identification.algorithm": "ldap"}, "ssl.endpoint.identification.algorithm"),
    ({"ssl.keystore.certificate.chain": "-----BEGIN CERTIFICATE-----"},
     "ssl.keystore.certificate.chain"),
    ({"ssl.truststore.certificates": "not pem"}, "ssl.truststore.certificates"),
    ({"ssl.cipher.suites": "NO_SUCH_CIPHER"}, "ssl.cipher.suites"),
    ({"ssl.keystore.location": "/nonexistent/ks.p12"}, "ssl.keystore.location"),
])
def test_bad_values_refused_with_the_key(certs: Certs, props: dict[str, str],
                                         key: str | None) -> None:
    base = certs.broker_ssl()
    if "ssl.keystore.location" in props:
        base.pop("ssl.keystore.type")
    with pytest.raises(SslConfigError) as info:
        server_ssl_context({**base, **props})
    if key is not None:
        assert key in str(info.value)


def test_server_needs_a_key_store() -> None:
    with pytest.raises(SslConfigError, match=r"ssl.keystore.location"):
        server_ssl_context({})
