"""`AsyncCluster`: N brokers on one asyncio loop, on one shared embedded coordination store,
optionally secured (`ClusterSecurity`) and behind the fault network (`ClusterFaults`), or in
another `BrokerEnvironment` than this machine's sockets and threads (the deterministic
simulation's, odradek.sim)."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Protocol

from ..coordination.embedded import EmbeddedZooKeeper
from ..faults.network import CLIENTS, Node
from ..faults.proxy import FaultNetwork, LinkProxy
from ..security.connector import ClientSecurity, Connector, open_connection
from ..server.broker import Broker
from ..server.configs.config import KafkaConfig
from ..server.network import Binder
from .faults import ClusterFaults, LinkFaults
from .security import (
    BROKER_CERT_NAME,
    ClusterSecurity,
    SecurityFiles,
    acl_znodes,
    client_jaas,
    scram_user_znodes,
    security_broker_props,
)


class BrokerEnvironment(Protocol):
    """Where the brokers run when not on this machine's sockets and threads (the simulated
    network of odradek.sim): each broker's host, its way out (`Connector`), how it binds its
    listeners (`Binder`), and whether it may start threads and helper processes."""

    threads: bool
    #: where the fault API's link faults act (None: partitions, pauses and slow links raise)
    link_faults: LinkFaults | None

    def host(self, broker_id: int) -> str: ...

    def connector(self, broker_id: int) -> Connector: ...

    def binder(self, broker_id: int) -> Binder: ...


class SimulatedWorld(Protocol):
    """A deterministic simulation (odradek.sim's `Simulation`) as `AsyncCluster` takes it:
    it gives the brokers their environment."""

    def broker_environment(self, data_dir: Path) -> BrokerEnvironment: ...


class AsyncCluster:
    """N brokers on the running loop (the package's docstring); `Cluster` is its synchronous
    face. With an `environment` each broker has its own host there (no HTTP listeners, no
    fault network, no TLS); `simulation=sim` is the environment of that simulation, inside
    `sim.run(...)`:

        async def main(sim: Simulation) -> None:
            async with AsyncCluster(3, simulation=sim) as cluster:
                ...

        Simulation(seed=7).run(main)
    """

    def __init__(self, brokers: int = 3, *, data_dir: str | Path | None = None,
                 base_port: int = 0, host: str = "127.0.0.1",
                 overrides: dict[str, Any] | None = None,
                 broker_overrides: dict[int, dict[str, Any]] | None = None,
                 security: ClusterSecurity | None = None, http: bool | None = None,
                 console_faults: bool = False, network_faults: bool = False,
                 environment: BrokerEnvironment | None = None,
                 simulation: SimulatedWorld | None = None) -> None:
        if brokers < 1:
            raise ValueError("a cluster needs at least one broker")
        if simulation is not None and environment is not None:
            raise ValueError("a simulation is the brokers' environment: not both")
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="odradek-cluster-"))
        if simulation is not None:
            environment = simulation.broker_environment(self.data_dir)
        if http is None:  # an HTTP listener per broker, unless in another environment
            http = environment is None
        if environment is not None and (http or network_faults or console_faults
                                        or (security is not None and security.tls)):
            raise ValueError("a cluster in a broker environment has no HTTP listeners, fault "
                             "network or TLS: http=False, without network or console faults")
        self.environment = environment
        self.size = brokers
        self._tmp = data_dir is None
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

    def host_of(self, broker_id: int) -> str:
        """The host `broker_id`'s listeners bind: `host`, or its own in an environment."""
        env = self.environment
        return self.host if env is None else env.host(broker_id)

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
            host = self.host_of(broker_id)
            listeners = ",".join(f"{name}://{host}:{self._port(broker_id, i)}"
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
        env = self.environment
        connector = (self._connector(broker_id) if self.network is not None
                     else env.connector(broker_id) if env is not None else None)
        broker = Broker(self.config_for(broker_id), embedded_zk=self.zookeeper,
                        fault_actions=self.faults if self.console_faults else None,
                        connector=connector,
                        bind=env.binder(broker_id) if env is not None else None,
                        threads=env.threads if env is not None else True,
                        event_loop_probe=env is None)
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
        self.faults.apply()  # link and store faults in force apply to it too
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

    @property
    def link_faults(self) -> LinkFaults | None:
        """Where `faults` acts on links: the fault network, or the environment's network."""
        if self.network is not None:
            return self.network
        return None if self.environment is None else self.environment.link_faults

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

    async def __aenter__(self) -> AsyncCluster:
        """``async with AsyncCluster(...) as cluster:`` starts it (`start`) ..."""
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        """... and stops it (`stop`) on the way out, whatever ended the block."""
        await self.stop()

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{self.host_of(i)}:{self.ports[i]}" for i in sorted(self.ports)
                        if i in self.brokers and self.brokers[i].started)

    def bootstrap_servers_for(self, listener: str) -> str:
        """The running brokers' addresses on ``listener`` (a security protocol's name)."""
        index = self.listener_names.index(listener.upper())
        return ",".join(f"{self.host_of(i)}:{self.listener_ports[i][index]}"
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
