"""A ZooKeeper ensemble (Debian's ZooKeeper, three servers by default), each server in a network
namespace of its own (odradek.chaos.environment.netns), for the network chaos run.

Server ``n`` (1-based, ZooKeeper's myid) is the node ``zk-<n>`` at its namespace's address,
client port 2181, quorum port 2888, election port 3888, tickTime 500 ms. `kill(n)` is kill -9,
`start(n)` brings it back on its data; `leader()` asks each server's ``srvr`` which one leads;
`serving()` lists the servers that answer a ``Mode:`` line (they have a quorum).
"""

from __future__ import annotations

import time
from pathlib import Path

from ...coordination.zk_server import ZooKeeperServer
from .netns import Network

CLIENT_PORT = 2181


def zk_node(n: int) -> str:
    return f"zk-{n}"


class ZkEnsemble:
    def __init__(self, network: Network, workdir: Path, size: int = 3,
                 tick_time: int = 500) -> None:
        self.network = network
        self.size = size
        addresses = {n: network.add(zk_node(n)) for n in range(1, size + 1)}
        self.servers = {
            n: ZooKeeperServer(CLIENT_PORT, Path(workdir) / zk_node(n), host=addr,
                               tick_time=tick_time, server_id=n, peers=addresses,
                               command_prefix=network.exec_prefix(zk_node(n)),
                               startup_timeout=60.0)
            for n, addr in addresses.items()}

    @property
    def connect_string(self) -> str:
        return ",".join(s.connect_string for s in self.servers.values())

    def start(self, timeout: float = 60.0) -> ZkEnsemble:
        for s in self.servers.values():
            s.start(wait=False)
        for s in self.servers.values():
            s.wait_ready(timeout)
        return self

    def kill(self, n: int) -> None:
        self.servers[n].kill()

    def start_server(self, n: int, wait: bool = False) -> None:
        self.servers[n].start(wait=wait)

    def running(self) -> list[int]:
        return [n for n, s in self.servers.items() if s.running]

    def modes(self) -> dict[int, str | None]:
        return {n: s.mode() for n, s in self.servers.items()}

    def leader(self) -> int | None:
        return next((n for n, m in self.modes().items() if m == "leader"), None)

    def serving(self) -> list[int]:
        return [n for n, m in self.modes().items() if m in ("leader", "follower")]

    def wait_quorum(self, timeout: float = 60.0, servers: int | None = None) -> float:
        """Wait until a leader serves with `servers` members (default: all) serving; returns
        the seconds it took. TimeoutError quoting the modes otherwise."""
        want = self.size if servers is None else servers
        t0 = time.monotonic()
        while True:
            modes = self.modes()
            serving = [n for n, m in modes.items() if m in ("leader", "follower")]
            if "leader" in modes.values() and len(serving) >= want:
                return time.monotonic() - t0
            if time.monotonic() - t0 > timeout:
                raise TimeoutError(f"ZooKeeper ensemble without quorum after {timeout:.0f}s: "
                                   f"modes {modes}")
            time.sleep(0.1)

    def close(self) -> None:
        for s in self.servers.values():
            s.kill()
