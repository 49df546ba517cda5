"""One simulated world: a seed, the loop, the network and the digest (FoundationDB's simulated
cluster in one process; TigerBeetle's VOPR seed). `Simulation(seed).run(main)` runs the
coroutine function `main(sim)` on virtual time and returns its result; the same seed gives the
same run, event for event, so `sim.digest.hexdigest()` is the same in every process.

    sim = Simulation(seed=7)
    result = sim.run(workload)
    print(sim.digest.summary())
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ..faults.network import RETRANSMISSION_TIMEOUT_MS
from .digest import Digest
from .loop import SimLoop
from .network import SimNetwork
from .random import SimRandom

__all__ = ["Simulation"]

_T = TypeVar("_T")


class Simulation:
    """A seeded world. `random` is the root stream; the network draws from its fork
    `"network"`, a workload should take `fork("workload")` (forks are independent)."""

    def __init__(self, seed: int, *, start: float = 0.0, digest_tail: int = 64,
                 min_latency: float = 0.0002, max_latency: float = 0.002,
                 jitter: float = 0.0005,
                 rto: float = RETRANSMISSION_TIMEOUT_MS / 1000) -> None:
        self.seed = seed
        self.random = SimRandom(seed)
        self.loop = SimLoop(start)
        self.digest = Digest(tail=digest_tail)
        self.network = SimNetwork(self.loop, self.random.fork("network"), self.digest,
                                  min_latency=min_latency, max_latency=max_latency,
                                  jitter=jitter, rto=rto)
        self.start = start
        self.wall_seconds = 0.0

    @property
    def now(self) -> float:
        """Virtual seconds since the start of the run."""
        return self.loop.time() - self.start

    def run(self, main: Callable[[Simulation], Awaitable[_T]]) -> _T:
        """Run `main(self)` to completion on the simulation loop (asyncio.Runner's order:
        the remaining tasks are cancelled, async generators closed) and close the loop."""
        began = time.perf_counter()
        try:
            with asyncio.Runner(loop_factory=lambda: self.loop) as runner:
                return runner.run(self._main(main))
        finally:
            self.wall_seconds += time.perf_counter() - began

    async def _main(self, main: Callable[[Simulation], Awaitable[_T]]) -> _T:
        return await main(self)
