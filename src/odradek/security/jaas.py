"""JAAS configuration text (Kafka's JaasConfig and the JVM's JAAS file syntax).

A login module entry is ``<LoginModuleClass> <flag> key=value ... ;`` with the flag one of
required, requisite, sufficient, optional and values either words or quoted strings (double or
single quotes, backslash escapes). Comments (``//`` and ``/* */``) are skipped. A broker's
``sasl.jaas.config`` value holds exactly one entry, as Kafka requires; a JAAS file holds named
sections ``KafkaServer { ... };``, ``Client { ... };`` of one or more entries.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

FLAGS = ("required", "requisite", "sufficient", "optional")

_TOKEN = re.compile(r"""
    (?P<ws>\s+|//[^\n]*|/\*.*?\*/)
  | (?P<quoted>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
  | (?P<punct>[{};=])
  | (?P<word>[^\s{};="']+)
""", re.VERBOSE | re.DOTALL)
_ESCAPE = re.compile(r"\\(.)", re.DOTALL)


class JaasError(ValueError):
    """Text that is not valid JAAS configuration."""


@dataclass(frozen=True)
class JaasEntry:
    login_module: str
    flag: str
    options: Mapping[str, str] = field(default_factory=dict)


def quote(value: str) -> str:
    """``value`` as a JAAS quoted string (the inverse of the parser's quoted-string rule)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise JaasError(f"unterminated quote or comment at offset {pos} of JAAS text")
        pos = m.end()
        kind = m.lastgroup
        assert kind is not None
        if kind == "ws":
            continue
        value = m.group(kind)
        if kind == "quoted":
            value = _ESCAPE.sub(r"\1", value[1:-1])
        out.append((kind, value))
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.pos = 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self, what: str) -> tuple[str, str]:
        tok = self.peek()
        if tok is None:
            raise JaasError(f"JAAS text ends where {what} was expected")
        self.pos += 1
        return tok

    def expect(self, punct: str) -> None:
        kind, value = self.take(repr(punct))
        if kind != "punct" or value != punct:
            raise JaasError(f"expected {punct!r} in JAAS text, found {value!r}")

    def word(self, what: str) -> str:
        kind, value = self.take(what)
        if kind != "word":
            raise JaasError(f"expected {what} in JAAS text, found {value!r}")
        return value

    def entry(self) -> JaasEntry:
        module = self.word("a login module class name")
        flag = self.word("a control flag").lower()
        if flag not in FLAGS:
            raise JaasError(f"invalid control flag {flag!r} for login module {module} "
                            f"(one of {', '.join(FLAGS)})")
        options: dict[str, str] = {}
        while True:
            tok = self.peek()
            if tok == ("punct", ";"):
                self.pos += 1
                return JaasEntry(module, flag, options)
            key = self.word("an option name or ';'")
            self.expect("=")
            kind, value = self.take(f"the value of option {key}")
            if kind not in ("word", "quoted"):
                raise JaasError(f"expected the value of option {key}, found {value!r}")
            options[key] = value

    def entries_until(self, end: str | None) -> list[JaasEntry]:
        out: list[JaasEntry] = []
        while (tok := self.peek()) is not None and tok != ("punct", end):
            out.append(self.entry())
        return out


def parse_login_modules(text: str) -> list[JaasEntry]:
    """Every login module entry of a ``sasl.jaas.config``-style text."""
    parser = _Parser(text)
    entries = parser.entries_until(None)
    return entries


def parse_jaas_config(text: str) -> JaasEntry:
    """The one login module of a ``sasl.jaas.config`` value (Kafka refuses zero or several)."""
    entries = parse_login_modules(text)
    if len(entries) != 1:
        raise JaasError(f"JAAS config property contains {len(entries)} login modules, "
                        "should be 1 module")
    return entries[0]


def parse_jaas_file(text: str) -> dict[str, list[JaasEntry]]:
    """The sections of a JAAS file: ``Name { entry; ... };`` by name."""
    parser = _Parser(text)
    sections: dict[str, list[JaasEntry]] = {}
    while parser.peek() is not None:
        name = parser.word("a section name")
        parser.expect("{")
        entries = parser.entries_until("}")
        parser.expect("}")
        if parser.peek() == ("punct", ";"):
            parser.pos += 1
        if name in sections:
            raise JaasError(f"JAAS file has section {name} twice")
        sections[name] = entries
    return sections


def load_jaas_section(path: str | Path, section: str) -> list[JaasEntry]:
    """The entries of one section of a JAAS file (empty if the section is absent)."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise JaasError(f"cannot read JAAS file {path}: {exc}") from None
    return parse_jaas_file(text).get(section, [])
