"""A secured cluster's material: `ClusterSecurity` (listeners, SASL mechanisms, users, ACLs),
`ClusterAcl`, the certificates (`SecurityFiles`, generated with trustme), the brokers' configs
and JAAS, and the znodes written before the brokers start (Kafka's `/config/users/<user>` SCRAM
credentials and ACL znodes, at the paths of `odradek.coordination.paths`)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..coordination import paths
from ..security import jaas

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
#: odradek's own authorizer name (Kafka's kafka.security.authorizer.AclAuthorizer is accepted too).
AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"
#: The principal of the brokers' certificate (CN=broker) and of their SASL login.
BROKER_CERT_NAME = "broker"
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
# The pattern types with ACL znodes (Kafka's ZkAclStore: paths.acl_store_path) and the JSON
# names of SecurityUtils.
_PATTERN_TYPES = ("LITERAL", "PREFIXED")
_RESOURCE_TYPES = {"topic": "Topic", "group": "Group", "cluster": "Cluster",
                   "transactionalid": "TransactionalId", "delegationtoken": "DelegationToken"}
_OPERATIONS = {n.lower(): n for n in (
    "All", "Read", "Write", "Create", "Delete", "Alter", "Describe", "ClusterAction",
    "DescribeConfigs", "AlterConfigs", "IdempotentWrite")}



def _pascal(text: str) -> str:
    return "".join(w.capitalize() for w in str(text).replace("-", "_").split("_"))


@dataclass(frozen=True)
class ClusterAcl:
    """One ACL entry in Kafka's words (kafka-acls.sh's): ``ClusterAcl("User:alice", "Read",
    "Topic", "events")``; ``pattern="PREFIXED"`` for a prefix, ``permission="Deny"``."""

    principal: str
    operation: str
    resource_type: str
    name: str = "kafka-cluster"
    pattern: str = "LITERAL"
    permission: str = "Allow"
    host: str = "*"

    @classmethod
    def of(cls, acl: Any) -> ClusterAcl:
        """A ``ClusterAcl``, or odradek.security.acl's ``AclBinding`` (its pattern and entry)."""
        if isinstance(acl, ClusterAcl):
            return acl
        pattern, entry = acl.pattern, acl.entry
        return cls(str(entry.principal), _pascal(entry.operation.name),
                   _pascal(pattern.resource_type.name), pattern.name,
                   pattern.pattern_type.name, _pascal(entry.permission_type.name), entry.host)

    def znode(self) -> str:
        """Kafka's ACL znode of this entry's resource pattern."""
        rtype = _RESOURCE_TYPES.get(self.resource_type.replace("_", "").lower())
        if self.pattern.upper() not in _PATTERN_TYPES or rtype is None:
            raise ValueError(f"unsupported ACL resource {self.resource_type}/{self.pattern}")
        return paths.acl_resource_path(self.pattern, rtype, self.name)

    def json_entry(self) -> dict[str, str]:
        operation = _OPERATIONS.get(self.operation.replace("_", "").lower())
        permission = self.permission.capitalize()
        if operation is None or permission not in ("Allow", "Deny"):
            raise ValueError(f"unsupported ACL {self.operation}/{self.permission}")
        return {"principal": self.principal, "permissionType": permission,
                "operation": operation, "host": self.host}


def acl_znodes(acls: Iterable[Any]) -> dict[str, bytes]:
    """Kafka's ACL znodes (``{"version":1,"acls":[...]}`` per resource pattern) of ``acls``."""
    grouped: dict[str, list[dict[str, str]]] = {}
    for acl in acls:
        a = ClusterAcl.of(acl)
        entry = a.json_entry()
        entries = grouped.setdefault(a.znode(), [])
        if entry not in entries:
            entries.append(entry)
    return {path: json.dumps({"version": paths.ACL_VERSION, "acls": entries},
                             separators=(",", ":")).encode()
            for path, entries in grouped.items()}


@dataclass(frozen=True)
class ClusterSecurity:
    """How an `AsyncCluster`'s brokers are secured.

    ``listeners``: one listener per security protocol, named as it (``SASL_SSL://127.0.0.1:p``);
    the first is the inter-broker listener and the one ``bootstrap_servers`` names.
    ``users``: SASL users and their passwords (SCRAM credentials written to ``/config/users``,
    PLAIN users put in the listeners' JAAS). ``super_users``: user names or principals.
    ``acls``: `ClusterAcl` or ``AclBinding`` entries, written before the brokers start. The
    authorizer is on when ``acls`` or ``super_users`` are given (or ``authorizer=True``).
    ``client_auth``: ``ssl.client.auth`` of the TLS listeners; ``client_certificates``: users
    who get a client certificate (CN=<user>, the principal ``User:<user>`` through
    ``ssl.principal.mapping.rules``). The brokers log in as ``broker_user`` (a super user).
    """

    listeners: tuple[str, ...] = ("SASL_SSL",)
    sasl_mechanisms: tuple[str, ...] = ("SCRAM-SHA-256",)
    users: Mapping[str, str] = field(default_factory=dict)
    super_users: tuple[str, ...] = ()
    acls: Sequence[Any] = ()
    tls: bool = True
    client_auth: Literal["none", "requested", "required"] = "none"
    client_certificates: tuple[str, ...] = ()
    authorizer: bool | None = None
    allow_everyone_if_no_acl_found: bool = False
    broker_user: str = "admin"
    broker_password: str = "admin-secret"
    scram_iterations: int = 4096

    def __post_init__(self) -> None:
        listeners = tuple(p.upper() for p in self.listeners)
        object.__setattr__(self, "listeners", listeners)
        object.__setattr__(self, "sasl_mechanisms",
                           tuple(m.upper() for m in self.sasl_mechanisms))
        if not listeners or len(set(listeners)) != len(listeners):
            raise ValueError("listeners: one or more distinct security protocols")
        for p in listeners:
            if p not in SECURITY_PROTOCOLS:
                raise ValueError(f"unknown security protocol {p!r} "
                                 f"({', '.join(SECURITY_PROTOCOLS)})")
        for m in self.sasl_mechanisms:
            if m not in SASL_MECHANISMS:
                raise ValueError(f"unsupported SASL mechanism {m!r} "
                                 f"({', '.join(SASL_MECHANISMS)})")
        if self.uses_sasl and not self.sasl_mechanisms:
            raise ValueError("a SASL listener needs at least one SASL mechanism")
        if self.uses_ssl and not self.tls:
            raise ValueError("an SSL or SASL_SSL listener needs tls=True (generated certificates)")
        if self.client_auth not in ("none", "requested", "required"):
            raise ValueError("client_auth: none, requested or required")

    @property
    def uses_sasl(self) -> bool:
        return any(p.startswith("SASL_") for p in self.listeners)

    @property
    def uses_ssl(self) -> bool:
        return any(p.endswith("SSL") for p in self.listeners)

    @property
    def authorizer_enabled(self) -> bool:
        return bool(self.acls or self.super_users) if self.authorizer is None else self.authorizer

    def all_users(self) -> dict[str, str]:
        """The SASL users with the brokers' own login."""
        return {self.broker_user: self.broker_password, **self.users}

    def super_principals(self) -> list[str]:
        names = [f"User:{self.broker_user}"]
        if self.uses_ssl and self.client_auth != "none":
            names.append(f"User:{BROKER_CERT_NAME}")
        for u in self.super_users:
            p = u if ":" in u else f"User:{u}"
            if p not in names:
                names.append(p)
        return names


class SecurityFiles:
    """The certificates of a secured cluster (PEM files, generated once with trustme)."""

    def __init__(self, directory: Path, hosts: Sequence[str], clients: Iterable[str]) -> None:
        self.dir = directory
        self.ca = directory / "ca.pem"
        self.server = directory / "server.pem"  # private key + certificate chain
        self._hosts = tuple(dict.fromkeys((*hosts, "127.0.0.1", "localhost")))
        self._clients = list(clients)

    def client_cert(self, user: str) -> Path:
        return self.dir / f"client-{user}.pem"

    def client_key(self, user: str) -> Path:
        return self.dir / f"client-{user}.key"

    def ensure(self) -> None:
        if self.ca.exists() and all(self.client_cert(u).exists() for u in self._clients):
            return
        try:
            import trustme
        except ImportError as exc:  # pragma: no cover - an optional dependency
            raise RuntimeError("a TLS cluster generates its certificates with trustme: "
                               "pip install trustme") from exc
        self.dir.mkdir(parents=True, exist_ok=True)
        ca = trustme.CA(organization_name="odradek", organization_unit_name="test cluster")
        ca.cert_pem.write_to_path(str(self.ca))
        server = ca.issue_cert(*self._hosts, common_name=BROKER_CERT_NAME)
        self._write_leaf(server, self.server, None)
        for user in self._clients:
            leaf = ca.issue_cert(f"{user}.client.odradek.test", common_name=user)
            self._write_leaf(leaf, self.client_cert(user), self.client_key(user))

    @staticmethod
    def _write_leaf(leaf: Any, both: Path, key_only: Path | None) -> None:
        key = leaf.private_key_pem.bytes()
        chain = b"".join(blob.bytes() for blob in leaf.cert_chain_pems)
        both.write_bytes(key + chain)
        both.chmod(0o600)
        if key_only is not None:
            key_only.write_bytes(key)
            key_only.chmod(0o600)
            both.with_suffix(".crt").write_bytes(chain)


def security_broker_props(security: ClusterSecurity, files: SecurityFiles | None
                          ) -> dict[str, str]:
    """Kafka broker configs for ``security`` (listeners themselves are set by the caller)."""
    props: dict[str, str] = {
        "listener.security.protocol.map": ",".join(f"{p}:{p}" for p in security.listeners),
        "inter.broker.listener.name": security.listeners[0],
    }
    if security.uses_ssl and files is not None:
        props.update({
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(files.server),
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(files.ca),
        })
        # Client certificates on the SSL listeners only (SASL_SSL authenticates by SASL).
        for listener in security.listeners:
            if listener == "SSL":
                props["listener.name.ssl.ssl.client.auth"] = security.client_auth
        if security.client_auth != "none":
            props["ssl.principal.mapping.rules"] = "RULE:^CN=([^,]+)(,.*)?$/$1/,DEFAULT"
    if security.uses_sasl:
        mechanisms = security.sasl_mechanisms
        props["sasl.enabled.mechanisms"] = ",".join(mechanisms)
        props["sasl.mechanism.inter.broker.protocol"] = mechanisms[0]
        for listener in security.listeners:
            if not listener.startswith("SASL_"):
                continue
            for mechanism in mechanisms:
                key = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
                props[key] = broker_jaas(security, mechanism)
    if security.authorizer_enabled:
        props["authorizer.class.name"] = AUTHORIZER
        props["super.users"] = ";".join(security.super_principals())
        props["allow.everyone.if.no.acl.found"] = str(
            security.allow_everyone_if_no_acl_found).lower()
    return props


def broker_jaas(security: ClusterSecurity, mechanism: str) -> str:
    """A listener's ``<mechanism>.sasl.jaas.config``: the brokers' own login, and for PLAIN
    every user's ``user_<name>`` entry."""
    parts = [_LOGIN_MODULES[mechanism], "required",
             f"username={jaas.quote(security.broker_user)}",
             f"password={jaas.quote(security.broker_password)}"]
    if mechanism == "PLAIN":
        parts += [f"user_{u}={jaas.quote(pw)}" for u, pw in security.all_users().items()]
    return " ".join(parts) + ";"


def client_jaas(mechanism: str, username: str, password: str) -> str:
    return (f"{_LOGIN_MODULES[mechanism]} required username={jaas.quote(username)} "
            f"password={jaas.quote(password)};")


def scram_user_znodes(security: ClusterSecurity) -> dict[str, bytes]:
    """``/config/users/<user>`` for every SASL user (the brokers' own too) and every enabled
    SCRAM mechanism, in Kafka's form."""
    mechanisms = [m for m in security.sasl_mechanisms if m.startswith("SCRAM-")]
    if not security.uses_sasl or not mechanisms:
        return {}
    from ..common.sanitizer import sanitize_user
    from ..security.scram import credential_from_password

    out: dict[str, bytes] = {}
    for user, password in security.all_users().items():
        config = {m: credential_from_password(m, password, security.scram_iterations).to_text()
                  for m in mechanisms}
        out[paths.config_entity_path("users", sanitize_user(user))] = \
            paths.encode_entity_config(config)
    return out
