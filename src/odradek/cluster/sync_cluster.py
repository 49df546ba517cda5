"""`Cluster`: the synchronous face of `AsyncCluster`, its loop in a daemon thread, and
`BlockingFaults`, the fault API for synchronous code."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..common.loop_thread import LoopThread
from .async_cluster import AsyncCluster
from .faults import ClusterFaults

if TYPE_CHECKING:
    from ..common.fault_log import FaultEvent
    from ..coordination.embedded import EmbeddedZooKeeper
    from ..faults.network import Node
    from ..server.broker import Broker
    from .faults import ActiveFault
    from .security import ClusterSecurity

T = TypeVar("T")


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


class Cluster:
    """The synchronous face of AsyncCluster: its loop runs in a daemon thread (a `LoopThread`,
    started by `start`)."""

    def __init__(self, brokers: int = 3, **kwargs: Any) -> None:
        self._kwargs = kwargs
        self._size = brokers
        self._runner: LoopThread | None = None
        self.inner: AsyncCluster | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop every broker of the cluster runs on."""
        assert self._runner is not None, "cluster not started"
        return self._runner.loop

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = 120.0) -> T:
        """Run a coroutine on the cluster's loop and return its result (TimeoutError after
        ``timeout`` seconds, the coroutine left running)."""
        if self._runner is None:
            coro.close()
            raise RuntimeError("cluster not started")
        return self._runner.submit(coro).result(timeout)

    def start(self) -> Cluster:
        if self._runner is not None:
            raise RuntimeError("a Cluster starts once")
        self._runner = LoopThread("odradek-cluster")

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
        if self._runner is not None:
            self._runner.stop()

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
