"""The wall-clock seam (`common.clock`, Kafka's `Time`): the simulation's virtual clock while it
runs, the system clocks before and after."""

from __future__ import annotations

import asyncio
import time

import pytest

from odradek.common import clock
from odradek.coordination.embedded import EmbeddedZooKeeper
from odradek.protocol.records import build_batch, read_header
from odradek.runtime.timer import monotonic_ms
from odradek.sim.simulation import EPOCH_MS, Simulation

pytestmark = pytest.mark.sim


def test_the_system_clocks_without_a_source() -> None:
    before = time.time_ns() // 1_000_000
    assert before <= clock.now_ms() <= time.time_ns() // 1_000_000
    assert abs(clock.wall_seconds() - time.time()) < 1.0
    t = time.monotonic()
    assert t <= clock.monotonic() <= time.monotonic()


def test_use_installs_and_restores_the_sources() -> None:
    with clock.use(lambda: 42, lambda: 7.5):
        assert clock.now_ms() == 42
        assert clock.wall_seconds() == 0.042
        assert clock.monotonic() == 7.5
        with clock.use(lambda: 1):
            assert clock.now_ms() == 1
            assert clock.monotonic() > 1000  # nested without a monotonic source: the system's
        assert clock.now_ms() == 42
    assert clock.now_ms() > EPOCH_MS  # today is after the simulation's epoch


def test_the_simulation_runs_on_its_virtual_clock() -> None:
    async def main(sim: Simulation) -> list[int | float]:
        zk = EmbeddedZooKeeper()
        store = zk.client()
        await store.start()
        seen: list[int | float] = [clock.now_ms(), monotonic_ms()]
        await asyncio.sleep(90.0)
        await store.create("/a", b"x")
        stat = await store.exists("/a")
        assert stat is not None
        batch = build_batch([(b"k", b"v")])
        seen += [clock.now_ms(), monotonic_ms(), stat.ctime,
                 read_header(batch).max_timestamp]
        await store.close()
        zk.close()
        return seen

    assert Simulation(1).run(main) == [EPOCH_MS, 0.0, EPOCH_MS + 90_000, 90_000.0,
                                       EPOCH_MS + 90_000, EPOCH_MS + 90_000]
    assert clock.now_ms() > EPOCH_MS  # restored
