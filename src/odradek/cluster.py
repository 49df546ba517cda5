"""An embedded N-broker cluster in one process, on one shared embedded coordination store.

    with odradek.Cluster(brokers=3) as cluster:
        producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers})
        cluster.kill_broker(cluster.controller_id())   # crash: no flush, session gone
        cluster.restart_broker(...)

`Cluster` runs its brokers on an asyncio loop in a background thread so that synchronous code
(tests, notebooks, the real clients) can use it; `AsyncCluster` is the same inside a running
loop. Brokers keep their ports across restarts, so clients reconnect to the same addresses.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from .coordination.embedded import EmbeddedZooKeeper
from .server.broker import Broker
from .server.config import KafkaConfig

T = TypeVar("T")


class AsyncCluster:
    def __init__(self, brokers: int = 3, *, data_dir: str | Path | None = None,
                 base_port: int = 0, host: str = "127.0.0.1",
                 overrides: dict[str, Any] | None = None,
                 broker_overrides: dict[int, dict[str, Any]] | None = None) -> None:
        if brokers < 1:
            raise ValueError("a cluster needs at least one broker")
        self.size = brokers
        self._tmp = data_dir is None
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="odradek-cluster-"))
        self.base_port = base_port
        self.host = host
        self.overrides = {str(k): str(v) for k, v in (overrides or {}).items()}
        self.broker_overrides = broker_overrides or {}
        self.zookeeper = EmbeddedZooKeeper(persist_dir=self.data_dir / "zookeeper")
        self.brokers: dict[int, Broker] = {}
        self.ports: dict[int, int] = {}

    def config_for(self, broker_id: int) -> KafkaConfig:
        port = self.ports.get(broker_id, self.base_port + broker_id if self.base_port else 0)
        props = {
            "broker.id": str(broker_id),
            "listeners": f"PLAINTEXT://{self.host}:{port}",
            "log.dirs": str(self.data_dir / f"broker-{broker_id}"),
            "default.replication.factor": str(min(3, self.size)),
            "offsets.topic.replication.factor": str(min(3, self.size)),
            "controlled.shutdown.retry.backoff.ms": "200",
        }
        props.update(self.overrides)
        props.update({str(k): str(v) for k, v in self.broker_overrides.get(broker_id, {}).items()})
        return KafkaConfig.from_properties(props)

    async def start(self) -> None:
        await asyncio.gather(*(self.start_broker(i) for i in range(self.size)))

    async def start_broker(self, broker_id: int) -> Broker:
        if broker_id in self.brokers and self.brokers[broker_id].started:
            raise RuntimeError(f"broker {broker_id} is running")
        broker = Broker(self.config_for(broker_id), embedded_zk=self.zookeeper)
        await broker.start()
        self.brokers[broker_id] = broker
        self.ports[broker_id] = broker.bound_ports[0]
        return broker

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
