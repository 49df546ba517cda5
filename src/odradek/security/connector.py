"""The one place outgoing connections are made: TCP, then TLS, then SASL (Kafka's
ChannelBuilders on the client side). The client, the controller's channel, the replica fetchers
and the tools all call `open_connection` with a `ClientSecurity`, built from the Java client's
property names (`ClientSecurity.from_client_props`) or, for a broker, from its inter-broker
listener's configs. `BrokerBlockingSender` is a broker's own channel to another broker (the
replica fetchers, the transaction marker channel): one request at a time on one connection."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import struct
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..protocol.codec import decode_response, encode_request, response_class
from .protocol import SecurityProtocol
from .ssl_factory import SslConfigError, client_ssl_context

SUPPORTED_SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

# The ssl.* names of the Java client, passed through to ssl_factory
_JAVA_SSL_KEYS = (
    "ssl.truststore.location", "ssl.truststore.type", "ssl.truststore.password",
    "ssl.truststore.certificates", "ssl.keystore.location", "ssl.keystore.type",
    "ssl.keystore.password", "ssl.keystore.certificate.chain", "ssl.keystore.key",
    "ssl.key.password", "ssl.enabled.protocols", "ssl.protocol", "ssl.cipher.suites",
    "ssl.endpoint.identification.algorithm",
)


@dataclass(frozen=True)
class ClientSecurity:
    """How to secure an outgoing connection."""

    protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    ssl_context: ssl.SSLContext | None = None
    check_hostname: bool = True
    sasl_mechanism: str | None = None
    username: str | None = None
    password: str | None = None

    @classmethod
    def from_client_props(cls, props: Mapping[str, Any]) -> ClientSecurity:
        """From the Java client's names (`security.protocol`, `ssl.truststore.*`,
        `ssl.keystore.*`, `ssl.key.password`, `ssl.endpoint.identification.algorithm`,
        `sasl.mechanism`, `sasl.jaas.config`) and librdkafka's (`ssl.ca.location`,
        `ssl.certificate.location`, `ssl.key.location`, `sasl.mechanisms`, `sasl.username`,
        `sasl.password`). ValueError names a key whose value cannot be used."""
        raw = props.get("security.protocol") or "PLAINTEXT"
        try:
            protocol = SecurityProtocol.for_name(str(raw))
        except ValueError as exc:
            raise ValueError(f"security.protocol: {exc}") from None
        ctx: ssl.SSLContext | None = None
        check = True
        if protocol.uses_ssl:
            ssl_props = client_ssl_props(props)
            algorithm = ssl_props.get("ssl.endpoint.identification.algorithm", "https")
            check = bool(algorithm and str(algorithm).strip())
            try:
                ctx = client_ssl_context(ssl_props)
            except SslConfigError:
                raise
            except (OSError, ssl.SSLError) as exc:
                raise SslConfigError(f"ssl: {exc}") from None
        mechanism = username = password = None
        if protocol.uses_sasl:
            mechanism = str(props.get("sasl.mechanism") or props.get("sasl.mechanisms")
                            or "GSSAPI").strip().upper()
            if mechanism not in SUPPORTED_SASL_MECHANISMS:
                raise ValueError(f"sasl.mechanism: {mechanism} is not supported (one of "
                                 f"{', '.join(SUPPORTED_SASL_MECHANISMS)})")
            jaas = props.get("sasl.jaas.config")
            if jaas:
                from .jaas import parse_jaas_config

                options = parse_jaas_config(str(jaas)).options
                username, password = options.get("username"), options.get("password")
            username = props.get("sasl.username", username)
            password = props.get("sasl.password", password)
            if username is None or password is None:
                raise ValueError("sasl.jaas.config: no username and password for SASL/"
                                 f"{mechanism} (set sasl.jaas.config, or sasl.username and "
                                 "sasl.password)")
        return cls(protocol, ctx, check, mechanism,
                   None if username is None else str(username),
                   None if password is None else str(password))


def client_ssl_props(props: Mapping[str, Any]) -> dict[str, Any]:
    """The ssl.* names of ssl_factory from a client's properties (librdkafka's names mapped:
    ssl.ca.location -> a PEM trust store; ssl.certificate.location and ssl.key.location -> an
    inline PEM key store)."""
    out: dict[str, Any] = {k: props[k] for k in _JAVA_SSL_KEYS if props.get(k) is not None}
    if props.get("ssl.ca.location") and "ssl.truststore.location" not in out:
        out["ssl.truststore.location"] = str(props["ssl.ca.location"])
        out["ssl.truststore.type"] = "PEM"
    cert, key = props.get("ssl.certificate.location"), props.get("ssl.key.location")
    if cert and key and "ssl.keystore.location" not in out:
        try:
            out["ssl.keystore.certificate.chain"] = Path(str(cert)).read_text()
            out["ssl.keystore.key"] = Path(str(key)).read_text()
        except OSError as exc:
            raise SslConfigError(f"ssl.certificate.location/ssl.key.location: {exc}") from None
        out.pop("ssl.keystore.type", None)
    elif cert or key:
        raise SslConfigError("ssl.certificate.location and ssl.key.location must be set "
                             "together")
    return out


async def open_connection(host: str, port: int, security: ClientSecurity | None, *,
                          timeout: float, client_id: str
                          ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """TCP, then TLS (the server's certificate verified), then SASL, all within `timeout`.
    Raises OSError (ssl.SSLError included) or TimeoutError for the connection, and SB's
    SaslAuthenticationError for refused credentials."""
    if security is None or security.protocol is SecurityProtocol.PLAINTEXT:
        async with asyncio.timeout(timeout):
            return await asyncio.open_connection(host, port)
    async with asyncio.timeout(timeout):
        if security.ssl_context is not None:
            reader, writer = await asyncio.open_connection(
                host, port, ssl=security.ssl_context, server_hostname=host,
                ssl_handshake_timeout=timeout)
        else:
            reader, writer = await asyncio.open_connection(host, port)
    if security.protocol.uses_sasl:
        from .sasl_client import authenticate

        try:
            await authenticate(reader, writer, mechanism=security.sasl_mechanism or "PLAIN",
                               username=security.username or "",
                               password=security.password or "", client_id=client_id,
                               timeout=timeout)
        except BaseException:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            raise
    return reader, writer


Connector = Callable[..., Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]
_SIZE = struct.Struct(">i")


class BrokerBlockingSender:
    """One connection to a broker, one request at a time, reopened after any failure (Kafka's
    BrokerBlockingSender). `address()` is asked at every (re)connect, so a broker that comes
    back on another port is found; None raises ConnectionError. A timeout, a lost connection
    or a response whose correlation id is not the request's closes the connection and raises."""

    def __init__(self, address: Callable[[], tuple[str, int] | None],
                 security: ClientSecurity | None, timeout_ms: int, client_id: str, *,
                 connector: Connector = open_connection, peer: str = "the broker") -> None:
        self.address = address
        self.security = security
        self.timeout_ms = timeout_ms
        self.client_id = client_id
        self.connector = connector
        self.peer = peer
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation = 0

    @property
    def connected(self) -> bool:
        return self._writer is not None

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None

    async def send(self, request: Any, extra_timeout_ms: int = 0) -> Any:
        """Send a kio request and return its decoded response."""
        timeout = (self.timeout_ms + extra_timeout_ms) / 1000
        if self._writer is None:
            addr = self.address()
            if addr is None:
                raise ConnectionError(f"no endpoint known for {self.peer}")
            self._reader, self._writer = await self.connector(
                addr[0], addr[1], self.security, timeout=self.timeout_ms / 1000,
                client_id=self.client_id)
        assert self._reader is not None and self._writer is not None
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        cid = self._correlation
        try:
            self._writer.write(encode_request(request, cid, self.client_id))
            async with asyncio.timeout(timeout):
                size = _SIZE.unpack(await self._reader.readexactly(4))[0]
                payload = await self._reader.readexactly(size)
            got, response = decode_response(response_class(type(request)), payload)
        except BaseException:
            self.close()
            raise
        if got != cid:
            self.close()
            raise ConnectionError(f"correlation id {got} does not match {cid}")
        return response
