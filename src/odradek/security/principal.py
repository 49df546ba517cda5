"""Kafka principals (Kafka's KafkaPrincipal).

MINIMAL STAND-IN written by helper SB to run its tests; helper SA's module replaces it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KafkaPrincipal:
    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        kind, sep, name = text.partition(":")
        if not sep or not kind:
            raise ValueError(f"expected a principal of the form Type:name, got {text!r}")
        return cls(kind, name)


ANONYMOUS = KafkaPrincipal("User", "ANONYMOUS")
