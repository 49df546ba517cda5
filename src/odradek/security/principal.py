"""Who a connection is (Kafka's KafkaPrincipal), and how a TLS client certificate becomes one:
the subject's distinguished name in RFC 2253 form as Java prints it (`CN=alice,OU=eng,O=acme`),
mapped by `ssl.principal.mapping.rules` (Kafka's SslPrincipalMapper; KIP-371)."""

from __future__ import annotations

import re
from dataclasses import dataclass

USER_TYPE = "User"
DEFAULT_SSL_PRINCIPAL_MAPPING_RULES = "DEFAULT"


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """`User:alice` -> KafkaPrincipal("User", "alice") (the name may contain colons)."""
        if text is None or ":" not in text:
            raise ValueError(f"expected a principal of the form Type:name, got {text!r}")
        principal_type, name = text.split(":", 1)
        if not principal_type:
            raise ValueError(f"expected a principal of the form Type:name, got {text!r}")
        return cls(principal_type, name)


ANONYMOUS = KafkaPrincipal(USER_TYPE, "ANONYMOUS")


class NoMatchingRule(ValueError):
    """No rule of ssl.principal.mapping.rules applies to a distinguished name."""


# Kafka's rule grammar: DEFAULT | RULE:pattern/replacement/[LU] (escapes with backslash)
_RULE = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)")
_RULE_PARSER = re.compile(_RULE)


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""  # "L", "U" or ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        result = self.pattern.sub(lambda m: _java_replacement(m, self.replacement), dn)
        if self.case == "L":
            return result.lower()
        if self.case == "U":
            return result.upper()
        return result

    def __str__(self) -> str:
        if self.pattern is None:
            return "DEFAULT"
        return f"RULE:{self.pattern.pattern}/{self.replacement}" + (
            f"/{self.case}" if self.case else "")


def _java_replacement(m: re.Match[str], replacement: str) -> str:
    """Java's Matcher.appendReplacement on `replacement` ($n group references, backslash
    escapes), after SslPrincipalMapper's escaping of references to groups that do not exist."""
    groups = m.re.groups
    out: list[str] = []
    i, n = 0, len(replacement)
    while i < n:
        c = replacement[i]
        if c == "\\":
            if i + 1 >= n:
                raise ValueError("character to be escaped is missing")
            out.append(replacement[i + 1])
            i += 2
        elif c == "$":
            if i + 1 >= n or not replacement[i + 1].isdigit():
                raise ValueError(f"Illegal group reference in {replacement!r}")
            ref = int(replacement[i + 1])
            if groups and ref > groups:  # Kafka escapes a reference to a missing group
                out.append("$")
                i += 1
                continue
            j = i + 2
            while j < n and replacement[j].isdigit() and ref * 10 + int(replacement[j]) <= groups:
                ref = ref * 10 + int(replacement[j])
                j += 1
            if ref > groups:
                raise ValueError(f"No group {ref} in {m.re.pattern!r}")
            out.append(m.group(ref) or "")
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


class SslPrincipalMapper:
    """`ssl.principal.mapping.rules`: the first rule that applies names the principal."""

    def __init__(self, rules: list[_Rule]) -> None:
        self.rules = rules

    @classmethod
    def from_rules(cls, text: str | None) -> SslPrincipalMapper:
        """Parse Kafka's rule list; ValueError("Invalid rule: ...") for one that is not."""
        if text is None:
            text = DEFAULT_SSL_PRINCIPAL_MAPPING_RULES
        rules: list[_Rule] = []
        for m in _RULE_SPLITTER.finditer(text.strip()):
            rule = m.group(1)
            parsed = _RULE_PARSER.match(rule)
            if parsed is None:
                raise ValueError(f"Invalid rule: {rule}")
            if parsed.end() != len(rule):
                raise ValueError(f"Invalid rule: `{rule}`, unmatched substring: "
                                 f"`{rule[parsed.end():]}`")
            if parsed.group(1) is not None:
                rules.append(_Rule(None))
            elif parsed.group(2) is not None:
                try:
                    pattern = re.compile(parsed.group(2))
                except re.error as exc:
                    raise ValueError(f"Invalid rule: {rule}: {exc}") from None
                rules.append(_Rule(pattern, parsed.group(4) or "", parsed.group(6) or ""))
            elif parsed.group(7):  # text that is neither DEFAULT nor RULE:...
                raise ValueError(f"Invalid rule: {rule}")
        return cls(rules)

    def get_name(self, dn: str) -> str:
        for rule in self.rules:
            name = rule.apply(dn)
            if name is not None:
                return name
        raise NoMatchingRule(f"No rules apply to {dn}, rules {self}")

    def __str__(self) -> str:
        return "[" + ", ".join(str(r) for r in self.rules) + "]"


def principal_from_dn(dn: str, mapper: SslPrincipalMapper | None = None) -> KafkaPrincipal:
    """The principal of a TLS client whose certificate's subject is `dn`."""
    name = (mapper or SslPrincipalMapper.from_rules(None)).get_name(dn)
    return KafkaPrincipal(USER_TYPE, name)


# -- the subject's DN as Java's X500Principal.getName() (RFC 2253) prints it ------------------
_KEYWORDS = {
    "2.5.4.3": "CN", "2.5.4.6": "C", "2.5.4.7": "L", "2.5.4.8": "ST", "2.5.4.10": "O",
    "2.5.4.11": "OU", "2.5.4.9": "STREET", "0.9.2342.19200300.100.1.25": "DC",
    "0.9.2342.19200300.100.1.1": "UID",
}
_SPECIAL = set(',=+<>#;"\\')


def _escape(value: str) -> str:
    out = []
    for i, c in enumerate(value):
        if c in _SPECIAL and (c != "#" or i == 0):
            out.append("\\" + c)
        elif c == " " and (i == 0 or i == len(value) - 1):
            out.append("\\ ")
        else:
            out.append(c)
    return "".join(out)


def _der_hex(attribute: object) -> str:
    value = attribute.value  # type: ignore[attr-defined]
    data = value if isinstance(value, bytes) else str(value).encode()
    tag = int(getattr(getattr(attribute, "_type", None), "value", 12))
    n = len(data)
    length = bytes([n]) if n < 128 else (
        bytes([0x80 | ((n.bit_length() + 7) // 8)]) + n.to_bytes((n.bit_length() + 7) // 8, "big"))
    return "#" + (bytes([tag]) + length + data).hex()


def rfc2253_name(name: object) -> str:
    """A `cryptography.x509.Name` as Java prints it: most specific RDN first, known attribute
    keywords (CN, OU, O, L, ST, C, STREET, DC, UID), other attributes as OID=#hex-DER."""
    rdns = []
    for rdn in reversed(list(name.rdns)):  # type: ignore[attr-defined]
        parts = []
        for attr in rdn:
            oid = attr.oid.dotted_string
            keyword = _KEYWORDS.get(oid)
            if keyword is None:
                parts.append(f"{oid}={_der_hex(attr)}")
            else:
                parts.append(f"{keyword}={_escape(str(attr.value))}")
        rdns.append("+".join(parts))
    return ",".join(rdns)


def dn_of_certificate(der: bytes) -> str:
    """The subject DN (RFC 2253, Java's form) of a DER certificate."""
    from cryptography import x509

    return rfc2253_name(x509.load_der_x509_certificate(der).subject)


def ssl_principal(der: bytes | None, mapper: SslPrincipalMapper | None) -> KafkaPrincipal:
    """The principal of a TLS connection: its client certificate's mapped DN, or ANONYMOUS
    without a certificate (as Kafka's DefaultKafkaPrincipalBuilder)."""
    if not der:
        return ANONYMOUS
    return principal_from_dn(dn_of_certificate(der), mapper)
