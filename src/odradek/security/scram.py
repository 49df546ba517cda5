"""SCRAM credentials (RFC 5802 / RFC 7677) as Kafka stores them (Kafka's ScramCredential,
ScramMechanism, ScramCredentialUtils), computed with the `scramp` library.

A credential is (salt, stored key, server key, iterations); the password itself is never kept.
In ZooKeeper it is the text ``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>``
under the mechanism's name in ``/config/users/<user>``.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from enum import IntEnum

import scramp
from scramp import core as scramp_core

from ..common import entropy
from .errors import (
    UNACCEPTABLE_CREDENTIAL,
    UNSUPPORTED_SASL_MECHANISM,
    UnsupportedSaslMechanismError,
)


class ScramMechanism(IntEnum):
    """Kafka's ScramMechanism with its wire type (DescribeUserScramCredentials and
    AlterUserScramCredentials): 0 is UNKNOWN."""

    UNKNOWN = 0
    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2

    @property
    def mechanism_name(self) -> str:
        return self.name.replace("_", "-")

    @classmethod
    def from_name(cls, name: str) -> ScramMechanism:
        try:
            return cls[name.strip().upper().replace("-", "_")]
        except KeyError:
            raise UnsupportedSaslMechanismError(f"Unknown SCRAM mechanism {name}") from None

    @classmethod
    def from_type(cls, type_: int) -> ScramMechanism:
        try:
            return cls(type_)
        except ValueError:
            return cls.UNKNOWN


SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
MIN_ITERATIONS = 4096  # Kafka's ScramMechanism.minIterations (both mechanisms)
MAX_ITERATIONS = 16384  # Kafka's ZkAdminManager refuses more ("Too many iterations")
DEFAULT_ITERATIONS = 4096


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"invalid base64 {what} in SCRAM credential") from None


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_text(self) -> str:
        """Kafka's ScramCredentialUtils.credentialToString form."""
        return (f"salt={_b64(self.salt)},stored_key={_b64(self.stored_key)},"
                f"server_key={_b64(self.server_key)},iterations={self.iterations}")

    @classmethod
    def from_text(cls, text: str) -> ScramCredential:
        fields: dict[str, str] = {}
        for part in text.split(","):
            key, sep, value = part.partition("=")
            if not sep:
                raise ValueError(f"malformed SCRAM credential field {part!r}")
            fields[key.strip()] = value.strip()
        try:
            iterations = int(fields["iterations"])
            return cls(_unb64(fields["salt"], "salt"), _unb64(fields["stored_key"], "stored_key"),
                       _unb64(fields["server_key"], "server_key"), iterations)
        except KeyError as exc:
            raise ValueError(f"SCRAM credential lacks {exc.args[0]}") from None

    def auth_info(self) -> tuple[bytes, bytes, bytes, int]:
        """The tuple scramp's server asks its auth function for."""
        return self.salt, self.stored_key, self.server_key, self.iterations


def _hash_name(mechanism: str) -> str:
    ScramMechanism.from_name(mechanism)  # refuses unknown names
    return mechanism.upper()


def credential_from_password(mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS,
                             salt: bytes | None = None) -> ScramCredential:
    """A new credential (random salt unless given), as Kafka's ScramFormatter.generateCredential."""
    if iterations < MIN_ITERATIONS:
        raise ValueError(f"Iterations {iterations} is less than the minimum {MIN_ITERATIONS} "
                         f"for {mechanism}")
    mech = scramp.ScramMechanism(_hash_name(mechanism))
    if salt is None:
        salt = entropy.token_bytes(32)
    salt_, stored, server, its = mech.make_auth_info(password, iterations, salt)
    return ScramCredential(bytes(salt_), bytes(stored), bytes(server), int(its))


def credential_from_salted_password(mechanism: str, salt: bytes, salted_password: bytes,
                                    iterations: int) -> ScramCredential:
    """The credential of an AlterUserScramCredentials upsertion (the client sends the salted
    password; the broker derives the stored and server keys, Kafka's ScramFormatter)."""
    mech = scramp.ScramMechanism(_hash_name(mechanism))
    _, stored, server = scramp_core._c_key_stored_key_s_key(mech.hf, salted_password)
    return ScramCredential(bytes(salt), bytes(stored), bytes(server), iterations)


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(password, salt, i) of RFC 5802 (what AlterUserScramCredentials carries)."""
    mech = scramp.ScramMechanism(_hash_name(mechanism))
    return bytes(scramp_core.hi(mech.hf, scramp_core.uenc(scramp_core.saslprep(password)),
                                salt, iterations))


def alteration_error(mechanism: ScramMechanism, iterations: int | None) -> tuple[int, str] | None:
    """Kafka's ZkAdminManager checks of one upsertion or deletion: (error code, message)."""
    if mechanism is ScramMechanism.UNKNOWN:
        return UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    if iterations is not None:
        if iterations < MIN_ITERATIONS:
            return UNACCEPTABLE_CREDENTIAL, "Too few iterations"
        if iterations > MAX_ITERATIONS:
            return UNACCEPTABLE_CREDENTIAL, "Too many iterations"
    return None


def user_credentials(config: dict[str, str]) -> dict[str, ScramCredential]:
    """The SCRAM credentials of a `/config/users/<user>` config (other keys, e.g. quotas, and
    unreadable values are skipped)."""
    out: dict[str, ScramCredential] = {}
    for mechanism in SCRAM_MECHANISMS:
        text = config.get(mechanism)
        if text:
            try:
                out[mechanism] = ScramCredential.from_text(text)
            except ValueError:
                continue
    return out


def apply_credential_changes(config: dict[str, str], upserts: dict[str, ScramCredential],
                             deletions: list[str] | tuple[str, ...]) -> dict[str, str]:
    """A user's config after deleting and upserting SCRAM credentials (other keys kept)."""
    out = {k: v for k, v in config.items() if k not in deletions}
    out.update({m: c.to_text() for m, c in upserts.items()})
    return out
