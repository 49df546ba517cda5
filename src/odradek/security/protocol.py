"""Kafka's SecurityProtocol: how a listener's connections are secured."""

from __future__ import annotations

from enum import StrEnum


class SecurityProtocol(StrEnum):
    """A str and an Enum (the plan's `(str, Enum)`): str() is the name."""

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

    @property
    def id(self) -> int:
        """The wire id (UpdateMetadata's security_protocol): 0, 1, 2, 3."""
        return _IDS[self]

    @classmethod
    def for_id(cls, value: int) -> SecurityProtocol:
        for protocol, ident in _IDS.items():
            if ident == value:
                return protocol
        raise ValueError(f"unknown security protocol id {value}")

    @classmethod
    def for_name(cls, name: str) -> SecurityProtocol:
        """The protocol called `name` (case-insensitive); ValueError names the choices."""
        try:
            return cls(name.strip().upper())
        except ValueError:
            raise ValueError(
                f"unknown security protocol {name!r} (expected one of "
                f"{', '.join(p.value for p in cls)})") from None


_IDS = {SecurityProtocol.PLAINTEXT: 0, SecurityProtocol.SSL: 1,
        SecurityProtocol.SASL_PLAINTEXT: 2, SecurityProtocol.SASL_SSL: 3}
