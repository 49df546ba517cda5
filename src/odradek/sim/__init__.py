"""Deterministic simulation: odradek's code on virtual time and a simulated network, every
choice drawn from one seed (docs/simulation.md).

    from odradek.sim import Simulation

    async def main(sim: Simulation) -> None:
        async with AsyncCluster(3, simulation=sim) as cluster:
            ...

    Simulation(seed=7).run(main)

`Simulation` is imported on first use: the console's parser imports `odradek.sim.command`,
and a broker's start-up should not pay for the simulator.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .simulation import Simulation

__all__ = ["Simulation"]


def __getattr__(name: str) -> Any:
    if name == "Simulation":
        from .simulation import Simulation

        return Simulation
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
