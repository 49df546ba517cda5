"""The fault injector's end (sim/schedule.py, `FaultInjector.stop`): a fault held is healed at
once, a heal under way is let finish, on a stand-in cluster whose restarts take virtual time
(no brokers: a few virtual seconds, milliseconds of CPU)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

from odradek.sim.schedule import FaultInjector, PlannedFault
from odradek.sim.simulation import Simulation

RESTART_S = 0.5  # a broker's restart: its controlled shutdown, its start


@dataclass
class _Broker:
    started: bool = True
    log_dirs: tuple[Path, ...] = ()

    @property
    def config(self) -> _Broker:
        return self


@dataclass
class _Faults:
    sim: Simulation
    brokers: dict[int, _Broker]
    events: list[tuple[str, int]] = field(default_factory=list)

    async def kill(self, broker: int) -> None:
        self.brokers[broker].started = False
        self.events.append(("kill", broker))

    async def restart(self, broker: int, clean: bool = True) -> None:
        self.events.append(("restart", broker))
        self.brokers[broker].started = False
        await asyncio.sleep(RESTART_S)
        self.brokers[broker].started = True
        self.events.append(("started", broker))


@dataclass
class _Cluster:
    faults: _Faults
    brokers: dict[int, _Broker]


def _run(stop_at: float, hold: float = 1.0) -> tuple[_Faults, list[tuple[float, str]]]:
    """A kill of broker 0 at 0.1 s held `hold` s; the injector stopped at `stop_at`."""
    sim = Simulation(1)
    brokers = {0: _Broker()}
    faults = _Faults(sim, brokers)
    phases: list[tuple[float, str]] = []

    async def main(sim: Simulation) -> None:
        injector = FaultInjector(sim, _Cluster(faults, brokers), [],  # type: ignore[arg-type]
                                 lambda now, phase, fault: phases.append((now, phase)))
        began = sim.now
        task = asyncio.ensure_future(injector.run([PlannedFault(0.1, "kill", (0,), hold)]))
        await asyncio.sleep(stop_at)
        await injector.stop(task)
        assert task.done()
        phases.append((sim.now - began, "stopped"))
    sim.run(main)
    return faults, phases


def test_a_fault_held_at_the_stop_is_healed_then() -> None:
    faults, phases = _run(stop_at=0.5)
    assert faults.events == [("kill", 0), ("restart", 0), ("started", 0)]
    assert [p for _, p in phases] == ["start", "end", "stopped"]
    assert faults.brokers[0].started


def test_a_heal_under_way_at_the_stop_finishes() -> None:
    # the hold ends at 1.1 s, the restart runs to 1.6 s: stopped at 1.2 s, in the middle
    faults, phases = _run(stop_at=1.2)
    assert faults.events == [("kill", 0), ("restart", 0), ("started", 0)]
    assert [p for _, p in phases] == ["start", "end", "stopped"]
    assert phases[-1][0] >= 0.1 + 1.0 + RESTART_S
    assert faults.brokers[0].started


def test_no_fault_at_the_stop_stops_at_once() -> None:
    faults, phases = _run(stop_at=3.0)
    assert faults.events == [("kill", 0), ("restart", 0), ("started", 0)]
    assert [p for _, p in phases] == ["start", "end", "stopped"]
    assert abs(phases[-1][0] - 3.0) < 1e-6
