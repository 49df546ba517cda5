"""SCRAM credentials (security/scram.py): RFC 7677's SCRAM-SHA-256 test vector, the ZooKeeper
text form, SCRAM-SHA-512 round trips through scramp's client, and AlterUserScramCredentials'
per-alteration checks."""

from __future__ import annotations

import base64

import pytest
import scramp
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.common.sanitizer import desanitize_user, sanitize_user
from odradek.security import errors
from odradek.security.sasl_server import ScramServer
from odradek.security.scram import (
    MIN_ITERATIONS,
    ScramCredential,
    ScramMechanism,
    alteration_error,
    apply_credential_changes,
    credential_from_password,
    credential_from_salted_password,
    salted_password,
    user_credentials,
)

# RFC 7677 section 3: user "user", password "pencil", salt W22ZaJ0SNY7soEsUEjb6gQ==, i=4096
RFC7677_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC7677_CLIENT_FIRST = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC7677_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC7677_SERVER_FIRST = ("r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                        "s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
RFC7677_CLIENT_FINAL = ("c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                        "p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC7677_SERVER_FINAL = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def test_rfc7677_vector_server_side() -> None:
    cred = credential_from_password("SCRAM-SHA-256", "pencil", 4096, RFC7677_SALT)
    server = scramp.ScramMechanism("SCRAM-SHA-256").make_server(
        lambda user: cred.auth_info(), s_nonce=RFC7677_SERVER_NONCE)
    server.set_client_first(RFC7677_CLIENT_FIRST)
    assert server.get_server_first() == RFC7677_SERVER_FIRST
    server.set_client_final(RFC7677_CLIENT_FINAL)
    assert server.get_server_final() == RFC7677_SERVER_FINAL


def test_rfc7677_vector_through_the_broker_mechanism() -> None:
    cred = credential_from_password("SCRAM-SHA-256", "pencil", 4096, RFC7677_SALT)
    server = ScramServer("SCRAM-SHA-256", lambda m, u: cred if u == "user" else None,
                         s_nonce=RFC7677_SERVER_NONCE)
    assert server.evaluate(RFC7677_CLIENT_FIRST.encode()).decode() == RFC7677_SERVER_FIRST
    assert server.evaluate(RFC7677_CLIENT_FINAL.encode()).decode() == RFC7677_SERVER_FINAL
    assert server.complete and server.authorization_id == "user"


def test_salted_password_gives_the_same_credential() -> None:
    salted = salted_password("SCRAM-SHA-256", "pencil", RFC7677_SALT, 4096)
    assert credential_from_salted_password("SCRAM-SHA-256", RFC7677_SALT, salted, 4096) == \
        credential_from_password("SCRAM-SHA-256", "pencil", 4096, RFC7677_SALT)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_round_trip_with_scramp_client(mechanism: str) -> None:
    cred = credential_from_password(mechanism, "alice-secret", 8192)
    for password, ok in (("alice-secret", True), ("wrong", False)):
        server = ScramServer(mechanism, lambda m, u: cred if u == "alice" else None)
        client = scramp.ScramClient([mechanism], "alice", password)
        first = server.evaluate(client.get_client_first().encode())
        client.set_server_first(first.decode())
        if ok:
            client.set_server_final(server.evaluate(client.get_client_final().encode()).decode())
            assert server.complete and server.authorization_id == "alice"
        else:
            with pytest.raises(errors.SaslAuthenticationError, match="invalid credentials"):
                server.evaluate(client.get_client_final().encode())


def test_credential_text_form() -> None:
    cred = credential_from_password("SCRAM-SHA-512", "x", 4096, b"salty-salt-12")
    text = cred.to_text()
    assert text.startswith("salt=c2FsdHktc2FsdC0xMg==,stored_key=")
    assert text.endswith(",iterations=4096")
    assert ScramCredential.from_text(text) == cred
    with pytest.raises(ValueError):
        ScramCredential.from_text("salt=!!,stored_key=a,server_key=b,iterations=4096")
    with pytest.raises(ValueError):
        ScramCredential.from_text("salt=c2FsdHk=")


@settings(max_examples=30, deadline=None)
@given(st.binary(min_size=1, max_size=64), st.binary(min_size=1, max_size=64),
       st.binary(min_size=1, max_size=64), st.integers(4096, 1 << 30))
def test_text_form_round_trips(salt: bytes, stored: bytes, server: bytes, its: int) -> None:
    cred = ScramCredential(salt, stored, server, its)
    assert ScramCredential.from_text(cred.to_text()) == cred


def test_minimum_iterations() -> None:
    with pytest.raises(ValueError, match="minimum"):
        credential_from_password("SCRAM-SHA-256", "x", MIN_ITERATIONS - 1)


def test_alteration_errors() -> None:
    assert alteration_error(ScramMechanism.UNKNOWN, 4096) == (
        errors.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
    assert alteration_error(ScramMechanism.SCRAM_SHA_256, 4095) == (
        errors.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
    assert alteration_error(ScramMechanism.SCRAM_SHA_512, 16385) == (
        errors.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
    assert alteration_error(ScramMechanism.SCRAM_SHA_512, None) is None
    assert ScramMechanism.from_type(7) is ScramMechanism.UNKNOWN
    assert ScramMechanism.from_name("scram-sha-512") is ScramMechanism.SCRAM_SHA_512


def test_user_config_changes_keep_other_keys() -> None:
    cred = credential_from_password("SCRAM-SHA-256", "x")
    config = {"producer_byte_rate": "1024", "SCRAM-SHA-512": cred.to_text()}
    new = apply_credential_changes(config, {"SCRAM-SHA-256": cred}, ["SCRAM-SHA-512"])
    assert new == {"producer_byte_rate": "1024", "SCRAM-SHA-256": cred.to_text()}
    assert user_credentials(new) == {"SCRAM-SHA-256": cred}
    assert user_credentials({"SCRAM-SHA-256": "garbage"}) == {}


def test_user_names_are_sanitized_as_kafka() -> None:
    assert sanitize_user("alice") == "alice"
    assert sanitize_user("CN=a b,O=x*") == "CN%3Da%20b%2CO%3Dx%2A"
    assert desanitize_user(sanitize_user("CN=a b,O=x*/~")) == "CN=a b,O=x*/~"
