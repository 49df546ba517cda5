"""One broker: wiring, start-up, periodic duties, shutdown (Kafka's KafkaServer).

Start-up: open the log dirs (recovering logs after a crash), connect to the coordination store
(ZooKeeper when `zookeeper.connect` is set, else an embedded store), bind the listeners (port 0
picks a free port), register `/brokers/ids/<id>`, and run the controller. Shutdown (SIGTERM):
stop listening, flush, write checkpoints and the clean-shutdown marker, then leave the store.
No global state: several brokers may share one process and one event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import time
from pathlib import Path
from typing import Any

from ..common import TopicPartition, clock, entropy, state_change
from ..console.console_api import LocalReplica, with_http_endpoint
from ..console.http_listener import (
    AdminAccess,
    FaultActions,
    HttpListener,
    console_static_dir,
    registered_http_endpoints,
)
from ..controller.controller import ControllerConfig, KafkaController
from ..coordination import paths
from ..coordination.embedded import EmbeddedZooKeeper
from ..coordination.store import (
    CoordinationStore,
    NodeExistsError,
    SessionState,
    StoreClosedError,
)
from ..coordination.until_connected import UntilConnectedStore
from ..coordinator.group_coordinator import GroupConfig, GroupCoordinator
from ..coordinator.transaction_coordinator import TransactionCoordinator
from ..coordinator.transaction_marker_channel import (
    NO_NODE,
    Destination,
    TransactionMarkerChannelManager,
)
from ..coordinator.transaction_state_manager import TransactionConfig, TransactionStateManager
from ..metrics.history import MetricsHistory
from ..metrics.registry import BrokerMetrics
from ..runtime.scheduler import schedule_periodically
from ..security import ssl_factory
from ..security.authorizer import ALLOW_ALL, Authorizer
from ..security.connector import Connector, open_connection
from ..security.sasl_server import DEFAULT_MAX_RECEIVE_SIZE, listener_prop
from ..storage.checkpoint_writer import lower_switch_interval
from ..storage.checkpoints import write_atomically
from ..storage.cleaner_manager import cleaner_config_from
from ..storage.log_config import LogConfig
from ..storage.log_dir_failure_channel import LogDirFailureChannel
from ..storage.log_manager import LogManager
from .admin_manager import AdminManager
from .apis import KafkaApis
from .authorizer import authorizer_from_config
from .configs.broker_config_manager import BrokerConfigManager
from .configs.config import ConfigError, KafkaConfig, parse_http_listener
from .configs.dynamic_config_manager import DynamicConfigManager
from .configs.topic_config_manager import TopicConfigManager
from .configs.topic_configs import TopicConfigs
from .credential_cache import CredentialCache
from .gc_freeze import freeze_long_lived, paused_gc, process_owned
from .metadata_cache import BrokerInfo, ListenerEndpoint, MetadataCache
from .network import Binder, Listener, SocketServer, bind_socket
from .producer_id_manager import ProducerIdManager
from .quotas import connection_quotas
from .quotas.client_quota_manager import QuotaManagers
from .quotas.quota_config import ClientQuotaConfigManager
from .quotas.replication_quota import ReplicationQuotas
from .replication.fetcher import FetcherConfig, ReplicaFetcherManager
from .replication.isr import IsrChangeManager
from .replication.partition import Partition
from .replication.replica_manager import ReplicaManager

log = logging.getLogger("odradek.broker")

META_PROPERTIES = "meta.properties"


def _now_ms() -> int:
    return clock.now_ms()


class Broker:
    """The wiring (Kafka's KafkaServer): start() builds each component once its collaborators
    exist, in dependency order, and hands each exactly what it uses. Until start() the
    components are None; afterwards they are what tests and tools read (`replica_manager`,
    `group_coordinator`, `controller`, ...)."""

    def __init__(self, config: KafkaConfig, *, embedded_zk: EmbeddedZooKeeper | None = None,
                 fault_actions: FaultActions | None = None,
                 connector: Connector | None = None, bind: Binder | None = None,
                 threads: bool = True, event_loop_probe: bool = True) -> None:
        self.config = config
        self.fault_actions = fault_actions  # the console's fault routes (odradek.Cluster)
        # how this broker dials the others (controller channel, replica fetchers, transaction
        # markers, controlled shutdown); odradek.Cluster's fault network passes its own
        self.connector: Connector = connector or open_connection
        # how its listeners are bound (real sockets; the simulated network's in odradek.sim)
        self.bind: Binder = bind or bind_socket
        # False (odradek.sim): no thread or helper process of its own (the log manager's
        # checkpoint writer and log deletions run inline on the loop)
        self.threads = threads
        # the event-loop lag probe (time.perf_counter against the loop's sleeps); off in
        # odradek.sim, where the loop's time is virtual and the lag always zero
        self.event_loop_probe = event_loop_probe
        self.http_listener: HttpListener | None = None
        self.broker_id = config.broker_id
        self._embedded_zk = embedded_zk
        self._owns_embedded_zk = False
        self.metadata_cache = MetadataCache()
        self.store: CoordinationStore | None = None
        self.broker_epoch = -1  # KIP-380: the czxid of this broker's registration, once made
        self._registration_store: UntilConnectedStore | None = None
        self.log_manager: LogManager | None = None
        self.log_configs: TopicConfigs | None = None  # the one owner of topic configuration
        self.replica_manager: ReplicaManager | None = None
        self.broker_configs: BrokerConfigManager | None = None
        self.topic_configs: TopicConfigManager | None = None
        self.admin: AdminManager | None = None
        self.producer_ids: ProducerIdManager | None = None
        self.group_coordinator: GroupCoordinator | None = None
        self.txn_coordinator: TransactionCoordinator | None = None
        self.controller: KafkaController | None = None
        self.apis: KafkaApis | None = None
        self.authorizer: Authorizer = ALLOW_ALL
        self.credential_cache: CredentialCache | None = None
        self.client_quotas: QuotaManagers | None = None  # KIP-219 client quotas
        self.quota_configs: ClientQuotaConfigManager | None = None
        self.dynamic_configs: DynamicConfigManager | None = None  # watches /config/changes
        self.socket_server: SocketServer | None = None
        self.bound_ports: list[int] = []  # in the order of `listeners`
        self.listener_ports: dict[str, int] = {}  # listener name -> bound port
        self._state_change_handler: logging.Handler | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.started = False
        # this broker's metrics (metrics/), built again by start(); history sampled every second
        self.metrics = BrokerMetrics(self.broker_id)
        self.metrics_history = MetricsHistory(self.metrics)

    # -- what tests and tools read --------------------------------------------------------------
    def topic_config(self, topic: str) -> LogConfig:
        """The effective config of `topic` on this broker."""
        if self.log_configs is None:
            raise RuntimeError(f"broker {self.broker_id} is not started")
        return self.log_configs.config(topic)

    @property
    def dynamic_config(self) -> dict[str, str]:
        """KIP-226: the dynamic broker configs in force (<default> then <id> overrides)."""
        return {} if self.broker_configs is None else self.broker_configs.dynamic_config

    @property
    def controller_epoch_seen(self) -> int:
        """The newest controller epoch seen in controller requests (S-5.3)."""
        return 0 if self.replica_manager is None else self.replica_manager.controller_epoch

    def _enable_unclean_leader_election(self, topic: str | None = None) -> None:
        """A topic's (or, with None, the broker default's) unclean.leader.election.enable
        became true: the active controller elects leaders for offline partitions at once."""
        if self.controller is not None:
            self.controller.enable_unclean_leader_election(topic)

    # -- lifecycle --------------------------------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        ep = self.advertised_endpoints()[0]
        return f"{ep.host}:{ep.port}"

    def bootstrap_for(self, listener: str) -> str:
        """host:port of this broker's advertised endpoint on `listener`."""
        for ep in self.advertised_endpoints():
            if ep.listener_name == listener.upper():
                return f"{ep.host}:{ep.port}"
        raise KeyError(f"broker {self.broker_id} has no listener {listener}")

    def advertised_endpoints(self) -> list[paths.Endpoint]:
        """Each advertised listener's endpoint (port 0: the port its listener bound; no host:
        its listener's host, else localhost) with its security protocol."""
        cfg = self.config
        bound_host = {ep.listener: ep.host for ep in cfg.listeners}
        out = []
        for ep in cfg.advertised_listeners:
            port = ep.port or self.listener_ports.get(ep.listener, 0)
            host = ep.host or bound_host.get(ep.listener, "")
            out.append(paths.Endpoint(ep.listener, host or "localhost", port,
                                      cfg.security_protocol(ep.listener).value))
        return out

    def make_listener(self, name: str) -> Listener:
        """A listener's security: its TLS context (read from its ssl.* configs now, so a bad
        key store stops start-up with the key named) and its principal mapping rules."""
        cfg = self.config
        protocol = cfg.security_protocol(name)
        context = None
        if protocol.uses_ssl:
            try:
                context = ssl_factory.server_ssl_context(cfg.listener_props(name))
            except (ssl_factory.SslConfigError, OSError) as exc:
                raise ConfigError(f"listener {name}: {exc}") from None
        size = listener_prop(cfg.originals, name, "sasl.server.max.receive.size")
        return Listener(name, protocol, context, cfg.principal_mapper(name),
                        DEFAULT_MAX_RECEIVE_SIZE if size is None else int(size))

    async def start(self) -> None:
        cfg = self.config
        # listeners' TLS contexts first: a bad key store stops start-up before anything opens
        listeners = [self.make_listener(ep.listener) for ep in cfg.listeners]
        cfg.inter_broker_client_security()  # the same for the inter-broker client side
        log_dirs = cfg.log_dirs
        # KIP-112: a log dir failing from the start is offline, the others serve
        failures = LogDirFailureChannel()
        for d in log_dirs:
            try:
                d.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                failures.maybe_add_offline_log_dir(d, f"Failed to create log dir {d}", exc)
        store = self.store = await self._connect_store()
        # Kafka's registerBroker retries until connected: a registration (or the one after a
        # session expiry) cut short by a lost connection is sent again once connected
        self._registration_store = UntilConnectedStore(store)
        await paths.create_top_level_paths(store)
        cluster_id = await self._cluster_id()
        self.broker_id = self._check_meta_properties(log_dirs, cluster_id, failures)
        self._state_change_handler = state_change.attach_file(self.broker_id, log_dirs[0])
        metrics = self.metrics = BrokerMetrics(
            self.broker_id, recording=cfg["metrics.recording.enabled"])
        self.metrics_history = MetricsHistory(metrics)
        store.add_session_listener(metrics.on_session_state)  # ZooKeeper session meters
        metrics.on_session_state(SessionState.CONNECTED)  # the session start-up just opened
        cache = self.metadata_cache
        cache.cluster_id = cluster_id
        defaults = LogConfig.from_props(cfg.topic_defaults(), allow_unknown=True)
        log_manager = self.log_manager = LogManager(
            log_dirs, defaults, producer_id_expiration_ms=cfg["producer.id.expiration.ms"],
            flush_stats=metrics.log_flush, failure_channel=failures, threads=self.threads)
        log_manager.start_cleaner(cleaner_config_from(cfg))  # compaction (S-2.7)
        # many loaded logs: out of the cyclic GC's generations (server/gc_freeze.py)
        freeze_long_lived(len(log_manager.all_logs()), collect=True, reason="loading logs")
        if process_owned():  # the checkpoint writer threads get the GIL back quickly
            lower_switch_interval()
        log_configs = self.log_configs = TopicConfigs(defaults, log_manager)
        # Replication (S-3) on the inter-broker listener. The replica fetchers and the ISR tasks
        # act on the partitions the replica manager hosts (Kafka's allPartitions): that map
        # comes first, then they, then the replica manager that drives them.
        partitions: dict[TopicPartition, Partition] = {}
        lag_ms = cfg["replica.lag.time.max.ms"]
        replication_quotas = ReplicationQuotas.create(
            cfg["replication.quota.window.num"], cfg["replication.quota.window.size.seconds"])
        inter_broker = cfg.inter_broker_listener_name
        fetchers = ReplicaFetcherManager(
            self.broker_id, partitions.get, FetcherConfig.from_config(cfg),
            lambda b: (e.host, e.port) if (e := cache.broker_endpoint(b, inter_broker)) else None,
            quota=replication_quotas.follower, connector=self.connector)
        isr = IsrChangeManager(self.broker_id, partitions, lambda: self.store, _now_ms,
                               replica_lag_time_max_ms=lag_ms, isr_stats=metrics.isr)
        rm = self.replica_manager = ReplicaManager(
            self.broker_id, log_manager, log_configs.config, _now_ms, lag_ms,
            fetcher_manager=fetchers, isr_manager=isr, partitions=partitions,
            quotas=replication_quotas, alter_log_dirs_chunk_bytes=cfg["replica.fetch.max.bytes"],
            store=lambda: self.store,
            on_all_log_dirs_offline=self._halt_on_log_dir_failure,  # KIP-112
            metadata_cache=cache, topic_stats=metrics.topics,
            replica_selector=cfg["replica.selector.class"])
        rm.start()  # purgatory timers, replication-offset-checkpoint, log dir failures, ISR tasks
        broker_configs = self.broker_configs = BrokerConfigManager(
            self.broker_id, cfg, store, log_configs, rm, self._enable_unclean_leader_election)
        topic_configs = self.topic_configs = TopicConfigManager(
            self.broker_id, store, log_configs, rm, self._enable_unclean_leader_election)
        admin = self.admin = AdminManager(cfg, store, cache, log_configs, topic_configs,
                                          broker_configs)
        self.producer_ids = ProducerIdManager(self.broker_id, store)
        coordinator = self.group_coordinator = GroupCoordinator(
            self.broker_id, GroupConfig.from_config(cfg), rm, store, lambda: cache.brokers,
            admin.create_topic_with_assignment)
        await coordinator.startup()  # listens to LeaderAndIsr from now on
        txn_config = TransactionConfig.from_config(cfg)
        txn_manager = TransactionStateManager(self.broker_id, rm, txn_config, _now_ms)
        marker_channel = TransactionMarkerChannelManager(
            self.broker_id, txn_manager, self._txn_marker_destination,
            security=cfg.inter_broker_client_security(),
            request_timeout_ms=cfg["request.timeout.ms"], connector=self.connector)
        txn_coordinator = self.txn_coordinator = TransactionCoordinator(
            self.broker_id, txn_config, txn_manager, marker_channel,
            self.producer_ids.next_producer_id, store, lambda: cache.brokers,
            admin.create_topic_with_assignment)
        await txn_coordinator.startup()  # listens to LeaderAndIsr of __transaction_state
        self.controller = KafkaController(
            UntilConnectedStore(store), self.broker_id, dataclasses.replace(
                ControllerConfig.from_broker_config(cfg), connector=self.connector), cache,
            topic_configs, log_configs.config, stats=metrics.controller, gc_pause=paused_gc)
        self.authorizer = authorizer_from_config(cfg, store, self.broker_id, log_dirs[0])
        if self.authorizer.enabled:
            await self.authorizer.start()  # type: ignore[attr-defined]
        credentials = self.credential_cache = CredentialCache(store)  # SCRAM users (SB)
        quotas = self.client_quotas = QuotaManagers(
            cfg["quota.window.num"], cfg["quota.window.size.seconds"],
            cfg["quota.producer.default"], cfg["quota.consumer.default"])
        quota_configs = self.quota_configs = ClientQuotaConfigManager(store, quotas)

        async def broker_config_changed(entity: str) -> None:  # Kafka's BrokerConfigHandler
            if broker_configs.on_change(entity):
                await broker_configs.reload()

        # one watcher of /config/changes, dispatching to each entity type's handlers; the
        # notifications present now are taken as seen BEFORE the loads below, and the ones
        # written meanwhile are processed when it starts, after them
        dynamic_configs = self.dynamic_configs = DynamicConfigManager(store, {
            "topics": topic_configs.reload,
            "brokers": broker_config_changed,
            "users": (credentials.on_user_config_change, quota_configs.on_user_config_change),
            "clients": quota_configs.on_client_config_change,
        })
        await dynamic_configs.skip_existing()
        await credentials.start()
        await quota_configs.start()
        self.apis = KafkaApis(
            broker_id=self.broker_id, config=cfg, replica_manager=rm, metadata_cache=cache,
            group_coordinator=coordinator, txn_coordinator=txn_coordinator, admin_manager=admin,
            topic_config_manager=topic_configs,
            producer_ids=self.producer_ids, controller=self.controller, store=store,
            flush_checkpoints=log_manager.checkpoint_writer.flush, authorizer=self.authorizer,
            credential_cache=credentials, request_stats=metrics.requests,
            topic_stats=metrics.topics, quotas=quotas,
            broker_epoch=lambda: self.broker_epoch)  # KIP-380: the controller's requests
        self._register_metrics(fetchers)
        connection_limits = connection_quotas.ConnectionQuotas()
        connection_quotas.configure(connection_limits, cfg)
        socket_server = self.socket_server = SocketServer(
            self.apis.handle, cfg["socket.request.max.bytes"],
            max_in_flight=min(cfg["queued.max.requests"], 64),
            connection_quotas=connection_limits)

        def reconfigure_connections(eff: KafkaConfig) -> None:  # DynamicConnectionQuota
            connection_quotas.configure(connection_limits, eff)
            socket_server.slot_freed()

        broker_configs.reconfigurables.append(reconfigure_connections)
        for ep, listener in zip(cfg.listeners, listeners, strict=True):
            port = await self.bind(socket_server, ep.host, ep.port, listener)
            self.bound_ports.append(port)
            self.listener_ports[ep.listener] = port
        await broker_configs.start()
        await dynamic_configs.start()  # the initial state is loaded: changes from now on
        await self._start_http_listener()  # before registering: its address is registered
        await self._register()
        await socket_server.start_serving()  # registered: clients and controllers may come
        store.add_session_listener(self._on_session_state)
        await self.controller.startup()
        await self._await_cluster_metadata()
        self._start_periodic_tasks()
        self.started = True
        log.info("[KafkaServer id=%d] started; listening on %s", self.broker_id,
                 ", ".join(e.connection_string for e in self.advertised_endpoints()))

    # -- the HTTP listener (http.listener: /metrics, the console) ------------------------------
    @property
    def http_url(self) -> str | None:
        """http://host:port of the HTTP listener, None when `http.listener` is empty."""
        return self.http_listener.url if self.http_listener is not None else None

    async def _start_http_listener(self) -> None:
        bind = parse_http_listener(self.config["http.listener"])
        if bind is None:
            return
        listener = self.http_listener = HttpListener(
            self.broker_id, bind[0], bind[1], self._console_admin_access(),
            controller_epoch=lambda: self.controller_epoch_seen,
            local_replicas=self._local_replicas,
            state_change_log=self.config.log_dirs[0] / "state-change.log",
            render_metrics=self.metrics.snapshot,
            peers=lambda: registered_http_endpoints(self.store),  # type: ignore[arg-type]
            history=lambda names: self.metrics_history.series(names),
            fault_actions=self.fault_actions, static_dir=console_static_dir())
        await listener.start()

    def _console_admin_access(self) -> AdminAccess:
        """The console's admin clients use this broker's first SASL listener (so the HTTP
        user's credentials and ACLs apply), else its first listener."""
        cfg = self.config
        names = [ep.listener for ep in cfg.advertised_listeners]
        name = next((n for n in names if cfg.security_protocol(n).uses_sasl), names[0])
        protocol = cfg.security_protocol(name)
        tls: dict[str, str] = {}
        if protocol.uses_ssl:
            props = cfg.listener_props(name)
            keys = ["ssl.truststore.type", "ssl.truststore.location"]
            if props.get("ssl.client.auth", "none") == "required":
                keys += ["ssl.keystore.type", "ssl.keystore.location"]
            tls = {k: str(props[k]) for k in keys if props.get(k)}
        mechanisms = cfg.sasl_enabled_mechanisms(name) if protocol.uses_sasl else []
        return AdminAccess(self.bootstrap_for(name), protocol.value,
                           mechanisms[0] if mechanisms else None, tls)

    def _local_replicas(self, topic: str) -> dict[int, LocalReplica]:
        rm = self.replica_manager
        if rm is None:
            return {}
        return {partition: LocalReplica(p.log_end_offset, p.log.size)
                for (name, partition), p in list(rm.partitions.items()) if name == topic}

    def _register_metrics(self, fetchers: ReplicaFetcherManager) -> None:
        """The scrape-time gauges read the components' state through these callables."""
        rm, lm, coordinator = self.replica_manager, self.log_manager, self.group_coordinator
        assert rm is not None and lm is not None and coordinator is not None
        metrics = self.metrics
        metrics.register_replica_manager(
            lambda: rm.partitions.values(),
            lambda topic: rm.topic_config(topic).min_insync_replicas,
            {"Produce": rm.produce_purgatory, "Fetch": rm.fetch_purgatory,
             "DeleteRecords": rm.delete_records_purgatory},
            fetchers.max_lag)
        metrics.register_logs(lm.all_logs)
        metrics.register_controller(
            lambda: self.controller is not None and self.controller.is_active,
            lambda: self.controller.ctx if self.controller is not None else None)
        metrics.register_groups(lambda: coordinator.manager.groups.values())
        if self.apis is not None:
            metrics.register_fetch_sessions(self.apis.fetch.sessions)

    def _txn_marker_destination(self, tp: TopicPartition) -> Destination | None:
        """Where the transaction markers of `tp` go (Kafka's getPartitionLeaderEndpoint on the
        inter-broker listener): None if the partition is unknown, NO_NODE if its leader is
        not available."""
        info = self.metadata_cache.partition(tp.topic, tp.partition)
        if info is None:
            return None
        ep = (None if info.leader < 0 else
              self.metadata_cache.broker_endpoint(info.leader,
                                                  self.config.inter_broker_listener_name))
        return NO_NODE if ep is None else (info.leader, ep.host, ep.port)

    async def _connect_store(self) -> CoordinationStore:
        connect = self.config["zookeeper.connect"]
        if connect:
            from ..coordination.zookeeper import ZooKeeperStore
            from ..security.zk_auth import ZkSecurity

            zk_security = ZkSecurity.for_broker(  # zookeeper.set.acl: the JAAS Client login
                self.config["zookeeper.set.acl"], self.config["java.security.auth.login.config"])
            store: CoordinationStore = ZooKeeperStore(
                connect, session_timeout_ms=self.config["zookeeper.session.timeout.ms"],
                auth_data=zk_security.auth_data, acls=zk_security.acl_provider)
        else:
            if self._embedded_zk is None:
                # A standalone broker keeps its coordination data beside its logs.
                self._embedded_zk = EmbeddedZooKeeper(
                    persist_dir=self.config.log_dirs[0] / "__embedded_zookeeper")
                self._owns_embedded_zk = True
            store = self._embedded_zk.client(  # expires after this long disconnected
                session_timeout_ms=self.config["zookeeper.session.timeout.ms"])
        await store.start()
        return store

    async def _cluster_id(self) -> str:
        assert self.store is not None
        found = await self.store.get_or_none(paths.CLUSTER_ID)
        if found is not None:
            return paths.decode_cluster_id(found[0])
        cid = _new_cluster_id()
        try:
            await self.store.create(paths.CLUSTER_ID, paths.encode_cluster_id(cid), makepath=True)
            return cid
        except NodeExistsError:
            return paths.decode_cluster_id((await self.store.get(paths.CLUSTER_ID))[0])

    def _check_meta_properties(self, log_dirs: list[Path], cluster_id: str,
                               failures: LogDirFailureChannel) -> int:
        """Kafka's meta.properties: broker.id and cluster.id per log dir; a mismatch refuses to
        start rather than mixing clusters' data. A dir whose file cannot be read or written is
        offline (reported to `failures`)."""
        broker_id = self.broker_id
        for d in log_dirs:
            f = d / META_PROPERTIES
            if failures.has_offline_log_dir(d) or not f.exists():
                continue
            try:
                text = f.read_text()
            except OSError as exc:
                failures.maybe_add_offline_log_dir(d, f"Failed to read {f}", exc)
                continue
            props = dict(line.split("=", 1) for line in text.splitlines()
                         if "=" in line and not line.startswith("#"))
            stored_id = int(props.get("broker.id", "-1"))
            stored_cluster = props.get("cluster.id")
            if broker_id < 0:
                broker_id = stored_id
            elif stored_id >= 0 and stored_id != broker_id:
                raise ConfigError(
                    f"Stored node id {stored_id} in {f} doesn't match broker.id {broker_id}")
            if stored_cluster and stored_cluster != cluster_id:
                raise ConfigError(
                    f"The cluster id {cluster_id} doesn't match the stored cluster id "
                    f"{stored_cluster} in {f}")
        if broker_id < 0:
            broker_id = 0 if not self.config["zookeeper.connect"] else \
                self.config["reserved.broker.max.id"] + 1
        for d in log_dirs:
            if failures.has_offline_log_dir(d):
                continue
            try:
                # through a fsynced .tmp moved over it, as Kafka's BrokerMetadataCheckpoint
                # writes it: a power loss leaves the old file or the new, never a torn one
                write_atomically(d / META_PROPERTIES, (
                    "#\n#" + time.strftime("%a %b %d %H:%M:%S %Z %Y") + "\n"
                    f"cluster.id={cluster_id}\nversion=0\nbroker.id={broker_id}\n").encode())
            except OSError as exc:
                failures.maybe_add_offline_log_dir(d, f"Failed to write {d / META_PROPERTIES}",
                                                   exc)
        return broker_id

    async def _register(self) -> None:
        assert self.store is not None and self._registration_store is not None
        store = self._registration_store
        endpoints = tuple(self.advertised_endpoints())
        reg = paths.BrokerRegistration(self.broker_id, endpoints, rack=self.config["broker.rack"])
        path = paths.broker_path(self.broker_id)
        data = paths.encode_broker_registration(reg)
        if self.http_listener is not None:  # extra field for the consoles of its peers
            data = with_http_endpoint(data, self.http_listener.advertised_url(endpoints[0].host))
        # After a crash the previous process's session may still hold the node until it
        # expires: wait for it to go (Kafka's checked ephemeral create), then register.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 2 * self.config["zookeeper.session.timeout.ms"] / 1000
        while True:
            try:
                await store.create(path, data, ephemeral=True, makepath=True)
                break
            except NodeExistsError:
                stat = await store.exists(path)
                if stat is not None and stat.ephemeral_owner == store.session_id:
                    break
                if loop.time() > deadline:
                    raise RuntimeError(
                        f"broker id {self.broker_id} is registered by another live session "
                        f"at {path}: is another broker with this id running?") from None
                log.info("Broker %d: %s still held by an old session; waiting",
                         self.broker_id, path)
                await asyncio.sleep(0.5)
        # KIP-380: the registration's czxid is this broker's epoch, which its ControlledShutdown
        # carries (the controller refuses an older one: a request of an earlier registration)
        try:
            stat = await store.exists(path)
        except Exception as exc:  # registered all the same; -1 is "unknown", never refused
            log.warning("Broker %d: could not read its registration's epoch: %r",
                        self.broker_id, exc)
            stat = None
        self.broker_epoch = stat.czxid if stat is not None else -1
        ep = endpoints[0]
        self.metadata_cache.brokers[self.broker_id] = BrokerInfo(
            self.broker_id, ep.host, ep.port, self.config["broker.rack"], tuple(
                ListenerEndpoint(e.listener_name, e.host, e.port,
                                 self.config.security_protocol(e.listener_name).id)
                for e in endpoints))
        log.info("Registered broker %d at path %s with addresses: %s", self.broker_id,
                 paths.broker_path(self.broker_id), [e.connection_string for e in endpoints])

    async def _await_cluster_metadata(self, timeout_s: float = 15.0) -> None:
        """Start-up completes once the controller has told this broker about the cluster (its
        first UpdateMetadata), so a client connecting right after start sees the partitions
        this broker leads. Bounded: a broker without a reachable controller still starts."""
        try:
            await asyncio.wait_for(self.metadata_cache.initialized.wait(), timeout_s)
        except TimeoutError:
            log.warning("[KafkaServer id=%d] No metadata from a controller after %.0f s; "
                        "serving anyway", self.broker_id, timeout_s)

    def _on_session_state(self, state: SessionState) -> None:
        """S-5.1: a new session after expiry re-registers `/brokers/ids/<id>`; the controller
        resigns on expiry and runs for election again once registered."""
        if self.controller is None:
            return
        if state is SessionState.EXPIRED:
            log.warning("[KafkaServer id=%d] Coordination session expired", self.broker_id)
            self.controller.on_session_state(state)
            self._session_expired = True
        elif state is SessionState.CONNECTED and getattr(self, "_session_expired", False):
            self._session_expired = False
            task = asyncio.ensure_future(self._reregister())
            self._tasks.append(task)

    async def _reregister(self) -> None:
        try:
            await self._register()
        except (NodeExistsError, StoreClosedError):  # (closed: the broker is stopping)
            pass
        except Exception:
            log.exception("Could not register broker %d again", self.broker_id)
            return
        if self.controller is not None:
            self.controller.session_reestablished()

    def _start_periodic_tasks(self) -> None:
        cfg = self.config
        lm = self.log_manager
        assert lm is not None

        def every(name: str, interval_ms: int, fn: Any) -> None:
            task = schedule_periodically(f"broker-{self.broker_id}-{name}", interval_ms, fn,
                                         logger=log, description=f"Periodic task {name}")
            if task is not None:
                self._tasks.append(task)

        if self.event_loop_probe:
            self._tasks.append(asyncio.create_task(
                self.metrics.run_event_loop_probe(),
                name=f"broker-{self.broker_id}-eventloop-lag"))
        self._tasks.append(asyncio.create_task(self.metrics_history.run(),
                                               name=f"broker-{self.broker_id}-metrics-history"))
        every("kafka-log-retention", cfg["log.retention.check.interval.ms"],
              lambda: lm.cleanup_logs(_now_ms()))
        flush_every = min(cfg["log.flush.scheduler.interval.ms"], 1000)
        every("kafka-log-flusher", flush_every, lambda: lm.flush_dirty_logs_async(_now_ms()))
        every("kafka-recovery-point-checkpoint", cfg["log.flush.offset.checkpoint.interval.ms"],
              lm.checkpoint_recovery_points_and_log_start_offsets)
        every("highwatermark-checkpoint", cfg["replica.high.watermark.checkpoint.interval.ms"],
              self.checkpoint_high_watermarks)

    def _halt_on_log_dir_failure(self) -> None:
        """Every log dir failed: Kafka halts the broker. A broker owning its process exits;
        one in a test process stops as if it crashed."""
        log.error("[KafkaServer id=%d] Halting: every log dir has failed", self.broker_id)
        if process_owned():
            logging.shutdown()
            os._exit(1)
        # kept apart from _tasks: kill() cancels those
        self._halt_task = asyncio.ensure_future(self.kill())

    def checkpoint_high_watermarks(self) -> None:
        if self.log_manager is None or self.replica_manager is None:
            return
        self.log_manager.write_high_watermarks(self.replica_manager.high_watermarks())

    async def stop(self) -> None:
        """Clean shutdown: leadership moves away first (controlled shutdown, S-4.4), then
        everything written reaches the disk and checkpoints are current."""
        log.info("[KafkaServer id=%d] shutting down", self.broker_id)
        if self.config["controlled.shutdown.enable"] and self.started:
            await self._controlled_shutdown()
        await self._shut_down(clean=True)
        log.info("[KafkaServer id=%d] shut down completed", self.broker_id)

    async def kill(self) -> None:
        """Simulate a crash in-process: drop connections and the session; no flush, no
        checkpoints, no clean-shutdown marker (what kill -9 leaves, minus the page cache)."""
        await self._shut_down(clean=False)

    async def _shut_down(self, clean: bool) -> None:
        """What stop and kill share, in Kafka's KafkaServer.shutdown order: the network and
        tasks, the coordinators, the replica manager, the logs, the store. Only a `clean` one
        checkpoints the high watermarks and flushes the logs with the clean-shutdown marker."""
        await self._stop_network_and_tasks()
        if self.txn_coordinator is not None:
            await self.txn_coordinator.shutdown()
        if self.group_coordinator is not None:
            self.group_coordinator.shutdown()
        if self.replica_manager is not None:
            if clean:
                self.checkpoint_high_watermarks()
            self.replica_manager.shutdown()
        if self.log_manager is not None:
            if clean:
                self.log_manager.shutdown()
            else:
                self.log_manager.close_without_shutdown()
        await self._close_store()
        self.started = False

    async def _close_store(self) -> None:
        if self.authorizer.enabled:
            self.authorizer.stop()  # type: ignore[attr-defined]
        if self._state_change_handler is not None:
            state_change.detach(self._state_change_handler)
            self._state_change_handler = None
        if self._registration_store is not None:
            self._registration_store.stop_waiting()  # a registration waiting for the store
            self._registration_store = None
        if self.store is not None:
            await self.store.close()
            self.store = None
        if self._owns_embedded_zk and self._embedded_zk is not None:
            self._embedded_zk.close()
            self._embedded_zk = None

    async def _controlled_shutdown(self) -> None:
        """Ask the controller to move this broker's leaderships away; retry per
        `controlled.shutdown.max.retries` while partitions remain (Kafka's KafkaServer)."""
        from ..controller.channel import send_one
        from ..protocol import interbroker as ib

        retries = self.config["controlled.shutdown.max.retries"]
        backoff = self.config["controlled.shutdown.retry.backoff.ms"] / 1000
        for attempt in range(retries + 1):
            cache = self.metadata_cache
            controller = cache.broker_endpoint(cache.controller_id,
                                               self.config.inter_broker_listener_name)
            if controller is None:
                log.info("[KafkaServer id=%d] No controller known for controlled shutdown",
                         self.broker_id)
                return
            try:
                resp = await send_one(
                    controller.host, controller.port, 7, 3,
                    ib.ControlledShutdownRequest(broker_id=self.broker_id,
                                                 broker_epoch=self.broker_epoch),
                    correlation_id=attempt, client_id=f"broker-{self.broker_id}",
                    timeout=self.config["controller.socket.timeout.ms"] / 1000,
                    security=self.config.inter_broker_client_security(),
                    connector=self.connector)
            except Exception as exc:  # network, TLS, SASL: retried
                log.warning("[KafkaServer id=%d] Controlled shutdown request failed: %s",
                            self.broker_id, exc)
            else:
                if resp.error_code == 0 and not resp.remaining_partitions:
                    log.info("[KafkaServer id=%d] Controlled shutdown succeeded",
                             self.broker_id)
                    return
                log.info("[KafkaServer id=%d] Controlled shutdown: error %d, %d partitions "
                         "still led here", self.broker_id, resp.error_code,
                         len(resp.remaining_partitions))
            if attempt < retries:
                await asyncio.sleep(backoff)
        log.warning("[KafkaServer id=%d] Proceeding with shutdown after failed controlled "
                    "shutdown attempts", self.broker_id)

    async def _stop_network_and_tasks(self) -> None:
        if self.http_listener is not None:
            await self.http_listener.stop()
            self.http_listener = None
        if self.socket_server is not None:
            await self.socket_server.stop()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._tasks.clear()
        if self.controller is not None:
            await self.controller.shutdown()
            self.controller = None
        if self.dynamic_configs is not None:
            self.dynamic_configs.stop()


def _new_cluster_id() -> str:
    import base64

    return base64.urlsafe_b64encode(entropy.uuid4().bytes).decode().rstrip("=")
