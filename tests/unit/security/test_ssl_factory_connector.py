"""security.connector.ClientSecurity from the Java client's and librdkafka's property names, and
open_connection over TLS to a local asyncio TLS server."""

from __future__ import annotations

import asyncio
import ssl

import pytest

from odradek.client.config import PRODUCER, build_config
from odradek.security.connector import ClientSecurity, open_connection
from odradek.security.protocol import SecurityProtocol
from odradek.security.ssl_factory import SslConfigError, server_ssl_context
from tests.tls_certs import Certs


def test_plaintext_by_default() -> None:
    sec = ClientSecurity.from_client_props(build_config(PRODUCER, {"bootstrap.servers": "h:1"},
                                                        {}))
    assert sec.protocol is SecurityProtocol.PLAINTEXT and sec.ssl_context is None


def test_java_names(certs: Certs) -> None:
    sec = ClientSecurity.from_client_props(build_config(
        PRODUCER, {"bootstrap.servers": "h:1", **certs.client_ssl()}, {}))
    assert sec.protocol is SecurityProtocol.SSL and sec.check_hostname
    assert sec.ssl_context is not None and sec.ssl_context.verify_mode == ssl.CERT_REQUIRED


def test_librdkafka_names_and_keyword_arguments(certs: Certs) -> None:
    sec = ClientSecurity.from_client_props(build_config(PRODUCER, None, {
        "bootstrap_servers": "h:1", "security_protocol": "ssl",
        "ssl_ca_location": str(certs.ca_pem), "ssl_certificate_location": str(certs.client_cert),
        "ssl_key_location": str(certs.client_key),
        "ssl_endpoint_identification_algorithm": ""}))
    assert sec.protocol is SecurityProtocol.SSL and not sec.check_hostname


@pytest.mark.parametrize(("props", "key"), [
    ({"security.protocol": "TLS"}, "security.protocol"),
    ({"security.protocol": "SASL_PLAINTEXT"}, "sasl.mechanism"),  # GSSAPI by default
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}, "sasl.jaas.config"),
    ({"security.protocol": "SSL", "ssl.certificate.location": "/x"}, "ssl.key.location"),
    ({"security.protocol": "SSL", "ssl.truststore.location": "/nonexistent"},
     "ssl.truststore.location"),
])
def test_bad_client_props_name_the_key(props: dict[str, str], key: str) -> None:
    with pytest.raises(ValueError, match=key.replace(".", "[.]")):
        ClientSecurity.from_client_props(props)


def test_sasl_username_and_password() -> None:
    sec = ClientSecurity.from_client_props({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "scram-sha-256",
        "sasl.username": "alice", "sasl.password": "pw"})
    assert (sec.sasl_mechanism, sec.username, sec.password) == ("SCRAM-SHA-256", "alice", "pw")


def test_open_connection_over_tls(certs: Certs) -> None:
    async def body() -> None:
        server_ctx = server_ssl_context({**certs.broker_ssl(), "ssl.client.auth": "required"})

        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            ssl_object = writer.get_extra_info("ssl_object")
            writer.write(b"ok" if ssl_object.getpeercert() else b"no")
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(echo, "127.0.0.1", 0, ssl=server_ctx)
        port = server.sockets[0].getsockname()[1]
        try:
            sec = ClientSecurity.from_client_props(certs.client_ssl())
            reader, writer = await open_connection("127.0.0.1", port, sec, timeout=5,
                                                   client_id="t")
            assert await reader.read() == b"ok"
            writer.close()
            bad = ClientSecurity.from_client_props({**certs.client_ssl(), "ssl.endpoint."
                                                    "identification.algorithm": "https"})
            other = await asyncio.start_server(echo, "127.0.0.2", 0, ssl=server_ctx)
            try:  # the certificate names 127.0.0.1 and localhost, not 127.0.0.2
                with pytest.raises(ssl.SSLCertVerificationError):
                    await open_connection("127.0.0.2", other.sockets[0].getsockname()[1], bad,
                                          timeout=5, client_id="t")
            finally:
                other.close()
                await other.wait_closed()
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(body())


def test_ssl_config_error_is_a_value_error() -> None:
    assert issubclass(SslConfigError, ValueError)
