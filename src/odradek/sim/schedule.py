"""A seeded schedule of faults for a simulated cluster (FoundationDB's "attrition" and
"swizzle", Jepsen's nemesis), and the injector that applies it.

`plan_faults` draws, from the seed's `"faults"` fork, one fault at a time: a pause, then a
fault held for a while and healed, until the run's duration. The kinds:

- `kill`: a broker crashes (`cluster.faults.kill`) and is restarted after the hold (`restart`);
- `store-cut`: a broker loses the coordination store (`isolate_from_store`; a short cut keeps
  the session), healed after the hold;
- `session-expiry`: the store expires a broker's session now (`expire_session`);
- `partition`: nothing passes between a broker and another broker or the clients
  (`partition`); `one-way`: one direction only (`partition(one_way=True)`);
- `isolate`: a broker cut from everyone, brokers, store and clients (`isolate`);
- `stall`: a frozen switch queue between the two sides, a cut that never times out
  (`SimNetwork.stall`);
- `reset`: every connection between the two sides reset now (`SimNetwork.reset`);
- `loss`: segments lost and retransmitted after the RTO (`slow(loss=...)`);
- `slow`: extra latency (`slow(latency_ms=...)`);
- `machine-crash`: a broker's machine loses power: the broker is killed, its log dirs put back
  to what it fsynced (`SimDisk.machine_crash`, torn unsynced tails), restarted after the hold;
- `disk-full` / `disk-error`: one log dir of a broker fails with ENOSPC / EIO
  (`SimDisk.fail`): the broker takes the dir offline (KIP-112), halting when it was its only
  one; after the hold the disk is repaired and the broker restarted, the dir back online.

Link faults act on the simulated network through the cluster's fault API (sim/link_faults.py);
disk faults on the simulated disk (sim/disk.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..cluster.async_cluster import AsyncCluster
from ..faults.network import CLIENTS, Node
from .cluster import broker_host
from .random import SimRandom
from .simulation import Simulation

__all__ = ["FAULT_KINDS", "FaultInjector", "PlannedFault", "plan_faults"]

FAULT_KINDS: tuple[str, ...] = ("kill", "store-cut", "session-expiry", "partition", "one-way",
                                "isolate", "stall", "reset", "loss", "slow", "machine-crash",
                                "disk-full", "disk-error")
_DISK_ERRNO = {"disk-full": "ENOSPC", "disk-error": "EIO"}
_INSTANT = ("session-expiry", "reset")
_BETWEEN = ("partition", "one-way", "stall", "reset", "loss", "slow")  # two sides


@dataclass(frozen=True)
class PlannedFault:
    """One fault: injected `at` seconds after the workload began, healed `hold` seconds later
    (0 for an instant one). `nodes` are a broker id and, for a link, the other side: another
    broker or ``"clients"``. `amount` is the loss probability or the latency in ms."""

    at: float
    kind: str
    nodes: tuple[Node, ...]
    hold: float = 0.0
    amount: float = 0.0

    def describe(self) -> str:
        sides = " - ".join(f"broker {n}" if isinstance(n, int) else str(n) for n in self.nodes)
        extra = (f" p={self.amount:g}" if self.kind == "loss"
                 else f" +{self.amount:g} ms" if self.kind == "slow" else "")
        return f"{self.kind} {sides}{extra}"

    def to_json(self) -> dict[str, object]:
        """The fault as a JSON object (a schedule file's `faults`, docs/simulation.md)."""
        return {"at": self.at, "kind": self.kind, "nodes": list(self.nodes),
                "hold": self.hold, "amount": self.amount}

    @classmethod
    def from_json(cls, data: dict[str, object]) -> PlannedFault:
        """The fault `to_json` wrote; an unknown kind is refused."""
        kind = str(data["kind"])
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; known: {FAULT_KINDS}")
        nodes = data.get("nodes", ())
        assert isinstance(nodes, list | tuple)
        return cls(float(data["at"]), kind,  # type: ignore[arg-type]
                   tuple(n if isinstance(n, str) else int(n) for n in nodes),
                   float(data.get("hold", 0.0)), float(data.get("amount", 0.0)))  # type: ignore[arg-type]


def plan_faults(rng: SimRandom, brokers: int, duration: float,
                kinds: Sequence[str] = FAULT_KINDS, scale: float = 1.0) -> list[PlannedFault]:
    """Faults one after the other until `duration`: a gap of 0.3 to 2 s, then a fault held
    0.5 to 3 s; the kinds come in seeded rounds, each kind once per round, so a run of n
    kinds' length covers them all; `scale` multiplies the gaps and holds (0.5: twice as many
    faults in a run, each half as long). The other side of a link fault is another broker or, with
    one broker, or by draw, the clients."""
    unknown = set(kinds) - set(FAULT_KINDS)
    if unknown:
        raise ValueError(f"unknown fault kinds {sorted(unknown)}; known: {FAULT_KINDS}")
    if scale <= 0:
        raise ValueError("scale must be positive")
    out: list[PlannedFault] = []
    t = 0.0
    bag: list[str] = []
    while kinds:
        t += scale * rng.uniform(0.3, 2.0)
        if not bag:  # every kind once, in a seeded order, before any comes again
            bag = rng.sample(list(kinds), len(kinds))
        kind = bag.pop()
        hold = 0.0 if kind in _INSTANT else scale * rng.uniform(0.5, 3.0)
        if t + hold >= duration:
            break
        broker = rng.randrange(brokers)
        nodes: tuple[Node, ...] = (broker,)
        if kind in _BETWEEN:
            others = [b for b in range(brokers) if b != broker]
            other: Node = rng.choice(others) if others and rng.random() < 0.6 else CLIENTS
            nodes = (broker, other)
        amount = (rng.choice([0.05, 0.2, 0.5]) if kind == "loss"
                  else rng.choice([20.0, 200.0, 1000.0]) if kind == "slow" else 0.0)
        out.append(PlannedFault(round(t, 6), kind, nodes, round(hold, 6), amount))
        t += hold
    return out


class FaultInjector:
    """Applies a plan to a running cluster in a simulation; `on_fault(time, phase, fault)` is
    told of each injection ("start") and heal ("end"). Cancelled, it heals what it holds;
    `stop` ends a plan without cutting a heal short."""

    def __init__(self, sim: Simulation, cluster: AsyncCluster, client_hosts: Sequence[str],
                 on_fault: Callable[[float, str, PlannedFault], None]) -> None:
        self.sim = sim
        self.cluster = cluster
        self.client_hosts = tuple(client_hosts)
        self.on_fault = on_fault
        self.injected = 0
        self._dirs = sim.random.fork("disk-faults")  # which log dir of a broker fails
        self._healing: asyncio.Event | None = None  # set once the heal under way is done

    def _hosts(self, node: Node) -> list[str]:
        return [broker_host(node)] if isinstance(node, int) else list(self.client_hosts)

    def _log_dirs(self, broker: int) -> list[Path]:
        return list(self.cluster.brokers[broker].config.log_dirs)

    async def _halted(self, broker: int) -> None:
        """Wait for a halt in progress (every log dir failed: the broker kills itself)."""
        halt = getattr(self.cluster.brokers[broker], "_halt_task", None)
        if halt is not None and not halt.done():
            with contextlib.suppress(Exception):
                await asyncio.shield(halt)

    async def run(self, plan: Sequence[PlannedFault]) -> None:
        began = self.sim.now
        for fault in plan:
            await asyncio.sleep(max(0.0, began + fault.at - self.sim.now))
            await self.inject(fault)

    async def stop(self, task: asyncio.Future[None]) -> None:
        """End `task` (this injector's `run`): cancelled while it holds a fault or waits for
        the next, it heals what it holds; a heal under way (a broker restarting after a
        failed disk) is first let finish. Cut short, that restart would leave the broker
        running, half through its controlled shutdown, with the repaired log dir still
        offline (KIP-112: only a restart brings a log dir back), and the cluster would never
        again have a full ISR. No heal under way: the cancel comes at once, as it always
        did (the same digests)."""
        while self._healing is not None:
            await self._healing.wait()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def inject(self, fault: PlannedFault) -> None:
        """Inject `fault`, hold it, heal it (healed too if cancelled while held)."""
        faults, net = self.cluster.faults, self.sim.network
        kind, nodes = fault.kind, fault.nodes
        broker = nodes[0]
        assert isinstance(broker, int)
        self.injected += 1
        self.on_fault(self.sim.now, "start", fault)
        handle: int | None = None
        pairs = [(a, b) for a in self._hosts(broker) for b in
                 (self._hosts(nodes[1]) if len(nodes) > 1 else [])]
        failed: Path | None = None
        if kind == "kill":
            await faults.kill(broker)
        elif kind == "machine-crash":
            if self.cluster.brokers[broker].started:
                await faults.kill(broker)
            for d in self._log_dirs(broker):
                self.sim.disk.machine_crash(d)
        elif kind in _DISK_ERRNO:
            failed = self._dirs.choice(self._log_dirs(broker))
            self.sim.disk.fail(failed, _DISK_ERRNO[kind])
        elif kind == "store-cut":
            handle = await faults.isolate_from_store(broker)
        elif kind == "session-expiry":
            if self.cluster.brokers[broker].started:
                await faults.expire_session(broker)
        elif kind in ("partition", "one-way"):
            handle = await faults.partition([broker], [nodes[1]], one_way=kind == "one-way")
        elif kind == "isolate":
            handle = await faults.isolate(broker)
        elif kind == "stall":
            for a, b in pairs:
                net.stall(a, b)
        elif kind == "reset":
            for a, b in pairs:
                net.reset(a, b)
        elif kind == "loss":
            handle = await faults.slow([broker], [nodes[1]], loss=fault.amount)
        elif kind == "slow":
            handle = await faults.slow([broker], [nodes[1]], latency_ms=fault.amount)
        if fault.hold <= 0:
            return
        try:
            await asyncio.sleep(fault.hold)
        finally:
            healing = self._healing = asyncio.Event()
            try:
                with contextlib.suppress(asyncio.CancelledError):
                    if kind in ("kill", "machine-crash"):
                        await faults.restart(broker)
                    elif failed is not None:  # an operator replaces the disk, restarts the broker
                        self.sim.disk.repair(failed)
                        await self._halted(broker)
                        await faults.restart(broker)
                    elif kind == "stall":
                        for a, b in pairs:
                            net.heal(a, b)
                    elif handle is not None:
                        await faults.heal(handle)
                    self.on_fault(self.sim.now, "end", fault)
            finally:
                self._healing = None
                healing.set()
