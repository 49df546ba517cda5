"""The broker's SASL state machine (security/sasl_server.py) fed with tokens: PLAIN and SCRAM
with good and bad passwords, unknown users and mechanisms, and tokens in the wrong state."""

from __future__ import annotations

import pytest
import scramp

from odradek.security import errors
from odradek.security.sasl_server import SaslAuthenticator, SaslServerConfig, SaslState
from odradek.security.scram import credential_from_password

CREDS = {(m, "bob"): credential_from_password(m, "bob-secret")
         for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")}


def config(*mechanisms: str) -> SaslServerConfig:
    return SaslServerConfig("SASL_PLAINTEXT", mechanisms, {"alice": "alice-secret"},
                            lambda m, u: CREDS.get((m, u)))


ALL = config("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI")


def plain(user: str, password: str, authz: str = "") -> bytes:
    return f"{authz}\0{user}\0{password}".encode()


def test_plain_success() -> None:
    auth = SaslAuthenticator(ALL)
    auth.handshake("PLAIN", 1)
    assert auth.state is SaslState.AUTHENTICATE and not auth.raw
    assert auth.evaluate(plain("alice", "alice-secret")) == b""
    assert auth.complete and auth.principal_name == "alice"
    with pytest.raises(errors.IllegalSaslStateError):
        auth.evaluate(plain("alice", "alice-secret"))


@pytest.mark.parametrize("token, message", [
    (plain("alice", "nope"), "Invalid username or password"),
    (plain("mallory", "alice-secret"), "Invalid username or password"),
    (plain("", "x"), "username not specified"),
    (plain("alice", ""), "password not specified"),
    (plain("alice", "alice-secret", authz="admin"), "authorization id"),
    (b"alice\0alice-secret", "expected 3 tokens, got 2"),
    (b"\xff\0\xfe\0", "invalid credentials"),
])
def test_plain_failures(token: bytes, message: str) -> None:
    auth = SaslAuthenticator(ALL)
    auth.handshake("PLAIN", 1)
    with pytest.raises(errors.SaslAuthenticationError, match=message) as info:
        auth.evaluate(token)
    assert info.value.error_code == errors.SASL_AUTHENTICATION_FAILED
    assert auth.state is SaslState.FAILED


def scram_exchange(auth: SaslAuthenticator, mechanism: str, user: str, password: str) -> None:
    client = scramp.ScramClient([mechanism], user, password)
    client.set_server_first(auth.evaluate(client.get_client_first().encode()).decode())
    client.set_server_final(auth.evaluate(client.get_client_final().encode()).decode())


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_authenticates_and_refuses_bad_credentials(mechanism: str) -> None:
    auth = SaslAuthenticator(ALL)
    auth.handshake(mechanism, 0)
    assert auth.raw
    scram_exchange(auth, mechanism, "bob", "bob-secret")
    assert auth.complete and auth.principal_name == "bob" and auth.server is None

    expected = ("Authentication failed during authentication due to invalid credentials with "
                f"SASL mechanism {mechanism}")
    for user, password in (("bob", "wrong"), ("nobody", "bob-secret")):
        auth = SaslAuthenticator(ALL)
        auth.handshake(mechanism, 1)
        with pytest.raises(errors.SaslAuthenticationError) as info:
            scram_exchange(auth, mechanism, user, password)
        assert info.value.message == expected
        assert auth.state is SaslState.FAILED


def test_scram_garbage() -> None:
    auth = SaslAuthenticator(ALL)
    auth.handshake("SCRAM-SHA-256", 1)
    with pytest.raises(errors.SaslAuthenticationError):
        auth.evaluate(b"not a scram message")


@pytest.mark.parametrize("mechanism", ["GSSAPI", "OAUTHBEARER", "SCRAM-SHA-1", "DIGEST-MD5"])
def test_unsupported_mechanisms(mechanism: str) -> None:
    auth = SaslAuthenticator(ALL)
    with pytest.raises(errors.UnsupportedSaslMechanismError,
                       match=f"Unsupported SASL mechanism {mechanism}") as info:
        auth.handshake(mechanism, 1)
    assert info.value.error_code == errors.UNSUPPORTED_SASL_MECHANISM


def test_mechanism_not_enabled_on_listener() -> None:
    auth = SaslAuthenticator(config("SCRAM-SHA-512"))
    with pytest.raises(errors.UnsupportedSaslMechanismError):
        auth.handshake("PLAIN", 1)


def test_wrong_states() -> None:
    auth = SaslAuthenticator(ALL)
    with pytest.raises(errors.IllegalSaslStateError, match="before SaslHandshake") as info:
        auth.evaluate(b"x")
    assert info.value.error_code == errors.ILLEGAL_SASL_STATE
    auth.handshake("PLAIN", 1)
    with pytest.raises(errors.IllegalSaslStateError):
        auth.handshake("PLAIN", 1)
    auth.evaluate(plain("alice", "alice-secret"))
    with pytest.raises(errors.IllegalSaslStateError):
        auth.handshake("PLAIN", 1)


def test_scram_accepts_librdkafkas_doubled_nonce() -> None:
    """librdkafka before 2.2 sends `r=<client nonce><client nonce><server nonce>`; Kafka accepts
    it (it checks that the nonce ends with the combined one), so must we; the proof is real."""
    from scramp import core

    auth = SaslAuthenticator(ALL)
    auth.handshake("SCRAM-SHA-256", 1)
    c_nonce = "fyko+d2lbbFgONRv9qkxdawL"
    client_first_bare = f"n=bob,r={c_nonce}"
    server_first = auth.evaluate(f"n,,{client_first_bare}".encode()).decode()
    fields = dict(item.split("=", 1) for item in server_first.split(","))
    mech = core.ScramMechanism("SCRAM-SHA-256")
    doubled = core.Nonce(c_nonce + fields["r"])
    _, final = core._get_client_final(
        mech.hf, core.Password("bob-secret"), core.Salt.from_str(fields["s"]),
        core.IterationCount(int(fields["i"])), doubled, client_first_bare,
        server_first, None, core.Gs2Header("n", None))
    assert auth.evaluate(str(final).encode()).startswith(b"v=")
    assert auth.complete and auth.principal_name == "bob"
