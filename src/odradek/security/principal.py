"""Minimal stand-in for helper SA's security/principal.py (same names and signatures): only
KafkaPrincipal and ANONYMOUS, which the authorizer needs. SA's module replaces this one."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        kind, sep, name = text.partition(":")
        if not sep or not kind:
            raise ValueError(f"expected a string in format principalType:principalName but got "
                             f"{text}")
        return cls(kind, name)


ANONYMOUS = KafkaPrincipal("User", "ANONYMOUS")
