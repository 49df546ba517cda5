"""Broker processes on a real ZooKeeper, inspected with kazoo: the chaos layer's cluster."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kazoo.client import KazooClient

from tests.processes import BrokerProcess


def free_ports(n: int) -> list[int]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def wait_until(pred: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = pred()
        except Exception as exc:  # a znode in flux: look again
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


class ZkCluster:
    """N `odradek broker` processes sharing one ZooKeeper chroot, with fixed ports."""

    def __init__(self, workdir: Path, connect: str, brokers: int = 3,
                 overrides: dict[str, str] | None = None, session_timeout_ms: int = 4000) -> None:
        self.connect = connect
        self.ports = free_ports(brokers)
        base = {"zookeeper.connect": connect,
                "zookeeper.session.timeout.ms": str(session_timeout_ms),
                "default.replication.factor": str(min(3, brokers)),
                "controlled.shutdown.retry.backoff.ms": "200",
                "replica.lag.time.max.ms": "10000"}
        base.update(overrides or {})
        self.brokers = {i: BrokerProcess(workdir / f"broker-{i}", broker_id=i,
                                         port=self.ports[i], overrides=base)
                        for i in range(brokers)}
        self.zk = KazooClient(hosts=connect)

    def start(self) -> ZkCluster:
        for b in self.brokers.values():
            b.start()  # the first broker creates the chroot
        self.zk.start(timeout=15)
        wait_until(lambda: len(self.zk.get_children("/brokers/ids")) == len(self.brokers),
                   what="all brokers registered")
        return self

    def close(self) -> None:
        for b in self.brokers.values():
            b.kill()
        self.zk.stop()
        self.zk.close()

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def json(self, path: str) -> Any:
        data, _ = self.zk.get(path)
        return json.loads(data)

    def controller(self) -> int:
        return int(self.json("/controller")["brokerid"])

    def controller_epoch(self) -> int:
        return int(self.zk.get("/controller_epoch")[0])

    def state(self, topic: str, p: int) -> dict[str, Any]:
        return self.json(f"/brokers/topics/{topic}/partitions/{p}/state")

    def states(self, topic: str) -> dict[int, dict[str, Any]]:
        parts = self.json(f"/brokers/topics/{topic}")["partitions"]
        return {int(p): self.state(topic, int(p)) for p in parts}
