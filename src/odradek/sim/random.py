"""The simulation's one source of randomness, derived from one seed (FoundationDB's
`deterministicRandom()`, TigerBeetle's seeded PRNG): every choice the simulated world makes —
link latencies, losses, fault schedules, the workload — is drawn from here, so a run is a
function of its seed.

`SimRandom.fork(name)` gives a component its own stream, seeded from the parent's seed and the
name through SHA-256 (never Python's `hash()`, which is salted per process): a component's
draws then do not shift when another component draws more or less, so adding a workload step
does not change every link's latency. Forks are cached: one stream per name.

odradek's own random choices (topic ids, member ids, replica placement, fetch session ids, the
client's sticky partitioner) go through `common.entropy`; `Simulation.run` installs the fork
`"odradek"` there for the run.
"""

from __future__ import annotations

import hashlib
import random

__all__ = ["SimRandom"]


class SimRandom(random.Random):
    """A `random.Random` seeded with an int, with named independent child streams."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.root_seed = seed
        self._forks: dict[str, SimRandom] = {}

    def fork(self, name: str) -> SimRandom:
        """The stream called `name`, the same on every run of this seed."""
        child = self._forks.get(name)
        if child is None:
            digest = hashlib.sha256(f"{self.root_seed}/{name}".encode()).digest()
            child = SimRandom(int.from_bytes(digest[:16], "big"))
            self._forks[name] = child
        return child

    def chance(self, probability: float) -> bool:
        """True with `probability` (FoundationDB's `BUGGIFY`-style coin)."""
        return probability > 0 and self.random() < probability
