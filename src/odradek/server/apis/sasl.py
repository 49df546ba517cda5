"""SaslHandshake (key 17, v0-1) and SaslAuthenticate (key 36, v0-2), and the gate that serves
nothing else on a SASL listener before the client is authenticated (Kafka's
SaslServerAuthenticator in front of KafkaApis).

Before authentication only ApiVersions (before the handshake), SaslHandshake and
SaslAuthenticate are served; any other request closes the connection, as Kafka's authenticator
does. After a v0 handshake the client sends bare length-prefixed SASL tokens (KIP-152), answered
the same way. A failed authentication is answered with SASL_AUTHENTICATION_FAILED (a v0 exchange
gets no answer) after `connection.failed.authentication.delay.ms`, then the connection closes:
the delay is one sleeping task of that connection, cancelled if the client goes away first.
Success sets `conn.principal` to User:<name> and `conn.authenticated`; the session lifetime is 0
(no re-authentication, KIP-368).
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Callable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from ...protocol.codec import encode_response, make, peek_api, response_module
from ...security.errors import IllegalSaslStateError, SaslAuthenticationError, SaslError
from ...security.principal import KafkaPrincipal
from ...security.sasl_server import (
    IMPLEMENTED_MECHANISMS,
    SaslAuthenticator,
    SaslServerConfig,
    SaslState,
)
from ..network import CloseConnection, Connection, Response

log = logging.getLogger("odradek.security")

SASL_HANDSHAKE, API_VERSIONS, SASL_AUTHENTICATE = 17, 18, 36
_SIZE = struct.Struct(">i")

Dispatch = Callable[[Connection, bytes], Response]


async def _respond_then_close(conn: Connection, response: bytes | None, delay_s: float) -> None:
    """Send `response` (if any) after `delay_s`, then close: Kafka's delayed close of a
    connection whose authentication failed. Returns None: the response goes out here."""
    if delay_s > 0:
        await asyncio.sleep(delay_s)
    if response is not None and conn.transport is not None and not conn.transport.is_closing():
        conn.transport.write(response)
    conn.close()


class SaslApis:
    """`configs` maps each SASL listener's name to its settings."""

    def __init__(self, configs: Mapping[str, SaslServerConfig]) -> None:
        self.configs = {name.upper(): c for name, c in configs.items()}

    # -- the gate -------------------------------------------------------------------------------
    def before_authentication(self, conn: Connection, payload: bytes,
                              dispatch: Dispatch) -> Response | Any:
        """Handle a frame from a connection not authenticated yet (KafkaApis calls this)."""
        auth: SaslAuthenticator | None = conn.sasl
        if auth is not None and auth.state is SaslState.FAILED:
            return None  # the connection closes once the failure is answered
        if auth is not None and auth.raw:
            return self._raw_token(conn, auth, payload)
        key, _, correlation_id = peek_api(payload)
        allowed = (key in (SASL_HANDSHAKE, SASL_AUTHENTICATE)
                   or (key == API_VERSIONS and (auth is None or auth.state is SaslState.HANDSHAKE)))
        if not allowed:
            state = "SASL handshake" if auth is None else "SASL authentication"
            raise CloseConnection(f"Unexpected Kafka request of type {key} during {state} "
                                  f"(correlation id {correlation_id}, from an unauthenticated "
                                  f"client on listener {conn.listener_name})")
        return dispatch(conn, payload)

    def _raw_token(self, conn: Connection, auth: SaslAuthenticator, token: bytes) -> Response:
        try:
            challenge = auth.evaluate(token)
        except SaslError as exc:
            self._failed(conn, auth, exc)
            return self._close_later(conn, None, auth)
        if auth.complete:
            self._authenticated(conn, auth)
        return _SIZE.pack(len(challenge)) + challenge

    # -- SaslHandshake --------------------------------------------------------------------------
    def handle_handshake(self, header: Any, request: Any, conn: Connection) -> Response | Any:
        mod = response_module(type(request))
        config = self.configs.get(conn.listener_name.upper())

        def respond(code: ErrorCode, mechanisms: tuple[str, ...]) -> bytes:
            resp = make(mod.SaslHandshakeResponse, error_code=code, mechanisms=mechanisms)
            return encode_response(type(request), header.correlation_id, resp)

        if config is None or conn.authenticated:
            # a PLAINTEXT/SSL listener, or a handshake after authentication (no re-auth here)
            return respond(ErrorCode.illegal_sasl_state, ())
        auth: SaslAuthenticator = conn.sasl or SaslAuthenticator(config)
        conn.sasl = auth
        enabled = config.enabled_mechanisms
        try:
            auth.handshake(request.mechanism, header.request_api_version)
        except SaslError as exc:
            log.info("Failed SASL handshake from %s on listener %s: %s (enabled: %s)",
                     conn.peer, conn.listener_name, exc, ", ".join(enabled))
            code = ErrorCode(exc.error_code)
            return self._close_later(conn, respond(code, enabled), None)
        if auth.raw:
            conn.decoder.min_size = 0  # bare tokens from now on, however short
        return respond(ErrorCode.none, enabled)

    # -- SaslAuthenticate -----------------------------------------------------------------------
    def handle_authenticate(self, header: Any, request: Any, conn: Connection) -> Response | Any:
        mod = response_module(type(request))

        def respond(code: ErrorCode, message: str | None, token: bytes = b"") -> bytes:
            resp = make(mod.SaslAuthenticateResponse, error_code=code, error_message=message,
                        auth_bytes=token, session_lifetime=0)
            return encode_response(type(request), header.correlation_id, resp)

        auth: SaslAuthenticator | None = conn.sasl
        if conn.authenticated:
            return respond(ErrorCode.illegal_sasl_state,
                           "SaslAuthenticate request received after successful authentication"
                           if auth is not None else
                           f"SaslAuthenticate request on listener {conn.listener_name}, "
                           "which does not use SASL")
        if auth is None or auth.state is SaslState.HANDSHAKE:
            exc = IllegalSaslStateError(
                "Unexpected Kafka request of type SASL_AUTHENTICATE during SASL handshake.")
            self._failed(conn, auth, exc)
            return self._close_later(conn, respond(ErrorCode.illegal_sasl_state, exc.message),
                                     None)
        try:
            challenge = auth.evaluate(bytes(request.auth_bytes))
        except SaslError as exc:
            self._failed(conn, auth, exc)
            return self._close_later(conn, respond(ErrorCode(exc.error_code), exc.message), auth)
        if auth.complete:
            self._authenticated(conn, auth)
        return respond(ErrorCode.none, None, challenge)

    # -- outcomes -------------------------------------------------------------------------------
    def _authenticated(self, conn: Connection, auth: SaslAuthenticator) -> None:
        assert auth.principal_name is not None
        conn.principal = KafkaPrincipal("User", auth.principal_name)
        conn.authenticated = True
        conn.decoder.min_size = 8
        conn.decoder.set_limit(conn.server.max_request_size, "socket.request.max.bytes")
        log.debug("Authenticated %s as %s with %s on listener %s", conn.peer, conn.principal,
                  auth.mechanism, conn.listener_name)

    def _failed(self, conn: Connection, auth: SaslAuthenticator | None, exc: SaslError) -> None:
        level = logging.INFO if isinstance(exc, SaslAuthenticationError) else logging.WARNING
        log.log(level, "Failed authentication with %s on listener %s (%s)", conn.peer,
                conn.listener_name, exc.message)

    def _close_later(self, conn: Connection, response: bytes | None,
                     auth: SaslAuthenticator | None) -> Any:
        """Answer (if `response`) and close; failed credentials wait for the configured delay."""
        delay_ms = auth.config.failed_authentication_delay_ms if auth is not None else 0
        if auth is not None and auth.state is not SaslState.FAILED:
            delay_ms = 0
        if conn.sasl is not None:
            conn.sasl.state = SaslState.FAILED
        return _respond_then_close(conn, response, delay_ms / 1000)


def listener_security_protocols(props: Mapping[str, str], listeners: list[str]) -> dict[str, str]:
    """Each listener's protocol by Kafka's listener.security.protocol.map (a listener named as a
    protocol maps to itself)."""
    mapping: dict[str, str] = {}
    for item in props.get("listener.security.protocol.map", "").split(","):
        name, sep, protocol = item.strip().partition(":")
        if sep:
            mapping[name.strip().upper()] = protocol.strip().upper()
    return {name.upper(): mapping.get(name.upper(), name.upper()) for name in listeners}


def sasl_server_configs(props: Mapping[str, str], listeners: list[str],
                        lookup: Any) -> dict[str, SaslServerConfig]:
    """The settings of every SASL_PLAINTEXT / SASL_SSL listener (raises ValueError on a bad
    JAAS configuration, so the broker refuses to start)."""
    configs = {name: SaslServerConfig.for_listener(props, name, lookup)
               for name, protocol in listener_security_protocols(props, listeners).items()
               if protocol.startswith("SASL_")}
    for name, config in configs.items():
        refused = [m for m in config.enabled_mechanisms if m not in IMPLEMENTED_MECHANISMS]
        if refused:
            log.warning("Listener %s enables SASL mechanism(s) %s, which odradek does not "
                        "implement: handshakes for them are refused with "
                        "UNSUPPORTED_SASL_MECHANISM. Set listener.name.%s."
                        "sasl.enabled.mechanisms (or sasl.enabled.mechanisms; Kafka's default "
                        "is GSSAPI) to some of %s", name, ", ".join(refused), name.lower(),
                        ", ".join(IMPLEMENTED_MECHANISMS))
        if "PLAIN" in config.enabled_mechanisms and not config.plain_users:
            log.warning("Listener %s enables PLAIN but its PlainLoginModule lists no "
                        "user_<name>=\"<password>\" options: every PLAIN login will fail",
                        name)
    return configs
