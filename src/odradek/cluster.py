"""An embedded N-broker cluster in one process, on one shared embedded coordination store.

    with odradek.Cluster(brokers=3) as cluster:
        producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers})
        cluster.kill_broker(cluster.controller_id())   # crash: no flush, session gone
        cluster.restart_broker(...)

`Cluster` runs its brokers on an asyncio loop in a background thread so that synchronous code
(tests, notebooks, the real clients) can use it; `AsyncCluster` is the same inside a running
loop. Brokers keep their ports across restarts, so clients reconnect to the same addresses.

A secured cluster (TLS and SASL listeners, SCRAM users, ACLs) is declared with `ClusterSecurity`:

    security = ClusterSecurity(listeners=("SASL_SSL",), sasl_mechanisms=("SCRAM-SHA-256",),
                               users={"alice": "alice-secret"}, acls=[
                                   ClusterAcl("User:alice", "Read", "Topic", "events")])
    with odradek.Cluster(brokers=3, security=security) as cluster:
        producer = confluent_kafka.Producer(cluster.client_config("alice", style="librdkafka"))

Certificates are generated for the cluster with trustme (a CA, one server certificate for
127.0.0.1/localhost, client certificates on request) under `<data_dir>/security/`; SCRAM
credentials and ACLs are written to the store before the brokers start (Kafka's
`/config/users/<user>` and `/kafka-acl/...` znodes); `client_config(user)` gives the properties
a client needs.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from .common.fault_log import FAULT_LOG_NAME, FaultEvent, FaultLog, read_fault_events
from .coordination import paths
from .coordination.embedded import EmbeddedStore, EmbeddedZooKeeper
from .faults.network import (
    CLIENTS,
    STORE,
    NetworkState,
    Node,
    Rule,
    describe,
    group,
    node_name,
    store_cut,
)
from .faults.proxy import FaultNetwork, LinkProxy
from .security.connector import ClientSecurity, Connector, open_connection
from .server.broker import Broker
from .server.configs.config import KafkaConfig

T = TypeVar("T")

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
# Kafka's ZkAclStore paths and the JSON names of SecurityUtils.
_ACL_ROOTS = {"LITERAL": "/kafka-acl", "PREFIXED": "/kafka-acl-extended/prefixed"}
_RESOURCE_TYPES = {"topic": "Topic", "group": "Group", "cluster": "Cluster",
                   "transactionalid": "TransactionalId", "delegationtoken": "DelegationToken"}
_OPERATIONS = {n.lower(): n for n in (
    "All", "Read", "Write", "Create", "Delete", "Alter", "Describe", "ClusterAction",
    "DescribeConfigs", "AlterConfigs", "IdempotentWrite")}


def _jaas_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


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
        root = _ACL_ROOTS.get(self.pattern.upper())
        rtype = _RESOURCE_TYPES.get(self.resource_type.replace("_", "").lower())
        if root is None or rtype is None:
            raise ValueError(f"unsupported ACL resource {self.resource_type}/{self.pattern}")
        return f"{root}/{rtype}/{self.name}"

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
    return {path: json.dumps({"version": 1, "acls": entries}, separators=(",", ":")).encode()
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
             f"username={_jaas_quote(security.broker_user)}",
             f"password={_jaas_quote(security.broker_password)}"]
    if mechanism == "PLAIN":
        parts += [f"user_{u}={_jaas_quote(pw)}" for u, pw in security.all_users().items()]
    return " ".join(parts) + ";"


def client_jaas(mechanism: str, username: str, password: str) -> str:
    return (f"{_LOGIN_MODULES[mechanism]} required username={_jaas_quote(username)} "
            f"password={_jaas_quote(password)};")


def scram_user_znodes(security: ClusterSecurity) -> dict[str, bytes]:
    """``/config/users/<user>`` for every SASL user (the brokers' own too) and every enabled
    SCRAM mechanism, in Kafka's form."""
    mechanisms = [m for m in security.sasl_mechanisms if m.startswith("SCRAM-")]
    if not security.uses_sasl or not mechanisms:
        return {}
    from .common.sanitizer import sanitize_user
    from .security.scram import credential_from_password

    out: dict[str, bytes] = {}
    for user, password in security.all_users().items():
        config = {m: credential_from_password(m, password, security.scram_iterations).to_text()
                  for m in mechanisms}
        out[paths.config_entity_path("users", sanitize_user(user))] = \
            paths.encode_entity_config(config)
    return out


@dataclass(frozen=True)
class ActiveFault:
    """A fault in force: what `ClusterFaults.active()` lists and `heal` takes back."""

    fault_id: int
    kind: str
    targets: tuple[str, ...]
    detail: str = ""


class ClusterFaults:
    """Faults injected into an in-process cluster (docs/faults.md): crash and restart brokers,
    pause them, cut or slow the links between groups of nodes (broker ids, ``"store"``,
    ``"clients"``), cut a broker from the coordination store, expire its session.

    Link faults need ``AsyncCluster(network_faults=True)`` (every broker's listeners are then
    reached through `LinkProxy` forwarders); cuts between brokers and the store alone work on
    any cluster. Every fault is written to ``<data_dir>/faults.log`` (common/fault_log.py).

    It is also the console's entry point (`FaultActions`: ``actions`` and ``run``), given to
    the brokers' HTTP listeners with ``console_faults=True``. Its tasks are the cluster's, so a
    broker killing itself through its own console still completes the action.
    """

    actions = ("kill", "restart", "pause", "resume", "isolate", "heal")

    def __init__(self, cluster: AsyncCluster) -> None:
        self._cluster = cluster
        self._tasks: set[asyncio.Task[None]] = set()
        self.log = FaultLog(cluster.data_dir / FAULT_LOG_NAME)
        self._rules: dict[int, Rule] = {}
        self._active: dict[int, ActiveFault] = {}
        self._paused: dict[int, int] = {}  # broker id -> its pause's fault id
        self._store_cut: dict[int, EmbeddedStore] = {}  # the store clients we disconnected

    # -- the console's entry point ----------------------------------------------------------
    def run(self, action: str, broker_id: int) -> asyncio.Future[None]:
        if action not in self.actions:
            raise ValueError(f"unknown fault action {action!r}")
        if broker_id not in self._cluster.brokers:
            raise ValueError(f"no broker {broker_id}")
        if action in ("pause", "isolate") and self._cluster.network is None:
            raise ValueError(f"{action} needs the fault network (network_faults=True)")
        task = asyncio.ensure_future(self._run(action, broker_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _run(self, action: str, broker_id: int) -> None:
        await asyncio.sleep(0)  # the request that asked is answered first
        if action == "kill":
            if self._cluster.brokers[broker_id].started:
                await self.kill(broker_id)
        elif action == "restart":
            await self.restart(broker_id)
        elif action == "pause":
            await self.pause(broker_id)
        elif action == "resume":
            await self.resume(broker_id)
        elif action == "isolate":
            await self.isolate(broker_id)
        else:  # heal: every link fault naming the broker
            for fault_id, rule in list(self._rules.items()):
                if broker_id in rule.sources or broker_id in (rule.targets or ()):
                    await self.heal(fault_id)

    def events(self) -> list[FaultEvent]:
        """Every fault event written so far (``<data_dir>/faults.log``)."""
        return read_fault_events(self.log.path)

    def active(self) -> list[ActiveFault]:
        """The faults in force (link faults and pauses), oldest first."""
        return [self._active[k] for k in sorted(self._active)]

    # -- brokers ----------------------------------------------------------------------------
    def _broker(self, broker_id: int) -> Broker:
        broker = self._cluster.brokers.get(broker_id)
        if broker is None:
            raise ValueError(f"no broker {broker_id}")
        return broker

    async def kill(self, broker_id: int) -> None:
        """A crash (`AsyncCluster.kill_broker`): connections and session dropped, no flush."""
        self._broker(broker_id)
        self.log.instant("kill", [node_name(broker_id)])
        await self._cluster.kill_broker(broker_id)

    async def restart(self, broker_id: int, clean: bool = True) -> None:
        """A clean stop if running (a kill with ``clean=False``), then a start; link faults in
        force still apply to the restarted broker."""
        self.log.instant("restart", [node_name(broker_id)], "" if clean else "after a crash")
        await self._cluster.restart_broker(broker_id, clean)
        self._apply()

    async def pause(self, broker_id: int) -> None:
        """Every link to and from the broker held, its store connection suspended (its session
        expires after zookeeper.session.timeout.ms). Unlike SIGSTOP, the broker's own timers
        and tasks keep running: it just hears nothing and is heard by nobody."""
        self._need_network("pause")
        self._broker(broker_id)
        if broker_id in self._paused:
            return
        fault_id = self.log.start("pause", [node_name(broker_id)])
        self._paused[broker_id] = fault_id
        self._active[fault_id] = ActiveFault(fault_id, "pause", (node_name(broker_id),))
        self._apply()

    async def resume(self, broker_id: int) -> None:
        """Release what `pause` held."""
        fault_id = self._paused.pop(broker_id, None)
        if fault_id is None:
            return
        self._active.pop(fault_id, None)
        self._apply()
        self.log.end(fault_id, "pause", [node_name(broker_id)])

    async def expire_session(self, broker_id: int) -> None:
        """The store expires the broker's session now (its ephemeral znodes go, watches fire)."""
        broker = self._broker(broker_id)
        store = broker.store
        if not isinstance(store, EmbeddedStore):
            raise RuntimeError(f"broker {broker_id} has no in-process store session")
        self.log.instant("expire-session", [node_name(broker_id), STORE])
        store.expire_session()

    # -- links ----------------------------------------------------------------------------------
    async def partition(self, side_a: Iterable[Node], side_b: Iterable[Node] | None = None, *,
                        one_way: bool = False) -> int:
        """Cut every link between a node of ``side_a`` and one of ``side_b`` (``None``: every
        other node); ``one_way``: only bytes from ``side_a`` to ``side_b`` are held. Nodes are
        broker ids, ``"store"`` and ``"clients"``. Returns the fault's handle for `heal`."""
        a = group(side_a)
        b = None if side_b is None else group(side_b)
        kind = "one-way-partition" if one_way else "partition"
        return self._add(Rule(kind, a, b, one_way=one_way))

    async def isolate(self, broker_id: int) -> int:
        """Cut the broker from every other node: brokers, the store, clients."""
        self._broker(broker_id)
        return self._add(Rule("isolate", frozenset({broker_id}), None))

    async def isolate_from_store(self, broker_id: int) -> int:
        """The broker keeps its brokers and clients and loses the store: its operations fail
        with connection loss and the store expires its session after
        zookeeper.session.timeout.ms; healing sooner keeps the session."""
        self._broker(broker_id)
        return self._add(Rule("isolate-store", frozenset({broker_id}), frozenset({STORE})))

    async def slow(self, side_a: Iterable[Node], side_b: Iterable[Node], *,
                   latency_ms: float = 0.0, loss: float = 0.0, one_way: bool = False) -> int:
        """Every chunk between the two sides (both ways unless ``one_way``) arrives
        ``latency_ms`` late; with probability ``loss`` it is one retransmission timeout
        (200 ms) later still, and what follows it waits (TCP's view of a lost segment)."""
        a, b = group(side_a), group(side_b)
        if STORE in a | b:
            raise ValueError("slow links to the store are not emulated (cut them instead)")
        return self._add(Rule("slow-link", a, b, one_way=one_way, latency_ms=float(latency_ms),
                              loss=float(loss)))

    async def heal(self, handle: int | None = None) -> None:
        """Take back one link fault (its handle), or every link fault (pauses stay: `resume`)."""
        ids = list(self._rules) if handle is None else [handle]
        for fault_id in ids:
            rule = self._rules.pop(fault_id, None)
            if rule is None:
                if handle is not None and fault_id not in self._active:
                    raise ValueError(f"no active link fault {fault_id}")
                continue
            fault = self._active.pop(fault_id)
            self._apply()
            self.log.end(fault_id, fault.kind, fault.targets)

    def _need_network(self, what: str) -> None:
        if self._cluster.network is None:
            raise RuntimeError(f"{what} needs the cluster's links to pass through the fault "
                               "network: AsyncCluster(..., network_faults=True)")

    def _add(self, rule: Rule) -> int:
        store_only = rule.targets == frozenset({STORE}) or rule.sources == frozenset({STORE})
        if not store_only:
            self._need_network(rule.kind)
        targets = rule.targets_for_log()
        fault_id = self.log.start(rule.kind, targets, describe(rule))
        self._rules[fault_id] = rule
        self._active[fault_id] = ActiveFault(fault_id, rule.kind, targets, describe(rule))
        self._apply()
        return fault_id

    def _state(self) -> NetworkState:
        return NetworkState(dict(self._rules), frozenset(self._paused))

    def _apply(self) -> None:
        """Push the policy to the proxies' gates and to the brokers' store clients."""
        state = self._state()
        network = self._cluster.network
        if network is not None:
            network.set_state(state)
        for broker_id, broker in self._cluster.brokers.items():
            store = broker.store
            if not broker.started or not isinstance(store, EmbeddedStore):
                self._store_cut.pop(broker_id, None)
                continue
            if store_cut(state, broker_id):
                if self._store_cut.get(broker_id) is not store:  # a restart: a new client
                    self._store_cut[broker_id] = store
                    store.disconnect()
            elif self._store_cut.pop(broker_id, None) is store:
                store.reconnect()

    async def reset(self) -> None:
        """Heal every link fault and resume every paused broker (before the cluster stops)."""
        await self.heal()
        for broker_id in list(self._paused):
            await self.resume(broker_id)


class BlockingFaults:
    """`ClusterFaults` for synchronous code (`Cluster.faults`): the same methods, blocking."""

    def __init__(self, cluster: Cluster) -> None:
        self._cluster = cluster

    @property
    def _faults(self) -> ClusterFaults:
        return self._cluster.c.faults

    @property
    def actions(self) -> tuple[str, ...]:
        return ClusterFaults.actions

    def kill(self, broker_id: int) -> None:
        self._cluster.run(self._faults.kill(broker_id))

    def restart(self, broker_id: int, clean: bool = True) -> None:
        self._cluster.run(self._faults.restart(broker_id, clean))

    def pause(self, broker_id: int) -> None:
        self._cluster.run(self._faults.pause(broker_id))

    def resume(self, broker_id: int) -> None:
        self._cluster.run(self._faults.resume(broker_id))

    def expire_session(self, broker_id: int) -> None:
        self._cluster.run(self._faults.expire_session(broker_id))

    def partition(self, side_a: Iterable[Node], side_b: Iterable[Node] | None = None, *,
                  one_way: bool = False) -> int:
        return self._cluster.run(self._faults.partition(side_a, side_b, one_way=one_way))

    def isolate(self, broker_id: int) -> int:
        return self._cluster.run(self._faults.isolate(broker_id))

    def isolate_from_store(self, broker_id: int) -> int:
        return self._cluster.run(self._faults.isolate_from_store(broker_id))

    def slow(self, side_a: Iterable[Node], side_b: Iterable[Node], *, latency_ms: float = 0.0,
             loss: float = 0.0, one_way: bool = False) -> int:
        return self._cluster.run(self._faults.slow(side_a, side_b, latency_ms=latency_ms,
                                                   loss=loss, one_way=one_way))

    def heal(self, handle: int | None = None) -> None:
        self._cluster.run(self._faults.heal(handle))

    def active(self) -> list[ActiveFault]:
        return self._faults.active()

    def events(self) -> list[FaultEvent]:
        return self._faults.events()

class AsyncCluster:
    def __init__(self, brokers: int = 3, *, data_dir: str | Path | None = None,
                 base_port: int = 0, host: str = "127.0.0.1",
                 overrides: dict[str, Any] | None = None,
                 broker_overrides: dict[int, dict[str, Any]] | None = None,
                 security: ClusterSecurity | None = None, http: bool = True,
                 console_faults: bool = False, network_faults: bool = False) -> None:
        if brokers < 1:
            raise ValueError("a cluster needs at least one broker")
        self.size = brokers
        self._tmp = data_dir is None
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="odradek-cluster-"))
        self.base_port = base_port
        self.host = host
        self.overrides = {str(k): str(v) for k, v in (overrides or {}).items()}
        self.broker_overrides = broker_overrides or {}
        self.security = security
        self.security_files: SecurityFiles | None = None
        if security is not None and security.tls:
            self.security_files = SecurityFiles(self.data_dir / "security", (host,),
                                                security.client_certificates)
        self._security_written = False
        self.zookeeper = EmbeddedZooKeeper(persist_dir=self.data_dir / "zookeeper")
        self.brokers: dict[int, Broker] = {}
        self.ports: dict[int, int] = {}
        #: Every listener's port per broker, in the order of the listeners.
        self.listener_ports: dict[int, list[int]] = {}
        #: The HTTP listener (/metrics, the console) of every broker, unless http=False.
        self.http = http
        self.http_ports: dict[int, int] = {}
        #: The fault network (every listener behind `LinkProxy` forwarders), with
        #: network_faults=True (console_faults=True implies it).
        self.network: FaultNetwork | None = (
            FaultNetwork() if network_faults or console_faults else None)
        self._client_proxies: dict[tuple[int, int], LinkProxy] = {}  # (broker, listener)
        self._link_proxies: dict[tuple[int, int, int], LinkProxy] = {}  # (from, to, listener)
        self._proxy_routes: dict[int, tuple[int, int]] = {}  # client proxy port -> its broker
        #: The ports the brokers' listeners bound (behind the proxies with network faults).
        self.internal_ports: dict[int, list[int]] = {}
        #: The fault API (docs/faults.md); the brokers' consoles get it with console_faults.
        self.faults = ClusterFaults(self)
        self.console_faults = console_faults

    @property
    def listener_names(self) -> tuple[str, ...]:
        return self.security.listeners if self.security is not None else ("PLAINTEXT",)

    def _port(self, broker_id: int, index: int) -> int:
        known = self.listener_ports.get(broker_id)
        if known is not None and index < len(known):
            return known[index]
        return self.base_port + broker_id + 100 * index if self.base_port else 0

    def config_for(self, broker_id: int) -> KafkaConfig:
        props: dict[str, str] = {}
        if self.network is not None and (broker_id, 0) in self._client_proxies:
            # the listeners bind free ports; clients and brokers are told the proxies'
            listeners = ",".join(f"{name}://{self.host}:0" for name in self.listener_names)
            props["advertised.listeners"] = ",".join(
                f"{name}://{self.host}:{self._client_proxies[(broker_id, i)].port}"
                for i, name in enumerate(self.listener_names))
        else:
            listeners = ",".join(f"{name}://{self.host}:{self._port(broker_id, i)}"
                                 for i, name in enumerate(self.listener_names))
        props |= {
            "broker.id": str(broker_id),
            "listeners": listeners,
            "log.dirs": str(self.data_dir / f"broker-{broker_id}"),
            "default.replication.factor": str(min(3, self.size)),
            "offsets.topic.replication.factor": str(min(3, self.size)),
            "transaction.state.log.replication.factor": str(min(3, self.size)),
            "transaction.state.log.min.isr": str(min(2, self.size)),
            "controlled.shutdown.retry.backoff.ms": "200",
        }
        if self.http:  # after the listeners: base-port + id + 100 * (number of listeners)
            port = self.http_ports.get(broker_id, self.base_port and (
                self.base_port + broker_id + 100 * len(self.listener_names)))
            props["http.listener"] = f"http://{self.host}:{port}"
        if self.security is not None:
            props.update(security_broker_props(self.security, self.security_files))
        props.update(self.overrides)
        props.update({str(k): str(v) for k, v in self.broker_overrides.get(broker_id, {}).items()})
        return KafkaConfig.from_properties(props)

    async def start(self) -> None:
        await self.prepare_security()
        await asyncio.gather(*(self.start_broker(i) for i in range(self.size)))

    async def prepare_security(self) -> None:
        """Certificates, SCRAM credentials and ACLs, before the first broker starts."""
        if self.security is None or self._security_written:
            return
        if self.security_files is not None:
            await asyncio.to_thread(self.security_files.ensure)
        znodes = {**scram_user_znodes(self.security), **acl_znodes(self.security.acls)}
        if znodes:
            store = self.zookeeper.client()
            await store.start()
            try:
                for path, data in znodes.items():
                    if await store.exists(path) is None:
                        await store.create(path, data, makepath=True)
                    else:
                        await store.set(path, data)
            finally:
                await store.close()
        self._security_written = True

    async def start_broker(self, broker_id: int) -> Broker:
        if broker_id in self.brokers and self.brokers[broker_id].started:
            raise RuntimeError(f"broker {broker_id} is running")
        if self.network is not None:
            await self._ensure_proxies(broker_id)
        broker = Broker(self.config_for(broker_id), embedded_zk=self.zookeeper,
                        fault_actions=self.faults if self.console_faults else None,
                        connector=self._connector(broker_id) if self.network is not None
                        else None)
        previous = self.brokers.get(broker_id)
        if self.network is not None:  # before start: the proxies find its bound ports
            self.brokers[broker_id] = broker
        try:
            await broker.start()
        except BaseException:
            if previous is not None:
                self.brokers[broker_id] = previous
            else:
                self.brokers.pop(broker_id, None)
            raise
        self.brokers[broker_id] = broker
        self.internal_ports[broker_id] = list(broker.bound_ports)
        if self.network is not None:
            advertised = [self._client_proxies[(broker_id, i)].port
                          for i in range(len(self.listener_names))]
        else:
            advertised = list(broker.bound_ports)
        self.ports[broker_id] = advertised[0]
        self.listener_ports[broker_id] = advertised
        if broker.http_listener is not None:  # the same console address after a restart
            self.http_ports[broker_id] = broker.http_listener.port
        self.faults._apply()  # link and store faults in force apply to it too
        return broker

    # -- the fault network ----------------------------------------------------------------------
    def _bound_port(self, broker_id: int, index: int) -> int | None:
        broker = self.brokers.get(broker_id)
        if broker is None or len(broker.bound_ports) <= index or broker.socket_server is None:
            return None
        return broker.bound_ports[index]

    async def _ensure_proxies(self, broker_id: int) -> None:
        """The clients' proxies of ``broker_id``'s listeners, and the proxies of the links
        between it and every other broker (both directions), made once."""
        network = self.network
        assert network is not None
        for i in range(len(self.listener_names)):
            if (broker_id, i) not in self._client_proxies:
                listen = self.base_port + broker_id + 100 * i if self.base_port else 0
                proxy = LinkProxy(network, CLIENTS, broker_id, self.host,
                                  lambda b=broker_id, i=i: self._bound_port(b, i),
                                  listen_port=listen)
                await proxy.start()
                self._client_proxies[(broker_id, i)] = proxy
                self._proxy_routes[proxy.port] = (broker_id, i)
        others = sorted({b for b, _ in self._client_proxies} - {broker_id})
        for other in others:
            for src, dst in ((broker_id, other), (other, broker_id)):
                for i in range(len(self.listener_names)):
                    if (src, dst, i) not in self._link_proxies:
                        proxy = LinkProxy(network, src, dst, self.host,
                                          lambda b=dst, i=i: self._bound_port(b, i))
                        await proxy.start()
                        self._link_proxies[(src, dst, i)] = proxy

    def _connector(self, broker_id: int) -> Connector:
        """``broker_id``'s way out: a dial of another broker's advertised (proxy) address goes
        through the proxy of the link between them; a dial of its own goes straight to its
        listener; anything else is dialled as it is."""
        async def connect(host: str, port: int, security: ClientSecurity | None, *,
                          timeout: float, client_id: str
                          ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
            route = self._proxy_routes.get(port)
            if route is not None:
                dst, index = route
                if dst == broker_id:
                    port = self._bound_port(dst, index) or port
                else:
                    link = self._link_proxies.get((broker_id, dst, index))
                    if link is not None:
                        port = link.port
            return await open_connection(host, port, security, timeout=timeout,
                                         client_id=client_id)
        return connect

    @property
    def link_proxies(self) -> dict[tuple[Node, int, int], LinkProxy]:
        """The fault network's proxies by (from node, to broker, listener index): the
        clients' (from ``"clients"``) and the brokers' links. Empty without network faults."""
        out: dict[tuple[Node, int, int], LinkProxy] = {
            (CLIENTS, b, i): p for (b, i), p in self._client_proxies.items()}
        out.update(self._link_proxies)
        return out

    async def _close_proxies(self) -> None:
        for proxy in [*self._client_proxies.values(), *self._link_proxies.values()]:
            await proxy.close()
        self._client_proxies.clear()
        self._link_proxies.clear()
        self._proxy_routes.clear()

    @property
    def http_urls(self) -> list[str]:
        """The running brokers' HTTP listeners (/metrics, the console), by broker id."""
        return [url for i in sorted(self.brokers)
                if self.brokers[i].started and (url := self.brokers[i].http_url)]

    @property
    def console_url(self) -> str | None:
        """The console of the first running broker with an HTTP listener."""
        urls = self.http_urls
        return urls[0] + "/" if urls else None

    async def stop_broker(self, broker_id: int) -> None:
        """Clean shutdown (controlled shutdown first, as SIGTERM does)."""
        await self.brokers[broker_id].stop()

    async def kill_broker(self, broker_id: int) -> None:
        """A crash: connections and coordination session dropped, nothing flushed."""
        await self.brokers[broker_id].kill()

    async def restart_broker(self, broker_id: int, clean: bool = True) -> Broker:
        broker = self.brokers.get(broker_id)
        if broker is not None and broker.started:
            await (broker.stop() if clean else broker.kill())
        return await self.start_broker(broker_id)

    async def stop(self) -> None:
        await self.faults.reset()  # shutdowns go through healed links
        running = [b for b in self.brokers.values() if b.started]
        # The controller last, so the others' controlled shutdowns find it.
        running.sort(key=lambda b: b.controller is not None and b.controller.is_active)
        for b in running:
            await b.stop()
        await self._close_proxies()
        self.zookeeper.close()
        if self._tmp:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{self.host}:{self.ports[i]}" for i in sorted(self.ports)
                        if i in self.brokers and self.brokers[i].started)

    def bootstrap_servers_for(self, listener: str) -> str:
        """The running brokers' addresses on ``listener`` (a security protocol's name)."""
        index = self.listener_names.index(listener.upper())
        return ",".join(f"{self.host}:{self.listener_ports[i][index]}"
                        for i in sorted(self.listener_ports)
                        if i in self.brokers and self.brokers[i].started)

    def client_config(self, user: str | None = None, *, listener: str | None = None,
                      mechanism: str | None = None,
                      style: Literal["java", "librdkafka"] = "java") -> dict[str, str]:
        """What a client needs to reach ``listener`` (default: the first) as ``user`` (default:
        the brokers' own login, a super user): Java client property names (odradek.client,
        kafka-python-style tools, Spark's ``kafka.`` options) or librdkafka's
        (confluent-kafka, kcat: ``ssl.ca.location``, ``sasl.username``...)."""
        protocol = (listener or self.listener_names[0]).upper()
        cfg = {"bootstrap.servers": self.bootstrap_servers_for(protocol)}
        security = self.security
        if security is None:
            return cfg
        cfg["security.protocol"] = protocol
        files = self.security_files
        if protocol.endswith("SSL") and files is not None:
            if style == "java":
                cfg.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": str(files.ca)})
            else:
                cfg["ssl.ca.location"] = str(files.ca)
            if protocol == "SSL" and user in (None, BROKER_CERT_NAME):
                # the brokers' own certificate (CN=broker): what an operator's tools use on a
                # listener that requires client certificates
                if style == "java":
                    cfg.update({"ssl.keystore.type": "PEM",
                                "ssl.keystore.location": str(files.server)})
                else:
                    cfg.update({"ssl.certificate.location": str(files.server),
                                "ssl.key.location": str(files.server)})
            elif user is not None and user in security.client_certificates:
                if style == "java":
                    cfg.update({"ssl.keystore.type": "PEM",
                                "ssl.keystore.location": str(files.client_cert(user))})
                else:
                    cfg.update({"ssl.certificate.location":
                                str(files.client_cert(user).with_suffix(".crt")),
                                "ssl.key.location": str(files.client_key(user))})
        if protocol.startswith("SASL_"):
            name = user if user is not None else security.broker_user
            users = security.all_users()
            if name not in users:
                raise KeyError(f"{name!r} is not a SASL user of this cluster")
            mech = (mechanism or security.sasl_mechanisms[0]).upper()
            cfg["sasl.mechanism"] = mech
            if style == "java":
                cfg["sasl.jaas.config"] = client_jaas(mech, name, users[name])
            else:
                cfg.update({"sasl.username": name, "sasl.password": users[name]})
        return cfg

    def write_client_properties(self, path: str | Path, user: str | None = None,
                                **kwargs: Any) -> Path:
        """``client_config(user)`` as a Java properties file (``--command-config``)."""
        path = Path(path)
        lines = [f"{k}={v}" for k, v in self.client_config(user, **kwargs).items()]
        path.write_text("# odradek cluster client properties\n" + "\n".join(lines) + "\n")
        path.chmod(0o600)
        return path

    def controller_id(self) -> int:
        for b in self.brokers.values():
            if b.started and b.controller is not None and b.controller.is_active:
                return b.broker_id
        return -1

    def live_brokers(self) -> list[int]:
        return sorted(i for i, b in self.brokers.items() if b.started)

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 30.0,
                       what: str = "condition") -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate():
            if loop.time() > deadline:
                raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
            await asyncio.sleep(0.01)


class Cluster:
    """The synchronous face of AsyncCluster: its loop runs in a daemon thread."""

    def __init__(self, brokers: int = 3, **kwargs: Any) -> None:
        self._kwargs = kwargs
        self._size = brokers
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="odradek-cluster",
                                        daemon=True)
        self.inner: AsyncCluster | None = None

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = 120.0) -> T:
        """Run a coroutine on the cluster's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def start(self) -> Cluster:
        self._thread.start()

        async def make() -> AsyncCluster:
            return AsyncCluster(self._size, **self._kwargs)
        self.inner = self.run(make())
        self.run(self.inner.start())
        return self

    def stop(self) -> None:
        if self.inner is not None:
            try:
                self.run(self.inner.stop())
            finally:
                self.inner = None
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def c(self) -> AsyncCluster:
        assert self.inner is not None, "cluster not started"
        return self.inner

    @property
    def bootstrap_servers(self) -> str:
        return self.c.bootstrap_servers

    @property
    def brokers(self) -> dict[int, Broker]:
        return self.c.brokers

    @property
    def data_dir(self) -> Path:
        return self.c.data_dir

    @property
    def zookeeper(self) -> EmbeddedZooKeeper:
        return self.c.zookeeper

    @property
    def faults(self) -> BlockingFaults:
        """The fault API (`ClusterFaults`'s methods, blocking; docs/faults.md)."""
        return BlockingFaults(self)

    @property
    def ports(self) -> dict[int, int]:
        """Each broker's first advertised port (its proxy's with network faults)."""
        return self.c.ports

    @property
    def security(self) -> ClusterSecurity | None:
        return self.c.security

    def bootstrap_servers_for(self, listener: str) -> str:
        return self.c.bootstrap_servers_for(listener)

    @property
    def http_urls(self) -> list[str]:
        """See `AsyncCluster.http_urls`."""
        return self.c.http_urls

    @property
    def console_url(self) -> str | None:
        return self.c.console_url

    def client_config(self, user: str | None = None, **kwargs: Any) -> dict[str, str]:
        """See `AsyncCluster.client_config`."""
        return self.c.client_config(user, **kwargs)

    def write_client_properties(self, path: str | Path, user: str | None = None,
                                **kwargs: Any) -> Path:
        return self.c.write_client_properties(path, user, **kwargs)

    def controller_id(self) -> int:
        return self.c.controller_id()  # plain reads: safe from any thread

    def live_brokers(self) -> list[int]:
        return self.c.live_brokers()

    def stop_broker(self, broker_id: int) -> None:
        self.run(self.c.stop_broker(broker_id))

    def kill_broker(self, broker_id: int) -> None:
        self.run(self.c.kill_broker(broker_id))

    def restart_broker(self, broker_id: int, clean: bool = True) -> None:
        self.run(self.c.restart_broker(broker_id, clean))

    def start_broker(self, broker_id: int) -> None:
        self.run(self.c.start_broker(broker_id))

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 30.0,
                 what: str = "condition") -> None:
        """Poll `predicate` in the caller's thread (it may use this object's methods)."""
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
            time.sleep(0.01)
