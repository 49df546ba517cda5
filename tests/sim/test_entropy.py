"""The randomness seam (`common.entropy`): the operating system's randomness in production, the
simulation's seeded stream during a run."""

from __future__ import annotations

import random
import uuid

import pytest

from odradek.client.partitioner import StickyPartitioner
from odradek.common import entropy
from odradek.common.replica_assignment import assign_replicas_to_brokers
from odradek.sim.simulation import Simulation

pytestmark = pytest.mark.sim


def test_without_a_stream_the_system_randomness() -> None:
    a, b = entropy.uuid4(), entropy.uuid4()
    assert a != b and a.version == 4
    assert entropy.new_random() is not entropy.new_random()
    assert entropy.shared() is entropy.shared()


def test_use_draws_from_the_stream_and_restores() -> None:
    def draws() -> tuple[uuid.UUID, int, int]:
        with entropy.use(random.Random(5)):
            return entropy.uuid4(), entropy.new_random().getrandbits(32), \
                entropy.shared().randrange(1000)

    first = draws()
    assert first == draws()
    assert first[0].version == 4
    assert entropy.shared() is not None and entropy.uuid4() != first[0]


def test_the_simulation_seeds_odradeks_choices() -> None:
    async def main(sim: Simulation) -> tuple[object, ...]:
        assignment = assign_replicas_to_brokers([0, 1, 2, 3, 4], 6, 2, algorithm="kafka")
        return (entropy.uuid4(), StickyPartitioner(16384).rng.random(), assignment)

    first = Simulation(3).run(main)
    assert first == Simulation(3).run(main)
    assert first != Simulation(4).run(main)
