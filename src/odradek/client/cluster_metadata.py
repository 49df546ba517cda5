"""Cluster metadata and the connections of one client: bootstrap, Metadata refresh (periodic,
on demand, and after NOT_LEADER / UNKNOWN_TOPIC errors), leader lookup, connections by broker id.

`KafkaClient` is shared by a producer, consumer or admin: it owns one connection per (broker,
purpose) — a consumer keeps its group coordinator on its own connection so that a JoinGroup
parked at the coordinator never holds up fetch responses behind it — and a `ClusterMetadata`
snapshot replaced wholesale on each refresh.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, Self, TypeVar

from kio.schema.errors import ErrorCode

from ..common import entropy
from ..common.loop_thread import LoopThread
from ..security.connector import ClientSecurity, Connector, open_connection
from .config import parse_servers
from .connection import BrokerConnection
from .errors import KafkaConnectionError, KafkaError, KafkaTimeoutError
from .types import Node, TopicPartition

log = logging.getLogger("odradek.client")

# Errors after which the leader of a partition must be looked up again.
REFRESH_ERRORS = frozenset(int(e) for e in (
    ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available,
    ErrorCode.unknown_topic_or_partition, ErrorCode.fenced_leader_epoch,
    ErrorCode.unknown_leader_epoch, ErrorCode.kafka_storage_error,
    ErrorCode.replica_not_available, ErrorCode.network_exception,
    ErrorCode.not_enough_replicas, ErrorCode.unknown_topic_id,
))


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()
    error: int = 0


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    name: str
    topic_id: Any
    error: int
    internal: bool
    partitions: dict[int, PartitionMetadata] = field(default_factory=dict)


@dataclass(slots=True)
class ClusterMetadata:
    brokers: dict[int, Node] = field(default_factory=dict)
    topics: dict[str, TopicMetadata] = field(default_factory=dict)
    cluster_id: str | None = None
    controller_id: int = -1

    def leader(self, tp: TopicPartition) -> int | None:
        t = self.topics.get(tp.topic)
        if t is None:
            return None
        p = t.partitions.get(tp.partition)
        if p is None or p.leader < 0 or p.leader not in self.brokers:
            return None
        return p.leader

    def partition(self, tp: TopicPartition) -> PartitionMetadata | None:
        t = self.topics.get(tp.topic)
        return None if t is None else t.partitions.get(tp.partition)

    def partitions_for(self, topic: str) -> list[int] | None:
        t = self.topics.get(topic)
        if t is None or t.error not in (0,) or not t.partitions:
            return None
        return sorted(t.partitions)

    def available_partitions(self, topic: str) -> list[int]:
        """Partitions of `topic` with a live leader (where null keys may go)."""
        t = self.topics.get(topic)
        if t is None:
            return []
        return sorted(p.partition for p in t.partitions.values()
                      if p.leader >= 0 and p.leader in self.brokers)

    @classmethod
    def from_response(cls, resp: Any, previous: ClusterMetadata | None,
                      all_topics: bool) -> ClusterMetadata:
        brokers = {b.node_id: Node(b.node_id, b.host, b.port,
                                             getattr(b, "rack", None)) for b in resp.brokers}
        # A response for some topics keeps what we knew of the others.
        topics = {} if all_topics or previous is None else dict(previous.topics)
        for t in resp.topics:
            if t.name is None:
                continue
            parts = {p.partition_index: PartitionMetadata(
                p.partition_index, p.leader_id, getattr(p, "leader_epoch", -1),
                tuple(p.replica_nodes), tuple(p.isr_nodes),
                tuple(getattr(p, "offline_replicas", ())), int(p.error_code))
                for p in t.partitions}
            if t.error_code != ErrorCode.none and not parts and t.name in topics \
                    and t.error_code in (ErrorCode.leader_not_available,):
                continue  # keep the old view through a leader election
            topics[t.name] = TopicMetadata(t.name, getattr(t, "topic_id", None),
                                           int(t.error_code), bool(getattr(t, "is_internal",
                                                                           False)), parts)
        return cls(brokers, topics, getattr(resp, "cluster_id", None),
                   getattr(resp, "controller_id", -1))


class KafkaClient:
    """Connections and metadata for one producer, consumer or admin client."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.bootstrap = parse_servers(config["bootstrap.servers"])
        self._connect_errors: list[KafkaError] = []  # why bootstrap servers were unreachable
        self.client_id = str(config.get("client.id") or "odradek")
        self.request_timeout_ms = int(config["request.timeout.ms"])
        self.metadata = ClusterMetadata()
        self.allow_auto_create = bool(config.get("allow.auto.create.topics", True))
        self.retry_backoff = int(config["retry.backoff.ms"]) / 1000
        self.max_age = int(config["metadata.max.age.ms"]) / 1000
        self.reconnect_backoff = int(config["reconnect.backoff.ms"]) / 1000
        self.reconnect_backoff_max = int(config["reconnect.backoff.max.ms"]) / 1000
        self.connect_timeout_ms = int(config["socket.connection.setup.timeout.ms"])
        self.security = ClientSecurity.from_client_props(config)  # TLS / SASL, if configured
        # how connections to brokers are opened (security.connector's seam): set before
        # start() to reach brokers another way (the simulated network, odradek.sim)
        self.connector: Connector = open_connection
        # Topics to keep metadata for; None: all topics (admin).
        self.topics: set[str] | None = set()
        self._conns: dict[tuple[int, str], BrokerConnection] = {}
        self._connecting: dict[tuple[int, str], asyncio.Future[BrokerConnection]] = {}
        self._failures: dict[int, tuple[int, float]] = {}  # node -> (count, last failure time)
        self._refresh: asyncio.Future[ClusterMetadata] | None = None
        self._last_refresh = 0.0
        self._need_refresh = False
        self._updated = asyncio.Event()
        self._closed = False
        self._bg: asyncio.Task[None] | None = None

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        await self.refresh_metadata()
        self._bg = asyncio.get_running_loop().create_task(self._periodic_refresh())

    async def close(self) -> None:
        self._closed = True
        if self._bg is not None:
            self._bg.cancel()
            if self._bg is not asyncio.current_task():  # let it finish cancelling: a loop
                await asyncio.wait([self._bg], timeout=1.0)  # closed next must not find it
        conns = list(self._conns.values())
        self._conns.clear()
        for c in conns:
            c.close()
        for c in conns:
            await c.wait_closed()

    async def _periodic_refresh(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._closed:
            if self._need_refresh:
                # _wake() would return at once: wait out retry.backoff.ms asleep (waking on
                # it spun the loop until the backoff had passed)
                await asyncio.sleep(
                    max(0.0, self._last_refresh + self.retry_backoff - loop.time()))
            else:
                wait = max(0.0, self._last_refresh + self.max_age - loop.time())
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._wake(), wait)
            if self._closed:
                return
            due = self._need_refresh or loop.time() >= self._last_refresh + self.max_age
            if due and loop.time() >= self._last_refresh + self.retry_backoff:
                try:
                    await self.refresh_metadata()
                except KafkaError as exc:
                    log.debug("Metadata refresh failed: %s", exc)
                    self._last_refresh = loop.time()

    async def _wake(self) -> None:
        while not self._need_refresh:
            self._updated.clear()
            await self._updated.wait()

    def request_update(self) -> None:
        """Ask for a refresh soon (after retry.backoff.ms since the last one)."""
        if not self._need_refresh:
            self._need_refresh = True
            self._updated.set()

    def add_topics(self, topics: Iterable[str]) -> bool:
        """Track more topics; True when some were new (a refresh is then requested)."""
        if self.topics is None:
            return False
        new = set(topics) - self.topics
        if new:
            self.topics |= new
            self.request_update()
        return bool(new)

    # -- metadata --------------------------------------------------------------------------------
    async def refresh_metadata(self, topics: Iterable[str] | None = None,
                               all_topics: bool = False) -> ClusterMetadata:
        """One Metadata round trip (shared by concurrent callers) for the tracked topics (and
        `topics`; every topic with `all_topics`); returns the new snapshot."""
        if all_topics:
            return await self._do_refresh(everything=True)
        if topics is not None:
            self.add_topics(topics)
        if self._refresh is not None and not self._refresh.done():
            return await asyncio.shield(self._refresh)
        loop = asyncio.get_running_loop()
        self._refresh = loop.create_future()
        fut = self._refresh
        try:
            md = await self._do_refresh()
        except BaseException as exc:
            if not fut.done():
                fut.set_exception(exc)
                fut.exception()
            raise
        fut.set_result(md)
        return md

    async def _do_refresh(self, everything: bool = False) -> ClusterMetadata:
        loop = asyncio.get_running_loop()
        self._need_refresh = False
        wanted = None if self.topics is None or everything else sorted(self.topics)
        last_exc: Exception | None = None
        self._connect_errors.clear()
        async for conn in self._candidates():
            try:
                all_topics = wanted is None
                v = conn.version(3)
                topics = None if all_topics else [{"name": n, "topic_id": None} for n in wanted]
                if v == 0 and topics is None:
                    topics = []
                resp = await conn.send(3, topics=topics,
                                       allow_auto_topic_creation=self.allow_auto_create,
                                       include_cluster_authorized_operations=False,
                                       include_topic_authorized_operations=False)
            except KafkaError as exc:
                last_exc = exc
                continue
            self.metadata = ClusterMetadata.from_response(resp, self.metadata, all_topics)
            self._last_refresh = loop.time()
            if self.topics is not None and any(
                    t.error in REFRESH_ERRORS or t.error == ErrorCode.leader_not_available
                    or any(p.leader < 0 for p in t.partitions.values())
                    for t in self.metadata.topics.values() if t.name in self.topics):
                self._need_refresh = True  # a tracked topic lacks leaders: ask again soon
            self._updated.set()
            self._drop_stale_connections()
            if self.metadata.brokers:
                for key in [k for k in self._conns if k[1] == "bootstrap"]:
                    self._conns.pop(key).close()
            return self.metadata
        self._last_refresh = loop.time()
        why = last_exc or (self._connect_errors[-1] if self._connect_errors else None)
        raise KafkaConnectionError(f"no broker answered Metadata ({why})")

    async def _candidates(self) -> AsyncIterator[BrokerConnection]:
        """Connections to try, in order, for a request any broker can answer: the least loaded
        open one, then the other known brokers, then the bootstrap servers (each connected
        only when the ones before it failed)."""
        tried: set[int] = set()
        live = sorted((c for (n, p), c in self._conns.items()
                       if p == "default" and c.connected and not c.closed and n >= 0),
                      key=lambda c: c.in_flight)
        for conn in live:
            tried.add(conn.node_id)
            yield conn
        nodes = [n for n in self.metadata.brokers if n not in tried]
        entropy.shared().shuffle(nodes)
        for n in nodes:
            try:
                conn = await self.connection(n)
            except KafkaError:
                continue
            yield conn
        for i, (host, port) in enumerate(self.bootstrap):
            try:
                conn = await self.connect_address(-1 - i, host, port, "bootstrap")
            except KafkaError as exc:
                self._connect_errors.append(exc)
                continue
            yield conn

    def _drop_stale_connections(self) -> None:
        for key, conn in list(self._conns.items()):
            node, purpose = key
            if purpose == "bootstrap":
                continue
            b = self.metadata.brokers.get(node)
            if b is not None and (b.host, b.port) != (conn.host, conn.port):
                conn.close()
                del self._conns[key]

    async def ensure_topic(self, topic: str, timeout: float) -> list[int]:
        """The partitions of `topic`, refreshing metadata (auto-creating when allowed) until it
        exists or `timeout` passes (Kafka's max.block.ms)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        self.add_topics([topic])
        while True:
            t = self.metadata.topics.get(topic)
            if t is not None and t.error == ErrorCode.none and t.partitions:
                return sorted(t.partitions)
            if t is not None and t.error not in (ErrorCode.none, ErrorCode.leader_not_available,
                                                 ErrorCode.unknown_topic_or_partition):
                raise KafkaError.for_code(t.error, context=f"topic {topic}")
            if loop.time() >= deadline:
                err = t.error if t is not None else ErrorCode.unknown_topic_or_partition
                raise KafkaTimeoutError(
                    f"topic {topic} not present in metadata after {timeout:.1f}s "
                    f"({ErrorCode(err).name})")
            try:
                await self.refresh_metadata()
            except KafkaError as exc:
                log.debug("Metadata refresh for %s failed: %s", topic, exc)
            t = self.metadata.topics.get(topic)
            if t is None or t.error != ErrorCode.none or not t.partitions:
                await asyncio.sleep(min(self.retry_backoff, max(0.0, deadline - loop.time())))

    # -- connections -----------------------------------------------------------------------------
    def ready_connection(self, node_id: int, purpose: str = "default"
                         ) -> BrokerConnection | None:
        """The open connection to `node_id` for `purpose`, if there is one (none is opened)."""
        conn = self._conns.get((node_id, purpose))
        return conn if conn is not None and not conn.closed else None

    def close_connection(self, node_id: int, purpose: str = "default") -> None:
        """Close and forget the connection to `node_id` for `purpose` (if any)."""
        conn = self._conns.pop((node_id, purpose), None)
        if conn is not None:
            conn.close()

    async def _reuse(self, node_id: int, purpose: str) -> BrokerConnection | None:
        """The open connection, or the one being opened (awaited); None when neither."""
        conn = self.ready_connection(node_id, purpose)
        if conn is not None:
            return conn
        pending = self._connecting.get((node_id, purpose))
        if pending is not None:
            return await asyncio.shield(pending)
        return None

    async def connection(self, node_id: int, purpose: str = "default") -> BrokerConnection:
        conn = await self._reuse(node_id, purpose)
        if conn is not None:
            return conn
        broker = self.metadata.brokers.get(node_id)
        if broker is None:
            raise KafkaConnectionError(f"broker {node_id} is not in the cluster metadata")
        return await self.connect_address(node_id, broker.host, broker.port, purpose)

    async def connect_address(self, node_id: int, host: str, port: int,
                              purpose: str) -> BrokerConnection:
        """The connection to `node_id` at host:port for `purpose`: the open one, the one being
        opened, or a new one (with the node's reconnect backoff)."""
        conn = await self._reuse(node_id, purpose)
        if conn is not None:
            return conn
        key = (node_id, purpose)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[BrokerConnection] = loop.create_future()
        self._connecting[key] = fut
        try:
            count, last = self._failures.get(node_id, (0, 0.0))
            if count:
                backoff = min(self.reconnect_backoff * 2 ** (count - 1), self.reconnect_backoff_max)
                wait = last + backoff - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
            conn = BrokerConnection(host, port, node_id=node_id, client_id=self.client_id,
                                    request_timeout_ms=self.request_timeout_ms,
                                    connect_timeout_ms=self.connect_timeout_ms,
                                    security=self.security, connector=self.connector)
            try:
                await conn.connect()
            except KafkaError as exc:
                self._failures[node_id] = (count + 1, loop.time())
                if node_id >= 0:
                    self.request_update()
                fut.set_exception(exc)
                fut.exception()
                raise
            self._failures.pop(node_id, None)
            self._conns[key] = conn
            fut.set_result(conn)
            return conn
        finally:
            self._connecting.pop(key, None)

    async def send(self, node_id: int, api_key: int, max_version: int | None = None, *,
                   purpose: str = "default", request_timeout: float | None = None,
                   **kwargs: Any) -> Any:
        conn = await self.connection(node_id, purpose)
        try:
            return await conn.send(api_key, max_version, request_timeout=request_timeout,
                                   **kwargs)
        except KafkaConnectionError:
            self.request_update()
            raise

    async def any_connection(self) -> BrokerConnection:
        async for conn in self._candidates():
            return conn
        raise KafkaConnectionError("no broker is reachable")

    async def send_any(self, api_key: int, max_version: int | None = None, *,
                       request_timeout: float | None = None, **kwargs: Any) -> Any:
        conn = await self.any_connection()
        return await conn.send(api_key, max_version, request_timeout=request_timeout,
                               **kwargs)

    async def supports(self, api_key: int) -> bool:
        conn = await self.any_connection()
        return conn.supports(api_key)

    def node_failed(self, node_id: int) -> None:
        """A request to `node_id` failed at the network level: reconnect next time."""
        for (n, _), conn in list(self._conns.items()):
            if n == node_id and conn.closed:
                del self._conns[(n, _)]
        self.request_update()


# -- starting a client -----------------------------------------------------------------------

class StartableClient(Protocol):
    """AsyncProducer, AsyncConsumer and AsyncAdmin: started once, over one KafkaClient."""

    client: KafkaClient

    async def start(self) -> Self: ...


C = TypeVar("C", bound=StartableClient)


async def started(create: Callable[[], C]) -> C:
    """The client `create` makes (on the running loop), started; when the start fails its
    connections are closed, so a client never handed back leaves no socket open."""
    c = create()
    try:
        return await c.start()
    except BaseException:
        await c.client.close()
        raise


def start_on_loop_thread(name: str, create: Callable[[], C]) -> tuple[LoopThread, C]:
    """The synchronous faces' start: a LoopThread called `name` and the client `create` makes,
    started on it (`started`); the thread is stopped when the start fails."""
    runner = LoopThread(name)
    try:
        return runner, runner.run(started(create))
    except BaseException:
        runner.stop()
        raise
