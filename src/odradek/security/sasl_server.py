"""The broker's side of SASL (Kafka's SaslServerAuthenticator and its PLAIN and SCRAM servers),
sans-IO: tokens in, tokens out, one `SaslAuthenticator` per connection.

States, as Kafka's authenticator: HANDSHAKE (ApiVersions and SaslHandshake allowed) ->
AUTHENTICATE (after a v1 handshake: SaslAuthenticate requests carry the tokens) or
RAW_AUTHENTICATE (after a v0 handshake, KIP-152: the client sends bare length-prefixed tokens)
-> COMPLETE or FAILED. PLAIN checks the `user_<name>="<password>"` options of the listener's
PlainLoginModule; SCRAM-SHA-256/512 check the credentials of `/config/users/<user>` through a
lookup function (the broker's CredentialCache), with the `scramp` library doing RFC 5802.
GSSAPI and OAUTHBEARER are not implemented and are refused with UNSUPPORTED_SASL_MECHANISM.
"""

from __future__ import annotations

import enum
import hmac
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import scramp
from scramp import core as scramp_core

from ..common import entropy
from .errors import (
    IllegalSaslStateError,
    SaslAuthenticationError,
    UnsupportedSaslMechanismError,
)
from .jaas import JaasEntry, JaasError, load_jaas_section, parse_jaas_config
from .scram import SCRAM_MECHANISMS, ScramCredential

log = logging.getLogger("odradek.security")

IMPLEMENTED_MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS)
PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
DEFAULT_FAILED_AUTHENTICATION_DELAY_MS = 100  # connection.failed.authentication.delay.ms
DEFAULT_MAX_RECEIVE_SIZE = 524288  # sasl.server.max.receive.size
JAAS_FILE_KEY = "java.security.auth.login.config"

CredentialLookup = Callable[[str, str], "ScramCredential | None"]  # (mechanism, username)


def invalid_credentials_message(mechanism: str) -> str:
    """Kafka's message for a SaslException during authentication."""
    return ("Authentication failed during authentication due to invalid credentials with SASL "
            f"mechanism {mechanism}")


# -- configuration ------------------------------------------------------------------------------
def listener_prop(props: Mapping[str, str], listener: str, key: str) -> str | None:
    """A broker property with Kafka's listener override: `listener.name.<l>.<key>` wins."""
    prefixed = props.get(f"listener.name.{listener.lower()}.{key}")
    return prefixed if prefixed is not None else props.get(key)


def enabled_mechanisms(props: Mapping[str, str], listener: str) -> tuple[str, ...]:
    value = listener_prop(props, listener, "sasl.enabled.mechanisms")
    if value is None:
        value = "GSSAPI"  # Kafka's default
    return tuple(m.strip().upper() for m in value.split(",") if m.strip())


def server_jaas_entries(props: Mapping[str, str], listener: str,
                        mechanism: str) -> list[JaasEntry]:
    """The login modules of a listener's mechanism, found as Kafka's JaasContext does:
    `listener.name.<l>.<mechanism>.sasl.jaas.config`, else the JAAS file's
    `<l>.KafkaServer` section, else its `KafkaServer` section."""
    inline = props.get(f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config")
    if inline is not None:
        return [parse_jaas_config(inline)]
    path = props.get(JAAS_FILE_KEY)
    if path:
        entries = load_jaas_section(path, f"{listener.lower()}.KafkaServer")
        return entries or load_jaas_section(path, "KafkaServer")
    return []


def plain_users(entries: list[JaasEntry]) -> dict[str, str]:
    """PlainLoginModule's `user_<name>="<password>"` options."""
    users: dict[str, str] = {}
    for e in entries:
        if e.login_module == PLAIN_LOGIN_MODULE:
            users.update({k[5:]: v for k, v in e.options.items() if k.startswith("user_")})
    return users


def login_credentials(entries: list[JaasEntry], mechanism: str) -> tuple[str, str] | None:
    """The (username, password) a broker logs in with as a client of this listener (the
    inter-broker identity): PlainLoginModule's or ScramLoginModule's username/password."""
    module = PLAIN_LOGIN_MODULE if mechanism == "PLAIN" else SCRAM_LOGIN_MODULE
    for e in entries:
        if e.login_module == module and "username" in e.options and "password" in e.options:
            return e.options["username"], e.options["password"]
    return None


@dataclass(frozen=True)
class SaslServerConfig:
    """One SASL listener's settings."""

    listener: str
    enabled_mechanisms: tuple[str, ...]
    plain_users: Mapping[str, str] = field(default_factory=dict)
    scram_credentials: CredentialLookup = lambda mechanism, user: None
    failed_authentication_delay_ms: int = DEFAULT_FAILED_AUTHENTICATION_DELAY_MS
    max_receive_size: int = DEFAULT_MAX_RECEIVE_SIZE

    @classmethod
    def for_listener(cls, props: Mapping[str, str], listener: str,
                     scram_credentials: CredentialLookup) -> SaslServerConfig:
        """Raises ValueError (JaasError) on an unreadable JAAS configuration."""
        mechanisms = enabled_mechanisms(props, listener)
        users: dict[str, str] = {}
        if "PLAIN" in mechanisms:
            users = plain_users(server_jaas_entries(props, listener, "PLAIN"))
        delay = listener_prop(props, listener, "connection.failed.authentication.delay.ms")
        size = listener_prop(props, listener, "sasl.server.max.receive.size")
        return cls(listener, mechanisms, users, scram_credentials,
                   DEFAULT_FAILED_AUTHENTICATION_DELAY_MS if delay is None else int(delay),
                   DEFAULT_MAX_RECEIVE_SIZE if size is None else int(size))


# -- mechanism servers --------------------------------------------------------------------------
class MechanismServer(Protocol):
    complete: bool
    authorization_id: str | None

    def evaluate(self, token: bytes) -> bytes: ...


class PlainServer:
    """RFC 4616 PLAIN against the listener's JAAS users (Kafka's PlainSaslServer)."""

    def __init__(self, users: Mapping[str, str]) -> None:
        self.users = users
        self.complete = False
        self.authorization_id: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise IllegalSaslStateError("Authentication exchange has completed")
        try:
            parts = token.decode("utf-8").split("\0")
        except UnicodeDecodeError:
            raise SaslAuthenticationError(invalid_credentials_message("PLAIN")) from None
        if len(parts) != 3:
            raise SaslAuthenticationError(
                f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authz, username, password = parts
        if not username:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        expected = self.users.get(username)
        if expected is None or not _equal(expected, password):
            raise SaslAuthenticationError("Authentication failed: Invalid username or password")
        if authz and authz != username:
            raise SaslAuthenticationError("Authentication failed: Client requested an "
                                          "authorization id that is different from username")
        self.authorization_id = username
        self.complete = True
        return b""


def _equal(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


class _UnknownUser(scramp.ScramException):
    pass


class ScramServer:
    """SCRAM-SHA-256/512 (Kafka's ScramSaslServer) with scramp's ScramServer."""

    def __init__(self, mechanism: str, lookup: CredentialLookup,
                 s_nonce: str | None = None) -> None:
        self.mechanism = mechanism
        self.lookup = lookup
        self.complete = False
        self.authorization_id: str | None = None
        self._username: str | None = None
        self._server = scramp.ScramMechanism(mechanism).make_server(
            self._auth_info, s_nonce=s_nonce if s_nonce is not None else entropy.token_hex())
        self._step = 0

    def _auth_info(self, username: str) -> tuple[bytes, bytes, bytes, int]:
        credential = self.lookup(self.mechanism, username)
        if credential is None:
            raise _UnknownUser(f"unknown user {username!r}")
        self._username = username
        return credential.auth_info()

    def _accept_kafka_nonce(self, client_final: str) -> None:
        """Kafka's ScramSaslServer accepts a client-final nonce that ends with the combined
        nonce (it checks endsWith), and librdkafka before 2.2 sends the client nonce twice;
        the proof is still checked over the message as sent."""
        server = self._server
        sent = scramp_core.ClientFinal(client_final)["r"]
        if str(sent) != str(server.nonce) and str(sent).endswith(str(server.nonce)):
            server.nonce = sent

    def evaluate(self, token: bytes) -> bytes:
        server = self._server
        try:
            message = token.decode("utf-8")
            if self._step == 0:
                self._step = 1
                server.set_client_first(message)
                return server.get_server_first().encode()
            if self._step == 1:
                self._step = 2
                self._accept_kafka_nonce(message)
                server.set_client_final(message)
                final = server.get_server_final()
                self.authorization_id = self._username
                self.complete = True
                return final.encode()
        except (scramp.ScramException, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
            log.debug("%s exchange failed at step %d: %s", self.mechanism, self._step, exc)
            raise SaslAuthenticationError(invalid_credentials_message(self.mechanism)) from None
        raise IllegalSaslStateError("Authentication exchange has completed")


# -- the per-connection authenticator -----------------------------------------------------------
class SaslState(enum.Enum):
    HANDSHAKE = "HANDSHAKE"
    AUTHENTICATE = "AUTHENTICATE"
    RAW_AUTHENTICATE = "RAW_AUTHENTICATE"
    COMPLETE = "COMPLETE"
    FAILED = "FAILED"


class SaslAuthenticator:
    """One connection's SASL exchange (Kafka's SaslServerAuthenticator, without I/O)."""

    __slots__ = ("config", "mechanism", "principal_name", "server", "state")

    def __init__(self, config: SaslServerConfig) -> None:
        self.config = config
        self.state = SaslState.HANDSHAKE
        self.mechanism: str | None = None
        self.server: MechanismServer | None = None
        self.principal_name: str | None = None

    @property
    def raw(self) -> bool:
        """True once a v0 handshake made the next frames bare SASL tokens (KIP-152)."""
        return self.state is SaslState.RAW_AUTHENTICATE

    @property
    def complete(self) -> bool:
        return self.state is SaslState.COMPLETE

    def handshake(self, mechanism: str, version: int) -> str:
        """Select the mechanism. Raises UnsupportedSaslMechanismError (the response still lists
        the enabled mechanisms) or IllegalSaslStateError."""
        if self.state is not SaslState.HANDSHAKE:
            raise IllegalSaslStateError(
                f"Unexpected SaslHandshake request in state {self.state.value}")
        enabled = self.config.enabled_mechanisms
        if mechanism not in enabled or mechanism not in IMPLEMENTED_MECHANISMS:
            self.state = SaslState.FAILED
            raise UnsupportedSaslMechanismError(f"Unsupported SASL mechanism {mechanism}")
        self.mechanism = mechanism
        self.server = (PlainServer(self.config.plain_users) if mechanism == "PLAIN"
                       else ScramServer(mechanism, self.config.scram_credentials))
        self.state = SaslState.RAW_AUTHENTICATE if version == 0 else SaslState.AUTHENTICATE
        return mechanism

    def evaluate(self, token: bytes) -> bytes:
        """One client token in, the server's token out. Raises SaslAuthenticationError (the
        state becomes FAILED) or IllegalSaslStateError."""
        if self.state not in (SaslState.AUTHENTICATE, SaslState.RAW_AUTHENTICATE):
            raise IllegalSaslStateError(
                f"Unexpected SASL token in state {self.state.value}" if self.state
                is not SaslState.HANDSHAKE else "SaslAuthenticate request received before "
                "SaslHandshake")
        assert self.server is not None
        try:
            challenge = self.server.evaluate(token)
        except SaslAuthenticationError:
            self.state = SaslState.FAILED
            raise
        if self.server.complete:
            self.principal_name = self.server.authorization_id
            self.state = SaslState.COMPLETE
            self.server = None  # nothing of the exchange is kept
        return challenge


__all__ = [
    "IMPLEMENTED_MECHANISMS", "JaasError", "SaslAuthenticator", "SaslServerConfig", "SaslState",
    "enabled_mechanisms", "invalid_credentials_message", "listener_prop", "login_credentials",
    "server_jaas_entries",
]
