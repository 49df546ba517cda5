"""The users' API of the simulation (docs/simulation.md, "Testing an application
simulated"): `AsyncCluster(simulation=...)` inside a test marked `simulation`, a client made
the ordinary way (no simulated connector given) reaching the simulated brokers from the host
`client`, and the cluster's link faults acting on the simulated links."""

from __future__ import annotations

import asyncio

import pytest

from odradek.client import AsyncProducer
from odradek.client.errors import KafkaError
from odradek.cluster import AsyncCluster
from odradek.sim import Simulation
from odradek.sim.simulation import CLIENT_HOST

pytestmark = pytest.mark.sim


@pytest.mark.simulation(seed=3)
async def test_an_ordinary_client_and_the_fault_api_in_a_simulated_test(
        simulation: Simulation) -> None:
    assert asyncio.get_running_loop() is simulation.loop
    async with AsyncCluster(1, simulation=simulation) as cluster:
        assert cluster.http_urls == [] and cluster.bootstrap_servers.startswith("broker-0:")
        producer = AsyncProducer({"bootstrap.servers": cluster.bootstrap_servers,
                                  "acks": "all", "request.timeout.ms": 1000,
                                  "delivery.timeout.ms": 3000})
        await producer.start()
        try:
            assert (await producer.send_and_wait("t", b"before")).offset == 0
            assert (CLIENT_HOST, "broker-0") in simulation.network.links
            handle = await cluster.faults.partition(["clients"], [0])
            began = simulation.now
            with pytest.raises(KafkaError) as info:  # held on the cut link
                await producer.send_and_wait("t", b"during")
            # not before delivery.timeout.ms (at 12.1 s here: the sender waits out a
            # reconnect's socket.connection.setup.timeout.ms across the cut first)
            assert 3.0 <= simulation.now - began < 30.0, info.value
            await cluster.faults.heal(handle)
            assert (await producer.send_and_wait("t", b"after")).offset >= 1
        finally:
            await producer.close()
        events = [(e.kind, e.phase) for e in cluster.faults.events()]
        assert events == [("partition", "start"), ("partition", "end")]
