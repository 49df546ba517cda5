"""The controller's channel to a broker (odradek.controller.channel, Kafka's
ControllerChannelManager): removing a broker drops its requests, the one in flight included,
so that nobody waits for an answer its cancelled sender will never give (topic deletion waited
so for a StopReplica answer: `odradek sim --seed 11 --duration 60 --rate 0.1 --ops all
--op-rate 0.25` ended in SimulationDeadlock)."""

from __future__ import annotations

import asyncio
from typing import Any

from odradek.controller.channel import ControllerChannelManager
from odradek.controller.context import BrokerEndpoint


def test_removing_a_broker_drops_its_request_in_flight_and_its_queue() -> None:
    async def main() -> None:
        connecting = asyncio.Event()

        async def connector(*_: Any, **__: Any) -> Any:
            connecting.set()
            await asyncio.Event().wait()  # the broker never answers the connection

        channel = ControllerChannelManager(0, connector=connector)  # type: ignore[arg-type]
        channel.add_broker(1, BrokerEndpoint("broker-1", 9092))
        in_flight = channel.send(1, 4, 5, object())
        queued = channel.send(1, 6, 7, object())
        await asyncio.wait_for(connecting.wait(), 1.0)
        channel.remove_broker(1)
        await asyncio.wait([in_flight, queued], timeout=1.0)
        assert in_flight.cancelled() and queued.cancelled()

    asyncio.run(main())
