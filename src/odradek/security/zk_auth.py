"""The brokers' ZooKeeper identity and the ACLs of the znodes they create (Kafka's
``zookeeper.set.acl``, ZkData.defaultAcls, JaasUtils).

Kafka's brokers and ZooKeeper-era tools find their ZooKeeper login in a JAAS file: the file named
by the JVM property ``java.security.auth.login.config`` (a broker config key in odradek, or
``KAFKA_OPTS=-Djava.security.auth.login.config=FILE`` in the environment, as Kafka's scripts pass
it), section ``Client``. odradek supports ZooKeeper's digest scheme, which Debian's ZooKeeper
offers without configuration::

    Client {
        org.apache.zookeeper.server.auth.DigestLoginModule required
        username="kafka"
        password="kafka-secret";
    };

With ``zookeeper.set.acl=true`` every znode a broker creates gets Kafka's default ACLs: all
permissions for the creator's identity (ZooKeeper's ``digest:<user>:<base64 sha1>``) plus read
for anyone, except under the sensitive roots (``/config/users``, ``/config/brokers``,
``/delegation_token``: SCRAM credentials and broker secrets), which nobody else may read, and
``/consumers`` (the old consumers' path), which stays open.

This module is pure: ACLs are :class:`ZkAcl` triples (ZooKeeper's perms bits, scheme, id) that the
coordination store turns into its client's ACL objects.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from .jaas import JaasEntry, parse_jaas_config

__all__ = [
    "ADMIN",
    "ALL",
    "CONSUMERS_PATH",
    "CREATE",
    "DELETE",
    "DIGEST_LOGIN_MODULE",
    "LOGIN_CONFIG_KEY",
    "OPEN_ACL",
    "READ",
    "SENSITIVE_ROOT_PATHS",
    "WORLD_READ",
    "WRITE",
    "ZkAcl",
    "ZkDigestIdentity",
    "ZkSecurity",
    "ZooKeeperLoginError",
    "default_acls",
    "generate_digest",
    "is_sensitive_path",
    "jaas_file_sections",
    "login_config_path",
    "zookeeper_identity",
]

# ZooKeeper's ZooDefs.Perms bits.
READ, WRITE, CREATE, DELETE, ADMIN = 1, 2, 4, 8, 16
ALL = READ | WRITE | CREATE | DELETE | ADMIN

#: The JVM system property naming the JAAS file (a broker config key in odradek).
LOGIN_CONFIG_KEY = "java.security.auth.login.config"
#: The JAAS section of ZooKeeper clients (ZooKeeper's ``zookeeper.sasl.clientconfig`` default).
CLIENT_SECTION = "Client"
DIGEST_LOGIN_MODULE = "org.apache.zookeeper.server.auth.DigestLoginModule"

#: Kafka's ZkData.SensitiveRootPaths: not readable by anyone but the brokers' identity.
SENSITIVE_ROOT_PATHS = ("/config/users", "/config/brokers", "/delegation_token")
#: The old consumers' path, which Kafka keeps open (ZkData.defaultAcls).
CONSUMERS_PATH = "/consumers"


class ZooKeeperLoginError(ValueError):
    """A missing, unreadable or unsupported JAAS ``Client`` login."""


class ZkAcl(NamedTuple):
    """One ZooKeeper ACL entry: permission bits, scheme and id (``world``/``anyone``,
    ``digest``/``user:base64(sha1)``)."""

    perms: int
    scheme: str
    id: str

    def __str__(self) -> str:
        return f"{self.scheme}:{self.id}:{_perms_text(self.perms)}"


def _perms_text(perms: int) -> str:
    return "".join(c for bit, c in ((READ, "r"), (WRITE, "w"), (CREATE, "c"), (DELETE, "d"),
                                    (ADMIN, "a")) if perms & bit)


#: ZooDefs.Ids.READ_ACL_UNSAFE and OPEN_ACL_UNSAFE.
WORLD_READ = ZkAcl(READ, "world", "anyone")
OPEN_ACL = ZkAcl(ALL, "world", "anyone")


def generate_digest(username: str, password: str) -> str:
    """ZooKeeper's DigestAuthenticationProvider.generateDigest: ``user:base64(sha1(user:pw))``."""
    digest = hashlib.sha1(f"{username}:{password}".encode()).digest()
    return f"{username}:{base64.b64encode(digest).decode('ascii')}"


@dataclass(frozen=True)
class ZkDigestIdentity:
    """A ZooKeeper digest login (the JAAS ``Client`` section's username and password)."""

    username: str
    password: str

    @property
    def auth_data(self) -> tuple[str, str]:
        """What the ZooKeeper client sends as ``addauth``: ``("digest", "user:password")``."""
        return ("digest", f"{self.username}:{self.password}")

    @property
    def acl(self) -> ZkAcl:
        """All permissions for this identity (what CREATOR_ALL_ACL becomes for it)."""
        return ZkAcl(ALL, "digest", generate_digest(self.username, self.password))

    def __repr__(self) -> str:  # never print the password
        return f"ZkDigestIdentity(username={self.username!r}, password='***')"


def is_sensitive_path(path: str) -> bool:
    """Kafka's ZkData.sensitivePath (a prefix test, as Kafka's)."""
    return any(path.startswith(root) for root in SENSITIVE_ROOT_PATHS)


def default_acls(path: str, identity: ZkDigestIdentity | None) -> tuple[ZkAcl, ...]:
    """Kafka's ZkData.defaultAcls for a znode created by ``identity`` (``None``: not secure)."""
    if identity is None or path == CONSUMERS_PATH:
        return (OPEN_ACL,)
    if is_sensitive_path(path):
        return (identity.acl,)
    return (identity.acl, WORLD_READ)


@dataclass(frozen=True)
class ZkSecurity:
    """How a ZooKeeper session authenticates and which ACLs its new znodes get."""

    identity: ZkDigestIdentity | None = None
    set_acl: bool = False

    @property
    def auth_data(self) -> list[tuple[str, str]]:
        return [] if self.identity is None else [self.identity.auth_data]

    def acls(self, path: str) -> tuple[ZkAcl, ...]:
        return default_acls(path, self.identity if self.set_acl else None)

    @property
    def acl_provider(self) -> Callable[[str], tuple[ZkAcl, ...]] | None:
        """What the ZooKeeper store takes as ``acls``: ``None`` (ZooKeeper's open default) unless
        ACLs are set."""
        return self.acls if self.set_acl and self.identity is not None else None

    @classmethod
    def for_broker(cls, set_acl: bool, login_config: str | None,
                   environ: Mapping[str, str] | None = None) -> ZkSecurity:
        """A broker's: authenticate when a JAAS ``Client`` login is found; with
        ``zookeeper.set.acl=true`` one is required (Kafka refuses to start without it)."""
        path = login_config_path(login_config, os.environ if environ is None else environ)
        identity = _identity_from_file(path) if path else None
        if set_acl and identity is None:
            where = f"the JAAS file {path}" if path else (
                f"no JAAS file ({LOGIN_CONFIG_KEY} is not set)")
            raise ZooKeeperLoginError(
                "zookeeper.set.acl is true, but the verification of the JAAS login file failed: "
                f"{where} has no '{CLIENT_SECTION}' section")
        return cls(identity, set_acl)

    @classmethod
    def for_tool(cls, environ: Mapping[str, str] | None = None) -> ZkSecurity:
        """A ZooKeeper-era tool's: the login of ``KAFKA_OPTS``'s JAAS file, ACLs set when there
        is one (Kafka's tools use ``JaasUtils.isZkSaslEnabled()``)."""
        path = login_config_path(None, os.environ if environ is None else environ)
        identity = _identity_from_file(path) if path else None
        return cls(identity, identity is not None)


_KAFKA_OPTS_PROPERTY = re.compile(r"^-D" + re.escape(LOGIN_CONFIG_KEY) + r"==?(?P<file>.+)$")


def login_config_path(configured: str | None, environ: Mapping[str, str]) -> str | None:
    """The JAAS file: the configured value, else ``-Djava.security.auth.login.config=FILE`` in
    ``KAFKA_OPTS`` (``==`` too, the JVM's override form)."""
    if configured:
        return configured
    opts = environ.get("KAFKA_OPTS", "")
    try:
        words = shlex.split(opts)
    except ValueError:
        words = opts.split()
    found = None
    for word in words:
        m = _KAFKA_OPTS_PROPERTY.match(word)
        if m:
            found = m.group("file")  # the last one wins, as in the JVM
    return found


def _identity_from_file(path: str) -> ZkDigestIdentity | None:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ZooKeeperLoginError(
            f"cannot read the JAAS file {path}: {exc.strerror or exc}") from None
    return zookeeper_identity(text)


_COMMENTS = re.compile(r'("(?:[^"\\]|\\.)*")|/\*.*?\*/|//[^\n]*', re.S)
_SECTION = re.compile(r"\s*(?P<name>[A-Za-z0-9_.\-]+)\s*\{"
                      r"(?P<body>(?:[^{}\"]|\"(?:[^\"\\]|\\.)*\")*)\}\s*;", re.S)
_ENTRY = re.compile(r'(?:[^;"]|"(?:[^"\\]|\\.)*")+;', re.S)


def jaas_file_sections(text: str) -> dict[str, list[JaasEntry]]:
    """A JAAS file's sections (``Name { entry; entry; };``) and their login module entries."""
    text = _COMMENTS.sub(lambda m: m.group(1) or " ", text)
    sections: dict[str, list[JaasEntry]] = {}
    pos = 0
    while text[pos:].strip():
        m = _SECTION.match(text, pos)
        if m is None:
            snippet = text[pos:].strip()[:40]
            raise ZooKeeperLoginError(f"cannot parse the JAAS file near {snippet!r}")
        pos = m.end()
        body = m.group("body")
        entries = []
        for entry in _ENTRY.findall(body):
            if entry.strip() == ";":
                continue
            try:
                entries.append(parse_jaas_config(entry))
            except ValueError as exc:
                raise ZooKeeperLoginError(
                    f"JAAS section {m.group('name')}: {exc}") from None
        sections[m.group("name")] = entries
    return sections


def zookeeper_identity(jaas_text: str, section: str = CLIENT_SECTION) -> ZkDigestIdentity | None:
    """The digest login of a JAAS file's ``Client`` section; ``None`` without that section."""
    entries = jaas_file_sections(jaas_text).get(section)
    if not entries:
        return None
    for entry in entries:
        if entry.login_module == DIGEST_LOGIN_MODULE:
            username = entry.options.get("username")
            password = entry.options.get("password")
            if not username or password is None:
                raise ZooKeeperLoginError(
                    f"JAAS section {section}: {DIGEST_LOGIN_MODULE} needs username and password")
            return ZkDigestIdentity(username, password)
    modules = ", ".join(e.login_module for e in entries)
    raise ZooKeeperLoginError(
        f"JAAS section {section}: odradek authenticates to ZooKeeper with the digest scheme only "
        f"({DIGEST_LOGIN_MODULE}); found {modules}")
