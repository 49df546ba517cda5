"""One simulated world: a seed, the loop, the network and the digest (FoundationDB's simulated
cluster in one process; TigerBeetle's VOPR seed). `Simulation(seed).run(main)` runs the
coroutine function `main(sim)` on virtual time and returns its result; the same seed gives the
same run, event for event, so `sim.digest.hexdigest()` is the same in every process.

    sim = Simulation(seed=7)
    result = sim.run(workload)
    print(sim.digest.summary())

Code that is not a broker opens its connections from the host `CLIENT_HOST` ("client"):
`asyncio.open_connection`, so odradek.client's producers, consumers and admin clients, reach
the simulated brokers unchanged. `AsyncCluster(brokers, simulation=sim)` runs its brokers in
the simulation (`broker_environment`).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from ..common import clock, entropy, file_system
from ..faults.network import RETRANSMISSION_TIMEOUT_MS
from .brokers import SimBrokers
from .digest import Digest
from .disk import SimDisk
from .loop import SimLoop
from .network import SimNetwork
from .random import SimRandom

__all__ = ["CLIENT_HOST", "EPOCH_MS", "Simulation"]

#: The simulated host of code that is not a broker (a user's clients): where
#: `asyncio.open_connection` connects from during a run.
CLIENT_HOST = "client"

#: The wall clock's reading at virtual time 0 (2023-11-14T22:13:20Z): record timestamps, znode
#: times and expiry deadlines are this plus the loop's time, the same in every run.
EPOCH_MS = 1_700_000_000_000

_T = TypeVar("_T")


class Simulation:
    """A seeded world. `random` is the root stream; the network draws from its fork
    `"network"`, the disk (torn writes) from `"disk"`, a workload should take
    `fork("workload")` (forks are independent)."""

    def __init__(self, seed: int, *, start: float = 0.0, digest_tail: int = 64,
                 min_latency: float = 0.0002, max_latency: float = 0.002,
                 jitter: float = 0.0005,
                 rto: float = RETRANSMISSION_TIMEOUT_MS / 1000,
                 epoch_ms: int = EPOCH_MS) -> None:
        self.seed = seed
        self.epoch_ms = epoch_ms
        self.random = SimRandom(seed)
        self.loop = SimLoop(start)
        self.digest = Digest(tail=digest_tail)
        self.network = SimNetwork(self.loop, self.random.fork("network"), self.digest,
                                  min_latency=min_latency, max_latency=max_latency,
                                  jitter=jitter, rto=rto)
        self.disk = SimDisk(self.random.fork("disk"), self.digest, self.loop.time)
        self.loop.connect_from = self._connect_from_client_host
        self.start = start
        self.wall_seconds = 0.0

    async def _connect_from_client_host(
            self, host: str, port: int, protocol_factory: Callable[[], asyncio.BaseProtocol]
            ) -> tuple[asyncio.Transport, asyncio.BaseProtocol]:
        return await self.network.connect(CLIENT_HOST, host, port, protocol_factory)

    def broker_environment(self, data_dir: str | Path) -> SimBrokers:
        """The `BrokerEnvironment` of an `AsyncCluster` in this simulation whose files are
        under `data_dir` (what `AsyncCluster(simulation=sim)` takes): each broker a host of
        the simulated network, its link faults mapped onto the network's; the disk's digest
        events name files relative to `data_dir` (a temporary directory's name differs
        between runs)."""
        self.disk.root = os.path.abspath(data_dir)
        return SimBrokers(self.network)

    @property
    def now(self) -> float:
        """Virtual seconds since the start of the run."""
        return self.loop.time() - self.start

    def now_ms(self) -> int:
        """The simulated wall clock: `epoch_ms` plus the loop's time, in milliseconds (what
        `common.clock.now_ms()` returns during `run`)."""
        return self.epoch_ms + int(self.loop.time() * 1000)

    def run(self, main: Callable[[Simulation], Awaitable[_T]]) -> _T:
        """Run `main(self)` to completion on the simulation loop (asyncio.Runner's order:
        the remaining tasks are cancelled, async generators closed) and close the loop. During
        the run `common.clock` reads the virtual clock (`now_ms`, and the loop's time as the
        monotonic clock), `common.entropy` draws from the fork `"odradek"` (topic ids,
        member ids, replica placement...) and `common.file_system` is the simulated disk
        (`disk`); the system's are back afterwards."""
        began = time.perf_counter()
        try:
            with clock.use(self.now_ms, self.loop.time), \
                    entropy.use(self.random.fork("odradek")), \
                    file_system.use(self.disk), \
                    asyncio.Runner(loop_factory=lambda: self.loop) as runner:
                return runner.run(self._main(main))
        finally:
            self.wall_seconds += time.perf_counter() - began

    async def _main(self, main: Callable[[Simulation], Awaitable[_T]]) -> _T:
        return await main(self)
