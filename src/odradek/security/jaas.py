"""MINIMAL STAND-IN written by helper SD so its tests run; helper SB's security/jaas.py replaces
it at merge (same names and signature).

A JAAS login module entry, as Kafka's ``sasl.jaas.config`` holds one:
``<LoginModule class> <flag> key="value" key2=value2;``"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_TOKEN = re.compile(r'\s*(?:(?P<key>[A-Za-z0-9_.\-]+)\s*=\s*(?:"(?P<q>(?:[^"\\]|\\.)*)"'
                    r'|(?P<bare>[^\s;"]+))|(?P<end>;))')


@dataclass(frozen=True)
class JaasEntry:
    login_module: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)


def parse_jaas_config(text: str) -> JaasEntry:
    """One login module entry; ``ValueError`` with a clear message on bad input."""
    parts = text.strip().split(None, 2)
    if len(parts) < 2:
        raise ValueError(f"JAAS config entry must be '<LoginModule> <flag> [options];': {text!r}")
    module, flag = parts[0], parts[1].rstrip(";")
    if flag.lower() not in ("required", "requisite", "sufficient", "optional"):
        raise ValueError(f"invalid JAAS control flag {flag!r}")
    rest = parts[2] if len(parts) > 2 else (";" if parts[1].endswith(";") else "")
    options: dict[str, str] = {}
    pos, ended = 0, False
    while pos < len(rest):
        m = _TOKEN.match(rest, pos)
        if m is None:
            if rest[pos:].strip() == "":
                break
            raise ValueError(f"cannot parse JAAS options near {rest[pos:pos + 20]!r}")
        pos = m.end()
        if m.group("end"):
            ended = True
            if rest[pos:].strip():
                raise ValueError("JAAS config has more than one login module entry")
            break
        value = m.group("q")
        options[m.group("key")] = (re.sub(r"\\(.)", r"\1", value) if value is not None
                                   else m.group("bare"))
    if not ended:
        raise ValueError("JAAS config entry must end with ';'")
    return JaasEntry(module, flag.lower(), options)
