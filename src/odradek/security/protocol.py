"""Listeners' security protocols (Kafka's SecurityProtocol).

MINIMAL STAND-IN written by helper SB to run its tests; helper SA's module replaces it."""

from __future__ import annotations

from enum import Enum


class SecurityProtocol(str, Enum):  # noqa: UP042  (the plan names str, Enum)
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def uses_ssl(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def uses_sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)
