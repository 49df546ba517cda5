"""KafkaPrincipal and Kafka's ssl.principal.mapping.rules (SslPrincipalMapper), as a table."""

from __future__ import annotations

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID
from hypothesis import given
from hypothesis import strategies as st

from odradek.security.principal import (
    ANONYMOUS,
    KafkaPrincipal,
    NoMatchingRule,
    SslPrincipalMapper,
    principal_from_dn,
    rfc2253_name,
)


def test_principal_str_and_parse() -> None:
    p = KafkaPrincipal("User", "alice")
    assert str(p) == "User:alice"
    assert KafkaPrincipal.parse("User:alice") == p
    assert KafkaPrincipal.parse("User:CN=a:b,O=x") == KafkaPrincipal("User", "CN=a:b,O=x")
    assert str(ANONYMOUS) == "User:ANONYMOUS"
    for bad in ("alice", ":alice", ""):
        with pytest.raises(ValueError):
            KafkaPrincipal.parse(bad)


@given(st.text(min_size=1).filter(lambda t: ":" not in t), st.text())
def test_parse_inverts_str(kind: str, name: str) -> None:
    p = KafkaPrincipal(kind, name)
    assert KafkaPrincipal.parse(str(p)) == p


RULES = ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
         "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
         "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U,"
         "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U,"
         "DEFAULT")


@pytest.mark.parametrize(("rules", "dn", "name"), [
    # Kafka's SslPrincipalMapperTest, and the KIP-371 examples
    ("DEFAULT", "CN=alice,OU=eng,O=acme", "CN=alice,OU=eng,O=acme"),
    (None, "CN=alice,OU=eng,O=acme", "CN=alice,OU=eng,O=acme"),
    (RULES, "CN=kafka-server1,OU=ServiceUsers,O=Org,C=US", "kafka-server1"),
    (RULES, "CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Palo Alto,ST=CA,C=US", "duke@javasoft"),
    (RULES, "cn=duke,ou=javasoft,dc=example,dc=com", "DUKE@JAVASOFT"),
    (RULES, "OU=JavaSoft,O=Sun Microsystems,C=US", "OU=JavaSoft,O=Sun Microsystems,C=US"),
    ("RULE:^CN=(.*),OU=.*$/$1/L, DEFAULT", "CN=Alice,OU=eng", "alice"),
    ("RULE:^CN=([^,]*),.*$/user-$1/", "CN=bob,O=x", "user-bob"),
    # a reference to a group that does not exist stays literal (Kafka escapes it)
    ("RULE:^CN=(.*?),.*$/$1@$2/", "CN=bob,O=x", "bob@$2"),
    # a backslash escapes in the replacement
    ("RULE:^CN=(.*?),.*$/\\$1/", "CN=bob,O=x", "$1"),
    ("  RULE:^CN=(.*?),.*$/$1/U ,  DEFAULT  ", "CN=bob,O=x", "BOB"),
    ("RULE:^CN=(.*?),.*$/$1/U,DEFAULT", "O=x", "O=x"),
])
def test_mapping_rules(rules: str | None, dn: str, name: str) -> None:
    mapper = SslPrincipalMapper.from_rules(rules)
    assert mapper.get_name(dn) == name
    assert principal_from_dn(dn, mapper) == KafkaPrincipal("User", name)


def test_no_rule_applies() -> None:
    mapper = SslPrincipalMapper.from_rules("RULE:^CN=(.*?),OU=x$/$1/")
    with pytest.raises(NoMatchingRule, match="No rules apply to O=y"):
        mapper.get_name("O=y")


@pytest.mark.parametrize("rules", [
    "RULE:^CN=(.*?)/$1/X",
    "RULE:foo",
    "DEFAULT, nonsense",
    "RULE:^CN=(/$1/",  # not a regular expression
])
def test_invalid_rules_refused(rules: str) -> None:
    with pytest.raises(ValueError, match="Invalid rule"):
        SslPrincipalMapper.from_rules(rules)


def test_rfc2253_as_java_prints_it() -> None:
    name = x509.Name([
        x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "acme, inc"),
        x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "eng"),
        x509.NameAttribute(NameOID.COMMON_NAME, "alice"),
    ])
    assert rfc2253_name(name) == "CN=alice,OU=eng,O=acme\\, inc,C=US"
    email = x509.Name([x509.NameAttribute(NameOID.EMAIL_ADDRESS, "a@b"),
                       x509.NameAttribute(NameOID.COMMON_NAME, "a")])
    # attributes without a keyword: OID=#hex of the DER value (IA5String "a@b")
    assert rfc2253_name(email) == "CN=a,1.2.840.113549.1.9.1=#1603614062"
