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

from .coordination import paths
from .coordination.embedded import EmbeddedZooKeeper
from .server.broker import Broker
from .server.config import KafkaConfig

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


class ClusterFaults:
    """The console's fault actions (`console_faults=True`): each broker's HTTP listener may
    kill (a crash, as `kill_broker`) or restart (`restart_broker`: a clean stop if running,
    then a start) any broker of the cluster. Pausing a broker is not offered: the cluster has
    no way to stop a broker's processing short of stopping it. The tasks are the cluster's,
    so a broker killing itself through its own console still completes the action."""

    actions = ("kill", "restart")

    def __init__(self, cluster: AsyncCluster) -> None:
        self._cluster = cluster
        self._tasks: set[asyncio.Task[None]] = set()

    def run(self, action: str, broker_id: int) -> asyncio.Future[None]:
        if action not in self.actions:
            raise ValueError(f"unknown fault action {action!r}")
        if broker_id not in self._cluster.brokers:
            raise ValueError(f"no broker {broker_id}")
        task = asyncio.ensure_future(self._run(action, broker_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _run(self, action: str, broker_id: int) -> None:
        await asyncio.sleep(0)  # the request that asked is answered first
        if action == "kill":
            broker = self._cluster.brokers[broker_id]
            if broker.started:
                await self._cluster.kill_broker(broker_id)
        else:
            await self._cluster.restart_broker(broker_id)


class AsyncCluster:
    def __init__(self, brokers: int = 3, *, data_dir: str | Path | None = None,
                 base_port: int = 0, host: str = "127.0.0.1",
                 overrides: dict[str, Any] | None = None,
                 broker_overrides: dict[int, dict[str, Any]] | None = None,
                 security: ClusterSecurity | None = None, http: bool = True,
                 console_faults: bool = False) -> None:
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
        #: The console's fault actions (kill, restart a broker), with console_faults=True.
        self.faults: ClusterFaults | None = ClusterFaults(self) if console_faults else None

    @property
    def listener_names(self) -> tuple[str, ...]:
        return self.security.listeners if self.security is not None else ("PLAINTEXT",)

    def _port(self, broker_id: int, index: int) -> int:
        known = self.listener_ports.get(broker_id)
        if known is not None and index < len(known):
            return known[index]
        return self.base_port + broker_id + 100 * index if self.base_port else 0

    def config_for(self, broker_id: int) -> KafkaConfig:
        listeners = ",".join(f"{name}://{self.host}:{self._port(broker_id, i)}"
                             for i, name in enumerate(self.listener_names))
        props = {
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
        broker = Broker(self.config_for(broker_id), embedded_zk=self.zookeeper,
                        fault_actions=self.faults)
        await broker.start()
        self.brokers[broker_id] = broker
        self.ports[broker_id] = broker.bound_ports[0]
        self.listener_ports[broker_id] = list(broker.bound_ports)
        if broker.http_listener is not None:  # the same console address after a restart
            self.http_ports[broker_id] = broker.http_listener.port
        return broker

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
        running = [b for b in self.brokers.values() if b.started]
        # The controller last, so the others' controlled shutdowns find it.
        running.sort(key=lambda b: b.controller is not None and b.controller.is_active)
        for b in running:
            await b.stop()
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
